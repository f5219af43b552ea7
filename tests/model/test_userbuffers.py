"""Transformer Engine's userbuffers under ``tp_comm_overlap = full`` (model/terms/userbuffers.py),
derived by hand from Megatron-LM's ``_initialize_tp_communicators`` (``training/initialize.py``:
``initialize_ub(shape=[s·b/cp, h], quantization_modes=[FP8 if --fp8 else NONE])``) and
Transformer Engine's ``module/base.py`` ``initialize_ub``/``add_ub`` (twelve communicators, the
eight all-gather ones ``uint8`` under FP8) with ``comm_gemm_overlap.cpp``
``CommOverlapBase::initialize``/``CommOverlapP2PBase::initialize`` (one ``shape`` buffer each) and
``userbuffers-host.cpp`` ``create_communicator_grouped2`` (region 0 and the flags): how they
enter the fit figure in both phases, the search's answer and the launch line."""

from __future__ import annotations

from dataclasses import replace

from trainplan.model.estimate import stage_memory
from trainplan.model.layout import Layout, Recompute
from trainplan.model.op_time import TpOverlap
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.peak import fit_total
from trainplan.model.timing import CostOptions
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

LLAMA_70B = get_model("llama3-70b").model
TRAINING = TrainingSpec(seq_len=8192, global_batch_size=64)
FP8 = replace(TRAINING, precision="fp8")
H100 = get_accelerator("H100-SXM")
FULL = CostOptions(tp_comm_overlap=TpOverlap.FULL)
BASE = Layout(
    dp=1, tp=8, pp=2, cp=1, micro_batch_size=1, zero_stage=1, recompute=Recompute.FULL,
    sequence_parallel=True, framework="megatron",
)  # fmt: skip

REGION0 = 4 * (14_400 + 791_552)
"""``LOCALSIZE`` = 4·(NVTE_REG0_OFFSET + NVTE_REG0_FLAGS): REG0_OFFSET = 2·32·32 (regions ×
NVLink peers) + 2·(2·32·32 + 32) (SINGLENODE: 2·MAX_NVLINK·MAX_SMS + MAX_OPS) + 8192 (MAX_PEERS)
= 14,400; REG0_FLAGS = 1024·5 (op types) + 8192·32·3 = 791,552."""
PER_COMMUNICATOR = REGION0 + 2 * 65_536  # and two 64 KiB GPU pages of flags
ELEMENTS = 8192 * 8192  # shape [s·b/cp, h] = [8,192, 8,192]


def _ub(layout: Layout, training: TrainingSpec = TRAINING, options=FULL) -> list[int]:
    stages = stage_memory(LLAMA_70B, training, layout, device=H100, options=options)
    return [int(s.userbuffer_bytes) for s in stages]


def test_llama3_70b_tp8_by_hand():
    """BF16: twelve [8,192, 8,192] BF16 buffers, 12·2·67,108,864 = 1,610,612,736 B, and twelve
    communicators of 3,223,808 + 131,072 = 3,354,880 B: 1,650,871,296 B on every stage.
    FP8: the eight all-gather buffers at 1 B, 8·1 + 4·2 = 16 B per element:
    1,073,741,824 + 40,258,560 = 1,114,000,384 B."""
    assert REGION0 == 3_223_808 and PER_COMMUNICATOR == 3_354_880
    bf16 = 12 * 2 * ELEMENTS + 12 * PER_COMMUNICATOR
    assert bf16 == 1_650_871_296
    assert _ub(BASE) == [bf16, bf16]
    fp8 = (8 * 1 + 4 * 2) * ELEMENTS + 12 * PER_COMMUNICATOR
    assert fp8 == 1_114_000_384
    assert _ub(BASE, FP8) == [fp8, fp8]


def test_shape_follows_micro_batch_and_cp_not_tp():
    buffers = 12 * 2 * ELEMENTS
    fixed = 12 * PER_COMMUNICATOR
    assert _ub(replace(BASE, micro_batch_size=2))[0] == 2 * buffers + fixed  # s·b rows
    assert _ub(replace(BASE, cp=2))[0] == buffers // 2 + fixed  # s·b/cp rows
    assert _ub(replace(BASE, tp=4))[0] == buffers + fixed  # the gathered shape: not ÷ tp


def test_zero_without_userbuffers():
    # the default overlap (async) and none make no userbuffers
    assert _ub(BASE, options=CostOptions()) == [0, 0]
    assert _ub(BASE, options=CostOptions(tp_comm_overlap=TpOverlap.NONE)) == [0, 0]
    # tp 1: Megatron-LM turns sequence parallelism off and refuses --tp-comm-overlap
    assert _ub(replace(BASE, tp=1, sequence_parallel=False)) == [0, 0]
    # Megatron-DeepSpeed has no initialize_ub; the textbook counts no runtime buffer
    for fw in ("deepspeed", "textbook"):
        assert _ub(replace(BASE, framework=fw)) == [0, 0]


def test_outside_the_allocator_in_both_phases():
    """The buffers join the communicators: the fit figure (:func:`fit_total`) and both phases
    hold them; the allocated peak (``torch.cuda.max_memory_allocated``) does not. The
    userbuffers GEMMs' three cuBLAS workspaces (``get_cublas_workspace(ub=True)``,
    3 × 33,555,456 = 100,666,368 B) are in the allocator, held in both phases."""
    plain = stage_memory(LLAMA_70B, TRAINING, BASE, device=H100)
    full = stage_memory(LLAMA_70B, TRAINING, BASE, device=H100, options=FULL)
    ub, ws = 1_650_871_296, 3 * (32 * 2**20 + 1024)
    for a, b in zip(plain, full, strict=True):
        assert b.allocated_bytes == a.allocated_bytes + ws
        assert b.communicator_bytes == a.communicator_bytes + ub
        assert b.total_bytes == a.total_bytes + ub + ws
        assert b.reserved_total_bytes == fit_total(
            a.allocated_bytes + ws, b.stream_pool_bytes, a.communicator_bytes + ub
        )
        assert b.backward_bytes == a.backward_bytes + ub + ws
        assert b.both_phases_bytes == a.both_phases_bytes + ub + ws


def test_the_search_answer_that_did_not_fit():
    """``trainplan search --model llama3-70b --gpus 32 --gpu H100-SXM --set
    tp_comm_overlap=full`` answered dp 2 × tp 8 × pp 2 interleaved v 2, b 1, no recompute, whose
    fit figure was 82.98 of 83.21 GB without the userbuffers: with them (1.65 GB) it is over by
    1.42 GB, so the search must not answer it."""
    case = Case.of("llama3-70b", "H100-SXM", num_gpus=32, tp_comm_overlap="full")
    lay = Layout(dp=2, tp=8, pp=2, schedule="interleaved", virtual_stages=2, zero_stage=1,
                 framework="megatron")  # fmt: skip
    est = case.evaluate(lay)
    assert max(int(s.userbuffer_bytes) for s in est.stages) == 1_650_871_296
    assert not est.fits
