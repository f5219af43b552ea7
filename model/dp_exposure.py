"""The data-parallel collectives' time in a step and what of it waits: the once-per-step
traffic and each micro-batch's, the latter phase by phase (the forward's all-gathers under the
forward, the backward's all-gathers and the reduction under the backward).

Written once for exact floats and for arrays of layouts (:mod:`model.xp`): the evaluator's dp
term (:func:`model.terms.dp_time.dp_group_times`) and the search's tables call the same
functions. Re-exported by :mod:`model.step_time`.

Per-micro-batch traffic pass by pass (:func:`microbatch_exposed_seconds`). The frameworks
free each unit after its forward and gather it again before its backward, in calls of its own
(:func:`dp_seconds`; torch ``FSDPParamGroup.unshard`` from ``pre_forward`` and again from
``pre_backward``; Megatron-FSDP's per bucket, ``AllGatherPipeline.all_gather_params``) (torch
``_fully_shard/_fsdp_param_group.py`` at 002a76fb ``FSDPParamGroup.post_forward`` →
``reshard``, ``pre_backward`` → ``unshard``; Megatron-LM ``megatron_fsdp.py`` at d98e8a64dd
``_post_forward`` → ``release_module_parameters``, ``_pre_backward_param_unshard``; DeepSpeed
``parameter_offload.py`` at 38327e07 ``post_sub_module_forward_function`` →
``release_sub_module``, ``pre_sub_module_backward_function`` → ``fetch_sub_module``), so the
backward's gathers and the reduction cannot hide under the forward. Each waits for its
reductions at the end of every backward (torch ``_fsdp_state.py`` at 01c9f4fc
``_root_post_backward_final_callback``: while ``is_last_backward``, True unless
``set_is_last_backward`` says otherwise, which torchtitan at b5bcd76c never calls, the current
stream waits on the reduce-scatters' events; Megatron-FSDP ``_root_post_backward`` →
``grad_reduce_pipeline.reset()`` → ``wait_for_previous_grad_reduce(0)``, every backward under
``optim_grads_params``, whose ``grad_reduce_every_bprop`` ignores ``no_sync``; DeepSpeed
``stage3.py`` ``independent_gradient_partition_epilogue`` →
``reduce_and_partition_stream.synchronize()``, ``stage_1_and_2.py`` the same with
``overlap_comm``), so a backward's surplus cannot hide under the next forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainplan.model.comm_sms import contended_wait
from trainplan.model.mechanisms import Mechanism
from trainplan.model.roofline import Collective, RooflineParams, collective_time
from trainplan.model.schedule_cost import pass_times
from trainplan.model.xp import is_array, maximum, where

__all__ = [
    "DpSeconds",
    "phase_gathers",
    "dp_seconds",
    "microbatch_exposed_seconds",
    "first_forward_seconds",
    "interleaved_gather_seconds",
    "step_exposed_seconds",
    "dp_exposed_seconds",
]


@dataclass(frozen=True, slots=True)
class DpSeconds:
    """Seconds of one group's data-parallel collectives on one GPU (:func:`dp_seconds`): floats
    for one layout, arrays (one element per layout) for the search's columns."""

    step_s: Any
    """The once-per-step traffic (reduction and all-gathers), seconds a step."""
    step_reduce_s: Any
    """Of :attr:`step_s`, the reduction."""
    microbatch_s: Any
    """One micro-batch's traffic (reduction and all-gathers), seconds a micro-batch."""
    forward_s: Any
    """Of :attr:`microbatch_s`, the forward's all-gathers (:func:`phase_gathers`)."""
    microbatch_reduce_s: Any
    """Of :attr:`microbatch_s`, the reduction (the backward's)."""
    step_forward_s: Any = 0.0
    """Of :attr:`step_s`, the all-gathers only the step's first forward can hide
    (:attr:`Mechanism.step_gathers_in_forward`); 0 elsewhere."""
    again_s: Any = 0.0
    """The all-gathers PyTorch's multi-stage pipeline runtime issues beyond the mechanism's count
    (:func:`model.fsdp2_pipeline.runtime_regathers`), seconds a step, apart from
    :attr:`step_s` and :attr:`microbatch_s`; 0 elsewhere."""


