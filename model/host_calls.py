"""The host's calls for a MoE layer's routed experts that the step time does not charge: how many
expert GEMMs the host issues per MoE layer and micro-batch on one GPU, and what one is measured
to take on the host. A disclosure, not a term: the step time charges each kernel its device time
and ``t_kernel`` only (:mod:`model.op_time`); why no host term is in force is in
``docs/time-model-sources.md`` section 6 (the measurement that would settle it is named there).

* **Per-expert calls.** Transformer Engine's ``GroupedLinear`` (Megatron-Core's
  ``TEGroupedMLP``) runs one cuBLAS GEMM per local expert over four streams
  (``transformer_engine/common/gemm/cublaslt_gemm.cu`` ``multi_stream_cublas_gemm``), and
  DeepSpeed's MoE loops over its local experts (:func:`model.op_time.expert_loop_of`): for each
  of the two expert linears (:data:`model.op_time.ROUTED_EXPERT_GEMMS`) a forward, an input
  gradient and a weight gradient GEMM per expert, ``6·E_l`` calls per layer and micro-batch
  (:func:`expert_gemm_calls`), ``8·E_l`` where the backward re-runs the layer's forward
  (:func:`expert_forwards`: full recomputation, or Megatron-Core's ``moe`` recompute module).
  torchtitan's ``GroupedExperts`` issues one ``torch._grouped_mm`` per pass whatever ``E_l``
  (:func:`model.torchtitan_experts.grouped_mm_of`): none per expert.
* **One call's host time.** :data:`EXPERT_GEMM_HOST_S`.
* **FP8: the experts' quantisations.** Under FP8 Transformer Engine quantises each
  ``GroupedLinear``'s input in the forward and its output gradient in the backward, split by
  expert (:func:`expert_quantise_calls`; read at Transformer Engine v2.9, 70f536662a,
  ``pytorch/module/grouped_linear.py`` ``_GroupedLinear.forward`` / ``backward``: one
  ``tex.split_quantize`` call each, whose C++ side, ``pytorch/csrc/extensions/cast.cpp``
  ``split_quantize`` → ``multi_tensor_quantize_impl``, runs one fused
  ``nvte_multi_cast_transpose`` for every expert only where all quantizers are delayed
  scaling's and the outputs keep an FP8 transpose, and else calls each expert's quantizer in
  turn; at d0067d0da the default path still does, the one-call ``tex.group_quantize`` being
  the opt-in ``use_grouped_tensor`` path's). Per expert and tensor that is
  :func:`model.moe_kernels.expert_cast_kernels` kernel launches, with the experts' FC1 bias
  :func:`model.moe_kernels.fc1_grad_kernels` for FC1's output gradient, and one more tensor for each
  expert linear that saves its BF16 input (:mod:`model.expert_saved_inputs`). No measurement of
  one quantise call's host time is published, so the count is given without a time (the GEMM
  call's :data:`EXPERT_GEMM_HOST_S` is not one). The weights are quantised once a step, on the
  first micro-batch (``get_weight_workspace`` under ``is_first_microbatch``): not counted.
"""

from __future__ import annotations

from trainplan.model.estimate import recomputed_layers
from trainplan.model.expert_saved_inputs import requantised_inputs
from trainplan.model.frameworks import Framework
from trainplan.model.hardware import DeviceSpec
from trainplan.model.layout import Layout, Recompute
from trainplan.model.moe_kernels import expert_cast_kernels, fc1_grad_kernels
from trainplan.model.op_rates import te_caches_fp8_weights
from trainplan.model.op_time import ROUTED_EXPERT_GEMMS
from trainplan.model.ops import LayerShape
from trainplan.model.precision import Fp8Recipe
from trainplan.model.recompute_ops import layout_plan, recomputed_ops
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.torchtitan_experts import grouped_mm_of

__all__ = [
    "EXPERT_GEMM_HOST_S",
    "GEMM_PASSES",
    "expert_gemm_calls",
    "expert_quantise_calls",
    "expert_forwards",
    "local_experts",
    "recomputes_experts",
    "saved_originals",
]

