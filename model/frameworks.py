"""Framework profiles: what a ZeRO stage *is* in the framework that runs it.

The search optimises what the cost model says, so every figure it sees must be a mechanism some
framework runs, with its memory at the peak and the traffic of that same mechanism
(issue 9). A :class:`Mechanism` states, per parameter of a stage (``P`` of them on the GPU,
replicated over ``D`` data-parallel ranks), which buffers are held whole and which sharded
(``÷ D``), what exists only during the optimizer step, what a layer-sized *unit* adds while it is
gathered or its gradients are reduced, and which collectives move them — once per step or once
per micro-batch. Memory (:mod:`model.memory`) and traffic (:mod:`model.comm`) both read the same
record, so they cannot describe different mechanisms.

Profiles (``--framework``):

* ``megatron`` — Megatron-Core (NVIDIA/Megatron-LM). ZeRO-0 is its DDP, ZeRO-1 its distributed
  optimizer. With bf16 parameters gradients accumulate and reduce in an FP32 contiguous
  ``main_grad`` buffer (``megatron/training/arguments.py``: "bfloat16 requires gradient
  accumulation and all-reduce to be done in fp32"; ``megatron/core/distributed/
  param_and_grad_buffer.py``). Bytes per parameter, from Megatron-LM's own table
  (``docs/user-guide/features/dist_optimizer.md``, bf16 parameters and fp32 gradients):
  18 without and ``6 + 12/d`` with the distributed optimizer. The gradient buffer is reduced
  once per step (all-reduce, or reduce-scatter then an all-gather of the updated bf16 weights),
  bucketed against the last micro-batch's backward (``--overlap-grad-reduce``). Megatron-FSDP
  (ZeRO-2/3, ``--data-parallel-sharding-strategy``) is not modelled: use ``fsdp2``.
* ``deepspeed`` — DeepSpeed ZeRO (deepspeedai/DeepSpeed ``deepspeed/runtime/zero/``). Stage 1
  accumulates bf16 gradients whole and reduces once per step; stage 2 reduce-scatters every
  micro-batch's gradients through the ``reduce_bucket_size`` IPG bucket (5e8 elements) into a
  bf16 partition; both materialise the FP32 gradient partition at the step
  (``estimate_zero2_model_states_mem_needs``, PR #5099: ``2P + 18P/N`` = 2 bf16 params + 2 bf16
  grads + 4 fp32 grads + 4 fp32 params + 8 Adam, the last four ÷ N). Stage 3 keeps bf16
  parameter partitions, gathers each layer for forward and again for backward of every
  micro-batch (fetch/release), prefetches the next (``stage3_prefetch_bucket_size``), and
  materialises the FP32 gradient of one optimizer sub-group (``sub_group_size`` = 1e9 elements)
  at a time at the step (``stage3.py`` ``_prepare_fp32_grad_for_sub_group``). The pipeline
  engine refuses ZeRO-2 and -3 (``deepspeed/runtime/pipe/engine.py``: "ZeRO-2 and ZeRO-3 are
  incompatible with pipeline parallelism"); ZeRO-0 is not modelled (DeepSpeed's bf16 path
  already shards the optimizer). Stages 1 and 2 allocate the IPG bucket (``reduce_bucket_size``
  elements in the parameters' dtype) in every backward (``stage_1_and_2.py`` ``setup_buckets``,
  ``contiguous_gradients`` on by default).
* ``fsdp2`` — PyTorch FSDP2 ``fully_shard`` with ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)`` as torchtitan configures it. The sharded parameter is the FP32 master
  (``4/D``), with FP32 Adam moments and FP32 sharded gradients (``8/D``, ``4/D``); each unit is
  all-gathered in bf16 and its gradients are reduce-scattered in FP32 after every micro-batch's
  backward (gradient sync on, the default). ZeRO-3 is ``reshard_after_forward=True`` (gather for
  forward and again for backward, the next unit prefetched); ZeRO-2 is
  ``reshard_after_forward=False`` (one gather per micro-batch, the stage's weights held whole
  from forward to backward) — the recipe of Llama 3 §3.3.1 ("we do not reshard after forward"),
  with FP32 gradient reduce-scatter (§3.3.4). No ZeRO-0/1 (FSDP2 always shards). Under a
  pipeline schedule (pp > 1) PyTorch's ``PipelineStage`` turns gradient sync off until the last
  micro-batch: the stage's unsharded gradients accumulate whole, in FP32, and are
  reduce-scattered once per step (:func:`_fsdp2_pipelined`).
* ``textbook`` — the original planner's and the ZeRO paper's steady state (Rajbhandari et al. 2019): 16
  B/param sharded as ZeRO-0…3, one DP exchange per step (ZeRO-3: one extra all-gather;
  ``zero3_regather`` gathers per micro-batch), capacity as the vendor states it. It reproduces
  the original tool's figures; the search does not optimise it by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.xp import minimum

__all__ = [
    "Framework",
    "DEFAULT_FRAMEWORK",
    "ZERO_STAGES",
    "DEFAULT_ZERO_STAGE",
    "Mechanism",
    "mechanism",
    "check_framework",
    "DEEPSPEED_REDUCE_BUCKET_ELEMENTS",
    "DEEPSPEED_PREFETCH_BUCKET_ELEMENTS",
    "DEEPSPEED_SUB_GROUP_ELEMENTS",
    "DEFAULT_RUNTIME_RESERVE_BYTES",
    "DRIVER_RESERVED_BYTES",
    "CUDA_CONTEXT_BYTES",
    "CUBLAS_WORKSPACE_BYTES",
    "FRAGMENTATION_ALLOWANCE_BYTES",
    "GRADIENT_BYTES",
    "gradient_bytes_for",
]


class Framework(StrEnum):
    """A framework profile (see the module docstring)."""

    MEGATRON = "megatron"
    DEEPSPEED = "deepspeed"
    FSDP2 = "fsdp2"
    TEXTBOOK = "textbook"

    @property
    def physical(self) -> bool:
        """True for a real framework's mechanism (peak memory, its own traffic, the device's
        real bytes); False for ``textbook``."""
        return self is not Framework.TEXTBOOK

    @property
    def gathers_block_inputs(self) -> bool:
        """True when the profile's tensor parallelism keeps the attention and MLP blocks'
        all-gathered inputs for backward (:attr:`model.activations.ActivationContext.
        gathered_block_inputs`): ``fsdp2``, whose tensor parallelism is torchtitan's DTensor
        plan (``torchtitan/models/common/decoder_sharding.py``: ``SequenceParallel`` norms, the
        block input redistributed to ``Replicate`` before ``ColwiseParallel``). Megatron-Core
        keeps the sequence shard and gathers again in backward."""
        return self is Framework.FSDP2

    @property
    def op_selective(self) -> bool:
        """True when the profile's selective recomputation is torchtitan's op-level policy
        (``selective_ac_option = "op"``: the block input, every other matmul output and the
        attention kernel's outputs are kept; :mod:`model.op_checkpoint`): ``fsdp2``. The others
        recompute the attention core only (Korthikanti et al. 2022 §5; Megatron-Core's
        ``--recompute-granularity selective`` with ``core_attn``)."""
        return self is Framework.FSDP2

    @property
    def gathers_expert_tokens(self) -> bool:
        """True when expert tensor parallelism all-gathers the routed tokens over the expert-TP
        group before the experts (:attr:`model.activations.ActivationContext.expert_tp`):
        ``megatron`` (``megatron/core/transformer/moe/token_dispatcher.py``
        ``MoEAlltoAllTokenDispatcher.token_dispatch``)."""
        return self is Framework.MEGATRON

    def moe_combine_bytes(self) -> int | None:
        """Bytes per element of the routed experts' outputs a MoE layer's weighted combine
        keeps (:attr:`model.activations.ActivationContext.combine_output_bytes`): 0 for
        ``megatron`` (``TEGroupedMLP.forward`` weights inside the activation,
        ``weighted_bias_swiglu_impl``; the combine's ``unpermute`` gets no probs), 4 for
        ``fsdp2`` (torchtitan ``token_dispatcher.py`` ``combine`` multiplies an fp32 copy by the
        scores), None (β, the paper's count) for the others."""
        return {Framework.MEGATRON: 0, Framework.FSDP2: 4}.get(self)

    @property
    def fp8_saves_fp8_inputs(self) -> bool:
        """True when, under ``precision = fp8``, the linear layers save their inputs in FP8
        (Transformer Engine's ``Linear``, as Megatron-Core runs it). False for ``fsdp2``:
        torchtitan's float8 is torchao's ``Float8Linear``, whose
        ``matmul_with_hp_or_float8_args.forward`` (``torchao/float8/float8_linear.py``) saves
        ``input_hp``, the BF16 input, and casts it again in backward; torchtitan's recipes are
        ``rowwise`` and ``rowwise_with_gw_hp`` (``torchtitan/components/quantization/
        float8.py``), so no input reaches a linear already in FP8."""
        return self is not Framework.FSDP2

    @property
    def fp8_caches_weights(self) -> bool:
        """True when, under ``precision = fp8``, the linear weights' FP8 copies are cached for
        the step (Transformer Engine, :data:`model.precision.FP8_WEIGHT_CACHE_BYTES`). False for
        ``fsdp2``: torchao's ``Float8Linear`` casts the weight inside each GEMM
        (``matmul_with_hp_or_float8_args``: ``hp_tensor_to_float8_dynamic`` in forward and again
        in backward, saving the high-precision weight), so no copy outlives its GEMM."""
        return self is not Framework.FSDP2


DEFAULT_FRAMEWORK = Framework.MEGATRON
"""The profile ``evaluate``, ``search`` and ``frontier`` use unless told: Megatron-Core runs
every axis the search chooses (tp with sequence parallelism, interleaved pp, cp, ep) and its
distributed optimizer is what large published runs use; its figures are ones a user can launch."""

ZERO_STAGES: dict[Framework, tuple[int, ...]] = {
    Framework.MEGATRON: (0, 1),
    Framework.DEEPSPEED: (1, 2, 3),
    Framework.FSDP2: (2, 3),
    Framework.TEXTBOOK: (0, 1, 2, 3),
}
"""ZeRO stages each profile models (see the module docstring for what each one is)."""

DEFAULT_ZERO_STAGE: dict[Framework, int] = {
    Framework.MEGATRON: 1,
    Framework.DEEPSPEED: 1,
    Framework.FSDP2: 3,
    Framework.TEXTBOOK: 1,
}
"""The stage a layout gets when none is given: Megatron's distributed optimizer, DeepSpeed's
stage 1, FSDP2's full sharding (``fully_shard``'s default ``reshard_after_forward=True``), and
ZeRO-1 for the textbook (the original planner's default)."""

DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed ``reduce_bucket_size`` default, elements (``deepspeed/runtime/zero/config.py``):
the contiguous IPG gradient bucket of ZeRO-1, -2 (``stage_1_and_2.py`` ``setup_buckets``, in
the parameters' dtype, live in backward) and -3 (``stage3.py``, allocated at construction and
held for the whole run)."""
DEEPSPEED_PREFETCH_BUCKET_ELEMENTS = 50_000_000
"""DeepSpeed ``stage3_prefetch_bucket_size`` default, elements: parameters fetched ahead of use."""
DEEPSPEED_SUB_GROUP_ELEMENTS = 1_000_000_000
"""DeepSpeed ``sub_group_size`` default, elements: ZeRO-3 steps the optimizer one sub-group of
the partition at a time, materialising that sub-group's FP32 gradient."""

DRIVER_RESERVED_BYTES = 361 * 2**20
"""HBM the driver keeps from every process: an 80 GiB H100 reports 81,559 MiB of its 81,920
(``nvidia-smi``'s total)."""
CUDA_CONTEXT_BYTES = 666_632_192
"""A PyTorch process's CUDA context with every module of its kernels loaded: 666,632,192 B
measured in pytorch/pytorch#86509 (``CUDA_MODULE_LOADING=EAGER``; 287,047,680 B at start under
the lazy loading it made the default, which loads each module on first use and so grows toward
this as a step's kernels run)."""
CUBLAS_WORKSPACE_BYTES = 32 * 2**20 + (32 * 2**20 + 1024)
"""cuBLAS workspaces on Hopper and later: PyTorch's per handle and stream, 4096 KiB × 8
(``parseChosenWorkspaceSize`` in ``aten/src/ATen/cuda/CublasHandlePool.cpp``; cuBLASLt shares
it, ``TORCH_CUBLASLT_UNIFIED_WORKSPACE``), and Transformer Engine's, 32 MiB + 1 KiB
(``get_cublas_workspace_size_bytes``, ``transformer_engine/pytorch/cpp_extensions/gemm.py``)."""
FRAGMENTATION_ALLOWANCE_BYTES = 2**30
"""An ASSUMPTION, not a sourced figure: 1 GiB allowed for what PyTorch's caching allocator
reserves beyond the tensors' peak (``max_memory_reserved`` − ``max_memory_allocated``). No
per-operation source gives it: the allocator's own rules (``c10/cuda/CUDACachingAllocator.cpp``:
requests rounded up to 512 B, blocks of 2 MiB segments up to 1 MiB and of 20 MiB segments up to
10 MiB, larger segments rounded up to 2 MiB) bound the rounding at under 2 MiB a large tensor,
and the rest — freed blocks a later, larger request cannot reuse — depends on the order and
sizes of a step's allocations. How it was chosen: a round figure of the order measured on one
small FSDP run with ``expandable_segments:True`` (pytorch/pytorch#137151: max_active 1.38 /
1.75 / 1.75 GiB against max_reserved 2.62 / 2.67 / 2.88 GiB over three steps, gaps of 0.92 to
1.24 GiB). The evaluate report lists it among its assumptions; ``memory_reserve_gib`` replaces
the whole reserve (docs: memory-mechanisms)."""

DEFAULT_RUNTIME_RESERVE_BYTES = (
    DRIVER_RESERVED_BYTES
    + CUDA_CONTEXT_BYTES
    + CUBLAS_WORKSPACE_BYTES
    + FRAGMENTATION_ALLOWANCE_BYTES
)
"""Bytes of HBM a physical profile keeps out of reach of the model (2,186,019,840 B, 2.04 GiB;
``memory_reserve_gib`` overrides): what the driver keeps, the CUDA context, the cuBLAS workspaces
and the allocator's fragmentation allowance. NCCL's communicator buffers, which used to be part
of a flat 3 GiB here, are a term of the peak per layout
(:func:`model.terms.comm_memory.comm_memory_term`)."""


@dataclass(frozen=True, slots=True)
class Mechanism:
    """One framework's ZeRO stage as buffers and collectives, per parameter of a stage.

    Byte fields are bytes per parameter: ``*_full`` held whole on every replica, ``*_sharded``
    held as a ``1/D`` shard. A *unit* is the largest set of parameters the framework gathers or
    reduces at once: one transformer layer, or the embedding / output layer.
    """

    framework: Framework
    zero_stage: int
    name: str
    """The framework's own name for the mechanism."""
    weights_full: int
    """Working (bf16) weights held whole for the whole step."""
    weights_sharded: int
    """Weights kept as a shard (ZeRO-3's bf16 partition; FSDP2's FP32 sharded parameter)."""
    grads_full: int
    """Gradient buffer held whole (accumulated over micro-batches, reduced once per step)."""
    grads_sharded: int
    """Gradient accumulator held as a shard (reduced every micro-batch, or the textbook's)."""
    optimizer_full: int
    """Optimizer state (FP32 master and moments, where not counted as weights) held whole."""
    optimizer_sharded: int
    """Optimizer state held as a shard."""
    weight_bytes: int = 2
    """Bytes per working (bf16) weight element: what a gathered unit holds and an all-gather
    moves."""
    step_full: int = 0
    """Bytes per parameter, whole, that exist only while the optimizer steps (Megatron-Core
    without the distributed optimizer copies 16-bit gradients to FP32 for the step)."""
    step_sharded: int = 0
    """Bytes per parameter, ÷ D, that exist only while the optimizer steps (DeepSpeed's FP32
    gradient partition; Megatron's distributed optimizer's FP32 copy of 16-bit gradients)."""
    step_cap_elements: int | None = None
    """When the step materialises ``step_sharded`` one sub-group at a time: the sub-group size
    in elements (DeepSpeed ZeRO-3's ``sub_group_size``); None = the whole partition."""
    gathered_units: int = 0
    """Units held gathered in bf16 at once, beyond the local shard (current + prefetched)."""
    unit_grad_bytes: int = 0
    """Bytes per parameter of one unit's unsharded gradients live in backward before its
    reduce-scatter (FSDP2: the bf16 gradient and its FP32 copy for the reduction)."""
    bucket_bytes: int = 0
    """Fixed communication buckets live in backward, bytes (DeepSpeed's IPG bucket)."""
    host_accumulation_bytes: int = 0
    """Bytes per offloaded optimizer element of the host buffers that accumulate gradients over
    the micro-batches of a step under optimizer offload (DeepSpeed ZeRO-1/2:
    ``stage_1_and_2.py`` ``async_accumulate_grad_in_cpu_via_gpu`` keeps one buffer per
    parameter of the rank's partition, in the parameter's dtype, ``accumulated_grads_in_cpu``);
    only with more than one micro-batch per step."""
    bucket_persists: bool = False
    """The buckets are allocated once and held through the optimizer step too (DeepSpeed
    ZeRO-3: ``stage3.py`` allocates each IPG bucket's buffer in ``__init__`` and frees it only
    in ``offload_states``), not only in backward."""
    reduce_bytes: int = 2
    """Bytes per gradient element on the wire."""
    all_reduce: bool = False
    """The reduction is an all-reduce (ZeRO-0) rather than a reduce-scatter."""
    reduce_per_microbatch: bool = False
    """Gradients are reduced after every micro-batch's backward, not once per step."""
    gathers_per_step: int = 0
    """All-gathers of the bf16 weights per step (after the sharded optimizer's update; the
    textbook's ZeRO-3 counts two)."""
    gathers_per_microbatch: int = 0
    """All-gathers of the bf16 weights per micro-batch (ZeRO-3: forward and backward; FSDP
    ``reshard_after_forward=False``: forward)."""
    source: str = ""

    def memory_terms(self, params: Any, replicas: Any, unit: Any) -> tuple[Any, ...]:
        """(weights, gradients, optimizer, gathered, unit buffers, step extra) bytes on one GPU
        for ``params`` parameters replicated over ``replicas`` ranks, whose largest unit holds
        ``unit`` of them (all counts per GPU, after tp/pp/ep). The fixed
        :attr:`bucket_bytes` are not included (one bucket serves every parameter class).

        Exact for Fraction ``params``/``unit``; element-wise for arrays of layouts
        (:mod:`model.xp`).

        Examples
        --------
        DeepSpeed ZeRO-2, P = 13e9 on N = 8 GPUs: ``2P + 18P/N`` at the step
        (``estimate_zero2_model_states_mem_needs``) = 55.25e9 B.

        >>> from fractions import Fraction
        >>> m = mechanism(Framework.DEEPSPEED, 2)
        >>> w, g, o, _, _, step = m.memory_terms(Fraction(13 * 10**9), 8, Fraction(0))
        >>> w + g + o + step
        Fraction(55250000000, 1)
        """
        d = replicas
        shard = params / d
        weights = self.weights_full * params + self.weights_sharded * shard
        grads = self.grads_full * params + self.grads_sharded * shard
        opt = self.optimizer_full * params + self.optimizer_sharded * shard
        # beyond the local shard: (d − 1)/d of each gathered unit (none when d = 1)
        gathered = self.gathered_units * self.weight_bytes * (unit - unit / d)
        if self.step_cap_elements is not None:
            shard = minimum(shard, self.step_cap_elements)
        step = self.step_full * params + self.step_sharded * shard
        buffers = self.unit_grad_bytes * unit
        return weights, grads, opt, gathered, buffers, step

    def traffic_terms(self) -> tuple[int, int]:
        """(bytes per parameter sent once per step, bytes per parameter sent per micro-batch),
        each to be multiplied by ``(D − 1)/D · P`` (ring collectives; an all-reduce moves twice
        the reduce-scatter's bytes).

        Examples
        --------
        Megatron's distributed optimizer: reduce-scatter of FP32 gradients and all-gather of the
        bf16 weights, once per step: 4 + 2.

        >>> mechanism(Framework.MEGATRON, 1).traffic_terms()
        (6, 0)
        """
        reduce = self.reduce_bytes * (2 if self.all_reduce else 1)
        per_step = self.weight_bytes * self.gathers_per_step
        per_mb = self.weight_bytes * self.gathers_per_microbatch
        if self.reduce_per_microbatch:
            per_mb += reduce
        else:
            per_step += reduce
        return per_step, per_mb


def check_framework(framework: Framework, zero_stage: int, pp: int) -> None:
    """Check that ``framework`` runs ``zero_stage`` with ``pp`` pipeline stages.

    Raises
    ------
    LayoutError
        A stage the profile does not model, or DeepSpeed ZeRO-2/3 with pipeline parallelism.

    Examples
    --------
    >>> try:
    ...     check_framework(Framework.DEEPSPEED, 2, 4)
    ... except LayoutError as err:
    ...     print(str(err).split(" (")[0])
    zero_stage: 2 with `framework` deepspeed needs pp = 1
    """
    allowed = ZERO_STAGES[framework]
    if zero_stage not in allowed:
        what = {
            Framework.MEGATRON: "DDP (0) and the distributed optimizer (1); for ZeRO-2/3 use "
            "`framework` fsdp2 or deepspeed",
            Framework.DEEPSPEED: "ZeRO-1, 2 and 3",
            Framework.FSDP2: "reshard_after_forward=False (2) and True (3)",
            Framework.TEXTBOOK: "0–3",
        }[framework]
        raise LayoutError(
            f"zero_stage: {zero_stage} is not a stage of `framework` {framework} (it models {what})"
        )
    if framework is Framework.DEEPSPEED and zero_stage >= 2 and pp > 1:
        raise LayoutError(
            f"zero_stage: {zero_stage} with `framework` deepspeed needs pp = 1 (its pipeline "
            f"engine allows ZeRO-0/1 only); pp is {pp}"
        )


_SOURCES = {
    Framework.MEGATRON: "Megatron-LM docs/user-guide/features/dist_optimizer.md (bf16 params, "
    "fp32 grads: 18 B/param, 6 + 12/d distributed); megatron/training/arguments.py (bf16 → "
    "fp32 gradient accumulation and reduction)",
    Framework.DEEPSPEED: "DeepSpeed deepspeed/runtime/zero/stage_1_and_2.py and stage3.py "
    "(estimate_zero2_model_states_mem_needs, PR #5099; reduce_bucket_size, "
    "stage3_prefetch_bucket_size, sub_group_size defaults in zero/config.py)",
    Framework.FSDP2: "PyTorch FSDP2 fully_shard, MixedPrecisionPolicy(param_dtype=bf16, "
    "reduce_dtype=fp32) as torchtitan sets it; Llama 3 (arXiv 2407.21783) §3.3.1, §3.3.4",
    Framework.TEXTBOOK: "Rajbhandari et al. 2019 (ZeRO, arXiv 1910.02054) §3.1, §7: 16 B/param "
    "and one DP exchange per step (the original tool's convention)",
}


GRADIENT_BYTES: dict[Framework, int] = {
    Framework.MEGATRON: 4,
    Framework.DEEPSPEED: 2,
    Framework.FSDP2: 4,
    Framework.TEXTBOOK: 2,
}
"""Gradient bytes per element each profile accumulates and reduces with bf16 parameters when
the recipe does not say: Megatron-LM turns ``accumulate_allreduce_grads_in_fp32`` on for bf16
(``arguments.py``); torchtitan reduces in FP32 (``mixed_precision_reduce = "float32"``);
DeepSpeed ZeRO accumulates in the parameter dtype (``grad_accum_dtype`` unset); the textbook's
16 B/param counts 2."""


def gradient_bytes_for(framework: Framework | str, gradient_bytes: int | None = None) -> int:
    """Bytes per gradient element ``framework`` accumulates and reduces: the recipe's
    ``gradient_bytes`` where given, else the profile's own (:data:`GRADIENT_BYTES`). Every
    mechanism of the profile reduces in it (:attr:`Mechanism.reduce_bytes`), as does the tied
    embedding's all-reduce between the first and the last stage.

    Examples
    --------
    >>> gradient_bytes_for("megatron"), gradient_bytes_for("deepspeed"), gradient_bytes_for("fsdp2", 2)
    (4, 2, 2)
    """
    return GRADIENT_BYTES[Framework(framework)] if gradient_bytes is None else gradient_bytes


def mechanism(
    framework: Framework | str,
    zero_stage: int,
    weight_bytes: int = 2,
    gradient_bytes: int | None = None,
    optimizer_bytes: int = 12,
    regather: bool = False,
    pipelined: bool = False,
) -> Mechanism:
    """The mechanism of ``zero_stage`` in ``framework`` for the given byte counts.

    ``weight_bytes`` / ``gradient_bytes`` / ``optimizer_bytes`` are the training recipe's
    (:class:`model.specs.TrainingSpec`; mixed-precision Adam: 2, 2, 12 where the 12 are the FP32
    master and two moments). ``gradient_bytes`` is the accumulation and reduction dtype where
    the framework lets the user choose it (textbook; DeepSpeed's ``grad_accum_dtype``);
    Megatron-Core accumulates and reduces FP32 ``main_grad`` with bf16 parameters, FSDP2 as
    torchtitan sets it reduces in FP32 into FP32 shards. ``regather`` (textbook ZeRO-3 only)
    gathers the weights for every micro-batch's forward and backward. ``pipelined`` (pp > 1)
    changes ``fsdp2`` only: PyTorch's pipeline schedules run FSDP2 without gradient
    synchronisation until the last micro-batch (:func:`_fsdp2_pipelined`).

    Raises
    ------
    LayoutError
        A stage the profile does not model (:func:`check_framework`).

    Examples
    --------
    Megatron-LM's table, bf16 parameters and fp32 gradients: 18, and 6 + 12/d.

    >>> m0, m1 = mechanism("megatron", 0), mechanism("megatron", 1)
    >>> m0.weights_full + m0.grads_full + m0.optimizer_full
    18
    >>> (m1.weights_full + m1.grads_full, m1.optimizer_sharded)
    (6, 12)
    """
    fw = Framework(framework)
    check_framework(fw, zero_stage, 1)
    w, o = weight_bytes, optimizer_bytes
    g = gradient_bytes_for(fw, gradient_bytes)
    src = _SOURCES[fw]
    if fw is Framework.TEXTBOOK:

        def textbook(name: str, **held: Any) -> Mechanism:
            return Mechanism(
                fw, zero_stage, name, reduce_bytes=g, weight_bytes=w, source=src, **held
            )

        if zero_stage == 0:
            return textbook(
                "data parallel (all-reduce)",
                weights_full=w, weights_sharded=0, grads_full=g, grads_sharded=0,
                optimizer_full=o, optimizer_sharded=0, all_reduce=True,
            )  # fmt: skip
        if zero_stage < 3:
            return textbook(
                f"ZeRO-{zero_stage} (steady state)",
                weights_full=w, weights_sharded=0,
                grads_full=g if zero_stage == 1 else 0, grads_sharded=0 if zero_stage == 1 else g,
                optimizer_full=0, optimizer_sharded=o, gathers_per_step=1,
            )  # fmt: skip
        return textbook(
            "ZeRO-3 (per-micro-batch gathers)" if regather else "ZeRO-3 (one gather per step)",
            weights_full=0, weights_sharded=w, grads_full=0, grads_sharded=g,
            optimizer_full=0, optimizer_sharded=o, gathered_units=2,
            gathers_per_step=0 if regather else 2, gathers_per_microbatch=2 if regather else 0,
        )  # fmt: skip
    if fw is Framework.MEGATRON:
        # main_grad in g bytes (FP32 by default with bf16); a 16-bit main_grad is copied to FP32
        # for the step: Megatron's table, fp16 params and grads: 20, and 4 + 16/d distributed
        copy = 4 if g < 4 else 0
        if zero_stage == 0:
            return Mechanism(
                fw, 0, f"Megatron-Core DDP ({_dtype(g)} main_grad all-reduce)",
                weights_full=w, weights_sharded=0, grads_full=g, grads_sharded=0,
                optimizer_full=o, optimizer_sharded=0, step_full=copy, reduce_bytes=g,
                all_reduce=True, weight_bytes=w, source=src,
            )  # fmt: skip
        return Mechanism(
            fw, 1, "Megatron-Core distributed optimizer",
            weights_full=w, weights_sharded=0, grads_full=g, grads_sharded=0,
            optimizer_full=0, optimizer_sharded=o, step_sharded=copy, reduce_bytes=g,
            gathers_per_step=1, weight_bytes=w, source=src,
        )  # fmt: skip
    if fw is Framework.DEEPSPEED:
        bucket = DEEPSPEED_REDUCE_BUCKET_ELEMENTS * g
        # stage_1_and_2.py setup_buckets: the contiguous IPG bucket in the parameters' dtype,
        # allocated by the first gradient hook of a backward under ZeRO-1 as under ZeRO-2
        # (contiguous_gradients defaults to True), released at the backward's end
        ipg = DEEPSPEED_REDUCE_BUCKET_ELEMENTS * w
        if zero_stage == 1:
            return Mechanism(
                fw, 1, "DeepSpeed ZeRO stage 1",
                weights_full=w, weights_sharded=0, grads_full=g, grads_sharded=0,
                optimizer_full=0, optimizer_sharded=o, step_sharded=4, bucket_bytes=ipg,
                host_accumulation_bytes=w, reduce_bytes=g, gathers_per_step=1, weight_bytes=w,
                source=src,
            )  # fmt: skip
        if zero_stage == 2:
            return Mechanism(
                fw, 2, "DeepSpeed ZeRO stage 2",
                weights_full=w, weights_sharded=0, grads_full=0, grads_sharded=g,
                optimizer_full=0, optimizer_sharded=o, step_sharded=4, bucket_bytes=ipg,
                host_accumulation_bytes=w, reduce_bytes=g, reduce_per_microbatch=True,
                gathers_per_step=1, weight_bytes=w, source=src,
            )  # fmt: skip
        return Mechanism(
            fw, 3, "DeepSpeed ZeRO stage 3",
            weights_full=0, weights_sharded=w, grads_full=0, grads_sharded=g,
            optimizer_full=0, optimizer_sharded=o, step_sharded=4,
            step_cap_elements=DEEPSPEED_SUB_GROUP_ELEMENTS, gathered_units=2,
            bucket_bytes=bucket, bucket_persists=True, reduce_bytes=g, reduce_per_microbatch=True,
            gathers_per_microbatch=2, weight_bytes=w, source=src,
        )  # fmt: skip
    if pipelined:
        return _fsdp2_pipelined(zero_stage, w, g, o, src)
    # FSDP2: the FP32 sharded parameter is the master copy; gradients sharded in FP32; a unit's
    # bf16 gradients are cast to the reduce dtype (FP32 by default) before its reduce-scatter.
    master = 4
    reshard = zero_stage == 3
    name = (
        "FSDP2 fully_shard(reshard_after_forward=True)"
        if reshard
        else "FSDP2 fully_shard(reshard_after_forward=False) + set_reshard_after_backward(False)"
    )
    return Mechanism(
        fw, zero_stage, f"{name}, reduce_dtype={_dtype(g)}",
        weights_full=0 if reshard else w, weights_sharded=master, grads_full=0,
        grads_sharded=4, optimizer_full=0, optimizer_sharded=o - master,
        gathered_units=2 if reshard else 0, unit_grad_bytes=w + (g if g != w else 0),
        reduce_bytes=g, reduce_per_microbatch=True, gathers_per_step=0 if reshard else 1,
        gathers_per_microbatch=2 if reshard else 0, weight_bytes=w, source=src,
    )  # fmt: skip


def _fsdp2_pipelined(zero_stage: int, w: int, g: int, o: int, src: str) -> Mechanism:
    """FSDP2 under a PyTorch pipeline schedule (pp > 1, as torchtitan runs it).

    ``_PipelineStageBase.backward_maybe_with_nosync`` (``torch/distributed/pipelining/
    stage.py``) calls ``set_requires_gradient_sync(False)`` and
    ``set_reshard_after_backward(False)`` before every micro-batch's backward and runs the FSDP
    post-backward (the reduce-scatter) by hand after the last one. Until then each parameter's
    unsharded gradient is accumulated: ``FSDPParam.to_accumulated_grad_if_needed``
    (``torch/distributed/fsdp/_fully_shard/_fsdp_param.py``) upcasts it to ``reduce_dtype`` into
    ``unsharded_accumulated_grad`` (FP32 as torchtitan sets it), so the stage's gradients are
    whole on the GPU in ``g`` bytes, and the unsharded parameters stay gathered after backward
    (both ZeRO stages: whole bf16 weights at the backward's end). The FP32 sharded gradient
    exists from that one reduce-scatter to the optimizer step (``step_sharded``); the gradients
    cross the wire once per step.
    """
    name = "reshard_after_forward=True" if zero_stage == 3 else "reshard_after_forward=False"
    return Mechanism(
        Framework.FSDP2, zero_stage,
        f"FSDP2 fully_shard({name}) under a pipeline schedule: gradient sync after the last "
        f"micro-batch, unsharded gradients accumulated in {_dtype(g)}",
        weights_full=w, weights_sharded=4, grads_full=g, grads_sharded=0,
        optimizer_full=0, optimizer_sharded=o - 4, step_sharded=4, unit_grad_bytes=w,
        reduce_bytes=g, gathers_per_step=0 if zero_stage == 3 else 1,
        gathers_per_microbatch=2 if zero_stage == 3 else 0, weight_bytes=w, source=src,
    )  # fmt: skip


def _dtype(nbytes: int) -> str:
    """fp32 / bf16 for 4 / 2 bytes per element."""
    return {2: "bf16", 4: "fp32"}.get(nbytes, f"{nbytes}-byte")
