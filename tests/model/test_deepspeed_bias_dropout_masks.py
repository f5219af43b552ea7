"""Megatron-DeepSpeed's TorchScript bias-dropout-add keeps a bool mask per residual add at
dropout 0 (model.activation_rows.BIAS_DROPOUT_MASKS): deepspeedai/Megatron-DeepSpeed 6acc370a
``megatron/model/transformer.py`` ``ParallelTransformerLayer.forward`` calls the
``@torch.jit.script`` ``bias_dropout_add_fused_train`` after the attention and after the MLP
whenever ``bias_dropout_fusion`` is on (its default; ``--no-bias-dropout-fusion`` turns it off);
``megatron/initialize.py`` ``set_jit_fusion_options`` runs it under the profiling executor with
autodiff, whose symbolic ``dropout`` is ``torch.native_dropout`` and keeps its ``mask`` for
``native_dropout_backward``; ``native_dropout_cuda`` writes the mask at p = 0 too. Checked on
CPU with torch 2.13 and these flags: one ``bool [s, b, h]`` saved a call, none for eager
``F.dropout`` at p 0. The key ``bias_dropout_fusion`` false is the flag that turns it off."""

import pytest

import trainplan
from trainplan.model.activation_rows import BIAS_DROPOUT_MASKS
from trainplan.model.activations import kind_activations, layer_activations
from trainplan.model.context_parallel import CpKind
from trainplan.model.errors import LayoutError
from trainplan.model.key_rules import check_bias_dropout_fusion
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activation_fields import activation_context
from trainplan.scenarios.catalogue import get_model

LLAMA3_70B = get_model("llama3-70b").model.arch


def _ctx(framework: str, fused: bool = True, tp: int = 8):
    t = TrainingSpec(seq_len=8192, global_batch_size=2048, bias_dropout_fusion=fused)
    return activation_context(t, 1, 1, tp, True, CpKind.RING, framework=framework)


def test_llama3_70b_tp8_layer_by_hand():
    """Llama 3 70B (h 8,192, a 64, g 8, d 128, f 28,672), s 8,192, b 1, tp 8 with sequence
    parallelism, ``deepspeed``: u = 2 B × 8,192 × 8,192 / 8 = 16,777,216 B.

    Without the masks (``--no-bias-dropout-fusion``):
      norm input and QKV input 2u; Q u, K and V u/8 each, their repeat to 64 heads
      2 × 7/8 u (repeat_kv): 3u; the flash output (the dense projection's input) u; second
      norm input and FC1 input 2u; FC1's output (gate, up) 2 × 2 × 8,192 × 28,672 / 8 =
      117,440,512; SiLU's output and the FC2 input 58,720,256 each; FlashAttention's
      log-sum-exp 4 × 64 × 8,192 / 8 = 262,144:
      8u + 234,881,024 + 262,144 = 134,217,728 + 235,143,168 = 369,360,896 B (369.4 MB).
    With them: two bool masks of the residual's shard [s/tp, b, h], 2 × 8,192 × 8,192 / 8 =
    16,777,216 B: 386,138,112 B (386.1 MB)."""
    u = 2 * 8192 * 8192 // 8
    assert u == 16_777_216
    without = 8 * u + 117_440_512 + 2 * 58_720_256 + 4 * 64 * 8192 // 8
    assert without == 369_360_896
    masks = 2 * 8192 * 8192 // 8
    assert kind_activations(LLAMA3_70B, False, _ctx("deepspeed", False)).full_bytes == without
    assert kind_activations(LLAMA3_70B, False, _ctx("deepspeed")).full_bytes == 386_138_112
    assert without + masks == 386_138_112


