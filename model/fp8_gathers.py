"""What Transformer Engine and Megatron-Core all-gather in FP8, and so at 1 B an element: the
activations sequence parallelism gathers over tp (:func:`tp_gather_bytes`, read by
:mod:`model.layer_time` and the tp traffic, :func:`model.comm_layers.tp_bytes`) and FP8 primary
weights gathered over the data-parallel group (:func:`fp8_param_gathers`; the bytes they take
off :func:`model.comm.dp_bytes`, :func:`fp8_gather_saving`, read by the dp traffic and time,
:mod:`model.terms.traffic` and :mod:`model.terms.dp_time`), Megatron-Core's FP8 primary weights
or, under ``fsdp2``, torchao's FP8 all-gather of FP32 primary weights (:func:`fp8_param_gathers`).

**FSDP2** (torchtitan's ``enable_fsdp_float8_all_gather`` with
``precompute_float8_dynamic_scale_for_fsdp``; :data:`FSDP_FP8_GATHER_SOURCE`). The primary
weights stay FP32 shards; each ``Float8Linear`` weight is a ``WeightWithDynamicFloat8CastTensor``
whose ``fsdp_pre_all_gather`` casts the local shard to FP8 (with the scale the once-a-step
precompute left, :func:`precompute_read_bytes`) and hands FSDP2 the ``uint8`` data;
``fsdp_post_all_gather`` wraps the gathered bytes as the ``Float8TrainingTensor`` the forward and
backward use as they are (``float8_linear.py`` ``matmul_with_hp_or_float8_args``:
``tensor_already_casted_to_fp8(weight_hp_t)`` skips the forward's weight cast and the input
gradient's, the backward reading ``.t()`` of the same FP8 tensor; :mod:`model.torchao_rates`).
The converted modules are the blocks' ``nn.Linear`` layers; torchtitan filters ``output``
(``filter_fqns``), ``nn.Embedding`` and the norms are not linears, and MoE experts
(``GroupedExperts``) are not ``Float8Linear`` (:func:`fp8_gathered_experts`). Tensor parallelism
composes (the ``fsdp_utils.py`` layout notes: ``DTensor(local_tensor=
WeightWithDynamicFloat8CastTensor)`` on the (dp, tp) mesh). torchao refuses it for any weight
scaling other than tensorwise (``config.py`` ``Float8LinearConfig.__post_init__``:
"enable_fsdp_float8_all_gather only supports tensorwise scaling granularity"), torchtitan with a
``recipe_name`` (its assert: "not supported"), so rowwise and the other recipes gather at the
weight bytes (:func:`model.fp8_gather_rules.check_fp8_param_gather` refuses the key there).
torchtitan shards over dp_shard × cp ranks but turns it on only where dp_shard > 1
(``parallel_dims.dp_shard_enabled``, :data:`model.fp8_gather_rules.DP_SHARD_SOURCE`); the plan
refuses the key at dp 1, cp > 1 included. A MoE block is one ``fully_shard`` unit whose
``Float8Linear`` weights (attention, shared experts) gather in FP8 and whose routed experts and
router in BF16: the dense data-parallel group's bytes narrow, the expert group's do not
(:func:`model.terms.traffic.fp8_gathered_params`), nor the experts' share of a gathered unit
(:func:`model.terms.stage_params.fp8_gather_units`)."""

from __future__ import annotations

from typing import Any

from trainplan.model.comm import ring_share
from trainplan.model.frameworks import Framework
from trainplan.model.mechanisms import Mechanism
from trainplan.model.memory import FP8_PARAM_BYTES
from trainplan.model.precision import (
    FP8_ACTIVATION_BYTES,
    PER_TENSOR_RECIPES,
    Fp8Recipe,
    Precision,
    fp8_recipe_of,
)

__all__ = [
    "tp_gather_bytes",
    "fp8_param_gathers",
    "fp8_gathered_experts",
    "fp8_gather_saving",
    "FSDP_FP8_GATHER_SOURCE",
    "PRECOMPUTE_READ_BYTES",
    "precompute_read_bytes",
]

FSDP_FP8_GATHER_SOURCE = (
    "pytorch/ao 36027d82d torchao/float8/fsdp_utils.py WeightWithDynamicFloat8CastTensor."
    "fsdp_pre_all_gather / fsdp_post_all_gather, precompute_float8_dynamic_scale_for_fsdp; "
    "torchao/float8/config.py Float8LinearConfig.__post_init__ (tensorwise only); "
    "torchtitan 6348d93d1^ torchtitan/components/quantization/float8.py "
    "Float8LinearConverter (enable_fsdp_float8_all_gather, precompute_float8_dynamic_scale_for_fsdp)"
)


