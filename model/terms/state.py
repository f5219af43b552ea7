"""Model-state terms: what one GPU of a pipeline stage holds of the weights, gradients and
optimizer state, and which stage holds the most parameters.

* :func:`stage_params_per_gpu`, :func:`gather_units`, :func:`stage_linear_per_gpu` — exact, per
  distinct split structure (tp, pp, v, ep, uneven stages, etp, the framework's physical flag and
  vocabulary padding, explicit stage sizes); cached, and read by the terms through
  :meth:`model.terms.fields.Fields.per_stage`;
* :func:`model_state_term` — the term: :func:`model.memory.state_terms` of the stage's
  parameters under the layout's framework and ZeRO stage (:class:`model.memory.ModelState`);
* :func:`busiest_params` — (dense, expert) parameters per GPU of the stage with the most
  (the dp traffic, the optimizer step and offload read it).
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.frameworks import Framework, mechanism
from trainplan.model.memory import ModelState, cache_bytes_per_element, state_terms
from trainplan.model.model_spec import ModelSpec
from trainplan.model.params import count_params, layer_params, padded_vocab, stage_params
from trainplan.model.split import stage_layers
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.vocab import vocab_multiple_for

__all__ = [
    "SPLIT_FIELDS",
    "stage_params_per_gpu",
    "stage_linear_per_gpu",
    "gather_units",
    "busiest_stage_params",
    "split_params",
    "model_state_term",
    "busiest_params",
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
)
"""What the per-stage parameter split reads of a layout (physical profiles keep norms and
routers whole on every tp rank; the framework also pads the vocabulary)."""

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
) -> tuple[tuple[int, tuple[int, ...], Fraction, Fraction], ...]:
    """(stage, layer indices, dense parameters on one GPU, routed-expert parameters on one GPU)
    of every pipeline stage: dense ÷ tp (except, under a physical profile, what every tp rank
    holds whole), experts ÷ etp·ep; a declared size divided evenly over tp·pp. Exact, cached on
    what it reads."""
    arch = model.arch
    if model.num_params_declared is not None or arch is None:
        n = model.num_params_declared or count_params(arch).total  # type: ignore[arg-type]
        per_gpu = Fraction(n, tp * pp)
        split = stage_layers(arch, pp, v, uneven, sizes) if arch else ((),) * pp
        return tuple((i, layers, per_gpu, Fraction(0)) for i, layers in enumerate(split))
    vocab = padded_vocab(arch.vocab_size, vocab_multiple, tp)
    return tuple(
        (
            sp.stage,
            sp.layers,
            _per_gpu(sp.dense, sp.tp_replicated, tp, physical),
            Fraction(sp.experts, etp * ep),
        )
        for sp in stage_params(arch, pp, v, vocab, uneven, sizes)
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
    for layers in stage_layers(arch, pp, v, uneven, sizes):
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
) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, the (dense, expert) parameters on one GPU of the largest unit gathered or
    reduced at once (ZeRO-3 / FSDP units): one of its layers, the input embedding (first stage)
    or the output layer (last stage). (0, 0) for a size-only model, whose layers are unknown."""
    arch = model.arch
    if arch is None:
        return ((Fraction(0), Fraction(0)),) * pp
    vocab = padded_vocab(arch.vocab_size, vocab_multiple, tp)
    counts = count_params(arch, vocab)
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
    out = []
    for i, layers in enumerate(stage_layers(arch, pp, v, uneven, sizes)):
        units = [kind_unit[k] for k in sorted({arch.is_moe_layer(j) for j in layers})]
        if i == 0:
            units.append((Fraction(counts.embedding, tp), Fraction(0)))
        if i == pp - 1:
            units.append((Fraction(counts.output or vocab * arch.hidden_size, tp), Fraction(0)))
        # a middle stage with no layers (a custom layout's zeros) gathers nothing
        out.append(max(units, key=lambda u: u[0] + u[1], default=(Fraction(0), Fraction(0))))
    return tuple(out)


