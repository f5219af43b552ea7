"""A new user's leftovers, each ``trainplan`` call its own process (:mod:`tests.cli_runs`): a
refusal of an example's own value that named a flag the user never typed."""

from __future__ import annotations

from tests.cli_runs import refusal, run_many


def test_an_examples_own_value_is_refused_as_the_examples():
    """``trainplan example deepseek-v3-ep64 --set framework=fsdp2`` said "--zero: 1 is not a
    stage of --framework fsdp2" — the user typed no ``--zero``: the example's recipe gives
    zero_stage 1 (scenarios/examples.toml). The line now says the value is the example's own
    and which flag replaces it, text and JSON alike; a value the user gave keeps its own head."""
    base = ["example", "deepseek-v3-ep64", "--set", "framework=fsdp2"]
    runs = run_many(
        {
            "text": base,
            "json": [*base, "--json"],
            "given": [*base, "--zero", "1"],
        }
    )
    expected = (
        "example deepseek-v3-ep64: its own zero_stage 1 is not a stage of --framework fsdp2 "
        "(it models reshard_after_forward=False (2) and True (3)); give --zero to replace it"
    )
    assert refusal(runs["text"]) == expected
    assert refusal(runs["json"]) == expected
    assert refusal(runs["given"]).startswith("--zero: 1 is not a stage of --framework fsdp2")
