"""Ctrl-C during a search, as a user presses it: SIGINT sent to a ``trainplan search`` process
whose stderr is a terminal. An interrupted search says so, keeps the best layout found so far
visible, and exits 130 (128 + SIGINT) — it once printed "best found within the time limit" (no
limit was given) and exited 0."""

from __future__ import annotations

import json

import pytest

from tests.cli_runs import interrupted_when

MAXIMIZE = ["search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM"]
MAXIMIZE += ["--maximize", "params", "--max-layers", "256"]
"""64 depth variants of Llama 3 8B (4 to 256 layers) on 8 GPUs, checked largest first: tens of
seconds of cost tables (the deepest members fit no layout) before the one that fits is solved."""

TOP_K = ["search", "--model", "llama3-8b", "--gpus", "8", "--gpu", "H100-SXM", "--top", "100"]
"""The 100 best layouts of Llama 3 8B on 8 GPUs: a couple of seconds of cost tables (156 shapes),
then CP-SAT solving one answer after another (its objective, its tie-break, then the answer
excluded: seconds in all); the solver's progress line is on the terminal from the first
answer's first solution on, so Ctrl-C at that line lands while CP-SAT runs."""


def test_ctrl_c_while_the_tables_are_built_is_exit_130_with_one_line():
    done = interrupted_when(MAXIMIZE, "cost tables:")
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert "Error: interrupted while building the cost tables (" in done.stderr
    assert "before any layout was found" in done.stderr


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_ctrl_c_while_cp_sat_runs_prints_the_best_so_far_and_exits_130(as_json):
    args = [*TOP_K, "--json"] if as_json else TOP_K
    done = interrupted_when(args, "solutions found:")  # the solver's progress on the terminal
    assert done.returncode == 130, done.stderr[-2000:]
    assert "interrupted: stopping the search" in done.stderr and "Traceback" not in done.stderr
    if as_json:
        out = json.loads(done.stdout)
        assert out["interrupted"] is True and out["status"] == "feasible"
        answers = out["answers"]
        # stopped: the answers found, at least the one being solved, far fewer than asked
        assert 1 <= len(answers) < 100
        assert all(a["model"]["name"] == "llama3-8b" and a["memory"]["fits"] for a in answers)
        steps = [a["objective_s"] for a in answers]
        assert steps == sorted(steps)  # best first, as in a top-k that ran to its end
        layouts = {json.dumps(a["layout"], sort_keys=True) for a in answers}
        assert len(layouts) == len(answers)  # each a distinct layout
        return
    first = done.stdout.splitlines()[0]
    assert (
        "objective step-time: interrupted (Ctrl-C): the best found before it, not proven" in first
    )
    assert "within the time limit" not in done.stdout
    shown = [line for line in done.stdout.splitlines() if line.startswith("#")]
    assert 1 <= len(shown) < 100 and shown[0] == "#1: llama3-8b on 8 × H100-SXM, B 2,048"
    assert done.stdout.count("verdict: fits") == len(shown)


RLHF_PLAN = ["rlhf-plan", "--algorithm", "grpo", "--reward", "rule", "--model", "llama3-8b"]
RLHF_PLAN += ["--gpus", "4096"]
"""GRPO on 4,096 GPUs: about 20 s of cost tables (pool × role), then about a second of CP-SAT."""


def test_ctrl_c_in_rlhf_plan_is_exit_130_with_one_line():
    """``rlhf-plan`` stops on Ctrl-C as ``search`` does (its solves run through the one CP-SAT
    set-up, :func:`optimizer.solver.solve`): one line, exit 130, no traceback."""
    done = interrupted_when(RLHF_PLAN, "%|")  # the tables' bar, once it counts pools
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert "Error: interrupted while building the cost tables (" in done.stderr
    assert "before any placement was found" in done.stderr
