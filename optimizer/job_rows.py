"""One job's rows of the cost tables (:mod:`optimizer.tables`): each term of the cost model
(:data:`model.terms.TERMS`) evaluated over a job's shapes at every ZeRO stage and recompute
mode (:func:`optimizer.columns.tabulate`), the legality rules (:func:`model.legality.legality`)
and the fit verdicts, decided exactly where a candidate's peak is within :data:`FIT_MARGIN` of
the capacity (the evaluator's rationals, :func:`model.estimate.stage_memory`).
:func:`fill_job_rows` writes them into :func:`optimizer.tables.empty_columns`' arrays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trainplan.model.estimate import evaluation_context, stage_memory
from trainplan.model.layout import Recompute
from trainplan.model.legality import RULES, Rule, Setting, legality
from trainplan.model.terms import peak as pk
from trainplan.model.terms import term
from trainplan.model.terms.fields import Context
from trainplan.optimizer.case import links_for
from trainplan.optimizer.columns import ShapeColumns, tabulate
from trainplan.optimizer.launch_tables import pipeline_tables
from trainplan.optimizer.problem import Constraints, Job, job_model_flops
from trainplan.optimizer.space import Shape

__all__ = ["FIT_MARGIN", "fill_job_rows", "fit_columns"]

FIT_MARGIN = 1e-9
"""Relative distance from the capacity within which a fit verdict is decided exactly."""


def _capacity(job: Job, shape: Shape, headroom: float) -> int:
    """A candidate's usable bytes per GPU less the headroom (:meth:`Constraints.held_bytes`)."""
    usable = job.case.device.usable_bytes(shape.framework.physical)
    return Constraints(headroom=headroom).held_bytes(usable)


def _reading(name: str) -> tuple[Rule, ...]:
    """The legality rules whose scope reads the field ``name``, in order."""
    return tuple(r for r in RULES if name in r.scope)


def _legal(c: Context, table: ShapeColumns, zs, rs) -> np.ndarray:
    """[N, Z, R] whether each shape breaks no legality rule at each ZeRO stage and recompute
    mode (:func:`model.legality.legality`): the rules that read neither once, those that read
    the ZeRO stage once per stage and those that read the recompute mode once per mode (no rule
    reads both)."""
    setting = Setting.of(c.model, c.training, None, c.options, c.device)
    every = np.arange(table.n)
    by_z, by_r = _reading("zero_stage"), _reading("recompute")
    assert not set(by_z) & set(by_r), "a rule reads both modifiers: tabulate it per (z, r)"
    rest = tuple(r for r in RULES if r not in by_z and r not in by_r)

    def mask(rules, scalars) -> np.ndarray:
        ok, _ = legality(setting, table.view(every, scalars), rules)
        return np.broadcast_to(np.asarray(ok, dtype=bool).reshape(-1), (table.n,))

    base = mask(rest, {"zero_stage": zs[0], "recompute": rs[0]})
    at_z = np.stack([mask(by_z, {"zero_stage": z, "recompute": rs[0]}) for z in zs], axis=1)
    at_r = np.stack([mask(by_r, {"zero_stage": zs[0], "recompute": r}) for r in rs], axis=1)
    return base[:, None, None] & at_z[:, :, None] & at_r[:, None, :]


def _skip(values, legal, name="zero_stage") -> Callable[[dict[str, Any], np.ndarray], bool]:
    """Whether a group of shapes has no legal row at its ZeRO stage (``legal`` [N, Z]) or, with
    ``name`` recompute, its recompute mode ([N, R]): its terms are left 0."""
    return lambda scalars, rows: not legal[rows, values.index(scalars[name])].any()


def _skip_both(zs, rs, legal) -> Callable[[dict[str, Any], np.ndarray], bool]:
    """Whether a group of shapes has no legal row at its ZeRO stage and recompute mode
    (``legal`` [N, Z, R]): its terms are left 0."""
    return lambda s, rows: (
        not legal[rows, zs.index(s["zero_stage"]), rs.index(s["recompute"])].any()
    )


