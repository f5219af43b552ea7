"""Framework profiles: what a ZeRO stage *is* in the framework that runs it.

The search optimises what the cost model says, so every figure it sees must be a mechanism some
framework runs, with its memory at the peak and the traffic of that same mechanism
(issue 9). A :class:`model.mechanisms.Mechanism` states, per parameter of a stage (``P`` of them on the GPU,
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
  bucketed against the last micro-batch's backward (``--overlap-grad-reduce``). ZeRO-3 is
  Megatron-FSDP (``--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params``;
  :func:`model.mechanisms.mechanism`), modelled without pipeline parallelism; its
  ``optim_grads`` (ZeRO-2) is not modelled.
  Under ``distributed_optimizer = distributed_fused_adam`` ZeRO-1 is Apex's
  ``DistributedFusedAdam`` as NeMo 1.x/24.x runs it (``optim.name: distributed_fused_adam``):
  :data:`DistributedOptimizer` and :func:`model.mechanisms.mechanism`.
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
  ``contiguous_gradients`` on by default). Its model code is Megatron-DeepSpeed's, grouped-query
  attention as its commit 6acc370a runs it (:mod:`model.deepspeed_layers`, which refuses the
  layer features it lacks).
* ``fsdp2`` — PyTorch FSDP2 ``fully_shard`` with ``MixedPrecisionPolicy(param_dtype=bf16,
  reduce_dtype=fp32)`` as torchtitan configures it. The sharded parameter is the FP32 master
  (``4/D``), with FP32 Adam moments and FP32 sharded gradients (``8/D``, ``4/D``); each unit is
  all-gathered in bf16 and its gradients are reduce-scattered in FP32 after every micro-batch's
  backward (gradient sync on, the default). ZeRO-3 is ``reshard_after_forward=True`` (gather for
  forward and again for backward, the next unit prefetched); ZeRO-2 is
  ``reshard_after_forward=False`` (one gather per micro-batch, the stage's weights held whole
  from forward to backward and resharded after it: FSDP2's default ``reshard_after_backward``,
  which torchtitan leaves on; :func:`model.mechanisms._fsdp2`) — the recipe of Llama 3 §3.3.1
  ("we do not reshard after forward"),
  with FP32 gradient reduce-scatter (§3.3.4). No ZeRO-0/1 (FSDP2 always shards). Under a
  pipeline schedule (pp > 1) PyTorch's ``PipelineStage`` turns gradient sync and the reshard
  after backward off until the last micro-batch: the stage's unsharded gradients accumulate
  whole, in FP32, and are reduce-scattered once per step; ZeRO-2 gathers the weights once a
  step, ZeRO-3 m + 1 times (:func:`_fsdp2_pipelined`, :mod:`model.fsdp2_pipeline`). The
  default there is ZeRO-2: torchtitan's ``fsdp_reshard_after_forward = "default"`` does not
  reshard after forward with pp (``get_fsdp_reshard_after_forward_policy``); ``"always"`` is
  ZeRO-3, ``"never"`` ZeRO-2 (:func:`model.fsdp2_pipeline.reshard_policy`).
* ``textbook`` — the ZeRO paper's steady state (Rajbhandari et al. 2019): 16 B/param sharded as
  ZeRO-0…3, one DP exchange per step (ZeRO-2: its gradients, held at 1/D, reduce-scattered
  every micro-batch; ZeRO-3: its weights gathered for every micro-batch's forward and backward,
  its gradients reduce-scattered every micro-batch), capacity as the vendor states it, with Korthikanti et al.'s per-layer
  activations. It reproduces the worked examples' figures (``trainplan example``); the search
  does not optimise it by default.
"""

from __future__ import annotations

from enum import StrEnum

from trainplan.model.errors import LayoutError

