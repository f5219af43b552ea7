"""The per-stage parameter split: which parameters one GPU of each pipeline stage holds (after
tp, pp, etp·ep; before ZeRO), and which stage holds the most.

* :func:`stage_params_per_gpu`, :func:`gather_units`, :func:`stage_linear_per_gpu` — exact, per
  distinct split structure (:class:`model.terms.split_key.SplitKey`: tp, pp, v, ep, uneven
  stages, etp, the framework's physical flag and vocabulary padding, explicit stage sizes, the
  schedule); cached, and read by the terms through
  :func:`model.terms.split_key.read_split` on :data:`SPLIT_FIELDS`;
* :func:`split_params`, :func:`busiest_params`, :func:`units_per_gpu`, :func:`linear_per_gpu` —
  what the terms read of them at the rank ``f.stage`` (a DualPipe rank holds two stages);
* what those parameters hold in bytes is :mod:`model.terms.state`'s.

Units: parameter elements on one GPU (exact Fractions: a declared size divides evenly over
tp·pp). Sources: :mod:`model.params` (the per-layer counts), :mod:`model.split` (which layers a
stage holds).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import (
    count_params,
    layer_params,
    padded_vocab,
    shares_embedding_with_last_stage,
    stage_params,
)
from trainplan.model.pipeline import Schedule
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.split_key import CACHE, SPLIT_FIELDS, SplitKey, on_split, read_split
from trainplan.model.xp import is_array, namespace, where

__all__ = [
    "SPLIT_FIELDS",
    "CACHE",
    "stage_params_per_gpu",
    "stage_linear_per_gpu",
    "gather_units",
    "layer_units",
    "output_params",
    "busiest_stage",
    "SplitKey",
    "shared_embedding_per_gpu",
    "any_dualpipe",
    "split_params",
    "busiest_params",
    "units_per_gpu",
    "non_unit_params",
    "fp8_gather_units",
    "fp8_gather_units_per_gpu",
    "linear_split_per_gpu",
    "non_units_per_gpu",
    "layer_counts",
    "layer_count_per_gpu",
    "layer_units_per_gpu",
    "moe_layer_experts",
    "moe_experts_per_gpu",
    "linear_per_gpu",
    "busiest_linear",
]


@lru_cache(maxsize=CACHE)
def stage_params_per_gpu(
    key: SplitKey,
) -> tuple[tuple[int, tuple[int, ...], Fraction, Fraction], ...]:
    """(stage, layer indices, dense parameters on one GPU, routed-expert parameters on one GPU)
    of every pipeline stage: dense ÷ tp (except, under a physical profile, what every tp rank
    holds whole), experts ÷ etp·ep; a declared size divided evenly over tp·pp. Exact, cached on
    the split structure.

    Llama 3 8B at pp 2: 16 layers of 218,112,000 each, with the embedding (128,256 × 4,096 =
    525,336,576) on the first and the final norm (4,096) and the output layer on the second.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> m = get_model("llama3-8b").model
    >>> [p[2] for p in stage_params_per_gpu(SplitKey(m, 1, 2, 1, 1, False, 1, True, None, 1))]
    [Fraction(4015128576, 1), Fraction(4015132672, 1)]
    """
    model, arch, tp, pp = key.model, key.model.arch, key.tp, key.pp
    if model.num_params_declared is not None or arch is None:
        n = model.num_params_declared or count_params(arch).total  # type: ignore[arg-type]
        per_gpu = Fraction(n, tp * pp)
        split = key.layers() if arch else ((),) * pp
        return tuple((i, layers, per_gpu, Fraction(0)) for i, layers in enumerate(split))
    return tuple(
        (
            sp.stage,
            sp.layers,
            key.dense_per_gpu(sp.dense, sp.tp_replicated),
            key.experts_per_gpu(sp.experts),
        )
        for sp in stage_params(arch, pp, key.v, key.vocab(), key.uneven, key.sizes, key.schedule)
    )


@lru_cache(maxsize=CACHE)
def stage_linear_per_gpu(key: SplitKey) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, (the linear layers' weight elements on one GPU, those of its largest layer):
    :attr:`LayerParams.linear` ÷ tp (except the tp-replicated part under a physical profile)
    + :attr:`LayerParams.expert_linear` ÷ etp·ep — what a GEMM precision's cached weight copies
    scale with (:mod:`model.precision`; the largest layer for the gathered units of ZeRO-3).
    Zeros for a size-only model (its layers are unknown)."""
    arch = key.model.arch
    if arch is None:
        return ((Fraction(0), Fraction(0)),) * key.pp
    out = []
    for layers in key.layers():
        per_layer = [Fraction(0)]
        for j in layers:
            lp = layer_params(arch, j)
            per_layer.append(
                key.dense_per_gpu(lp.linear, lp.linear_replicated)
                + key.experts_per_gpu(lp.expert_linear)
            )
        out.append((sum(per_layer, Fraction(0)), max(per_layer)))
    return tuple(out)


