"""The roofline time model's terms: per-stage micro-batch time from each layer's operations and
collectives (:mod:`model.layer_time`), the pipeline's point-to-point messages, data-parallel
traffic overlapped by its mechanism, and the optimizer step.

``step_s = m·t_mb·(1 + bubble_ratio) + pp + exposed dp + optimizer step`` where ``t_mb`` is the
slowest stage's micro-batch (operations + exposed tp, cp, ep collectives):

* :func:`stage_parts_term` — a stage's :data:`model.layer_time.PARTS` for one micro-batch:
  :func:`model.step_time.kind_parts` of one layer of each span group (FFN kind and attention
  span, :func:`model.core_spans.span_groups`), the embedding and the output layer (one call per
  distinct micro-batch, degrees, links and recompute mode) times the stage's own layers in each
  group (:func:`model.terms.span_counts.stage_group_counts`,
  :func:`model.step_time.stage_parts`); per-stage recomputation counts time
  their layers fully recomputed (:func:`model.step_time.recompute_stage_parts`);
* :func:`slowest_microbatch` — the slowest stage's micro-batch and its parts, and the dp overlap
  window (the slowest without recomputation, read from the shape alone);
* :func:`pp_seconds_term` — the pipeline messages with their latency
  (:func:`model.step_time.pp_seconds`; the data-parallel collectives' are
  :func:`model.terms.dp_time.dp_seconds_term`'s, over the dense and the expert groups), and the
  optimizer step over the parameters the busiest stage's GPU updates
  (:func:`model.step_time.optimizer_seconds`).

Written once over a layout's fields (:mod:`model.terms.fields`): exact for one layout,
element-wise over the search's columns.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainplan.model.comm import (
    p2p_critical_sends,
    p2p_overlapped,
    p2p_waiting_sends,
    pipe_partitioned,
    pp_message_bytes,
)
from trainplan.model.context_parallel import torch_rotate_method
from trainplan.model.core_spans import span_groups
from trainplan.model.elementwise import elementwise_mode
from trainplan.model.ep_kernels import kernel_rates
from trainplan.model.expert_saved_inputs import requantised_inputs
from trainplan.model.fp8_gathers import fp8_param_gathers, tp_gather_bytes
from trainplan.model.frameworks import Framework
from trainplan.model.grouped_gemm import GroupedFp8, experts_fp8, grouped_fp8_rates
from trainplan.model.launch_order import launch_order_kept
from trainplan.model.layer_time import PARTS
from trainplan.model.layout import Recompute
from trainplan.model.memory import keeps_gathered_inputs
from trainplan.model.moe_kernels import expert_passes_of, experts_stay_bf16
from trainplan.model.moe_run import EpOverlap, unpaired_share
from trainplan.model.op_rates import fp8_linear_speedups, params_in_force, te_caches_fp8_weights
from trainplan.model.op_time import (
    Clock,
    TpOverlap,
    check_tp_overlap,
    expert_loop_of,
    tp_overlap_for,
    tp_overlap_run,
)
from trainplan.model.precision import Precision, fp8_recipe_of
from trainplan.model.recompute_ops import layout_plan
from trainplan.model.roofline import LinkTime, RooflineParams
from trainplan.model.saved_originals import requantised_linears
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.step_time import (
    kind_parts,
    link_time_of,
    pipe_engine_seconds,
    pp_exposed_seconds,
    pp_seconds,
    recompute_stage_parts,
    stage_parts,
)
from trainplan.model.terms.activation_fields import (
    LAYER_FIELDS,
    cp_kv_repeat_of,
    cp_mechanism_of,
    output_stage,
)
from trainplan.model.terms.cp_links import cp_clock_links
from trainplan.model.terms.dispatch_buffers import ep_members_per_domain
from trainplan.model.terms.ep_link import ep_dispatch_link, ep_dispatch_members
from trainplan.model.terms.fields import (
    Context,
    Fields,
    axis_domains,
    axis_members,
    link_caps,
    link_members,
    stage_argmax,
    stage_max,
    stage_take,
    stage_tuple,
)
from trainplan.model.terms.sm_shares import ep_sm_share, tp_sm_share_of
from trainplan.model.terms.span_counts import recomputed_group_counts, stage_group_counts
from trainplan.model.terms.split_free import split_free
from trainplan.model.terms.traffic import (
    pair_reduce_bytes,
    pp_split_over_tp,
)
from trainplan.model.torchao_time import torchao_fp8_rates
from trainplan.model.torchtitan_experts import grouped_mm_of
from trainplan.model.userbuffers_gemm import userbuffers_for
from trainplan.model.value_head import logits_columns_of
from trainplan.model.xp import as_float, where

__all__ = [
    "params_of",
    "axis_link",
    "other_link",
    "ep_dispatch_fields",
    "ep_sm_share",
    "stage_parts_term",
    "slowest_microbatch",
    "pp_seconds_term",
]

CACHE = 4096


def params_of(c: Context, framework: str | None = None) -> RooflineParams:
    """The roofline figures in force (:func:`model.op_rates.params_in_force`; with
    ``framework``, the attention kernel it runs where none was given)."""
    o = c.options
    return params_in_force(o.roofline, c.gpu.part, o.attention_kernel, framework, o.nccl_nvls)


def axis_link(c: Context, f: Fields, axis: str, all_to_all: Any = False) -> tuple[Any, Any]:
    """(bandwidth per GPU, scale-up tier) of ``axis``'s collectives
    (:func:`model.step_time.link_time_of` of the link the topology placed); (0, False) at
    degree 1 or on an unknown link."""
    link, d = f.link(axis), c.gpu
    known = link.bandwidth is not None
    bandwidth = link.bandwidth if known else 0.0
    return link_time_of(
        as_float(bandwidth), link.nvlink, link.span, link.group_size if known else 1,
        d.nvlink_bytes_per_s, d.placement_domain, all_to_all, None, link.per_domain,
    )  # fmt: skip


def other_link(c: Context, f: Fields, axis: str) -> tuple[Any, Any, Any, Any]:
    """``(bandwidth, scale-up tier, members per domain, domains)`` of ``axis``'s groups on
    another number of NVLink domains than its slowest group
    (:func:`model.rank_groups.other_placement`, the link's ``other_per_domain`` and
    ``other_domains``), each group on its own link: inside one domain the part's NVLink, else
    the tier's bandwidth over its own members' NICs (:func:`model.step_time.link_time_of`).
    Where every group lies alike, the slowest group's own (:func:`axis_link`,
    :func:`model.terms.fields.axis_members`, :func:`model.terms.fields.axis_domains`), so
    :func:`model.roofline.collective_time`'s ``other`` changes nothing. Ints or ``[n, 1]``
    columns."""
    link, d = f.link(axis), c.gpu
    bandwidth, scaleup = axis_link(c, f, axis)
    members, domains = axis_members(c, f, axis), axis_domains(c, f, axis)
    placed = link.other_domains > 0
    inside = placed & (link.other_per_domain == link.group_size)
    nic = as_float(link.bandwidth if link.bandwidth is not None else 0.0)
    tier = where(inside, as_float(d.nvlink_bytes_per_s or 0.0), nic)
    others = where(placed, link.other_per_domain, 1)
    size = where(bandwidth > 0, link.group_size, 1)
    own, own_up = link_time_of(
        tier, inside, link.span, size, d.nvlink_bytes_per_s, d.placement_domain, False, None,
        others,
    )  # fmt: skip
    return (
        where(placed, own, bandwidth), where(placed, own_up, scaleup),
        where(placed, others, members), where(placed, link.other_domains, domains),
    )  # fmt: skip


def ep_dispatch_fields(c: Context, f: Fields) -> tuple[Any, Any, Any]:
    """What the expert all-to-all's clock reads of the layout besides its link: the EP group's
    members per NVLink domain (:func:`model.terms.dispatch_buffers.ep_members_per_domain`, for
    DeepEP's and HybridEP's de-duplication across domains), the share of micro-batches whose
    all-to-alls have no partner under Megatron-Core's combined 1F1B
    (:func:`model.moe_run.unpaired_share`; 1 under any other overlap) and the dispatcher's ``φ``
    (:func:`ep_sm_share`). 0 / 1 / the context's ``φ`` when the run does not read them, so they
    add no distinct clocks to the search's tables."""
    run = c.training.moe_run
    if c.arch.moe is None:
        return 0, 1.0, 0.0
    g = ep_members_per_domain(c, f)
    unpaired: Any = 1.0
    if run.ep_overlap is EpOverlap.COMBINED_1F1B:
        unpaired = f.lookup(
            unpaired_share, (run.ep_overlap, c.arch), "pp", "virtual_stages", "m",
            *LAYER_FIELDS[2:],
        )  # fmt: skip
    return g, unpaired, ep_sm_share(c, f)


