"""What a split-backward pipeline schedule costs a layout: its pass times from a stage's
micro-batch, the span of the pipeline section of a step, DualPipe's overlapped block, the
activations each rank holds, and the rules of the forms' domain.

The cost model (:func:`model.terms.step.pipeline_term`, :func:`model.terms.activations`,
:func:`model.terms.state`) reads these; the timelines of :func:`model.schedule.simulate` check
them (tests/model/test_schedule_cost.py), and stand in, cached, where no closed form is known.

Pass times. A transformer layer's backward is two GEMMs per forward GEMM, one for the input
gradient and one for the weight gradient, each as many FLOPs as the forward one, so Qi et al.
2024 (arXiv 2401.10241, §2, Figure 1 and Table 1: ``T_F ≈ T_B ≈ T_W``) take the three passes
equal; a recomputed forward runs just before the input-gradient pass that needs it
(Megatron-LM's ``CheckpointFunction.backward``; PyTorch's ``checkpoint``), so it joins ``B``.
Hence, for one micro-batch on one pipeline rank whose micro-batch takes ``t_mb`` seconds, of
which ``t_plain`` without recomputation: ``F = W = t_plain/3`` and ``B = t_mb − 2·t_plain/3``,
each split over the rank's ``c`` chunks (:func:`pass_times`). The attention core's backward
has no weight gradient; the equal split puts a third of it in ``W`` (the papers' own
approximation; the roofline's per-operation times would refine it).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.errors import LayoutError
from trainplan.model.pipeline import (
    LAYOUT_CHUNKS,
    SPLIT_BACKWARD,
    Schedule,
    check_schedule,
    timeline_chunks,
)
from trainplan.model.pipeline_sim import PassTimes
from trainplan.model.pipeline_zb import check_split_schedule
from trainplan.model.schedule import split_step_time
from trainplan.model.schedule_support import check_schedule_framework
from trainplan.model.xp import (
    all_equal,
    as_float_array,
    elementwise,
    exact,
    maximum,
    minimum,
)

__all__ = [
    "pass_times",
    "dualpipe_block",
    "split_span",
    "simulated_span",
    "in_flight_units",
    "check_schedule_domain",
    "check_split_layout",
    "OVERLAPS_FORWARD_BACKWARD",
]

RATIO_DENOMINATOR = 64
"""The simulated spans are exact for pass times in ratios of whole numbers; a layout's ratios
``t_b/t_f``, ``t_w/t_f``, ``t_fb/t_f`` are rounded to the nearest fraction with a denominator up
to this (off by less than ``1/(64·q)`` of a forward pass for a denominator q: under 0.1 % of a
pass), so that one timeline serves every layout of nearly the same shape of times and the
search's tables stay fast."""

OVERLAPS_FORWARD_BACKWARD = frozenset({"textbook"})
"""Framework profiles whose DualPipe/DualPipeV overlapped F&B block runs the two chunks'
computation and communication at once. deepseek-ai/DualPipe (3da1bbe, ``dualpipe/dualpipe.py``
``_forward_backward_compute_chunk``) hands both chunks to the model's own
``overlapped_forward_backward`` (its README: "you will need to implement a custom
``overlapped_forward_backward`` method"), as DeepSeek-V3's HAI-LLM does (the report §3.2.1) —
the ``textbook`` profile, which runs the papers' schedules. torchtitan (``fsdp2``, b5bcd76)
runs ``DualPipeV`` through torch.distributed.pipelining, whose ``OVERLAP_F_B`` action is the
forward then the backward unless a custom function is registered: only the experimental
``torchtitan/experiments/graph_trainer/graph_pp/runner.py`` registers one
(``runtime._handle_overlap_fw_bw``), so under ``fsdp2`` the block takes ``F + B + W``."""


def pass_times(t_mb: Any, t_plain: Any, chunks: int) -> tuple[Any, Any, Any]:
    """``(t_f, t_b, t_w)`` seconds of one chunk's forward, input-gradient backward (with the
    recomputed forward) and weight-gradient backward for one micro-batch, from a rank's
    micro-batch ``t_mb`` (seconds, forward + backward + recomputation) and the same without
    recomputation ``t_plain``, over ``chunks`` chunks of equal layers (module docstring).
    Scalars or arrays.

    Examples
    --------
    >>> pass_times(3.0, 3.0, 1)
    (1.0, 1.0, 1.0)
    >>> pass_times(4.0, 3.0, 2)
    (0.5, 1.0, 0.5)
    """
    third = t_plain / 3
    return third / chunks, (t_mb - 2 * third) / chunks, third / chunks


