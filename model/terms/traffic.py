"""Traffic terms: the bytes each parallel axis sends per GPU per step, of the stage that sets it.

Each axis's bytes are :mod:`model.comm`'s ring formulas (``*_bytes``); which stage's figure a
layout's traffic is follows one rule per axis, written here once:

* dp: the stage with the most parameters (:func:`model.terms.stage_params.busiest_params`), as the
  layout's framework runs its ZeRO stage (:meth:`model.mechanisms.Mechanism.traffic_terms`); its
  routed experts' share travels on the expert data-parallel group (``edp``,
  :func:`dp_group_traffic_bytes`);
* tp: the stage that sends the most (its layers, the embedding on the first stage, the output
  layer on the last), with what of it the framework hides under a GEMM;
* cp: the stage that sends the most (its dense and MoE layers, each with its recompute rule);
  ep: the stage with the most MoE layers;
* pp: a middle stage's sends, split over tp with sequence parallelism, under the textbook
  profile, or with Megatron-LM's scatter/gather (:attr:`model.layout.Layout.pipeline_scatter_gather`);
  plus the tied embedding's all-reduce between the ends (physical profiles).

:func:`single_axis_seconds` times an axis's bytes under the single model. Each term is exact for
one layout and element-wise over the search's columns
(:mod:`model.terms.fields`).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from trainplan.model.comm import (
    AxisTraffic,
    dp_bytes,
    dp_name,
    pipe_partitioned,
    pp_bytes,
    ring_share,
)
from trainplan.model.comm_layers import (
    cp_bytes,
    ep_bytes,
    ep_collective,
    recomputed_sends,
    tp_bytes,
    tp_collective_name,
)
from trainplan.model.context_parallel import CpKind, cp_collective, torch_rotate_method
from trainplan.model.deepspeed_fetches import deepspeed_unfetched
from trainplan.model.deepspeed_mechanisms import sp_comm_bytes
from trainplan.model.fp8_gathers import (
    fp8_gather_saving,
    fp8_gathered_experts,
    fp8_param_gathers,
    tp_gather_bytes,
)
from trainplan.model.frameworks import Framework, gradient_bytes_for
from trainplan.model.fsdp2_pipeline import regather_name, runtime_mechanism, runtime_regathers
from trainplan.model.layout import Recompute
from trainplan.model.mechanisms import mechanism
from trainplan.model.memory import keeps_gathered_inputs
from trainplan.model.moe_dispatch import dispatch_traffic_share, transfer_side_bytes
from trainplan.model.params import shares_embedding_with_last_stage
from trainplan.model.pipeline import Schedule
from trainplan.model.precision import Precision
from trainplan.model.recompute_modules import profile_recompute_modules
from trainplan.model.terms.activation_fields import (
    LAYER_FIELDS,
    cp_kv_repeat_of,
    cp_mechanism_of,
    output_stage,
    padded_vocab_of,
    stage_layer_counts,
)
from trainplan.model.terms.dispatch_buffers import ep_members_per_domain
from trainplan.model.terms.ep_link import ep_rdma
from trainplan.model.terms.fields import (
    Context,
    Fields,
    LayoutFields,
    stage_argmax,
    stage_max,
    stage_take,
    stage_tuple,
)
from trainplan.model.terms.stage_params import any_dualpipe, busiest_linear, busiest_params
from trainplan.model.timing import axis_overlap, exposed_seconds
from trainplan.model.xp import as_float, where

__all__ = [
    "dp_mechanism",
    "fp8_gathered_params",
    "dp_traffic_bytes",
    "dp_group_traffic_bytes",
    "tp_traffic_bytes",
    "cp_traffic_bytes",
    "ep_traffic_bytes",
    "ep_dispatch_traffic_share",
    "pp_traffic_bytes",
    "tied_embedding_params",
    "pair_reduced_params",
    "pair_reduce_bytes",
    "most_layers",
    "deepspeed_walk",
    "axis_traffic",
    "single_axis_seconds",
]


def dp_mechanism(c: Context, f: Fields) -> Any:
    """The layout's ZeRO stage as its framework runs it, with the recipe's bytes, the
    options' DeepSpeed bucket all-reduce and BF16 gradient clearing, FSDP1's copies under
    ``flat_parameters`` and, with pp > 1, the framework's pipeline-schedule variant
    (:func:`model.mechanisms.mechanism`) as the recipe's pipeline runtime runs it
    (:func:`model.fsdp2_pipeline.runtime_mechanism`)."""
    t = c.training
    mech = mechanism(
        f.framework, f.zero_stage, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes,
        pipelined=f.pp > 1,
        distributed_optimizer=t.distributed_optimizer, overlap_comm=t.deepspeed_overlap_comm,
        cpu_offload=t.offload.optimizer > 0,
        multi_rank_allreduce=c.options.use_multi_rank_bucket_allreduce,
        sp_comm=sp_comm_bytes(t, f.cp), lp_grads_set_to_none=c.options.lp_grads_set_to_none,
        flat_parameters=t.flat_parameters,
    )  # fmt: skip
    return runtime_mechanism(mech, t.pipeline_frees_stage_tensors)


def fp8_gathered_params(c: Context, f: Fields) -> tuple[Any, Any]:
    """(dense, routed-expert) parameters on one GPU of the stage :func:`dp_traffic_bytes` reads
    that the data-parallel all-gathers move in FP8: its linear weights
    (:func:`model.terms.stage_params.busiest_linear`) where the recipe keeps FP8 primary weights
    (:func:`model.fp8_gathers.fp8_param_gathers`; the routed experts' only where they are FP8
    too, :func:`model.fp8_gathers.fp8_gathered_experts`), else none."""
    t = c.training
    if not fp8_param_gathers(f.framework, t.precision, t.fp8_recipe, t.fp8_param_gather):
        return 0, 0
    dense, experts = busiest_linear(c, f)
    return dense, experts if fp8_gathered_experts(f.framework) else 0 * experts


def _dp_bytes(c: Context, f: Fields, mech: Any, dense: Any, experts: Any) -> tuple[Any, Any]:
    """:func:`model.comm.dp_bytes` of ``dense`` and ``experts``, with the re-gathers of PyTorch's
    multi-stage pipeline runtime (:func:`model.fsdp2_pipeline.runtime_regathers`), less what FP8
    primary weights save (:func:`model.fp8_gathers.fp8_gather_saving` of the share of
    :func:`fp8_gathered_params` in each group the call counts, the runtime's re-gathers
    included: under ``fsdp2`` they gather FP8 as every other gather does)."""
    fp8_dense, fp8_experts = fp8_gathered_params(c, f)
    fp8 = (where(dense == 0, 0, fp8_dense), where(experts == 0, 0, fp8_experts))
    shard, expert_shard = f.shard_degree, f.expert_shard_degree
    again = runtime_regathers(mech, f.schedule, f.pp, f.virtual_stages, f.m)
    total, per_mb = dp_bytes(mech, dense, experts, shard, expert_shard, f.m, again)
    saved, saved_mb = fp8_gather_saving(mech, fp8, shard, expert_shard, f.m, again)
    skip_dense, skip_experts = unfetched_params(c, f, mech)
    skipped = ring_share(shard) * where(dense == 0, 0, skip_dense) + ring_share(
        expert_shard
    ) * where(experts == 0, 0, skip_experts)
    unfetched = mech.weight_bytes * skipped
    return total - saved - f.m * unfetched, per_mb - saved_mb - unfetched


def unfetched_params(c: Context, f: Fields, mech: Any) -> tuple[Any, Any]:
    """(dense, routed-expert) elements on one GPU a micro-batch does not all-gather of what
    :func:`model.comm.dp_bytes` counts (every weight in every pass): under DeepSpeed ZeRO-3 the
    output weight, embedding and forward-kept weights its coordinator does not gather again
    (:func:`model.deepspeed_fetches.deepspeed_unfetched`, the mean over the step's ``m``
    micro-batches, the stage with the most layers); 0 under every other mechanism and for a
    model given by its size alone (no layers to fetch)."""
    if c.model.arch is None or not (mech.framework is Framework.DEEPSPEED and mech.zero_stage == 3):
        return 0, 0
    layers, moe_layers = most_layers(c, f)
    fetched = f.tp, f.expert_tp, f.ep, layers, moe_layers, f.m, *deepspeed_walk(c, f)
    return f.lookup_values(deepspeed_unfetched, (c.arch,), *fetched)  # type: ignore[no-any-return]


def deepspeed_walk(c: Context, f: Fields) -> tuple[str, bool, int | None]:
    """The layout's recomputation as DeepSpeed ZeRO-3's coordinator walk reads it
    (:func:`model.deepspeed_fetches.recompute_walk`'s ``recompute``, ``core``, ``first``): the
    recompute mode (a scalar: a control field of the terms that read it), whether the profile
    recomputes the core attention under ``selective``
    (:func:`model.recompute_modules.profile_recompute_modules`: not with flash attention or cp
    > 1 in Megatron-DeepSpeed's own layer) and ``Layout.recompute_layers``' first count (pp 1,
    the only pp DeepSpeed runs ZeRO-3 at; None without counts)."""
    t = c.training
    modules = profile_recompute_modules(
        str(f.framework), t.recompute_modules, t.flash_attention, int(f.cp),
        t.precision is Precision.FP8,
    )  # fmt: skip
    counts = f.recompute_layers
    first = None if counts is None else int(counts[0])
    return str(Recompute(f.recompute)), "core_attn" in modules, first


def dp_traffic_bytes(c: Context, f: Fields) -> tuple[Any, Any]:
    """(bytes per step, of them once per micro-batch, for one micro-batch) one GPU sends for
    data parallelism over D = dp·cp ranks (experts over D_e): :func:`model.comm.dp_bytes` of the
    stage with the most parameters, its FP8 primary weights gathered at a byte
    (:func:`_dp_bytes`). Scope: the split, dp, cp, ep, zero_stage, framework."""
    dense, experts = busiest_params(c, f)
    return _dp_bytes(c, f, dp_mechanism(c, f), dense, experts)


def dp_group_traffic_bytes(
    c: Context, f: Fields, mech: Any = None
) -> tuple[tuple[Any, Any], tuple[Any, Any]]:
    """:func:`dp_traffic_bytes` by the group that carries it: ((bytes per step, per micro-batch)
    of the dense parameters over the dp·cp group, the same of the routed experts over the expert
    data-parallel group of ``expert_shard_degree`` ranks). The two sum to
    :func:`dp_traffic_bytes`: Megatron-Core keeps the experts' gradients in buffers of their own
    reduced over ``intra_expt_dp_group`` (Megatron-LM d98e8a64dd
    ``distributed/distributed_data_parallel.py`` ``DistributedDataParallel.__init__``:
    ``if buffer_key.is_expert_parallel: data_parallel_group = self.intra_expt_dp_group``);
    DeepSpeed reduces them over ``_get_expert_data_parallel_group`` (edaa72212
    ``runtime/engine.py``); torchtitan shards them over its ``efsdp`` mesh (b5bcd76c6
    ``parallel_dims.py``). ``mech``: another mechanism's bytes (None: the layout's)."""
    dense, experts = busiest_params(c, f)
    mech = mech or dp_mechanism(c, f)
    return _dp_bytes(c, f, mech, dense, 0 * experts), _dp_bytes(c, f, mech, 0 * dense, experts)


def _layers(c: Context, f: Fields) -> tuple[Any, Any]:
    """(layers, MoE layers) of the stage ``f.stage``."""
    return f.per_stage(stage_layer_counts, (c.arch,), *LAYER_FIELDS)


def most_layers(c: Context, f: Fields) -> tuple[Any, Any]:
    """(the most layers on a stage, the most MoE layers on a stage), maxima taken apart."""
    layers, moe = stage_tuple(f.stages(lambda g: _layers(c, g)))
    return stage_max(layers), stage_max(moe)


def tp_traffic_bytes(c: Context, f: Fields, recompute: Recompute | None = None) -> tuple[Any, Any]:
    """(bytes per step, of them hidden under a GEMM) tensor parallelism sends on the stage that
    sends the most (:func:`model.comm_layers.tp_bytes`: its layers, the embedding's and the output
    layer's collectives at the ends, expert tensor parallelism's token gathers), with what the
    recomputed forward sends again (:func:`model.comm_layers.recomputed_sends`, the rule the
    step time runs). ``recompute`` overrides the layout's mode."""
    arch, t = c.arch, c.training
    mode = f.recompute if recompute is None else recompute
    framework = Framework(f.framework)
    again = recomputed_sends(arch, framework, Recompute(mode), t)
    keeps = keeps_gathered_inputs(framework, t)
    gathered = tp_gather_bytes(framework, t.precision, t.fp8_recipe, t.activation_bytes)

    def stage(g: Fields) -> tuple[Any, Any]:
        layers, moe = _layers(c, g)
        return tp_bytes(
            arch, layers, moe, g.stage == 0, output_stage(g), g.tp, g.expert_tp, g.cp,
            g.micro_batch_size, g.m, t.seq_len, t.activation_bytes, g.sp, framework.physical,
            again, keeps, gathered,
        )  # fmt: skip

    total, hidden = stage_tuple(f.stages(stage))
    pick = stage_argmax(total)
    return stage_take(total, pick), stage_take(hidden, pick)


def cp_traffic_bytes(c: Context, f: Fields) -> Any:
    """Bytes per step the cp ranks exchange on the stage that sends the most, as the layout's
    CP flavour does (:func:`model.comm_layers.cp_bytes`), its dense and MoE layers each with the
    exchange again where the recompute plan re-runs their attention core
    (:attr:`model.comm_layers.Recomputed.core`: full and √n, Megatron-Core's ``core_attn``; not
    torchtitan's op-level policy, which saves the SDPA output)."""
    t = c.training
    r, u, _ = f.lookup(cp_mechanism_of, (), "cp_kind", "cp", "cp_a2a")
    rep = f.lookup(cp_kv_repeat_of, (c.arch,), "cp_kind", "cp", "tp", "framework")
    templated = f.lookup(_templated, (), "cp_kind")
    core = recomputed_sends(c.arch, Framework(f.framework), Recompute(f.recompute), t).core

    def stage(g: Fields) -> Any:
        layers, moe = _layers(c, g)
        return sum(
            cp_bytes(
                c.arch,
                n,
                g.cp,
                r,
                u,
                g.tp,
                g.micro_batch_size,
                g.m,
                t.seq_len,
                t.activation_bytes,
                again,
                rep,
                templated,
            )  # fmt: skip
            for n, again in ((layers - moe, core[0]), (moe, core[1]))
        )

    return stage_max(f.stages(stage))


def _templated(kind: CpKind) -> bool:
    """Whether the CP flavour is PyTorch's ``context_parallel`` (:func:`model.context_parallel.
    torch_rotate_method`), whose backward sends FP32 dK/dV after every SDPA call."""
    return bool(torch_rotate_method(CpKind(kind)))


def ep_traffic_bytes(c: Context, f: Fields) -> Any:
    """Bytes per step of the expert all-to-alls on the stage with the most MoE layers
    (:func:`model.comm_layers.ep_bytes`: the busiest rank's routed rows, padding included,
    :attr:`model.specs.TrainingSpec.moe_run`, as the dispatcher sends them,
    :func:`ep_dispatch_traffic_share`), again in a recomputed forward under full or √n
    recomputation and Megatron-Core's ``moe`` module (:attr:`model.comm_layers.Recomputed.
    all_to_all`)."""
    t = c.training
    _, moe = most_layers(c, f)
    again = recomputed_sends(c.arch, Framework(f.framework), Recompute(f.recompute), t)
    side: Any = (0, 0, 0, 0)
    spec = c.arch.moe
    if spec is not None and t.moe_run.dispatcher.deduplicates:  # their rows' probabilities
        g = ep_members_per_domain(c, f) if f.links_known else 0
        row = c.arch.hidden_size * t.activation_bytes
        args = (t.moe_run, row, spec.num_experts, spec.experts_per_token)
        side = f.lookup_values(transfer_side_bytes, args, f.ep, f.expert_tp, g)
    return ep_bytes(
        c.arch, moe, f.ep, f.tp, f.cp, f.micro_batch_size, f.m, t.seq_len, t.activation_bytes,
        f.sp, again.all_to_all, t.moe_run, ep_dispatch_traffic_share(c, f), side,
        Framework(f.framework) is Framework.DEEPSPEED,
    )  # fmt: skip


def ep_dispatch_traffic_share(c: Context, f: Fields) -> Any:
    """:func:`model.moe_dispatch.dispatch_traffic_share` of the layout: DeepEP's and HybridEP's
    bytes over the NCCL all-to-all's (once per destination rank; across NVLink domains once per
    remote domain and forwarded once per rank), for the ep group's members per domain
    (:func:`model.terms.dispatch_buffers.ep_members_per_domain`; one domain where the layout is
    read without links); 1 for the plain all-to-all."""
    run, moe = c.training.moe_run, c.arch.moe
    if moe is None or not run.dispatcher.deduplicates:
        return 1
    g = ep_members_per_domain(c, f) if f.links_known else 0
    args = (run, moe.num_experts, moe.experts_per_token)
    return f.lookup_values(dispatch_traffic_share, args, f.ep, g)


def tied_embedding_params(c: Context, f: Fields) -> Any:
    """Embedding parameters on one GPU whose gradients the first and the last stage all-reduce
    once per step (tied embeddings over pp > 1, physical profiles: Megatron-Core's
    ``_allreduce_word_embedding_grads``); 0 otherwise."""
    arch = c.arch
    if not (shares_embedding_with_last_stage(arch) and Framework(f.framework).physical):
        return 0
    vocab = f.lookup(padded_vocab_of, (arch.vocab_size, c.vocab_multiple), "framework", "tp")
    return where(f.pp > 1, vocab * arch.hidden_size / f.tp, 0)


def pair_reduced_params(c: Context, f: Fields) -> Any:
    """Parameters on one GPU whose gradients two pipeline ranks all-reduce once per step after
    the flush: under DualPipe every parameter of the rank with the most (its stage r and the
    mirror stage pp − 1 − r, :func:`model.terms.stage_params.busiest_params`), which rank
    pp − 1 − r holds too, so each stage's gradient is the sum of its two copies'; else the tied
    embedding's (:func:`tied_embedding_params`; under DualPipe the first and last stage share
    one rank and one embedding). deepseek-ai/DualPipe's ``DualPipe.step`` runs the backward
    passes and leaves the sum to the caller; ``examples/example_dualpipe.py`` makes it after
    the step (``p0.grad += p1all[pp_size - 1 - rank]``, the mirror rank's gradient of the same
    stage, gathered for its check over the whole pipeline group with
    ``all_gather_into_tensor``); charged as the sum the example makes, a 2-rank all-reduce
    between the mirrors, waited for (the DeepSeek-V3 report, §3.2.1, keeps "two copies of the
    model parameters" and says no more)."""
    tied = tied_embedding_params(c, f)
    if not any_dualpipe(f):
        return tied
    on = f.schedule == Schedule.DUALPIPE
    dense, experts = busiest_params(c, f)
    return where(on & (f.pp > 1), dense + experts, where(on, 0, tied))


def pair_reduce_bytes(c: Context, f: Fields) -> Any:
    """Bytes each rank sends in the step's pair all-reduce (:func:`pair_reduced_params` in the
    framework's gradient bytes; over 2 ranks an all-reduce sends 2·(1/2) of its buffer)."""
    return gradient_bytes_for(f.framework, c.training.gradient_bytes) * pair_reduced_params(c, f)


def pp_split_over_tp(c: Context, f: Fields) -> Any:
    """Whether a pipeline send carries 1/tp of the activation: with sequence parallelism (the
    tensor is already split), under the textbook profile, with Megatron-LM's scatter/gather
    (:attr:`model.layout.Layout.pipeline_scatter_gather`), or under DeepSpeed's pipeline engine,
    which splits the whole stage output once over tp whatever the layout — but not a
    mixture-of-experts model's, which Megatron-DeepSpeed sends whole
    (:func:`model.comm.pipe_partitioned`)."""
    fw = str(f.framework)
    split = (not Framework(fw).physical) | pipe_partitioned(fw, c.arch.moe is not None)
    return f.sp | split | f.pipeline_scatter_gather


def pp_traffic_bytes(c: Context, f: Fields) -> Any:
    """Bytes per step a stage sends to its pipeline neighbours (:func:`model.comm.pp_bytes`):
    per micro-batch and model chunk one activation forward and one gradient backward, and the
    pair of ranks' gradient all-reduce (:func:`pair_reduced_params`: the tied embedding's, or
    DualPipe's mirror stages') in the framework's gradient bytes; 0 at pp = 1."""
    arch, t = c.arch, c.training
    total = pp_bytes(
        arch.hidden_size, f.tp, f.cp, f.micro_batch_size, f.m, f.virtual_stages, t.seq_len,
        t.activation_bytes, pp_split_over_tp(c, f), pair_reduced_params(c, f),
        gradient_bytes_for(f.framework, t.gradient_bytes),
    )  # fmt: skip
    return where(f.pp > 1, total, 0)


def axis_traffic(c: Context, f: LayoutFields) -> list[AxisTraffic]:
    """One layout's traffic per axis (dp, then with routed experts edp, the experts' share of it
    on the expert data-parallel group, :func:`dp_group_traffic_bytes`; then tp, cp, ep and pp
    when the model has dimensions), named with its collectives (and, where the weights gather
    in FP8, :func:`model.fp8_gathers.fp8_param_gathers`, saying so): the terms above."""
    lay, mech = f.layout, dp_mechanism(c, f)
    again = runtime_regathers(mech, f.schedule, f.pp, f.virtual_stages, f.m)
    name = expert_name = dp_name(mech) + regather_name(again)
    t = c.training
    if mech.gathers_per_step + mech.gathers_per_microbatch and fp8_param_gathers(
        f.framework, t.precision, t.fp8_recipe, t.fp8_param_gather
    ):
        name += ", linear weights gathered in fp8"
        # the routed experts' row says fp8 only where they gather in it (fp8_gathered_experts)
        expert_name = name if fp8_gathered_experts(f.framework) else expert_name
    if c.model.arch is None or c.arch.moe is None:
        total, per_mb = dp_traffic_bytes(c, f)
        rows = [AxisTraffic("dp", name, lay.shard_degree, total, per_mb)]
    else:
        dense, experts = dp_group_traffic_bytes(c, f)
        rows = [AxisTraffic("dp", name, lay.shard_degree, *dense)]
        rows.append(
            AxisTraffic("edp", f"{expert_name} (routed experts)", lay.expert_shard_degree, *experts)
        )
    if c.model.arch is None:
        return rows
    physical = lay.framework.physical
    tp_total, hidden = tp_traffic_bytes(c, f)
    if lay.tp == 1 and (lay.expert_tp == 1 or c.arch.moe is None):
        rows.append(AxisTraffic("tp", "none", 1, tp_total))
    else:
        t = c.training
        fp8 = tp_gather_bytes(lay.framework, t.precision, t.fp8_recipe, t.activation_bytes)
        etp = physical and lay.expert_tp > 1 and c.arch.moe is not None
        name = tp_collective_name(bool(lay.sp), fp8 < t.activation_bytes, etp)
        rows.append(AxisTraffic("tp", name, lay.tp, tp_total, Fraction(0), hidden))
    cp = cp_collective(lay.cp_kind, lay.cp, lay.cp_a2a) if lay.cp > 1 else "none"
    rows.append(AxisTraffic("cp", cp, lay.cp, cp_traffic_bytes(c, f)))
    padded = Framework(lay.framework) is Framework.DEEPSPEED
    ep = ep_collective(c.training.moe_run, padded) if lay.ep > 1 and c.arch.moe else "none"
    rows.append(AxisTraffic("ep", ep, lay.ep if ep != "none" else 1, ep_traffic_bytes(c, f)))
    pp = "none"
    if lay.pp > 1:
        pp = "send/recv (point-to-point)"
        if lay.schedule == Schedule.DUALPIPE:
            pp += " + mirror-stage gradient all-reduce"
        elif tied_embedding_params(c, f):
            pp += " + tied-embedding all-reduce"
    rows.append(AxisTraffic("pp", pp, lay.pp, pp_traffic_bytes(c, f)))
    return rows


def single_axis_seconds(
    c: Context, f: Fields, axis: str, total: Any, hidden: Any, microbatch: Any, window: Any
) -> tuple[Any, Any]:
    """(seconds if nothing overlapped, exposed) of one axis's traffic under the single model:
    bytes over the link's bandwidth (the expert all-to-all's DeepEP RDMA hop inside an NVLink
    domain over the NIC's, :func:`model.terms.ep_link.ep_rdma`); exposed as the axis's overlap fraction and the per-micro-
    batch window say (:func:`model.timing.exposed_seconds`). 0 for no traffic."""
    link = f.link(axis)
    sends = total != 0
    bandwidth = where(sends, link.bandwidth if link.bandwidth is not None else 1.0, 1.0)
    if axis == "ep":  # DeepEP's RDMA hop inside an NVLink domain rides the NIC
        rdma, nic = ep_rdma(c, f)
        bandwidth = where(sends & rdma, nic, bandwidth)
    exposed = exposed_seconds(
        as_float(total - hidden) / bandwidth, as_float(microbatch) / bandwidth, f.m,
        axis_overlap(c.options.overlap, axis), window,
    )  # fmt: skip
    return where(sends, as_float(total) / bandwidth, 0.0), where(sends, exposed, 0.0)
