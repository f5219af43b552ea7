"""Which candidates the search may choose and how ties break — decided once, from the tables,
and shared by the CP-SAT search and the exhaustive oracle."""

from __future__ import annotations

import numpy as np

from trainplan.model.flops import utilisation
from trainplan.optimizer.problem import Problem
from trainplan.optimizer.space import RECOMPUTE_PREFERENCE, ZERO_PREFERENCE
from trainplan.optimizer.tables import CostTables
from trainplan.topology.placement import fits_in_domain

__all__ = ["tie_ranks", "tie_keys", "mfu_table", "allowed", "tp_cp_in_nvlink"]


def tie_ranks(tables: CostTables) -> tuple[list[int], list[int]]:
    """Rank of each ZeRO stage and recompute mode (0 = preferred on ties): ZeRO-1, 2, 0, 3 and
    less recomputation first."""
    zero = [ZERO_PREFERENCE.index(z) for z in tables.zero_stages]
    rec = [RECOMPUTE_PREFERENCE.index(r) for r in tables.recomputes]
    return [sorted(zero).index(v) for v in zero], [sorted(rec).index(v) for v in rec]


def tie_keys(tables: CostTables, candidates: np.ndarray) -> np.ndarray:
    """[C] the tie-break key of each candidate, rows (s, z, r) of ``candidates`` [C, 3]: among
    candidates of equal objective the least key is the answer. Lexicographic, as one int64:
    the busiest stage's peak bytes (:attr:`CostTables.peak_ceil`: less memory, more headroom,
    first — recompute sqrt and full run the same FLOPs, so a tie between them goes to the one
    that holds less), then shape order, recompute rank and ZeRO rank (:func:`tie_ranks`). The
    peak enters as its dense rank among ``candidates`` (at most C values), so the key stays
    below C · S · Z · R ≤ (2·10⁶)² and the order is the same for any ``candidates`` set."""
    zero_rank, rec_rank = tie_ranks(tables)
    S, Z, R = tables.fits.shape
    s, z, r = (candidates[:, k].astype(np.int64) for k in range(3))
    _, memory = np.unique(tables.peak_ceil[s, z, r], return_inverse=True)
    shape = s * Z * R + np.asarray(rec_rank, dtype=np.int64)[r] * Z
    return (
        memory.reshape(-1).astype(np.int64) * (S * Z * R)
        + shape
        + np.asarray(zero_rank, dtype=np.int64)[z]
    )


def mfu_table(tables: CostTables) -> np.ndarray:
    """[S, Z, R] MFU of every candidate from the tables (step time in whole ns); inf where an
    illegal candidate was not timed (step 0, :func:`optimizer.tables.build_tables`)."""
    peak = np.array([tables.jobs[j].case.device.peak_flops_per_s for j in tables.job_of])
    with np.errstate(divide="ignore", invalid="ignore"):
        return utilisation(
            tables.model_flops[:, None, :],
            tables.step_ns() * 1e-9,
            tables.num_gpus()[:, None, None],
            peak[:, None, None],
        )


def allowed(problem: Problem, tables: CostTables) -> np.ndarray:
    """[S, Z, R] candidates that fit and meet every user constraint."""
    ok = tables.fits.copy()
    if problem.constraints.min_mfu is not None:
        ok &= mfu_table(tables) >= problem.constraints.min_mfu
    if problem.constraints.tp_in_nvlink:
        near = np.array([tp_cp_in_nvlink(tables, s) for s in range(len(tables.shapes))], dtype=bool)
        ok &= near[:, None, None]
    return ok


def tp_cp_in_nvlink(tables: CostTables, s: int) -> bool:
    """Whether shape s's tp and cp groups each sit inside one NVLink domain for its rank order
    (topology.placement's span rule, the same one that assigns the links)."""
    sh = tables.shapes[s]
    domain = tables.jobs[tables.job_of[s]].case.device.placement_domain or 1
    degrees = {"dp": sh.dp, "tp": sh.tp, "pp": sh.pp, "cp": sh.cp, "ep": sh.ep}
    return all(fits_in_domain(degrees, axis, domain, sh.rank_order) for axis in ("tp", "cp"))
