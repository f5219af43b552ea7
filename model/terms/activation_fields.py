"""What the activation term reads of a layout, as cached structures: the per-layer figures of an
activation context (:func:`activation_context`, :func:`layer_figures`), the per-stage layer counts
and recompute forms of a split (:func:`stage_layer_counts`; the schedule places the model chunks,
:func:`model.split.chunk_ranks`), the ranks holding the embedding and the output layer
(:func:`end_stages`), and the small lookups of the vocabulary's padding, the tensor-parallel plan
and the context-parallel flavour. :mod:`model.terms.activations` assembles the term from them; the
step-time, traffic, roofline and state terms read the same split through :data:`LAYER_FIELDS`."""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.activations import ActivationContext, kind_activations
from trainplan.model.attention_rates import framework_kernels
from trainplan.model.backward_working import backward_working_bytes, input_pass_retains
from trainplan.model.context_parallel import CpKind, cp_degrees, kv_repeat
from trainplan.model.elementwise import Elementwise, elementwise_mode
from trainplan.model.expert_saved_inputs import (
    expert_fc1_saves_original,
    expert_fc2_saves_original,
)
from trainplan.model.frameworks import DEFAULT_FRAMEWORK, Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Recompute
from trainplan.model.memory import keeps_gathered_inputs
from trainplan.model.moe_run import Dispatcher, combine_output_bytes
from trainplan.model.moe_working_set import MEGATRON_ROUTER_SCORE_BYTES
from trainplan.model.pipeline import Schedule
from trainplan.model.precision import (
    Precision,
    fp8_activation_bytes,
    fp8_recipe_of,
    keeps_fp8_transpose,
)
from trainplan.model.recompute_counts import block_counts, decoder_segment
from trainplan.model.recompute_modules import profile_recompute_modules
from trainplan.model.saved_originals import proj_saves_original
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.split import stage_chunks, stage_layers
from trainplan.model.stage_bytes import (
    layer_quantities,
    offload_quantities,
    stage_chunk_forms,
)
from trainplan.model.te_fp8_backward import TeFp8Backward, te_fp8_backward
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.vocab import padded_vocab, vocab_multiple_for
from trainplan.model.weight_pass import weight_pass_grads_bytes
from trainplan.model.xp import maximum, where

__all__ = [
    "CACHE",
    "CONTEXT_FIELDS",
    "FORM_FIELDS",
    "LAYER_FIELDS",
    "activation_context",
    "attention_kernels",
    "backward_figures",
    "backward_working_term",
    "chunk_forms",
    "chunk_layers",
    "cp_kv_repeat_of",
    "cp_mechanism_of",
    "end_stages",
    "gathers_block_inputs",
    "head_norms_recomputed",
    "kept_form",
    "layer_figures",
    "mirror_kept_form",
    "mirror_layer_counts",
    "offload_figures",
    "output_layer_phase",
    "output_stage",
    "padded_vocab_of",
    "phase_ordered",
    "split_forms",
    "stage_layer_counts",
    "te_fp8_of",
    "transient_forms",
    "weight_pass_figures",
    "weight_pass_term",
]

CACHE = 4096
"""Entries each structure cache keeps."""

CONTEXT_FIELDS = ("micro_batch_size", "cp", "tp", "sp", "cp_kind", "ep", "expert_tp", "framework")
"""What a layer's activation bytes read of a layout (:func:`activation_context`)."""
LAYER_FIELDS = ("pp", "virtual_stages", "split_rule", "stage_layers", "schedule")
"""What a stage's layers read of a layout (:func:`model.split.stage_layers`; the split rule is
the framework's, :func:`model.split.split_rule_of`; the schedule places the chunks,
:func:`model.split.chunk_ranks`)."""
FORM_FIELDS = (*LAYER_FIELDS, "recompute", "recompute_layers")
"""What a stage's recompute forms read of a layout."""


