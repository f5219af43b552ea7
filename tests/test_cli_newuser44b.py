"""A new user's first hour, each ``trainplan`` call its own process (:mod:`tests.cli_runs`):
another command's spelling of a flag, ``--gpus`` on an MFU or RLHF example, the cost objective
without a price, and a GPU count given to the RLHF textbook accounting."""

from __future__ import annotations

import json
from fractions import Fraction

from tests.cli_runs import refusal, run_many


def test_another_commands_spelling_of_a_flag_names_this_commands():
    """``trainplan pipeline --pp 8`` (evaluate's spelling of the stages) said "No such option
    '--pp'. (Did you mean one of: '--help', '--png'?)"; ``evaluate --stages 4`` suggested
    ``--per-stage``. The web API already answers ``'pp': … write it stages``. A micro-batch count
    given to evaluate (``--microbatches 16``) was answered "Did you mean '--micro-batch'?" — the
    size of one micro-batch, another figure: evaluate derives the count from the batch
    (Megatron-LM megatron/core/num_microbatches_calculator.py: global batch ÷ (micro batch × dp))."""
    runs = run_many(
        {
            "pp": "pipeline --pp 8 -m 8".split(),
            "pp=": "pipeline --pp=8 -m 8".split(),
            "stages": "evaluate --model llama3-8b --stages 4".split(),
            "m": "pipeline -p 4 --micro-batches 8".split(),
            "num": "pipeline -p 4 --num-microbatches 8".split(),
            "evaluate m": "evaluate --model llama3-8b --microbatches 16".split(),
            "search m": "search --model llama3-8b --gpus 8 --micro-batches 16".split(),
            "frontier pp": "frontier --model llama3-8b --gpus 8 --pp 9".split(),
        }
    )
    assert refusal(runs["pp"]) == (
        "--pp: no such option of trainplan pipeline; write it --stages (-p): --stages 8"
    )
    assert refusal(runs["pp="]) == refusal(runs["pp"])
    assert refusal(runs["stages"]) == (
        "--stages: no such option of trainplan evaluate; write it --pp: --pp 4"
    )
    assert refusal(runs["m"]) == (
        "--micro-batches: no such option of trainplan pipeline; write it --microbatches (-m): "
        "--microbatches 8"
    )
    assert refusal(runs["num"]).startswith(
        "--num-microbatches: no such option of trainplan pipeline"
    )
    derived = (
        "no such option of trainplan {}, which derives the micro-batch count m from the batch: "
        "m = --global-batch ÷ (--micro-batch × dp), --micro-batch being the sequences of one "
        "micro-batch"
    )
    assert refusal(runs["evaluate m"]) == "--microbatches: " + derived.format("evaluate")
    assert refusal(runs["search m"]) == "--micro-batches: " + derived.format("search")
    # a command that takes the flag is not touched: frontier's --pp is its own (9 ∤ 8 GPUs)
    assert "no such option" not in runs["frontier pp"].stderr


def test_gpus_on_an_mfu_or_rlhf_example_is_its_chip_count():
    """``trainplan example ppo-70b --gpus 64`` was refused ("--gpus: does not apply to example
    ppo-70b (the rlhf tab); set its parameters with --set KEY=VALUE (…, gpus, …)") and
    ``--set gpus=64`` then refused as the faithful accounting's; ``--gpu B200`` was honoured. The
    GPU count of these tabs is ``chips``.

    Hand derivation: MFU = 6·N·tokens ÷ (peak · chips · seconds) (PaLM, Appendix B)
    = 6 · 70e9 · 4e6 ÷ (989e12 · 1024 · 7) = 23.7 %, half the 512-chip 47.4 %. The rollout of
    PPO 70B: 2 · 70e9 FLOPs a token × 16,384 sequences × 5,120 tokens = 1.1744e19 FLOPs at the
    decode MFU 0.04 of 989.4 TFLOP/s on 64 chips = 4,636.7 s (on 1 chip: 296,746.8 s)."""
    runs = run_many(
        {
            "mfu": "example mfu-70b-512 --gpus 1,024 --json".split(),
            "mfu text": "example mfu-70b-512 --gpus 1024".split(),
            "ppo": "example ppo-70b --gpus 64 --json".split(),
            "pipeline": "example 1f1b-4x8 --gpus 8".split(),
            "zero": "example ppo-70b --gpus 0".split(),
        }
    )
    mfu = json.loads(runs["mfu"].stdout)
    assert (mfu["chips"], mfu["changed"]) == (1024, {"chips": 1024})
    expected = Fraction(6 * 70 * 10**9 * 4 * 10**6) / (989 * 10**12 * 1024 * 7)
    assert abs(mfu["mfu"] - float(expected)) < 1e-12 and f"{float(expected):.1%}" == "23.7%"
    assert "(989e12 · 1024 · 7 s) = 23.7%" in runs["mfu text"].stdout
    ppo = json.loads(runs["ppo"].stdout)
    rollout = 2 * 70 * 10**9 * 16384 * 5120
    assert ppo["chips"] == 64 and ppo["phase_flops"]["rollout"] == rollout
    seconds = Fraction(rollout) / (Fraction(4, 100) * Fraction(9894, 10) * 10**12 * 64)
    assert abs(ppo["phase_seconds"]["rollout"] - float(seconds)) < 1e-6
    assert round(float(seconds), 1) == 4636.7
    # the pipeline tab has no GPU count: still refused, naming its parameters
    assert refusal(runs["pipeline"]).startswith(
        "--gpus: does not apply to example 1f1b-4x8 (the pipeline tab)"
    )
    assert refusal(runs["zero"]) == "--gpus: '0' must be at least 1"


def test_the_cost_objective_without_a_price_names_the_flag_and_the_accelerator():
    """``search --objective cost`` without a price said ``objective cost: give --gpu-hour-price
    for every accelerator`` — the one refusal whose head was not the flag typed, and without the
    accelerator lacking a price (the frontier's ``--against price`` names it)."""
    runs = run_many(
        {
            "none": "search --model llama3-8b --gpus 8 --objective cost --tokens 1e9".split(),
            "one": (
                "search --model llama3-8b --gpus 8 --gpu H100-SXM,B200 --objective cost "
                "--tokens 1e9 --gpu-hour-price B200=5"
            ).split(),
        }
    )
    assert refusal(runs["none"]) == (
        "--objective: 'cost' needs --gpu-hour-price for every accelerator; none given for "
        "H100-SXM (e.g. --gpu-hour-price H100-SXM=2.5)"
    )
    assert refusal(runs["one"]).endswith(
        "none given for H100-SXM (e.g. --gpu-hour-price H100-SXM=2.5)"
    )


def test_a_gpu_count_in_the_rlhf_textbook_accounting_names_chips():
    """``rlhf --algorithm ppo --policy-params 7B --gpus 8`` said only that ``--gpus`` belongs to
    the faithful accounting (add ``--model``); the textbook accounting's count is ``--chips``."""
    done = run_many({"gpus": "rlhf --algorithm ppo --policy-params 7B --gpus 8".split()})["gpus"]
    assert refusal(done) == (
        "--gpus: '8' does not apply: it belongs to the faithful accounting; add --model NAME "
        "(this accounting's GPU count is --chips)"
    )
