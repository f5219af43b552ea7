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
  (:func:`expert_gemm_calls`). torchtitan's ``GroupedExperts`` issues one ``torch._grouped_mm``
  per pass whatever ``E_l`` (:func:`model.torchtitan_experts.grouped_mm_of`): none per expert.
* **One call's host time.** :data:`EXPERT_GEMM_HOST_S`.
"""

from __future__ import annotations

from trainplan.model.frameworks import Framework
from trainplan.model.op_time import ROUTED_EXPERT_GEMMS
from trainplan.model.torchtitan_experts import grouped_mm_of

__all__ = ["EXPERT_GEMM_HOST_S", "GEMM_PASSES", "expert_gemm_calls"]

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


def expert_gemm_calls(num_experts: int, ep: int, framework: str) -> int:
    """Expert GEMM calls the host issues per MoE layer and micro-batch on one GPU: ``E_l`` =
    ``num_experts`` / ``ep`` local experts (expert tensor parallelism splits each expert, not
    their number), :data:`GEMM_PASSES` per expert linear of :data:`model.op_time.
    ROUTED_EXPERT_GEMMS`; 0 under a profile that runs its experts as one grouped kernel
    (``fsdp2``) and under ``textbook`` (no framework's calls).

    Raises
    ------
    ValueError
        ``framework`` is not a profile's name (:class:`model.frameworks.Framework`).

    >>> expert_gemm_calls(128, 8, "megatron"), expert_gemm_calls(128, 8, "fsdp2")
    (96, 0)
    >>> expert_gemm_calls(8, 2, "deepspeed"), expert_gemm_calls(64, 64, "megatron")
    (24, 6)
    """
    if grouped_mm_of(framework) or not Framework(framework).physical or ep < 1:
        return 0
    local = num_experts // ep
    return GEMM_PASSES * len(ROUTED_EXPERT_GEMMS) * local