def _framework_rows(framework: Framework, fused_bias_dropout: bool) -> dict[str, Any]:
    """The :class:`model.activations.ActivationContext` flags a framework's layer code decides
    (DeepSpeed's gate, eager SwiGLU, repeated K/V, TorchScript's residual masks; Megatron's clamped
    GLU copy, unfused GeGLU, router scores; the flash kernels' statistics)."""
    deepspeed, megatron = framework is Framework.DEEPSPEED, framework is Framework.MEGATRON
    return {
        "bias_dropout_masks": deepspeed and fused_bias_dropout,
        "deepspeed_gate": deepspeed,
        "clamp_copies_glu_input": megatron,
        "eager_swiglu": deepspeed,
        "unfused_glu": megatron,
        "repeats_kv": deepspeed,
        "saves_softmax_lse": deepspeed or megatron or framework is Framework.FSDP2,
        "kernel_kv_repeated": deepspeed or framework is Framework.FSDP2,
        "attention_output_copy": deepspeed,
        "router_score_bytes": MEGATRON_ROUTER_SCORE_BYTES if megatron else Fraction(4),
        "fp32_router_autocast": framework is Framework.FSDP2,
    }


def _linear_rows(training: TrainingSpec, framework: Framework) -> dict[str, Any]:
    """The :class:`model.activations.ActivationContext` flags of what the linear layers and the
    MoE permutation save under the recipe and the framework: FP8 inputs and their bytes, TE's
    per-module quantizers, Megatron-Core's BF16 output-projection input under a recipe other than
    ``delayed`` and its experts' BF16 FC1 input under the ``expert_fc1`` offload other than MXFP8,
    TE's fused permutation's int32 row map under the all-to-all dispatcher."""
    fp8 = training.precision is Precision.FP8
    recipe = fp8_recipe_of(framework, training.fp8_recipe)
    megatron = framework is Framework.MEGATRON
    alltoall = training.moe_run.dispatcher is Dispatcher.ALLTOALL
    return {
        "fp8_linear_inputs": fp8 and framework.fp8_saves_fp8_inputs,
        "fp8_input_bytes": fp8_activation_bytes(recipe),
        "te_linears": framework.te_layers,
        "permute_map_bytes": 4 if megatron and alltoall else 0,
        "fp8_proj_saves_original": proj_saves_original(training, framework),
        "fp8_expert_fc1_saves_original": expert_fc1_saves_original(training, framework),
    }


def activation_context(
    training: TrainingSpec,
    micro_batch_size: int,
    cp: int,
    tp: int,
    sequence_parallel: bool,
    cp_kind: CpKind,
    ep: int = 1,
    expert_tp: int = 1,
    framework: Framework = DEFAULT_FRAMEWORK,
) -> ActivationContext:
    """The :class:`model.activations.ActivationContext` of a layout's fields and the recipe:
    what every per-layer activation figure reads. The framework decides whether FP8 linear
    layers save FP8 inputs, whether tensor parallelism keeps the blocks' gathered inputs
    (:func:`model.memory.keeps_gathered_inputs`), whether the expert-TP group gathers the
    routed tokens, what the MoE combine keeps and what selective recomputation keeps (torchtitan's
    op-level policy under ``fsdp2``, Megatron-Core's ``recompute_modules`` otherwise;
    :class:`model.frameworks.Framework`)."""
    framework = Framework(framework)
    return ActivationContext(
        seq_len=training.seq_len,
        cp=cp,
        micro_batch_size=micro_batch_size,
        tp=tp,
        sequence_parallel=sequence_parallel,
        flash_attention=training.flash_attention,
        activation_bytes=training.activation_bytes,
        convention=training.activation_convention,
        memory_efficient_norm=training.memory_efficient_norm,
        **_linear_rows(training, framework),
        cp_kind=cp_kind,
        offload_modules=training.offload.activations,
        gathered_block_inputs=keeps_gathered_inputs(framework, training),
        expert_tp=expert_tp if framework.gathers_expert_tokens else 1,
        combine_output_bytes=combine_output_bytes(
            framework.value, training.moe_run, framework.moe_combine_bytes()
        ),
        **_framework_rows(framework, training.bias_dropout_fusion),
        ep=ep,
        moe_run=training.moe_run,
        op_selective=framework.op_selective,
        recompute_modules=profile_recompute_modules(
            framework.value,
            training.recompute_modules,
            training.flash_attention,
            cp,
            training.precision is Precision.FP8,
        ),
        every_norm=framework is Framework.TEXTBOOK,  # head_norms_recomputed's rule
        fp8_gemms=training.precision is Precision.FP8,
        saves_scaled_mm=training.sac_saves_scaled_mm,
        eager_elementwise=elementwise_mode(framework, training.compile) is Elementwise.EAGER,
        fp8_activation_storage=training.fp8_activation_storage,
        mla_value_padded=framework is Framework.MEGATRON and training.documents is not None,
    )


