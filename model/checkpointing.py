"""Activation checkpointing of an n-layer chain, walked through step by step
(docs/concepts/conventions.md "Checkpointing walk-through"; Chen et al. 2016, arXiv 1604.06174, §3 — the √n strategy).

Tensors ``x0 … xn``: ``x0`` is the input, layer ``i`` computes ``x_i`` from ``x_{i−1}``. With a
checkpoint every ``k`` layers the chain splits into ``S = ⌈n/k⌉`` segments; segment ``t`` runs
layers ``t·k + 1 … min((t+1)·k, n)`` and its input ``x_{t·k}`` is its checkpoint. Rules of the walk:

* forward: after layer ``i`` its input is discarded unless it is a checkpoint; ``xn`` is kept;
* backward, last segment first: first recompute the segment's layers from its checkpoint (every
  one of them, the last one's internals included, as ``torch.utils.checkpoint`` does), then the
  backward of each layer, last to first; the backward of layer ``i`` frees ``x_i``, and the
  backward of the segment's first layer frees the checkpoint.

Without checkpointing every tensor is kept: ``n + 1`` at the peak. With checkpoints the peak is
``S + k`` when ``k`` divides ``n`` (``n/k + k``; see :func:`peak_held_formula` otherwise), and the
recomputation is one extra forward: ``+1/(1 + r)`` at backward = ``r`` × forward (+1/3 at r = 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.units import shown_number

__all__ = [
    "Step",
    "walk",
    "tensor_labels",
    "checkpoints",
    "peak_held_formula",
    "recompute_overhead",
    "held_over_time",
    "tensor_state",
]

LABELS = ("outputs", "inputs")
MAX_LAYERS = 100_000


@dataclass(frozen=True, slots=True)
class Step:
    """One step of the walk: a layer's forward, recomputed forward, or backward.

    ``held`` lists the tensor indices in memory after the step; ``computed`` / ``recomputed`` /
    ``discarded`` what the step added or freed.
    """

    index: int
    phase: str
    """``forward``, ``recompute`` or ``backward``."""
    layer: int
    held: tuple[int, ...]
    computed: tuple[int, ...] = ()
    recomputed: tuple[int, ...] = ()
    discarded: tuple[int, ...] = ()
    held_without_checkpointing: int = 0
    """Tensors the no-checkpointing run holds at the same point of its pass."""

    def to_dict(self, labels: list[str], ckpts: frozenset[int]) -> dict[str, object]:
        """JSON form with tensors named by ``labels``; ``kept`` = checkpoints held."""

        def names(ix: tuple[int, ...]) -> list[str]:
            return [labels[i] for i in ix]

        return {
            "step": self.index,
            "phase": self.phase,
            "layer": self.layer,
            "computed": names(self.computed),
            "recomputed": names(self.recomputed),
            "discarded": names(self.discarded),
            "kept": names(tuple(i for i in self.held if i in ckpts)),
            "in_memory": names(self.held),
            "held": len(self.held),
            "held_without_checkpointing": self.held_without_checkpointing,
        }


def _check(n: int, k: int) -> None:
    if not isinstance(n, int) or n < 1 or n > MAX_LAYERS:
        raise InputError(
            f"layers: {shown_number(n)} must be a whole number from 1 to {MAX_LAYERS:,}"
        )
    if not isinstance(k, int) or k < 1 or k > n:
        raise InputError(
            f"every: {shown_number(k)} must be a whole number from 1 to layers = {shown_number(n)}"
        )


def checkpoints(n: int, k: int) -> list[int]:
    """Indices of the checkpointed tensors: the inputs of the segments, ``0, k, 2k, …``.

    Examples
    --------
    >>> checkpoints(9, 3)
    [0, 3, 6]
    >>> checkpoints(10, 4)
    [0, 4, 8]
    """
    _check(n, k)
    return list(range(0, n, k))


def tensor_labels(n: int, labels: str = "outputs") -> list[str]:
    """Names of ``x0 … xn``: by layer outputs (``input, out1 … out9``) or inputs (``in1 … in9,
    output``).

    Raises
    ------
    InputError
        When ``labels`` is neither ``outputs`` nor ``inputs``.

    Examples
    --------
    >>> tensor_labels(2), tensor_labels(2, "inputs")
    (['input', 'out1', 'out2'], ['in1', 'in2', 'output'])
    """
    if labels not in LABELS:
        raise InputError(f"labels: {labels!r} must be one of {', '.join(LABELS)}")
    if labels == "outputs":
        return ["input"] + [f"out{i}" for i in range(1, n + 1)]
    return [f"in{i + 1}" for i in range(n)] + ["output"]


def walk(n: int, k: int) -> list[Step]:
    """Every step of one forward and backward pass of ``n`` layers checkpointed every ``k``.

    Returns
    -------
    list of Step
        ``n`` forward steps, then per segment (last first) its recompute steps and its backward
        steps; ``3n`` steps in all.

    Raises
    ------
    InputError
        ``k < 1``, ``k > n`` or ``n < 1``.

    Examples
    --------
    >>> steps = walk(9, 3)
    >>> len(steps), max(len(s.held) for s in steps)
    (27, 6)
    """
    ckpts = set(checkpoints(n, k))
    held = {0}
    steps: list[Step] = []

    def add(phase: str, layer: int, line: int, **kw: tuple[int, ...]) -> None:
        steps.append(
            Step(
                len(steps) + 1,
                phase,
                layer,
                tuple(sorted(held)),
                **kw,
                held_without_checkpointing=line,
            )
        )

    for i in range(1, n + 1):
        held.add(i)
        gone: tuple[int, ...] = () if (i - 1) in ckpts else (i - 1,)
        held.difference_update(gone)
        add("forward", i, i + 1, computed=(i,), discarded=gone)
    for a in sorted(ckpts, reverse=True):
        b = min(a + k, n)
        for i in range(a + 1, b + 1):
            held.add(i)
            add("recompute", i, b + 1, recomputed=(i,))
        for i in range(b, a, -1):
            gone = (i - 1, i) if i == a + 1 else (i,)
            held.difference_update(gone)
            add("backward", i, i - 1 if i == 1 else i, discarded=gone)
    return steps


def peak_held_formula(n: int, k: int) -> int:
    """Most tensors held at once with a checkpoint every ``k`` of ``n`` layers.

    ``S = ⌈n/k⌉`` checkpoints, ``r = n − (S − 1)·k`` layers in the last segment: the peak is during
    the last segment's recompute (``S + r``) or the one before it (``S − 1 + k``). When ``k``
    divides ``n`` that is ``n/k + k`` (Chen et al. 2016 §3, minimised at ``k = √n``).

    Examples
    --------
    >>> peak_held_formula(9, 3), peak_held_formula(100, 10), peak_held_formula(10, 3)
    (6, 20, 6)
    """
    _check(n, k)
    s = -(-n // k)
    last = n - (s - 1) * k
    return max(s + last, s - 1 + k) if s > 1 else 1 + n


def recompute_overhead(backward_ratio: Fraction | int = 2) -> Fraction:
    """Extra compute of checkpointing: one more forward over forward + backward, ``1/(1 + r)``.

    Dimensionless; independent of ``k`` (every layer is recomputed once).

    Examples
    --------
    >>> recompute_overhead()
    Fraction(1, 3)
    """
    r = Fraction(backward_ratio)
    if r <= 0:
        raise InputError(f"backward_ratio: {backward_ratio} must be positive")
    return 1 / (1 + r)


def held_over_time(
    n: int, k: int | None, backward_ratio: Fraction | int = 2
) -> list[tuple[Fraction, int]]:
    """Tensors held against time (forward = 1 unit, backward = ``r`` units) as ``[(t, held)]``.

    ``k = None`` is the no-checkpointing line (every tensor kept; ``n + 1`` at the peak).

    Examples
    --------
    >>> [h for _, h in held_over_time(2, None)]
    [1, 2, 3, 2, 0]
    """
    r = Fraction(backward_ratio)
    if k is None:
        _check(n, 1)
        forward = [(Fraction(i), i + 1) for i in range(n + 1)]
        backward = [(n + r * (n - i + 1), i if i > 1 else 0) for i in range(n, 0, -1)]
        return forward + backward
    series, t = [(Fraction(0), 1)], Fraction(0)
    for s in walk(n, k):
        t += r if s.phase == "backward" else 1
        series.append((t, len(s.held)))
    return series


def tensor_state(step: dict, name: str) -> str:
    """What a step does to tensor ``name``: ``recomputed``, ``kept`` (a checkpoint), ``held``,
    ``discarded`` (freed at this step) or ``free`` — in that precedence (the walk-through's
    cells, drawn as text and as frames)."""
    for key, state in (
        ("recomputed", "recomputed"),
        ("kept", "kept"),
        ("in_memory", "held"),
        ("discarded", "discarded"),
    ):
        if name in step[key]:
            return state
    return "free"
