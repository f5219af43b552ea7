"""A new user's leftovers, each ``trainplan`` call its own process (:mod:`tests.cli_runs`): an
example's name in another case, a GPU price written ``GPU:PRICE``, a filter after ``gpus`` and
``models``, a search's winner printed without the defaults its evaluate names, and an RLHF
placement search over millions of GPUs refused by a batch the user never gave."""

from __future__ import annotations

import json
import shlex

from tests.cli_runs import refusal, run_many, trainplan


def test_example_names_are_read_in_any_case_or_separator():
    """``trainplan example FSDP-70B-64`` was refused ("did you mean fsdp-70b-64"); an example's
    name is now read as a model's is (scenarios.catalogue.known_spelling: case, spaces, hyphens
    and underscores aside), so it runs that example, to the byte; a name that is no example is
    still refused with the close ones."""
    runs = run_many(
        {
            "as listed": ["example", "fsdp-70b-64"],
            "upper": ["example", "FSDP-70B-64"],
            "underscores": ["example", "Fsdp_70b_64"],
            "rlhf json": ["example", "PPO-70B", "--json"],
            "unknown": ["example", "FSDP-70C"],
        }
    )
    assert runs["as listed"].returncode == 0, runs["as listed"].stderr
    assert runs["as listed"].stdout.startswith("Example fsdp-70b-64: ")
    assert runs["upper"].stdout == runs["as listed"].stdout
    assert runs["underscores"].stdout == runs["as listed"].stdout
    assert json.loads(runs["rlhf json"].stdout)["example"] == "ppo-70b"
    assert refusal(runs["unknown"]) == (
        "NAME: 'FSDP-70C' is not an example; did you mean fsdp-70b-64, dpo-70b, ppo-70b? "
        "(trainplan example --list lists them all)"
    )


def test_a_gpu_price_written_with_a_colon_names_the_accepted_forms():
    """``--gpu-hour-price H100-SXM:2.5`` said "'H100-SXM:2.5' is not a number"; the option takes
    one price or GPU=PRICE pairs (its help), and the refusal says so with the searched GPU's
    name. A negative price keeps its own refusal."""
    base = ["search", "--model", "llama3-8b", "--gpus", "8", "--gpu-hour-price"]
    runs = run_many({"colon": [*base, "H100-SXM:2.5"], "negative": [*base, "-1"]})
    assert refusal(runs["colon"]) == (
        "--gpu-hour-price: 'H100-SXM:2.5' is neither one price nor GPU=PRICE pairs; write e.g. "
        "2.5 (every GPU) or H100-SXM=2.5"
    )
    assert refusal(runs["negative"]) == (
        "--gpu-hour-price: '-1' for H100-SXM must be a positive number of dollars per GPU-hour"
    )


def test_gpus_and_models_take_a_filter():
    """``trainplan gpus H100`` and ``trainplan models llama`` were click's "Got unexpected extra
    argument". A FILTER lists the entries whose names hold it, in any case or separator (the
    rule names are read by); one that matches nothing is refused in one line."""
    runs = run_many(
        {
            "gpus": ["gpus", "h100", "--json"],
            "all gpus": ["gpus", "--json"],
            "models": ["models", "LLAMA_3", "--json"],
            "models text": ["models", "llama3-8"],
            "none": ["models", "zzz"],
            "no gpu": ["gpus", "zzz"],
        }
    )
    names = [r["name"] for r in json.loads(runs["gpus"].stdout)]
    every = [r["name"] for r in json.loads(runs["all gpus"].stdout)]
    assert names == [n for n in every if "h100" in n.lower().replace("-", "")]
    assert "H100-SXM" in names and "H200" not in names
    models = [r["name"] for r in json.loads(runs["models"].stdout)]
    assert models == ["llama3-405b", "llama3-70b", "llama3-8b"]
    text = runs["models text"].stdout
    assert "llama3-8b " in text and "llama3-70b" not in text, text
    assert (
        refusal(runs["none"]) == "FILTER: 'zzz' matches no model; trainplan models lists them all"
    )
    assert refusal(runs["no gpu"]) == (
        "FILTER: 'zzz' matches no accelerator; trainplan gpus lists them all"
    )


def test_a_search_prints_the_defaults_its_evaluate_line_prints():
    """A fsdp2 search's plan left out "Defaults used: tp_block_inputs = gathered" that the same
    layout's evaluate prints (torchtitan's tensor-parallel plan gathers a block's inputs; the
    figures were the same). The search now prints evaluate's report for its winner line for
    line, its own memory rule among the assumptions aside."""
    search = trainplan(*"search --model llama3-8b --gpus 16 --framework fsdp2 --tp 2".split())
    assert search.returncode == 0, search.stderr
    line = next(x for x in search.stdout.splitlines() if x.startswith("evaluate it: "))
    evaluate = trainplan(*shlex.split(line.removeprefix("evaluate it: trainplan ")))
    assert evaluate.returncode == 0, evaluate.stderr
    assert "Defaults used: tp_block_inputs = gathered" in evaluate.stdout.splitlines()
    report = search.stdout[search.stdout.index("llama3-8b: ") :].splitlines()
    report = [x for x in report if not x.startswith("  - search memory rule:")]
    assert report == evaluate.stdout.splitlines()


def test_a_placement_search_over_millions_of_gpus_names_no_batch_the_user_never_gave():
    """``rlhf-plan … --gpus 6e6`` was refused with "training.global_batch_size: 18,000,000 is
    above the limit": the scoring pass's batch on a pool of dp 6,000,000, 16,384 sequences (1,024
    prompts × 16) rounded up to whole micro-batches of 3 on every rank, 3 · 6,000,000. A rank
    of such a pool has no sequence to score or train on — evaluate refuses a training dp above the
    update's sequences (model.rlhf.dp_batch, which the search reads too) — so it leaves such
    options out instead of costing them. Within a short time limit it answers as any search cut
    short does (exit 1, "not proven infeasible"), naming no parameter the user did not give."""
    done = trainplan(
        *"rlhf-plan --algorithm grpo --model qwen2.5-7b --reward rule --gpus 6e6".split(),
        *"--time-limit 5".split(),
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "global_batch_size" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "on 6,000,000 × H100-SXM" in done.stdout
    assert "not proven infeasible" in done.stdout + done.stderr
