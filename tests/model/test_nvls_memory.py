"""NCCL's NVLink SHARP (NVLS) buffers in a ring communicator's bytes (model/nvls.py,
model/terms/nvls_memory.py), derived by hand from NCCL's code (NVIDIA/nccl at 5067397,
``src/transport/nvls.cc``), and the one rule the memory and the step time's NVLS speed-up read.

* ``ncclNvlsInit``: ``NCCL_NVLS_ENABLE`` defaults to 2, on where the device supports multicast
  (NVSwitch boards: HGX H100/H200/H800, B200/B300, GB200/GB300), off below 2 GPUs of the
  communicator on a node.
* ``ncclNvlsTuning``: ``NVLS_NCHANNELS_SM90`` 16 channels on Hopper, ``NVLS_NCHANNELS_SM100_NVL``
  24 on Blackwell in one NVLink domain.
* heads: in one node the NVLS search forces one per GPU, at most ``NCCL_MAX_NVLS_ARITY`` 32.
* ``ncclNvlsSetup`` (init): credits, channels × 2 × 64 B × heads; ``ncclNvlsBufferSetup`` (first
  NVLS collective): channels × 2 × (``NCCL_NVLS_CHUNKSIZE`` 128 KiB × ``NCCL_STEPS`` 8) × heads;
  ``nvlsAllocateMem`` rounds each up to the 2 MiB allocation granule.
* across nodes NCCL runs only the all-reduce as NVLS-tree (NVLS without CollNet is off for
  ``nNodes > 1``): the credits are counted, the tree's buffers are not (stated).
"""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import refusal, run_many
from trainplan.model.nccl_search import nvlink_node
from trainplan.model.nvlink_rates import nvls_allreduce_speedup
from trainplan.model.nvls import (
    NCCL_STEPS,
    NVLS_CHUNK_BYTES,
    NVLS_CREDIT_BYTES,
    NVLS_MAX_HEADS,
    nvls_buffer_bytes,
    nvls_channels,
    nvls_credit_bytes,
    nvls_on,
)
from trainplan.model.op_rates import params_in_force
from trainplan.model.roofline import Collective, collective_time
from trainplan.model.terms.nvls_memory import (
    nvls_group_bytes,
    nvls_strided_bytes,
    world_runs_large,
)

MIB = 2**20
H100 = ("H100-SXM", True, nvlink_node("H100-SXM", 450e9))
H200 = ("H200", True, nvlink_node("H200", 450e9))
B200 = ("B200", True, nvlink_node("B200", 900e9))
GB200 = ("GB200", True, nvlink_node("GB200", 900e9))
A100 = ("A100-80GB", True, nvlink_node("A100-80GB", 300e9))
H100_OFF = ("H100-SXM", False, H100[2])


def test_the_code_constants():
    assert (NVLS_CHUNK_BYTES, NCCL_STEPS, NVLS_CREDIT_BYTES, NVLS_MAX_HEADS) == (131072, 8, 64, 32)
    assert [nvls_channels(p) for p in ("H100-SXM", "H200", "H800", "B200", "GB200")] == [
        16, 16, 16, 24, 24,
    ]  # fmt: skip
    assert [nvls_channels(p) for p in ("A100-80GB", "MI300X")] == [0, 0]


def test_eight_h100s_hold_the_logged_256_mib():
    """8 H100s: 16 × 2 × (131,072 × 8) × 8 = 268,435,456 B, NCCL's own INFO line on 8 H100s
    ("NVLS comm ... nHeads 8 buffSize 1048576 nvlsPerRankSize 33554432 nvlsTotalSize
    268435456"); the credits 16 × 2 × 64 × 8 = 16,384 B, one 2 MiB granule."""
    assert 16 * 2 * NVLS_CHUNK_BYTES * NCCL_STEPS == 33_554_432
    assert nvls_buffer_bytes(16, 8) == 268_435_456
    assert 16 * 2 * 64 * 8 == 16_384 and nvls_credit_bytes(16, 8) == 2 * MIB