EXPERT_GEMM_HOST_S = 13.7e-6
"""Seconds of host time of one expert GEMM call: the median of Transformer Engine's
``nvte_cublas_gemm`` NVTX range (one cuBLAS GEMM, ``NVTE_API_CALL``) over 645,099 calls in an
nsys trace of Qwen3-30B-A3B on one DGX B200 (x86 host; 8 GPUs, EP 8, micro-batch 1, BF16,
Megatron-Core's ``alltoall`` dispatcher and grouped GEMM, no CUDA graphs; mean 20.3 µs, minimum
10.3 µs): yanring/Megatron-MoE-ModelZoo issue #7 (2025-08-18). Measured under nsys, whose tracing
adds host time per CUDA call, on a Transformer Engine of August 2025, in BF16 (an FP8 recipe adds
the experts' quantisations, not counted here)."""

GEMM_PASSES = 3
"""GEMMs per linear and micro-batch: the forward, the input gradient and the weight gradient."""


def local_experts(num_experts: int, ep: int) -> int:
    """Routed experts each GPU holds, ``E_l`` = ``num_experts`` / ``ep`` (expert tensor
    parallelism splits each expert, not their number; ``ep`` divides ``num_experts``,
    :mod:`model.moe_rules`); 0 for ``ep`` < 1.

    >>> local_experts(128, 8), local_experts(64, 64)
    (16, 1)
    """
    return num_experts // ep if ep >= 1 else 0


def expert_gemm_calls(num_experts: int, ep: int, framework: str, forwards: int = 1) -> int:
    """Expert GEMM calls the host issues per MoE layer and micro-batch on one GPU: ``E_l`` =
    ``num_experts`` / ``ep`` local experts (expert tensor parallelism splits each expert, not
    their number), :data:`GEMM_PASSES` per expert linear of :data:`model.op_time.
    ROUTED_EXPERT_GEMMS` and one more for each forward beyond the first (``forwards`` 2: the
    backward re-runs the layer's forward, :func:`expert_forwards`); 0 under a profile that runs
    its experts as one grouped kernel (``fsdp2``) and under ``textbook`` (no framework's calls).

    Raises
    ------
    ValueError
        ``framework`` is not a profile's name (:class:`model.frameworks.Framework`).

    >>> expert_gemm_calls(128, 8, "megatron"), expert_gemm_calls(128, 8, "fsdp2")
    (96, 0)
    >>> expert_gemm_calls(8, 2, "deepspeed"), expert_gemm_calls(64, 64, "megatron")
    (24, 6)
    >>> expert_gemm_calls(128, 8, "megatron", forwards=2)  # 2 linears × 4 GEMMs × 16 experts
    128
    """
    if grouped_mm_of(framework) or not Framework(framework).physical:
        return 0
    return (GEMM_PASSES - 1 + forwards) * len(ROUTED_EXPERT_GEMMS) * local_experts(num_experts, ep)


def recomputes_experts(
    arch: Architecture, framework: str, recompute: Recompute, training: TrainingSpec
) -> bool:
    """Whether a MoE layer's backward re-runs its routed experts' GEMMs under ``recompute``:
    ``full`` and ``sqrt`` re-run every layer's forward (Megatron-LM ``transformer_block.py``
    ``_checkpointed_forward``), ``selective`` where the framework's plan re-runs the experts'
    GEMMs (:func:`model.recompute_ops.recomputed_ops`: Megatron-Core's ``moe`` module,
    ``moe_layer.py`` ``MoELayer.forward`` under ``moe_layer_recompute``; not ``moe_act``, the
    activation alone), the plan the step time reads (:func:`model.recompute_ops.layout_plan`).

    >>> from trainplan.model.arch_parts import MoESpec
    >>> experts = MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=8)
    >>> moe = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2, num_kv_heads=1,
    ...     ffn_hidden_size=16, vocab_size=16, mlp="swiglu", moe=experts)
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1)
    >>> recomputes_experts(moe, "megatron", Recompute.SELECTIVE, t)  # core_attn
    False
    >>> from dataclasses import replace
    >>> moe_module = replace(t, recompute_modules=("moe",))
    >>> recomputes_experts(moe, "megatron", Recompute.SELECTIVE, moe_module)
    True
    """
    if recompute in (Recompute.FULL, Recompute.SQRT):
        return True
    plan, every_norm = layout_plan(Framework(framework), recompute, training)
    x = LayerShape(arch, True, 1, 1, 1, flash_attention=training.flash_attention)
    return any(o.name in ROUTED_EXPERT_GEMMS for o in recomputed_ops(x, plan, every_norm))


