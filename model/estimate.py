"""``evaluate()``: one layout of one model on one accelerator → an :class:`Estimate`.

The evaluator is the cost model's single entry point; the search tabulates the same functions
(:mod:`optimizer.tables`) and re-checks every answer with ``evaluate()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from functools import cache
from typing import Any, Protocol

from trainplan.model.activation_offload import activation_offload_seconds
from trainplan.model.comm import (
    AxisTraffic,
    cp_traffic,
    dp_traffic,
    ep_traffic,
    pp_traffic,
    tp_traffic,
)
from trainplan.model.errors import InputError
from trainplan.model.flops import StepFlops, step_flops, utilisation
from trainplan.model.frameworks import ZERO_STAGES, mechanism
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Layout, Recompute, validate
from trainplan.model.memory import (
    ModelState,
    StageActivations,
    _context,
    model_state,
    optimizer_elements,
    stage_activations,
)
from trainplan.model.offload import NO_OFFLOAD, offload_seconds
from trainplan.model.params import (
    count_params,
    padded_vocab,
    shares_embedding_with_last_stage,
    stage_params,
)
from trainplan.model.pipeline import bubble_fraction, bubble_ratio
from trainplan.model.precision import linear_speedup
from trainplan.model.roofline_step import RooflineStep, roofline_step, uses_roofline
from trainplan.model.specs import Architecture, ModelSpec, TrainingSpec
from trainplan.model.split import recomputed_in_chunks, stage_chunks, stage_layers
from trainplan.model.stage_bytes import offload_quantities
from trainplan.model.timing import (
    CostOptions,
    core_passes,
    exposed_seconds,
    layers_core_flops,
    microbatch_flop_terms,
    stage_peak_seconds,
)
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
    "gather_units",
    "stage_linear_per_gpu",
    "stage_kinds",
    "stage_core_flops",
    "stage_states",
    "stage_activation_list",
    "TimeTerms",
    "time_terms",
    "stage_offload_seconds",
    "stage_activation_offload_seconds",
    "host_rates",
    "traffic_rows",
    "microbatch_seconds",
    "objective_ns",
]


class AxisLinkLike(Protocol):
    """What the cost model needs to know of the link an axis rides (see topology.placement)."""

    link: str
    bandwidth_bytes_per_s: float | None


@dataclass(frozen=True, slots=True)
class StageMemory:
    """Bytes on one GPU of one pipeline stage."""

    stage: int
    num_layers: int
    dense_params: Fraction
    """Non-expert parameters on this GPU (÷ tp)."""
    expert_params: Fraction
    """Routed-expert parameters on this GPU (÷ tp·ep)."""
    state: ModelState
    activations: StageActivations | None
    """None for a size-only model (no dimensions)."""

    @property
    def backward_bytes(self) -> Fraction:
        """Bytes at the forward/backward peak: model state, gathered units, buffers and every
        activation line (the micro-batches in flight, the recompute transient)."""
        acts = self.activations.total_bytes if self.activations else 0
        return self.state.backward_bytes + acts

    @property
    def total_bytes(self) -> Fraction:
        """The peak over the step's phases: forward/backward (:attr:`backward_bytes`) or the
        optimizer step (:attr:`ModelState.optimizer_step_bytes`; no activations are live)."""
        return max(self.backward_bytes, self.state.optimizer_step_bytes)

    @property
    def peak_phase(self) -> str:
        """``forward-backward`` or ``optimizer-step``: where :attr:`total_bytes` is reached."""
        if self.state.optimizer_step_bytes > self.backward_bytes:
            return "optimizer-step"
        return "forward-backward"

    @property
    def steady_bytes(self) -> Fraction:
        """Model state (with gathered units) + activations: the steady state the textbook reports,
        without the transient buffers of either phase."""
        acts = self.activations.total_bytes if self.activations else 0
        return self.state.resident_bytes + acts


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


@dataclass(frozen=True, slots=True)
class Estimate:
    """Everything ``evaluate()`` knows about one layout; ``to_dict()`` is the ``--json`` object."""

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
        and activations, :attr:`StageActivations.offload_host_bytes`), the most of any stage."""
        return max(
            s.state.host_bytes + (s.activations.offload_host_bytes if s.activations else 0)
            for s in self.stages
        )

    @property
    def host_fits(self) -> bool | None:
        """Whether :attr:`host_bytes` fits the device's host memory per GPU; None when that is
        unknown (and something is offloaded)."""
        cap = self.device.host_memory_bytes
        if not self.host_bytes:
            return True
        return None if cap is None else self.host_bytes <= cap

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.capacity_bytes and self.host_fits is not False

    @property
    def bubble_fraction(self) -> Fraction:
        return bubble_fraction(self.layout.pp, self.num_microbatches, self.layout.virtual_stages)

    @property
    def bubble_ratio(self) -> Fraction:
        return bubble_ratio(self.layout.pp, self.num_microbatches, self.layout.virtual_stages)

    @property
    def exposed_comm_s(self) -> float | None:
        times = [row.exposed_seconds for row in self.traffic]
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

    def to_dict(self) -> dict[str, Any]:
        from trainplan.model.report_dict import estimate_to_dict  # local: keeps this module small

        return estimate_to_dict(self)


