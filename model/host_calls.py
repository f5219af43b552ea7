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
"""

from __future__ import annotations

from trainplan.model.estimate import recomputed_layers
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Layout, Recompute
from trainplan.model.op_time import ROUTED_EXPERT_GEMMS
from trainplan.model.ops import LayerShape
from trainplan.model.recompute_ops import layout_plan, recomputed_ops
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.torchtitan_experts import grouped_mm_of

__all__ = [
    "EXPERT_GEMM_HOST_S",
    "GEMM_PASSES",
    "expert_gemm_calls",
    "expert_forwards",
    "local_experts",
    "recomputes_experts",
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
