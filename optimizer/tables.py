"""Cost tables: the cost model's own terms evaluated over every candidate, as arrays.

For every job j, every legal shape s of it (optimizer.space), every ZeRO stage z and every
recompute mode r:

* ``state[s, z, r, i]`` — model-state bytes of pipeline stage i in forward/backward (weights,
  gradients, optimizer state, gathered units, buffers; r moves DeepSpeed ZeRO-3's gathered
  weights alone, :func:`model.terms.deepspeed_turn.zero3_turn_gathered`); ``step[s, z, r, i]``
  the same while the optimizer steps (no activations); ``act[s, r, i]`` activation bytes
* ``legal[s, z, r]`` — the shape breaks no legality rule at the ZeRO stage and recompute mode
  (:func:`model.legality.legality`: the framework runs the stage with its axes, the recompute
  mode, the offload)
* ``t1_ns[s, r]``    — compute × (1 + bubble) + exposed tp/cp/ep/pp traffic
* ``t2_ns[s, z, r]`` — exposed dp traffic, the optimizer step, an offload's transfers (both in
  whole ns as :func:`model.estimate.objective_ns`; r moves DeepSpeed ZeRO-3's gathers alone)

so that the memory of stage i is max(state + act, step) (:func:`model.terms.peak.peak_over_phases`)
and the step time t1 + t2, exactly as ``evaluate()`` adds them. Each table is one term of
:data:`model.terms.TERMS` evaluated over its scope (:func:`optimizer.columns.tabulate`): float64,
within a byte and a nanosecond of the exact evaluation. Fit verdicts are decided exactly where a
candidate's peak is within a relative 1e-9 of the capacity, and every printed answer is
re-evaluated exactly (:func:`optimizer.search.check_against_evaluate`). Nothing here costs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from trainplan.model.errors import InputError
from trainplan.model.estimate import evaluation_context, stage_memory
from trainplan.model.frameworks import ZERO_STAGES, Framework
from trainplan.model.layout import Recompute
from trainplan.model.legality import RULES, Rule, Setting, legality, refusal
from trainplan.model.terms import peak as pk
from trainplan.model.terms import term
from trainplan.model.terms.fields import Context, LayoutFields
from trainplan.optimizer.case import links_for
from trainplan.optimizer.columns import ShapeColumns, tabulate
from trainplan.optimizer.launch_tables import objective_divisor, pipeline_tables, with_launch_order
from trainplan.optimizer.problem import Constraints, Job, Problem, job_model_flops
from trainplan.optimizer.space import SearchSpace, Shape, legal_shapes

__all__ = [
    "CostTables",
    "build_tables",
    "illegal_reason",
    "job_shapes",
    "empty_columns",
    "fill_job_rows",
    "job_model_flops",
    "peak_table",
    "fit_columns",
    "objective_divisor",
    "MAX_ROWS",
    "MAX_SHAPES_PER_JOB",
]

MAX_ROWS = 2_000_000
"""Refuse tables larger than this many (shape × modifier) rows; narrow the space instead."""
MAX_SHAPES_PER_JOB = 200_000
"""Refuse a job with more legal shapes than this (the arrays of one job live in memory at once)."""
FIT_MARGIN = 1e-9
"""Relative distance from the capacity within which a fit verdict is decided exactly."""


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
    """[S, Z, R, P] model-state bytes in forward/backward, rounded up (within a byte of exact)."""
    step_ceil: np.ndarray
    """[S, Z, R, P] model-state bytes during the optimizer step, rounded up."""
    legal: np.ndarray
    """[S, Z, R] whether shape s breaks no legality rule at ZeRO stage z and recompute mode r
    (:func:`model.legality.legality`)."""
    act_ceil: np.ndarray
    """[S, R, P] activation bytes (layers + embedding + transient), rounded up."""
    fits: np.ndarray
    """[S, Z, R] legal, and every stage's exact reserved peak (max of state + activations and
    the step's bytes, plus the side streams' pools; without them under
    :attr:`allocator_retries_ok`) within capacity × (1 − headroom)."""
    t1_ns: np.ndarray
    """[S, R] compute, bubble and exposed tp/cp/ep/pp time, ns, with the launch order kept
    (:mod:`optimizer.launch_tables`)."""
    t1_unordered_ns: np.ndarray
    """[S, R] the same without it (Megatron-FSDP before Blackwell: no async tp or cp overlap)."""
    unordered: np.ndarray
    """[S, Z] whether the shape at the ZeRO stage reads :attr:`t1_unordered_ns`
    (:func:`model.launch_order.launch_order_kept` False)."""
    t2_ns: np.ndarray
    """[S, Z, R] exposed dp time, the optimizer step and offload, ns."""
    capacity: np.ndarray
    """[S] usable bytes per GPU of the shape's job."""
    model_flops: np.ndarray
    """[S, R] model FLOPs per step (for MFU bounds), as float."""
    peak_ceil: np.ndarray
    """[S, Z, R] the busiest stage's bytes (each term rounded up): the memory objective."""
    jobs_tabulated: int = -1
    """How many of the jobs (in order) have shapes here; fewer than ``len(jobs)`` when a time
    limit stopped table building (-1: all)."""
    allocator_retries_ok: bool = False
    """Whether :attr:`fits` accepts a candidate whose reserved bytes exceed the capacity while its
    allocated ones fit (:attr:`optimizer.problem.Constraints.allocator_retries_ok`)."""

    @property
    def complete(self) -> bool:
        """Whether every job was tabulated (no time limit cut table building short)."""
        return self.jobs_tabulated < 0 or self.jobs_tabulated == len(self.jobs)

    def step_ns(self) -> np.ndarray:
        """[S, Z, R] step time in ns as the solver sees it."""
        t1 = with_launch_order(self.t1_ns, self.t1_unordered_ns, self.unordered)
        return t1 + self.t2_ns

    def t1_at(self, s: int, z: int, r: int) -> int:
        """The pipeline term of candidate (s, z, r), ns, at its launch order."""
        t1 = self.t1_unordered_ns if self.unordered[s, z] else self.t1_ns
        return int(t1[s, r])

    def num_gpus(self) -> np.ndarray:
        """[S] GPUs of each shape's job."""
        return np.array([self.jobs[j].num_gpus for j in self.job_of], dtype=np.int64)


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