SplitKey = tuple[int, int, int, int, bool, int, bool, "tuple[int, ...] | None"]


def _split_key(layout: Layout) -> SplitKey:
    """(tp, pp, v, ep, uneven_stages, etp, physical, stage_layers): what the per-stage parameter
    split reads of a layout (physical profiles keep norms and routers whole on every tp rank)."""
    return (
        layout.tp,
        layout.pp,
        layout.virtual_stages,
        layout.ep,
        layout.uneven_stages,
        layout.expert_tp,
        layout.framework.physical,
        layout.stage_layers,
    )


def _stage_param_list(
    model: ModelSpec, layout: Layout, vocab_multiple: int
) -> tuple[tuple[int, tuple[int, ...], Fraction, Fraction], ...]:
    """(stage, layers, dense params per GPU, expert params per GPU) for every stage."""
    return stage_params_per_gpu(model, *_split_key(layout), vocab_multiple)


def _per_gpu(dense: int, replicated: int, tp: int, physical: bool) -> Fraction:
    """Dense parameters on one tensor-parallel rank: ÷ tp, except (physical profiles) what
    every rank holds whole (:attr:`model.params.LayerParams.tp_replicated`)."""
    if not physical:
        return Fraction(dense, tp)
    return Fraction(dense - replicated, tp) + replicated


@cache
def stage_params_per_gpu(
    model: ModelSpec,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    physical: bool,
    sizes: tuple[int, ...] | None,
    vocab_multiple: int,
) -> tuple[tuple[int, tuple[int, ...], Fraction, Fraction], ...]:
    """(stage, layer indices, dense parameters on one GPU, routed-expert parameters on one GPU)
    of every pipeline stage: dense ÷ tp (except, under a physical profile, what every tp rank
    holds whole), experts ÷ etp·ep; a declared size divided evenly over tp·pp. Exact, cached on
    what it reads (the search's tables ask for each structure once)."""
    arch = model.arch
    if model.num_params_declared is not None or arch is None:
        n = model.num_params_declared or count_params(arch).total  # type: ignore[arg-type]
        per_gpu = Fraction(n, tp * pp)
        split = stage_layers(arch, pp, v, uneven, sizes) if arch else ((),) * pp
        return tuple((i, layers, per_gpu, Fraction(0)) for i, layers in enumerate(split))
    vocab = padded_vocab(arch.vocab_size, vocab_multiple, tp)
    return tuple(
        (
            sp.stage,
            sp.layers,
            _per_gpu(sp.dense, sp.tp_replicated, tp, physical),
            Fraction(sp.experts, etp * ep),
        )
        for sp in stage_params(arch, pp, v, vocab, uneven, sizes)
    )


def stage_states(
    model: ModelSpec, training: TrainingSpec, layout: Layout, vocab_multiple: int | None = None
) -> tuple[ModelState, ...]:
    """Model-state bytes on one GPU of every pipeline stage (reads dp tp pp cp ep zero_stage v,
    and the framework for the vocabulary's padding: ``vocab_multiple`` None is the framework's,
    :func:`model.vocab.vocab_multiple_for`). The search tabulates this function over (shape,
    zero_stage)."""
    vocab_multiple = vocab_multiple_for(layout.framework, vocab_multiple)
    key = _split_key(layout)
    units = gather_units(model, *key, vocab_multiple)
    linear = stage_linear_per_gpu(model, *key)
    return tuple(
        model_state(d, e, layout, training, gather_unit=units[i], linear=linear[i][:2])
        for i, (_, _, d, e) in enumerate(_stage_param_list(model, layout, vocab_multiple))
    )


