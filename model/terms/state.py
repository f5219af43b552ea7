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

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.mechanisms import mechanism
from trainplan.model.memory import ModelState, cache_bytes_per_element, state_terms
from trainplan.model.model_spec import ModelSpec
from trainplan.model.moe import DEEPEP_DISPATCH_CONFIGS
from trainplan.model.moe_run import Dispatcher, dispatch_buffer_bytes
from trainplan.model.optimizers import (
    OptimizerKind,
    layer_matrices,
    muon_gathers_over_dp,
    muon_tp_gathers,
    newton_schulz_bytes,
    newton_schulz_flops,
    optimizer_scale,
)
from trainplan.model.params import (
    count_params,
    layer_params,
    padded_vocab,
    shares_embedding_with_last_stage,
    stage_params,
)
from trainplan.model.pipeline import Schedule
from trainplan.model.split import output_rank, stage_layers
from trainplan.model.terms.activation_fields import (
    LAYER_FIELDS,
    mirror_layer_counts,
    stage_layer_counts,
)
from trainplan.model.terms.fields import Context, Fields, stage_argmax, stage_take, stage_tuple
from trainplan.model.terms.grad_buffers import embedding_grad_term
from trainplan.model.vocab import vocab_multiple_for
from trainplan.model.xp import is_array, namespace, where