def phase_gathers(mech: Mechanism) -> tuple[int, int]:
    """(all-gathers of the weights in one micro-batch's forward, in its backward) of ``mech``'s
    :attr:`Mechanism.gathers_per_microbatch`: the first gathers each unit for its forward, a
    second gathers it again for its backward, the recomputed forward of a checkpointed unit
    included (one gather serves both; see :func:`dp_exposed_seconds`).

    >>> from trainplan.model.mechanisms import mechanism
    >>> phase_gathers(mechanism("fsdp2", 3)), phase_gathers(mechanism("fsdp2", 2))
    ((1, 1), (1, 0))
    >>> phase_gathers(mechanism("megatron", 1))
    (0, 0)
    """
    forward = min(mech.gathers_per_microbatch, 1)
    return forward, mech.gathers_per_microbatch - forward


def dp_seconds(
    mech: Mechanism, step_bytes: Any, microbatch_bytes: Any, group: Any, calls: Any,
    bandwidth: Any, scaleup: Any, p: RooflineParams, forward_share: Any = None,
    gathered: Any = 1.0, again: Any = 0, gather_calls: Any = None, per_domain: Any = 1,
    domains: Any = 0, other: Any = None, caps: tuple[Any, Any] = (0.0, 0.0),
) -> DpSeconds:  # fmt: skip
    """The :class:`DpSeconds` of the mechanism's collectives over ``group`` = dp·cp ranks:
    ``step_bytes`` sent once per step, ``microbatch_bytes`` each micro-batch. Each collective the
    mechanism runs (its reduction, its all-gathers) carries its share of the bytes
    (:meth:`Mechanism.traffic_terms`' bytes per parameter, the all-gathers' × ``gathered``: a
    parameter's mean gathered bytes over its weight bytes, below 1 where FP8 weights gather at a
    byte, :func:`model.fp8_gathers.fp8_gather_saving`): the reduction in ``calls`` equal calls — the
    framework's buckets (:func:`model.comm.dp_collective_calls`) — and each gathering of the weights
    in ``gather_calls`` (None: ``calls``; DeepSpeed ZeRO-3's fetches, ``deepspeed_gather_calls``):
    the step's :attr:`~Mechanism.gathers_per_step` gatherings in ``gathers_per_step × gather_calls``
    calls, a micro-batch's :attr:`~Mechanism.gathers_per_microbatch` in ``gathers_per_microbatch ×
    gather_calls``, each pass's own. Each call is timed by :func:`model.roofline.collective_time` at
    its own message size (NCCL's latency by the group's ``per_domain`` members a domain and
    ``domains``, its node count; ``other`` its; ``caps`` the link's NIC and NVLink). A
    micro-batch's all-gathers are equal: the forward's :func:`phase_gathers`' share, or
    ``forward_share`` where the mechanism :attr:`~Mechanism.regathers_after_forward`
    (:func:`model.fsdp2_pipeline.regather_forward_share`). ``again``: gathers of the weights a step
    beyond the mechanism's (:func:`model.fsdp2_pipeline.runtime_regathers`), in ``step_bytes``, each
    timed as its once-per-step gather. Element-wise."""
    reduce = Collective.ALL_REDUCE if mech.all_reduce else Collective.REDUCE_SCATTER
    reduce_b = mech.reduce_bytes * (2 if mech.all_reduce else 1)
    per_mb = mech.reduce_per_microbatch
    step_kinds = [(reduce, 0 if per_mb else reduce_b)]
    step_kinds.append((Collective.ALL_GATHER, mech.weight_bytes * mech.gathers_per_step))
    mb_kinds = [(reduce, reduce_b if per_mb else 0)]
    mb_kinds.append((Collective.ALL_GATHER, mech.weight_bytes * mech.gathers_per_microbatch))

    each = calls if gather_calls is None else gather_calls
    link = (bandwidth, scaleup, p, per_domain, domains, other)

    def seconds(kinds: list[tuple[Collective, int]], total: Any, gathers: int) -> list[Any]:
        scaled = [b * (gathered if kind is Collective.ALL_GATHER else 1) for kind, b in kinds]
        per_param = sum(scaled)
        out: list[Any] = [0.0, 0.0]  # (reduction, all-gathers)
        for i, ((kind, b), share) in enumerate(zip(kinds, scaled, strict=True)):
            if b:
                n = each * gathers if kind is Collective.ALL_GATHER else calls
                sent = total * (share / per_param) / n
                t = collective_time(kind, group, sent, *link, nic=caps[0], nvlink=caps[1])
                out[i] = n * t
        return out

    if is_array(again) or again:  # their bytes out of the step's: again·w of all it sends
        own = sum(b * (gathered if k is Collective.ALL_GATHER else 1) for k, b in step_kinds)
        step_bytes = step_bytes * own / (own + mech.weight_bytes * again * gathered)
    (reduce_s, gather_s) = seconds(step_kinds, step_bytes, mech.gathers_per_step)
    mb = seconds(mb_kinds, microbatch_bytes, mech.gathers_per_microbatch)
    again_s = again * gather_s / max(mech.gathers_per_step, 1)
    forward = phase_gathers(mech)[0] / max(mech.gathers_per_microbatch, 1)
    if mech.regathers_after_forward:
        if forward_share is None:
            raise ValueError("forward_share: a mechanism that re-gathers after forward needs it")
        forward = forward_share
    first = gather_s if mech.step_gathers_in_forward else 0.0 * gather_s
    return DpSeconds(reduce_s + gather_s, reduce_s, sum(mb), mb[1] * forward, mb[0], first, again_s)


