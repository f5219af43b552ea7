"""torchtitan's async TP holds PyTorch's symmetric-memory workspace for the run.

torchtitan turns on Inductor's micro-pipeline TP and ``enable_symm_mem_for_group`` for the tp
group (``parallelize_llama.py`` at 9dec370 and 820504e). The fused kernels take their
peer-to-peer buffers from ``get_symm_mem_workspace`` (``torch/distributed/_symmetric_memory/
__init__.py`` at 006b161f): one tensor per group, ``_SymmetricMemory.empty_strided_p2p``
(outside the caching allocator), grown to the largest request. ``_pipelined_produce_and_all2all``
(``fused_matmul_reduce_scatter``, the row-parallel GEMMs, output ``h`` wide) asks for
``out_chunks[0].numel() * element_size * 2``: two output chunks of ``S/tp`` rows; the all-gather
side (``_pipelined_multi_all_gather_and_consume``) asks only for the local shard, ``S/tp · h``
elements, half as much.

Llama 3 70B (h 8,192), s 8,192, b 1, cp 1, tp 8: S/tp = 8,192 / 8 = 1,024 rows; 2 · 1,024 ·
8,192 · 2 B = 33,554,432 B asked. PyTorch 2.13's CUDA symmetric-memory allocator adds the
rank's signal pad, ``default_signal_pad_size`` = 32 · 72 · 4 = 9,216 B
(``CUDASymmetricMemoryTypes.hpp``), and ``CUDASymmetricMemoryAllocator::alloc`` rounds the block
up to the 2 MiB allocation granule before ``cuMemCreate``: ⌈33,563,648 / 2,097,152⌉ = 17
granules, 35,651,584 B (35.65 MB), beside the NCCL communicators in both phases. The validation
rows' local batch 16 (torchtitan's 70B async-TP table): 536,870,912 + 9,216 B → 257 granules,
538,968,064 B. Without async TP (``none``) nothing is held; Megatron's ``full`` keeps its
userbuffers figure.
"""

from __future__ import annotations

from trainplan.optimizer.case import Case

BASE = {
    "model": "llama3-70b", "num_gpus": 64, "dp": 8, "tp": 8, "framework": "fsdp2",
    "zero_stage": 3, "recompute": "full", "micro_batch_size": 1, "global_batch_size": 64,
    "seq_len": 8192,
}  # fmt: skip


def _peak(**over):
    return Case.of(**{**BASE, **over}).evaluate().peak


def test_async_tp_workspace_70b_tp8():
    on, off = _peak(tp_comm_overlap="async-tp"), _peak(tp_comm_overlap="none")
    asked = 2 * (8192 // 8) * 8192 * 2
    assert asked == 33_554_432
    granules = -(-(asked + 32 * 72 * 4) // (2 << 20))
    assert granules == 17
    assert on.userbuffer_bytes == 17 * 2_097_152 == 35_651_584
    assert off.userbuffer_bytes == 0
    assert on.communicator_bytes - off.communicator_bytes == 35_651_584
    assert on.allocated_bytes == off.allocated_bytes  # outside the caching allocator


def test_async_tp_workspace_scales_with_the_micro_batch():
    on = _peak(tp_comm_overlap="async-tp", micro_batch_size=16, global_batch_size=128)
    assert -(-(16 * 33_554_432 + 9_216) // 2_097_152) == 257
    assert on.userbuffer_bytes == 257 * 2_097_152 == 538_968_064


def test_no_workspace_without_tp():
    assert _peak(tp_comm_overlap="async-tp", tp=1, dp=64).userbuffer_bytes == 0
