"""The RLHF roles' seconds read off ``evaluate()``'s time terms: one micro-batch's update
compute, one micro-batch's scoring forward and the scoring forward over the batch
(:func:`model.terms.forward_gather.forward_pass_term`); what :mod:`model.rlhf.network` charges."""

from __future__ import annotations

from trainplan.model.errors import InputError
from trainplan.model.estimate import Estimate
from trainplan.model.terms.forward_gather import forward_only_fill

__all__ = ["SCORING_TIME_SOURCE", "forward_microbatch_s", "forward_s", "microbatch_s"]

SCORING_TIME_SOURCE = (
    "evaluate(), no recompute: a forward-only pipeline, (m + pp − 1) × the slowest stage's "
    "(m + (pp − 1)/v under interleaved) "
    "forward (Megatron-Core forward_only; verl megatron_actor.py forward_backward_batch) + "
    "model.terms.forward_gather"
)


def microbatch_s(est: Estimate) -> float:
    """One micro-batch's compute on the slowest stage: ``TimeTerms.compute_s`` ÷ m (0: none)."""
    if est.time_terms is None:
        return 0.0
    return est.time_terms.compute_s / est.num_microbatches


def forward_microbatch_s(est: Estimate) -> float:
    """Seconds per micro-batch of the forward-only pipeline: ``TimeTerms.forward_pass_s`` ÷
    (m + fill), the fill the pass itself is timed with
    (:func:`model.terms.forward_gather.forward_only_fill`: pp − 1, (pp − 1)/v under
    ``interleaved``), so the slowest stage's forward ``t_f`` with a share of the exposed sends no
    larger than a micro-batch's; n times it is at most a forward over n micro-batches,
    (n + fill)·t_f and their sends (0: no time terms). A floor
    (:func:`model.rlhf.network.seconds_floor`), never above what it bounds."""
    if est.time_terms is None:
        return 0.0
    layout = est.layout
    fill = forward_only_fill(layout.pp, layout.virtual_stages, str(layout.schedule))
    return est.time_terms.forward_pass_s / (est.num_microbatches + fill)


def forward_s(est: Estimate) -> float:
    """A forward over the batch: the forward-only pipeline (``TimeTerms.forward_pass_s``,
    :func:`model.terms.forward_gather.forward_pass_term`: the forward's own operations and
    collectives, no recomputation nor any backward-only term) and its exposed parameter
    all-gathers (``TimeTerms.forward_gather_s``)."""
    if est.time_terms is None:
        raise InputError("rlhf: step time needs every axis's link bandwidth")
    return est.time_terms.forward_pass_s + est.time_terms.forward_gather_s
