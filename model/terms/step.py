"""Step-time terms: the pipeline term (``t1``, what recomputation changes) and the data-parallel
term (``t2``, what the ZeRO stage changes), under either time model.

``step_s = t1 + t2``:

* ``t1`` = :func:`pipeline_term` — ``m·t_mb·(1 + bubble_ratio)``, ``t_mb`` the slowest stage's
  micro-batch, plus the exposed pipeline messages (and, under the single model, the exposed tp,
  cp and ep traffic) and activation offload's exposed copies. Reads the shape and recompute, not
  the ZeRO stage.
* ``t2`` = :func:`dp_term` — the exposed data-parallel traffic, the optimizer step and the
  gradient accumulation inside the backward passes (roofline) and an offload's host transfers
  and CPU step. Reads the shape and the ZeRO stage, not
  recompute: its overlap window is one micro-batch on the slowest stage *without* recomputation.

The roofline model (:mod:`model.terms.roofline`) times every operation and collective by its
mechanism; the single model (:mod:`model.timing`) is one kernel efficiency for all FLOPs and one
overlap fraction per axis, and the ``textbook`` profile always uses it. The search tabulates
``t1`` per (shape, recompute) and ``t2`` per (shape, ZeRO stage), rounded to whole nanoseconds
(:func:`objective_ns`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from trainplan.model.busiest_experts import BUSIEST_SCOPE, busiest_expert_flops
from trainplan.model.errors import InputError
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Recompute
from trainplan.model.moe_dispatch import dispatch_time_share
from trainplan.model.moe_run import DROPLESS
from trainplan.model.packing import Documents
from trainplan.model.pipeline import SPLIT_BACKWARD, Schedule, bubble_ratio
from trainplan.model.precision import linear_speedup
from trainplan.model.recompute_ops import layout_plan, plan_recomputes_core
from trainplan.model.schedule_cost import (
    OVERLAPS_FORWARD_BACKWARD,
    dualpipe_block,
    pass_times,
    split_span,
)
from trainplan.model.specs import Architecture
from trainplan.model.split import stage_layers
from trainplan.model.terms.activation_fields import (
    LAYER_FIELDS,
    mirror_layer_counts,
    output_stage,
    stage_layer_counts,
)
from trainplan.model.terms.dp_time import dp_group_times, grad_accumulation_term
from trainplan.model.terms.fields import Context, Fields, stage_max
from trainplan.model.terms.offload_time import activation_offload_term, offload_term
from trainplan.model.terms.optimizer_time import optimizer_seconds_term
from trainplan.model.terms.pipeline_span import classic_span
from trainplan.model.terms.roofline import (
    ep_dispatch_fields,
    ep_sm_share,
    pair_reduce_seconds,
    pp_seconds_term,
    slowest_microbatch,
    window_seconds,
)
from trainplan.model.terms.traffic import (
    cp_traffic_bytes,
    dp_group_traffic_bytes,
    ep_traffic_bytes,
    most_layers,
    pair_reduce_bytes,
    pp_traffic_bytes,
    single_axis_seconds,
    tp_traffic_bytes,
)
from trainplan.model.timing import (
    CostOptions,
    TimeModel,
    core_passes,
    layers_core_flops,
    microbatch_flop_terms,
    stage_peak_seconds,
)
from trainplan.model.xp import as_float, is_array, maximum, minimum, namespace, where

__all__ = [
    "PipelineTime",
    "DpTime",
    "uses_roofline",
    "pipeline_seconds",
    "single_microbatch_seconds",
    "ScheduleSpan",
    "schedule_span",
    "pipeline_term",
    "dp_term",
    "offload_layer_forward_s",
    "objective_ns",
    "stage_core_flops",
    "single_axis_seconds",
]

CACHE = 4096


def uses_roofline(options: CostOptions, framework: Framework, device: DeviceSpec) -> bool:
    """Whether layouts of ``framework`` are timed by the roofline model: asked for (the
    default), a physical framework profile (``textbook`` keeps the single-efficiency model) and
    an accelerator with a known HBM bandwidth."""
    return (
        options.time_model is TimeModel.ROOFLINE
        and Framework(framework).physical
        and device.hbm_bytes_per_s is not None
    )


@dataclass(frozen=True, slots=True)
class PipelineTime:
    """``t1`` and its parts (seconds; scalars for one layout, columns for many)."""

    compute_s: Any
    """Ideal compute: m × the slowest stage's micro-batch of operations (the roofline model's
    exposed tp, cp and ep collectives are not in it)."""
    microbatch_s: Any
    """t_mb: the slowest stage's micro-batch (roofline: with its exposed tp/cp/ep)."""
    bubble_s: Any
    """m × t_mb × bubble_ratio."""
    axes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """Per axis (tp, cp, ep, pp): (seconds of its collectives in a step if nothing overlapped
    them, of them exposed)."""
    activation_offload_s: Any = 0.0
    """What activation offload's copies leave exposed."""
    total_s: Any = 0.0
    """t1: ``m·t_mb·(1 + bubble_ratio)`` + exposed pp (single model: + exposed tp, cp, ep) +
    activation offload."""
    pair_reduce_s: Any = 0.0
    """Of the exposed pp seconds, the pair all-reduce after the flush (the tied embedding's or
    DualPipe's mirror ranks', :func:`model.terms.traffic.pair_reduce_bytes`): backward-only."""