def _link(
    bandwidth: Any, scaleup: Any, per_domain: Any, domains: Any = 0, other: Any = None,
    caps: tuple[Any, Any] = (0.0, 0.0),
) -> LinkTime | None:  # fmt: skip
    """The :class:`model.roofline.LinkTime` of a kind row's key values; ``other``: the other
    groups' ``(bandwidth, scaleup, per_domain, domains)`` (:func:`other_link`), kept where it
    differs from the first; ``caps``: the link's NIC and NVLink
    (:func:`model.terms.fields.link_caps`)."""
    if not bandwidth:
        return None
    own = (float(bandwidth), bool(scaleup), int(per_domain), int(domains))
    if other is not None:
        other = (float(other[0]), bool(other[1]), int(other[2]), int(other[3]))
    other = None if other in (None, own) or not other[0] else other
    return LinkTime(*own, other, float(caps[0]), float(caps[1]))


@lru_cache(maxsize=CACHE)
def _kind_row(
    arch: Architecture,
    training: TrainingSpec,
    causal: bool,
    base: tuple[Any, ...],
    mode: Recompute,
    plan: tuple[tuple[str, ...], bool],
    *key: Any,
) -> tuple[float, ...]:
    """:func:`model.step_time.kind_parts` (each span group's layer, the embedding, the output
    layer: 7 parts each, flat) on the clock of the key's links and CP flavour; ``plan``: what
    selective recomputation re-runs and whether ``layernorm`` takes every norm
    (:func:`_recompute_plan`)."""
    b, tp, cp, ep, etp, sp, r, u, gather, rep, vocab = key[:11]
    tp_bw, tp_up, tp_g, tp_n, cp_bw, cp_up, cp_g, cp_n = key[11:19]
    a2a_bw, a2a_up, a2a_g, ep_bw, ep_up, ep_lg, ep_n = key[19:26]
    ep_g, unpaired, sm_share, templated, regather, nccl, ordered = key[26:33]
    tp_other, tp_caps, cp_caps = key[33:37], key[37:39], key[39:41]
    (
        peak,
        hbm,
        p,
        overlap,
        speedup,
        elementwise,
        grouped,
        passes,
        ao,
        bf16_ex,
        loop,
        grouped_mm,
        ub_config,
        gather_bytes,
        ep_rates,
        unordered,
    ) = base
    if not ordered:  # model.launch_order: no async tp overlap credited, the ring's sends wait
        overlap = unordered
    overlap = tp_overlap_run(overlap, int(tp), bool(sp))  # async-tp fuses nothing without sp
    ub = None
    if overlap is TpOverlap.FULL and int(tp) > 1 and bool(sp):  # check_tp_overlap: sp off refused
        ub = userbuffers_for(ub_config, int(tp))
    clock = Clock(
        peak, hbm, p, _link(tp_bw, tp_up, tp_g, tp_n, tp_other, tp_caps),
        _link(cp_bw, cp_up, cp_g, cp_n, None, cp_caps),
        _link(ep_bw, ep_up, ep_lg, ep_n), overlap,
        int(r), int(u), bool(gather), speedup, int(rep), int(ep_g), float(unpaired),
        bool(regather), str(templated), float(sm_share), grouped, ao, bool(bf16_ex), loop,
        float(nccl), grouped_mm=bool(grouped_mm), tp_gather_bytes=gather_bytes,
        userbuffers=ub,
        ep_kernel=ep_rates.at(int(ep)) if ep_rates is not None and bool(ep_up) else None,
        cp_ring_hidden=bool(ordered),
        cp_a2a_link=_link(a2a_bw, a2a_up, a2a_g),
    )  # fmt: skip
    parts = kind_parts(
        arch, training, int(b), int(tp), int(cp), int(ep), int(etp), bool(sp), causal, mode,
        int(vocab), clock, *plan, elementwise, passes,
    )  # fmt: skip
    groups, embedding, output = parts
    return tuple(x for kind in (*groups, embedding, output) for x in kind)


