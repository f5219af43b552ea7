"""A new user's first two hours, each ``trainplan`` call its own process (:mod:`tests.cli_runs`):
a model size typed without its unit."""

from __future__ import annotations

from tests.cli_runs import refusal, run_many

FLOOR = (
    "below the floor of 1,000,000 (a model size counts parameters: write 70B or 70e9 for 70 "
    "billion; the smallest published language models have ~10^8, GPT-2 small 124M (Radford et al. "
    "2019))"
)


def test_a_model_size_without_its_unit_is_refused():
    """``--params 70`` (meant: 70B) was read as a 70-parameter model and planned: evaluate printed
    "7e-08B: 70 parameters" with 0.00 GB of model state, ``rlhf --policy-params 70`` 0.000 TB,
    ``mfu --params 70`` an MFU of 0.0 % — every figure absurd and exit 0. A size below 10^6
    parameters (model/limits.py FLOORS, far below GPT-2 small's 124M: Radford et al. 2019) is
    refused, naming the parameter, the value and the rule; 10^6 itself is still planned."""
    runs = run_many(
        {
            "evaluate": ["evaluate", "--params", "70", "--gpus", "64"],
            "grouped": ["evaluate", "--params", "999,999", "--gpus", "8"],
            "rlhf": ["rlhf", "--algorithm", "ppo", "--policy-params", "70"],
            "reward": [
                "rlhf",
                "--algorithm",
                "ppo",
                "--policy-params",
                "7B",
                "--reward-params",
                "7",
            ],
            "mfu": "mfu --params 70 --tokens 4e6 --step-seconds 7 --chips 512 --gpu H100-SXM".split(),
            "floor": ["evaluate", "--params", "1e6", "--gpus", "8"],
        }
    )
    assert refusal(runs["evaluate"]) == f"--params: 70 parameters is {FLOOR}"
    assert refusal(runs["grouped"]) == f"--params: 999,999 parameters is {FLOOR}"
    assert refusal(runs["rlhf"]) == f"--policy-params: 70 parameters is {FLOOR}"
    assert refusal(runs["reward"]) == f"--reward-params: 7 parameters is {FLOOR}"
    assert refusal(runs["mfu"]) == f"--params: 70 parameters is {FLOOR}"
    assert runs["floor"].returncode == 0, runs["floor"].stderr
    assert "1,000,000 parameters (1,000,000 active) on 8 × H100-SXM" in runs["floor"].stdout