def dualpipe_block(
    t_f: Any, t_b: Any, t_w: Any, exposed: Any, hideable: Any, contention: Any = 0.0
) -> Any:
    """Seconds of DualPipe's overlapped block (the report's ``F&B``): one micro-batch's forward
    chunk beside another's full backward chunk, when each chunk's communication runs during the
    other's computation (DeepSeek-V3 report §3.2.1, Figure 4: "both all-to-all and PP
    communication can be fully hidden"). ``t_f``, ``t_b``, ``t_w``: the chunks' passes, with
    ``exposed`` seconds of communication left waiting in them by the framework's own overlap;
    ``hideable``: all the communication seconds of the two chunks (the expert all-to-all's
    dispatch and combine, forward and backward). The block is the longer of the computation
    (``t_f + t_b + t_w − exposed``) and the communication, and at least the longer of its two
    halves, ``max(t_f, t_b + t_w)``. Above ``t_f + t_b + t_w`` the communication paces it
    (the timeline takes at most ``t_f + t_b + t_w``; the caller adds the rest,
    :func:`model.terms.step.schedule_span`). ``contention``: the computation the communication
    kernels' SMs leave over, ``φ·a`` for ``a`` seconds of the dispatcher's all-to-all
    (:mod:`model.comm_sms`: DeepEP's 20 blocks, ``φ`` = 0.249 as measured on 132 SMs), added to
    the computation's side.

    Examples
    --------
    >>> dualpipe_block(1.0, 1.0, 1.0, 0.5, 0.8)
    2.5
    >>> dualpipe_block(1.0, 1.0, 1.0, 0.5, 3.5)
    3.5
    >>> dualpipe_block(1.0, 1.0, 1.0, 0.5, 0.8, 0.2)  # 2.5 + 0.2: the SMs the dispatch holds
    2.7
    """
    block = maximum(t_f + t_b + t_w - exposed + contention, hideable)
    return maximum(block, maximum(t_f, t_b + t_w))


def check_schedule_domain(schedule: Schedule | str, pp: int, m: int) -> None:
    """The micro-batch counts a split-backward schedule's cost forms hold for, beyond its own
    rules (:func:`model.pipeline_zb.check_split_schedule`): ZB-H1 ``m >= pp`` (Qi et al. 2024
    Table 2); ZB-H2 and ZB-V ``m >= 2·pp − 1`` (their warm-up fills ``2·pp − 1`` micro-batches);
    DualPipe and DualPipeV ``m >= 2·pp`` (their own rule). Others: nothing.

    Raises
    ------
    LayoutError
        ``num_microbatches: 4 must be at least 2·pp − 1 = 7 under zb-v``.

    Examples
    --------
    >>> check_schedule_domain("zb-h1", 4, 4)
    """
    name = str(schedule)
    least = {"zb-h1": pp, "zb-h2": 2 * pp - 1, "zb-v": 2 * pp - 1}.get(name, 0)
    rule = {"zb-h1": "pp", "zb-h2": "2·pp − 1", "zb-v": "2·pp − 1"}.get(name, "")
    if m < least:
        raise LayoutError(
            f"num_microbatches: {m} must be at least {rule} = {least} under {name} (the "
            "schedule's warm-up fills that many)"
        )


def check_split_layout(pp: int, m: int, schedule: Schedule | str, v: int, framework: str) -> None:
    """The framework's and the schedule's rules on a layout, in one place: the framework runs the
    schedule, whichever it is, when there is a pipeline (pp > 1;
    :func:`model.schedule_support.check_schedule_framework`: Megatron-Core has no GPipe,
    DeepSpeed no interleaving); for a split-backward schedule also the layout's chunks per rank
    (:func:`model.pipeline.check_schedule`), the schedule's own rules
    (:func:`model.pipeline_zb.check_split_schedule`, on the timeline's chunks) and the cost
    forms' domain (:func:`check_schedule_domain`).

    Raises
    ------
    LayoutError
        The first rule broken, naming it.

    Examples
    --------
    >>> check_split_layout(16, 64, "dualpipe", 1, "textbook")
    >>> check_split_layout(4, 8, "gpipe", 1, "megatron")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: schedule: gpipe does not run under framework megatron ...
    """
    sched = Schedule(str(schedule))
    if sched not in SPLIT_BACKWARD:
        if pp > 1:  # without a pipeline the schedules coincide (no pipeline schedule runs)
            check_schedule_framework(sched.value, framework, pp, m, v)
        return
    check_schedule(pp, m, sched, v)
    check_split_schedule(pp, m, sched.value, timeline_chunks(sched, v))
    check_schedule_framework(sched.value, framework, pp, m)
    check_schedule_domain(sched, pp, m)


