"""The optimizer step's terms on one GPU of its busiest stage: the elements it updates through
HBM (:func:`optimizer_seconds_term`) and Muon's own work and gathers (:func:`muon_seconds`,
:func:`muon_gather_traffic`), timed on the links and at the rates of the roofline terms
(:mod:`model.terms.roofline`'s :func:`~model.terms.roofline.params_of` and
:func:`~model.terms.roofline.axis_link`). Units: seconds and bytes per GPU per step.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.comm import AxisTraffic
from trainplan.model.fp8_gathers import fp8_param_gathers, precompute_read_bytes
from trainplan.model.frameworks import DistributedOptimizer, Framework, gradient_bytes_for
from trainplan.model.mechanism_record import Mechanism
from trainplan.model.memory import optimizer_elements
from trainplan.model.muon import muon_gather_bytes
from trainplan.model.nvlink_bound import ring_busbw
from trainplan.model.offload import HOST_GRADIENT_BYTES, adam_step_bytes
from trainplan.model.optimizers import OptimizerKind, optimizer_step_bytes
from trainplan.model.step_passes import is_bf16_optimizer, step_pass_bytes
from trainplan.model.step_time import optimizer_seconds
from trainplan.model.terms.fields import Context, Fields, LayoutFields, link_caps
from trainplan.model.terms.grad_buffers import busiest_embedding
from trainplan.model.terms.roofline import axis_link, params_of
from trainplan.model.terms.stage_params import busiest_params
from trainplan.model.terms.state import busiest_muon_work, busiest_scales, muon_whole_matrices
from trainplan.model.terms.traffic import dp_mechanism, fp8_gathered_params
from trainplan.model.xp import as_float, maximum, times, where

__all__ = [
    "optimizer_seconds_term",
    "whole_buffer_zeroing_bytes",
    "muon_gather_traffic",
    "muon_gather_seconds",
    "muon_axis_traffic",
    "muon_seconds",
]


def optimizer_seconds_term(c: Context, f: Fields) -> Any:
    """Seconds of the optimizer step on one GPU of the stage with the most parameters: the
    elements it updates (less what an offload steps on the host) at the optimizer's bytes
    (:func:`model.offload.adam_step_bytes`, :func:`model.optimizers.optimizer_step_bytes`)
    plus the framework's own passes (:func:`model.step_passes.step_pass_bytes`, the clip's
    scaling as :attr:`model.timing.CostOptions.grad_clip_scaling` says, FP16's unscaling as
    :attr:`~model.timing.CostOptions.loss_scaling` does; torchao's FP8-gather scale
    precompute under ``fsdp2``, :func:`_fp8_precompute_bytes`), and the gradient zeroing
    beyond them (:func:`whole_buffer_zeroing_bytes`) through HBM
    (:func:`model.step_time.optimizer_seconds`)."""
    t, d = c.training, c.gpu
    assert d.hbm_bytes_per_s is not None
    dense, experts = busiest_params(c, f)
    mech = dp_mechanism(c, f)
    owned = optimizer_elements(mech, dense, experts, f.shard_degree, f.expert_shard_degree)
    owned = times(owned, 1 - t.offload.optimizer)
    embedding = busiest_embedding(c, f) if mech.embedding_grad_bytes else 0
    zeroing = as_float(whole_buffer_zeroing_bytes(mech, dense + experts, owned, embedding))
    adam = OptimizerKind(f.optimizer) is OptimizerKind.ADAM
    # Megatron-Core's precision-aware optimizer: state not in FP32, or the optimizer offloaded
    aware = adam and (t.optimizer_bytes != 12 or t.offload.optimizer > 0)
    apex = DistributedOptimizer(t.distributed_optimizer) is DistributedOptimizer.APEX
    g = gradient_bytes_for(f.framework, t.gradient_bytes)
    apex = apex and mech.zero_stage == 1
    every_step = c.options.grad_clip_scaling == "every_step"
    unscale = c.options.loss_scaling
    passes = step_pass_bytes(mech, g, apex, aware, t.optimizer_bytes, every_step, unscale)
    passes = passes * as_float(owned) + _fp8_precompute_bytes(c, f, mech)
    if adam:
        moved = adam_step_bytes(t.optimizer_bytes, t.weight_bytes) * as_float(owned) + zeroing
        return optimizer_seconds(moved + passes, d.hbm_bytes_per_s, params_of(c), 1)
    # another optimizer: its state per element (Adam's × the stage's scale) read and written,
    # the gradient read, the weight written, the clip and zeroing (optimizer_step_bytes' rule)
    scale_d, scale_e = busiest_scales(c, f)
    state = t.optimizer_bytes * optimizer_elements(
        mech, dense * scale_d, experts * scale_e, f.shard_degree, f.expert_shard_degree
    )
    state = times(state, 1 - t.offload.optimizer)
    moved = 2 * as_float(state) + (optimizer_step_bytes(0, t.weight_bytes)) * as_float(owned)
    moved = moved + zeroing + passes
    return optimizer_seconds(moved, d.hbm_bytes_per_s, params_of(c), 1) + muon_seconds(c, f)


def _fp8_precompute_bytes(c: Context, f: Fields, mech: Mechanism) -> Any:
    """HBM bytes a step of torchao's ``precompute_float8_dynamic_scale_for_fsdp`` on one GPU
    under ``fsdp2`` with the FP8 all-gather (:func:`model.fp8_gathers.precompute_read_bytes` of
    the FP8-gathered elements' shard, :func:`model.terms.traffic.fp8_gathered_params` ÷ the
    shard degree, where FSDP shards); 0 elsewhere."""
    t = c.training
    if mech.framework is not Framework.FSDP2 or not fp8_param_gathers(
        f.framework, t.precision, t.fp8_recipe, t.fp8_param_gather
    ):
        return 0.0
    dense, experts = fp8_gathered_params(c, f)
    shard = where(f.shard_degree > 1, as_float(dense) / f.shard_degree, 0.0)
    return as_float(precompute_read_bytes(shard + as_float(experts) / f.expert_shard_degree))


def whole_buffer_zeroing_bytes(
    mech: Mechanism, elements: Any, owned: Any, embedding: Any = 0
) -> Any:
    """HBM bytes per step that the gradient passes over the whole buffer move on one GPU beyond
    the :data:`~model.offload.HOST_GRADIENT_BYTES` (4 B) of zeroing per element the optimizer
    steps on the GPU (``owned``) that :func:`model.offload.adam_step_bytes` and
    :func:`model.optimizers.optimizer_step_bytes` count: where the framework zeroes its whole
    contiguous gradient buffer, ``grads_full`` bytes × every parameter element on the GPU
    (``elements``), the ``embedding`` elements among them at the width their own buffer has
    (:meth:`Mechanism.embedding_grad_extra`), less those 4 B × ``owned``; 0 elsewhere. Bytes;
    element-wise for arrays; negative where the buffer is narrower than 4 B and whole
    (Megatron-Core DDP, BF16 grads).

    The Megatron-Core profiles below ZeRO-3 zero the whole buffer, not the optimizer's shard:
    Megatron-LM d98e8a64 ``megatron/training/training.py`` ``train_step`` calls
    ``model_chunk.zero_grad_buffer()`` every iteration, which resets every buffer
    (``distributed_data_parallel.py`` ``zero_grad_buffer`` → ``param_and_grad_buffer.py``
    ``_ParamAndGradBuffer.reset``: ``self.grad_data.zero_()``, the dense and the expert
    buffers whole); Apex ``distributed_fused_adam.py`` ``DistributedFusedAdam.zero_grad``
    (``contiguous_grad_buffer``): ``grad_buffer.zero_()`` for every buffer of
    ``_grad_buffers``, one per dtype group (``_init_grad_buffer``), the embeddings' in FP32.
    DeepSpeed's ``BF16_Optimizer`` (edaa7221 ``bf16_optimizer.py``) zeroes its whole FP32
    buffer twice, ``clear_hp_grads`` at the end of ``step`` and again in ``zero_grad``, which
    ``engine._take_model_step`` calls after it, and its norm reads the whole buffer
    (``get_grads_for_norm``, ``get_global_norm_of_tensors``): 12 B an element, less the 8 B of
    the clip's read and the zeroing the count gives each owned one; its clip scales only when the
    norm exceeds the limit (``clip_tensors_by_global_norm``), not counted.

    Examples
    --------
    Distributed optimizer, FP32 main_grad, D = 8: 4 B × 8e9 whole, less 4 B × 1e9 counted.

    >>> from trainplan.model.mechanisms import mechanism
    >>> whole_buffer_zeroing_bytes(mechanism("megatron", 1), 8 * 10**9, 10**9) / 10**9
    28.0
    >>> whole_buffer_zeroing_bytes(mechanism("megatron", 0), 8 * 10**9, 8 * 10**9)
    0
    >>> whole_buffer_zeroing_bytes(mechanism("fsdp2", 3), 8 * 10**9, 10**9)
    0

    Apex with BF16 buffers: 2 B × 8e9, the 1e9 embedding elements 2 B more, less 4 B × 1e9;
    BF16_Optimizer: 12 B × 8e9 less 8 B × 1e9.

    >>> apex = mechanism("megatron", 1, gradient_bytes=2, distributed_optimizer="distributed_fused_adam")
    >>> whole_buffer_zeroing_bytes(apex, 8 * 10**9, 10**9, 10**9) / 10**9
    14.0
    >>> whole_buffer_zeroing_bytes(mechanism("deepspeed", 1, gradient_bytes=4), 8 * 10**9, 10**9) / 10**9
    88.0
    """
    if is_bf16_optimizer(mech):
        return 3 * HOST_GRADIENT_BYTES * elements - 2 * HOST_GRADIENT_BYTES * owned
    if mech.framework is not Framework.MEGATRON or mech.zero_stage >= 3:
        return 0
    wider = mech.embedding_grad_extra(embedding)
    return mech.grads_full * elements + wider - HOST_GRADIENT_BYTES * owned


def muon_gather_traffic(c: Context, f: Fields) -> tuple[Any, Any]:
    """(bytes over tp, bytes over the data-parallel shard group) one GPU of Muon's busiest stage
    (the most Newton–Schulz FLOPs, :func:`model.terms.state.busiest_muon_work`) sends per step so
    that Muon sees whole matrices: :func:`model.muon.muon_gather_bytes` of its dense
    matrices (over tp and D) plus its routed experts' (over etp and D_e), both riding the tp and
    the dp link. The one volume the traffic table's Muon rows show and :func:`muon_seconds`
    times. (0, 0) under any other optimizer."""
    if OptimizerKind(f.optimizer) is not OptimizerKind.MUON:
        return 0, 0
    _, _, el_d, el_e = busiest_muon_work(c, f)
    zero, fw = int(f.zero_stage), str(f.framework)
    whole = muon_whole_matrices(fw, c.training.muon_tp_mode)
    over_tp, over_dp = muon_gather_bytes(fw, zero, f.shard_degree, f.tp, el_d, whole)
    e_tp, e_dp = muon_gather_bytes(fw, zero, f.expert_shard_degree, f.expert_tp, el_e, whole)
    return over_tp + e_tp, over_dp + e_dp


def muon_gather_seconds(c: Context, f: Fields) -> tuple[Any, Any]:
    """(seconds over tp, over dp) of :func:`muon_gather_traffic`'s bytes on each axis's link at
    its tier's efficiency (scale-up or scale-out; NVLink's where it binds across domains,
    :func:`model.nvlink_bound.ring_busbw`), all exposed: the optimizer step waits for
    them. 0 on an axis without a link figure."""
    p = params_of(c)
    out = []
    for axis, moved in zip(("tp", "dp"), muon_gather_traffic(c, f), strict=True):
        bandwidth, scaleup = axis_link(c, f, axis)
        nvlink = link_caps(c, f, axis, bandwidth, scaleup)[1]
        rate = ring_busbw(bandwidth, scaleup, nvlink, p)
        out.append(where(bandwidth > 0, as_float(moved) / maximum(rate, 1.0), 0.0))
    return out[0], out[1]


def muon_axis_traffic(c: Context, f: LayoutFields) -> list[AxisTraffic]:
    """The traffic table's rows of Muon's optimizer-step gathers (:func:`muon_gather_traffic`),
    one per axis that sends: tp (Emerging-Optimizers' ``newton_schulz_tp``, duplicated mode:
    each matrix all-gathered over tp, etp for routed experts) and dp (Megatron-Core's
    layer-wise distributed optimizer: the gradient all-reduce beyond the distributed optimizer's
    reduce-scatter; torchtitan's ``DistMuon``: each matrix's shards to its owner and the update
    back). Empty under any other optimizer."""
    lay = f.layout
    over_tp, over_dp = muon_gather_traffic(c, f)
    rows = []
    if over_tp:
        group = lay.tp if lay.tp > 1 else lay.expert_tp
        rows.append(AxisTraffic("tp", "Muon: all-gather of whole matrices", group, over_tp))
    if over_dp:
        name = "Muon: whole-matrix gather to the owner + scatter back"
        if lay.framework.value == "megatron":
            name = "Muon: gradient all-reduce beyond the reduce-scatter (layer-wise optimizer)"
        rows.append(AxisTraffic("dp", name, lay.shard_degree, over_dp))
    return rows


def muon_seconds(c: Context, f: Fields) -> Any:
    """Muon's own step work on one GPU of its busiest stage, all exposed (it follows the
    gradient reduction): the Newton–Schulz FLOPs of the matrices this GPU orthogonalises — whole
    matrices, ÷ D (D_e for experts) where the optimizer is sharded (Megatron-Core's layer-wise
    distributed optimizer, torchtitan's ``DistMuon``), every tp rank iterating the whole matrix
    where tp matrices are gathered (``--muon-tp-mode duplicated``, Megatron's default; its block
    under ``blockwise``, :func:`model.muon.muon_tp_gathers`) — at the GEMM efficiency's
    share of the peak, and the gathers' time (:func:`muon_gather_seconds`). 0 under any other
    optimizer."""
    if OptimizerKind(f.optimizer) is not OptimizerKind.MUON:
        return 0.0
    d, p = c.gpu, params_of(c)
    ns_d, ns_e, _, _ = busiest_muon_work(c, f)
    mech = dp_mechanism(c, f)
    if mech.optimizer_sharded:
        ns_d, ns_e = ns_d / f.shard_degree, ns_e / f.expert_shard_degree
    compute = as_float(ns_d + ns_e) / (d.peak_flops_per_s * p.gemm_efficiency)
    over_tp, over_dp = muon_gather_seconds(c, f)
    return compute + over_tp + over_dp
