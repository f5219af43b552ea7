"""Capacity factors beyond what the frameworks run, as a user types them (each its own process):
refused in one line naming ``moe_capacity_factor``, its value and the rule, or counted as the
framework counts them (model.moe_rules.capacity_violation). Figures derived by hand here.

* Megatron-Core padded (``moe_pad_to_capacity``): ``C = ceil(T·k/E · cf)`` above the T tokens a
  rank routes cannot be filled (``apply_router_token_dropping`` keeps every token for every
  expert, ``permute`` under ``drop_and_pad`` views E·T indices as ``[E, C]``): gpt-oss-20b has
  E = 32, k = 4, so padded ``cf`` is at most 32/4 = 8; at 8, ``C = ceil(4,096·4/32·8) = 4,096 = T``.
* Megatron-Core without padding: the same capacity drops nothing (``logical_and`` with an
  all-ones mask), so the run is dropless.
* DeepSpeed pads its ``[E, C, h]`` buffer to C unclipped (``topkgating``): Mixtral 8x7B (E = 8,
  k = 2, h = 4,096) at T = 4,096, cf = 1e30: ``C = ceil(4,096/8 · 2e30)`` ≈ 1.02e33 in float32,
  ``8 × 1.02e33 × 4,096`` ≈ 3.36e37 elements, beyond a tensor's int64 size (2^63 − 1).
"""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import refusal, run_many

GPT_OSS_20B = [
    *("evaluate", "--model", "gpt-oss-20b", "--gpu", "H100-SXM", "--gpus", "8", "--dp", "8"),
    *("--ep", "8", "--global-batch", "8", "--seq-len", "4096"),
]
"""gpt-oss-20b (24 MoE layers, 32 experts, top-4, h = 2,880), ep 8, T = 4,096 tokens a rank."""

PAD = ("--set", "moe_pad_to_capacity=true")

MIXTRAL = [
    *("evaluate", "--model", "mixtral-8x7b", "--gpu", "H100-SXM", "--framework", "deepspeed"),
    *("--dp", "8", "--ep", "8", "--global-batch", "64", "--seq-len", "4096"),
]

DROPLESS_EP_BYTES = 4096 * 4 * 2880 * 2 * 7 // 8 * 2 * 2 * 24
"""T·k = 16,384 rows of 2,880 BF16 a dispatch, 7/8 to other ranks, dispatch and combine,
forward and backward, 24 layers: 7,927,234,560 bytes."""


@pytest.fixture(scope="module")
def runs():
    return run_many(
        {
            "padded 1e30": [*GPT_OSS_20B, "--set", "moe_capacity_factor=1e30", *PAD],
            "padded 9": [*GPT_OSS_20B, "--set", "moe_capacity_factor=9", *PAD],
            "padded 8": [*GPT_OSS_20B, "--set", "moe_capacity_factor=8", *PAD, "--json"],
            "dropping 1e30": [*GPT_OSS_20B, "--set", "moe_capacity_factor=1e30", "--json"],
            "deepspeed 1e30": [*MIXTRAL, "--set", "moe_capacity_factor=1e30"],
            "deepspeed 1e6": [*MIXTRAL, "--set", "moe_capacity_factor=1e6", "--json"],
        }
    )


def _ep(done) -> int:
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    return next(a for a in out["traffic"] if a["axis"] == "ep")["bytes_per_step"]


def test_megatron_padded_capacity_above_the_tokens_is_refused(runs):
    line = refusal(runs["padded 1e30"])
    assert line.startswith("--set moe_capacity_factor: 1e+30 with moe_pad_to_capacity")
    assert "C = 5.12e+32 rows" in line  # 4,096·4/32 · 1e30
    assert "T = 4,096 tokens" in line and "E/k = 32/4 = 8" in line
    line = refusal(runs["padded 9"])
    assert "moe_capacity_factor: 9 " in line and "C = 4,608 rows" in line  # 512 × 9