def _recompute_plan(c: Context, f: Fields, mode: Recompute) -> tuple[tuple[str, ...], bool]:
    """(:func:`model.recompute_ops.recompute_plan` of the layout's framework, ``every_norm``):
    read from the framework and recompute mode (control fields of the step term, one value at a
    time in the tables) and the recipe's ``recompute_modules`` and precision (the context)."""
    return layout_plan(Framework(f.framework), mode, c.training)


def _experts_fp8(c: Context, f: Fields, mode: Recompute, recipe: Any) -> GroupedFp8 | None:
    """:attr:`model.op_time.Clock.grouped_fp8` of the layout: the part's rates under the recipe
    (:func:`model.grouped_gemm.grouped_fp8_rates`) with the model's FC1 bias and the linears
    that quantise their saved input again under the layout's recompute plan
    (:func:`model.grouped_gemm.experts_fp8`, :func:`model.expert_saved_inputs.
    requantised_inputs`, :func:`model.saved_originals.requantised_linears`)."""
    t, d, plan = c.training, c.gpu, _recompute_plan(c, f, mode)[0]
    rates = grouped_fp8_rates(t.precision, recipe, d, f.framework)
    requantised = requantised_inputs(t, f.framework, plan)
    dense = requantised_linears(c.arch, t, f.framework, plan)
    return experts_fp8(rates, recipe, d, c.arch.linear_bias, requantised, dense)


