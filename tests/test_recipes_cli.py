"""The recipes as a user runs them (separate processes, text and ``--json``): other optimizers,
packed documents, verl's Ulysses and sliding windows under context parallelism. The hand figures
are derived in each docstring (the mechanisms' own derivations: tests/model/test_recipes.py)."""

from __future__ import annotations

import json

from tests.cli_runs import refusal, run_many, trainplan

LLAMA8 = ["--model", "llama3-8b", "--seq-len", "8192", "--global-batch", "64"]


def _json(*args: str) -> dict:
    done = trainplan("evaluate", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_optimizer_state_per_gpu_by_hand():
    """Llama 3 8B over dp 8 at ZeRO-1 (optimizer state ÷ 8):

    * Megatron-Core Muon (layer-wise distributed optimizer): hidden matrices 8 B
      (32 × 218,103,808 elements), embeddings and norms AdamW's 12 B (1,050,939,392):
      68,445,847,552 / 8 = 8,555,730,944 B on average. Whole matrices per rank
      (``LayerWiseDistributedOptimizer``'s packing, :mod:`trainplan.model.layer_wise`): the
      busiest rank holds 5 fc1, 3 fc2, 3 linear_qkv and 3 linear_proj, 8 B × (5 · 117,440,512
      + 3 · 58,720,256 + 3 · 25,165,824 + 3 · 16,777,216) = 7,113,539,584 B against the average
      6,979,321,856: 134,217,728 B more, 8,689,948,672 B;
    * 8-bit Adam (textbook profile): 6.03125 B × 6,979,321,856 + 12 B × 1,050,939,392 =
      54,705,307,648; / 8 = 6,838,163,456 B;
    * Adam: 12 B × 8,030,261,248 / 8 = 12,045,391,872 B.

    Muon's own traffic row (dp; tp 1 gathers nothing): the layer-wise optimizer all-reduces the
    matrices' FP32 gradients, 7/8 · 4 · 6,979,321,856 = 24,427,626,496 B beyond the
    reduce-scatter; its optimizer step holds Newton–Schulz's most for fc1 (28,672 × 4,096,
    not gathered): 6 · 4,096 · 28,672 = 704,643,072 B.
    """
    runs = run_many(
        {
            "muon": ["evaluate", *LLAMA8, "--dp", "8", "--optimizer", "muon", "--json"],
            "8bit": [
                "evaluate",
                *LLAMA8,
                "--dp",
                "8",
                "--framework",
                "textbook",
                "--optimizer",
                "adam-8bit",
                "--json",
            ],  # fmt: skip
            "adam": ["evaluate", *LLAMA8, "--dp", "8", "--json"],
        }
    )
    got = {k: json.loads(r.stdout) for k, r in runs.items()}
    busiest = 8 * (5 * 117_440_512 + 3 * 58_720_256 + 3 * 25_165_824 + 3 * 16_777_216)
    assert busiest == 7_113_539_584 and 8 * 32 * 218_103_808 // 8 == 6_979_321_856
    assert 68_445_847_552 // 8 + busiest - 6_979_321_856 == 8_689_948_672
    assert got["muon"]["memory"]["optimizer_bytes"] == 8_689_948_672
    assert got["muon"]["layout"]["optimizer"] == "muon"
    muon_rows = [r for r in got["muon"]["traffic"] if r["optimizer_step"]]
    assert [(r["axis"], r["bytes_per_step"]) for r in muon_rows] == [("dp", 24_427_626_496)]
    assert got["muon"]["memory"]["optimizer_step_bytes"] == 704_643_072
    assert not any(r["optimizer_step"] for r in got["adam"]["traffic"])
    assert got["8bit"]["memory"]["optimizer_bytes"] == 6_838_163_456
    assert got["adam"]["memory"]["optimizer_bytes"] == 12_045_391_872
    assert got["adam"]["layout"]["optimizer"] == "adam"
    # Muon's Newton–Schulz iterations and gathers lengthen the optimizer step
    assert got["muon"]["time"]["optimizer_s"] > got["adam"]["time"]["optimizer_s"]


def test_optimizers_refused_in_one_line():
    runs = run_many(
        {
            "8bit": ["evaluate", *LLAMA8, "--dp", "8", "--optimizer", "adam-8bit"],
            "dtype": [
                "evaluate",
                *LLAMA8,
                "--dp",
                "8",
                "--optimizer",
                "lion",
                "--set",
                "optimizer_dtype=bf16",
            ],  # fmt: skip
            "size": ["evaluate", "--params", "7B", "--dp", "8", "--optimizer", "muon"],
        }
    )
    assert runs["8bit"].returncode == 2
    assert refusal(runs["8bit"]).startswith(
        "--optimizer: adam-8bit does not run under megatron (it runs under textbook)"
    )
    assert refusal(runs["dtype"]).startswith("--set optimizer_dtype: sizes Adam's state")
    assert refusal(runs["size"]).startswith("--optimizer: muon needs the model's layers")


def test_packed_documents_mfu_both_ways():
    """Packs of 8,192 tokens of 2,048-token documents, Megatron's FLOPs convention, causal:
    each layer's attention core counts 4 · 2,048·2,049/2 = 8,392,704 pairs instead of
    8,192·8,193/2 = 33,558,528; model FLOPs = 3 passes × 32 layers × 2·B·P·a·(d_qk + d_v) with
    B 64, a 32, d_qk + d_v = 256: the pack's count exceeds the documents' by
    3·32·2·64·32·256 · 25,165,824 = 2,533,274,790,395,904 FLOPs, and the time follows the
    documents' count (a shorter step)."""
    packed = _json(
        *LLAMA8, "--dp", "8", "--mfu-convention", "megatron", "--document-length", "2048"
    )
    plain = _json(*LLAMA8, "--dp", "8", "--mfu-convention", "megatron")
    f = packed["flops"]
    assert f["pack_model_flops"] - f["model_flops"] == 2_533_274_790_395_904
    assert f["pack_model_flops"] == plain["flops"]["model_flops"]
    t = packed["time"]
    assert t["mfu_pack"] / t["mfu"] == f["pack_model_flops"] / f["model_flops"]
    assert plain["time"]["mfu_pack"] is None
    assert packed["time"]["step_s"] < plain["time"]["step_s"]
    assert packed["layout"]["document_lengths"] == [[2048, 1]]


DEEPSEEK_DP8 = [
    "--model", "deepseek-v3", "--gpu", "H100-SXM", "--dp", "8", "--ep", "8", "--pp", "1",
    "--recompute", "none", "--micro-batch", "1", "--global-batch", "64",
]  # fmt: skip


def test_packed_documents_pad_mla_values_under_megatron():
    """DeepSeek-V3 under megatron (dp 8, ep 8, pp 1, no recompute, b 1, s 4,096) over packed
    documents: Megatron-Core pads MLA's value to the query's head dimension and keeps the
    kernel's padded output apart (model.mla_thd): per MLA layer the value's padding
    2·4,096·128·(192 − 128) = 67,108,864 B and the output 2·4,096·128·192 = 201,326,592 B,
    268,435,456 B; 61 layers and the MTP module's: 62 × 268,435,456 = 16,642,998,272 B more
    activations (115.27 → 131.92 GB), the same in the text report."""
    runs = run_many(
        {
            "packed": ["evaluate", *DEEPSEEK_DP8, "--document-length", "1024", "--json"],
            "plain": ["evaluate", *DEEPSEEK_DP8, "--json"],
            "text": ["evaluate", *DEEPSEEK_DP8, "--document-length", "1024"],
        }
    )
    packed, plain = (json.loads(runs[k].stdout)["memory"] for k in ("packed", "plain"))
    assert packed["activations_bytes"] - plain["activations_bytes"] == 16_642_998_272
    assert (plain["activations_bytes"], packed["activations_bytes"]) == (
        115_274_465_280,
        131_917_463_552,
    )
    line = next(x for x in runs["text"].stdout.splitlines() if "activations (layers" in x)
    assert line.split()[-2:] == ["131.92", "GB"]


def test_document_length_refusals():
    runs = run_many(
        {
            "long": [
                "evaluate",
                *LLAMA8,
                "--document-length",
                "8000",
                "--set",
                "document_length_spread=500",
            ],
            "spread": ["evaluate", *LLAMA8, "--set", "document_length_spread=100"],
        }
    )
    assert refusal(runs["long"]).startswith("--document-length: mean")
    assert refusal(runs["spread"]).startswith("--set document_length_spread: needs document_length")


def test_verl_ulysses_repeats_kv_heads_by_hand():
    """Llama 3 8B (8 K/V heads) at cp 16 under fsdp2 with verl's Ulysses, B 16, b 1 (m 16):
    a rank holds S = 8,192/16 = 512 tokens; Q = O = 2·512·4,096 = 4,194,304 B, K + V =
    2·512·2,048 = 2,097,152 B repeated 16 // 8 = 2 times. Per layer 15/16 · (2·Q + 2·2·KV +
    3·O) = 27,525,120 B; × 32 layers × 16 micro-batches = 14,092,861,440 B. Transformer
    Engine's Ulysses (megatron) refuses cp 16 over 8 K/V heads, and verl's flavour by name."""
    args = ["--model", "llama3-8b", "--seq-len", "8192", "--global-batch", "16", "--cp", "16"]
    runs = run_many(
        {
            "verl": [
                "evaluate",
                *args,
                "--framework",
                "fsdp2",
                "--zero",
                "3",
                "--cp-kind",
                "ulysses-kv-repeat",
                "--json",
            ],  # fmt: skip
            "megatron": ["evaluate", *args, "--cp-kind", "ulysses-kv-repeat"],
            "te": ["evaluate", *args, "--cp-kind", "ulysses"],
        }
    )
    assert runs["verl"].returncode == 0, runs["verl"].stderr
    cp = next(r for r in json.loads(runs["verl"].stdout)["traffic"] if r["axis"] == "cp")
    assert cp["bytes_per_step"] == 14_092_861_440
    assert "K/V heads repeated" in cp["collective"]
    assert refusal(runs["megatron"]).startswith("--cp-kind: ulysses-kv-repeat is verl's Ulysses")
    assert refusal(runs["te"]).startswith("--cp: ulysses splits the heads over 16 ranks")


def test_sliding_windows_under_cp():
    """Gemma 3 27B has sliding-window layers: under megatron Transformer Engine refuses the ring
    (only all_gather and a2a take windows); the all-gather runs, and the estimate notes that
    it gathers the whole K/V for the windowed layers (exact for TE) beside the neighbour-only
    figure."""
    args = ["--model", "gemma3-27b", "--seq-len", "8192", "--global-batch", "16", "--cp", "2"]
    runs = run_many(
        {
            "ring": ["evaluate", *args],
            "gather": ["evaluate", *args, "--cp-kind", "all-gather", "--json"],
        }
    )
    assert refusal(runs["ring"]).startswith(
        "--cp-kind: ring on a model with sliding-window layers is refused by Transformer Engine"
    )
    notes = json.loads(runs["gather"].stdout)["notes"]
    assert any(n.startswith("cp: the all-gather gathers the whole K/V") for n in notes)


def test_attention_sinks_under_cp_run_only_ulysses():
    """gpt-oss has learned attention sinks (Transformer Engine's softmax_type learnable): under
    context parallelism Transformer Engine d0067d0da's get_attention_backend leaves only
    FusedAttention with cp_comm_type a2a (FlashAttention takes no sinks, FusedAttention no other
    cp_comm_type, the unfused backend no context parallelism), so the all-gather and the ring are
    refused in one line (exit 2) and Ulysses is evaluated."""
    args = ["--model", "gpt-oss-20b", "--gpus", "16", "--seq-len", "32768", "--cp", "2"]
    runs = run_many(
        {
            "gather": ["evaluate", *args, "--cp-kind", "all-gather"],
            "ring": ["evaluate", *args],
            "ulysses": ["evaluate", *args, "--cp-kind", "ulysses", "--json"],
        }
    )
    for key, kind in (("gather", "all-gather"), ("ring", "ring")):
        assert refusal(runs[key]) == (
            f"--cp-kind: {kind} on a model with learned attention sinks has no attention backend "
            "in Transformer Engine (get_attention_backend: with softmax_type learnable and "
            "context parallelism only FusedAttention with cp_comm_type a2a); use cp_kind ulysses"
        )
    assert runs["ulysses"].returncode == 0, runs["ulysses"].stderr[-2000:]
    assert json.loads(runs["ulysses"].stdout)["layout"]["cp"] == 2


def test_search_chooses_an_optimizer_only_when_allowed():
    """The default search keeps Adam; given adam and muon it chooses among both (Adam's
    cheaper step wins here), and adam-8bit alone under megatron has no framework to run it."""
    base = ["search", "--model", "llama3-8b", "--gpus", "8", "--seq-len", "8192",
            "--global-batch", "64", "--tp", "1", "--pp", "1", "--json"]  # fmt: skip
    runs = run_many(
        {
            "default": base,
            "both": [*base, "--optimizer", "muon", "--optimizer", "adam"],
            "none": [*base, "--optimizer", "adam-8bit"],
        }
    )
    best = json.loads(runs["default"].stdout)
    assert best["layout"]["optimizer"] == "adam"
    both = json.loads(runs["both"].stdout)
    assert both["layout"]["optimizer"] in ("adam", "muon")
    assert runs["none"].returncode != 0
