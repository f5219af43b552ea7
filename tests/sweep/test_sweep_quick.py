"""A sweep of a few points in this process (the default suite; ``test_sweep.py`` runs the
command itself): rows written as batches finish, a stopped sweep resumes to the rows of an
uninterrupted one, the batches group points by model and part, the summary and the figures."""

from __future__ import annotations

import tomllib

import pytest

pytest.importorskip("pyarrow", reason="pip install -e '.[sweep]'")

from trainplan.interface.sweep import engine, load_results, parse_grid, run_sweep  # noqa: E402
from trainplan.interface.sweep.engines import batches  # noqa: E402
from trainplan.interface.sweep.points import TIMING_COLUMNS, run_points  # noqa: E402
from trainplan.interface.sweep.results import ResultsStore, frame_of  # noqa: E402
from trainplan.interface.sweep.summary import summary_json  # noqa: E402

SMALL = """
model = "megatron-1.7b"
objective = "step-time"
tokens = 1e11
[space]
pp = [1]
zero = [1]
recompute = ["none"]
schedule = ["1f1b"]
[sweep]
gpus = [8, 16]
[what_if]
peak_flops = [1, 2]
"""


@pytest.fixture(scope="module")
def grid():
    return parse_grid(tomllib.loads(SMALL), "small.toml")


@pytest.fixture(scope="module")
def swept(grid, tmp_path_factory):
    """The grid swept once in this process: (the run, its results file)."""
    out = tmp_path_factory.mktemp("quick") / "whole.parquet"
    return run_sweep(grid, out, engine("pool", 1)), out


def _answers(frame):
    return frame.drop(columns=list(TIMING_COLUMNS)).reset_index(drop=True)


def test_a_stopped_sweep_resumes_to_the_uninterrupted_rows(grid, swept, tmp_path):
    whole, _ = swept
    assert whole.ran == 4 and list(whole.frame["status"]) == ["optimal"] * 4
    # stopped after one batch: its part file is there, the results file is not
    stopped = ResultsStore(tmp_path / "stopped.parquet", grid)
    stopped.append(run_points(grid, [2]))
    assert not (tmp_path / "stopped.parquet").exists()
    assert [p.name.startswith("part-000000002-") for p in stopped.parts.iterdir()] == [True]
    assert list(load_results(tmp_path / "stopped.parquet")["point"]) == [2]  # readable meanwhile
    resumed = run_sweep(grid, tmp_path / "stopped.parquet", engine("pool", 1))
    assert resumed.ran == 3
    assert not stopped.parts.exists()
    assert _answers(resumed.frame).equals(_answers(whole.frame))
    assert _answers(load_results(tmp_path / "stopped.parquet")).equals(_answers(whole.frame))


def test_twice_the_peak_is_faster_but_not_twice(grid):
    rows = frame_of(grid, run_points(grid, [0, 1]))  # 8 GPUs at ×1 and ×2 of the peak, alone

    assert list(rows["part"]) == ["H100-SXM", "H100-SXM[flops×2]"]
    assert list(rows["peak_flops"]) == [1.0, 2.0]
    base, fast = rows["step_s"]
    assert base / 2 < fast < base
    assert rows["mfu"].iloc[1] < rows["mfu"].iloc[0]  # MFU counts against the doubled peak


def test_batches_keep_a_model_and_part_together():
    g = parse_grid(
        tomllib.loads(
            '[sweep]\nmodel = ["llama3-8b", "llama3-70b"]\ngpu = ["H100-SXM", "H200"]\ngpus = ["8..4096"]'
        ),
        "g.toml",
    )
    work = batches(g, list(range(len(g.points))), workers=2)
    assert sorted(i for b in work for i in b) == list(range(len(g.points)))
    for b in work:
        assert len({g.group(g.point(i)) for i in b}) == 1 and len(b) <= 8


def test_the_summary_counts_and_ranks(swept):
    run, out = swept
    frame = load_results(out)
    s = summary_json(frame, frame.attrs["sweep"], ("gpus",))
    assert s["statuses"] == {"optimal": 4} and s["ranked_by"] == "step-time"
    # per GPU count the least step time: the doubled peak
    assert [(b["gpus"], b["part"]) for b in s["best"]] == [
        (8, "H100-SXM[flops×2]"),
        (16, "H100-SXM[flops×2]"),
    ]
    assert [b["step_s"] for b in s["best"]] == list(run.frame["step_s"].iloc[[1, 3]])


def test_the_figures_draw(swept, tmp_path):
    pytest.importorskip("matplotlib")
    from trainplan.interface.render import plots
    from trainplan.interface.sweep import charts

    frame = load_results(swept[1])
    series, m, note = charts.scaling_series(frame, "step-time")
    assert set(series["megatron-1.7b"]) == {"H100-SXM", "H100-SXM[flops×2]"}
    plots.sweep_scaling_chart(series, m.label, note, tmp_path / "s.svg")
    heat = charts.heatmap_cells(frame, "peak_flops", "step-time")
    assert heat.title == "peak_flops: step time ÷ its ×1 value (best over gpus)"
    assert heat.values[0][0] == 1.0 and 0.5 < heat.values[0][1] < 1
    plots.sweep_heatmap(heat, tmp_path / "h.svg")
    assert "<svg" in (tmp_path / "s.svg").read_text() and "<svg" in (tmp_path / "h.svg").read_text()
    with pytest.raises(Exception, match="metric: 'cost': no point of these results has it"):
        charts.scaling_series(frame, "cost")


def test_an_evaluate_point_is_the_planner():
    from trainplan.interface.commands import evaluate_json

    g = parse_grid(
        tomllib.loads(
            'command = "evaluate"\nmodel = "llama3-70b"\n[layout]\ntp = 8\npp = 4\n'
            'recompute = "selective"\n[sweep]\ngpus = [256, 100]\n'
        ),
        "e.toml",
    )
    fits, refused = run_points(g, [0, 1])
    d = evaluate_json({"model": "llama3-70b", "tp": 8, "pp": 4, "dp": 8, "recompute": "selective"})
    assert fits["status"] == "fits" and fits["dp"] == 8  # 256 GPUs ÷ (tp 8 × pp 4)
    assert fits["step_s"] == d["time"]["step_s"]
    assert fits["peak_bytes"] == d["memory"]["total_bytes"]
    assert refused["status"] == "error"
    assert refused["reason"] == "gpus: 100 is not a multiple of tp·pp·cp = 32"


@pytest.mark.slow  # 4 shuffled batchings of the grid: ~16 searches
def test_a_points_row_does_not_depend_on_the_batch_or_the_order(grid, swept):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    whole, _ = swept
    want = _answers(whole.frame).set_index("point")

    @settings(max_examples=4, deadline=None)
    @given(st.permutations(range(len(grid.points))), st.integers(1, 4))
    def check(order, size):
        for k in range(0, len(order), size):  # batches of `size`, in a shuffled order
            batch = list(order[k : k + size])
            got = _answers(frame_of(grid, run_points(grid, batch)))  # point order
            assert got.set_index("point").equals(want.loc[sorted(batch)])

    check()
