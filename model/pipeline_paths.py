"""Lower bounds of the one-chunk order's step (:mod:`model.pipeline_onef`) that are linear in the
stage times, and the path that gives one split its step: what the per-stage search proves its
1F1B and GPipe splits by (:mod:`optimizer.stage_paths`).

The derivation. :func:`model.pipeline_onef.onef_steps` is the longest path of a graph whose
nodes are the passes (rank i's forward or backward of micro-batch j, weighted by its time
``f_i`` or ``b_i``) and whose edges are the order's waits: each pass on a rank after the pass
before it on that rank (Megatron-Core's ``forward_backward_pipelining_without_interleaving``:
``w_i = min(pp − i − 1, m)`` warm-up forwards, then forward ``w_i + q`` and backward ``q`` in
turn, then the cool-down's backwards; GPipe ``w_i = m``), a forward after the rank before's
forward of the same micro-batch, a backward after the rank after's backward of the same
micro-batch. The graph does not depend on the times, only on pp, m and the schedule. A path's
length is the sum of its passes' times, ``Σ_i (a_i·f_i + c_i·b_i)`` with ``a_i``, ``c_i`` the
counts of rank i's forwards and backwards on it (a :data:`Path`): linear in the times, with
whole non-negative coefficients and no constant. So

* every path's counts bound the step from below, for every split at once (times are never
  negative, so the passes of any sub-sequence of a path bound it too), and the step is the
  largest of them: convex, piecewise linear and positively homogeneous in the times;
* at one split, a longest path's counts give the step itself (:func:`critical_path`: the order's
  own recursion, :func:`model.pipeline_onef.onef_steps`, run on values that remember which
  pass each end came from, so no second copy of the order is written here).

The family every search starts from (:func:`onef_paths`), for each rank k (``T_i = f_i + b_i``):

* through k: micro-batch 0's forwards on ranks 0 … k − 1 (each waits for the one before),
  every pass of rank k (its first is forward 0, its last backward m − 1), micro-batch m − 1's
  backwards on ranks k − 1 … 0: ``m·T_k + Σ_{i<k} T_i``; at k = pp − 1 on stages alike it is
  ``(m + pp − 1)(f + b)``, the step (Narayanan et al. 2021 §2.2), so the family's largest equals
  the step where the stages take equal time;
* the round trip to k: micro-batch 0's forwards on every rank, its backwards on ranks
  pp − 1 … k + 1, rank k from its backward 0 to its last pass (the m backwards and the
  ``max(0, m − 1 − w_k)`` forwards after its first backward), micro-batch m − 1's backwards on
  ranks k − 1 … 0: ``Σ_i f_i + Σ_{i≠k} b_i + (1 + max(0, m − 1 − w_k))·f_k + m·b_k``, the bound
  where a slow stage's warm-up does not cover the round trip through the stages after it.

Neither family is the step in general (tested against :func:`model.pipeline_onef.onef_steps` on
random stages: lower ≤ step ≤ the closed form ``(m + pp − 1)·max T_i``, equal on stages alike);
the search adds each split's own :func:`critical_path` as it meets it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainplan.model.pipeline import Schedule
from trainplan.model.pipeline_onef import onef_steps, warmup

__all__ = ["Path", "onef_paths", "path_seconds", "critical_path"]

Path = tuple[tuple[int, ...], tuple[int, ...]]
"""A path's counts: (each rank's forwards on it, each rank's backwards on it), ``pp`` whole
numbers each; its length is ``Σ_i a_i·f_i + c_i·b_i`` (:func:`path_seconds`)."""


def _check(pp: int, m: int) -> None:
    if pp < 1 or m < 1:
        raise ValueError(f"pipeline_paths: pp {pp}, m {m}: both at least 1")


def onef_paths(pp: int, m: int, schedule: str = Schedule.ONE_F_ONE_B.value) -> tuple[Path, ...]:
    """The module docstring's two paths per rank k (through k, the round trip to k), each once,
    for ``pp`` ranks, ``m`` micro-batches under ``schedule`` (``1f1b`` or ``gpipe``).

    Raises
    ------
    ValueError
        ``pp`` or ``m`` below 1.

    Examples
    --------
    pp 2, m 3: through rank 0 (its 3 passes each way), the round trip to rank 0 (its forward 0,
    the one forward after its first backward, its 3 backwards; rank 1's forward 0 and backward
    0), through rank 1 (rank 0's first forward and last backward, then rank 1's 3 and 3; the
    round trip to the last rank is the same path):

    >>> onef_paths(2, 3)
    (((3, 0), (3, 0)), ((2, 1), (3, 1)), ((1, 3), (1, 3)))
    """
    _check(pp, m)
    out: list[Path] = []
    for k in range(pp):
        through = (
            tuple(1 if i < k else m if i == k else 0 for i in range(pp)),
            tuple(1 if i < k else m if i == k else 0 for i in range(pp)),
        )
        after = max(0, m - 1 - warmup(pp, m, k, schedule))
        trip = (
            tuple(1 + after if i == k else 1 for i in range(pp)),
            tuple(m if i == k else 1 for i in range(pp)),
        )
        for path in (through, trip):
            if path not in out:
                out.append(path)
    return tuple(out)


def path_seconds(path: Path, forward: Sequence[Any], backward: Sequence[Any]) -> Any:
    """A path's length in the unit of the times: ``Σ_i a_i·forward_i + c_i·backward_i``.

    >>> path_seconds(((1, 3), (1, 3)), [10.0, 1.0], [10.0, 1.0])
    26.0
    """
    total: Any = 0
    for a, c, f, b in zip(path[0], path[1], forward, backward, strict=True):
        total = total + a * f + c * b
    return total


class _Pass:
    """One pass of a rank in :func:`critical_path`'s run: its time and (rank, 0 forward or 1
    backward)."""

    __slots__ = ("value", "key")

    def __init__(self, value: float, key: tuple[int, int]) -> None:
        self.value, self.key = value, key

    def __radd__(self, start: Any) -> _End:
        return _End(float(start) + self.value, self.key, None)


class _End:
    """A pass's end in :func:`critical_path`'s run: its instant, the pass and the end it started
    after (the one :func:`max` kept: the later, the first of equals)."""

    __slots__ = ("value", "key", "before")

    def __init__(self, value: float, key: tuple[int, int], before: _End | None) -> None:
        self.value, self.key, self.before = value, key, before

    def __add__(self, step: _Pass) -> _End:
        return _End(self.value + step.value, step.key, self)

    def __gt__(self, other: Any) -> bool:
        return self.value > (other.value if isinstance(other, _End) else other)

    def __lt__(self, other: Any) -> bool:
        return self.value < (other.value if isinstance(other, _End) else other)


def critical_path(
    pp: int,
    m: int,
    forward: Sequence[float],
    backward: Sequence[float],
    schedule: str = Schedule.ONE_F_ONE_B.value,
) -> tuple[float, Path]:
    """(the step, a longest path's counts) of the one-chunk order on one split's stages
    (``forward``, ``backward``: each stage's passes of one micro-batch, ``pp`` numbers, any
    unit): :func:`model.pipeline_onef.onef_steps` run round by round on values that keep the
    end each pass started after, then walked back from the first rank's last backward. The
    step equals :func:`model.pipeline_onef.onef_steps`' (which jumps over the settled steady
    phase, so to a float's rounding); the path's length is the step. Refuses what
    :func:`model.pipeline_onef.onef_steps` refuses (``ValueError``: pp or m below 1, times not
    pp long).

    A slow first stage's passes are the path (the module docstring's through rank 0):

    >>> critical_path(2, 5, [10.0, 1.0], [10.0, 1.0])
    (100.0, ((5, 0), (5, 0)))
    """
    fw = [_Pass(float(x), (i, 0)) for i, x in enumerate(forward)]
    bw = [_Pass(float(x), (i, 1)) for i, x in enumerate(backward)]
    end = onef_steps(pp, m, fw, bw, schedule, settle=False)
    counts = [[0] * pp, [0] * pp]
    node: _End | None = end
    while node is not None:
        counts[node.key[1]][node.key[0]] += 1
        node = node.before
    return end.value, (tuple(counts[0]), tuple(counts[1]))
