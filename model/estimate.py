"""``evaluate()``: one layout of one model on one accelerator → an :class:`Estimate`.

The evaluator sums the cost model's named terms (:mod:`model.terms`) on one layout, exactly:
each pipeline stage's memory (:func:`model.terms.peak.stage_memory_term`), each axis's traffic
(:func:`model.terms.traffic.axis_traffic`), and the step's two time terms
(:func:`model.terms.step.pipeline_term`, :func:`model.terms.step.dp_term`). The search's tables
evaluate the same terms over columns of candidates (:mod:`optimizer.tables`) and re-check every
answer with ``evaluate()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from trainplan.model.comm import AxisTraffic
from trainplan.model.cp_rules import window_note
from trainplan.model.flops import StepFlops, step_flops, utilisation
from trainplan.model.frameworks import zero_stages_for
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Layout, Recompute, validate
from trainplan.model.model_spec import ModelSpec
from trainplan.model.offload import NO_OFFLOAD, host_rates
from trainplan.model.pipeline_report import reported_bubble
from trainplan.model.recompute_counts import recomputed_in_chunks
from trainplan.model.recompute_ops import recompute_flops_of
from trainplan.model.segments import segment_notes
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.split import stage_chunks
from trainplan.model.terms.activation_fields import padded_vocab_of
from trainplan.model.terms.ep_link import ep_rdma
from trainplan.model.terms.fields import INSIDE_DOMAIN, AxisLinkLike, Context, LayoutFields
from trainplan.model.terms.forward_gather import forward_terms
from trainplan.model.terms.optimizer_time import muon_axis_traffic, muon_gather_seconds
from trainplan.model.terms.peak import StageMemory, busiest_stage, host_fits, stage_memory_term
from trainplan.model.terms.pipeline_span import stage_seconds
from trainplan.model.terms.sm_shares import layout_sm_shares
from trainplan.model.terms.split_key import SplitKey
from trainplan.model.terms.stage_params import stage_params_per_gpu
from trainplan.model.terms.state import model_state_term
from trainplan.model.terms.step import (
    dp_term,
    pipeline_term,
    single_axis_seconds,
    single_microbatch_seconds,
    uses_roofline,
)
from trainplan.model.terms.step import objective_ns as _objective_ns
from trainplan.model.terms.traffic import axis_traffic, dp_traffic_bytes
from trainplan.model.timing import CostOptions, TimeModel, axis_overlap
from trainplan.model.vocab import vocab_multiple_for

__all__ = [
    "AxisLinkLike",
    "StageMemory",
    "TrafficRow",
    "Estimate",
    "evaluate",
    "recomputed_by_stage",
    "recomputed_layers",
    "ZeroRow",
    "stage_memory",
    "stage_params_per_gpu",
    "TimeTerms",
    "host_rates",
    "objective_ns",
    "evaluation_context",
]


@dataclass(frozen=True, slots=True)
class ZeroRow:
    zero_stage: int
    model_state_bytes: Fraction
    reduction: Fraction
    """Model state at ZeRO-0 over model state at this stage."""
    dp_bytes_per_step: Fraction


@dataclass(frozen=True, slots=True)
class TrafficRow:
    traffic: AxisTraffic
    link: str
    """nvlink, scale-out or none."""
    bandwidth_bytes_per_s: float | None
    seconds: float | None
    """bytes / bandwidth: the time if nothing overlapped it."""
    overlap: float
    exposed_seconds: float | None
    optimizer_step: bool = False
    """Sent during the optimizer step (Muon's whole-matrix gathers,
    :func:`model.terms.roofline.muon_axis_traffic`): its time is in
    :attr:`TimeTerms.optimizer_s`, not in :attr:`Estimate.exposed_comm_s`."""


@dataclass(frozen=True, slots=True)
class TimeTerms:
    """Step time split by what it reads: ``step_s = compute_and_pipeline_s + exposed_dp_s +
    optimizer_s + offload_s + grad_accumulation_s``."""

    compute_s: float
    """Ideal compute: m × the slowest stage's micro-batch of operations (the roofline model's
    exposed tp, cp and ep collectives are not in it; the single model has none)."""
    compute_and_pipeline_s: float
    """m × the slowest stage's micro-batch × (1 + bubble_ratio) + exposed tp, cp, ep, pp traffic
    (reads shape and recompute, not zero_stage): ``t1`` (:func:`model.terms.step.pipeline_term`)."""
    exposed_dp_s: float
    """Exposed data-parallel communication (reads the shape and zero_stage, not recompute)."""
    bubble_s: float = 0.0
    """The pipeline bubble: m × the slowest stage's micro-batch × bubble_ratio."""
    optimizer_s: float = 0.0
    """The optimizer step on the GPU (roofline model; reads the shape and zero_stage)."""
    offload_s: float = 0.0
    """Host-link transfers and the CPU optimizer step of an offload, all exposed (reads the
    shape and zero_stage; :func:`model.offload.offload_seconds`)."""
    activation_offload_s: float = 0.0
    """What activation offload's copies leave exposed; already in ``compute_and_pipeline_s``."""
    forward_gather_s: float = 0.0
    """Exposed all-gathers of a forward-only pass (:mod:`model.terms.forward_gather`); not summed."""
    grad_accumulation_s: float = 0.0
    """In-backward gradient accumulation (:func:`model.terms.dp_time.grad_accumulation_term`)."""
    sm_shares: tuple[tuple[str, float], ...] = ()
    """``(group, φ)`` of its overlapped NCCL collectives (:func:`model.terms.sm_shares.layout_sm_shares`)."""
    busy_s: float = 0.0
    """m × the slowest stage's micro-batch: the pipeline section without its bubble."""
    stage_s: tuple[tuple[float, float], ...] = ()
    """(forward, backward) s of one micro-batch a stage (:func:`model.terms.pipeline_span.stage_seconds`)."""
    forward_pass_s: float = 0.0
    """A forward-only pass's pipeline, s (:func:`model.terms.forward_gather.forward_pass_term`)."""

    @property
    def step_s(self) -> float:
        t1, accumulate = self.compute_and_pipeline_s, self.grad_accumulation_s
        return t1 + self.exposed_dp_s + self.optimizer_s + self.offload_s + accumulate


