"""Cost tables: the cost model's own functions evaluated over each term's scope.

For every job j, every legal shape s of it (optimizer.space), every ZeRO stage z and every
recompute mode r:

* ``state[s, z, i]`` — model-state bytes of pipeline stage i in forward/backward: weights,
  gradients, optimizer state, gathered units and buffers (:func:`model.estimate.stage_states`)
* ``step[s, z, i]``  — model-state bytes of stage i while the optimizer steps (no activations)
* ``act[s, r, i]``   — activation bytes of stage i (:func:`model.estimate.stage_activation_list`)
* ``legal[s, z]``    — the ZeRO stage exists in the shape's framework with its axes
  (:func:`model.frameworks.check_framework`)
* ``t1_ns[s, r]``    — compute × (1 + bubble) + exposed tp/cp/ep/pp traffic
* ``t2_ns[s, z]``    — exposed dp traffic (both from :func:`model.estimate.time_terms`, rounded
  to whole nanoseconds by :func:`model.estimate.objective_ns`)

so that the memory of stage i is max(state + act, step) and the step time t1 + t2, exactly as
``evaluate()`` adds them. Bytes are kept rounded up to whole bytes (``*_ceil``) for the memory
objective, and fits are decided exactly (``fits``) from the rational byte counts. Nothing here
computes a cost itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from trainplan.model.errors import InputError, LayoutError
from trainplan.model.estimate import (
    objective_ns,
    stage_activation_list,
    stage_states,
    time_terms,
    traffic_rows,
)
from trainplan.model.frameworks import check_framework
from trainplan.model.layout import Recompute
from trainplan.optimizer.inputs import links_for
from trainplan.optimizer.problem import Job, Problem, objective_factor
from trainplan.optimizer.space import SearchSpace, Shape, legal_shapes

__all__ = ["CostTables", "build_tables", "MAX_ROWS"]

MAX_ROWS = 400_000
"""Refuse tables larger than this many (shape × modifier) rows; narrow the space instead."""


@dataclass(frozen=True, slots=True, eq=False)
class CostTables:
    """Every term of every candidate. Arrays are numpy; S shapes, Z ZeRO stages, R recompute
    modes, P the most pipeline stages of any shape (missing stages hold 0)."""

    jobs: tuple[Job, ...]
    shapes: tuple[Shape, ...]
    job_of: np.ndarray
    """[S] job index of each shape."""
    zero_stages: tuple[int, ...]
    recomputes: tuple[Recompute, ...]
    state_ceil: np.ndarray
    """[S, Z, P] model-state bytes in forward/backward, rounded up."""
    step_ceil: np.ndarray
    """[S, Z, P] model-state bytes during the optimizer step, rounded up."""
    legal: np.ndarray
    """[S, Z] whether ZeRO stage z exists in shape s's framework with its axes."""
    act_ceil: np.ndarray
    """[S, R, P] activation bytes (layers + embedding + transient), rounded up."""
    fits: np.ndarray
    """[S, Z, R] legal, and every stage's exact peak (max of state + activations and the step's
    bytes) within capacity × (1 − headroom)."""
    t1_ns: np.ndarray
    """[S, R] compute, bubble and exposed tp/cp/ep/pp time, ns."""
    t2_ns: np.ndarray
    """[S, Z] exposed dp time, ns."""
    capacity: np.ndarray
    """[S] usable bytes per GPU of the shape's job."""
    model_flops: np.ndarray
    """[S, R] model FLOPs per step (for MFU bounds), as float."""
    peak_ceil: np.ndarray
    """[S, Z, R] the busiest stage's bytes (each term rounded up): the memory objective."""

    def step_ns(self) -> np.ndarray:
        """[S, Z, R] step time in ns as the solver sees it."""
        return self.t1_ns[:, None, :] + self.t2_ns[:, :, None]

    def num_gpus(self) -> np.ndarray:
        """[S] GPUs of each shape's job."""
        return np.array([self.jobs[j].num_gpus for j in self.job_of], dtype=np.int64)


