"""Transformer Engine's userbuffers: the communication buffers of ``tp_comm_overlap = full``.

With ``--tp-comm-overlap`` Megatron-LM (``megatron/training/initialize.py``,
``_initialize_tp_communicators``, at d98e8a64dd) calls Transformer Engine's
``initialize_ub(shape=[s·b/cp, h], tp_size=tp, quantization_modes=[FP8 if --fp8 else NONE],
ub_cfgs={})`` once, before training: ``s`` the sequence length, ``b`` the micro-batch, ``cp``
the context-parallel degree, ``h`` the model width — the whole sequence of the micro-batch on
this rank, not divided by tp. Megatron-LM runs it only with sequence parallelism
(``arguments.py`` ``validate_args`` asserts it, and turns sequence parallelism off at tp 1), so
only at tp > 1.

Transformer Engine (``transformer_engine/pytorch/module/base.py`` ``initialize_ub``, at d0067d0da)
then makes one communicator per GEMM it can overlap, for every quantization mode given: the
default ``methods`` list twelve — ``qkv``, ``proj``, ``fc1``, ``fc2`` × ``fprop``, ``dgrad``,
``wgrad`` (``ring_exchange``: qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad; ``pipeline``:
proj_fprop, fc2_fprop; ``bulk``: qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad; ``external``:
proj_wgrad, fc2_wgrad), whatever the model (an empty ``ub_cfgs`` changes none of them). Each
``add_ub`` gives its buffer the dtype ``uint8`` when the mode is FP8 and the GEMM is one of the
eight all-gather overlaps (``layers_all_gather_overlap``: qkv_fprop, qkv_dgrad, proj_dgrad,
proj_wgrad, fc1_fprop, fc1_dgrad, fc2_dgrad, fc2_wgrad; ``fp8_buf``), else ``initialize_ub``'s
``dtype``, BF16 (Megatron-LM passes none).

Each communicator holds, for the whole run and outside PyTorch's caching allocator
(``transformer_engine/common/comm_gemm_overlap/``):

* its buffer of ``shape`` (:func:`userbuffer_bytes`): ``comm_gemm_overlap.cpp``
  ``CommOverlapBase::initialize`` registers ``shape[0]·shape[1]`` elements;
  ``CommOverlapP2PBase::initialize`` the same for an all-gather (``tp`` chunks of
  ``shape[0]/tp`` rows) and ``(2·tp − 1)/tp`` of it for a reduce-scatter — none of the default
  ``ring_exchange`` GEMMs is a reduce-scatter. ``userbuffers/userbuffers-host.cpp``
  ``register_user_buffer_collective`` allocates it (``cuMemCreate`` with CUDA multicast,
  ``cudaMalloc`` with CUDA IPC);
* its own userbuffers communicator (``CommOverlapCore``'s constructor calls
  ``create_communicator_grouped2``), which registers region 0, ``LOCALSIZE`` =
  4·(``NVTE_REG0_OFFSET`` + ``NVTE_REG0_FLAGS``) = 4·(14,400 + 791,552) = 3,223,808 B
  (``userbuffers.h``: ``NVTE_MAX_REGIONS`` 32, ``NVTE_MAX_NVLINK`` 32, ``NVTE_MAX_SMS`` 32,
  ``NVTE_MAX_OPS`` 32, ``NVTE_MAX_PEERS`` 8192, five ``userbuffers_op_types``,
  ``NVTE_REG0_COMMBUFFER`` 0), and ``cudaMalloc`` s two GPU pages of flags (2·65,536 B):
  :data:`COMMUNICATOR_BYTES`.

So one GPU holds ``12·S·h·2`` bytes in BF16 and ``S·h·(8·1 + 4·2)`` under FP8 (``S = s·b/cp``),
plus 12 × :data:`COMMUNICATOR_BYTES`, on every pipeline stage, in both phases of the step
(:func:`model.terms.peak.fit_total`, with the communicators).

Not counted: the rounding of each allocation up to the driver's granularity (the multicast
granularity, the device's), the ``send_id``/``recv_id`` arrays (``4·33`` B per rank of the
job), and the multicast object's address range (``MULTICAST_GB_TOTAL``, virtual: the buffers
bound to it are its physical memory). Not subtracted: the caching allocator's tensors the
buffers could stand in for. The forward's gathered inputs are transient and the backward's
(:mod:`model.backward_working`) stay allocated where the code shows it (the ``external``
weight-gradient GEMMs receive a copy of the all-gathered gradient, ``B_copy`` in
``CommOverlapP2PBase``), so the working set is left as it is: at most its gathered ``r·H``,
``[sp]·H`` terms would be over.

Transformer Engine's extra cuBLAS workspaces (``transformer_engine/pytorch/cpp_extensions/gemm.py``
``get_cublas_workspace``, an ``lru_cache``: allocated at the first such GEMM, held in the caching
allocator for the whole run, beside the one plain workspace the runtime reserve counts,
``model.frameworks.CUBLAS_WORKSPACE_BYTES``): every userbuffers GEMM (``general_gemm`` with
``ub``) takes ``_NUM_MAX_UB_STREAMS`` = 3 workspaces in one tensor, and Transformer Engine's
``GroupedLinear`` (``general_grouped_gemm``, ``grouped_gemm=True``; Megatron-LM's grouped MoE
experts, ``TEGroupedMLP``) one per compute stream, ``tex.get_num_cublas_streams()`` =
``nvte_get_num_compute_streams`` = 4 (``transformer_engine/common/util/multi_stream.cpp``).
Each is ``get_cublas_workspace_size_bytes()``: 32 MiB + 1 KiB from compute capability 9 on,
whatever the precision (:data:`TE_WORKSPACE_BYTES`; the 4 MiB of older parts is not modelled:
the reserve assumes Hopper too). :func:`te_workspace_bytes`.

Profiles: ``megatron`` only. Megatron-DeepSpeed has no userbuffers (no ``initialize_ub`` call at
f4157bea): ``deepspeed`` and ``fsdp2`` refuse ``full``; ``textbook`` counts no runtime buffer.

**torchtitan's async TP** (``tp_comm_overlap = async-tp``, ``fsdp2`` only) has a buffer of the
same kind. torchtitan turns on Inductor's micro-pipeline TP pass and symmetric memory for the tp
group (``enable_symm_mem_for_group``: ``parallelize_llama.py`` at 9dec370 and 820504e,
``distributed/compile.py`` at b5bcd76c). The fused kernels the pass emits take their
peer-to-peer buffer from one workspace per process group, PyTorch's ``get_symm_mem_workspace``
(``torch/distributed/_symmetric_memory/__init__.py`` at 006b161f; torch 2.13 the same): a
module-level tensor from ``_SymmetricMemory.empty_strided_p2p`` (outside the caching
allocator), grown to the largest request and kept for the run. The requests:

* ``fused_all_gather_matmul`` (column-parallel layers; ``_pipelined_multi_all_gather_and_consume``):
  the local shard, ``S/tp · h`` elements (``S = s·b/cp``) in the input's dtype;
* ``fused_matmul_reduce_scatter`` (row-parallel layers, whose output is ``h`` wide;
  ``_pipelined_produce_and_all2all``): two output chunks, ``2 · S/tp · h`` elements in the
  output's dtype (``out_chunks[0].numel() * element_size * 2``), the larger.

So the workspace asks for ``2 · S/tp · h · a`` bytes (``a`` the activations' bytes, 2 in BF16;
FP8 GEMMs return BF16). PyTorch's CUDA symmetric-memory allocator (its default backend,
``TORCH_SYMMMEM`` unset) puts the rank's signal pad in the same block,
``default_signal_pad_size`` = 32 blocks × 72 ranks × 4 B = 9,216 B
(``torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryTypes.hpp`` in the 2.13.0 wheel), and
``CUDASymmetricMemoryAllocator::alloc`` (``CUDASymmetricMemory.cu``) rounds the block up to
``cuMemGetAllocationGranularity`` RECOMMENDED (2 MiB, :data:`model.nvls.NVLS_ALLOCATION_GRANULE`)
before ``cuMemCreate``: :func:`async_tp_workspace_bytes`, held in both phases beside the NCCL
communicators. The multimem and native kernels (a global M of at most 4,096 tokens, or an
environment variable) are not modelled. The fused reduce-scatter's ``stacked_partials`` (the
whole ``[S, h]`` partial products, in the caching allocator while the kernel runs) is the
tensor a plain reduce-scatter reduces, the whole input gradient
:mod:`model.backward_working` already holds at the QKV projection's step; nothing more.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import TE_WORKSPACE_BYTES, Framework
from trainplan.model.nvls import NVLS_ALLOCATION_GRANULE
from trainplan.model.op_time import TpOverlap, tp_overlap_for
from trainplan.model.precision import Precision
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.xp import exact, where

__all__ = [
    "UB_GEMMS",
    "UB_ALL_GATHER_GEMMS",
    "COMMUNICATOR_BYTES",
    "userbuffer_bytes",
    "TE_WORKSPACE_BYTES",
    "te_workspace_bytes",
    "te_workspace_term",
    "userbuffers_term",
    "SYMM_MEM_P2P_BUFFERS",
    "SYMM_MEM_SIGNAL_PAD_BYTES",
    "async_tp_workspace_bytes",
]

UB_GEMMS = 12
"""Communicators ``initialize_ub`` makes per quantization mode: its default ``methods``
(4 ring-exchange, 2 pipeline, 4 bulk, 2 external GEMMs)."""
UB_ALL_GATHER_GEMMS = 8
"""Of them, ``layers_all_gather_overlap``: the buffers in ``uint8`` under an FP8 mode."""
REGION0_BYTES = 4 * ((2 * 32) * 32 + (2 * 32 * 32 + 32) * 2 + 8192 + 1024 * 5 + 8192 * 32 * 3)
"""``LOCALSIZE`` of ``userbuffers-host.cpp`` ``create_communicator_grouped2``: 3,223,808 B."""
COMMUNICATOR_BYTES = REGION0_BYTES + 2 * 65536
"""Bytes each userbuffers communicator holds besides its buffer: region 0 and two GPU pages of
flags (``flags_baseptr``, ``2 * GPU_PAGE_SIZE``): 3,354,880 B."""
BUFFER_DTYPE_BYTES = 2
"""``initialize_ub``'s ``dtype`` default, ``torch.bfloat16``."""