@dataclass(frozen=True, slots=True)
class Estimate:
    """Everything ``evaluate()`` knows about one layout (its JSON form is the interface's)."""

    model: ModelSpec
    training: TrainingSpec
    layout: Layout
    device: DeviceSpec
    options: CostOptions
    num_params: int
    num_active_params: int
    num_microbatches: int
    stages: tuple[StageMemory, ...]
    busiest: int
    """Index of the stage with the most bytes."""
    zero_table: tuple[ZeroRow, ...]
    traffic: tuple[TrafficRow, ...]
    flops: StepFlops | None
    compute_s: float | None
    """Ideal compute time of the step (m × slowest stage's micro-batch)."""
    step_s: float | None
    notes: tuple[str, ...]
    time_terms: TimeTerms | None = None
    padded_vocab_size: int | None = None
    """The vocabulary rows the tp ranks hold together (:func:`model.vocab.padded_vocab`); None
    for a size-only model."""

    @property
    def peak(self) -> StageMemory:
        return self.stages[self.busiest]

    @property
    def total_bytes(self) -> Fraction:
        return self.peak.total_bytes

    @property
    def capacity_bytes(self) -> int:
        """What the layout may use of a GPU: the device's HBM less the runtime reserve under a
        physical profile, the vendor's stated capacity under ``textbook``
        (:meth:`DeviceSpec.usable_bytes`)."""
        return self.device.usable_bytes(self.layout.framework.physical)

    @property
    def host_bytes(self) -> Fraction:
        """Bytes on one GPU's share of the host memory (offload: optimizer state, parameters,
        and activations), the most of any stage."""
        return max(s.host_bytes for s in self.stages)

    @property
    def host_fits(self) -> bool | None:
        """Whether :attr:`host_bytes` fits the device's host memory per GPU; None when that is
        unknown (and something is offloaded)."""
        return host_fits(self.host_bytes, self.device)

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes and self.host_fits is not False

    @property
    def bubble_fraction(self) -> Fraction:
        """Idle share of the pipeline section: at pp > 1 under GPipe and 1F1B (the order run on
        the stages as timed, :mod:`model.pipeline_onef`), interleaved 1F1B (Megatron-Core's
        order on the model chunks as timed, :mod:`model.pipeline_uneven`) or a split-backward
        schedule, the bubble over the section's time as the cost model times it
        (:func:`model.terms.step.schedule_span`), to 1/10⁶; else the closed form."""
        return self._bubble()[0]

    @property
    def bubble_ratio(self) -> Fraction:
        """Bubble over the micro-batches' time, m × the slowest stage's micro-batch (its
        operations + exposed tp, cp, ep collectives: :attr:`TimeTerms.bubble_s` over
        ``compute_s`` + those; as :attr:`bubble_fraction`)."""
        return self._bubble()[1]

    def _bubble(self) -> tuple[Fraction, Fraction]:
        lay, m = self.layout, self.num_microbatches
        return reported_bubble(lay.schedule, m, lay.pp, lay.virtual_stages, self.time_terms)

    @property
    def exposed_comm_s(self) -> float | None:
        times = [row.exposed_seconds for row in self.traffic if not row.optimizer_step]
        return None if any(t is None for t in times) else sum(t for t in times if t is not None)

    def _rate(self, flops: int | None) -> float | None:
        if self.step_s is None or flops is None:
            return None
        return utilisation(flops, self.step_s, self.layout.num_gpus, self.device.peak_flops_per_s)

    @property
    def mfu(self) -> float | None:
        return self._rate(self.flops.model_flops if self.flops else None)

    @property
    def hfu(self) -> float | None:
        return self._rate(self.flops.hardware_flops if self.flops else None)

    @property
    def mfu_pack(self) -> float | None:
        """With packed documents, the MFU of a counter that takes each pack for one sequence
        (its s² attention, :attr:`model.flops.StepFlops.pack_model_flops`); None otherwise."""
        return self._rate(self.flops.pack_model_flops if self.flops else None)


