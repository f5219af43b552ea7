"""The web API against the CLI (issue 14 items 1, 2 and 5): each endpoint answers the object the
command prints with ``--json`` for the same inputs, key for key and value for value; bad input is
HTTP 422 with the very line the CLI prints after ``Error:`` (never a trace); the figures are the
API's objects drawn; nothing is loaded from a network. In-process through FastAPI's TestClient,
plus ``trainplan serve`` itself in a subprocess. Skipped without the ``[web]``/``[webtest]``
extras (see conftest)."""

from __future__ import annotations

import json
import re
import sys
import urllib.request
import warnings
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

import pytest

from tests.web.conftest import need

need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")  # newer Starlette prefers httpx2; both work
from click.testing import CliRunner  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.cli import cli, main, register_commands  # noqa: E402
from trainplan.interface.flags import on_page  # noqa: E402
from trainplan.interface.web.api import error_line, page_fields  # noqa: E402
from trainplan.interface.web.app import create_app  # noqa: E402
from trainplan.model.errors import InputError  # noqa: E402

register_commands()
ROOT = Path(__file__).resolve().parents[2]
HF_8B = ROOT / "tests" / "data" / "hf" / "llama3-8b" / "config.json"


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


def cli_json(*args: str):
    """What ``trainplan ARGS --json`` prints, parsed."""
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output)


