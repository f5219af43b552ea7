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

Checked against the schedules' own action lists (PyTorch 2.13.0, the lists each schedule's
``pipeline_order_with_comms`` holds, replayed with the rules above): m + 1 gathers of every chunk
for GPipe and 1F1B at pp 2–8, m = pp…8·pp, and for Interleaved1F1B (v = 2, 3), ZBVZeroBubble
and DualPipeV at the same sizes; one a step with ``reshard_after_forward=False``.

**The multi-stage runtime** (``_PipelineScheduleRuntime._step_microbatches``, PyTorch 2.13.0
git cf30153c4c ``torch/distributed/pipelining/schedules.py``) adds two things to these counts:

* *Chunks re-gathered* (:func:`chunk_gathers`, :func:`runtime_regathers`). ``_add_unshard_reshard``
  walks a rank's compute actions and before each one keeps active the next
  :data:`MAX_ACTIVE_STAGES` distinct stages it will compute: an ``UNSHARD`` for each that enters,
  a ``RESHARD`` for each that leaves. ``RESHARD`` calls ``FSDPModule.reshard`` on every unit of
  the stage, and ``FSDPParamGroup.reshard`` outside a forward frees the unsharded parameters
  whatever ``reshard_after_forward`` says; the ``UNSHARD`` that brings the stage back gathers
  them again (``unshard(async_op=True)`` on every unit). With at most three chunks a rank
  (``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV``, ``ScheduleInterleaved1F1B`` at v ≤ 3) a
  chunk leaves only after its last pass: the counts above hold. With four or more
  (``ScheduleInterleaved1F1B`` at v ≥ 4; its order, warm-up ``(v − 1)·pp + 2·(pp − 1 − r)``
  forwards then one forward and one backward in turn, chunks taken in rounds of pp micro-batches,
  is Megatron-Core's, :func:`model.schedule.stage_order`) the forwards walk the chunks upwards
  and the backwards downwards, so every round a rank's window loses chunks it will need again:
  at pp 2, v 4, m 4 rank 0 issues 11 gathers of a chunk under ZeRO-2 where 4 were counted
  (2.75 of its weights a step where 1 was), 22 under ZeRO-3 where 20 were. Replayed
  (:func:`chunk_gathers`) over n = m/pp rounds the most a rank issues is, under ZeRO-2,
  ``2v − 3`` at n = 1 and ``2(v − 3)·n + 7`` from n = 2 on, whatever pp (ranks in the second half
  of the pipeline two fewer); under ZeRO-3 ``(m + 1)·v`` plus a few per round. Every ``UNSHARD``
  after the step's first is issued at least one forward and one backward of a chunk before the
  pass that waits for it (two passes at the least, four to sixteen most often), so the re-gathers
  are counted in each micro-batch's backward window (:func:`model.dp_exposure.dp_seconds`).
* *The first chunk gathered up front* (:func:`upfront_gather`). Each rank's list begins with the
  ``UNSHARD`` of its first chunks; before a stage's first pass ``_assert_unsharded`` waits on
  every one of its units' handles (``UnshardHandle.wait`` → ``wait_for_unshard``: the compute
  stream waits for the stage's all-gathers and copies them out), so the first forward starts
  only when its whole chunk is gathered, where FSDP's own hooks gather unit by unit under it.
  Nothing runs before it on the first rank, which every other rank waits for: ``1/v`` of the
  step's first-forward gather waits whole; the other chunks' first gathers, issued behind it on
  the same group, hide under the forwards of the chunk before them (``min(m, pp)`` a chunk on
  the first rank's warm-up, each ``1/v`` of a micro-batch's forward).
* *Chunks held gathered* (:func:`held_chunks`). The ``RESHARD`` that drops a chunk from the
  window frees its unsharded parameters (``FSDPParamGroup.reshard`` → ``_to_sharded`` →
  ``FSDPParam.free_unsharded_param``: the all-gather outputs' storage) before the ``UNSHARD``
  of the chunk that enters, so at v ≥ 4 a rank holds at most :data:`MAX_ACTIVE_STAGES` chunks'
  weights whole at once (the windows replayed, under both ZeRO stages: three at some pass on
  every rank), not all v of them; the unsharded gradients (``unsharded_accumulated_grad``,
  FP32) are not the parameters' storage and stay until the stage's ``REDUCE_GRAD``. The
  memory term reads the largest of those sets (:func:`model.terms.runtime_window.
  held_whole_params`); ``pipeline_frees_stage_tensors`` (Meta's runtime) leaves every chunk
  whole, as before.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from trainplan.model.frameworks import DEFAULT_ZERO_STAGE, Framework
from trainplan.model.fsdp2_replay import WINDOW, rank_replay, replay_passes
from trainplan.model.xp import elementwise, minimum

if TYPE_CHECKING:
    from trainplan.model.mechanism_record import Mechanism

__all__ = [
    "TORCHTITAN_RESHARD_SOURCE",
    "MAX_ACTIVE_STAGES",
    "RUNTIME_SCHEDULES",
    "default_zero_stage",
    "reshard_policy",
    "regather_forward_share",
    "chunk_gathers",
    "held_chunks",
    "runtime_regathers",
    "runtime_unshards",
    "upfront_gather",
    "regather_name",
    "runtime_mechanism",
]

TORCHTITAN_RESHARD_SOURCE = (
    "torchtitan b5bcd76c6 torchtitan/distributed/fsdp.py get_fsdp_reshard_after_forward_policy "
    '("default" → not pp_enabled), apply_fsdp_to_decoder; torchtitan/config/configs.py '
    'fsdp_reshard_after_forward = "default"'
)


MAX_ACTIVE_STAGES = WINDOW
"""Stages a rank keeps gathered under the multi-stage runtime: ``_add_unshard_reshard``'s
``max_active_stages`` default, which ``_PipelineScheduleRuntime._prepare_schedule_with_comms``
leaves as it is (PyTorch 2.13.0 ``torch/distributed/pipelining/schedules.py``)."""

RUNTIME_SCHEDULES = frozenset({"interleaved", "zb-v", "dualpipev"})
"""The ``fsdp2`` profile's schedules that PyTorch runs on ``_PipelineScheduleRuntime``
(``ScheduleInterleaved1F1B``, ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV`` subclass it;
``ScheduleGPipe`` and ``Schedule1F1B`` are ``PipelineScheduleSingle``: no ``UNSHARD``)."""


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


def _replay(order: list[tuple[str, int, int]], reshard_after_forward: bool) -> int:
    """All-gathers of a chunk one rank's ``order`` (:func:`model.schedule.stage_order`'s
    ``(kind, micro-batch, chunk)``) issues under the runtime, replayed pass by pass
    (:func:`model.fsdp2_replay.replay_passes`): before each pass the next
    :data:`MAX_ACTIVE_STAGES` distinct chunks are kept; one that leaves is freed (``RESHARD``),
    one that enters gathers if freed (``UNSHARD``); then the pass's own hooks gather it if freed,
    a forward frees it under ``reshard_after_forward``, a backward leaves it whole. The
    reference :func:`chunk_gathers`' replay in runs equals."""
    return replay_passes([(k, c) for k, _, c in order], reshard_after_forward)[0]


@lru_cache(maxsize=1024)
def chunk_gathers(pp: int, v: int, m: int, reshard_after_forward: bool) -> int:
    """All-gathers of one model chunk's units (each ``1/v`` of a rank's weights) in a step on the
    rank that issues the most, under ``ScheduleInterleaved1F1B`` on ``_PipelineScheduleRuntime``
    with FSDP2 (the module docstring): every rank's whole order replayed with the runtime's
    window of :data:`MAX_ACTIVE_STAGES` chunks, in runs of a repeated pattern
    (:func:`model.fsdp2_replay.rank_replay`: O(v·m/pp) work a rank, where the order has 2·v·m
    passes). ``m`` a multiple of pp (:func:`model.pipeline.check_schedule`).

    Examples
    --------
    pp 2, v 4, m 4 (rank 0's list: ``0UNSHARD 2UNSHARD 4UNSHARD 0F0 0F1 0RESHARD 6UNSHARD 2F0
    …``): 11 gathers of a chunk under ZeRO-2, 22 under ZeRO-3 (rank 1: 23); at v 3 one a chunk
    and m + 1 a chunk.

    >>> chunk_gathers(2, 4, 4, False), chunk_gathers(2, 4, 4, True), chunk_gathers(2, 3, 4, True)
    (11, 23, 15)
    """
    return max(rank_replay(pp, v, m, r, reshard_after_forward)[0] for r in range(pp))


@lru_cache(maxsize=4096)
def held_chunks(pp: int, v: int, m: int, rank: int, reshard_after_forward: bool) -> frozenset:
    """The sets of rank ``rank``'s chunks (local indices 0…v − 1) held gathered at once during
    one of its passes under ``ScheduleInterleaved1F1B`` on the runtime (the most each holds: no
    set inside another listed): the window's chunks not freed, the pass's own counted whole for
    the whole pass (a backward ends with it whole; a ZeRO-3 forward of a freed chunk holds two
    of its units at a time, an upper bound by the rest of the chunk). At most
    :data:`MAX_ACTIVE_STAGES` chunks: ``RESHARD`` frees a chunk as it leaves the window
    (``FSDPParam.free_unsharded_param``), before the ``UNSHARD`` of the one that enters. With v
    ≤ 3 every chunk at once (the last backwards leave them all whole).

    pp 2, v 4, m 4, rank 0 (:data:`tests.model.test_fsdp2_runtime_gathers.RANK0`; local chunk c
    is stage 2c): the window starts {0, 1, 2}, ends {2, 1, 0}; 0RESHARD makes room for chunk 3
    after 0F1, so {1, 2, 3} during 2F0, …

    >>> sorted(sorted(s) for s in held_chunks(2, 4, 4, 0, False))
    [[0, 1, 2], [0, 1, 3], [0, 2, 3], [1, 2, 3]]
    >>> held_chunks(2, 3, 4, 0, True)
    frozenset({frozenset({0, 1, 2})})

    Cached (a pure function of its numbers, an immutable answer): the search asks it for every
    model split of a shape, the same few (pp, v, m, rank) each time.
    """
    if v <= MAX_ACTIVE_STAGES:
        return frozenset({frozenset(range(v))})
    sets = rank_replay(pp, v, m, rank, reshard_after_forward)[1]
    return frozenset(s for s in sets if not any(s < t for t in sets))


def runtime_mechanism(mech: Mechanism, frees_stage_tensors: bool) -> Mechanism:
    """``mech`` as the recipe's pipeline runtime runs it: without
    :attr:`~model.mechanism_record.Mechanism.torch_pipelining` where the recipe says the runtime
    is not PyTorch's (:attr:`model.specs.TrainingSpec.pipeline_frees_stage_tensors`: Meta's for
    Llama 3, whose FSDP does not reshard after forward, arXiv 2407.21783 §3.3.1), and without
    PyTorch FSDP2's copies around its collectives (:mod:`model.fsdp2_copies`), which are that
    code's: Meta's FSDP is not public, so none are charged.

    >>> from trainplan.model.mechanisms import mechanism
    >>> meta = runtime_mechanism(mechanism("fsdp2", 2, pipelined=True), True)
    >>> meta.torch_pipelining, meta.accumulate_first_bytes, meta.accumulate_bytes
    (False, 0, 0)
    """
    if not frees_stage_tensors or mech.framework is not Framework.FSDP2:
        return mech  # torch_pipelining is FSDP2's alone
    return replace(mech, torch_pipelining=False, accumulate_first_bytes=0, accumulate_bytes=0)


def runtime_regathers(mech: Mechanism, schedule: Any, pp: Any, v: Any, m: Any) -> Any:
    """All-gathers of a stage's whole weights a step that ``mech`` under PyTorch's multi-stage
    runtime issues beyond its own count (:attr:`~model.mechanism_record.Mechanism.
    gathers_per_step` + m × :attr:`~model.mechanism_record.Mechanism.gathers_per_microbatch`:
    one a chunk under ZeRO-2, m + 1 under ZeRO-3): ``(chunk_gathers − that·v)/v`` under
    ``interleaved`` with ``v ≥ 4`` (:func:`chunk_gathers`), 0 elsewhere and for a mechanism not
    run by torch.distributed.pipelining (:attr:`~model.mechanism_record.Mechanism.
    torch_pipelining`). A Fraction for one layout, element-wise in ``v`` and ``m`` (floats)
    over arrays.

    >>> from trainplan.model.mechanisms import mechanism
    >>> z2, z3 = (mechanism("fsdp2", z, pipelined=True) for z in (2, 3))
    >>> runtime_regathers(z2, "interleaved", 2, 4, 4), runtime_regathers(z3, "interleaved", 2, 4, 4)
    (Fraction(7, 4), Fraction(3, 4))
    >>> runtime_regathers(z2, "interleaved", 4, 3, 16), runtime_regathers(z2, "1f1b", 4, 1, 16)
    (0, 0)
    """
    if not mech.torch_pipelining or str(schedule) != "interleaved":
        return 0
    again = mech.regathers_after_forward
    counted = mech.gathers_per_step, mech.gathers_per_microbatch

    def extra(v: Any, m: Any) -> Any:
        v, m = int(v), int(m)
        if v <= MAX_ACTIVE_STAGES:
            return 0
        return Fraction(chunk_gathers(int(pp), v, m, again) - v * (counted[0] + m * counted[1]), v)

    return elementwise(extra, v, m)


def runtime_unshards(mech: Mechanism, schedule: Any, pp: Any, v: Any, m: Any) -> Any:
    """All-gathers of a stage's whole weights a step that PyTorch's multi-stage runtime issues
    itself (its ``UNSHARD`` actions, :data:`RUNTIME_SCHEDULES`), of the mechanism's count and
    :func:`runtime_regathers`' together: each chunk's entry into the runtime's window, when it
    finds it freed — once a step at v ≤ 3 (the window holds every chunk from the start), else
    ``chunk_gathers(pp, v, m, False)/v``; the same under both ZeRO stages, the window's
    entries being the schedule's, a ZeRO-2 chunk freed only by the ``RESHARD`` at its exit
    (every ZeRO-2 gather is one of these) and a ZeRO-3 one too (the forward's own frees are
    gathered again by FSDP's hooks, not here). 0 for a mechanism not run by
    torch.distributed.pipelining and for the single-stage schedules.

    The runtime calls ``unshard(async_op=True)`` outside FSDP's forward and backward hooks
    (PyTorch 2.13.0 ``schedules.py`` ``_PipelineScheduleRuntime._step_microbatches``), and
    ``FSDPCommContext.get_all_gather_streams`` (``_fsdp_param_group.py``) returns the side
    streams only for a gather that is not ``async_op`` in the ``FORWARD`` or ``PRE_BACKWARD``
    state: these gathers' copy-in runs on the current stream, the computation's
    (:func:`model.fsdp2_copies.copy_in_bytes`). A Fraction for one layout, element-wise in
    ``v`` and ``m`` over arrays.

    >>> from trainplan.model.mechanisms import mechanism
    >>> z2, z3 = (mechanism("fsdp2", z, pipelined=True) for z in (2, 3))
    >>> runtime_unshards(z2, "interleaved", 2, 4, 4), runtime_unshards(z3, "interleaved", 2, 4, 4)
    (Fraction(11, 4), Fraction(11, 4))
    >>> runtime_unshards(z3, "zb-v", 4, 2, 8), runtime_unshards(z3, "1f1b", 4, 1, 8)
    (1, 0)
    """
    if not mech.torch_pipelining or str(schedule) not in RUNTIME_SCHEDULES:
        return 0

    def entries(v: Any, m: Any) -> Any:
        v, m = int(v), int(m)
        return 1 if v <= MAX_ACTIVE_STAGES else Fraction(chunk_gathers(int(pp), v, m, False), v)

    return elementwise(entries, v, m)


def upfront_gather(mech: Mechanism, schedule: Any, pp: Any, v: Any, m: Any) -> tuple[Any, Any]:
    """(share of the step's first-forward all-gathers that waits whole before the first forward,
    the window the rest hide under in forwards of one micro-batch): ``(1/v, (v − 1)·min(m,
    pp)/v)`` under PyTorch's multi-stage runtime (:data:`RUNTIME_SCHEDULES`; the module
    docstring: the first chunk's ``UNSHARD`` is waited for whole, each later chunk's first
    gather hides under the ``min(m, pp)`` forwards of the chunk before it on the first rank,
    ``1/v`` of a micro-batch's forward each), ``(0, 1)`` elsewhere: FSDP's hooks gather unit by
    unit under the first forward (:func:`model.dp_exposure.first_forward_seconds`).
    Element-wise in ``v`` and ``m``.

    >>> from trainplan.model.mechanisms import mechanism
    >>> z2 = mechanism("fsdp2", 2, pipelined=True)
    >>> upfront_gather(z2, "interleaved", 8, 2, 8), upfront_gather(z2, "1f1b", 8, 1, 8)
    ((0.5, 4.0), (0, 1))
    """
    if not mech.torch_pipelining or str(schedule) not in RUNTIME_SCHEDULES:
        return 0, 1
    return 1 / v, (v - 1) * minimum(m, pp) / v


def regather_name(again: Any) -> str:
    """What the dp traffic's name adds for :func:`runtime_regathers`' ``again`` gathers of the
    weights a step (one layout): nothing when there are none.

    >>> regather_name(Fraction(39, 8)), regather_name(0)
    (' + 4.875 re-gathers a step (pipeline runtime)', '')
    """
    return f" + {float(again):.4g} re-gathers a step (pipeline runtime)" if again else ""