@lru_cache(maxsize=CACHE)
def layer_figures(arch: Architecture, training: TrainingSpec, *fields: Any) -> tuple[Any, ...]:
    """:func:`model.stage_bytes.layer_quantities` of the :data:`CONTEXT_FIELDS` values."""
    return layer_quantities(arch, activation_context(training, *fields))


def te_fp8_of(training: TrainingSpec, device: DeviceSpec | None) -> TeFp8Backward | None:
    """Transformer Engine's FP8 backward copies (:func:`model.te_fp8_backward.te_fp8_backward`)
    under the run's recipe as Megatron-Core runs it (:func:`model.precision.fp8_recipe_of`) on
    ``device`` (a per-tensor transpose kept or not, :func:`model.precision.
    keeps_fp8_transpose`; kept where no part is given); None without ``precision = fp8``."""
    if training.precision is not Precision.FP8:
        return None
    recipe = fp8_recipe_of(Framework.MEGATRON.value, training.fp8_recipe)
    return te_fp8_backward(recipe, keeps_fp8_transpose(recipe, device))


@lru_cache(maxsize=CACHE)
def backward_figures(
    arch: Architecture, training: TrainingSpec, kernels: tuple[tuple[str, str | None], ...],
    retained: bool, te_fp8: TeFp8Backward | None, *fields: Any,
) -> tuple[Any, ...]:  # fmt: skip
    """The backward working set of one layer (:func:`model.backward_working.
    backward_working_bytes`) of the :data:`CONTEXT_FIELDS` values, with the attention kernel
    ``kernels`` names for the layout's framework and Transformer Engine's FP8 copies
    ``te_fp8`` (:func:`te_fp8_of`; read under ``megatron`` only), nothing released where ``retained``
    (:func:`model.backward_working.input_pass_retains`): (dense, MoE), then (dense, MoE) under selective
    recomputation, which add the tensors of the layer that selective recomputation drops
    (``full_bytes − selective_bytes`` of :func:`model.activations.kind_activations`): its backward
    recomputes them (Megatron-Core's ``CheckpointFunction`` for the recomputed modules,
    torchtitan's selective ``checkpoint`` at the block's first unpack) and they are live with the
    working set, and the routed experts' FC2 input quantised again where FC2 saved it in BF16
    (:func:`model.expert_saved_inputs.expert_fc2_saves_original`); 0 for a kind the model has no
    layer of."""
    ctx = activation_context(training, *fields)
    framework = Framework(fields[-1])
    kernel = dict(kernels).get(framework.value)
    plain: list[Any] = []
    selective: list[Any] = []
    for moe in (False, True):
        if arch.kind_index(moe) is None:
            plain.append(0)
            selective.append(0)
            continue
        work = backward_working_bytes(arch, moe, ctx, framework, kernel, retained, te_fp8)
        layer = kind_activations(arch, moe, ctx)
        dropped = layer.full_bytes - layer.selective_bytes if work else 0
        plain.append(work)
        if moe and expert_fc2_saves_original(training, framework, ctx.recompute_modules):
            work = backward_working_bytes(arch, moe, ctx, framework, kernel, retained, te_fp8, True)
        selective.append(work + dropped)
    return (*plain, *selective)


@lru_cache(maxsize=CACHE)
def weight_pass_figures(
    arch: Architecture, training: TrainingSpec, *fields: Any
) -> tuple[Any, ...]:
    """(dense, MoE) :func:`model.weight_pass.weight_pass_grads_bytes` of one layer, one
    micro-batch, of the :data:`CONTEXT_FIELDS` values; 0 for a kind the model has no layer of."""
    ctx = activation_context(training, *fields)
    framework = Framework(fields[-1])
    return tuple(
        0 if arch.kind_index(moe) is None else weight_pass_grads_bytes(arch, moe, ctx, framework)
        for moe in (False, True)
    )