@lru_cache(maxsize=CACHE)
def layer_units(key: SplitKey) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, the (dense, expert) parameters on one GPU of its largest transformer layer:
    the unit of a framework whose units are the layers only (Megatron-FSDP's
    ``fsdp_unit_modules``). (0, 0) for a size-only model and for a stage with no layers."""
    arch = key.model.arch
    if arch is None:
        return ((Fraction(0), Fraction(0)),) * key.pp
    # a layer's unit depends only on its kind (dense or MoE): one of each is enough
    kind_unit = {}
    for moe in (False, True):
        j = arch.kind_index(moe)
        if j is not None:
            lp = layer_params(arch, j)
            kind_unit[moe] = (
                key.dense_per_gpu(lp.dense, lp.tp_replicated),
                key.experts_per_gpu(lp.experts),
            )
    largest: dict[frozenset[bool], tuple[Fraction, Fraction]] = {}  # by the kinds a stage holds
    out = []
    for layers in key.layers():
        kinds = frozenset(arch.is_moe_layer(j) for j in layers)
        if kinds not in largest:
            largest[kinds] = max(
                (kind_unit[k] for k in sorted(kinds)),
                key=lambda u: u[0] + u[1],
                default=(Fraction(0), Fraction(0)),
            )
        out.append(largest[kinds])
    return tuple(out)


@lru_cache(maxsize=CACHE)
def moe_layer_experts(key: SplitKey) -> tuple[Fraction, ...]:
    """Per stage, the routed-expert parameters on one GPU of its layer unit
    (:func:`layer_units`) where every layer it holds is a MoE layer (Megatron-FSDP queues such a
    unit's expert and dense gradient buckets apart:
    :meth:`model.mechanism_record.Mechanism.reduce_queue_elements`); 0 where it holds a dense
    layer, or no layer, and for a size-only model.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> m = get_model("mixtral-8x7b").model  # 8 experts × 3 × 4,096 × 14,336
    >>> moe_layer_experts(SplitKey(m, 1, 1, 1, 1, False, 1, True, None, 1))
    (Fraction(1409286144, 1),)
    >>> moe_layer_experts(SplitKey(get_model("deepseek-v3").model, 1, 1, 1, 1, False, 1, True, None, 8))
    (Fraction(0, 1),)
    """
    arch = key.model.arch
    if arch is None:
        return (Fraction(0),) * key.pp
    return tuple(
        expert if layers and all(arch.is_moe_layer(j) for j in layers) else Fraction(0)
        for (_, expert), layers in zip(layer_units(key), key.layers(), strict=True)
    )


def output_params(key: SplitKey, counts: Any, vocab: int) -> Fraction:
    """The output layer's parameters on one GPU (vocabulary-parallel, ÷ tp): its own, or the
    tied embedding's ``V·h``; a value head's whole (:mod:`model.value_head`)."""
    if key.model.arch.value_head:  # type: ignore[union-attr]
        return Fraction(counts.output)
    return Fraction(counts.output or vocab * key.model.arch.hidden_size, key.tp)  # type: ignore[union-attr]


@lru_cache(maxsize=CACHE)
def gather_units(key: SplitKey) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, the (dense, expert) parameters on one GPU of the largest unit gathered or
    reduced at once (ZeRO-3 / FSDP units): one of its layers (:func:`layer_units`), the input
    embedding (first stage) or the output layer (:func:`model.split.output_rank`). (0, 0) for a
    size-only model, whose layers are unknown."""
    layers = layer_units(key)
    arch = key.model.arch
    if arch is None:
        return layers
    vocab = key.vocab()
    counts = count_params(arch, vocab)
    out = []
    last = key.output_rank()
    for i, layer in enumerate(layers):
        units = [layer]
        if i == 0:
            units.append((Fraction(counts.embedding, key.tp), Fraction(0)))
        if i == last:
            units.append((output_params(key, counts, vocab), Fraction(0)))
        out.append(units[0] if len(units) == 1 else max(units, key=lambda u: u[0] + u[1]))
    return tuple(out)


