"""The roofline step: per-stage micro-batch time from each layer's operations and collectives
(:mod:`model.layer_time`), the pipeline's point-to-point messages, data-parallel traffic
overlapped by its mechanism, and the optimizer step.

``step_s = m·t_mb·(1 + bubble_ratio) + pp + exposed dp + optimizer step`` where ``t_mb`` is the
slowest stage's micro-batch (operations + exposed tp, cp, ep collectives). The formulas for pp,
dp and the optimizer step are written once for exact floats and for arrays of layouts
(:mod:`model.xp`); the search's tables call them with arrays. The data-parallel collectives'
time and exposure are :mod:`model.dp_exposure`'s (re-exported here).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from trainplan.model.comm import p2p_exposed_sends
from trainplan.model.core_spans import span_groups
from trainplan.model.deepspeed_pipe import pipe_engine_counts
from trainplan.model.dp_exposure import dp_exposed_seconds, dp_seconds, phase_gathers
from trainplan.model.elementwise import Elementwise
from trainplan.model.layer_time import PARTS, embedding_time, layer_time, output_time
from trainplan.model.layout import Recompute
from trainplan.model.moe_kernels import NO_EXPERT_PASSES, ExpertPasses
from trainplan.model.op_time import Clock
from trainplan.model.ops import OPTIMIZER_BYTES_PER_PARAM, LayerShape
from trainplan.model.rank_groups import members_per_domain_of
from trainplan.model.recompute_modules import DEFAULT_RECOMPUTE_MODULES
from trainplan.model.roofline import (
    Collective,
    LinkTime,
    RooflineParams,
    collective_time,
    memory_seconds,
)
from trainplan.model.specs import Architecture, TrainingSpec
from trainplan.model.xp import logical_not, maximum, minimum, where

__all__ = [
    "link_time",
    "link_time_of",
    "rings_bandwidth",
    "all_to_all_bandwidth",
    "kind_parts",
    "stage_parts",
    "recompute_stage_parts",
    "pp_seconds",
    "pipe_engine_seconds",
    "pp_exposed_seconds",
    "phase_gathers",
    "dp_seconds",
    "dp_exposed_seconds",
    "optimizer_seconds",
]


def link_time(
    link: Any, scaleup_bandwidth: float | None, domain: int | None = None, all_to_all: bool = False
) -> LinkTime | None:
    """The :class:`LinkTime` of an axis's link (a :class:`topology.placement.AxisLink` or any
    object with ``link`` and ``bandwidth_bytes_per_s``); None at degree 1 or when unknown:
    :func:`link_time_of` of its fields."""
    if link is None or link.bandwidth_bytes_per_s is None or link.link == "none":
        return None
    span, size = getattr(link, "span", None) or 0, getattr(link, "group_size", None) or 0
    bandwidth, scaleup = link_time_of(
        float(link.bandwidth_bytes_per_s), link.link == "nvlink", span, size, scaleup_bandwidth,
        domain, all_to_all, size or 2, getattr(link, "per_domain", 0),
    )  # fmt: skip
    return LinkTime(bandwidth, bool(scaleup))


def link_time_of(
    bandwidth: Any,
    nvlink: Any,
    span: Any,
    group_size: Any,
    scaleup_bandwidth: float | None,
    domain: int | None = None,
    all_to_all: Any = False,
    ranks: Any = None,
    per_domain: Any = 0,
) -> tuple[Any, Any]:
    """(bandwidth per GPU, scale-up tier) of an axis's collectives on its link: the tier's
    bandwidth ``bandwidth``, and (0, False) for a group of one rank (``ranks``, default
    ``group_size``: no collective). Exact for one link, element-wise for arrays of layouts.

    The tier is the placement's flag ``nvlink`` alone: the group lies in one scale-up domain
    (:func:`topology.placement.axis_links`' ``AxisLink.link == "nvlink"``, by
    :func:`model.rank_groups.in_one_domain` on a two-tier cluster and on a cluster graph
    alike). A group across domains is scale-out whatever its figure: a NIC as fast as NVLink
    (an H800's at ``scaleout_gbps=200``, an H100's at 450, each its NVLink's figure) leaves the
    domain through the network all the same (NVIDIA/nccl 5067397c ``src/graph/search.cc``
    ``ncclTopoCompute``: an inter-node graph enters and leaves each node through a NET device),
    so 449, 450 and 451 GB/s NICs are timed alike, never the in-node curve at exactly NVLink's
    figure.

    A scale-out group with ``g`` members in each NVLink domain of ``domain`` GPUs (its
    ``group_size``·``domain``/``span``; the placement's ``per_domain`` where given: the slowest
    group's, :func:`model.rank_groups.fewest_in_domain`) runs ``g`` rings at once, each leaving the domain
    through its own GPU's NIC (NCCL builds one ring per channel and gives each channel its own
    NIC on rail-optimised nodes): the group's bandwidth per GPU is ``g`` × the NIC's, at most
    the scale-up figure. A group with one member per domain (dp outside tp = 8) gets one NIC.
    An all-to-all (``all_to_all``: the expert dispatch and combine) is not a ring: each GPU's
    messages to ranks outside its domain leave through its own NIC (:func:`all_to_all_bandwidth`).
    """
    scaleup = nvlink
    effective = bandwidth
    if domain:
        known = (span > 0) & (group_size > 0)
        span_, size_ = where(known, span, 1), where(known, group_size, 1)
        group = where(
            all_to_all,
            all_to_all_bandwidth(bandwidth, size_, span_, domain, scaleup_bandwidth, per_domain),
            rings_bandwidth(bandwidth, size_, span_, domain, scaleup_bandwidth, per_domain),
        )
        effective = where(scaleup | logical_not(known), bandwidth, group)
    used = (group_size if ranks is None else ranks) > 1
    return where(used, effective, 0.0), where(used, scaleup, False)


def rings_bandwidth(
    nic: Any, group_size: Any, span: Any, domain: int, scaleup_bandwidth: float | None,
    per_domain: Any = 0,
) -> Any:  # fmt: skip
    """The bandwidth per GPU of a scale-out group's collectives: ``g`` parallel rings, one per
    NIC, for ``g`` members per domain (:func:`model.rank_groups.members_per_domain_of`),
    capped at the scale-up bandwidth (see :func:`link_time`). Element-wise for arrays.

    Examples
    --------
    dp = 32 with tp = 1 on 8-GPU A100 nodes (25 GB/s NICs): 8 members per node, 8 rings:

    >>> rings_bandwidth(25e9, 32, 32, 8, 300e9)
    200000000000.0
    >>> rings_bandwidth(25e9, 32, 256, 8, 300e9)  # tp = 8 inside: one member per node
    25000000000.0
    """
    g = members_per_domain_of(group_size, span, domain, per_domain)
    bandwidth = nic * g
    return bandwidth if scaleup_bandwidth is None else minimum(bandwidth, scaleup_bandwidth)


def all_to_all_bandwidth(
    nic: Any, group_size: Any, span: Any, domain: int, scaleup_bandwidth: float | None,
    per_domain: Any = 0,
) -> Any:  # fmt: skip
    """The bandwidth per GPU, counted over all the bytes it sends, of an all-to-all over a
    scale-out group with ``g`` members per domain (as in :func:`rings_bandwidth`): of the
    ``n − 1`` peers each GPU sends to, ``n − g`` are outside its domain and their share of the
    bytes, ``(n − g)/(n − 1)``, leaves through the GPU's own NIC while the rest rides the
    scale-up links at the same time; so the whole message moves at ``NIC × (n − 1)/(n − g)``,
    at most the scale-up figure. No parallel rings: NCCL's all-to-all posts one send and one
    receive per peer (``ncclSend``/``ncclRecv`` in a group), and a node's 8 NICs carry its 8
    GPUs' off-node messages, one NIC each on rail-optimised nodes. Element-wise for arrays.

    Examples
    --------
    ep = 256 with tp = 1 on 8-GPU H800 nodes (50 GB/s NICs): 248 of 255 peers are off-node,
    50 × 255/248 GB/s; ep = 16 over two nodes: 8 of 15, 50 × 15/8.

    >>> round(all_to_all_bandwidth(50e9, 256, 256, 8, 400e9) / 1e9, 2)
    51.41
    >>> round(all_to_all_bandwidth(50e9, 16, 16, 8, 400e9) / 1e9, 2)
    93.75
    """
    g = members_per_domain_of(group_size, span, domain, per_domain)
    outside = maximum(group_size - g, 1)
    bandwidth = nic * (group_size - 1) / outside
    return bandwidth if scaleup_bandwidth is None else minimum(bandwidth, scaleup_bandwidth)


KindParts = tuple[tuple[tuple[float, ...], ...], tuple[float, ...], tuple[float, ...]]
""":func:`kind_parts`: the parts of one layer of each span group
(:func:`model.core_spans.span_groups`), of the embedding and of the output layer."""


@lru_cache(maxsize=4096)
def kind_parts(
    arch: Architecture,
    training: TrainingSpec,
    b: int,
    tp: int,
    cp: int,
    ep: int,
    etp: int,
    sp: bool,
    causal: bool,
    recompute: Recompute,
    vocab: int,
    c: Clock,
    plan: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES,
    every_norm: bool = False,
    elementwise: Elementwise = Elementwise.FUSED,
    expert_passes: ExpertPasses = NO_EXPERT_PASSES,
) -> KindParts:
    """(the :attr:`model.layer_time.LayerTime.parts` of one layer of each span group, of the
    embedding, of the output layer) for one micro-batch on one GPU: a group is a distinct (FFN
    kind, attention span) of the model (:func:`model.core_spans.span_groups`, in its order), its
    layer's attention core timed at that span alone, a MoE group on the clock with the expert
    link, a dense one without it; a stage is the count of its layers in each group
    (:func:`stage_parts`). ``plan`` and ``every_norm``: what selective
    recomputation re-runs (:func:`model.recompute_ops.recompute_plan`); ``elementwise``: how the
    framework runs the elementwise passes (:func:`model.elementwise.elementwise_mode`);
    ``expert_passes``: the MoE layer's framework passes (:func:`model.moe_kernels.expert_passes_of`).
    Cached: the search asks once per distinct (b, tp, cp, ep, links, recompute, plan)."""

    def shape(moe: bool, layer: int) -> LayerShape:  # ep and etp only shape a MoE layer
        return LayerShape(
            arch, moe, training.seq_len, b, tp, cp, ep if moe else 1, etp if moe else 1, sp,
            training.flash_attention, causal, training.activation_bytes,
            ((layer, 1),), training.documents,
            training.moe_run, elementwise, expert_passes,
        )  # fmt: skip

    # what each part reads of the links: the embedding and output layer tp's, a dense layer tp's
    # and cp's (fewer distinct clocks, more cache hits); each kind's tp collectives hold NCCL's SMs
    base = (c.peak_flops_per_s, c.hbm_bytes_per_s, c.params)
    tp_only = Clock(*base, c.tp_link, None, None, c.tp_comm_overlap,
                    linear_speedup=c.linear_speedup, nccl_sm_share=c.nccl_sm_share)  # fmt: skip
    no_ep = Clock(
        *base, c.tp_link, c.cp_link, None, c.tp_comm_overlap, c.cp_ring, c.cp_a2a, c.cp_gather,
        c.linear_speedup, c.cp_kv_repeat, tp_regather=c.tp_regather, cp_templated=c.cp_templated,
        grouped_fp8=c.grouped_fp8, torchao_fp8=c.torchao_fp8, nccl_sm_share=c.nccl_sm_share,
        tp_gather_bytes=c.tp_gather_bytes, userbuffers=c.userbuffers, cp_ring_hidden=c.cp_ring_hidden,
        cp_a2a_link=c.cp_a2a_link,
    )  # fmt: skip
    groups = tuple(
        layer_time(shape(moe, j), c if moe else no_ep, recompute, plan, every_norm).parts
        for moe, j in span_groups(arch)
    )
    ends = shape(False, 0)  # the embedding and output layer read no span
    return (
        groups,
        embedding_time(ends, tp_only).parts,
        output_time(ends, tp_only, vocab, training.cross_entropy_fusion_impl).parts,
    )


def stage_parts(
    groups: tuple[tuple[float, ...], ...],
    embedding: tuple[float, ...],
    output: tuple[float, ...],
    counts: tuple[Any, ...],
    first: Any,
    last: Any,
) -> list[Any]:
    """Each of the :data:`PARTS` of one micro-batch on a stage (or model chunk) holding
    ``counts[g]`` layers of span group g (:func:`model.core_spans.group_counts`; ``first``: it
    holds the embedding; ``last``: the output layer), from the :attr:`LayerTime.parts` of one
    layer of each group (:func:`kind_parts`): ``Σ_g counts[g]·groups[g] +
    [first]·embedding + [last]·output``, so its attention core is the sum over its layers of
    each one's own span time. Floats for one stage; element-wise for arrays of stages (the
    search's tables), in the same order of operations so both give the same float.

    Examples
    --------
    Two groups (a local layer's compute 1 ms, a global one's 3 ms; the other parts 0), a stage
    of 13 local and 3 global layers, neither end:

    >>> local, glob = (1e-3,) + (0.0,) * 7, (3e-3,) + (0.0,) * 7
    >>> round(stage_parts((local, glob), (0.0,) * 8, (0.0,) * 8, (13, 3), False, False)[0], 9)
    0.022
    """
    out = []
    for k in range(len(PARTS)):
        total: Any = 0.0
        for n, g in zip(counts, groups, strict=True):
            total = total + n * g[k]
        out.append(total + where(first, embedding[k], 0.0) + where(last, output[k], 0.0))
    return out


def recompute_stage_parts(
    base: KindParts,
    full: KindParts,
    counts: tuple[Any, ...],
    again: tuple[Any, ...],
    first: Any,
    last: Any,
) -> list[Any]:
    """The :data:`model.layer_time.PARTS` of one micro-batch on a stage holding ``counts``
    layers of each span group (:func:`model.core_spans.group_counts`) of which ``again`` are
    fully recomputed (:attr:`model.layout.Layout.recompute_layers`):
    :func:`stage_parts` of the others under the base mode's :func:`kind_parts`
    (``base``), plus those of the recomputed layers under ``full``'s (their backward runs one
    more forward and its collectives: :func:`model.layer_time.layer_time`). Seconds; the
    evaluator and the per-stage search's tables both call it (numbers or arrays of stages)."""
    rest = tuple(n - k for n, k in zip(counts, again, strict=True))
    parts = stage_parts(base[0], base[1], base[2], rest, first, last)
    extra = stage_parts(full[0], full[1], full[2], again, False, False)
    return [a + b for a, b in zip(parts, extra, strict=True)]


