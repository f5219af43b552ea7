"""Benchmark of ``trainplan sweep`` beside the reference loop of :mod:`interface.bench`:
``python -m trainplan.interface.bench --sweep`` (``--smoke``: the small grid, as CI runs it).

The goal: a grid of 1,000 searches (10 models × 5 parts × 20 cluster sizes) on the process pool
takes at most 3 × the sum of the single searches' times ÷ the workers. Both sides are measured in
the same run, each in a fresh ``trainplan sweep`` process:

* the single searches: ``--workers 1`` runs the points one after another in one process (each
  point the single command's function, :func:`interface.sweep.points.run_point`); their sum is
  the sum of the rows' ``search_s``;
* the sweep: ``--workers N`` on the process pool; its time is the sweep's own wall time (pool
  start, batches, Parquet writes and the merge; not the CLI's start), and the process's too;
* the CPU seconds the points took both ways (the rows' ``cpu_s``): equal when the pool adds no
  work, whatever else shares the machine's cores.

The two results must agree row for row (every column but the timings). Ray: the same small grid
on a local Ray instance of 1 and of 2 CPUs, points per second each (the instance's start is not
counted: a cluster is started once).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainplan.interface.sweep import load_results
from trainplan.interface.sweep.points import TIMING_COLUMNS

__all__ = ["FULL", "SMOKE", "RAY", "grid_text", "run", "smoke"]

FULL = (
    (
        "llama3-8b",
        "llama3-70b",
        "llama3-405b",
        "llama2-70b",
        "mistral-7b",
        "qwen2.5-7b",
        "qwen2.5-72b",
        "gpt3-175b",
        "megatron-18.4b",
        "mixtral-8x7b",
    ),
    ("H100-SXM", "H200", "B200", "A100-80GB", "GB200"),
    "48..32768",
)
"""10 models × 5 parts × 20 cluster sizes (the powers of two and 1.5× from 48 to 32,768)."""
SMOKE = (("llama3-8b", "llama3-70b"), ("H100-SXM", "H200"), "64..128")
"""2 models × 2 parts × 3 sizes: CI's check (``--smoke``)."""
RAY = (("llama3-8b", "llama3-70b"), ("H100-SXM", "H200", "B200"), "64..2048")
"""2 × 3 × 11 = 66 points for the Ray rows."""
GOAL = 3.0
"""At most this × (sum of single searches ÷ workers)."""


def grid_text(models: tuple[str, ...], parts: tuple[str, ...], gpus: str) -> str:
    """The benchmark's grid file: time to train 15T tokens, every size of ``gpus``."""
    quoted = ", ".join(f'"{m}"' for m in models)
    names = ", ".join(f'"{p}"' for p in parts)
    return (
        'description = "benchmark"\nobjective = "time-to-train"\ntokens = 15e12\n'
        f'[sweep]\nmodel = [{quoted}]\ngpu = [{names}]\ngpus = ["{gpus}"]\n'
    )


