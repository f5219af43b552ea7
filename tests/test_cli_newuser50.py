"""A new user's leftovers, each ``trainplan`` call its own process (:mod:`tests.cli_runs`): a
range with a bad end quoted as the user wrote it (``--gpus 8..x`` and a sweep grid's ``gpus =
["8..x"]`` said only ``'x' is not a number``), and ``mfu --recompute selective`` with a reported
FLOP rate, which asked for a parameter count and dimensions that the same command then refused."""

from __future__ import annotations

from tests.cli_runs import refusal, run_many

GPU_WORDS = "(write a number of GPUs, e.g. 8192, 8,192 or 8.192e3)"
"""The rule of a GPU count's words (model.number_words.not_a_number)."""


def test_a_range_with_a_bad_end_is_quoted_whole(tmp_path):
    """The range's text is named before its end's rule, on the command line and in a sweep's
    grid alike; a token range's end too, and a token range with one end names the rule of
    both (as ``--gpus ..8`` does). A good range still runs (``--point 0`` of the grid)."""
    grid = tmp_path / "grid.toml"
    grid.write_text('model = "llama3-8b"\ngpu = "H100-SXM"\n[sweep]\ngpus = ["8..x"]\n')
    good = tmp_path / "good.toml"
    good.write_text('model = "llama3-8b"\ngpu = "H100-SXM"\n[sweep]\ngpus = ["8..12"]\n')
    search = ["search", "--model", "llama3-8b"]
    runs = run_many(
        {
            "gpus": [*search, "--gpus", "8..x"],
            "low": [*search, "--gpus", "0..8"],
            "batch": [*search, "--gpus", "8", "--global-batch", "8..x"],
            "tokens": [*search, "--gpus", "8", "--global-batch-tokens", "1e6..x"],
            "one_end": [*search, "--gpus", "8", "--global-batch-tokens", "..4e6"],
            "grid": ["sweep", str(grid), "--point", "0"],
            "good": ["sweep", str(good), "--point", "0"],
        }
    )
    assert refusal(runs["gpus"]) == f"--gpus: range '8..x': 'x' is not a number {GPU_WORDS}"
    assert refusal(runs["low"]) == "--gpus: range '0..8': '0' must be at least 1"
    assert refusal(runs["batch"]) == (
        "--global-batch: range '8..x': 'x' is not a number (write a number of sequences, e.g. "
        "8192, 8,192 or 8.192e3)"
    )
    assert refusal(runs["tokens"]) == (
        "--global-batch-tokens: range '1e6..x': 'x' is not a number (write e.g. 4e6, 4000000, "
        "4,000,000, 70B or 1.5T)"
    )
    assert refusal(runs["one_end"]) == (
        "--global-batch-tokens: range '..4e6' needs both ends, e.g. 8e6..16e6"
    )
    assert refusal(runs["grid"]) == (
        f"grid {grid}: sweep.gpus: range '8..x': 'x' is not a number {GPU_WORDS}"
    )
    assert runs["good"].returncode == 0, runs["good"].stderr[-2000:]


def test_mfu_selective_recompute_of_a_flop_rate_says_what_to_give():
    """``mfu --achieved-tflops-per-gpu 400 --recompute selective`` said selective ``needs params
    and the model's dimensions``, and each of them (``--params``, ``--model``, ``--layers``) was
    then refused as not applying to a FLOP rate: no input ran. Selective recomputation re-runs
    the attention cores, a share of the model's FLOPs that a rate does not give; the line names
    the two ways that do: the share typed, or a measurement by tokens with the model. Both run:
    400 ÷ 989.4 = 40.4 % MFU, × 1.05 = 42.4 % HFU with 5 % recomputed."""
    rate = ["mfu", "--achieved-tflops-per-gpu", "400", "--gpu", "H100-SXM"]
    runs = run_many(
        {
            "selective": [*rate, "--recompute", "selective"],
            "pct": [*rate, "--recomputed-flops-pct", "5"],
            "tokens": [
                "mfu", "--tokens-per-second", "1e5", "--chips", "256", "--gpu", "H100-SXM",
                "--model", "llama3-70b", "--recompute", "selective",
            ],
        }
    )  # fmt: skip
    assert refusal(runs["selective"]) == (
        "--recompute: 'selective' cannot be counted from a reported FLOP rate: what it re-runs "
        "(the attention cores) is a share of the model's FLOPs that a rate does not give; give "
        "--recomputed-flops-pct (the recomputed FLOPs as a percentage of model FLOPs), or "
        "measure by tokens (--tokens-per-second, or --tokens and --step-seconds) with --model "
        "or --params"
    )
    assert runs["pct"].returncode == 0, runs["pct"].stderr
    assert "40.4%" in runs["pct"].stdout and "42.4%" in runs["pct"].stdout
    assert runs["tokens"].returncode == 0, runs["tokens"].stderr
    assert "selective" in runs["tokens"].stdout


def test_policy_is_read_as_the_rlhf_commands_model_flag():
    """``rlhf --policy llama3-70b`` (the RLHF spec's word for the trained network) got click's
    guesses ``--epochs``, ``--off-policy``, ``--policy-params``; the RLHF commands take the policy
    by ``--model`` (interface.flags.PARAMETER_FLAGS), and the line says so with the value typed."""
    runs = run_many(
        {
            "rlhf": ["rlhf", "--algorithm", "grpo", "--policy", "llama3-70b"],
            "plan": ["rlhf-plan", "--algorithm", "grpo", "--policy=qwen2.5-7b", "--gpus", "16"],
        }
    )
    assert refusal(runs["rlhf"]) == (
        "--policy: no such option of trainplan rlhf; write it --model: --model llama3-70b"
    )
    assert refusal(runs["plan"]) == (
        "--policy: no such option of trainplan rlhf-plan; write it --model: --model qwen2.5-7b"
    )
