"""Lower bounds of the interleaved order's step (:mod:`model.pipeline_uneven`) that are linear in
the model chunks' times, and the path that gives one layout its step: what the per-stage search
proves its interleaved splits by (:mod:`optimizer.stage_exact`), as :mod:`model.pipeline_paths`
does for the one-chunk order.

The derivation. :func:`model.pipeline_uneven.interleaved_steps` is the longest path of a graph
whose nodes are the passes (rank i's forward or backward of its chunk c for one micro-batch,
weighted by that chunk's time ``f_{i,c}`` or ``b_{i,c}``) and whose edges are the order's waits
(Megatron-Core's ``forward_backward_pipelining_with_interleaving``, Megatron-LM d98e8a64dd
``megatron/core/pipeline_parallel/schedules.py``: each pass after the pass before it on its
rank in ``get_schedule_table``'s order, a forward after the rank before's forward of the same
index, the first rank's chunk c > 0 after the last rank's chunk c − 1, a backward after the
rank after's, the last rank's last chunk after its own forward;
:func:`model.pipeline_uneven.order_graph`). The graph depends on pp, v and m only, never on the
times, so a path's length is ``Σ_{i,c} a_{i,c}·f_{i,c} + b'_{i,c}·b_{i,c}`` with whole counts
``a``, ``b'`` of its passes of each chunk (a :data:`model.pipeline_paths.Path` over the pp·v
chunks, rank i's chunk c at ``i·v + c``): linear, non-negative, no constant. So

* every path's counts bound the step from below for every layout of the same (pp, v, m), and
  the step is the largest of them (finitely many): convex, piecewise linear, positively
  homogeneous in the chunk times — so a solver that holds ``P`` above every path it has met and
  adds each answer's own longest path (:func:`critical_path`) until its answer's path is already
  there minimises the step itself (:mod:`optimizer.stage_exact`);
* at one layout a longest path's counts give the step (:func:`critical_path`: the order's own
  graph, :func:`model.pipeline_uneven.order_graph`, run as
  :func:`~model.pipeline_uneven.interleaved_steps` runs it, each pass remembering which of its
  two waits it started after, then walked back from the pass that ends last).

The family every search starts from (:func:`interleaved_paths`), for each rank k: micro-batch
0's chunk-0 forwards on ranks 0 … k − 1 (each waits for the one before), every pass of rank k
(its first is that forward of its chunk 0, its last the backward of the last micro-batch's
chunk 0, backwards taking the chunks in reverse), then that backward on ranks k − 1 … 0:
``m·Σ_c (f_{k,c} + b_{k,c}) + Σ_{i<k} (f_{i,0} + b_{i,0})``. On chunks alike (``f/v``,
``b/v`` each) through the last rank it is ``m·(f + b) + (pp − 1)·(f + b)/v``, the closed form
(Narayanan et al. 2021 §2.2.2) and the order's step there, so the family's largest is the step
where the chunks are alike; elsewhere it is below (tested against the order on random chunks).
"""

from __future__ import annotations

from collections.abc import Sequence

from trainplan.model.pipeline_paths import Path
from trainplan.model.pipeline_uneven import order_graph

__all__ = ["MOST_PASSES", "interleaved_paths", "critical_path"]

MOST_PASSES = 1 << 21
"""The most passes (2·pp·v·m) of an order whose longest path the per-stage search walks after
each split it evaluates (:mod:`optimizer.stage_exact`): 2,097,152, about two seconds a walk and
400 MB while it runs on one core (a million passes, pp 32 × v 4 × m 4,096: 0.9 s, 256 MB).
Beyond, an interleaved plan keeps the closed form's answer with a proven floor
(:func:`optimizer.stage_solve.interleaved_floor`)."""


def _check(pp: int, v: int, m: int, times: int | None = None) -> None:
    if pp < 1 or v < 1 or m < 1 or m % pp:
        raise ValueError(
            f"interleaved_paths: pp {pp}, v {v}, m {m}: each at least 1, m a multiple of pp"
        )
    if times is not None and times != pp * v:
        raise ValueError(f"interleaved_paths: pp {pp}, v {v}: {times} chunk times, not pp·v")


def interleaved_paths(pp: int, v: int, m: int) -> tuple[Path, ...]:
    """The module docstring's path through each rank k, for ``pp`` ranks of ``v`` chunks and
    ``m`` micro-batches (counts over the pp·v chunks, rank i's chunk c at ``i·v + c``).

    Raises
    ------
    ValueError
        ``pp``, ``v`` or ``m`` below 1, or m not a multiple of pp.

    Examples
    --------
    pp 2, v 2, m 2: rank 0's 2 passes of each chunk each way; rank 0's chunk-0 forward and
    backward and rank 1's 2 and 2:

    >>> interleaved_paths(2, 2, 2)
    (((2, 2, 0, 0), (2, 2, 0, 0)), ((1, 0, 2, 2), (1, 0, 2, 2)))
    """
    _check(pp, v, m)
    out = []
    for k in range(pp):
        counts = tuple(
            m if i == k else 1 if i < k and c == 0 else 0 for i in range(pp) for c in range(v)
        )
        out.append((counts, counts))
    return tuple(out)


def critical_path(
    pp: int, v: int, m: int, forward: Sequence[float], backward: Sequence[float]
) -> tuple[float, Path]:
    """(the step, a longest path's counts) of Megatron-Core's interleaved order on one layout's
    chunks (``forward``, ``backward``: each chunk's passes of one micro-batch, ``pp·v`` numbers,
    rank i's chunk c at ``i·v + c``, any unit) on ``m`` micro-batches: the order's graph run
    pass by pass in :func:`model.pipeline_uneven.interleaved_steps`' placement (so the step is
    its figure to the bit), each pass keeping the wait it started after (the pass before it on
    its rank where the two end together), then walked back from the first pass that ends last.
    The path's length is the step. Every pass runs: ``2·pp·v·m`` of them (about a second at
    half a million).

    Raises
    ------
    ValueError
        ``pp``, ``v`` or ``m`` below 1, m not a multiple of pp, or times not pp·v long.

    A slow rank 0 makes its own passes the path (the module docstring's through rank 0, 2 ×
    (10 + 10 + 20 + 20)); on chunks alike, f 1 and b 2 each, the step is the closed form
    ``m·t + (pp − 1)·t/v`` = 2·6 + 6/2:

    >>> critical_path(2, 2, 2, [10.0, 10.0, 1.0, 1.0], [20.0, 20.0, 2.0, 2.0])
    (120.0, ((2, 2, 0, 0), (2, 2, 0, 0)))
    >>> critical_path(2, 2, 2, [1.0] * 4, [2.0] * 4)[0]
    15.0
    """
    _check(pp, v, m, len(forward))
    _check(pp, v, m, len(backward))
    slot, is_backward, prev, dep, topo = order_graph(pp, v, m)
    f, b = [float(x) for x in forward], [float(x) for x in backward]
    n = len(slot)
    ends = [0.0] * (n + 1)
    came = [n] * (n + 1)
    for t in topo:
        p, d = prev[t], dep[t]
        x, y = ends[p], ends[d]
        took = p if x >= y else d
        ends[t] = (x if x >= y else y) + (b[slot[t]] if is_backward[t] else f[slot[t]])
        came[t] = took
    last = max(range(n), key=ends.__getitem__)
    counts = [[0] * (pp * v), [0] * (pp * v)]
    t = last
    while t != n:
        counts[1 if is_backward[t] else 0][slot[t]] += 1
        t = came[t]
    return ends[last], (tuple(counts[0]), tuple(counts[1]))
