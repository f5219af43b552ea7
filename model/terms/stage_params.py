"""The per-stage parameter split: which parameters one GPU of each pipeline stage holds (after
tp, pp, etp·ep; before ZeRO), and which stage holds the most.

* :func:`stage_params_per_gpu`, :func:`gather_units`, :func:`stage_linear_per_gpu` — exact, per
  distinct split structure (tp, pp, v, ep, uneven stages, etp, the framework's physical flag and
  vocabulary padding, explicit stage sizes); cached, and read by the terms through
  :meth:`model.terms.fields.Fields.per_stage` on :data:`SPLIT_FIELDS`;
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

from trainplan.model.frameworks import Framework
from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import (
    count_params,
    layer_params,
    padded_vocab,
    shares_embedding_with_last_stage,
    stage_params,
)
from trainplan.model.pipeline import Schedule
from trainplan.model.split import output_rank, stage_layers
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.vocab import vocab_multiple_for
from trainplan.model.xp import is_array, namespace, where

__all__ = [
    "SPLIT_FIELDS",
    "CACHE",
    "stage_params_per_gpu",
    "stage_linear_per_gpu",
    "gather_units",
    "layer_units",
    "busiest_stage",
    "split_of",
    "shared_embedding_per_gpu",
    "any_dualpipe",
    "split_params",
    "busiest_params",
    "units_per_gpu",
    "non_unit_params",
    "non_units_per_gpu",
    "reduce_order_params",
    "reduce_order_per_gpu",
    "layer_units_per_gpu",
    "linear_per_gpu",
]

SPLIT_FIELDS = (
    "tp",
    "pp",
    "virtual_stages",
    "ep",
    "uneven_stages",
    "expert_tp",
    "framework",
    "stage_layers",
    "schedule",
)
"""What the per-stage parameter split reads of a layout (physical profiles keep norms and
routers whole on every tp rank; the framework also pads the vocabulary; the schedule places the
model chunks, :func:`model.split.chunk_ranks`)."""

CACHE = 4096
"""Entries each structure cache keeps (a long-lived server sees many models and layouts)."""


def _per_gpu(dense: int, replicated: int, tp: int, physical: bool) -> Fraction:
    """Dense parameters on one tensor-parallel rank: ÷ tp, except (physical profiles) what
    every rank holds whole (:attr:`model.params.LayerParams.tp_replicated`)."""
    if not physical:
        return Fraction(dense, tp)
    return Fraction(dense - replicated, tp) + replicated


@lru_cache(maxsize=CACHE)
def stage_params_per_gpu(
    model: ModelSpec,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    physical: bool,
    sizes: tuple[int, ...] | None,
    vocab_multiple: int,
    schedule: Any = None,
) -> tuple[tuple[int, tuple[int, ...], Fraction, Fraction], ...]:
    """(stage, layer indices, dense parameters on one GPU, routed-expert parameters on one GPU)
    of every pipeline stage: dense ÷ tp (except, under a physical profile, what every tp rank
    holds whole), experts ÷ etp·ep; a declared size divided evenly over tp·pp. Exact, cached on
    what it reads."""
    arch = model.arch
    if model.num_params_declared is not None or arch is None:
        n = model.num_params_declared or count_params(arch).total  # type: ignore[arg-type]
        per_gpu = Fraction(n, tp * pp)
        split = stage_layers(arch, pp, v, uneven, sizes, schedule) if arch else ((),) * pp
        return tuple((i, layers, per_gpu, Fraction(0)) for i, layers in enumerate(split))
    vocab = padded_vocab(arch.vocab_size, vocab_multiple, tp)
    return tuple(
        (
            sp.stage,
            sp.layers,
            _per_gpu(sp.dense, sp.tp_replicated, tp, physical),
            Fraction(sp.experts, etp * ep),
        )
        for sp in stage_params(arch, pp, v, vocab, uneven, sizes, schedule)
    )


@lru_cache(maxsize=CACHE)
def stage_linear_per_gpu(
    model: ModelSpec,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    physical: bool,
    sizes: tuple[int, ...] | None,
    schedule: Any = None,
) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, (the linear layers' weight elements on one GPU, those of its largest layer):
    :attr:`LayerParams.linear` ÷ tp (except the tp-replicated part under a physical profile)
    + :attr:`LayerParams.expert_linear` ÷ etp·ep — what a GEMM precision's cached weight copies
    scale with (:mod:`model.precision`; the largest layer for the gathered units of ZeRO-3).
    Zeros for a size-only model (its layers are unknown)."""
    arch = model.arch
    if arch is None:
        return ((Fraction(0), Fraction(0)),) * pp
    out = []
    for layers in stage_layers(arch, pp, v, uneven, sizes, schedule):
        per_layer = [Fraction(0)]
        for j in layers:
            lp = layer_params(arch, j)
            per_layer.append(
                _per_gpu(lp.linear, lp.linear_replicated, tp, physical)
                + Fraction(lp.expert_linear, etp * ep)
            )
        out.append((sum(per_layer, Fraction(0)), max(per_layer)))
    return tuple(out)