@dataclass(frozen=True, slots=True)
class DpTime:
    """``t2`` and its parts (seconds)."""

    seconds: Any
    """The data-parallel collectives in a step if nothing overlapped them."""
    exposed_s: Any
    optimizer_s: Any
    """The optimizer step on the GPU (roofline model; 0 under the single model)."""
    offload_s: Any
    """Host-link transfers and the CPU optimizer step of an offload, all exposed."""
    expert: Any = (0.0, 0.0)
    """Of (seconds, exposed_s), the routed experts' on the expert data-parallel group."""
    accumulate_s: Any = 0.0
    """Gradient accumulation inside the backward passes on the critical path (roofline model;
    :func:`model.terms.dp_time.grad_accumulation_term`)."""

    @property
    def axes(self) -> dict[str, tuple[Any, Any]]:
        """(seconds, exposed) of the traffic table's dp row (the dense group) and edp row."""
        s, x = self.expert
        return {"dp": (self.seconds - s, self.exposed_s - x), "edp": self.expert}

    @property
    def total_s(self) -> Any:
        """t2: exposed dp + optimizer step + offload + gradient accumulation."""
        return self.exposed_s + self.optimizer_s + self.offload_s + self.accumulate_s


def pipeline_seconds(m: Any, microbatch_s: Any, pp: Any, v: Any) -> Any:
    """``m·t_mb·(1 + bubble_ratio)``: the slowest stage paces every micro-batch, and the bubble
    is ``(pp − 1)/(v·m)`` of the ideal compute (Narayanan et al. 2021 §2.2) — every stage and
    chunk of equal time; the evaluator's term runs the schedule's order on the stages and
    chunks as timed (:func:`model.terms.pipeline_span.classic_span`), and the per-stage search
    ranks splits by this closed form (:mod:`optimizer.stage_solve`)."""
    return m * microbatch_s * (1 + as_float(bubble_ratio(pp, m, v)))


@lru_cache(maxsize=CACHE)
def stage_core_flops(
    arch: Architecture,
    pp: int,
    v: int,
    seq_len: int,
    causal: bool,
    uneven: bool = True,
    sizes: tuple[int, ...] | None = None,
    docs: Documents | None = None,
    schedule: Any = None,
) -> tuple[int, ...]:
    """Forward FLOPs of each pipeline stage's attention cores for one sequence
    (:func:`model.timing.layers_core_flops`; a pack of ``docs`` under document masking):
    stages differ when layers' spans do (Gemma 3's global layers, Llama 4's unchunked ones)."""
    return tuple(
        layers_core_flops(arch, layers, seq_len, causal, docs)
        for layers in stage_layers(arch, pp, v, uneven, sizes, schedule)
    )