def pp_seconds(
    message_bytes: Any,
    messages: Any,
    tied_bytes: Any,
    bandwidth: Any,
    scaleup: Any,
    p: RooflineParams,
) -> Any:
    """Seconds a stage waits on pipeline messages in a step: ``messages`` sends of
    ``message_bytes`` each (``2·m·v``: one activation forward and one gradient backward per
    micro-batch and model chunk), each on the critical path of its micro-batch, plus the tied
    embedding's once-per-step all-reduce between the first and last stage (``tied_bytes`` sent).
    Each send one hop (:func:`model.nccl_latency.steps_latency`, ``rounds`` 0): NVLink's where the
    pipeline's groups lie in one domain (``scaleup``), else the network's — the stages either
    side of a domain's edge (there is one wherever a group leaves its domain; the tied pair, the
    first and last stage, straddle it too) pass every one of their messages over the network,
    and the step waits on the slowest pair. Element-wise for arrays."""
    send = collective_time(Collective.SEND_RECV, 2, message_bytes, bandwidth, scaleup, p)
    tied = collective_time(Collective.ALL_REDUCE, 2, tied_bytes, bandwidth, scaleup, p)
    return messages * send + tied


def pp_exposed_seconds(
    seconds: Any,
    tied_s: Any,
    messages: Any,
    pass_s: Any,
    overlapped: Any,
    critical: Any = 0,
    longest: Any = 0,
) -> Any:
    """Of a step's pipeline messages (``seconds`` in all, ``tied_s`` of it the tied embedding's
    all-reduce, the rest ``messages`` equal sends), what waits: all of it, unless the sends
    run beside computation (``overlapped``, :func:`model.comm.p2p_overlapped`). Then what the
    sends add to the step's critical path (:func:`model.comm.p2p_exposed_sends`: ``critical``
    sends while a send is short against a pass, :func:`model.comm.p2p_critical_sends`; up to
    ``longest`` less the passes skipped once it is long) with a chunk's forward ``pass_s`` and
    its backward twice that (the passes without recomputation). No more than ``seconds``
    waits. The tied embedding's all-reduce runs after the flush and waits. Element-wise for
    arrays.

    Examples
    --------
    64 sends of 1 ms (plus 5 ms of tied all-reduce), chunk forwards of 3 ms (backwards 6 ms),
    14 sends on the critical path:

    >>> pp_exposed_seconds(0.069, 0.005, 64, 0.003, False)
    0.069
    >>> round(pp_exposed_seconds(0.069, 0.005, 64, 0.003, True, 14, 20), 9)  # 14 · 1 ms + 5 ms
    0.019
    >>> round(pp_exposed_seconds(0.069, 0.005, 64, 0.003, True, 14, 30), 9)  # 29 · 1 − 2 · 3 + 5
    0.028
    """
    send = (seconds - tied_s) / maximum(messages, 1)
    waits = p2p_exposed_sends(send, pass_s, 2 * pass_s, critical, longest) + tied_s
    return where(overlapped, minimum(waits, seconds), seconds)


