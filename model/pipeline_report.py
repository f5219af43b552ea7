"""Which order a classic schedule's pipeline section is, and the bubble the estimate reports.

GPipe and 1F1B at pp > 1 run the one-chunk order (:mod:`model.pipeline_onef`), interleaved 1F1B
at pp > 1 Megatron-Core's interleaved order (:mod:`model.pipeline_uneven`), both on the stages or
model chunks as timed (:func:`model.terms.pipeline_span.classic_span`); the estimate reports the
bubble those orders leave (:func:`reported_bubble`), else the closed forms.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trainplan.model.pipeline import SPLIT_BACKWARD, Schedule, bubble_fraction, bubble_ratio
from trainplan.model.pipeline_onef import one_chunk

__all__ = ["interleaved_order", "reported_bubble"]


def interleaved_order(schedule: Any, pp: int) -> bool:
    """Whether a layout's pipeline section is Megatron-Core's interleaved order's step
    (:func:`model.pipeline_uneven.interleaved_steps`): interleaved 1F1B at pp > 1 (v ≥ 2 and m a multiple of pp there,
    :func:`model.schedule_support.check_schedule_framework`, :func:`model.pipeline.check_schedule`).

    >>> interleaved_order("interleaved", 4), interleaved_order("1f1b", 4)
    (True, False)
    """
    return str(schedule) == Schedule.INTERLEAVED.value and pp > 1


def reported_bubble(
    schedule: Any, m: int, pp: int, v: int, terms: Any
) -> tuple[Fraction, Fraction]:
    """(bubble over the pipeline section, bubble over its compute) as the estimate reports them:
    the closed forms of GPipe, 1F1B and interleaved 1F1B (:func:`model.pipeline.bubble_fraction`,
    :func:`model.pipeline.bubble_ratio`) at pp 1 or without time terms; at pp > 1 under a
    split-backward schedule, interleaving (:func:`interleaved_order`: the order's own step on the
    chunks as timed), or 1F1B and GPipe (:mod:`model.pipeline_onef`: the stages as timed), the
    bubble of the time ``terms`` (:class:`model.estimate.TimeTerms`: its
    ``bubble_s`` over the section, or over ``busy_s`` = m × the slowest stage's micro-batch), to
    1/10⁶."""

    def frac(x: float) -> Fraction:
        return Fraction(x).limit_denominator(10**6)

    if terms is not None and schedule in SPLIT_BACKWARD:
        bubble = max(terms.bubble_s, 0.0)
        whole = terms.compute_and_pipeline_s
        return frac(bubble / whole), frac(bubble / (whole - bubble))
    if (
        terms is not None
        and terms.busy_s
        and (one_chunk(schedule, pp) or interleaved_order(schedule, pp))
    ):
        ratio = frac(terms.bubble_s / terms.busy_s)
        return ratio / (1 + ratio), ratio
    return bubble_fraction(pp, m, v), bubble_ratio(pp, m, v)