def _core(
    arch: Architecture, s: int, causal: bool, docs: Documents | None, *key: Any
) -> tuple[int, ...]:
    pp, v, uneven, sizes, schedule = key
    return stage_core_flops(arch, pp, v, s, causal, uneven, sizes, docs, schedule)


def _flop_terms(
    arch: Architecture, s: int, causal: bool, mode: Recompute, plan: Any, b: int
) -> Any:
    return microbatch_flop_terms(arch, s, int(b), mode, causal, *plan)


def _mirror_core(
    arch: Architecture, s: int, causal: bool, docs: Documents | None, *key: Any
) -> tuple[int, ...]:
    return _core(arch, s, causal, docs, *key)[::-1]


def single_microbatch_seconds(c: Context, f: Fields, recompute: Recompute | None = None) -> Any:
    """Seconds of one micro-batch's forward and backward (and recomputation) on the slowest
    pipeline stage, on one GPU, under the single model: its peak-seconds
    (:func:`model.timing.stage_peak_seconds`) ÷ (tp·cp) ÷ the dense peak, a MoE layer's routed
    experts at the busiest expert-parallel rank's rows (:func:`model.busiest_experts.
    busiest_expert_flops`: imbalance and capacity padding, the roofline model's rule);
    ``recompute`` overrides the layout's mode."""
    arch, t, o, d = c.arch, c.training, c.options, c.gpu
    mode = f.recompute if recompute is None else recompute
    causal = o.causal_attention_flops
    plan = layout_plan(Framework(f.framework), mode, t)  # framework: a control field
    terms = f.lookup(_flop_terms, (arch, t.seq_len, causal, mode, plan), "micro_batch_size")
    if arch.moe is not None and t.moe_run != DROPLESS:  # the busiest ep rank's expert GEMMs
        again = mode in (Recompute.FULL, Recompute.SQRT) or (
            mode is Recompute.SELECTIVE and "moe" in plan[0]
        )
        busiest = (arch, t.seq_len, t.moe_run, again)
        fwd, rec = f.lookup(busiest_expert_flops, busiest, *BUSIEST_SCOPE)
        terms = (terms[0], terms[1] + fwd, terms[2], terms[3], terms[4] + rec)
    passes = core_passes(mode, plan_recomputes_core(arch, plan[0]))
    separate = o.attention_efficiency if t.flash_attention else None
    speedup = linear_speedup(t.precision, d)

    def seconds(g: Fields, counts: Any, cores: Any, last: Any) -> Any:
        layers, moe = g.per_stage(counts, (arch,), *LAYER_FIELDS)
        core = g.per_stage(cores, (arch, t.seq_len, causal, t.documents), *LAYER_FIELDS)
        return stage_peak_seconds(
            terms, layers - moe, moe, last, g.micro_batch_size * core, passes,
            o.kernel_efficiency, separate, speedup,
        )  # fmt: skip

    def stage(g: Fields) -> Any:
        own = seconds(g, stage_layer_counts, _core, output_stage(g))
        if not dualpipe:
            return own
        # a DualPipe rank runs its own stage for one direction's m/2 micro-batches and the
        # mirror stage for the other's: its chunk takes the mean of the two
        mirror = seconds(g, mirror_layer_counts, _mirror_core, g.stage == 0)
        return where(g.schedule == Schedule.DUALPIPE, (own + mirror) / 2, own)

    on = f.schedule == Schedule.DUALPIPE
    dualpipe = bool(namespace(on).any(on)) if is_array(on) else bool(on)
    return stage_max(f.stages(stage)) / (f.tp * f.cp) / d.peak_flops_per_s


