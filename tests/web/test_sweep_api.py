"""Sweeps through the API (``/api/sweep``): the grid's text starts one on the server's pool, the
stream reports its progress and ends with the summary ``trainplan sweep --json`` prints, the
downloads hold its rows and the figures draw; bad grids are HTTP 422 with the CLI's line, and the
page takes no file on the server. Marked slow (a sweep and its pool start: ~10 s)."""

from __future__ import annotations

import io
import json
import re
import warnings

import pytest

from tests.web.conftest import need

pytestmark = pytest.mark.slow
need("fastapi", "pip install -e '.[web]'")
need("httpx", "pip install -e '.[webtest]'")
need("pyarrow", "pip install -e '.[web]'")

warnings.filterwarnings("ignore", message=".*httpx2.*")
from fastapi.testclient import TestClient  # noqa: E402

from trainplan.interface.web.app import create_app  # noqa: E402

GRID = """
model = "megatron-1.7b"
tokens = 1e11
gpu_hour_price = 2
[space]
pp = [1]
zero = [1]
schedule = ["1f1b"]
[sweep]
gpus = [8, 16]
[what_if]
peak_flops = [1, 2]
"""


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(create_app(("testserver",)))


@pytest.fixture(scope="module")
def finished(client, tmp_path_factory):
    """A sweep started and followed to its end: (id, events, the CLI's rows of the same grid)."""
    import pandas as pd

    from tests.sweep.test_sweep import trainplan

    started = client.post("/api/sweep", json={"grid": GRID})
    assert started.status_code == 200
    sweep_id = started.json()["id"]
    assert started.json()["points"] == 4
    busy = client.post("/api/sweep", json={"grid": GRID})
    assert busy.status_code == 422 and busy.json() == {
        "error": f"sweep: {sweep_id} is running (follow it at /sweep?id={sweep_id}); wait for it "
        f"or cancel it (DELETE /api/sweep/{sweep_id})",
        "running": sweep_id,
    }
    with client.stream("GET", f"/api/sweep/{sweep_id}/stream") as res:
        assert res.headers["content-type"].startswith("application/x-ndjson")
        events = [json.loads(line) for line in res.iter_lines() if line]
    folder = tmp_path_factory.mktemp("cli")
    (folder / "g.toml").write_text(GRID)
    trainplan("sweep", str(folder / "g.toml"), "--workers", "1")
    return sweep_id, events, pd.read_parquet(folder / "g.parquet")


def test_the_stream_reports_progress_then_the_summary(finished):
    _, events, rows = finished
    assert events[0] == {"event": "start", "points": 4, "todo": 4}
    progress = [e for e in events if e["event"] == "progress"]
    assert [e["done"] for e in progress] == sorted(e["done"] for e in progress)
    assert progress[-1]["done"] == 4 and progress[-1]["seconds_left"] == 0
    done = events[-1]
    assert done["event"] == "done"
    s = done["summary"]
    assert s["statuses"] == {"optimal": 4} and s["points"] == 4 and s["ran"] == 4
    best = {(b["gpus"], b["part"]) for b in s["best"]}
    assert best == {(16, "H100-SXM[flops×2]")}  # least step time: the most GPUs, twice the peak
    assert s["best"][0]["step_s"] == rows["step_s"].min()
    # the grid gives tokens and a price: every metric; time to train first, as sweep-plot draws
    assert (s["metrics"], s["metric"]) == (
        ["time-to-train", "cost", "step-time", "mfu"],
        "time-to-train",
    )


def test_downloads_hold_the_cli_rows(client, finished):
    import pandas as pd

    from trainplan.interface.sweep.points import TIMING_COLUMNS

    sweep_id, _, rows = finished
    csv = client.get(f"/api/sweep/{sweep_id}/results.csv")
    assert csv.status_code == 200 and csv.headers["content-type"].startswith("text/csv")
    parquet = client.get(f"/api/sweep/{sweep_id}/results.parquet")
    got = pd.read_parquet(io.BytesIO(parquet.content))
    drop = list(TIMING_COLUMNS)
    assert got.drop(columns=drop).equals(rows.drop(columns=drop))
    assert pd.read_csv(io.StringIO(csv.text))["part"].tolist() == rows["part"].tolist()
    status = client.get(f"/api/sweep/{sweep_id}").json()
    assert status["state"] == "done" and status["done"] == 4


def test_figures(client, finished):
    sweep_id, _, _ = finished
    svg = client.get(f"/api/sweep/{sweep_id}/figure.svg?kind=scaling&metric=cost")
    assert (
        svg.status_code == 200 and "<svg" in svg.text and "cost ($) against GPU count" in svg.text
    )
    heat = client.get(
        f"/api/sweep/{sweep_id}/figure.svg?kind=heatmap&what_if=peak_flops&metric=step-time"
    )
    assert heat.status_code == 200 and "peak_flops: step time ÷ its ×1 value" in heat.text
    plain = client.get(f"/api/sweep/{sweep_id}/figure.svg")  # sweep-plot's default metric
    assert plain.status_code == 200 and "time to train (days) against GPU count" in plain.text
    bad = client.get(f"/api/sweep/{sweep_id}/figure.svg?kind=heatmap")
    assert bad.status_code == 422 and bad.json()["error"].startswith(
        "what_if: kind heatmap needs what_if"
    )


@pytest.mark.parametrize(
    ("grid", "line"),
    [
        ("[sweep]\ngpus = [0]", "grid from the page: sweep.gpus: 0 must be at least 1"),
        ("[sweep\n", "grid: not TOML"),
        (
            "model = '/etc/passwd'\n[sweep]\ngpus = [8]",
            "model: '/etc/passwd' is not a catalogue model",
        ),
        (
            "[cluster]\ncalibration = 'x.toml'\n[sweep]\ngpus = [8]",
            "calibration: names a file on the server",
        ),
    ],
)
def test_bad_grids_are_422_with_one_line(client, grid, line):
    res = client.post("/api/sweep", json={"grid": grid})
    assert res.status_code == 422
    assert line in res.json()["error"] and "\n" not in res.json()["error"]


def test_an_unknown_sweep_is_422(client):
    res = client.get("/api/sweep/nosuch/stream")
    assert res.status_code == 422
    assert re.match(r"sweep: no sweep 'nosuch' on this server", res.json()["error"])
