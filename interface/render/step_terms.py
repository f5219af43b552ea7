"""The step's terms in the order they add up to the step time: one list, built into the
``time`` object of the evaluate JSON (:func:`interface.render.report_dict`'s ``time``) and read
by the text report's ``Step:`` line (:mod:`interface.render.report`) and the web planner's
breakdown (``static/planner.js``), so neither types the list again."""

from __future__ import annotations

from typing import Any

__all__ = ["FSDP_COPIES", "STEP_TERMS", "accumulation_said", "step_terms"]

STEP_TERMS = (
    ("compute", "compute_s"),
    ("bubble", "bubble_s"),
    ("exposed comm", "exposed_comm_s"),
    ("optimizer step", "optimizer_s"),
    ("offload", "offload_s"),
    ("gradient accumulation", "grad_accumulation_s"),
)
"""The step's terms in the order they add up (the text report's ``Step:`` line and the web
planner's breakdown read them from ``time.step_terms``): the first three always, the others
where they are not zero."""


FSDP_COPIES = "FSDP copies"
"""``grad_accumulation_s``'s name under ``fsdp2``: FSDP's copies around its all-gathers and
reduce-scatters on the compute stream, with its accumulation in FP32 under a pipeline schedule
(:mod:`model.fsdp2_copies`), not DeepSpeed's gradient accumulation."""


def step_terms(time: dict[str, Any], framework: str | None = None) -> list[dict[str, Any]]:
    """``[{"term": name, "s": seconds}]``, the terms of ``time`` (:data:`STEP_TERMS`) that add to
    ``step_s`` (activation offload's exposed time is inside compute, not a term); under
    ``framework`` ``fsdp2`` the accumulation term is named :data:`FSDP_COPIES`."""
    names = {"grad_accumulation_s": FSDP_COPIES} if framework == "fsdp2" else {}
    return [
        {"term": names.get(k, n), "s": time[k]}
        for i, (n, k) in enumerate(STEP_TERMS)
        if i < 3 or time[k]
    ]


def accumulation_said(framework: str) -> str:
    """What the assumptions' dp phrase says of the ``grad_accumulation_s`` term under
    ``framework``: FSDP's copies (:mod:`model.fsdp2_copies`) or DeepSpeed's accumulation.

    >>> accumulation_said("fsdp2"), accumulation_said("deepspeed")
    ("FSDP's copies around its gathers and reductions on the compute stream", 'gradient accumulation in each backward')
    """
    if framework == "fsdp2":
        return "FSDP's copies around its gathers and reductions on the compute stream"
    return "gradient accumulation in each backward"