@lru_cache(maxsize=CACHE)
def busiest_stage_params(
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
) -> tuple[Fraction, Fraction]:
    """(dense, expert) parameters per GPU of the stage with the most parameters (the first of
    equals): the stage whose gradients dp reduces last and whose optimizer steps longest."""
    params = stage_params_per_gpu(
        model, tp, pp, v, ep, uneven, etp, physical, sizes, vocab_multiple
    )
    _, _, dense, experts = max(params, key=lambda p: (p[2] + p[3], -p[0]))
    return dense, experts


def _split(
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
) -> Any:
    """``fn`` of the split structure, the framework read as its physical flag and (for the
    functions that read it) its vocabulary padding multiple."""
    physical = Framework(framework).physical
    if fn is stage_linear_per_gpu:
        return fn(model, tp, pp, v, ep, uneven, etp, physical, sizes)
    return fn(
        model, tp, pp, v, ep, uneven, etp, physical, sizes, vocab_multiple_for(framework, given)
    )


def _stage_dense_expert(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return tuple((d, e) for _, _, d, e in _split(stage_params_per_gpu, model, given, *key))


def _stage_units(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return _split(gather_units, model, given, *key)


def _stage_linear(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return _split(stage_linear_per_gpu, model, given, *key)


def _busiest(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, Any]:
    return _split(busiest_stage_params, model, given, *key)


def split_params(c: Context, f: Fields) -> tuple[Any, Any]:
    """(dense, expert) parameters on one GPU of the stage ``f.stage`` (after tp, pp, etp·ep;
    before ZeRO): :func:`stage_params_per_gpu`."""
    return f.per_stage(_stage_dense_expert, (c.model, c.vocab_multiple), *SPLIT_FIELDS)


def busiest_params(c: Context, f: Fields) -> tuple[Any, Any]:
    """(dense, expert) parameters on one GPU of the stage with the most
    (:func:`busiest_stage_params`)."""
    return f.lookup(_busiest, (c.model, c.vocab_multiple), *SPLIT_FIELDS)


def model_state_term(c: Context, f: Fields) -> ModelState:
    """Model-state bytes on one GPU of pipeline stage ``f.stage`` (:class:`ModelState`: weights,
    gradients, optimizer state, gathered units, buffers, optimizer-step extras, cached weight
    copies, the host's share), as the layout's framework holds them at its ZeRO stage
    (:func:`model.memory.state_terms`, :meth:`model.frameworks.Mechanism.memory_terms`).
    Exact for one layout; element-wise over columns.

    Scope: the split (:data:`SPLIT_FIELDS`), dp, cp (the replicas ZeRO shards over), the ZeRO
    stage, micro_batch_size (with dp, whether a step accumulates over more than one micro-batch,
    which sizes offload's accumulation buffers). Control: framework, zero_stage, pp.
    """
    t = c.training
    dense, experts = split_params(c, f)
    unit_dense, unit_expert = f.per_stage(_stage_units, (c.model, c.vocab_multiple), *SPLIT_FIELDS)
    cache_bytes = cache_bytes_per_element(t, Framework(f.framework))
    linear = layer_linear = 0
    if cache_bytes:
        linear, layer_linear = f.per_stage(
            _stage_linear, (c.model, c.vocab_multiple), *SPLIT_FIELDS
        )
    mech = mechanism(
        f.framework, f.zero_stage, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes,
        pipelined=f.pp > 1,
    )  # fmt: skip
    w, g, o, gathered, buffers, step, cache, host = state_terms(
        mech, dense, experts, f.shard_degree, f.expert_shard_degree, unit_dense, unit_expert,
        linear, layer_linear, cache_bytes, t.offload, f.m > 1, t.fp8_param_gather,
    )  # fmt: skip
    return ModelState(w, g, o, gathered, buffers, step, host, cache)