def _gather_bytes(framework: Any, t: TrainingSpec) -> int | None:
    """:attr:`model.op_time.Clock.tp_gather_bytes` of the framework and recipe
    (:func:`model.fp8_gathers.tp_gather_bytes`), None where it is the activations' β."""
    gathered = tp_gather_bytes(framework, t.precision, t.fp8_recipe, t.activation_bytes)
    return None if gathered == t.activation_bytes else gathered


def _kinds(c: Context, f: Fields, mode: Recompute, kept: Any = None) -> tuple[Any, Any, Any]:
    """:func:`_kinds_of`, remembered for one layout's scalar fields by everything but its
    per-stage splits (:func:`model.terms.split_free.split_free`): a layer's figures do not read
    how many layers a stage holds or recomputes (the stage's counts multiply them afterwards,
    :func:`stage_parts_term`); ``tests/model/test_split_free.py`` holds this on dense,
    interleaved, MoE (ep), context-parallel, local/global-span and zb-h1 layouts."""
    return split_free(_kinds_of, c, f, mode, kept)


def _kinds_of(c: Context, f: Fields, mode: Recompute, kept: Any = None) -> tuple[Any, Any, Any]:
    """(the :data:`model.layer_time.PARTS` of one layer of each span group, of the embedding,
    of the output layer) for one micro-batch on one GPU of the layout (:func:`_kind_row`;
    the groups: :func:`model.core_spans.span_groups`); ``kept`` True: the launch order as kept
    (:func:`model.launch_order.launch_order_kept`), whatever the layout's."""
    arch, t, d, o = c.arch, c.training, c.gpu, c.options
    assert d.hbm_bytes_per_s is not None
    gathered = keeps_gathered_inputs(Framework(f.framework), t)
    overlap = tp_overlap_for(f.framework, o.tp_comm_overlap, gathered)
    cached = te_caches_fp8_weights(f.framework)
    recipe = fp8_recipe_of(f.framework, t.fp8_recipe) if t.precision is Precision.FP8 else None
    check_tp_overlap(overlap, f.framework, None if recipe is None else str(recipe))
    speedup = fp8_linear_speedups(t.precision, recipe, d, cached)
    p = params_of(c, f.framework)
    fp8_gather = fp8_param_gathers(f.framework, t.precision, t.fp8_recipe, t.fp8_param_gather)
    clock = Clock(d.peak_flops_per_s, d.hbm_bytes_per_s, p)
    ao = torchao_fp8_rates(t.precision, recipe, d.part, f.framework, clock, fp8_gather)
    if ao is not None:  # torchao's Float8Linear: its own GEMM speed-up and casts by shape
        speedup = (ao.kernel_speedup,) * 3
    base = (d.peak_flops_per_s, d.hbm_bytes_per_s, p, overlap,
            speedup,
            elementwise_mode(f.framework, t.compile),
            _experts_fp8(c, f, mode, recipe),
            expert_passes_of(f.framework, t.precision), ao,
            experts_stay_bf16(f.framework, t.precision), expert_loop_of(f.framework),
            grouped_mm_of(f.framework), o.tp_comm_overlap_cfg, _gather_bytes(f.framework, t),
            kernel_rates(str(t.moe_run.dispatcher), d.part, d.nvlink_bytes_per_s, d.nvlink_domain),
            tp_overlap_for(f.framework, o.tp_comm_overlap, gathered, False))  # fmt: skip
    r, u, gather = f.lookup(cp_mechanism_of, (), "cp_kind", "cp", "cp_a2a")
    rep = f.lookup(cp_kv_repeat_of, (arch,), "cp_kind", "cp", "tp", "framework")
    tp_bw, tp_up = axis_link(c, f, "tp")
    cp_bw, cp_up = axis_link(c, f, "cp", (r == 1) & (u > 1))
    cp_bw, cp_up, cp_g, cp_n, a2a_bw, a2a_up, a2a_g = cp_clock_links(c, f, r, u, cp_bw, cp_up)
    ep_bw, ep_up = ep_dispatch_link(c, f)  # DeepEP beyond 8 ranks: its RDMA hop on the NIC
    tp_g = link_members(tp_bw, tp_up, axis_members(c, f, "tp"))
    tp_n = link_members(tp_bw, tp_up, axis_domains(c, f, "tp"))
    o_bw, o_up, o_g, o_n = other_link(c, f, "tp")  # tp's all-reduce: each group on its own
    tp_other = (o_bw, o_up, link_members(o_bw, o_up, o_g), link_members(o_bw, o_up, o_n))
    ep_lg = link_members(ep_bw, ep_up, ep_dispatch_members(c, f))
    ep_n = link_members(ep_bw, ep_up, axis_domains(c, f, "ep"))
    vocab = f.lookup(logits_columns_of, (arch, c.vocab_multiple), "framework", "tp")
    ep_g, unpaired, ep_share = ep_dispatch_fields(c, f)
    templated = f.lookup(torch_rotate_method, (), "cp_kind")
    regather = not keeps_gathered_inputs(Framework(f.framework), t)
    ep = t.moe_run.ep_overlap
    ordered = kept or f.lookup(launch_order_kept, (d.part, ep), "framework", "zero_stage")
    row = f.lookup_values(
        _kind_row, (arch, t, o.causal_attention_flops, base, mode, _recompute_plan(c, f, mode)),
        f.micro_batch_size, f.tp,
        f.cp, f.ep, f.expert_tp, f.sp, r, u, gather, rep, vocab, tp_bw, tp_up, tp_g, tp_n, cp_bw,
        cp_up, cp_g, cp_n, a2a_bw, a2a_up, a2a_g, ep_bw, ep_up, ep_lg, ep_n, ep_g, unpaired, ep_share,
        templated, regather,
        tp_sm_share_of(c, f),
        ordered,
        *tp_other,
        *link_caps(c, f, "tp", tp_bw, tp_up), *link_caps(c, f, "cp", cp_bw, cp_up),
    )  # fmt: skip
    n, g = len(PARTS), len(span_groups(arch))
    kinds = tuple(tuple(row[k * n : (k + 1) * n]) for k in range(g + 2))
    return kinds[:g], kinds[g], kinds[g + 1]