def evaluation_context(
    model: ModelSpec,
    training: TrainingSpec,
    device: DeviceSpec,
    options: CostOptions | None = None,
    vocab_multiple: int | None = None,
) -> Context:
    """The :class:`model.terms.fields.Context` the terms read for one evaluation."""
    return Context(model, training, device, options or CostOptions(), vocab_multiple)


def stage_memory(
    model: ModelSpec,
    training: TrainingSpec,
    layout: Layout,
    vocab_multiple: int | None = None,
    device: DeviceSpec | None = None,
    links: Mapping[str, AxisLinkLike] | None = INSIDE_DOMAIN,
    options: CostOptions | None = None,
) -> tuple[StageMemory, ...]:
    """Bytes on one GPU per pipeline stage (:func:`model.terms.peak.stage_memory_term`; ``links``:
    NCCL groups' links, None = every group inside one domain; ``options``: None = the defaults)."""
    c = Context(model, training, device, options or CostOptions(), vocab_multiple)
    f = LayoutFields(layout, training.global_batch_size, 0, links or INSIDE_DOMAIN)
    split = stage_params_per_gpu(SplitKey.of_layout(model, layout, vocab_multiple))
    return tuple(stage_memory_term(c, f.at(i), len(split[i][1])) for i in range(layout.pp))