def illegal_reason(tables: CostTables) -> str | None:
    """Why no row of ``tables`` is legal at any ZeRO stage of the space — the legality rule's
    own line (:func:`model.legality.legality`) for the first shape at the first ZeRO stage its
    framework has (Apex's ``distributed_fused_adam`` with ``--zero 0``) — or None when some row is legal or
    there is no row. A search that finds nothing says this, not "divisibility"."""
    if not tables.shapes or tables.legal.any():
        return None
    job = tables.jobs[int(tables.job_of[0])]
    shape = tables.shapes[0]
    # the first stage its framework has: a stage it has not would hide the recipe's rule
    runs = [z for z in tables.zero_stages if z in ZERO_STAGES[Framework(shape.framework)]]
    layout = shape.layout((runs or tables.zero_stages)[0], tables.recomputes[0])
    c = job.case
    setting = Setting.of(c.model, c.training, job.num_gpus, c.options, c.device)
    return str(legality(setting, LayoutFields(layout, c.training.global_batch_size))[1]) or None


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


def build_tables(
    problem: Problem,
    progress: Callable[[int, int], None] | None = None,
    deadline: float | None = None,
    fit_only: bool = False,
) -> CostTables:
    """Evaluate the cost model's terms for every job × shape × modifier (``fit_only``: a job
    none of whose candidates fits gets no time terms, :func:`_job_rows`).

    ``progress(done, total)`` is called after each job (the CLI's terminal progress line).
    ``deadline`` (a :func:`time.perf_counter` value): jobs not started by then are left out
    (:attr:`CostTables.complete` is False; the search then reports ``feasible``, not proven).

    Raises
    ------
    InputError
        When a model has no dimensions, or the space is larger than :data:`MAX_ROWS` rows.
    """
    zs, rs = problem.space.zero_stages, _recomputes(problem)
    per_job = job_shapes(problem, len(zs) * len(rs))
    S = sum(len(found) for _, found in per_job)
    P = max((s.pp for _, shapes in per_job for s in shapes), default=1)
    cols = empty_columns(S, len(zs), len(rs), P)
    shapes: list[Shape] = []
    job_of: list[int] = []
    memo: dict = {}
    lo = 0
    tabulated = len(per_job)
    for j, (job, found) in enumerate(per_job):
        if deadline is not None and j and time.perf_counter() > deadline:
            tabulated = j
            break
        fill_job_rows(
            cols, lo, job, found, zs, rs, problem.constraints.headroom, memo,
            problem.constraints.allocator_retries_ok, fit_only,
        )  # fmt: skip
        shapes += found
        job_of += [j] * len(found)
        lo += len(found)
        if progress:
            progress(lo, S)
    if tabulated < len(per_job):  # cut short: keep the tabulated jobs' rows
        cols = {name: column[:lo] for name, column in cols.items()}
    return CostTables(
        tuple(problem.jobs),
        tuple(shapes),
        np.array(job_of, dtype=np.int64),
        tuple(zs),
        tuple(rs),
        **cols,
        peak_ceil=peak_table(cols["state_ceil"], cols["step_ceil"], cols["act_ceil"]),
        jobs_tabulated=tabulated,
        allocator_retries_ok=problem.constraints.allocator_retries_ok,
    )


