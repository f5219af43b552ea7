"""Which layers each pipeline stage and model chunk holds.

The model is cut into pp·v consecutive chunks; pipeline rank i holds chunks i, i + pp, …
(Narayanan et al. 2021 §2.2.2). Uneven splits give one layer fewer to the end chunks first, and
the very first and last chunk may hold only the embedding and the output layer (Llama 3 §3.3.2).
A model's multi-token-prediction blocks (layer indices L, L + 1, …) go to the last chunk.
Re-exported by :mod:`model.params`.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from trainplan.model.errors import LayoutError

if TYPE_CHECKING:
    from trainplan.model.specs import Architecture

__all__ = ["MAX_EMPTY_CHUNKS", "check_chunks", "split_layers", "model_chunks", "stage_layers"]


MAX_EMPTY_CHUNKS = 2
"""Model chunks that may hold no transformer layer: the first (embedding only) and the last
(output layer only), Llama 3 §3.3.2."""


def check_chunks(num_layers: int, pp: int, v: int = 1, uneven: bool = True) -> None:
    """Check that ``pp·v`` model chunks can hold ``num_layers`` layers.

    Raises
    ------
    LayoutError
        When more than :data:`MAX_EMPTY_CHUNKS` chunks would hold no layer (only the first
        chunk, embedding only, and the last, output layer only, may be empty), or any chunk
        would be empty with uneven stages off.
    """
    chunks = pp * v
    spare = 0 if not uneven else MAX_EMPTY_CHUNKS
    if chunks > num_layers + spare:
        rule = (
            f"at most num_layers + {MAX_EMPTY_CHUNKS}: only the first chunk (embedding only) and "
            "the last (output layer only) may hold no layer"
            if uneven
            else "at most num_layers with uneven stages off"
        )
        raise LayoutError(
            f"pp: {pp} × virtual_stages {v} = {chunks} model chunks for num_layers = "
            f"{num_layers}; {rule}"
        )


@cache
def split_layers(
    num_layers: int, pp: int, v: int = 1, uneven: bool = True
) -> tuple[tuple[int, ...], ...]:
    """Layer indices held by each of the ``pp`` pipeline ranks (0-based layers).

    The model is cut into ``pp·v`` consecutive chunks; rank i holds chunks i, i + pp, …
    (Narayanan et al. 2021 §2.2.2). When ``pp·v`` does not divide L, every chunk gets
    ceil(L/(pp·v)) layers and the chunks at the ends give one back first (first, last, second,
    second-to-last, …), so the stages that also hold the embedding and the output layer get fewer
    layers — Llama 3 405B's 126 layers over 16 stages are 7, 8 × 14, 7. With L + 1 or L + 2
    chunks the very first chunk holds only the embedding and the very last only the output
    layer (Llama 3, Dubey et al. 2024 §3.3.2: "the first model chunk on the first stage has only
    the embedding, and the last model chunk on the last stage has only output projection and
    loss calculation" — 126 layers in 16 × 8 chunks of one layer).

    Raises
    ------
    LayoutError
        See :func:`check_chunks`; or the split is uneven and ``uneven`` is False.

    Examples
    --------
    >>> [len(s) for s in split_layers(126, 16)]
    [7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7]
    >>> [len(s) for s in split_layers(126, 16, v=8)]
    [7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7]
    >>> split_layers(126, 16, v=8)[0][:2]
    (15, 31)
    >>> split_layers(4, 2, v=2)
    ((0, 2), (1, 3))
    """
    chunks = pp * v
    check_chunks(num_layers, pp, v, uneven)
    if num_layers % chunks and not uneven:
        raise LayoutError(
            f"pp: {pp} × virtual_stages {v} = {chunks} does not divide num_layers = {num_layers} "
            "(allow uneven stages, or pick a divisor)"
        )
    size = -(-num_layers // chunks)
    sizes = [size] * chunks
    deficit = chunks * size - num_layers
    order = [j for k in range(chunks) for j in (k, chunks - 1 - k)]
    for j in list(dict.fromkeys(order))[:deficit]:
        sizes[j] -= 1
    starts = [sum(sizes[:j]) for j in range(chunks)]
    ranks: list[list[int]] = [[] for _ in range(pp)]
    for j in range(chunks):
        ranks[j % pp].extend(range(starts[j], starts[j] + sizes[j]))
    return tuple(tuple(r) for r in ranks)


@cache
def model_chunks(
    arch: Architecture, pp: int, v: int = 1, uneven: bool = True
) -> tuple[tuple[int, ...], ...]:
    """The layers of each of the pp·v model chunks (:func:`split_layers` with ``pp·v`` stages),
    the MTP blocks (indices L, L + 1, …) appended to the last chunk: they sit on the last
    pipeline stage, after the output layer's input (Megatron-Core's default MTP placement)."""
    chunks = split_layers(arch.num_layers, pp * v, 1, uneven)
    mtp = tuple(range(arch.num_layers, arch.num_layers + arch.mtp_layers))
    return chunks[:-1] + (chunks[-1] + mtp,)


@cache
def stage_layers(
    arch: Architecture, pp: int, v: int = 1, uneven: bool = True
) -> tuple[tuple[int, ...], ...]:
    """The layers each of the pp pipeline ranks holds (:func:`split_layers`), the MTP blocks on
    the last rank (in its last chunk).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=4, hidden_size=8, num_attention_heads=2,
    ...     ffn_hidden_size=32, vocab_size=16, mtp_layers=1)
    >>> stage_layers(arch, 2)
    ((0, 1), (2, 3, 4))
    """
    split = split_layers(arch.num_layers, pp, v, uneven)
    mtp = tuple(range(arch.num_layers, arch.num_layers + arch.mtp_layers))
    return split[:-1] + (split[-1] + mtp,)