def pipe_engine_seconds(
    part_bytes: Any, tp: Any, m: Any, pp: Any, tied_bytes: Any, bandwidth: Any, scaleup: Any,
    tp_bandwidth: Any, tp_scaleup: Any, p: RooflineParams, hbm_bytes_per_s: float | None = None,
    tp_per_domain: Any = 1, tp_domains: Any = 0, tp_caps: tuple[Any, Any] = (0.0, 0.0),
) -> Any:  # fmt: skip
    """Seconds DeepSpeed's pipeline engine adds to a step for its pipeline messages: the
    blocking transfers and the all-gathers over tp on the critical path of its ``TrainSchedule``
    (:func:`model.deepspeed_pipe.pipe_engine_counts` of m micro-batches on pp stages: a middle
    stage's four transfers and three gathers a forward-backward cycle, each a rendezvous on the
    stage's own stream between its passes, so none overlaps computation), each transfer of
    ``part_bytes``, the stage output's share on the wire (the engine splits its output once over
    the tensor-parallel group, :func:`model.comm.pipe_partitioned`: ``PartitionedTensor`` over
    ``slice_parallel_group`` in ``_exec_forward_pass`` and ``_exec_send_grads``; 1/tp of the
    whole tensor with or without sequence parallelism), each all-gather rebuilding a whole tensor
    from its shares (``PartitionedTensor.full``; nothing at tp = 1; ``tp`` = 1 too when the
    engine does not partition, as for Megatron-DeepSpeed's mixture-of-experts models,
    :func:`model.comm.pipe_partitioned`), plus the tied embedding's once-per-step all-reduce
    (``ReduceTiedGrads``, ``tied_bytes`` sent). With ``hbm_bytes_per_s`` each gather also
    pays its two copies through HBM: ``full`` allocates the whole tensor zeroed
    (``torch.zeros``, the bytes written) and returns a ``clone`` of it (read and written):
    3 × the whole tensor at :attr:`~model.roofline.RooflineParams.hbm_efficiency`, two kernels
    (``deepspeed/runtime/utils.py`` ``PartitionedTensor.full`` at edaa72212; 2021's code made
    two passes more, not counted); the gathers' latency by ``tp_per_domain``, the tp members a
    domain, and ``tp_domains``, the tp group's NCCL node count; ``tp_caps`` the tp link's NIC and
    NVLink, bytes/s (:func:`model.terms.fields.link_caps`; NVLink binds a tp ring across
    domains, :func:`model.nvlink_bound.ring_busbw`). Element-wise for arrays.

    Examples
    --------
    An 8 MB output, tp 8 (1 MB on the wire), m 8 on pp 3 (4·8 + 6 − 8 = 30 transfers, 3·8 + 9
    − 8 = 25 gathers), across nodes at 25 GB/s (no all-gather curve: 0.8 of a 300 GB/s
    NVLink): each send 8.4 + 14 µs + 1 MB / 24 GB/s, each gather 8.4 + 7 × 3.4 µs + 7 MB / 240
    GB/s; on an A100-80GB (2.039 TB/s at 0.9) each gather's copies 24 MB / 1.835 TB/s + 2 × 3 µs.

    >>> p = RooflineParams(gemm_efficiency=0.7)
    >>> t = pipe_engine_seconds(1e6, 8, 8, 3, 0.0, 25e9, False, 300e9, True, p)
    >>> send, gather = 22.4e-6 + 1e6 / 24e9, 32.2e-6 + 7e6 / 240e9
    >>> round(t, 9) == round(30 * send + 25 * gather, 9)
    True
    >>> copies = pipe_engine_seconds(1e6, 8, 8, 3, 0.0, 25e9, False, 300e9, True, p, 2.039e12) - t
    >>> round(copies, 9) == round(25 * (24e6 / (0.9 * 2.039e12) + 6e-6), 9)
    True
    """
    send = collective_time(Collective.SEND_RECV, 2, part_bytes, bandwidth, scaleup, p)
    gather = collective_time(Collective.ALL_GATHER, tp, part_bytes * (tp - 1), tp_bandwidth,
                             tp_scaleup, p, tp_per_domain, tp_domains, nic=tp_caps[0],
                             nvlink=tp_caps[1])  # fmt: skip
    tied = collective_time(Collective.ALL_REDUCE, 2, tied_bytes, bandwidth, scaleup, p)
    if hbm_bytes_per_s is not None:  # full(): zeros (write) and clone (read, write) of the whole
        copies = memory_seconds(3 * part_bytes * tp, hbm_bytes_per_s, p) + p.kernel_overhead_s
        gather = gather + where(tp > 1, copies, 0.0)
    transfers, gathers = pipe_engine_counts(m, pp)
    return transfers * send + gathers * gather + tied


