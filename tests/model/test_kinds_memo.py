"""A layer's figures do not read how the layers are split over the stages: the roofline's
per-layer parts (:func:`model.terms.roofline._kinds`) are remembered by every layout field but
``stage_layers`` and ``recompute_layers`` (:meth:`model.terms.fields.LayoutFields.
split_free_key`), so that the per-stage tables' rows, which differ only in their splits
(:func:`optimizer.stage_rules.realization`), share one evaluation. Held here by evaluating
afresh (:func:`model.terms.roofline._kinds_of`, no memo) on rows of different splits: dense,
interleaved, MoE with expert parallelism, context parallelism, local and global attention spans,
a split-backward schedule."""

from __future__ import annotations

import pytest

from trainplan.model.layout import Layout, Recompute
from trainplan.model.terms.roofline import _KINDS_MEMO, _kinds, _kinds_of
from trainplan.optimizer.case import Case
from trainplan.optimizer.stage_tables import stage_context

CASES = {
    "dense 1f1b": ("llama3-8b", Layout(dp=2, tp=2, pp=4)),
    "interleaved": (
        "llama3-8b",
        Layout(dp=2, tp=2, pp=4, schedule="interleaved", virtual_stages=2),
    ),  # fmt: skip
    "moe ep": ("mixtral-8x7b", Layout(dp=4, tp=2, pp=4, ep=4)),
    "cp": ("llama3-8b", Layout(dp=2, tp=2, pp=2, cp=2)),
    "spans": ("gemma3-27b", Layout(dp=2, tp=4, pp=2)),
    "zb-h1": ("llama3-8b", Layout(dp=2, tp=2, pp=4, schedule="zb-h1")),
}


@pytest.mark.parametrize("name", CASES)
def test_a_layers_parts_do_not_read_the_splits(name):
    model, layout = CASES[name]
    case = Case.of(model, "H100-SXM", layout, num_gpus=layout.num_gpus)
    stages = stage_context(case, layout)
    v, L = layout.virtual_stages, stages.num_layers
    for stage in (0, layout.pp - 1):
        rows = [(n, k) for n in sorted({v, L // layout.pp, L - v}) for k in (0, 1)]
        fields = [stages.fields(stage, n, k) for n, k in rows]
        assert len({f.layout for f in fields}) == len(rows)  # the rows' layouts all differ
        assert len({f.split_free_key() for f in fields}) == 1  # and share one key
        for mode in Recompute:
            first = _kinds_of(stages.c, fields[0], mode)
            for f in fields[1:]:
                assert _kinds_of(stages.c, f, mode) == first, (name, stage, mode)
            assert _kinds(stages.c, fields[-1], mode) == first  # the memo answers the same


def test_the_memo_keys_by_context_and_links():
    """Two contexts (two cases) never share an entry, nor two link sets of one context: the
    key holds the context and the links' identity, and an entry whose links are not the ones
    asked for is evaluated afresh."""
    model, layout = CASES["dense 1f1b"]
    a = stage_context(Case.of(model, "H100-SXM", layout, num_gpus=16), layout)
    b = stage_context(Case.of(model, "A100-80GB", layout, num_gpus=16), layout)
    fa, fb = a.fields(0, 8, 0), b.fields(0, 8, 0)
    assert _kinds(a.c, fa, Recompute.NONE) != _kinds(b.c, fb, Recompute.NONE)
    assert _kinds(b.c, fb, Recompute.NONE) == _kinds_of(b.c, fb, Recompute.NONE)
    assert any(key[0] is a.c for key in _KINDS_MEMO) and any(key[0] is b.c for key in _KINDS_MEMO)
