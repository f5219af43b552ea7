"""Local (sliding-window) and global attention layers timed each at their own span
(model/core_spans.py, model.op_time's attention core, model.attention_rates.window_fractions).

Sources: cudnn-frontend's gpt-oss sweeps (benchmark/sdpa_benchmark_training/results/gpt_oss/
gb200/gpt_oss_20260424_100011.csv at fb682ce7: cuDNN 9.22, BF16, top-left causal with a 128-key
window, d 64, b 2, 128 heads: 165 TFLOP/s forward and 187 backward at s = 8,192, FLOPs over the
band's W(W + 1)/2 + (s − W)·W pairs, backward 2·E·(3·d_qk + 2·d_v); h200_919_only_cudnn/
gpt_oss_20260227_034819.csv at df73764a: cuDNN 9.19.1, a 1,024-key window, 349 and 300 at 8,192);
the global causal cores from the GB200 llama3.1 sweep (1,574 forward, 1,065.6 backward in the
planner's count at 8,192, d 128 standing for 64) and the H200 one (644 and 432.8).
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from trainplan.model.attention_rates import attention_fractions, window_fractions
from trainplan.model.core_spans import group_counts, span_groups
from trainplan.model.op_time import Clock, op_seconds
from trainplan.model.ops import LayerShape, OpKind, layer_ops
from trainplan.model.roofline import RooflineParams
from trainplan.model.specs import AttentionSpan
from trainplan.scenarios.catalogue import get_model

T_KERNEL = 3e-6  # RooflineParams.kernel_overhead_s


def _mix(arch, moe):
    """The model-wide ``(layer, count)`` of each span of one FFN kind: a core standing for all
    the kind's layers (model.core_spans.core_spans weighs each span by its count)."""
    counts = group_counts(arch, tuple(range(arch.num_layers)))
    return tuple((j, n) for (m, j), n in zip(span_groups(arch), counts, strict=True) if m == moe)


def _core(arch, part, peak, hbm, s, b=1, tp=1, cp=1, spans=None, moe=False, head_dims=None):
    """(seconds forward, seconds backward, the core Op) of a layer kind's attention core, by
    default the mean over the kind's layers (the clock times one group at a time and sums a
    stage's layers: tests/model/test_stage_spans.py)."""
    x = LayerShape(
        arch, moe, s, b, tp, cp, causal=True,
        core_spans=_mix(arch, moe) if spans is None else spans,
    )  # fmt: skip
    core = next(o for o in layer_ops(x) if o.kind is OpKind.ATTENTION)
    clock = Clock(
        peak, hbm, RooflineParams(gemm_efficiency=0.7, attention_kernel="cudnn", part=part)
    )
    return op_seconds(core, clock), op_seconds(core, clock, backward=True), core


