"""``trainplan mfu --model`` of ``trainplan evaluate``'s own step reproduces evaluate's MFU
(``6n+attention``) exactly, each call its own process: the attention FLOPs are the model's own
per-layer count (:func:`model.flops.attention_model_flops`), so a sliding-window layer counts
the pairs its window keeps, not the full causal triangle (reviewer's finding: gpt-oss-120b's
``mfu --model`` gave 34.1 % beside evaluate's 32.5 %, Gemma 3 27B 23 % high). The causal
count is ``mfu --model``'s default (the model's own, :data:`interface.mfu_model.MODEL_CAUSAL`):
no ``--causal`` is given (a new user's finding: ``--model --attention`` counted PaLM's
non-causal s², 57.8 % beside evaluate's 54.0 % for Llama 3 70B).

Hand derivation for gpt-oss-120b (catalogue: 36 layers alternating a 128-token sliding window
and global attention, 64 query heads of 64, s = 4,096; N active read from the report): a causal
global layer attends s(s+1)/2 = 8,390,656 pairs, a local one 128·129/2 + (4096 − 128)·128 =
516,160 — 6.15 % of the global's — so per token the attention is
3 · 18 · (8,390,656 + 516,160) · 2 · 64 · 128 / 4096 = 1,923,872,256 FLOPs, where PaLM's
12 · 36 · 64 · 64 · 4096 / 2 = 3,623,878,656 counted every layer global.
"""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import run_many

LAYOUTS = {
    "gpt-oss-120b": ["--dp", "64", "--ep", "8", "--global-batch", "4096"],
    "gemma3-27b": ["--dp", "32", "--tp", "2", "--global-batch", "512"],
    "llama3-70b": ["--dp", "16", "--tp", "8", "--pp", "4", "--global-batch", "512"],
}
EVAL = ["--gpu", "H100-SXM", "--mfu-convention", "6n+attention", "--json"]


def _evaluate() -> dict[str, dict]:
    done = run_many({m: ["evaluate", "--model", m, *a, *EVAL] for m, a in LAYOUTS.items()})
    for m, d in done.items():
        assert d.returncode == 0, (m, d.stderr[-2000:])
    return {m: json.loads(d.stdout) for m, d in done.items()}


def _mfu_args(m: str, e: dict, *extra: str) -> list[str]:
    seq = {"gpt-oss-120b": 4096, "gemma3-27b": 32768, "llama3-70b": 8192}[m]
    batch = int(LAYOUTS[m][LAYOUTS[m].index("--global-batch") + 1])
    return [
        "mfu", "--model", m, "--tokens", str(batch * seq), "--step-seconds",
        repr(e["time"]["step_s"]), "--gpu", "H100-SXM", "--chips", str(e["num_gpus"]),
        "--seq-len", str(seq), "--attention", *extra,
    ]  # fmt: skip


def test_mfu_model_reproduces_evaluate():
    ev = _evaluate()
    calls = {}
    for m, e in ev.items():
        calls[m] = _mfu_args(m, e, "--json")
        calls[m + " text"] = _mfu_args(m, e)
    done = run_many(calls)
    for m, e in ev.items():
        assert done[m].returncode == 0, done[m].stderr[-2000:]
        out = json.loads(done[m].stdout)
        assert out["mfu"] == pytest.approx(e["time"]["mfu"], rel=1e-12), m
        text = done[m + " text"].stdout
        assert f"= {100 * e['time']['mfu']:.1f}%" in text.splitlines()[1], (m, text)
    # gpt-oss-120b by hand (module docstring): 18 global layers of 8,390,656 pairs and 18 local
    # of 516,160, 2·P·a·(d_qk + d_v) forward each, × 3 with the backward, per token ÷ 4096
    oss = json.loads(done["gpt-oss-120b"].stdout)
    attn = 3 * 18 * (8390656 + 516160) * 2 * 64 * 128
    assert oss["attention"]["flops_per_token"] == pytest.approx(attn / 4096, rel=1e-15)
    n = oss["model"]["params_active"]
    tps = 4096 * 4096 / ev["gpt-oss-120b"]["time"]["step_s"]
    hand = (6 * n + attn / 4096) * tps / (989.4e12 * 64)
    assert oss["mfu"] == pytest.approx(hand, rel=1e-12)
    # PaLM's all-global count would have added 12·36·64·64·4096/2 per token: 2.1 points more
    palm = (6 * n + 12 * 36 * 64 * 64 * 4096 / 2) * tps / (989.4e12 * 64)
    assert palm - oss["mfu"] > 0.015