def cli_error(monkeypatch, capsys, *args: str) -> str:
    """The one line ``trainplan ARGS`` prints on stderr for bad input (exit code 2)."""
    monkeypatch.setattr(sys, "argv", ["trainplan", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    return err


def query(args: list[str]) -> str:
    """CLI options ``--key value …`` as the API's query ``key=value&…``."""
    pairs = [(args[i].lstrip("-"), args[i + 1]) for i in range(0, len(args), 2)]
    return urlencode(pairs)


EVALUATE = [
    "--model",
    "llama3-70b",
    "--dp",
    "4",
    "--tp",
    "4",
    "--pp",
    "4",
    "--recompute",
    "selective",
]
CASES = [
    ("evaluate", EVALUATE),
    (
        "evaluate",
        [
            "--model",
            "mixtral-8x7b",
            "--ep",
            "4",
            "--dp",
            "8",
            "--framework",
            "deepspeed",
            "--zero",
            "1",
        ],
    ),
    ("evaluate", ["--params", "70B"]),
    ("evaluate", ["--params", "70B", "--gpus", "64", "--zero", "3"]),  # Megatron-FSDP, no layers
    (
        "pipeline",
        [
            "--stages",
            "4",
            "--microbatches",
            "8",
            "--schedule",
            "interleaved",
            "--virtual-stages",
            "2",
        ],
    ),
    (
        "mfu",
        [
            "--params",
            "70e9",
            "--tokens",
            "4e6",
            "--step-seconds",
            "7",
            "--peak-tflops",
            "989",
            "--chips",
            "512",
        ],
    ),
    ("ckpt", ["--layers", "9", "--every", "3"]),
    ("ckpt", ["--layers", "16"]),
    ("rlhf", ["--algorithm", "grpo", "--policy-params", "70e9", "--reward", "rule"]),
    ("gpus", []),
    ("models", []),
]


@pytest.mark.parametrize(
    ("command", "args"), CASES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(CASES)]
)
def test_endpoint_is_the_cli_json(client, command, args):
    got = client.get(f"/api/{command}?{query(args)}")
    assert got.status_code == 200, got.text
    want = cli_json(command, *args)
    if command == "evaluate":  # the notes in the page's words (its fields, not the flags)
        want["notes"] = [on_page(n, page_fields("evaluate")) for n in want["notes"]]
    assert got.json() == want


def test_flags_and_repeated_options(client):
    """The API keeps the parameters whose flags moved to ``--set`` (time_model, overlap)."""
    got = client.get(
        "/api/evaluate?model=llama3-70b&tp=8&pp=2&dp=4&flash=false&time-model=single&overlap=dp=0.2&overlap=tp=0.1"
    )
    want = cli_json("evaluate", "--model", "llama3-70b", "--tp", "8", "--pp", "2", "--dp", "4", "--no-flash",
                    "--set", "time_model=single", "--set", "overlap.dp=0.2", "--set", "overlap.tp=0.1")  # fmt: skip
    assert got.json() == want
    assert want["layout"]["flash_attention"] is False


BAD = [
    ["evaluate", "--model", "llama3-70b", "--tp", "0"],
    ["evaluate", "--model", "llama3-70b", "--schedule", "x"],
    ["evaluate", "--model", "nosuch"],
    ["evaluate", "--model", "llama3-70b", "--tp", "3"],
    ["pipeline", "--stages", "4"],
    [
        "mfu",
        "--params",
        "70e9",
        "--tokens",
        "4e6",
        "--step-seconds",
        "0.1",
        "--peak-tflops",
        "989",
        "--chips",
        "512",
    ],
    ["ckpt", "--layers", "9", "--every", "0"],
    ["rlhf", "--algorithm", "dpo", "--policy-params", "7e9", "--reward", "rule"],
    ["search", "--model", "llama3-70b", "--gpus", "64", "--min-mfu", "x"],
    ["frontier", "--model", "llama3-70b", "--gpus", "64", "--against", "price"],
    ["evaluate", "--model", "llama3-8b", "--tp", "2", "--set", "tp_block_inputs=sharded"],
    [
        "evaluate",
        "--model",
        "llama3-8b",
        "--tp",
        "2",
        "--framework",
        "deepspeed",
        "--set",
        "tp_comm_overlap=full",
    ],  # fmt: skip
]


@pytest.mark.parametrize("args", BAD, ids=[" ".join(a[:1] + a[-2:]) for a in BAD])
def test_bad_input_is_422_with_the_cli_line(client, monkeypatch, capsys, args):
    line = cli_error(monkeypatch, capsys, *args)
    got = client.get(f"/api/{args[0]}?{query(args[1:])}")
    assert got.status_code == 422
    assert "Traceback" not in got.text
    # the CLI's line, each flag named by its query parameter, and a key given by set=KEY=VALUE
    # as typed (interface.flags.typed_on_page)
    pairs = parse_qsl(query(args[1:]))
    web = error_line(InputError(line.removeprefix("Error: ")), f"/api/{args[0]}", pairs)
    assert got.json()["error"] == web
    # given as set=tp_block_inputs=sharded: named as typed, not as its field tp-block-inputs
    assert web.startswith("tp_block_inputs: ") == ("tp_block_inputs=sharded" in args)


@pytest.mark.parametrize(
    ("url", "line"),
    [
        ("moe-node-limit=0", "moe-node-limit: 0 must be at least 1"),
        (
            "nvlink-gbps=100&nvlink-gbps=200",
            "nvlink-gbps: given twice with different values ('100', then '200'); it takes one "
            "value, so give it once",
        ),
        ("overlap=dp", "overlap: 'dp' must be AXIS=FRACTION, e.g. dp=0.5"),
        ("master-weights=maybe", "master-weights: 'maybe' must be true or false"),
        (
            "gpu=B200&offload-optimizer=1",
            "offload: the B200 has no host link bandwidth in the table (trainplan gpus); give "
            "host-link-gbps",
        ),
        (
            "pod-size=8",
            "pod-size: 8 does not apply: it shapes a cluster graph; add fabric=fat-tree or rail",
        ),
        (  # the terminal's `--set help` is the manual's table on the page
            "set=nosuch%3D1",
            "set: 'nosuch' is not a scenario key evaluate takes (the manual's CLI reference lists "
            "them: /manual/reference/cli/#scenario-keys-set)",
        ),
        (  # Megatron-LM's validate_args asserts sequence parallelism with --tp-comm-overlap
            "tp=8&sequence-parallel=false&tp-comm-overlap=full",
            "tp-comm-overlap: full (Transformer Engine's userbuffers) needs sequence parallelism "
            "at tp 8 (Megatron-LM's validate_args asserts it); turn sequence_parallel on or use "
            "tp_comm_overlap async",
        ),
    ],
)
def test_a_moved_knob_is_named_by_its_query_parameter(client, url, line):
    """The web takes a knob the command line moved to ``--set`` by its query parameter, and its
    lines name it so (the page puts the line next to that field), never ``--set KEY``."""
    got = client.get(f"/api/evaluate?model=llama3-8b&{url}")
    assert (got.status_code, got.json()["error"]) == (422, line)


def test_the_set_keys_pointer_names_a_heading_of_the_manual():
    """``/manual/reference/cli/#scenario-keys-set`` is MkDocs' anchor of the heading "Scenario
    keys (--set)" (lower case, punctuation dropped, spaces as dashes) of the CLI reference the
    manual's build writes into ``docs/reference/cli.md``'s generated block."""
    from trainplan.interface.cli.reference import cli_markdown
    from trainplan.interface.flags import SET_KEYS_PAGE

    assert SET_KEYS_PAGE.endswith("/manual/reference/cli/#scenario-keys-set")
    assert "\n## Scenario keys (--set)\n" in cli_markdown()


def test_estimate_notes_name_the_page_fields(client):
    """The page's notes name its form fields (query parameters), the command line's its flags:
    the same note, each in the words of the user reading it."""
    got = client.get("/api/evaluate?params=7B&gpus=8").json()["notes"]
    want = cli_json("evaluate", "--params", "7B", "--gpus", "8")["notes"]
    assert "(give --layers --hidden --heads …, or a catalogue model)" in want[0]
    assert "(give layers hidden heads …, or a catalogue model)" in got[0]
    assert [n for n in got if "--" in n] == []


def test_an_unknown_name_is_422_naming_it_and_the_parameters(client):
    """Not the command line's "No such option '--bogus'. (Did you mean '--png'?)": the API takes
    no file options, so the line names the parameter and the ones the API takes."""
    got = client.get("/api/evaluate?model=llama3-70b&bogus=1")
    assert got.status_code == 422
    line = got.json()["error"]
    # the closest parameter as --set suggests one (difflib: "gpus" is 0.67 like "bogus")
    assert line.startswith(
        "bogus: no such parameter of evaluate (did you mean gpus?); its parameters are "
    )
    assert ", gpus," in line and "No such option" not in line and "json" not in line
    compil = client.get("/api/evaluate?model=llama3-70b&compil=true").json()["error"]
    assert compil.startswith("compil: no such parameter of evaluate (did you mean compile?); ")


def test_tp_block_inputs_is_the_cli_option(client):
    """fsdp2's tensor-parallel plan chosen in the query, as on the command line."""
    args = ["--model", "llama3-8b", "--framework", "fsdp2", "--tp", "2", "--dp", "4"]
    got = client.get(f"/api/evaluate?{query([*args, '--tp-block-inputs', 'sharded'])}").json()
    want = cli_json("evaluate", *args, "--set", "tp_block_inputs=sharded")
    assert got["memory"] == want["memory"] and got["layout"]["tp_block_inputs"] == "sharded"


def test_options_the_web_does_not_take(client):
    """Each refused by the query key the user sent, as every web line names its field (never the
    command line's flag, ``--scenario:``)."""
    for url, name in (
        ("/api/pipeline?stages=4&microbatches=8&png=x.png", "png"),
        ("/api/evaluate?model=../tests/data/hf/llama3-8b/config.json", "model"),
        ("/api/search?model=llama3-70b&gpus=64&scenario=/etc/passwd", "scenario"),
        ("/api/pipeline?stages=4&microbatches=8&width=80", "width"),
        ("/api/ckpt?layers=9&json=true", "json"),
    ):
        got = client.get(url)
        assert got.status_code == 422, url
        assert (
            got.json()["error"].startswith(f"{name}: ")
            and "does not apply here" in got.json()["error"]
        )


def test_uploaded_config_is_the_cli_path(client):
    text = HF_8B.read_text()
    got = client.get("/api/evaluate?" + urlencode({"config": text, "tp": "2", "dp": "4"})).json()
    want = cli_json("evaluate", "--model", str(HF_8B), "--tp", "2", "--dp", "4")
    assert got["memory"] == want["memory"] and got["traffic"] == want["traffic"]
    assert got["time"] == want["time"]
    both = client.get("/api/evaluate?" + urlencode({"config": text, "model": "llama3-8b"}))
    assert both.status_code == 422 and both.json()["error"].startswith(
        "model: 'llama3-8b' does not apply"
    )
    assert client.get("/api/evaluate?config=%7B").status_code == 422


SEARCH = ["--model", "llama3-8b", "--gpus", "8"]


def _untimed(d):
    """The object without its timings, nor the CLI's ``evaluate_command`` (the shell line that
    re-runs the answer; on the page the answer's planner link is that round trip)."""
    skip = ("solve_seconds", "tables_seconds", "evaluate_command")
    return {k: v for k, v in d.items() if k not in skip}


def test_search_and_its_stream(client):
    got = client.get(f"/api/search?{query(SEARCH)}").json()
    assert _untimed(got) == _untimed(cli_json("search", *SEARCH))
    assert got["status"] == "optimal"
    events = [
        json.loads(x) for x in client.get(f"/api/search/stream?{query(SEARCH)}").text.splitlines()
    ]
    assert events[-1]["event"] == "result" and events[-1]["result"] == got  # the same (cached) run
    link = events[-1]["planner"][0]
    planner = client.get("/api/evaluate?" + link.split("?", 1)[1]).json()
    assert planner["memory"]["total_bytes"] == got["memory"]["total_bytes"]


def test_search_says_what_a_setting_costs(client):
    # the forced EP overlap costs 4.6 % on Mixtral 8x7B, 64 H100s (tests/test_cli_settings_cost.py):
    # the CLI's settings_cost, its note naming the query parameter the page's user gave
    args = ["--model", "mixtral-8x7b", "--gpus", "64", "--gpu", "H100-SXM"]
    overlap = "overlap_moe_expert_parallel_comm"
    got = client.get(f"/api/search?{query(args)}&moe-ep-overlap={overlap}").json()["settings_cost"]
    want = cli_json("search", *args, "--set", f"moe_ep_overlap={overlap}")["settings_cost"]
    assert {k: v for k, v in got.items() if k != "note"} == {
        k: v for k, v in want.items() if k != "note"
    }
    assert want["note"].startswith(f"your setting --set moe_ep_overlap={overlap} costs 4.6%")
    assert got["note"] == want["note"].replace("--set moe_ep_overlap=", "moe-ep-overlap=")


def test_planner_link_carries_the_answers_cp_flavour(client):
    # the search chooses among flavours: the link names the answer's one, not the query's list
    args = ["--model", "llama3-8b", "--gpus", "16", "--seq-len", "131072", "--global-batch", "16"]
    args += ["--cp", "1", "--cp", "2", "--cp", "4", "--cp-kind", "all-gather", "--cp-kind", "ring"]
    events = client.get(f"/api/search/stream?{query(args)}").text.splitlines()
    last = json.loads(events[-1])
    link, answer = last["planner"][0], last["result"]
    assert answer["layout"]["cp"] == 4 and answer["layout"]["cp_kind"] == "ring"
    assert link.count("cp-kind=") == 1 and "cp-kind=ring" in link
    planner = client.get("/api/evaluate?" + link.split("?", 1)[1]).json()
    assert planner["layout"] == answer["layout"] and planner["memory"] == answer["memory"]


def test_stream_reports_progress_and_bad_input(client):
    args = ["--model", "llama3-70b", "--gpus", "32", "--gpu", "H100-SXM,H200"]
    events = [
        json.loads(x) for x in client.get(f"/api/search/stream?{query(args)}").text.splitlines()
    ]
    kinds = [e["event"] for e in events]
    assert kinds.count("tables") == 2 and kinds[-1] == "result"  # one per job
    assert events[0]["total"] == events[1]["done"]
    bad = client.get("/api/search/stream?model=llama3-70bb&gpus=32")
    assert bad.status_code == 422 and bad.json()["error"].startswith(
        "model: unknown model 'llama3-70bb'"
    )


def _no_seconds(d):
    """The per-stage object without its timings (nor the CLI's ``evaluate_command``, as
    :func:`_untimed`)."""
    ps = {
        k: v
        for k, v in d["per_stage"].items()
        if k not in ("uniform_seconds", "tables_seconds", "solve_seconds", "shapes")
    }
    return {**{k: v for k, v in d.items() if k != "evaluate_command"}, "per_stage": ps}


def test_per_stage_search_is_the_cli_object(client):
    args = ["--model", "llama3-70b", "--gpus", "16", "--seq-len", "6144"]
    got = client.get(f"/api/search?{query(args)}&per-stage=true").json()
    assert _no_seconds(got) == _no_seconds(cli_json("search", *args, "--per-stage"))
    # 38/37 recomputed at 6K (tests/interface/test_per_stage_cli.py; at 8K, 39/38 before
    # Transformer Engine's placeholder weight gradients were held, the uniform plan with them)
    assert got["per_stage"]["recompute_layers"] == [38, 37]
    # its Planner link carries the stages' layers and recomputed layers: the same plan
    stream = client.get(f"/api/search/stream?{query(args)}&per-stage=true").text.splitlines()
    link = json.loads(stream[-1])["planner"][0]
    assert "recompute-layers=38%2C37" in link
    planner = client.get("/api/evaluate?" + link.split("?", 1)[1]).json()
    assert planner["layout"] == got["layout"] and planner["memory"] == got["memory"]
    assert planner["time"]["step_s"] == got["time"]["step_s"]
    bad = client.get(f"/api/search?{query([*args, '--top', '2'])}&per-stage=true")
    assert bad.status_code == 422 and bad.json()["error"].startswith("per-stage: takes neither")


def test_infeasible_search_is_the_cli_object(client):
    args = ["--model", "llama3-70b", "--gpus", "2"]  # 645 GB the least a layout needs
    got = client.get(f"/api/search?{query(args)}")
    assert got.status_code == 200 and got.json() == cli_json("search", *args)
    assert got.json()["status"] == "infeasible"


def test_frontier_and_its_csv(client, tmp_path):
    path = tmp_path / "frontier.csv"
    result = CliRunner().invoke(cli, ["frontier", *SEARCH, "--csv", str(path), "--json"])
    want = json.loads(result.output)
    got = client.get(f"/api/frontier?{query(SEARCH)}").json()
    assert got["points"] == want["points"] and got["status"] == want["status"] == "optimal"
    csv = client.get(f"/api/figures/frontier.csv?{query(SEARCH)}")
    assert csv.headers["content-disposition"] == 'attachment; filename="frontier.csv"'
    assert csv.text == path.read_text()
    svg = client.get(f"/api/figures/frontier?{query(SEARCH)}").text
    links = re.findall(r'xlink:href="(/planner\?[^"]+)"', svg)
    assert len(links) == len(got["points"]) and 'id="point-1"' in svg


PER_STAGE_8B = ["--model", "llama3-8b", "--gpus", "8", "--seq-len", "8192", "--global-batch", "32"]


def test_per_stage_frontier_is_the_cli_object_and_its_links_reproduce_the_plans(client):
    """/api/frontier with per-stage=true is frontier --per-stage --json (it used to answer the
    uniform frontier). Its 6-GPU point is a per-stage plan (pp 3 with 12 + 12 + 8 layers;
    12 + 11 + 9 has the same step and peak, and the one-worker search prints the first on every
    run, tests/interface/test_per_stage_repeatable_cli.py): its planner link gives the split per chunk, and the
    link evaluates to the point's own step time; the CSV writes the lists as --stage-layers
    takes them. The 8-GPU point is the uniform plan (an interleaved per-stage stage holds a
    multiple of v, optimizer.stage_tables)."""
    # ZeRO-0/1: at ZeRO-3 the 8-GPU point is Megatron-FSDP at pp 1, with no chunks to check
    args = [*PER_STAGE_8B[:2], "--gpus", "6", "--gpus", "8", *PER_STAGE_8B[4:]]
    args += ["--against", "gpus", "--zero", "0", "--zero", "1"]
    want = cli_json("frontier", *args, "--per-stage")
    got = client.get(f"/api/frontier?{query(args)}&per-stage=true").json()
    assert got["per_stage"] is True and got["points"] == want["points"]
    six = next(p for p in got["points"] if p["num_gpus"] == 6)
    assert (six["num_gpus"], six["pp"], six["virtual_stages"], six["plan"]) == (
        6,
        3,
        1,
        "per-stage",
    )
    assert six["chunk_layers"] == [12, 12, 8]
    assert six["stage_layers"] == six["chunk_layers"]
    assert sorted((p["num_gpus"], p["plan"]) for p in got["points"]) == [
        (6, "per-stage"),
        (8, "uniform"),
    ]
    # the stream answers from the API's cache (the same query just ran): the same points
    events = client.get(f"/api/frontier/stream?{query(args)}&per-stage=true").text.splitlines()
    last = json.loads(events[-1])
    assert last["cached"] is True and last["result"]["points"] == got["points"]
    link = last["planner"][got["points"].index(six)]
    chunks = ",".join(map(str, six["chunk_layers"]))
    assert "stage-layers=" + chunks.replace(",", "%2C") in link
    planner = client.get("/api/evaluate?" + link.split("?", 1)[1]).json()
    assert planner["time"]["step_s"] == pytest.approx(six["step_s"], rel=1e-12)
    csv = client.get(f"/api/figures/frontier.csv?{query(args)}&per-stage=true").text
    assert f'"{chunks}"' in csv.splitlines()[1 + got["points"].index(six)]
    bad = client.get(f"/api/frontier?{query([*args, '--per-stage-shapes', '3'])}")
    assert bad.status_code == 422
    assert bad.json()["error"].startswith("per-stage-shapes: 3 applies to the per-stage search")


def test_figures_draw_the_api_objects(client):
    d = cli_json("evaluate", *EVALUATE)
    svg = client.get(f"/api/figures/memory?{query(EVALUATE)}")
    assert svg.headers["content-type"] == "image/svg+xml"
    total = d["memory"]["total_bytes"] / 1e9
    assert f"total {total:,.2f} GB at the peak" in svg.text
    m = d["memory"]
    verdict = "fits" if m["fits"] else f"DOES NOT FIT: over by {m['overflow_bytes'] / 1e9:,.2f} GB"
    assert f"verdict: {verdict}</text>" in svg.text
    frame = client.get("/api/figures/ckpt-step?layers=9&every=3&step=5").text
    assert "step 5: backward" in frame or "step 5: forward layer 5" in frame
    assert "peak 6 vs 10" in client.get("/api/figures/ckpt-held?layers=9&every=3&step=5").text
    assert "bubble 27.3%" in client.get("/api/figures/pipeline?stages=4&microbatches=8").text


def test_openapi_describes_every_endpoint(client):
    spec = client.get("/openapi.json").json()
    for name in (
        "evaluate",
        "search",
        "frontier",
        "pipeline",
        "mfu",
        "ckpt",
        "rlhf",
        "gpus",
        "models",
    ):
        assert f"/api/{name}" in spec["paths"]
    params = {p["name"]: p for p in spec["paths"]["/api/evaluate"]["get"]["parameters"]}
    assert {"tp", "seq-len", "config", "framework"} <= set(params) and "json" not in params
    # Every schedule the cost model evaluates: the classic three and the split-backward ones.
    assert params["schedule"]["schema"]["enum"] == [
        "gpipe",
        "1f1b",
        "interleaved",
        "zb-h1",
        "zb-h2",
        "zb-v",
        "dualpipe",
        "dualpipev",
    ]
    search = {p["name"]: p for p in spec["paths"]["/api/search"]["get"]["parameters"]}
    assert search["tp"]["schema"]["type"] == "array" and "scenario" not in search
    assert "422" in spec["paths"]["/api/evaluate"]["get"]["responses"]


def test_openapi_defaults_are_real_values_never_clicks_sentinel(client):
    """click ≥ 8.2 keeps ``Sentinel.UNSET`` as an option's default when it has none; the
    description must not offer it (Swagger UI's "Try it out" pre-fills and sends defaults)."""
    text = client.get("/openapi.json").text
    assert "Sentinel" not in text and "UNSET" not in text
    spec = json.loads(text)
    for path, item in spec["paths"].items():
        for operation in item.values():
            for param in operation.get("parameters", []):
                schema = param["schema"]
                default = schema.get("default", schema.get("items", {}).get("default"))
                if default is not None:  # a default offered is one the endpoint takes
                    one = client.get(f"{path}?{urlencode({param['name']: default})}")
                    assert one.status_code != 422 or param["name"] not in one.json()["error"], (
                        path,
                        param["name"],
                        default,
                    )
    pipeline = {p["name"]: p for p in spec["paths"]["/api/pipeline"]["get"]["parameters"]}
    assert pipeline["schedule"]["schema"]["default"] == "1f1b"
    assert "default" not in pipeline["stages"]["schema"]  # required, no default
    evaluate = {p["name"]: p for p in spec["paths"]["/api/evaluate"]["get"]["parameters"]}
    assert "default" not in evaluate["model"]["schema"]


PAGES = ["planner", "pipeline", "mfu", "ckpt", "rlhf", "search", "frontier", "sweep", "about"]


@pytest.mark.parametrize("path", [f"/{p}" for p in PAGES] + ["/docs"])
def test_pages_load_nothing_from_a_network(client, path):
    html = client.get(path)
    assert html.status_code == 200
    refs = re.findall(r'(?:src|href)\s*=\s*["\']([^"\']+)["\']', html.text)
    assert refs, path
    for ref in refs:
        assert ref.startswith(("/", "#", "data:")), f"{path} loads {ref}"
        # /manual/ is the documentation site, built on its first request (about a minute):
        # tests/web/test_manual.py (slow) builds and serves it.
        if ref.startswith("/") and not ref.startswith(("/openapi", "/manual")):
            assert client.get(ref).status_code == 200, ref


def test_static_scripts_name_no_network_address(client):
    static = ROOT / "interface" / "web" / "static"
    for f in static.iterdir():
        assert not re.search(r"https?://", f.read_text()), f.name


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (
            {"content": "hello"},
            'grid: required (none given); the body is a JSON object {"grid": …}',
        ),
        ({"json": {}}, 'grid: required (none given); the body is a JSON object {"grid": …}'),
        ({"json": [1]}, 'grid: required (none given); the body is a JSON object {"grid": …}'),
        (
            {"json": {"grid": 5}},
            'grid: 5: input should be a valid string; the body is a JSON object {"grid": …}',
        ),
        (
            {"content": "{", "headers": {"Content-Type": "application/json"}},
            "body: not JSON (Expecting property name enclosed in double quotes); send a JSON "
            "object",
        ),
    ],
)
def test_a_body_the_endpoint_cannot_read_is_422_with_one_line(client, body, line):
    """FastAPI's own refusal of a body (``{"detail": [{"type": "missing", …}]}``) in the API's one
    shape: HTTP 422 and ``{"error": line}``, the line naming the body's field."""
    got = client.post("/api/sweep", **body)
    assert (got.status_code, got.json()) == (422, {"error": line})


