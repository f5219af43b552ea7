"""``trainplan mfu --model`` as a user runs it (each call its own process): N and the dimensions
read from a catalogue model or a config.json, as evaluate's ``--model`` reads them
(:mod:`interface.mfu_model`), with evaluate's number grammar and refusals.

Hand derivations (the catalogue's dimensions; every matrix, norm and embedding counted):

* Llama 3 70B (L 80, h 8192, f 28672, 64 heads of 128, 8 KV heads, V 128256, untied): a layer
  holds q and o 2 · 8192² = 134,217,728, k and v 2 · 8192 · 1024 = 16,777,216, the SwiGLU MLP
  3 · 8192 · 28672 = 704,643,072 and two norms 16,384: 855,654,400; × 80 = 68,452,352,000, plus
  the embedding and output 2 · 128256 · 8192 = 2,101,346,304 and the final norm 8,192:
  N = 70,553,706,496. On 512 H100s (989.4 TFLOP/s) at 4e6 tokens in 7 s:
  MFU = 6 · N · 4e6 / (989.4e12 · 512 · 7) = 47.75 %; with the model's own causal attention
  FLOPs (evaluate's count: s(s+1)/2 pairs a layer, 2 · P · 64 · (128 + 128) forward, × 3) per
  token 3 · 80 · 2 · (8192 · 8193 / 2) · 64 · 256 / 8192 = 32,216,186,880 (T the catalogue's
  8192; PaLM's s²/2 gives 32,212,254,720) 51.4 %.
* Mixtral 8x7B (L 32, h 4096, f 14336, 8 experts top 2, 32 heads, 8 KV heads, V 32000): a layer
  holds attention 2 · 4096² + 2 · 4096 · 1024 = 41,943,040, an expert 3 · 4096 · 14336 =
  176,160,768, the router 4096 · 8 = 32,768, two norms 8,192; active (2 experts) 394,305,536 a
  layer, × 32 = 12,617,777,152, + 2 · 32000 · 4096 + 4096 = 262,148,096: N = 12,879,925,248
  active (the N of evaluate's MFU) of 46,702,792,704 (8 experts).
"""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import refusal, run_many

JOB = ["--tokens", "4e6", "--step-seconds", "7", "--gpu", "H100-SXM", "--chips", "512"]
LLAMA_N = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192)
LLAMA_N += 2 * 128256 * 8192 + 8192
MIXTRAL_LAYER = 2 * 4096**2 + 2 * 4096 * 1024 + 4096 * 8 + 2 * 4096
MIXTRAL_ACTIVE = 32 * (MIXTRAL_LAYER + 2 * 3 * 4096 * 14336) + 2 * 32000 * 4096 + 4096
MIXTRAL_TOTAL = 32 * (MIXTRAL_LAYER + 8 * 3 * 4096 * 14336) + 2 * 32000 * 4096 + 4096


