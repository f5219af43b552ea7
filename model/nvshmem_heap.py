"""GPU memory NVSHMEM's symmetric heap maps for DeepEP's RDMA buffer (normal mode, a group
across nodes), as :func:`model.dispatch_buffers.dispatch_buffer_bytes` counts it.

DeepEP's ``Buffer.__init__`` (deepseek-ai/DeepEP dd758caf45 ``deep_ep/buffers/legacy.py``) sets,
when its group spans more than one node, ``NVSHMEM_CUMEM_GRANULARITY = 2**29`` ("NVSHMEM
initialization requires at least 256 MiB"), ``NVSHMEM_MAX_TEAMS = 7`` and
``NVSHMEM_DISABLE_NVLS = 1``, then ``csrc/legacy/buffer.hpp`` ``Buffer::sync`` runs
``nvshmem::init`` over the ``ranks // 8`` RDMA ranks (one PE a node) and
``nvshmem::alloc(num_rdma_bytes, 128)`` = ``nvshmem_align`` (``csrc/kernels/backend/nvshmem.cu``).

NVSHMEM (NVIDIA/nvshmem v3.4.5, 2d7d25f081, ``src/host/mem/mem_heap.cpp``): on x86 with CUDA
VMM (``NVSHMEM_DISABLE_CUDA_VMM`` off by default, ``init.cu``) the heap is
``nvshmemi_symmetric_heap_vidmem_dynamic_vmm``: ``reserve_heap`` reserves only address space
(``NVSHMEM_MAX_MEMORY_PER_GPU``; ``NVSHMEM_SYMMETRIC_SIZE`` sizes the static heap only), and
``allocate_symmetric_memory`` maps physical memory when an allocation does not fit what is
mapped: ``allocate_physical_memory_to_heap(size + alignment)``, rounded up to the granule
(``max(NVSHMEM_CUMEM_GRANULARITY, cuMemGetAllocationGranularity)``, 512 MiB here), one
``cuMemCreate`` each. NVSHMEM's own allocations at init (the teams' pSync pool, the proxy's
``g_buf`` and coalescing buffer: ``team_internal.cpp`` ``nvshmemi_team_init``, ``proxy.cpp``)
map the first granule; DeepEP's buffer goes in its free tail when it fits, else into granules of
its own.

Outside the heap, NVSHMEM's IBGDA transport (DeepEP sets ``NVSHMEM_IB_ENABLE_IBGDA = 1``,
``NVSHMEM_IBGDA_NUM_RC_PER_PE = num_qps_per_rank``, 24 by default, and keeps
``NVSHMEM_QP_DEPTH`` at 1,024) allocates each queue pair's control structures on the GPU with
``cudaMalloc`` (:func:`ibgda_queue_bytes`).

Units: bytes on one GPU.
"""

from __future__ import annotations

__all__ = [
    "NVSHMEM_GRANULE",
    "ibgda_queue_bytes",
    "nvshmem_gpu_bytes",
    "nvshmem_heap_bytes",
    "nvshmem_internal_bytes",
]

NVSHMEM_GRANULE = 2**29
"""``NVSHMEM_CUMEM_GRANULARITY`` as DeepEP sets it (``deep_ep/buffers/legacy.py``; NVSHMEM's
default is the same, ``src/include/host/env/env_defs.h``)."""

_MAX_TEAMS = 7  # NVSHMEM_MAX_TEAMS as DeepEP sets it (NVLS off, so not raised to 64)
_SYNC_SIZE = 27648  # SYNC_SIZE, src/include/device_host/nvshmem_common.cuh (longs)
_REDUCE_SCRATCH = 1 << 19  # NVSHMEM_REDUCE_SCRATCH_SIZE default (bytes)
_FCOLLECT_LL = 1 << 11  # NVSHMEM_FCOLLECT_LL_THRESHOLD default (bytes); LL128's is 0
_G_BUF = 8 << 20  # NVSHMEM_G_BUF_SIZE default
_G_COALESCING_BUF = 128 * 64 * 32 * 8  # NVSHMEM_G_COALESCING_BUF_SIZE default
_MALLOC_ALIGN = 512  # NVSHMEMI_MALLOC_ALIGNMENT, src/include/internal/host/custom_malloc.h
_N_PSYNC_BYTES = 32  # team_internal.cpp
_TEAM_PE_INFO = 16  # sizeof(nvshmemi_team_creation_pe_info_t): two ints and a pointer
_DEEPEP_ALIGN = 128  # LEGACY_NUM_BUFFER_ALIGNMENT_BYTES, nvshmem_align's alignment
_RC_PER_PE = 24  # deep_ep.Buffer(num_qps_per_rank=24) -> NVSHMEM_IBGDA_NUM_RC_PER_PE
_QP_DEPTH = 1024  # NVSHMEM_QP_DEPTH, DeepEP's default and NVSHMEM's (transport env_defs.h)
_NUM_DCI = 1  # NVSHMEM_IBGDA_NUM_DCI default (transport/common/env_defs.h)
_WQE_BB = _CQE = 64  # MLX5_SEND_WQE_BB; NVSHMEMI_IBGDA_CQE_SIZE (ibgda.cpp)
_DBR = 8  # IBGDA_DBRSIZE
_IBUF_SLOTS = 1024 + 1  # NVSHMEM_IBGDA_NUM_FETCH_SLOTS_PER_RC/_DCI default + 1 reserved slot
_IBUF_SLOT = 256  # NVSHMEMI_IBGDA_IBUF_SLOT_SIZE (nvshmem_common_ibgda.h)
_GPAGE_PAD = (1 << 16) - 1  # ibgda_gpu_mem_alloc: cudaMalloc(size + IBGDA_GPAGE_SIZE - 1)