def userbuffer_bytes(rows: Any, hidden: int, fp8: bool) -> Any:
    """Bytes Transformer Engine's twelve userbuffers communicators hold on one GPU: buffers of
    ``rows`` (``s·b/cp``) × ``hidden`` elements, 1 B for the eight all-gather ones under FP8
    (``fp8``) and 2 B otherwise, plus :data:`COMMUNICATOR_BYTES` each. Exact for ints and
    Fractions; element-wise for arrays.

    Examples
    --------
    Llama 3 70B (h 8192), s 8192, b 1: BF16 12·2·8192² + 12·3,354,880 = 1,650,871,296 B; FP8
    (8·1 + 4·2)·8192² + the same = 1,114,000,384 B.

    >>> userbuffer_bytes(8192, 8192, False), userbuffer_bytes(8192, 8192, True)
    (1650871296, 1114000384)
    """
    gathers = 1 if fp8 else BUFFER_DTYPE_BYTES
    per_element = UB_ALL_GATHER_GEMMS * gathers + (UB_GEMMS - UB_ALL_GATHER_GEMMS) * 2
    return rows * hidden * per_element + UB_GEMMS * COMMUNICATOR_BYTES


SYMM_MEM_P2P_BUFFERS = 2
"""``_pipelined_produce_and_all2all``'s two local peer-to-peer buffers, one output chunk each: a
peer reads step i's chunk from one while the next is computed into the other."""


