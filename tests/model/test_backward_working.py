"""The backward working set of one layer (model.backward_working), derived by hand from the
frameworks' backward code, and how it enters a stage's peak (model.terms.activations)."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.activations import ActivationContext
from trainplan.model.attention_core import attention_backward_workspace
from trainplan.model.backward_working import backward_working_bytes
from trainplan.model.layout import Layout
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activations import StageActivations, stage_activations
from trainplan.scenarios.catalogue import get_model

LLAMA_70B = get_model("llama3-70b").model.arch
LLAMA_8B = get_model("llama3-8b").model.arch


def _ctx(tp: int, gathered: bool = False) -> ActivationContext:
    return ActivationContext(
        seq_len=8192, cp=1, micro_batch_size=1, tp=tp, sequence_parallel=True,
        flash_attention=True, gathered_block_inputs=gathered,
    )  # fmt: skip


def test_llama3_70b_tp8_sp_megatron_by_hand():
    """Llama 3 70B (h 8,192, 64 heads, 8 K/V heads of 128, SwiGLU f 28,672), s 8,192, b 1,
    tp 8 with SP, Megatron-Core + Transformer Engine (cuDNN attention: no workspace counted).

    n = 2·8,192·8,192/8 = 16,777,216 (the layer's output gradient, sequence-sharded)
    H = 2·8,192·8,192 = 134,217,728 (one whole [S, h] tensor)
    f = 2·8,192·28,672/8 = 58,720,256; Q = O = 16,777,216; K + V = 2·2·8,192·1,024/8 = 4,194,304

    down projection (_Linear.backward, row-parallel): n + gathered grad_output H + dgrad f
        = 16,777,216 + 134,217,728 + 58,720,256 = 209,715,200
    SwiGLU (swiglu_back): n + f + 2f − f (down projection input released) = 134,217,728
    FC1 (_LayerNormLinear.backward): n + 2f + ln_out gathered again H + dgrad H + reduce-scatter
        output n − (f + 2f) = 16,777,216·2 + 117,440,512 + 2·134,217,728 − 176,160,768
        = 243,269,632
    output projection: n + H + O = 167,772,160
    attention core: n + dO + dQ + dK + dV = 16,777,216·3 + 4,194,304 = 54,525,952
    QKV: n + (Q + K + V) + H + H + n − (Q + K + V + O released)
        = 2·16,777,216 + 20,971,520 + 268,435,456 − 37,748,736 = 285,212,672 (the largest)
    """
    got = backward_working_bytes(LLAMA_70B, False, _ctx(8), "megatron", "cudnn")
    assert got == 285_212_672
    # Megatron-DeepSpeed's legacy layers gather and reduce-scatter the same tensors, but gather
    # the saved input again into the "mpu" buffer, held in both phases
    # (model.terms.persistent_buffers): not in the working set, so QKV's step is 285,212,672 −
    # 134,217,728 = 150,994,944 and FC1's 109,051,904; the down projection's 209,715,200 is the
    # largest (its gathered grad_output is an ordinary tensor, _gather_along_first_dim). Each
    # projection's step also holds the weight gradient it returns (layers.py
    # grad_weight = grad_output.t().matmul(total_input), one BF16 weight per rank): the down
    # projection's 2·(28,672/8)·8,192 = 58,720,256 -> 268,435,456 (FC1's 109,051,904 +
    # 2·8,192·7,168 = 226,492,416; QKV's 150,994,944 + 20,971,520; the output projection's
    # 167,772,160 + 16,777,216)
    ds = backward_working_bytes(LLAMA_70B, False, _ctx(8), "deepspeed", "cudnn")
    assert ds == 209_715_200 + 2 * (28_672 // 8) * 8192 == 268_435_456
    # FlashAttention-2's workspace (dq_accum fp32, softmax_d, dK/dV expanded to 8 heads)
    # goes to the core's step: 54,525,952 + 33,554,432 + 262,144 + 33,554,432 = 121,896,960
    fa2 = attention_backward_workspace(
        "flash-attention-2", Fraction(8192), Fraction(8), Fraction(1), 128, 2
    )
    assert fa2 == 33_554_432 + 262_144 + 33_554_432
    assert backward_working_bytes(LLAMA_70B, False, _ctx(8), "deepspeed", "flash-attention-2") == ds
    # the reference profile counts no working set (the conventions' steady state)
    assert backward_working_bytes(LLAMA_70B, False, _ctx(8), "textbook", "cudnn") == 0


def test_llama3_8b_tp2_sp_fsdp2_by_hand():
    """Llama 3 8B (h 4,096, 32 heads, 8 K/V heads of 128, f 14,336), s 8,192, b 1, tp 2 with
    SP under torchtitan's DTensor plan: the block inputs are kept gathered (no gather in
    backward, r = 0), and the separate projections (wq/wk/wv, w1/w3) leave two whole input
    gradients live at once (c = 2).

    n = 2·8,192·4,096/2 = 33,554,432; H = 67,108,864; f = 2·8,192·7,168 = 117,440,512
    Q = O = 33,554,432; K + V = 16,777,216 (8,388,608 each)

    down projection: n + H (all-gather of the Shard → Partial redistribution's gradient) + f
        = 218,103,808
    SwiGLU: n + f + 2f − f = 268,435,456 (the largest)
    w1/w3: n + 2f + 2H + n − 3f = 83,886,080
    output projection: n + H + O = 134,217,728
    core: n + O + Q + K + V = 117,440,512
    wq/wk/wv: n + Q + K + V + 2H + n − (Q + K + V + O) = 167,772,160
    """
    got = backward_working_bytes(LLAMA_8B, False, _ctx(2, gathered=True), "fsdp2", "cudnn")
    assert got == 268_435_456
    # with Megatron-Core's plan (r = 1, c = 1) the FC1 step is 33,554,432·2 + 234,881,024
    # + 2·67,108,864 − 352,321,536 = 83,886,080 and QKV 33,554,432·2 + 50,331,648 + 134,217,728
    # − 83,886,080 = 167,772,160: the SwiGLU step is the largest there too
    assert backward_working_bytes(LLAMA_8B, False, _ctx(2), "megatron", "cudnn") == got


def test_loss_stage_peak_is_the_larger_phase():
    """The loss's backward ends, and the output layer's tensors (its one micro-batch's share of
    embedding_bytes) are released, before any layer's backward: the peak holds the larger of
    the loss phase and the layers' backward phase, and the memory lines sum to it."""
    a = StageActivations(
        layers_bytes=Fraction(100), recompute_transient_bytes=Fraction(3),
        embedding_bytes=Fraction(8), microbatches_in_flight=Fraction(1),
        per_microbatch_bytes=Fraction(100), loss_transient_bytes=Fraction(5),
        backward_working_bytes=Fraction(4), output_layer_freed_bytes=Fraction(6),
    )  # fmt: skip
    assert a.layer_backward_bytes == 3 + 4 - 6
    assert a.total_bytes == 100 + max(1, 5) + 8
    assert a.loss_over_bytes == 4
    lines = a.recompute_transient_bytes + a.backward_working_bytes
    lines += a.loss_over_bytes - a.output_layer_freed_bytes
    assert a.layers_bytes + a.embedding_bytes + lines == a.total_bytes


def test_llama3_70b_tp8_pp2_stages():
    """Llama 3 70B, tp 8 SP, pp 2, no recomputation: stage 0 (no loss) holds the working set on
    top of its kept activations; stage 1 releases its output layer before the layers' backward,
    so there the loss phase decides."""
    training = TrainingSpec(seq_len=8192, global_batch_size=2048)
    layout = Layout(tp=8, pp=2, recompute="none", framework="megatron", sequence_parallel=True)
    first = stage_activations(LLAMA_70B, tuple(range(40)), 0, layout, training)
    assert first.backward_working_bytes == 285_212_672
    assert first.output_layer_freed_bytes == 0
    assert first.total_bytes == first.layers_bytes + first.embedding_bytes + 285_212_672
    last = stage_activations(LLAMA_70B, tuple(range(40, 80)), 1, layout, training)
    assert last.output_layer_freed_bytes > last.backward_working_bytes
    assert last.total_bytes == last.layers_bytes + last.embedding_bytes + last.loss_transient_bytes
