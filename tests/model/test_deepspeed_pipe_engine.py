"""DeepSpeed's pipeline engine and Megatron-DeepSpeed's "mpu" buffer, derived by hand from
``deepspeed/runtime/pipe/engine.py`` (``PipelineEngine._exec_forward_pass``,
``_exec_recv_activations``, ``_exec_recv_grads``, ``_exec_backward_pass``, ``_exec_send_grads``),
``deepspeed/runtime/utils.py`` (``PartitionedTensor``) and Megatron-DeepSpeed's
``megatron/core/tensor_parallel/layers.py`` (``GlobalMemoryBuffer``'s ``"mpu"`` tensor):
model/terms/pipeline_buffers.py and model/terms/persistent_buffers.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.model.test_persistent_buffers import BASE as MEGATRON_BASE
from tests.model.test_persistent_buffers import H100, LLAMA_70B, TRAINING
from trainplan.model.errors import LayoutError
from trainplan.model.estimate import stage_memory
from trainplan.model.layout import Layout, validate
from trainplan.model.model_spec import ModelSpec
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.scenarios.catalogue import get_model

BASE = replace(MEGATRON_BASE, framework="deepspeed")
"""Llama 3 70B at dp 1, tp 8 with sequence parallelism, pp 2, ZeRO-1, full recompute."""
H = 2 * 8192 * 8192
"""One whole [s, b, h] BF16 tensor of Llama 3 70B at s 8,192, b 1: 134,217,728 B."""
MASK = 8192 * 8192
"""Megatron-DeepSpeed's bool [1, 1, s, s] causal mask at s 8,192: 67,108,864 B, persistent with
pp > 1 (``args.attn_mask`` on every stage; on stage 0 also one clone per filled input buffer,
min(pp, m) of them: tests/model/test_deepspeed_causal_mask.py). The figures below add it to the
engine's buffers: 3·MASK on stage 0 (pp 2, m ≥ 2), MASK on the others."""


def _figures(layout: Layout) -> list[tuple[int, int, int]]:
    """(persistent buffers, kept pipeline tensors, micro-batches in flight) per stage."""
    out = []
    for st in stage_memory(LLAMA_70B, TRAINING, layout, device=H100):
        a = st.activations
        out.append(
            (
                int(st.persistent_buffers_bytes),
                int(a.pipeline_output_bytes),
                a.microbatches_in_flight,
            )
        )
    return out


def test_tp8_sp_partitioned_by_hand():
    """tp 8 with SP, pp 2 (m = 64 ≥ pp: 1F1B holds 2 micro-batches on stage 0, 1 on stage 1).
    The stage boundary tensor is [s/tp, b, h]: one = H/8 = 16,777,216 B; the engine partitions
    it over tp (``is_pipe_partitioned``): part = one/8 = 2,097,152 B.

    * the "mpu" buffer, H, on both stages, held for the whole run;
    * stage 0 keeps its gradient buffer (``_grad_layer_buf``, part) and, per micro-batch in
      flight, ``part.data()`` of its output (the output's data is replaced by zeros(1)):
      134,217,728 + 2,097,152 = 136,314,880 held; 2 × 2,097,152 = 4,194,304 kept;
    * stage 1 keeps ``pipe_recv_buf`` (part); its input buffer holds ``part_input.full()``, the
      tensor its first layer runs on: nothing kept beside the layers. As the last stage it
      also holds the fp32 logits of two micro-batches in ``pipe_buffers['outputs']`` (never
      emptied there; model.loss_memory.deepspeed_pipe_logits_bytes): 2·4·8,192·16,032 =
      1,050,673,152 B (V 128,256 over tp 8), 1,186,988,032 B held in all."""
    one, part = H // 8, H // 64
    assert (one, part) == (16_777_216, 2_097_152)
    logits = 2 * 4 * 8192 * 16_032
    assert _figures(BASE) == [(H + part + 3 * MASK, 2 * part, 2), (H + part + MASK + logits, 0, 1)]
    assert H + part == 136_314_880 and H + part + logits == 1_186_988_032


def test_tp1_whole_tensors_by_hand():
    """tp 1 (no model-parallel group: nothing partitioned, no SP, no "mpu" gather), pp 2:
    one = part = H.

    * stage 0: the gradient buffer H, held; per micro-batch in flight its whole output,
      2 × 134,217,728 = 268,435,456 kept;
    * stage 1: ``pipe_recv_buf`` H, held; per micro-batch in flight the received ``recvd``,
      beside the ``inputs.clone()`` the stage runs on (its first layer's saved input):
      134,217,728 kept; held beside ``pipe_recv_buf``, the fp32 logits of two micro-batches
      (m = 8), 2·4·8,192·128,256 = 8,405,385,216 B."""
    layout = replace(BASE, tp=1, dp=8, sequence_parallel=False)
    logits = 2 * 4 * 8192 * 128_256
    assert logits == 8_405_385_216
    assert _figures(layout) == [(H + 3 * MASK, 2 * H, 2), (H + MASK + logits, H, 1)]


def test_held_in_both_phases_and_none_without_pipeline():
    """The persistent buffers add to the optimizer step as to forward/backward
    (:func:`model.terms.peak.held_in_both_phases`); pp 1 leaves only the "mpu" buffer."""
    for st in stage_memory(LLAMA_70B, TRAINING, BASE, device=H100):
        held = st.persistent_buffers_bytes + st.communicator_bytes
        assert st.both_phases_bytes == held
        acts = st.activations.total_bytes
        assert (
            st.allocated_bytes
            == max(st.state.backward_bytes + acts, st.state.optimizer_step_bytes)
            + st.persistent_buffers_bytes
        )
    flat = replace(BASE, pp=1, dp=2)
    assert _figures(flat) == [(H, 0, 1)]


