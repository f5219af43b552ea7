"""The per-stage search's base layouts (issue 13): for a uniform candidate, the shapes the
per-stage tables start from (:func:`base_layouts`), ranked by the uniform search's own tables,
fastest first (:func:`ranked_bases`), and the layout a per-stage solution stands for
(:func:`plan_layout`). :mod:`optimizer.per_stage` solves each."""

from __future__ import annotations

import numpy as np

from trainplan.model.layout import Layout, Recompute
from trainplan.model.pipeline import Schedule
from trainplan.model.split import balanced_chunk_sizes
from trainplan.optimizer.cpsat import LayoutModel
from trainplan.optimizer.launch_tables import objective_grid
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.rules import allowed, tp_cp_in_nvlink
from trainplan.optimizer.tables import CostTables

__all__ = ["plan_layout", "base_layouts", "ranked_bases", "ranking_masks", "fastest_layout"]


def plan_layout(base: Layout, layers: tuple[int, ...], recomputed: tuple[int, ...]) -> Layout:
    """``base`` with each stage's ``layers`` (spread over its model chunks by
    :func:`model.split.balanced_chunk_sizes`, written per chunk) and its per-chunk
    ``recomputed`` counts: the layout a per-stage solution stands for."""
    return base.with_(
        stage_layers=balanced_chunk_sizes(layers, base.virtual_stages),
        recompute_layers=recomputed,
    )


def base_layouts(layout: Layout, schedules: tuple[Schedule, ...] = tuple(Schedule)) -> list[Layout]:
    """The per-stage search's base layouts for a uniform candidate's ``layout``: the same shape
    and ZeRO stage with the default split and no per-stage counts, under 1F1B with v = 1 and,
    when the candidate interleaves, also under its interleaved schedule and v (per-stage counts
    per model chunk); each with recompute none (full recomputation is every stage's count at
    its largest chunk) and, when the uniform candidate is selective, selective too (its other
    layers selective). GPipe candidates are taken as 1F1B. Only schedules in ``schedules`` (the
    search space's) are used: 1F1B only when it is allowed (or pp = 1, where the schedules
    coincide), so a space of interleaved schedules keeps its plans interleaved."""
    plain = layout.with_(stage_layers=None, recompute_layers=None)
    bases = []
    if layout.schedule is Schedule.INTERLEAVED:  # the uniform search's choice first
        bases.append(plain)
    if Schedule.ONE_F_ONE_B in schedules or layout.pp == 1:
        bases.append(plain.with_(schedule=Schedule.ONE_F_ONE_B, virtual_stages=1))
    modes = [Recompute.NONE]
    if layout.recompute is Recompute.SELECTIVE:
        modes.append(Recompute.SELECTIVE)
    return [b.with_(recompute=r) for b in bases for r in modes]


