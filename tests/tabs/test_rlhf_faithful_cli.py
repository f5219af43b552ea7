"""``trainplan rlhf --model …`` (the faithful accounting) and ``trainplan rlhf-plan``: every term
with its source, the JSON keys the documentation names, bad inputs as one line and exit 2, the seed's
figures untouched, and the measured-configurations table of the RLHF guide."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests import cli_runs
from tests.cli_runs import refusal
from trainplan.interface.cli import cli, register_commands
from trainplan.interface.rlhf.measured import rows, table_markdown
from trainplan.interface.tabs import rlhf_report

register_commands()
README = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "rlhf.md").read_text()
GRPO7 = ["rlhf", "--algorithm", "grpo", "--model", "qwen2.5-7b", "--reward", "rule"]


def run(*args):
    return CliRunner().invoke(cli, list(args))


def test_faithful_json_keys_and_terms_with_sources():
    r = json.loads(
        run(
            *GRPO7, "--gpus", "16", "--framework", "fsdp2", "--completion-tokens", "3072", "--json"
        ).stdout
    )
    assert r["accounting"] == "faithful" and r["bytes_per_policy_param"] == 18  # the seed's, beside
    f = r["faithful"]
    for key in (
        "framework", "zero_stage", "gpus", "gpu", "sequences", "group_size", "tokens_per_sequence",
        "micro_batch_sequences", "train_batch", "kv_bytes_per_token", "flops_by_role",
        "phase_flops_total", "placement", "off_policy", "roles", "terms", "pools",
        "step_phase_seconds", "step_seconds", "tokens_per_second", "fits", "capacity_bytes",
        "assumptions", "defaults_used",
    ):  # fmt: skip
        assert key in f, key
    assert {x["role"] for x in f["roles"]} == {"rollout", "actor", "reference"}
    assert all(t["source"] for t in f["terms"])
    names = {(t["role"], t["term"]) for t in f["terms"]}
    for want in (
        "engine weights (BF16, ÷ tp)",
        "logits (update)",
        "log-prob transient beside them (update)",
        "logits + log-prob transient (scoring)",
    ):
        assert any(want == n for _, n in names), want
    assert any(n.startswith("KV cache") for _, n in names)
    assert any(n.startswith("decode") for _, n in names)
    logits = next(t for t in f["terms"] if t["term"] == "logits (update)")
    # fsdp2 (verl's HF path under BF16 autocast): BF16 logits, 2 · 16,384 · 152,064 (was FP32, 4 B)
    assert logits["value"] == 4_982_833_152
    assert f["kv_bytes_per_token"] == 57_344
    assert f["flops_by_role"]["scoring"]["actor"] > 0  # the old-log-prob pass


def test_old_log_prob_engine_is_the_users_not_the_default():
    """``--old-log-prob engine`` takes the engine's log-probs: no actor forward among the scoring
    FLOPs, and not listed as a default (it was dropped as "not given" with every False option,
    and the default, recompute, ran instead)."""
    r = json.loads(run(*GRPO7, "--old-log-prob", "engine", "--json").stdout)
    f = r["faithful"]
    assert f["old_log_prob"] is False and "old_log_prob" not in f["defaults_used"]
    assert set(f["flops_by_role"]["scoring"]) == {"reference"}
    # the textbook section beside it reads the same rule: the reference's 2N per token alone,
    # 2 · 7,615,616,512 · 83,886,080 = 1.278e18 (it counted the actor's forward too: 2.555e18)
    assert r["old_log_prob"] is False and r["phase_flops"] == f["phase_flops_total"]
    assert (
        r["phase_flops"]["scoring"] == 2 * 7_615_616_512 * 83_886_080 == 1_277_688_431_949_905_920
    )


def test_faithful_text_prints_every_term_and_a_timeline():
    out = run(*GRPO7, "--gpus", "16", "--rollout-gpus", "8", "--off-policy", "1").stdout
    for line in ("Textbook accounting (16 / 2 B per parameter)", "Faithful accounting", "engine budget",
                 "KV cache", "decode", "FP32 logits", "one-step off-policy", "pool 1 (GPUs 8–15)"):  # fmt: skip
        assert line in out, line


def test_seed_figures_unchanged_without_model():
    r = rlhf_report("grpo", 70e9, 70e9)
    assert r["accounting"] == "textbook" and r["bytes_per_policy_param"] == 20
    assert "faithful" not in r


BAD = [
    (["--completion-tokens", "0"], "--completion-tokens: '0' must be at least 1"),
    (["--prompt-tokens", "-5"], "--prompt-tokens"),
    (["--train-batch", "1000"], "--train-batch: 1,000 must divide"),
    (["--train-batch", "8"], "not a multiple of the group size 16"),
    (
        ["--engine-memory-fraction", "1.2"],
        "--engine-memory-fraction: 1.2 must be above 0 and below 1",
    ),
    (["--engine-memory-fraction", "0"], "--engine-memory-fraction: 0 must be above 0 and below 1"),
    (["--offload", "reference=optimizer"], "reference is frozen"),
    # CPU Adam alone is model.offload's rule: FSDP2 offloads only with its parameters
    (["--framework", "fsdp2", "--offload", "optimizer"], "actor=optimizer — fsdp2 ZeRO-3 has no"),
    (["--logits", "sparse"], "logits: 'sparse' is not one of full, chunked, fused"),
    (["--policy-params", "7B"], "--policy-params: '7B' does not apply"),
    (["--framework", "textbook"], "framework: 'textbook' is the accounting without --model"),
    (["--off-policy", "1"], "--off-policy: 1 needs the engine on GPUs of its own"),
    (  # OpenRLHF's split_rollout_samples: at least the actor's dp micro-batches of one rollout
        ["--framework", "deepspeed", "--prompts", "4", "--samples-per-prompt", "4", "--gpus", "32"],
        "actor dp: 32 — above the step's 16 rollouts: OpenRLHF splits them",
    ),
]


@pytest.mark.parametrize(("extra", "message"), BAD, ids=[b[1][:30] for b in BAD])
def test_bad_inputs_one_line_exit_2(extra, message):
    res = run(*GRPO7, *extra)
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.strip().splitlines() if x]
    assert len(lines) == 1 and message in lines[0]


def test_openrlhf_refuses_the_actor_reference_and_reward_on_one_pool():
    """``--framework deepspeed`` with a reward model and ``--rollout-gpus``: the actor, the
    reference and the reward model would share pool 1 without the engine, a group OpenRLHF does
    not make (it colocates actor + reference, critic + reward, or every role:
    model/rlhf/split.py pool_refusal): one line, exit 2. With a rule reward pool 1 is actor +
    reference (--train.colocate_actor_ref), which runs."""
    args = ["rlhf", "--algorithm", "grpo", "--model", "qwen2.5-7b", "--framework", "deepspeed"]
    for fmt in ([], ["--json"]):  # as a user runs it: its own process, text and JSON
        res = trainplan(*args, "--gpus", "16", "--rollout-gpus", "8", *fmt)
        lines = [x for x in res.stderr.strip().splitlines() if x]
        assert res.returncode == 2 and len(lines) == 1 and not res.stdout, res.stderr
        assert "placement: pool 1 puts actor, reference, reward on one set of GPUs" in lines[0]
        assert "which OpenRLHF (deepspeed) does not" in lines[0]
    ok = trainplan(*args, "--reward", "rule", "--gpus", "16", "--rollout-gpus", "8")
    assert ok.returncode == 0, ok.stderr


def test_faithful_options_need_model():
    res = run("rlhf", "--algorithm", "grpo", "--policy-params", "70B", "--gpus", "8")
    assert res.exit_code == 2 and "add --model NAME" in res.output


def test_plan_bad_inputs_and_json():
    base = ["rlhf-plan", "--algorithm", "grpo", "--model", "qwen2.5-7b", "--reward", "rule"]
    res = run(*base, "--gpus", "8", "--completion-tokens", "0")
    assert res.exit_code == 2 and "--completion-tokens" in res.output
    res = run(*base, "--gpus", "8", "--samples-per-prompt", "16", "--train-batch", "8")
    assert res.exit_code == 2 and "group size" in res.output
    r = json.loads(run(*base, "--gpus", "8", "--prompts", "64", "--json").stdout)
    for key in (
        "status",
        "reason",
        "best",
        "colocated",
        "split",
        "tables_seconds",
        "solve_seconds",
        "options",
    ):
        assert key in r, key
    assert r["status"] == "optimal" and r["best"]["fits"]
    assert r["best"]["step_seconds"] <= min(
        p["step_seconds"] for p in (r["colocated"], r["split"]) if p is not None
    )


def test_readme_measured_table_is_the_planners():
    """The RLHF guide's table of published RLHF steps is what ``python -m
    trainplan.interface.rlhf.measured`` prints (the planner's figures, not hand-copied)."""
    evaluated = rows()
    assert len(evaluated) >= 5
    assert table_markdown(evaluated) in README
    # every published run ran: the planner fits it, but one. The 8B one-step-off-policy row is
    # sized with verl's Megatron log-prob path, whose update holds the temperature division's
    # gradient beside the in-place cross-entropy gradient (model.rlhf.logits, 8 B per element):
    # 84.83 GB of 83.21, 1.62 GB over — NeMo-RL's own log-prob path is not modelled (the guide
    # says so). 84.24 GB before NCCL's channels by placement and their set-up: the 8 training
    # GPUs' dp 8, gradient-statistics and world rings lie in one node, 24 channels × 12 MiB +
    # (32 × 3 + 2) × 2 MiB = 484 MiB each, against 384: 3 × 100 MiB = 314,572,800 B more.
    # 84.83 GB, 1.62 over, with NVLink SHARP (model/terms/nvls_memory.py): the dp ring of 8 in
    # the node reduce-scatters and all-gathers, 2 MiB of credits and 16 × 2 × (128 KiB × 8) × 8 =
    # 256 MiB of buffers; the gradient-statistics and world rings 2 MiB of credits each: 262 MiB.
    # 85.13 GB, 1.92 over, with the training pool's side of the weight-sync NCCL group (the
    # megatron profile's engine apart receives over it, verl's one-step off-policy
    # actor_rollout group: model.rlhf.split.update_group), one ring, 24 × 12 MiB = 301,989,888 B
    over = [r["says"] for r in evaluated if not r["fits"]]
    assert over == ["Llama 3.1 8B GRPO, 16 H100: 8 generate, 8 train, one step off-policy"]
    off = next(r for r in evaluated if not r["fits"])
    assert 84_243_544_064 + 3 * 100 * 2**20 == 84_558_116_864
    assert 84_558_116_864 + 262 * 2**20 == 84_832_843_776
    # 86.62 GB, 3.41 over, with Transformer Engine's placeholder weight gradients the trained
    # actor holds in every phase (model/terms/dummy_wgrads.py; Llama 3.1 8B at tp 1: QKV
    # [6,144, 4,096], proj [4,096, 4,096], FC1 [28,672, 4,096], FC2 [4,096, 14,336] and the
    # output layer [128,256, 4,096] in BF16, 1,486,880,768 B)
    assert 84_832_843_776 + 24 * 12 * 2**20 == 85_134_833_664
    dummies = 2 * 4096 * (6144 + 4096 + 28672 + 14336 + 128256)
    assert dummies == 1_486_880_768
    assert off["peak_bytes"] == 85_134_833_664 + dummies == 86_621_714_432


# ------------------------------------------------------------------ as a user runs it (processes)


def trainplan(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_runs.trainplan(*args, timeout=300)


DSV3 = ["rlhf", "--algorithm", "grpo", "--model", "deepseek-v3", "--reward", "rule", "--gpus", "64"]


def test_a_plan_that_does_not_fit_says_so_and_what_would_fit():
    """DeepSeek-V3 GRPO colocated on 64 H100: the input is fine, the plan does not fit. The
    engine at verl's default tp 2 holds half the BF16 weights, 683.68 GB per GPU, plus one
    5,120-token sequence's MLA cache, 61 layers × (512 + 64) × 2 B × 5,120 = 359,792,640 B —
    against its budget of 0.5 × the 81,079 MiB CUDA reports (the driver's Total 81,559 less its
    480 MiB Reserved: vLLM multiplies gpu_memory_utilization by cudaMemGetInfo's total) =
    42,508,746,752 B. At tp 32 the weights are
    ≈ 2 × 683.68 / 32 = 42.73 GB, with the sequence 43.09 GB, still above; tp 64 holds it. The
    roles' model state alone (the seed's 16 B per trained and 2 B per frozen parameter) is
    12.29 TB, ⌈12.29e12 / 83.21e9⌉ = 148 GPUs even fully sharded. Said as a verdict (exit 0,
    as evaluate's DOES NOT FIT), never as a negative KV space."""
    text = trainplan(*DSV3)
    assert text.returncode == 0, text.stderr
    out = text.stdout
    assert "placement: colocated, synchronous — DOES NOT FIT" in out
    assert "KV space" not in out + text.stderr and "-640" not in out
    assert (
        "does not fit: the rollout engine at tp 2 (the default: verl's) needs 684.04 GB per GPU"
        in out
    )
    assert "one 5,120-token sequence's KV cache 0.36 GB" in out
    assert "budget, fraction 0.5 (the default) × 85.02 GB = 42.51 GB" in out
    assert "to fit: the engine: --rollout-tp 64 or more holds it at fraction 0.5" in out
    assert "to fit: at least 148 GPUs" in out and "trainplan rlhf-plan" in out
    f = json.loads(trainplan(*DSV3, "--json").stdout)["faithful"]
    assert f["fits"] is False
    assert f["does_not_fit"][0].startswith("the rollout engine at tp 2")
    assert any(line.startswith("at least 148 GPUs") for line in f["to_fit"])
    engine = next(r for r in f["roles"] if r["role"] == "rollout")
    kv = next(t for t in f["terms"] if t["role"] == "rollout" and t["term"].startswith("KV"))
    assert kv["value"] == 61 * (512 + 64) * 2 * 5120 == 359_792_640
    assert engine["phase_bytes"]["rollout"] > 0.5 * 80 * 2**30


def test_a_default_is_never_blamed_for_the_users_gpu_count():
    """Llama 3 405B on 1 GPU: verl's default engine tp 2 cannot divide 1 GPU, so the default
    is tp 1 there, said as a default; the verdict is what 1 GPU cannot hold (the engine's
    811.71 GB of weights alone; 7.31 TB of model state, ≥ 88 GPUs). A tp 2 the user gives is
    refused naming the user's own options."""
    base = ["rlhf", "--algorithm", "grpo", "--model", "llama3-405b", "--reward", "rule"]
    res = trainplan(*base, "--gpus", "1")
    assert res.returncode == 0 and "rollout_tp" not in res.stderr
    assert "tp 1 (the default: verl's 2 divides no odd count)" in res.stdout
    assert "its weights 811.71 GB" in res.stdout and "to fit: at least 88 GPUs" in res.stdout
    f = json.loads(trainplan(*base, "--gpus", "1", "--json").stdout)["faithful"]
    assert f["defaults_used"]["rollout_tp"] == 1 and f["fits"] is False
    given = trainplan(*base, "--gpus", "1", "--rollout-tp", "2")
    assert given.returncode == 2
    assert given.stderr.strip() == (
        "Error: --rollout-tp: 2 does not divide the engine's 1 GPU (--gpus 1)"
    )


def test_each_source_is_cited_once_and_rows_refer_to_it_by_key():
    """The terms table's rows carry a key ([1], [2], …); each source's text is printed once
    under the table, and the JSON's ``sources`` holds each once, ``terms[].source`` its key."""
    args = ["rlhf", "--algorithm", "grpo", "--model", "llama3-8b", "--reward", "rule"]
    out = trainplan(*args, "--gpus", "8").stdout
    f = json.loads(trainplan(*args, "--gpus", "8", "--json").stdout)["faithful"]
    sources = f["sources"]
    assert list(sources) == [str(k) for k in range(1, len(sources) + 1)]
    assert len(set(sources.values())) == len(sources) < len(f["terms"])
    assert {t["source"] for t in f["terms"]} == set(sources)
    for key, text in sources.items():
        assert out.count(text) == 1, text
        assert f"[{key}] {text}" in out
    megatron = next(k for k, v in sources.items() if v.startswith("Megatron-LM"))
    rows = [line for line in out.splitlines() if line.rstrip().endswith(f"[{megatron}]")]
    assert len(rows) == 4  # the actor's weights, gradients, optimizer state; the reference's


def test_more_training_ranks_than_sequences_is_refused():
    """A training dp above the sequences of an update leaves ranks with no rollout to train on;
    the training layout would round the batch up to one micro-batch per rank and the step time
    would grow with the GPU count (4,000,000 GPUs: 114 s of training for 16,384 rollouts).
    Refused as one line naming --gpus; at dp = the sequences it still runs."""
    base = ["rlhf", "--algorithm", "grpo", "--model", "llama3-8b"]
    line = refusal(trainplan(*base, "--gpus", "4,000,000"))
    assert line == (
        "--gpus: the training roles' 4,000,000 GPUs at --train-tp × --train-pp = 1 are dp 4,000,000, "
        "above the 16,384 sequences an update trains on: a data-parallel rank would have no "
        "rollout (fewer --gpus, more --rollout-gpus, a larger --train-tp or --train-pp, or more "
        "--prompts)"
    )
    assert "dp 64, above the 32 sequences" in refusal(
        trainplan(*base, "--gpus", "64", "--train-batch", "32")
    )
    assert trainplan(*base, "--gpus", "64", "--train-batch", "64").returncode == 0
