"""HFU ≥ MFU under one FLOP convention (PaLM Appendix B: hardware FLOPs = the model FLOPs of
the convention plus the FLOPs recomputation re-runs), over random models, layouts, recompute
modes and plans (Megatron-Core's ``recompute_modules``, torchtitan's op-level policy) and
conventions, at the FLOP level (:func:`model.flops.step_flops` with the layout's
:func:`model.recompute_ops.recompute_flops_of`, as ``evaluate()`` calls it): fast, no step time
needed, since both utilisations divide by the same step time, GPUs and peak.

The ``6n`` MFU is printed with its ``6n+attention`` figure beside it; the HFU beside each MFU is
the one of the same convention (:attr:`model.flops.StepFlops.with_attention_hardware_flops`), so
the text never shows an HFU below the MFU next to it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.flops import MfuConvention, step_flops, utilisation
from trainplan.model.layout import Layout, Recompute
from trainplan.model.recompute_modules import RECOMPUTE_MODULES
from trainplan.model.recompute_ops import recompute_flops_of
from trainplan.model.specs import Architecture, MoESpec, TrainingSpec


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