def legal_stages(shape: Shape, zero_stages) -> list[bool]:
    """Whether each ZeRO stage exists in the shape's framework with its pipeline degree (at least
    one does: :func:`optimizer.space.legal_shapes` keeps no other shape)."""
    out = []
    for z in zero_stages:
        try:
            check_framework(shape.framework, z, shape.pp)
        except LayoutError:
            out.append(False)
        else:
            out.append(True)
    return out


def _memory_rows(job: Job, shape: Shape, zero_stages, recomputes, memo: dict):
    """(forward/backward states per z, optimizer-step states per z, activations per r) of a
    shape; an illegal ZeRO stage gets zeros (its candidates are never allowed). They read no
    hardware figure, so jobs that differ only in the accelerator share them (``memo``)."""
    case = job.case
    key = (case.model, case.training, case.vocab_multiple, shape)
    if key not in memo:
        m, t, vm = case.model, case.training, case.vocab_multiple
        legal = legal_stages(shape, zero_stages)
        first = zero_stages[legal.index(True)]
        states, steps = [], []
        for z, ok in zip(zero_stages, legal, strict=True):
            found = stage_states(m, t, shape.layout(z, recomputes[0]), vm) if ok else ()
            states.append(tuple(st.backward_bytes for st in found) or (0,) * shape.pp)
            steps.append(tuple(st.optimizer_step_bytes for st in found) or (0,) * shape.pp)
        acts = [
            tuple(
                a.total_bytes for a in stage_activation_list(m, t, shape.layout(first, r), vm) or ()
            )
            for r in recomputes
        ]
        memo[key] = (states, steps, acts, legal)
    return memo[key]


PARALLEL_MIN_SHAPES = 2000
"""Tables of at least this many shapes are built by two processes (the machine's two cores)."""


def _chunk_rows(
    problem: Problem, shapes: list[Shape], job_of: list[int], progress=None
) -> list[tuple]:
    """(states ceil'd, activations ceil'd, fits, t1 ns, t2 ns) of each shape, from the cost model."""
    zs, rs = problem.space.zero_stages, problem.space.recomputes
    memo: dict = {}
    out = []
    for s, shape in enumerate(shapes):
        if progress and s % 200 == 0:
            progress(s, len(shapes))
        job = problem.jobs[job_of[s]]
        cap = _capacity_of(job, shape, problem.constraints.headroom)
        st, step, ac, legal = _memory_rows(job, shape, zs, rs, memo)
        a, b = _time_rows(job, shape, zs, rs, legal)
        fits = _fits(st, step, ac, cap)
        out.append(
            (
                [[math.ceil(v) for v in row] for row in st],
                [[math.ceil(v) for v in row] for row in step],
                [[math.ceil(v) for v in row] for row in ac],
                [[f and ok for f in row] for row, ok in zip(fits, legal, strict=True)],
                a,
                b,
                legal,
            )
        )
    return out


_PARTS: list[tuple] = []
"""The work of each forked process, set just before the fork (so nothing is pickled going in)."""


def _worker(i: int) -> list[tuple]:
    return _chunk_rows(*_PARTS[i])


def _all_rows(problem: Problem, shapes: list[Shape], job_of: list[int], progress) -> list[tuple]:
    """Every shape's rows; split over two forked processes when the table is large (results are
    identical: each process runs the same pure functions)."""
    import multiprocessing
    import os

    if (
        len(shapes) < PARALLEL_MIN_SHAPES
        or (os.cpu_count() or 1) < 2
        or os.environ.get("TRAINPLAN_SERIAL")
    ):
        return _chunk_rows(problem, shapes, job_of, progress)
    try:
        ctx = multiprocessing.get_context("fork")
    except ValueError:
        return _chunk_rows(problem, shapes, job_of, progress)
    # interleave so both halves see a similar mix of jobs (and so of cost)
    _PARTS[:] = [(problem, shapes[i::2], job_of[i::2], None) for i in range(2)]
    try:
        with ctx.Pool(2) as pool:
            halves = pool.map(_worker, range(2))
    finally:
        _PARTS.clear()
    rows: list[tuple] = [None] * len(shapes)  # type: ignore[list-item]
    for i, half in enumerate(halves):
        rows[i::2] = half
    if progress:
        progress(len(shapes), len(shapes))
    return rows


