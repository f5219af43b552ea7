"""Lower bounds of the one-chunk order's step linear in the stage times (model.pipeline_paths):
every path of the order bounds the step from below for every split, the family the per-stage
search starts from lies between the closed form and nothing, and one split's own longest path
is its step."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.pipeline_onef import onef_steps
from trainplan.model.pipeline_paths import critical_path, onef_paths, path_seconds

STAGES = st.integers(1, 6).flatmap(
    lambda pp: st.tuples(
        st.just(pp),
        st.integers(1, 12),
        st.lists(st.integers(0, 40), min_size=pp, max_size=pp),
        st.lists(st.integers(0, 40), min_size=pp, max_size=pp),
    )
)


def _passes(plain: list[int], extra: list[int]) -> tuple[list[float], list[float]]:
    """Stages as the cost model times them (model.terms.pipeline_span.stage_passes): the forward a
    third of the time without recomputation, the backward two thirds plus any recomputation."""
    forward = [x / 3 for x in plain]
    return forward, [2 * x / 3 + y for x, y in zip(plain, extra, strict=True)]


def test_paths_by_hand():
    """pp 2, m 3, 1F1B (rank 0 warms up with 1 forward): stage 0 forward 4, backward 8; stage 1
    forward 1, backward 2.

    * through rank 0: its 3 forwards and 3 backwards, 3·12 = 36;
    * the round trip to rank 0: F0(0) 4, F1(0) 1, B1(0) 2, then rank 0 from B0(0): B0(0),
      F0(2), B0(1), B0(2) = 8 + 4 + 8 + 8: 35;
    * through rank 1: F0(0) 4, rank 1's 3·3 = 9, B0(2) 8: 21.

    The order itself: rank 0 runs F(0) 0–4, F(1) 4–8; rank 1 F(0) 4–5, B(0) 5–7, F(1) 8–9,
    B(1) 9–11; rank 0 B(0) 8–16, F(2) 16–20, B(1) 20–28; rank 1 F(2) 20–21, B(2) 21–23; rank 0
    B(2) 28–36. The step is 36: rank 0 never waits after its first forward, the path through
    rank 0 is the longest."""
    fw, bw = [4.0, 1.0], [8.0, 2.0]
    paths = onef_paths(2, 3)
    assert [path_seconds(p, fw, bw) for p in paths] == [36.0, 35.0, 21.0]
    assert onef_steps(2, 3, fw, bw) == 36.0
    assert critical_path(2, 3, fw, bw) == (36.0, ((3, 0), (3, 0)))


def test_a_slow_last_stage_is_filled_and_drained():
    """pp 3, m 4, the last stage twice as slow (f 2, b 4 against 1, 2): through the last rank,
    rank 0's and rank 1's first forward and last backward (3 + 3) and the last rank's 4·6 = 24:
    30, the step; the closed form (m + pp − 1)·6 = 36 is above."""
    fw, bw = [1.0, 1.0, 2.0], [2.0, 2.0, 4.0]
    assert onef_steps(3, 4, fw, bw) == 30.0
    assert max(path_seconds(p, fw, bw) for p in onef_paths(3, 4)) == 30.0
    step, path = critical_path(3, 4, fw, bw)
    assert step == 30.0 and path_seconds(path, fw, bw) == 30.0


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
@pytest.mark.parametrize(("pp", "m"), [(1, 1), (2, 1), (3, 2), (4, 4), (4, 9), (8, 3)])
def test_the_family_is_the_step_on_stages_alike(pp, m, schedule):
    """Stages alike (f 1, b 2): through the last rank is (m + pp − 1)·3, the order's step
    (Narayanan et al. 2021 §2.2), and no path of the family exceeds it."""
    fw, bw = [1.0] * pp, [2.0] * pp
    lengths = [path_seconds(p, fw, bw) for p in onef_paths(pp, m, schedule)]
    assert max(lengths) == onef_steps(pp, m, fw, bw, schedule) == (m + pp - 1) * 3.0


@settings(max_examples=300, deadline=None)
@given(STAGES, st.sampled_from(["1f1b", "gpipe"]))
def test_lower_bound_step_closed_form(stages, schedule):
    """Random unequal stages timed as the cost model times them: the family's largest path ≤ the
    order's step, and under 1F1B the step ≤ the closed form (m + pp − 1)·max T."""
    pp, m, plain, extra = stages
    fw, bw = _passes(plain, extra)
    step = onef_steps(pp, m, fw, bw, schedule)
    lower = max(path_seconds(p, fw, bw) for p in onef_paths(pp, m, schedule))
    assert lower <= step * (1 + 1e-12) + 1e-12
    if schedule == "1f1b":
        closed = (m + pp - 1) * max(f + b for f, b in zip(fw, bw, strict=True))
        assert step <= closed * (1 + 1e-12) + 1e-12


@settings(max_examples=300, deadline=None)
@given(STAGES, STAGES, st.sampled_from(["1f1b", "gpipe"]))
def test_a_splits_own_path_is_its_step_and_bounds_every_other(here, there, schedule):
    """One split's longest path (critical_path) is its step (onef_steps, which jumps over the
    settled steady phase: to a float's rounding) and, taken over any other stages' times of the
    same pp and m, never exceeds their step: the cut the per-stage search adds is valid
    everywhere."""
    pp, m, plain, extra = here
    fw, bw = _passes(plain, extra)
    step, path = critical_path(pp, m, fw, bw, schedule)
    assert step == pytest.approx(onef_steps(pp, m, fw, bw, schedule), rel=1e-12, abs=1e-12)
    assert path_seconds(path, fw, bw) == pytest.approx(step, rel=1e-12, abs=1e-12)
    _, _, plain2, extra2 = there
    other = _passes((plain2 * pp)[:pp], (extra2 * pp)[:pp])
    assert path_seconds(path, *other) <= onef_steps(pp, m, *other, schedule) * (1 + 1e-12) + 1e-12


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="pp 0, m 3"):
        onef_paths(0, 3)
    with pytest.raises(ValueError, match="pp 2, m 3, 1/2 times"):
        critical_path(2, 3, [1.0], [1.0, 2.0])
