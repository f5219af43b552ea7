"""The per-stage tables' view of one layout shape (:class:`StageView`, :func:`stage_context`):
the evaluator's per-stage figures of a stage holding n layers with k recomputed, each evaluated
on the one-stage layout :func:`optimizer.stage_rules.realization` makes and remembered, read by
the shape's bounds (:mod:`optimizer.stage_bounds`) and tables (:mod:`optimizer.stage_tables`).

* memory: :func:`model.terms.peak.stage_memory_term`;
* the micro-batch, paced over the step: :func:`model.terms.roofline.stage_parts_term`,
  :func:`model.terms.step.pipeline_seconds`;
* the chunks' forwards and backwards (interleaved): :func:`model.terms.pipeline_span.
  chunk_seconds`;
* the layers and MoE layers held: :func:`model.terms.activation_fields.stage_layer_counts`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainplan.model.estimate import evaluation_context
from trainplan.model.layout import Layout, Recompute
from trainplan.model.terms.activation_fields import LAYER_FIELDS, stage_layer_counts
from trainplan.model.terms.fields import Context, LayoutFields
from trainplan.model.terms.peak import StageMemory, stage_memory_term
from trainplan.model.terms.pipeline_span import chunk_seconds
from trainplan.model.terms.roofline import stage_parts_term
from trainplan.model.terms.step import pipeline_seconds
from trainplan.optimizer.case import Case, links_for
from trainplan.optimizer.stage_option import PASS_UNITS
from trainplan.optimizer.stage_rules import (
    check_per_stage,
    layer_counts,
    layer_pattern,
    realization,
    start_residue,
    takes_counts,
)

__all__ = ["Paced", "StageView", "stage_context"]

Paced = tuple[int, float, int]  # :meth:`StageView.paced`'s: closed form ns, t seconds, pruning ns


@dataclass(frozen=True, slots=True, eq=False)
class StageView:
    """What both per-stage tables read off a shape, after :func:`check_per_stage`: the terms'
    context, the layout's links, L, pp, v and the layout."""

    c: Context
    links: Any
    num_layers: int
    layout: Layout
    case: Case
    prefix: int = 0
    """The leading layers that differ from the rest (:func:`layer_pattern`'s d): the first
    stage's."""
    recomputes: bool = True
    """Whether a stage may recompute layers (:func:`optimizer.stage_rules.takes_counts`)."""
    period: int = 1
    """The period of the spans after the leading layers (:func:`layer_pattern`'s P)."""
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)
    """:meth:`memory` and :meth:`paced` already evaluated, by their arguments: the shape's
    bounds (:mod:`optimizer.stage_bounds`, before the search ranks the shapes and again before
    their tables) and its tables ask some of the same (:func:`stage_context` keeps one view
    per shape)."""

    def starts(self, stage: int) -> tuple[int, ...]:
        """The layers before ``stage`` its rows are evaluated at, one per place within the
        period a stage between the first and the last can start (d + v·r for r < P: the least
        start of each residue, so the most layers after it; v·r under interleaving, whose
        chunks start at c·L/v + r, :func:`start_residue`); ``(d,)`` for the first stage (it
        starts at 0 and holds the d), the last (it starts at L − n) and at P = 1."""
        if self.period == 1 or stage in (0, self.layout.pp - 1):
            return (self.prefix,)
        v = self.layout.virtual_stages  # whole chunks of the stages before: v·r layers
        return tuple(self.prefix + v * r for r in range(self.period))

    def counts(self, stage: int, start: int | None = None) -> range:
        """:func:`layer_counts` of ``stage`` (multiples of v) after ``start`` layers (default
        d; a stage between the first and the last holds at most L − start)."""
        lay = self.layout
        before = self.prefix if start is None else start
        return layer_counts(self.num_layers, lay.pp, stage, before, lay.virtual_stages)

    def residue(self, stage: int, start: int, n: int) -> int:
        """:func:`start_residue` of ``stage`` holding ``n`` layers after ``start``."""
        lay, L = self.layout, self.num_layers
        return start_residue(
            stage, lay.pp, start, n, L, self.prefix, self.period, lay.virtual_stages
        )

    def fields(self, stage: int, n: int, k: int, start: int | None = None) -> LayoutFields:
        """The evaluator's fields of ``stage`` holding ``n`` layers with ``k`` recomputed (per
        model chunk) after ``start`` layers (default d), on :func:`realization`'s layout."""
        before = self.prefix if start is None else start
        lay = realization(self.layout, self.num_layers, stage, n, k, before)
        return LayoutFields(lay, self.case.training.global_batch_size, stage, self.links)

    def memory(self, stage: int, n: int, k: int, start: int | None = None) -> StageMemory:
        """The peak of ``stage`` holding ``n`` layers with ``k`` recomputed (per model chunk)
        after ``start`` layers (default d): :func:`model.terms.peak.stage_memory_term` on
        :func:`realization`'s layout; each evaluated once (:attr:`memo`)."""
        key = ("memory", stage, n, k, self.prefix if start is None else start)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = stage_memory_term(self.c, self.fields(stage, n, k, start), n)
        return found

    def held(self, stage: int, n: int, start: int | None = None) -> tuple[int, int]:
        """(layers, MoE layers) the evaluator counts on ``stage`` holding ``n`` layers after
        ``start`` (:func:`model.terms.activation_fields.stage_layer_counts`, the function
        :func:`model.terms.traffic.most_layers` takes its maxima of; MTP blocks on the last)."""
        f = self.fields(stage, n, 0, start)
        layers, moe = f.per_stage(stage_layer_counts, (self.c.arch,), *LAYER_FIELDS)
        return int(layers), int(moe)

    def params_scale(self) -> int:
        """lcm(tp, etp·ep): the least scale that makes a stage's dense (÷ tp) and routed-expert
        (÷ etp·ep) parameters per GPU whole numbers (:meth:`model.terms.split_key.SplitKey.
        dense_per_gpu`, :meth:`~model.terms.split_key.SplitKey.experts_per_gpu`), compared on
        one scale; tp for a dense model."""
        f = LayoutFields(self.layout, self.case.training.global_batch_size, 0, self.links)
        return math.lcm(int(f.tp), int(f.expert_tp * f.ep))

    def chunks(self, stage: int, n: int, k: int, start: int | None = None) -> Any:
        """(forwards, backwards) of ``stage``'s v model chunks holding ``n`` layers with ``k``
        recomputed (per chunk) after ``start`` layers (default d), :data:`PASS_UNITS` per ns
        rounded down (:attr:`StageOption.chunk_forward`): :func:`model.terms.pipeline_span.
        chunk_seconds` on :func:`realization`'s layout."""
        v = self.layout.virtual_stages
        found = chunk_seconds(self.c, self.fields(stage, n, k, start))[stage * v : (stage + 1) * v]
        return tuple(tuple(math.floor(x[j] * 1e9 * PASS_UNITS) for x in found) for j in (0, 1))

    def paced(
        self, stage: int, n: int, k: int, mode: Recompute | None = None, start: int | None = None
    ) -> Paced:
        """(the step's pipeline term if this stage were the slowest, whole ns; its micro-batch,
        seconds; what rows and shapes are pruned by, ns: ``m·t`` wherever a pipeline runs (pp > 1:
        the slowest rank's own busy time, below every order's step, 1F1B's and GPipe's,
        :mod:`model.pipeline_onef`, and interleaving's, :mod:`model.pipeline_uneven`, which the
        closed form neither equals nor bounds), else the same):
        :func:`model.terms.roofline.stage_parts_term` of ``stage`` holding ``n`` layers with
        ``k`` recomputed (``mode`` overrides the recompute mode) after ``start`` layers (default
        d), paced by :func:`model.terms.step.pipeline_seconds`; each evaluated once
        (:attr:`memo`)."""
        key = ("paced", stage, n, k, mode, self.prefix if start is None else start)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = self._paced(stage, n, k, mode, start)
        return found  # type: ignore[no-any-return]

    def _paced(
        self, stage: int, n: int, k: int, mode: Recompute | None, start: int | None
    ) -> Paced:
        """:meth:`paced`, evaluated."""
        f = self.fields(stage, n, k, start)
        lay = f.layout
        t = stage_parts_term(self.c, f, mode)[0]
        paced = round(pipeline_seconds(f.m, t, lay.pp, lay.virtual_stages) * 1e9)
        return paced, t, round(f.m * t * 1e9) if lay.pp > 1 else paced