def test_mfu_reads_the_model(tmp_path):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 8192,
                "intermediate_size": 28672,
                "num_hidden_layers": 80,
                "num_attention_heads": 64,
                "num_key_value_heads": 8,
                "vocab_size": 128256,
                "max_position_embeddings": 8192,
                "tie_word_embeddings": False,
            }
        )
    )
    done = run_many(
        {
            "text": ["mfu", "--model", "llama3-70b", *JOB],
            "json": ["mfu", "--model", "llama3-70b", *JOB, "--json"],
            "params": ["mfu", "--params", str(LLAMA_N), *JOB, "--json"],
            "attention": ["mfu", "--model", "llama3-70b", *JOB, "--attention"],
            "palm": ["mfu", "--model", "llama3-70b", *JOB, "--attention", "--non-causal"],
            "recompute": ["mfu", "--model", "llama3-70b", *JOB, "--recompute", "full", "--json"],
            "recompute attention": [
                *("mfu", "--model", "llama3-70b", *JOB, "--recompute", "full", "--attention"),
                "--json",
            ],
            "recompute palm": [
                *("mfu", "--model", "llama3-70b", *JOB, "--recompute", "full", "--attention"),
                *("--non-causal", "--json"),
            ],
            "recompute non-causal": [
                *("mfu", "--model", "llama3-70b", *JOB, "--recompute", "full", "--non-causal"),
            ],
            "moe": ["mfu", "--model", "mixtral-8x7b", *JOB, "--json"],
            "moe text": ["mfu", "--model", "mixtral-8x7b", *JOB],
            "file": ["mfu", "--model", str(config), *JOB, "--json"],
            "file attention": ["mfu", "--model", str(config), *JOB, "--attention"],
            "both": ["mfu", "--model", "llama3-70b", "--params", "7e9", *JOB],
            "dims": ["mfu", "--model", "llama3-70b", "--heads", "7", *JOB],
            "unknown": ["mfu", "--model", "llama3-7b", *JOB],
            "rate": [
                "mfu",
                "--model",
                "llama3-70b",
                "--achieved-pflops",
                "100",
                "--gpu",
                "H100-SXM",
            ],
            "grammar": [
                "mfu",
                "--model",
                "llama3-70b",
                "--tokens",
                "4,000,000",
                "--step-seconds",
                "7x",
                "--gpu",
                "H100-SXM",
            ],
        }  # fmt: skip
    )
    for name in ("text", "json", "params", "attention", "palm", "moe", "moe text", "file"):
        assert done[name].returncode == 0, (name, done[name].stderr[-2000:])

    d = json.loads(done["json"].stdout)
    assert LLAMA_N == 70_553_706_496
    assert d["model"]["params_active"] == d["model"]["params_total"] == LLAMA_N
    assert abs(d["mfu"] - 6 * LLAMA_N * 4e6 / (989.4e12 * 512 * 7)) < 1e-12
    assert round(d["mfu"], 4) == 0.4775
    # --model is --params N, figure for figure
    same = json.loads(done["params"].stdout)
    assert (same["mfu"], same["arithmetic"], same["model"]) == (d["mfu"], d["arithmetic"], None)
    assert done["text"].stdout.splitlines()[:2] == [
        "model llama3-70b: N = 70.5537e9",
        "mfu  6 · 70.5537e9 · 4e6 ÷ (989.4e12 · 512 · 7 s) = 47.8%",
    ]
    lines = done["attention"].stdout.splitlines()
    assert lines[0] == "model llama3-70b: N = 70.5537e9; seq_len 8192 the catalogue's"
    assert lines[1] == (
        "mfu  (6 · 70.5537e9 + 32.2162e9 attention of the 80 global layers) · 4e6 "
        "÷ (989.4e12 · 512 · 7 s) = 51.4%"
    )
    assert 3 * 80 * 2 * (8192 * 8193 // 2) * 64 * 256 // 8192 == 32_216_186_880
    # causal is the model's own count without --causal; --non-causal asks for PaLM's s² a layer:
    # 12 · 80 · 64 · 128 · 8192 = 64,424,509,440 per token, 55.0 %
    assert 12 * 80 * 64 * 128 * 8192 == 64_424_509_440
    palm = done["palm"].stdout.splitlines()
    assert palm[1] == (
        "mfu  (6 · 70.5537e9 + 64.4245e9 attention of the 80 global layers) · 4e6 "
        "÷ (989.4e12 · 512 · 7 s) = 55.0%"
    )
    assert palm[2].endswith("(non-causal: s² a layer, PaLM's)")
    assert lines[2].endswith("(causal: each layer's attended pairs)")
    # full recomputation re-runs each layer's forward, not the embedding nor the output layer
    # (evaluate's HFU counts the same): 2 · the layers' matrices 80 · (2 · 8192² + 2 · 8192 ·
    # 1024 + 3 · 8192 · 28672) = 2 · 68,451,041,280 = 136,902,082,560 a token beside the 6·N
    # MFU, which counts no attention core and so adds none recomputed (PaLM App. B: the HFU
    # adds rematerialisation to the model FLOPs of its own count; evaluate's 6n HFU):
    # 47.75 % × (1 + 136,902,082,560 / (6 · 70,553,706,496)) = 63.2 %. With --attention the
    # forward third of the attention too, causal by default (+ 32,216,186,880 / 3:
    # 147,640,811,520 a token, of 6N + 32,216,186,880 = 455,538,425,856: HFU 68.0 %), PaLM's
    # with --non-causal (+ 64,424,509,440 / 3: 158,376,919,040).
    layers = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672)
    assert layers == 68_451_041_280
    share = json.loads(done["recompute"].stdout)["recomputed_flops_share"]
    assert share * 6 * LLAMA_N == pytest.approx(2 * layers, rel=1e-12)
    for name, attention in (
        ("recompute attention", 32_216_186_880),
        ("recompute palm", 64_424_509_440),
    ):
        share = json.loads(done[name].stdout)["recomputed_flops_share"]
        per_token = 6 * LLAMA_N + attention
        assert share * per_token == pytest.approx(2 * layers + attention / 3, rel=1e-12)
    assert 2 * layers + 32_216_186_880 // 3 == 147_640_811_520
    assert 6 * LLAMA_N + 32_216_186_880 == 455_538_425_856
    recompute = json.loads(done["recompute"].stdout)
    assert recompute["hfu_arithmetic"] == "hfu = mfu × (1 + 1.369e+11/4.233e+11 (full)) = 63.2%"
    assert recompute["model"]["seq_len"] is None  # no term reads it
    again = json.loads(done["recompute attention"].stdout)
    assert again["hfu_arithmetic"] == "hfu = mfu × (1 + 1.476e+11/4.555e+11 (full)) = 68.0%"
    assert refusal(done["recompute non-causal"]) == (
        "--causal: 'non-causal' does not apply: it enters only attention FLOPs (--attention); "
        "without them the 6·N MFU counts no attention and its HFU adds no recomputed attention "
        "core"
    )

    moe = json.loads(done["moe"].stdout)
    assert (MIXTRAL_ACTIVE, MIXTRAL_TOTAL) == (12_879_925_248, 46_702_792_704)
    assert (moe["model"]["params_active"], moe["model"]["params_total"]) == (
        MIXTRAL_ACTIVE,
        MIXTRAL_TOTAL,
    )
    assert abs(moe["mfu"] - 6 * MIXTRAL_ACTIVE * 4e6 / (989.4e12 * 512 * 7)) < 1e-12
    assert done["moe text"].stdout.splitlines()[0] == (
        "model mixtral-8x7b: N = 12.8799e9 active of 46.7028e9"
    )

    # a config.json counts as the catalogue's Llama 3 70B; it has no seq_len of its own
    assert json.loads(done["file"].stdout)["model"]["params_active"] == LLAMA_N
    assert refusal(done["file attention"]) == "--attention: needs --seq-len"

    assert refusal(done["both"]) == (
        "--params: '7e9' does not apply: model llama3-70b has its own size; give either --model "
        "or --params, not both"
    )
    assert refusal(done["dims"]) == (
        "--heads: '7' does not apply: model llama3-70b has its own dimensions; give them with "
        "--params instead of --model"
    )
    assert refusal(done["unknown"]).startswith("--model: unknown model 'llama3-7b'; did you mean")
    assert refusal(done["rate"]) == (
        "--model: 'llama3-70b' does not apply: a reported FLOP rate already counts what it "
        "counts; N is not read"
    )
    # "7s" is read (7 s: the flag names its unit, model.quantities); a word that is no unit of
    # time is refused naming the flag's unit
    assert refusal(done["grammar"]) == (
        "--step-seconds: '7x': 'x' is no unit of time; the value is a time, in s (write e.g. "
        "2.5, 2.5s or 2500ms)"
    )