def _ratio(x: float) -> Fraction:
    return Fraction(x).limit_denominator(RATIO_DENOMINATOR)


@lru_cache(maxsize=4096)
def _timeline_step(
    schedule: str, pp: int, m: int, b: Fraction, w: Fraction, fb: Fraction | None
) -> Fraction:
    v = timeline_chunks(schedule, LAYOUT_CHUNKS[Schedule(schedule)])
    return split_step_time(pp, m, schedule, v, PassTimes(Fraction(1), b, w, fb))


def simulated_span(
    schedule: str, pp: int, m: int, b: Fraction, w: Fraction, fb: Fraction | None
) -> Fraction:
    """Step time of the timeline (:func:`model.schedule.simulate`) of ``schedule`` on ``pp``
    ranks with ``t_f = 1``, ``t_b = b``, ``t_w = w``, DualPipe's block ``fb``, every rank
    starting together; at ``m`` above ``2·pp + 2`` from the timelines at ``2·pp`` and
    ``2·pp + 2`` — the step grows by the same time with each further micro-batch once the
    steady phase runs (checked against the full timeline in the tests). The timelines are
    cached, so one pair serves every ``m`` of a shape of times.

    Examples
    --------
    >>> simulated_span("zb-v", 4, 8, Fraction(1), Fraction(1), None)
    Fraction(51, 1)
    """
    base = 2 * pp
    if m <= base + 2:
        return _timeline_step(schedule, pp, m, b, w, fb)
    first = _timeline_step(schedule, pp, base, b, w, fb)
    second = _timeline_step(schedule, pp, base + 2, b, w, fb)
    return first + (second - first) * Fraction(m - base, 2)


@lru_cache(maxsize=65536, typed=True)
def _simulated_one(
    schedule: str, pp: int, m: int, f: float, b: float, w: float, fb: float | None
) -> float:
    """:func:`simulated_span` scaled to seconds for one layout: the pass times ``f``, ``b``,
    ``w`` (and DualPipe's block ``fb``; None: none) as ratios to ``t_f``
    (:data:`RATIO_DENOMINATOR`). Cached: a pure function of its numbers, which the search's
    tables repeat across thousands of rows."""
    rb, rw = _ratio(b / f), _ratio(w / f)
    block = None
    if fb is not None:  # rounded into PassTimes' range [max(1, b + w), 1 + b + w]
        block = min(max(_ratio(fb / f), Fraction(1), rb + rw), 1 + rb + rw)
    return f * float(simulated_span(schedule, pp, m, rb, rw, block))


def _simulated(schedule: str, pp: int, m: Any, f: Any, b: Any, w: Any, fb: Any) -> Any:
    return elementwise(
        lambda mi, fi, bi, wi, fbi: _simulated_one(
            schedule, pp, int(mi), float(fi), float(bi), float(wi), fbi
        ),
        m,
        f,
        b,
        w,
        fb,
    )


