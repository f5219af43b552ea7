"""Megatron-Core's shared experts' FC1 under FP8 recipes other than ``delayed`` saves its BF16
input, the pre-MLP norm's output the router keeps (Megatron-LM d98e8a64dd
``moe/shared_experts.py`` ``SharedExpertMLP.__init__``: ``set_save_original_input``), so no FP8
copy is kept, and its backward quantises that input again for the weight gradient (Transformer
Engine d0067d0da ``module/linear.py`` ``_Linear.backward``)."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.activations import ActivationContext, kind_activations
from trainplan.model.backward_working import (
    _plan,
    _shared_experts,
    backward_working_bytes,
    shared_fc1_requant,
)
from trainplan.model.frameworks import Framework
from trainplan.model.te_fp8_backward import te_fp8_backward
from trainplan.scenarios.catalogue import get_model

DEEPSEEK_V3 = get_model("deepseek-v3").model.arch  # h 7,168, one shared expert of 2,048, SwiGLU
FC1_ROW = "shared expert FC1 input (FP8)"
BLOCKWISE = te_fp8_backward("blockwise", True)  # both 33/16, saved_input 33/32 B per element


def _ctx(tp: int = 1, original: bool = True, modules: tuple[str, ...] = ("core_attn",)):
    return ActivationContext(
        seq_len=4096, cp=1, micro_batch_size=1, tp=tp, sequence_parallel=tp > 1,
        flash_attention=True, fp8_gemms=True, fp8_linear_inputs=True,
        fp8_input_bytes=Fraction(33, 32), te_linears=True, fp8_proj_saves_original=original,
        recompute_modules=modules,
    )  # fmt: skip


def test_the_fp8_copy_is_kept_only_where_fc1_does_not_save_the_bf16_input():
    """DeepSeek-V3, s 4,096, b 1, tp 1, blockwise (1 + 1/32 B per element): the copy was
    33/32 · 4,096 · 7,168 = 30,277,632 B per MoE layer per micro-batch; under the recipes other
    than delayed FC1 saves the router's BF16 tensor (one tensor, already the "router and
    dispatch input" row): 0. Under delayed (Megatron-Core leaves FC1 alone) and where
    ``shared_experts`` is recomputed (the condition ``shared_experts_recompute``) the copy
    stays."""
    assert dict(kind_activations(DEEPSEEK_V3, True, _ctx(original=False)).terms)[FC1_ROW] == (
        30_277_632
    )
    assert FC1_ROW not in dict(kind_activations(DEEPSEEK_V3, True, _ctx()).terms)
    assert _ctx().fp8_shared_fc1_saves_original
    assert not _ctx(modules=("shared_experts",)).fp8_shared_fc1_saves_original
    assert not _ctx(original=False).fp8_shared_fc1_saves_original


def test_fc1_step_requantises_the_saved_input_by_hand():
    """DeepSeek-V3's shared expert, s 4,096, b 1, tp 1 (no gather: r = 0, c = 1), blockwise on
    Hopper. n = H = 2·4,096·7,168 = 58,720,256; f = 2·4,096·2,048 = 16,777,216 (u = 2).

    FC1 step: n + 2f + H − (SwiGLU input 2f, BF16, + down projection input in FP8,
    33/32·4,096·2,048 = 8,650,752) = 150,994,944 − 42,205,184 = 108,789,760, plus the quantised
    grad_output 33/16·4,096·4,096 = 34,603,008: 143,392,768 before; plus the saved BF16 input
    quantised column-wise again, 33/32·4,096·7,168 = 30,277,632: 173,670,400.
    (Down projection n + 33/16·4,096·7,168 + f = 136,052,736 and activation n + 3f − 8,650,752
    = 100,401,152 are smaller.)

    tp 2 with sequence parallelism, tensorwise on Hopper (shard 1 B, the saved input gathered
    again 2 B): the shard quantised row-wise before its FP8 gather, 1 · 2,048 · 7,168
    = 14,680,064.

    The layer's working set does not move: the routed experts' step (1,147,142,144 B here) is
    the largest."""
    assert shared_fc1_requant(_ctx(), BLOCKWISE, 7168) == 30_277_632
    tensorwise = te_fp8_backward("tensorwise", True)
    assert shared_fc1_requant(_ctx(tp=2), tensorwise, 7168) == 14_680_064
    assert shared_fc1_requant(_ctx(original=False), BLOCKWISE, 7168) == 0
    ctx = _ctx()
    rows = dict(kind_activations(DEEPSEEK_V3, True, ctx).terms)
    plan = _plan(Framework.MEGATRON, ctx)
    assert _shared_experts(ctx, DEEPSEEK_V3, Framework.MEGATRON, rows, plan, BLOCKWISE) == (
        173_670_400
    )
    got = backward_working_bytes(DEEPSEEK_V3, True, ctx, "megatron", "cudnn", te_fp8=BLOCKWISE)
    assert got == 1_147_142_144
