"""``trainplan search`` mixing ``--framework textbook`` with a real framework, as a user runs it
(each call its own process): where textbook wins, the answer says that it is a convention, not a
framework, and names the best layout of the real frameworks searched, in the text and under
``textbook_note`` in ``--json`` (:mod:`interface.textbook_note`).

Llama 3 70B on 64 GB200s, tp 2, pp 1 (the adversary's case, reduced to one tp and pp to keep
the tables short): textbook ZeRO-2 at dp 32 answers 98.014 s a step (the convention: its
per-micro-batch reduce-scatters hidden under the next micro-batch, no NCCL SM charge); the best
of Megatron-Core over the same space is ZeRO-3 at dp 32, 103.624 s (103.611 s before each
micro-batch's last reduce-scatter bucket, run after the backward's computation, waited whole:
model.dp_exposure.microbatch_exposed_seconds; 103.622 s before Megatron-Core's own optimizer-step
passes, 38 → 50 B an element, model.step_passes.step_pass_bytes: +12 B × 1.102e9 owned elements
(70.55e9 / (tp 2 × dp 32)) / (8 TB/s × 0.9) = +1.84 ms, its step 5.82 → 7.66 ms), which is ``trainplan evaluate``'s step of that
layout, run here too. With megatron alone there is no note (null)."""

from __future__ import annotations

import json

from tests.cli_runs import run_many

JOB = ["--model", "llama3-70b", "--gpus", "64", "--gpu", "GB200", "--tp", "2", "--pp", "1"]
MIXED = [*JOB, "--framework", "megatron", "--framework", "textbook"]
EVALUATE = ["evaluate", "--model", "llama3-70b", "--gpus", "64", "--gpu", "GB200"]
EVALUATE += ["--dp", "32", "--tp", "2", "--zero", "3", "--framework", "megatron", "--json"]
NOTE = (
    "Note: the answer runs the textbook profile, a convention (the papers' accounting), not a "
    "framework; the best layout of the real frameworks searched: megatron ZeRO-3, dp 32 × tp 2 × "
    "pp 1 × cp 1 (ep 1), 1f1b, recompute none, 103.624 s per step (optimal)"
)


def test_a_textbook_answer_names_the_best_real_framework():
    done = run_many(
        {
            "text": ["search", *MIXED],
            "json": ["search", *MIXED, "--json"],
            "alone": ["search", *JOB, "--framework", "megatron", "--json"],
            "evaluate": EVALUATE,
        }
    )
    assert all(d.returncode == 0 for d in done.values()), {k: d.stderr for k, d in done.items()}
    assert NOTE in done["text"].stdout.splitlines()
    d = json.loads(done["json"].stdout)
    assert (d["layout"]["framework"], d["layout"]["zero_stage"], d["layout"]["dp"]) == (
        "textbook",
        2,
        32,
    )
    assert round(d["time"]["step_s"], 3) == 98.014
    best = d["textbook_note"]["best_real"]
    assert (best["framework"], best["zero_stage"], best["layout"]["dp"]) == ("megatron", 3, 32)
    assert d["textbook_note"]["note"] == NOTE.removeprefix("Note: ")
    step = json.loads(done["evaluate"].stdout)["time"]["step_s"]
    assert round(best["step_s"], 3) == round(step, 3) == 103.624
    assert json.loads(done["alone"].stdout)["textbook_note"] is None
