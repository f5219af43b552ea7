"""A forward-only pass over a layout's micro-batches (the RLHF scoring forward): its pipeline
(:func:`forward_pass_term`) and the parameter all-gathers where the layout's mechanism
re-gathers its sharded units every micro-batch: FSDP2 with ``reshard_after_forward`` and
DeepSpeed ZeRO-3 (:func:`forward_gather_term`).

A forward under ``torch.no_grad`` runs the training forward's unit-by-unit gathers and nothing
else: FSDP2's pre-forward hook all-gathers each ``fully_shard`` unit and its post-forward hook
frees it again when ``reshard_after_forward`` is true (torch ``FSDPParamGroup.pre_forward``,
``post_forward``; verl's reference and old-log-prob forwards run the training module,
``verl/workers/fsdp_workers.py`` b178a3cd5, whose ``fsdp_config.reshard_after_forward``
defaults to True); DeepSpeed ZeRO-3's ``PartitionedParameterCoordinator.fetch_sub_module``
gathers each module before its forward and releases it after (OpenRLHF's reference and actor
are ZeRO-3 engines under ``--zero_stage 3``). So each micro-batch of the forward sends one of the
mechanism's per-micro-batch all-gathers (:attr:`model.mechanism_record.Mechanism.
gathers_per_microbatch` counts the forward's and the backward's) and no reduction.

They are timed by the training step's own dp term (:func:`model.terms.dp_time.dp_group_times`:
the same buckets, links and collective times, the same exposure rule with the same SM share),
for the forward-only mechanism (:func:`forward_mechanism`) over the training window
(:func:`model.terms.roofline.window_seconds`, forward and backward without recomputation): its
one gather is a forward's (:func:`model.dp_exposure.phase_gathers`), so the rule sets it
against the forward's window, a third of the training window
(:func:`model.schedule_cost.pass_times`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trainplan.model.layer_time import PARTS
from trainplan.model.layout import Recompute
from trainplan.model.mechanism_record import Mechanism
from trainplan.model.terms.dp_time import dp_group_times
from trainplan.model.terms.fields import Context, Fields, stage_tuple
from trainplan.model.terms.roofline import stage_parts_term, window_seconds
from trainplan.model.terms.traffic import dp_mechanism

__all__ = [
    "forward_gather_term",
    "forward_mechanism",
    "forward_only_fill",
    "forward_pass_term",
    "forward_terms",
]


def forward_mechanism(mech: Mechanism) -> Mechanism | None:
    """What a forward-only pass sends of ``mech``: one all-gather of the weights per micro-batch,
    no reduction, nothing once per step; None where ``mech``'s forward does not free the units
    it gathered (:attr:`~model.mechanism_record.Mechanism.forward_regathers`): ZeRO-1/2 and the
    distributed optimizer gather nothing in a forward, and FSDP2 without
    ``reshard_after_forward`` leaves a unit gathered after its forward (``post_forward``
    reshards only with it), so with no backward to free it the units stay gathered from one
    micro-batch to the next. FSDP2's ZeRO-3 under a pipeline schedule frees them after every
    forward, as without one.

    >>> from trainplan.model.mechanisms import Framework, mechanism
    >>> forward_mechanism(mechanism(Framework.FSDP2, 3)).traffic_terms()
    (0, 2)
    >>> forward_mechanism(mechanism(Framework.FSDP2, 3, pipelined=True)).traffic_terms()
    (0, 2)
    >>> [forward_mechanism(mechanism(*m)) for m in ((Framework.MEGATRON, 1), (Framework.FSDP2, 2))]
    [None, None]
    """
    if not mech.forward_regathers:
        return None
    return replace(mech, reduce_bytes=0, all_reduce=False, reduce_per_microbatch=False,
                   gathers_per_step=0, gathers_per_microbatch=1, regathers_after_forward=False,
                   step_gathers_in_forward=False, torch_pipelining=False)  # fmt: skip


def forward_gather_term(c: Context, f: Fields) -> tuple[Any, Any]:
    """(seconds of a forward-only pass's parameter all-gathers over the layout's m micro-batches
    if nothing overlapped them, the seconds they leave exposed) on the stage with the most
    parameters, dense and expert groups together (the module docstring); (0, 0) where the
    mechanism gathers no unit per micro-batch. One layout (not the search's columns)."""
    forward = forward_mechanism(dp_mechanism(c, f))
    if forward is None:
        return 0.0, 0.0
    (dense, dense_exposed), (experts, expert_exposed) = dp_group_times(
        c, f, window_seconds(c, f), forward
    )
    return dense + experts, dense_exposed + expert_exposed


def forward_only_fill(pp: Any, virtual_stages: Any, schedule: str) -> Any:
    """The forward-only pipeline's fill, in the slowest stage's forwards of one micro-batch
    (``t_f``): a forward-only pass over m micro-batches ends after ``(m + fill)·t_f``
    (:func:`forward_pass_term`). ``pp − 1`` (Megatron-Core d98e8a64dd
    ``megatron/core/pipeline_parallel/schedules.py``
    ``forward_backward_pipelining_without_interleaving`` under ``forward_only``: stage r starts
    after the r forwards ahead of it); under ``interleaved`` ``(pp − 1)/v``
    (``forward_backward_pipelining_with_interleaving`` under ``forward_only``: the fill is
    pp − 1 chunk forwards of ``t_f/v`` each); every other schedule (DualPipe, ``zb-v``) by the
    one-chunk order, ``pp − 1``. ``pp``, ``virtual_stages``: counts (≥ 1), scalars or numpy
    arrays alike; ``schedule``: the :class:`model.pipeline.Schedule` value.

    >>> forward_only_fill(4, 1, "1f1b"), forward_only_fill(4, 3, "interleaved")
    (3, 1.0)
    >>> forward_only_fill(1, 2, "interleaved")
    0.0
    """
    if str(schedule) == "interleaved":
        return (pp - 1) / virtual_stages
    return pp - 1


def forward_pass_term(
    c: Context, f: Fields, t1_s: float, pp_exposed_s: float, pair_s: float, roofline: bool
) -> float:
    """Seconds of a forward-only pass (``torch.no_grad``: no backward, no recomputation) over
    the layout's m micro-batches, its parameter all-gathers aside (:func:`forward_gather_term`).

    The forward-only pipeline: Megatron-Core's ``forward_backward_pipelining_without_interleaving``
    with ``forward_only=True`` (``megatron/core/pipeline_parallel/schedules.py``; verl's
    ``MegatronPPOActor.compute_log_prob`` and the reference's and critic's scoring run
    ``forward_backward_batch(..., forward_only=True)``, ``verl/workers/actor/megatron_actor.py``)
    runs stage r's m forwards after the r forwards ahead of it, so the last stage ends after
    ``(m + pp − 1)·t_f``, ``t_f`` the slowest stage's forward of one micro-batch: its layers'
    forward operations and the collectives of the forward alone, by the step's own overlap
    rules (``forward`` of :func:`model.terms.roofline.stage_parts_term` at no recomputation,
    :attr:`model.layer_time.LayerTime.forward_only_s`) — not the backward's weight-gradient
    casts, re-quantises, recomputation or gradient-reduction SM share. Under ``interleaved``
    the fill is pp − 1 of a chunk's forwards, ``t_f/v`` each
    (``forward_backward_pipelining_with_interleaving``, ``forward_only``: every rank's m·v
    chunk forwards in turn), so ``(m + (pp − 1)/v)·t_f``; DualPipe is timed by the one-chunk
    order (:func:`forward_only_fill`). The pipeline's exposed sends are the step's (``pp_exposed_s``,
    :func:`model.terms.roofline.pp_seconds_term`: 2·m·v messages) less the pair all-reduce after
    the flush (``pair_s``, :attr:`model.terms.step.PipelineTime.pair_reduce_s`: backward-only),
    halved — a forward sends the m·v activations of them. Under the single model (``roofline``
    False, FLOPs only: a forward is 2N of the 6N per token) a third of ``t1_s``, the step's
    ``compute_and_pipeline_s`` of the same layout without recomputation, less ``pair_s``.

    Examples: m = 8 micro-batches on pp = 4 stages (one chunk) with a 0.1 s forward and 0.02 s
    of exposed sends a step, no pair all-reduce: (8 + 3) × 0.1 + 0.01 = 1.11 s; interleaved
    with v = 3: (8 + 1) × 0.1 + 0.01 = 0.91 s."""
    if not roofline:
        return (t1_s - pair_s) / 3
    parts = stage_tuple(f.stages(lambda g: stage_parts_term(c, g, Recompute.NONE)))
    t_f = max(parts[1 + PARTS.index("forward")])  # after the stage's total
    fill = forward_only_fill(f.pp, f.virtual_stages, str(f.schedule))
    return (f.m + fill) * t_f + (pp_exposed_s - pair_s) / 2


def forward_terms(c: Context, f: Fields, pipe: Any, roofline: bool) -> tuple[float, float]:
    """(the exposed seconds of :func:`forward_gather_term`, 0 under the single model; seconds of
    :func:`forward_pass_term` of the step's :class:`model.terms.step.PipelineTime` ``pipe``:
    its t1, exposed pp seconds and pair all-reduce): an RLHF scoring forward's, for
    ``evaluate()``'s time terms."""
    gathers = forward_gather_term(c, f)[1] if roofline else 0.0
    t1_s, pp_exposed_s = pipe.total_s, pipe.axes["pp"][1]
    return gathers, forward_pass_term(c, f, t1_s, pp_exposed_s, pipe.pair_reduce_s, roofline)