def _sweep(grid: Path, out: str, *args: str) -> tuple[dict, float]:
    """The ``--json`` summary of ``trainplan sweep grid --out out …`` and the process's wall time."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainplan",
            "sweep",
            str(grid),
            "--out",
            out,
            "--restart",
            "--json",
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1) or not proc.stdout.strip():  # 1: a point's internal error
        raise RuntimeError(f"trainplan sweep failed ({proc.returncode}): {proc.stderr.strip()}")
    return json.loads(proc.stdout), wall


def _agree(a: str, b: str) -> bool:

    x, y = (load_results(p).drop(columns=list(TIMING_COLUMNS)) for p in (a, b))
    return bool(x.equals(y))


def pool_row(spec: tuple, workers: int = 2) -> dict:
    """One grid on ``--workers 1`` and on the pool of ``workers``: the measurements and the goal."""
    with tempfile.TemporaryDirectory() as tmp:
        grid = Path(tmp) / "grid.toml"
        grid.write_text(grid_text(*spec))
        one, one_wall = _sweep(grid, f"{tmp}/one.parquet", "--workers", "1")
        pool, pool_wall = _sweep(grid, f"{tmp}/pool.parquet", "--workers", str(workers))
        one_rows, pool_rows = (load_results(f"{tmp}/{n}.parquet") for n in ("one", "pool"))
        singles = float(one_rows["search_s"].sum())
        cpu = (float(one_rows["cpu_s"].sum()), float(pool_rows["cpu_s"].sum()))
        agree = _agree(f"{tmp}/one.parquet", f"{tmp}/pool.parquet")
    bound = GOAL * singles / workers
    return {
        "points": pool["points"],
        "statuses": pool["statuses"],
        "singles_s": singles,
        "one_worker_s": one["seconds"],
        "one_worker_process_s": one_wall,
        "workers": workers,
        "sweep_s": pool["seconds"],
        "sweep_process_s": pool_wall,
        "bound_s": bound,
        "ratio": pool["seconds"] / (singles / workers),
        "meets_goal": pool["seconds"] <= bound,
        "agree": agree,
        "errors": pool["errors"],
        "cpu_one_s": cpu[0],
        "cpu_pool_s": cpu[1],
    }


def ray_rows(spec: tuple = RAY) -> list[dict]:
    """The grid on a local Ray instance of 1 and 2 CPUs: points per second each."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        grid = Path(tmp) / "grid.toml"
        grid.write_text(grid_text(*spec))
        for workers in (1, 2):
            out, wall = _sweep(
                grid, f"{tmp}/ray{workers}.parquet", "--engine", "ray", "--workers", str(workers)
            )
            rows.append(
                {
                    "workers": workers,
                    "points": out["points"],
                    "sweep_s": out["seconds"],
                    "process_s": wall,
                    "points_per_s": out["points"] / out["seconds"],
                }
            )
        rows[-1]["agree_with_1"] = _agree(f"{tmp}/ray1.parquet", f"{tmp}/ray2.parquet")
    return rows


def _print_pool(name: str, r: dict, ref: float) -> None:
    print(
        f"| {name} | {r['points']:,} | {r['singles_s']:.1f} s | {r['one_worker_s']:.1f} s | "
        f"{r['workers']} | {r['sweep_s']:.1f} s ({r['sweep_s'] / ref:.1f} × ref) | "
        f"{r['bound_s']:.1f} s | {r['ratio']:.2f} | {'yes' if r['meets_goal'] else 'NO'} | "
        f"{'yes' if r['agree'] else 'NO'} | {r['cpu_one_s']:.1f} s / {r['cpu_pool_s']:.1f} s |",
        flush=True,
    )


HEADER = (
    "| grid | points | Σ single searches | 1 worker | workers | sweep | goal (3 × Σ ÷ workers) | "
    "sweep ÷ (Σ ÷ workers) | meets goal | rows agree | CPU of the points, 1 worker / pool |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|"
)


def run(ref: float, with_ray: bool = True) -> dict:
    """The full sweep row (and the Ray rows): prints Markdown tables, returns the measurements."""
    print(f"\nSweeps (reference loop {ref:.2f} s):\n\n{HEADER}")
    full = pool_row(FULL)
    _print_pool("10 models × 5 parts × 20 sizes", full, ref)
    for e in full["errors"]:  # a point the single command refuses, or a bug it hits
        print(
            f"\n{e['points']} point(s) {e['why']}, e.g. point {e['example_point']}: {e['example']}"
        )
    out: dict = {"full": full}
    if importlib.util.find_spec("ray") is None:
        with_ray = False
        print("\nRay rows skipped: ray is not installed (pip install -e '.[sweep-ray]')")
    if with_ray:
        rows = ray_rows()
        print("\n| Ray, local instance | points | sweep | points/s |\n|---|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r['workers']} CPU(s) | {r['points']} | {r['sweep_s']:.1f} s | {r['points_per_s']:.2f} |"
            )
        print(f"\nRay throughput, 2 CPUs ÷ 1 CPU: {rows[1]['points_per_s'] / rows[0]['points_per_s']:.2f}×; "
              f"rows agree: {'yes' if rows[1]['agree_with_1'] else 'NO'}")  # fmt: skip
        out["ray"] = rows
    return out


def smoke(ref: float) -> int:
    """CI's check: the small grid on a pool of 2 within the goal, rows identical to one worker's;
    1 when not."""
    r = pool_row(SMOKE)
    print(f"sweep smoke ({ref:.2f} s reference loop):\n{HEADER}")
    _print_pool("2 models × 2 parts × 3 sizes", r, ref)
    return 0 if r["meets_goal"] and r["agree"] else 1