def test_a_method_the_endpoint_does_not_take_is_405_naming_the_one_it_takes(client):
    """405 (the method is wrong, not the input), in the one shape, with Starlette's Allow."""
    got = client.post("/api/mfu?params=70B")
    assert got.status_code == 405 and got.headers["allow"] == "GET"
    assert got.json() == {"error": "/api/mfu: POST is not allowed; this endpoint answers GET"}
    # evaluate answers both: POST takes its parameters as a JSON body (interface.web.body)
    got = client.put("/api/evaluate")
    assert got.status_code == 405 and got.headers["allow"] == "GET, POST"
    assert got.json() == {
        "error": "/api/evaluate: PUT is not allowed; this endpoint answers GET, POST"
    }
    assert client.put("/api/sweep").json() == {
        "error": "/api/sweep: PUT is not allowed; this endpoint answers POST"
    }


def test_other_hosts_and_pages(client):
    assert client.get("/api/gpus", headers={"host": "evil.example"}).status_code == 400
    assert client.get("/nosuch").status_code == 404
    assert client.get("/", follow_redirects=False).headers["location"] == "/planner"


def test_trainplan_serve_prints_its_address(server):
    with urllib.request.urlopen(f"{server}/api/gpus", timeout=10) as res:
        rows = json.loads(res.read())
    assert rows == cli_json("gpus")


