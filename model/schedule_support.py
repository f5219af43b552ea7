"""Which framework runs which pipeline schedule, read from each framework's code, and the one
rule that refuses a schedule under a framework that cannot run it.

Implementations (the code read, at the commit given):

* Megatron-Core (NVIDIA/Megatron-LM d98e8a6, ``megatron/core/pipeline_parallel/schedules.py``
  ``get_forward_backward_func``): ``forward_backward_pipelining_without_interleaving`` (1F1B)
  and ``..._with_interleaving`` (interleaved). No GPipe, no split backward schedule, no
  DualPipe; its MoE all-to-all overlap (``overlap_moe_expert_parallel_comm``,
  ``combined_1f1b.py``) overlaps one micro-batch's forward with another's backward inside the
  interleaved 1F1B order. The zero-bubble schedules run in Sea AI Lab's Megatron-LM fork
  (sail-sg/zero-bubble-pipeline-parallelism), not in Megatron-Core.
* torch.distributed.pipelining as torchtitan runs it (pytorch/pytorch 00722e6
  ``torch/distributed/pipelining/schedules.py`` ``get_schedule_class``; pytorch/torchtitan
  b5bcd76 ``torchtitan/distributed/pipeline_parallel.py``, ``pipeline_parallel_schedule``):
  ``GPipe``, ``1F1B``, ``Interleaved1F1B``, ``InterleavedZeroBubble`` (ZB-H1, "the ZB1P
  schedule"), ``ZBVZeroBubble`` (ZB-V), ``DualPipeV``. No ZB-H2, no bidirectional DualPipe.
  ``Interleaved1F1B``, ``InterleavedZeroBubble``, ``ZBVZeroBubble`` and ``DualPipeV`` are
  ``PipelineScheduleMulti`` schedules, and torchtitan's ``_get_pipeline_metadata`` raises
  "Multi-stage schedule requires at least 2 stages per rank": ZB-H1 as modelled here (one
  model chunk per rank, Qi et al. 2024) does not run there, nor ``interleaved`` at v = 1
  (:func:`check_schedule_framework`).
* DeepSpeed (deepspeedai/DeepSpeed edaa722, ``deepspeed/runtime/pipe/schedule.py``):
  ``TrainSchedule`` only, a 1F1B.
* deepseek-ai/DualPipe (3da1bbe): ``DualPipe`` and ``DualPipeV`` modules for any PyTorch
  training loop (DeepSeek-V3 trained with DualPipe in its own HAI-LLM framework).
* ``textbook``: the papers' schedules, all of them.
"""

from __future__ import annotations

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework

__all__ = [
    "SCHEDULE_SUPPORT",
    "IMPLEMENTATIONS",
    "INTERLEAVED_V1",
    "check_schedule_framework",
    "weight_pass_recomputes",
    "SPLIT_RECOMPUTE_CALLS",
    "SPLIT_RECOMPUTE_WHY",
    "split_recompute_rule",
]

SCHEDULE_SUPPORT: dict[str, frozenset[Framework]] = {
    "gpipe": frozenset({Framework.FSDP2, Framework.TEXTBOOK}),
    "1f1b": frozenset(
        {Framework.MEGATRON, Framework.DEEPSPEED, Framework.FSDP2, Framework.TEXTBOOK}
    ),
    "interleaved": frozenset({Framework.MEGATRON, Framework.FSDP2, Framework.TEXTBOOK}),
    "zb-h1": frozenset({Framework.TEXTBOOK}),
    "zb-h2": frozenset({Framework.TEXTBOOK}),
    "zb-v": frozenset({Framework.FSDP2, Framework.TEXTBOOK}),
    "dualpipe": frozenset({Framework.TEXTBOOK}),
    "dualpipev": frozenset({Framework.FSDP2, Framework.TEXTBOOK}),
}
"""The framework profiles (:class:`model.frameworks.Framework`) that run each schedule; ``fsdp2``
is torchtitan's stack, whose pipeline schedules are torch.distributed.pipelining's."""

IMPLEMENTATIONS: dict[str, tuple[str, ...]] = {
    "gpipe": ("torch.distributed.pipelining ScheduleGPipe (torchtitan 'GPipe')",),
    "1f1b": (
        "Megatron-Core forward_backward_pipelining_without_interleaving",
        "torch.distributed.pipelining Schedule1F1B (torchtitan '1F1B')",
        "DeepSpeed TrainSchedule",
    ),
    "interleaved": (
        "Megatron-Core forward_backward_pipelining_with_interleaving",
        "torch.distributed.pipelining ScheduleInterleaved1F1B (torchtitan 'Interleaved1F1B')",
    ),
    "zb-h1": (
        "sail-sg/zero-bubble-pipeline-parallelism (Megatron-LM fork) --enable-zero-bubble "
        "--zero-bubble-max-pending-backward pp",
    ),
    "zb-h2": (
        "sail-sg/zero-bubble-pipeline-parallelism (Megatron-LM fork) --enable-zero-bubble "
        "--zero-bubble-max-pending-backward 2·pp, with --enable-optimizer-post-validation",
    ),
    "zb-v": (
        "torch.distributed.pipelining ScheduleZBVZeroBubble (torchtitan 'ZBVZeroBubble')",
        "sail-sg/zero-bubble-pipeline-parallelism --zero-bubble-v-schedule",
    ),
    "dualpipe": ("deepseek-ai/DualPipe dualpipe.DualPipe",),
    "dualpipev": (
        "torch.distributed.pipelining ScheduleDualPipeV (torchtitan 'DualPipeV')",
        "deepseek-ai/DualPipe dualpipe.DualPipeV",
    ),
}
"""Where each schedule runs, by the implementation's own name."""