def microbatch_exposed_seconds(
    microbatch_s: Any,
    forward_s: Any,
    reduce_s: Any,
    m: Any,
    window_s: Any,
    tail: Any,
    share: float = 0.0,
) -> Any:
    """Seconds the per-micro-batch collectives (per-micro-batch gradient reduce-scatters,
    ZeRO-3/FSDP gathers) leave exposed over a step's ``m`` micro-batches, each sending
    ``microbatch_s``: ``forward_s`` of it the forward's all-gathers (:func:`phase_gathers`),
    ``reduce_s`` the reduction, the rest the backward's all-gathers.

    Why pass by pass, and why every micro-batch: the module docstring.

    The windows are :func:`model.schedule_cost.pass_times` of ``window_s`` (one micro-batch's
    compute without recomputation): the forward ``F = t/3``, the backward ``B + W = 2t/3``. In
    every micro-batch what exceeds each window waits (:func:`model.comm_sms.contended_wait`,
    ``share`` = ``φ``), and the backward's last bucket's reduction, ``tail``'s share of
    ``reduce_s``, waits whole after the rest: its gradients are ready only when the backward's
    computation ends, and every framework waits for it there (FSDP2, Megatron-FSDP, DeepSpeed
    ZeRO-2/3: the module docstring), so nothing is computed beside it; the last micro-batch
    at least ``tail``'s share of all its traffic. Under recomputation the backward also re-runs
    the forward, which the same gather serves (:attr:`model.mechanism_record.Mechanism.
    gathers_per_microbatch` counts no third; DeepSpeed ZeRO-3's launches are its own walk's,
    :func:`model.deepspeed_fetches.recompute_walk`): its window is longer than ``2t/3`` by the
    recomputed forward, which this rule does not read, so it errs towards exposure there.
    Element-wise for arrays.

    Examples
    --------
    0.5 s a micro-batch, 0.1 of it the forward's gathers and 0.2 the reduction, under 0.6 s
    (forward 0.2, backward 0.4): the forward hides its 0.1, the backward hides the 0.4 − 0.05
    before its last bucket and then waits for that bucket, 0.25 · 0.2 = 0.05; the last
    micro-batch waits 0.25 · 0.5.

    >>> round(microbatch_exposed_seconds(0.5, 0.1, 0.2, 4, 0.6, 0.25), 12)  # 3 · 0.05 + 0.125
    0.275

    Beside computation at φ = 0.1 the backward's 0.35 before the last bucket costs 0.1 · 0.35
    and the bucket waits after it, 0.035 + 0.05, not the larger of 0.1 · 0.4 and 0.05; the
    forward's 0.1 costs 0.01, so each micro-batch 0.095:

    >>> round(microbatch_exposed_seconds(0.5, 0.1, 0.2, 4, 0.6, 0.25, 0.1), 12)  # 3 · 0.095 + 0.125
    0.41

    With 0.3 s of it in the forward, the forward waits 0.3 − 0.2 = 0.1 s though the whole
    fits the micro-batch: the backward's idle link cannot carry the forward's gathers.

    >>> round(microbatch_exposed_seconds(0.5, 0.3, 0.0, 4, 0.6, 0.1), 12)  # 4 · 0.1
    0.4
    """
    t_f, t_b, t_w = pass_times(window_s, window_s, 1)
    forward = maximum(0.0, contended_wait(forward_s, t_f, share))
    last = reduce_s * tail
    backward = maximum(0.0, contended_wait(microbatch_s - forward_s - last, t_b + t_w, share))
    each = forward + backward + last
    return (m - 1) * each + maximum(each, microbatch_s * tail)