def _memory(c: Context, table: ShapeColumns, zs, rs, P: int) -> dict[str, np.ndarray]:
    """The memory terms of one job's shapes: forward/backward and optimizer-step state and the
    host's share [N, Z, R, P], the side streams' pools [N, Z, P], activations and their host share
    [N, R, P], the
    persistent buffers held in both phases (``persistent``,
    :func:`model.terms.persistent_buffers.persistent_buffers_term`), legality [N, Z, R]
    (:func:`model.terms.peak.host_fits`)."""
    legal = _legal(c, table, zs, rs)
    if not legal.any():  # no ZeRO stage runs any shape: no term to tabulate (see illegal_reason)
        none_z, none_r = np.zeros((table.n, len(zs), P)), np.zeros((table.n, len(rs), P))
        none_zr = np.zeros((table.n, len(zs), len(rs), P))
        return {"state": none_zr, "step": none_zr, "act": none_r, "legal": legal, "host": none_zr,
                "act_host": none_r, "pool": none_z, "persistent": none_z[:, :1]}  # fmt: skip
    skip = _skip(zs, np.asarray(legal.any(axis=2)))
    skip_zr = _skip_both(zs, rs, legal)
    modifiers = {"zero_stage": tuple(zs), "recompute": tuple(rs)}
    state, step, host = tabulate(
        term("state"), c, table, modifiers,
        lambda s: (s.backward_bytes, s.optimizer_step_bytes, s.host_bytes), P, skip_zr,
    )  # fmt: skip
    act, act_host = tabulate(
        term("activations"), c, table, modifiers,
        lambda a: (a.total_bytes, a.offload_host_bytes), P,
    )  # fmt: skip
    (pool,) = tabulate(term("stream_pool"), c, table, modifiers, lambda b: (b,), P, skip)
    (persistent,) = tabulate(term("persistent_buffers"), c, table, modifiers, lambda b: (b,), P)
    if c.training.offload.active:  # the host's share of the offloaded state fits its memory
        legal &= pk.host_fits(host.max(axis=3), c.gpu)
    return {"state": state, "step": step, "act": act, "legal": legal, "host": host,
            "act_host": act_host, "pool": pool, "persistent": persistent}  # fmt: skip


def _times(c: Context, table: ShapeColumns, zs, rs, legal: np.ndarray) -> dict[str, np.ndarray]:
    """t1 [N, R] and t2 [N, Z, R] in whole nanoseconds (:func:`model.terms.step.pipeline_term`,
    :func:`model.terms.step.dp_term`); 0 where illegal at every ZeRO stage, or under every
    recompute mode (``legal`` [N, Z, R]): not timed (a framework without the tp overlap asked
    for, :func:`model.tp_overlap.check_layout_tp_overlap`)."""
    modifiers = {"zero_stage": tuple(zs), "recompute": tuple(rs)}
    t1, t1u, unordered = pipeline_tables(c, table, tuple(zs), tuple(rs), legal)
    (t2,) = tabulate(
        term("dp_time"), c, table, modifiers, lambda t: (t.total_s,), 1, _skip_both(zs, rs, legal)
    )
    return {
        "t1": np.rint(t1 * 1e9).astype(np.int64),
        "t1u": np.rint(t1u * 1e9).astype(np.int64),
        "unordered": unordered,
        "t2": np.where(legal, np.rint(t2 * 1e9), 0).astype(np.int64),
    }


def _job_rows(job: Job, shapes: tuple[Shape, ...], zs, rs, headroom, memo, retries_ok, fit_only):
    """Every term of one job's shapes: memory arrays (``memo``, per accelerator: the state reads
    the part), times, capacities, exact fit verdicts (``retries_ok``: ``allocator_retries_ok``).
    ``fit_only``: where nothing fits the times are left 0, untabulated (the ``params`` objective's
    probe of a family member reads only the fit, :mod:`optimizer.params_search`)."""
    case = job.case
    c = evaluation_context(
        case.model, case.training, case.device, case.options, case.vocab_multiple
    )
    table = ShapeColumns(shapes, case.training.global_batch_size, case.links, case.fabric)
    P = max(s.pp for s in shapes)
    key = (case.model, case.training, case.vocab_multiple, shapes, case.device)
    if key not in memo:
        memo[key] = _memory(c, table, zs, rs, P)
    mem = _with_communicators(memo[key], c, table, zs, P)
    cap = np.array([_capacity(job, s, headroom) for s in shapes], dtype=np.int64)
    fits = _fits(job, shapes, zs, rs, mem, cap, retries_ok)
    if fit_only and not fits.any():
        return mem, _no_times(len(shapes), len(zs), len(rs)), cap, fits
    times = _times(c, table, zs, rs, mem["legal"])
    return mem, times, cap, fits


def _no_times(N: int, Z: int, R: int) -> dict[str, np.ndarray]:
    """:func:`_times`' arrays, zero: a job none of whose candidates fits, under ``fit_only``."""
    t1, t2, u = np.zeros((N, R), np.int64), np.zeros((N, Z, R), np.int64), np.zeros((N, Z), bool)
    return {"t1": t1, "t1u": t1, "unordered": u, "t2": t2}


