"""FSDP2 under PyTorch's pipeline schedules, as torchtitan runs it: the ZeRO stage torchtitan's
reshard policy gives (:func:`default_zero_stage`, :func:`reshard_policy`), and in which passes a
stage's units are all-gathered (:func:`regather_forward_share`; the counts are
:func:`model.mechanisms._fsdp2_pipelined`'s).

Sources (read, not copied):

* torchtitan b5bcd76c6 ``torchtitan/config/configs.py``: ``fsdp_reshard_after_forward:
  Literal["default", "always", "never"] = "default"``; ``torchtitan/distributed/fsdp.py``
  ``get_fsdp_reshard_after_forward_policy``: ``"always"`` → True, ``"never"`` → False,
  ``"default"`` → ``not pp_enabled`` ("For PP, by default do not reshard after forward to avoid
  per-microbatch all-gathers"); ``apply_fsdp_to_decoder`` passes it to ``fully_shard`` of the
  embedding and of every transformer block (``[norm, lm_head]`` reshard after forward only
  under ``"always"``). torchtitan 9dec370 (the December 2024 benchmarks) had no policy:
  ``apply_fsdp`` set ``reshard_after_forward = False`` under pp.
* PyTorch 2.13.0 (git cf30153c4c) ``torch/distributed/pipelining/stage.py``
  ``_PipelineStageBase.backward_maybe_with_nosync``: before every micro-batch's backward
  ``set_reshard_after_backward(False)`` and ``set_requires_gradient_sync(False)`` on the
  stage's module (``recurse=True``: every FSDP unit in it); ``perform_reduce_grad``, after the
  stage's last backward, sets both back and runs each group's ``post_backward`` (the
  reduce-scatter, then ``reshard``).
* ``torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py``: ``pre_forward`` and
  ``pre_backward`` call ``unshard``, which returns at once when the group ``is_unsharded``;
  ``post_forward`` → ``reshard``, which frees the unsharded parameters only under
  ``reshard_after_forward``; ``post_backward`` reshards only under ``reshard_after_backward``.
* ``torch/distributed/pipelining/schedules.py``: ``Schedule1F1B`` runs ``min(m, pp − r)``
  forwards on stage ``r`` before its first backward ("first stage ``num_stages`` warmups"),
  then a backward and a forward in turn; ``ScheduleGPipe`` every forward, then every backward.
  The multi-stage schedules (``_PipelineScheduleRuntime``: ``ScheduleInterleaved1F1B``,
  ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV``) add an ``UNSHARD`` of each of the next
  three stages the rank computes and a ``RESHARD`` when one leaves them
  (``_add_unshard_reshard``, ``max_active_stages=3``); the ``UNSHARD`` gathers a stage's units
  ahead of its first pass (their hooks then find them whole), the ``RESHARD`` frees them after
  its last.

So each unit of a stage follows its stage's passes: a forward frees it under
``reshard_after_forward``, a backward (full, or the input-gradient pass ``I``) leaves it whole,
the weight-gradient pass ``W`` runs no FSDP hook. A pass gathers the units it finds freed:

* ``reshard_after_forward=False`` (ZeRO-2: ``"default"`` or ``"never"`` under pp): the step's
  first forward, once a step;
* ``reshard_after_forward=True`` (ZeRO-3: ``"always"``): the step's first forward, each forward
  after a forward and each backward after a forward. A stage's m forwards and m backwards begin
  with a forward and end with a backward, in k runs of forwards and k runs of backwards: each
  run of forwards after the first begins after a backward and gathers nothing at its first, so
  ``m − k + 1`` forwards gather, and each run of backwards gathers at its first, ``k``: **m + 1
  all-gathers a step, whatever the schedule** (m + 1 of each of a rank's chunks under the
  multi-stage schedules, whose ``UNSHARD`` takes the first forward's place).

With four chunks a rank or more (the interleaved schedule's ``v ≥ 4``) a chunk leaves the three
``_add_unshard_reshard`` keeps and is gathered again on its return, beyond these counts: not
counted here.

Checked against the schedules' own action lists (PyTorch 2.13.0, the lists each schedule's
``pipeline_order_with_comms`` holds, replayed with the rules above): m + 1 gathers of every chunk
for GPipe and 1F1B at pp 2–8, m = pp…8·pp, and for Interleaved1F1B (v = 2, 3), ZBVZeroBubble
and DualPipeV at the same sizes; one a step with ``reshard_after_forward=False``.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import DEFAULT_ZERO_STAGE, Framework

__all__ = [
    "TORCHTITAN_RESHARD_SOURCE",
    "default_zero_stage",
    "reshard_policy",
    "regather_forward_share",
]

TORCHTITAN_RESHARD_SOURCE = (
    "torchtitan b5bcd76c6 torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy "
    '("default" → not pp_enabled), apply_fsdp_to_decoder; torchtitan/config/configs.py '
    'fsdp_reshard_after_forward = "default"'
)


def default_zero_stage(framework: Framework | str, pp: int = 1) -> int:
    """The ZeRO stage a layout gets when none is given: :data:`model.frameworks.
    DEFAULT_ZERO_STAGE`, except under ``fsdp2`` with ``pp > 1``, where torchtitan's default
    policy ``"default"`` does not reshard after forward (``not pp_enabled``,
    :data:`TORCHTITAN_RESHARD_SOURCE`): ZeRO-2 there.

    >>> default_zero_stage("fsdp2"), default_zero_stage("fsdp2", 4), default_zero_stage("megatron", 4)
    (3, 2, 1)
    """
    fw = Framework(str(framework))
    if fw is Framework.FSDP2 and pp > 1:
        return 2
    return DEFAULT_ZERO_STAGE[fw]


def reshard_policy(zero_stage: int, pp: int) -> str:
    """torchtitan's ``fsdp_reshard_after_forward`` that runs FSDP2's ``zero_stage`` with ``pp``
    pipeline stages (:data:`TORCHTITAN_RESHARD_SOURCE`), in the words the assumptions print.
    At pp = 1 ``"default"`` also leaves ``[norm, lm_head]`` gathered from forward to backward,
    which the ``fsdp2`` profile's ZeRO-3 does not single out.

    >>> reshard_policy(2, 4), reshard_policy(3, 4)
    ('fsdp_reshard_after_forward "default" (= "never" with pp > 1)', 'fsdp_reshard_after_forward "always"')
    >>> reshard_policy(3, 1), reshard_policy(2, 1)
    ('fsdp_reshard_after_forward "default" (= "always" without pp)', 'fsdp_reshard_after_forward "never"')
    """
    if pp > 1:
        if zero_stage == 3:
            return 'fsdp_reshard_after_forward "always"'
        return 'fsdp_reshard_after_forward "default" (= "never" with pp > 1)'
    if zero_stage == 3:
        return 'fsdp_reshard_after_forward "default" (= "always" without pp)'
    return 'fsdp_reshard_after_forward "never"'


def regather_forward_share(schedule: str, m: Any) -> Any:
    """Of the m all-gathers a step beyond the first forward's that FSDP2's ZeRO-3 runs on a
    pipeline stage (the module docstring), the share run by forwards (their window is a
    forward's, :func:`model.dp_exposure.microbatch_exposed_seconds`); the rest run in
    backwards. Element-wise in ``m``.

    * ``gpipe``: every forward after the first and the first backward: ``(m − 1)/m``, every
      stage.
    * ``1f1b``, ``zb-v``, ``dualpipev``: 0. After the warm-up a stage runs a forward and a
      backward of the same chunk in turn, so each backward gathers and each forward finds the
      units left whole. The warm-up's forwards gather too (``min(m, pp − r) − 1`` on stage r
      under ``Schedule1F1B``; ZB-V's first chunk ``min(m, 2·pp) − 1`` on rank 0), counted
      here in a backward's window: they run while the rank waits for its first backward, and
      each feeds a later stage ahead of its need by the backward's excess over the forward.
    * ``interleaved``: 1. In a round where a rank's forwards and backwards run different
      chunks, a chunk's forwards follow one another (each gathers) and so do its backwards
      (none does); the ranks whose rounds are so arranged set the pace (PyTorch's
      ``ScheduleInterleaved1F1B`` at pp 8, v 2, m 64: 115 of rank 3's 130 gathers are
      forwards', 10 of rank 7's).

    >>> regather_forward_share("gpipe", 8), regather_forward_share("1f1b", 8)
    (0.875, 0.0)
    >>> regather_forward_share("interleaved", 8), regather_forward_share("zb-v", 8)
    (1.0, 0.0)
    """
    name = str(schedule)
    if name == "gpipe":
        return (m - 1) / m
    if name == "interleaved":
        return 1.0 + 0 * m
    return 0.0 * m
