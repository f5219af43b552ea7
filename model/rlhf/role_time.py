"""The RLHF roles' seconds read off ``evaluate()``'s time terms: one micro-batch's update
compute, one micro-batch's scoring forward and the scoring forward over the batch
(:func:`model.terms.forward_gather.forward_pass_term`); what :mod:`model.rlhf.network` charges."""

from __future__ import annotations

from trainplan.model.errors import InputError
from trainplan.model.estimate import Estimate

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
    (m + pp − 1), the slowest stage's forward with a share of the exposed sends no larger than
    a micro-batch's; n times it is at most a forward over n micro-batches (0: no time terms)."""
    if est.time_terms is None:
        return 0.0
    return est.time_terms.forward_pass_s / (est.num_microbatches + est.layout.pp - 1)


def forward_s(est: Estimate) -> float:
    """A forward over the batch: the forward-only pipeline (``TimeTerms.forward_pass_s``,
    :func:`model.terms.forward_gather.forward_pass_term`: the forward's own operations and
    collectives, no recomputation nor any backward-only term) and its exposed parameter
    all-gathers (``TimeTerms.forward_gather_s``)."""
    if est.time_terms is None:
        raise InputError("rlhf: step time needs every axis's link bandwidth")
    return est.time_terms.forward_pass_s + est.time_terms.forward_gather_s