def offload_layer_forward_s(c: Context, f: Fields) -> Any:
    """One layer's forward as activation offload's copies see it, the ``t/3`` of
    :func:`model.activation_offload.activation_offload_seconds`: :func:`pipeline_term`'s
    ``t_mb`` (by the time model in force) over the most layers on a stage, a third of it —
    with the launch order kept (:func:`model.launch_order.launch_order_kept`): the activations
    term reads no ZeRO stage (its search table is per recompute mode), and where the order is
    not kept the backward's tp and cp collectives wait longer, which leaves the copies more
    time: the kept order's shorter figure queues at least as many bytes."""
    roofline = uses_roofline(c.options, f.framework, c.gpu)
    t_mb = slowest_microbatch(c, f, kept=True)[0] if roofline else single_microbatch_seconds(c, f)
    return t_mb / maximum(most_layers(c, f)[0], 1) / 3


@dataclass(frozen=True, slots=True)
class ScheduleSpan:
    """The pipeline section of a step under the layout's schedule (seconds; scalars or
    columns)."""

    seconds: Any
    """From the first forward to the last pass's end: the passes and the schedule's idle time."""
    busy_s: Any
    """Of it, the slowest rank's passes (``m·t_mb`` less what overlapped blocks hide)."""
    hidden_s: Any = 0.0
    """Exposed communication of ``t_mb`` that overlapped blocks hide (a step's worth)."""
    paced_s: Any = 0.0
    """Communication the overlapped blocks leave longer than their computation (a step's
    worth), added after the span."""
    overlapped: bool = False
    """Whether the schedule's F&B blocks overlap here (DualPipe, DualPipeV under a framework of
    :data:`model.schedule_cost.OVERLAPS_FORWARD_BACKWARD`)."""
    contention_s: Any = 0.0
    """Of :attr:`seconds`, what the dispatcher's SMs cost the overlapped blocks' computation
    (:mod:`model.comm_sms`): the span with it less the span without it."""


def schedule_span(
    c: Context,
    f: Fields,
    t_mb: Any,
    t_plain: Any,
    exposed_mb: Any,
    hideable_mb: Any,
    ep_mb: Any = 0.0,
    roofline: bool = False,
) -> ScheduleSpan:
    """The pipeline section of a step (:class:`ScheduleSpan`) under the layout's schedule, from
    the slowest stage's micro-batch ``t_mb`` and the same without recomputation ``t_plain``
    (seconds): for GPipe, 1F1B and interleaved 1F1B ``m·t_mb`` plus the bubble the schedule's
    own order leaves on the stages or model chunks as timed (:func:`model.terms.pipeline_span.
    classic_span`, by the roofline model's layer kinds when ``roofline``; the closed form
    ``m·t_mb·(1 + bubble_ratio)``, Narayanan et al. 2021 §2.2, where they are alike); for a split-backward schedule its pass times
    (:func:`model.schedule_cost.pass_times`) through :func:`model.schedule_cost.split_span`.
    DualPipe's and DualPipeV's overlapped block, where the framework overlaps it, hides the
    communication of two chunks behind their computation
    (:func:`model.schedule_cost.dualpipe_block`): ``exposed_mb`` the seconds of it already in
    ``t_mb``, ``hideable_mb`` all of it per micro-batch — the expert all-to-all
    (:func:`model.terms.roofline.slowest_microbatch`'s ``ep`` parts, from
    :func:`model.step_time.kind_parts`; the single model's
    :func:`model.terms.traffic.ep_traffic_bytes`) and, under the single model, the pipeline
    messages; ``ep_mb`` the expert all-to-all's share of it, whose dispatcher holds
    :func:`model.terms.roofline.ep_sm_share` of the SMs while the block computes beside it
    (:func:`model.schedule_cost.dualpipe_block`'s ``contention``; reported as
    :attr:`ScheduleSpan.contention_s`). Control: schedule, framework."""
    m, pp, v = f.m, f.pp, f.virtual_stages
    sched = Schedule(f.schedule)
    if sched not in SPLIT_BACKWARD:
        return ScheduleSpan(classic_span(c, f, t_mb, t_plain, roofline), m * t_mb)
    t_f, t_b, t_w = pass_times(t_mb, t_plain, v)
    overlapped = (
        sched in (Schedule.DUALPIPE, Schedule.DUALPIPE_V)
        and str(f.framework) in OVERLAPS_FORWARD_BACKWARD
    )
    if not overlapped:
        busy = m * t_mb
        return ScheduleSpan(maximum(split_span(sched, pp, m, t_f, t_b, t_w), busy), busy)
    serial = t_f + t_b + t_w
    block = dualpipe_block(t_f, t_b, t_w, exposed_mb / v, hideable_mb / v)
    timed = minimum(block, serial)  # the timeline's block; communication beyond it paces after
    hidden, paced = m * v * (serial - timed), m * v * maximum(block - serial, 0.0)
    # no shorter than the rank's own passes: the timeline's pass-time ratios are rounded
    # (:data:`model.schedule_cost.RATIO_DENOMINATOR`), which could leave a negative bubble
    span = maximum(split_span(sched, pp, m, t_f, t_b, t_w, timed), m * t_mb - hidden)
    share = ep_sm_share(c, f)
    if not is_array(share) and not share:
        return ScheduleSpan(span, m * t_mb - hidden, hidden, paced, True)
    contended = dualpipe_block(t_f, t_b, t_w, exposed_mb / v, hideable_mb / v, share * ep_mb / v)
    slower = maximum(split_span(sched, pp, m, t_f, t_b, t_w, minimum(contended, serial)), span)
    paced = m * v * maximum(contended - serial, 0.0)
    return ScheduleSpan(slower, m * t_mb - hidden, hidden, paced, True, slower - span)


