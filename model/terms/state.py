"""Model-state terms: the bytes one GPU of a pipeline stage holds of the weights, gradients and
optimizer state, over the per-stage parameter split of :mod:`model.terms.stage_params`.

* :func:`model_state_term` — the term: :func:`model.memory.state_terms` of the stage's
  parameters under the layout's framework and ZeRO stage (:class:`model.memory.ModelState`);
* :func:`stage_optimizer_scales`, :func:`optimizer_scales`, :func:`busiest_scales` — the layout's
  optimizer's state against Adam's (:func:`model.optimizers.optimizer_scale`);
* :func:`stage_muon_work`, :func:`stage_muon_transient`, :func:`busiest_muon_work` — Muon's
  orthogonalisation at the optimizer step (:mod:`model.muon`); :func:`stage_soap_transient`,
  SOAP's step (:mod:`model.soap`); :func:`optimizer_transient_term`, either one's transient;
* the expert dispatcher's resident buffers (DeepEP) are :mod:`model.terms.dispatch_buffers`'.

Units: bytes on one GPU (FLOPs and matrix elements for Muon's work). Exact for one layout;
element-wise over the search's columns.
"""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from trainplan.model.deepspeed_mechanisms import sp_comm_bytes
from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import Framework
from trainplan.model.layer_wise import busiest_rank_bytes, layer_wise_bucket_size, runs_layer_wise
from trainplan.model.mechanisms import mechanism
from trainplan.model.megatron_fsdp_buckets import (
    head_bucket_count,
    non_unit_buckets,
    padded_layer_unit,
)
from trainplan.model.memory import (
    FP8_PARAM_BYTES,
    ModelState,
    cache_bytes_per_element,
    fsdp_fp8_transpose,
    state_terms,
)
from trainplan.model.model_spec import ModelSpec
from trainplan.model.muon import (
    muon_gathers_over_dp,
    muon_tp_gathers,
    newton_schulz_bytes,
    newton_schulz_flops,
)
from trainplan.model.offload import offload_staging_bytes
from trainplan.model.optimizers import (
    OptimizerKind,
    ParamClass,
    element_bytes,
    layer_matrices,
    matrix_extra_bytes,
    optimizer_scale,
    soap_preconditions_every_side,
)
from trainplan.model.overlapped_chunks import overlapped_mechanism
from trainplan.model.params import count_params, shares_embedding_with_last_stage
from trainplan.model.soap import SOAP_CARRIED_TENSORS, soap_step_bytes
from trainplan.model.split import stage_chunks
from trainplan.model.terms.deepspeed_turn import zero3_turn_gathered
from trainplan.model.terms.dispatch_buffers import dispatch_buffer_term
from trainplan.model.terms.fields import Context, Fields, stage_argmax, stage_take, stage_tuple
from trainplan.model.terms.fp8_linears import fp8_linears, fsdp2_fp8_cut
from trainplan.model.terms.grad_buffers import embedding_grad_term
from trainplan.model.terms.layer_wise_buffers import layer_wise_padding_term
from trainplan.model.terms.runtime_unshard import runtime_unshard_term
from trainplan.model.terms.runtime_window import held_whole_params
from trainplan.model.terms.split_key import CACHE, SPLIT_FIELDS, SplitKey
from trainplan.model.terms.stage_params import (
    busiest_stage,
    layer_count_per_gpu,
    layer_units_per_gpu,
    moe_experts_per_gpu,
    non_units_per_gpu,
    split_params,
    stage_params_per_gpu,
    units_per_gpu,
)
from trainplan.model.terms.tensors import largest_tensor_per_gpu
from trainplan.model.xp import is_array, where

__all__ = [
    "model_state_term",
    "stage_optimizer_scales",
    "optimizer_scales",
    "busiest_scales",
    "stage_muon_work",
    "stage_muon_transient",
    "muon_whole_matrices",
    "stage_soap_transient",
    "optimizer_transient_term",
    "busiest_muon_work",
]


