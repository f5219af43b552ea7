"""A simulated pipeline step and what is read off it: step time, idle time and bubble, the
micro-batches of activations each rank holds, and the weight gradients it has yet to compute.

Built by :func:`model.schedule.simulate`; the closed forms of :mod:`model.pipeline` and
:mod:`model.pipeline_zb` are checked against these readings in the tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from trainplan.model.pipeline_sim import PassTimes, Slot

__all__ = ["Timeline", "Slot"]


@dataclass(frozen=True, slots=True)
class Timeline:
    """A simulated schedule: each rank's slots in time order.

    ``v`` is the number of chunks a rank holds (interleaving's model chunks, 2 for the V
    placements and for DualPipe's two stages); ``times`` the durations of one chunk's passes
    (classic schedules: forward 1, backward ``backward_ratio``, no separate ``W``).
    """

    pp: int
    m: int
    v: int
    schedule: Any
    times: PassTimes
    slots: tuple[tuple[Slot, ...], ...]
    """``slots[i]`` — rank ``i``'s passes in time order (an overlapped F&B block: two slots)."""

    @property
    def backward_ratio(self) -> Fraction:
        """A full backward over a forward: ``(t_b + t_w)/t_f``."""
        return self.times.of("B") / self.times.of("F")

    @property
    def step_time(self) -> Fraction:
        """End of the last pass (every rank starts at 0), in the durations' unit."""
        return max(s.end for stage in self.slots for s in stage)

    def busy_time(self, stage: int) -> Fraction:
        """Time rank ``stage`` computes (an overlapped block counted once)."""
        return sum(
            (s.end - s.start for s in self.slots[stage] if not (s.overlap and s.kind != "F")),
            Fraction(0),
        )

    def idle_fraction(self, stage: int) -> Fraction:
        """Idle share of the step on rank ``stage`` (the simulated bubble fraction), every rank
        starting the step together after the optimizer step."""
        return 1 - self.busy_time(stage) / self.step_time

    def span(self, stage: int) -> Fraction:
        """Rank ``stage``'s own execution time: its last pass's end minus its first's start."""
        return self.slots[stage][-1].end - self.slots[stage][0].start

    @property
    def span_bubble(self) -> Fraction:
        """The longest rank's execution time minus its compute: the bubble of Qi et al. 2024
        (arXiv 2401.10241, §5: "the largest execution time of all stages"), which holds when
        consecutive steps overlap (their optimizer post-validation removes the step's
        synchronisation, §4); with a synchronised step the idle time is
        ``step_time − busy_time``."""
        return max(self.span(i) - self.busy_time(i) for i in range(self.pp))

    def _events(self, stage: int) -> list[tuple[Fraction, int, int, int, int]]:
        """(time, order, chunk, Δ activations held, Δ weight gradients pending) of rank
        ``stage``; releases sort before acquisitions at the same time."""
        events = []
        for s in self.slots[stage]:
            if s.kind == "F":
                events.append((s.start, 1, s.chunk, 1, 0))
            elif s.kind == "B":
                events.append((s.end, 0, s.chunk, -1, 0))
            elif s.kind == "I":
                events.append((s.end, 0, s.chunk, -1, 1))
            else:
                events.append((s.end, 0, s.chunk, 0, -1))
        events.sort(key=lambda e: (e[0], e[1]))
        return events

    def _states(
        self, stage: int, activation: Sequence[Any], weight_grad: Sequence[Any]
    ) -> list[tuple[Fraction, Any, tuple[int, ...], tuple[int, ...]]]:
        """(t, weight, held per chunk, pending W per chunk) after each event, in the rank's
        order: an instant between two events at the same time is kept (a zero-length ``W``
        still consumes the buffer its ``I`` made — Qi et al. 2024, arXiv 2401.10241, §2: ``W``
        needs the ``M_W`` kept since ``B`` — so the buffer is held while it runs)."""
        held, pending = [0] * self.v, [0] * self.v
        out: list[tuple[Fraction, Any, tuple[int, ...], tuple[int, ...]]] = [
            (Fraction(0), 0, tuple(held), tuple(pending))
        ]
        for t, _, c, dh, dw in self._events(stage):
            held[c] += dh
            pending[c] += dw
            weight = sum(h * a for h, a in zip(held, activation, strict=True))
            weight += sum(p * w for p, w in zip(pending, weight_grad, strict=True))
            out.append((t, weight, tuple(held), tuple(pending)))
        return out

    def _series(
        self, stage: int, activation: Sequence[Any], weight_grad: Sequence[Any]
    ) -> list[tuple[Fraction, Any, tuple[int, ...], tuple[int, ...]]]:
        """:meth:`_states` as a step function: the state after each time point (the last of
        the events at one time)."""
        out: list[tuple[Fraction, Any, tuple[int, ...], tuple[int, ...]]] = []
        for point in self._states(stage, activation, weight_grad):
            out[-1 if out and out[-1][0] == point[0] else len(out) :] = [point]
        return out

    def held_over_time(self, stage: int) -> list[tuple[Fraction, Fraction]]:
        """Micro-batches in flight on rank ``stage`` as a step function ``[(t, held), …]``: from
        a forward's start to the end of its backward (of its ``W`` when the backward is split),
        each chunk counting ``1/v`` of a micro-batch of the rank's layers."""
        ones = [Fraction(1, self.v)] * self.v
        return [(t, w) for t, w, _, _ in self._series(stage, ones, ones)]

    def peak_held(self, stage: int) -> Fraction:
        """Most micro-batches in flight at once on rank ``stage`` (units of
        :meth:`held_over_time`), an instant between two events at one time included (see
        :meth:`_states`)."""
        ones = [Fraction(1, self.v)] * self.v
        return max(w for _, w, _, _ in self._states(stage, ones, ones))

    def peak_chunks_held(self, stage: int) -> int:
        """Most chunk micro-batches in flight at once on rank ``stage`` (forward to last
        backward): the papers' count (DualPipe's ``PP + 1``, ZB-H2's ``2p − 1``)."""
        return int(self.peak_held(stage) * self.v)

    def peak_w_pending(self, stage: int) -> int:
        """Most chunk micro-batches on rank ``stage`` whose input gradient is done and whose
        weight gradient is not: the W buffers held between ``I`` and ``W``."""
        zero = [0] * self.v
        return max(sum(p) for _, _, _, p in self._states(stage, zero, zero))

    def peak_memory(
        self, stage: int, activation: Sequence[Any], weight_grad: Sequence[Any]
    ) -> tuple[Any, tuple[int, ...], tuple[int, ...]]:
        """(peak, activations held per chunk, W buffers per chunk) on rank ``stage`` when one
        micro-batch of chunk ``c`` holds ``activation[c]`` from its forward to its input gradient
        (its full backward) and ``weight_grad[c]`` from its input gradient to its ``W`` — bytes,
        or any unit. Ties go to the earliest time.

        Raises
        ------
        ValueError
            ``activation`` or ``weight_grad`` not of length ``v``.
        """
        best = max(self._states(stage, activation, weight_grad), key=lambda p: p[1])
        return best[1], best[2], best[3]
