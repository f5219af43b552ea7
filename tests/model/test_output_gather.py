"""The output layer's persistent all-gather buffer (model/terms/output_gather.py), derived by hand
from Megatron-Core's ``LinearWithGradAccumulationAndAsyncCommunication.forward`` and
``GlobalMemoryBuffer.get_tensor``, and how it enters a stage's peak in both phases."""

from __future__ import annotations

from dataclasses import replace

from trainplan.model.estimate import stage_memory
from trainplan.model.layout import Layout, Recompute
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.output_gather import output_gather_bytes
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

LLAMA_70B = get_model("llama3-70b").model
TRAINING = TrainingSpec(seq_len=8192, global_batch_size=64)
H100 = get_accelerator("H100-SXM")
BASE = Layout(
    dp=1, tp=8, pp=2, cp=1, micro_batch_size=1, zero_stage=1, recompute=Recompute.FULL,
    sequence_parallel=True, framework="megatron",
)  # fmt: skip


def _held(layout: Layout, training: TrainingSpec = TRAINING) -> list[int]:
    stages = stage_memory(LLAMA_70B, training, layout, device=H100)
    return [int(s.output_gather_bytes) for s in stages]


def test_llama3_70b_tp8_by_hand():
    """Llama 3 70B (h 8,192), s 8,192, b 1, BF16, tp 8 with SP: the output layer all-gathers its
    [8,192/8, 1, 8,192] input into the "mpu" buffer, [8,192, 1, 8,192] BF16 =
    2·8,192·8,192 = 134,217,728 B, on the last stage only."""
    assert output_gather_bytes(2, 1, 8192, 8192) == 2 * 8192 * 8192 == 134_217_728
    assert _held(BASE) == [0, 134_217_728]


def test_scales_with_micro_batch_and_cp():
    # b 2: twice; cp 2: the buffer holds this rank's s/cp tokens, half
    assert _held(replace(BASE, micro_batch_size=2)) == [0, 2 * 134_217_728]
    assert _held(replace(BASE, cp=2)) == [0, 134_217_728 // 2]


def test_zero_without_the_gather_or_under_other_profiles():
    # no sequence parallelism or tp 1: the output layer's input is not gathered
    assert _held(replace(BASE, sequence_parallel=False)) == [0, 0]
    assert _held(replace(BASE, tp=1, sequence_parallel=False)) == [0, 0]
    # deepspeed: the same "mpu" buffer is its layers' re-gathered input (backward working set);
    # textbook counts no runtime buffer
    for fw in ("deepspeed", "textbook"):
        assert _held(replace(BASE, framework=fw)) == [0, 0]


def test_held_in_both_phases():
    """The buffer is never freed: it adds to the forward/backward peak and to the optimizer
    step alike, and sits in the allocated bytes (the caching allocator holds it)."""
    with_sp = stage_memory(LLAMA_70B, TRAINING, BASE, device=H100)[-1]
    st = with_sp.state
    acts = with_sp.activations.total_bytes
    expected = max(st.backward_bytes + acts, st.optimizer_step_bytes) + 134_217_728
    assert with_sp.allocated_bytes == expected
    assert with_sp.total_bytes == expected + with_sp.communicator_bytes
