"""Gathered units under schedules that compute two model chunks at once.

DualPipe and DualPipeV run, in their steady phase, one chunk's forward and another chunk's
backward as one overlapped block: deepseek-ai/DualPipe 3da1bbe ``dualpipe/dualpipe.py``
``DualPipe._forward_backward_compute_chunk`` (and ``dualpipe/dualpipev.py``, the same method)
calls ``type(module0).overlapped_forward_backward(module0, …, module1, …)`` with ``module0``
the forward chunk and ``module1`` the backward one; the time model here counts that block as
one overlapped pass (:class:`model.pipeline_sim.PassTimes` ``overlapped``, DeepSeek-V3,
arXiv 2412.19437 §3.2.1). Under a ZeRO-3 that gathers its weights layer by layer, each of the
two passes holds its own layer gathered and prefetches its own next one: the gathered units at
the peak are twice one pass's, ``2 × gathered_units`` (current + next of the forward chunk,
current + next of the backward chunk). The backward runs one chunk at a time, so the gradient
reduce-scatter buffers (:attr:`model.mechanism_record.Mechanism.unit_grad_bytes`) stay one
unit's.

Which profiles this reaches (:data:`model.schedule_support.SCHEDULE_SUPPORT`): ``dualpipe``
runs under ``textbook`` only, ``dualpipev`` under ``textbook`` and ``fsdp2``. Under ``fsdp2``
torch.distributed.pipelining gathers each stage whole before its first pass and keeps it until
it leaves its window (:mod:`model.fsdp2_pipeline`, "Chunks held gathered"; both chunks of a
DualPipeV rank), which the memory term already counts as whole weights
(:func:`model.terms.runtime_window.held_whole_params`): no per-unit count to double there.
``zb-v`` runs its forward, backward and weight passes one at a time (torch's
``ScheduleZBVZeroBubble`` has no overlapped action; Qi et al. 2024's V schedule neither): one
pass's units.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from trainplan.model.frameworks import Framework

if TYPE_CHECKING:
    from trainplan.model.mechanism_record import Mechanism

__all__ = ["OVERLAPPED_SCHEDULES", "chunks_at_once", "overlapped_mechanism"]

OVERLAPPED_SCHEDULES = frozenset({"dualpipe", "dualpipev"})
"""Schedules whose steady phase computes a forward and a backward of two chunks at once
(deepseek-ai/DualPipe ``_forward_backward_compute_chunk``)."""


def chunks_at_once(framework: Framework | str, schedule: str) -> int:
    """Model chunks one GPU computes passes of at once whose gathered units are counted per
    unit: 2 under ``textbook`` with a schedule of :data:`OVERLAPPED_SCHEDULES`, else 1 (FSDP2's
    DualPipeV holds its chunks whole already; every other schedule runs one pass at a time).

    >>> chunks_at_once("textbook", "dualpipe"), chunks_at_once("textbook", "zb-v")
    (2, 1)
    >>> chunks_at_once("fsdp2", "dualpipev")
    1
    """
    overlapped = str(schedule) in OVERLAPPED_SCHEDULES
    return 2 if overlapped and Framework(str(framework)) is Framework.TEXTBOOK else 1


def overlapped_mechanism(mech: Mechanism, schedule: str) -> Mechanism:
    """``mech`` with :attr:`~model.mechanism_record.Mechanism.chunks_at_once` set for
    ``schedule`` (:func:`chunks_at_once`): its gathered units counted for each chunk computed at
    once (:meth:`~model.mechanism_record.Mechanism.units_held`).

    Llama 3 405B at tp 4, textbook ZeRO-3 over D = 16: a layer's 3,187,703,808 parameters
    (2 × 16384² for q and o, 2 × 16384 × 1024 for k and v, 3 × 16384 × 53248 for the MLP, two
    norms of 16384) ÷ 4 = 796,925,952 per GPU, 2 B each beyond the shard's 1/16 (the textbook
    counts (D − 1)/D of a unit), 1,494,236,160 B a unit; two units (current + next) a pass, two
    passes at once under DualPipe: 5,976,944,640 B (one pass's: 2,988,472,320 B).

    >>> from fractions import Fraction
    >>> from trainplan.model.mechanisms import mechanism
    >>> m = overlapped_mechanism(mechanism("textbook", 3), "dualpipe")
    >>> m.units_held(796_925_952), m.gathered_what
    (4, 'current + next unit of 2 chunks at once')
    >>> m.memory_terms(Fraction(10**9), 16, Fraction(796_925_952))[3]
    Fraction(5976944640, 1)
    """
    n = chunks_at_once(mech.framework, schedule)
    return mech if n == mech.chunks_at_once else replace(mech, chunks_at_once=n)