def _capacity_of(job: Job, shape: Shape, headroom: float) -> int:
    """Usable bytes per GPU of a candidate: the device's capacity as its framework counts it
    (:meth:`model.hardware.DeviceSpec.usable_bytes`) × (1 − headroom)."""
    return int(job.case.device.usable_bytes(shape.framework.physical) * (1 - headroom))


def _fits(states, steps, acts, cap: int) -> list[list[bool]]:
    """[z][r] every stage's peak — max(state + activations, optimizer-step state) — ≤ cap,
    exactly: decided in floats where the margin is clear (a relative 1e-9 from the capacity),
    and with the exact rationals otherwise."""
    st = np.array([[float(v) for v in row] for row in states])
    sp = np.array([[float(v) for v in row] for row in steps])
    ac = np.array([[float(v) for v in row] for row in acts])
    total = np.maximum(st[:, None, :] + ac[None, :, :], sp[:, None, :])  # [Z, R, P]
    clear_in = (total <= cap * (1 - 1e-9)).all(axis=2)
    clear_out = (total > cap * (1 + 1e-9)).any(axis=2)
    out = clear_in.tolist()
    for z, r in zip(*np.nonzero(~clear_in & ~clear_out), strict=True):
        out[z][r] = all(
            max(x + y, w) <= cap for x, y, w in zip(states[z], acts[r], steps[z], strict=True)
        )
    return out


def _time_rows(job: Job, shape: Shape, zero_stages, recomputes, legal: list[bool]):
    case = job.case
    m, t, o, vm = case.model, case.training, case.options, case.vocab_multiple
    first = zero_stages[legal.index(True)]
    links = links_for(shape.layout(first, recomputes[0]), case.links, case.fabric)
    t1, t2 = [], []
    for r in recomputes:
        lay = shape.layout(first, r)
        terms = time_terms(
            m, t, lay, case.device, traffic_rows(m, t, lay, links, o, vm, case.device), o
        )
        if terms is None:
            raise InputError(
                "search: step time needs every axis's link bandwidth (give --nvlink-gbps, --scaleout-gbps)"
            )
        t1.append(objective_ns(terms)[0])
    for z, ok in zip(zero_stages, legal, strict=True):
        if not ok:
            t2.append(0)  # never allowed (legal is False)
            continue
        lay = shape.layout(z, recomputes[0])
        terms = time_terms(
            m, t, lay, case.device, traffic_rows(m, t, lay, links, o, vm, case.device), o
        )
        assert terms is not None
        t2.append(objective_ns(terms)[1])
    return t1, t2