_VIEWS: dict[tuple[int, Layout], StageView] = {}
"""(the case's identity, the layout) → its :func:`stage_context`; emptied past
:data:`_VIEWS_SIZE` entries."""

_VIEWS_SIZE = 128
"""Views :data:`_VIEWS` keeps: a per-stage search takes tens of shapes."""


def stage_context(case: Case, layout: Layout) -> StageView:
    """The per-stage tables' view of ``layout``'s shape (:func:`optimizer.stage_rules.
    layer_pattern`'s leading layers and period with it), one per case (by identity) and layout,
    so that its figures are evaluated once (:attr:`StageView.memo`) for the shape's bounds and
    tables.

    Raises
    ------
    InputError
        :func:`check_per_stage`'s rules.
    """
    found = _VIEWS.get((id(case), layout))
    if found is not None and found.case is case:
        return found
    view = _stage_view(case, layout)
    if len(_VIEWS) >= _VIEWS_SIZE:
        _VIEWS.clear()
    _VIEWS[(id(case), layout)] = view
    return view


def _stage_view(case: Case, layout: Layout) -> StageView:
    """:func:`stage_context`, made."""
    check_per_stage(case, layout)
    arch = case.model.arch
    assert arch is not None
    c = evaluation_context(
        case.model, case.training, case.device, case.options, case.vocab_multiple
    )
    links = links_for(layout, case.links, case.fabric)
    pattern = layer_pattern(arch)
    assert pattern is not None  # check_per_stage refuses None
    prefix, period = pattern
    recomputes = takes_counts(case, layout)
    return StageView(c, links, arch.num_layers, layout, case, prefix, recomputes, period)
