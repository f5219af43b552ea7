"""One rule and one spelling a surface at a time, each ``trainplan`` call its own process
(:mod:`tests.cli_runs`): a batch in tokens refused alike by evaluate, search and a sweep point;
``rlhf-plan``'s no-fit lines naming what capped the engine's tp and suggesting ZeRO-3 only where
it fits, in each surface's spelling; ``example``'s hint for a pipeline flag; named values in any
case; the model and the part echoed as the catalogues spell them."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from tests.cli_runs import refusal, run_many, trainplan

NOT_WHOLE = (
    "--global-batch-tokens: 4,000,000 is not a whole number of sequences of 8,192 "
    "(3,997,696 is 488, 4,005,888 is 489)"
)
"""4,000,000 / 8,192 = 488.28…: 488 × 8,192 = 3,997,696 and 489 × 8,192 = 4,005,888 beside it."""


def test_a_batch_in_tokens_is_refused_alike_by_evaluate_search_and_a_sweep(tmp_path: Path):
    """The tokens-to-sequences rule was written three times: evaluate named the nearest whole
    batches, search did not, a sweep point said "give seq_len" even where the model publishes
    one. Each now calls the one rule (``interface.batch_inputs.sequences_of_tokens``), each
    naming the key as its surface does (a flag on the command line, the key in a grid); a sweep
    point without ``seq_len`` reads Llama 3 8B's published 8,192: 4,194,304 / 8,192 = 512."""
    grid = tmp_path / "g.toml"
    grid.write_text(
        'command = "evaluate"\n[layout]\ntp = 8\n[sweep]\nmodel = ["llama3-8b"]\n'
        'gpu = ["H100-SXM"]\ngpus = [8]\nglobal_batch_tokens = [4000000, 4194304]\n'
    )
    args = ["--model", "llama3-8b", "--gpus", "8", "--global-batch-tokens", "4,000,000"]
    runs = run_many(
        {
            "evaluate": ["evaluate", *args],
            "search": ["search", *args],
            "sweep": ["sweep", str(grid), "--out", str(tmp_path / "o.parquet")],
        }
    )
    assert refusal(runs["evaluate"]) == NOT_WHOLE
    assert refusal(runs["search"]) == NOT_WHOLE
    assert runs["sweep"].returncode == 0, runs["sweep"].stderr
    rows = pd.read_parquet(tmp_path / "o.parquet").sort_values("point")
    assert list(rows["status"]) == ["error", "fits"]
    assert rows["reason"].iloc[0] == NOT_WHOLE.replace(
        "--global-batch-tokens", "global_batch_tokens"
    )
    assert int(rows["global_batch"].iloc[1]) == 512
    plot = trainplan(
        "sweep-plot", str(tmp_path / "o.parquet"), "--png", str(tmp_path / "x.png"),
        "--kind", "Scaling", "--metric", "STEP-TIME",
    )  # fmt: skip
    assert plot.returncode == 0, plot.stderr  # named values in any case, as click's choices


def test_rlhf_plan_names_what_capped_the_engine_and_zero_3_only_where_it_fits():
    """GRPO on Llama 3 405B on 4 H100s said "tp up to 4, the NVLink domain": the domain is 8,
    the 4 GPUs capped tp (optimizer/rlhf/tables.py ``rollout_options`` tries the powers of two
    dividing the pool). Its BF16 weights at tp 4: 2 B × 405.85e9 / 4 ≈ 202.9 GB a GPU. It also
    suggested ``--zero 3`` for every training role, though at ZeRO-3 the actor still needs about
    16 B × 405.85e9 / 4 ≈ 1.6 TB a GPU: ZeRO-3 is now named only where the role fits at it."""
    done = trainplan("rlhf-plan", "--algorithm", "grpo", "--model", "llama3-405b", "--gpus", "4")
    assert (done.returncode, done.stdout) == (1, "")
    lines = done.stderr.splitlines()
    assert lines[1] == (
        "  - rollout: no pool size and parallelism fits a GPU's 83.21 GB on its own (an engine "
        "replica is searched at tp up to 4, the cluster's 4 GPUs, pp 1 and no expert "
        "parallelism; at tp 4 the policy's BF16 weights alone are 202.93 GB a GPU)"
    )
    assert lines[2] == (
        "  - actor: no pool size and parallelism fits a GPU's 83.21 GB on its own at ZeRO-1, "
        "where each GPU holds its tp·pp share of the role's weights whole"
    )
    assert "zero" not in done.stderr.lower().replace("zero-1", "")