def _busiest_matrix_excess(
    key: SplitKey,
    kind: OptimizerKind,
    adam_bytes: int,
    framework: str,
    stage: int,
    shard: int,
    expert_shard: int = 0,
) -> Fraction:
    """Bytes by which the busiest of ``shard`` data-parallel ranks holds more of stage
    ``stage``'s dense matrices' optimizer state than the average (× ``shard``, to be divided by
    it with the rest of the state) — or, given ``expert_shard``, the busiest of that many expert
    data-parallel ranks of its routed experts' matrices (× ``expert_shard``): Megatron-Core's
    layer-wise optimizer keeps each module parameter whole on one rank
    (:func:`model.layer_wise.busiest_rank_bytes`; linear_qkv fused; the local experts,
    ``count / ep`` of each at ``etp``, a buffer of their own, ``layer_wise_optimizer.py``
    ``compute_full_param_layout``; each matrix's :func:`model.optimizers.element_bytes` and
    :func:`model.optimizers.matrix_extra_bytes` as ``framework`` runs ``kind``). The first
    stage's first chunk is bucketed by the dense group's size for both buffers
    (``dist_utils.py``: one ``bucket_size`` per chunk, from ``dp_cp``)."""
    arch = key.model.arch
    assert arch is not None
    expert, ranks = bool(expert_shard), expert_shard or shard
    per_el = element_bytes(kind, ParamClass.MATRIX, adam_bytes)
    chunks = []
    for layers in stage_chunks(arch, key.pp, key.v, key.uneven, stage, key.sizes, key.schedule):
        chunk = []
        for j in layers:
            for mat in layer_matrices(arch, j, fused_qkv=True):
                if mat.expert != expert:
                    continue
                m, n = mat.local(key.etp if expert else key.tp)
                state = per_el * m * n + matrix_extra_bytes(kind, m, n, framework)
                chunk += [(m, n, state)] * (mat.count // key.ep if expert else mat.count)
        chunks.append(chunk)
    total = sum((b for c in chunks for _, _, b in c), Fraction(0))
    first = layer_wise_bucket_size(shard) if stage == 0 else None
    return ranks * busiest_rank_bytes(chunks, ranks, first) - total


@lru_cache(maxsize=CACHE)
def stage_optimizer_scales(
    key: SplitKey,
    kind: OptimizerKind,
    adam_bytes: int,
    framework: str = "textbook",
    shard: int = 1,
    zero_stage: int = 0,
    expert_shard: int = 1,
) -> tuple[tuple[Fraction, Fraction], ...]:
    """Per stage, the (dense, expert) factors on Adam's optimizer state that give ``kind``'s as
    ``framework`` runs it (:func:`model.optimizers.optimizer_scale` of the stage's layers, its
    input embedding on the first stage and its output layer — or the tied embedding's copy — on
    the last chunk's, :func:`model.split.output_rank`). (1, 1) for Adam. ``adam_bytes``: Adam's
    optimizer-state bytes per parameter. Under Megatron-Core's layer-wise distributed optimizer
    (``megatron`` at ZeRO 1 over ``shard`` > 1 ranks, Muon or SOAP,
    :func:`model.layer_wise.runs_layer_wise`) the dense factor is the busiest rank's of the
    ``shard`` ranks and the expert factor the busiest's of the ``expert_shard`` expert
    data-parallel ranks (:func:`_busiest_matrix_excess`), not the averages; the two busiest may
    be different GPUs, so their sum is an upper bound where they are. Exact, cached on the split
    structure, the optimizer, the framework and the shard groups."""
    arch = key.model.arch
    if kind is OptimizerKind.ADAM or arch is None:
        return ((Fraction(1), Fraction(1)),) * key.pp
    vocab = key.vocab()
    counts = count_params(arch, vocab)
    last = key.output_rank()
    last_copy = counts.output or (
        vocab * arch.hidden_size if last != 0 and shares_embedding_with_last_stage(arch) else 0
    )
    out = []
    tp, etp, ep = key.tp, key.etp, key.ep
    layer_wise = runs_layer_wise(kind, adam_bytes, framework, shard, zero_stage)
    for i, layers, dense, experts in stage_params_per_gpu(key):
        emb = Fraction(counts.embedding if i == 0 else 0) + (last_copy if i == last else 0)
        d, e = optimizer_scale(
            kind, arch, layers, tp, etp, ep, emb / tp, dense, experts, adam_bytes, framework
        )
        if layer_wise and dense:
            excess = _busiest_matrix_excess(key, kind, adam_bytes, framework, i, shard)
            d += excess / (adam_bytes * Fraction(dense))
        if layer_wise and experts and expert_shard > 1:
            excess = _busiest_matrix_excess(
                key, kind, adam_bytes, framework, i, shard, expert_shard
            )
            e += excess / (adam_bytes * Fraction(experts))
        out.append((d, e))
    return tuple(out)


_FRAMEWORK = SPLIT_FIELDS.index("framework")


def _stage_scales(
    model: ModelSpec, given: int | None, adam_bytes: int, optimizer: Any, *fields: Any
) -> tuple[Any, ...]:
    *split, shard, zero, expert_shard = fields
    key = SplitKey.of(model, given, *split)
    kind, framework = OptimizerKind(optimizer), str(split[_FRAMEWORK])
    return stage_optimizer_scales(
        key, kind, adam_bytes, framework, int(shard), int(zero), int(expert_shard)
    )


def _busiest_scales(
    model: ModelSpec, given: int | None, adam_bytes: int, optimizer: Any, *fields: Any
) -> tuple[Fraction, Fraction]:
    key = SplitKey.of(model, given, *fields)
    busiest = busiest_stage(stage_params_per_gpu(key))
    kind = OptimizerKind(optimizer)
    return stage_optimizer_scales(key, kind, adam_bytes, str(fields[_FRAMEWORK]))[busiest]


def busiest_scales(c: Context, f: Fields) -> tuple[Any, Any]:
    """:func:`optimizer_scales` of the stage with the most parameters
    (:func:`model.terms.stage_params.busiest_params`' stage: the one whose optimizer steps
    longest)."""
    args = (c.model, c.vocab_multiple, c.training.optimizer_bytes)
    return f.lookup(_busiest_scales, args, "optimizer", *SPLIT_FIELDS)


def optimizer_scales(c: Context, f: Fields) -> tuple[Any, Any]:
    """(dense, expert) factors on Adam's optimizer state of the stage ``f.stage`` under the
    layout's optimizer (:func:`stage_optimizer_scales`)."""
    args = (c.model, c.vocab_multiple, c.training.optimizer_bytes)
    names = ("optimizer", *SPLIT_FIELDS, "shard_degree", "zero_stage", "expert_shard_degree")
    return f.per_stage(_stage_scales, args, *names)


@lru_cache(maxsize=CACHE)
def stage_muon_work(
    key: SplitKey, whole: bool = True
) -> tuple[tuple[int, int, Fraction, Fraction], ...]:
    """Per stage, Muon's (Newton–Schulz FLOPs of the dense matrices, of the routed experts'
    matrices on one GPU, dense matrix elements on one GPU, expert ones): every matrix
    orthogonalised whole where tp matrices are gathered (``whole``,
    :func:`model.muon.muon_tp_gathers`), else its tp block
    (:func:`model.muon.newton_schulz_flops` of that shape; experts ÷ ep), elements after
    tp / etp (:meth:`model.optimizers.Matrix.local`). Zeros for a size-only model."""
    arch, tp, etp, ep = key.model.arch, key.tp, key.etp, key.ep
    if arch is None:
        return ((0, 0, Fraction(0), Fraction(0)),) * key.pp
    out = []
    for layers in key.layers():
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
    key: SplitKey, framework: str, whole: bool = True
) -> tuple[tuple[int, int], ...]:
    """Per stage, (the most bytes Muon's orthogonalisation of one of its matrices holds where
    only tensor parallelism gathers, the most where every matrix is gathered — over the
    data-parallel ranks too): :func:`model.muon.newton_schulz_bytes` of each matrix's
    full shape, gathered over tp where tp (etp for routed experts) divides it
    (:attr:`model.optimizers.Matrix.split`; Emerging-Optimizers' ``newton_schulz_tp`` falls
    back to the local matrix without a ``partition_dim``) — or, where tp matrices are not
    gathered (``whole`` False: Megatron-Core's ``--muon-tp-mode blockwise``), of its tp block.
    Zeros for a size-only model."""
    arch = key.model.arch
    if arch is None:
        return ((0, 0),) * key.pp
    out = []
    for layers in key.layers():
        tp_only = every = 0
        for j in layers:
            for mat in layer_matrices(arch, j):
                degree = key.etp if mat.expert else key.tp
                shape = (mat.rows, mat.cols) if whole else mat.local(degree)
                split = whole and mat.split is not None and degree > 1
                tp_only = max(tp_only, newton_schulz_bytes(*shape, framework, split))
                every = max(every, newton_schulz_bytes(*shape, framework, True))
        out.append((tp_only, every))
    return tuple(out)