@cache
def stage_linear_per_gpu(
    model: ModelSpec,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    physical: bool,
    sizes: tuple[int, ...] | None,
) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, (the linear layers' weight elements on one GPU, those of its largest layer):
    :attr:`LayerParams.linear` ÷ tp (except the tp-replicated part under a physical profile)
    + :attr:`LayerParams.expert_linear` ÷ etp·ep — what a GEMM precision's cached weight copies
    scale with (:mod:`model.precision`; the largest layer for the gathered units of ZeRO-3).
    Zeros for a size-only model (its layers are unknown)."""
    arch = model.arch
    if arch is None:
        return ((Fraction(0), Fraction(0)),) * pp
    from trainplan.model.params import layer_params

    out = []
    for layers in stage_layers(arch, pp, v, uneven, sizes):
        per_layer = [Fraction(0)]
        for j in layers:
            lp = layer_params(arch, j)
            per_layer.append(
                _per_gpu(lp.linear, lp.linear_replicated, tp, physical)
                + Fraction(lp.expert_linear, etp * ep)
            )
        out.append((sum(per_layer, Fraction(0)), max(per_layer)))
    return tuple(out)


@cache
def gather_units(
    model: ModelSpec,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    physical: bool,
    sizes: tuple[int, ...] | None,
    vocab_multiple: int,
) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, the (dense, expert) parameters on one GPU of the largest unit gathered or
    reduced at once (ZeRO-3 / FSDP units): one of its layers, the input embedding (first stage)
    or the output layer (last stage). (0, 0) for a size-only model, whose layers are unknown."""
    arch = model.arch
    if arch is None:
        return ((Fraction(0), Fraction(0)),) * pp
    from trainplan.model.params import layer_params

    vocab = padded_vocab(arch.vocab_size, vocab_multiple, tp)
    counts = count_params(arch, vocab)
    # a layer's unit depends only on its kind (dense or MoE): one of each is enough
    kind_unit = {}
    for moe in (False, True):
        j = arch.kind_index(moe)
        if j is not None:
            lp = layer_params(arch, j)
            kind_unit[moe] = (
                _per_gpu(lp.dense, lp.tp_replicated, tp, physical),
                Fraction(lp.experts, etp * ep),
            )
    out = []
    for i, layers in enumerate(stage_layers(arch, pp, v, uneven, sizes)):
        units = [kind_unit[k] for k in sorted({arch.is_moe_layer(j) for j in layers})]
        if i == 0:
            units.append((Fraction(counts.embedding, tp), Fraction(0)))
        if i == pp - 1:
            units.append((Fraction(counts.output or vocab * arch.hidden_size, tp), Fraction(0)))
        # a middle stage with no layers (a custom layout's zeros) gathers nothing
        out.append(max(units, key=lambda u: u[0] + u[1], default=(Fraction(0), Fraction(0))))
    return tuple(out)


def stage_activation_list(
    model: ModelSpec, training: TrainingSpec, layout: Layout, vocab_multiple: int | None = None
) -> tuple[StageActivations, ...] | None:
    """Activation bytes on one GPU of every pipeline stage (reads tp pp cp v micro_batch_size
    recompute schedule sequence_parallel, dp through m, and the framework for the vocabulary's
    padding); None for a size-only model. The search tabulates this function over (shape,
    recompute)."""
    arch = model.arch
    if arch is None:
        return None
    vocab_multiple = vocab_multiple_for(layout.framework, vocab_multiple)
    vocab = padded_vocab(arch.vocab_size, vocab_multiple, layout.tp)
    split = stage_layers(
        arch, layout.pp, layout.virtual_stages, layout.uneven_stages, layout.stage_layers
    )
    return tuple(
        stage_activations(arch, layers, i, layout, training, vocab)
        for i, layers in enumerate(split)
    )


def stage_memory(
    model: ModelSpec, training: TrainingSpec, layout: Layout, vocab_multiple: int | None = None
) -> tuple[StageMemory, ...]:
    """Bytes on one GPU of every pipeline stage: :func:`stage_states` + :func:`stage_activation_list`."""
    vocab_multiple = vocab_multiple_for(layout.framework, vocab_multiple)
    params = _stage_param_list(model, layout, vocab_multiple)
    states = stage_states(model, training, layout, vocab_multiple)
    acts = stage_activation_list(model, training, layout, vocab_multiple)
    return tuple(
        StageMemory(i, len(layers), d, e, states[i], acts[i] if acts else None)
        for (i, layers, d, e) in params
    )


def stage_memory_at(
    model: ModelSpec,
    training: TrainingSpec,
    layout: Layout,
    stage: int,
    vocab_multiple: int | None = None,
) -> StageMemory:
    """Bytes on one GPU of pipeline stage ``stage`` alone: the ``stage``-th of
    :func:`stage_memory`, from the same functions (:func:`model.memory.model_state` with the
    stage's parameters, gather unit and linear weights; :func:`model.memory.stage_activations`)
    without computing the other stages' activations. The per-stage search tabulates it over
    (stage, layers, recomputed layers) (:mod:`optimizer.stage_tables`)."""
    vocab_multiple = vocab_multiple_for(layout.framework, vocab_multiple)
    key = _split_key(layout)
    i, layers, d, e = _stage_param_list(model, layout, vocab_multiple)[stage]
    state = model_state(
        d,
        e,
        layout,
        training,
        gather_unit=gather_units(model, *key, vocab_multiple)[stage],
        linear=stage_linear_per_gpu(model, *key)[stage][:2],
    )
    arch = model.arch
    acts = None
    if arch is not None:
        vocab = padded_vocab(arch.vocab_size, vocab_multiple, layout.tp)
        acts = stage_activations(arch, layers, stage, layout, training, vocab)
    return StageMemory(i, len(layers), d, e, state, acts)


def _zero_table(
    stage: StageMemory, layout: Layout, training: TrainingSpec, options: CostOptions
) -> tuple[ZeroRow, ...]:
    """The model state of the busiest stage under each ZeRO stage the layout's framework has,
    against its lowest stage (textbook: ZeRO-0, as the original planner's table). On the GPU without
    offload: the table compares the ZeRO stages themselves (an offload is reported beside it,
    ``memory.host_bytes``)."""
    stages = ZERO_STAGES[layout.framework]
    training = replace(training, offload=NO_OFFLOAD)
    base = model_state(
        stage.dense_params, stage.expert_params, layout, training, stages[0]
    ).total_bytes
    rows = []
    for z in stages:
        state = model_state(
            stage.dense_params, stage.expert_params, layout, training, z
        ).total_bytes
        dp = dp_traffic(
            stage.dense_params, stage.expert_params, layout, training, z, options.zero3_regather
        )
        rows.append(ZeroRow(z, state, base / state, dp.bytes_per_step))
    return tuple(rows)


@cache
def _busiest(
    model: ModelSpec,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    physical: bool,
    sizes: tuple[int, ...] | None,
    vocab_multiple: int,
) -> tuple[Fraction, Fraction, int, int, tuple[tuple[int, int, bool, bool], ...]]:
    """(dense, expert params per GPU of the stage with the most parameters, the most layers on a
    stage, the most MoE layers on a stage, and per distinct stage (layers, MoE layers, first,
    last)): what each axis's traffic reads."""
    params = stage_params_per_gpu(
        model, tp, pp, v, ep, uneven, etp, physical, sizes, vocab_multiple
    )
    _, _, dense, experts = max(params, key=lambda p: (p[2] + p[3], -p[0]))
    most_layers = max(len(p[1]) for p in params)
    arch = model.arch
    moe = [0 if arch is None else sum(map(arch.is_moe_layer, p[1])) for p in params]
    kinds = {(len(p[1]), moe[i], i == 0, i == pp - 1) for i, p in enumerate(params)}
    return dense, experts, most_layers, max(moe), tuple(sorted(kinds))


def _traffic(
    model: ModelSpec,
    training: TrainingSpec,
    layout: Layout,
    vocab_multiple: int,
    options: CostOptions,
) -> list[AxisTraffic]:
    key = _split_key(layout)
    dense, experts, most_layers, most_moe, kinds = _busiest(model, *key, vocab_multiple)
    dp = dp_traffic(dense, experts, layout, training, None, options.zero3_regather)
    rows = [dp]
    arch = model.arch
    if arch is None:
        return rows
    tp = max(
        (tp_traffic(arch, n, layout, training, first, last, moe) for n, moe, first, last in kinds),
        key=lambda t: t.bytes_per_step,
    )
    tied = Fraction(0)
    if shares_embedding_with_last_stage(arch) and layout.pp > 1:
        tied = Fraction(
            padded_vocab(arch.vocab_size, vocab_multiple, layout.tp) * arch.hidden_size, layout.tp
        )
    reduce_bytes = mechanism(
        layout.framework, layout.zero_stage, training.weight_bytes, training.gradient_bytes
    ).reduce_bytes
    rows += [
        tp,
        cp_traffic(arch, most_layers, layout, training),
        ep_traffic(arch, most_moe, layout, training),
        pp_traffic(arch.hidden_size, layout, training, tied, reduce_bytes),
    ]
    return rows


def _link_rows(
    traffic: list[AxisTraffic],
    links: Mapping[str, AxisLinkLike] | None,
    options: CostOptions,
    microbatches: int = 1,
    window_s: float | None = None,
) -> tuple[TrafficRow, ...]:
    out = []
    for t in traffic:
        key = "dp_cp" if t.axis == "dp" else t.axis
        link = links.get(key) if links is not None else None
        if t.group_size == 1 or t.bytes_per_step == 0:
            out.append(TrafficRow(t, "none", None, 0.0, options.overlap[t.axis], 0.0))
            continue
        if link is None or link.bandwidth_bytes_per_s is None:
            out.append(TrafficRow(t, "unknown", None, None, options.overlap[t.axis], None))
            continue
        seconds = float(t.bytes_per_step) / link.bandwidth_bytes_per_s
        exposed = exposed_seconds(
            float(t.bytes_per_step - t.hidden_bytes) / link.bandwidth_bytes_per_s,
            float(t.microbatch_bytes) / link.bandwidth_bytes_per_s,
            microbatches,
            options.overlap[t.axis],
            window_s,
        )
        out.append(
            TrafficRow(
                t, link.link, link.bandwidth_bytes_per_s, seconds, options.overlap[t.axis], exposed
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class TimeTerms:
    """Step time split by what it reads:
    ``step_s = compute_and_pipeline_s + exposed_dp_s + optimizer_s``."""

    compute_s: float
    """Ideal compute: m × the slowest stage's micro-batch of operations (the roofline model's
    exposed tp, cp and ep collectives are not in it; the single model has none)."""
    compute_and_pipeline_s: float
    """m × the slowest stage's micro-batch × (1 + bubble_ratio) + exposed tp, cp, ep and pp
    communication (reads the shape and recompute, not zero_stage)."""
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
    """What activation offload's copies leave exposed (reads the shape and recompute;
    :func:`stage_activation_offload_seconds`); already in ``compute_and_pipeline_s``."""

    @property
    def step_s(self) -> float:
        return self.compute_and_pipeline_s + self.exposed_dp_s + self.optimizer_s + self.offload_s


@cache
def _slowest_stage_flops(
    arch: Architecture,
    pp: int,
    v: int,
    b: int,
    recompute: Recompute,
    training: TrainingSpec,
    causal: bool,
    efficiency: float,
    attention_efficiency: float | None,
    uneven: bool = True,
    sizes: tuple[int, ...] | None = None,
    speedup: float = 1.0,
) -> float:
    """Peak-seconds (FLOPs ÷ efficiency) of one micro-batch on the slowest pipeline stage (what
    sets the pace): :func:`model.timing.stage_peak_seconds` of each stage, the FlashAttention
    core at ``attention_efficiency`` when that is given and FlashAttention is on."""
    terms = microbatch_flop_terms(arch, training.seq_len, b, recompute, causal)
    separate = attention_efficiency if training.flash_attention else None
    cores = stage_core_flops(arch, pp, v, training.seq_len, causal, uneven, sizes)
    return max(
        stage_peak_seconds(
            terms,
            n_dense,
            n_moe,
            last,
            b * core,
            core_passes(recompute),
            efficiency,
            separate,
            speedup,
        )
        for (n_dense, n_moe, last), core in zip(
            stage_kinds(arch, pp, v, uneven, sizes), cores, strict=True
        )
    )


@cache
def stage_kinds(
    arch: Architecture,
    pp: int,
    v: int,
    uneven: bool = True,
    sizes: tuple[int, ...] | None = None,
) -> tuple[tuple[int, int, bool], ...]:
    """(dense layers, MoE layers, holds the output layer) of each pipeline stage (MTP blocks
    counted on the last; :func:`model.split.stage_layers` with ``uneven`` and ``sizes``)."""
    out = []
    for i, layers in enumerate(stage_layers(arch, pp, v, uneven, sizes)):
        moe = sum(map(arch.is_moe_layer, layers))
        out.append((len(layers) - moe, moe, i == pp - 1))
    return tuple(out)


@cache
def stage_core_flops(
    arch: Architecture,
    pp: int,
    v: int,
    seq_len: int,
    causal: bool,
    uneven: bool = True,
    sizes: tuple[int, ...] | None = None,
) -> tuple[int, ...]:
    """Forward FLOPs of each pipeline stage's attention cores for one sequence
    (:func:`model.timing.layers_core_flops`): stages differ when layers' spans do (Gemma 3's
    global layers, Llama 4's unchunked ones)."""
    return tuple(
        layers_core_flops(arch, layers, seq_len, causal)
        for layers in stage_layers(arch, pp, v, uneven, sizes)
    )


def time_terms(
    model: ModelSpec,
    training: TrainingSpec,
    layout: Layout,
    device: DeviceSpec,
    traffic: tuple[TrafficRow, ...],
    options: CostOptions,
    links: Mapping[str, AxisLinkLike] | None = None,
    vocab_multiple: int | None = None,
) -> TimeTerms | None:
    """Step time of ``layout`` from its traffic rows; None without dimensions or link figures.

    Single model: ``step_s = m·t_mb·(1 + bubble_ratio) + Σ_axis (1 − overlap)·bytes/bandwidth``
    (docs/concepts/conventions.md "Step time and MFU").
    Roofline model (:mod:`model.roofline_step`): ``m·t_mb·(1 + bubble_ratio)`` with
    ``t_mb`` the slowest stage's operations and exposed tp/cp/ep collectives, plus the pipeline
    messages, the exposed dp traffic and the optimizer step.
    """
    arch = model.arch
    if arch is None or any(row.exposed_seconds is None for row in traffic):
        return None
    m = layout.num_microbatches(training.global_batch_size)
    ratio = float(bubble_ratio(layout.pp, m, layout.virtual_stages))
    exposed = {row.traffic.axis: row.exposed_seconds or 0.0 for row in traffic}
    multiple = vocab_multiple_for(layout.framework, vocab_multiple)
    offload = stage_offload_seconds(model, training, layout, device, options, multiple)
    if links is not None and uses_roofline(options, layout, device):
        step = _roofline(model, training, layout, device, links, options, multiple)
        paced = m * step.microbatch_s
        act = stage_activation_offload_seconds(arch, training, layout, device, step.microbatch_s)
        return TimeTerms(
            m * step.compute_microbatch_s,
            paced * (1 + ratio) + step.axes["pp"][1] + act,
            step.axes["dp"][1],
            paced * ratio,
            step.optimizer_s,
            offload,
            act,
        )
    if layout.recompute_layers is not None:
        raise InputError(
            "recompute_layers: per-stage recomputation is timed by the roofline model only "
            "(--time-model roofline, a physical framework profile, an accelerator with its HBM "
            "bandwidth)"
        )
    t_mb = microbatch_seconds(arch, training, layout, device, options)
    compute = m * t_mb
    other = sum(v for k, v in exposed.items() if k != "dp")
    act = stage_activation_offload_seconds(arch, training, layout, device, t_mb)
    return TimeTerms(
        compute,
        compute * (1 + ratio) + other + act,
        exposed.get("dp", 0.0),
        compute * ratio,
        0.0,
        offload,
        act,
    )


def stage_activation_offload_seconds(
    arch: Architecture,
    training: TrainingSpec,
    layout: Layout,
    device: DeviceSpec,
    microbatch_s: float,
) -> float:
    """:func:`model.activation_offload.activation_offload_seconds` of the stage with the most
    layers (its dense layers the most layers less the most MoE layers of any stage), from the
    per-layer offloaded bytes (:func:`model.stage_bytes.offload_quantities`: selective
    recomputation's figure or no recomputation's) and the time model's micro-batch on the
    slowest stage, ``microbatch_s``. 0 without activation offload.

    Raises
    ------
    InputError
        Activation offload on a device without a host-link figure.
    """
    if not training.offload.activations:
        return 0.0
    link, _ = host_rates(device, need_memory=False)
    q = offload_quantities(arch, _context(arch, layout, training))
    i = 1 if layout.recompute is Recompute.SELECTIVE else 0
    kinds = stage_kinds(
        arch, layout.pp, layout.virtual_stages, layout.uneven_stages, layout.stage_layers
    )
    most, most_moe = max(d + e for d, e, _ in kinds), max(e for _, e, _ in kinds)
    m = layout.num_microbatches(training.global_batch_size)
    return float(
        activation_offload_seconds(
            float(q[i]), float(q[4 + i]), most - most_moe, most_moe, microbatch_s, m, link
        )
    )


def stage_offload_seconds(
    model: ModelSpec,
    training: TrainingSpec,
    layout: Layout,
    device: DeviceSpec,
    options: CostOptions,
    vocab_multiple: int | None = None,
) -> float:
    """:func:`model.offload.offload_seconds` of the stage with the most parameters (whose
    optimizer step finishes last). 0 without offload.

    Raises
    ------
    InputError
        Offload on a device without host-link or host-memory figures.
    """
    off = training.offload
    if not off.active:
        return 0.0
    link, memory = host_rates(device)
    multiple = vocab_multiple_for(layout.framework, vocab_multiple)
    dense, experts, *_ = _busiest(model, *_split_key(layout), multiple)
    mech = mechanism(
        layout.framework,
        layout.zero_stage,
        training.weight_bytes,
        training.gradient_bytes,
        training.optimizer_bytes,
        options.zero3_regather,
    )
    elements = optimizer_elements(
        mech, dense, experts, layout.shard_degree, layout.expert_shard_degree
    )
    m = layout.num_microbatches(training.global_batch_size)
    return float(offload_seconds(mech, off, elements, m, training.optimizer_bytes, link, memory))


def host_rates(device: DeviceSpec, need_memory: bool = True) -> tuple[float, float]:
    """(host-link bytes/s per direction, host-memory bytes/s per GPU) of ``device``; with
    ``need_memory`` False an unknown host-memory rate is returned as 0 (activation offload
    only crosses the link).

    Raises
    ------
    InputError
        Either is unknown (not in the accelerator table and not given).
    """
    link, memory = device.host_link_bytes_per_s, device.host_memory_bytes_per_s
    if link is not None and memory is None and not need_memory:
        return link, 0.0
    if link is None or memory is None:
        missing = "--host-link-gbps" if link is None else "--host-memory-gbps"
        raise InputError(
            f"offload: the {device.name} has no {'host link' if link is None else 'host memory'}"
            f" bandwidth in the table (trainplan gpus); give {missing}"
        )
    return link, memory


def _roofline(
    model: ModelSpec,
    training: TrainingSpec,
    layout: Layout,
    device: DeviceSpec,
    links: Mapping[str, AxisLinkLike],
    options: CostOptions,
    vocab_multiple: int,
) -> RooflineStep:
    """:func:`model.roofline_step.roofline_step` of a layout (its traffic and busiest stage)."""
    arch = model.arch
    assert arch is not None
    dense, experts, most_layers, _, _ = _busiest(model, *_split_key(layout), vocab_multiple)
    return roofline_step(
        arch, training, layout, device, links, options,
        padded_vocab(arch.vocab_size, vocab_multiple, layout.tp),
        _traffic(model, training, layout, vocab_multiple, options),
        (dense, experts, max(1, most_layers)),
    )  # fmt: skip


def microbatch_seconds(
    arch: Architecture,
    training: TrainingSpec,
    layout: Layout,
    device: DeviceSpec,
    options: CostOptions,
    recompute: Recompute | None = None,
) -> float:
    """Seconds of one micro-batch's forward and backward (and recomputation) on the slowest
    pipeline stage, on one GPU: its hardware FLOPs ÷ (tp·cp) ÷ (peak × efficiency);
    ``recompute`` overrides the layout's mode."""
    per_mb = _slowest_stage_flops(
        arch,
        layout.pp,
        layout.virtual_stages,
        layout.micro_batch_size,
        layout.recompute if recompute is None else recompute,
        training,
        options.causal_attention_flops,
        options.kernel_efficiency,
        options.attention_efficiency,
        layout.uneven_stages,
        layout.stage_layers,
        linear_speedup(training.precision, device),
    )
    return per_mb / (layout.tp * layout.cp) / device.peak_flops_per_s


def traffic_rows(
    model: ModelSpec,
    training: TrainingSpec,
    layout: Layout,
    links: Mapping[str, AxisLinkLike] | None,
    options: CostOptions,
    vocab_multiple: int | None = None,
    device: DeviceSpec | None = None,
) -> tuple[TrafficRow, ...]:
    """Traffic per axis with its link and exposed time. DP uses the stage with the most
    parameters; tp the stage with the most of it; cp the stage with the most layers; ep the one
    with the most MoE layers. Under the roofline model (:mod:`model.roofline_step`) the seconds
    are the slowest stage's collectives and what their mechanisms leave exposed; what follows
    is the single model's.

    Per-micro-batch collectives (:attr:`AxisTraffic.microbatch_bytes`) hide behind the next
    micro-batch's compute (:func:`model.timing.exposed_seconds`); the window is one micro-batch
    on the slowest stage *without* recomputation (a lower bound on the compute they overlap,
    read from the shape alone so the search's tables keep time terms per (shape, ZeRO stage) and
    per (shape, recompute)); with no ``device`` or dimensions every micro-batch's collective is
    treated like the last.
    """
    vocab_multiple = vocab_multiple_for(layout.framework, vocab_multiple)
    rows = _traffic(model, training, layout, vocab_multiple, options)
    if (
        device is not None
        and model.arch is not None
        and links is not None
        and uses_roofline(options, layout, device)
    ):
        plain = _link_rows(rows, links, options)
        if any(r.exposed_seconds is None for r in plain):
            return plain  # a link without a bandwidth: no time
        step = _roofline(model, training, layout, device, links, options, vocab_multiple)
        return tuple(_roofline_row(r, step) for r in plain)
    window = None
    if device is not None and model.arch is not None:
        window = microbatch_seconds(model.arch, training, layout, device, options, Recompute.NONE)
    m = layout.num_microbatches(training.global_batch_size)
    return _link_rows(rows, links, options, m, window)


def _roofline_row(row: TrafficRow, step: RooflineStep) -> TrafficRow:
    """A traffic row with the roofline model's seconds: the axis's collectives if nothing
    overlapped them (latency and bytes at the link's bandwidth × efficiency) and what its
    mechanism leaves exposed; ``overlap`` is the share hidden."""
    if row.link == "none":
        return row
    seconds, exposed = step.axes[row.traffic.axis]
    hidden = 1 - exposed / seconds if seconds > 0 else 0.0
    return TrafficRow(row.traffic, row.link, row.bandwidth_bytes_per_s, seconds, hidden, exposed)


def objective_ns(terms: TimeTerms) -> tuple[int, int]:
    """The search's two objective terms in whole nanoseconds (rounded to nearest):
    (compute_and_pipeline, exposed_dp + optimizer step + offload). The solver minimises their
    sum."""
    return (
        round(terms.compute_and_pipeline_s * 1e9),
        round((terms.exposed_dp_s + terms.optimizer_s + terms.offload_s) * 1e9),
    )


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
    validate(layout, model, training, num_gpus)
    m = layout.num_microbatches(training.global_batch_size)
    stages = stage_memory(model, training, layout, vocab_multiple)
    busiest = max(range(len(stages)), key=lambda i: (stages[i].total_bytes, -i))
    traffic = traffic_rows(model, training, layout, links, options, vocab_multiple, device)
    arch, notes = model.arch, list(model.notes)
    padded = None
    if arch is not None:
        multiple = vocab_multiple_for(layout.framework, vocab_multiple)
        padded = padded_vocab(arch.vocab_size, multiple, layout.tp)
        if padded != arch.vocab_size:
            notes.append(_vocab_note(arch.vocab_size, padded, multiple, layout, vocab_multiple))
    n_total = model.num_params_declared or count_params(arch).total  # type: ignore[arg-type]
    n_active = n_total if arch is None else count_params(arch).active
    if model.num_params_declared is not None and arch is not None:
        n_active = n_total
    flops = compute_s = step_s = terms = None
    if arch is None and layout.zero_stage == 3:
        notes.append(
            "ZeRO-3's gather buffer (the gathered layer and the next) needs layer sizes: not counted"
        )
    if arch is None:
        notes.append(
            "activations, traffic beyond DP, FLOPs and step time need the model's dimensions "
            "(give --layers --hidden --heads …, or a catalogue model)"
        )
    else:
        flops = step_flops(
            arch,
            n_active,
            training.seq_len,
            training.global_batch_size,
            layout.recompute,
            options.mfu_convention,
            options.causal_attention_flops,
            recomputed_layers(arch, layout),
        )
        terms = time_terms(model, training, layout, device, traffic, options, links, vocab_multiple)
        if terms is None:
            notes.append(
                "step time needs every axis's link bandwidth (give --nvlink-gbps / --scaleout-gbps)"
            )
        else:
            compute_s, step_s = terms.compute_s, terms.step_s
    if layout.recompute_layers is not None:
        notes.append(
            "recompute_layers: the traffic table's tp/cp/ep bytes count the base mode's passes; "
            "the recomputed layers' second forward collectives are in the step time"
        )
    zero = _zero_table(stages[busiest], layout, training, options)
    return Estimate(
        model,
        training,
        layout,
        device,
        options,
        n_total,
        n_active,
        m,
        stages,
        busiest,
        zero,
        traffic,
        flops,
        compute_s,
        step_s,
        tuple(notes),
        terms,
        padded,
    )


def recomputed_by_stage(arch: Architecture, layout: Layout) -> tuple[tuple[int, ...], ...]:
    """Per pipeline stage, the indices of the layers ``Layout.recompute_layers`` fully recomputes
    there (the first k of each of its model chunks, :func:`model.split.recomputed_in_chunks`);
    empty tuples without per-stage counts."""
    counts = layout.recompute_layers or (0,) * layout.pp
    pp, v, uneven, sizes = (
        layout.pp,
        layout.virtual_stages,
        layout.uneven_stages,
        layout.stage_layers,
    )
    return tuple(
        recomputed_in_chunks(stage_chunks(arch, pp, v, uneven, i, sizes), k)
        for i, k in enumerate(counts)
    )


def recomputed_layers(arch: Architecture, layout: Layout) -> frozenset[int]:
    """Indices of the layers fully recomputed by ``Layout.recompute_layers`` on any stage
    (:func:`recomputed_by_stage`); empty without per-stage counts."""
    return frozenset(j for stage in recomputed_by_stage(arch, layout) for j in stage)


def _vocab_note(vocab: int, padded: int, multiple: int, layout: Layout, given: int | None) -> str:
    """The sentence that says how V was padded for tp (issue 11 item 7)."""
    tp = layout.tp
    if multiple > 1:
        why = (
            f"--pad-vocab {multiple}"
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
