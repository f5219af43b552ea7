"""DeepSpeed ZeRO-3's reduce-scatter copies in the ``reduce_and_partition_stream``'s pool, per
pipeline stage: what :func:`model.terms.peak.stream_pool_term` counts under ``deepspeed``
ZeRO-3 with dp·cp > 1.

* :func:`stage_backward_grads` — the gradients one GPU of each stage hands ZeRO-3, in the order
  backward produces them (elements, after tp; exact, cached on the split structure);
* :func:`bucket_flushes` — the IPG bucket's flushes of such a sequence;
* :func:`pool_segments` — the caching allocator's segments those flushes' copies leave;
* :func:`stage_reduce_pools` / :func:`reduce_pool_per_gpu` — bytes per stage (cached on the
  split structure, the partition world size and the bytes per element), and at ``f.stage``.

Sources (DeepSpeed edaa72212, ``deepspeed/runtime/zero/stage3.py``):
``reduce_independent_p_g_buckets_and_remove_grads`` flushes the bucket when ``bucket.elements +
param.ds_numel > reduce_bucket_size and bucket.elements > 0``, then ``__add_grad_to_ipg_bucket``
adds the gradient whatever its size (one larger than the bucket sits alone in it until the next
gradient or the backward's end flushes it). ``__reduce_and_partition_ipg_grads`` (``overlap_comm``
on at stage 3, ``reduce_scatter`` on by default) reduce-scatters a flush on the side stream
through ``comm/coalesced_collectives.py`` ``reduce_scatter_coalesced``: one tensor whose numel
the world size divides is reduced in place (no copy); otherwise ``torch.cat`` builds a buffer of
the tensors' chunks, each padded to ``⌈n/ws⌉``: ``ws·Σ⌈nᵢ/ws⌉`` elements. The outputs are views of
it (``grad_accum_dtype`` defaults to the model's dtype, ``engine.get_data_types``: no FP32 copies
on the stream), and it is freed before the next flush.

PyTorch's caching allocator (``c10/cuda/CUDACachingAllocator.cpp``) rounds a request up to
512 B (``round_size``) and serves it from a cached free block of the same stream and pool at
least as large (``get_free_block``; large blocks are split, ``should_split``); only otherwise does
it allocate a segment, of ``get_allocation_size``: 2 MiB for a request ≤ 1 MiB (the small pool),
20 MiB below 10 MiB, else the request rounded up to 2 MiB. Every copy being free when the next
is requested, a flush adds a segment only when it is larger than every segment before it: the
pool holds the segments of the record-setting flushes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.frameworks import DEEPSPEED_REDUCE_BUCKET_ELEMENTS
from trainplan.model.optimizers import layer_matrices
from trainplan.model.params import count_params, layer_params, shares_embedding_with_last_stage
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.split_key import CACHE, SPLIT_FIELDS, SplitKey
from trainplan.model.terms.stage_params import stage_params_per_gpu

__all__ = [
    "layer_backward_grads",
    "stage_backward_grads",
    "bucket_flushes",
    "segment_bytes",
    "pool_segments",
    "stage_reduce_pools",
    "reduce_pool_per_gpu",
]

_MIB = 1 << 20
_SMALL = _MIB  # kSmallSize: requests up to it go to the small pool, 2 MiB segments
_MIN_LARGE = 10 * _MIB  # kMinLargeAlloc: below it a large request gets a 20 MiB segment
_ROUND = 512  # kMinBlockSize: round_size


def layer_backward_grads(key: SplitKey, index: int) -> list[Fraction]:
    """The gradients of layer ``index`` on one GPU (elements), in the order its backward
    produces them, as Megatron-DeepSpeed's ``ParallelTransformerLayer`` holds its weights
    (``query_key_value`` fused, SwiGLU's gate and up fused in ``dense_h_to_4h``): the FFN's
    weights last to first (fc2, fc1; a MoE layer's shared experts, each routed expert on the GPU
    apart, the router), the norm before the FFN (with post-norms also the one after it, first,
    and the attention's, after the FFN's pre-norm), the attention's weights last to first, the
    input norm; then the rest of the layer (biases, QK-norm, sinks) as one tensor. Each weight
    after :meth:`model.optimizers.Matrix.local` (÷ tp; a routed expert's ÷ etp, ``num_experts ÷
    ep`` of them); the total is the layer's parameters on the GPU.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> key = SplitKey(get_model("llama3-70b").model, 4, 1, 1, 1, False, 1, True, None, 1)
    >>> [int(n) for n in layer_backward_grads(key, 0)]
    [58720256, 117440512, 8192, 16777216, 20971520, 8192]
    """
    arch = key.model.arch
    assert arch is not None
    mats = layer_matrices(arch, index, fused_qkv=True)
    # the attention block ends with its output projection, the first row-parallel weight
    n_att = next(i for i, m in enumerate(mats) if m.split == 1) + 1
    sizes = []
    for m in mats:
        rows, cols = m.local(key.etp if m.expert else key.tp)
        sizes.append([Fraction(rows * cols)] * (m.count // key.ep if m.expert else m.count))
    att = [n for group in reversed(sizes[:n_att]) for n in group]
    ffn = [n for group in reversed(sizes[n_att:]) for n in group]
    lp = layer_params(arch, index)
    post = arch.post_norms
    norm = Fraction(lp.norms, 4 if post else 2)
    # with post-norms: post-FFN, FFN, pre-FFN, post-attention, attention, input
    order = [norm, *ffn, norm, norm, *att, norm] if post else [*ffn, norm, *att, norm]
    total = key.dense_per_gpu(lp.dense, lp.tp_replicated) + key.experts_per_gpu(lp.experts)
    rest = total - sum(order)
    return order + ([rest] if rest > 0 else [])


@lru_cache(maxsize=CACHE)
def stage_backward_grads(key: SplitKey) -> tuple[tuple[Fraction, ...], ...]:
    """Per stage, the gradients one GPU hands ZeRO-3 in backward order (elements): on the
    output layer's rank (:func:`model.split.output_rank`) the output layer (or the tied
    embedding's copy there) and the final norm; the layers last to first
    (:func:`layer_backward_grads`); on the first stage the input embedding, whose gradient comes
    last (``V·h ÷ tp``, learned positions apart); what else the stage holds (MTP projections) as
    one tensor at the end. Sums to the stage's parameters on the GPU
    (:func:`model.terms.stage_params.stage_params_per_gpu`). Empty for a size-only model.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> key = SplitKey(get_model("llama3-70b").model, 4, 1, 1, 1, False, 1, True, None, 1)
    >>> g = stage_backward_grads(key)[0]
    >>> [int(n) for n in g[:3]], int(g[-1]), len(g), int(sum(g))
    ([262668288, 8192, 58720256], 262668288, 483, 17639415808)
    """
    arch = key.model.arch
    if arch is None or key.model.num_params_declared is not None:
        return ((),) * key.pp
    vocab = key.vocab()
    counts = count_params(arch, vocab)
    table = Fraction(vocab * arch.hidden_size, key.tp)
    last = key.output_rank()
    out = []
    kinds: dict[Any, list[Fraction]] = {}  # a layer's gradients depend only on its kind
    for i, (_, layers, dense, experts) in enumerate(stage_params_per_gpu(key)):
        grads: list[Fraction] = []
        if i == last:
            copy = i != 0 and shares_embedding_with_last_stage(arch)
            head = Fraction(counts.output, key.tp) if counts.output else table if copy else 0
            grads += [Fraction(g) for g in (head, counts.final_norm) if g]
        for j in sorted(layers, reverse=True):
            kind = (arch.is_moe_layer(j), layer_params(arch, j))
            if kind not in kinds:
                kinds[kind] = layer_backward_grads(key, j)
            grads += kinds[kind]
        tail = [table, Fraction(counts.embedding - vocab * arch.hidden_size)] if i == 0 else []
        rest = dense + experts - sum(grads) - sum(tail)
        grads += [g for g in (rest, *tail) if g > 0]
        out.append(tuple(grads))
    return tuple(out)


def bucket_flushes(grads: Iterable[Fraction], bucket: int) -> list[list[Fraction]]:
    """The IPG bucket's flushes of ``grads`` (elements, in order) under a ``bucket`` of
    ``reduce_bucket_size`` elements: a gradient that would take a non-empty bucket past it
    flushes the bucket first; the last flush at the backward's end.

    >>> bucket_flushes([3, 4, 2, 9, 1], 8)
    [[3, 4], [2], [9], [1]]
    """
    flushes: list[list[Fraction]] = []
    current: list[Fraction] = []
    elements: Fraction | int = 0
    for n in grads:
        if current and elements + n > bucket:
            flushes.append(current)
            current, elements = [], 0
        current.append(n)
        elements += n
    return flushes + ([current] if current else [])


def segment_bytes(request: int) -> int:
    """The segment PyTorch's caching allocator makes for a ``request`` of bytes it cannot serve
    from its cache (``get_allocation_size``).

    >>> segment_bytes(1000), segment_bytes(5 << 20), segment_bytes(953_217_024)
    (2097152, 20971520, 954204160)
    """
    if request <= _SMALL:
        return 2 * _MIB
    if request < _MIN_LARGE:
        return 20 * _MIB
    return -(-request // (2 * _MIB)) * 2 * _MIB


def pool_segments(flushes: Sequence[Sequence[Fraction]], world: int, w: int) -> list[int]:
    """The segments (bytes) the reduce-scatter copies of ``flushes`` leave in the side stream's
    pool, ``world`` the partition group's size and ``w`` bytes per element: a flush of one tensor
    the world divides makes no copy; another copies ``world·Σ⌈nᵢ/world⌉`` elements, rounded up
    to 512 B, and adds a segment only when no segment of its pool (small: ≤ 1 MiB) is as large.

    Three flushes over 2 ranks in BF16: 14 MiB (a segment), one even tensor (no copy), then
    8 MiB + 1 element, each half padded to 4 MiB + 1: 16 MiB + 4 B, a segment of 18 MiB.

    >>> pool_segments([[3 << 20, 4 << 20], [2 << 20], [8 << 20, 1]], 2, 2)
    [14680064, 18874368]
    """
    largest = {True: 0, False: 0}
    segments = []
    for tensors in flushes:
        if len(tensors) == 1 and tensors[0] % world == 0:
            continue
        request = w * world * sum(-(-n // world) for n in tensors)
        request = -(-request // _ROUND) * _ROUND
        small = request <= _SMALL
        if request > largest[small]:
            largest[small] = segment_bytes(request)
            segments.append(largest[small])
    return segments


@lru_cache(maxsize=CACHE)
def stage_reduce_pools(key: SplitKey, world: int, w: int) -> tuple[Fraction, ...]:
    """Per stage, the bytes :func:`pool_segments` leaves for its :func:`stage_backward_grads`
    under a bucket of :data:`model.frameworks.DEEPSPEED_REDUCE_BUCKET_ELEMENTS`. For a size-only
    model (its tensors unknown) one flush of ``min(R, P)`` elements, ``P`` the stage's parameters
    on the GPU.

    Llama 3 70B at tp 4 over 16 ranks, BF16: the output layer (262,668,288), the final norm
    (8,192) and the last layer (213,925,888): 476,602,368 elements, 953,204,736 B, a segment of
    455 × 2 MiB = 954,204,160 B; then two layers and the next fc2 (58,720,256): 486,572,032
    elements, 973,144,064 B, a second segment of 465 × 2 MiB = 975,175,680 B. The later flushes
    (427,851,776 elements at most) fit in the first; the embedding comes last.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> key = SplitKey(get_model("llama3-70b").model, 4, 1, 1, 1, False, 1, True, None, 1)
    >>> stage_reduce_pools(key, 16, 2)
    (Fraction(1929379840, 1),)
    """
    R = DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    out = []
    for i, flushes in enumerate(_stage_flushes(key)):
        if flushes:
            out.append(Fraction(sum(pool_segments(flushes, world, w))))
            continue
        p = stage_params_per_gpu(key)[i]
        elements: Fraction = min(Fraction(R), Fraction(p[2] + p[3]))
        request = -(-w * elements // _ROUND) * _ROUND
        out.append(Fraction(segment_bytes(request) if request else 0))
    return tuple(out)


@lru_cache(maxsize=CACHE)
def _stage_flushes(key: SplitKey) -> tuple[tuple[tuple[Any, ...], ...], ...]:
    """Per stage, :func:`bucket_flushes` of its :func:`stage_backward_grads` (whole counts as
    ints, for speed; whatever the world size)."""
    R = DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    return tuple(
        tuple(
            tuple(n if n.denominator != 1 else int(n) for n in f) for f in bucket_flushes(grads, R)
        )
        for grads in stage_backward_grads(key)
    )


def _pools_on_split(model: Any, given: Any, w: int, *fields: Any) -> tuple[Fraction, ...]:
    """:func:`stage_reduce_pools` of the :data:`SPLIT_FIELDS` values ``fields[:-1]`` and the
    partition world ``fields[-1]`` (at least 1)."""
    key = SplitKey.of(model, given, *fields[:-1])
    return stage_reduce_pools(key, max(1, int(fields[-1])), int(w))


def reduce_pool_per_gpu(c: Context, f: Fields) -> Any:
    """:func:`stage_reduce_pools` of stage ``f.stage``, ZeRO-3 partitioning over dp·cp
    (``shard_degree``), ``c.training.weight_bytes`` per element (``[n, P]`` for many layouts)."""
    args = (_pools_on_split, (c.model, c.vocab_multiple, c.training.weight_bytes))
    return f.per_stage(*args, *SPLIT_FIELDS, "shard_degree")
