"""The roofline time of the data-parallel collectives, over the groups that carry them: the
dense parameters' over the dp·cp group (the ``dp`` link), the routed experts' over the expert
data-parallel group (the ``edp`` link, :func:`topology.placement.axis_links`), each with its own
buckets, then one exposure rule over their sum (:func:`model.dp_exposure.dp_exposed_seconds`).

Megatron-Core (d98e8a64dd ``megatron/core/distributed/distributed_data_parallel.py``
``DistributedDataParallel.__init__``) keeps the experts' gradients in buffers of their own,
reduced over ``intra_expt_dp_group`` and bucketed apart (``expert_parallel_bucket_groups =
partition_buckets(self.expert_parallel_buffers, …)``), with the one bucket size
``max(40000000, 1000000 * dp_group.size())`` of both; ``start_grad_sync`` and
``finish_grad_sync`` walk ``self.bucket_groups + self.expert_parallel_bucket_groups``. With ep
inside dp the expert group has one rank per node where the dense group has eight, so its ring
leaves each node through one NIC (:func:`model.step_time.rings_bandwidth`). The two groups'
collectives share each GPU's NIC whether they run one after the other or at once, so their
times add. DeepSpeed's expert data-parallel groups (edaa72212 ``utils/groups.py``
``_create_expert_and_data_parallel``) and torchtitan's ``efsdp`` mesh (b5bcd76c6
``parallel_dims.py``) are placed alike.

Written once over a layout's fields (:mod:`model.terms.fields`): exact for one layout,
element-wise over the search's columns.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from trainplan.model.comm import (
    dp_collective_calls,
    grad_reduce_overlaps,
    reduces_beside_compute,
)
from trainplan.model.deepspeed_accumulate import accumulate_seconds
from trainplan.model.deepspeed_fetches import deepspeed_gather_calls
from trainplan.model.dp_exposure import DpSeconds, dp_exposed_seconds, dp_seconds
from trainplan.model.fp8_gathers import fp8_param_gathers
from trainplan.model.frameworks import Framework
from trainplan.model.fsdp2_copies import copy_in_bytes, fp8_copy_saving, regather_copy_bytes
from trainplan.model.fsdp2_pipeline import (
    regather_forward_share,
    runtime_regathers,
    runtime_unshards,
    upfront_gather,
)
from trainplan.model.memory import FP8_PARAM_BYTES
from trainplan.model.pipeline_reduce import chunked_param_gathers, reduce_waiting_share
from trainplan.model.terms.fields import Context, Fields, axis_domains, axis_members, link_caps
from trainplan.model.terms.roofline import axis_link, other_link, params_of
from trainplan.model.terms.sm_shares import dp_kind, group_sm_share
from trainplan.model.terms.stage_params import busiest_params
from trainplan.model.terms.traffic import (
    deepspeed_walk,
    dp_group_traffic_bytes,
    dp_mechanism,
    fp8_gathered_params,
    most_layers,
    unfetched_params,
)
from trainplan.model.xp import as_float, is_array, minimum, where

__all__ = [
    "dp_group_seconds",
    "dp_sm_share",
    "dp_group_times",
    "dp_seconds_term",
    "grad_accumulation_term",
]


def dp_group_seconds(c: Context, f: Fields, mech: Any = None) -> tuple[tuple[DpSeconds, Any], ...]:
    """``(seconds, calls)`` of the dense parameters' collectives on the dp link over
    ``shard_degree`` ranks, then of the routed experts' on the edp link over
    ``expert_shard_degree`` ranks: the :class:`model.dp_exposure.DpSeconds` of
    :func:`model.dp_exposure.dp_seconds` of :func:`model.terms.traffic.dp_group_traffic_bytes`,
    each group split into its own buckets over its own parameters
    (:func:`model.comm.dp_collective_calls`; under ``fsdp2`` one unit per block, the experts one
    per MoE block; DeepSpeed ZeRO-3's all-gathers its fetches,
    :func:`model.deepspeed_fetches.deepspeed_gather_calls` under the walk of the layout's
    recompute mode, :func:`model.terms.traffic.deepspeed_walk`), each ring's steps between members
    of one NVLink domain on NVLink (:func:`model.terms.fields.axis_members` of the group's
    link: the slowest group's members in a domain, :func:`model.roofline.collective_latency`;
    each call the slower of that group and the groups on another number of domains, each at
    its own latency and NICs, :func:`model.terms.roofline.other_link`);
    zero seconds for a group of one rank. A mechanism that
    :attr:`~model.mechanism_record.Mechanism.regathers_after_forward` runs the schedule's share
    of its per-micro-batch gathers in forwards (:func:`model.fsdp2_pipeline.
    regather_forward_share`); under PyTorch's multi-stage runtime the chunks it gathers again
    (:func:`model.fsdp2_pipeline.runtime_regathers`, :attr:`DpSeconds.again_s`). ``mech``:
    another mechanism's collectives in the same buckets (None: the layout's)."""
    mech, m, fw = mech or dp_mechanism(c, f), f.m, str(f.framework)
    forward = regather_forward_share(str(f.schedule), m) if mech.regathers_after_forward else None
    again = runtime_regathers(mech, f.schedule, f.pp, f.virtual_stages, m)
    overlapped = c.options.grad_reduce_overlap
    layers, moe_layers = most_layers(c, f)
    out = []
    parts = (
        busiest_params(c, f), fp8_gathered_params(c, f), dp_group_traffic_bytes(c, f, mech),
        (layers, moe_layers), (f.shard_degree, f.expert_shard_degree), ("dp", "edp"),
    )  # fmt: skip
    narrow = (mech.weight_bytes - FP8_PARAM_BYTES) / mech.weight_bytes
    fetches: Any = (None, None)
    if c.model.arch is not None and mech.framework is Framework.DEEPSPEED and mech.zero_stage == 3:
        fetched = (c.arch,), f.tp, f.expert_tp, f.ep, layers, moe_layers, m
        fetches = f.lookup_values(deepspeed_gather_calls, *fetched, *deepspeed_walk(c, f))
    unfetched = unfetched_params(c, f, mech)
    gathers = max(mech.gathers_per_microbatch, 1)
    for *part, gather_calls, skip in zip(*parts, fetches, unfetched, strict=True):
        params, fp8, (total, per_mb), units, group, axis = part
        calls = dp_collective_calls(fw, as_float(params), units, f.dp, overlapped)
        bandwidth, scaleup = axis_link(c, f, axis)
        on = (group > 1) & (bandwidth > 0)
        held = where(params > 0, as_float(params), 1.0)
        gathered = 1 - narrow * as_float(fp8) / held - as_float(skip) / (gathers * held)
        s = dp_seconds(
            mech, as_float(total - m * per_mb), as_float(per_mb), group, calls,
            where(on, bandwidth, 1.0), scaleup, params_of(c), forward_share=forward, gathered=gathered,
            again=again, gather_calls=gather_calls, per_domain=axis_members(c, f, axis),
            domains=axis_domains(c, f, axis), other=_other(c, f, axis, on),
            caps=link_caps(c, f, axis, bandwidth, scaleup),
        )  # fmt: skip
        s = DpSeconds(*(where(on, getattr(s, k.name), 0.0) for k in fields(DpSeconds)))
        out.append((s, calls))
    return tuple(out)


def _other(c: Context, f: Fields, axis: str, on: Any) -> tuple[Any, Any, Any, Any]:
    """:func:`model.terms.roofline.other_link` of the dp or edp group, its bandwidth 1.0 where
    the group sends nothing (as the first link's)."""
    bandwidth, scaleup, members, domains = other_link(c, f, axis)
    return where(on & (bandwidth > 0), bandwidth, 1.0), scaleup, members, domains


def dp_sm_share(c: Context, f: Fields, mech: Any, dense: Any, experts: Any) -> Any:
    """``φ`` of the data-parallel collectives beside computation
    (:func:`model.terms.sm_shares.group_sm_share`) as NCCL runs the mechanism's collectives
    (:func:`model.terms.sm_shares.dp_kind`: a DDP all-reduce as an all-reduce, NVLS where the
    group has it; reduce-scatters, all-gathers and per-rank reduces as rings) — the dense group's over the dp·cp
    link, the experts' over the edp link, averaged by their ``dense`` and ``experts`` seconds, so
    ``φ·a`` of their sum is each group's ``φ`` times its own seconds. ``mech``: a scalar
    :class:`model.comm.Mechanism`."""
    kind = dp_kind(mech)
    phi_d, phi_e = group_sm_share(c, f, "dp", kind), group_sm_share(c, f, "edp", kind)
    total = dense + experts
    some = total > 0
    return where(some, (dense * phi_d + experts * phi_e) / where(some, total, 1.0), phi_d)


def dp_group_times(
    c: Context, f: Fields, window: Any, mech: Any = None
) -> tuple[tuple[Any, Any], ...]:
    """``(seconds if nothing overlapped, exposed)`` of the dense group's collectives, then of the
    expert group's (:func:`dp_group_seconds`). What waits is the mechanism's rule
    (:func:`model.dp_exposure.dp_exposed_seconds`) over their sum, ``window`` being
    :func:`model.terms.roofline.window_seconds` (one micro-batch's forward and backward, which
    the rule splits into the forward's and the backward's windows; the per-micro-batch
    traffic's forward share is both groups' forward all-gathers), with the last buckets of both
    groups as its tail: each group's last bucket holds the first layers' gradients, ready only
    when the backward ends. The exposed seconds are shared between the groups by their seconds (the
    traffic table's two rows); a model without experts keeps the whole on the dense group.
    What waits of an overlapped collective includes the SMs its kernels take from the
    computation it hides under (:func:`dp_sm_share`; 0 unless ``nccl_sm_charge``), a pipeline
    stage's reductions after its last backward (:func:`model.pipeline_reduce.reduce_waiting_share`),
    the once-per-step gathers of the step's first forward
    (:attr:`model.mechanism_record.Mechanism.step_gathers_in_forward`; under PyTorch's
    multi-stage runtime the first chunk's waited whole, :func:`model.fsdp2_pipeline.
    upfront_gather`), the runtime's re-gathers of chunks (:attr:`model.dp_exposure.
    DpSeconds.again_s`, spread over the m micro-batches in their backwards' windows: each is
    issued a chunk's forward and backward or more before the pass that waits for it, the
    module docstring of :mod:`model.fsdp2_pipeline`) and Megatron-Core's interleaved
    schedule's parameter all-gathers, chunk by chunk under the next step's warm-up forwards,
    ``min(pp, m)`` micro-batches a chunk at a time
    (:func:`model.pipeline_reduce.chunked_param_gathers`,
    :func:`model.dp_exposure.interleaved_gather_seconds`). ``mech``: as
    :func:`dp_group_seconds`."""
    mech = mech or dp_mechanism(c, f)
    (d, d_calls), (e, e_calls) = dp_group_seconds(c, f, mech)
    m, fw = f.m, str(f.framework)
    dense = d.step_s + m * d.microbatch_s + d.again_s
    experts = e.step_s + m * e.microbatch_s + e.again_s
    total = dense + experts
    some = total > 0
    tail = where(some, (dense / d_calls + experts / e_calls) / where(some, total, 1.0), 1 / d_calls)
    after_flush = grad_reduce_overlaps(fw, f.pp, c.options.grad_reduce_overlap, f.zero_stage)
    beside = reduces_beside_compute(
        fw, int(f.zero_stage), c.training.deepspeed_overlap_comm
    )  # fmt: skip
    share = dp_sm_share(c, f, mech, dense, experts)
    waits = (d.step_reduce_s + e.step_reduce_s) * reduce_waiting_share(fw, f.pp, f.virtual_stages)
    again = (d.again_s + e.again_s) / m  # spread over the micro-batches, in their backwards
    gathers = sum(s.step_s - s.step_reduce_s - s.step_forward_s for s in (d, e))
    chunked = where(chunked_param_gathers(fw, f.pp, f.virtual_stages), gathers, 0.0)
    exposed = dp_exposed_seconds(
        d.step_s + e.step_s, d.microbatch_s + e.microbatch_s + again, m, window, after_flush,
        tail, beside, share, waits, forward_s=d.forward_s + e.forward_s,
        reduce_s=d.microbatch_reduce_s + e.microbatch_reduce_s,
        step_forward_s=d.step_forward_s + e.step_forward_s,
        upfront=upfront_gather(mech, f.schedule, f.pp, f.virtual_stages, m),
        chunk_gather_s=chunked, chunks=f.virtual_stages, chunk_group=minimum(f.pp, m),
    )  # fmt: skip
    expert_exposed = where(some, exposed * experts / where(some, total, 1.0), 0.0)
    return (dense, exposed - expert_exposed), (experts, expert_exposed)


def dp_seconds_term(c: Context, f: Fields, window: Any) -> tuple[Any, Any]:
    """(seconds of the data-parallel collectives in a step if nothing overlapped them, what
    their mechanism leaves exposed), the dense and the expert groups together
    (:func:`dp_group_times`), for the stage with the most parameters."""
    (dense, dense_exposed), (experts, expert_exposed) = dp_group_times(c, f, window)
    return dense + experts, dense_exposed + expert_exposed


def grad_accumulation_term(c: Context, f: Fields) -> Any:
    """Seconds the layout's mechanism spends accumulating gradients inside the backward passes
    of a step, on the compute stream (:attr:`model.mechanism_record.Mechanism.accumulate_bytes`:
    DeepSpeed's, :mod:`model.deepspeed_accumulate`; FSDP2's copies around its all-gathers and
    reduce-scatters, :mod:`model.fsdp2_copies`; 0 elsewhere): the parameters of the stage
    with the most (dense and routed experts on one GPU) over the ``m + pp − 1`` backward passes
    on DeepSpeed's 1F1B critical path (:func:`model.deepspeed_accumulate.accumulate_seconds`).
    Exact where that stage paces the pipeline or every stage holds as many parameters; else at
    most ``m + pp − 1`` times the difference of two stages' accumulation too much. Reads the
    shape and the ZeRO stage (through the mechanism), as the rest of ``t2``. Under ``fsdp2`` the
    dense parameters count only where their group shards them (``dp·cp > 1``): torchtitan
    applies ``fully_shard`` to the blocks only then (``parallel_dims.fsdp_enabled``, b5bcd76c6
    ``torchtitan/distributed/parallel_dims.py``), and a model it leaves unwrapped makes no
    copies; the routed experts always count, as torchtitan wraps them on their own ``efsdp``
    mesh whenever ep > 1, one rank included, where FSDP2's ``world_size == 1`` path still copies
    each unit's weights out and its gradients in. Under PyTorch's multi-stage runtime the chunks
    it gathers again (:func:`model.fsdp2_pipeline.runtime_regathers`) copy out as every gather
    does (:func:`model.fsdp2_copies.regather_copy_bytes`), charged to the step's first
    micro-batch with the mechanism's once-a-step gather; the runtime's own gathers (its
    ``UNSHARD``, :func:`model.fsdp2_pipeline.runtime_unshards`) run their copy-in there too
    (:func:`_runtime_copy_in_seconds`). Under torchao's FP8 all-gather
    (:func:`model.fp8_gathers.fp8_param_gathers`) every gather of a converted weight copies out
    1 B an element, not ``w`` (:func:`model.fsdp2_copies.fp8_copy_saving` of the FP8-gathered
    elements, :func:`model.terms.traffic.fp8_gathered_params`, taken off)."""
    mech = dp_mechanism(c, f)
    if not (mech.accumulate_bytes or mech.accumulate_first_bytes):
        return 0.0
    dense, experts = busiest_params(c, f)
    if mech.framework is Framework.FSDP2:
        dense = where(f.shard_degree > 1, dense, 0)
    hbm = c.gpu.hbm_bytes_per_s
    assert hbm is not None  # the roofline model runs only with it
    again = runtime_regathers(mech, f.schedule, f.pp, f.virtual_stages, f.m)
    first = mech.accumulate_first_bytes + as_float(regather_copy_bytes(mech.weight_bytes, again))
    backwards = f.m + f.pp - 1
    seconds = accumulate_seconds(
        first, mech.accumulate_bytes, as_float(dense + experts), backwards, hbm, params_of(c),
    )  # fmt: skip
    t = c.training
    fp8_on = fp8_param_gathers(f.framework, t.precision, t.fp8_recipe, t.fp8_param_gather)
    seconds = seconds + _runtime_copy_in_seconds(c, f, mech, dense, experts, fp8_on)
    if mech.framework is not Framework.FSDP2 or not fp8_on:
        return seconds
    fp8_dense, fp8_experts = fp8_gathered_params(c, f)
    # torchao's FP8 all-gather: each gather of a converted weight copies out 1 B, not w
    fp8 = where(f.shard_degree > 1, fp8_dense, 0) + fp8_experts
    w, per_mb = mech.weight_bytes, mech.gathers_per_microbatch
    first_saved = as_float(
        fp8_copy_saving(w, FP8_PARAM_BYTES, per_mb + mech.gathers_per_step + again)
    )
    later_saved = fp8_copy_saving(w, FP8_PARAM_BYTES, per_mb)
    saved = accumulate_seconds(
        first_saved, later_saved, as_float(fp8), backwards, hbm, params_of(c)
    )
    return seconds - saved


def _runtime_copy_in_seconds(
    c: Context, f: Fields, mech: Any, dense: Any, experts: Any, fp8_on: bool
) -> Any:
    """Seconds on the compute stream of the all-gather copy-ins that PyTorch's multi-stage
    pipeline runtime's ``UNSHARD`` runs there (:func:`model.fsdp2_pipeline.runtime_unshards` a
    step, charged to the step's first micro-batch; :func:`model.fsdp2_copies.copy_in_bytes` a
    shard element: 10 B with BF16 parameters, 7 B a torchao FP8 weight's), over the shards of
    the stage's ``dense`` and ``experts`` elements on one GPU (÷ the dp·cp and the expert
    shard degrees; a group of one rank gathers nothing, ``FSDPParamGroup.unshard`` returning at
    ``world_size == 1``); ``fp8_on``: the FP8-gathered elements (:func:`model.terms.traffic.
    fp8_gathered_params`) at :func:`copy_in_bytes` of 1. 0 under any other mechanism or
    schedule. Element-wise."""
    unshards = runtime_unshards(mech, f.schedule, f.pp, f.virtual_stages, f.m)
    if not is_array(unshards) and not unshards:
        return 0.0
    d, d_e = f.shard_degree, f.expert_shard_degree
    w = mech.weight_bytes
    shard = where(d > 1, as_float(dense) / d, 0.0) + where(d_e > 1, as_float(experts) / d_e, 0.0)
    moved = as_float(copy_in_bytes(w) * unshards) * shard
    if fp8_on:
        fp8_dense, fp8_experts = fp8_gathered_params(c, f)
        fp8 = where(d > 1, as_float(fp8_dense) / d, 0.0) + where(
            d_e > 1, as_float(fp8_experts) / d_e, 0.0
        )
        narrower = copy_in_bytes(w) - copy_in_bytes(FP8_PARAM_BYTES)
        moved = moved - as_float(narrower * unshards) * fp8
    hbm = c.gpu.hbm_bytes_per_s
    assert hbm is not None  # the roofline model runs only with it
    return accumulate_seconds(moved, 0.0, 1.0, f.m + f.pp - 1, hbm, params_of(c))
