"""Figures that do not read how the layers are split over the stages
(:func:`model.terms.split_free.split_free`) are remembered by every layout field but
``stage_layers`` and ``recompute_layers`` (:meth:`model.terms.fields.LayoutFields.
split_free_key`), so that the per-stage tables' rows, which differ only in their splits
(:func:`optimizer.stage_rules.realization`), share one evaluation. Held here by evaluating
afresh (no memo) on rows of different splits: dense, interleaved, MoE with expert parallelism,
context parallelism, local and global attention spans, a split-backward schedule, DeepSpeed's
pipeline engine and PyTorch's pipeline schedules under ``fsdp2``: a layer's roofline parts
(:func:`model.terms.roofline._kinds_of`) and every figure the memory terms remember (the
communicators, the userbuffers, the ends' activations, the boundary tensors, the loss, the
output layer's phase; and, across recomputed counts, every term but the activations), with
the arguments each is called with."""

from __future__ import annotations

import pytest

from trainplan.model.estimate import evaluation_context
from trainplan.model.layout import Layout, Recompute
from trainplan.model.terms import activations, peak
from trainplan.model.terms.fields import LayoutFields
from trainplan.model.terms.peak import stage_memory_term
from trainplan.model.terms.roofline import _kinds, _kinds_of
from trainplan.model.terms.split_free import MEMO
from trainplan.optimizer.case import Case, links_for
from trainplan.optimizer.stage_rules import realization
from trainplan.optimizer.stage_view import stage_context

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
    "deepspeed": ("llama3-8b", Layout.of(framework="deepspeed", dp=2, tp=2, pp=4)),
    "fsdp2": ("llama3-8b", Layout.of(framework="fsdp2", dp=2, tp=2, pp=4)),
    "deepspeed zero-3": (
        "llama3-8b",
        Layout.of(framework="deepspeed", dp=8, zero_stage=3, recompute="full"),
    ),  # fmt: skip
}
MODULES = (activations, peak)
"""The modules whose terms remember figures through ``split_free``."""


class _Rows:
    """One-stage layouts of a case's shape that differ only in their splits
    (:func:`optimizer.stage_rules.realization`, as the per-stage tables evaluate them; also on
    shapes the per-stage search refuses, whose layouts ``evaluate()`` reads the same terms of)."""

    def __init__(self, name):
        model, layout = CASES[name]
        case = Case.of(model, "H100-SXM", layout, num_gpus=layout.num_gpus)
        t = case.training
        self.c = evaluation_context(case.model, t, case.device, case.options, case.vocab_multiple)
        self.links = links_for(layout, case.links, case.fabric)
        self.layout, self.batch = layout, t.global_batch_size
        v, L = layout.virtual_stages, case.model.arch.num_layers
        self.num_layers = L
        counts = {v, L // layout.pp, L - v} if layout.pp > 1 else {L}
        self.rows = [(n, k) for n in sorted(counts) for k in (0, 1, 2)]

    def fields(self, stage, n, k):
        lay = realization(self.layout, self.num_layers, stage, n, k)
        return LayoutFields(lay, self.batch, stage, self.links)


@pytest.mark.parametrize("name", CASES)
def test_a_layers_parts_do_not_read_the_splits(name):
    stages = _Rows(name)
    layout, rows = stages.layout, stages.rows
    for stage in (0, layout.pp - 1):
        fields = [stages.fields(stage, n, k) for n, k in rows]
        assert len({f.layout for f in fields}) == len(rows)  # the rows' layouts all differ
        assert len({f.split_free_key() for f in fields}) == 1  # and share one key
        for mode in Recompute:
            first = _kinds_of(stages.c, fields[0], mode)
            for f in fields[1:]:
                assert _kinds_of(stages.c, f, mode) == first, (name, stage, mode)
            assert _kinds(stages.c, fields[-1], mode) == first  # the memo answers the same


@pytest.mark.parametrize("name", CASES)
def test_the_memory_terms_remembered_figures_do_not_read_the_splits(name, monkeypatch):
    """Every call the memory terms make through ``split_free`` and ``recompute_free``,
    evaluated afresh on each row: one (arguments, figure) per function and stage (and, for
    ``recompute_free``, per stage_layers: rows that differ in their recomputed counts alone),
    whatever the row's split; and the stage's memory with the memos is the memory evaluated
    afresh. Under DeepSpeed ZeRO-3, whose state reads the counts, nothing of the state is
    remembered."""
    stages = _Rows(name)
    layout, rows = stages.layout, stages.rows
    seen: dict[tuple, set] = {}

    def fresh(fn, c, f, *args):
        value = fn(c, f, *args)
        seen.setdefault((fn.__name__, f.stage), set()).add((args, repr(value)))
        return value

    def fresh_counts(fn, c, f, *args):
        value = fn(c, f, *args)
        seen.setdefault((fn.__name__, f.stage, f.stage_layers), set()).add((args, repr(value)))
        return value

    for stage in {0, layout.pp // 2, layout.pp - 1}:
        for n, k in rows:
            f = stages.fields(stage, n, k)
            remembered = stage_memory_term(stages.c, f, n)
            with monkeypatch.context() as m:
                for module in MODULES:
                    m.setattr(module, "split_free", fresh)
                m.setattr(peak, "recompute_free", fresh_counts)
                assert stage_memory_term(stages.c, f, n) == remembered, (name, stage, n, k)
    names = {key[0] for key in seen}
    expected = {
        "comm_memory_term", "userbuffers_term", "_end_bytes",
        "boundary_tensors", "last_stage_loss", "output_layer_phase", "_held_terms",
    }  # fmt: skip
    walks = layout.framework == "deepspeed" and layout.zero_stage == 3
    assert names == (expected - {"_held_terms"} if walks else expected), name
    for key, found in seen.items():
        assert len(found) == 1, (name, key, found)


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
    assert any(key[1] is a.c for key in MEMO) and any(key[1] is b.c for key in MEMO)