def tp_gather_bytes(
    framework: str, precision: Precision | str, recipe: Fp8Recipe | str | None, beta: int
) -> int:
    """Bytes per element (B) of the activations a sequence-parallel transformer layer all-gathers
    over tp — the column-parallel linears' input in forward and again in backward for the weight
    gradient, the row-parallel linears' output gradient in backward — for a framework whose
    linear layers are Transformer Engine's (:attr:`model.frameworks.Framework.te_layers`) under
    FP8 with a per-tensor recipe (``delayed``, ``tensorwise``: :data:`model.precision.
    PER_TENSOR_RECIPES`): 1 (:data:`model.precision.FP8_ACTIVATION_BYTES`), the tensor being
    quantised before it is gathered; else ``beta``, the activations' bytes (``deepspeed``:
    Megatron-DeepSpeed's FP8 layer is Transformer Engine's ``TransformerLayer``, built of the same
    modules). The reduce-scatters
    (the linears' BF16 outputs and input gradients), the embedding's and the output layer's
    collectives (Megatron-Core's own BF16 modules) stay at ``beta``.

    Sources:

    * Transformer Engine 1.8 (7d576ed2, NeMo 24.07's pin), ``module/layernorm_linear.py``
      ``_LayerNormLinear.forward``: under FP8 (no returned norm output) the norm writes its output
      as ``torch.uint8`` FP8 and ``gather_along_first_dim(ln_out, tp_group)`` gathers those
      bytes; ``backward`` gathers the saved FP8 ``ln_out`` again (``async_op=True``) for the
      weight gradient; ``module/base.py`` ``grad_output_preprocess`` ("FP8 case with gather"):
      ``cast_to_fp8`` of the output gradient, then ``gather_along_first_dim`` of the FP8 copy.
      Under userbuffers the same tensors go through FP8 buffers (:mod:`model.terms.userbuffers`).
    * Transformer Engine 2.9, 2.10 and d0067d0da: ``_LayerNormLinear.forward`` and ``linear.py``
      ``_linear_forward_impl`` call ``gather_along_first_dim(..., quantizer=quantizer)`` with
      ``quantizer.set_usage(rowwise=True, columnwise=False)``, the backward gathers likewise, and
      ``distributed.py`` ``_all_gather_fp8`` (``Float8Quantizer`` — delayed —
      or ``Float8CurrentScalingQuantizer`` — tensorwise) quantises, then
      ``all_gather_into_tensor`` of the ``uint8`` data: 1 B an element.

    Not modelled here (``beta``): MXFP8, whose ``_all_gather_mxfp8`` gathers each usage's data
    and E8M0 scales (the output gradient both usages), and blockwise, whose gather depends on
    the Transformer Engine release.

    >>> tp_gather_bytes("megatron", "fp8", "delayed", 2), tp_gather_bytes("megatron", "bf16", None, 2)
    (1, 2)
    >>> tp_gather_bytes("megatron", "fp8", "mxfp8", 2), tp_gather_bytes("fsdp2", "fp8", None, 2)
    (2, 2)
    """
    if Precision(str(precision)) is not Precision.FP8 or not Framework(str(framework)).te_layers:
        return beta
    if fp8_recipe_of(str(framework), recipe) not in PER_TENSOR_RECIPES:
        return beta
    return FP8_ACTIVATION_BYTES


def fp8_param_gathers(
    framework: str, precision: Precision | str, recipe: Fp8Recipe | str | None, fp8_params: bool
) -> bool:
    """Whether the linear layers' weights are all-gathered over the data-parallel group at 1 B
    an element (:data:`model.memory.FP8_PARAM_BYTES`) rather than the mechanism's weight bytes,
    under ``fp8_params`` (:attr:`model.specs.TrainingSpec.fp8_param_gather`) and precision fp8:

    * ``megatron`` with a per-tensor recipe (``delayed``, ``tensorwise``): FP8 *primary* weights
      (Megatron-Core's ``--fp8-param-gather``). The linear elements are those the memory narrows
      (:func:`model.terms.stage_params.busiest_linear`); the embedding, output layer, norms and
      router stay in the working dtype.
    * ``fsdp2`` with the ``tensorwise`` recipe: torchao's FP8 all-gather of the blocks' linear
      weights, the FP32 shards cast to FP8 before FSDP2 gathers them (the module docstring,
      "FSDP2").

    Sources (Megatron-LM 92c8482e6d, the NeMo 25.11 container's):

    * the distributed optimizer: ``distributed/distributed_data_parallel.py``
      ``DistributedDataParallel.__init__`` gives a ``Float8Tensor`` parameter the buffer dtype
      ``torch.uint8`` ("when creating the param buffer for fp8 params, it is necessary to use
      torch.uint8"), and ``param_and_grad_buffer.py`` ``_ParamAndGradBuffer.__init__`` maps the
      parameter onto that buffer (``modify_underlying_storage``), which ``start_param_sync``
      all-gathers;
    * Megatron-FSDP: ``megatron_fsdp/param_and_grad_buffer.py`` ``ParamAndGradBuffer.
      _init_each_parameter_group_buffers`` gives a group of FP8 parameters a ``torch.uint8``
      ``model_weight_buffer``, sharded and all-gathered as such;
    * ``fsdp2``: :data:`FSDP_FP8_GATHER_SOURCE`.

    Not here (the weight bytes stay): MXFP8, whose parameters the distributed optimizer gathers
    in BF16 through a buffer shared with the gradients (``param_and_grad_buffer.py``: "For
    MXFP8 param: Create a shared buffer for param AG and grad RS", ``param_data`` a bfloat16
    view) and Megatron-FSDP gathers with their column-wise copy; blockwise.

    >>> fp8_param_gathers("megatron", "fp8", "tensorwise", True)
    True
    >>> fp8_param_gathers("megatron", "fp8", "mxfp8", True), fp8_param_gathers("megatron", "fp8", None, False)
    (False, False)
    >>> fp8_param_gathers("fsdp2", "fp8", "tensorwise", True), fp8_param_gathers("fsdp2", "fp8", "delayed", True)
    (True, False)
    >>> fp8_param_gathers("deepspeed", "fp8", "delayed", True)
    False
    """
    if not fp8_params or Precision(str(precision)) is not Precision.FP8:
        return False
    fw = Framework(str(framework))
    recipe_used = fp8_recipe_of(str(framework), recipe)
    if fw is Framework.FSDP2:
        return recipe_used is Fp8Recipe.TENSORWISE
    if fw is not Framework.MEGATRON:
        return False
    return recipe_used in PER_TENSOR_RECIPES