def _zero_table(c: Context, f: Any) -> tuple[Any, ...]:
    """The model state of the busiest stage (``f``'s) under each ZeRO stage its framework runs
    at its pp, against its lowest (textbook: ZeRO-0, the ZeRO paper's baseline): the report's
    own term (:func:`model.terms.state.model_state_term`'s ``total_bytes``) at each stage, so
    the layout's own row is the report's model state (Muon's state and padding included). On
    the GPU without offload: the table compares the ZeRO stages themselves (an offload is beside
    it, ``memory.host_bytes``). Each row's data-parallel bytes are the traffic table's own term
    (:func:`model.terms.traffic.dp_traffic_bytes`, dense and routed experts together) at that
    stage, so the layout's own row is the sum of the ``dp`` and ``edp`` traffic rows."""
    layout, on_gpu = f.layout, replace(c, training=replace(c.training, offload=NO_OFFLOAD))
    stages = zero_stages_for(layout.framework, layout.pp)
    totals = [model_state_term(on_gpu, f.with_zero_stage(z)).total_bytes for z in stages]
    dp = [dp_traffic_bytes(c, f.with_zero_stage(z))[0] for z in stages]
    return tuple(
        ZeroRow(z, x, totals[0] / x if x else Fraction(1), t)
        for z, x, t in zip(stages, totals, dp, strict=True)
    )


def _row(
    c: Context,
    f: LayoutFields,
    t: AxisTraffic,
    links: Mapping[str, AxisLinkLike] | None,
    timed: tuple[Any, Any] | None,
    roofline: bool,
    window: float | None,
) -> TrafficRow:
    """One axis's traffic with its link and time: the time model's (``timed``: seconds if
    nothing overlapped, exposed; under the roofline model ``overlap`` becomes the share its
    mechanism hides) where the step is timed, else the single model's exposure
    over the link's bandwidth (``window``: one micro-batch without recomputation; None treats
    every micro-batch's collective like the last)."""
    overlap = axis_overlap(c.options.overlap, t.axis)
    link = None if links is None else links.get("dp_cp" if t.axis == "dp" else t.axis)
    if t.group_size == 1 or t.bytes_per_step == 0:
        return TrafficRow(t, "none", None, 0.0, overlap, 0.0)
    if link is None or link.bandwidth_bytes_per_s is None:
        return TrafficRow(t, "unknown", None, None, overlap, None)
    if timed is None:
        timed = single_axis_seconds(
            c, f, t.axis, t.bytes_per_step, t.hidden_bytes, t.microbatch_bytes, window
        )
    elif roofline:  # the share the mechanism hides
        overlap = 1 - timed[1] / timed[0] if timed[0] > 0 else 0.0
    seconds, exposed = timed
    kind, bandwidth = link.link, link.bandwidth_bytes_per_s
    if t.axis == "ep" and ep_rdma(c, f)[0]:  # DeepEP's hop between runs of 8: the NIC
        kind, bandwidth = "scale-out", float(ep_rdma(c, f)[1])
    return TrafficRow(t, kind, bandwidth, seconds, overlap, exposed)


def _muon_rows(
    c: Context, f: LayoutFields, links: Mapping[str, AxisLinkLike] | None
) -> tuple[TrafficRow, ...]:
    """The traffic rows of Muon's optimizer-step gathers (:func:`muon_axis_traffic`), timed by
    :func:`muon_gather_seconds` — the seconds the optimizer step already counts — all exposed."""
    if c.model.arch is None:
        return ()
    seconds = dict(zip(("tp", "dp"), muon_gather_seconds(c, f), strict=True)) if links else {}
    out = []
    for t in muon_axis_traffic(c, f):
        s = float(seconds.get(t.axis, 0.0))
        row = _row(c, f, t, links, (s, s), False, None)
        out.append(replace(row, overlap=0.0, optimizer_step=True))
    return tuple(out)


