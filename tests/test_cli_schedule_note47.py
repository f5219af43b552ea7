"""A search restricted to one pipeline schedule whose answer has no pipeline: at pp 1 the
schedules coincide and the search keeps one, labelled ``1f1b`` (:func:`optimizer.space._schedules`),
so the answer says the schedule asked for does not run — in the text and in ``--json`` — and says
nothing when ``1f1b`` was among the schedules searched. Each call its own process."""

from __future__ import annotations

import json

from tests.cli_runs import run_many

JOB = "search --model llama3-8b --gpus 8 --gpu H100-SXM --global-batch 64 --seq-len 4096 --framework fsdp2".split()
NOTE = "the answer has pp 1 (no pipeline), so schedule zb-v does not run: it is labelled 1f1b"


def test_a_pp_1_answer_says_the_schedule_asked_for_does_not_run() -> None:
    runs = run_many(
        {
            "text": [*JOB, "--pp", "1", "--schedule", "zb-v"],
            "json": [*JOB, "--pp", "1", "--schedule", "zb-v", "--json"],
            "both": [*JOB, "--pp", "1", "--schedule", "1f1b", "--schedule", "zb-v", "--json"],
        }
    )
    for done in runs.values():
        assert done.returncode == 0, done.stderr[-2000:]
    assert f"Note: {NOTE}; give --pp values above 1 to search pipelines only" in runs["text"].stdout
    answer = json.loads(runs["json"].stdout)
    assert answer["layout"]["pp"] == 1 and answer["layout"]["schedule"] == "1f1b"
    assert f"{NOTE}; give `pp` values above 1 to search pipelines only" in answer["notes"]
    assert not any("no pipeline" in n for n in json.loads(runs["both"].stdout)["notes"])
