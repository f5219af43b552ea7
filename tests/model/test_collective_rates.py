"""Collectives at published rates (``model.collective_rates``): NCCL's latency model by
algorithm and protocol against hand sums of its constants, nccl-tests bus bandwidth by message
size (every point back exactly, the interpolation and the fall-backs by hand), DeepEP's tables."""

from __future__ import annotations

import math

import pytest

from trainplan.model.collective_rates import (
    busbw_at,
    busbw_factor,
    busbw_peak,
    expert_bandwidth,
    nccl_latency_us,
    published_collective_seconds,
)
from trainplan.model.errors import InputError
from trainplan.model.roofline import Collective, RooflineParams, collective_latency
from trainplan.scenarios.kernel_data import collective_data

DATA = collective_data()
LAT = DATA.nccl_latency


def test_ring_latency_is_the_roofline_clocks_own():
    """Today's clock (model.roofline) charges NCCL's Simple ring constants; the data file holds
    the same figures, so both give one number for an 8-GPU NVLink all-gather and all-reduce."""
    p = RooflineParams(gemm_efficiency=0.7)
    for kind, name in (
        (Collective.ALL_GATHER, "all-gather"),
        (Collective.ALL_REDUCE, "all-reduce"),
    ):
        ours = nccl_latency_us(LAT, name, "ring", "Simple", 8)
        assert ours * 1e-6 == pytest.approx(collective_latency(kind, 8, True, p))


@pytest.mark.parametrize(
    "collective, algorithm, protocol, ranks, nodes, by_hand",
    [
        ("all-reduce", "ring", "LL", 8, 1, 6.6 + 14 * 0.6),
        ("all-reduce", "ring", "LL128", 8, 1, 14.0 + 14 * 1.9),
        # Two nodes of 8: 2(n − 1) = 30 steps, 2 across nodes at the net's 14 µs; the NVLink hop
        # is at least the CPU's network overhead (1 µs × 3 for Simple): max(3.4, 3) = 3.4.
        ("all-reduce", "ring", "Simple", 16, 2, 8.4 + 28 * 3.4 + 2 * 14.0),
        # One GPU per node: the net hop is the tree's (LL 5.0), the intra hop the overhead (1 µs).
        ("all-gather", "ring", "LL", 4, 4, 6.6 + 3 * 5.0),
        ("all-reduce", "tree", "LL", 64, 8, 6.8 + 2 * (7 * 0.6 + 3 * 5.0)),
        ("all-reduce", "nvls", "Simple", 8, 1, 25.0),
        ("all-reduce", "nvls", "Simple", 16, 2, 25.0 + 18.0),
        ("all-reduce", "nvls_tree", "Simple", 32, 4, 25.0 + 2 * 2 * 20.9),
        ("reduce-scatter", "pat", "Simple", 64, 64, 8.0 + 6 * 14.0 / 3.5 + 64 * 2.8),
    ],
)
def test_nccl_latency_by_hand(collective, algorithm, protocol, ranks, nodes, by_hand):
    got = nccl_latency_us(LAT, collective, algorithm, protocol, ranks, nodes)
    assert got == pytest.approx(by_hand)


def test_nccl_latency_refuses_what_nccl_does_not_run():
    with pytest.raises(InputError, match="all-gather does not run as tree"):
        nccl_latency_us(LAT, "all-gather", "tree", "Simple", 8)
    with pytest.raises(InputError, match="protocol: 'LL64'"):
        nccl_latency_us(LAT, "all-reduce", "ring", "LL64", 8)
    with pytest.raises(InputError, match="do not spread evenly"):
        nccl_latency_us(LAT, "all-reduce", "ring", "Simple", 12, 5)


def test_busbw_factors():
    assert busbw_factor("all-reduce", 4) == 1.5
    assert busbw_factor("reduce-scatter", 4) == busbw_factor("all-to-all", 4) == 0.75
    with pytest.raises(InputError, match="collective: 'broadcast'"):
        busbw_factor("broadcast", 4)


def test_every_published_busbw_point_comes_back_exactly():
    for c in DATA.busbw:
        for nbytes, gbps in zip(c.bytes, c.busbw_gbps, strict=True):
            got = busbw_at(DATA.busbw, c.part, c.collective, c.ranks, nbytes)
            assert (got.value, got.clamped) == (gbps, None)


def test_busbw_interpolation_and_fallbacks_by_hand():
    curves = DATA.busbw
    # H100, 8 GPUs: 64 MiB 361.78, 128 MiB 400.61 GB/s; 96 MiB lies log2(1.5) = 0.585 of the way.
    t = math.log2(1.5)
    got = busbw_at(curves, "H100-SXM", "all-reduce", 8, 96 * 2**20)
    assert got.value == pytest.approx(361.78 + t * (400.61 - 361.78))
    # Below 1 KiB: the time of the 1 KiB message (2^10 · 1.75 / 0.07e9 s), not a smaller one.
    small = published_collective_seconds(curves, "H100-SXM", "all-reduce", 8, 100)
    assert (small.value, small.clamped) == (pytest.approx(1024 * 1.75 / 0.07e9), "below")
    # Above 8 GiB: the 8 GiB bandwidth (478.87 GB/s) at the larger size.
    big = published_collective_seconds(curves, "H100-SXM", "all-reduce", 8, 2**34)
    assert (big.value, big.clamped) == (pytest.approx(2**34 * 1.75 / 478.87e9), "above")
    with pytest.raises(InputError, match="no published all-gather on 8 H100-SXM"):
        busbw_at(curves, "H100-SXM", "all-gather", 8, 2**20)


def test_stated_peaks():
    peaks = DATA.busbw_peaks
    assert busbw_peak(peaks, "H100-SXM", "all-reduce", "NVLS") == 480
    assert busbw_peak(peaks, "H100-SXM", "all-gather", "ring") == 370
    # The published 8 GiB all-reduce on H100 (478.87 GB/s) sits at the stated peak.
    h100 = next(c for c in DATA.busbw if c.part == "H100-SXM")
    assert h100.busbw_gbps[-1] == pytest.approx(480, rel=0.01)
    with pytest.raises(InputError, match="no stated peak"):
        busbw_peak(peaks, "A100-80GB", "all-reduce", "ring")


def test_deepep_tables():
    rows = DATA.expert_all_to_all
    assert expert_bandwidth(rows, "deepep-v1-normal", "H800", "nvlink", 8, "dispatch").value == 153
    # EP 24 between 16 (43) and 32 (58): log2(24/16) = 0.585 of the way.
    got = expert_bandwidth(rows, "deepep-v1-normal", "H800", "rdma", 24, "dispatch")
    assert got.value == pytest.approx(43 + math.log2(1.5) * 15)
    far = expert_bandwidth(rows, "deepep-v1-low-latency", "H800", "rdma", 512, "combine")
    assert (far.value, far.clamped) == (40, "above")
    with pytest.raises(InputError, match="which: 'both'"):
        expert_bandwidth(rows, "deepep-v1-normal", "H800", "rdma", 16, "both")
    with pytest.raises(InputError, match="no deepep-v1-normal table on B200"):
        expert_bandwidth(rows, "deepep-v1-normal", "B200", "rdma", 16, "dispatch")
