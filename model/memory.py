"""Per-GPU memory: model state under ZeRO 0–3 and activations under each recompute mode.

Model state (Rajbhandari et al. 2019, arXiv 1910.02054, §3.1 and Figure 1): mixed-precision
Adam keeps 2 B BF16 weights + 2 B BF16 gradients + 12 B optimizer state (FP32 master, two FP32
moments) per parameter. ZeRO shards over the D replicas of a parameter (D = dp·cp for dense
parameters, D_e = dp·cp/ep for routed experts): ZeRO-1 the optimizer state, ZeRO-2 also the
gradients, ZeRO-3 / FSDP also the weights.

Activations (Korthikanti et al. 2022, arXiv 2205.05198, §4 and §5; Chen et al. 2016, arXiv
1604.06174): the per-layer bytes of :mod:`model.activations` times the layers of the stage times
the micro-batches the schedule keeps in flight on it (:func:`model.pipeline.microbatches_in_flight`);
full and √n recomputation keep checkpoints instead and add a transient, counted once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cache
from typing import Any

from trainplan.model.activations import ActivationContext, layer_activations
from trainplan.model.frameworks import Mechanism, mechanism
from trainplan.model.layout import Layout, Recompute
from trainplan.model.params import split_layers
from trainplan.model.pipeline import Schedule, interleaved_chunks_held, microbatches_in_flight
from trainplan.model.specs import Architecture, TrainingSpec

__all__ = [
    "ModelState",
    "model_state",
    "StageActivations",
    "stage_activations",
    "sqrt_segment",
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
    DeepSpeed ``stage3_prefetch_bucket_size``). Not part of ``total_bytes`` (the seed's model
    state); counted in the GPU's total."""
    buffers_bytes: Fraction = Fraction(0)
    """Live in forward/backward only: one unit's unsharded gradients before their reduction
    (FSDP2) and the framework's fixed communication buckets (DeepSpeed's IPG bucket)."""
    step_bytes: Fraction = Fraction(0)
    """Live during the optimizer step only: DeepSpeed's FP32 gradient partition (of one
    sub-group under ZeRO-3)."""

    @property
    def total_bytes(self) -> Fraction:
        """Weights + gradients + optimizer state (the seed's 16 B/param, sharded)."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    @property
    def resident_bytes(self) -> Fraction:
        """``total_bytes`` plus the ZeRO-3 gather buffer: held through forward and backward."""
        return self.total_bytes + self.gathered_bytes

    @property
    def backward_bytes(self) -> Fraction:
        """Model-state bytes at the forward/backward peak: resident + buffers."""
        return self.resident_bytes + self.buffers_bytes

    @property
    def optimizer_step_bytes(self) -> Fraction:
        """Bytes while the optimizer steps (no activations are live then): state + step extras."""
        return self.total_bytes + self.step_bytes


def model_state(
    dense_params: Fraction,
    expert_params: Fraction,
    layout: Layout,
    training: TrainingSpec,
    zero_stage: int | None = None,
    gather_unit: tuple[Fraction, Fraction] = (Fraction(0), Fraction(0)),
) -> ModelState:
    """Model-state bytes on one GPU (weights, gradients, optimizer state, gathered units,
    buffers, step extras) under a ZeRO stage of the layout's framework.

    ``dense_params`` / ``expert_params``: parameters on this GPU before ZeRO (after tp; experts
    after etp·ep). ``gather_unit``: (dense, expert) parameters on this GPU of the largest unit
    gathered or reduced at once (a layer, the embedding or the output layer). Dense parameters
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
    )


@cache
def _model_state(
    dense_params: Fraction,
    expert_params: Fraction,
    shard: int,
    expert_shard: int,
    mech: Mechanism,
    unit: tuple[Fraction, Fraction],
) -> ModelState:
    """Sum of :meth:`Mechanism.memory_terms` over the dense and the expert parameters. Under
    ``textbook`` (the seed's convention, Rajbhandari et al. 2019) per parameter class with D
    replicas:

    * ZeRO-0: ``(2 + 2 + 12)·P``   * ZeRO-1: ``(2 + 2 + 12/D)·P``
    * ZeRO-2: ``(2 + 14/D)·P``     * ZeRO-3: ``16/D·P`` (+ two gathered units)

    The fixed buckets are counted once, not per parameter class.
    """
    w, g, o, gathered, buffers, step = state_terms(
        mech, dense_params, expert_params, shard, expert_shard, unit[0], unit[1]
    )
    return ModelState(w, g, o, gathered, buffers, step)