def _share(c: Context, f: Fields) -> Any:
    """:func:`model.moe_dispatch.dispatch_time_share` of the layout: of the bytes the traffic
    table counts (:func:`model.terms.traffic.ep_traffic_bytes`, DeepEP's and HybridEP's sends
    and forwards), those the link rule times (across NVLink domains the scale-out share); 1 for
    the plain all-to-all and within one domain."""
    run, moe = c.training.moe_run, c.arch.moe
    if moe is None or not run.dispatcher.deduplicates:
        return 1.0
    g, _, _ = ep_dispatch_fields(c, f)
    args = (run, moe.num_experts, moe.experts_per_token)
    return as_float(f.lookup_values(dispatch_time_share, args, f.ep, g))


def pipeline_term(c: Context, f: Fields) -> PipelineTime:
    """``t1`` of the layout (:class:`PipelineTime`), by the time model in force
    (:func:`uses_roofline`). Scope: every shape field and recompute; not zero_stage. Control:
    pp, framework, recompute.

    Raises
    ------
    InputError
        Per-stage recomputation counts under the single model; activation offload without a
        host-link figure.
    """
    m = f.m
    if uses_roofline(c.options, f.framework, c.gpu):
        t_mb, parts = slowest_microbatch(c, f)
        act = activation_offload_term(c, f, t_mb)
        plain = t_mb if f.recompute is Recompute.NONE else window_seconds(c, f)
        pp_total, pp_s = pp_seconds_term(c, f, plain)
        axes = {a: (m * parts[k + 3], m * parts[k]) for k, a in enumerate(("tp", "cp", "ep"), 1)}
        axes["pp"] = (pp_total, pp_s)
        span = schedule_span(c, f, t_mb, plain, parts[3], parts[6], parts[6], True)
        ep_total, ep_exposed = axes["ep"]
        axes["ep"] = (ep_total, ep_exposed - span.hidden_s + span.paced_s + span.contention_s)
        return PipelineTime(
            m * parts[0], t_mb, span.seconds - span.busy_s - span.contention_s, axes, act,
            span.seconds + span.paced_s + pp_s + act, pair_reduce_seconds(c, f),
        )  # fmt: skip
    if f.recompute_layers is not None:
        raise InputError(
            "recompute_layers: per-stage recomputation is timed by the roofline model only "
            "(`time_model` roofline, a physical framework profile, an accelerator with its HBM "
            "bandwidth)"
        )
    t_mb = single_microbatch_seconds(c, f)
    window = (
        t_mb if f.recompute is Recompute.NONE else single_microbatch_seconds(c, f, Recompute.NONE)
    )
    compute = m * t_mb
    tp_total, tp_hidden = tp_traffic_bytes(c, f)
    axes = {
        "tp": single_axis_seconds(c, f, "tp", tp_total, tp_hidden, 0, window),
        "cp": single_axis_seconds(c, f, "cp", cp_traffic_bytes(c, f), 0, 0, window),
        "ep": single_axis_seconds(c, f, "ep", ep_traffic_bytes(c, f) * _share(c, f), 0, 0, window),
        "pp": single_axis_seconds(c, f, "pp", pp_traffic_bytes(c, f), 0, 0, window),
    }
    # the single model's micro-batch holds no communication: an overlapped block hides the ep
    # and pp messages of its two chunks whole (DeepSeek-V3 report §3.2.1), not the pair
    # all-reduce after the flush (pair_reduce_bytes: DualPipe's mirror stages), which waits
    ep_mb, pair = (
        axes["ep"][0] / m,
        single_axis_seconds(c, f, "pp", pair_reduce_bytes(c, f), 0, 0, window)[0],
    )
    span = schedule_span(c, f, t_mb, window, 0.0, ep_mb + (axes["pp"][0] - pair) / m, ep_mb)
    if span.overlapped:
        axes["ep"] = (axes["ep"][0], span.paced_s + span.contention_s)
        axes["pp"] = (axes["pp"][0], pair)
    other = axes["tp"][1] + axes["cp"][1] + axes["ep"][1] + axes["pp"][1]
    act = activation_offload_term(c, f, t_mb)
    passes = span.seconds - span.contention_s  # the contention is counted in ep's exposed part
    return PipelineTime(compute, t_mb, passes - span.busy_s, axes, act, passes + other + act, pair)