def test_serve_refuses_a_bad_port_in_one_line(monkeypatch, capsys):
    line = cli_error(monkeypatch, capsys, "serve", "--port", "99999")
    assert line == "Error: --port: 99999 must be from 0 to 65535 (0 = any free port)"


def test_examples_are_each_pages_query_and_run_as_the_cli_runs_them(client):
    """Each of the 20 examples as its page's query: the endpoint of that page, given the query,
    answers the figures ``trainplan example NAME --json`` prints."""
    body = client.get("/api/examples").json()
    rows = body["examples"]
    assert [r["name"] for r in rows] == [r["name"] for r in cli_json("example", "--list")]
    endpoint = {"planner": "evaluate", "pipeline": "pipeline", "mfu": "mfu", "ckpt": "ckpt",
                "rlhf": "rlhf"}  # fmt: skip
    for row in rows:
        got = client.get(
            f"/api/{endpoint[row['page']]}?{urlencode([tuple(p) for p in row['query']])}"
        ).json()
        want = cli_json("example", row["name"])
        for key in ("memory", "bubble_fraction", "mfu", "hfu", "peak_held", "resident_bytes"):
            if key in want:
                assert got[key] == want[key], (row["name"], key)
    fsdp = {r["name"]: r for r in rows}["fsdp-70b-64"]
    assert fsdp["page"] == "planner" and ["zero", "3"] in fsdp["query"]
    assert ["params", "70e9"] in fsdp["query"]  # numbers as the examples write them
    assert body["aliases"]["pipeline"]["p"] == "stages"
    assert body["aliases"]["ckpt"]["n"] == "layers" and body["aliases"]["ckpt"]["k"] == "every"
    assert body["aliases"]["planner"]["zero_stage"] == "zero"
    assert body["aliases"]["planner"]["micro_batch_size"] == "micro-batch"
    assert client.get("/api/examples?x=1").status_code == 422