@lru_cache(maxsize=CACHE)
def layer_units(
    model: ModelSpec,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    physical: bool,
    sizes: tuple[int, ...] | None,
    vocab_multiple: int,
    schedule: Any = None,
) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, the (dense, expert) parameters on one GPU of its largest transformer layer:
    the unit of a framework whose units are the layers only (Megatron-FSDP's
    ``fsdp_unit_modules``). (0, 0) for a size-only model and for a stage with no layers.
    ``vocab_multiple``: :func:`split_of`'s common key, unread."""
    arch = model.arch
    if arch is None:
        return ((Fraction(0), Fraction(0)),) * pp
    # a layer's unit depends only on its kind (dense or MoE): one of each is enough
    kind_unit = {}
    for moe in (False, True):
        j = arch.kind_index(moe)
        if j is not None:
            lp = layer_params(arch, j)
            kind_unit[moe] = (
                _per_gpu(lp.dense, lp.tp_replicated, tp, physical),
                Fraction(lp.experts, etp * ep),
            )
    return tuple(
        max(
            (kind_unit[k] for k in sorted({arch.is_moe_layer(j) for j in layers})),
            key=lambda u: u[0] + u[1],
            default=(Fraction(0), Fraction(0)),
        )
        for layers in stage_layers(arch, pp, v, uneven, sizes, schedule)
    )