def nvshmem_internal_bytes(pes: int) -> int:
    """Bytes of NVSHMEM's own symmetric-heap allocations on ``pes`` PEs: its ``heapextra``
    (``mem_heap.cpp`` ``set_heap_size_attr``: ``G_BUF_SIZE + nvshmemi_get_teams_mem_requirement()
    + G_COALESCING_BUF_SIZE + 24 · 512``), the teams' part with ``get_psync_len_per_team`` =
    2·2·SYNC_SIZE + 512 KiB / 8 + 10·SYNC_SIZE + 4·pes·2048 / 8 + 2·SYNC_SIZE + pes longs for
    each of the 7 teams (``team_internal.cpp``; the 128-byte NCCL id of NVSHMEM_USE_NCCL builds
    left out).

    >>> nvshmem_internal_bytes(8)  # 8,388,608 + 28,902,392 + 2,097,152 + 12,288
    39400440
    """
    psync = (2 * 2 + 10 + 2) * _SYNC_SIZE + _REDUCE_SCRATCH // 8 + 4 * pes * _FCOLLECT_LL // 8 + pes
    teams = (
        8 * _MAX_TEAMS * psync
        + 2 * _N_PSYNC_BYTES
        + 2 * 4
        + 2 * 8 * _MAX_TEAMS
        + (_TEAM_PE_INFO + _N_PSYNC_BYTES) * pes
    )
    return _G_BUF + teams + _G_COALESCING_BUF + 24 * _MALLOC_ALIGN


def nvshmem_heap_bytes(num_rdma_bytes: int, pes: int) -> int:
    """Bytes NVSHMEM's heap maps on each GPU for DeepEP's ``num_rdma_bytes`` on ``pes`` PEs: 0
    without an RDMA buffer (NVSHMEM is not initialised); one granule where NVSHMEM's own
    allocations (:func:`nvshmem_internal_bytes`) and the buffer with its 128-byte alignment fit
    in it; else that granule and the buffer's own, ``⌈(num_rdma_bytes + 128) / 512 MiB⌉``
    granules (the module docstring gives the code path).

    >>> nvshmem_heap_bytes(336_047_360, 8)  # DeepSeek-V3 at EP 64: one 512 MiB granule
    536870912
    >>> nvshmem_heap_bytes(500 << 20, 8) // (1 << 20)  # 37.6 + 500 MiB overflow the first
    1024
    """
    if num_rdma_bytes == 0:
        return 0
    size = num_rdma_bytes + _DEEPEP_ALIGN
    if nvshmem_internal_bytes(pes) + size <= NVSHMEM_GRANULE:
        return NVSHMEM_GRANULE
    return NVSHMEM_GRANULE * (1 + -(-size // NVSHMEM_GRANULE))


def ibgda_queue_bytes(pes: int) -> int:
    """GPU bytes NVSHMEM's IBGDA transport allocates for its queue pairs on ``pes`` PEs
    (NVIDIA/nvshmem v3.4.5 ``src/modules/transport/ibgda/ibgda.cpp``; NIC buffers in GPU
    memory, ``NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE = gpumem`` by default, doorbells rung by the
    GPU): ``ibgda_setup_rc_endpoints`` makes 24 RC QPs to each other PE and
    ``ibgda_setup_dci_endpoints`` one DCI; each QP has a send queue (1,024 WQE basic blocks of
    64 B, ``ibgda_create_qp_mobjects``) and its doorbell record (8 B), a send CQ (1,024 CQEs of
    64 B, ``ibgda_create_cq_mobjects``) and its doorbell record, and a fetch buffer (1,025 slots
    of 256 B, ``ibgda_rc_create_internal_buffer``): five ``ibgda_gpu_mem_alloc`` calls, each
    asking 64 KiB − 1 more to align to 64 KiB. DCTs, SRQs and receive CQs are verbs objects in
    host memory; the QPs' and CQs' device handles (184 and 72 B each) are left out.

    >>> ibgda_queue_bytes(8)  # 24 · 7 + 1 = 169 QPs of 721,163 B
    121876547
    """
    qps = _RC_PER_PE * (pes - 1) + _NUM_DCI
    queues = 2 * _QP_DEPTH * _WQE_BB + 2 * _DBR + _IBUF_SLOT * _IBUF_SLOTS
    return qps * (queues + 5 * _GPAGE_PAD)


def nvshmem_gpu_bytes(num_rdma_bytes: int, pes: int) -> int:
    """GPU bytes NVSHMEM takes for DeepEP's ``num_rdma_bytes`` on ``pes`` PEs: its heap's
    granules (:func:`nvshmem_heap_bytes`) and its IBGDA queue pairs outside the heap
    (:func:`ibgda_queue_bytes`); 0 without an RDMA buffer (NVSHMEM is not initialised).

    >>> nvshmem_gpu_bytes(336_047_360, 8)  # 536,870,912 + 121,876,547
    658747459
    """
    if num_rdma_bytes == 0:
        return 0
    return nvshmem_heap_bytes(num_rdma_bytes, pes) + ibgda_queue_bytes(pes)
