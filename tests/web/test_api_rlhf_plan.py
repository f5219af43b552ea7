"""``/api/rlhf-plan`` is ``trainplan rlhf-plan --json``: for the same inputs the API answers the
object the command prints, key for key and value for value (the command run as a user runs it,
a process of its own: :mod:`tests.cli_runs`), the two solve times aside (each run's own clock);
a search with no placement that fits answers the command's ``status: "infeasible"`` object with
200 (the command exits 1: the input was good, the answer is no); the time limit bounds the web's
search as it bounds the command's; bad input is HTTP 422 with the command's ``Error:`` line, the
flag written as its query key. In-process through FastAPI's TestClient."""

from __future__ import annotations

import json
import warnings
from urllib.parse import urlencode

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from tests import cli_runs  # noqa: E402
from trainplan.interface.web.app import create_app  # noqa: E402
from trainplan.interface.web.params import api_markdown  # noqa: E402

CLOCKS = ("tables_seconds", "solve_seconds", "startup_seconds")
"""The search's own wall-clock times: each run measures its own; ``startup_seconds`` the
command's start-up its time limit counts (the web's job counts its limit from the search's
start: 0, as the web's search and frontier give it)."""


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


def _query(args: list[str]) -> str:
    """The command's options as the API's query: ``--gpus 8`` → ``gpus=8``, ``--no-offload`` →
    ``offload=false`` (the one on/off option of rlhf-plan)."""
    pairs: list[tuple[str, str]] = []
    rest = list(args)
    while rest:
        flag = rest.pop(0)
        if flag == "--no-offload":
            pairs.append(("offload", "false"))
        else:
            pairs.append((flag.removeprefix("--"), rest.pop(0)))
    return urlencode(pairs)


def _without_clocks(d: dict) -> dict:
    return {k: v for k, v in d.items() if k not in CLOCKS}


def _cli(args: list[str]) -> tuple[int, dict]:
    done = cli_runs.trainplan("rlhf-plan", *args, "--json", timeout=600)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


PLANS = {
    # GRPO with a rule reward: the actor, the reference and the engine placed on 8 H100s
    "grpo-8b-8": ["--algorithm", "grpo", "--reward", "rule", "--model", "llama3-8b", "--gpus", "8"],
    # PPO, every role (critic and reward model too) on 16 GPUs, no offload, one CP-SAT worker,
    # a time limit it does not reach, numbers written grouped as a user types them
    "ppo-qwen-16": ["--algorithm", "ppo", "--model", "qwen2.5-7b", "--gpus", "16",
                    "--prompts", "1,024", "--no-offload", "--workers", "1", "--time-limit", "300"],
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(PLANS))
def test_the_plan_is_the_clis_json(client, name):
    """The object the command prints, the same keys and values, solved to optimality by both."""
    args = PLANS[name]
    code, cli = _cli(args)
    res = client.get(f"/api/rlhf-plan?{_query(args)}")
    assert res.status_code == 200, res.text
    api = res.json()
    assert code == 0 and cli["status"] == api["status"] == "optimal"
    assert api["interrupted"] is False and api["best"] is not None
    assert _without_clocks(api) == _without_clocks(cli)


def test_no_placement_that_fits_is_the_clis_infeasible_object(client):
    """Llama 3 70B on one 80 GB H100: no role fits a GPU on its own (its BF16 weights alone are
    70.6e9 × 2 B = 141 GB); the command exits 1 with the infeasible object, the API answers it
    with 200."""
    args = ["--algorithm", "grpo", "--reward", "rule", "--model", "llama3-70b", "--gpus", "1"]
    code, cli = _cli(args)
    res = client.get(f"/api/rlhf-plan?{_query(args)}")
    assert code == 1 and res.status_code == 200
    assert res.json() == cli
    assert cli["status"] == "infeasible"
    assert "actor: no pool size and parallelism fits a GPU's" in " ".join(cli["explanation"])


def test_the_time_limit_bounds_the_webs_search_as_the_commands(client):
    """Llama 3 70B on 64 H100 in 0.01 s (tests/tabs/test_rlhf_plan_cli.py, the command): nothing
    is costed in time, so the status is ``unknown`` with no placement, never ``infeasible``; the
    search keeps to the limit within a second; the object is the command's, but for how far each
    run got before its clock ran out (``reason``'s count, ``options``, ``tried``, ``skipped``)."""
    args = ["--algorithm", "grpo", "--reward", "rule", "--model", "llama3-70b", "--gpus", "64",
            "--time-limit", "0.01"]  # fmt: skip
    code, cli = _cli(args)
    res = client.get(f"/api/rlhf-plan?{_query(args)}")
    assert res.status_code == 200 and code == 1
    api = res.json()
    assert api["status"] == "unknown" and api["best"] is None
    assert api["time_limit_seconds"] == 0.01 and api["tables_complete"] is False
    assert api["tables_seconds"] + api["solve_seconds"] <= 0.01 + 1.0
    how_far = ("reason", "options", "tried", "skipped")
    assert api["reason"].startswith("the time limit ran out before any placement was found (")
    assert api["reason"].endswith("): not proven infeasible")
    same = {k: v for k, v in _without_clocks(api).items() if k not in how_far}
    assert same == {k: v for k, v in _without_clocks(cli).items() if k not in how_far}


