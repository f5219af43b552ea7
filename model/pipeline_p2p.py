"""Megatron-Core's interleaved 1F1B timeline with its pipeline sends placed per rank: which sends
each rank waits on, and the step it makes (the oracle of :func:`model.comm.p2p_critical_sends`
and :func:`model.comm.p2p_exposed_sends`).

The orders are :func:`model.schedule.stage_order`'s (Megatron-LM's
``forward_backward_pipelining_with_interleaving``, ``microbatch_group_size_per_vp_stage`` = pp);
the sends are as ``megatron/core/pipeline_parallel/schedules.py`` runs them with
``overlap_p2p_comm`` (Megatron-LM d98e8a64dd, :data:`model.comm.MEGATRON_P2P_CODE`):

* rank r's first ``W_r = min(m·v, 2(pp − r − 1) + (v − 1)·pp)`` forward passes
  (``get_pp_rank_microbatches``) end in a blocking ``send_forward_recv_forward`` and its last
  ``W_r`` backward passes in a blocking ``send_backward_recv_backward``, unless the warm-up flush
  flag; every forward send is waited on when posted under ``forward_wait``
  (``deallocate_pipeline_outputs``, core_v0.18.0 and later);
* any other send runs beside the next pass: its receiver gets the tensor ``send`` after the pass
  ends, its sender goes on at once;
* the last virtual stage's forward and the first's backward send nothing.

A waited-on send keeps its rank for ``send`` after the pass and hands over the tensor when it
ends. The wait for a receiver to post its matching receive (a rendezvous) is not placed: in the
warm-up a receiver posts it when its previous pass ends, as the sender finishes, so it costs
nothing there.
"""

from __future__ import annotations

from fractions import Fraction  # noqa: F401  (the doctests)
from typing import Any

from trainplan.model.pipeline import check_schedule
from trainplan.model.pipeline_sim import Entry, Step, run
from trainplan.model.schedule import stage_order
from trainplan.model.schedule_zb import loop_stage

__all__ = ["interleaved_sends", "interleaved_send_span"]


def interleaved_sends(
    pp: int, m: int, v: int, rank: int, warmup_flush: bool, forward_wait: bool
) -> list[tuple[Step, bool, bool]]:
    """Rank ``rank``'s passes in order, each as ``(step, sends, waits)``: whether the pass sends
    its output to a neighbour and whether the rank waits for that send (the module docstring's
    rules).

    Raises
    ------
    LayoutError
        The interleaved schedule's rules (:func:`model.pipeline.check_schedule`).

    Examples
    --------
    pp 2, m 2, v 2, the last rank: 2 warm-up forwards (chunk 0, blocking), then its chunk-1
    forwards send nothing.

    >>> [(s.kind, s.chunk, sends, waits) for s, sends, waits in interleaved_sends(2, 2, 2, 1, False, False)][:4]
    [('F', 0, True, True), ('F', 0, True, True), ('F', 1, False, False), ('B', 1, True, False)]
    """
    check_schedule(pp, m, "interleaved", v)
    warmup = min(m * v, 2 * (pp - rank - 1) + (v - 1) * pp)
    forwards = backwards = 0
    out = []
    for kind, j, c in stage_order(pp, m, "interleaved", v, rank):
        if kind == "F":
            sends = not (rank == pp - 1 and c == v - 1)
            waits = (forwards < warmup and not warmup_flush) or forward_wait
            forwards += 1
        else:
            sends = not (rank == 0 and c == 0)
            waits = backwards >= m * v - warmup and not warmup_flush
            backwards += 1
        out.append((Step(kind, j, c), sends, sends and waits))
    return out


def interleaved_send_span(
    pp: int,
    m: int,
    v: int,
    t_f: Any,
    t_b: Any,
    send: Any,
    warmup_flush: bool = False,
    forward_wait: bool = True,
) -> Any:
    """The step (the last rank to end; any time unit) of the interleaved timeline with one
    chunk's forward ``t_f``, backward ``t_b`` and each pipeline send ``send``, waited on or run
    beside the next pass as :func:`interleaved_sends` says. Exact for
    :class:`~fractions.Fraction` times.

    Examples
    --------
    pp 2, m 2, v 2, passes 1 and 2, sends free: (m·v + pp − 1)·(t_f + t_b) = 15. Sends of 1/10:
    2·(pp·v − 1) = 6 of them lie on the critical path (:func:`model.comm.p2p_critical_sends`).

    >>> interleaved_send_span(2, 2, 2, Fraction(1), Fraction(2), Fraction(0))
    Fraction(15, 1)
    >>> interleaved_send_span(2, 2, 2, Fraction(1), Fraction(2), Fraction(1, 10))
    Fraction(78, 5)
    """
    orders: list[list[Entry]] = []
    times: list[dict[Step, tuple[Any, Any]]] = []
    zero = send * 0
    for rank in range(pp):
        passes = interleaved_sends(pp, m, v, rank, warmup_flush, forward_wait)
        orders.append([(step,) for step, _, _ in passes])
        times.append(
            {
                step: (
                    (t_f if step.kind == "F" else t_b) + (send if waits else zero),
                    send if sends and not waits else zero,
                )
                for step, sends, waits in passes
            }
        )
    slots = run(
        pp, pp * v, loop_stage(pp), lambda r, e: times[r][e[0]][0], orders=orders,
        latency=lambda r, e: times[r][e[0]][1],
    )  # fmt: skip
    return max(s.end for rank in slots for s in rank)