def build_tables(
    problem: Problem, progress: Callable[[int, int], None] | None = None
) -> CostTables:
    """Evaluate the cost model's terms for every job × shape × modifier.

    ``progress(done, total)`` is called every 200 shapes (the CLI's terminal progress line).

    Raises
    ------
    InputError
        When a model has no dimensions, or the space is larger than :data:`MAX_ROWS` rows.
    """
    from trainplan.model.flops import step_flops
    from trainplan.model.params import count_params

    space, zs, rs = problem.space, problem.space.zero_stages, problem.space.recomputes
    shapes: list[Shape] = []
    job_of: list[int] = []
    for j, job in enumerate(problem.jobs):
        if job.case.model.arch is None:
            raise InputError(
                "search: needs a model with dimensions (a catalogue model, a config.json, or --layers …)"
            )
        job_space = SearchSpace(**{**_fields(space), "num_gpus": job.num_gpus})
        found = legal_shapes(job.case.model, job.case.training, job_space)
        shapes += found
        job_of += [j] * len(found)
        if len(shapes) * (len(zs) + len(rs)) > MAX_ROWS:
            raise InputError(
                f"search: over {MAX_ROWS} table rows; narrow the space (--tp, --pp, --max-micro-batch, fewer GPU counts)"
            )
    S, Z, R = len(shapes), len(zs), len(rs)
    P = max((s.pp for s in shapes), default=1)
    state = np.zeros((S, Z, P), dtype=np.int64)
    step = np.zeros((S, Z, P), dtype=np.int64)
    legal = np.zeros((S, Z), dtype=bool)
    act = np.zeros((S, R, P), dtype=np.int64)
    fits = np.zeros((S, Z, R), dtype=bool)
    t1 = np.zeros((S, R), dtype=np.int64)
    t2 = np.zeros((S, Z), dtype=np.int64)
    flops = np.zeros((S, R), dtype=float)
    capacity = np.zeros(S, dtype=np.int64)
    rows = _all_rows(problem, shapes, job_of, progress)
    cache: dict[tuple[int, int], float] = {}
    for s, (st, sp, ac, ft, a, b, lg) in enumerate(rows):
        job = problem.jobs[job_of[s]]
        capacity[s] = _capacity_of(job, shapes[s], problem.constraints.headroom)
        legal[s] = lg
        for z in range(Z):
            state[s, z, : len(st[z])] = st[z]
            step[s, z, : len(sp[z])] = sp[z]
        for r in range(R):
            act[s, r, : len(ac[r])] = ac[r]
            key = (job_of[s], r)
            if key not in cache:
                arch = job.case.model.arch
                assert arch is not None
                n_active = job.case.model.num_params_declared or count_params(arch).active
                cache[key] = float(
                    step_flops(
                        arch,
                        n_active,
                        job.case.training.seq_len,
                        job.case.training.global_batch_size,
                        rs[r],
                        job.case.options.mfu_convention,
                        job.case.options.causal_attention_flops,
                    ).model_flops
                )
            flops[s, r] = cache[key]
        fits[s] = ft
        t1[s], t2[s] = a, b
    peak = np.zeros((S, Z, R), dtype=np.int64)
    for z in range(Z):  # a loop over z keeps the temporary at [S, R, P]
        if S:
            peak[:, z, :] = np.maximum(state[:, z, None, :] + act, step[:, z, None, :]).max(axis=2)
    return CostTables(
        tuple(problem.jobs),
        tuple(shapes),
        np.array(job_of, dtype=np.int64),
        tuple(zs),
        tuple(rs),
        state,
        step,
        legal,
        act,
        fits,
        t1,
        t2,
        capacity,
        flops,
        peak,
    )


def _fields(space) -> dict:
    from dataclasses import fields

    return {f.name: getattr(space, f.name) for f in fields(space)}


def objective_tables(problem: Problem, tables: CostTables) -> tuple[np.ndarray, np.ndarray]:
    """([S, R], [S, Z]) integer objective terms: the time terms times each job's factor
    (:func:`optimizer.problem.objective_factor`), divided by the smallest power of ten that keeps
    CP-SAT's sums within 64-bit integers (the resolution is stated by :func:`objective_unit`)."""
    factors = [objective_factor(problem, job) for job in problem.jobs]
    scale = Fraction(1, objective_divisor(problem, tables))
    if all(f == 1 for f in factors) and scale == 1:
        return tables.t1_ns.copy(), tables.t2_ns.copy()
    f = [factors[j] * scale for j in tables.job_of]
    o1 = np.array(
        [[round(Fraction(int(v)) * f[s]) for v in row] for s, row in enumerate(tables.t1_ns)],
        dtype=np.int64,
    )
    o2 = np.array(
        [[round(Fraction(int(v)) * f[s]) for v in row] for s, row in enumerate(tables.t2_ns)],
        dtype=np.int64,
    )
    return o1, o2


def objective_divisor(problem: Problem, tables: CostTables) -> int:
    """10^k so that the largest objective sum, times the number of terms, stays below 2^60."""
    if not tables.shapes:
        return 1
    factors = [objective_factor(problem, job) for job in problem.jobs]
    biggest = max(float(factors[j]) for j in set(tables.job_of.tolist()))
    top = float(tables.t1_ns.max() + tables.t2_ns.max()) * biggest
    terms = tables.t1_ns.size + tables.t2_ns.size
    divisor = 1
    while top / divisor * terms >= 2**60:
        divisor *= 10
    return divisor