def test_pipeline_without_its_timeline(client):
    full = client.get("/api/pipeline?stages=4&microbatches=8").json()
    short = client.get("/api/pipeline?stages=4&microbatches=8&timeline=false").json()
    assert "timeline" in full and "timeline" not in short
    assert {k: v for k, v in full.items() if k != "timeline"} == short
    bad = client.get("/api/pipeline?stages=4&microbatches=8&timeline=maybe")
    assert bad.status_code == 422 and bad.json()["error"].startswith("timeline: 'maybe'")


def test_closing_a_search_stream_stops_its_process(server):
    """The page's Cancel closes the request: the search's process is gone within seconds,
    whether the search had sent its first event or not (a per-stage search sends none before
    its end); and so does a client of the whole ``/api/search`` or ``/api/frontier`` that goes
    away before the answer."""
    from tests.web.job_helpers import leaving_stops_the_job

    long_runs = [  # (path, whether to read the first event before closing)
        ("/api/search/stream?model=llama3-70b&gpus=32&seq-len=8192&per-stage=true", False),
        ("/api/frontier/stream?model=llama3-405b&gpus=64..16384&gpu=H100-SXM", True),
        ("/api/search?model=llama3-70b&gpus=32&seq-len=8192&per-stage=true", False),
        ("/api/frontier?model=llama3-405b&gpus=64..16384&gpu=H100-SXM", False),
    ]
    for path, streaming in long_runs:
        leaving_stops_the_job(server, path, streaming)


