"""HFU ≥ MFU under one FLOP convention (PaLM Appendix B: hardware FLOPs = the model FLOPs of
the convention plus the FLOPs recomputation re-runs), over random models, layouts, recompute
modes and plans (Megatron-Core's ``recompute_modules``, torchtitan's op-level policy) and
conventions, at the FLOP level (:func:`model.flops.step_flops` with the layout's
:func:`model.recompute_ops.recompute_flops_of`, as ``evaluate()`` calls it): fast, no step time
needed, since both utilisations divide by the same step time, GPUs and peak.

The ``6n`` MFU is printed with its ``6n+attention`` figure beside it; the HFU beside each MFU is
the one of the same convention (:attr:`model.flops.StepFlops.with_attention_hardware_flops`), so
the text never shows an HFU below the MFU next to it. Under ``6n``, which counts no attention-core
FLOPs, the HFU adds the recomputed matmuls only: Llama 3 8B's full recomputation and selective
recomputation are derived by hand below, through ``evaluate()``."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.flops import MfuConvention, step_flops, utilisation
from trainplan.model.layout import Layout, Recompute
from trainplan.model.recompute_modules import RECOMPUTE_MODULES
from trainplan.model.recompute_ops import recompute_flops_of
from trainplan.model.specs import Architecture, MoESpec, TrainingSpec
from trainplan.optimizer.case import Case


@st.composite
def cases(draw):
    heads = draw(st.sampled_from([2, 4, 8]))
    kv = draw(st.sampled_from([h for h in (1, 2, heads) if heads % h == 0]))
    hidden = heads * draw(st.sampled_from([8, 16, 64]))
    moe = None
    if draw(st.booleans()):
        moe = MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=hidden,
                      num_shared_experts=draw(st.sampled_from([0, 1])))  # fmt: skip
    arch = Architecture(
        num_layers=draw(st.integers(1, 4)), hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=kv, ffn_hidden_size=4 * hidden, vocab_size=draw(st.sampled_from([64, 1000])),
        mlp=draw(st.sampled_from(["gelu", "swiglu"])), moe=moe,
    )  # fmt: skip
    modules = tuple(draw(st.sets(st.sampled_from(RECOMPUTE_MODULES), min_size=1)))
    training = TrainingSpec(
        seq_len=draw(st.sampled_from([16, 128, 4096])),
        global_batch_size=draw(st.integers(1, 8)),
        recompute_modules=modules,
    )
    layout = Layout(
        framework=draw(st.sampled_from(["megatron", "fsdp2", "textbook"])),
        recompute=draw(st.sampled_from(list(Recompute))),
    )
    return arch, training, layout, draw(st.sampled_from(list(MfuConvention))), draw(st.booleans())


@settings(max_examples=30, deadline=None)
@given(cases(), st.floats(0.01, 100.0), st.integers(1, 4096))
def test_hfu_is_never_below_the_mfu_of_its_convention(case, step_s, gpus):
    arch, training, layout, convention, causal = case
    f = step_flops(
        arch, 6 * arch.hidden_size**2, training.seq_len, training.global_batch_size,
        layout.recompute, convention, causal,
        recomputed_of=recompute_flops_of(arch, training, layout, causal),
    )  # fmt: skip
    peak = 989e12
    mfu, hfu = (utilisation(x, step_s, gpus, peak) for x in (f.model_flops, f.hardware_flops))
    assert hfu >= mfu > 0
    mfu_a = utilisation(f.with_attention_model_flops, step_s, gpus, peak)
    hfu_a = utilisation(f.with_attention_hardware_flops, step_s, gpus, peak)
    assert hfu_a >= mfu_a > 0
    if convention is MfuConvention.SIX_N:  # attention only adds
        assert mfu_a >= mfu and hfu_a >= hfu
    if layout.recompute is Recompute.NONE:
        assert (hfu, hfu_a) == (mfu, mfu_a)
    if convention is MfuConvention.SIX_N:  # the recomputed attention cores are left out
        assert f.hardware_flops - f.model_flops <= f.recomputed_flops
    else:
        assert f.hardware_flops - f.model_flops == f.recomputed_flops


# Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json: h 4096, 32 layers, 32 heads of 128, 8 KV
# heads, SwiGLU FFN 14,336, vocabulary 128,256, embedding and output untied).
H, LAYERS, S, B = 4096, 32, 8192, 64
W_LAYER = 2 * H * H + 2 * H * 8 * 128 + 3 * H * 14336  # Q and O, K and V, gate + up + down
EMBEDDING = 128256 * H
N_8B = LAYERS * W_LAYER + 2 * EMBEDDING + (2 * LAYERS + 1) * H  # + the norms' weights


def _llama3_8b(recompute: str, convention: str = "6n"):
    case = Case.of(
        model="llama3-8b", dp=8, micro_batch_size=1, global_batch_size=B, seq_len=S,
        recompute=recompute, mfu_convention=convention,
    )  # fmt: skip
    return case.evaluate()


def test_llama3_8b_full_recompute_hfu_under_6n_adds_the_layers_2n():
    """Full recomputation re-runs each transformer layer's forward once, not the embedding nor
    the output layer (Megatron-LM and PyTorch checkpoint the layers): under ``6n`` that is
    ``2·W_layer`` per token and layer (the layer's matmul weights; its two norms' 8,192 weights
    do no matmul), no attention core. HFU/MFU = (6·N + 2·32·W_layer)/(6·N) = 1 + 32·W/(3·N)."""
    assert W_LAYER == 218_103_808 and N_8B == 8_030_261_248
    est = _llama3_8b("full")
    assert est.num_active_params == N_8B
    tokens = B * S
    assert est.flops.model_flops == 6 * N_8B * tokens == 25_261_017_655_148_544
    assert est.flops.hardware_flops == (6 * N_8B + 2 * LAYERS * W_LAYER) * tokens
    ratio = Fraction(est.flops.hardware_flops, est.flops.model_flops)
    assert ratio == 1 + Fraction(LAYERS * W_LAYER, 3 * N_8B)
    # below 8N/6N = 4/3: the embedding and output layer's 1.05e9 weights are not recomputed
    assert round(float(ratio), 5) == 1.28971
    # the attention cores (causal with FlashAttention: s(s+1)/2 pairs, 2·P·h for QKᵀ and as much
    # for scores·V) are counted by the HFU beside the 6n+attention MFU, as before
    core = LAYERS * 4 * H * (S * (S + 1) // 2) * B
    assert est.flops.recomputed_flops == 2 * LAYERS * W_LAYER * tokens + core
    assert est.flops.with_attention_hardware_flops - est.flops.with_attention_model_flops == (
        est.flops.recomputed_flops
    )
    assert est.hfu / est.mfu == float(ratio)


def test_llama3_8b_selective_recompute_hfu_equals_mfu_under_6n():
    """Selective recomputation re-runs the attention core alone (Megatron-Core's ``core_attn``,
    Korthikanti et al. 2022 §4.2): no FLOP the ``6n`` convention counts, so HFU = MFU; the
    ``6n+attention`` HFU adds the cores' forward, 4·h·s(s+1)/2 per sequence and layer."""
    est = _llama3_8b("selective")
    assert est.flops.hardware_flops == est.flops.model_flops
    assert est.hfu == est.mfu
    core = LAYERS * 4 * H * (S * (S + 1) // 2) * B
    assert est.flops.recomputed_flops == core
    assert est.flops.with_attention_hardware_flops == est.flops.with_attention_model_flops + core
    attention = _llama3_8b("selective", "6n+attention")
    assert attention.flops.hardware_flops == attention.flops.model_flops + core
    assert attention.flops.model_flops == est.flops.with_attention_model_flops