def test_megatron_padded_at_e_over_k_runs_every_expert_on_every_token(runs):
    # C = T = 4,096 rows an expert from each rank: E·C = 131,072 rows a dispatch, 8 × T·k
    assert _ep(runs["padded 8"]) == 8 * DROPLESS_EP_BYTES == 63_417_876_480


def test_megatron_capacity_above_the_tokens_without_padding_drops_nothing(runs):
    assert _ep(runs["dropping 1e30"]) == DROPLESS_EP_BYTES


def test_deepspeed_buffer_beyond_a_tensor_is_refused(runs):
    line = refusal(runs["deepspeed 1e30"])
    assert line.startswith("--set moe_capacity_factor: 1e+30 gives DeepSpeed")
    assert "[8, 1.02e+33, 4,096]" in line and "2^63" in line
    # 1e6: C = 512 × 2e6 = 1.024e9 rows, 8 × 1.024e9 × 4,096 = 3.4e13 elements: counted
    done = runs["deepspeed 1e6"]
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["memory"]["fits"] is False


TEXTBOOK = [*GPT_OSS_20B, "--framework", "textbook", "--json"]
"""The single-efficiency time model (textbook): FLOPs ÷ (peak × kernel efficiency)."""

EP_1 = [*TEXTBOOK]
EP_1[EP_1.index("--ep") + 1] = "1"
"""The same at ep 1 (the 8 GPUs dp 8, every expert on every GPU)."""


@pytest.fixture(scope="module")
def textbook():
    return run_many(
        {
            "balanced": TEXTBOOK,
            "imbalanced": [*TEXTBOOK, "--set", "moe_imbalance=1.5"],
            "ep 1 balanced": EP_1,
            "ep 1 imbalanced": [*EP_1, "--set", "moe_imbalance=1.5"],
        }
    )


def _time(done) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["time"]


def test_textbook_experts_run_at_the_busiest_ranks_rows(textbook):
    # Imbalance 1.5 at ep 8: the busiest rank's experts compute ceil(1.5 × 16,384) = 24,576 rows,
    # 8,192 more than T·k; one expert's SwiGLU weights 3 × 2,880 × 2,880 = 24,883,200:
    # 2 × 8,192 × 24,883,200 FLOPs a layer forward, × 3 with the backward, × 24 MoE layers
    extra_flops = 2 * 8192 * 24_883_200 * 3 * 24
    assert extra_flops == 29_353_417_113_600
    balanced, imbalanced = _time(textbook["balanced"]), _time(textbook["imbalanced"])
    efficiency = balanced["kernel_efficiency"]  # the textbook's GEMM efficiency, 0.444
    extra_s = extra_flops / (989.4e12 * efficiency)  # H100-SXM dense BF16 peak
    assert imbalanced["compute_s"] - balanced["compute_s"] == pytest.approx(extra_s, rel=1e-9)
    assert extra_s == pytest.approx(0.066775, abs=1e-6)
    # ep 1: one rank computes all of its own k·T rows whatever the routing
    assert (
        _time(textbook["ep 1 imbalanced"])["compute_s"]
        == _time(textbook["ep 1 balanced"])["compute_s"]
    )


MIXTRAL_MEGATRON = [
    *("evaluate", "--model", "mixtral-8x7b", "--gpu", "H100-SXM", "--dp", "8"),
    *("--global-batch", "64", "--seq-len", "4096", "--json"),
]
"""Mixtral 8x7B (32 MoE layers, E = 8, k = 2, h = 4,096) under megatron, T = 4,096, m = 8."""


@pytest.fixture(scope="module")
def clipped():
    calls = {}
    for ep, imbalances in ((8, (4, 5)), (2, (2, 3))):
        for im in imbalances:
            calls[ep, im] = [*MIXTRAL_MEGATRON, "--ep", str(ep), "--set", f"moe_imbalance={im}"]
    return run_many(calls)