def first_forward_seconds(
    gather_s: Any,
    window_s: Any,
    tail: Any,
    share: float = 0.0,
    whole: Any = 0,
    forwards: Any = 1,
) -> Any:
    """Seconds of ``gather_s`` of once-per-step all-gathers that only the step's first forward
    can hide (FSDP2's under a pipeline schedule: the first forward finds the units sharded and
    gathers them unit by unit, the later passes find them whole;
    :attr:`~model.mechanism_record.Mechanism.step_gathers_in_forward`) left waiting: what
    exceeds that forward's window, :func:`model.schedule_cost.pass_times`' ``t/3`` of
    ``window_s`` (:func:`model.comm_sms.contended_wait`, ``share`` = ``φ``), at least the first
    unit's gather, ``tail``'s share, which nothing precedes. Under PyTorch's multi-stage
    pipeline runtime (:func:`model.fsdp2_pipeline.upfront_gather`) ``whole`` of it (the first
    chunk's) waits whole before that forward and the rest hides under ``forwards`` × ``t/3``.
    Element-wise for arrays.

    >>> round(first_forward_seconds(0.8, 1.5, 0.1), 12)  # 0.8 − 1.5/3
    0.3
    >>> round(first_forward_seconds(0.2, 1.5, 0.1, 0.25), 12)  # max(0.25 · 0.2, 0.1 · 0.2)
    0.05
    >>> round(first_forward_seconds(0.8, 1.5, 0.1, 0.0, 0.5, 4), 12)  # 0.4 + max(0, 0.4 − 2)
    0.4
    """
    t_f = pass_times(window_s, window_s, 1)[0]
    first = gather_s * whole + contended_wait(gather_s * (1 - whole), forwards * t_f, share)
    return maximum(first, gather_s * tail)


