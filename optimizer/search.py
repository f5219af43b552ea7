"""``search()``: the fastest layout that fits, found by CP-SAT over the cost model's tables and
re-evaluated by ``evaluate()`` (DESIGN.md "One cost model, two uses")."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from fractions import Fraction

from model.errors import InfeasibleError
from model.estimate import Estimate, objective_ns
from model.layout import Layout
from optimizer.cpsat import solve
from optimizer.inputs import Case
from optimizer.space import RECOMPUTE_PREFERENCE, ZERO_PREFERENCE, SearchSpace, Shape, legal_shapes
from optimizer.tables import CostTables, build_tables

__all__ = ["SearchResult", "search", "tie_ranks", "TermMismatch"]


class TermMismatch(AssertionError):
    """The solver's table and ``evaluate()`` disagree: a bug, never a user error."""


@dataclass(frozen=True, slots=True)
class SearchResult:
    status: str
    """``optimal`` (proven), ``feasible`` (time limit; best found) or ``infeasible``."""
    layout: Layout | None
    estimate: Estimate | None
    solve_seconds: float
    tables_seconds: float
    num_shapes: int
    num_candidates: int
    explanation: list[str] = field(default_factory=list)


def tie_ranks(tables: CostTables) -> tuple[list[int], list[int]]:
    """Rank of each ZeRO stage and recompute mode in the tables (0 = preferred on ties)."""
    zero = [ZERO_PREFERENCE.index(z) for z in tables.zero_stages]
    zero = [sorted(zero).index(v) for v in zero]
    rec = [RECOMPUTE_PREFERENCE.index(r) for r in tables.recomputes]
    rec = [sorted(rec).index(v) for v in rec]
    return zero, rec


def check_against_evaluate(case: Case, tables: CostTables, s: int, z: int, r: int) -> Estimate:
    """Re-evaluate a chosen candidate and fail loudly if any tabulated term differs."""
    shape = tables.shapes[s]
    est = case.evaluate(shape.layout(tables.zero_stages[z], tables.recomputes[r]))
    for stage in est.stages:
        want = tables.state[s][z][stage.stage] + tables.act[s][r][stage.stage]
        if stage.total_bytes != want:
            raise TermMismatch(
                f"stage {stage.stage} memory: evaluate {stage.total_bytes} != table {want}"
            )
    assert est.time_terms is not None
    got = objective_ns(est.time_terms)
    if got != (tables.t1_ns[s][r], tables.t2_ns[s][z]):
        raise TermMismatch(
            f"time terms: evaluate {got} != table {(tables.t1_ns[s][r], tables.t2_ns[s][z])}"
        )
    return est


def explain_infeasible(tables: CostTables) -> list[str]:
    """Why nothing fits: the candidate needing the least memory, and by how much it overflows."""
    best: tuple[Fraction, int, int, int, int] | None = None
    for s in range(len(tables.shapes)):
        for z in range(len(tables.zero_stages)):
            for r in range(len(tables.recomputes)):
                peak, stage = max(
                    (a + b, i)
                    for i, (a, b) in enumerate(
                        zip(tables.state[s][z], tables.act[s][r], strict=True)
                    )
                )
                if best is None or peak < best[0]:
                    best = (peak, stage, s, z, r)
    if best is None:
        return [
            "no legal layout: no combination of degrees satisfies the divisibility rules for this GPU count and batch"
        ]
    peak, stage, s, z, r = best
    sh = tables.shapes[s]
    return [
        f"memory: no layout fits {tables.capacity_bytes / 1e9:.2f} GB per GPU; the least any candidate needs is "
        f"{float(peak) / 1e9:.2f} GB on pipeline stage {stage} (dp {sh.dp}, tp {sh.tp}, pp {sh.pp}, cp {sh.cp}, ep {sh.ep}, "
        f"b {sh.micro_batch_size}, {sh.schedule}, ZeRO-{tables.zero_stages[z]}, recompute {tables.recomputes[r]})",
        "try more GPUs, a larger accelerator, a smaller micro-batch or sequence, or allow higher tp/pp/cp",
    ]


def search(
    case: Case,
    space: SearchSpace,
    time_limit_s: float | None = None,
    workers: int = 2,
    headroom: float = 0.0,
) -> SearchResult:
    """The layout of ``space`` with the least step time whose every stage fits in memory.

    Raises
    ------
    InfeasibleError
        When no legal shape exists, or nothing fits; ``explanation`` says which constraint blocks.
    """
    t0 = time.perf_counter()
    shapes: list[Shape] = legal_shapes(case.model, case.training, space)
    if not shapes:
        raise InfeasibleError(
            f"search: no legal layout of {space.num_gpus} GPUs for B = {case.training.global_batch_size}, "
            f"s = {case.training.seq_len}",
            [
                "divisibility: no dp·tp·pp·cp of the allowed degrees equals the GPU count "
                "with B divisible by b·dp"
            ],
        )
    tables = build_tables(case, shapes, space.zero_stages, space.recomputes, headroom)
    t1 = time.perf_counter()
    zero_rank, rec_rank = tie_ranks(tables)
    result = solve(tables, zero_rank, rec_rank, time_limit_s, workers)
    n = len(shapes) * len(space.zero_stages) * len(space.recomputes)
    if result.choice is None:
        explanation = explain_infeasible(tables)
        raise InfeasibleError("search: no layout fits. " + explanation[0], explanation)
    est = check_against_evaluate(case, tables, *result.choice)
    return SearchResult(
        result.status, est.layout, est, result.solve_seconds, t1 - t0, len(shapes), n
    )
