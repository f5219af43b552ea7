"""Layers per pipeline rank and per model chunk, one from the other: what ``evaluate``'s and
the search's ``layout.stage_layers`` print (the decoder layers each rank holds, the MTP block
apart) and what ``--stage-layers`` takes back (one count per rank or per chunk), so that a
layout printed is a layout accepted (:attr:`model.layout.Layout.stage_layers`).

A rank's count alone does not fix its chunks when v > 1; the chunks chosen are the default
split's (:func:`model.split.default_chunk_sizes`) when its per-rank sums are the counts given
(every uniform layout the search prints), else each rank's layers spread as evenly as they go
over its chunks (:func:`chunks_of_ranks`; the per-stage search's own split,
:func:`model.split.balanced_chunk_sizes`). Where v divides every count both are
:func:`model.split.chunk_sizes_from_ranks` (Megatron-Core's rule before explicit layouts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainplan.model.errors import LayoutError
from trainplan.model.split import chunk_ranks, default_chunk_sizes

if TYPE_CHECKING:
    from trainplan.model.estimate import Estimate

__all__ = [
    "rank_sums",
    "chunks_of_ranks",
    "chunks_of_rank_counts",
    "chunk_layers_of",
    "stage_layers_of",
]


def rank_sums(
    chunks: tuple[int, ...] | list[int], pp: int, v: int = 1, schedule: object = None
) -> tuple[int, ...]:
    """Decoder layers on each of the ``pp`` ranks: the sum of its chunks' counts (``chunks``:
    pp·v counts in model order; the chunks' ranks :func:`model.split.chunk_ranks`, loop or V
    placement). The MTP blocks are not decoder layers of a chunk and are not counted.

    Examples
    --------
    >>> rank_sums((7, 7, 8, 8, 8, 8, 8, 7), 8)  # DeepSeek-V3's 61 layers on pp 8
    (7, 7, 8, 8, 8, 8, 8, 7)
    >>> rank_sums((4, 5, 5, 5, 5, 5, 5, 5, 5, 4), 2, 5)  # Qwen3-30B-A3B's 48, pp 2 × v 5
    (24, 24)
    >>> rank_sums((12, 13, 12, 11), 2, 2, "zb-v")  # rank 0 holds chunks 0 and 3
    (23, 25)
    """
    out = [0] * pp
    for count, rank in zip(chunks, chunk_ranks(pp, v, schedule), strict=True):
        out[rank] += count
    return tuple(out)


def chunks_of_ranks(
    rank_layers: tuple[int, ...], v: int, schedule: object = None
) -> tuple[int, ...]:
    """Per-chunk counts (model order) with each rank's n layers spread as evenly as they go over
    its v chunks: ⌊n/v⌋ each, the rank's last ``n mod v`` chunks in model order one more (as
    :func:`model.split.balanced_chunk_sizes`, here for the loop and the V placement alike).

    Examples
    --------
    >>> chunks_of_ranks((4, 7), 2)
    (2, 3, 2, 4)
    >>> chunks_of_ranks((23, 25), 2, "zb-v")
    (11, 12, 13, 12)
    """
    pp = len(rank_layers)
    ranks = chunk_ranks(pp, v, schedule)
    sizes = [0] * (pp * v)
    for i, n in enumerate(rank_layers):
        own = [j for j, r in enumerate(ranks) if r == i]
        for c, j in enumerate(own):
            sizes[j] = n // v + (c >= v - n % v)
    return tuple(sizes)


def chunks_of_rank_counts(
    rank_layers: tuple[int, ...], v: int, schedule: object, rule: bool | str
) -> tuple[int, ...]:
    """The per-chunk counts of per-rank counts (module docstring): the default split under
    ``rule`` (:func:`model.split.split_rule_of`) when its :func:`rank_sums` are ``rank_layers``,
    else :func:`chunks_of_ranks`.

    Examples
    --------
    >>> chunks_of_rank_counts((24, 24), 5, "interleaved", True)  # the default split's own
    (4, 5, 5, 5, 5, 5, 5, 5, 5, 4)
    >>> chunks_of_rank_counts((23, 25), 2, "zb-v", "torchtitan")  # fsdp2: torchtitan's split
    (12, 13, 12, 11)
    >>> chunks_of_rank_counts((20, 28), 2, "zb-v", True)  # no default split sums so
    (10, 14, 14, 10)
    """
    pp = len(rank_layers)
    try:
        default = default_chunk_sizes(sum(rank_layers), pp, v, rule)
    except LayoutError:
        default = None
    if default is not None and rank_sums(default, pp, v, schedule) == tuple(rank_layers):
        return default
    return chunks_of_ranks(rank_layers, v, schedule)


def chunk_layers_of(est: Estimate) -> list[int] | None:
    """Transformer layers of each model chunk of ``est``'s layout in model order (pp·v of them:
    its ``stage_layers`` or the default split, :func:`model.split.default_chunk_sizes`); None
    for a size-only model."""
    lay, arch = est.layout, est.model.arch
    if lay.stage_layers is not None:
        return list(lay.stage_layers)
    if arch is None:
        return None
    return list(default_chunk_sizes(arch.num_layers, lay.pp, lay.virtual_stages, lay.split_rule))


def stage_layers_of(est: Estimate) -> list[int]:
    """Decoder layers on each pipeline rank of ``est`` (JSON ``layout.stage_layers``: what
    ``--stage-layers`` takes back, :attr:`model.layout.Layout.stage_layers`), the MTP blocks
    apart: its chunks' :func:`rank_sums`; a size-only model's stages as counted
    (:attr:`model.terms.peak.StageMemory.num_layers`)."""
    chunks, lay = chunk_layers_of(est), est.layout
    if chunks is None:
        return [s.num_layers for s in est.stages]
    return list(rank_sums(chunks, lay.pp, lay.virtual_stages, lay.schedule))
