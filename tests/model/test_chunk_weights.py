"""model.terms.runtime_window.chunk_weights: each chunk's parameters scaled to whole numbers by one
positive scale per rank, so that window_params compares held sets on integers. Held here: any two
sets of a rank's chunks compare (<, =, >) by their weights as by their Fractions, and
window_params picks the sets and sums the Fractions the per-set Fraction comparison picked."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from trainplan.model.fsdp2_pipeline import held_chunks
from trainplan.model.terms.runtime_window import chunk_params, chunk_weights, window_params
from trainplan.model.terms.split_key import SplitKey
from trainplan.scenarios.catalogue import get_model

MODELS = ("llama3-8b", "deepseek-v3", "qwen3-30b-a3b", "gpt-oss-120b")


def _key(name: str, tp: int, pp: int, v: int, ep: int) -> SplitKey:
    return SplitKey.of(get_model(name).model, None, tp, pp, v, ep, "torchtitan", 1, "fsdp2",
                       None, "interleaved")  # fmt: skip


def _by_fractions(key: SplitKey, m: int, reshard: bool) -> tuple[tuple[Fraction, Fraction], ...]:
    """window_params as it compared sets before chunk_weights: a Fraction sum per held set."""
    out = []
    for stage, rank in enumerate(chunk_params(key)):
        sets = held_chunks(key.pp, key.v, m, stage, reshard)
        best = max(sets, key=lambda s: (sum(rank[i][0] + rank[i][1] for i in s), sorted(s)))
        dense = sum((rank[i][0] for i in best), Fraction(0))
        out.append((dense, sum((rank[i][1] for i in best), Fraction(0))))
    return tuple(out)


keys = st.builds(
    _key,
    st.sampled_from(MODELS),
    st.sampled_from((1, 2, 8)),
    st.sampled_from((2, 4)),
    st.sampled_from((4, 5, 8)),
    st.sampled_from((1, 8)),
)


@settings(max_examples=40, deadline=None)
@given(keys, st.data())
def test_sets_compare_by_weights_as_by_fractions(key, data):
    stage = data.draw(st.integers(0, key.pp - 1))
    rank, weight = chunk_params(key)[stage], chunk_weights(key)[stage]
    assert all(isinstance(w, int) and w >= 0 for w in weight)
    subsets = st.sets(st.integers(0, key.v - 1), max_size=key.v)
    a, b = data.draw(subsets), data.draw(subsets)
    fa = sum((rank[i][0] + rank[i][1] for i in a), Fraction(0))
    fb = sum((rank[i][0] + rank[i][1] for i in b), Fraction(0))
    wa, wb = sum(weight[i] for i in a), sum(weight[i] for i in b)
    assert (fa > fb, fa == fb) == (wa > wb, wa == wb)


@settings(max_examples=25, deadline=None)
@given(keys, st.sampled_from((4, 8, 12, 16)), st.booleans())
def test_window_params_picks_the_fractions_set(key, m, reshard):
    assert window_params(key, m, reshard) == _by_fractions(key, m, reshard)
