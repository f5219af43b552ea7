"""A part's published NCCL bus-bandwidth curve inside its NVLink domain, read at a buffer
size: what :func:`model.roofline.collective_time` times a collective in the domain by where
the part has one (:attr:`model.roofline.RooflineParams.busbw_curve`, nccl-tests'
``all_reduce_perf``, ``scenarios/kernels/collectives.toml`` ``[[busbw]]``). Units: bytes,
bytes/s; element-wise (:mod:`model.xp`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from trainplan.model.xp import log2, where

if TYPE_CHECKING:
    from trainplan.model.roofline import RooflineParams

__all__ = ["published_busbw"]


def published_busbw(
    kind: str, buffer_bytes: Any, bandwidth: Any, p: RooflineParams, *, nvls: Any
) -> Any:
    """Bytes/s of bus bandwidth a ``kind`` collective of an ``buffer_bytes`` buffer reaches in
    the part's NVLink domain by its published curve (:attr:`RooflineParams.busbw_curve`,
    interpolated linearly in log2 of the size, held at the ends), scaled by the link in use
    (``bandwidth``) over the curve system's (:attr:`RooflineParams.busbw_curve_link_gbps`).

    The curve is the all-reduce's as NCCL ran it on the part (NVLink SHARP on HGX Hopper's 8
    GPUs); a ring there (all-gather, reduce-scatter, an all-reduce where ``nvls`` is false:
    :func:`model.nvls.nvls_ring`) reads it ÷ the NVLS all-reduce's stated speed-up over the
    ring (:attr:`RooflineParams.nvls_allreduce_speedup`; 1 where the curve is a ring's).
    nccl-tests' bus bandwidth does not depend on the rank count (``doc/PERFORMANCE.md``), so a
    group of 2 or 4 reads the 8-GPU curve at the same buffer size. Element-wise.

    An 8-GPU H100 all-reduce of 16 MiB (NVLS) reads the published 234.45 GB/s, a 4-GPU one (a
    ring) 234.45 ÷ 480/370:

    >>> from trainplan.model.op_rates import deployed_params
    >>> p, ar = deployed_params("H100-SXM"), "all-reduce"
    >>> [round(published_busbw(ar, 2**24, 450e9, p, nvls=n) / 1e9, 2) for n in (True, False)]
    [234.45, 180.72]
    """
    sizes = [math.log2(x) for x, _ in p.busbw_curve]
    gbps = [y for _, y in p.busbw_curve]
    x = log2(buffer_bytes)
    value: Any = gbps[-1]  # held above the largest size
    for k in range(len(sizes) - 2, -1, -1):  # each segment, linear in log2 of the size
        t = (x - sizes[k]) / (sizes[k + 1] - sizes[k])
        value = where(x < sizes[k + 1], gbps[k] + t * (gbps[k + 1] - gbps[k]), value)
    busbw = where(x <= sizes[0], gbps[0], value) * 1e9
    as_nvls = nvls if kind == "all-reduce" else False
    busbw = where(as_nvls, busbw, busbw / p.nvls_allreduce_speedup)
    return busbw * (bandwidth / (p.busbw_curve_link_gbps * 1e9))