def kind_seconds(
    c: Context, f: Fields, recompute: Recompute | None = None
) -> tuple[tuple[Any, ...], Any, Any]:
    """Seconds of one micro-batch on one GPU of (one layer of each span group, the embedding,
    the output layer) (operations and exposed tp, cp, ep, totalled as :func:`stage_parts_term`
    totals a stage; ``recompute`` overrides the layout's mode; the groups:
    :func:`model.core_spans.span_groups`): what the interleaved order's model chunks are timed
    by (:mod:`model.terms.pipeline_span`)."""
    i = {name: j for j, name in enumerate(PARTS)}

    def total(k: Any) -> Any:
        return k[i["compute"]] + k[i["tp_exposed"]] + k[i["cp_exposed"]] + k[i["ep_exposed"]]

    groups, embedding, output = _kinds(c, f, f.recompute if recompute is None else recompute)
    return tuple(map(total, groups)), total(embedding), total(output)


def stage_parts_term(
    c: Context, f: Fields, recompute: Recompute | None = None, kept: bool | None = None
) -> tuple[Any, ...]:
    """The :data:`model.layer_time.PARTS` of one micro-batch on pipeline stage ``f.stage``
    (seconds on one GPU), preceded by their total (operations and exposed tp, cp, ep): its
    layers' operations and exposed collectives — one layer of each span group times the stage's
    own layers in it (:func:`model.terms.span_counts.stage_group_counts`: each layer's attention
    core at its own span, so Gemma 3's stages of three global layers take longer than those of
    two) — the embedding on the first stage and the output layer on the last; a
    multi-token-prediction block counts as a layer of its kind and span on the last stage (its
    2h → h projection and second pass through the output head are not timed). With
    ``Layout.recompute_layers`` the first k layers of each of the stage's model chunks are timed
    as fully recomputed and the rest under the layout's mode. ``recompute`` overrides the mode
    and ignores the per-stage counts (the dp window: no recomputation anywhere)."""
    arch = c.arch
    mode = f.recompute if recompute is None else recompute
    base = _kinds(c, f, mode, kept)
    counts = None if recompute is not None else f.recompute_layers
    full = base if counts is None else _kinds(c, f, Recompute.FULL, kept)
    held = f.per_stage(stage_group_counts, (arch,), *LAYER_FIELDS)
    first, last = f.stage == 0, output_stage(f)
    if counts is None:
        parts = stage_parts(*base, held, first, last)
    else:
        again = f.per_stage(recomputed_group_counts, (arch,), *LAYER_FIELDS, "recompute_layers")
        parts = recompute_stage_parts(base, full, held, again, first, last)
    i = {name: j for j, name in enumerate(PARTS)}
    total = parts[i["compute"]] + parts[i["tp_exposed"]] + parts[i["cp_exposed"]]
    return (total + parts[i["ep_exposed"]], *parts)