def test_the_two_rows_and_who_keeps_them():
    """Under ``deepspeed`` the layer lists the two mask rows, 8,192 × 8,192 / 8 = 8,388,608 B
    each on a rank; eager dropout at p 0 (``megatron``, ``fsdp2``, ``textbook``, and deepspeed
    with the fusion off) keeps none."""
    rows = dict(layer_activations(LLAMA3_70B, 0, _ctx("deepspeed")).terms)
    assert [rows[n] for n in BIAS_DROPOUT_MASKS] == [8_388_608, 8_388_608]
    for fw, fused in (
        ("megatron", True),
        ("fsdp2", True),
        ("textbook", True),
        ("deepspeed", False),
    ):
        names = {n for n, _ in layer_activations(LLAMA3_70B, 0, _ctx(fw, fused)).terms}
        assert not names & set(BIAS_DROPOUT_MASKS), fw


def test_a_model_with_dropout_keeps_one_mask_per_add():
    """GPT-3 175B has dropout: its masks were counted already, once each, under every profile;
    the TorchScript path adds no second copy (h 12,288, s 2,048, tp 4, sp: 2,048 × 12,288 / 4 =
    6,291,456 B a mask)."""
    gpt = get_model("gpt3-175b").model.arch
    t = TrainingSpec(seq_len=2048, global_batch_size=128)
    for fw in ("deepspeed", "megatron"):
        ctx = activation_context(t, 1, 1, 4, True, CpKind.RING, framework=fw)
        terms = layer_activations(gpt, 0, ctx).terms
        assert [b for n, b in terms if n in BIAS_DROPOUT_MASKS] == [6_291_456, 6_291_456], fw


def _est(recompute: str, fused: bool):
    return trainplan.evaluate(model="llama3-70b", gpu="H100-SXM", framework="deepspeed", dp=8,
                              tp=8, zero_stage=1, micro_batch_size=1, global_batch_size=2048,
                              recompute=recompute, bias_dropout_fusion=fused)  # fmt: skip


def test_layers_kept_and_recomputed():
    """dp 8 × tp 8, 80 layers, one micro-batch in flight: without recomputation the layers keep
    80 × 16,777,216 = 1,342,177,280 B more (29,548,871,680 → 30,891,048,960; the total 81.86 →
    83.20 GB). Under full recomputation the checkpoints keep each layer's input only, the same
    1,342,177,280 B either way; the layer recomputed in backward holds its masks again: the
    recompute transient (the layer less its input u) 352,583,680 → 369,360,896 B."""
    on, off = _est("none", True), _est("none", False)
    assert off.peak.activations.layers_bytes == 80 * 369_360_896 == 29_548_871_680
    assert on.peak.activations.layers_bytes == 80 * 386_138_112 == 30_891_048_960
    assert on.peak.total_bytes - off.peak.total_bytes == 80 * 16_777_216
    full_on, full_off = _est("full", True), _est("full", False)
    assert full_on.peak.activations.layers_bytes == full_off.peak.activations.layers_bytes
    assert full_off.peak.activations.layers_bytes == 80 * 16_777_216  # the inputs, u a layer
    assert full_off.peak.activations.recompute_transient_bytes == 369_360_896 - 16_777_216
    assert full_on.peak.activations.recompute_transient_bytes == 386_138_112 - 16_777_216


def test_the_embedding_view_rule_is_unchanged():
    """The input embedding's dropout is eager ``nn.Dropout`` (an identity at p 0): the masks
    leave the ``deepspeed`` embedding rule (the kept view, model.deepspeed_layers.
    keeps_embedding_view) as it was."""
    on, off = _est("none", True), _est("none", False)
    assert on.peak.activations.embedding_bytes == off.peak.activations.embedding_bytes


@pytest.mark.parametrize("framework", ["megatron", "fsdp2", "textbook"])
def test_false_is_refused_outside_deepspeed(framework):
    off = TrainingSpec(seq_len=8, global_batch_size=8, bias_dropout_fusion=False)
    rule = f"^bias_dropout_fusion: false is read by deepspeed only.* not {framework}, "
    with pytest.raises(LayoutError, match=rule):
        check_bias_dropout_fusion(framework, off)
    check_bias_dropout_fusion("deepspeed", off)
    check_bias_dropout_fusion(framework, TrainingSpec(seq_len=8, global_batch_size=8))