def test_pipeline_split_schedules(client):
    """/api/pipeline and its figure for the split-backward schedules: ZB-H2's zero span bubble at
    2p − 1 in flight, a schedule refused under a framework that cannot run it (422, one line),
    DualPipe's timeline with its overlapped blocks."""
    r = client.get("/api/pipeline?stages=4&microbatches=8&schedule=zb-h2").json()
    assert r["span_bubble_units"] == 0 and r["chunks_held_per_stage"] == [7] * 4
    bad = client.get("/api/pipeline?stages=4&microbatches=8&schedule=dualpipe&framework=fsdp2")
    assert bad.status_code == 422 and "dualpipe does not run under framework fsdp2" in bad.text
    svg = client.get("/api/figures/pipeline?stages=4&microbatches=8&schedule=dualpipe&t-fb=2")
    assert svg.headers["content-type"] == "image/svg+xml"
    assert "overlapped F&amp;B block" in svg.text and "dualpipe: 4 ranks" in svg.text


def test_moe_options_are_the_cli_options(client):
    """The run's MoE routing and dispatch chosen in the query, as on the command line."""
    args = ["--model", "gpt-oss-20b", "--gpus", "8", "--dp", "8", "--ep", "8"]
    args += ["--global-batch", "8"]
    web = ["--moe-capacity-factor", "2", "--moe-pad-to-capacity", "true"]
    got = client.get(f"/api/evaluate?{query([*args, *web])}").json()
    want = cli_json(
        "evaluate", *args, "--set", "moe_capacity_factor=2", "--set", "moe_pad_to_capacity=true"
    )
    assert got["traffic"] == want["traffic"] and got["time"] == want["time"]
    assert got["layout"]["moe"]["moe_capacity_factor"] == 2.0