__all__ = [
    "Framework",
    "DEFAULT_FRAMEWORK",
    "ZERO_STAGES",
    "DEFAULT_ZERO_STAGE",
    "check_framework",
    "check_framework_recompute",
    "zero_stages_for",
    "DEEPSPEED_REDUCE_BUCKET_ELEMENTS",
    "DEEPSPEED_PREFETCH_BUCKET_ELEMENTS",
    "DEEPSPEED_SUB_GROUP_ELEMENTS",
    "DEFAULT_RUNTIME_RESERVE_BYTES",
    "DRIVER_RESERVED_BYTES",
    "CUDA_CONTEXT_BYTES",
    "CUBLAS_WORKSPACE_BYTES",
    "TORCH_CUBLAS_WORKSPACE_BYTES",
    "FRAGMENTATION_ALLOWANCE_BYTES",
    "GRADIENT_BYTES",
    "gradient_bytes_for",
    "DistributedOptimizer",
    "check_distributed_optimizer",
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
    def te_layers(self) -> bool:
        """True when, under ``precision = fp8``, the transformer layers are Transformer Engine's,
        whose backward makes the FP8 copies :mod:`model.te_fp8_backward` counts: ``megatron``
        (Megatron-Core's TE spec) and ``deepspeed`` (Megatron-DeepSpeed's only FP8 path,
        ``--transformer-impl transformer_engine``, :mod:`model.deepspeed_fp8`). ``fsdp2``'s
        FP8 is torchao's; ``textbook`` counts no working set."""
        return self in (Framework.MEGATRON, Framework.DEEPSPEED)

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
    Framework.MEGATRON: (0, 1, 3),
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
"""The stage a layout without pipeline parallelism gets when none is given: Megatron's
distributed optimizer, DeepSpeed's stage 1, FSDP2's full sharding (``fully_shard``'s default
``reshard_after_forward=True``, torchtitan's ``"default"`` policy without pp), and ZeRO-1 for
the textbook (the worked examples' default). With pp > 1 FSDP2's is 2
(:func:`model.fsdp2_pipeline.default_zero_stage`)."""

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

DRIVER_RESERVED_BYTES = (81_920 - 81_559 + 480) * 2**20
"""HBM the driver keeps from every process on a part with no public capture of its driver's
report: what an 80 GiB H100's keeps, 841 MiB. Its ``nvidia-smi -q`` reports a Total of 81,559 MiB
of the 81,920 and, of that, 480 MiB Reserved (CUDA's total memory is Total less Reserved, 81,079
MiB); NVIDIA/k8s-test-infra ``tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-h100.xml``
at 5f8956ad, 8 GPUs under driver 580.105.08. Parts with a capture start from its Total and keep
its Reserved instead (``driver_total_mib`` in ``topology/accelerators.toml``)."""
CUDA_CONTEXT_BYTES = 666_632_192
"""A PyTorch process's CUDA context with every module of its kernels loaded: 666,632,192 B
measured in pytorch/pytorch#86509 (``CUDA_MODULE_LOADING=EAGER``; 287,047,680 B at start under
the lazy loading it made the default, which loads each module on first use and so grows toward
this as a step's kernels run)."""
TE_WORKSPACE_BYTES = 32 * 2**20 + 1024
"""One Transformer Engine cuBLAS workspace from compute capability 9 on, 32 MiB + 1 KiB =
33,555,456 B (``get_cublas_workspace_size_bytes``,
``transformer_engine/pytorch/cpp_extensions/gemm.py``)."""
TORCH_CUBLAS_WORKSPACE_BYTES = 32 * 2**20
"""PyTorch's cuBLAS workspace on Hopper and later, per handle and stream — so per process:
4096 KiB × 8 = 33,554,432 B (``parseChosenWorkspaceSize`` in
``aten/src/ATen/cuda/CublasHandlePool.cpp``; cuBLASLt shares it,
``TORCH_CUBLASLT_UNIFIED_WORKSPACE``)."""
CUBLAS_WORKSPACE_BYTES = TORCH_CUBLAS_WORKSPACE_BYTES + TE_WORKSPACE_BYTES
"""cuBLAS workspaces on Hopper and later: PyTorch's (:data:`TORCH_CUBLAS_WORKSPACE_BYTES`) and
Transformer Engine's plain one (:data:`TE_WORKSPACE_BYTES`; its extra ones:
:mod:`model.terms.userbuffers`)."""
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
"""Bytes of HBM a physical profile keeps out of reach of the model (2,689,336,320 B, 2.50 GiB;
``memory_reserve_gib`` overrides): what the driver keeps, the CUDA context, the cuBLAS workspaces
and the allocator's fragmentation allowance — one process's. An RLHF pool that runs several
processes on each GPU counts the others' contexts and workspaces on top
(:func:`model.rlhf.step.process_bytes`). NCCL's communicator buffers, which used to be part
of a flat 3 GiB here, are a term of the peak per layout
(:func:`model.terms.comm_memory.comm_memory_term`)."""


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
            Framework.MEGATRON: "DDP (0), the distributed optimizer (1) and Megatron-FSDP's "
            "optim_grads_params (3); for ZeRO-2 use `framework` fsdp2 or deepspeed",
            Framework.DEEPSPEED: "ZeRO-1, 2 and 3",
            Framework.FSDP2: "reshard_after_forward=False (2) and True (3)",
            Framework.TEXTBOOK: "0–3",
        }[framework]
        raise LayoutError(
            f"zero_stage: {zero_stage} is not a stage of `framework` {framework} (it models {what})"
        )
    if framework is Framework.MEGATRON and zero_stage == 3 and pp > 1:
        raise LayoutError(
            f"zero_stage: 3 with `framework` megatron (Megatron-FSDP) needs pp = 1 (modelled "
            f"without pipeline parallelism); pp is {pp}"
        )
    if framework is Framework.DEEPSPEED and zero_stage >= 2 and pp > 1:
        raise LayoutError(
            f"zero_stage: {zero_stage} with `framework` deepspeed needs pp = 1 (its pipeline "
            f"engine allows ZeRO-0/1 only); pp is {pp}"
        )


