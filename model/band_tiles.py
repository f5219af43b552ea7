"""A sliding-window band's attention core by the kernels' tiling: what a query tile costs once
and what each key tile it runs costs, read off a published sweep that keeps the GPU's grid
filled, for a band whose window is shorter than the part's causal sweeps
(:func:`model.attention_rates.window_fractions`, ``docs/time-model-sources.md`` §1).

**Tiles** (:func:`key_tiles`): a fused attention kernel gives each query tile of Br rows
(``m_block``) the key tiles of Bc keys ``n_block_min`` ≤ n < ``n_block_max``, where
``n_block_max`` = ⌈min(s_k, (m_block + 1)·Br + right)/Bc⌉ and ``n_block_min`` =
max(0, ⌊(m_block·Br − left)/Bc⌋) for s_q = s_k (Dao-AILab/flash-attention at 0251105a:
FlashAttention-2 ``csrc/flash_attn/src/flash_fwd_kernel.h`` ``compute_attn_1rowblock``,
FlashAttention-3 ``hopper/block.h`` ``BlockMN::get_n_block_min_max``, FlashAttention-4
``flash_attn/cute/block_info.py`` ``BlockInfo.get_n_block_min_max``); a causal band of W keys,
its own included, is ``left`` = W − 1, ``right`` = 0; an unmasked call runs every key tile.
The tile is computed whole and the mask applied inside it.

**Costs** (:func:`tile_seconds`): the mainloop runs once per key tile; loading Q, filling the
pipeline and the epilogue (rescaling and storing O and its log-sum-exp) run once per query tile
(the same sources' kernels). One head of one sequence then takes t(s) = a·m(s) + b·n(s)
seconds of the GPU's aggregate rate, m query tiles and n key tiles, and a sweep's published
rate r(s) gives t(s) = F(s)/r(s), F the benchmark's own FLOPs
(:func:`model.kernels.attention_kernel_flops`). Least squares in the relative error over the
sweep's points fixes a and b. Only a sweep that holds b·s constant (``batch_times_seq_len``:
the FlashAttention papers' 16K tokens) keeps the query tiles in flight constant; a fixed-batch
sweep's short lengths underfill the GPU, a cost of the grid, not of the tile, and are not read
(the Blackwell sweeps' fit gives a negative a).

Checked against the one published band of a part whose family has such a sweep: cuDNN 9.19's
H200 1,024-key band (d 64) against the FlashAttention-3 paper's cuDNN d 64 sweep on H100 —
forward −1 to −12 %, backward +2 to +9 % at s = 2,048 … 32,768
(``tests/model/test_window_band_tiles.py``, which also records the rules that fail).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from trainplan.model.kernel_tables import AttentionCurve
from trainplan.model.kernels import attention_kernel_flops

__all__ = ["BAND_TILE", "key_tiles", "tile_seconds", "band_seconds"]

BAND_TILE: tuple[int, int] = (128, 128)
"""(Br, Bc): query rows × keys of one tile. FlashAttention-2's forward at d ≤ 64
(``flash_fwd_launch_template.h`` ``run_mha_fwd_hdim64``: ``Flash_fwd_kernel_traits<64, 128,
128, …>``) and FlashAttention-4's Blackwell tile (``flash_fwd_sm100.py``: ``m_block_size``
128, ``n_block_size`` 128); cuDNN's tiles are not published. The fit of :func:`tile_seconds`
takes the tile as given: 128 × 64 gives the same band times, a 256-row tile ones 3–5 % slower
on the H200's 1,024-key band."""