def muon_whole_matrices(framework: Any, muon_tp_mode: str | None) -> bool:
    """:func:`model.muon.muon_tp_gathers`, with a mode another profile does not take
    (refused by the layout's rules) read as that profile's whole matrices."""
    try:
        return muon_tp_gathers(str(framework), muon_tp_mode)
    except LayoutError:
        return True


def _stage_transient(
    model: ModelSpec, given: int | None, mode: str | None, *fields: Any
) -> tuple[Any, ...]:
    framework = fields[_FRAMEWORK]
    whole = muon_whole_matrices(framework, mode)
    return stage_muon_transient(SplitKey.of(model, given, *fields), str(framework), whole)


@lru_cache(maxsize=CACHE)
def stage_soap_transient(key: SplitKey, framework: str) -> tuple[int, ...]:
    """Per stage, the most bytes ``framework``'s SOAP step holds beyond its resident state:
    the largest :func:`model.soap.soap_step_bytes` over the stage's matrices on one GPU (as the
    optimizer sees them, :func:`model.optimizers.soap_preconditions_every_side`: tp-local, Q, K
    and V fused under Megatron-Core; routed experts over etp), plus
    :data:`model.soap.SOAP_CARRIED_TENSORS` FP32 tensors of the previous parameter's update,
    bounded by the stage's largest matrix (which parameter a rank steps before its largest is
    the layer-wise optimizer's packing). 0 where the profile's step is not modelled and for a
    size-only model."""
    arch = key.model.arch
    if arch is None or not soap_step_bytes(1, 1, framework):
        return (0,) * key.pp
    fused = soap_preconditions_every_side(framework)
    out = []
    for layers in key.layers():
        peak = largest = 0
        for j in layers:
            for mat in layer_matrices(arch, j, fused):
                rows, cols = mat.local(key.etp if mat.expert else key.tp)
                peak = max(peak, soap_step_bytes(rows, cols, framework))
                largest = max(largest, rows * cols)
        out.append(peak + SOAP_CARRIED_TENSORS * 4 * largest)
    return tuple(out)