def test_a_ring_by_placement():
    """``nvls_group_bytes(part, on, NVLinks, size, span, gpus a node, in one NVLink domain,
    large collectives)``:

    * tp 8 in an H100 node: 2 + 256 = 258 MiB; tp 4 and tp 2: the credits alone, 2 MiB — NCCL's
      tuner runs their all-reduces as rings (NVLS's bus bandwidth 4 × min(60 × 0.85 × 3/4 × 2,
      60) = 240 and 2 × min(60 × 0.85 × 1/2 × 2, 60) = 102 GB/s against the ring's 12 × 30 =
      360; ``model.nccl_search``), so ``ncclNvlsBufferSetup`` never runs (it did count
      2 + 128 = 130 and 2 + 64 = 66 before);
    * a dp ring of 32 ranks over 64 (4 a node on 8 nodes): the credits, 2 MiB (NVLS-tree's
      buffers not counted); 16 ranks over 128 (one a node): nothing;
    * a B200 node: 24 channels, 2 + 24 × 2 × 1 × 8 = 386 MiB;
    * a GB200 NVL72 ring of 64 in the domain: 32 heads at most, 2 + 24 × 2 × 1 × 32 = 1,538;
    * an A100 (no NVLS), or ``nccl_nvls`` off (``NCCL_NVLS_ENABLE=0``): nothing."""
    assert nvls_group_bytes(*H100, 8, 8, 8, 8, True, True) == 258 * MIB
    assert nvls_group_bytes(*H200, 4, 4, 8, 8, True, True) == 2 * MIB
    assert nvls_group_bytes(*H100, 2, 2, 8, 8, True, True) == 2 * MIB
    assert nvls_group_bytes(*H100, 32, 64, 8, 64, False, True) == 2 * MIB
    assert nvls_group_bytes(*H100, 16, 128, 8, 128, False, True) == 0
    assert nvls_group_bytes(*B200, 8, 8, 8, 8, True, True) == 386 * MIB
    assert nvls_group_bytes(*GB200, 64, 64, 4, 64, True, True) == 1538 * MIB
    assert nvls_group_bytes(*A100, 8, 8, 8, 8, True, True) == 0
    assert nvls_group_bytes(*H100_OFF, 8, 8, 8, 8, True, True) == 0
    # Megatron's model-parallel ring, tp 4 at each pp stride of 16 on 64 GPUs: 4 a node
    assert nvls_strided_bytes(*H100, 1, 4, 16, 4, 8, False, True) == 2 * MIB
    # tp 2 × pp 2 in one node: 4 ranks, a ring all-reduce: the credits alone (was 130)
    assert nvls_strided_bytes(*H100, 1, 2, 4, 2, 8, True, True) == 2 * MIB
    # 6 of a node: NVLS's 6 × min(50 × 0.85 × 5/6 × 2, 60) = 360 equals the ring's, and its
    # 25 µs of latency is under the ring's 8.4 + 10 × 3.4: NVLS, 2 + 16 × 2 × 1 × 6 = 194 MiB
    assert nvls_group_bytes(*H100, 6, 6, 8, 24, True, True) == 194 * MIB


def test_one_rule_for_the_memory_and_the_speed_up():
    """The NVLS all-reduce's speed-up (480/370 on HGX Hopper) only on a part with NVLS, and
    without it (``nccl_nvls`` false) none: the all-reduce inside the node then reads the
    published (NVLS) curve ÷ 480/370, as an all-gather does — 16 MiB across 8 H100s, 234.45 GB/s
    on the curve, 180.72 without NVLS: the same bytes take 480/370 longer."""
    assert nvls_on("H200", 8) and not nvls_on("H200", 1) and not nvls_on("A100-80GB", 8)
    assert round(nvls_allreduce_speedup("H100-SXM"), 4) == round(480 / 370, 4) == 1.2973
    assert nvls_allreduce_speedup("A100-80GB") == 1.0
    on, off = params_in_force(None, "H100-SXM"), params_in_force(None, "H100-SXM", nvls=False)
    assert off.nvls_allreduce_speedup == 1.0
    sent = 2 * 7 / 8 * 2**24  # the ring's share of a 16 MiB all-reduce buffer
    t_on = collective_time(Collective.ALL_REDUCE, 8, sent, 450e9, True, on)
    t_off = collective_time(Collective.ALL_REDUCE, 8, sent, 450e9, True, off)
    assert round(t_off / t_on, 4) == round(480 / 370, 4)
    gather_on = collective_time(Collective.ALL_GATHER, 8, sent / 2, 450e9, True, on)
    gather_off = collective_time(Collective.ALL_GATHER, 8, sent / 2, 450e9, True, off)
    assert gather_on == pytest.approx(gather_off, rel=1e-12)  # the same reading, reordered