SYMM_MEM_SIGNAL_PAD_BYTES = 32 * 72 * 4
"""``default_signal_pad_size`` (``symm_max_nblocks`` × ``max_cuda_p2p_domain_size`` × 4 B,
``CUDASymmetricMemoryTypes.hpp``, PyTorch 2.13.0): the signal pad in each block."""


def async_tp_workspace_bytes(rows: Any, hidden: int, tp: Any, out_bytes: int = 2) -> Any:
    """Bytes of PyTorch's symmetric-memory workspace for torchtitan's async TP on one GPU
    (module docstring): :data:`SYMM_MEM_P2P_BUFFERS` output chunks of a row-parallel GEMM,
    ``⌈rows/tp⌉ × hidden`` elements of ``out_bytes`` each (``torch.chunk``'s first chunk), and the
    :data:`SYMM_MEM_SIGNAL_PAD_BYTES` signal pad, rounded up to the 2 MiB allocation granule.
    Exact for ints and Fractions; element-wise for arrays.

    Examples
    --------
    Llama 3 70B (h 8192), s 8192, b 1, tp 8: 2 · 1,024 · 8,192 · 2 = 33,554,432 B asked, + 9,216
    B of signal pad, rounded up to 17 × 2 MiB = 35,651,584 B; at b 16, 536,870,912 + 9,216 B
    → 257 × 2 MiB = 538,968,064 B.

    >>> async_tp_workspace_bytes(8192, 8192, 8), async_tp_workspace_bytes(16 * 8192, 8192, 8)
    (35651584, 538968064)
    """
    asked = SYMM_MEM_P2P_BUFFERS * (-(-rows // tp)) * hidden * out_bytes
    granules = -(-(asked + SYMM_MEM_SIGNAL_PAD_BYTES) // NVLS_ALLOCATION_GRANULE)
    return granules * NVLS_ALLOCATION_GRANULE


UB_WORKSPACES = 3
"""``_NUM_MAX_UB_STREAMS``: workspaces of the userbuffers GEMMs' one cached tensor."""
GROUPED_WORKSPACES = 4
"""``nvte_get_num_compute_streams`` (``common/util/multi_stream.cpp``): one workspace each for
``general_grouped_gemm``."""


def te_workspace_bytes(ub: bool, grouped: bool) -> int:
    """Bytes of Transformer Engine's cuBLAS workspaces beyond the plain one (module docstring):
    3 × :data:`TE_WORKSPACE_BYTES` with userbuffers (``ub``), 4 × with grouped expert GEMMs
    (``grouped``).

    >>> te_workspace_bytes(True, False), te_workspace_bytes(False, True), te_workspace_bytes(True, True)
    (100666368, 134221824, 234888192)
    """
    return (UB_WORKSPACES * ub + GROUPED_WORKSPACES * grouped) * TE_WORKSPACE_BYTES


def userbuffers_term(c: Context, f: Fields) -> Any:
    """Bytes of the tensor-parallel overlap's communication buffers on one GPU of stage
    ``f.stage`` (see the module docstring): Transformer Engine's userbuffers,
    :func:`userbuffer_bytes` of ``s·b/cp`` rows, under ``megatron`` with ``tp_comm_overlap =
    full`` at tp > 1; PyTorch's symmetric-memory workspace, :func:`async_tp_workspace_bytes`,
    under ``fsdp2`` with ``async-tp`` at tp > 1 with sequence parallelism (the fused collectives
    the pass makes of its all-gathers and reduce-scatters); on every stage; else 0 (and 0 for a
    size-only model). Outside the caching allocator, held in both phases, like NCCL's
    communicators (the userbuffers GEMMs' cuBLAS workspaces are in the allocator:
    :func:`te_workspace_term`).

    Scope: tp, cp, micro_batch_size, sequence_parallel, framework, pp (the stage axis).
    Control: pp, framework.
    """
    arch = c.model.arch
    if arch is None:
        return 0
    mode = tp_overlap_for(f.framework, c.options.tp_comm_overlap)
    rows = exact(c.training.seq_len) * f.micro_batch_size / f.cp
    if Framework(f.framework) is Framework.FSDP2 and mode is TpOverlap.ASYNC_TP:
        a = c.training.activation_bytes
        return where(
            f.sp & (f.tp > 1), async_tp_workspace_bytes(rows, arch.hidden_size, f.tp, a), 0
        )
    if Framework(f.framework) is not Framework.MEGATRON or mode is not TpOverlap.FULL:
        return 0
    fp8 = Precision(c.training.precision) is Precision.FP8
    return where(f.tp > 1, userbuffer_bytes(rows, arch.hidden_size, fp8), 0)


def te_workspace_term(c: Context, f: Fields) -> Any:
    """Bytes of Transformer Engine's extra cuBLAS workspaces on one GPU of stage ``f.stage``
    (module docstring, :func:`te_workspace_bytes`) under ``megatron``: the userbuffers GEMMs'
    three where :func:`userbuffers_term` holds buffers (``tp_comm_overlap = full``, tp > 1), the
    grouped expert GEMMs' four for a model with MoE layers; else 0 (and 0 for a size-only
    model). In the caching allocator, held for the whole run in both phases: read by
    :func:`model.terms.persistent_buffers.persistent_buffers_term`.

    Scope: tp, framework. Control: framework.
    """
    arch = c.model.arch
    if arch is None or Framework(f.framework) is not Framework.MEGATRON:
        return 0
    grouped = te_workspace_bytes(False, arch.moe is not None)
    if tp_overlap_for(f.framework, c.options.tp_comm_overlap) is not TpOverlap.FULL:
        return grouped
    return where(f.tp > 1, te_workspace_bytes(True, False), 0) + grouped