def weight_pass_term(c: Context, f: Fields, n_layers: Any, n_moe: Any) -> Any:
    """The output gradients rank ``f.stage`` keeps for its weight passes at once
    (:mod:`model.weight_pass`), 0 unless the schedule's input-gradient pass retains the graph
    (:func:`model.backward_working.input_pass_retains`).

    Chunk micro-batches whose ``I`` is done and whose ``W`` is not, at most, read off PyTorch's
    orders (:func:`model.pipeline_zb.w_pending`, checked against the simulated
    ``ScheduleZBVZeroBubble`` and ``ScheduleDualPipeV`` orders): ZB-V ``2·r + 1``, DualPipeV
    ``r + 1`` on rank r; each holds the gradients of one chunk's layers, the rank's ``n`` layers
    over its ``v`` chunks (``n/v`` each; MoE layers in proportion). Added to the kept layers at
    the rank's activation peak: an upper bound where the most pending ``W`` and the most
    micro-batches held (:func:`model.schedule_cost.in_flight_units`) fall at different times
    (ZB-V's peak of ``2·pp`` chunks has one ``W`` pending), exact when the gradients outweigh
    the kept activations (full recomputation)."""
    if not input_pass_retains(f.schedule):
        return 0 * n_layers
    g = f.lookup(weight_pass_figures, (c.arch, c.training), *CONTEXT_FIELDS)
    pending = 2 * f.stage + 1 if f.schedule == Schedule.ZB_V else f.stage + 1
    rank = (n_layers - n_moe) * g[0] + n_moe * g[1]
    return rank * pending / f.virtual_stages


@lru_cache(maxsize=CACHE)
def offload_figures(arch: Architecture, training: TrainingSpec, *fields: Any) -> tuple[Any, ...]:
    """:func:`model.stage_bytes.offload_quantities` of the :data:`CONTEXT_FIELDS` values."""
    return offload_quantities(arch, activation_context(training, *fields))


@lru_cache(maxsize=CACHE)
def stage_layer_counts(
    arch: Architecture,
    pp: int,
    v: int,
    uneven: bool,
    sizes: tuple[int, ...] | None,
    schedule: Any = None,
) -> tuple[tuple[int, int], ...]:
    """Per stage, (transformer layers, of them MoE) of the split (:func:`model.split.stage_layers`;
    MTP blocks in the last chunk)."""
    return tuple(
        (len(layers), sum(map(arch.is_moe_layer, layers)))
        for layers in stage_layers(arch, pp, v, uneven, sizes, schedule)
    )


@lru_cache(maxsize=CACHE)
def mirror_layer_counts(
    arch: Architecture,
    pp: int,
    v: int,
    uneven: bool,
    sizes: tuple[int, ...] | None,
    schedule: Any = None,
) -> tuple[tuple[int, int], ...]:
    """Per rank r, :func:`stage_layer_counts` of stage ``pp − 1 − r``: the second stage a
    DualPipe rank holds (:func:`model.pipeline_zb.stage_placement`)."""
    return stage_layer_counts(arch, pp, v, uneven, sizes, schedule)[::-1]


@lru_cache(maxsize=CACHE)
def _forms(
    arch: Architecture,
    pp: int,
    v: int,
    uneven: bool,
    sizes: tuple[int, ...] | None,
    schedule: Any,
    mode: Recompute,
    counts: tuple[int, ...] | None,
) -> tuple[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]], ...]:
    """Per stage, :func:`model.stage_bytes.stage_chunk_forms` of the layer kinds of its model
    chunks (kept per micro-batch, candidate transients flat, per-chunk kept forms flat,
    per-chunk layer counts). Per-stage counts recompute each chunk's first decoder layers, never
    an MTP block (:func:`model.recompute_counts.block_counts`). Under √n recomputation every model chunk is cut into segments of
    one k, round(√n) of the most decoder layers any stage holds
    (:func:`model.recompute_counts.decoder_segment`): Megatron-LM applies its one
    ``--recompute-num-layers`` (the one the launch line writes) to each model chunk's own
    layers."""
    split = stage_layers(arch, pp, v, uneven, sizes, schedule)
    # one k for every stage under √n (only there does it enter a stage's forms)
    segment = decoder_segment(split, arch.num_layers) if mode is Recompute.SQRT else 0
    out = []
    for stage in range(pp):
        chunks = stage_chunks(arch, pp, v, uneven, stage, sizes, schedule)
        out.append(
            stage_chunk_forms(
                tuple(tuple(arch.is_moe_layer(j) for j in chunk) for chunk in chunks),
                mode,
                None if counts is None else block_counts(chunks, counts[stage], arch.num_layers),
                v,
                segment,
            )
        )
    return tuple(out)