def dp_term(c: Context, f: Fields) -> DpTime:
    """``t2`` of the layout (:class:`DpTime`), by the time model in force.

    Scope: every shape field and zero_stage; not recompute. Control: pp, framework, zero_stage.

    Raises
    ------
    InputError
        Offload on a device without host-link or host-memory figures.
    """
    accumulate = 0.0
    if uses_roofline(c.options, f.framework, c.gpu):
        dense, experts = dp_group_times(c, f, window_seconds(c, f))
        optimizer = optimizer_seconds_term(c, f)
        accumulate = grad_accumulation_term(c, f)
    else:  # each group's bytes on its own link (model.terms.traffic.dp_group_traffic_bytes)
        window = single_microbatch_seconds(c, f, Recompute.NONE)
        (d_total, d_mb), (e_total, e_mb) = dp_group_traffic_bytes(c, f)
        dense = single_axis_seconds(c, f, "dp", d_total, 0, d_mb, window)
        experts, optimizer = single_axis_seconds(c, f, "edp", e_total, 0, e_mb, window), 0.0
    seconds, exposed = dense[0] + experts[0], dense[1] + experts[1]
    return DpTime(seconds, exposed, optimizer, offload_term(c, f), experts, accumulate)


def objective_ns(t1_s: Any, t2_s: Any) -> tuple[Any, Any]:
    """The search's two objective terms in whole nanoseconds (rounded to nearest, halves to
    even): (t1, t2). The solver minimises their sum."""
    return _ns(t1_s), _ns(t2_s)


def _ns(seconds: Any) -> Any:
    if isinstance(seconds, float):
        return round(seconds * 1e9)
    return (seconds * 1e9).__array_namespace__().round(seconds * 1e9)