__all__ = [
    "SPLIT_FIELDS",
    "stage_params_per_gpu",
    "stage_linear_per_gpu",
    "gather_units",
    "busiest_stage",
    "split_params",
    "model_state_term",
    "busiest_params",
    "muon_transient_term",
    "muon_whole_matrices",
    "shared_embedding_per_gpu",
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
    reduced at once (ZeRO-3 / FSDP units): one of its layers, the input embedding (first stage)
    or the output layer (:func:`model.split.output_rank`). (0, 0) for a size-only model, whose layers are unknown."""
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
    last = output_rank(pp, v, schedule)
    for i, layers in enumerate(stage_layers(arch, pp, v, uneven, sizes, schedule)):
        units = [kind_unit[k] for k in sorted({arch.is_moe_layer(j) for j in layers})]
        if i == 0:
            units.append((Fraction(counts.embedding, tp), Fraction(0)))
        if i == last:
            units.append((Fraction(counts.output or vocab * arch.hidden_size, tp), Fraction(0)))
        # a middle stage with no layers (a custom layout's zeros) gathers nothing
        out.append(max(units, key=lambda u: u[0] + u[1], default=(Fraction(0), Fraction(0))))
    return tuple(out)


def busiest_stage(params: tuple[tuple[int, tuple[int, ...], Fraction, Fraction], ...]) -> int:
    """The stage with the most parameters per GPU among :func:`stage_params_per_gpu`'s
    ``params`` (the first of equals): the stage whose gradients dp reduces last and whose
    optimizer steps longest."""
    return max(params, key=lambda p: (p[2] + p[3], -p[0]))[0]


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
    schedule: Any = None,
) -> Any:
    """``fn`` of the split structure, the framework read as its physical flag and (for the
    functions that read it) its vocabulary padding multiple."""
    physical = Framework(framework).physical
    if fn is stage_linear_per_gpu:
        return fn(model, tp, pp, v, ep, uneven, etp, physical, sizes, schedule)
    multiple = vocab_multiple_for(framework, given)
    return fn(model, tp, pp, v, ep, uneven, etp, physical, sizes, multiple, schedule)


@lru_cache(maxsize=CACHE)
def stage_optimizer_scales(
    model: ModelSpec,
    kind: OptimizerKind,
    adam_bytes: int,
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
    """Per stage, the (dense, expert) factors on Adam's optimizer state that give ``kind``'s
    (:func:`model.optimizers.optimizer_scale` of the stage's layers, its input embedding on the
    first stage and its output layer — or the tied embedding's copy — on the last chunk's,
    :func:`model.split.output_rank`). (1, 1) for Adam. Exact, cached on what it reads."""
    arch = model.arch
    if kind is OptimizerKind.ADAM or arch is None:
        return ((Fraction(1), Fraction(1)),) * pp
    vocab = padded_vocab(arch.vocab_size, vocab_multiple, tp)
    counts = count_params(arch, vocab)
    last = output_rank(pp, v, schedule)
    last_copy = counts.output or (
        vocab * arch.hidden_size if last != 0 and shares_embedding_with_last_stage(arch) else 0
    )
    out = []
    params = stage_params_per_gpu(
        model, tp, pp, v, ep, uneven, etp, physical, sizes, vocab_multiple, schedule
    )
    for i, layers, dense, experts in params:
        emb = Fraction(counts.embedding if i == 0 else 0) + (last_copy if i == last else 0)
        out.append(
            optimizer_scale(kind, arch, layers, tp, etp, ep, emb / tp, dense, experts, adam_bytes)
        )
    return tuple(out)


def _stage_scales(
    model: ModelSpec, given: int | None, adam_bytes: int, optimizer: Any, *key: Any
) -> tuple[Any, ...]:
    tp, pp, v, ep, uneven, etp, framework, sizes, schedule = key
    return stage_optimizer_scales(
        model, OptimizerKind(optimizer), adam_bytes, tp, pp, v, ep, uneven, etp,
        Framework(framework).physical, sizes, vocab_multiple_for(framework, given), schedule,
    )  # fmt: skip


def _busiest_scales(
    model: ModelSpec, given: int | None, adam_bytes: int, optimizer: Any, *key: Any
) -> tuple[Fraction, Fraction]:
    busiest = busiest_stage(_split(stage_params_per_gpu, model, given, *key))
    return _stage_scales(model, given, adam_bytes, optimizer, *key)[busiest]


def busiest_scales(c: Context, f: Fields) -> tuple[Any, Any]:
    """:func:`optimizer_scales` of the stage with the most parameters (:func:`busiest_params`'s
    stage: the one whose optimizer steps longest)."""
    args = (c.model, c.vocab_multiple, c.training.optimizer_bytes)
    return f.lookup(_busiest_scales, args, "optimizer", *SPLIT_FIELDS)


def optimizer_scales(c: Context, f: Fields) -> tuple[Any, Any]:
    """(dense, expert) factors on Adam's optimizer state of the stage ``f.stage`` under the
    layout's optimizer (:func:`stage_optimizer_scales`)."""
    args = (c.model, c.vocab_multiple, c.training.optimizer_bytes)
    return f.per_stage(_stage_scales, args, "optimizer", *SPLIT_FIELDS)


@lru_cache(maxsize=CACHE)
def stage_muon_work(
    model: ModelSpec, tp: int, pp: int, v: int, ep: int, uneven: bool, etp: int,
    sizes: tuple[int, ...] | None, whole: bool = True, schedule: Any = None,
) -> tuple[tuple[int, int, Fraction, Fraction], ...]:  # fmt: skip
    """Per stage, Muon's (Newton–Schulz FLOPs of the dense matrices, of the routed experts'
    matrices on one GPU, dense matrix elements on one GPU, expert ones): every matrix
    orthogonalised whole where tp matrices are gathered (``whole``,
    :func:`model.optimizers.muon_tp_gathers`), else its tp block
    (:func:`model.optimizers.newton_schulz_flops` of that shape; experts ÷ ep), elements after
    tp / etp (:meth:`model.optimizers.Matrix.local`). Zeros for a size-only model."""
    arch = model.arch
    if arch is None:
        return ((0, 0, Fraction(0), Fraction(0)),) * pp
    out = []
    for layers in stage_layers(arch, pp, v, uneven, sizes, schedule):
        ns_d = ns_e = 0
        el_d = el_e = Fraction(0)
        for j in layers:
            for mat in layer_matrices(arch, j):
                rows, cols = mat.local(etp if mat.expert else tp)
                flops = newton_schulz_flops(*((mat.rows, mat.cols) if whole else (rows, cols)))
                if mat.expert:
                    ns_e += flops * mat.count // ep
                    el_e += Fraction(mat.count * rows * cols, ep)
                else:
                    ns_d += flops * mat.count
                    el_d += mat.count * rows * cols
        out.append((ns_d, ns_e, el_d, el_e))
    return tuple(out)


@lru_cache(maxsize=CACHE)
def stage_muon_transient(
    model: ModelSpec, tp: int, pp: int, v: int, etp: int, uneven: bool, framework: str,
    sizes: tuple[int, ...] | None, whole: bool = True, schedule: Any = None,
) -> tuple[tuple[int, int], ...]:  # fmt: skip
    """Per stage, (the most bytes Muon's orthogonalisation of one of its matrices holds where
    only tensor parallelism gathers, the most where every matrix is gathered — over the
    data-parallel ranks too): :func:`model.optimizers.newton_schulz_bytes` of each matrix's
    full shape, gathered over tp where tp (etp for routed experts) divides it
    (:attr:`model.optimizers.Matrix.split`; Emerging-Optimizers' ``newton_schulz_tp`` falls
    back to the local matrix without a ``partition_dim``) — or, where tp matrices are not
    gathered (``whole`` False: Megatron-Core's ``blockwise``), of its tp block, not gathered.
    Zeros for a size-only model."""
    arch = model.arch
    if arch is None:
        return ((0, 0),) * pp
    out = []
    for layers in stage_layers(arch, pp, v, uneven, sizes, schedule):
        tp_only = every = 0
        for j in layers:
            for mat in layer_matrices(arch, j):
                degree = etp if mat.expert else tp
                shape = (mat.rows, mat.cols) if whole else mat.local(degree)
                split = whole and mat.split is not None and degree > 1
                tp_only = max(tp_only, newton_schulz_bytes(*shape, framework, split))
                every = max(every, newton_schulz_bytes(*shape, framework, True))
        out.append((tp_only, every))
    return tuple(out)


def muon_whole_matrices(framework: Any, muon_tp_mode: str | None) -> bool:
    """:func:`model.optimizers.muon_tp_gathers`, with a mode another profile does not take
    (refused by the layout's rules) read as that profile's whole matrices."""
    try:
        return muon_tp_gathers(str(framework), muon_tp_mode)
    except LayoutError:
        return True


def _stage_transient(model: ModelSpec, mode: str | None, *key: Any) -> tuple[Any, ...]:
    tp, pp, v, _ep, uneven, etp, framework, sizes, schedule = key
    whole = muon_whole_matrices(framework, mode)
    return stage_muon_transient(
        model, tp, pp, v, etp, uneven, str(framework), sizes, whole, schedule
    )


def muon_transient_term(c: Context, f: Fields) -> Any:
    """Bytes the optimizer step of stage ``f.stage`` holds while Muon orthogonalises its
    largest matrix (:func:`stage_muon_transient`): the gathered whole matrix and the
    Newton–Schulz iteration's tensors, gathered over dp where Muon gathers there
    (:func:`model.optimizers.muon_gathers_over_dp`, a shard group of more than one rank).
    Every rank may own the largest matrix (Megatron-Core's layer-wise optimizer and
    ``DistMuon`` spread whole matrices over the ranks), so the rank at its peak holds it.
    0 under any other optimizer."""
    if OptimizerKind(f.optimizer) is not OptimizerKind.MUON or c.model.arch is None:
        return 0
    args = (c.model, c.training.muon_tp_mode)
    tp_only, every = f.per_stage(_stage_transient, args, *SPLIT_FIELDS)
    if not muon_gathers_over_dp(str(f.framework), int(f.zero_stage)):
        return tp_only
    return where(f.shard_degree > 1, every, tp_only)


def _stage_muon(model: ModelSpec, mode: str | None, *key: Any) -> tuple[Any, ...]:
    tp, pp, v, ep, uneven, etp, framework, sizes, schedule = key
    whole = muon_whole_matrices(framework, mode)
    return stage_muon_work(model, tp, pp, v, ep, uneven, etp, sizes, whole, schedule)


def busiest_muon_work(c: Context, f: Fields) -> tuple[Any, Any, Any, Any]:
    """:func:`stage_muon_work` of the stage with the most Newton–Schulz FLOPs (the first of
    equals)."""
    ns_d, ns_e, el_d, el_e = stage_tuple(
        f.stages(
            lambda g: g.per_stage(_stage_muon, (c.model, c.training.muon_tp_mode), *SPLIT_FIELDS)
        )
    )
    pick = stage_argmax(
        ns_d + ns_e if is_array(ns_d) else [a + b for a, b in zip(ns_d, ns_e, strict=True)]
    )
    return tuple(stage_take(x, pick) for x in (ns_d, ns_e, el_d, el_e))  # type: ignore[return-value]


def _stage_dense_expert(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return tuple((d, e) for _, _, d, e in _split(stage_params_per_gpu, model, given, *key))


def _stage_units(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return _split(gather_units, model, given, *key)


def _stage_linear(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, ...]:
    return _split(stage_linear_per_gpu, model, given, *key)


def _busiest(model: ModelSpec, given: int | None, *key: Any) -> tuple[Any, Any]:
    params = _split(stage_params_per_gpu, model, given, *key)
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


def _any_dualpipe(f: Fields) -> bool:
    on = f.schedule == Schedule.DUALPIPE
    return bool(namespace(on).any(on)) if is_array(on) else bool(on)


def _on_dualpipe(f: Fields, fn: Any, dualpipe_fn: Any, c: Context, lookup: bool = False) -> Any:
    """``fn``'s (dense, expert)-like pair at ``f.stage``, ``dualpipe_fn``'s under DualPipe."""
    read = f.lookup if lookup else f.per_stage
    a, b = read(fn, (c.model, c.vocab_multiple), *SPLIT_FIELDS)
    if not _any_dualpipe(f):
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


def model_state_term(c: Context, f: Fields) -> ModelState:
    """Model-state bytes on one GPU of pipeline stage ``f.stage`` (:class:`ModelState`: weights,
    gradients, optimizer state, gathered units, buffers, optimizer-step extras, cached weight
    copies, the host's share), as the layout's framework holds them at its ZeRO stage
    (:func:`model.memory.state_terms`, :meth:`model.mechanisms.Mechanism.memory_terms`).
    Exact for one layout; element-wise over columns.

    Scope: the split (:data:`SPLIT_FIELDS`), dp, cp (the replicas ZeRO shards over), the ZeRO
    stage, micro_batch_size (with dp, whether a step accumulates over more than one micro-batch,
    which sizes offload's accumulation buffers), the schedule (DualPipe's two stages,
    :func:`split_params`). Control: framework, zero_stage, pp, schedule.
    """
    t = c.training
    dense, experts = split_params(c, f)
    unit_dense, unit_expert = f.per_stage(_stage_units, (c.model, c.vocab_multiple), *SPLIT_FIELDS)
    cache_bytes = cache_bytes_per_element(t, Framework(f.framework), c.device)
    linear = layer_linear = 0
    if cache_bytes or t.fp8_param_gather:  # FP8 primary weights are the linear ones
        linear, layer_linear = _on_dualpipe(f, _stage_linear, _dualpipe_linear, c)
    mech = mechanism(
        f.framework, f.zero_stage, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes,
        pipelined=f.pp > 1, distributed_optimizer=t.distributed_optimizer,
    )  # fmt: skip
    w, g, o, gathered, buffers, step, cache, host = state_terms(
        mech, dense, experts, f.shard_degree, f.expert_shard_degree, unit_dense, unit_expert,
        linear, layer_linear, cache_bytes, t.offload, f.m > 1, t.fp8_param_gather,
        optimizer_scales(c, f),
    )  # fmt: skip
    dispatch = dispatch_buffer_term(c, f)
    g = g + embedding_grad_term(c, f, mech)
    step = step + muon_transient_term(c, f)
    return ModelState(w, g, o, gathered, buffers, step, host, cache, dispatch)


def _dispatch_buffers(run: Any, hidden: int, ep: int) -> int:
    """:func:`model.moe_run.dispatch_buffer_bytes`; 0 for an ep DeepEP has no config for, which
    the legality rule ``moe_layout`` refuses (the search's columns of candidates not yet masked
    stay defined)."""
    if ep not in DEEPEP_DISPATCH_CONFIGS:
        return 0
    return dispatch_buffer_bytes(run, hidden, ep)


def dispatch_buffer_term(c: Context, f: Fields) -> Any:
    """Bytes of the expert dispatcher's resident buffers on one GPU of stage ``f.stage``:
    :func:`model.moe_run.dispatch_buffer_bytes` (DeepEP's normal ``Buffer`` under
    ``moe_dispatcher = deepep``, ep > 1) where the stage holds MoE layers (the buffer is made on
    the first dispatch: Megatron-Core ``moe/fused_a2a.py`` ``get_buffer``), under DualPipe where
    either of the rank's two stages does; 0 otherwise."""
    arch, run = c.model.arch, c.training.moe_run
    if arch is None or arch.moe is None or run.dispatcher is not Dispatcher.DEEPEP:
        return 0
    _, moe = f.per_stage(stage_layer_counts, (arch,), *LAYER_FIELDS)
    if _any_dualpipe(f):
        _, mirror = f.per_stage(mirror_layer_counts, (arch,), *LAYER_FIELDS)
        moe = moe + where(f.schedule == Schedule.DUALPIPE, mirror, 0)
    buffers = f.lookup(_dispatch_buffers, (run, arch.hidden_size), "ep")
    return where(moe > 0, buffers, 0)
