"""Per-stage tables (issue 13): for one layout shape, what each pipeline stage costs with n of
the model's L layers of which the first k are fully recomputed, from the evaluator's own
per-stage functions.

Every figure is one call of the function ``evaluate()`` itself calls, on a layout that puts n
layers on the stage (``Layout.stage_layers``) and recomputes k of them
(``Layout.recompute_layers``):

* bytes: :func:`model.terms.peak.stage_memory_term` (the stage's peak over its phases, exact);
* its micro-batch: :func:`model.terms.roofline.stage_parts_term` (operations and exposed tp,
  cp, ep); paced over the step as the evaluator paces the slowest stage,
  ``m·t·(1 + bubble_ratio)`` (:func:`model.terms.step.pipeline_seconds`);
* the dp overlap window (the same without recomputation), the stage's dense and expert
  parameters per GPU apart and its layers and MoE layers, which over the stages decide the rest
  of the step (exposed dp, the optimizer step, offload: :func:`model.terms.step.dp_term`).

Interleaved shapes (v model chunks per stage) keep their schedule: a stage's n layers, a
multiple of v (:func:`optimizer.stage_rules.layer_counts`), are spread evenly over its chunks and its count k applies
to each chunk, as ``--recompute-num-layers`` (0 ≤ k ≤ n/v; ``Layout.recompute_layers``). The
interleaved peak (:func:`model.pipeline.interleaved_peak`) reads the stage's own chunk weights
and its position only — the schedule's order of forwards and backwards on a stage is fixed by
pp, v, m and the stage — so an interleaved stage's cost still reads only its own n and k: its
peak, its micro-batch, and its chunks' forwards and backwards
(:attr:`StageOption.chunk_forward`), which Megatron-Core's order on the chunks, the evaluator's
pipeline term (:mod:`model.pipeline_uneven`), reads (:mod:`optimizer.stage_exact`); the closed
form ``m·t_max·(1 + (p − 1)/(v·m))`` the rows also carry neither equals nor bounds it.

A stage's figures read only its own layers and position, never the other stages' counts: for a
model whose layers after a leading block are alike, its count n and whether it is the first or
the last; for one whose attention spans or FFN kinds repeat a period P after d leading layers
(:func:`optimizer.stage_rules.layer_pattern`: gpt-oss, Gemma 2/3, Llama 4), also where it starts
within the period, so a stage between the first and the last has rows per (residue r < P, n),
each evaluated at the start d + r (:meth:`optimizer.stage_view.StageView.starts`: the same
layers as every later start of that residue, shifted by whole periods); the last stage's residue is read off its n
(:func:`optimizer.stage_rules.start_residue`). :func:`optimizer.stage_rules.check_per_stage`
refuses other models. The CP-SAT model is :mod:`optimizer.stage_cpsat`; the lower bounds that
skip a shape before its tables are :mod:`optimizer.stage_bounds`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from trainplan.model.layout import Layout, Recompute
from trainplan.model.terms.peak import StageMemory, fit_bytes
from trainplan.model.terms.pipeline_span import stage_passes
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Constraints
from trainplan.optimizer.solver import interrupted
from trainplan.optimizer.stage_option import PASS_UNITS, StageOption
from trainplan.optimizer.stage_rules import most_recomputed
from trainplan.optimizer.stage_view import Paced, StageView, stage_context

__all__ = [
    "PASS_UNITS",
    "StageOption",
    "StageTables",
    "OutOfTime",
    "stage_context",
    "build_stage_tables",
    "StageCosts",
    "time_caps",
    "least_fitting",
    "stage_rows",
    "stage_capacity",
    "stage_within",
]


@dataclass(frozen=True, slots=True)
class StageTables:
    """Per stage, every (layers, recomputed) that fits, for one base layout."""

    case: Case
    layout: Layout
    """The base layout: the shape, ZeRO stage, base recompute mode (none or selective), 1F1B or
    interleaved with its v."""
    num_layers: int
    """L, the layers to place."""
    capacity: int
    """Bytes per GPU a stage may use (the device's usable bytes × (1 − headroom)), which its fit
    figure must not exceed (:func:`stage_within`)."""
    options: tuple[tuple[StageOption, ...], ...]
    """Per stage, the options that fit: for each start residue and layer count the least
    recomputation that fits
    (more recomputes hold no more and run no slower — tested — so they are dominated)."""
    evaluations: int
    """Per-stage memory evaluations made to build the rows."""
    allocator_retries_ok: bool = False
    """Whether a stage fits by its allocated peak alone (:func:`model.terms.peak.fit_bytes`;
    :attr:`optimizer.problem.Constraints.allocator_retries_ok`)."""
    max_bytes: int | None = None
    """The memory frontier's ε, bytes per GPU: a bound on every stage's peak
    (:attr:`~model.terms.peak.StageMemory.total_bytes`, :func:`stage_within`); None: none."""
    prefix: int = 0
    """d of :func:`optimizer.stage_rules.layer_pattern`: the leading layers, the first stage's."""
    period: int = 1
    """P of :func:`optimizer.stage_rules.layer_pattern`: the period of the attention spans after
    the leading layers (1: alike layers; the options' :attr:`StageOption.residue` then all 0)."""

    def within(self, stage: StageMemory) -> bool:
        """:func:`stage_within` of ``stage`` under these tables' capacity, bound and fit rule."""
        return stage_within(stage, self.capacity, self.max_bytes, self.allocator_retries_ok)


def stage_within(
    stage: StageMemory, capacity: int, max_bytes: int | None, allocator_retries_ok: bool
) -> bool:
    """Whether a :class:`~model.terms.peak.StageMemory` ``stage`` may stand in a per-stage
    plan: its fit figure (:func:`model.terms.peak.fit_bytes`: the reserved bytes with the
    communicators unless ``allocator_retries_ok``) within ``capacity`` bytes per GPU, and its
    peak (:attr:`~model.terms.peak.StageMemory.total_bytes`: the allocated peak with the
    communicators, the memory frontier's axis) within ``max_bytes`` when given.

    The uniform search applies the same two bounds (:attr:`optimizer.tables.CostTables.fits`
    against the capacity, :attr:`optimizer.tables.CostTables.peak_ceil` against ``max_bytes``,
    :func:`optimizer.per_stage.uniform_within`), so both sides of the memory frontier meet one
    ε on one figure. They differ only by FSDP2's side-stream pools
    (:func:`model.terms.peak.stream_pool_term`): in the fit figure, not in the peak."""
    if fit_bytes(stage, allocator_retries_ok) > capacity:
        return False
    return max_bytes is None or stage.total_bytes <= max_bytes


class OutOfTime(Exception):
    """The deadline given to :func:`build_stage_tables` passed before its rows were complete
    (the caller's ``--time-limit``: the shape is left unsearched, its status ``feasible``), or
    Ctrl-C stopped the search (:func:`optimizer.solver.interrupt`) while they were built."""


def stage_capacity(
    case: Case, layout: Layout, headroom: float = 0.0, max_bytes: int | None = None
) -> int:
    """Bytes per GPU a stage may use: the device's usable bytes as ``layout``'s framework counts
    them (:meth:`model.hardware.DeviceSpec.usable_bytes`) × (1 − ``headroom``)
    (:meth:`optimizer.problem.Constraints.held_bytes`, the layout search's rule), and at most
    ``max_bytes`` when given (a bound no stage's peak exceeds under either figure of
    :func:`stage_within`: :func:`pipeline_lower_bound`'s)."""
    usable = case.device.usable_bytes(layout.framework.physical)
    capacity = Constraints(headroom=headroom).held_bytes(usable)
    return capacity if max_bytes is None else min(capacity, max_bytes)


def build_stage_tables(
    case: Case,
    layout: Layout,
    headroom: float = 0.0,
    cap_ns: int | None = None,
    rest_lower_ns: int = 0,
    max_bytes: int | None = None,
    deadline: float | None = None,
    allocator_retries_ok: bool = False,
) -> StageTables:
    """The per-stage rows of ``layout``'s shape on ``case``: for every stage and layer count n
    (0 … L; only L when pp = 1), the least k (0 … ⌈n/v⌉, per model chunk) whose peak fits, with
    its figures
    (:class:`StageOption`). With ``cap_ns`` only rows whose pipeline term plus ``rest_lower_ns``
    (a lower bound on the rest of the step) stays below it: a stage slower than that cannot be
    part of a step faster than ``cap_ns``. ``max_bytes``: a further bound on every stage's peak,
    bytes per GPU (the memory frontier's ε, :func:`stage_within`).
    ``deadline``: a :func:`time.perf_counter` instant, checked before each layer count's rows
    (a few evaluations each), so a time limit holds to within one of them.
    ``allocator_retries_ok``: a stage fits by its allocated peak alone
    (:func:`model.terms.peak.fit_bytes`; by default its reserved bytes must fit too).

    Monotone in k and n (tested: one more recomputed layer never holds more nor runs faster; one
    more layer on the stage never holds less): the least k of n − 1 layers is tried first, then
    the most, then the least k above it by bisection; the scan over n stops at the first n that
    does not fit fully recomputed or whose stage alone reaches the cap. Once the stages built (by
    their rows) and the others (by time alone) cannot hold L layers below ``cap_ns``, the rest
    are left empty: no split of this shape beats it.

    Raises
    ------
    InputError
        :func:`check_per_stage`'s rules.
    OutOfTime
        ``deadline`` passed before the rows were complete.
    """
    costs = StageCosts(
        stage_context(case, layout),
        stage_capacity(case, layout, headroom),
        allocator_retries_ok,
        max_bytes,
    )
    L, pp = costs.stages.num_layers, layout.pp
    most = time_caps(costs, cap_ns, rest_lower_ns)
    rows: list[tuple[StageOption, ...]] = []
    for stage in range(pp):
        if sum(most) < L:  # some stage has no row, or together they cannot hold L layers
            rows += [()] * (pp - stage)
            break
        found = stage_rows(costs, stage, cap_ns, rest_lower_ns, deadline)
        rows.append(found)
        most[stage] = max((o.layers for o in found), default=-1)
    sc = costs.stages
    return StageTables(
        case, layout, L, costs.capacity, tuple(rows), costs.evaluations, allocator_retries_ok,
        max_bytes, sc.prefix, sc.period,
    )  # fmt: skip


class StageCosts:
    """One shape's stage figures for :func:`build_stage_tables`, each evaluated once: the peak
    of (stage, n, k) (:attr:`evaluations` counts them) and the pipeline term, which reads only
    whether the stage is first or last, its layers and their recomputed counts."""

    def __init__(
        self,
        stages: StageView,
        capacity: int,
        allocator_retries_ok: bool = False,
        max_bytes: int | None = None,
    ) -> None:
        self.stages = stages
        self.capacity = capacity
        """Bytes per GPU a stage may use (:func:`stage_capacity`)."""
        self.allocator_retries_ok = allocator_retries_ok
        """Whether the allocated peak alone must fit (:func:`model.terms.peak.fit_bytes`)."""
        self.max_bytes = max_bytes
        """The memory frontier's ε on every stage's peak, bytes per GPU (None: none)."""
        self.evaluations = 0
        self._memory: dict[tuple[int, int, int, int | None], StageMemory] = {}
        self._paced: dict[tuple[Any, ...], Paced] = {}

    def memory(self, stage: int, n: int, k: int, start: int | None = None) -> StageMemory:
        """:meth:`StageView.memory`, evaluated once."""
        key = (stage, n, k, start)
        if key not in self._memory:
            self.evaluations += 1
            self._memory[key] = self.stages.memory(stage, n, k, start)
        return self._memory[key]

    def fits(self, stage: int, n: int, k: int, start: int | None = None) -> bool:
        """Whether the stage fits (:func:`stage_within`: its fit figure within
        :attr:`capacity`, its peak within :attr:`max_bytes`)."""
        mem = self.memory(stage, n, k, start)
        return stage_within(mem, self.capacity, self.max_bytes, self.allocator_retries_ok)

    def paced(
        self, stage: int, n: int, k: int, mode: Recompute | None = None, start: int | None = None
    ) -> Paced:
        """:meth:`StageView.paced`, evaluated once per first/last position, start, n, k and
        mode."""
        key = (stage == 0, stage == self.stages.layout.pp - 1, start, n, k, mode)
        if key not in self._paced:
            self._paced[key] = self.stages.paced(stage, n, k, mode, start)
        return self._paced[key]


def time_caps(costs: StageCosts, cap_ns: int | None, rest_lower_ns: int) -> list[int]:
    """Per stage, the most layers it can take below ``cap_ns`` by time alone (nothing
    recomputed, memory ignored; −1 when none), wherever it starts within the period of spans
    (:meth:`StageView.starts`): once the stages built and these caps of the others cannot hold L
    layers, no split beats ``cap_ns``."""
    sc = costs.stages
    return [
        max((n for start in sc.starts(i) for n in sc.counts(i, start)
             if cap_ns is None or costs.paced(i, n, 0, None, start)[2] + rest_lower_ns < cap_ns),
            default=-1)
        for i in range(sc.layout.pp)
    ]  # fmt: skip


def least_fitting(
    costs: StageCosts, stage: int, n: int, least: int, start: int | None = None
) -> int | None:
    """The least k (0 … ⌈n/v⌉ recomputed per model chunk, :func:`most_recomputed`) whose peak
    fits with ``n`` layers on ``stage`` after ``start`` layers, None when not even the most
    fits. One more layer never holds less (the stage's n − 1 layers are among its n: the first
    and the middle stages' from the same start, the last stage's to the same end), so it is at
    least ``least`` (n − 1's): tried first, then the most, then the least above it by
    bisection."""
    top = most_recomputed(n, costs.stages.layout.virtual_stages, costs.stages.recomputes)
    if costs.fits(stage, n, least, start):
        return least
    if least >= top or not costs.fits(stage, n, top, start):
        return None
    lo, hi = least + 1, top  # hi fits, lo − 1 does not
    while lo < hi:
        mid = (lo + hi) // 2
        if costs.fits(stage, n, mid, start):
            hi = mid
        else:
            lo = mid + 1
    return hi


def stage_rows(
    costs: StageCosts,
    stage: int,
    cap_ns: int | None,
    rest_lower_ns: int,
    deadline: float | None,
) -> tuple[StageOption, ...]:
    """``stage``'s rows of :func:`build_stage_tables`: per place it can start within the
    period of spans (:meth:`StageView.starts`) and layer count n, the least k that fits
    (:func:`least_fitting`) and its figures, below ``cap_ns`` with ``rest_lower_ns``; each scan
    stops at the first n that does not fit fully recomputed or whose stage alone reaches the
    cap.

    Raises
    ------
    OutOfTime
        ``deadline`` (:func:`time.perf_counter`) passed, or the search was interrupted
        (:func:`optimizer.solver.interrupted`), checked before each n.
    """
    sc = costs.stages
    found = []
    scale = sc.params_scale()
    for start in sc.starts(stage):  # one scan per place in the period (one at P = 1)
        least = 0
        for n in sc.counts(stage, start):
            if (deadline is not None and time.perf_counter() >= deadline) or interrupted():
                raise OutOfTime(
                    f"per_stage: stage tables of {sc.layout} cut short by the time limit or Ctrl-C"
                )
            bare = costs.paced(stage, n, 0, Recompute.NONE, start)[1]
            if (
                cap_ns is not None
                and costs.paced(stage, n, 0, None, start)[2] + rest_lower_ns >= cap_ns
            ):
                break  # k = 0 is this n's fastest, and more layers are slower
            k = least_fitting(costs, stage, n, least, start)
            if k is None:
                break
            least = k
            paced_ns, t, least_ns = costs.paced(stage, n, k, None, start)
            if cap_ns is not None and least_ns + rest_lower_ns >= cap_ns:
                continue
            mem = costs.memory(stage, n, k, start)
            dense, experts = (x * scale for x in (mem.dense_params, mem.expert_params))
            if dense.denominator != 1 or experts.denominator != 1:  # pragma: no cover
                raise AssertionError(
                    f"stage parameters × lcm(tp, etp·ep) not whole: {dense, experts}"
                )
            fw, bw = (math.floor(x * 1e9 * PASS_UNITS) for x in stage_passes(t, bare))
            chunks = sc.chunks(stage, n, k, start) if sc.layout.virtual_stages > 1 else ((), ())
            found.append(
                StageOption(
                    n, k, paced_ns, round(bare * 1e9), int(dense), math.ceil(mem.total_bytes),
                    sc.residue(stage, start, n), fw, bw, int(experts), sc.held(stage, n, start),
                    *chunks,
                )
            )  # fmt: skip
    return tuple(found)
