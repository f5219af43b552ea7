"""What a new user met on a clean clone, each call run as the user runs it: its own ``trainplan``
process (text and ``--json`` where both apply), all of them in parallel once per session
(:func:`tests.cli_runs.run_many`).

* a search whose space a framework rule empties names that rule, as ``evaluate`` words it, exit 2
  (it said "No layout satisfies the constraints: - divisibility: …", exit 1);
"""

from __future__ import annotations

import pytest

from tests.cli_runs import Done, refusal, run_many

S70 = ["search", "--model", "llama3-70b"]
DS128 = [*S70, "--gpus", "128", "--framework", "deepspeed"]
DS_RULE = "with --framework deepspeed needs pp = 1 (its pipeline engine allows ZeRO-0/1 only)"

CALLS: dict[str, list[str]] = {
    "evaluate ds pp 4 zero 3": [
        "evaluate",
        "--model",
        "llama3-70b",
        "--framework",
        "deepspeed",
        "--zero",
        "3",
        "--pp",
        "4",
        "--dp",
        "32",
    ],  # fmt: skip
    "ds pp 4 zero 3": [*DS128, "--pp", "4", "--zero", "3"],
    "ds pp 4 zero 2": [*DS128, "--pp", "4", "--zero", "2"],
    "ds pp 2 4 zero 3": [*DS128, "--pp", "2", "--pp", "4", "--zero", "3"],
}
JSON_TOO = ("ds pp 4 zero 3", "ds pp 4 zero 2", "ds pp 2 4 zero 3")


@pytest.fixture(scope="module")
def done() -> dict[str, Done]:
    calls = {**CALLS, **{f"{k} json": [*CALLS[k], "--json"] for k in JSON_TOO}}
    return run_many(calls)


@pytest.mark.parametrize("fmt", ["", " json"])
def test_a_framework_rule_that_empties_the_search_is_named(done, fmt):
    """DeepSpeed's pipeline engine runs ZeRO-0/1 only (model.frameworks.check_framework), so
    ``--pp 4 --zero 3`` (or 2) leaves the search no layout: the rule evaluate states, exit 2."""
    ev = refusal(done["evaluate ds pp 4 zero 3"])
    assert ev == f"--zero: 3 {DS_RULE}; pp is 4"
    assert refusal(done["ds pp 4 zero 3" + fmt]) == ev  # one rule, the same words
    assert refusal(done["ds pp 4 zero 2" + fmt]) == f"--zero: 2 {DS_RULE}; pp is 4"
    # two pp values, both refused: the first's line
    assert refusal(done["ds pp 2 4 zero 3" + fmt]) == f"--zero: 3 {DS_RULE}; pp is 2"
