"""What selective recomputation re-runs, per recompute module and under torchtitan's op-level
policy: the recomputed forward time (:func:`model.layer_time.layer_time`) and FLOPs
(:func:`model.recompute_ops.layer_recompute_flops`), written out by hand on tiny layers.

Tiny Llama-style layer: h 8, a 2 heads of d 4, g 1 KV head, SwiGLU f 16; s 4 tokens, b 1, tp 1.
Its GEMMs (forward FLOPs 2·m·n·k, m = 4 tokens): QKV [4, 8]×[8, 16] (wq 8, wk 4, wv 4 columns),
output projection [4, 8]×[8, 8], gate+up [4, 8]×[8, 32] (w1 16, w3 16), down [4, 16]×[16, 8].
"""

from __future__ import annotations

import pytest

from trainplan.model.arch_parts import MLASpec, MoESpec
from trainplan.model.layer_time import layer_time
from trainplan.model.layout import Recompute
from trainplan.model.op_time import Clock, op_seconds
from trainplan.model.ops import LayerShape, layer_ops
from trainplan.model.recompute_ops import (
    OP_LEVEL,
    OP_LEVEL_FP8,
    layer_recompute_flops,
    recompute_plan,
    recomputed_ops,
)
from trainplan.model.roofline import Collective, LinkTime, RooflineParams, collective_seconds
from trainplan.model.specs import Architecture

LLAMA = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2, num_kv_heads=1,
                     ffn_hidden_size=16, vocab_size=16, mlp="swiglu")  # fmt: skip
CLOCK = Clock(312e12, 2.039e12, RooflineParams(gemm_efficiency=0.74))
X = LayerShape(LLAMA, False, 4, 1, 1)
SEL = Recompute.SELECTIVE
MLA = MLASpec(q_lora_rank=4, kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2)
MOE = MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=8,
              num_shared_experts=1, shared_expert_ffn_hidden_size=8)  # fmt: skip


def _flops(arch: Architecture, plan: tuple[str, ...], every_norm: bool = False) -> int:
    return layer_recompute_flops(arch, 4, 1, False, None, plan, every_norm, 0, SEL)


def test_the_default_plan_recomputes_the_core_alone():
    """``core_attn``: today's figures exactly (the core's forward; QKᵀ and scores·V FLOPs
    2·b·s²·a·2d = 2·16·2·8 = 512)."""
    core = [o for o in layer_ops(X) if o.core]
    t = layer_time(X, CLOCK, SEL)
    assert t.recompute_s == sum(op_seconds(o, CLOCK) for o in core)
    assert _flops(LLAMA, ("core_attn",)) == 512


def test_mlp_recomputes_its_three_kernels():
    """``mlp``: gate+up (2·4·32·8 = 2048 FLOPs), SwiGLU, down (2·4·8·16 = 1024), not the
    residual add; no attention core."""
    names = [o.name for o in recomputed_ops(X, ("mlp",))]
    assert names == ["MLP gate+up projection", "MLP SwiGLU", "MLP down projection"]
    assert _flops(LLAMA, ("mlp",)) == 2048 + 1024
    assert _flops(LLAMA, ("core_attn", "mlp")) == 512 + 3072
    t = layer_time(X, CLOCK, SEL, ("mlp",))
    ops = {o.name: o for o in layer_ops(X)}
    assert t.recompute_s == pytest.approx(sum(op_seconds(ops[n], CLOCK) for n in names))


def test_textbook_layernorm_reruns_both_norms_at_the_hbm_rate():
    """``layernorm`` with every norm (textbook): the input and pre-MLP RMSNorms, each reading
    and writing [4, 8] in bf16 (2·2·32 = 128 bytes) at 0.9 of HBM plus a 3 µs launch; no
    FLOPs. Under Megatron-Core a dense GQA layer's norms are fused into the next linear: none."""
    one = 128 / (0.9 * 2.039e12) + 3e-6
    assert layer_time(X, CLOCK, SEL, ("layernorm",), True).recompute_s == pytest.approx(2 * one)
    assert layer_time(X, CLOCK, SEL, ("layernorm",)).recompute_s == 0.0
    assert _flops(LLAMA, ("layernorm",), True) == 0