def state_terms(
    mech: Mechanism,
    dense_params: Any,
    expert_params: Any,
    shard: Any,
    expert_shard: Any,
    dense_unit: Any,
    expert_unit: Any,
) -> tuple[Any, ...]:
    """(weights, gradients, optimizer, gathered, buffers, step extra) bytes on one GPU: the
    mechanism's terms for the dense parameters (replicated over ``shard`` ranks) plus those of the
    routed experts (over ``expert_shard``), and the framework's fixed buckets once. Exact for
    Fractions; element-wise for arrays of layouts (the search's tables call it so)."""
    dense = mech.memory_terms(dense_params, shard, dense_unit)
    experts = mech.memory_terms(expert_params, expert_shard, expert_unit)
    w, g, o, gathered, buffers, step = (a + b for a, b in zip(dense, experts, strict=True))
    return w, g, o, gathered, buffers + mech.bucket_bytes, step


def sqrt_segment(num_layers: int) -> int:
    """k = round(√n) layers per checkpointed segment (≥ 1; halves round up). Chen et al. 2016 §4.

    Examples
    --------
    >>> sqrt_segment(100), sqrt_segment(8), sqrt_segment(1)
    (10, 3, 1)
    """
    return max(1, math.floor(math.sqrt(num_layers) + 0.5))


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

    @property
    def total_bytes(self) -> Fraction:
        return (
            self.layers_bytes
            + self.recompute_transient_bytes
            + self.embedding_bytes
            + self.pipeline_output_bytes
        )


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
    )


def _embedding_bytes(
    arch: Architecture, ctx: ActivationContext, stage: int, pp: int, vocab: int
) -> Fraction:
    sp_div = ctx.tp if ctx.sequence_parallel else 1
    S, beta, h = ctx.tokens, ctx.activation_bytes, arch.hidden_size
    total = Fraction(0)
    if stage == 0 and arch.dropout:
        total += S * h / sp_div
    if stage == pp - 1:
        total += 2 * beta * S * h / sp_div + 4 * S * vocab / ctx.tp
    return total


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
    * √n: k = round(√n) for the stage's n layers; ``ceil(n/k)`` checkpoints × in flight, plus the
      largest segment's bytes less its checkpoint (full recomputation is k = 1).

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
        layout.micro_batch_size,
        layout.tp,
        layout.cp,
        layout.sp,
        layout.uneven_stages,
        layout.deallocate_pipeline_outputs,
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
    ctx = _context(arch, layout, training)
    in_flight = microbatches_in_flight(layout.pp, m, layout.schedule, layout.virtual_stages, stage)
    kinds = tuple(arch.is_moe_layer(j) for j in layers)
    per_mb, transient = _per_microbatch(arch, kinds, layout.recompute, ctx)
    emb = _embedding_bytes(arch, ctx, stage, layout.pp, vocab_size or arch.vocab_size)
    outputs = _pipeline_output_bytes(arch, ctx, stage, layout) * in_flight
    chunks = _interleaved_peak(arch, layers, stage, layout, m, ctx, emb)
    if chunks is None:
        return StageActivations(
            per_mb * in_flight, transient, emb * in_flight, in_flight, per_mb, outputs
        )
    kept, held = chunks
    # the embedding lives in the stage's first chunk, the output layer in the last one: each is
    # held for as many micro-batches as its chunk (the last stage's last chunk: one at a time)
    emb_held = held[0] if stage == 0 else held[-1]
    if kept is None or not per_mb:  # √n: per-chunk checkpoints are not modelled; closed form
        kept = per_mb * in_flight
    return StageActivations(
        kept, transient, emb * emb_held, kept / per_mb if per_mb else in_flight, per_mb, outputs
    )


