"""Routed experts under the fsdp2 profile's FP8: BF16 GEMMs.

torchtitan's ``Float8LinearConverter.convert`` (``torchtitan/components/quantization/
float8.py``, b5bcd76c6) swaps ``nn.Linear`` modules only; the routed experts (``GroupedExperts``,
batched weight tensors) run FP8 only through the opt-in ``Float8GroupedExpertsConverter``.
"""

from __future__ import annotations

from trainplan.model.moe_kernels import experts_stay_bf16
from trainplan.model.op_time import Clock, op_seconds
from trainplan.model.ops import Op, OpKind
from trainplan.model.roofline import RooflineParams

PARAMS = RooflineParams(gemm_efficiency=0.74)
EXPERTS_UP = Op("experts up", OpKind.GEMM, m=2048, n=3072, k=4096, batch=16)
SHARED_UP = Op("shared experts up", OpKind.GEMM, m=16384, n=3072, k=4096)


def test_fsdp2_routed_experts_run_at_the_bf16_rate():
    """A clock with a 1.5× FP8 linear speed-up: the dense and shared-expert GEMMs are 1.5× faster
    (compute-bound), the routed experts' grouped GEMM takes exactly its BF16 time, forward and
    backward, once the clock says the experts stay BF16."""
    bf16 = Clock(989.4e12, 3.35e12, PARAMS)
    fp8 = Clock(989.4e12, 3.35e12, PARAMS, linear_speedup=1.5)
    fsdp2 = Clock(989.4e12, 3.35e12, PARAMS, linear_speedup=1.5, bf16_experts=True)
    for backward in (False, True):
        assert op_seconds(EXPERTS_UP, fsdp2, backward) == op_seconds(EXPERTS_UP, bf16, backward)
        assert op_seconds(EXPERTS_UP, fp8, backward) < op_seconds(EXPERTS_UP, bf16, backward)
        assert op_seconds(SHARED_UP, fsdp2, backward) == op_seconds(SHARED_UP, fp8, backward)
    assert op_seconds(SHARED_UP, fsdp2) < op_seconds(SHARED_UP, bf16)


def test_only_fsdp2_fp8_keeps_the_experts_bf16():
    assert experts_stay_bf16("fsdp2", "fp8")
    assert not experts_stay_bf16("fsdp2", "bf16")
    assert not experts_stay_bf16("megatron", "fp8")
    assert not experts_stay_bf16("deepspeed", "fp8")
