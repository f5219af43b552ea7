"""Benchmark of the per-stage search (issue 13), beside the same reference loop as
:mod:`interface.bench`: ``python -m trainplan.interface.bench.per_stage``.

Per case (memory-tight published models at the smallest GPU counts where they fit, and GPT-3
175B on 1,024 A100s): the best uniform layout's step time and its recompute mode, the per-stage
plan's step time, the gain (uniform ÷ per-stage), the proof status, the seconds of the uniform
search, the stage tables and CP-SAT, and ``trainplan search --per-stage`` end to end in a fresh
process, also as a multiple of the reference loop. The goals (≥ 1.1× where the uniform plan must
recompute; proven within 10 s on 2 cores) are read here, not in timed tests.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

from trainplan.interface.bench.search import REFERENCE, reference_seconds, wall_seconds
from trainplan.interface.scenario import build_problem
from trainplan.optimizer.per_stage import per_stage_search

__all__ = ["CASES", "run"]


@dataclass(frozen=True)
class Case:
    name: str
    values: dict
    argv: tuple[str, ...]


def _case(name: str, space: dict | None = None, **values: object) -> Case:
    argv: list[str] = ["search", "--per-stage"]
    for key, value in values.items():
        flag = {"global_batch": "--global-batch"}.get(key, "--" + key.replace("_", "-"))
        argv += [flag, str(value)]
    for key, items in (space or {}).items():
        for item in items:
            argv += ["--" + key, str(item)]
    d = dict(values)
    if space:
        d["space"] = space
    return Case(name, d, tuple(argv))


CASES = [
    _case("Llama 3 70B, 8K, 16 H100", model="llama3-70b", gpus="16", seq_len=8192),
    _case("Llama 3 70B, 8K, 32 H100", model="llama3-70b", gpus="32", seq_len=8192),
    _case("Llama 3 405B, 8K, 104 H100", model="llama3-405b", gpus="104", seq_len=8192),
    _case("Llama 3 405B, 8K, 128 H100", model="llama3-405b", gpus="128", seq_len=8192),
    _case("Llama 3 405B, 8K, 192 H100", model="llama3-405b", gpus="192", seq_len=8192),
    _case(
        "Llama 3 70B, 128K, 64 H100, B 64",
        {"cp": [1, 2, 4, 8]},
        model="llama3-70b",
        gpus="64",
        seq_len=131072,
        global_batch=64,
    ),
    _case(
        "Llama 3 405B, 128K, 512 H100, B 64",
        {"cp": [1, 2, 4, 8]},
        model="llama3-405b",
        gpus="512",
        seq_len=131072,
        global_batch=64,
    ),
    _case(
        "GPT-3 175B, 1,024 A100-80GB, B 1536",
        model="gpt3-175b",
        gpus="1024",
        gpu="A100-80GB",
        global_batch=1536,
    ),
]


def _in_process(case: Case) -> dict:
    values = {"gpu": "H100-SXM", **case.values}
    problem = build_problem({}, values)
    t0 = time.perf_counter()
    result = per_stage_search(problem)
    total = time.perf_counter() - t0
    lay = result.plan.layout
    assert result.uniform is not None and result.uniform_ns is not None  # without_uniform unset
    return {
        "uniform_s": result.uniform_ns / 1e9,
        "uniform_recompute": str(result.uniform.estimate.layout.recompute),
        "plan_s": result.plan_ns / 1e9,
        "gain": result.gain,
        "status": result.status,
        "search_s": result.uniform_seconds,
        "tables_s": result.tables_seconds,
        "solve_s": result.solve_seconds,
        "total_s": total,
        "layers": lay.stage_layers,
        "recomputed": lay.recompute_layers,
        "shapes": len(result.shapes),
    }


def run() -> list[dict]:
    """Run the cases, print a Markdown table, return the rows."""
    ref = reference_seconds()
    print(f"reference loop (python -c '{REFERENCE}'): {ref:.2f} s\n")
    print(
        "| case | uniform (recompute) | per-stage | gain | status | base layouts | uniform "
        "search | stage tables | CP-SAT | in process | end to end | × reference |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for case in CASES:
        row = {"case": case.name, **_in_process(case)}
        argv = list(case.argv)
        if "--gpu" not in argv:
            argv += ["--gpu", "H100-SXM"]
        row["end_to_end_s"] = wall_seconds(["-m", "trainplan", *argv])
        rows.append(row)
        print(
            f"| {case.name} | {row['uniform_s']:.2f} s ({row['uniform_recompute']}) | "
            f"{row['plan_s']:.2f} s | {row['gain']:.3f}× | {row['status']} | {row['shapes']} | "
            f"{row['search_s']:.2f} s | {row['tables_s']:.2f} s | {row['solve_s']:.2f} s | "
            f"{row['total_s']:.2f} s | {row['end_to_end_s']:.2f} s | "
            f"{row['end_to_end_s'] / ref:.1f} |",
            flush=True,
        )
    print()
    for row in rows:
        if row["layers"] is not None:
            print(
                f"{row['case']}: layers {','.join(map(str, row['layers']))}; recomputed "
                f"{','.join(map(str, row['recomputed'] or ()))}"
            )
    return rows


def main() -> None:
    argparse.ArgumentParser(description=__doc__).parse_args()
    run()


if __name__ == "__main__":
    main()
