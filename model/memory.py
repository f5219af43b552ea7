"""Per-GPU memory: model state under ZeRO 0–3 and activations under each recompute mode.

Model state (Rajbhandari et al. 2019, arXiv 1910.02054, §3.1 and Figure 1): mixed-precision
Adam keeps 2 B BF16 weights + 2 B BF16 gradients + 12 B optimizer state (FP32 master, two FP32
moments) per parameter. ZeRO shards over the D replicas of a parameter (D = dp·cp for dense
parameters, D_e = dp·cp/ep for routed experts): ZeRO-1 the optimizer state, ZeRO-2 also the
gradients, ZeRO-3 / FSDP also the weights.

Activations (Korthikanti et al. 2022, arXiv 2205.05198, §4 and §5; Chen et al. 2016, arXiv
1604.06174): the per-layer bytes of :mod:`model.activations` times the layers of the stage times
the micro-batches the schedule keeps in flight on it (:func:`model.pipeline.microbatches_in_flight`);
full and √n recomputation keep checkpoints instead and add a transient, counted once, as are the
buffers a context-parallel flavour holds while one layer's attention runs
(:mod:`model.context_parallel`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any

from trainplan.model.activation_offload import offload_buffer_bytes
from trainplan.model.activations import ActivationContext
from trainplan.model.context_parallel import CpKind, cp_degrees, cp_transient_bytes
from trainplan.model.frameworks import Framework, Mechanism, mechanism
from trainplan.model.layout import Layout, Recompute
from trainplan.model.offload import NO_OFFLOAD, Offload, offload_memory
from trainplan.model.pipeline import Schedule, microbatches_in_flight
from trainplan.model.precision import FP8_WEIGHT_CACHE_BYTES, Precision
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.split import stage_chunks
from trainplan.model.stage_bytes import (
    Form,
    apply_form,
    block_forms,
    chunk_block_forms,
    chunk_form,
    chunk_peak,
    embedding_bytes,
    layer_quantities,
    offload_quantities,
    peak_transient,
    sqrt_segment,
)

FP8_PARAM_BYTES = 1
"""Bytes per linear weight element of an FP8 primary weight (E4M3 data; the per-tensor scale
is one float per weight, not counted)."""

__all__ = [
    "ModelState",
    "model_state",
    "StageActivations",
    "stage_activations",
    "sqrt_segment",
    "state_terms",
    "weight_cache_terms",
    "cache_bytes_per_element",
    "optimizer_elements",
    "keeps_gathered_inputs",
]


@dataclass(frozen=True, slots=True)
class ModelState:
    """Model-state bytes on one GPU (exact), as the layout's framework holds them
    (:class:`model.frameworks.Mechanism`)."""

    weights_bytes: Fraction
    gradients_bytes: Fraction
    optimizer_bytes: Fraction
    gathered_bytes: Fraction = Fraction(0)
    """ZeRO-3 only: the gathered (unsharded over dp·cp) bf16 weights of the unit being computed
    and of the next one, prefetched, beyond the local shard — what FSDP and DeepSpeed ZeRO-3
    hold gathered at any moment (Rajbhandari et al. 2019 §5.3; FSDP's forward/backward prefetch;
    DeepSpeed ``stage3_prefetch_bucket_size``). Not part of ``total_bytes`` (the textbook's model
    state); counted in the GPU's total."""
    buffers_bytes: Fraction = Fraction(0)
    """Live in forward/backward only: one unit's unsharded gradients before their reduction
    (FSDP2) and the framework's fixed communication buckets (DeepSpeed's IPG bucket)."""
    step_bytes: Fraction = Fraction(0)
    """Live during the optimizer step only: DeepSpeed's FP32 gradient partition (of one
    sub-group under ZeRO-3)."""
    host_bytes: Fraction = Fraction(0)
    """On the host, not the GPU: the offloaded optimizer state, its FP32 gradient buffer and,
    with parameter offload, the weight shards (:func:`model.offload.offload_memory`). Not part
    of any GPU total."""
    weight_cache_bytes: Fraction = Fraction(0)
    """Low-precision copies of the linear weights kept for the whole step: Transformer Engine's
    FP8 weight and transpose under ``precision = fp8`` (:data:`model.precision.
    FP8_WEIGHT_CACHE_BYTES` per linear weight element), when the weights are held whole. Under
    ZeRO-3 / FSDP the copies of the gathered units are counted in ``gathered_bytes``."""

    @property
    def total_bytes(self) -> Fraction:
        """Weights + gradients + optimizer state (the textbook's 16 B/param, sharded)."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    @property
    def resident_bytes(self) -> Fraction:
        """``total_bytes`` plus the ZeRO-3 gather buffer and the cached weight copies: held
        through forward and backward."""
        return self.total_bytes + self.gathered_bytes + self.weight_cache_bytes

    @property
    def backward_bytes(self) -> Fraction:
        """Model-state bytes at the forward/backward peak: resident + buffers."""
        return self.resident_bytes + self.buffers_bytes

    @property
    def optimizer_step_bytes(self) -> Fraction:
        """Bytes while the optimizer steps (no activations are live then): state + step extras
        + the cached weight copies (persistent module buffers)."""
        return self.total_bytes + self.step_bytes + self.weight_cache_bytes


def model_state(
    dense_params: Fraction,
    expert_params: Fraction,
    layout: Layout,
    training: TrainingSpec,
    zero_stage: int | None = None,
    gather_unit: tuple[Fraction, Fraction] = (Fraction(0), Fraction(0)),
    linear: tuple[Fraction, Fraction] = (Fraction(0), Fraction(0)),
) -> ModelState:
    """Model-state bytes on one GPU (weights, gradients, optimizer state, gathered units,
    buffers, step extras) under a ZeRO stage of the layout's framework.

    ``dense_params`` / ``expert_params``: parameters on this GPU before ZeRO (after tp; experts
    after etp·ep). ``gather_unit``: (dense, expert) parameters on this GPU of the largest unit
    gathered or reduced at once (a layer, the embedding or the output layer). ``linear``: the
    linear layers' weight elements on this GPU and those of its largest layer
    (:func:`model.estimate.stage_linear_per_gpu`), whose FP8 copies ``precision = fp8`` caches
    (:func:`weight_cache_terms`). Dense parameters
    are replicated over D = dp·cp ranks, experts over D_e (:attr:`Layout.expert_shard_degree`);
    each class is held as :meth:`model.frameworks.Mechanism.memory_terms` says.

    Raises
    ------
    LayoutError
        A ZeRO stage the framework does not model.

    Examples
    --------
    The ZeRO paper's 7.5B on 64 GPUs, ZeRO-1 (textbook): 31.4 GB (Figure 1).

    >>> from trainplan.model.specs import TrainingSpec
    >>> t = TrainingSpec(seq_len=1, global_batch_size=64)
    >>> lay = Layout(dp=64, framework="textbook")
    >>> model_state(Fraction(7_500_000_000), Fraction(0), lay, t, 1).total_bytes
    Fraction(31406250000, 1)
    >>> model_state(Fraction(7_500_000_000), Fraction(0), lay.with_(framework="megatron"), t, 1).total_bytes
    Fraction(46406250000, 1)
    """
    stage = layout.zero_stage if zero_stage is None else zero_stage
    mech = mechanism(
        layout.framework,
        stage,
        training.weight_bytes,
        training.gradient_bytes,
        training.optimizer_bytes,
    )
    return _model_state(
        dense_params,
        expert_params,
        layout.shard_degree,
        layout.expert_shard_degree,
        mech,
        gather_unit,
        linear,
        cache_bytes_per_element(training, layout.framework),
        training.offload,
        layout.num_microbatches(training.global_batch_size) > 1,
        training.fp8_param_gather,
    )


@cache
def _model_state(
    dense_params: Fraction,
    expert_params: Fraction,
    shard: int,
    expert_shard: int,
    mech: Mechanism,
    unit: tuple[Fraction, Fraction],
    linear: tuple[Fraction, Fraction] = (Fraction(0), Fraction(0)),
    cache_bytes: int = 0,
    offload: Offload = NO_OFFLOAD,
    accumulating: bool = False,
    fp8_params: bool = False,
) -> ModelState:
    """Sum of :meth:`Mechanism.memory_terms` over the dense and the expert parameters. Under
    ``textbook`` (the textbook convention, Rajbhandari et al. 2019) per parameter class with D
    replicas:

    * ZeRO-0: ``(2 + 2 + 12)·P``   * ZeRO-1: ``(2 + 2 + 12/D)·P``
    * ZeRO-2: ``(2 + 14/D)·P``     * ZeRO-3: ``16/D·P`` (+ two gathered units)

    The fixed buckets are counted once, not per parameter class.
    """
    w, g, o, gathered, buffers, step, cache, host = state_terms(
        mech, dense_params, expert_params, shard, expert_shard, unit[0], unit[1], *linear,
        cache_bytes, offload, accumulating, fp8_params,
    )  # fmt: skip
    return ModelState(w, g, o, gathered, buffers, step, host, cache)


def cache_bytes_per_element(training: TrainingSpec, framework: Framework) -> int:
    """Bytes per linear weight element of the low-precision copies the recipe caches:
    :data:`model.precision.FP8_WEIGHT_CACHE_BYTES` under fp8 where the framework caches them
    (:attr:`model.frameworks.Framework.fp8_caches_weights`), else 0. With FP8 primary weights
    (:attr:`model.specs.TrainingSpec.fp8_param_gather`) the FP8 weight is the parameter itself
    and only its transpose is cached: 1 B (Transformer Engine's ``Float8Tensor`` transpose
    cache; counted on every device, although Blackwell keeps no transpose for per-tensor
    scaling)."""
    fp8 = training.precision is Precision.FP8 and framework.fp8_caches_weights
    if not fp8:
        return 0
    return FP8_WEIGHT_CACHE_BYTES - 1 if training.fp8_param_gather else FP8_WEIGHT_CACHE_BYTES


def weight_cache_terms(
    mech: Mechanism, linear: Any, layer_linear: Any, cache_bytes: int
) -> tuple[Any, Any]:
    """(persistent cache, cache of the gathered units) bytes on one GPU for ``cache_bytes`` per
    linear weight element: the stage's ``linear`` elements when the weights are held whole (TE
    caches the FP8 weight and transpose for the step); else, under ZeRO-3 / FSDP, copies of the
    :attr:`Mechanism.gathered_units` gathered layers only (``layer_linear``: the largest
    layer's). Exact for Fractions; element-wise for arrays."""
    if not cache_bytes:
        return 0, 0
    if mech.weights_full:
        return cache_bytes * linear, 0
    return 0, cache_bytes * mech.gathered_units * layer_linear


def state_terms(
    mech: Mechanism,
    dense_params: Any,
    expert_params: Any,
    shard: Any,
    expert_shard: Any,
    dense_unit: Any,
    expert_unit: Any,
    linear: Any = 0,
    layer_linear: Any = 0,
    cache_bytes: int = 0,
    offload: Offload = NO_OFFLOAD,
    accumulating: Any = False,
    fp8_params: bool = False,
) -> tuple[Any, ...]:
    """(weights, gradients, optimizer, gathered, buffers, step extra, weight cache, host) bytes
    of one GPU: the mechanism's terms for the dense parameters (replicated over ``shard`` ranks)
    plus those of the routed experts (over ``expert_shard``), the framework's fixed buckets
    once, the recipe's cached weight copies (:func:`weight_cache_terms`; in ``gathered`` under
    ZeRO-3), and what ``offload`` moves to the GPU's share of the host
    (:func:`model.offload.offload_memory`, with its accumulation buffers when ``accumulating``:
    more than one micro-batch per step; the last term). With ``fp8_params`` (FP8 primary
    weights, :attr:`model.specs.TrainingSpec.fp8_param_gather`) the ``linear`` weight elements
    held whole are 1 B each instead of the mechanism's working dtype. Exact for Fractions;
    element-wise for arrays of layouts (the search's tables call it so)."""
    dense = mech.memory_terms(dense_params, shard, dense_unit)
    experts = mech.memory_terms(expert_params, expert_shard, expert_unit)
    w, g, o, gathered, buffers, step = (a + b for a, b in zip(dense, experts, strict=True))
    if fp8_params and mech.weights_full:
        w = w - (mech.weight_bytes - FP8_PARAM_BYTES) * linear
    cache, gathered_cache = weight_cache_terms(mech, linear, layer_linear, cache_bytes)
    elements = optimizer_elements(mech, dense_params, expert_params, shard, expert_shard)
    w, g, o, step, host = offload_memory(mech, offload, w, g, o, step, elements, accumulating)
    if offload.params:
        # the local shard lives on the host, so each gathered unit is whole on the GPU
        # (DeepSpeed stage3 fetches the CPU partition into the full-size gathered buffer;
        # FSDP2's CPUOffloadPolicy copies the shard in before its all-gather)
        shards = dense_unit / shard + expert_unit / expert_shard
        gathered = gathered + mech.gathered_units * mech.weight_bytes * shards
    if mech.bucket_persists:  # DeepSpeed ZeRO-3's IPG bucket is held through the step too
        step = step + mech.bucket_bytes
    return w, g, o, gathered + gathered_cache, buffers + mech.bucket_bytes, step, cache, host


def optimizer_elements(
    mech: Mechanism, dense_params: Any, expert_params: Any, shard: Any, expert_shard: Any
) -> Any:
    """Elements of optimizer state on one GPU: the shard (dense ÷ D, experts ÷ D_e) under a
    sharded optimizer, else every parameter on the GPU. What offload moves and the CPU steps."""
    if mech.optimizer_sharded:
        return dense_params / shard + expert_params / expert_shard
    return dense_params + expert_params


@dataclass(frozen=True, slots=True)
class StageActivations:
    """Activation bytes on one GPU of one pipeline stage (exact)."""

    layers_bytes: Fraction
    """What the transformer layers keep for backward over all micro-batches in flight
    (checkpoints included under full / √n recomputation)."""
    recompute_transient_bytes: Fraction
    """Extra bytes while one layer (full) or one segment (√n) is recomputed, less the
    checkpoint it starts from; counted once."""
    embedding_bytes: Fraction
    """Input-embedding dropout mask (first stage) and output layer (last stage: final-norm
    input, output-projection input, FP32 logits ``4·S·V/tp``), times micro-batches in flight."""
    microbatches_in_flight: Fraction
    per_microbatch_bytes: Fraction
    """``layers_bytes`` for one micro-batch."""
    pipeline_output_bytes: Fraction = Fraction(0)
    """Stage outputs kept for backward after they were sent to the next stage (``β·S·h``, ÷ tp
    with SP, per model chunk in flight); 0 when ``Layout.deallocate_pipeline_outputs`` (the
    default, Megatron-LM's ``deallocate_pipeline_outputs``)."""
    cp_transient_bytes: Fraction = Fraction(0)
    """What the context-parallel exchange holds beside the kept activations while one layer's
    attention runs (received K/V chunks, gathered K/V and their gradients, all-to-all staging;
    :func:`model.context_parallel.cp_transient_bytes`), counted once; 0 with cp = 1 or on a
    stage without transformer layers."""
    offload_buffer_bytes: Fraction = Fraction(0)
    """Activation offload (:mod:`model.activation_offload`): the offloaded tensors still on the
    GPU — the group never offloaded and one layer in transit
    (:func:`model.activation_offload.offload_buffer_bytes`); ``layers_bytes`` leaves every
    offloaded tensor out. 0 without activation offload."""
    offload_host_bytes: Fraction = Fraction(0)
    """Activation offload: the offloaded tensors of every layer and micro-batch in flight on the
    host, less the group never offloaded. Not part of any GPU total."""

    @property
    def total_bytes(self) -> Fraction:
        return (
            self.layers_bytes
            + self.recompute_transient_bytes
            + self.embedding_bytes
            + self.pipeline_output_bytes
            + self.cp_transient_bytes
            + self.offload_buffer_bytes
        )


def keeps_gathered_inputs(framework: Framework, training: TrainingSpec) -> bool:
    """Whether tensor parallelism keeps the blocks' all-gathered inputs: the recipe's
    :attr:`model.specs.TrainingSpec.gathered_block_inputs`, else the framework's
    (:attr:`model.frameworks.Framework.gathers_block_inputs`)."""
    if training.gathered_block_inputs is None:
        return framework.gathers_block_inputs
    return training.gathered_block_inputs


def _context(arch: Architecture, layout: Layout, training: TrainingSpec) -> ActivationContext:
    return ActivationContext(
        seq_len=training.seq_len,
        cp=layout.cp,
        micro_batch_size=layout.micro_batch_size,
        tp=layout.tp,
        sequence_parallel=layout.sp,
        flash_attention=training.flash_attention,
        activation_bytes=training.activation_bytes,
        convention=training.activation_convention,
        memory_efficient_norm=training.memory_efficient_norm,
        fp8_linear_inputs=training.precision is Precision.FP8
        and layout.framework.fp8_saves_fp8_inputs,
        cp_kind=layout.cp_kind,
        offload_modules=training.offload.activations,
        gathered_block_inputs=keeps_gathered_inputs(layout.framework, training),
        expert_tp=layout.expert_tp if layout.framework.gathers_expert_tokens else 1,
        combine_output_bytes=layout.framework.moe_combine_bytes(),
        ep=layout.ep,
        op_selective=layout.framework.op_selective,
        recompute_modules=training.recompute_modules,
        fp8_gemms=training.precision is Precision.FP8,
    )


def stage_activations(
    arch: Architecture,
    layers: tuple[int, ...],
    stage: int,
    layout: Layout,
    training: TrainingSpec,
    vocab_size: int | None = None,
) -> StageActivations:
    """Activation bytes on one GPU of pipeline stage ``stage`` holding ``layers``.

    * none: Σ layer bytes × in flight.  * selective: the same without the score tensors.
    * full: Σ checkpoints (``β·S·h`` ÷ tp with SP) × in flight, plus one layer's bytes less its
      checkpoint as the transient.
    * with ``Layout.recompute_layers``: the first k layers of each model chunk as full, the
      others as the base mode, the largest recompute transient
      (:func:`model.stage_bytes.block_forms`; per chunk when interleaved,
      :func:`model.stage_bytes.chunk_block_forms`, each chunk weighing its own bytes in the
      interleaved peak).
    * √n: k = round(√n) for the stage's n layers; ``ceil(n/k)`` checkpoints × in flight, plus the
      largest segment's bytes less its checkpoint (full recomputation is k = 1).

    With context parallelism the exchange's buffers of one layer are added once
    (:attr:`StageActivations.cp_transient_bytes`).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture, TrainingSpec
    >>> arch = Architecture(num_layers=4, hidden_size=8, num_attention_heads=2,
    ...                     ffn_hidden_size=32, vocab_size=16, dropout=True)
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1, flash_attention=False)
    >>> a = stage_activations(arch, (0, 1, 2, 3), 0, Layout(recompute="none"), t)
    >>> a.layers_bytes == 4 * (34 * 4 * 8 + 5 * 2 * 4 * 4)
    True
    """
    m = layout.num_microbatches(training.global_batch_size)
    # Everything below reads these fields only: memoise on them (the search asks for the same
    # stage under many dp and zero_stage values).
    key = (
        arch,
        layers,
        stage,
        layout.pp,
        layout.virtual_stages,
        layout.schedule,
        layout.recompute,
        layout.recomputed_on(stage),
        layout.micro_batch_size,
        layout.tp,
        layout.cp,
        layout.cp_kind,
        layout.cp_a2a,
        layout.sp,
        layout.uneven_stages,
        layout.stage_layers,
        layout.deallocate_pipeline_outputs,
        layout.framework,
        layout.ep,
        layout.etp,
        training,
        vocab_size,
        # m matters only through the micro-batches in flight, except for interleaved chunks,
        # whose peak is found chunk by chunk
        m
        if layout.virtual_stages > 1
        else microbatches_in_flight(layout.pp, m, layout.schedule, layout.virtual_stages, stage),
    )
    found = _STAGE_MEMO.get(key)
    if found is None:
        found = _STAGE_MEMO[key] = _stage_activations(
            arch, layers, stage, layout, training, vocab_size, m
        )
    return found


_STAGE_MEMO: dict[tuple[object, ...], StageActivations] = {}


def _stage_activations(
    arch: Architecture,
    layers: tuple[int, ...],
    stage: int,
    layout: Layout,
    training: TrainingSpec,
    vocab_size: int | None,
    m: int,
) -> StageActivations:
    """The stage's bytes from :mod:`model.stage_bytes`' terms (the search's tables assemble the
    same terms over arrays of layouts)."""
    ctx = _context(arch, layout, training)
    q = layer_quantities(arch, ctx)
    pp, v, mode = layout.pp, layout.virtual_stages, layout.recompute
    in_flight = microbatches_in_flight(pp, m, layout.schedule, v, stage)
    kinds = tuple(arch.is_moe_layer(j) for j in layers)
    recomputed = layout.recomputed_on(stage)
    local = local_chunks(arch, pp, v, layout.uneven_stages, stage, layout.stage_layers)
    forms: tuple[Form, ...] | None = None  # per model chunk, with per-chunk counts (v > 1)
    if recomputed is not None and v > 1:
        forms, transient_forms = chunk_block_forms(local, mode, recomputed)
        per_form = tuple(sum(c) for c in zip(*forms, strict=True))
    else:
        per_form, transient_forms = block_forms(kinds, mode, recomputed)
    per_mb, transient = apply_form(per_form, q), peak_transient(transient_forms, q)
    emb = embedding_bytes(
        arch,
        stage == 0,
        stage == pp - 1,
        ctx.tokens,
        layout.tp,
        layout.sp,
        training.activation_bytes,
        vocab_size or arch.vocab_size,
        keeps_gathered_inputs(layout.framework, training),
    )
    outputs = _pipeline_output_bytes(arch, ctx, stage, layout) * in_flight
    r, u = cp_degrees(layout.cp_kind, layout.cp, layout.cp_a2a)
    gather = layout.cp_kind is CpKind.ALL_GATHER
    beta = training.activation_bytes
    cp_buffers = cp_transient_bytes(arch, r, u, gather, layout.tp, ctx.tokens, beta) * bool(layers)
    off_q = offload_quantities(arch, ctx)
    if layout.schedule is not Schedule.INTERLEAVED or v == 1 or pp == 1:
        buffer, host = _offload_lines(
            kinds, in_flight, off_q, apply_form(per_form, off_q) * in_flight, mode
        )
        return StageActivations(
            per_mb * in_flight,
            transient,
            emb * in_flight,
            in_flight,
            per_mb,
            outputs,
            cp_buffers,
            buffer,
            host,
        )
    # Interleaved: the peak found chunk by chunk (model.pipeline.interleaved_peak); with
    # per-stage counts each chunk weighs its own recomputed layers (chunk_block_forms). Under √n
    # the chunks' checkpoints are not modelled per chunk: the closed form holds, and the layer
    # counts place the end chunk's micro-batches.
    offloaded = Fraction(0)
    if mode is Recompute.SQRT:
        held, end_held = chunk_peak(pp, m, v, stage, [Fraction(len(c)) for c in local], 0)
        kept = per_mb * in_flight
    else:
        if forms is None:
            forms = tuple(chunk_form(c, mode) for c in local)
        chunk_bytes = [apply_form(f, q) for f in forms]
        held, end_held = chunk_peak(pp, m, v, stage, chunk_bytes, emb)
        kept = sum((n * b for n, b in zip(held, chunk_bytes, strict=True)), Fraction(0))
        offloaded = sum(
            (n * apply_form(f, off_q) for n, f in zip(held, forms, strict=True)), Fraction(0)
        )
    buffer, host = _offload_lines(kinds, in_flight, off_q, offloaded, mode)
    return StageActivations(
        kept,
        transient,
        emb * end_held,
        kept / per_mb if per_mb else in_flight,
        per_mb,
        outputs,
        cp_buffers,
        buffer,
        host,
    )


def _offload_lines(
    kinds: tuple[bool, ...],
    in_flight: Fraction,
    off_q: tuple[Fraction, ...],
    offloaded: Fraction,
    mode: Recompute,
) -> tuple[Fraction, Fraction]:
    """(GPU buffer, host bytes) of activation offload on a stage of layer ``kinds`` holding
    ``in_flight`` micro-batches whose layers offload ``offloaded`` bytes in all (:func:`model.
    stage_bytes.offload_quantities` figures ``off_q``): the buffer of
    :func:`model.activation_offload.offload_buffer_bytes` for the stage's largest per-layer
    offload, and the rest on the host."""
    if not offloaded:
        return Fraction(0), Fraction(0)
    figure = 1 if mode is Recompute.SELECTIVE else 0
    per_layer = max(off_q[4 * k + figure] for k in set(kinds))
    buffer = min(offload_buffer_bytes(per_layer, len(kinds) * in_flight), offloaded)
    return buffer, offloaded - min(per_layer, offloaded)


@cache
def local_chunks(
    arch: Architecture,
    pp: int,
    v: int,
    uneven: bool,
    stage: int,
    sizes: tuple[int, ...] | None = None,
) -> tuple[tuple[bool, ...], ...]:
    """The layer kinds (MoE or not) of each of a stage's v model chunks
    (:func:`model.split.stage_chunks`: chunks i, i + pp, … of the pp·v consecutive chunks,
    explicit per-chunk ``sizes`` or the default split, the MTP blocks in the last)."""
    chunks = stage_chunks(arch, pp, v, uneven, stage, sizes)
    return tuple(tuple(arch.is_moe_layer(j) for j in chunk) for chunk in chunks)


def _pipeline_output_bytes(
    arch: Architecture, ctx: ActivationContext, stage: int, layout: Layout
) -> Fraction:
    """Bytes of the stage outputs one micro-batch leaves on this GPU when they are not
    deallocated after the send: one ``β·S·h`` tensor (÷ tp with sequence parallelism) per model
    chunk that sends (v on every stage but the last, v − 1 there).

    The output of a pipeline stage is sent to the next stage, but autograd keeps the tensor for
    the backward pass; only its ``grad_fn`` is needed. Megatron-LM's
    ``deallocate_pipeline_outputs`` (``megatron/core/pipeline_parallel/schedules.py``,
    ``deallocate_output_tensor``) replaces its data with a scalar after the send; Korthikanti et
    al. 2022 (arXiv 2205.05198) Appendix B shows the saving on the 530B model's first stage, and
    Llama 3 (arXiv 2407.21783) §3.3.2 deallocates stage inputs and outputs the same way.
    """
    if layout.deallocate_pipeline_outputs or layout.pp == 1:
        return Fraction(0)
    sp_div = ctx.tp if ctx.sequence_parallel else 1
    one = ctx.activation_bytes * ctx.tokens * arch.hidden_size / sp_div
    v = layout.virtual_stages
    senders = v - 1 if stage == layout.pp - 1 else v
    return one * senders  # × micro-batches in flight (each of v chunks) = chunks in flight