def ranked_bases(
    problem: Problem,
    prepared: tuple[CostTables, LayoutModel, float],
    top: int | None,
    max_bytes: int | None = None,
    interleaved_top: int = 8,
):
    """As (job, base layout) pairs (:func:`base_layouts`), fastest first: the ``top`` shapes whose
    best uniform candidate (fitting, meeting the constraints, and with ``max_bytes`` needing at
    most that many bytes per GPU) is fastest, then the ``top`` shapes whose fastest legal
    candidate is fastest with fit ignored (among those whose model state, summed over the
    stages, leaves each stage within the capacity on average) — what a shape could run at if
    memory did not bind,
    the most a per-stage split can recover: a shape whose uniform layouts fit only fully
    recomputed, or not at all (the default split's full recomputation can overflow where moving
    layers off the first stages does not), ranks here by its speed without recomputation.
    Shapes are counted by dp, tp, pp, cp, micro-batch, ZeRO stage, framework and recompute mode
    once; the first ``interleaved_top`` shapes of a ranking come interleaved at every v their
    candidates take (the split that suits one v need not suit the uniform search's best), the
    rest as 1F1B (the exact interleaved peak costs milliseconds a row) — unless the space allows
    no 1F1B, when every shape comes interleaved at every v. With ``top`` None every legal shape
    whose model state can fit comes, in that order."""
    tables = prepared[0]
    ok, legal = ranking_masks(problem, tables, max_bytes)
    big = np.iinfo(np.int64).max
    objective = objective_grid(problem, tables)  # as optimizer.search.prepare reads it
    out: list[tuple[Job, Layout]] = []
    seen: set[tuple[int, Layout]] = set()
    counted: set[tuple[int, Layout]] = set()
    one_f_one_b = Schedule.ONE_F_ONE_B in problem.space.schedules
    for keep in (ok, legal):
        flat = np.where(keep, objective, big).reshape(len(tables.shapes), -1)
        best = flat.min(axis=1)
        taken = 0
        ranked: list[tuple[int, Layout]] = []  # this ranking's shapes, in order
        for s in np.argsort(best, kind="stable"):
            if best[s] == big or (top is not None and taken >= top):
                break
            j, layout = fastest_layout(tables, int(s), flat[s])
            # one shape whatever its schedule and v: counted once; a ranking's first
            # interleaved_top shapes come interleaved at every v the tables rank (a per-stage
            # split can favour another v than the uniform best), the rest too where 1F1B is
            # not allowed
            shape = (j, layout.with_(schedule=Schedule.ONE_F_ONE_B, virtual_stages=1))
            if shape not in ranked:
                ranked.append(shape)
            if shape not in counted:
                counted.add(shape)
                taken += 1
            near_top = ranked.index(shape) < interleaved_top or not one_f_one_b
            keep_v = layout.schedule is Schedule.INTERLEAVED and near_top
            for base in base_layouts(layout, problem.space.schedules):
                if (keep_v or base.virtual_stages == 1) and (j, base) not in seen:
                    seen.add((j, base))
                    out.append((tables.jobs[j], base))
    return out


def fastest_layout(tables: CostTables, s: int, row: np.ndarray) -> tuple[int, Layout]:
    """(job index, layout) of shape ``s``'s fastest candidate: ``row`` is its objective over
    (ZeRO stage, recompute mode), flattened, the masked candidates at the largest integer."""
    z, r = np.unravel_index(int(row.argmin()), (len(tables.zero_stages), len(tables.recomputes)))
    return int(tables.job_of[s]), tables.shapes[s].layout(
        tables.zero_stages[z], tables.recomputes[r]
    )


def ranking_masks(
    problem: Problem, tables: CostTables, max_bytes: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """The two masks :func:`ranked_bases` ranks shapes under, each ``[S, Z, R]`` (shape,
    ZeRO stage, recompute mode): the candidates the uniform search allows (fitting, meeting the
    constraints, within ``max_bytes`` per GPU when given), and the legal ones whose model state
    could fit under some split, fit otherwise ignored.

    A split moves layers, not their sum: where the stages' mean model state is over the capacity
    (× (1 − headroom) already; ``max_bytes`` when lower), some stage is over it under every split
    and no per-stage plan fits. Not under ZeRO-3, whose gather buffers go with a stage's layers
    (an empty stage holds none): kept. With ``tp_in_nvlink`` the shapes whose tp and cp leave
    the NVLink domain are dropped from both."""
    ok = allowed(problem, tables)
    if max_bytes is not None:
        ok = ok & (tables.peak_ceil <= max_bytes)
    room = tables.capacity
    if max_bytes is not None:
        room = np.minimum(room, max_bytes)
    pp = np.array([shape.pp for shape in tables.shapes], dtype=np.int64)  # P pads with zeros
    state_fits = tables.state_ceil.sum(axis=3) <= (room * pp)[:, None, None]
    state_fits |= np.array([z == 3 for z in tables.zero_stages], dtype=bool)[None, :, None]
    legal = tables.legal & state_fits
    if problem.constraints.tp_in_nvlink:
        near = np.array([tp_cp_in_nvlink(tables, s) for s in range(len(tables.shapes))])
        legal = legal & near[:, None, None]
    return ok, legal