def check_framework_recompute(framework: Framework | str, recompute: str, pp: int = 1) -> None:
    """Check that ``framework`` runs the recompute mode ``recompute``
    (:class:`model.layout.Recompute`'s value, as text).

    ``sqrt`` (Chen et al. 2016: keep the inputs of √n-layer segments, recompute a whole segment
    in backward) needs a checkpoint around several transformer blocks at once. Megatron-LM has
    it (``--recompute-method uniform --recompute-num-layers N``: ``TransformerBlock.
    _checkpointed_forward`` checkpoints N layers as one unit); torchtitan, which ``fsdp2`` stands
    for, has not: ``torchtitan/distributed/activation_checkpoint.py``
    ``ActivationCheckpointing.apply`` (pytorch/torchtitan b5bcd76c6) wraps each block of
    ``model.layers`` by itself through the policy's ``_wrap_block`` (``FullAC``: the whole
    block; ``SelectiveAC``: per-op; ``MemoryBudgetAC``: the compiler's partitioner), and the
    earlier config's modes (``apply_ac`` / ``_apply_ac_to_transformer_block`` before
    torchtitan 114151ad4: ``full``, ``selective`` with ``selective_ac_option`` ``"op"`` or
    ``"N"``, every N-th block wrapped alone, ``_apply_layer_sac``) wrap one block too. No
    multi-block segment exists to launch.

    Under ``deepspeed`` with pp > 1 (Megatron-DeepSpeed's ``GPTModelPipe``) the interval is
    DeepSpeed's ``activation_checkpoint_interval`` (DeepSpeed edaa72212
    ``deepspeed/runtime/pipe/module.py`` ``PipelineModule.forward``): a run of that many pieces
    containing a piece that is not a transformer layer (``_is_checkpointable``: the embedding,
    the final norm, the output layer) is not checkpointed, so an interval above one leaves whole
    layers on the end stages: ``sqrt`` is refused there.

    Raises
    ------
    LayoutError
        ``sqrt`` with ``fsdp2``; ``sqrt`` with ``deepspeed`` and pp > 1.

    Examples
    --------
    >>> check_framework_recompute("megatron", "sqrt")
    >>> try:
    ...     check_framework_recompute("fsdp2", "sqrt")
    ... except LayoutError as err:
    ...     print(str(err).split(" (")[0])
    recompute: sqrt with `framework` fsdp2 is not a torchtitan mechanism
    """
    if str(framework) == Framework.FSDP2 and str(recompute) == "sqrt":
        raise LayoutError(
            "recompute: sqrt with `framework` fsdp2 is not a torchtitan mechanism (its "
            "activation checkpointing wraps each transformer block by itself: full, selective "
            "per-op, or every N-th block; no multi-block segment); use full, selective or none"
        )
    if str(framework) == Framework.DEEPSPEED and str(recompute) == "sqrt" and pp > 1:
        raise LayoutError(
            f"recompute: sqrt with `framework` deepspeed and pp {pp} does not run as counted "
            "(DeepSpeed's PipelineModule checkpoints runs of activation_checkpoint_interval "
            "pieces and skips any run holding the embedding or the output layer, so the first "
            "and last stages keep whole layers); use full, selective or none"
        )


