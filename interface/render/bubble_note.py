"""The line under evaluate's pipeline line that says where its bubble comes from: the schedule's
order run on each stage's own time (:mod:`model.pipeline_onef`), beside the closed form that
``trainplan pipeline`` prints for stages of equal time (:func:`model.pipeline.bubble_fraction`)."""

from __future__ import annotations

from typing import Any

from trainplan.model.pipeline import bubble_fraction

__all__ = ["equal_stage_bubble"]


def equal_stage_bubble(lay: dict[str, Any]) -> str:
    """Where the bubble comes from, beside the closed form ``trainplan pipeline`` prints for
    stages of equal time (:func:`model.pipeline.bubble_fraction`, (p − 1)/(v·m + p − 1): GPipe,
    1F1B and interleaved 1F1B); empty at pp 1, for the split-backward schedules and without a
    micro-batch count.

    >>> equal_stage_bubble({"pp": 8, "virtual_stages": 1, "num_microbatches": 1024,
    ...     "schedule": "1f1b"})  # doctest: +NORMALIZE_WHITESPACE
    "  the bubble is the schedule's order run on each stage's own time (the end stages also
    hold the embedding and the output layer); with equal stages, as trainplan pipeline
    assumes, (p − 1)/(v·m + p − 1) = 7/1,031 = 0.7%"
    """
    pp, v, m = lay["pp"], lay.get("virtual_stages") or 1, lay.get("num_microbatches")
    if pp == 1 or not m or lay["schedule"] not in ("gpipe", "1f1b", "interleaved"):
        return ""
    f = bubble_fraction(pp, m, v)
    return (
        "  the bubble is the schedule's order run on each stage's own time (the end stages "
        "also hold the embedding and the output layer); with equal stages, as trainplan pipeline "
        f"assumes, (p − 1)/(v·m + p − 1) = {f.numerator:,}/{f.denominator:,} = "
        f"{float(f) * 100:.1f}%"
    )