def interleaved_gather_seconds(
    gather_s: Any, window_s: Any, chunks: Any, group: Any, tail: Any, share: float = 0.0
) -> Any:
    """Seconds of ``gather_s`` of a stage's once-per-step parameter all-gathers left waiting
    where Megatron-Core's interleaved schedule launches them chunk by chunk
    (:func:`model.pipeline_reduce.chunked_param_gathers`; its module docstring has the code):
    ``chunks`` = v equal chunks of ``a = gather_s / v``, each chunk-forward of one micro-batch
    ``f`` = :func:`model.schedule_cost.pass_times`' ``t/3`` of ``window_s`` over v, ``group``
    micro-batches a chunk at a time (``pp``). Chunk 0's gathers hide under its own first forward
    (what exceeds ``f``, at least the first bucket, ``tail``'s share of ``gather_s``), chunk
    1's under chunk 0's other ``group − 1`` forwards, every later chunk's under the previous
    chunk's ``group`` forwards; what exceeds each window waits
    (:func:`model.comm_sms.contended_wait`, ``share`` = ``φ``). Rank 0's windows, the shortest
    (rank ``r`` launches ``r`` forwards earlier). Element-wise for arrays; ``chunks`` ≥ 2.

    Examples
    --------
    GPT-3 175B on 512 H100s (NeMo 24.07, pp 8, v 6): 0.14052 s of gathers a step, 0.02342 a
    chunk; one micro-batch 0.17036 s, a chunk-forward 0.17036/18 = 0.009464 s; 141 buckets,
    φ = 0.15038. Chunk 0 waits 0.02342 − 0.00946 = 0.01396; chunk 1 (window 7 × 0.00946) and
    chunks 2–5 (8 × 0.00946 each) only φ · 0.02342 = 0.00352 each:

    >>> round(interleaved_gather_seconds(0.14052, 0.17036, 6, 8, 1 / 141, 0.15038), 5)
    0.03157
    """
    a = gather_s / chunks
    f = pass_times(window_s, window_s, 1)[0] / chunks
    first = maximum(contended_wait(a, f, share), gather_s * tail)
    second = contended_wait(a, (group - 1) * f, share)
    later = (chunks - 2) * contended_wait(a, group * f, share)
    return first + second + later


def step_exposed_seconds(
    step_s: Any, window_s: Any, tail: Any, share: float, waits: Any, *, step_forward_s: Any,
    chunk_gather_s: Any, chunks: Any, chunk_group: Any, upfront: tuple[Any, Any] = (0, 1),
) -> Any:  # fmt: skip
    """Seconds of the once-per-step traffic ``step_s`` left waiting where it overlaps
    (:func:`dp_exposed_seconds`): ``waits`` whole; ``step_forward_s`` under the step's first
    forward (:func:`first_forward_seconds`, ``upfront`` its last two: PyTorch's multi-stage
    runtime's first chunk); ``chunk_gather_s``, the parameter all-gathers
    Megatron-Core's interleaved schedule launches chunk by chunk under the next step's warm-up
    forwards, ``chunks`` (v) chunks ``chunk_group`` micro-batches at a time
    (:func:`interleaved_gather_seconds`; 0 elsewhere, ``chunks`` and ``chunk_group`` then
    unread); the rest under ``window_s``, at least ``tail``'s share of it
    (:func:`model.comm_sms.contended_wait`, ``share`` = ``φ``). Element-wise for arrays.

    The GPT-3 175B row of :func:`interleaved_gather_seconds`: 0.28104 s a step, its
    reduce-scatter 0.14052 (v = 6: 1/6 of it waits whole, 0.02342; the rest, 0.11710, under one
    micro-batch's 0.17036 s, φ of it) and its gathers by chunk (0.03157): 0.07259 s, where one
    window for the reduction and the gathers together left max(0.25762 − 0.17036, φ · 0.25762)
    = 0.08726, 0.11068 in all.

    >>> round(step_exposed_seconds(0.28104, 0.17036, 1 / 141, 0.15038, 0.02342, step_forward_s=0.0,
    ...                            chunk_gather_s=0.14052, chunks=6, chunk_group=8), 5)
    0.07259
    """
    rest = step_s - waits - step_forward_s - chunk_gather_s
    beyond = maximum(contended_wait(rest, window_s, share), rest * tail)
    first = first_forward_seconds(step_forward_s, window_s, tail, share, *upfront)
    chunked = interleaved_gather_seconds(
        chunk_gather_s, window_s, maximum(chunks, 1), chunk_group, tail, share
    )  # fmt: skip
    return waits + beyond + first + where(chunk_gather_s > 0, chunked, 0.0)