@lru_cache(maxsize=CACHE)
def gather_units(
    model: ModelSpec,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    physical: bool,
    sizes: tuple[int, ...] | None,
    vocab_multiple: int,
    schedule: Any = None,
) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, the (dense, expert) parameters on one GPU of the largest unit gathered or
    reduced at once (ZeRO-3 / FSDP units): one of its layers (:func:`layer_units`), the input
    embedding (first stage) or the output layer (:func:`model.split.output_rank`). (0, 0) for a
    size-only model, whose layers are unknown."""
    key = (model, tp, pp, v, ep, uneven, etp, physical, sizes, vocab_multiple, schedule)
    layers = layer_units(*key)
    arch = model.arch
    if arch is None:
        return layers
    vocab = padded_vocab(arch.vocab_size, vocab_multiple, tp)
    counts = count_params(arch, vocab)
    out = []
    last = output_rank(pp, v, schedule)
    for i, layer in enumerate(layers):
        units = [layer]
        if i == 0:
            units.append((Fraction(counts.embedding, tp), Fraction(0)))
        if i == last:
            units.append((Fraction(counts.output or vocab * arch.hidden_size, tp), Fraction(0)))
        out.append(max(units, key=lambda u: u[0] + u[1]))
    return tuple(out)


def non_unit_params(
    model: ModelSpec,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    physical: bool,
    sizes: tuple[int, ...] | None,
    vocab_multiple: int,
    schedule: Any = None,
) -> tuple[Fraction, ...]:
    """Per stage, the parameters on one GPU outside every transformer layer: the input
    embedding (first stage) and the output layer (:func:`model.split.output_rank`; a tied one
    only where it is a copy on another stage). What a framework that keeps its non-unit modules
    gathered holds whole (:attr:`model.mechanisms.Mechanism.non_units_gathered`). Zeros for a
    size-only model. ``ep``, ``uneven``, ``etp``, ``physical``, ``sizes``: :func:`split_of`'s
    common key, unread.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> non_unit_params(get_model("llama3-8b").model, 1, 1, 1, 1, False, None, True, None, 1)
    (Fraction(1050673152, 1),)
    """
    arch = model.arch
    if arch is None:
        return (Fraction(0),) * pp
    vocab = padded_vocab(arch.vocab_size, vocab_multiple, tp)
    counts = count_params(arch, vocab)
    last = output_rank(pp, v, schedule)
    out = [Fraction(0)] * pp
    out[0] += Fraction(counts.embedding, tp)
    if counts.output or last != 0:  # untied, or the last stage's copy of a tied embedding
        out[last] += Fraction(counts.output or vocab * arch.hidden_size, tp)
    return tuple(out)


@lru_cache(maxsize=CACHE)
def reduce_order_params(
    model: ModelSpec,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    physical: bool,
    sizes: tuple[int, ...] | None,
    vocab_multiple: int,
    schedule: Any = None,
) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, what its backward reduces first and how many layers follow, on one GPU:
    (the output layer's parameters where the stage holds it (a tied embedding's last-stage
    copy too), the transformer layers the stage holds); the buckets of Megatron-FSDP's
    reduce-scatter queue (:meth:`model.mechanism_record.Mechanism.reduce_queue_elements`).
    Zeros for a size-only model; :func:`split_of`'s common key.

    >>> from trainplan.scenarios.catalogue import get_model
    >>> reduce_order_params(get_model("llama3-8b").model, 1, 2, 1, 1, False, None, True, None, 1)
    ((Fraction(0, 1), Fraction(16, 1)), (Fraction(525336576, 1), Fraction(16, 1)))
    """
    arch = model.arch
    if arch is None:
        return ((Fraction(0), Fraction(0)),) * pp
    vocab = padded_vocab(arch.vocab_size, vocab_multiple, tp)
    counts = count_params(arch, vocab)
    last = output_rank(pp, v, schedule)
    layers = stage_layers(arch, pp, v, uneven, sizes, schedule)
    out = []
    for i, held in enumerate(layers):
        first = Fraction(0)
        if i == last and (counts.output or last != 0):
            first = Fraction(counts.output or vocab * arch.hidden_size, tp)
        out.append((first, Fraction(len(held))))
    return tuple(out)


def busiest_stage(params: tuple[tuple[int, tuple[int, ...], Fraction, Fraction], ...]) -> int:
    """The stage with the most parameters per GPU among :func:`stage_params_per_gpu`'s
    ``params`` (the first of equals): the stage whose gradients dp reduces last and whose
    optimizer steps longest."""
    return max(params, key=lambda p: (p[2] + p[3], -p[0]))[0]


def split_of(
    fn: Any,
    model: ModelSpec,
    given: int | None,
    tp: int,
    pp: int,
    v: int,
    ep: int,
    uneven: bool,
    etp: int,
    framework: Framework,
    sizes: tuple[int, ...] | None,
    schedule: Any = None,
) -> Any:
    """``fn`` (:func:`stage_params_per_gpu`, :func:`gather_units` or
    :func:`stage_linear_per_gpu`) of the split structure (a layout's :data:`SPLIT_FIELDS`), the
    framework read as its physical flag and (for the functions that read it) its vocabulary
    padding multiple (``given``, the training's ``vocab_multiple``, None for the framework's)."""
    physical = Framework(framework).physical
    if fn is stage_linear_per_gpu:
        return fn(model, tp, pp, v, ep, uneven, etp, physical, sizes, schedule)
    multiple = vocab_multiple_for(framework, given)
    return fn(model, tp, pp, v, ep, uneven, etp, physical, sizes, multiple, schedule)