def fp8_gather_units(key: SplitKey) -> tuple[tuple[Fraction, ...], ...]:
    """Per stage, (the largest unit outside the layers — the input embedding on the first stage,
    the output layer on :func:`model.split.output_rank`, 0 elsewhere —, then for each layer kind
    the stage holds, dense then MoE, that layer's parameters and its FP8-gathered elements; 0, 0
    for a kind it does not hold) on one GPU: the gathered units under torchao's FP8 all-gather,
    which narrows each block's ``Float8Linear`` weights only (:func:`model.memory.fp8_unit_cut`).
    The FP8-gathered elements are :attr:`model.params.LayerParams.linear` (QKV or MLA
    projections, output projection, dense FFN or shared experts), not the router nor the routed
    experts: torchtitan's ``Float8LinearConverter`` swaps ``nn.Linear`` modules only (its
    DeepSeek-V3 float8 config filters ``router.gate``) and a MoE block's ``GroupedExperts``
    parameters, in the same ``fully_shard`` unit (``apply_fsdp``'s ``shard_placement_fn``),
    gather in BF16 (:func:`model.fp8_gathers.fp8_gathered_experts`). The largest unit depends on
    the weight bytes (a MoE layer can outweigh a dense one in BF16 but not once its linears are
    1 B), so both kinds are given. Zeros for a size-only model.

    Mixtral 8x7B at tp 1 (MoE layers only, no shared expert): the FP8-gathered elements of a
    layer are its attention projections, Q and O 4,096², K and V 4,096 · 1,024.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> m = get_model("mixtral-8x7b").model  # MoE layers only: no dense kind
    >>> outside, dense, dense_linear, layer, linear = fp8_gather_units(
    ...     SplitKey(m, 1, 1, 1, 1, False, 1, True, None, 1))[0]
    >>> (dense, dense_linear), linear == 4096 * 4096 * 2 + 2 * 4096 * 1024
    ((Fraction(0, 1), Fraction(0, 1)), True)
    """
    arch = key.model.arch
    if arch is None:
        return ((Fraction(0),) * 5,) * key.pp
    kinds: dict[bool, tuple[Fraction, Fraction]] = {}
    for moe in (False, True):
        j = arch.kind_index(moe)
        if j is not None:
            lp = layer_params(arch, j)
            kinds[moe] = (
                key.dense_per_gpu(lp.dense, lp.tp_replicated) + key.experts_per_gpu(lp.experts),
                key.dense_per_gpu(lp.linear, lp.linear_replicated),
            )
    vocab = key.vocab()
    counts = count_params(arch, vocab)
    last = key.output_rank()
    out = []
    for i, layers in enumerate(key.layers()):
        outside = [Fraction(0)]
        if i == 0:
            outside.append(Fraction(counts.embedding, key.tp))
        if i == last:
            outside.append(output_params(key, counts, vocab))
        held = {arch.is_moe_layer(j) for j in layers}
        zero = (Fraction(0), Fraction(0))
        dense = kinds[False] if False in held else zero
        routed = kinds[True] if True in held else zero
        out.append((max(outside), *dense, *routed))
    return tuple(out)