def dp_exposed_seconds(
    step_s: Any,
    microbatch_s: Any,
    m: Any,
    window_s: Any,
    overlapped: Any,
    tail: Any,
    beside_compute: Any = True,
    share: float = 0.0,
    waits: Any = 0.0,
    *,
    forward_s: Any,
    reduce_s: Any,
    step_forward_s: Any,
    upfront: tuple[Any, Any],
    chunk_gather_s: Any,
    chunks: Any,
    chunk_group: Any,
) -> Any:
    """Seconds of data-parallel communication left exposed in a step, by mechanism.

    * Per-micro-batch collectives (``microbatch_s`` each micro-batch, ``forward_s`` of it the
      forward's all-gathers, ``reduce_s`` the reduction) run under their own micro-batch, pass
      by pass: :func:`microbatch_exposed_seconds`.
    * The once-per-step traffic (the distributed optimizer's reduce-scatter and all-gather, a
      DDP all-reduce, FSDP2's reduce-scatter under a pipeline schedule) overlaps the last
      micro-batch's backward and the next step's first forward when the framework overlaps it
      (``overlapped``, element-wise: ``--overlap-grad-reduce`` / ``--overlap-param-gather``,
      FSDP's prefetch): :func:`step_exposed_seconds`, with ``waits`` and the keywords after it;
      else all waits (Megatron-LM 2021, DeepSpeed's pipeline: :func:`model.comm.grad_reduce_overlaps`).
    * Without ``beside_compute`` (DeepSpeed ZeRO-1/2 without ``overlap_comm``,
      :func:`model.comm.reduces_beside_compute`) nothing overlaps. ``share``: ``φ``
      (:func:`model.comm_sms.collective_sm_share`), what waits beyond a window
      :func:`model.comm_sms.contended_wait` ``max(φ·a, a − window)``.
    * ``upfront``: PyTorch's multi-stage runtime's share of ``step_forward_s`` waiting whole and
      the forwards the rest hides under (:func:`model.fsdp2_pipeline.upfront_gather`; else (0, 1)).

    The keyword-only arguments are required (left out, the forward's gathers would be read as
    the backward's, the first forward's or a chunk's as any other step traffic).

    >>> none = dict(forward_s=0, reduce_s=0, step_forward_s=0, upfront=(0, 1), chunk_gather_s=0,
    ...             chunks=1, chunk_group=1)
    >>> dp_exposed_seconds(2.0, 0.0, 8, 1.5, True, 0.1, **none)  # max(2 − 1.5, 0.2)
    0.5
    >>> dp_exposed_seconds(2.0, 0.0, 8, 1.5, False, 0.1, **none)
    2.0
    >>> dp_exposed_seconds(0.0, 0.5, 4, 0.4, True, 0.25, False, **none)  # 4 · 0.5, compute stream
    2.0
    >>> dp_exposed_seconds(3.0, 0.0, 8, 1.5, True, 0.1, True, 0.25, 2.0, **none)  # 2 + max(0.25, 0.1)
    2.25
    >>> dp_exposed_seconds(2.0, 0.0, 8, 1.5, True, 0.1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: dp_exposed_seconds() missing 7 required keyword-only arguments: ...
    """
    kept = dict(step_forward_s=step_forward_s, chunk_gather_s=chunk_gather_s, upfront=upfront)
    step = step_exposed_seconds(step_s, window_s, tail, share, waits, **kept, chunks=chunks, chunk_group=chunk_group)  # fmt: skip
    step = where(overlapped & beside_compute, step, step_s)
    hidden = microbatch_exposed_seconds(microbatch_s, forward_s, reduce_s, m, window_s, tail, share)
    return step + where(beside_compute, hidden, m * microbatch_s)