def test_rlhf_plan_on_the_web_names_the_zero_field_not_the_flag():
    """``/api/rlhf-plan`` showed web users the command line's ``--zero 3``; the page's field is
    ``zero``. PPO on Llama 3 70B, deepspeed, 256 GPUs: each role fits at ZeRO-3
    (tests/test_cli_newuser46.py runs it), so the suggestion stands, in the page's words."""
    from trainplan.interface.web.api import rlhf_plan_object

    query = [("algorithm", "ppo"), ("model", "llama3-70b"), ("gpus", "256")]
    out = rlhf_plan_object([*query, ("framework", "deepspeed")])
    assert out["status"] == "infeasible"
    assert out["explanation"][0] == (
        "actor: no pool size and parallelism fits a GPU's 83.21 GB on its own at ZeRO-1, where "
        "each GPU holds its tp·pp share of the role's weights whole (zero 3 shards them over dp "
        "too, and then it fits on a pool of 8 GPUs or more)"
    )
    assert not any("--" in line for line in out["explanation"])


def test_example_names_its_own_spelling_of_stages_and_named_values_in_any_case():
    """``example 1f1b-4x8 --stages 8`` said "write it --pp", which the pipeline example then
    refused ("set its parameters with --set"); it now names ``--set stages=8``, which runs.
    ``--set moe_dispatcher=DeepEP`` and ``--set tp_comm_overlap_cfg=TE`` were refused where
    ``--set time_model=Single`` was read: each is a named value, read in any case."""
    moe = "evaluate --model deepseek-v3 --gpus 256 --pp 16 --ep 8 --json".split()
    runs = run_many(
        {
            "stages": ["example", "1f1b-4x8", "--stages", "8"],
            "set stages": ["example", "1f1b-4x8", "--set", "stages=8", "--json"],
            "deepep": [*moe, "--set", "moe_dispatcher=DeepEP"],
            "te": [
                "evaluate",
                "--model",
                "llama3-8b",
                "--gpus",
                "8",
                "--set",
                "tp_comm_overlap_cfg=TE",
                "--json",
            ],  # fmt: skip
        }
    )
    assert refusal(runs["stages"]) == (
        "--stages: no such option of trainplan example; give the example's stages as --set stages=8"
    )
    assert json.loads(runs["set stages"].stdout)["stages"] == 8
    for name in ("deepep", "te"):
        assert runs[name].returncode == 0, runs[name].stderr
    assert "deepep" in runs["deepep"].stdout  # planned with DeepEP's dispatch


def test_search_echoes_the_model_and_part_as_the_catalogues_spell_them():
    """``search --model LLAMA_3_8B --gpu H100_sxm`` printed ``evaluate it: … --model
    LLAMA_3_8B`` and the job ``… × H100_sxm``: both now as the catalogues spell them
    (``scenarios.catalogue.catalogue_name``; the accelerator table's H100-SXM)."""
    done = trainplan(
        "search", "--model", "LLAMA_3_8B", "--gpus", "8", "--gpu", "H100_sxm", "--json"
    )
    d = json.loads(done.stdout)
    assert d["job"] == "llama3-8b on 8 × H100-SXM, B 2,048"
    assert d["evaluate_command"].startswith("trainplan evaluate --model llama3-8b --gpu H100-SXM ")