def fp8_gather_units_per_gpu(c: Context, f: Fields) -> tuple[Any, ...]:
    """:func:`fp8_gather_units` of stage ``f.stage``."""
    return read_split(c, f, fp8_gather_units)


def non_unit_params(key: SplitKey) -> tuple[Fraction, ...]:
    """Per stage, the parameters on one GPU outside every transformer layer: the input
    embedding (first stage), and on :func:`model.split.output_rank` the final norm, the MTP
    modules' norms and projections, the output layer and the embedding's copy (tied or MTP, pp
    > 1): the stage's parameters less its layers' (:func:`model.params.stage_params`). What a
    framework that keeps its non-unit modules gathered holds whole
    (:attr:`model.mechanisms.Mechanism.non_units_gathered`). Zeros for a size-only model.

    Llama 3 8B at pp 1: the embedding and the output layer, 128,256 × 4,096 each, and the
    final norm, 4,096.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> m = get_model("llama3-8b").model
    >>> non_unit_params(SplitKey(m, 1, 1, 1, 1, False, 1, True, None, 1))
    (Fraction(1050677248, 1),)
    """
    arch = key.model.arch
    if arch is None:
        return (Fraction(0),) * key.pp
    out = []
    for sp in stage_params(arch, key.pp, key.v, key.vocab(), key.uneven, key.sizes, key.schedule):
        layers = [layer_params(arch, j) for j in sp.layers]
        dense = sp.dense - sum(lp.dense for lp in layers)
        replicated = sp.tp_replicated - sum(lp.tp_replicated for lp in layers)
        out.append(key.dense_per_gpu(dense, replicated))
    return tuple(out)


@lru_cache(maxsize=CACHE)
def layer_counts(key: SplitKey) -> tuple[int, ...]:
    """Per stage, the transformer layers it holds (the MTP blocks among them): the buckets
    behind the parameters outside the layers in Megatron-FSDP's reduce-scatter queue
    (:meth:`model.mechanism_record.Mechanism.reduce_queue_elements`). Zeros for a size-only
    model, whose layers are unknown: its layer units are 0 (:func:`layer_units`), so the
    queue holds no layer bucket whatever the count, as under every other framework's ZeRO-3.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> m = get_model("llama3-8b").model
    >>> layer_counts(SplitKey(m, 1, 2, 1, 1, False, 1, True, None, 1))
    (16, 16)
    >>> from trainplan.model.model_spec import ModelSpec
    >>> sized = ModelSpec(name="70B", num_params_declared=70 * 10**9)  # --params 70B: no layers
    >>> layer_counts(SplitKey(sized, 1, 2, 1, 1, False, 1, True, None, 1))
    (0, 0)
    """
    if key.model.arch is None:
        return (0,) * key.pp
    return tuple(len(held) for held in key.layers())


def busiest_stage(params: tuple[tuple[int, tuple[int, ...], Fraction, Fraction], ...]) -> int:
    """The stage with the most parameters per GPU among :func:`stage_params_per_gpu`'s
    ``params`` (the first of equals): the stage whose gradients dp reduces last and whose
    optimizer steps longest."""
    return max(params, key=lambda p: (p[2] + p[3], -p[0]))[0]


@lru_cache(maxsize=CACHE)
def _stage_dense_expert(key: SplitKey) -> tuple[Any, ...]:
    return tuple((d, e) for _, _, d, e in stage_params_per_gpu(key))


def _busiest(key: SplitKey) -> tuple[Any, Any]:
    params = stage_params_per_gpu(key)
    _, _, dense, experts = params[busiest_stage(params)]
    return dense, experts


