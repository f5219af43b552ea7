"""The eager passes Megatron-Core runs for gpt-oss beyond a fused layer, derived by hand from the
code at Megatron-LM 0d8e0714 (Megatron Bridge v0.2.0) and PyTorch's autograd formulas:
the clamp before the experts' activation (``weighted_bias_quick_geglu_impl``), the unfused YaRN
rotary embedding (``_apply_rotary_pos_emb_bshd``) and the attention output bias added outside a
fused bias-dropout-add (``_bias_dropout_add_func``)."""

from __future__ import annotations

from trainplan.model.elementwise import (
    megatron_glu_clamp,
    megatron_unfused_bias_add,
    megatron_unfused_rope,
)
from trainplan.model.moe_kernels import NO_EXPERT_PASSES, ExpertPasses
from trainplan.model.ops import LayerShape, layer_ops
from trainplan.scenarios.catalogue import get_model

B = 2  # bytes per BF16 element


def test_clamp_bytes_per_element():
    # forward: gate.clamp(max) reads and writes 2 B, up.clamp(min, max) 2 B each way, cat reads
    # both halves and writes them: 2+2 + 2+2 + 4+4 = 16 bytes per element of [rows, f]
    # backward: gate where(x <= 7): le reads 2 writes 1, where reads 1 + 2 writes 2 -> 8;
    # up where((x >= -7) & (x <= 7)): ge 3, le 3, logical_and_ 3, where 5 -> 14; split's cat
    # of the two gradient halves 8 -> 30 bytes; kernels le, where, fill | ge, le, and, where,
    # fill | cat = 9
    p = megatron_glu_clamp(1, B)
    assert (p.forward_bytes, p.backward_bytes) == (16, 30)
    assert (p.forward_kernels, p.backward_kernels) == (3, 9)


def test_unfused_rope_bytes_per_element():
    # forward per element of q (or k): t·cos 4, neg of one half 2, cat of the halves 4,
    # ·sin 4, add 6, cat with the empty t_pass 4 = 24 bytes; 6 kernels + 6 on the frequencies
    # backward: grad·sin 4, neg 2, split's cat 4, grad·cos 4, slice_backward's zeros 2,
    # two accumulations of t's gradient 12 = 28 bytes; 7 kernels; q and k: twice the kernels
    p = megatron_unfused_rope(1, B)
    assert (p.forward_bytes, p.backward_bytes) == (24, 28)
    assert (p.forward_kernels, p.backward_kernels) == (24, 14)


def test_unfused_bias_add_bytes_per_element():
    # x + bias reads x and writes the sum (4 bytes); the bias gradient sums dy over tokens (2)
    p = megatron_unfused_bias_add(1, B)
    assert (p.forward_bytes, p.backward_bytes) == (4, 2)


def _ops(passes: ExpertPasses) -> dict[str, object]:
    arch = get_model("gpt-oss-120b").model.arch
    x = LayerShape(arch, True, 4096, 1, 1, ep=8, expert_passes=passes)
    return {o.name: o for o in layer_ops(x)}


def test_a_gpt_oss_layer_under_megatron_core():
    # one MoE layer on one of 8 ranks at s 4096, b 1, tp 1: T = 4096 tokens
    ops, plain = _ops(ExpertPasses(True)), _ops(NO_EXPERT_PASSES)
    T, h, f, k = 4096, 2880, 2880, 4
    rows = T * k  # dropless and balanced: 16,384 rows on the rank's 16 experts
    act, base = ops["experts activation"], plain["experts activation"]
    # the fused weighted quick-GEGLU: 3β | 5β per output element; the clamp adds 8β | 11β + 8
    assert base.forward_bytes == 3 * B * rows * f
    assert act.forward_bytes == (3 * B + 16) * rows * f == 22 * 16384 * 2880
    assert act.backward_bytes == (5 * B + 30) * rows * f
    assert (act.forward_kernels, act.backward_kernels) == (4, 10)
    # rotary embedding on q (64 heads) and k (8) of 64 dims: 12β | 14β, fused 2β | 2β
    qk = T * (64 + 8) * 64
    rope, fused = ops["rotary embedding"], plain["rotary embedding"]
    assert (fused.forward_bytes, fused.backward_bytes) == (2 * B * qk, 2 * B * qk)
    assert (rope.forward_bytes, rope.backward_bytes) == (24 * qk, 28 * qk)
    # the attention residual: the add 3β each way, plus x + bias 2β | the bias gradient β
    res = ops["attention residual"]
    assert (res.forward_bytes, res.backward_bytes) == (5 * B * T * h, 4 * B * T * h)
    assert plain["attention residual"].forward_bytes == 3 * B * T * h
    assert ops["MLP residual"].forward_bytes == 3 * B * T * h  # the experts added their bias


def test_a_model_without_the_mechanisms_is_unchanged():
    arch = get_model("qwen3-235b-a22b").model.arch
    assert not (arch.glu_clamp or arch.yarn_rope or arch.linear_bias)
    x = LayerShape(arch, True, 4096, 1, 1, ep=8, expert_passes=ExpertPasses(True))
    y = LayerShape(arch, True, 4096, 1, 1, ep=8)
    same = ("experts activation", "rotary embedding", "attention residual")
    a, b = ({o.name: o for o in layer_ops(s)} for s in (x, y))
    assert all(a[n] == b[n] for n in same)
