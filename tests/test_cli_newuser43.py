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