def _stage_soap(model: ModelSpec, given: int | None, *fields: Any) -> tuple[int, ...]:
    framework = str(fields[_FRAMEWORK])
    return stage_soap_transient(SplitKey.of(model, given, *fields), framework)


def optimizer_transient_term(c: Context, f: Fields) -> Any:
    """Bytes the optimizer step of stage ``f.stage`` holds beyond the resident state while the
    optimizer updates its largest matrix. Every rank may own the largest matrix
    (Megatron-Core's layer-wise optimizer and ``DistMuon`` spread whole matrices over the
    ranks), so the rank at its peak holds it.

    * Muon (:func:`stage_muon_transient`): the gathered whole matrix and the Newton–Schulz
      iteration's tensors, gathered over dp where Muon gathers there
      (:func:`model.muon.muon_gathers_over_dp`, a shard group of more than one rank).
    * SOAP (:func:`stage_soap_transient`): the factor, eigenbasis and projection tensors of its
      step (:func:`model.soap.soap_step_bytes`).

    0 under any other optimizer."""
    kind = OptimizerKind(f.optimizer)
    if c.model.arch is None or kind not in (OptimizerKind.MUON, OptimizerKind.SOAP):
        return 0
    if kind is OptimizerKind.SOAP:
        return f.per_stage(_stage_soap, (c.model, c.vocab_multiple), *SPLIT_FIELDS)
    args = (c.model, c.vocab_multiple, c.training.muon_tp_mode)
    tp_only, every = f.per_stage(_stage_transient, args, *SPLIT_FIELDS)
    if not muon_gathers_over_dp(str(f.framework), int(f.zero_stage)):
        return tp_only
    return where(f.shard_degree > 1, every, tp_only)