INTERLEAVED_V1 = (
    "needs at least 2: at 1 it is 1F1B (Megatron-LM validate_args sets "
    "virtual_pipeline_model_parallel_size 1 to None and runs "
    "forward_backward_pipelining_without_interleaving); use 1f1b or virtual_stages ≥ 2"
)
"""Why ``interleaved`` at ``v = 1`` is refused (:func:`check_schedule_framework`; the pipeline
tab says the same)."""


def check_schedule_framework(
    schedule: str, framework: Framework | str, pp: int, m: int, v: int | None = None
) -> None:
    """Refuse ``schedule`` under a framework profile that cannot run it, and the framework's own
    limits on a schedule it runs: under ``fsdp2``, ``interleaved`` with ``v`` (model chunks per
    rank; None: not known yet, not checked) below 2, torchtitan b5bcd76
    ``torchtitan/distributed/pipeline_parallel.py`` ``_get_pipeline_metadata`` ("Multi-stage
    schedule requires at least 2 stages per rank"; ``Interleaved1F1B`` is a
    ``PipelineScheduleMulti``). ``zb-h1`` (one chunk per rank) is refused under ``fsdp2`` for
    the same rule: torch's ``ScheduleInterleavedZeroBubble`` is multi-stage too. Under
    ``megatron`` and ``textbook`` ``interleaved`` at ``v = 1`` is refused as well: Megatron-LM
    never runs it — NVIDIA/Megatron-LM d98e8a6 ``megatron/training/arguments.py``
    ``validate_args`` sets ``virtual_pipeline_model_parallel_size`` 1 to None, and
    ``megatron/core/pipeline_parallel/schedules.py`` ``get_forward_backward_func`` then runs
    ``forward_backward_pipelining_without_interleaving`` (1F1B) — and the interleaved order at
    ``v = 1`` (its warm-up ``2(p − 1 − r)``) holds up to ``2p − 1`` micro-batches where that 1F1B
    holds ``p``: the answer is ``1f1b``'s, so the user is sent there (``deepspeed`` runs no
    interleaving at all).

    Raises
    ------
    LayoutError
        ``schedule: zb-h2 does not run under framework megatron (runs under: textbook; …)``.

    Examples
    --------
    >>> check_schedule_framework("zb-v", "fsdp2", 4, 8)
    >>> check_schedule_framework("dualpipe", "megatron", 4, 8)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: schedule: dualpipe does not run under framework megatron ...
    """
    try:
        fw = Framework(str(framework))
    except ValueError:
        names = ", ".join(f.value for f in Framework)
        raise LayoutError(f"framework: {framework!r} is not one of {names}") from None
    name = str(schedule)
    if fw is Framework.FSDP2 and name == "zb-h1":
        raise LayoutError(
            "schedule: zb-h1 does not run under framework fsdp2: torchtitan's "
            "InterleavedZeroBubble needs at least 2 stages per rank (_get_pipeline_metadata: "
            '"Multi-stage schedule requires at least 2 stages per rank"), zb-h1 has one; use '
            "zb-v, interleaved or 1f1b"
        )
    if fw not in SCHEDULE_SUPPORT[name]:
        runs = ", ".join(sorted(f.value for f in SCHEDULE_SUPPORT[name]))
        raise LayoutError(
            f"schedule: {name} does not run under framework {fw.value} (runs under: {runs}; "
            f"implementations: {'; '.join(IMPLEMENTATIONS[name])})"
        )
    if fw is Framework.FSDP2 and name == "interleaved" and v is not None and v < 2:
        raise LayoutError(
            f"virtual_stages: {v} under schedule interleaved with framework fsdp2 needs at "
            'least 2 (torchtitan _get_pipeline_metadata: "Multi-stage schedule requires at '
            'least 2 stages per rank"); use 1f1b or virtual_stages ≥ 2'
        )
    if name == "interleaved" and v is not None and v < 2:
        raise LayoutError(f"virtual_stages: {v} under schedule interleaved {INTERLEAVED_V1}")