def test_moe_sends_whole_tensors_by_hand():
    """A mixture-of-experts model under Megatron-DeepSpeed: ``GPTModelPipe`` asserts pipe and
    gradient partitioning off at pp > 1 and tp > 1 (:func:`model.comm.pipe_partitioned`), so
    the engine keeps whole boundary tensors. Mixtral 8x7B (h 4,096), s 4,096, b 1, tp 2 with
    SP, pp 2: one = 2·4,096·4,096/2 = 16,777,216 B, the "mpu" buffer 33,554,432 B.

    * stage 0: "mpu" + gradient buffer one = 50,331,648 held; 2 outputs in flight,
      33,554,432 kept;
    * stage 1: "mpu" + ``pipe_recv_buf`` one held; the received copy beside the clone the
      stage runs on, 16,777,216 kept; and the fp32 logits of two micro-batches,
      2·4·4,096·16,000 = 524,288,000 B held (V 32,000 over tp 2)."""
    mixtral = get_model("mixtral-8x7b").model
    training = TrainingSpec(seq_len=4096, global_batch_size=64)
    layout = replace(BASE, tp=2)
    got = []
    for st in stage_memory(mixtral, training, layout, device=H100):
        got.append((int(st.persistent_buffers_bytes), int(st.activations.pipeline_output_bytes)))
    one, mpu = 2 * 4096 * 4096 // 2, 2 * 4096 * 4096
    mask = 4096 * 4096  # the bool causal mask: 3 on stage 0 (pp 2, m 64), 1 on stage 1
    logits = 2 * 4 * 4096 * 16_000
    assert got == [(mpu + one + 3 * mask, 2 * one), (mpu + one + mask + logits, one)]
    assert mpu + one == 50_331_648 and logits == 524_288_000


def test_mpu_buffer_where_a_gather_runs_by_hand():
    """Megatron-DeepSpeed gathers into ``"mpu"`` in ``ColumnParallelLinear`` (the layers' QKV and
    FC1) and in the output layer (``parallel_lm_logits`` / ``LMHeadPipe``); ``EmbeddingPipe``
    only scatters to the sequence-parallel region. Under DeepSpeed's split every stage holds a
    layer (fewer layers than stages are refused: ``partition_balanced`` then moves the output
    layer off the last stage), so every stage holds the "mpu" buffer.

    Two layers (h 256), s 512, b 1, BF16, tp 2 with SP, pp 2: one layer per stage. The "mpu"
    buffer is [s, b, h] = 2·512·256 = 262,144 B; the stage boundary tensor one = 262,144/2 =
    131,072 B, partitioned over tp: part = 65,536 B.

    * stage 0, the embedding and layer 0: "mpu" + the gradient buffer = 327,680;
    * stage 1, layer 1 and the output layer: "mpu" + ``pipe_recv_buf`` = 327,680, and the fp32
      logits of two micro-batches the engine keeps there, 2·4·512·500 = 2,048,000: 2,375,680."""
    arch = Architecture(
        num_layers=2, hidden_size=256, num_attention_heads=8, num_kv_heads=4,
        ffn_hidden_size=512, vocab_size=1000, mlp="swiglu", norm="rmsnorm",
    )  # fmt: skip
    model = ModelSpec(name="two-layers", arch=arch)
    training = TrainingSpec(seq_len=512, global_batch_size=16)
    with pytest.raises(LayoutError, match="under deepspeed; at most num_layers"):
        validate(replace(BASE, tp=2, pp=4), model, training)
    layout = replace(BASE, tp=2, pp=2)
    got = [
        int(st.persistent_buffers_bytes)
        for st in stage_memory(model, training, layout, device=H100)
    ]
    mpu, part = 2 * 512 * 256, 2 * 512 * 256 // 2 // 2
    assert (mpu, part) == (262_144, 65_536)
    # beside them the bool causal mask, 512² = 262,144 B: on stage 0 1 + min(pp 2, m 16) = 3
    mask = 512 * 512
    logits = 2 * 4 * 512 * 500
    engine = [g - m for g, m in zip(got, (3 * mask, mask), strict=True)]
    assert engine == [mpu + part, mpu + part + logits]
    assert engine == [327_680, 2_375_680]


def test_backward_rebuilds_output_and_gradient_whole_by_hand():
    """``_exec_backward_pass`` on stage 0 (not the last) with the tensors partitioned: the kept
    output's data becomes ``part_output.full()`` and the gradient passed to ``backward`` is
    ``part_grad.full()``, two boundary tensors one = H/8 = 16,777,216 B each, held through the
    stage's backward, beside every layer's working set; the last stage runs ``backward(loss)``
    and rebuilds nothing. The layers are the same kind on both stages, so stage 0's working set
    is stage 1's + 2·one = 33,554,432 B. tp 1 partitions nothing: the same on both."""
    work = [
        st.activations.backward_working_bytes
        for st in stage_memory(LLAMA_70B, TRAINING, BASE, device=H100)
    ]
    assert work[0] - work[1] == 2 * (H // 8) == 33_554_432
    whole = replace(BASE, tp=1, sequence_parallel=False)
    work1 = [
        st.activations.backward_working_bytes
        for st in stage_memory(LLAMA_70B, TRAINING, whole, device=H100)
    ]
    assert work1[0] == work1[1]
