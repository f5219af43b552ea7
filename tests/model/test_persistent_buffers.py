"""The output layer's persistent all-gather buffer (model/terms/persistent_buffers.py), derived by hand
from Megatron-Core's ``LinearWithGradAccumulationAndAsyncCommunication.forward`` and
``GlobalMemoryBuffer.get_tensor``, and how it enters a stage's peak in both phases."""

from __future__ import annotations

import math
from dataclasses import replace

from trainplan.model.estimate import stage_memory
from trainplan.model.layout import Layout, Recompute
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.persistent_buffers import mpu_buffer_bytes
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

LLAMA_70B = get_model("llama3-70b").model
TRAINING = TrainingSpec(seq_len=8192, global_batch_size=64)
H100 = get_accelerator("H100-SXM")
BASE = Layout(
    dp=1, tp=8, pp=2, cp=1, micro_batch_size=1, zero_stage=1, recompute=Recompute.FULL,
    sequence_parallel=True, framework="megatron",
)  # fmt: skip
LAYER, OUTPUT = 213_909_504, 264_241_152
"""Beside the buffer, Transformer Engine's cached placeholder weight gradients at tp 8 (derived
in tests/model/test_dummy_wgrads.py): the layers' four shapes on every stage, 213,909,504 B,
and the output layer's [16,128, 8,192] BF16 on the last, 264,241,152 B."""
DUMMY = [LAYER, LAYER + OUTPUT]


def _held(layout: Layout, training: TrainingSpec = TRAINING) -> list[int]:
    stages = stage_memory(LLAMA_70B, training, layout, device=H100)
    return [int(s.persistent_buffers_bytes) for s in stages]


def test_llama3_70b_tp8_by_hand():
    """Llama 3 70B (h 8,192), s 8,192, b 1, BF16, tp 8 with SP: the output layer all-gathers its
    [8,192/8, 1, 8,192] input into the "mpu" buffer, [8,192, 1, 8,192] BF16 =
    2·8,192·8,192 = 134,217,728 B, on the last stage only."""
    assert mpu_buffer_bytes(2, 1, 8192, 8192) == 2 * 8192 * 8192 == 134_217_728
    assert _held(BASE) == [DUMMY[0], 134_217_728 + DUMMY[1]]


def test_scales_with_micro_batch_and_cp():
    # b 2: twice; cp 2: the buffer holds this rank's s/cp tokens, half
    assert _held(replace(BASE, micro_batch_size=2)) == [DUMMY[0], 2 * 134_217_728 + DUMMY[1]]
    assert _held(replace(BASE, cp=2)) == [DUMMY[0], 134_217_728 // 2 + DUMMY[1]]


def test_zero_without_the_gather_or_under_other_profiles():
    # no sequence parallelism or tp 1: the output layer's input is not gathered
    # (the placeholders alone: at tp 1 QKV [10,240, 8,192], proj [8,192, 8,192], FC1 [57,344,
    # 8,192], FC2 [8,192, 28,672], 2·8,192·104,448 = 1,711,276,032 B, and the output layer
    # [128,256, 8,192], 2,101,346,304 B, on the last stage)
    assert _held(replace(BASE, sequence_parallel=False)) == DUMMY
    tp1 = [1_711_276_032, 1_711_276_032 + 2_101_346_304]
    assert 2 * 8192 * (10240 + 8192 + 57344 + 28672) == tp1[0]
    assert _held(replace(BASE, tp=1, sequence_parallel=False)) == tp1
    # textbook counts no runtime buffer (deepspeed's: tests/model/test_deepspeed_pipe_engine.py)
    assert _held(replace(BASE, framework="textbook")) == [0, 0]


def test_held_in_both_phases():
    """The buffer is never freed: it adds to the forward/backward peak and to the optimizer
    step alike, and sits in the allocated bytes (the caching allocator holds it)."""
    with_sp = stage_memory(LLAMA_70B, TRAINING, BASE, device=H100)[-1]
    st = with_sp.state
    acts = with_sp.activations.total_bytes
    expected = max(st.backward_bytes + acts, st.optimizer_step_bytes) + 134_217_728 + DUMMY[1]
    assert with_sp.allocated_bytes == expected
    assert with_sp.total_bytes == expected + with_sp.communicator_bytes


def test_one_figure_held_in_both_phases_for_the_evaluator_tables_and_check():
    """What a stage holds in both phases beside its state and activations is one figure,
    :func:`model.terms.peak.held_in_both_phases`: the output layer's buffer (134,217,728 B on the
    last stage, above) and Transformer Engine's placeholder weight gradients (DUMMY) plus NCCL's
    communicators. The evaluator's forward/backward bytes, the
    search tables' state columns (:func:`optimizer.tables.fill_job_rows`) and the search's
    check against the evaluator (:func:`optimizer.search.check_against_evaluate`) read it:
    Llama 3 70B on 16 H100, dp 1, tp 8 with SP, pp 2, b 1, 1F1B, ZeRO-1, full recompute."""
    from trainplan.model.terms.peak import held_in_both_phases
    from trainplan.optimizer.case import Case
    from trainplan.optimizer.problem import Job, Problem
    from trainplan.optimizer.search import check_against_evaluate
    from trainplan.optimizer.space import SearchSpace
    from trainplan.optimizer.tables import build_tables

    first, last = stage_memory(LLAMA_70B, TRAINING, BASE, device=H100)
    assert last.both_phases_bytes == 134_217_728 + DUMMY[1] + last.communicator_bytes
    assert first.both_phases_bytes == DUMMY[0] + first.communicator_bytes
    assert first.communicator_bytes > 0
    persistent = 134_217_728 + DUMMY[1]
    assert held_in_both_phases(persistent, last.communicator_bytes) == last.both_phases_bytes
    acts = last.activations.total_bytes
    assert last.backward_bytes == last.state.backward_bytes + acts + last.both_phases_bytes
    case = Case.of("llama3-70b", "H100-SXM", global_batch_size=64, seq_len=8192)
    space = SearchSpace(num_gpus=16, tp=(8,), pp=(2,), micro_batch_size=(1,), zero_stages=(1,),
                        recomputes=(Recompute.FULL,), virtual_stages=(1,))  # fmt: skip
    tables = build_tables(Problem(jobs=(Job(case, 16, "t"),), space=space))
    s = next(i for i, sh in enumerate(tables.shapes)
             if (sh.dp, sh.tp, sh.pp, str(sh.schedule)) == (1, 8, 2, "1f1b"))  # fmt: skip
    est = check_against_evaluate(tables, (s, 0, 0))  # raises on any term's difference
    for st in est.stages:
        held = st.both_phases_bytes
        assert int(tables.state_ceil[s, 0, 0, st.stage]) == math.ceil(
            st.state.backward_bytes + held
        )
        assert int(tables.step_ceil[s, 0, 0, st.stage]) == math.ceil(
            st.state.optimizer_step_bytes + held
        )
    assert est.stages[1].both_phases_bytes - est.stages[1].communicator_bytes == persistent
