"""``trainplan mfu``'s HFU follows the rule of ``trainplan evaluate``'s (each call its own
process): PaLM (Chowdhery et al. 2022, Appendix B) puts the rematerialised FLOPs on top of the
model FLOPs of the same count, so beside a ``6·N`` MFU (no ``--attention``), which counts no
attention core, a recomputed attention core adds nothing and a recomputed layer adds its matmuls
alone (:func:`model.flops.hardware_counts_attention_core`, :func:`model.flops.step_flops`).

Hand derivation, Llama 3 8B (meta-llama/Meta-Llama-3-8B config.json: h 4096, 32 layers, 32 heads
of 128, 8 KV heads, SwiGLU FFN 14,336, vocabulary 128,256, embedding and output untied):

* a layer's matmul weights W = Q and O 2 · 4096² = 33,554,432, K and V 2 · 4096 · 1024 =
  8,388,608, gate, up and down 3 · 4096 · 14336 = 176,160,768: W = 218,103,808; two norms
  2 · 4096 each; N = 32 · (W + 8,192) + 2 · 128256 · 4096 + 4096 = 8,030,261,248.
* ``--recompute selective`` re-runs the attention cores only (Korthikanti et al. 2022 §4.2):
  nothing 6·N counts, HFU = MFU.
* ``--recompute full`` re-runs each layer's forward, not the embedding nor the output layer:
  2 · 32 · W = 13,958,643,712 FLOPs a token beside 6 · N = 48,181,567,488, HFU/MFU =
  1 + 13,958,643,712 / 48,181,567,488 = 1 + 32·W/(3·N) = 1.289709 (below 4/3: the
  2 · 525,336,576 embedding and output weights are not recomputed).

``evaluate`` of Llama 3 8B on 8 H100s (dp 8, 64 sequences of 8,192 tokens = 524,288 tokens a
step) predicts a step time; ``mfu`` given those tokens and that step gives the same MFU and HFU,
without attention (evaluate's ``6n``) and with it (``6n+attention``, causal: evaluate counts the
pairs the causal mask keeps under FlashAttention, as ``mfu --model`` does by default).
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from tests.cli_runs import refusal, run_many

W = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336
N = 32 * (W + 2 * 4096) + 2 * 128256 * 4096 + 4096
LAYOUT = ["--gpus", "8", "--dp", "8", "--micro-batch", "1", "--global-batch", "64"]
LAYOUT += ["--seq-len", "8192"]
TOKENS = 64 * 8192


def test_mfu_hfu_follows_evaluates_convention():
    assert (W, N, TOKENS) == (218_103_808, 8_030_261_248, 524_288)
    assert 2 * 32 * W == 13_958_643_712 and 6 * N == 48_181_567_488
    full_ratio = 1 + Fraction(2 * 32 * W, 6 * N)
    assert full_ratio == 1 + Fraction(32 * W, 3 * N)
    assert round(float(full_ratio), 6) == 1.289709

    evaluated = run_many(
        {
            mode: ["evaluate", "--model", "llama3-8b", *LAYOUT, "--recompute", mode, "--json"]
            for mode in ("full", "selective")
        }
    )
    times = {}
    for mode, done in evaluated.items():
        assert done.returncode == 0, done.stderr[-2000:]
        times[mode] = json.loads(done.stdout)["time"]
    calls = {}
    for mode, t in times.items():
        job = ["mfu", "--model", "llama3-8b", "--tokens", str(TOKENS)]
        job += ["--step-seconds", repr(t["step_s"]), "--gpu", "H100-SXM", "--chips", "8"]
        job += ["--recompute", mode, "--json"]
        calls[mode] = job
        calls[f"{mode} attention"] = [*job, "--attention", "--seq-len", "8192"]
    calls["selective text"] = calls["selective"][:-1]
    assert calls["full"][:3] == ["mfu", "--model", "llama3-8b"]
    bare = ["mfu", "--params", str(N), *calls["full"][3:]]  # N alone, --recompute full --json
    calls["params full"] = bare
    calls["selective layers"] = [*bare[:-3], "--recompute", "selective", "--layers", "32"]
    done = run_many(calls)
    for name, d in done.items():
        if name != "selective layers":
            assert d.returncode == 0, (name, d.stderr[-2000:])
    got = {name: json.loads(d.stdout) for name, d in done.items() if name in times}

    # selective without --attention: HFU = MFU, said so in the arithmetic
    sel = got["selective"]
    assert sel["hfu"] == sel["mfu"] and sel["recomputed_flops_share"] == 0
    assert sel["hfu_arithmetic"] == (
        "hfu = mfu × (1 + 0 (selective re-runs attention cores, which 6·N does not count)) = "
        f"{sel['mfu'] * 100:.1f}%"
    )
    assert "hfu  hfu = mfu × (1 + 0 (selective" in done["selective text"].stdout
    # full without --attention: HFU/MFU = 1 + 2·32·W / (6·N), exactly
    full = got["full"]
    assert Fraction(full["recomputed_flops_share"]) == pytest.approx(full_ratio - 1, rel=1e-15)
    assert full["hfu"] / full["mfu"] == pytest.approx(float(full_ratio), rel=1e-12)
    # from a bare N the tool cannot tell the layers from the embedding and output layer: 2·N
    # recomputed of 6·N, HFU/MFU = 4/3
    bare_n = json.loads(done["params full"].stdout)
    assert bare_n["mfu"] == pytest.approx(full["mfu"], rel=1e-12)
    assert bare_n["hfu"] / bare_n["mfu"] == pytest.approx(4 / 3, rel=1e-12)
    # the same figures as evaluate's, for the step evaluate predicts
    for mode, t in times.items():
        assert got[mode]["mfu"] == pytest.approx(t["mfu"], rel=1e-12)
        assert got[mode]["hfu"] == pytest.approx(t["hfu"], rel=1e-12)
        with_attention = json.loads(done[f"{mode} attention"].stdout)
        assert with_attention["mfu"] == pytest.approx(t["mfu_with_attention"], rel=1e-12)
        assert with_attention["hfu"] == pytest.approx(t["hfu_with_attention"], rel=1e-12)
        assert with_attention["hfu"] > with_attention["mfu"]  # the recomputed cores counted
    assert times["selective"]["hfu"] == times["selective"]["mfu"]
    # a dimension without --attention enters nothing: refused, not silently dropped
    assert refusal(done["selective layers"]) == (
        "--layers: '32' does not apply: it enters only attention FLOPs (--attention); without "
        "them the 6·N MFU counts no attention and its HFU adds no recomputed attention core"
    )