def weight_pass_recomputes(framework: Framework | str, schedule: str) -> bool:
    """Whether a split-backward schedule's weight pass ``W`` runs the checkpointed layers'
    forward again after its input pass ``I`` did: under ``fsdp2`` with ``zb-v`` and
    ``dualpipev`` (torch.distributed.pipelining as torchtitan runs it), yes; elsewhere no
    (Megatron-Core runs no split schedule; ``textbook`` is Qi et al. 2024's recompute in ``B``).

    ``stage_backward_input`` runs one ``torch.autograd.grad`` call and ``stage_backward_weight``
    one more per parameter group (pytorch/pytorch 2e0f976
    ``torch/distributed/pipelining/_backward.py``: a group per weight whose gradient path meets
    the input's, ``get_param_groups``); each is its own graph task. A non-reentrant checkpoint
    (torchtitan b5bcd76 ``torchtitan/distributed/activation_checkpoint.py`` ``FullAC._wrap_block``:
    ``ptd_checkpoint_wrapper``, ``early_stop=False``) keys its recomputation by the graph task
    (pytorch/pytorch 0008d77 ``torch/utils/checkpoint.py`` ``_checkpoint_hook.unpack_hook``:
    ``gid`` is ``torch._C._current_graph_task_id()`` unless a ``GraphExecGroup`` is entered;
    pytorch/pytorch#166536, which adds it: "Before: AC will always retrigger recompute upon
    every distinct backward"), and neither torch's pipelining nor torchtitan enters one.

    >>> weight_pass_recomputes("fsdp2", "zb-v"), weight_pass_recomputes("textbook", "zb-v")
    (True, False)
    >>> weight_pass_recomputes("fsdp2", "1f1b")
    False
    """
    return str(framework) == Framework.FSDP2 and str(schedule) in ("zb-v", "dualpipev")


SPLIT_RECOMPUTE_CALLS = (
    "PyTorch's pipelining takes each weight's gradient in its own autograd call, so a "
    "checkpoint recomputes once per call"
)
"""Why recomputation differs under a split schedule (torch/distributed/pipelining
``stage_backward_weight``; torch/utils/checkpoint.py: the recomputation is keyed by the call)."""

SPLIT_RECOMPUTE_WHY = {
    "selective": (
        'torchtitan\'s selective checkpoint raises "Trying to backward an extra time" on the '
        "second recomputation (torch/utils/checkpoint.py)"
    ),
    "full": (
        "full recomputation re-runs each block once per weight tensor (12 block forwards for 2 "
        "blocks of 6 weights, measured with torch 2.13.0) and keeps the unused recomputed "
        "tensors until the pass ends"
    ),
}
"""Why each recompute mode is refused under a schedule of :func:`weight_pass_recomputes`."""


def split_recompute_rule(s: object, framework: object, recompute: object, schedule: object,
                         pp: int) -> None:  # fmt: skip
    """Refuse recomputation (``recompute`` ``selective`` or ``full``) under a schedule whose
    weight pass re-runs the checkpointed region (:func:`weight_pass_recomputes`; pp > 1).
    ``s`` (the rules' setting) is not read.

    * ``selective`` (torchtitan's op-level policy, ``SelectiveAC``): the second recomputation
      finds the policy's saved outputs already taken and raises — pytorch/pytorch 0008d77
      ``torch/utils/checkpoint.py`` ``_CachedTorchDispatchMode.__torch_dispatch__``: "Trying to
      backward an extra time. You are only allowed to backward once on any region computed
      under selective activation checkpoint."
    * ``full`` (``FullAC``): it runs, but each block is recomputed once by ``I`` and once more
      for every parameter group of it in ``W`` — measured with torch 2.13.0 (CPU), two blocks
      of six weights each under ``checkpoint(use_reentrant=False, early_stop=False)`` through
      ``stage_backward_input`` and ``stage_backward_weight``: 2 block forwards in ``I``, 12 in
      ``W`` — and each such recomputation's tensors that ``W`` does not read stay referenced
      from the checkpoint's frame until the graph goes (the same probe: the frames' held
      elements grow with every group's call, to about as many copies of a block's saved
      tensors as there are weights). pytorch/pytorch#136766 (a zero-bubble run with
      checkpointing out of memory) was closed by pull request #138119, which frees a retained
      output, not the recomputation per call measured here. Neither the time nor the memory is
      modelled.

    Raises
    ------
    LayoutError
        ``recompute: full with schedule zb-v under framework fsdp2 …``.

    Examples
    --------
    >>> split_recompute_rule(None, "fsdp2", "none", "zb-v", 4)
    >>> try:
    ...     split_recompute_rule(None, "fsdp2", "selective", "dualpipev", 4)
    ... except LayoutError as err:
    ...     print(str(err).split(":")[0])
    recompute
    """
    mode = str(recompute)
    if (
        pp > 1
        and mode in SPLIT_RECOMPUTE_WHY
        and weight_pass_recomputes(str(framework), str(schedule))
    ):
        raise LayoutError(
            f"recompute: {mode} with schedule {schedule} under framework fsdp2 is not modelled: "
            f"{SPLIT_RECOMPUTE_CALLS}, and {SPLIT_RECOMPUTE_WHY[mode]}; use recompute none, or "
            "schedule 1f1b or interleaved"
        )
