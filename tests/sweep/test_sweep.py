"""``trainplan sweep`` as a user runs it (separate processes): each point answers what the single
command answers, a point re-run alone gives its row again, a stopped sweep resumes to the rows an
uninterrupted one writes, the Ray engine writes the pool's rows, the summary and the figures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests import cli_runs

pytestmark = pytest.mark.slow  # a sweep of 16 points and a dozen trainplan processes: ~30 s

pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow", reason="pip install -e '.[sweep]'")

from trainplan.interface.sweep import load_grid, load_results  # noqa: E402
from trainplan.interface.sweep.points import TIMING_COLUMNS  # noqa: E402
from trainplan.interface.sweep.results import frame_of  # noqa: E402

TINY = """
description = "two small models on two parts, two sizes, two HBM capacities"
objective = "time-to-train"
tokens = 1e12
gpu_hour_price = { H100-SXM = 2.5, A100-80GB = 1.5 }
[space]
pp = [1, 2]
zero = [1]
schedule = ["1f1b"]
[sweep]
model = ["megatron-1.7b", "llama3-8b"]
gpu = ["H100-SXM", "A100-80GB"]
gpus = [8, 16]
[what_if]
hbm_capacity = [0.25, 1]
"""
"""16 points of a few tenths of a second each: 2 of them infeasible (Llama 3 8B on 8 GPUs with a
quarter of the HBM)."""


def trainplan(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = cli_runs.trainplan(*args)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def answers(frame):
    """The rows without the columns that time the run."""
    return frame.drop(columns=list(TIMING_COLUMNS)).reset_index(drop=True)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The tiny grid swept once on a pool of 2: (folder, grid path, summary, rows)."""
    folder = tmp_path_factory.mktemp("sweep")
    grid = folder / "tiny.toml"
    grid.write_text(TINY)
    proc = trainplan(
        "sweep", str(grid), "--workers", "2", "--csv", str(folder / "tiny.csv"), "--json"
    )
    return folder, grid, json.loads(proc.stdout), pd.read_parquet(folder / "tiny.parquet")


def test_one_row_per_point_and_the_summary(swept):
    folder, _, summary, rows = swept
    assert list(rows["point"]) == list(range(16))
    assert summary["statuses"] == {"optimal": 14, "infeasible": 2}
    [why] = summary["infeasible"]
    assert why["why"] == "memory" and why["points"] == 2
    infeasible = rows[rows["status"] == "infeasible"]
    assert set(infeasible["part"]) == {"H100-SXM[hbm×0.25]", "A100-80GB[hbm×0.25]"}
    assert set(infeasible["model"]) == {"llama3-8b"} and set(infeasible["gpus"]) == {8}
    assert infeasible["reason"].str.startswith("memory: no layout fits").all()
    assert infeasible["dp"].isna().all() and infeasible["seq_len"].notna().all()
    # the best per model is the least time to train of its answered rows
    for best in summary["best"]:
        mine = rows[(rows["model"] == best["model"]) & (rows["status"] == "optimal")]
        assert best["objective_value"] == mine["objective_value"].min()
        assert best["point"] == int(mine.loc[mine["objective_value"].idxmin(), "point"])
    # cost = time to train in hours × GPUs × the part's price
    r = rows.iloc[0]
    assert r["cost_usd"] == pytest.approx(r["time_to_train_s"] / 3600 * r["gpus"] * 2.5)
    assert r["time_to_train_s"] == pytest.approx(1e12 / r["tokens_per_s"])
    assert pd.read_csv(folder / "tiny.csv")["point"].tolist() == list(range(16))


def test_a_point_answers_what_the_single_command_answers(swept):
    _, grid, _, rows = swept
    row = rows[(rows["model"] == "llama3-8b") & (rows["part"] == "H100-SXM") & (rows["gpus"] == 16)]
    [row] = row.to_dict("records")
    single = trainplan(
        "search", "--model", "llama3-8b", "--gpu", "H100-SXM", "--gpus", "16",
        "--pp", "1", "--pp", "2", "--zero", "1", "--schedule", "1f1b",
        "--objective", "time-to-train", "--tokens", "1e12", "--gpu-hour-price", "2.5", "--json",
    )  # fmt: skip
    d = json.loads(single.stdout)
    for key in (
        "dp",
        "tp",
        "pp",
        "cp",
        "ep",
        "zero_stage",
        "micro_batch_size",
        "recompute",
        "schedule",
    ):
        assert row[key] == d["layout"][key], key
    assert row["step_s"] == d["time"]["step_s"]
    assert row["mfu"] == d["time"]["mfu"]
    assert row["peak_bytes"] == d["memory"]["total_bytes"]
    assert row["objective_value"] == d["objective_s"]
    assert row["status"] == d["status"] == "optimal"