def _stage_muon(
    model: ModelSpec, given: int | None, mode: str | None, *fields: Any
) -> tuple[Any, ...]:
    whole = muon_whole_matrices(fields[_FRAMEWORK], mode)
    return stage_muon_work(SplitKey.of(model, given, *fields), whole)


def busiest_muon_work(c: Context, f: Fields) -> tuple[Any, Any, Any, Any]:
    """:func:`stage_muon_work` of the stage with the most Newton–Schulz FLOPs (the first of
    equals)."""
    ns_d, ns_e, el_d, el_e = stage_tuple(
        f.stages(
            lambda g: g.per_stage(
                _stage_muon, (c.model, c.vocab_multiple, c.training.muon_tp_mode), *SPLIT_FIELDS
            )
        )
    )
    pick = stage_argmax(
        ns_d + ns_e if is_array(ns_d) else [a + b for a, b in zip(ns_d, ns_e, strict=True)]
    )
    return tuple(stage_take(x, pick) for x in (ns_d, ns_e, el_d, el_e))  # type: ignore[return-value]


def model_state_term(c: Context, f: Fields) -> ModelState:
    """Model-state bytes on one GPU of pipeline stage ``f.stage`` (:class:`ModelState`: weights,
    gradients, optimizer state, gathered units, buffers, optimizer-step extras, cached weight
    copies, the host's share), as the layout's framework holds them at its ZeRO stage
    (:func:`model.memory.state_terms`, :meth:`model.mechanisms.Mechanism.memory_terms`; FSDP2's
    whole weights under PyTorch's multi-stage runtime: :func:`model.terms.runtime_window.
    held_whole_params`, and a re-gathered chunk's all-gather output at its copy-out,
    :func:`model.terms.runtime_unshard.runtime_unshard_term`); where the framework keeps the
    modules outside its units gathered (Megatron-FSDP, :attr:`model.mechanisms.Mechanism.
    non_units_gathered`), two layer units (:func:`model.terms.stage_params.layer_units`) and the
    embedding and output layer whole (:func:`model.terms.stage_params.non_unit_params`). Under
    optimizer offload the gradients include the GPU staging buffer of the stage's largest
    parameter tensor where the mechanism keeps one, and the host its twin (DeepSpeed ZeRO-1/2,
    :func:`model.offload.offload_staging_bytes`). Exact for one layout; element-wise over columns.

    Scope: the split (:data:`model.terms.stage_params.SPLIT_FIELDS`), dp, cp (the replicas ZeRO
    shards over), the ZeRO stage, micro_batch_size (with dp, the micro-batches a step: whether it
    accumulates, which sizes offload's accumulation buffers; the runtime's windows of chunks),
    the schedule (DualPipe's two stages and chunks, :func:`model.overlapped_chunks`).
    Control: framework, zero_stage, pp, schedule.
    """
    t = c.training
    dense, experts = split_params(c, f)
    unit_dense, unit_expert = units_per_gpu(c, f)
    cache_bytes = cache_bytes_per_element(t, Framework(f.framework), c.device)
    linear, layer_linear = fp8_linears(c, f, cache_bytes)
    mech = overlapped_mechanism(mechanism(  # DualPipe's two chunks at once
        f.framework, f.zero_stage, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes,
        pipelined=f.pp > 1, distributed_optimizer=t.distributed_optimizer,
        double_buffer=t.fsdp_double_buffer, overlap_comm=t.deepspeed_overlap_comm,
        cpu_offload=t.offload.optimizer > 0, sp_comm=sp_comm_bytes(t, f.cp),
    ), f.schedule)  # fmt: skip
    held = layer_units_per_gpu(c, f) if mech.non_units_gathered else (unit_dense, unit_expert)
    w, g, o, gathered, buffers, step, cache, host = state_terms(
        mech, dense, experts, f.shard_degree, f.expert_shard_degree, *held,
        linear, layer_linear, cache_bytes, t.offload, f.m > 1, t.fp8_param_gather,
        optimizer_scales(c, f), fsdp_fp8_transpose(t, f.framework), held_whole_params(c, f, mech),
        fsdp2_fp8_cut(c, f),
    )  # fmt: skip
    if mech.non_units_gathered:  # Megatron-FSDP
        # the embedding and output layer whole beside the layer units, through the optimizer
        # step too (no hook releases them); the gradient buckets its reduce-scatter queue
        # keeps (replacing the per-unit count); the pools of fsdp_double_buffer in the step
        whole = mech.non_unit_gathered(non_units_per_gpu(c, f), f.shard_degree)
        gathered, step = gathered + whole, step + whole
        unit = held[0] + held[1]
        buffers = mech.reduce_bytes * _reduce_queue(c, f, mech, unit)
        narrower = (mech.weight_bytes - FP8_PARAM_BYTES) * layer_linear if t.fp8_param_gather else 0
        step = step + mech.pool_bytes(unit, mech.weight_bytes * unit - narrower)
    gathered = zero3_turn_gathered(c, f, mech, gathered)  # DeepSpeed ZeRO-3's at the turn
    gathered = gathered + runtime_unshard_term(c, f, mech)  # FSDP2 runtime's copy-out
    if t.offload.optimizer and mech.offload_staging_bytes:  # DeepSpeed ZeRO-1/2's staging
        staging, staged = offload_staging_bytes(mech, t.offload, largest_tensor_per_gpu(c, f))
        g, host = g + staging, host + staged
    dispatch = dispatch_buffer_term(c, f)
    padding = layer_wise_padding_term(c, f)  # the layer-wise optimizer's shard-aligned buckets
    w, g = w + mech.weights_full * padding, g + mech.grads_full * padding
    g = g + embedding_grad_term(c, f, mech)
    step = step + optimizer_transient_term(c, f)
    return ModelState(w, g, o, gathered, buffers, step, host, cache, dispatch)