def expert_forwards(arch: Architecture, layout: Layout, training: TrainingSpec) -> tuple[int, ...]:
    """The forwards a MoE layer of ``arch`` runs per micro-batch under ``layout``, each count
    once in increasing order: 2 where its backward re-runs its experts
    (:func:`recomputes_experts` of ``layout.recompute``, or a layer that
    ``layout.recompute_layers`` recomputes in full, :func:`model.estimate.recomputed_layers`),
    else 1; ``()`` for a model without MoE layers."""
    base = 2 if recomputes_experts(arch, str(layout.framework), layout.recompute, training) else 1
    full = recomputed_layers(arch, layout)
    moe = [i for i in range(arch.num_layers) if arch.is_moe_layer(i)]
    return tuple(sorted({2 if i in full else base for i in moe}))


def expert_quantise_calls(
    num_experts: int,
    ep: int,
    framework: str,
    recipe: Fp8Recipe | str | None,
    device: DeviceSpec | None,
    forwards: int = 1,
    saved_originals: int = 0,
    fc1_bias: bool = False,
) -> int:
    """Kernel launches per MoE layer and micro-batch on one GPU that quantise the routed
    experts' tensors one expert at a time under FP8 ``recipe`` (None: BF16, 0): ``E_l`` local
    experts × :func:`model.moe_kernels.expert_cast_kernels` per tensor, for the inputs of both expert linears
    in each of ``forwards`` forwards, their two output gradients and ``saved_originals``
    inputs quantised again in the backward (:mod:`model.expert_saved_inputs`); FC1's output
    gradient takes :func:`model.moe_kernels.fc1_grad_kernels` (with ``fc1_bias``
    :data:`model.moe_kernels.EXPERT_BIAS_GRAD_KERNELS`). 0 where
    the experts are not Transformer Engine's ``GroupedLinear`` under Megatron-Core
    (:func:`model.op_rates.te_caches_fp8_weights`: DeepSpeed refuses FP8 with routed experts,
    torchtitan's stay BF16).

    Qwen3-30B-A3B at ep 8 (16 local experts) on an H100, current scaling: 4 tensors × 4 × 16;
    under full recomputation 6 tensors; delayed scaling 0 on an H100, 4 × 1 × 16 on a B200:

    >>> from trainplan.topology.accelerator_file import get_part
    >>> h100, b200 = get_part("H100-SXM"), get_part("B200")
    >>> expert_quantise_calls(128, 8, "megatron", "tensorwise", h100)
    256
    >>> expert_quantise_calls(128, 8, "megatron", "tensorwise", h100, forwards=2)
    384
    >>> [expert_quantise_calls(128, 8, "megatron", "delayed", d) for d in (h100, b200)]
    [0, 64]
    >>> expert_quantise_calls(128, 8, "megatron", "delayed", h100, fc1_bias=True)  # 2 × 16
    32
    """
    if recipe is None or not te_caches_fp8_weights(framework):
        return 0
    k = expert_cast_kernels(recipe, device)
    tensors = (
        len(ROUTED_EXPERT_GEMMS) * (forwards + 1) - 1 + saved_originals
    )  # FC1's gradient apart
    return local_experts(num_experts, ep) * (
        k * tensors + fc1_grad_kernels(recipe, device, fc1_bias)
    )


def saved_originals(framework: str, recompute: Recompute, training: TrainingSpec) -> int:
    """How many of the routed experts' two linears save their BF16 input and quantise it again
    in the backward under ``recompute`` (:func:`model.expert_saved_inputs.requantised_inputs`
    of the selective plan, :func:`model.recompute_ops.layout_plan`): 0, 1 or 2.

    >>> from trainplan.model.offload import Offload
    >>> t = TrainingSpec(seq_len=4, global_batch_size=1, precision="fp8", fp8_recipe="tensorwise",
    ...                  offload=Offload(activations=("expert_fc1",)), recompute_modules=("moe_act",))
    >>> saved_originals("megatron", Recompute.SELECTIVE, t), saved_originals("megatron", Recompute.FULL, t)
    (2, 1)
    """
    plan, _ = layout_plan(Framework(framework), recompute, training)
    return sum(requantised_inputs(training, framework, plan))