def test_a_point_re_run_alone_gives_its_row(swept):
    _, grid, _, rows = swept
    picks = [int(rows[rows["status"] == "infeasible"]["point"].iloc[0]), 13]  # 13: a what-if point
    proc = trainplan(
        "sweep", str(grid), "--point", str(picks[0]), "--point", str(picks[1]), "--json"
    )
    alone = frame_of(load_grid(grid), json.loads(proc.stdout))
    assert answers(alone).equals(answers(rows[rows["point"].isin(picks)]))


def test_a_finished_sweep_runs_nothing_again(swept):
    _, grid, _, _ = swept
    proc = trainplan("sweep", str(grid), "--json")
    out = json.loads(proc.stdout)
    assert out["ran"] == 0 and out["points"] == 16


def test_results_of_another_grid_are_never_mixed_in(swept, tmp_path):
    folder, grid, _, _ = swept
    other = tmp_path / "other.toml"
    other.write_text(TINY.replace("1e12", "2e12"))
    proc = trainplan("sweep", str(other), "--out", str(folder / "tiny.parquet"), check=False)
    assert proc.returncode == 2
    assert "holds results of another grid or trainplan version" in proc.stderr


def test_options_that_do_not_apply_are_refused(swept):
    _, grid, _, _ = swept
    cases = [
        (
            ["--point", "3", "--workers", "2"],
            "workers: 2 does not apply: --point runs the points alone",
        ),
        (["--address", "auto"], "address: 'auto' applies to --engine ray"),
        (["--point", "99"], "point: 99 is not a point of"),
    ]
    for args, line in cases:
        proc = trainplan("sweep", str(grid), *args, check=False)
        assert proc.returncode == 2 and line in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1


def test_the_figures_from_the_results_file(swept):
    folder, _, _, _ = swept
    results = str(folder / "tiny.parquet")
    for args in (
        ["--kind", "scaling", "--metric", "cost"],
        ["--kind", "heatmap", "--what-if", "hbm_capacity", "--metric", "step-time"],
    ):
        png = folder / f"{args[1]}.png"
        proc = trainplan("sweep-plot", results, "--png", str(png), *args)
        assert proc.stdout.strip() == f"Figure: {png}"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = trainplan(
        "sweep-plot",
        results,
        "--png",
        str(folder / "x.png"),
        "--kind",
        "heatmap",
        "--what-if",
        "peak_flops",
        check=False,
    )
    assert bad.returncode == 2
    assert (
        bad.stderr.strip()
        == "Error: --what-if: 'peak_flops' is not swept in these results (hbm_capacity)"
    )


def test_the_charts_say_what_the_rows_say(swept):
    from trainplan.interface.sweep import charts, load_results

    folder, _, _, rows = swept
    frame = load_results(folder / "tiny.parquet")
    series, metric, note = charts.scaling_series(frame, "time-to-train")
    assert list(series) == ["megatron-1.7b", "llama3-8b"] and note == ""
    line = series["llama3-8b"]["H100-SXM"]
    want = rows[(rows["model"] == "llama3-8b") & (rows["part"] == "H100-SXM")].sort_values("gpus")
    assert [g for g, _ in line] == [int(g) for g in want["gpus"]]
    assert [d for _, d in line] == pytest.approx(  # days, to the last bits of a float
        [t / 86400 for t in want["time_to_train_s"]], rel=1e-12
    )
    heat = charts.heatmap_cells(frame, "hbm_capacity", "time-to-train")
    assert heat.columns == ["×0.25", "×1"] and heat.relative
    assert [row[1] for row in heat.values] == [1.0, 1.0]  # each model's ×1 cell is the ratio 1
    assert heat.rows[0].startswith("megatron-1.7b (1.7B)")


def test_an_interrupted_sweep_resumes_to_the_same_rows(swept, tmp_path):
    _, _, _, whole = swept
    grid = tmp_path / "tiny.toml"
    grid.write_text(TINY)
    out = tmp_path / "tiny.parquet"
    parts = tmp_path / "tiny.parquet.parts"
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainplan", "sweep", str(grid), "--workers", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the pool's workers are killed with it
    )
    deadline = time.monotonic() + 120
    while not list(parts.glob("part-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(load_results(out))  # the parts written whole (one being written is left out)
    assert 0 < done < 16, "the sweep was not stopped mid-run"
    assert not out.exists()
    resumed = json.loads(trainplan("sweep", str(grid), "--workers", "2", "--json").stdout)
    assert resumed["ran"] == 16 - done
    assert not parts.exists()
    assert answers(pd.read_parquet(out)).equals(answers(whole))


def test_ray_writes_the_pool_rows(swept, tmp_path):
    if os.environ.get("TRAINPLAN_RAY_TESTS") != "required":
        pytest.importorskip("ray", reason="pip install -e '.[sweep-ray]'")
    _, grid, _, whole = swept
    out = tmp_path / "ray.parquet"
    proc = trainplan(
        "sweep", str(grid), "--engine", "ray", "--workers", "2", "--out", str(out), "--json"
    )
    assert json.loads(proc.stdout)["engine"] == "a local Ray instance (2 CPUs)"
    assert answers(pd.read_parquet(out)).equals(answers(whole))