def optimizer_seconds(
    owned_params: Any,
    hbm_bytes_per_s: float,
    p: RooflineParams,
    bytes_per_param: int = OPTIMIZER_BYTES_PER_PARAM,
) -> Any:
    """Seconds of the optimizer step on one GPU: the parameters it updates (its ZeRO shard, or
    all it holds; less what an offload steps on the host) at ``bytes_per_param``
    (:func:`model.offload.adam_step_bytes` of the recipe's optimizer state; 38 for FP32 Adam)
    through HBM at the part's streaming fraction (:attr:`RooflineParams.optimizer_hbm_efficiency`,
    BabelStream's triad: a multi-tensor Adam kernel streams its tensors as the triad does;
    :attr:`RooflineParams.hbm_efficiency` where none is published). Element-wise for arrays.

    Examples
    --------
    2.75e9 parameters on an A100-80GB (Korthikanti's 22B on 8 GPUs, no data parallelism):
    38 · 2.75e9 B / (0.9 · 2.039e12 B/s) ≈ 56.9 ms.

    >>> p = RooflineParams(gemm_efficiency=0.74)
    >>> round(optimizer_seconds(2.75e9, 2.039e12, p) * 1e3, 1)
    56.9
    """
    return bytes_per_param * owned_params / (hbm_bytes_per_s * p.streaming_hbm_efficiency)