def job_shapes(problem: Problem, per_shape: int) -> list[tuple[Job, tuple[Shape, ...]]]:
    """Each job with its legal shapes (:func:`optimizer.space.legal_shapes` over the space
    at the job's GPU count).

    Raises
    ------
    InputError
        A model without dimensions, or more than :data:`MAX_ROWS` candidates (shapes ×
        ``per_shape`` modifiers) in all.
    """
    per_job: list[tuple[Job, tuple[Shape, ...]]] = []
    total = 0
    for job in problem.jobs:
        if job.case.model.arch is None:
            raise InputError(
                "search: needs a model with dimensions (a catalogue model, a config.json, or --layers …)"
            )
        job_space = SearchSpace(**{**_fields(problem.space), "num_gpus": job.num_gpus})
        found = tuple(legal_shapes(job.case.model, job.case.training, job_space))
        total += len(found)
        if total * per_shape > MAX_ROWS:
            raise InputError(
                f"search: over {MAX_ROWS:,} candidates; narrow the space (--tp, --pp, --max-micro-batch, fewer GPU counts)"
            )
        per_job.append((job, found))
    return per_job


def empty_columns(S: int, Z: int, R: int, P: int) -> dict[str, np.ndarray]:
    """The :class:`CostTables` arrays :func:`build_tables` fills, by field name, zeroed: S
    shapes, Z ZeRO stages, R recompute modes, P the most pipeline stages."""
    return {
        "state_ceil": np.zeros((S, Z, R, P), dtype=np.int64),
        "step_ceil": np.zeros((S, Z, R, P), dtype=np.int64),
        "legal": np.zeros((S, Z, R), dtype=bool),
        "act_ceil": np.zeros((S, R, P), dtype=np.int64),
        "fits": np.zeros((S, Z, R), dtype=bool),
        "t1_ns": np.zeros((S, R), dtype=np.int64),
        "t1_unordered_ns": np.zeros((S, R), dtype=np.int64),
        "unordered": np.zeros((S, Z), dtype=bool),
        "t2_ns": np.zeros((S, Z, R), dtype=np.int64),
        "capacity": np.zeros(S, dtype=np.int64),
        "model_flops": np.zeros((S, R), dtype=float),
    }


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


def peak_table(state: np.ndarray, step: np.ndarray, act: np.ndarray) -> np.ndarray:
    """[S, Z, R] the busiest stage's bytes (:func:`model.terms.peak.peak_over_phases` of the
    rounded-up terms, ``state`` and ``step`` [S, Z, R, P], ``act`` [S, R, P]); a loop over z
    keeps the temporary at [S, R, P]."""
    S, Z, R = state.shape[0], state.shape[1], act.shape[1]
    peak = np.zeros((S, Z, R), dtype=np.int64)
    for z in range(Z):
        if S:
            peak[:, z, :] = pk.peak_over_phases(state[:, z], act, step[:, z]).max(axis=2)
    return peak


def _recomputes(problem: Problem) -> tuple[Recompute, ...]:
    """The space's recompute modes that some framework of the space runs with some job's
    recipe (:func:`model.legality.refusal`: activation offload keeps none or selective).

    Raises
    ------
    InputError
        None is left: the rule's own line.
    """
    kept, first = [], ""
    for r in problem.space.recomputes:
        why = [
            refusal(Setting(job.case.model, job.case.training), framework=fw, recompute=r,
                    recompute_layers=None)
            for job in problem.jobs
            for fw in problem.space.frameworks
        ]  # fmt: skip
        if not all(why):
            kept.append(r)
        first = first or next((w for w in why if w), "")
    if not kept:  # the rule's line as evaluate prints it, headed by the parameter it names
        raise InputError(first)
    return tuple(kept)


def _fields(space) -> dict:
    return {f.name: getattr(space, f.name) for f in fields(space)}