@pytest.mark.parametrize("path", ["/search", "/frontier"])
def test_search_constraints_grey_text_is_the_default_not_an_example(client, path):
    """An empty field sends nothing, and the search then has no MFU floor and keeps no memory
    free (optimizer.problem: min_mfu None, headroom 0): the grey text says so, the example after
    it, as the Planner's "e.g." fields do (once a bare 0.4 and 0.1, read as defaults)."""
    html = client.get(path).text
    assert 'name="min-mfu" placeholder="none (e.g. 0.4)"' in html
    assert 'name="headroom" placeholder="0 (e.g. 0.1)"' in html


MEMORY_CHART_LAYOUTS = [
    ["--model", "llama3-70b", "--dp", "2", "--tp", "4", "--pp", "8"],
    ["--model", "llama3-8b", "--framework", "fsdp2", "--dp", "8", "--recompute", "full"],
    ["--model", "llama3-8b", "--framework", "deepspeed", "--zero", "3", "--dp", "8"],
    ["--model", "mixtral-8x7b", "--dp", "8", "--ep", "8", "--tp", "2"],
    ["--model", "llama3-70b", "--tp", "8", "--cp", "2", "--dp", "4", "--seq-len", "32768",
     "--global-batch", "64"],
]  # fmt: skip


@pytest.mark.parametrize("args", MEMORY_CHART_LAYOUTS, ids=lambda a: a[1] + "-" + "-".join(a[2:6]))
def test_memory_chart_bar_reaches_the_total(client, args):
    """The planner's memory bar stacks every term of the text (communicators, persistent and
    context-parallel buffers, the backward working set…; once it left them out and stopped
    short of the total in its own title: 73.79 of 75.76 GB on the page's default layout), so
    the forward/backward bar is the peak; no part is negative (the output layer's released
    bytes come off its activations)."""
    from tests.cli_runs import trainplan
    from trainplan.interface.render.chart_layout import memory_bars

    done = trainplan("evaluate", *args, "--json")
    assert done.returncode == 0, done.stderr
    m = json.loads(done.stdout)["memory"]
    bars = memory_bars(m)
    assert all(v > 0 for parts in bars.values() for _, v in parts)
    assert m["peak_phase"] == "forward-backward"
    assert sum(v for _, v in bars["forward/backward"]) == m["total_bytes"]
    svg = client.get(f"/api/figures/memory?{query(args)}").text
    assert "NCCL communicators" in svg


