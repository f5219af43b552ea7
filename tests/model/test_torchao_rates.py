"""torchao's Float8Linear (the fsdp2 profile's FP8 linear layers): its casts as torchao's own
roofline accounting counts them, its FP8 GEMM read from torchao's published microbenchmark,
tested against the benchmark's other published point."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainplan.model.op_rates import deployed_params
from trainplan.model.op_time import Clock, _gemm
from trainplan.model.torchao_rates import (
    CAST_BYTES,
    CAST_KERNELS,
    TORCHAO_TENSORWISE,
    TorchaoFp8,
    torchao_point,
)
from trainplan.model.torchao_time import block_seconds, torchao_fp8_rates, torchao_kernel_speedup

H100_500W = Clock(989.4e12, 2.4e12, deployed_params("H100-96GB-500W"))


def _fp8(c: Clock, k: float) -> Clock:
    return replace(c, linear_speedup=(k, k, k), torchao_fp8=TorchaoFp8(k))


def test_published_points_are_torchaos_readme_examples():
    small, large = TORCHAO_TENSORWISE["hopper"]
    assert (small.m, small.k, small.n, small.speedup) == (1024, 2048, 1024, 0.80)
    assert (large.m, large.k, large.n, large.speedup) == (4096, 8192, 16384, 1.39)
    assert all("e2dad4a66" in p.source for p in (small, large))


def test_cast_bytes_are_roofline_utils_counts():
    # get_tensor_memory_traffic_bytes, dynamic scaling: kernel 1 (amax) reads BF16 unless fused
    # with the previous op; kernel 3 reads BF16 and writes FP8 row-major and column-major.
    bf16, fp8 = 2, 1
    fused = bf16 + 2 * fp8  # input, output gradient
    unfused = bf16 + bf16 + 2 * fp8  # weight
    assert CAST_BYTES == (fused, unfused, fused) == (4, 6, 4)
    # second-stage amax of input and weight plus the input's, the weight's amax and both casts
    assert CAST_KERNELS == (2 + 3, 2)


def test_kernel_speedup_gives_the_large_point_and_predicts_the_small_one():
    small, large = TORCHAO_TENSORWISE["hopper"]
    k = torchao_kernel_speedup(large, H100_500W)
    assert k == pytest.approx(1.613, abs=1e-3)
    f = _fp8(H100_500W, k)
    ratio = block_seconds(large, H100_500W, False) / block_seconds(large, f, True)
    assert ratio == pytest.approx(1.39, abs=1e-6)
    # casts and launches dominate the small block: 0.749 against the published 0.80 (a flat
    # speed-up from Transformer Engine's profile would give 1.22 there)
    ratio = block_seconds(small, H100_500W, False) / block_seconds(small, f, True)
    assert ratio == pytest.approx(0.749, abs=0.005)
    assert ratio == pytest.approx(small.speedup, rel=0.07)


def test_more_rows_amortise_the_weight_cast():
    # torchao casts the weight on every call: a 32K-token GEMM gains more than the 4K benchmark
    k = torchao_kernel_speedup(TORCHAO_TENSORWISE["hopper"][-1], H100_500W)
    f = _fp8(H100_500W, k)

    def gain(m: int) -> float:
        bf16 = _gemm(m, 16384, 8192, 1, H100_500W)
        return bf16 / _gemm(m, 16384, 8192, 1, f, fp8=True)

    assert gain(4096) < gain(32768) < k


def test_only_torchtitans_tensorwise_on_hopper():
    assert torchao_fp8_rates("fp8", "tensorwise", "H100-96GB-500W", "fsdp2", H100_500W)
    assert torchao_fp8_rates("fp8", "tensorwise", "H100-96GB-500W", "megatron", H100_500W) is None
    assert torchao_fp8_rates("bf16", None, "H100-96GB-500W", "fsdp2", H100_500W) is None
    assert torchao_fp8_rates("fp8", "delayed", "H100-96GB-500W", "fsdp2", H100_500W) is None
    assert torchao_point("B200", "tensorwise") is None