def _with_communicators(mem: dict, c: Context, table: ShapeColumns, zs, P: int) -> dict:
    """``mem`` with NCCL's buffers (``comm_memory_term``, [N, Z, P], per ZeRO stage; no job shares
    them) plus TE's userbuffers (``userbuffers_term``) as ``comm``, and ``held``
    (:func:`model.terms.peak.held_in_both_phases`: both phases' state, :func:`fill_job_rows`)."""
    (comm,) = tabulate(term("comm_memory"), c, table, {"zero_stage": tuple(zs)}, lambda b: (b,), P)
    (ub,) = tabulate(term("userbuffers"), c, table, {}, lambda b: (b,), P)
    comm = comm + ub
    return mem | {"comm": comm, "held": pk.held_in_both_phases(mem["persistent"], comm)}


def fit_columns(mem: dict, retries_ok: bool = False) -> np.ndarray:
    """[N, Z, R, P] bytes each stage must find in its capacity (float64): :func:`model.terms.peak.
    fit_total` of the allocated peak (:func:`model.terms.peak.peak_over_phases`), pools, ``comm``."""
    st, step, act = mem["state"], mem["step"], mem["act"][:, None]
    allocated = pk.peak_over_phases(st, act, step, mem["persistent"][:, :, None, :])
    pool, comm = mem["pool"][:, :, None, :], mem["comm"][:, :, None, :]
    return pk.fit_total(allocated, pool, comm, retries_ok)


def _fits(
    job: Job, shapes, zs, rs, mem: dict, cap: np.ndarray, retries_ok: bool = False
) -> np.ndarray:
    """[N, Z, R] legal, the host's share of offloaded state and activations within the host
    memory per GPU, and every stage's peak within ``cap``; decided exactly (the exact
    evaluator's rationals) where the float margin is within :data:`FIT_MARGIN` of the capacity.
    The peak is :func:`fit_columns` (the reserved bytes with the communicators: no answer relies
    on the allocator's uncharged retries, :func:`model.terms.peak.reserved_over_capacity`; with
    ``retries_ok`` the allocated peak, the evaluator's verdict)."""
    legal, peak = mem["legal"], fit_columns(mem, retries_ok)
    limit = cap[:, None, None, None].astype(float)
    clear_in = (peak <= limit * (1 - FIT_MARGIN)).all(axis=3)
    clear_out = (peak > limit * (1 + FIT_MARGIN)).any(axis=3)
    case = job.case
    host_ok = np.ones(clear_in.shape, dtype=bool)
    if mem["act_host"].any():
        host = (mem["host"] + mem["act_host"][:, None, :, :]).max(axis=3)
        host_ok = pk.host_fits(host, case.device)
    fits = clear_in & legal & host_ok
    for n, z, r in zip(*np.nonzero(~clear_in & ~clear_out & legal), strict=True):
        lay = shapes[n].layout(zs[z], rs[r])
        stages = stage_memory(
            case.model, case.training, lay, case.vocab_multiple, case.device,
            links_for(lay, case.links, case.fabric), case.options,
        )  # fmt: skip
        fits[n, z, r] = host_ok[n, z, r] and all(
            pk.fit_bytes(st, retries_ok) <= cap[n] for st in stages
        )
    return fits


def fill_job_rows(
    cols: dict[str, np.ndarray],
    lo: int,
    job: Job,
    found: tuple[Shape, ...],
    zs: tuple[int, ...],
    rs: tuple[Recompute, ...],
    headroom: float,
    memo: dict,
    retries_ok: bool = False,
    fit_only: bool = False,
) -> None:
    """Write ``job``'s rows (its shapes ``found``, from row ``lo``) of :func:`empty_columns`'
    ``cols``: the terms (:func:`_job_rows`), rounded up where they are bytes, and the model
    FLOPs per recompute mode (:func:`job_model_flops`)."""
    if not found:
        return
    hi = lo + len(found)
    mem, times, cap, ft = _job_rows(job, found, zs, rs, headroom, memo, retries_ok, fit_only)
    p = mem["state"].shape[3]
    held = mem["held"][:, :, None, :]
    cols["state_ceil"][lo:hi, :, :, :p] = np.ceil(mem["state"] + held)  # in both phases
    cols["step_ceil"][lo:hi, :, :, :p] = np.ceil(mem["step"] + held)
    cols["act_ceil"][lo:hi, :, :p] = np.ceil(mem["act"])
    cols["legal"][lo:hi], cols["fits"][lo:hi], cols["capacity"][lo:hi] = mem["legal"], ft, cap
    cols["t1_ns"][lo:hi], cols["t2_ns"][lo:hi] = times["t1"], times["t2"]
    cols["t1_unordered_ns"][lo:hi], cols["unordered"][lo:hi] = times["t1u"], times["unordered"]
    cols["model_flops"][lo:hi] = job_model_flops(job, rs)