def test_buffers_only_on_rings_that_run_a_large_collective():
    """NCCL (5067397) sets the NVLS buffers up lazily: ``NCCL_RUNTIME_CONNECT`` defaults to 1
    (``src/init.cc``), ``ncclPrepareTasks`` (``src/enqueue.cc``) marks NVLS for connection only
    when a task's algorithm is NVLS or NVLS-tree, and ``ncclCollPreconnect`` (``src/group.cc``)
    then calls ``ncclNvlsBufferSetup``. The tuner (``src/graph/tuning.cc``) gives NVLS the Simple
    protocol only, at 25 µs of NVLink latency against the ring LL's 0.6 µs a step, so a
    one-float all-reduce (barrier, grad norm, loss, token count) runs as a ring: such a ring
    holds the credits alone. 8 H100s: 2 MiB, not 258; across nodes the same 2 MiB either way."""
    assert nvls_group_bytes(*H100, 8, 8, 8, 8, True, False) == 2 * MIB
    assert nvls_group_bytes(*H100, 8, 8, 8, 8, True, True) == (2 + 256) * MIB
    assert nvls_group_bytes(*H100, 32, 64, 8, 64, False, False) == 2 * MIB
    assert nvls_strided_bytes(*H100, 1, 2, 4, 2, 8, True, False) == 2 * MIB
    # GB200, the dp ring of 64 in the NVL72 domain: 32 heads, 24 × 2 × 1 MiB × 32 = 1,536 MiB
    # of buffers where it reduces gradients; the world ring of the same 64 GPUs, barriers only
    assert nvls_group_bytes(*GB200, 64, 64, 4, 64, True, True) == (2 + 1536) * MIB
    assert nvls_group_bytes(*GB200, 64, 64, 4, 64, True, False) == 2 * MIB


def test_the_world_ring_runs_large_collectives_only_as_fsdp2s_default_group():
    """Under fsdp2 a tp or FSDP group as wide as the world is the default group (DeviceMesh),
    so its all-gathers run on the world's communicator, which then sets the buffers up; the
    barrier alone (Megatron-LM, DeepSpeed, or fsdp2 with its groups narrower) does not.
    Element-wise over the search's columns."""
    from types import SimpleNamespace as F

    import numpy as np

    assert world_runs_large(F(framework="fsdp2", tp=8, pp=1, shard_degree=1))
    assert not world_runs_large(F(framework="fsdp2", tp=1, pp=2, shard_degree=4))
    assert not world_runs_large(F(framework="deepspeed", tp=1, pp=1, shard_degree=8))
    cols = F(framework="fsdp2", tp=np.array([1, 2, 8]), pp=np.array([1, 1, 1]),
             shard_degree=np.array([8, 4, 1]))  # fmt: skip
    assert world_runs_large(cols).tolist() == [True, False, True]


def test_one_function_says_where_nvls_runs():
    """:func:`model.nvls.nvls_ring` (all ranks in one NVLink domain, at least 2, and NCCL's
    tuner running the large all-reduce as NVLS on the part's NVLinks, ``model.nccl_search``) is
    what the step time's all-reduce, the memory's buffers and the SM charge read. On an H100
    node (18 NVLinks × 20.6 = 370.8 GB/s; the ring 12 channels × 30 = 360 GB/s of bus
    bandwidth, ``ncclTopoTuneModel``): the NVLS graph of n GPUs has n heads at the fastest
    sm90 speed s with (n + 1)·s ≤ 370.8 (60 at 2 to 5 GPUs, 50 at 6, 40 at 7 and 8) and its
    ``bwInter`` raised to 60; NVLS's bus bandwidth n × min(s × 0.85 × (n − 1)/n × 2, 60):
    2: 2 × 51 = 102; 4: 4 × min(76.5, 60) = 240; 8: 8 × min(59.5, 60) = 476. So an 8-GPU
    all-reduce runs as NVLS (the published curve, 480/370 faster than without NVLS), a 2- or
    4-GPU one as a ring (the curve ÷ 480/370: the same time as with NVLS off), holding the
    credits alone; the same group across nodes gets neither (NVLS-tree's buffers are not
    counted, docs/memory-mechanisms.md)."""
    from trainplan.model.nvls import nvls_ring

    h100 = H100[2]
    assert nvls_ring(h100, True, 8) and not nvls_ring(h100, False, 8)
    assert not nvls_ring(h100, True, 2) and not nvls_ring(h100, True, 4)
    assert not nvls_ring(h100, True, 1)
    on, off = params_in_force(None, "H100-SXM"), params_in_force(None, "H100-SXM", nvls=False)
    for ranks, ratio in ((8, 480 / 370), (4, 1.0), (2, 1.0)):
        sent = 2 * (ranks - 1) / ranks * 2**24  # the ring's share of a 16 MiB buffer
        with_nvls = collective_time(Collective.ALL_REDUCE, ranks, sent, 450e9, True, on)
        without = collective_time(Collective.ALL_REDUCE, ranks, sent, 450e9, True, off)
        assert without / with_nvls == pytest.approx(ratio, rel=1e-12)
    assert nvls_group_bytes(*H100, 2, 2, 8, 8, True, True) == 2 * MIB
    assert nvls_group_bytes(*H100, 2, 16, 8, 16, False, True) == 0  # one rank a node


