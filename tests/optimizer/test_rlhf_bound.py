"""The RLHF tables' pruning bound (:func:`optimizer.rlhf.tables.build_tables`'s ``incumbent``),
on a hand-built case small enough to cost every option: an option whose floor over its phases
(:func:`model.rlhf.network.seconds_floor`, from the same role, tp, pp and offload on the largest
pool) exceeds the bound is not costed, one whose costed seconds exceed it is not kept, and since
every placement's step is at least each of its roles' own seconds, a bound at the best complete
plan's step loses no optimum. Figures: counts of this build, the answer the full tables' CP-SAT
solve gives."""

from __future__ import annotations

from tests.optimizer.test_rlhf_search import _small
from trainplan.optimizer.rlhf.cpsat import PlacementModel
from trainplan.optimizer.rlhf.tables import build_tables, dominant


def test_a_bound_at_the_best_plan_prunes_options_and_keeps_the_answer():
    """TINY GRPO on a 4-GPU node of 16 GiB parts: 62 options costed and kept without a bound,
    the best step 0.469905591 s: every role on the one pool, the engine beside the Megatron actor
    at tp 1 × pp 1, whose export gathers nothing (model.rlhf.sync_time gather_seconds, k = 1).
    It was 0.470737539 s while the engine's rollout held the 2N broadcast wherever it ran: 2 ×
    187,188,224 B / 450 GB/s (NVLink, one node) = 831,948 ns (rounded) less, by the weight sync
    by placement; NCCL's broadcast latency does not reach it (no broadcast on this plan). With
    that step as the bound, 6 options are not costed (their
    floors exceed it), 13 costed ones are dropped (their own seconds exceed it: 62 - 6 - 43),
    and the answer over the 43 kept is the same step. Twice the step (the search's own bound,
    :data:`optimizer.rlhf.search.ALTERNATIVES_WITHIN`) prunes none here and keeps 58."""
    problem = _small(16)
    full = build_tables(problem)
    best = PlacementModel(dominant(full)).solve()
    assert best is not None and (full.tried, full.num_options) == (62, 62)
    assert 470_737_539 - round(2 * 187_188_224 / 450e9 * 1e9) == 469_905_591
    assert best.slots == (0, 0, 0)
    assert best.objective_ns == 469_905_591
    bounded = build_tables(problem, incumbent=lambda first: best.objective_ns)
    assert (bounded.tried, bounded.skipped, bounded.num_options) == (56, 6, 43)
    assert bounded.complete and bounded.bound_ns == best.objective_ns
    again = PlacementModel(dominant(bounded)).solve()
    assert again is not None and again.objective_ns == best.objective_ns
    twice = build_tables(problem, incumbent=lambda first: 2 * best.objective_ns)
    assert (twice.tried, twice.skipped, twice.num_options) == (62, 0, 58)


def test_the_deadline_stops_between_two_options_of_one_pool():
    """A clock that passes the deadline after five readings stops the building inside the
    largest pool's first role (not between pools): at most a handful of options costed, the
    tables marked incomplete."""
    problem = _small(16)
    reads = [0]

    def clock() -> float:
        reads[0] += 1
        return float(reads[0])

    cut = build_tables(problem, clock, deadline=5.0)
    assert not cut.complete and 0 < cut.tried <= 4
