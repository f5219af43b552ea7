"""Megatron-FSDP's gradient buckets at the size it allocates them: a unit's parameters grouped
by dtype, each group laid out in a buffer padded to a multiple of the shard degree × the
group's chunk size (Megatron-LM ``megatron/core/distributed/fsdp/src/megatron_fsdp/
param_and_grad_buffer.py``: ``_get_parameter_groups`` steps 1 and 3, ``build_data_parallel_
buffer_index``; at 92c8482e6d, NeMo 25.11, and d98e8a64dd).

* :func:`bucket_elements` — one bucket's elements, padded, for its parameters' local shapes;
* :func:`dense_layer_shapes` — a dense transformer layer's parameters as Megatron-Core's
  Transformer Engine layer holds them on one GPU (after tp), each marked linear or not;
* :func:`padded_layer_unit` — a dense layer's buckets, summed: what the reduce-scatter queue
  counts a unit at (:meth:`model.mechanism_record.Mechanism.reduce_queue_elements`);
* :func:`non_unit_order` — a pipeline stage's parameters outside every layer, in Megatron-Core's
  ``named_parameters`` order, with when backward first writes and last completes each;
* :func:`non_unit_buckets` — those parameters cut into buckets (``_get_parameter_groups`` step
  2), each padded: the buckets reduced before the stage's layers, and the one alive through
  the whole backward (allocated by an early gradient, reduced only after the embedding's);
* :func:`head_bucket_count` — how many buckets the first of those are.

Units: parameter elements on one GPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from trainplan.model.comm import MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_RANK
from trainplan.model.params import shares_embedding_with_last_stage
from trainplan.model.specs import Architecture, AttentionKind, Norm, PositionEmbedding
from trainplan.model.value_head import ties_output

__all__ = [
    "NonUnitParam",
    "bucket_elements",
    "bucket_size",
    "dense_layer_shapes",
    "head_bucket_count",
    "non_unit_buckets",
    "non_unit_order",
    "padded_layer_unit",
]

Shape = tuple[int, ...]


def _row(shape: Shape) -> int:
    return math.prod(shape[1:])


def chunk_size(shapes: Sequence[Shape]) -> int:
    """The chunk size of a bucket of parameters of these shapes (``_get_parameter_groups``
    step 3): the parameters taken widest row first (a row = every dimension but the first),
    the first one's row; a later parameter whose row neither equals it nor divides it with
    the parameter a whole number of chunks, and that is not smaller than a chunk, widens it
    to the least common multiple of the two.

    >>> chunk_size([(57_344, 8_192), (8_192, 28_672), (8_192,)])  # lcm(28,672, 8,192)
    57344
    """
    ordered = sorted(shapes, key=_row, reverse=True)
    chunk = _row(ordered[0])
    for shape in ordered:
        row, n = _row(shape), math.prod(shape)
        if row == chunk or (chunk % row == 0 and n % chunk == 0) or n < chunk:
            continue
        chunk = math.lcm(chunk, row)
    return chunk


def bucket_elements(shapes: Sequence[Shape], shard: int) -> int:
    """Elements Megatron-FSDP allocates for one bucket of parameters of these local
    ``shapes``, sharded over ``shard`` ranks (``build_data_parallel_buffer_index`` under a
    sharding strategy other than ``no_shard``): in the widest-row-first order, each parameter
    starts on a chunk boundary (:func:`chunk_size`); one whose size is not whole chunks leaves
    the rest of its last chunk to the first later parameter whose remainder fits beside it and
    to parameters smaller than a chunk, which otherwise follow at the end; the total is
    padded to a multiple of ``shard`` × the chunk.

    Examples
    --------
    A Llama 3 70B layer in BF16 at tp 1 over 64 ranks: 855,654,400 parameters, chunk 57,344
    (fc2's row 28,672 and QKV's 8,192), padded to 234 × 64 × 57,344 = 858,783,744.

    >>> shapes = [(8192,), (10240, 8192), (8192, 8192), (8192,), (57344, 8192), (8192, 28672)]
    >>> sum(math.prod(s) for s in shapes), bucket_elements(shapes, 64)
    (855654400, 858783744)
    """
    ordered = sorted(shapes, key=_row, reverse=True)
    chunk = chunk_size(ordered)
    sizes = [math.prod(s) for s in ordered]
    small = [n for n in sizes if n < chunk]
    regular = [n for n in sizes if n >= chunk]
    end = 0
    while regular:
        n = regular.pop(0)
        if n % chunk == 0:
            end += n
            continue
        end += (n // chunk + 1) * chunk
        space = chunk - n % chunk
        partner = next((m for m in regular if m % chunk and n % chunk + m % chunk <= chunk), None)
        if partner is not None:  # its remainder shares the grid cell
            regular.remove(partner)
            space -= partner % chunk
            end += partner // chunk * chunk
        for m in list(small):
            if m <= space:
                small.remove(m)
                space -= m
    end += sum(small)
    unit = shard * chunk
    return -(-end // unit) * unit


def dense_layer_shapes(arch: Architecture, tp: int) -> tuple[tuple[Shape, bool], ...]:
    """A dense transformer layer's parameters on one GPU as Megatron-Core's Transformer Engine
    layer holds them, each with whether it is a linear layer's weight (an FP8 primary weight
    under ``fp8_param_gather``): ``linear_qkv`` (the input norm's weight, and its bias under
    LayerNorm, fused in; Q, K and V in one column-parallel weight, ``(a + 2g)·d ÷ tp × h``),
    ``q_layernorm``/``k_layernorm`` (``d`` each, with ``qk_norm``), ``linear_proj``
    (``h × a·d ÷ tp``), ``linear_fc1`` (the pre-MLP norm fused in; ``2f`` rows when gated, ÷ tp)
    and ``linear_fc2`` (``h × f ÷ tp``); biases where the architecture has them. Empty where
    the layer is not of that kind (MoE, MLA, Gemma's post-norms) or tp does not divide it.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> [s for s, _ in dense_layer_shapes(get_model("llama3-70b").model.arch, 2)]
    [(8192,), (5120, 8192), (8192, 4096), (8192,), (28672, 8192), (8192, 14336)]
    """
    h, a, d, g = arch.hidden_size, arch.num_attention_heads, arch.dim_per_head, arch.kv_heads
    f = arch.ffn_hidden_size
    fc1 = (2 if arch.mlp.gated else 1) * f
    if (
        arch.moe is not None
        or arch.attention is AttentionKind.MLA
        or arch.post_norms
        or any(x % tp for x in ((a + 2 * g) * d, a * d, fc1, f))
    ):
        return ()
    qkv, proj, up, down = (a + 2 * g) * d // tp, a * d // tp, fc1 // tp, f // tp
    norm: tuple[tuple[Shape, bool], ...] = (((h,), False),) * (
        1 if arch.norm is Norm.RMSNORM else 2
    )
    bias = arch.linear_bias
    out: list[tuple[Shape, bool]] = [*norm, ((qkv, h), True)]
    if bias or arch.qkv_bias:
        out.append(((qkv,), False))
    if arch.qk_norm:
        out += [((d,), False), ((d,), False)]
    out.append(((h, proj), True))
    if bias:
        out.append(((h,), False))
    out += [*norm, ((up, h), True)]
    if bias:
        out.append(((up,), False))
    out.append(((h, down), True))
    if bias:
        out.append(((h,), False))
    return tuple(out)


@lru_cache(maxsize=4096)
def padded_layer_unit(arch: Architecture, fp8_params: bool, tp: int, shard: int) -> int:
    """Elements Megatron-FSDP allocates for one dense layer's gradient buckets on one GPU: its
    parameters grouped by dtype (``_get_parameter_groups`` step 1: under ``fp8_param_gather``
    the linear weights are FP8 and apart from the norms and biases; else one group), each
    group one bucket of :func:`bucket_elements` over ``shard`` ranks. 0 where the layer's
    shapes are not known (:func:`dense_layer_shapes`): the caller counts its parameters.

    Examples
    --------
    Llama 3 70B over 64 ranks in FP8 primary weights: the four weights, 855,638,016 elements
    at chunk 57,344, pad to 234 × 3,670,016 = 858,783,744; the two norms, 16,384 at chunk 1,
    are a multiple of 64 already: 858,800,128.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("llama3-70b").model.arch
    >>> padded_layer_unit(arch, True, 1, 64), padded_layer_unit(arch, False, 1, 64)
    (858800128, 858783744)
    """
    shapes = dense_layer_shapes(arch, int(tp))
    if not shapes:
        return 0
    groups = [[s for s, linear in shapes if linear], [s for s, linear in shapes if not linear]]
    if not fp8_params:
        groups = [[s for s, _ in shapes]]
    return sum(bucket_elements(group, int(shard)) for group in groups if group)


def bucket_size(shard: int) -> int:
    """The ``suggested_bucket_size`` Megatron-FSDP cuts the parameters outside its units at, in
    elements, for a dp·cp group of ``shard`` ranks (:data:`model.comm.MEGATRON_BUCKET_PARAMS`,
    :data:`model.comm.MEGATRON_BUCKET_PARAMS_PER_RANK`): ``ddp_config.bucket_size`` as
    Megatron-LM ``training.py`` ``resolve_ddp_bucket_size`` (d98e8a64dd) sets it under
    ``--overlap-grad-reduce`` (which the launch line writes for Megatron-FSDP),
    ``max(4e7, 1e6·dp·cp)``. ``FullyShardedDataParallel`` (Megatron-LM
    ``mcore_fsdp_adapter.py``) takes it for the first model chunk; later chunks get
    ``disable_bucketing`` (``training.py``: ``chunk_idx > 0``), one bucket of everything
    (:func:`non_unit_buckets`).

    >>> bucket_size(8), bucket_size(1024)
    (40000000, 1024000000)
    """
    return max(MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PARAMS_PER_RANK * int(shard))


@dataclass(frozen=True, slots=True)
class NonUnitParam:
    """One parameter outside every FSDP unit as one GPU holds it."""

    shape: Shape
    """Its local shape (after tp)."""
    fp8: bool = False
    """A Transformer Engine linear's weight: FP8 under ``fp8_param_gather``, a dtype group of
    its own (``_get_parameter_groups`` step 1)."""
    own_bucket: bool = False
    """Marked ``shared_embedding`` (``LanguageModule.setup_embeddings_and_output_layer``: the
    two copies of the embedding at pp > 1 with tied embeddings or MTP): a bucket of its own
    under a sharded strategy (``_does_param_require_new_bucket``)."""
    early: bool = True
    """Its gradient bucket is first written before the stage's layers' backward (the final
    norm, the MTP modules' norms and projection, the output layer, a tied embedding whose
    output-layer wgrad goes to ``main_grad`` through ``get_main_grad``)."""
    late: bool = False
    """Its gradient completes only after the stage's layers' backward (the input embedding: its
    ``post_accumulate_grad_hook`` fires once autograd has summed every use)."""


def _norm(arch: Architecture) -> tuple[NonUnitParam, ...]:
    h = arch.hidden_size
    return (NonUnitParam((h,)),) * (1 if arch.norm is Norm.RMSNORM else 2)


@lru_cache(maxsize=4096)
def non_unit_order(
    arch: Architecture, tp: int, vocab: int, pp: int, v: int, stage: int, last: int
) -> tuple[tuple[NonUnitParam, ...], ...]:
    """The parameters outside every transformer layer that pipeline ``stage`` holds, per model
    chunk that has any (each chunk is a Megatron-FSDP instance of its own), in the order of
    Megatron-Core ``GPTModel.named_parameters``: ``embedding`` (word, then learned positions),
    ``decoder.final_layernorm``, per MTP module ``enorm``, ``hnorm``, ``eh_proj`` (``2h → h``,
    column-parallel: ``(h/tp, 2h)``) and its ``final_layernorm``
    (``multi_token_prediction.py`` ``MultiTokenPredictionLayer.__init__``), ``output_layer``.
    The first chunk of stage 0 holds the embedding; the last chunk of ``last`` (the output
    rank) the rest, and at pp > 1 with tied embeddings or MTP its own copy of the embedding
    (``shared_embedding``, as is the first stage's). ``vocab``: the padded vocabulary over all
    tp ranks. Shapes on one GPU (the vocabulary and the projection's rows ÷ tp).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("deepseek-v3").model.arch
    >>> [p.shape for p in non_unit_order(arch, 1, 129_280, 1, 1, 0, 0)[0]]
    [(129280, 7168), (7168,), (7168,), (7168,), (7168, 14336), (7168,), (129280, 7168)]
    """
    h, rows = arch.hidden_size, vocab // tp
    tied, merged = ties_output(arch), pp == 1
    shared = not merged and shares_embedding_with_last_stage(arch)
    chunks: list[tuple[NonUnitParam, ...]] = []
    head: list[NonUnitParam] = []
    if stage == 0:
        # a tied embedding's output-layer wgrad is fused into its main_grad (layers.py)
        head.append(NonUnitParam((rows, h), own_bucket=shared, early=tied and merged, late=True))
        if arch.position_embedding is PositionEmbedding.LEARNED:
            assert arch.max_position_embeddings is not None
            head.append(NonUnitParam((arch.max_position_embeddings, h), early=False, late=True))
    if stage == last:
        tail: list[NonUnitParam] = []
        copy = NonUnitParam((rows, h), own_bucket=True) if shared and last != 0 else None
        if copy is not None and not tied:  # MTP's embedding copy, built before the decoder
            tail.append(copy)
        tail += _norm(arch)
        for _ in range(arch.mtp_layers):
            tail += [*_norm(arch), *_norm(arch), NonUnitParam((h // tp, 2 * h), fp8=True)]
            tail += _norm(arch)
        if arch.value_head:  # [h → 1] (+ bias), whole on every tp rank: model.value_head
            tail += [NonUnitParam((1, h))] + ([NonUnitParam((1,))] if arch.value_head_bias else [])
        elif not tied:
            tail.append(NonUnitParam((rows, h)))
        elif copy is not None:  # the output layer's own weight at pp > 1
            tail.append(copy)
        if merged and head:
            head += tail
        else:
            chunks.append(tuple(tail))
    if head:
        chunks.insert(0, tuple(head))
    return tuple(chunks)


@lru_cache(maxsize=4096)
def non_unit_buckets(
    arch: Architecture,
    tp: int,
    vocab: int,
    pp: int,
    v: int,
    stage: int,
    last: int,
    shard: int,
    fp8_params: bool,
) -> tuple[int, int]:
    """(elements of the buckets reduced before the stage's layers, elements of the bucket
    alive through the whole backward) of pipeline ``stage``'s parameters outside every layer
    (:func:`non_unit_order`) on one GPU, each bucket padded as allocated
    (:func:`bucket_elements` over ``shard``, the dp·cp ranks).

    ``_get_parameter_groups``: step 1 groups them by dtype (``fp8_params``: the FP8 projection
    apart); step 2 cuts each group, in order, into buckets closed once they hold
    :func:`bucket_size` elements or more (the parameter that crosses it included; no cut in a
    model chunk after the first, :func:`bucket_size`), a ``shared_embedding`` one alone. A
    bucket is allocated at its first member's gradient (``main_grad_getter`` →
    ``fetch_bucket``) and reduced once every member's is in (``GradReducePipeline.
    reduce_gradients``: ``get_ready_bucket_group_for_reduction``). So a bucket of parameters
    written before the layers' backward only is reduced before it (it heads the reduce-scatter
    queue); one that also holds the input embedding, whose gradient completes last, is alive
    from its first member's gradient to the step's last; the embedding's bucket with no earlier
    member fills after the layers (not counted).

    DeepSeek-V3 at pp 1 over 1,024 ranks (bucket 1.024e9): the embedding 129,280 × 7,168 =
    926,679,040, three norms and ``eh_proj`` 7,168 × 14,336 = 102,760,448 make 1,029,460,992,
    closed there, chunk 14,336 (the projection's row), padded to 71 × 1,024 × 14,336 =
    1,042,284,544 and allocated at the projection's gradient: alive through the backward. The
    MTP final norm and the output layer, 926,686,208 at chunk 7,168, padded to 127 × 1,024 ×
    7,168 = 932,184,064, are reduced first.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("deepseek-v3").model.arch
    >>> non_unit_buckets(arch, 1, 129_280, 1, 1, 0, 0, 1024, False)
    (932184064, 1042284544)

    Under FP8 primary weights the projection is a group of its own, so one BF16 bucket holds
    everything else (the output layer crosses 1.024e9): 1,853,386,752 at chunk 7,168, 253 ×
    1,024 × 7,168 = 1,857,028,096; the projection's bucket 7 × 1,024 × 14,336 = 102,760,448.

    >>> non_unit_buckets(arch, 1, 129_280, 1, 1, 0, 0, 1024, True)
    (102760448, 1857028096)
    """
    heads, held = _head_and_held(arch, tp, vocab, pp, v, stage, last, shard, fp8_params)
    return sum(heads), held


@lru_cache(maxsize=4096)
def head_bucket_count(
    arch: Architecture,
    tp: int,
    vocab: int,
    pp: int,
    v: int,
    stage: int,
    last: int,
    shard: int,
    fp8_params: bool,
) -> int:
    """How many buckets make the head of :func:`non_unit_buckets` (those reduced before the
    stage's layers): the reduce-scatter queue's drain may keep some of them and not others
    (:func:`model.mechanism_record.moe_queue_elements`).

    >>> from trainplan.scenarios.catalogue import get_model
    >>> arch = get_model("deepseek-v3").model.arch
    >>> head_bucket_count(arch, 1, 129_280, 1, 1, 0, 0, 1024, False)
    1
    >>> head_bucket_count(arch, 1, 129_280, 2, 1, 1, 1, 8, False)  # copy, eh_proj + norms, output
    3
    """
    heads, _ = _head_and_held(arch, tp, vocab, pp, v, stage, last, shard, fp8_params)
    return len(heads)


@lru_cache(maxsize=4096)
def _head_and_held(
    arch: Architecture,
    tp: int,
    vocab: int,
    pp: int,
    v: int,
    stage: int,
    last: int,
    shard: int,
    fp8_params: bool,
) -> tuple[tuple[int, ...], int]:
    """(the head buckets' padded elements, the held bucket's) of :func:`non_unit_buckets`."""
    heads: list[int] = []
    held = 0
    for i, chunk in enumerate(non_unit_order(arch, tp, vocab, pp, v, stage, last)):
        cut = bucket_size(shard) if i == 0 and v == 1 else None
        for b in _cut(chunk, cut, fp8_params):
            if not any(p.early for p in b):
                continue
            n = bucket_elements([p.shape for p in b], int(shard))
            if any(p.late for p in b):
                held += n
            else:
                heads.append(n)
    return tuple(heads), held


def _cut(
    chunk: Sequence[NonUnitParam], cut: int | None, fp8_params: bool
) -> list[list[NonUnitParam]]:
    """``_get_parameter_groups`` steps 1 and 2 on one model chunk's parameters outside its
    units: by dtype group, in order, a bucket closed once it holds ``cut`` elements or more
    (None: never), a ``shared_embedding`` parameter alone."""
    buckets: list[list[NonUnitParam]] = []
    for fp8 in dict.fromkeys(p.fp8 and fp8_params for p in chunk):
        bucket: list[NonUnitParam] = []
        for p in (q for q in chunk if (q.fp8 and fp8_params) == fp8):
            if p.own_bucket:
                buckets += [bucket, [p]] if bucket else [[p]]
                bucket = []
                continue
            bucket.append(p)
            if cut is not None and sum(math.prod(q.shape) for q in bucket) >= cut:
                buckets.append(bucket)
                bucket = []
        if bucket:
            buckets.append(bucket)
    return buckets