def fp8_gathered_experts(framework: str) -> bool:
    """Whether the routed experts' linear weights gather in FP8 with the rest: under
    ``megatron`` yes (Transformer Engine's grouped linears are FP8 parameters too); under
    ``fsdp2`` no — torchtitan's ``Float8LinearConverter`` swaps ``nn.Linear`` modules only, and
    ``GroupedExperts`` keeps plain parameters (its FP8 grouped GEMM, ``Float8GroupedMMConverter``,
    quantises rowwise inside the op; torchtitan 6348d93d1^ ``float8.py``).

    >>> fp8_gathered_experts("megatron"), fp8_gathered_experts("fsdp2")
    (True, False)
    """
    return Framework(str(framework)) is not Framework.FSDP2


PRECOMPUTE_READ_BYTES = 4
"""Bytes per FP8-gathered weight element on a GPU's shard that torchao's
``precompute_float8_dynamic_scale_for_fsdp`` reads once a step after the optimizer step
(torchtitan's ``post_optimizer_hook``): ``torch._foreach_norm(weights, ord=math.inf)`` over
the FP32 local shards (pytorch/ao 36027d82d ``torchao/float8/fsdp_utils.py``). Its one
all-reduce carries one FP32 amax a converted linear (seven a Llama block: 224 floats, 896 B,
for Llama 3 8B) — a single latency-bound collective a step, not counted."""


def precompute_read_bytes(fp8_shard_elements: Any) -> Any:
    """HBM bytes a step of the FP8-gather scale precompute on one GPU
    (:data:`PRECOMPUTE_READ_BYTES` × the FP8-gathered weight elements of its shard): charged
    with the optimizer step (:func:`model.terms.optimizer_time.optimizer_seconds_term`).

    Llama 3 8B's blocks hold 6,979,321,856 linear elements; at dp 8 a GPU's shard reads
    3,489,660,928 B (about 1 ms at 3.35 TB/s):

    >>> precompute_read_bytes(6_979_321_856 // 8)
    3489660928
    """
    return PRECOMPUTE_READ_BYTES * fp8_shard_elements


def fp8_gather_saving(
    mech: Mechanism, fp8: tuple[Any, Any], shard: Any, expert_shard: Any, m: Any, again: Any = 0
) -> tuple[Any, Any]:
    """(bytes per step, bytes per micro-batch) that FP8 primary weights take off
    :func:`model.comm.dp_bytes`: ``fp8`` = (dense, routed-expert) parameters on one GPU
    all-gathered at :data:`model.memory.FP8_PARAM_BYTES` (:func:`fp8_param_gathers`), each
    sending its ring share ``(D − 1)/D`` a byte less than the mechanism's weight bytes at every
    all-gather, once per step and per micro-batch, and at each of the ``again`` re-gathers a
    step of PyTorch's multi-stage pipeline runtime (``fsdp2``: :func:`model.fsdp2_pipeline.
    runtime_regathers`, through the same ``fsdp_pre_all_gather``). Element-wise for arrays of
    layouts.

    >>> from trainplan.model.mechanisms import Framework, mechanism
    >>> fp8_gather_saving(mechanism(Framework.MEGATRON, 1), (8, 0), 2, 1, 4)  # 8 · 1/2 · (2 − 1)
    (Fraction(4, 1), Fraction(0, 1))
    """
    narrowed = ring_share(shard) * fp8[0] + ring_share(expert_shard) * fp8[1]
    saved = (mech.weight_bytes - FP8_PARAM_BYTES) * narrowed
    each = saved * mech.gathers_per_microbatch
    return saved * (mech.gathers_per_step + again) + m * each, each
