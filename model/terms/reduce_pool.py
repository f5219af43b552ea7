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

from trainplan.model.deepspeed_mechanisms import sp_comm_bytes
from trainplan.model.frameworks import DEEPSPEED_REDUCE_BUCKET_ELEMENTS
from trainplan.model.optimizers import layer_matrices
from trainplan.model.params import count_params, layer_params, shares_embedding_with_last_stage
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.split_key import CACHE, SPLIT_FIELDS, SplitKey
from trainplan.model.terms.stage_params import output_params, stage_params_per_gpu

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
            head = output_params(key, counts, vocab) if counts.output else table if copy else 0
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


def flush_requests(tensors: Sequence[Fraction], world: int, w: int, comm: int) -> list[int]:
    """The side stream's allocations alive together while ``__reduce_and_partition_ipg_grads``
    reduces one flush of ``tensors`` (elements) over ``world`` ranks, bytes rounded up to 512 B
    (``round_size``), with ``w`` B a gradient element and ``comm`` B the communication dtype's
    (DeepSpeed edaa72212 ``stage3.py`` ``__avg_scatter_grads``):

    * ``comm ≠ w`` (Ulysses' FP32, :func:`model.deepspeed_mechanisms.sp_comm_bytes`) and one
      tensor larger than the bucket: ``g.to(communication_data_type)`` copies it (a gradient
      the bucket holds is already a view of its ``comm``-dtype buffer; one larger than the
      bucket never enters it, ``__add_grad_to_ipg_bucket``);
    * ``reduce_scatter_coalesced``'s ``torch.cat`` of the padded partitions,
      ``comm·world·Σ⌈nᵢ/world⌉`` B, unless the flush is one tensor the world divides;
    * ``comm ≠ w``: each tensor's reduced partition cast back to the accumulation dtype,
      ``g.to(self.gradient_accumulation_dtype)``, ``w·⌈nᵢ/world⌉`` B (rank 0's, the largest).

    >>> flush_requests([1 << 20, 8], 2, 2, 2), flush_requests([1 << 20, 8], 2, 2, 4)
    ([2097664], [4194816, 1048576, 512])
    """
    R = DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    out: list[Fraction | int] = []
    if comm != w and len(tensors) == 1 and tensors[0] > R:
        out.append(comm * tensors[0])
    if not (len(tensors) == 1 and tensors[0] % world == 0):
        out.append(comm * world * sum(-(-n // world) for n in tensors))
    if comm != w:
        out += [w * -(-n // world) for n in tensors]
    return [-(-int(r) // _ROUND) * _ROUND for r in out]


def pool_segments(
    flushes: Sequence[Sequence[Fraction]], world: int, w: int, comm: int | None = None
) -> list[int]:
    """The segments (bytes) the reduce-scatter copies of ``flushes`` leave in the side stream's
    pool, ``world`` the partition group's size, ``w`` bytes per gradient element and ``comm`` per
    element on the wire (None: ``w``): each flush's :func:`flush_requests`, all freed before the
    next flush, so each flush starts from its pools' segments whole. A request takes the smallest
    free block of its pool (small: ≤ 1 MiB) at least as large (``get_free_block``), the rest of
    the block split off as a free block where it exceeds 1 MiB in the large pool, 512 B in the
    small one (``should_split``); where none is large enough, a new segment
    (:func:`segment_bytes`).

    Three flushes over 2 ranks in BF16: 14 MiB (a segment), one even tensor (no copy), then
    8 MiB + 1 element, each half padded to 4 MiB + 1: 16 MiB + 4 B, a segment of 18 MiB. With
    ``comm`` 4 (BF16 gradients, FP32 on the wire): the first flush's cat, 28 MiB, takes a segment
    whole, so its casts back, 3 MiB and 4 MiB, need a new one (20 MiB, below 10 MiB), the 4 MiB
    in what the 3 MiB left; the second (no cat) casts 2 MiB into the 20 MiB segment; the third's
    cat, 32 MiB + 8 B (512 rounded), a segment of 34 MiB, its casts 8 MiB (the 20 MiB segment)
    and 8 B (a 2 MiB small-pool segment).

    >>> pool_segments([[3 << 20, 4 << 20], [2 << 20], [8 << 20, 1]], 2, 2)
    [14680064, 18874368]
    >>> pool_segments([[3 << 20, 4 << 20], [2 << 20], [8 << 20, 1]], 2, 2, 4)
    [29360128, 20971520, 35651584, 2097152]
    """
    comm = w if comm is None else comm
    segments: dict[bool, list[int]] = {True: [], False: []}
    made = []
    for tensors in flushes:
        free = {k: list(v) for k, v in segments.items()}
        for request in flush_requests(tensors, world, w, comm):
            small = request <= _SMALL
            fits = [b for b in free[small] if b >= request]
            if fits:
                block = min(fits)
                free[small].remove(block)
            else:
                block = segment_bytes(request)
                segments[small].append(block)
                made.append(block)
            if block - request > (_ROUND - 1 if small else _SMALL):
                free[small].append(block - request)
    return made


@lru_cache(maxsize=CACHE)
def stage_reduce_pools(
    key: SplitKey, world: int, w: int, comm: int | None = None
) -> tuple[Fraction, ...]:
    """Per stage, the bytes :func:`pool_segments` leaves for its :func:`stage_backward_grads`
    under a bucket of :data:`model.frameworks.DEEPSPEED_REDUCE_BUCKET_ELEMENTS`, ``comm`` bytes
    an element on the wire (None: ``w``). For a size-only model (its tensors unknown) one flush
    of ``min(R, P)`` elements, ``P`` the stage's parameters on the GPU, at ``comm`` B.

    Llama 3 70B at tp 4 over 16 ranks, BF16: the output layer (262,668,288), the final norm
    (8,192) and the last layer (213,925,888): 476,602,368 elements, 953,204,736 B, a segment of
    455 × 2 MiB = 954,204,160 B; then two layers and the next fc2 (58,720,256): 486,572,032
    elements, 973,144,064 B, a second segment of 465 × 2 MiB = 975,175,680 B. The later flushes
    (427,851,776 elements at most) fit in the first; the embedding comes last.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> key = SplitKey(get_model("llama3-70b").model, 4, 1, 1, 1, False, 1, True, None, 1)
    >>> stage_reduce_pools(key, 16, 2)
    (Fraction(1929379840, 1),)

    Llama 3 70B at tp 1 over 64 ranks under Ulysses (FP32 on the wire): the output layer,
    1,050,673,152 elements, is larger than the bucket, so it is reduced alone from its BF16
    gradient: its FP32 copy, 4,202,692,608 B, a segment of 2,004 × 2 MiB = 4,202,692,608 B (the
    world divides it: no cat) taken whole, so its partition cast back, 16,416,768 × 2 =
    32,833,536 B, needs a segment of 33,554,432 B (16 × 2 MiB). The later flushes' FP32 cats
    (≤ 5e8 × 4 B) fit in the first segment, their larger casts back in the second; a norm's,
    8,192 / 64 × 2 = 256 B, takes a 2 MiB small-pool segment: 4,238,344,192 B (1,413,480,448 B
    in BF16).

    >>> key = SplitKey(get_model("llama3-70b").model, 1, 1, 1, 1, False, 1, True, None, 1)
    >>> stage_reduce_pools(key, 64, 2, 4), stage_reduce_pools(key, 64, 2)
    ((Fraction(4238344192, 1),), (Fraction(1413480448, 1),))
    """
    R = DEEPSPEED_REDUCE_BUCKET_ELEMENTS
    out: list[Fraction] = []
    for i, flushes in enumerate(_stage_flushes(key)):
        if flushes:
            out.append(Fraction(sum(pool_segments(flushes, world, w, comm))))
            continue
        p = stage_params_per_gpu(key)[i]
        elements: Fraction = min(Fraction(R), Fraction(p[2] + p[3]))
        request = -(-(comm or w) * elements // _ROUND) * _ROUND
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


def _pools_on_split(model: Any, given: Any, t: Any, *fields: Any) -> tuple[Fraction, ...]:
    """:func:`stage_reduce_pools` of the :data:`SPLIT_FIELDS` values ``fields[:-2]``, the
    partition world ``fields[-1]`` (at least 1) and, from cp ``fields[-2]`` and the recipe
    ``t``, the communication dtype (:func:`model.deepspeed_mechanisms.sp_comm_bytes`)."""
    key = SplitKey.of(model, given, *fields[:-2])
    comm = sp_comm_bytes(t, fields[-2])
    return stage_reduce_pools(key, max(1, int(fields[-1])), int(t.weight_bytes), comm)


def reduce_pool_per_gpu(c: Context, f: Fields) -> Any:
    """:func:`stage_reduce_pools` of stage ``f.stage``, ZeRO-3 partitioning over dp·cp
    (``shard_degree``), ``c.training.weight_bytes`` per gradient element and Ulysses'
    communication dtype where cp > 1 (``[n, P]`` for many layouts)."""
    args = (_pools_on_split, (c.model, c.vocab_multiple, c.training))
    return f.per_stage(*args, *SPLIT_FIELDS, "cp", "shard_degree")