def _time(
    c: Context,
    f: LayoutFields,
    traffic: list[AxisTraffic],
    links: Mapping[str, AxisLinkLike] | None,
) -> tuple[tuple[TrafficRow, ...], TimeTerms | None]:
    """The traffic rows and the step's time terms (None without dimensions or a link figure of
    an axis with traffic)."""
    layout = f.layout
    arch = c.model.arch
    roofline = links is not None and uses_roofline(c.options, layout.framework, c.gpu)
    window = None
    if arch is not None and not roofline:
        window = single_microbatch_seconds(c, f, Recompute.NONE)
    plain = [_row(c, f, t, links, None, roofline, window) for t in traffic]
    if arch is None or any(r.exposed_seconds is None for r in plain):
        return tuple(plain) + _muon_rows(c, f, links), None
    if not roofline:  # the single model's, also without links (then no axis has traffic)
        c = replace(c, options=replace(c.options, time_model=TimeModel.SINGLE))
    pipe, dp = pipeline_term(c, f), dp_term(c, f)
    axes = {**pipe.axes, **dp.axes}
    rows = tuple(
        r if r.link == "none" else _row(c, f, t, links, axes[t.axis], roofline, window)
        for t, r in zip(traffic, plain, strict=True)
    ) + _muon_rows(c, f, links)
    forward, alone = forward_terms(c, f, pipe, roofline)
    return rows, TimeTerms(
        pipe.compute_s, pipe.total_s, dp.exposed_s, pipe.bubble_s, dp.optimizer_s, dp.offload_s,
        pipe.activation_offload_s, forward, dp.accumulate_s,
        layout_sm_shares(c, f) if roofline else (), f.m * pipe.microbatch_s,
        stage_seconds(c, f) if roofline else (), alone,
    )  # fmt: skip


def evaluate(
    model: ModelSpec,
    training: TrainingSpec,
    layout: Layout,
    device: DeviceSpec,
    links: Mapping[str, AxisLinkLike] | None = None,
    options: CostOptions | None = None,
    num_gpus: int | None = None,
    vocab_multiple: int | None = None,
) -> Estimate:
    """Evaluate one layout: memory per stage, ZeRO table, traffic per axis, FLOPs, step time, MFU.

    Parameters
    ----------
    links
        The link each axis rides (keys ``tp cp ep dp_cp pp``), from :mod:`topology.placement`;
        None leaves traffic times (and so step time) unknown.
    vocab_multiple
        Pad V to a multiple of ``vocab_multiple · tp`` (Megatron-LM's 128); None = the layout's
        framework's (:data:`model.vocab.VOCAB_MULTIPLE`); 0 or 1 = whole rows per rank only.

    Raises
    ------
    LayoutError
        When the layout breaks a legality rule (:func:`model.layout.validate`).
    """
    options = options or CostOptions()
    validate(layout, model, training, num_gpus, options, device.placement_domain)
    c = evaluation_context(model, training, device, options, vocab_multiple)
    f = LayoutFields(layout, training.global_batch_size, 0, links)
    stages = stage_memory(model, training, layout, vocab_multiple, device, links, options)
    busiest = busiest_stage([s.total_bytes for s in stages])
    traffic = axis_traffic(c, f)
    arch, notes = model.arch, list(model.notes)
    cp_window = window_note(layout.cp_kind, layout.cp, training.seq_len, arch)
    notes += [cp_window] if cp_window else []
    padded = None
    if arch is not None:
        padded = padded_vocab_of(arch.vocab_size, vocab_multiple, layout.framework, layout.tp)
        if padded != arch.vocab_size:
            multiple = vocab_multiple_for(layout.framework, vocab_multiple)
            notes.append(_vocab_note(arch.vocab_size, padded, multiple, layout, vocab_multiple))
    n_total, n_active = model.total_and_active_params
    rows, terms = _time(c, f, traffic, links)
    notes += _notes(model, layout, terms) + segment_notes(device, links, layout.num_gpus)
    causal, flops = options.causal_attention_flops, None
    if arch is not None:
        flops = step_flops(
            arch, n_active, training.seq_len, training.global_batch_size, layout.recompute,
            options.mfu_convention, causal, recomputed_layers(arch, layout), training.documents,
            recompute_flops_of(arch, training, layout, causal),
        )  # fmt: skip
    zero = _zero_table(c, f.at(busiest))
    return Estimate(
        model, training, layout, device, options, n_total, n_active, f.m, stages, busiest, zero,
        rows, flops, terms.compute_s if terms else None, terms.step_s if terms else None,
        tuple(notes), terms, padded,
    )  # fmt: skip