def slowest_microbatch(
    c: Context, f: Fields, recompute: Recompute | None = None, kept: bool | None = None
) -> tuple[Any, list[Any]]:
    """(t_mb, its :data:`model.layer_time.PARTS`): the micro-batch of the stage that takes
    longest (the first such), operations and exposed tp, cp, ep collectives (``kept``:
    :func:`_kinds`')."""
    per_stage = stage_tuple(f.stages(lambda g: stage_parts_term(c, g, recompute, kept)))
    k = stage_argmax(per_stage[0])
    return stage_take(per_stage[0], k), [stage_take(p, k) for p in per_stage[1:]]


def window_seconds(c: Context, f: Fields) -> Any:
    """The dp overlap window: the slowest stage's micro-batch without recomputation (read from
    the shape alone, so the dp terms do not read the recompute mode)."""
    totals = stage_tuple(f.stages(lambda g: stage_parts_term(c, g, Recompute.NONE)))[0]
    return stage_max(totals)


def pair_reduce_seconds(c: Context, f: Fields) -> Any:
    """Seconds of the pair all-reduce after the flush (:func:`model.terms.traffic.
    pair_reduce_bytes`: the tied embedding's, or DualPipe's mirror ranks' gradients) on the pp
    link (:func:`model.step_time.pp_seconds` with no sends), a backward-only wait inside
    :func:`pp_seconds_term`'s exposed seconds; 0 at pp = 1 or without a pp link figure."""
    bandwidth, scaleup = axis_link(c, f, "pp")
    on = (f.pp > 1) & (bandwidth > 0)
    seconds = pp_seconds(
        0.0, 0, as_float(pair_reduce_bytes(c, f)), where(on, bandwidth, 1.0), scaleup, params_of(c)
    )
    return where(on, seconds, 0.0)