def _stage_dense_expert(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return tuple((d, e) for _, _, d, e in split_of(stage_params_per_gpu, model, given, *key))


def _stage_units(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return split_of(gather_units, model, given, *key)


def _stage_linear(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return split_of(stage_linear_per_gpu, model, given, *key)


def _busiest(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, Any]:
    params = split_of(stage_params_per_gpu, model, given, *key)
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


def _dualpipe_dense_expert(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    """Per DualPipe rank r, (dense, expert) parameters on one GPU of its two stages: stage r and
    the mirror stage ``pp − 1 − r`` (deepseek-ai/DualPipe ``examples/example_dualpipe.py``: each
    rank builds ``full_modules[rank]`` and ``full_modules[pp_size - 1 - rank]``; DeepSeek-V3
    report Table 2, "Parameter 2×" over the model). The end ranks hold the first and the last
    stage: the last stage's copy of the embedding (for the MTP modules or a tied output layer) is
    the first stage's embedding on the same rank, physically shared (DeepSeek-V3 report §3.2.3,
    "Shared Embedding and Output Head for Multi-Token Prediction"), so counted once."""
    own = _stage_dense_expert(model, given, *key)
    fields = dict(zip(SPLIT_FIELDS, key, strict=True))
    tp, pp, framework = fields["tp"], fields["pp"], fields["framework"]
    shared = shared_embedding_per_gpu(model, tp, pp, vocab_multiple_for(framework, given))
    return tuple(
        (d + md - (shared if r in (0, pp - 1) else 0), e + me)
        for r, ((d, e), (md, me)) in enumerate(zip(own, own[::-1], strict=True))
    )


def _dualpipe_busiest(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, Any]:
    ranks = _dualpipe_dense_expert(model, given, *key)
    return max(ranks, key=lambda p: p[0] + p[1])


def _dualpipe_linear(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    own = _stage_linear(model, given, *key)
    return tuple((a + b, max(la, lb)) for (a, la), (b, lb) in zip(own, own[::-1], strict=True))


def any_dualpipe(f: Fields) -> bool:
    """Whether the layout (any of the columns) runs DualPipe, whose ranks hold two stages."""
    on = f.schedule == Schedule.DUALPIPE
    return bool(namespace(on).any(on)) if is_array(on) else bool(on)


def _on_dualpipe(f: Fields, fn: Any, dualpipe_fn: Any, c: Context, lookup: bool = False) -> Any:
    """``fn``'s (dense, expert)-like pair at ``f.stage``, ``dualpipe_fn``'s under DualPipe."""
    read = f.lookup if lookup else f.per_stage
    a, b = read(fn, (c.model, c.vocab_multiple), *SPLIT_FIELDS)
    if not any_dualpipe(f):
        return a, b
    da, db = read(dualpipe_fn, (c.model, c.vocab_multiple), *SPLIT_FIELDS)
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
    return f.per_stage(_stage_units, (c.model, c.vocab_multiple), *SPLIT_FIELDS)


def _stage_non_units(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return split_of(non_unit_params, model, given, *key)


def _stage_layer_units(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return split_of(layer_units, model, given, *key)


def _stage_reduce_order(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return split_of(reduce_order_params, model, given, *key)


def reduce_order_per_gpu(c: Context, f: Fields) -> tuple[Any, Any]:
    """:func:`reduce_order_params` of stage ``f.stage``: (output-layer parameters, transformer
    layers) on one GPU."""
    return f.per_stage(_stage_reduce_order, (c.model, c.vocab_multiple), *SPLIT_FIELDS)


def layer_units_per_gpu(c: Context, f: Fields) -> tuple[Any, Any]:
    """:func:`layer_units` of stage ``f.stage``: (dense, expert) parameters on one GPU of its
    largest layer."""
    return f.per_stage(_stage_layer_units, (c.model, c.vocab_multiple), *SPLIT_FIELDS)


def non_units_per_gpu(c: Context, f: Fields) -> Any:
    """:func:`non_unit_params` of stage ``f.stage``: the embedding and output-layer parameters
    on one GPU."""
    return f.per_stage(_stage_non_units, (c.model, c.vocab_multiple), *SPLIT_FIELDS)


def linear_per_gpu(c: Context, f: Fields) -> tuple[Any, Any]:
    """(linear-layer weight elements on one GPU, those of its largest layer) of the rank
    ``f.stage`` (:func:`stage_linear_per_gpu`; under DualPipe its two stages): what a GEMM
    precision's cached weight copies scale with."""
    return _on_dualpipe(f, _stage_linear, _dualpipe_linear, c)
