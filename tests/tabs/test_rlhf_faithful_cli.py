"""``trainplan rlhf --model …`` (the faithful accounting) and ``trainplan rlhf-plan``: every term
with its source, the JSON keys the documentation names, bad inputs as one line and exit 2, the seed's
figures untouched, and the measured-configurations table of the RLHF guide."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from trainplan.interface.cli import _register, cli
from trainplan.interface.rlhf_measured import rows, table_markdown
from trainplan.interface.tabs import rlhf_report

_register()
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
    for want in ("engine weights (BF16, ÷ tp)", "FP32 logits", "log-softmax/entropy temporary"):
        assert any(want == n for _, n in names), want
    assert any(n.startswith("KV cache") for _, n in names)
    assert any(n.startswith("decode") for _, n in names)
    logits = next(t for t in f["terms"] if t["term"] == "FP32 logits")
    assert logits["value"] == 9_965_666_304  # 4 · 16,384 · 152,064
    assert f["kv_bytes_per_token"] == 57_344
    assert f["flops_by_role"]["scoring"]["actor"] > 0  # the old-log-prob pass


def test_faithful_text_prints_every_term_and_a_timeline():
    out = run(*GRPO7, "--gpus", "16", "--rollout-gpus", "8", "--off-policy", "1").stdout
    for line in ("The original planner's accounting (textbook)", "Faithful accounting", "engine budget",
                 "KV cache", "decode", "FP32 logits", "one-step off-policy", "pool 1 (GPUs 8–15)"):  # fmt: skip
        assert line in out, line


def test_seed_figures_unchanged_without_model():
    r = rlhf_report("grpo", 70e9, 70e9)
    assert r["accounting"] == "seed" and r["bytes_per_policy_param"] == 20
    assert "faithful" not in r


BAD = [
    (["--completion-tokens", "0"], "completion_tokens: '0' must be at least 1"),
    (["--prompt-tokens", "-5"], "prompt_tokens"),
    (["--train-batch", "1000"], "train_batch: 1000 must divide"),
    (["--train-batch", "8"], "not a multiple of the group size 16"),
    (["--engine-memory-fraction", "1.2"], "engine_memory_fraction: 1.2 must be in (0, 1)"),
    (["--engine-memory-fraction", "0"], "engine_memory_fraction: 0 must be in (0, 1)"),
    (["--offload", "reference=optimizer"], "reference is frozen"),
    # CPU Adam alone is model.offload's rule: FSDP2 offloads only with its parameters
    (["--framework", "fsdp2", "--offload", "optimizer"], "actor=optimizer — fsdp2 ZeRO-3 has no"),
    (["--logits", "sparse"], "logits: 'sparse' is not one of full, chunked, fused"),
    (["--policy-params", "7B"], "policy_params: '7B' does not apply"),
    (["--framework", "textbook"], "framework: 'textbook' is the original planner's accounting"),
    (["--off-policy", "1"], "off_policy: 1 needs the engine on GPUs of its own"),
]


@pytest.mark.parametrize(("extra", "message"), BAD, ids=[b[1][:30] for b in BAD])
def test_bad_inputs_one_line_exit_2(extra, message):
    res = run(*GRPO7, *extra)
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.strip().splitlines() if x]
    assert len(lines) == 1 and message in lines[0]


def test_faithful_options_need_model():
    res = run("rlhf", "--algorithm", "grpo", "--policy-params", "70B", "--gpus", "8")
    assert res.exit_code == 2 and "add --model NAME" in res.output


def test_plan_bad_inputs_and_json():
    base = ["rlhf-plan", "--algorithm", "grpo", "--model", "qwen2.5-7b", "--reward", "rule"]
    res = run(*base, "--gpus", "8", "--completion-tokens", "0")
    assert res.exit_code == 2 and "completion_tokens" in res.output
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
    trainplan.interface.rlhf_measured`` prints (the planner's figures, not hand-copied)."""
    evaluated = rows()
    assert len(evaluated) >= 5
    assert table_markdown(evaluated) in README
    assert all(r["fits"] for r in evaluated)  # every published run ran: the planner fits it
