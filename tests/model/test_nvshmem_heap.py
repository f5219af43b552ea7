"""NVSHMEM's heap granules for DeepEP's RDMA buffer (model.nvshmem_heap): DeepEP's
``Buffer.__init__`` (deepseek-ai/DeepEP dd758caf45 ``deep_ep/buffers/legacy.py``) sets
``NVSHMEM_CUMEM_GRANULARITY = 2**29`` and ``NVSHMEM_MAX_TEAMS = 7``; NVSHMEM v3.4.5's dynamic
heap (``src/host/mem/mem_heap.cpp`` ``allocate_symmetric_memory``) maps physical memory in those
granules as allocations outgrow what is mapped. Figures derived by hand here."""

from __future__ import annotations

from trainplan.model.moe import deepep_buffer_bytes
from trainplan.model.moe_run import Dispatcher, MoERun, dispatch_buffer_bytes
from trainplan.model.nvshmem_heap import (
    NVSHMEM_GRANULE,
    nvshmem_heap_bytes,
    nvshmem_internal_bytes,
)

MIB = 1 << 20


def test_nvshmems_own_allocations_on_8_pes():
    """``heapextra`` (``set_heap_size_attr``) on 8 PEs, one a node (DeepSeek-V3's EP 64 over 8
    nodes): a team's pSync is 2·2·27,648 (sync) + 524,288 / 8 (reduce scratch) + 10·27,648
    (broadcast) + 2·2·8·2,048 / 8 (fcollect) + 2·27,648 (all-to-all) + 8 = 516,104 longs;
    7 teams · 8 B = 28,901,824 B, + 2·32 + 2·4 + 2·8·7 + (16 + 32)·8 = 568 B of team state:
    28,902,392. With the 8 MiB g_buf, the 2 MiB coalescing buffer and 24·512 B of alignment:
    8,388,608 + 28,902,392 + 2,097,152 + 12,288 = 39,400,440 B (37.6 MiB)."""
    psync = 2 * 2 * 27648 + 524288 // 8 + 10 * 27648 + 2 * 2 * 8 * 2048 // 8 + 2 * 27648 + 8
    assert psync == 516_104
    teams = 7 * 8 * psync + 2 * 32 + 2 * 4 + 2 * 8 * 7 + (16 + 32) * 8
    assert teams == 28_902_392
    assert nvshmem_internal_bytes(8) == 8 * MIB + teams + 2 * MIB + 24 * 512 == 39_400_440


def test_deepseek_v3_at_ep_64_maps_one_512_mib_granule():
    """h 7,168, EP 64 over 8 nodes: ``num_rdma_bytes`` = 336,047,360 (test_moe's derivation of
    ``get_rdma_buffer_size_hint``), aligned to 128 by ``nvshmem_align``: 336,047,488 B. With
    NVSHMEM's 39,400,440 B: 375,447,928 ≤ 536,870,912, so the buffer takes the free tail of
    the granule NVSHMEM's init mapped: 536,870,912 B on the GPU, 200,823,552 more than the
    buffer. ``dispatch_buffer_bytes`` = 377,677,824 NVLink + 536,870,912 = 914,548,736 B."""
    nvl, rdma = deepep_buffer_bytes(7168, 64)
    assert (nvl, rdma) == (377_677_824, 336_047_360)
    assert nvshmem_internal_bytes(8) + rdma + 128 == 375_447_928 <= NVSHMEM_GRANULE
    assert nvshmem_heap_bytes(rdma, 8) == 512 * MIB == 536_870_912
    assert nvshmem_heap_bytes(rdma, 8) - rdma == 200_823_552
    deepep = MoERun(dispatcher=Dispatcher.DEEPEP)
    assert dispatch_buffer_bytes(deepep, 7168, 64) == 377_677_824 + 536_870_912 == 914_548_736


def test_a_buffer_past_the_first_granules_tail_maps_granules_of_its_own():
    """h 7,168, EP 128 over 16 nodes: ``num_rdma_bytes`` 693,096,960 (661.0 MiB) + 128 does not
    fit the first granule's tail, so NVSHMEM maps ⌈693,097,088 / 536,870,912⌉ = 2 granules more
    (``allocate_physical_memory_to_heap(size + alignment)``): 3 · 512 MiB = 1,610,612,736 B.
    EP 96 (495.7 MiB) + NVSHMEM's 37.6 MiB on 12 PEs also overflow 512 MiB: 1 + 1 granules."""
    rdma = deepep_buffer_bytes(7168, 128)[1]
    assert rdma == 693_096_960
    assert nvshmem_heap_bytes(rdma, 16) == 3 * NVSHMEM_GRANULE == 1_610_612_736
    rdma96 = deepep_buffer_bytes(7168, 96)[1]
    assert rdma96 == 519_822_720 < NVSHMEM_GRANULE
    assert nvshmem_internal_bytes(12) + rdma96 + 128 > NVSHMEM_GRANULE
    assert nvshmem_heap_bytes(rdma96, 12) == 2 * NVSHMEM_GRANULE


def test_no_rdma_buffer_no_heap():
    """Within one node (ep ≤ 8) ``num_rdma_bytes`` is 0 and DeepEP does not initialise NVSHMEM:
    the buffer is the NVLink part alone (gpt-oss-20b's h 2,880 at EP 8)."""
    assert nvshmem_heap_bytes(0, 1) == 0
    nvl, rdma = deepep_buffer_bytes(2880, 8)
    assert rdma == 0
    assert dispatch_buffer_bytes(MoERun(dispatcher=Dispatcher.DEEPEP), 2880, 8) == nvl


def test_textbook_counts_the_rdma_bytes_as_asked():
    """The ``textbook`` profile counts the tensors a run asks for and no library's rounding (no
    NCCL communicators, no reserve): DeepEP's buffer at EP 64, h 7,168, is the 377,677,824
    NVLink bytes and the 336,047,360 RDMA bytes as asked, 713,725,184 B, where a framework
    profile counts the RDMA part as the one 512 MiB granule that holds it."""
    from trainplan.model.frameworks import Framework
    from trainplan.model.terms.dispatch_buffers import _dispatch_buffers

    deepep = MoERun(dispatcher=Dispatcher.DEEPEP)
    assert not Framework("textbook").physical
    assert _dispatch_buffers(deepep, 7168, 64, 1, "textbook") == 377_677_824 + 336_047_360
    assert _dispatch_buffers(deepep, 7168, 64, 1, "megatron") == 377_677_824 + 536_870_912
