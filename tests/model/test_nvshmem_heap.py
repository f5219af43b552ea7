"""NVSHMEM's heap granules for DeepEP's RDMA buffer (model.nvshmem_heap): DeepEP's
``Buffer.__init__`` (deepseek-ai/DeepEP dd758caf45 ``deep_ep/buffers/legacy.py``) sets
``NVSHMEM_CUMEM_GRANULARITY = 2**29`` and ``NVSHMEM_MAX_TEAMS = 7``; NVSHMEM v3.4.5's dynamic
heap (``src/host/mem/mem_heap.cpp`` ``allocate_symmetric_memory``) maps physical memory in those
granules as allocations outgrow what is mapped. Figures derived by hand here."""

from __future__ import annotations

from trainplan.model.dispatch_buffers import dispatch_buffer_bytes
from trainplan.model.moe import DEEPEP_WORKSPACE_BYTES, deepep_buffer_bytes
from trainplan.model.moe_run import Dispatcher, MoERun
from trainplan.model.nvshmem_heap import (
    NVSHMEM_GRANULE,
    ibgda_queue_bytes,
    nvshmem_gpu_bytes,
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
    buffer. ``dispatch_buffer_bytes`` = 377,677,824 NVLink + 33,554,432 workspace + 536,870,912
    + 121,876,547 of IBGDA queue pairs (below) = 1,069,979,715 B."""
    nvl, rdma = deepep_buffer_bytes(7168, 64)
    assert (nvl, rdma) == (377_677_824, 336_047_360)
    assert nvshmem_internal_bytes(8) + rdma + 128 == 375_447_928 <= NVSHMEM_GRANULE
    assert nvshmem_heap_bytes(rdma, 8) == 512 * MIB == 536_870_912
    assert nvshmem_heap_bytes(rdma, 8) - rdma == 200_823_552
    deepep = MoERun(dispatcher=Dispatcher.DEEPEP)
    total = 377_677_824 + 33_554_432 + 536_870_912 + 121_876_547
    assert dispatch_buffer_bytes(deepep, 7168, 64) == total == 1_069_979_715


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
    """Within one node (ep ≤ 8) ``num_rdma_bytes`` is 0 and DeepEP does not initialise NVSHMEM
    (``Buffer.__init__`` sets NVSHMEM's environment only when ``get_num_rdma_ranks() > 1``):
    no heap, no queue pairs; the buffer is the NVLink part and the constructor's 32 MiB
    workspace (gpt-oss-20b's h 2,880 at EP 8: 160,073,344 + 33,554,432 = 193,627,776 B)."""
    assert nvshmem_heap_bytes(0, 1) == 0
    assert nvshmem_gpu_bytes(0, 1) == 0
    nvl, rdma = deepep_buffer_bytes(2880, 8)
    assert (nvl, rdma) == (160_073_344, 0)
    assert dispatch_buffer_bytes(MoERun(dispatcher=Dispatcher.DEEPEP), 2880, 8) == 193_627_776


def test_deepeps_workspace_is_32_mib_on_every_rank():
    """``LEGACY_NUM_WORKSPACE_BYTES`` = 32 · 1024 · 1024 (DeepEP dd758ca
    ``csrc/kernels/legacy/compiled.cuh``), ``cudaMalloc``-ed by the legacy ``Buffer``
    constructor whatever ``num_nvl_bytes`` and ``num_rdma_bytes`` are (``csrc/legacy/
    buffer.hpp``). The ``textbook`` profile counts the buffers as asked, no library's own
    allocations: 377,677,824 + 336,047,360 = 713,725,184 B at h 7,168, EP 64."""
    assert DEEPEP_WORKSPACE_BYTES == 32 * 1024 * 1024 == 33_554_432
    deepep = MoERun(dispatcher=Dispatcher.DEEPEP)
    assert dispatch_buffer_bytes(deepep, 7168, 64, heap=False) == 713_725_184


def test_ibgdas_queue_pairs_outside_the_heap():
    """DeepEP across nodes sets ``NVSHMEM_IB_ENABLE_IBGDA = 1``, ``NVSHMEM_IBGDA_NUM_RC_PER_PE =
    num_qps_per_rank`` (24 by default; Megatron-Core's ``get_buffer`` passes none) and keeps
    ``NVSHMEM_QP_DEPTH`` at 1,024 (``deep_ep/buffers/legacy.py``). NVSHMEM v3.4.5's IBGDA
    transport (``src/modules/transport/ibgda/ibgda.cpp``) then makes, per GPU, 24 RC QPs to each
    of the other PEs (``ibgda_setup_rc_endpoints`` skips itself) and ``NVSHMEM_IBGDA_NUM_DCI``
    = 1 DCI, each with five ``cudaMalloc`` calls of ``size + 65,535`` (``ibgda_gpu_mem_alloc``
    aligning to the 64 KiB ``IBGDA_GPAGE_SIZE``):

    * send queue, 1,024 WQE basic blocks · 64 B = 65,536 → 131,071;
    * its doorbell record, 8 → 65,543;
    * send CQ, 1,024 CQEs · 64 B = 65,536 → 131,071; its doorbell record 8 → 65,543;
    * fetch buffer, (1,024 + 1) slots · 256 B = 262,400 → 327,935;

    721,163 B a QP. EP 64 over 8 nodes (8 PEs): 24 · 7 + 1 = 169 QPs, 121,876,547 B (0.12 GB);
    EP 16 (2 PEs): 25 QPs, 18,029,075 B; EP 128 (16 PEs): 361 QPs, 260,339,843 B."""
    per_qp = (65_536 + 65_535) + (8 + 65_535) + (65_536 + 65_535) + (8 + 65_535)
    per_qp += 1_025 * 256 + 65_535
    assert per_qp == 721_163
    assert ibgda_queue_bytes(8) == 169 * per_qp == 121_876_547
    assert ibgda_queue_bytes(2) == 25 * per_qp == 18_029_075
    assert ibgda_queue_bytes(16) == 361 * per_qp == 260_339_843
    assert nvshmem_gpu_bytes(336_047_360, 8) == 536_870_912 + 121_876_547


def test_textbook_counts_the_rdma_bytes_as_asked():
    """The ``textbook`` profile counts the tensors a run asks for and no library's own
    allocations or rounding (no NCCL communicators, no reserve): DeepEP's buffer at EP 64,
    h 7,168, is the 377,677,824 NVLink bytes and the 336,047,360 RDMA bytes as asked,
    713,725,184 B, where a framework profile adds DeepEP's 32 MiB workspace, counts the RDMA
    part as the one 512 MiB granule that holds it and adds IBGDA's 121,876,547 B of queues."""
    from trainplan.model.frameworks import Framework
    from trainplan.model.terms.dispatch_buffers import _dispatch_buffers

    deepep = MoERun(dispatcher=Dispatcher.DEEPEP)
    assert not Framework("textbook").physical
    assert _dispatch_buffers(deepep, 7168, 64, 1, "textbook") == 377_677_824 + 336_047_360
    physical = 377_677_824 + 33_554_432 + 536_870_912 + 121_876_547
    assert _dispatch_buffers(deepep, 7168, 64, 1, "megatron") == physical
