"""A search over two accelerators under FP8, as a user runs it: each accelerator's memory is its
own (per-tensor FP8 keeps a transposed weight copy on Hopper, none on Blackwell:
``model.precision.keeps_fp8_transpose``), so the search's tables must not reuse one part's
memory arrays for another; they once did, and the search's own check against the evaluator
stopped with a traceback (H100 stage 0: 63,148,916,736 B evaluated, 58,870,726,656 B tabled —
the 4.28 GB transposed copy)."""

from __future__ import annotations

import json

from tests.cli_runs import run_many

BASE = ("search", "--model", "llama3-70b", "--gpus", "32", "--precision", "fp8", "--json")


def test_either_order_of_two_accelerators_answers() -> None:
    runs = run_many({
        "b200 first": (*BASE, "--gpu", "B200", "--gpu", "H100-SXM"),
        "h100 first": (*BASE, "--gpu", "H100-SXM", "--gpu", "B200"),
    })  # fmt: skip
    for name, done in runs.items():
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert "Traceback" not in done.stderr
        assert json.loads(done.stdout)
    timing = ("solve_seconds", "tables_seconds")
    first, second = (
        {k: v for k, v in json.loads(d.stdout).items() if k not in timing} for d in runs.values()
    )
    assert first == second  # one answer whatever the order the parts are given in