def test_the_accelerator_tables_status_column_is_explained_on_every_page(client):
    """The page's accelerator table heads the rows' ``status`` as ``trainplan gpus`` does
    (app.js reads the header from the legend's data-header) and says what each value means, on
    each tab that has the table (those that choose an accelerator; the about tab has none)."""
    from trainplan.topology.accelerators import STATUS_MEANINGS

    assert 'id="gpu-status-legend"' not in client.get("/about").text
    for path in ("/planner", "/rlhf", "/mfu"):
        page = client.get(path).text
        assert 'id="gpu-status-legend" data-header="figures from">figures from: vendor = ' in page
        for kind, meaning in STATUS_MEANINGS.items():
            assert f"{kind} = {meaning}".replace("'", "&#x27;") in page


def test_rlhf_fields_show_their_defaults_in_grey(client):
    """The RLHF tab's decode MFU, samples per prompt and chips fields were empty with no grey
    value, beside train MFU's 0.4: an empty field takes the grey value (the page's rule), and
    theirs are the accounting's defaults, 0.04, 16 and 1 (``trainplan rlhf --help``)."""
    from trainplan.interface.rlhf.tab import RLHF_DEFAULTS

    html = client.get("/rlhf").text
    assert f'name="decode-mfu" placeholder="{RLHF_DEFAULTS["decode_mfu"]}"' in html
    assert f'name="train-mfu" placeholder="{RLHF_DEFAULTS["train_mfu"]}"' in html
    assert f'name="samples-per-prompt" placeholder="{RLHF_DEFAULTS["samples_per_prompt"]}"' in html
    assert 'name="chips" placeholder="1"' in html  # trainplan rlhf --chips [default: 1]
