"""Benchmark: CP-SAT against exhaustive enumeration on published-scale searches (issue 4).

``python -m trainplan.optimizer.bench [--quick]`` runs, in one process, each case's table building (the cost
model over every candidate), the CP-SAT search and the numpy enumeration over the same tables, and
prints wall times, candidates evaluated and the ratio; then the process's peak memory. Not a test:
speed goals live here, not in timed tests.
"""

from __future__ import annotations

import argparse
import resource
import time
from dataclasses import dataclass

from trainplan.model.errors import InfeasibleError
from trainplan.optimizer import enumerate as oracle
from trainplan.optimizer.scenario import build_problem
from trainplan.optimizer.search import frontier, prepare, search

__all__ = ["CASES", "run"]


@dataclass(frozen=True)
class Case:
    name: str
    values: dict
    frontier: bool = False


CASES = [
    Case(
        "Llama 3 405B, 16,384 H100 (best)",
        {"model": "llama3-405b", "gpus": "16384", "gpu": "H100-SXM"},
    ),
    Case(
        "Llama 3 405B, 16,384 H100 (frontier vs memory)",
        {"model": "llama3-405b", "gpus": "16384", "gpu": "H100-SXM"},
        frontier=True,
    ),
    Case("DeepSeek-V3, 2,048 H800", {"model": "deepseek-v3", "gpus": "2048", "gpu": "H800"}),
    Case(
        "Llama 3 70B, 64..4096 × H100/H200/B200, time to train 15T",
        {
            "model": "llama3-70b",
            "gpus": "64..4096",
            "gpu": "H100-SXM,H200,B200",
            "objective": "time-to-train",
            "tokens": "15e12",
        },
    ),
    Case(
        "GPT-3 175B, 1,024 A100-80GB, B 1536",
        {"model": "gpt3-175b", "gpus": "1024", "gpu": "A100-80GB", "global_batch": 1536},
    ),
    Case(
        "MT-NLG 530B, 4,480 A100-80GB (its 560 DGX nodes), B 1920",
        {"model": "megatron-529.6b", "gpus": "4480", "gpu": "A100-80GB", "global_batch": 1920},
    ),
    Case(
        "MT-NLG 530B, 5,128 A100-80GB, B 1920",
        {"model": "megatron-529.6b", "gpus": "5128", "gpu": "A100-80GB", "global_batch": 1920},
    ),
]


def _one(case: Case) -> dict:
    problem = build_problem({}, dict(case.values))
    t0 = time.perf_counter()
    try:
        prepared = prepare(problem)
    except InfeasibleError as err:
        return {"case": case.name, "infeasible": str(err), "seconds": time.perf_counter() - t0}
    tables = prepared[0]
    t_tables = time.perf_counter() - t0
    t0 = time.perf_counter()
    if case.frontier:
        result = frontier(problem, prepared=prepared)
        points = len(result.points)
        objectives = [p.objective for p in result.points]
    else:
        objectives = [search(problem, prepared=prepared).best.objective]
        points = 1
    t_cpsat = time.perf_counter() - t0
    t0 = time.perf_counter()
    if case.frontier:
        found = [obj for _, obj in oracle.pareto(problem, tables)]
    else:
        best = oracle.best(problem, tables)
        found = [] if best is None else [best[1]]
    t_enum = time.perf_counter() - t0
    n = tables.fits.size
    return {
        "case": case.name,
        "candidates": n,
        "shapes": len(tables.shapes),
        "tables_s": t_tables,
        "cpsat_s": t_cpsat,
        "enumeration_s": t_enum,
        "points": points,
        "agree": found == objectives,
    }


def run(quick: bool = False) -> list[dict]:
    """Run the cases (``quick``: the first three only) and print one line each."""
    rows = []
    for case in CASES[:3] if quick else CASES:
        row = _one(case)
        rows.append(row)
        if "infeasible" in row:
            print(
                f"{row['case']}: {row['infeasible']} (answered in {row['seconds']:.2f} s)",
                flush=True,
            )
            continue
        total_cp, total_en = (
            row["tables_s"] + row["cpsat_s"],
            row["tables_s"] + row["enumeration_s"],
        )
        print(
            f"{row['case']}: {row['candidates']:,} candidates ({row['shapes']:,} shapes); tables "
            f"{row['tables_s']:.2f} s; CP-SAT {row['cpsat_s']:.2f} s (total {total_cp:.2f} s); enumeration "
            f"{row['enumeration_s']:.3f} s (total {total_en:.2f} s); CP-SAT/enumeration {total_cp / total_en:.2f}",
            flush=True,
        )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory of this process: {peak_mb:.0f} MB")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="only the first three cases")
    run(parser.parse_args().quick)


if __name__ == "__main__":
    main()
