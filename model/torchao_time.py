"""The FP8 GEMM speed-up of torchao's ``Float8Linear`` on a part, read from torchao's published
microbenchmark (:data:`model.torchao_rates.TORCHAO_TENSORWISE`) through the model's own times of
the benchmarked block: the one place the fsdp2 profile's FP8 linear layers get their rates
(:attr:`model.op_time.Clock.torchao_fp8`)."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

from trainplan.model.op_time import Clock, op_seconds
from trainplan.model.ops import Op, OpKind
from trainplan.model.roofline import memory_seconds
from trainplan.model.torchao_rates import (
    FP8_GATHER_CAST_BYTES,
    FP8_GATHER_CAST_KERNELS,
    TorchaoFp8,
    TorchaoPoint,
    runs_torchao_float8,
    torchao_point,
)

__all__ = ["block_seconds", "torchao_kernel_speedup", "torchao_fp8_rates"]


def block_seconds(point: TorchaoPoint, c: Clock, fp8: bool) -> float:
    """Seconds of torchao's benchmarked block on the clock: LayerNorm (no affine) → Linear →
    Sigmoid, forward and backward, BF16 or Float8 (``fp8``: the clock's
    :attr:`~model.op_time.Clock.torchao_fp8` with the casts of
    :func:`model.torchao_rates.cast_seconds`); the LayerNorm and sigmoid as the memory-bound
    passes they are: the norm reads and writes its ``m × k`` input forward and reads two,
    writes one backward; the sigmoid likewise on ``m × n``."""
    m, k, n = point.m, point.k, point.n
    linear = Op("linear", OpKind.GEMM, m=m, n=n, k=k)
    clock = c if fp8 else replace(c, linear_speedup=1.0, torchao_fp8=None)
    gemms = op_seconds(linear, clock) + op_seconds(linear, clock, backward=True)
    moved = (4 * m * k, 6 * m * k, 4 * m * n, 6 * m * n)
    return gemms + sum(memory_seconds(b, c.hbm_bytes_per_s, c.params) for b in moved)


@lru_cache(maxsize=64)
def torchao_kernel_speedup(point: TorchaoPoint, c: Clock) -> float:
    """The FP8 GEMM speed-up at which the model's times of torchao's benchmarked block
    (:func:`block_seconds`) give the published figure: bisection on ``[1, 4]`` (the block's
    Float8 time falls as the speed-up rises). 1 where even a 1× GEMM beats the published
    figure (a point dominated by casts).

    Examples
    --------
    On the 2.4 TB/s, 500 W H100 torchao measured on (README Example 2: 1.39 at 4096, 8192,
    16384):

    >>> from trainplan.model.op_rates import deployed_params
    >>> from trainplan.model.torchao_rates import TORCHAO_TENSORWISE
    >>> c = Clock(989.4e12, 2.4e12, deployed_params("H100-96GB-500W"))
    >>> small, large = TORCHAO_TENSORWISE["hopper"]
    >>> round(torchao_kernel_speedup(large, c), 3)
    1.613
    """
    target = block_seconds(point, c, False) / point.speedup
    lo, hi = 1.0, 4.0
    for _ in range(50):
        mid = (lo + hi) / 2
        t = block_seconds(point, replace(c, linear_speedup=1.5, torchao_fp8=TorchaoFp8(mid)), True)
        lo, hi = (mid, hi) if t > target else (lo, mid)
    return lo


def torchao_fp8_rates(
    precision: str,
    recipe: str | None,
    device_name: str,
    framework: str,
    c: Clock,
    fp8_gather: bool = False,
) -> TorchaoFp8 | None:
    """:class:`~model.torchao_rates.TorchaoFp8` where the linear layers are torchao's
    ``Float8Linear`` (:func:`model.torchao_rates.runs_torchao_float8`) under fp8 with the
    tensorwise recipe on a part whose family torchao published (:func:`model.torchao_rates.
    torchao_point`), its kernel speed-up read on clock ``c``'s rates
    (:func:`torchao_kernel_speedup`); None otherwise. With ``fp8_gather`` (torchao's FP8
    all-gather, :func:`model.fp8_gathers.fp8_param_gathers`) the weight arrives as the gathered
    ``Float8TrainingTensor`` and no pass casts it (:data:`model.torchao_rates.
    FP8_GATHER_CAST_BYTES`, :data:`~model.torchao_rates.FP8_GATHER_CAST_KERNELS`); the speed-up
    is still read on the benchmark's casts, which cast the weight.

    >>> from trainplan.model.op_rates import deployed_params
    >>> c = Clock(989.4e12, 2.4e12, deployed_params("H100-96GB-500W"))
    >>> round(torchao_fp8_rates("fp8", "tensorwise", "H100-96GB-500W", "fsdp2", c).kernel_speedup, 3)
    1.613
    >>> torchao_fp8_rates("fp8", "tensorwise", "H100-96GB-500W", "megatron", c) is None
    True
    """
    if str(precision) != "fp8" or not runs_torchao_float8(framework):
        return None
    point = torchao_point(device_name, recipe)
    if point is None:
        return None
    speedup = torchao_kernel_speedup(point, c)
    if fp8_gather:
        return TorchaoFp8(speedup, FP8_GATHER_CAST_BYTES, FP8_GATHER_CAST_KERNELS)
    return TorchaoFp8(speedup)