def split_span(
    schedule: Schedule | str, pp: int, m: int, t_f: Any, t_b: Any, t_w: Any, t_fb: Any = None
) -> Any:
    """Seconds of the pipeline section of a step under a split-backward schedule (every rank
    starts together after the optimizer step; the last pass's end): ``pp`` ranks, ``m``
    micro-batches (DualPipe: both directions together), one chunk's passes ``t_f``, ``t_b``,
    ``t_w`` and DualPipe's block ``t_fb`` (None: ``t_f + t_b + t_w``). Scalars or arrays.

    * ZB-H1 (``v = 1``, ``m >= pp``): ``m·(t_f + t_b + t_w) + (pp − 1)·max(t_f, t_b, t_f + t_b
      − t_w)`` (:func:`model.pipeline_zb.zb_h1_bubble`; Qi et al. 2024 Table 2).
    * ZB-H2 (``m >= 2·pp − 1``, ``t_w <= t_f``): ``m·(t_f + t_b + t_w) + (pp − 1)·max(t_f, t_f
      + t_b − 2·t_w)``, its synchronised idle (:func:`model.pipeline_zb.zb_h2_bubble`; the
      span's zero bubble needs steps to overlap through optimizer post-validation, not
      modelled).
    * ZB-V at ``t_f = t_w`` (the cost model's split, :func:`pass_times`), ``m >= 2·pp − 1``:
      ``2·m·(t_f + t_b + t_w) + (pp − 1)·max(t_b, 2·(t_b − t_w))`` — read off the order run on
      symbolic durations (the maximum of linear forms in ``t_f = t_w`` and ``t_b − t_w``: at
      pp 4, 8, 16 and m 2·pp … 4·pp, every form ``2m·(3t + r) + 2(pp − 1)·r + j·(t − r)``,
      ``0 <= j <= pp − 1``); the tests check it against the timeline. At ``t_b = t_w`` it is
      Qi et al. 2024 §6's zero span bubble plus the ramp ``(pp − 1)·t``.
    * DualPipe, DualPipeV (and ZB-V at other times): the timeline, cached
      (:func:`simulated_span`): no closed form holds off the papers' equal-times domain
      (:func:`model.pipeline_zb.dualpipe_bubble`).

    Raises
    ------
    LayoutError
        A schedule without the split backward.

    Examples
    --------
    >>> split_span("zb-h1", 4, 8, 1.0, 1.0, 1.0)
    27.0
    >>> split_span("dualpipe", 4, 8, 1.0, 1.0, 1.0, 2.0)
    22.0
    """
    sched = Schedule(str(schedule))
    if sched not in SPLIT_BACKWARD:
        raise LayoutError(f"schedule: {sched} does not split the backward")
    serial = m * (t_f + t_b + t_w)
    if sched is Schedule.ZB_H1:
        return as_float_array(serial + (pp - 1) * maximum(maximum(t_f, t_b), t_f + t_b - t_w))
    if sched is Schedule.ZB_H2:
        return as_float_array(serial + (pp - 1) * maximum(t_f, t_f + t_b - 2 * t_w))
    if sched is Schedule.ZB_V and all_equal(t_f, t_w):
        return as_float_array(2 * serial + (pp - 1) * maximum(t_b, 2 * (t_b - t_w)))
    return _simulated(sched.value, pp, m, t_f, t_b, t_w, t_fb)


def in_flight_units(schedule: Schedule | str, pp: int, m: Any) -> Any:
    """Micro-batches of a rank's activations (all its chunks' layers for one micro-batch) held
    at its peak under a split-backward schedule, the weight-gradient buffers included (Qi et
    al. 2024 Table 2 counts a micro-batch's activations ``M_B`` until its ``W``): ZB-H1
    ``min(pp, m)``; ZB-H2 ``2·pp − 1``; ZB-V ``pp`` (``2·pp`` chunks of half the rank's
    layers); DualPipe ``pp + 1`` (chunks of one stage, the rank holding one stage's layers in
    the split); DualPipeV ``pp + 1/2`` (``2·pp + 1`` half-rank chunks) —
    :func:`model.pipeline_zb.chunks_in_flight` over the chunks a rank's layers make up; the
    same on every rank. Exact; ``m`` a whole number or a column of them (the search's).

    Examples
    --------
    >>> in_flight_units("dualpipev", 16, 64), in_flight_units("zb-v", 4, 8)
    (Fraction(33, 2), Fraction(4, 1))
    """
    name = Schedule(str(schedule))
    if name is Schedule.ZB_H1:
        return exact(minimum(pp, m))
    # exact(): Fractions for the evaluator, floats (whole or halves: exact) for the search's
    # arrays, which a Fraction would turn into arrays of Python objects
    return {
        Schedule.ZB_H2: exact(2 * pp - 1),
        Schedule.ZB_V: exact(pp),
        Schedule.DUALPIPE: exact(pp + 1),
        Schedule.DUALPIPE_V: exact(2 * pp + 1) / 2,
    }[name]