def test_gpt_oss_gb200_band_layer_at_the_sweeps_rate():
    """The GB200 row's shape (gpt-oss-120b, b 1, tp 1, s 8,192, 64 heads of 64, 8 K/V heads).

    Band layer (W = 128): P = 128·129/2 + 8,064·128 = 1,040,448 pairs,
    F = 2·b·P·a·(d_qk + d_v) = 2·1,040,448·64·128 = 17,046,700,032 FLOPs;
    forward F / 165 TFLOP/s = 0.10331 ms; the sweep's backward counts 2.5·F at 187 TFLOP/s,
    the planner's 2·F, so 2·F / (0.8·187) = 0.22790 ms. (The previous estimate: 0.104 + 0.228.)
    Global layer: P = 8,192·8,193/2 = 33,558,528, F = 549,822,922,752; 0.34932 ms forward at
    1,574 TFLOP/s, 1.03195 ms backward at 1,065.6. Each + t_kernel (3 µs); the Q, K, V, O bytes
    (151 MB) take 0.02 ms at 8 TB/s, under the compute. The MoE kind holds 18 of each, so its
    core is the mean of the two."""
    arch = get_model("gpt-oss-120b").model.arch
    assert span_groups(arch) == ((True, 0), (True, 1))
    assert _mix(arch, True) == ((0, 18), (1, 18))
    band_f = 2 * 1_040_448 * 64 * 128
    glob_f = 2 * (8192 * 8193 // 2) * 64 * 128
    assert (band_f, glob_f) == (17_046_700_032, 549_822_922_752)
    band = (band_f / 165e12 + T_KERNEL, 2 * band_f / (0.8 * 187e12) + T_KERNEL)
    glob = (glob_f / 1574e12 + T_KERNEL, 2 * glob_f / 1065.6e12 + T_KERNEL)
    assert band[0] * 1e3 == pytest.approx(0.10631, abs=1e-5)
    assert band[1] * 1e3 == pytest.approx(0.23090, abs=1e-5)
    fwd, bwd, core = _core(arch, "GB200", 2500e12, 8e12, 8192, moe=True)
    assert [s.window for s in core.spans] == [128, None]
    assert fwd == pytest.approx((band[0] + glob[0]) / 2, rel=1e-9)
    assert bwd == pytest.approx((band[1] + glob[1]) / 2, rel=1e-9)
    # what the band layers save against the old global charge, a layer and micro-batch
    saved = (glob[0] + glob[1]) - (band[0] + band[1])
    assert saved * 1e3 == pytest.approx(1.0501, abs=1e-4)


def test_gemma3_five_local_to_one_global_on_h200():
    """Gemma 3 27B (62 layers: 52 local of W = 1,024, 10 global) at s = 8,192, b 1, tp 1 on
    the H200: 32 heads of 128. Local: P = 1,024·1,025/2 + 7,168·1,024 = 7,864,832 pairs, at the
    H200 sweep's 1,024-key band (d 64 the only dimension published: held for 128): 349 TFLOP/s
    forward, 300·0.8 = 240 backward; global: 33,558,528 pairs at 644 and 432.8. Core =
    52/62 · local + 10/62 · global."""
    arch = get_model("gemma3-27b").model.arch
    assert span_groups(arch) == ((False, 0), (False, 5))
    assert _mix(arch, False) == ((0, 52), (5, 10))
    a, d = arch.num_attention_heads, arch.dim_per_head
    assert (a, d, arch.sliding_window) == (32, 128, 1024)
    loc_f = 2 * 7_864_832 * a * 2 * d
    glob_f = 2 * 33_558_528 * a * 2 * d
    fwd, bwd, _ = _core(arch, "H200", 989.4e12, 4.8e12, 8192)
    loc = (loc_f / 349e12 + T_KERNEL, 2 * loc_f / 240e12 + T_KERNEL)
    glob = (glob_f / 644e12 + T_KERNEL, 2 * glob_f / 432.8e12 + T_KERNEL)
    assert fwd == pytest.approx((52 * loc[0] + 10 * glob[0]) / 62, rel=1e-9)
    assert bwd == pytest.approx((52 * loc[1] + 10 * glob[1]) / 62, rel=1e-9)


def test_a_window_without_its_own_curve_is_the_causal_call_at_its_length():
    """B200 and GB200 publish only W = 128: a 1,024-key band reads cuDNN's causal call at
    1,024 (held at the sweep's shortest length, 2,048: 1,097 TFLOP/s forward); a window at
    least as long as the call is no band (a plain causal call)."""
    assert window_fractions("cudnn", "B200", (128, 128), 8192, 1024) == attention_fractions(
        "cudnn", "B200", (128, 128), 1024
    )
    assert attention_fractions("cudnn", "B200", (128, 128), 1024)[0] == pytest.approx(1097 / 2500)
    mistral = get_model("mistral-7b").model.arch  # W = 4,096 on every layer
    _, _, core = _core(mistral, "H100-SXM", 989.4e12, 3.35e12, 4096)
    assert [s.window for s in core.spans] == [None]
    _, _, core = _core(mistral, "H100-SXM", 989.4e12, 3.35e12, 8192, cp=2)  # calls of 4,096
    assert [s.window for s in core.spans] == [None]


def test_a_band_is_charged_no_more_than_its_causal_call():
    """The H200's 1,024-key band at s = 2,048 (d 64: 310 TFLOP/s over 1,024·1,025/2 + 1,024²
    = 1,573,376 pairs) would take longer than the causal call of 2,048 (484 TFLOP/s, the d 128
    curve standing for 64, over 2,098,176 pairs): it is charged the causal call's time, its
    fraction 484/989.4 × 1,573,376/2,098,176."""
    f, _ = window_fractions("cudnn", "H200", (64, 64), 2048, 1024)
    assert 310 / 989.4 < f == pytest.approx(484 / 989.4 * 1_573_376 / 2_098_176)
    f, _ = window_fractions("cudnn", "H200", (64, 64), 8192, 1024)  # the curve itself
    assert f == pytest.approx(349 / 989.4)


def test_a_single_span_model_is_timed_as_before():
    """Llama 3 (every layer global): one span of share 1, the core's own FLOPs."""
    arch = get_model("llama3-8b").model.arch
    fwd, _, core = _core(arch, "H100-SXM", 989.4e12, 3.35e12, 8192)
    assert len(core.spans) == 1 and core.spans[0].share == 1.0 and core.spans[0].ring_split
    f = attention_fractions("cudnn", "H100-SXM", (128, 128), 8192)[0]
    flops = 2 * (8192 * 8193 // 2) * 32 * 256
    assert fwd == pytest.approx(flops / (989.4e12 * f) + T_KERNEL, rel=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_the_mixed_core_is_never_slower_than_the_global_charge(seed):
    """Property: over the published lengths (s/cp ≥ 2,048), parts with cuDNN curves, windows
    of the scenarios (128, 1,024, 4,096) and patterns with at least one global layer, a kind's
    core timed at each layer's span takes no longer than all its layers at the global span
    (what the clock charged before)."""
    rng = random.Random(seed)
    base = get_model("gpt-oss-120b").model.arch
    for _ in range(40):
        pattern = tuple(rng.choice(("local", "global")) for _ in range(rng.randint(0, 5)))
        pattern = ("local", *pattern, "global")
        arch = replace(
            base,
            sliding_window=rng.choice((128, 1024, 4096)),
            attention_pattern=tuple(AttentionSpan(p) for p in pattern),
        )
        cp = rng.choice((1, 2))
        s = rng.choice((2048, 4096, 8192, 16384, 32768)) * cp
        part, peak, hbm = rng.choice(
            (("H100-SXM", 989.4e12, 3.35e12), ("H200", 989.4e12, 4.8e12),
             ("B200", 2250e12, 8e12), ("GB200", 2500e12, 8e12), ("GB300", 2500e12, 8e12))
        )  # fmt: skip
        glob = next(j for j in range(arch.num_layers) if arch.layer_span(j) == "global")
        moe = arch.is_moe_layer(glob)
        mixed = _core(arch, part, peak, hbm, s, cp=cp, moe=moe)
        charged = _core(arch, part, peak, hbm, s, cp=cp, moe=moe, spans=((glob, 1),))
        where = (pattern, arch.sliding_window, s, cp, part)
        assert mixed[0] <= charged[0] * (1 + 1e-12), where
        assert mixed[1] <= charged[1] * (1 + 1e-12), where
