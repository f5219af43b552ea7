"""The parameter all-gathers of a forward-only pass (the RLHF scoring forward) where the layout's
mechanism re-gathers its sharded units every micro-batch: FSDP2 with ``reshard_after_forward``
and DeepSpeed ZeRO-3.

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
(:func:`model.schedule_cost.pass_times`), as the scoring forward's compute is a third of the
three passes (:func:`model.rlhf.network._forward_s`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trainplan.model.mechanism_record import Mechanism
from trainplan.model.terms.dp_time import dp_group_times
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.roofline import window_seconds
from trainplan.model.terms.traffic import dp_mechanism

__all__ = ["forward_gather_term", "forward_mechanism"]


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