def test_the_tuner_by_part_and_size():
    """The NVLS all-reduce against the ring's by part (``model.nccl_search``, NVIDIA/nccl at
    5067397c ``src/graph/search.cc``, ``src/graph/tuning.cc``):

    * H800, 8 NVLinks × 20.6 = 164.8 GB/s: the ring 8 channels × 20 = 160 (4 at 40 doubled);
      NVLS at 4 GPUs 4 × min(30 × 0.85 × 3/4 × 2, 60) = 153 (a ring), at 5 5 × min(24 × 0.85
      × 4/5 × 2, 50) = 163.2 (NVLS), at 8 8 × min(15 × 0.85 × 7/8 × 2, 30) = 178.5 (NVLS).
    * B200, 18 × 40.1 = 721.8 GB/s: the ring 16 × 45 = 720 (8 at 90 doubled); NVLS at 4
      4 × min(90 × 0.74 × 3/4 × 2, 90) = 360 (a ring), at 8 8 × min(80 × 0.74 × 7/8 × 2, 90) =
      720, equal, where NVLS's 25 µs of latency beats the ring's 8.4 + 14 × 3.4 = 56 µs: NVLS.
    * GB200's NVL72 domain at 72: 32 heads at 20 GB/s (33 × 20 = 660 ≤ 721.8 < 33 × 24),
      ``bwInter`` raised to 40: 32 × min(20 × 0.74 × 31/32 × 2, 40) = 917.6: NVLS."""
    from trainplan.model.nccl_search import nvls_allreduce_busbw, ring_busbw
    from trainplan.model.nvls import nvls_ring

    h800, b200, gb200 = nvlink_node("H800", 200e9), B200[2], GB200[2]
    assert ring_busbw(h800) == 160 and ring_busbw(b200) == 720
    assert nvls_allreduce_busbw(h800, 4) == pytest.approx(153.0)
    assert nvls_allreduce_busbw(h800, 5) == pytest.approx(163.2)
    assert nvls_allreduce_busbw(h800, 8) == pytest.approx(178.5)
    assert [bool(nvls_ring(h800, True, n)) for n in (2, 3, 4, 5, 8)] == [False] * 3 + [True] * 2
    assert nvls_allreduce_busbw(b200, 4) == pytest.approx(360.0)
    assert nvls_allreduce_busbw(b200, 8) == pytest.approx(720.0)
    assert not nvls_ring(b200, True, 4) and nvls_ring(b200, True, 8)
    assert nvls_allreduce_busbw(gb200, 72) == pytest.approx(917.6)
    assert nvls_ring(gb200, True, 72)


BASE = ("evaluate", "--model", "llama3-70b", "--gpus", "64", "--tp", "4", "--pp", "2")


def test_the_switch_from_the_command_line():
    """Llama 3 70B on 64 H100s, tp 4 × pp 2 (dp 8): NVLS holds 10 MiB — the tp ring in a node
    its credits, 2 MiB (its all-reduces run as rings: no buffers; 130 MiB before), the dp (2 a
    node), gradient-statistics, world and model-parallel (4 a node) rings 2 MiB each; the
    pipeline pair (one rank a node) none.
    ``--set nccl_nvls=false`` takes them out, says so, and nothing else in the memory moves."""
    runs = run_many({
        "on": (*BASE, "--json"),
        "off": (*BASE, "--json", "--set", "nccl_nvls=false"),
        "text": (*BASE, "--set", "nccl_nvls=false"),
        "bad": (*BASE, "--set", "nccl_nvls=maybe"),
    })  # fmt: skip
    for name in ("on", "off", "text"):
        assert runs[name].returncode == 0, (name, runs[name].stderr[-2000:])
    on, off = json.loads(runs["on"].stdout), json.loads(runs["off"].stdout)
    assert on["time"]["nccl_nvls"] is True and off["time"]["nccl_nvls"] is False
    grown = on["memory"]["communicator_bytes"] - off["memory"]["communicator_bytes"]
    assert grown == (2 + 4 * 2) * MIB == 10_485_760
    assert on["memory"]["total_bytes"] - off["memory"]["total_bytes"] == grown
    assert "without NVLink SHARP (--set nccl_nvls=false)" in runs["text"].stdout
    assert refusal(runs["bad"]) == "--set nccl_nvls: 'maybe' must be true or false"