def test_torchtitan_op_level_reruns_wk_wo_w3():
    """Op-level SAC: wk 2·4·4·8 = 256, wo 2·4·8·8 = 512, w3 2·4·16·8 = 1024 FLOPs; the core's
    output is saved (not re-run); under FP8 every GEMM output is saved."""
    assert recompute_plan(SEL, True, ("core_attn",), False) == (OP_LEVEL,)
    assert _flops(LLAMA, (OP_LEVEL,)) == 256 + 512 + 1024
    assert _flops(LLAMA, (OP_LEVEL_FP8,)) == 0
    names = [o.name for o in recomputed_ops(X, (OP_LEVEL,))]
    assert "MLP residual" not in names and "attention core (FlashAttention)" not in names
    assert {"input norm", "rotary embedding", "MLP SwiGLU", "pre-MLP norm"} <= set(names)


def test_mla_up_proj_and_moe_modules():
    """MLA (a 2, q_lora 4, kv_lora 4, nope 2, rope 2, v 2): ``mla_up_proj`` re-runs the Q
    up-projection 2·4·8·4 = 256 and the KV up-projection 2·4·8·4 = 256 FLOPs. MoE (4 experts,
    top 2, expert and shared f 8, SwiGLU): ``moe`` re-runs the router 2·4·4·8 = 256, the routed
    experts 2·(2·4)·3·8·8 = 3072 and the shared expert 2·4·3·8·8 = 1536; ``shared_experts``
    the last alone; ``moe_act`` no GEMM."""
    mla = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2, vocab_size=16,
                       ffn_hidden_size=16, mlp="swiglu", attention="mla",
                       mla=MLA)  # fmt: skip
    assert _flops(mla, ("mla_up_proj",)) == 512
    moe = Architecture(num_layers=1, hidden_size=8, num_attention_heads=2, vocab_size=16,
                       ffn_hidden_size=16, mlp="swiglu",
                       moe=MOE)  # fmt: skip
    assert _flops(moe, ("moe",)) == 256 + 3072 + 1536
    assert _flops(moe, ("shared_experts",)) == 1536
    assert _flops(moe, ("moe_act",)) == 0


def test_a_recomputed_mlp_gathers_and_scatters_again():
    """tp 2 with sequence parallelism: a recomputed MLP runs its all-gather and reduce-scatter
    of (tp − 1)/tp · β · T · h = ½ · 2 · 4 · 8 = 32 bytes once more (forward collectives wait
    under the async overlap); torchtitan's op-level policy re-runs each half's all-gather (the
    reduce-scatter outputs are saved)."""
    link = LinkTime(450e9, True)
    c = Clock(312e12, 2.039e12, RooflineParams(gemm_efficiency=0.74), tp_link=link)
    x = LayerShape(LLAMA, False, 4, 1, 2, sequence_parallel=True)
    ag = collective_seconds(Collective.ALL_GATHER, 2, 32.0, link, c.params)
    rs = collective_seconds(Collective.REDUCE_SCATTER, 2, 32.0, link, c.params)
    base = layer_time(x, c, SEL)
    mlp = layer_time(x, c, SEL, ("mlp",))
    assert mlp.tp_s - base.tp_s == pytest.approx(ag + rs)
    assert mlp.tp_exposed_s - base.tp_exposed_s == pytest.approx(ag + rs)
    op_level = layer_time(x, c, SEL, (OP_LEVEL,))
    assert op_level.tp_s - base.tp_s == pytest.approx(2 * ag)


def test_the_time_model_pages_worked_figure():
    """docs/concepts/time-model.md "Selective recomputation, per module": Llama 3 8B, one layer,
    one 4,096-token sequence: GEMM FLOPs recomputed 0 (core_attn), 6·s·h·f (mlp) and
    2·s·h·(g·d + h + f) (torchtitan's op-level policy)."""
    from trainplan.model.recompute_ops import recomputed_gemm_flops
    from trainplan.scenarios.catalogue import get_model

    arch = get_model("llama3-8b").model.arch
    s, h, f, gd = 4096, 4096, 14336, 8 * 128

    def gemms(plan: tuple[str, ...]) -> int:
        return recomputed_gemm_flops(arch, False, s, 1, plan, False)

    assert gemms(("core_attn",)) == 0
    assert gemms(("mlp",)) == 6 * s * h * f == 1_443_109_011_456
    assert gemms((OP_LEVEL,)) == 2 * s * h * (gd + h + f) == 652_835_028_992
