"""How the transformer layers are cut into pipeline stages and model chunks.

The model is cut into ``pp·v`` consecutive model chunks (v = virtual stages per rank, 1 without
interleaving); pipeline rank i holds chunks i, i + pp, i + 2·pp, … (the loop placement,
Narayanan et al. 2021, arXiv 2104.04473, §2.2.2), or, under a V schedule (ZB-V, DualPipeV; two
chunks per rank), chunks i and 2·pp − 1 − i (the V placement, Qi et al. 2024 §6; torchtitan
``torchtitan/distributed/pipeline_parallel.py`` ``stage_ids_this_rank(style="v")``:
``zip(range(pp_size), range(num_stages - 1, pp_size - 1, -1))``, and
``torch.distributed.pipelining._utils.generate_stage_to_rank_mapping(style="v")``), so rank 0
holds the first and the last chunk (:func:`chunk_ranks`). The first chunk also holds the input
embedding and the last the final norm, the output layer and the loss (:func:`output_rank`).

Three ways to size the chunks, each what a framework runs:

- the framework's default split (:func:`default_chunk_sizes`, its rule :func:`split_rule_of`):
  under ``megatron`` (and ``textbook``) as even as L allows, the chunks at the ends giving a
  layer back first (Llama 3 405B's 126 layers over 16 stages are 7, 8 × 14, 7; Dubey et al.
  2024 §3.3.2), and with L + 1 or L + 2 chunks an embedding-only first chunk and an
  output-only last chunk (ibid.); under ``deepspeed`` the first L mod pp stages one layer more
  (8 × 14, 7, 7: DeepSpeed's ``partition_method='type:transformer'``, which
  Megatron-DeepSpeed's ``GPTModelPipe`` always passes); under ``fsdp2`` torchtitan's
  generated split, the embedding and the output counted as one layer each (7, 8 × 14, 7 here,
  but 20, 21, 20, 19 for 80 layers over 4 stages);
- explicit layer counts per chunk or per rank (:attr:`model.layout.Layout.stage_layers`;
  Megatron-Core's ``--pipeline-model-parallel-layout`` writes the same thing as a string);
- Megatron-Core's arguments (:func:`model.megatron_split.megatron_stage_layers`): ``--decoder-first-pipeline-num-layers``
  / ``--decoder-last-pipeline-num-layers``, and ``--account-for-embedding-in-pipeline-split`` /
  ``--account-for-loss-in-pipeline-split``, which count the embedding and the loss as a layer
  each so that the end stages hold one transformer layer fewer (Megatron-Core
  ``megatron/core/transformer/transformer_block.py``, ``get_num_layers_to_build``; the rules are
  checked in ``transformer_config.py``).

A model's multi-token-prediction blocks (layer indices L, L + 1, …) go to the last chunk
(:func:`model_chunks`, :func:`stage_layers`; Megatron-Core's default MTP placement).

Every function here is exact integer arithmetic; errors are :class:`model.errors.LayoutError`
naming the parameter, the value and the rule.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from trainplan.model.errors import LayoutError

if TYPE_CHECKING:
    from trainplan.model.specs import Architecture

__all__ = [
    "MAX_EMPTY_CHUNKS",
    "V_SCHEDULES",
    "chunk_ranks",
    "output_rank",
    "balanced_chunk_sizes",
    "check_chunks",
    "check_framework_split",
    "check_stage_layers",
    "chunk_sizes_from_ranks",
    "default_chunk_sizes",
    "DEEPSPEED_SPLIT",
    "TORCHTITAN_SPLIT",
    "split_rule_of",
    "model_chunks",
    "split_layers",
    "stage_chunks",
    "stage_layers",
]

MAX_EMPTY_CHUNKS = 2
"""Model chunks of the default split that may hold no transformer layer: the first (embedding
only) and the last (output layer only), Llama 3 §3.3.2."""


V_SCHEDULES = frozenset({"zb-v", "dualpipev"})
"""The schedules whose two chunks per rank are placed in V order
(:class:`model.pipeline.Schedule` values: ZB-V, DualPipeV)."""


def _v_placement(schedule: object, v: int) -> bool:
    return v == 2 and str(getattr(schedule, "value", schedule)) in V_SCHEDULES


@lru_cache(maxsize=1024)
def chunk_ranks(pp: int, v: int = 1, schedule: object = None) -> tuple[int, ...]:
    """The pipeline rank holding each of the ``pp·v`` model chunks, in model order: chunk j on
    rank ``j mod pp`` (the loop placement), or under a V schedule (:data:`V_SCHEDULES`, v = 2)
    on rank j for j < pp and ``2·pp − 1 − j`` after (torchtitan ``stage_ids_this_rank``,
    ``style="v"``).

    Examples
    --------
    >>> chunk_ranks(4, 2)
    (0, 1, 2, 3, 0, 1, 2, 3)
    >>> chunk_ranks(4, 2, "zb-v")
    (0, 1, 2, 3, 3, 2, 1, 0)
    """
    if _v_placement(schedule, v):
        return tuple(j if j < pp else 2 * pp - 1 - j for j in range(2 * pp))
    return tuple(j % pp for j in range(pp * v))


def output_rank(pp: int, v: int = 1, schedule: object = None) -> int:
    """The pipeline rank holding the last model chunk: the final norm, the output layer, the
    loss and the MTP blocks — rank 0 under a V schedule, ``pp − 1`` otherwise
    (:func:`chunk_ranks`).

    >>> output_rank(4, 2, "dualpipev"), output_rank(4, 2, "interleaved")
    (0, 3)
    """
    return chunk_ranks(pp, v, schedule)[-1]


DEEPSPEED_SPLIT = "deepspeed"
"""The split rule of ``deepspeed`` with pp > 1 (:func:`default_chunk_sizes`)."""

TORCHTITAN_SPLIT = "torchtitan"
"""The split rule of ``fsdp2`` with pp > 1 (:func:`default_chunk_sizes`)."""

_FRAMEWORK_SPLITS = {"deepspeed": DEEPSPEED_SPLIT, "fsdp2": TORCHTITAN_SPLIT}


def split_rule_of(uneven: bool, framework: object, pp: int) -> bool | str:
    """The rule that cuts a layout's layers into model chunks when it gives no ``stage_layers``:
    :data:`DEEPSPEED_SPLIT` under ``deepspeed`` and :data:`TORCHTITAN_SPLIT` under ``fsdp2``
    when pp > 1 (those frameworks split the model their own way, whatever the layout's
    ``uneven_stages``); otherwise ``uneven`` (the layout's ``uneven_stages``: the ends give a
    layer back first). What every split function here takes as its ``uneven`` argument.

    >>> split_rule_of(True, "deepspeed", 16), split_rule_of(True, "fsdp2", 1)
    ('deepspeed', True)
    """
    rule = _FRAMEWORK_SPLITS.get(str(getattr(framework, "value", framework)))
    return rule if rule is not None and pp > 1 else uneven


def check_chunks(num_layers: int, pp: int, v: int = 1, uneven: bool | str = True) -> None:
    """Check that the default split can cut ``num_layers`` layers into ``pp·v`` model chunks.
    ``uneven``: the split rule (:func:`split_rule_of`).

    Raises
    ------
    LayoutError
        When more than :data:`MAX_EMPTY_CHUNKS` chunks would hold no layer (only the first
        chunk, embedding only, and the last, output layer only, may be empty; torchtitan's
        ``_generate_llm_fqn_per_model_part`` refuses more stages than L + 2 too), or any chunk
        would be empty with uneven stages off, or under ``deepspeed`` any stage would hold no
        layer (``partition_balanced`` then puts the output layer on an earlier stage).
    """
    chunks = pp * v
    if uneven == DEEPSPEED_SPLIT and chunks > num_layers:
        raise LayoutError(
            f"pp: {pp} stages for num_layers = {num_layers} under deepspeed; at most num_layers: "
            "with fewer layers than stages DeepSpeed's partition_balanced moves the output layer "
            "off the last stage"
        )
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


def _deepspeed_sizes(num_layers: int, chunks: int) -> tuple[int, ...]:
    """DeepSpeed's split: ⌊L/pp⌋ layers per stage, the first L mod pp stages one more.

    Megatron-DeepSpeed (4efb479d) ``megatron/model/gpt_model.py`` ``GPTModelPipe.__init__``
    builds the layer specs [_to_float16, EmbeddingPipe, L transformer layers, (the MoE loss),
    the final norm, LMHeadPipe, float16_to_fp32] and always passes
    ``partition_method='type:transformer'`` to ``PipelineModule``; DeepSpeed (edaa7221)
    ``deepspeed/runtime/pipe/module.py`` ``PipelineModule._partition_layers`` weighs each spec
    1 when its class name matches "transformer", 0 otherwise, and
    ``deepspeed/runtime/utils.py`` ``partition_balanced`` (a linear partition; ties keep the
    latest cut) gives these counts (checked for pp 2 … 8, 16 and L pp … 39, 61, 80, 95, 126)."""
    q, r = divmod(num_layers, chunks)
    return tuple(q + (i < r) for i in range(chunks))


def _torchtitan_sizes(num_layers: int, chunks: int) -> tuple[int, ...]:
    """torchtitan's generated split over ``chunks`` model chunks (pp·v stages): E = L + 2
    effective layers (the embedding and the norm + output one layer each), ⌊E/S⌋ per chunk, the
    first E mod S chunks one more, then the first and the last chunk give one back.

    torchtitan (b5bcd76c) ``torchtitan/distributed/pipeline_parallel.py``: ``pipeline_llm``
    generates the split when ``module_fqns_per_model_part`` is None, with
    ``_get_pipeline_metadata``'s weights ``pipeline_parallel_first_stage_less_layers`` and
    ``pipeline_parallel_last_stage_less_layers`` (both 1, ``torchtitan/config/configs.py``),
    by ``_generate_llm_fqn_per_model_part``."""
    q, r = divmod(num_layers + 2, chunks)
    sizes = [q + (i < r) for i in range(chunks)]
    sizes[0] -= 1
    sizes[-1] -= 1
    return tuple(sizes)


def default_chunk_sizes(
    num_layers: int, pp: int, v: int = 1, uneven: bool | str = True
) -> tuple[int, ...]:
    """Layers of each of the ``pp·v`` model chunks, in model order, under the default split.

    ``uneven`` is the split rule (:func:`split_rule_of`): True — every chunk gets
    ceil(L/(pp·v)) layers and the chunks at the ends give one back first (first, last, second,
    second-to-last, …), so the stages that also hold the embedding and the output layer get
    fewer layers (Megatron-LM's and Llama 3's placement); False — the same, pp·v dividing L;
    :data:`DEEPSPEED_SPLIT` — :func:`_deepspeed_sizes`; :data:`TORCHTITAN_SPLIT` —
    :func:`_torchtitan_sizes`.

    Raises
    ------
    LayoutError
        See :func:`check_chunks`; or pp·v does not divide L and ``uneven`` is False.

    Examples
    --------
    >>> default_chunk_sizes(126, 16)
    (7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7)
    >>> default_chunk_sizes(4, 3)
    (1, 2, 1)
    >>> default_chunk_sizes(126, 16, 1, "deepspeed")
    (8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7, 7)
    >>> default_chunk_sizes(80, 4, 1, "torchtitan")
    (20, 21, 20, 19)
    """
    chunks = pp * v
    check_chunks(num_layers, pp, v, uneven)
    if uneven == DEEPSPEED_SPLIT:
        return _deepspeed_sizes(num_layers, chunks)
    if uneven == TORCHTITAN_SPLIT:
        return _torchtitan_sizes(num_layers, chunks)
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
    return tuple(sizes)


def check_framework_split(
    num_layers: int, pp: int, v: int, rule: bool | str, sizes: tuple[int, ...] | None
) -> None:
    """Refuse explicit ``stage_layers`` the framework cannot run: under ``deepspeed`` with pp > 1
    only a ``partition_method`` of DeepSpeed's: ``type:transformer`` (:func:`_deepspeed_sizes`,
    all deepspeedai/Megatron-DeepSpeed's ``GPTModelPipe`` runs) or ``type:transformer|embedding``
    (bigscience-workshop/Megatron-DeepSpeed's ``--pp-partition-method``, as BLOOM ran: the
    embedding and the tied output weigh a layer each, the counts of :func:`_torchtitan_sizes`,
    checked against ``partition_balanced``). torchtitan takes any split.

    >>> check_framework_split(126, 16, 1, "deepspeed", (6,) + (8,) * 15)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: stage_layers: 6,8,...,8 under deepspeed with pp 16: ...
    """
    if sizes is None or rule != DEEPSPEED_SPLIT:
        return
    own = (_deepspeed_sizes(num_layers, pp * v), _torchtitan_sizes(num_layers, pp * v))
    if tuple(sizes) not in own:
        raise LayoutError(
            f"stage_layers: {','.join(map(str, sizes))} under deepspeed with pp {pp}: "
            "Megatron-DeepSpeed partitions with partition_method 'type:transformer' "
            f"({','.join(map(str, own[0]))} here) or 'type:transformer|embedding' "
            f"({','.join(map(str, own[1]))})"
        )


def chunk_sizes_from_ranks(rank_layers: tuple[int, ...], v: int) -> tuple[int, ...]:
    """Per-chunk layer counts (model order) from per-rank counts, each rank's layers divided
    evenly over its v chunks (Megatron-Core's rule before explicit layouts: with virtual stages
    every stage's layer count must be divisible by v).

    Raises
    ------
    LayoutError
        When v does not divide a rank's count.

    Examples
    --------
    >>> chunk_sizes_from_ranks((4, 6), 2)
    (2, 3, 2, 3)
    """
    for i, n in enumerate(rank_layers):
        if n % v:
            raise LayoutError(
                f"stage_layers: stage {i} holds {n} layers, not divisible by virtual_stages {v} "
                "(give one count per model chunk instead, pp × virtual_stages of them)"
            )
    pp = len(rank_layers)
    return tuple(rank_layers[j % pp] // v for j in range(pp * v))


def balanced_chunk_sizes(rank_layers: tuple[int, ...], v: int) -> tuple[int, ...]:
    """Per-chunk layer counts (model order) from per-rank counts, each rank's n layers spread as
    evenly as they go over its v chunks: ⌊n/v⌋ each, the rank's last ``n mod v`` chunks one
    more (later chunks are held for fewer micro-batches at an interleaved stage's peak,
    :func:`model.pipeline.interleaved_peak`). Where v divides every count it is
    :func:`chunk_sizes_from_ranks`; the per-stage search's split of a stage's layers over its
    model chunks (:mod:`optimizer.stage_tables`), written out per chunk (Megatron-Core's
    ``--pipeline-model-parallel-layout`` takes any per-chunk counts).

    Examples
    --------
    >>> balanced_chunk_sizes((4, 7), 2)
    (2, 3, 2, 4)
    >>> balanced_chunk_sizes((4, 6), 2) == chunk_sizes_from_ranks((4, 6), 2)
    True
    """
    # chunk c·pp + i is rank i's c-th (model order)
    return tuple(n // v + (c >= v - n % v) for c in range(v) for n in rank_layers)


def check_stage_layers(num_layers: int, pp: int, v: int, sizes: tuple[int, ...]) -> None:
    """Check explicit per-chunk layer counts: pp·v whole numbers ≥ 0 that sum to L.

    Empty chunks are allowed anywhere (Megatron-Core's custom pipeline layouts fill them with an
    identity op), as long as the counts sum to L.

    Raises
    ------
    LayoutError
        Naming the count, the sum or the length that breaks the rule.

    Examples
    --------
    >>> check_stage_layers(32, 4, 1, (8, 8, 8, 7))
    Traceback (most recent call last):
    ...
    trainplan.model.errors.LayoutError: stage_layers: 8+8+8+7 = 31 layers, not num_layers = 32
    """
    if len(sizes) != pp * v:
        raise LayoutError(
            f"stage_layers: {len(sizes)} counts for pp {pp} × virtual_stages {v} = {pp * v} model "
            "chunks (give one per stage, or one per model chunk in model order)"
        )
    for n in sizes:
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise LayoutError(f"stage_layers: {n!r} must be a whole number >= 0")
    if sum(sizes) != num_layers:
        raise LayoutError(
            f"stage_layers: {'+'.join(map(str, sizes))} = {sum(sizes)} layers, not num_layers = "
            f"{num_layers}"
        )


@lru_cache(maxsize=4096)
def split_layers(
    num_layers: int,
    pp: int,
    v: int = 1,
    uneven: bool | str = True,
    sizes: tuple[int, ...] | None = None,
    schedule: object = None,
) -> tuple[tuple[int, ...], ...]:
    """Layer indices held by each of the ``pp`` pipeline ranks (0-based layers).

    ``sizes``: explicit layers per model chunk in model order (pp·v counts summing to L); None =
    :func:`default_chunk_sizes`. Rank i holds chunks i, i + pp, …, or under a V ``schedule``
    chunks i and 2·pp − 1 − i (:func:`chunk_ranks`).

    Raises
    ------
    LayoutError
        See :func:`default_chunk_sizes` and :func:`check_stage_layers`.

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
    >>> split_layers(5, 2, sizes=(1, 4))
    ((0,), (1, 2, 3, 4))
    >>> split_layers(6, 2, v=2, schedule="zb-v")  # chunks (0), (1, 2), (3, 4), (5)
    ((0, 5), (1, 2, 3, 4))
    """
    chunks = pp * v
    if sizes is None:
        sizes = default_chunk_sizes(num_layers, pp, v, uneven)
    else:
        check_stage_layers(num_layers, pp, v, sizes)
    starts = [sum(sizes[:j]) for j in range(chunks)]
    ranks: list[list[int]] = [[] for _ in range(pp)]
    for j, rank in enumerate(chunk_ranks(pp, v, schedule)):
        ranks[rank].extend(range(starts[j], starts[j] + sizes[j]))
    return tuple(tuple(r) for r in ranks)


@lru_cache(maxsize=4096)
def model_chunks(
    arch: Architecture,
    pp: int,
    v: int = 1,
    uneven: bool | str = True,
    sizes: tuple[int, ...] | None = None,
) -> tuple[tuple[int, ...], ...]:
    """The layers of each of the pp·v model chunks in model order (:func:`split_layers` with
    ``pp·v`` stages and the per-chunk ``sizes``), the MTP blocks (indices L, L + 1, …) appended
    to the last chunk: they sit on the last pipeline stage, after the output layer's input
    (Megatron-Core's default MTP placement)."""
    chunks = split_layers(arch.num_layers, pp * v, 1, uneven, sizes)
    mtp = tuple(range(arch.num_layers, arch.num_layers + arch.mtp_layers))
    return chunks[:-1] + (chunks[-1] + mtp,)


@lru_cache(maxsize=4096)
def stage_layers(
    arch: Architecture,
    pp: int,
    v: int = 1,
    uneven: bool | str = True,
    sizes: tuple[int, ...] | None = None,
    schedule: object = None,
) -> tuple[tuple[int, ...], ...]:
    """The layers each of the pp pipeline ranks holds: its chunks of :func:`model_chunks`
    (:func:`chunk_ranks`: i, i + pp, …; under a V ``schedule`` i and 2·pp − 1 − i), the MTP
    blocks in the last chunk (on the last rank; on rank 0 under a V schedule).

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=4, hidden_size=8, num_attention_heads=2,
    ...     ffn_hidden_size=32, vocab_size=16, mtp_layers=1)
    >>> stage_layers(arch, 2)
    ((0, 1), (2, 3, 4))
    >>> stage_layers(arch, 2, 2, schedule="zb-v")
    ((0, 3, 4), (1, 2))
    """
    return tuple(
        tuple(j for c in held for j in c)
        for held in _rank_chunks(arch, pp, v, uneven, sizes, schedule)
    )


def stage_chunks(
    arch: Architecture,
    pp: int,
    v: int,
    uneven: bool | str,
    stage: int,
    sizes: tuple[int, ...] | None = None,
    schedule: object = None,
) -> tuple[tuple[int, ...], ...]:
    """The layer indices of each of pipeline rank ``stage``'s v model chunks, in the order the
    rank holds them: chunks stage, stage + pp, … of :func:`model_chunks` (Narayanan et al. 2021
    §2.2.2); under a V ``schedule`` chunks stage and 2·pp − 1 − stage (:func:`chunk_ranks`).
    Their concatenation is :func:`stage_layers`' ``stage``-th entry.

    Examples
    --------
    >>> from trainplan.model.specs import Architecture
    >>> arch = Architecture(num_layers=6, hidden_size=8, num_attention_heads=2,
    ...     ffn_hidden_size=32, vocab_size=16)
    >>> stage_chunks(arch, 2, 2, True, 0, (1, 1, 2, 2))
    ((0,), (2, 3))
    >>> stage_chunks(arch, 2, 2, True, 0, (1, 1, 2, 2), "dualpipev")
    ((0,), (4, 5))
    """
    return _rank_chunks(arch, pp, v, uneven, sizes, schedule)[stage]


@lru_cache(maxsize=4096)
def _rank_chunks(
    arch: Architecture, pp: int, v: int, uneven: bool | str, sizes: Any, schedule: Any
) -> Any:
    """Every rank's :func:`stage_chunks` at once, in one pass over the chunks."""
    held: list[list[tuple[int, ...]]] = [[] for _ in range(pp)]
    ranks = chunk_ranks(pp, v, schedule)
    for chunk, rank in zip(model_chunks(arch, pp, v, uneven, sizes), ranks, strict=True):
        held[rank].append(chunk)
    return tuple(map(tuple, held))