def shared_embedding_per_gpu(model: ModelSpec, tp: int, pp: int, vocab_multiple: int) -> Fraction:
    """Elements on one GPU of the last stage's copy of the input embedding
    (:func:`model.params.shares_embedding_with_last_stage`: MTP modules or tied embeddings, pp > 1;
    vocabulary-parallel, ÷ tp), 0 where it keeps none."""
    arch = model.arch
    if arch is None or pp == 1 or not shares_embedding_with_last_stage(arch):
        return Fraction(0)
    return Fraction(padded_vocab(arch.vocab_size, vocab_multiple, tp) * arch.hidden_size, tp)


def _dualpipe_dense_expert(key: SplitKey) -> tuple[Any, ...]:
    """Per DualPipe rank r, (dense, expert) parameters on one GPU of its two stages: stage r and
    the mirror stage ``pp − 1 − r`` (deepseek-ai/DualPipe ``examples/example_dualpipe.py``: each
    rank builds ``full_modules[rank]`` and ``full_modules[pp_size - 1 - rank]``; DeepSeek-V3
    report Table 2, "Parameter 2×" over the model). The end ranks hold the first and the last
    stage: the last stage's copy of the embedding (for the MTP modules or a tied output layer) is
    the first stage's embedding on the same rank, physically shared (DeepSeek-V3 report §3.2.3,
    "Shared Embedding and Output Head for Multi-Token Prediction"), so counted once."""
    own = _stage_dense_expert(key)
    pp = key.pp
    shared = shared_embedding_per_gpu(key.model, key.tp, pp, key.vocab_multiple)
    return tuple(
        (d + md - (shared if r in (0, pp - 1) else 0), e + me)
        for r, ((d, e), (md, me)) in enumerate(zip(own, own[::-1], strict=True))
    )


def _dualpipe_busiest(key: SplitKey) -> tuple[Any, Any]:
    return max(_dualpipe_dense_expert(key), key=lambda p: p[0] + p[1])


def _dualpipe_linear(key: SplitKey) -> tuple[Any, ...]:
    own = stage_linear_per_gpu(key)
    return tuple((a + b, max(la, lb)) for (a, la), (b, lb) in zip(own, own[::-1], strict=True))


def any_dualpipe(f: Fields) -> bool:
    """Whether the layout (any of the columns) runs DualPipe, whose ranks hold two stages."""
    on = f.schedule == Schedule.DUALPIPE
    return bool(namespace(on).any(on)) if is_array(on) else bool(on)


def _on_dualpipe(f: Fields, fn: Any, dualpipe_fn: Any, c: Context, lookup: bool = False) -> Any:
    """``fn``'s (dense, expert)-like pair at ``f.stage``, ``dualpipe_fn``'s under DualPipe
    (both functions of a :class:`SplitKey`; ``lookup``: one answer per layout, not per stage)."""
    read = f.lookup if lookup else f.per_stage
    a, b = read(on_split, (fn, c.model, c.vocab_multiple), *SPLIT_FIELDS)
    if not any_dualpipe(f):
        return a, b
    da, db = read(on_split, (dualpipe_fn, c.model, c.vocab_multiple), *SPLIT_FIELDS)
    on = f.schedule == Schedule.DUALPIPE
    return where(on, da, a), where(on, db, b)


def split_params(c: Context, f: Fields) -> tuple[Any, Any]:
    """(dense, expert) parameters on one GPU of the rank ``f.stage`` (after tp, pp, etp·ep;
    before ZeRO): :func:`stage_params_per_gpu`; under DualPipe its two stages
    (:func:`_dualpipe_dense_expert`)."""
    return _on_dualpipe(f, _stage_dense_expert, _dualpipe_dense_expert, c)


def busiest_params(c: Context, f: Fields) -> tuple[Any, Any]:
    """(dense, expert) parameters on one GPU of the rank with the most
    (:func:`busiest_stage`; under DualPipe of its two stages)."""
    return _on_dualpipe(f, _busiest, _dualpipe_busiest, c, lookup=True)


def units_per_gpu(c: Context, f: Fields) -> tuple[Any, Any]:
    """(dense, expert) parameters on one GPU of the largest unit the stage ``f.stage`` gathers
    or reduces at once (:func:`gather_units`: ZeRO-3 / FSDP units)."""
    return read_split(c, f, gather_units)


