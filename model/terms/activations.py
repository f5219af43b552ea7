"""The activation term: bytes one GPU of a pipeline stage holds for backward, at its peak.

Korthikanti et al. 2022 (arXiv 2205.05198, §4 and §5) and Chen et al. 2016 (arXiv 1604.06174):
the per-layer bytes of :mod:`model.activations` (:func:`model.stage_bytes.layer_quantities`,
per distinct activation context), combined over the stage's layers as the recompute mode keeps
them (:func:`model.stage_bytes.stage_forms`, per distinct split), times the micro-batches the
schedule keeps in flight on the stage (:func:`model.pipeline.flat_in_flight`; interleaved
stages chunk by chunk, :func:`model.stage_bytes.chunk_peak`); full and √n recomputation keep
checkpoints instead and add a transient, counted once, as are the buffers a context-parallel
flavour holds while one layer's attention runs (:mod:`model.context_parallel`) and activation
offload's GPU buffer (:mod:`model.activation_offload`).

The term (:func:`stage_activations_term`) is written once over a layout's fields
(:mod:`model.terms.fields`): exact for one layout, element-wise over the search's columns.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from trainplan.model.activation_copies import offload_backlog_bytes, prefetched_layers
from trainplan.model.activation_offload import layer_offload_bytes, offload_buffer_bytes
from trainplan.model.deepspeed_layers import keeps_embedding_view
from trainplan.model.eager_saved import final_norm_eager, final_norm_extra_bytes
from trainplan.model.end_stage_bytes import embedding_bytes, mtp_copied, mtp_recompute_transient
from trainplan.model.layout import Layout, Recompute
from trainplan.model.model_spec import ModelSpec
from trainplan.model.offload import host_rates
from trainplan.model.pipeline import (
    SPLIT_BACKWARD,
    Schedule,
    flat_in_flight,
    interleaved_in_flight,
)
from trainplan.model.schedule_cost import in_flight_units
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.split import stage_layers
from trainplan.model.stage_bytes import (
    apply_form,
    chunk_peak,
    peak_transient,
)
from trainplan.model.terms.activation_fields import (
    CONTEXT_FIELDS,
    FORM_FIELDS,
    LAYER_FIELDS,
    backward_working_term,
    chunk_forms,
    end_stages,
    gathers_block_inputs,
    head_norms_recomputed,
    kept_form,
    layer_figures,
    mirror_kept_form,
    offload_figures,
    output_layer_phase,
    output_stage,
    split_forms,
    stage_layer_counts,
    transient_forms,
    weight_pass_term,
)
from trainplan.model.terms.cp_phases import cp_buffers_term
from trainplan.model.terms.fields import Context, Fields, LayoutFields
from trainplan.model.terms.last_stage_loss import last_stage_loss, loss_kept
from trainplan.model.terms.moe_working import moe_forward_peak, moe_over
from trainplan.model.terms.pipeline_buffers import (
    boundary_tensors,
    deepspeed_load_transient,
)
from trainplan.model.terms.split_free import split_free
from trainplan.model.terms.step import offload_layer_forward_s
from trainplan.model.value_head import logits_columns_of
from trainplan.model.xp import exact, floor, is_array, maximum, minimum, namespace, where

__all__ = ["StageActivations", "stage_activations", "stage_activations_term"]


@dataclass(frozen=True, slots=True)
class StageActivations:
    """Activation bytes on one GPU of one pipeline stage (exact for one layout; columns of
    layouts in the search's tables)."""

    layers_bytes: Fraction
    """What the transformer layers keep for backward over all micro-batches in flight
    (checkpoints included under full / √n recomputation), and under a split-backward schedule
    run by PyTorch's pipelining the output gradients kept for the pending weight passes
    (:func:`model.terms.activation_fields.weight_pass_term`)."""
    recompute_transient_bytes: Fraction
    """Extra bytes while one layer (full) or one segment (√n) is recomputed, less the
    checkpoint it starts from; counted once."""
    embedding_bytes: Fraction
    """Input-embedding dropout mask (first stage; under ``deepspeed`` with sequence parallelism
    and no dropout the embedding's whole output, :func:`_view_rest`) and output layer (last stage: final-norm
    input, output-projection input, FP32 logits ``4·S·V/tp``), times micro-batches in flight."""
    microbatches_in_flight: Fraction
    per_microbatch_bytes: Fraction
    """``layers_bytes`` for one micro-batch."""
    pipeline_output_bytes: Fraction = Fraction(0)
    """Stage outputs kept for backward after they were sent to the next stage (``β·S·h``, ÷ tp
    with SP, per model chunk in flight); 0 when ``Layout.deallocate_pipeline_outputs`` (the
    default, Megatron-LM's ``deallocate_pipeline_outputs``) except under ``fsdp2``, whose
    PyTorch schedules keep them; there also PyTorch's receive buffers, one per micro-batch
    (:func:`_torch_recv_buffers`); under ``deepspeed`` what its pipeline engine keeps
    (:func:`model.terms.pipeline_buffers.deepspeed_kept_per_microbatch`)."""
    cp_transient_bytes: Fraction = Fraction(0)
    """What the context-parallel exchange's buffers add to one layer's backward phase
    (:attr:`layer_backward_bytes`) beyond the backward working set, counted once
    (:func:`model.terms.cp_phases.cp_buffers_term`): the backward's buffers at the attention-core
    step beyond the working set's headroom above it, or the forward's (received K/V chunks and
    partial outputs, gathered K/V, all-to-all staging; beside the kept layers and the recompute
    transient) beyond the backward phase, the larger; PyTorch's ``context_parallel``: the
    gathered K/V and FP32 dQ, dK, dV of its backward
    (:func:`model.context_parallel.templated_transient_bytes`). 0 with cp = 1 or on a stage
    without transformer layers."""
    offload_buffer_bytes: Fraction = Fraction(0)
    """Activation offload (:mod:`model.activation_offload`): the offloaded tensors still on the
    GPU — one layer's, the group of each module name never offloaded
    (:func:`model.activation_offload.offload_buffer_bytes`), the copies still queued on the
    copy stream when a forward ends (:func:`model.activation_copies.offload_backlog_bytes`) and
    the layer a backward pre-reloads (:func:`model.activation_copies.prefetched_layers`);
    ``layers_bytes`` leaves every offloaded tensor out. 0 without activation offload."""
    offload_host_bytes: Fraction = Fraction(0)
    """Activation offload: the offloaded tensors of every layer and micro-batch in flight on the
    host, less the group never offloaded. Not part of any GPU total."""
    loss_transient_bytes: Fraction = Fraction(0)
    """The last stage's loss working set beyond the fp32 softmax ``embedding_bytes`` keeps, for
    one micro-batch (:func:`model.loss_memory.loss_transient_bytes`: the BF16 logits, the fp32
    copy, backward's gradients, as the profile's default loss holds them). The loss's backward
    runs before any layer's: the peak takes the larger of the loss phase and the layers'
    backward phase (:attr:`layer_backward_bytes`). 0 on other stages."""
    backward_working_bytes: Fraction = Fraction(0)
    """One layer's backward working set, one micro-batch, the stage's larger layer kind
    (:func:`model.backward_working.backward_working_bytes`), with the logits' gradient a
    split-backward schedule keeps on the loss's stage
    (:func:`model.terms.activation_fields.output_layer_phase`) and the boundary tensors
    DeepSpeed's pipeline engine rebuilds whole for the stage's backward
    (:func:`model.terms.pipeline_buffers.deepspeed_backward_rebuilt`), and on the last stage of
    PyTorch's pipelining the micro-batch's logits its stage holds until the backward ends
    (:func:`model.loss_memory.pipeline_pred_bytes`); held with the recompute
    transient and the context-parallel buffers; 0 without transformer layers and under
    ``textbook``."""
    output_layer_freed_bytes: Fraction = Fraction(0)
    """The loss's stage: one micro-batch's output-layer bytes in ``embedding_bytes`` (the loss's
    kept logits among them), released with the output layer's backward, before any layer's
    backward; 0 elsewhere, under a split-backward schedule and under ``textbook``."""
    moe_forward_bytes: Fraction = Fraction(0)
    """Beside the kept layers at a MoE layer's forward working set, one micro-batch
    (:func:`model.terms.moe_working.moe_forward_peak`); the peak adds :attr:`moe_over_bytes`."""
    batch_load_bytes: Fraction = Fraction(0)
    """Under ``deepspeed`` with pp > 1, beyond the kept bytes while the first or last stage
    builds a micro-batch's causal mask (FP32, one micro-batch fewer held) or the first stage's
    forward holds its clone (:func:`model.terms.pipeline_buffers.deepspeed_load_transient`);
    the peak adds :attr:`load_over_bytes`. 0 elsewhere."""

    @property
    def layer_backward_bytes(self) -> Any:
        """One layer's backward phase beyond the kept bytes: recompute transient + CP buffers +
        working set − the output layer's released bytes (negative possible)."""
        return (
            self.recompute_transient_bytes
            + self.cp_transient_bytes
            + self.backward_working_bytes
            - self.output_layer_freed_bytes
        )

    @property
    def total_bytes(self) -> Fraction:
        """The kept bytes plus the largest of the loss phase, the layers' backward phase
        (:attr:`layer_backward_bytes`), a MoE layer's forward working set
        (:attr:`moe_over_bytes`) and DeepSpeed's batch load (:attr:`load_over_bytes`); never
        below the forward's end."""
        backward = self.layer_backward_bytes  # once: each over below reads it
        phase = maximum(backward, self.loss_transient_bytes)
        moe = self._moe_over(backward)
        return (
            self.layers_bytes
            + phase
            + moe
            + self._load_over(moe, phase)
            + self.embedding_bytes
            + self.pipeline_output_bytes
            + self.offload_buffer_bytes
        )

    @property
    def loss_over_bytes(self) -> Any:
        """``max(loss − layer backward, 0)`` (:attr:`layer_backward_bytes`): what the loss phase
        adds beyond the layers' backward phase, so that the memory lines sum to the total."""
        over = self.loss_transient_bytes - self.layer_backward_bytes
        return maximum(over, 0 * over)

    @property
    def moe_over_bytes(self) -> Any:
        """:func:`model.terms.moe_working.moe_over` of this stage's transients: beyond the layers'
        backward phase (:attr:`layer_backward_bytes`) and the loss phase."""
        return self._moe_over(self.layer_backward_bytes)

    def _moe_over(self, backward: Any) -> Any:
        """:attr:`moe_over_bytes` for the layers' backward phase ``backward`` (bytes,
        :attr:`layer_backward_bytes`)."""
        return moe_over(self.moe_forward_bytes, backward, self.loss_transient_bytes)

    @property
    def load_over_bytes(self) -> Any:
        """What the batch load (:attr:`batch_load_bytes`) adds beyond the layers' backward phase,
        the loss phase and a MoE layer's forward: ``max(load − those, 0)``."""
        backward = self.layer_backward_bytes
        phase = maximum(backward, self.loss_transient_bytes)
        return self._load_over(self._moe_over(backward), phase)

    def _load_over(self, moe: Any, phase: Any) -> Any:
        """:attr:`load_over_bytes` beyond a MoE layer's forward ``moe`` (:attr:`moe_over_bytes`)
        and the larger of the layers' backward phase and the loss phase, ``phase`` (bytes)."""
        over = self.batch_load_bytes - moe
        over = over - phase
        return maximum(over, 0 * over)


def _dualpipe_kept(
    c: Context, f: Fields, q: Any, per_mb: Any, emb: Any, head: Any
) -> tuple[Any, Any]:
    """(layer bytes, embedding/output-layer bytes) a DualPipe rank holds at its peak. The rank
    ``h = min(r, pp − 1 − r)`` from its end runs stage ``h`` for one direction and stage
    ``pp − 1 − h`` for the other (:func:`model.pipeline_zb.stage_placement`); ``DualPipe.step``
    (deepseek-ai/DualPipe ``dualpipe/dualpipe.py``) runs ``2·(pp/2 − h − 1)`` forwards of the
    first (step 1), ``h + 1`` pairs (step 2), keeps the second's count through step 3's
    ``B1 W1 F1`` and adds one more of the first in step 4's first block: ``pp − h`` micro-batches
    of stage h and ``h + 1`` of stage ``pp − 1 − h``, the report's ``PP + 1``. The embedding's
    activations go with stage 0's micro-batches, the output layer's are held once (its backward
    follows its forward)."""
    mirror_mb = apply_form(f.per_stage(mirror_kept_form, (c.arch,), *FORM_FIELDS), q)
    h = minimum(f.stage, f.pp - 1 - f.stage)
    front = f.stage <= f.pp - 1 - f.stage
    near, far = where(front, per_mb, mirror_mb), where(front, mirror_mb, per_mb)
    return near * (f.pp - h) + far * (h + 1), (emb - head) * (f.pp - h) + head


def _offload_lines(
    c: Context, f: Fields, n_layers: Any, n_moe: Any, in_flight: Any, off_q: Any, offloaded: Any
) -> tuple[Any, Any]:
    """(GPU buffer, host bytes) of activation offload on a stage whose layers offload
    ``offloaded`` bytes in all, for the stage's largest per-layer offload x (``off_q``:
    :func:`offload_figures`): on the GPU the layer never offloaded
    (:func:`model.activation_offload.offload_buffer_bytes`), the copies still queued when a
    micro-batch's forward over one model chunk ends
    (:func:`model.activation_copies.offload_backlog_bytes` at the host link's rate and
    :func:`model.terms.step.offload_layer_forward_s`; the last layer kept on the last stage) and,
    on a stage that is not the last of a pipeline in its steady state, the layer a backward
    pre-reloads for the next micro-batch (:func:`model.activation_copies.prefetched_layers`);
    all at most what the stage offloads. The host keeps the rest, less one layer (its figure
    left as it was: the queued copies land there). (0, 0) without activation offload."""
    if not c.training.offload.activations:
        return 0, 0
    figure = 1 if f.recompute is Recompute.SELECTIVE else 0
    per_layer = maximum(
        where(n_layers - n_moe > 0, off_q[figure], 0), where(n_moe > 0, off_q[4 + figure], 0)
    )
    kept = minimum(offload_buffer_bytes(per_layer, n_layers * in_flight), offloaded)
    # the copies still queued when a micro-batch's forward ends (over one model chunk's layers)
    # and the layer a backward pre-reloads for the next (pp > 1): on the GPU, not the host
    chunk = exact(n_layers) / f.virtual_stages
    last = output_stage(f)
    link, _ = host_rates(c.gpu, need_memory=False)
    forward_s = offload_layer_forward_s(c, f)
    offloaded_layers = where(last, maximum(chunk - 1, 0), chunk)
    pending = offload_backlog_bytes(per_layer, chunk, offloaded_layers, forward_s, link)
    steady = (f.schedule != Schedule.GPIPE) & (f.m > in_flight)
    prefetch = prefetched_layers(f.pp > 1, last, steady) * per_layer
    # a float of a time figure: whole bytes, rounded up (a copy still queued holds its bytes)
    pending = -floor(-(pending if is_array(pending) else Fraction(pending)))
    buffer = minimum(kept + pending + prefetch, offloaded)
    return buffer, offloaded - minimum(per_layer, offloaded)


def _layer_offload(c: Context, kept: Any, n_layers: Any, host: Any) -> tuple[Any, Any]:
    """(layer bytes left on the GPU, host bytes) under whole-layer CPU offload
    (``cpu_offloading_num_layers``, :func:`model.activation_offload.layer_offload_bytes`): the
    stage's ``kept`` layer bytes are one micro-batch's of its ``n_layers`` equal layers (pp = 1,
    dense, no recomputation: :func:`model.activation_offload.check_layer_offload`); unchanged
    without it."""
    n = c.training.cpu_offloading_num_layers
    if not n:
        return kept, host
    gpu, moved = layer_offload_bytes(kept / maximum(n_layers, 1), n_layers, n)
    return gpu, host + moved


def _in_flight(f: Fields) -> Any:
    """Micro-batches a stage of one model chunk holds at its peak
    (:func:`model.pipeline.microbatches_in_flight`): GPipe m, 1F1B ``min(pp − i, m)``, the
    interleaved schedule's warm-up with one chunk."""
    flat = flat_in_flight(f.pp, f.m, f.stage, f.schedule == Schedule.GPIPE)
    one_chunk = interleaved_in_flight(f.pp, f.m, 1, f.stage)
    return exact(where((f.schedule == Schedule.INTERLEAVED) & (f.pp > 1), one_chunk, flat))


def _layer_transient(c: Context, f: Fields, q: Any, tokens: Any) -> Any:
    """The layers' largest recompute transient (:func:`model.stage_bytes.peak_transient`) plus
    an MTP module's on the last stage (:func:`model.end_stage_bytes.mtp_recompute_transient`)."""
    arch, t = c.arch, c.training
    forms = split_forms(f.per_stage(transient_forms, (arch,), *FORM_FIELDS))
    return peak_transient(forms, q) + mtp_recompute_transient(
        arch, end_stages(f)[1], tokens, f.tp, f.sp, t.activation_bytes, _mtp_whole(f)
    )


def stage_activations_term(c: Context, f: Fields) -> StageActivations:
    """Activation bytes on one GPU of pipeline stage ``f.stage``.

    * none: Σ layer bytes × in flight.  * selective: the same without the score tensors.
    * full: Σ checkpoints (``β·S·h`` ÷ tp with SP) × in flight, plus one layer's bytes less its
      checkpoint as the transient.
    * with ``Layout.recompute_layers``: the first k layers of each model chunk as full, the
      others as the base mode, the largest recompute transient
      (:func:`model.stage_bytes.block_forms`; per chunk when interleaved,
      :func:`model.stage_bytes.chunk_block_forms`, each chunk weighing its own bytes in the
      interleaved peak).
    * √n: k = round(√n) for the n layers of the stage that holds the most (one k on every stage,
      as Megatron-LM's ``--recompute-num-layers``); each model chunk keeps ``⌈n_c/k⌉``
      checkpoints × in flight, plus the largest segment's bytes less its checkpoint (full
      recomputation is k = 1; :func:`model.stage_bytes.chunk_segment_forms`).

    Interleaved stages (v model chunks) are held chunk by chunk at the schedule's peak
    (:func:`model.stage_bytes.chunk_peak`); under a split-backward schedule the rank's layers
    are held :func:`model.schedule_cost.in_flight_units` times (its weight-gradient buffers
    inside, as Qi et al. 2024 count them); with context parallelism the exchange's buffers of
    one layer are added once; with activation offload the offloaded tensors leave the layers'
    bytes; the layer never offloaded, the copies still queued and a pre-reloaded layer stay
    (:func:`_offload_lines`).

    Scope: :data:`CONTEXT_FIELDS`, :data:`FORM_FIELDS`, dp (through m), schedule, framework (the
    vocabulary's padding, the tensor-parallel plan), cp_a2a, deallocate_pipeline_outputs, and
    under activation offload rank_order (the copy backlog reads the slowest micro-batch's time,
    :func:`model.terms.step.offload_layer_forward_s`, whose collectives ride the axes' links).
    Control: pp, recompute, virtual_stages (v > 1 is the interleaved schedule, held chunk by
    chunk), schedule, framework (the time model the copy backlog reads).
    """
    arch, t = c.arch, c.training
    q = f.lookup(layer_figures, (arch, t), *CONTEXT_FIELDS)
    off_q = f.lookup(offload_figures, (arch, t), *CONTEXT_FIELDS)
    n_layers, n_moe = f.per_stage(stage_layer_counts, (arch,), *LAYER_FIELDS)
    per_form = f.per_stage(kept_form, (arch,), *FORM_FIELDS)
    per_mb = apply_form(per_form, q)
    tokens = exact(t.seq_len) / f.cp * f.micro_batch_size
    transient = _layer_transient(c, f, q, tokens)
    vocab = f.lookup(logits_columns_of, (arch, c.vocab_multiple), "framework", "tp")
    emb, head = split_free(_end_bytes, c, f, tokens, vocab)  # the ends: not the splits'
    split = Schedule(f.schedule) in SPLIT_BACKWARD
    if f.virtual_stages == 1 or f.pp == 1 or split:  # held whole (v > 1: interleaved's chunks)
        in_flight, kept, emb_total, held_mb = _held_whole(c, f, q, per_mb, emb, head, split)
        offloaded = apply_form(per_form, off_q) * in_flight
    else:
        in_flight, kept, emb_total, held_mb, offloaded = _held_by_chunk(c, f, q, off_q, per_mb, emb)
    outputs, rebuilt = split_free(boundary_tensors, c, f, tokens, in_flight)
    buffer, host = _offload_lines(c, f, n_layers, n_moe, in_flight, off_q, offloaded)
    kept, host = _layer_offload(c, kept + weight_pass_term(c, f, n_layers, n_moe), n_layers, host)
    loss, kept_chunks, pred = split_free(last_stage_loss, c, f, tokens, vocab)
    freed, logit_grads = split_free(output_layer_phase, c, f, head, tokens, vocab)
    working = backward_working_term(c, f, n_layers, n_moe) + logit_grads + rebuilt + pred
    cp_buffers = cp_buffers_term(c, f, tokens, n_layers, n_moe, working)
    moe = moe_forward_peak(c, f, n_moe, transient, transient + cp_buffers + working - freed)
    load = deepspeed_load_transient(c, f, per_mb + emb + outputs / maximum(in_flight, 1))
    return StageActivations(
        kept, transient, emb_total + kept_chunks, held_mb, per_mb, outputs, cp_buffers, buffer,
        host, loss, working, freed, moe, load,
    )  # fmt: skip


def _end_bytes(c: Context, f: Fields, tokens: Any, vocab: Any) -> tuple[Any, Any]:
    """(the embedding's and the output layer's bytes per micro-batch on rank ``f.stage``, the
    output layer's alone; :func:`model.end_stage_bytes.embedding_bytes` where :func:`end_stages`
    places them, its norm outputs recomputed with every norm, :func:`head_norms_recomputed`;
    under ``fsdp2`` the eager final RMSNorm's FP32 copy and statistics,
    :func:`model.eager_saved.final_norm_extra_bytes`; on the first stage under ``deepspeed``
    with sequence parallelism and no dropout the rest of the embedding's whole output the first
    layer's input views, :func:`_view_rest`)."""
    arch, t = c.arch, c.training
    gathered = f.lookup(gathers_block_inputs, (t,), "framework")
    norms = f.lookup(head_norms_recomputed, (t,), "framework") & (
        f.recompute == Recompute.SELECTIVE
    )
    first, last = end_stages(f)
    kept = f.lookup(loss_kept, (t,), "framework")
    mtp = _mtp_whole(f), f.lookup(mtp_copied, (), "framework")
    args = (tokens, f.tp, f.sp, t.activation_bytes, vocab, gathered, norms, kept, *mtp)
    eager = f.lookup(final_norm_eager, (arch, t), "framework")
    norm = where(last & eager, final_norm_extra_bytes(arch, tokens, where(f.sp, f.tp, 1)), 0)
    view = f.lookup(keeps_embedding_view, (arch.dropout,), "framework") * f.sp * first
    emb = embedding_bytes(arch, first, last, *args) + norm + view * _view_rest(c, f, tokens)
    return emb, embedding_bytes(arch, False, last, *args) + norm


def _mtp_whole(f: Fields) -> Any:
    """Whether each MTP module is checkpointed whole (``recompute`` full or √n; per-stage counts
    never: :func:`model.end_stage_bytes.embedding_bytes` ``mtp_checkpointed``)."""
    return (f.recompute == Recompute.FULL) | (f.recompute == Recompute.SQRT)


def _view_rest(c: Context, f: Fields, tokens: Any) -> Any:
    """What the first stage keeps of the input embedding's output beyond the sequence shard the
    first layer counts, when :func:`model.deepspeed_layers.keeps_embedding_view`:
    ``β·S·h·(1 − 1/tp)`` per micro-batch (S = ``tokens``)."""
    beta = c.training.activation_bytes
    return tokens * beta * c.arch.hidden_size * (f.tp - 1) / f.tp


def _held_whole(
    c: Context, f: Fields, q: Any, per_mb: Any, emb: Any, head: Any, split: bool
) -> tuple[Any, Any, Any, Any]:
    """(micro-batches in flight, layer bytes, embedding/output-layer bytes, micro-batches held)
    of a rank whose layers are held whole: ``_in_flight`` micro-batches, or under a
    split-backward schedule :func:`model.schedule_cost.in_flight_units` of them, the output
    layer's held once (its backward follows its forward at once); DualPipe's two stages by
    :func:`_dualpipe_kept`."""
    in_flight = exact(in_flight_units(f.schedule, f.pp, f.m)) if split else _in_flight(f)
    kept, emb_total = per_mb * in_flight, emb * in_flight
    if split:
        emb_total = (emb - head) * in_flight + head
    if _any(f.schedule == Schedule.DUALPIPE):
        on = f.schedule == Schedule.DUALPIPE
        dual_kept, dual_emb = _dualpipe_kept(c, f, q, per_mb, emb, head)
        kept, emb_total = where(on, dual_kept, kept), where(on, dual_emb, emb_total)
    return in_flight, kept, emb_total, in_flight


def _held_by_chunk(
    c: Context, f: Fields, q: Any, off_q: Any, per_mb: Any, emb: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """(micro-batches in flight, layer bytes, embedding/output-layer bytes, micro-batches held,
    offloaded bytes) of an interleaved rank, its peak found chunk by chunk
    (:func:`model.pipeline.interleaved_peak`); with per-stage counts each chunk weighs its own
    recomputed layers, under √n its own segments' checkpoints
    (:func:`model.stage_bytes.chunk_segment_forms`)."""
    arch, v = c.arch, f.virtual_stages
    in_flight = interleaved_in_flight(f.pp, f.m, v, f.stage)
    offloaded: Any = 0
    forms = split_forms(f.per_stage(chunk_forms, (arch,), *FORM_FIELDS))
    chunk_bytes = [apply_form(form, q) for form in forms]
    held, end_held = chunk_peak(f.pp, f.m, v, f.stage, chunk_bytes, emb)
    kept = sum((h * b for h, b in zip(held, chunk_bytes, strict=True)), exact(0))
    if c.training.offload.activations:
        offloaded = sum(
            (h * apply_form(form, off_q) for h, form in zip(held, forms, strict=True)),
            exact(0),
        )
    held_mb = where(per_mb != 0, kept / where(per_mb != 0, per_mb, 1), in_flight)
    return in_flight, kept, emb * end_held, held_mb, offloaded


def _any(condition: Any) -> bool:
    """Whether a condition holds for one layout, or for any row of many."""
    return bool(namespace(condition).any(condition)) if is_array(condition) else bool(condition)


def stage_activations(
    arch: Architecture,
    layers: tuple[int, ...],
    stage: int,
    layout: Layout,
    training: TrainingSpec,
    vocab_size: int | None = None,
) -> StageActivations:
    """:func:`stage_activations_term` of pipeline stage ``stage`` of ``layout`` holding
    ``layers``: the layout's own split of that stage, or (one stage) the model's first
    ``len(layers)`` layers, as a model of that many layers. ``vocab_size``: the vocabulary rows
    the output layer holds (None: the model's), in whole rows per tp rank.

    Raises
    ------
    ValueError
        ``layers`` are neither.

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
    own = stage_layers(
        arch,
        layout.pp,
        layout.virtual_stages,
        layout.split_rule,
        layout.stage_layers,
        layout.schedule,
    )[stage]
    if layers != own:
        if layout.pp != 1 or layers != tuple(range(len(layers))):
            raise ValueError(f"layers {layers} are not stage {stage}'s of {layout}")
        arch = replace(arch, num_layers=len(layers))
    arch = replace(arch, vocab_size=vocab_size or arch.vocab_size)
    c = Context(ModelSpec(name="stage", arch=arch), training, vocab_multiple=0)
    return stage_activations_term(c, LayoutFields(layout, training.global_batch_size, stage))
