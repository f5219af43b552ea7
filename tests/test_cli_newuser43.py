"""A new user's first hour, each ``trainplan`` call its own process (:mod:`tests.cli_runs`):
the slips found and what the command now says."""

from __future__ import annotations

from tests.cli_runs import refusal, run_many


def test_min_mfu_given_as_a_percentage_is_refused_saying_it_is_a_fraction():
    """Every MFU is printed as a percentage (``MFU 44.2%``), so ``--min-mfu 40`` is the natural
    slip; the refusal said only ``must be in (0, 1]``, now what the fraction means."""
    runs = run_many(
        {
            "percent": "search --model llama3-8b --gpus 8 --min-mfu 40".split(),
            "file": "frontier --model llama3-8b --gpus 8 --set min_mfu=44.2".split(),
        }
    )
    assert refusal(runs["percent"]) == (
        "--min-mfu: 40 must be in (0, 1] (a fraction: 0.4 is an MFU of 40%)"
    )
    assert refusal(runs["file"]).endswith(
        "44.2 must be in (0, 1] (a fraction: 0.4 is an MFU of 40%)"
    )


def test_search_help_says_what_the_time_limit_bounds():
    """``--time-limit 60`` on DeepSeek-V3 under fsdp2 on 64 GPUs (one job) printed nothing for
    over five minutes: one job's cost tables are built whole once started, which the help's
    "Seconds for the whole search, table building included" did not say (the note a search
    prints afterwards and docs/concepts/search.md do). A job's tables are now filled in blocks,
    the limit checked between them (tests/test_cli_time_limit_blocks.py); the help says so."""
    runs = run_many({k: [k, "--help"] for k in ("search", "frontier")})
    for done in runs.values():
        assert done.returncode == 0, done.stderr
        text = " ".join(done.stdout.split())
        assert (
            "--time-limit NUMBER Seconds for the whole command, counted from its start (loading "
            "the model, the accelerator and the solver included, as a clock on the wall measures "
            "it), table building included: the cost tables are filled a block of shapes at a time "
            "(blocks growing from 64 to 512 shapes) and the limit is checked between blocks once "
            "some layout meets the constraints (a block the last one's pace says would end past "
            "the limit is not started; the shapes not reached are left out), and CP-SAT gets "
            "what remains (at least 1 s)"
        ) in text


def test_a_peak_given_twice_is_refused_naming_the_flag():
    """``--peak-tflops 989 --gpu H100-SXM``: the refusal named the peak by its Python name,
    ``peak_tflops = 989``, where every other refusal names the flag typed."""
    runs = run_many(
        {
            "mfu": "mfu --params 70B --tokens-per-second 1e6 --peak-tflops 989 --gpu H100-SXM "
            "--chips 512".split(),
            "rlhf": "rlhf --algorithm grpo --policy-params 7B --peak-tflops 989 --gpu H100-SXM".split(),
        }
    )
    for done in runs.values():
        assert refusal(done) == (
            "--gpu: 'H100-SXM' does not apply: the peak is given by --peak-tflops = 989; give "
            "one of the two"
        )


def test_a_training_layout_that_does_not_divide_the_gpus_names_the_flags():
    """``rlhf --train-tp 3`` on 8 GPUs said ``train_tp × train_pp: 3 does not divide …``, the
    Python names, where a refusal names the flags typed."""
    done = run_many(
        {"tp3": "rlhf --algorithm grpo --model llama3-8b --gpus 8 --train-tp 3".split()}
    )["tp3"]
    assert refusal(done) == (
        "--train-tp × --train-pp: 3 does not divide the training roles' 8 GPUs"
    )


def test_a_moe_setting_below_its_bound_is_echoed_as_typed():
    """``--set moe_imbalance=0.5`` was echoed as the fraction ``1/2``, and
    ``moe_capacity_factor=-0.25`` as ``-1/4``: every other refusal echoes the number typed."""
    base = "evaluate --model mixtral-8x7b --gpus 64 --ep 8 --set".split()
    runs = run_many(
        {
            "imbalance": [*base, "moe_imbalance=0.5"],
            "capacity": [*base, "moe_capacity_factor=-0.25"],
        }
    )
    assert refusal(runs["imbalance"]) == (
        "--set moe_imbalance: 0.5 must be at least 1 (busiest rank ÷ mean)"
    )
    assert refusal(runs["capacity"]) == "--set moe_capacity_factor: -0.25 must be positive"


def test_a_layout_field_given_as_a_scenario_key_names_its_flag():
    """``--set zero_stage=1`` was refused as "not a scenario key" with no way forward: the
    layout's ZeRO stage, micro-batch, global batch, tp and pp are flags of evaluate, example,
    search and frontier (``--zero`` …); a key that is no flag keeps the plain refusal."""
    runs = run_many(
        {
            "zero": "evaluate --model llama3-8b --gpus 8 --set zero_stage=1".split(),
            "batch": "search --model llama3-8b --gpus 8 --set global_batch_size=64".split(),
            "typo": "evaluate --model llama3-8b --gpus 8 --set zerostage=1".split(),
        }
    )
    assert refusal(runs["zero"]) == (
        "--set: 'zero_stage' is not a scenario key evaluate takes; give it as --zero "
        "(trainplan evaluate --set help lists them)"
    )
    assert "; give it as --global-batch (" in refusal(runs["batch"])
    assert refusal(runs["typo"]) == (
        "--set: 'zerostage' is not a scenario key evaluate takes (trainplan evaluate --set help "
        "lists them)"
    )


def test_a_longest_completion_below_the_mean_names_both_flags():
    """``rlhf --max-completion-tokens 10`` named the mean as ``completion_tokens 4096`` (the
    Python name, the number ungrouped); a refusal names the flags typed, numbers grouped."""
    done = run_many(
        {
            "short": "rlhf --algorithm grpo --model llama3-8b --gpus 8 --max-completion-tokens 10"
            " --completion-tokens 5000".split()
        }
    )["short"]
    assert (
        refusal(done) == "--max-completion-tokens: 10 is below the mean --completion-tokens 5,000"
    )