def _interleaved_peak(
    arch: Architecture,
    layers: tuple[int, ...],
    stage: int,
    layout: Layout,
    m: int,
    ctx: ActivationContext,
    end_bytes: Fraction = Fraction(0),
) -> tuple[Fraction | None, tuple[int, ...]] | None:
    """(layer bytes held at the peak, micro-batches held per local chunk) of an interleaved
    stage, found chunk by chunk. Megatron's warm-up runs the first chunk for pp micro-batches,
    then the next chunk…, so the chunks hold different counts
    (:func:`model.pipeline.interleaved_chunks_held`): a small first chunk (uneven ``pp·v``, e.g.
    Llama 3 405B's 126 layers in 64 chunks) holds more micro-batches than the others, and the
    last stage's last chunk — the one with the output layer — holds one micro-batch at a time.
    The peak is found by bytes, ``end_bytes`` (the embedding's or output layer's activations per
    micro-batch) weighing the stage's first chunk (stage 0) or last chunk (last stage): an empty
    last chunk still holds the output layer's logits. Under √n recomputation the layer bytes are
    None (the closed form is used) and the counts come from the chunks' layer counts. None
    without interleaving."""
    v, pp = layout.virtual_stages, layout.pp
    if layout.schedule is not Schedule.INTERLEAVED or v == 1 or pp == 1:
        return None
    chunks = split_layers(arch.num_layers, pp * v, 1, layout.uneven_stages)
    local = [chunks[stage + j * pp] for j in range(v)]
    if layout.recompute is Recompute.SQRT:
        counts = tuple(Fraction(len(c)) for c in local)
        return None, interleaved_chunks_held(pp, m, v, stage, counts)

    def kept(j: int) -> Fraction:
        a = layer_activations(arch, j, ctx)
        if layout.recompute is Recompute.NONE:
            return a.full_bytes
        if layout.recompute is Recompute.SELECTIVE:
            return a.selective_bytes
        return a.checkpoint_bytes

    chunk_bytes = [sum((kept(j) for j in chunk), Fraction(0)) for chunk in local]
    weights = list(chunk_bytes)
    if stage == 0:
        weights[0] += end_bytes
    elif stage == pp - 1:
        weights[-1] += end_bytes
    held = interleaved_chunks_held(pp, m, v, stage, tuple(weights))
    total = sum((n * b for n, b in zip(held, chunk_bytes, strict=True)), Fraction(0))
    return total, held


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


@cache
def _per_microbatch(
    arch: Architecture, kinds: tuple[bool, ...], mode: Recompute, ctx: ActivationContext
) -> tuple[Fraction, Fraction]:
    """(bytes kept per micro-batch, recompute transient) of a stage whose layers are MoE or not
    as ``kinds`` says; cached, since most stages of a layout repeat the same layers."""
    first_moe = arch.moe.first_k_dense_layers if arch.moe else 0
    acts = [layer_activations(arch, first_moe if moe else 0, ctx) for moe in kinds]
    transient = Fraction(0)
    if mode is Recompute.NONE:
        return sum((a.full_bytes for a in acts), Fraction(0)), transient
    if mode is Recompute.SELECTIVE:
        return sum((a.selective_bytes for a in acts), Fraction(0)), transient
    k = 1 if mode is Recompute.FULL else sqrt_segment(len(acts))
    segments = [acts[i : i + k] for i in range(0, len(acts), k)]
    ckpts = [seg[0].checkpoint_bytes for seg in segments]
    per_mb = sum(ckpts, Fraction(0))
    # Backward runs the segments last to first and frees a segment's checkpoint when its
    # backward is done, so while segment j is recomputed the checkpoints after it are gone:
    # transient_j = its layers' bytes − its own checkpoint (the input its first layer keeps, none
    # with memory-efficient norms) − the later checkpoints. When k divides
    # n the last segment is the largest and this is k·full_layer − checkpoint (Chen et al. 2016);
    # a shorter last segment makes the one before it the peak (measured in tests/fidelity).
    transient = (
        max(
            sum((a.full_bytes for a in seg), Fraction(0))
            - seg[0].input_bytes
            - sum(ckpts[j + 1 :], Fraction(0))
            for j, seg in enumerate(segments)
        )
        if segments
        else Fraction(0)
    )  # a stage of no layers (embedding or output layer only)
    return per_mb, transient
