"""Which data-parallel rank owns each whole matrix under Megatron-Core's layer-wise distributed
optimizer, and the optimizer state the busiest rank holds.

Megatron-Core runs its emerging optimizers (``--optimizer muon``, ``soap``) at
``--use-distributed-optimizer`` through ``LayerWiseDistributedOptimizer``
(``megatron/core/optimizer/layer_wise_optimizer.py``; Megatron-LM d98e8a64dd): every 2-D
parameter but the embedding and output layer stays whole, with all its optimizer state, on one
rank of the data-parallel group, which ``_compute_per_buffer_param_layout`` chooses. Per model
chunk (``megatron/training/models/dist_utils.py``: one ``compute_full_param_layout`` per chunk,
each with fresh loads) the chunk's matrices are walked in backprop order and cut into buckets;
each bucket is packed longest-processing-time first by the Newton–Schulz cost
``max(m, n)·min(m, n)²``: a matrix goes to the least-loaded rank whose bucket shard stays under
``1.3 ×`` the bucket's mean (``_NUMEL_EPSILON = 0.3``), else to the rank with the fewest elements
in the bucket. Each matrix starts on a 64-element boundary (``param_layout.py``
``pad_param_start``). Only the first chunk of the first pipeline rank is bucketed
(``bucket_size = max(40,000,000, 1,000,000 · dp)`` under ``--overlap-grad-reduce``); every other
chunk is one bucket. The routed experts' matrices are a buffer of their own, packed alike over
the expert data-parallel ranks (``compute_full_param_layout``, ``is_expert_parallel``).

The embedding, a multi-token-prediction module's embedding and the output layer (a tied
embedding's pipeline copy too) are not the layer-wise optimizer's
(``is_managed_by_layer_wise_optimizer`` is False for ``is_embedding_or_output_parameter``, which
``language_module.py`` ``setup_embeddings_and_output_layer`` sets):
``tag_params_for_buffer_routing`` sends them, with the norms and biases, to a buffer laid out
byte by byte as the distributed optimizer lays out its own, which a ``DistributedOptimizer`` over
the data-parallel group shards (``optimizer/__init__.py``: ``use_separate_distributed_optimizer``),
so nothing here packs them.

The packing also sizes the chunk's gradient-reduce buffer (``_emit_bucket``: each bucket spans
``dp × max(shard fill)`` elements, the largest shard rounded up to the shard divisor
``lcm(64, lcm(dp, 128) / dp)``, ``_shard_divisor``; ``param_and_grad_buffer.py``
``_ParamAndGradBuffer.__init__`` allocates ``param_data`` and ``grad_data`` at that ``numel`` on
every rank): :func:`layer_wise_padding` is what it holds beyond the chunk's matrices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from trainplan.model.frameworks import Framework
from trainplan.model.optimizers import OptimizerKind

__all__ = [
    "NUMEL_EPSILON",
    "ALIGN",
    "shard_divisor",
    "layer_wise_bucket_size",
    "layer_wise_owners",
    "layer_wise_padding",
    "busiest_rank_bytes",
    "runs_layer_wise",
]

NUMEL_EPSILON = Fraction(3, 10)
"""A bucket shard's element cap over the bucket's mean (``_NUMEL_EPSILON = 0.3``)."""

ALIGN = 64
"""Elements each matrix's start in a shard is aligned to (``param_layout.py``
``pad_param_start``)."""


def layer_wise_bucket_size(dp: int) -> int:
    """Elements per bucket of the first chunk (``DistributedDataParallel``'s default
    ``max(40000000, 1000000 * dp_size)``)."""
    return max(40_000_000, 1_000_000 * dp)


def _cost(shape: tuple[int, int]) -> int:
    big, small = max(shape), min(shape)
    return big * small * small


def _up(value: int, divisor: int) -> int:
    """``value`` rounded up to a multiple of ``divisor`` (``param_layout.py`` ``pad_to_divisor``)."""
    return -(-value // divisor) * divisor


def shard_divisor(dp: int) -> int:
    """Elements a bucket's shard is rounded up to: ``lcm(64, lcm(dp, 128) / dp)``
    (``LayerWiseDistributedOptimizer._shard_divisor``; ``bucket_end_divisor`` without
    ``pad_buckets_for_high_nccl_busbw``, its default).

    >>> shard_divisor(4), shard_divisor(3)
    (64, 128)
    """
    return math.lcm(64, math.lcm(dp, 128) // dp)


def _pack(
    shapes: Sequence[tuple[int, int]], dp: int, bucket: int | None
) -> tuple[tuple[int, ...], int]:
    """(:func:`layer_wise_owners`, the buffer elements of all the chunk's buckets)."""
    owner = [0] * len(shapes)
    loads = [0] * dp
    padded = 0
    divisor = shard_divisor(dp)

    def emit(chunk: list[int]) -> None:
        nonlocal padded
        cap = Fraction(sum(shapes[i][0] * shapes[i][1] for i in chunk), dp) * (1 + NUMEL_EPSILON)
        fill = [0] * dp
        for i in sorted(chunk, key=lambda i: -_cost(shapes[i])):
            numel = shapes[i][0] * shapes[i][1]
            fits = [r for r in range(dp) if _up(fill[r], ALIGN) + numel <= cap]
            r = min(fits, key=lambda r: loads[r]) if fits else min(range(dp), key=fill.__getitem__)
            fill[r] = _up(fill[r], ALIGN) + numel
            loads[r] += _cost(shapes[i])
            owner[i] = r
        padded += dp * _up(max(fill), divisor)

    chunk: list[int] = []
    numel_sum = largest = 0
    placed = [0] * dp
    for i in reversed(range(len(shapes))):
        numel = shapes[i][0] * shapes[i][1]
        if bucket is not None and chunk:
            threshold = max(bucket, int(dp * largest * 0.9))
            absorbs = _up(min(placed), ALIGN) + numel <= _up(max(placed), divisor)
            if numel_sum >= threshold and not absorbs:
                emit(chunk)
                chunk, numel_sum, largest, placed = [], 0, 0, [0] * dp
        low = placed.index(min(placed))
        placed[low] = _up(placed[low], ALIGN) + numel
        chunk.append(i)
        numel_sum += numel
        largest = max(largest, numel)
    if chunk:
        emit(chunk)
    return tuple(owner), padded


def layer_wise_owners(
    shapes: Sequence[tuple[int, int]], dp: int, bucket: int | None = None
) -> tuple[int, ...]:
    """The data-parallel rank (0 … dp − 1) that owns each matrix of one model chunk, the
    ``shapes`` (rows, cols) in model order, packed as the module docstring says; ``bucket``
    elements per bucket, None for one bucket.

    >>> layer_wise_owners([(4, 8), (16, 8), (4, 8), (8, 8)], 2)
    (1, 0, 1, 1)
    """
    return _pack(shapes, dp, bucket)[0]


def layer_wise_padding(
    shapes: Sequence[tuple[int, int]], dp: int, bucket: int | None = None
) -> int:
    """Elements by which one model chunk's layer-wise gradient-reduce buffer (and its parameter
    buffer) exceeds its matrices on every rank of the ``dp`` ranks: its buckets, ``shapes``
    (rows, cols) in model order, packed as :func:`layer_wise_owners` with ``bucket`` elements per
    bucket (None: one), each ``dp ×`` its largest shard rounded up to :func:`shard_divisor`.
    Megatron-Core ``layer_wise_optimizer.py`` ``_compute_per_buffer_param_layout``
    (``_emit_bucket``).

    >>> layer_wise_padding([(16, 8), (4, 8)], 2)  # shards of 128 and 32, rounded to 64: 2 × 128 − 160
    96
    >>> layer_wise_padding([(4, 8)], 4)  # one shard of 32, rounded to 64: 4 × 64 − 32
    224
    """
    numel = sum(m * n for m, n in shapes)
    return _pack(shapes, dp, bucket)[1] - numel


def busiest_rank_bytes(
    chunks: Sequence[Sequence[tuple[int, int, Fraction]]], dp: int, first_bucket: int | None
) -> Fraction:
    """The most optimizer-state bytes one of ``dp`` data-parallel ranks holds of a pipeline
    rank's matrices: ``chunks``, per model chunk, (rows, cols, state bytes) of each matrix in
    model order; the first chunk cut into buckets of ``first_bucket`` elements
    (:func:`layer_wise_bucket_size` of the dense data-parallel group on the first pipeline rank,
    for its expert buffer too; None: one bucket).

    >>> busiest_rank_bytes([[(4, 8, Fraction(32)), (16, 8, Fraction(128))]], 2, None)
    Fraction(128, 1)
    """
    per_rank = [Fraction(0)] * dp
    for k, chunk in enumerate(chunks):
        bucket = first_bucket if k == 0 else None
        owners = layer_wise_owners([(m, n) for m, n, _ in chunk], dp, bucket)
        for r, (_, _, b) in zip(owners, chunk, strict=True):
            per_rank[r] += b
    return max(per_rank)


def runs_layer_wise(
    kind: OptimizerKind, adam_bytes: int, framework: str, shard: int, zero: int
) -> bool:
    """Whether Megatron-Core runs ``kind`` through its layer-wise distributed optimizer:
    ``megatron`` at ZeRO 1 over ``shard`` > 1 ranks, Muon or SOAP (``training.py``
    ``wrap_model_chunks_with_ddp`` sets ``use_distributed_optimizer`` for it); ``adam_bytes``, Adam's
    optimizer-state bytes per parameter, 0 for no optimizer state.

    >>> runs_layer_wise(OptimizerKind.MUON, 12, "megatron", 8, 1)
    True
    """
    return (
        framework == Framework.MEGATRON
        and zero == 1
        and shard > 1
        and kind in (OptimizerKind.MUON, OptimizerKind.SOAP)
        and bool(adam_bytes)
    )