def layer_count_per_gpu(c: Context, f: Fields) -> Any:
    """:func:`layer_counts` of stage ``f.stage``."""
    return read_split(c, f, layer_counts)


def layer_units_per_gpu(c: Context, f: Fields) -> tuple[Any, Any]:
    """:func:`layer_units` of stage ``f.stage``: (dense, expert) parameters on one GPU of its
    largest layer."""
    return read_split(c, f, layer_units)


def moe_experts_per_gpu(c: Context, f: Fields) -> Any:
    """:func:`moe_layer_experts` of stage ``f.stage``."""
    return read_split(c, f, moe_layer_experts)


def non_units_per_gpu(c: Context, f: Fields) -> Any:
    """:func:`non_unit_params` of stage ``f.stage``: the parameters outside every layer on one
    GPU."""
    return read_split(c, f, non_unit_params)


def linear_per_gpu(c: Context, f: Fields) -> tuple[Any, Any]:
    """(linear-layer weight elements on one GPU, those of its largest layer) of the rank
    ``f.stage`` (:func:`stage_linear_per_gpu`; under DualPipe its two stages): what a GEMM
    precision's cached weight copies scale with."""
    return _on_dualpipe(f, stage_linear_per_gpu, _dualpipe_linear, c)


@lru_cache(maxsize=CACHE)
def _linear_split(key: SplitKey) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, (dense, routed-expert) linear weight elements on one GPU: the two parts of
    :func:`stage_linear_per_gpu`'s total, which the dense and the expert data-parallel groups
    carry apart. Zeros for a size-only model."""
    arch = key.model.arch
    if arch is None:
        return ((Fraction(0), Fraction(0)),) * key.pp
    out = []
    for layers in key.layers():
        lps = [layer_params(arch, j) for j in layers]
        dense = sum((key.dense_per_gpu(lp.linear, lp.linear_replicated) for lp in lps), Fraction(0))
        out.append((dense, sum((key.experts_per_gpu(lp.expert_linear) for lp in lps), Fraction(0))))
    return tuple(out)


def _dualpipe_linear_split(key: SplitKey) -> tuple[tuple[Fraction, Fraction], ...]:
    own = _linear_split(key)
    return tuple((d + md, e + me) for (d, e), (md, me) in zip(own, own[::-1], strict=True))


def linear_split_per_gpu(c: Context, f: Fields) -> tuple[Any, Any]:
    """(dense, routed-expert) linear weight elements on one GPU of the rank ``f.stage``
    (:func:`_linear_split`; under DualPipe its two stages): the parts of
    :func:`linear_per_gpu`'s total. Under ``fsdp2`` torchao's FP8 all-gather narrows the dense
    part only (:func:`model.fp8_gathers.fp8_gathered_experts`)."""
    return _on_dualpipe(f, _linear_split, _dualpipe_linear_split, c)


def _busiest_linear(key: SplitKey) -> tuple[Fraction, Fraction]:
    return _linear_split(key)[busiest_stage(stage_params_per_gpu(key))]


def _dualpipe_busiest_linear(key: SplitKey) -> tuple[Fraction, Fraction]:
    own, ranks = _linear_split(key), _dualpipe_dense_expert(key)
    r = max(range(len(ranks)), key=lambda i: ranks[i][0] + ranks[i][1])
    mirror = own[len(own) - 1 - r]
    return own[r][0] + mirror[0], own[r][1] + mirror[1]


def busiest_linear(c: Context, f: Fields) -> tuple[Any, Any]:
    """(dense, routed-expert) linear weight elements on one GPU of the rank
    :func:`busiest_params` reads (under DualPipe its two stages): the parameters FP8 primary
    weights narrow (:func:`model.fp8_gathers.fp8_param_gathers`)."""
    return _on_dualpipe(f, _busiest_linear, _dualpipe_busiest_linear, c, lookup=True)