def zero_stages_for(framework: Framework, pp: int) -> tuple[int, ...]:
    """The ZeRO stages of :data:`ZERO_STAGES` that ``framework`` runs with ``pp`` pipeline
    stages (:func:`check_framework` accepts them).

    >>> zero_stages_for(Framework.MEGATRON, 1), zero_stages_for(Framework.MEGATRON, 4)
    ((0, 1, 3), (0, 1))
    """
    out = []
    for z in ZERO_STAGES[framework]:
        try:
            check_framework(framework, z, pp)
        except LayoutError:
            continue
        out.append(z)
    return tuple(out)


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
    mechanism of the profile reduces in it (:attr:`model.mechanisms.Mechanism.reduce_bytes`), as does the tied
    embedding's all-reduce between the first and the last stage.

    Examples
    --------
    >>> gradient_bytes_for("megatron"), gradient_bytes_for("deepspeed"), gradient_bytes_for("fsdp2", 2)
    (4, 2, 2)
    """
    return GRADIENT_BYTES[Framework(framework)] if gradient_bytes is None else gradient_bytes


class DistributedOptimizer(StrEnum):
    """The implementation of the ``megatron`` profile's ZeRO-1, by NeMo's name for it (its
    ``model.optim.name``; :attr:`model.specs.TrainingSpec.distributed_optimizer`).

    * ``mcore_distributed_optim`` (the default) — Megatron-Core's ``DistributedOptimizer``: the
      gradients reduce-scattered in place in the contiguous ``main_grad`` buffer, an FP32 master
      shard, 16-bit gradient shards copied to FP32 for the step;
    * ``distributed_fused_adam`` — Apex's ``DistributedFusedAdam``
      (``apex/contrib/optimizers/distributed_fused_adam.py``) through NeMo's
      ``MegatronDistributedFusedAdam`` (``nemo/core/optim/distributed_adam.py``), what NeMo's
      launcher configurations up to 24.x name: a whole gradient buffer in ``grad_sync_dtype``
      reduce-scattered into a separate shard, the FP32 master kept as the 16-bit remainder of
      the BF16 weight, the embeddings' gradients in FP32
      (:func:`model.mechanisms.mechanism` says where each comes from).
    """

    MCORE = "mcore_distributed_optim"
    APEX = "distributed_fused_adam"


def check_distributed_optimizer(
    distributed_optimizer: DistributedOptimizer | str,
    framework: Framework | str,
    zero_stage: int,
    optimizer: str = "adam",
    fp8_param_gather: bool = False,
    offloaded: bool = False,
    ep: int = 1,
) -> None:
    """Refuse Apex's ``distributed_fused_adam`` where it does not run: it is the ``megatron``
    profile's ZeRO-1 (an Adam over BF16 parameters, its state sharded over dp·cp), with no
    CPU offload, without expert parallelism (``ep`` > 1: NeMo's ``MegatronGPTModel.__init__``
    in ``megatron_gpt_model.py`` refuses it, "Expert parallelism is currently not supporting
    Apex distributed optimizer") and, as modelled, without FP8 primary weights (NeMo's
    ``fp8_params`` then stores a whole FP32 master, ``megatron_base_model.py``
    ``setup_optimization``, not modelled).

    Raises
    ------
    LayoutError
        One line naming ``distributed_optimizer``, the value and the rule.

    Examples
    --------
    >>> check_distributed_optimizer("distributed_fused_adam", "megatron", 1)
    >>> try:
    ...     check_distributed_optimizer("distributed_fused_adam", "fsdp2", 3)
    ... except LayoutError as err:
    ...     print(str(err).split(";")[0])
    distributed_optimizer: distributed_fused_adam is Apex's optimizer under NeMo's Megatron-Core models
    """
    name = DistributedOptimizer(distributed_optimizer)
    if name is DistributedOptimizer.MCORE:
        return
    problem = None
    if Framework(framework) is not Framework.MEGATRON or zero_stage != 1:
        problem = (
            f"needs `framework` megatron with `zero_stage` 1, not {framework} ZeRO-{zero_stage}"
        )
    elif str(optimizer) != "adam":
        problem = f"is an Adam; optimizer {optimizer} is not"
    elif fp8_param_gather:
        problem = (
            "with FP8 primary weights (NeMo's fp8_params) keeps a whole FP32 master, not modelled"
        )
    elif offloaded:
        problem = "keeps its state on the GPU (no optimizer or parameter offload)"
    elif ep > 1:
        problem = f"does not run with expert parallelism (NeMo refuses it), ep {ep}"
    if problem:
        raise LayoutError(
            f"distributed_optimizer: {name} is Apex's optimizer under NeMo's Megatron-Core "
            f"models; it {problem}"
        )
