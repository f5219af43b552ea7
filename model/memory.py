"""Per-GPU memory: model state under ZeRO 0–3 (activations: :mod:`model.terms.activations`).

Model state (Rajbhandari et al. 2019, arXiv 1910.02054, §3.1 and Figure 1): mixed-precision
Adam keeps 2 B BF16 weights + 2 B BF16 gradients + 12 B optimizer state (FP32 master, two FP32
moments) per parameter. ZeRO shards over the D replicas of a parameter (D = dp·cp for dense
parameters, D_e = dp·cp/ep for routed experts): ZeRO-1 the optimizer state, ZeRO-2 also the
gradients, ZeRO-3 / FSDP also the weights.

The model-state term written over a layout's fields is :func:`model.terms.state.model_state_term`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.deepspeed_mechanisms import sp_comm_bytes
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Layout
from trainplan.model.mechanisms import Mechanism, mechanism
from trainplan.model.offload import NO_OFFLOAD, Offload, offload_memory
from trainplan.model.precision import (
    Fp8Recipe,
    Precision,
    fp8_recipe_of,
    fp8_weight_cache_bytes,
    keeps_fp8_transpose,
)
from trainplan.model.specs import TrainingSpec
from trainplan.model.xp import maximum, where

FP8_PARAM_BYTES = 1
"""Bytes per linear weight element of an FP8 primary weight (E4M3 data; the per-tensor scale
is one float per weight, not counted)."""

__all__ = [
    "ModelState",
    "model_state",
    "state_terms",
    "weight_cache_terms",
    "cache_bytes_per_element",
    "optimizer_elements",
    "keeps_gathered_inputs",
]


@dataclass(frozen=True, slots=True)
class ModelState:
    """Model-state bytes on one GPU (exact), as the layout's framework holds them
    (:class:`model.mechanisms.Mechanism`)."""

    weights_bytes: Fraction
    gradients_bytes: Fraction
    optimizer_bytes: Fraction
    gathered_bytes: Fraction = Fraction(0)
    """ZeRO-3 only: the gathered (unsharded over dp·cp) bf16 weights of the unit being computed
    and of the next one, prefetched, beyond the local shard — what FSDP and DeepSpeed ZeRO-3
    hold gathered at any moment (Rajbhandari et al. 2019 §5.3; FSDP's forward/backward prefetch;
    DeepSpeed ``stage3_prefetch_bucket_size``); under FSDP2 with PyTorch's multi-stage pipeline
    runtime, the all-gather output beside the unsharded parameters at a re-gathered chunk's
    copy-out (:func:`model.terms.runtime_unshard.runtime_unshard_term`). Not part of
    ``total_bytes`` (the textbook's model state); counted in the GPU's total."""
    buffers_bytes: Fraction = Fraction(0)
    """Live in forward/backward only: one unit's unsharded gradients before their reduction
    (FSDP2) and the framework's fixed communication buckets (DeepSpeed's IPG bucket)."""
    step_bytes: Fraction = Fraction(0)
    """Held during the optimizer step beyond the model state: what exists only then
    (DeepSpeed's FP32 gradient partition, of one sub-group under ZeRO-3) and what backward's
    buffers leave allocated through it (Megatron-FSDP's gathered embedding and output layer,
    the ``fsdp_double_buffer`` pools)."""
    host_bytes: Fraction = Fraction(0)
    """On the host, not the GPU: the offloaded optimizer state, its FP32 gradient buffer and,
    with parameter offload, the weight shards (:func:`model.offload.offload_memory`). Not part
    of any GPU total."""
    weight_cache_bytes: Fraction = Fraction(0)
    """Low-precision copies of the linear weights kept for the whole step: Transformer Engine's
    FP8 weight and transpose under ``precision = fp8`` (:data:`model.precision.
    FP8_WEIGHT_CACHE_BYTES` per linear weight element), when the weights are held whole. Under
    ZeRO-3 / FSDP the copies of the gathered units are counted in ``gathered_bytes``."""

    dispatch_buffer_bytes: Fraction = Fraction(0)
    """The expert dispatcher's buffers, resident for the whole run: DeepEP's normal-mode
    ``Buffer`` under ``moe_dispatcher = deepep``, HybridEP's ``HybridEPBuffer`` under
    ``hybridep`` (:func:`model.dispatch_buffers.dispatch_buffer_bytes`), on a stage with MoE
    layers and ep > 1."""

    @property
    def total_bytes(self) -> Fraction:
        """Weights + gradients + optimizer state (the textbook's 16 B/param, sharded)."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes

    @property
    def resident_bytes(self) -> Fraction:
        """``total_bytes`` plus the ZeRO-3 gather buffer, the cached weight copies and the
        expert dispatcher's buffers: held through forward and backward."""
        return (
            self.total_bytes
            + self.gathered_bytes
            + self.weight_cache_bytes
            + self.dispatch_buffer_bytes
        )

    @property
    def backward_bytes(self) -> Fraction:
        """Model-state bytes at the forward/backward peak: resident + buffers."""
        return self.resident_bytes + self.buffers_bytes

    @property
    def optimizer_step_bytes(self) -> Fraction:
        """Bytes while the optimizer steps (no activations are live then): state + step extras
        + the cached weight copies (persistent module buffers) + the dispatcher's buffers."""
        return (
            self.total_bytes
            + self.step_bytes
            + self.weight_cache_bytes
            + self.dispatch_buffer_bytes
        )


def model_state(
    dense_params: Fraction,
    expert_params: Fraction,
    layout: Layout,
    training: TrainingSpec,
    zero_stage: int | None = None,
    gather_unit: tuple[Fraction, Fraction] = (Fraction(0), Fraction(0)),
    linear: tuple[Fraction, Fraction] = (Fraction(0), Fraction(0)),
    embedding: Fraction = Fraction(0),
    held: Callable[[Mechanism], tuple[Fraction, Fraction] | None] | None = None,
) -> ModelState:
    """Model-state bytes on one GPU (weights, gradients, optimizer state, gathered units,
    buffers, step extras) under a ZeRO stage of the layout's framework.

    ``dense_params`` / ``expert_params``: parameters on this GPU before ZeRO (after tp; experts
    after etp·ep). ``gather_unit``: (dense, expert) parameters on this GPU of the largest unit
    gathered or reduced at once (a layer, the embedding or the output layer). ``linear``: the
    linear layers' weight elements on this GPU and those of its largest layer
    (:func:`model.estimate.stage_linear_per_gpu`), whose FP8 copies ``precision = fp8`` caches
    (:func:`weight_cache_terms`). ``embedding``: the embedding elements on this GPU
    (:func:`model.terms.grad_buffers.stage_embedding_per_gpu`), whose gradients some mechanisms
    keep wider (:meth:`model.mechanisms.Mechanism.embedding_grad_extra`). ``held``: of the
    mechanism, the (dense, expert) parameters whose whole weights it holds where fewer than all
    (:func:`model.terms.runtime_window.held_whole_params` of the stage); None = all. Dense parameters
    are replicated over D = dp·cp ranks, experts over D_e (:attr:`Layout.expert_shard_degree`);
    each class is held as :meth:`model.mechanisms.Mechanism.memory_terms` says.

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
    t = training
    mech = mechanism(
        layout.framework, stage, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes,
        pipelined=layout.pp > 1, distributed_optimizer=t.distributed_optimizer,
        overlap_comm=t.deepspeed_overlap_comm,
        cpu_offload=t.offload.optimizer > 0, sp_comm=sp_comm_bytes(t, layout.cp),
    )  # fmt: skip
    return _model_state(
        dense_params, expert_params, layout.shard_degree, layout.expert_shard_degree, mech,
        gather_unit, linear, cache_bytes_per_element(t, layout.framework), t.offload,
        layout.num_microbatches(t.global_batch_size) > 1, t.fp8_param_gather, embedding,
        fsdp_fp8_transpose(t, layout.framework), held(mech) if held else None,
    )  # fmt: skip


@lru_cache(maxsize=4096)
def _model_state(
    dense_params: Fraction,
    expert_params: Fraction,
    shard: int,
    expert_shard: int,
    mech: Mechanism,
    unit: tuple[Fraction, Fraction],
    linear: tuple[Fraction, Fraction] = (Fraction(0), Fraction(0)),
    cache_bytes: int | Fraction = 0,
    offload: Offload = NO_OFFLOAD,
    accumulating: bool = False,
    fp8_params: bool = False,
    embedding: Fraction = Fraction(0),
    fsdp_transpose: bool = False,
    held: tuple[Fraction, Fraction] | None = None,
) -> ModelState:
    """Sum of :meth:`Mechanism.memory_terms` over the dense and the expert parameters (and
    :meth:`Mechanism.embedding_grad_extra` of the ``embedding`` elements). Under
    ``textbook`` (the textbook convention, Rajbhandari et al. 2019) per parameter class with D
    replicas:

    * ZeRO-0: ``(2 + 2 + 12)·P``   * ZeRO-1: ``(2 + 2 + 12/D)·P``
    * ZeRO-2: ``(2 + 14/D)·P``     * ZeRO-3: ``16/D·P`` (+ two gathered units)

    The fixed buckets are counted once, not per parameter class.
    """
    w, g, o, gathered, buffers, step, cache, host = state_terms(
        mech, dense_params, expert_params, shard, expert_shard, unit[0], unit[1], *linear,
        cache_bytes, offload, accumulating, fp8_params, fsdp_transpose=fsdp_transpose, held=held,
    )  # fmt: skip
    g = g + mech.embedding_grad_extra(embedding)
    return ModelState(w, g, o, gathered, buffers, step, host, cache)


def cache_bytes_per_element(
    training: TrainingSpec, framework: Framework, device: DeviceSpec | None = None
) -> int | Fraction:
    """Bytes per linear weight element of the low-precision copies the recipe caches: under fp8
    where the framework caches them (:attr:`model.frameworks.Framework.fp8_caches_weights`) the
    row- and column-wise FP8 copies with their scales
    (:func:`model.precision.fp8_weight_cache_bytes`: 2, MXFP8 2 + 2/32), else 0. With FP8
    primary weights (:attr:`model.specs.TrainingSpec.fp8_param_gather`) the row-wise FP8 weight
    is the parameter itself and only the column-wise copy (the transpose) is cached: half of
    that, 1 B (MXFP8 1 + 1/32; Transformer Engine's ``Float8Tensor`` transpose cache). Where
    ``device`` keeps no transpose (:func:`model.precision.keeps_fp8_transpose`: per-tensor
    scaling on Blackwell) the column-wise copy is not there: 1 B, and 0 with FP8 primary
    weights. ``device`` None: the transpose is counted.

    Examples
    --------
    >>> from trainplan.model.hardware import DeviceSpec
    >>> t = TrainingSpec(seq_len=1, global_batch_size=1, precision="fp8", fp8_recipe="tensorwise")
    >>> b200 = DeviceSpec(name="B200", memory_bytes=180 * 10**9, memory_unit="GB",
    ...                   peak_flops_per_s=2.25e15)
    >>> cache_bytes_per_element(t, Framework.MEGATRON), cache_bytes_per_element(t, Framework.MEGATRON, b200)
    (2, 1)
    """
    if training.precision is not Precision.FP8 or not framework.fp8_caches_weights:
        return 0
    recipe = fp8_recipe_of(framework, training.fp8_recipe)
    cache = fp8_weight_cache_bytes(recipe)
    if not keeps_fp8_transpose(recipe, device):
        cache = cache / 2  # the row-wise copy serves both layouts
        return 0 if training.fp8_param_gather else int(cache)
    if training.fp8_param_gather:
        cache = cache / 2
    return int(cache) if cache.denominator == 1 else cache


def fsdp_fp8_transpose(training: TrainingSpec, framework: Framework | str) -> bool:
    """Whether Megatron-FSDP keeps a sharded column-wise copy of the FP8 primary weights beside
    the row-wise one: FP8 parameters (``fp8_param_gather``) under the MXFP8 recipe. Megatron-LM
    ``megatron_fsdp/param_and_grad_buffer.py`` ``ParamAndGradBuffer._init_each_parameter_group_
    buffers`` gives such a parameter group a ``torch.uint8`` ``transpose_weight_buffer`` sharded
    over the data-parallel group like its ``model_weight_buffer`` (``mixed_precision.py``
    ``fp8_need_transpose_data``: an ``MXFP8Tensor``, or the MXFP8 recipe under meta-device
    init; Megatron-LM 8f2f70067c, 2026-01). Read only where the weights are sharded
    (:func:`state_terms`).

    >>> t = TrainingSpec(seq_len=1, global_batch_size=1, precision="fp8", fp8_recipe="mxfp8",
    ...                  fp8_param_gather=True)
    >>> from dataclasses import replace
    >>> fsdp_fp8_transpose(t, "megatron"), fsdp_fp8_transpose(replace(t, fp8_recipe="tensorwise"), "megatron")
    (True, False)
    """
    if training.precision is not Precision.FP8 or not training.fp8_param_gather:
        return False
    return fp8_recipe_of(str(framework), training.fp8_recipe) is Fp8Recipe.MXFP8


def weight_cache_terms(
    mech: Mechanism,
    linear: Any,
    layer_linear: Any,
    cache_bytes: int | Fraction,
    fp8_params: bool = False,
) -> tuple[Any, Any]:
    """(persistent cache, cache of the gathered units) bytes on one GPU for ``cache_bytes`` per
    linear weight element (:func:`cache_bytes_per_element`).

    Without FP8 primary weights the FP8 copy of every linear weight of the stage (``linear``
    elements, whole, whatever the ZeRO stage) is held for the step: Transformer Engine
    ``module/linear.py`` ``Linear.forward`` (and ``layernorm_linear.py``) keeps the quantized
    weight in the module's ``_fp8_workspaces["weight"]`` whenever the caller passes
    ``is_first_microbatch`` (TE d0067d0da; only torch FSDP2, ``base.py`` ``is_fsdp2``, skips
    it). Megatron-Core's ``TELinear.forward`` (``megatron/core/extensions/
    transformer_engine.py``) passes it unless ``disable_parameter_transpose_cache``, and
    ``MegatronModule.set_is_first_microbatch`` sets it each step also through the Megatron-FSDP
    wrapper (``FullyShardedDataParallelV1`` is a ``_BaseDataParallel(MegatronModule)``;
    Megatron-LM d98e8a64dd); Megatron-DeepSpeed's ``ParallelTransformer._checkpointed_forward``
    / ``forward`` (``megatron/model/transformer.py``, f4157bea) pass it to the TE layer too. A
    sharded (ZeRO-3) weight's release frees the gathered BF16 weight, not that copy. The
    ``textbook`` profile (no framework code) keeps its convention: under ZeRO-3 the copies of the
    gathered layers only.

    With ``fp8_params`` (FP8 primary weights; ``cache_bytes`` is then the transpose only) the
    transpose lives on the parameter itself: held for the step when the weights are whole,
    and under Megatron-FSDP only while the unit is gathered: ``MegatronFSDP``'s release hook
    ``release_params_fp8_transpose_cache`` (``megatron_fsdp/megatron_fsdp.py``) discards it
    unless ``keep_fp8_transpose_cache`` — the :attr:`Mechanism.gathered_units` gathered layers'
    (``layer_linear``: the largest layer's) of each of the :attr:`Mechanism.chunks_at_once`.
    Exact for Fractions; element-wise for arrays.

    >>> from trainplan.model.mechanisms import mechanism
    >>> fsdp = mechanism("megatron", 3, 2, 4, 12)
    >>> weight_cache_terms(fsdp, 1000, 10, 2), weight_cache_terms(fsdp, 1000, 10, 1, True)
    ((2000, 0), (0, 20))
    """
    if not cache_bytes:
        return 0, 0
    if mech.weights_full or not (fp8_params or mech.framework is Framework.TEXTBOOK):
        return cache_bytes * linear, 0
    return 0, cache_bytes * mech.gathered_units * mech.chunks_at_once * layer_linear


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
    cache_bytes: int | Fraction = 0,
    offload: Offload = NO_OFFLOAD,
    accumulating: Any = False,
    fp8_params: bool = False,
    optimizer_scale: tuple[Any, Any] = (1, 1),
    fsdp_transpose: bool = False,
    held: tuple[Any, Any] | None = None,
    fp8_cut: Any = None,
) -> tuple[Any, ...]:
    """(weights, gradients, optimizer, gathered, buffers, step extra, weight cache, host) bytes
    of one GPU: the mechanism's terms for the dense parameters (replicated over ``shard`` ranks)
    plus those of the routed experts (over ``expert_shard``), the framework's fixed buckets
    once, the recipe's cached weight copies (:func:`weight_cache_terms`; in ``gathered`` only for
    FP8 primary weights under ZeRO-3), and what ``offload`` moves to the GPU's share of the host
    (:func:`model.offload.offload_memory`, with its accumulation buffers when ``accumulating``:
    more than one micro-batch per step; the last term). With ``fp8_params`` (FP8 primary
    weights, :attr:`model.specs.TrainingSpec.fp8_param_gather`) the ``linear`` weight elements
    held whole are 1 B each instead of the mechanism's working dtype; under Megatron-FSDP (the
    weights sharded) so are their shard (``linear ÷ shard``) and the linear elements of the
    gathered units (``layer_linear``, the largest layer's): ``ParamAndGradBuffer.
    _init_each_parameter_group_buffers`` (``megatron/core/distributed/fsdp/src/megatron_fsdp/
    param_and_grad_buffer.py``, Megatron-LM 92c8482e6d, the NeMo 25.11 container's) gives a
    parameter group of FP8 parameters a ``torch.uint8`` ``model_weight_buffer``, sharded and
    all-gathered as such, and a BF16 gradient buffer; the routed experts' linear elements are
    divided by the dense shard degree (exact for dense models). With ``fsdp_transpose``
    (:func:`fsdp_fp8_transpose`: MXFP8) Megatron-FSDP also holds the column-wise
    ``transpose_weight_buffer`` shard, 1 B per ``linear ÷ shard`` element (its E8M0 scales, one
    byte per 32 elements, are counted for neither shard). ``optimizer_scale``: (dense, expert)
    factors on the optimizer state of an optimizer other than Adam (:func:`model.optimizers.
    optimizer_scale`; 1 for Adam). ``held``: (dense, expert) parameters whose whole working
    weights are held at the peak where fewer than all (:func:`model.terms.runtime_window.
    held_whole_params`); None = all. ``fp8_cut``: ``fsdp2``'s (:func:`_fp8_param_terms`). Exact
    for Fractions; element-wise for arrays of layouts."""
    whole = dense_unit + expert_unit  # one layer's, gathered and prefetched as one unit
    dense, experts = _class_terms(
        mech, dense_params, expert_params, shard, expert_shard, dense_unit, expert_unit,
        bool(offload.params), held,
    )  # fmt: skip
    w, g, o, gathered, buffers, step = (a + b for a, b in zip(dense, experts, strict=True))
    o = o + (optimizer_scale[0] - 1) * dense[2] + (optimizer_scale[1] - 1) * experts[2]
    if fp8_params:
        w, gathered = _fp8_param_terms(
            mech, w, gathered, linear, layer_linear, shard, whole, fsdp_transpose, fp8_cut, held,
            dense_params)  # fmt: skip
    cache, gathered_cache = weight_cache_terms(mech, linear, layer_linear, cache_bytes, fp8_params)
    elements = optimizer_elements(mech, dense_params, expert_params, shard, expert_shard)
    w, g, o, step, host = offload_memory(mech, offload, w, g, o, step, elements, accumulating)
    if mech.bucket_persists:  # DeepSpeed ZeRO-3's IPG bucket is held through the step too
        step = step + mech.bucket_bytes
    return w, g, o, gathered + gathered_cache, buffers + mech.bucket_bytes, step, cache, host


def _class_terms(
    mech: Mechanism,
    dense_params: Any,
    expert_params: Any,
    shard: Any,
    expert_shard: Any,
    dense_unit: Any,
    expert_unit: Any,
    params_offloaded: bool,
    held: tuple[Any, Any] | None = None,
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """:meth:`model.mechanism_record.Mechanism.memory_terms` of the dense parameters and of the
    routed experts, one layer's two parts gathered and prefetched as one unit. With the
    parameters on the host every unit is fetched whole onto the GPU (DeepSpeed stage3 fetches the
    CPU partition into the full-size gathered buffer; FSDP2's CPUOffloadPolicy copies the shard
    in before its all-gather), even unsharded. FSDP2 wraps the experts on their own mesh, one
    rank included (world size 1: the unsharded parameters are still a copy,
    ``_fsdp_param_group.py`` ``wait_for_unshard``). ``held``: :func:`state_terms`'."""
    whole = dense_unit + expert_unit
    fetched = True if params_offloaded else None
    held_dense, held_expert = (None, None) if held is None else held
    dense = mech.memory_terms(dense_params, shard, dense_unit, whole, fetched, held_dense)
    wrapped = shard > 1 if mech.framework is Framework.FSDP2 else None
    expert = mech.memory_terms(
        expert_params, expert_shard, expert_unit, whole, fetched or wrapped, held_expert
    )
    return dense, expert


def _fp8_param_terms(
    mech: Mechanism,
    w: Any,
    gathered: Any,
    linear: Any,
    layer_linear: Any,
    shard: Any,
    whole: Any,
    fsdp_transpose: bool,
    fp8_cut: Any = None,
    held: tuple[Any, Any] | None = None,
    dense_params: Any = 0,
) -> tuple[Any, Any]:
    """(weights, gathered) of :func:`state_terms` with FP8 primary weights (its docstring):
    the whole linear weights at 1 B, or Megatron-FSDP's FP8 ``model_weight_buffer`` shard and
    gathered units (and, MXFP8, the column-wise shard). Under ``fsdp2`` (torchao's FP8
    all-gather, :func:`model.fp8_gathers.fp8_param_gathers`) the FP32 shard stays as it is and
    only the unsharded weights narrow — ``fsdp_post_all_gather`` wraps the gathered ``uint8``
    bytes as the parameter's ``Float8TrainingTensor``: the whole weights a ZeRO-2 or pipelined
    step holds (of them, the ``held`` share of ``dense_params`` PyTorch's multi-stage runtime
    keeps whole, :func:`state_terms`; ``linear`` the dense linears, routed experts gather BF16),
    else the gathered units, each ``fp8_cut`` bytes narrower (:func:`fp8_unit_cut`; None: the
    largest layer's linear elements a byte less, the largest unit taken to be a layer) — and
    only where FSDP shards (``shard`` > 1; torchtitan turns the FP8 gather on only with
    ``dp_shard_enabled``, dp > 1)."""
    narrower = mech.weight_bytes - FP8_PARAM_BYTES
    if mech.framework is Framework.FSDP2:
        if held is not None:  # only the whole weights the runtime's window holds
            linear = where(dense_params > 0, linear * held[0] / maximum(dense_params, 1), 0)
        if mech.weights_full:
            return w - where(shard > 1, narrower * linear, 0 * linear), gathered
        held = mech.units_held(whole)
        cut = narrower * layer_linear if fp8_cut is None else fp8_cut
        return w, gathered - where(shard > 1, held * cut, 0 * cut)
    if mech.weights_full:
        return w - narrower * linear, gathered
    if not mech.weights_sharded:
        return w, gathered
    w = w - narrower * linear / shard + (FP8_PARAM_BYTES * linear / shard if fsdp_transpose else 0)
    held = mech.units_held(whole)
    beside = layer_linear if mech.framework.physical else layer_linear - layer_linear / shard
    return w, gathered - where(shard > 1, held * narrower * beside, 0 * beside)


def fp8_unit_cut(
    w: int, outside: Any, layer: Any, layer_linear: Any, moe_layer: Any = 0, moe_linear: Any = 0
) -> Any:
    """Bytes the largest FSDP2 all-gather output shrinks by under torchao's FP8 all-gather
    (:func:`model.fp8_gathers.fp8_param_gathers`), which narrows the layers' ``Float8Linear``
    weights only (the embedding and the filtered output layer gather at ``w``, a MoE layer's
    router and routed experts too): ``w·max(outside, layer, moe_layer)`` less
    ``max(w·outside, w·layer − (w − 1)·layer_linear, w·moe_layer − (w − 1)·moe_linear)``,
    ``outside`` the largest unit outside the layers, ``layer`` a dense layer and
    ``layer_linear`` its FP8-gathered elements, ``moe_layer`` and ``moe_linear`` the same of a
    MoE layer (0 where the stage holds no layer of the kind), on one GPU
    (:func:`model.terms.stage_params.fp8_gather_units`). Element-wise for arrays.

    Llama 3 8B at tp 1: the embedding (525,336,576 elements) outweighs a layer (218,112,000)
    either way: nothing; a layer of 218,112,000 with 218,103,808 linear elements alone:
    218,103,808 B. A MoE layer of 1,000 elements (100 FP8) beside a dense one of 900 (800): 2,000
    B before, max(1,800 − 800, 2,000 − 100) = 1,900 after.

    >>> fp8_unit_cut(2, 525_336_576, 218_112_000, 218_103_808), fp8_unit_cut(2, 0, 218_112_000, 218_103_808)
    (0, 218103808)
    >>> fp8_unit_cut(2, 0, 900, 800, 1_000, 100)
    100
    """
    before, less = w * maximum(maximum(outside, layer), moe_layer), w - FP8_PARAM_BYTES
    dense = maximum(w * outside, w * layer - less * layer_linear)
    return before - maximum(dense, w * moe_layer - less * moe_linear)


def optimizer_elements(
    mech: Mechanism, dense_params: Any, expert_params: Any, shard: Any, expert_shard: Any
) -> Any:
    """Elements of optimizer state on one GPU: the shard (dense ÷ D, experts ÷ D_e) under a
    sharded optimizer, else every parameter on the GPU. What offload moves and the CPU steps."""
    if mech.optimizer_sharded:
        return dense_params / shard + expert_params / expert_shard
    return dense_params + expert_params


def keeps_gathered_inputs(framework: Framework, training: TrainingSpec) -> bool:
    """Whether tensor parallelism keeps the blocks' all-gathered inputs: the recipe's
    :attr:`model.specs.TrainingSpec.gathered_block_inputs`, else the framework's
    (:attr:`model.frameworks.Framework.gathers_block_inputs`)."""
    if training.gathered_block_inputs is None:
        return framework.gathers_block_inputs
    return training.gathered_block_inputs