def _notes(model: ModelSpec, layout: Layout, terms: TimeTerms | None) -> list[str]:
    """What the estimate could not count, and how it counted what it did."""
    notes = []
    if model.arch is None and layout.zero_stage == 3:
        notes.append(
            "ZeRO-3's gather buffer (the gathered layer and the next) needs layer sizes: not counted"
        )
    if model.arch is None:
        notes.append(
            "activations, traffic beyond DP, FLOPs and step time need the model's dimensions "
            "(give `num_layers` `hidden_size` `num_attention_heads` …, or a catalogue model)"
        )
    elif terms is None:
        notes.append(
            "step time needs every axis's link bandwidth (give `nvlink_gbps` / `scaleout_gbps`)"
        )
    if layout.recompute_layers is not None:
        notes.append(
            "recompute_layers: the traffic table's tp/cp/ep bytes count the base mode's passes; "
            "the recomputed layers' second forward collectives are in the step time"
        )
    return notes


def objective_ns(terms: TimeTerms) -> tuple[int, int]:
    """The search's two objective terms in whole nanoseconds (rounded to nearest):
    (compute_and_pipeline, the rest of the step); the solver minimises the sum."""
    t2 = terms.exposed_dp_s + terms.optimizer_s + terms.offload_s + terms.grad_accumulation_s
    return _objective_ns(terms.compute_and_pipeline_s, t2)


def recomputed_by_stage(arch: Architecture, layout: Layout) -> tuple[tuple[int, ...], ...]:
    """Per pipeline stage, the indices of the layers ``Layout.recompute_layers`` fully recomputes
    there (the first k decoder layers of each of its model chunks, never an MTP block:
    :func:`model.recompute_counts.recomputed_in_chunks`); empty tuples without per-stage counts."""
    counts = layout.recompute_layers or (0,) * layout.pp
    args = (layout.pp, layout.virtual_stages, layout.split_rule)
    sizes, schedule = layout.stage_layers, layout.schedule
    return tuple(
        recomputed_in_chunks(stage_chunks(arch, *args, i, sizes, schedule), k, arch.num_layers)
        for i, k in enumerate(counts)
    )


def recomputed_layers(arch: Architecture, layout: Layout) -> frozenset[int]:
    """Indices of the layers fully recomputed by ``Layout.recompute_layers`` on any stage
    (:func:`recomputed_by_stage`); empty without per-stage counts."""
    return frozenset(j for stage in recomputed_by_stage(arch, layout) for j in stage)


def _vocab_note(vocab: int, padded: int, multiple: int, layout: Layout, given: int | None) -> str:
    """The sentence that says how V was padded for tp."""
    tp = layout.tp
    if multiple > 1:
        why = (
            f"`vocab_multiple` {multiple}"
            if given is not None
            else f"{layout.framework} pads to a multiple of make_vocab_size_divisible_by "
            f"{multiple} × tp"
        )
        return (
            f"vocabulary {vocab:,} padded to {padded:,} rows ({why} = {multiple * tp:,}; "
            f"{padded // tp:,} rows per tp rank)"
        )
    return (
        f"vocabulary {vocab:,} is not divisible by tp {tp}: the busiest tp rank holds "
        f"⌈{vocab:,}/{tp}⌉ = {padded // tp:,} rows, counted as {padded:,} (whole rows, never "
        "fractional ones)"
    )