BASE = ["--algorithm", "grpo", "--reward", "rule", "--model", "llama3-8b"]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--gpus", "0"], "gpus: '0' must be at least 1"),
        (["--gpus", "8", "--time-limit", "0"], "time-limit: 0 must be positive"),
        (["--gpus", "8", "--workers", "0"], "workers: '0' must be at least 1"),
        (
            ["--gpus", "8", "--prompts", "4,000x"],
            "prompts: '4,000x' is not a number (write a number of sequences, e.g. 8192, 8,192 "
            "or 8.192e3)",
        ),
    ],
)
def test_bad_input_is_422_with_the_clis_line(client, args, line):
    """One line naming the parameter (its query key), the value and the rule: the command's
    ``Error:`` line (its own process, exit code 2) with ``--gpus`` written ``gpus``."""
    res = client.get(f"/api/rlhf-plan?{_query([*BASE, *args])}")
    assert res.status_code == 422
    assert res.json() == {"error": line}
    cli = cli_runs.refusal(cli_runs.trainplan("rlhf-plan", *BASE, *args, "--json"))
    flag = line.partition(":")[0]
    assert cli == f"--{flag}{line[len(flag) :]}"


@pytest.mark.parametrize(
    ("query", "line"),
    [
        (
            "algorithm=grpo&model=llama3-8b&gpus=8&width=50",
            "width: '50' does not apply here: it sets the text timeline's columns; the page "
            "draws the chart",
        ),
        ("algorithm=grpo&model=llama3-8b&gpus=8&offload=maybe", "offload: 'maybe' must be true or false"),
        ("algorithm=grpo&model=llama3-8b", "gpus: required by this command (none given)"),
    ],
)  # fmt: skip
def test_what_only_the_web_refuses_is_one_line(client, query, line):
    """The terminal's ``--width``, an on/off key that is neither ``true`` nor ``false``, a
    required key left out: 422 and one line naming the key."""
    res = client.get(f"/api/rlhf-plan?{query}")
    assert res.status_code == 422 and res.json() == {"error": line}


DPO_LINE = (
    "algorithm: 'dpo' is not one of ppo, grpo (DPO has no rollout to place: its textbook "
    "accounting is {instead})"
)
"""The refusal of DPO (model.rlhf.spec.placed_algorithm), naming where DPO's accounting is as its
reader runs it: this command has no policy-params."""


@pytest.mark.parametrize(
    "query", ["algorithm=dpo", "model=llama3-8b&gpus=8&algorithm=dpo", "algorithm=DPO&gpus=8"]
)
def test_dpo_is_refused_first_naming_the_webs_fields(client, query):
    """DPO places nothing: refused as such before the model and GPUs it does not need are asked
    for, naming /api/rlhf and its ``policy-params`` as the query keys they are (the command
    line's ``--policy-params`` once leaked into the web's line); the command line's own line
    names the command to run, ``trainplan rlhf``, in its own process."""
    res = client.get(f"/api/rlhf-plan?{query}")
    algorithm = "'DPO'" if "DPO" in query else "'dpo'"
    web = DPO_LINE.format(
        instead="/api/rlhf?algorithm=dpo&policy-params=SIZE (the RLHF tab)"
    ).replace("'dpo'", algorithm)
    assert res.status_code == 422 and res.json() == {"error": web}
    args = [
        a for kv in query.split("&") for a in ("--" + kv.partition("=")[0], kv.partition("=")[2])
    ]
    cli = cli_runs.refusal(cli_runs.trainplan("rlhf-plan", *args, "--json"))
    line = DPO_LINE.format(
        instead="trainplan rlhf --algorithm dpo --policy-params SIZE (e.g. 70B)"
    ).replace("'dpo'", algorithm)
    assert cli == "--" + line


def test_the_endpoint_is_described_and_documented(client):
    """The OpenAPI description lists ``/api/rlhf-plan`` with the command's keys (``time-limit``
    among them, ``width`` not), and the API reference's generated tables have its section."""
    op = client.get("/openapi.json").json()["paths"]["/api/rlhf-plan"]["get"]
    keys = {p["name"] for p in op["parameters"]}
    assert {"algorithm", "model", "gpus", "offload", "time-limit", "workers"} <= keys
    assert "width" not in keys and "json" not in keys
    assert "## /api/rlhf-plan" in api_markdown()
    assert "| `time-limit` |" in api_markdown()


def test_closing_the_request_stops_the_plans_process(server):
    """The plan runs in a process of its own (as ``/api/search`` does): a client that goes away
    before the answer (a timeout, Ctrl-C on ``curl``) stops it — the process is gone within
    seconds. Llama 3 8B GRPO on 1,000,000 GPUs without a time limit runs far longer than the
    test waits."""
    from tests.web.job_helpers import leaving_stops_the_job

    path = "/api/rlhf-plan?algorithm=grpo&reward=rule&model=llama3-8b&gpus=1,000,000"
    assert leaving_stops_the_job(server, path)["kind"] == "rlhf-plan"
