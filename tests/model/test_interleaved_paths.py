"""Lower bounds of the interleaved order's step linear in the model chunks' times
(model.interleaved_paths): one layout's longest path is its step (the figure
model.pipeline_uneven.layout_bubbles gives classic_span), its counts bound every other layout's
step of the same pp, v and m from below, and the family the per-stage search starts from lies
under the step, equal to it on chunks alike."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.interleaved_paths import critical_path, interleaved_paths
from trainplan.model.pipeline_paths import path_seconds
from trainplan.model.pipeline_uneven import interleaved_steps, layout_bubbles

REL = 1e-12


def _chunks(pp: int, v: int):
    """pp·v chunks timed as the cost model times them (model.terms.pipeline_span.stage_passes):
    the forward a third of the time without recomputation, the backward two thirds plus any
    recomputation."""
    times = st.lists(st.integers(0, 40), min_size=pp * v, max_size=pp * v)
    return st.tuples(times, times).map(
        lambda t: (
            [x / 3 for x in t[0]],
            [2 * x / 3 + y for x, y in zip(t[0], t[1], strict=True)],
        )
    )


LAYOUTS = st.tuples(st.integers(1, 5), st.integers(2, 4), st.integers(1, 6)).flatmap(
    lambda t: st.tuples(st.just(t[0]), st.just(t[1]), st.just(t[0] * t[2]), _chunks(t[0], t[1]))
)


def _order_step(pp: int, v: int, m: int, fw: list[float], bw: list[float]) -> float:
    """The step the evaluator charges (model.terms.pipeline_span.uneven_bubble, which
    classic_span adds to m × the slowest rank's micro-batch): the bubble read off the steady
    phase of the order's runs, plus m × busy."""
    busy = max(sum(fw[i * v : (i + 1) * v]) + sum(bw[i * v : (i + 1) * v]) for i in range(pp))
    return layout_bubbles(pp, m, fw, bw, busy) + m * busy


def test_chunks_alike_by_hand():
    """pp 2, v 2, m 2, every chunk forward 1, backward 2. Rank 0 warms up with
    (2 − 0 − 1)·2 + (2 − 1)·2 = 4 forwards (all of them), rank 1 with 2; forward k runs chunk
    (k // 2) mod 2 on micro-batch k mod 2, backward k chunk 1 − (k // 2) mod 2.

    Rank 0: F(c0, 0) 0–1, F(c0, 1) 1–2, F(c1, 0) 2–3 (after rank 1's F(c0, 0) 1–2),
    F(c1, 1) 3–4 (after rank 1's F(c0, 1) 2–3). Rank 1: F(c0, 0) 1–2, F(c0, 1) 2–3,
    F(c1, 0) 3–4, B(c1, 0) 4–6 (its last chunk after its own forward),
    F(c1, 1) 6–7, B(c1, 1) 7–9, B(c0, 0) 9–11, B(c0, 1) 11–13 (after rank 0's B(c1, 1)
    9–11). Rank 0: B(c1, 0) 6–8, B(c1, 1) 9–11, B(c0, 0) 11–13, B(c0, 1) 13–15.

    The step is 15 = m·t + (pp − 1)·t/v with t = 2·(1 + 2) = 6 (Narayanan et al. 2021 §2.2.2),
    and the family's path through the last rank, rank 0's chunk-0 forward and backward (3) and
    rank 1's 2·6 = 12, is 15 too."""
    fw, bw = [1.0] * 4, [2.0] * 4
    step, path = critical_path(2, 2, 2, fw, bw)
    assert step == 15.0 == interleaved_steps(2, 2, fw, bw) == _order_step(2, 2, 2, fw, bw)
    assert path_seconds(path, fw, bw) == 15.0
    family = interleaved_paths(2, 2, 2)
    assert family == (((2, 2, 0, 0), (2, 2, 0, 0)), ((1, 0, 2, 2), (1, 0, 2, 2)))
    assert [path_seconds(p, fw, bw) for p in family] == [12.0, 15.0]


@pytest.mark.parametrize(("pp", "v", "groups"), [(1, 2, 3), (2, 3, 1), (4, 2, 2), (3, 4, 5)])
def test_the_family_is_the_step_on_chunks_alike(pp, v, groups):
    """Chunks alike (f 1, b 2): the path through the last rank is m·v·3 + (pp − 1)·3, the
    closed form and the order's step, and no path of the family exceeds it."""
    m, width = pp * groups, pp * v
    fw, bw = [1.0] * width, [2.0] * width
    closed = m * v * 3.0 + (pp - 1) * 3.0
    assert max(path_seconds(p, fw, bw) for p in interleaved_paths(pp, v, m)) == closed
    assert critical_path(pp, v, m, fw, bw)[0] == closed == _order_step(pp, v, m, fw, bw)


@settings(max_examples=300, deadline=None)
@given(LAYOUTS)
def test_a_layouts_own_path_is_its_step(layout):
    """Random chunks: the longest path's length is the order's step as the evaluator charges it
    (the bubble read off the order's runs, model.pipeline_uneven.layout_bubbles, plus m × the
    slowest rank's micro-batch), to a float's rounding, and the family lies under it."""
    pp, v, m, (fw, bw) = layout
    step, path = critical_path(pp, v, m, fw, bw)
    assert step == pytest.approx(_order_step(pp, v, m, fw, bw), rel=REL, abs=REL)
    assert path_seconds(path, fw, bw) == pytest.approx(step, rel=REL, abs=REL)
    lower = max(path_seconds(p, fw, bw) for p in interleaved_paths(pp, v, m))
    assert lower <= step * (1 + REL) + REL


@settings(max_examples=300, deadline=None)
@given(LAYOUTS, st.data())
def test_a_layouts_path_bounds_every_other_layouts_step(layout, data):
    """One layout's longest path, taken over any other chunk times of the same pp, v and m,
    never exceeds their step: the cut the per-stage search adds is valid for every split."""
    pp, v, m, (fw, bw) = layout
    _, path = critical_path(pp, v, m, fw, bw)
    other = data.draw(_chunks(pp, v))
    assert path_seconds(path, *other) <= _order_step(pp, v, m, *other) * (1 + REL) + REL


def test_bad_counts_are_refused():
    with pytest.raises(ValueError, match="pp 2, v 2, m 3: each at least 1, m a multiple of pp"):
        interleaved_paths(2, 2, 3)
    with pytest.raises(ValueError, match="pp 2, v 2: 3 chunk times, not pp·v"):
        critical_path(2, 2, 2, [1.0] * 3, [1.0] * 4)