def _reduce_queue(c: Context, f: Fields, mech: Any, unit: Any) -> Any:
    """Megatron-FSDP's gradient elements alive at once in backward on one GPU of stage
    ``f.stage`` (:meth:`model.mechanism_record.Mechanism.reduce_queue_elements`): its layers'
    buckets, padded (:func:`model.megatron_fsdp_buckets.padded_layer_unit`), behind and beside
    those of the parameters outside the layers (:func:`_non_unit_buckets`)."""
    fp8 = c.training.fp8_param_gather
    padded = f.lookup(_padded_unit, (c.model.arch, fp8), "tp", "shard_degree")
    first, held, heads = f.per_stage(
        _non_unit_buckets, (c.model, c.vocab_multiple, fp8), *SPLIT_FIELDS, "shard_degree"
    )
    # a MoE stage's expert and dense bucket groups queue apart; FP8 primary weights split
    # each group by dtype, so only the bound holds there, as with several head buckets
    single = where(heads <= 1, not fp8, False)
    layers, expert = layer_count_per_gpu(c, f), moe_experts_per_gpu(c, f)
    return mech.reduce_queue_elements(unit, first, layers, padded, held, expert, single)


def _non_unit_buckets(
    model: Any, given: Any, fp8_params: bool, *fields: Any
) -> tuple[tuple[int, int, int], ...]:
    """Per stage, :func:`model.megatron_fsdp_buckets.non_unit_buckets` and :func:`model.
    megatron_fsdp_buckets.head_bucket_count` of the layout whose :data:`SPLIT_FIELDS` and shard
    degree are ``fields``; zeros for a size-only model."""
    *split, shard = fields
    key = SplitKey.of(model, given, *split)
    arch = key.model.arch
    if arch is None:
        return ((0, 0, 0),) * key.pp
    vocab, last = key.vocab(), key.output_rank()
    args = [
        (arch, key.tp, vocab, key.pp, key.v, i, last, int(shard), fp8_params) for i in range(key.pp)
    ]
    return tuple((*non_unit_buckets(*a), head_bucket_count(*a)) for a in args)


def _padded_unit(arch: Any, fp8_params: bool, tp: Any, shard: Any) -> int:
    """:func:`model.megatron_fsdp_buckets.padded_layer_unit`; 0 for a size-only model."""
    return 0 if arch is None else padded_layer_unit(arch, fp8_params, int(tp), int(shard))