def kept_form(arch: Architecture, *key: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(s[0] for s in _forms(arch, *key))


def mirror_kept_form(arch: Architecture, *key: Any) -> tuple[tuple[int, ...], ...]:
    """Per rank r, :func:`kept_form` of stage ``pp − 1 − r`` (DualPipe's second stage)."""
    return kept_form(arch, *key)[::-1]


def transient_forms(arch: Architecture, *key: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(s[1] for s in _forms(arch, *key))


def chunk_forms(arch: Architecture, *key: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(s[2] for s in _forms(arch, *key))


def chunk_layers(arch: Architecture, *key: Any) -> tuple[tuple[int, ...], ...]:
    return tuple(s[3] for s in _forms(arch, *key))


def split_forms(flat: Any) -> list[Any]:
    """A flat sequence of coefficients as forms of eight."""
    return [flat[i : i + 8] for i in range(0, len(flat), 8)]


def gathers_block_inputs(training: TrainingSpec, framework: Any) -> bool:
    """Whether tensor parallelism keeps the blocks' all-gathered inputs under ``framework``
    (:func:`model.memory.keeps_gathered_inputs`; the output layer's gathered input too)."""
    return keeps_gathered_inputs(Framework(framework), training)


def head_norms_recomputed(training: TrainingSpec, framework: Any) -> bool:
    """Whether the output layer's and the MTP modules' norms are recomputed under selective
    recomputation (:func:`model.end_stage_bytes.embedding_bytes` ``norms_recomputed``): the recompute
    module ``layernorm`` under a profile whose ``layernorm`` takes every norm (``textbook``,
    :attr:`model.activations.ActivationContext.every_norm`)."""
    return Framework(framework) is Framework.TEXTBOOK and "layernorm" in training.recompute_modules


def padded_vocab_of(vocab_size: int, given: int | None, framework: Any, tp: int) -> int:
    """V padded as ``framework`` pads it for ``tp`` (:func:`model.vocab.padded_vocab`; ``given``
    the multiple asked for, None = the framework's)."""
    return padded_vocab(vocab_size, vocab_multiple_for(framework, given), tp)


def cp_kv_repeat_of(
    arch: Architecture | None, kind: CpKind, cp: int, tp: int, framework: str
) -> int:
    """Times each K/V head crosses the head all-to-all (:func:`model.context_parallel.
    kv_repeat`: verl's ``ulysses-kv-repeat`` over u = cp ranks, every query head's under
    DeepSpeed's Ulysses on a grouped-query model; 1 for every other flavour)."""
    return kv_repeat(CpKind(kind), cp, tp, arch, str(framework))


def cp_mechanism_of(kind: CpKind, cp: int, cp_a2a: int | None) -> tuple[int, int, bool]:
    """(K/V exchange ranks, head all-to-all ranks, the exchange is an all-gather) of a CP
    flavour (:func:`model.context_parallel.cp_degrees`)."""
    r, u = cp_degrees(kind, cp, cp_a2a)
    return r, u, CpKind(kind) is CpKind.ALL_GATHER


def output_stage(f: Fields) -> Any:
    """Whether rank ``f.stage`` holds the last model chunk, with the output layer, the loss and
    the MTP blocks: rank 0 under a V placement (ZB-V, DualPipeV), the last rank otherwise
    (:func:`model.split.output_rank`)."""
    v_shape = (f.schedule == Schedule.ZB_V) | (f.schedule == Schedule.DUALPIPE_V)
    return where(v_shape, f.stage == 0, f.stage == f.pp - 1)


def end_stages(f: Fields) -> tuple[Any, Any]:
    """(whether rank ``f.stage`` holds the embedding, whether it holds the output layer and the
    MTP blocks): the first and the last rank; under a V placement (ZB-V, DualPipeV) both on rank
    0 (:func:`model.split.output_rank`, where the split puts the last chunk); under DualPipe both on ranks 0 and ``pp − 1``, each
    holding the first stage of one direction and the last of the other
    (:func:`model.pipeline_zb.stage_placement`)."""
    first, last = f.stage == 0, output_stage(f)
    dual = f.schedule == Schedule.DUALPIPE
    return where(dual, first | last, first), where(dual, first | last, last)


def attention_kernels(c: Context) -> tuple[tuple[str, str | None], ...]:
    """(framework, the attention kernel it runs) for every profile: the run's
    ``attention_kernel``, else the framework's on the part
    (:func:`model.attention_rates.framework_kernels`); None without an accelerator."""
    part = c.device.part if c.device is not None else None
    return framework_kernels(c.options.attention_kernel, part)


def backward_working_term(c: Context, f: Fields, n_layers: Any, n_moe: Any) -> Any:
    """The backward working set of the stage's largest layer (:func:`backward_figures`, the
    selective figures under selective recomputation, nothing released under a schedule whose
    input-gradient pass retains the graph); 0 on a stage without layers."""
    retained = input_pass_retains(f.schedule)
    args = (c.arch, c.training, attention_kernels(c), retained, te_fp8_of(c.training, c.device))
    w = f.lookup(backward_figures, args, *CONTEXT_FIELDS)
    s = 2 if f.recompute is Recompute.SELECTIVE else 0
    return maximum(where(n_layers - n_moe > 0, w[s], 0), where(n_moe > 0, w[s + 1], 0))


def phase_ordered(framework: Any) -> int:
    """1 where the peak follows the order of backward's phases (the output layer's tensors
    released before the layers' backward); 0 under ``textbook``, whose steady-state count
    sums the lines (the conventions' activation formula)."""
    return 1 if Framework(framework).physical else 0


def output_layer_phase(
    c: Context, f: Fields, head: Any, tokens: Any, vocab: Any
) -> tuple[Any, Any]:
    """(the output layer's bytes released before the layers' backward, what the layers' backward
    phase holds beyond the working set) on rank ``f.stage``, for ``head`` one micro-batch's
    output-layer bytes there (0 on other ranks), ``tokens`` S and ``vocab`` the padded rows.

    * A full backward: (``head``, 0) where the phases are ordered (:func:`phase_ordered`): the
      loss's and the output layer's backward end, and release their saved tensors, before any
      layer's backward starts.
    * Under a schedule whose input-gradient pass retains the graph
      (:func:`model.backward_working.input_pass_retains`: ``fsdp2``'s ZB-V and DualPipeV), the
      output layer's tensors stay through the last stage's layers' input-gradient pass (pytorch
      ``torch/distributed/pipelining/_backward.py`` ``stage_backward_input`` runs the loss, the
      output layer and the layers in one ``autograd.grad(retain_graph=True)``), and so does the
      logits' gradient ``β·S·V/tp``: ``stage_backward_input`` registers a pre-hook on each node
      that joins a weight (the output projection's matmul among them) that stores its incoming
      gradient in ``param_groups["grads"]`` until ``stage_backward_weight``; torchtitan's loss
      casts the BF16 logits to FP32 (``components/loss.py`` ``cross_entropy_loss``), so the
      gradient reaching the projection is in the logits' dtype. DualPipeV's step 4 also runs
      stage 0's backward beside the loss stage's just-forwarded micro-batch
      (``ScheduleDualPipeV``: ``OVERLAP_F_B`` of ``F`` on the last stage with ``B`` on stage 0):
      nothing of the output layer is released there. (0, ``β·S·V/tp``) on the loss's rank.
    * (0, 0) under ``textbook``."""
    ordered = f.lookup(phase_ordered, (), "framework")
    if not input_pass_retains(f.schedule):
        return head * ordered, 0 * head
    logit_grads = c.training.activation_bytes * tokens * vocab / f.tp
    return 0 * head, where(output_stage(f), logit_grads, 0) * ordered