def key_tiles(
    seq_len: int, window: int | None, causal: bool = True, tile: tuple[int, int] = BAND_TILE
) -> tuple[int, ...]:
    """Key tiles each query tile runs (``n_block_max − n_block_min``, module docstring), one
    entry per query tile, for ``seq_len`` queries and keys: under the causal mask with a band of
    ``window`` keys (None, or a window at least ``seq_len``: the whole causal triangle), or
    unmasked (``causal`` False, ``window`` None).

    Examples
    --------
    A 128-key band on 128 × 128 tiles runs two key tiles a query tile (the first one); a
    1,024-key band nine; the causal call of 512 one to four.

    >>> key_tiles(512, 128), key_tiles(2048, 1024)[7:10], key_tiles(512, None)
    ((1, 2, 2, 2), (8, 9, 9), (1, 2, 3, 4))
    """
    rows, keys = tile
    last = math.ceil(seq_len / keys)
    if not causal:
        return (last,) * math.ceil(seq_len / rows)
    left = seq_len if window is None else window - 1
    return tuple(
        min(last, math.ceil((m + 1) * rows / keys)) - max(0, (m * rows - left) // keys)
        for m in range(math.ceil(seq_len / rows))
    )


def tile_seconds(
    curve: AttentionCurve, tile: tuple[int, int] = BAND_TILE
) -> tuple[float, float] | None:
    """(a, b): seconds a query tile costs once and seconds per key tile it runs, one head of one
    sequence at the sweep's aggregate rate (module docstring), fitted to ``curve``'s points by
    least squares in the relative error. None for a sweep at a fixed batch, fewer than three
    points, or a fit without both costs positive.

    Examples
    --------
    The FlashAttention-3 paper's cuDNN forward on H100, causal, 64-dim heads: a query tile's
    fixed cost is about one key tile's, and the two reproduce every published point within
    0.2 %.

    >>> from trainplan.scenarios.kernel_data import attention_curves
    >>> c = next(c for c in attention_curves() if (c.kernel, c.part, c.direction, c.causal,
    ...     c.head_dim_qk) == ("cudnn", "H100-SXM", "fwd", True, 64))
    >>> a, b = tile_seconds(c)
    >>> round(a / b, 2)
    1.03
    """
    if curve.batch_times_seq_len is None or len(curve.seq_len) < 3:
        return None
    rows = []
    for s, rate in zip(curve.seq_len, curve.tflops_per_s, strict=True):
        t = _kernel_flops(curve, s) / (rate * 1e12)
        tiles = key_tiles(s, None, curve.causal, tile)
        rows.append((len(tiles) / t, sum(tiles) / t))
    a, b = _least_squares(rows)
    return (a, b) if a > 0 and b > 0 else None


def band_seconds(
    curve: AttentionCurve,
    seq_len: int,
    window: int,
    tile: tuple[int, int] = BAND_TILE,
) -> float | None:
    """Seconds one head of one sequence of ``seq_len`` queries under a causal band of
    ``window`` keys takes at ``curve``'s aggregate rate: a·(query tiles) + b·(key tiles)
    (:func:`tile_seconds`, :func:`key_tiles`); None where the sweep gives no costs.

    Examples
    --------
    The H100's 128-key band of 64-dim heads at s = 8,192 from the FlashAttention-3 paper's
    cuDNN forward: 64 query tiles, 127 key tiles, 1,040,448 pairs kept — 131 TFLOP/s in
    cudnn-frontend's count 4·pairs·d (the published GB200 sweep: 165 at a 2.5× peak).

    >>> from trainplan.scenarios.kernel_data import attention_curves
    >>> c = next(c for c in attention_curves() if (c.kernel, c.part, c.direction, c.causal,
    ...     c.head_dim_qk) == ("cudnn", "H100-SXM", "fwd", True, 64))
    >>> round(4 * 1_040_448 * 64 / band_seconds(c, 8192, 128) / 1e12)
    131
    """
    costs = tile_seconds(curve, tile)
    if costs is None:
        return None
    tiles = key_tiles(seq_len, window, True, tile)
    return costs[0] * len(tiles) + costs[1] * sum(tiles)


def _kernel_flops(curve: AttentionCurve, seq_len: int) -> float:
    """The benchmark's FLOPs of one head of one sequence of the sweep's own shape
    (:func:`attention_kernel_flops`)."""
    return attention_kernel_flops(
        curve.flop_count,
        curve.direction,
        1,
        1,
        seq_len,
        curve.head_dim_qk,
        curve.head_dim_v,
        curve.causal,
    )


def _least_squares(rows: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """(a, b) minimising Σ(a·x + b·y − 1)² over ``rows`` of (x, y) (each row divided by its
    time: the relative error); the 2 × 2 normal equations (``model`` imports no numpy,
    ``tests/test_imports.py``: two unknowns need no solver)."""
    sxx = sum(x * x for x, _ in rows)
    syy = sum(y * y for _, y in rows)
    sxy = sum(x * y for x, y in rows)
    det = sxx * syy - sxy * sxy
    if det <= 0:
        return 0.0, 0.0
    sx = sum(x for x, _ in rows)
    sy = sum(y for _, y in rows)
    return (sx * syy - sy * sxy) / det, (sxx * sy - sxy * sx) / det