def _figures(done) -> tuple:
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    ep = next(a for a in out["traffic"] if a["axis"] == "ep")["bytes_per_step"]
    return out["time"]["step_s"], out["memory"]["total_bytes"], ep


def test_an_imbalance_beyond_every_token_is_clipped(clipped):
    # The busiest rank receives at most ep·T·min(k, E/ep) rows: each source's token once on
    # each of its E/ep experts, k in all. ep 8: 8 × 4,096 × min(2, 1) = 32,768 rows = 4 × T·k
    # (imbalance 4 = E/k); ep 2: 2 × 4,096 × min(2, 4) = 16,384 rows = 2 × T·k.
    # ep row: rows × 4,096 × 2 bytes × (ep − 1)/ep, × 2 (dispatch, combine) × 2 (forward,
    # backward) × 32 layers × 8 micro-batches.
    assert _figures(clipped[8, 5]) == _figures(clipped[8, 4])
    assert _figures(clipped[8, 5])[2] == 32768 * 4096 * 2 * 7 // 8 * 4 * 32 * 8 == 240_518_168_576
    assert _figures(clipped[2, 3]) == _figures(clipped[2, 2])
    assert _figures(clipped[2, 3])[2] == 16384 * 4096 * 2 // 2 * 4 * 32 * 8 == 68_719_476_736


def test_the_report_says_an_imbalance_was_counted_at_the_bound(clipped):
    # The ep traffic note names the typed figure and the one counted (model.moe_rows.
    # imbalance_bound: min(ep, E/k) = min(8, 8/2) = 4 at ep 8; min(2, 4) = 2 at ep 2).
    notes = {key: json.loads(clipped[key].stdout)["notes"] for key in ((8, 5), (8, 4), (2, 3))}
    ep_note = {key: next(n for n in ns if n.startswith("ep traffic")) for key, ns in notes.items()}
    assert "moe_imbalance=5, counted as 4: the most a rank receives at ep 8 with 8 experts, " \
        "top-2" in ep_note[8, 5]  # fmt: skip
    assert "counted as" not in ep_note[8, 4]
    assert "moe_imbalance=3, counted as 2: the most a rank receives at ep 2" in ep_note[2, 3]


def test_megatron_refuses_moe_at_tp_above_one_without_sequence_parallelism():
    # Megatron-Core's MoELayer.forward raises in training when tp > 1 and sequence parallelism
    # is off (moe_layer.py, d98e8a64dd); fsdp2 (torchtitan) runs it.
    base = [
        *("evaluate", "--model", "mixtral-8x7b", "--gpu", "H100-SXM", "--dp", "4", "--tp", "2"),
        *("--pp", "2", "--ep", "4", "--etp", "1", "--recompute", "full"),
        *("--no-sequence-parallel", "--global-batch", "64", "--seq-len", "8192"),
    ]
    done = run_many({"megatron": base, "fsdp2": [*base, "--framework", "fsdp2"]})
    line = refusal(done["megatron"])
    assert line.startswith(
        "--sequence-parallel: off with tp 2 on a MoE model under --framework megatron"
    )
    assert done["fsdp2"].returncode == 0, done["fsdp2"].stderr


def test_an_imbalance_counted_at_the_bound_is_said_under_every_dispatcher():
    # Under DeepEP the ep traffic note (NCCL all-to-all only) is not printed; the clip is said
    # in its own note, text and JSON (interface.render.moe_text.bound_notes).
    args = [*MIXTRAL_MEGATRON[:-1], "--ep", "8", "--set", "moe_imbalance=5"]
    args += ["--set", "moe_dispatcher=deepep"]
    done = run_many({"text": args, "json": [*args, "--json"]})
    said = (
        "the model counts the busiest rank's rows (moe_imbalance=5, counted as 4: the most a "
        "rank receives at ep 8 with 8 experts, top-2)"
    )
    assert said.replace("(moe", "(--set moe") in done["text"].stdout
    assert said.replace("(moe", "(--set moe") in json.loads(done["json"].stdout)["notes"]