def pp_seconds_term(c: Context, f: Fields, window: Any) -> tuple[Any, Any]:
    """Seconds a stage waits on pipeline messages in a step (:func:`model.step_time.pp_seconds`:
    ``2·m·v`` sends of one micro-batch's activation or gradient, and a pair of ranks' gradient
    all-reduce, :func:`model.terms.traffic.pair_reduced_params`; under DeepSpeed's pipeline
    engine its blocking, tp-partitioned transfers, :func:`model.step_time.pipe_engine_seconds`),
    and of them what waits
    (:func:`model.step_time.pp_exposed_seconds`: Megatron-Core's interleaved schedule overlaps
    its sends with the next chunk's pass; what its sends add to the step's critical path,
    :func:`model.comm.p2p_exposed_sends`, with a chunk's forward a third of ``window``, the
    slowest stage's micro-batch without recomputation, over v chunks); (0, 0) at pp = 1."""
    arch, t = c.arch, c.training
    message = pp_message_bytes(
        arch.hidden_size, f.tp, f.cp, f.micro_batch_size, t.seq_len, t.activation_bytes,
        pp_split_over_tp(c, f),
    )  # fmt: skip
    tied = pair_reduce_bytes(c, f)
    bandwidth, scaleup = axis_link(c, f, "pp")
    on = (f.pp > 1) & (bandwidth > 0)
    link = (where(on, bandwidth, 1.0), scaleup)
    if str(f.framework) == "deepspeed":  # its pipeline engine: blocking transfers
        tp_bandwidth, tp_scaleup = axis_link(c, f, "tp")
        # partitioned: the 1/tp share is sent and gathered over tp; an MoE model's, whole
        shares = where(pipe_partitioned("deepspeed", arch.moe is not None), f.tp, 1)
        seconds = pipe_engine_seconds(
            as_float(message), shares, f.m, f.pp, as_float(tied), *link,
            where(tp_bandwidth > 0, tp_bandwidth, 1.0), tp_scaleup, params_of(c),
            c.gpu.hbm_bytes_per_s,
            link_members(tp_bandwidth, tp_scaleup, axis_members(c, f, "tp")),
            link_members(tp_bandwidth, tp_scaleup, axis_domains(c, f, "tp")),
            link_caps(c, f, "tp", tp_bandwidth, tp_scaleup),
        )  # fmt: skip
        seconds = where(on, seconds, 0.0)
        return seconds, seconds
    messages = 2 * f.m * f.virtual_stages
    seconds = pp_seconds(as_float(message), messages, as_float(tied), *link, params_of(c))
    tied_s = pair_reduce_seconds(c, f)
    overlapped = p2p_overlapped(str(f.framework), str(f.schedule), f.virtual_stages)
    overlapped = overlapped & c.options.p2p_overlap
    o = c.options
    critical = p2p_critical_sends(f.m, f.virtual_stages, f.pp, o.p2p_forward_send_wait)
    longest = 2 * (f.pp - 1) + p2p_waiting_sends(
        f.m, f.virtual_stages, f.pp, o.p2p_warmup_flush, o.p2p_forward_send_wait
    )
    exposed = pp_exposed_seconds(
        seconds, tied_s, messages, window / (3 * f.virtual_stages), overlapped, critical, longest
    )
    return where(on, seconds, 0.0), where(on, exposed, 0.0)
