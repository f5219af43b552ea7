"""The printed sentences on how a MoE layer's experts and dispatcher run: torchtitan's grouped
experts and the dispatcher's wait (:mod:`model.torchtitan_experts`), and DeepEP's or HybridEP's
intra-domain dispatch and combine at their kernels' published bandwidth, with what was borrowed
(:mod:`model.ep_kernels`), and the host's expert calls the step time leaves out
(:mod:`model.host_calls`). Each reads the figures the cost model reads;
:func:`interface.render.assumptions.assumptions` prints them."""

from __future__ import annotations

from typing import Any

from trainplan.model.dispatch_buffers import deepep_group_ranks
from trainplan.model.ep_kernels import KERNEL_LIBRARY, kernel_rates
from trainplan.model.estimate import Estimate
from trainplan.model.host_calls import (
    EXPERT_GEMM_HOST_S,
    expert_forwards,
    expert_gemm_calls,
    expert_quantise_calls,
    local_experts,
    saved_originals,
)
from trainplan.model.moe_kernels import expert_cast_kernels, fc1_grad_kernels
from trainplan.model.moe_rows import imbalance_bound
from trainplan.model.moe_run import Dispatcher, MoERun
from trainplan.model.precision import Fp8Recipe, Precision, fp8_recipe_of
from trainplan.model.step_passes import clip_scaling_note
from trainplan.model.terms.step import uses_roofline
from trainplan.model.torchtitan_experts import (
    GROUPED_MM_MEASURED_ON,
    GROUPED_MM_OVER_DENSE,
    HOST_SYNC_S,
    grouped_mm_of,
)
from trainplan.model.units import shown_number

__all__ = [
    "grouped_mm_sentence",
    "dispatcher_kernel_sentence",
    "host_calls_note",
    "moe_run_dict",
]


def grouped_mm_sentence(est: Estimate) -> list[str]:
    """Under ``fsdp2``: the routed experts as ``torch._grouped_mm`` at the measured ratio and
    where it is assumed, and the dispatcher's per-layer wait
    (:mod:`model.torchtitan_experts`)."""
    lay = est.layout
    if not grouped_mm_of(str(lay.framework)):
        return []
    ratios = " / ".join(f"{y:g}" for _, y in GROUPED_MM_OVER_DENSE)
    rows = " / ".join(f"{r:,}" for r, _ in GROUPED_MM_OVER_DENSE)
    name = est.device.name
    elsewhere = "" if name == GROUPED_MM_MEASURED_ON else f", and the H200's ratio on the {name}"
    out = (
        "routed experts (fsdp2): torchtitan's torch._grouped_mm, one kernel per pass for all "
        f"local experts, at the dense GEMM of the same FLOPs × {ratios} at {rows} rows per "
        "expert (measured on one H200, PyTorch 2.11, forward; linear in log2 of the rows, "
        "held at the end values outside), the forward's ratio assumed for the input- and "
        f"weight-gradient passes{elsewhere}"
    )
    if lay.ep > 1 and str(est.training.moe_run.dispatcher) == "alltoall":
        out += (
            "; each MoE layer's forward adds the token counts' all-to-all and the host's wait "
            f"on their copy (at least {HOST_SYNC_S * 1e6:.2f} µs: one eager launch)"
        )
    return [out]


def dispatcher_kernel_sentence(est: Estimate) -> list[str]:
    """Under ``deepep`` or ``hybridep`` at ep > 1 on the roofline model: the dispatch and combine
    rates an expert-parallel group inside one NVLink domain runs at (:func:`model.ep_kernels.
    kernel_rates` at the layout's ep, GB/s as the kernels count), the rows read, where the ep
    lies beyond the published sizes, and what was borrowed; empty otherwise."""
    d, lay = est.device, est.layout
    dispatcher = str(est.training.moe_run.dispatcher)
    if dispatcher not in KERNEL_LIBRARY or lay.ep == 1:
        return []
    runs = _deepep_runs(est)
    if runs[:1] != [""] or not uses_roofline(est.options, lay.framework, d):
        return [x for x in runs if x]  # DeepEP's internode kernels: no intra-domain rate read
    rates = kernel_rates(dispatcher, d.part, d.nvlink_bytes_per_s, d.nvlink_domain)
    if rates is None:
        return []
    dispatch, combine = (x / 1e9 for x in rates.at(lay.ep))
    held = ""
    if not rates.ep[0] <= lay.ep <= rates.ep[-1]:
        near = rates.ep[0] if lay.ep < rates.ep[0] else rates.ep[-1]
        held = f", held at the published EP {near}'s (none at EP {lay.ep})"
    out = (
        f"expert dispatch and combine ({dispatcher}) inside one NVLink domain at the kernels' "
        f"published bandwidth, {dispatch:.1f} / {combine:.1f} GB/s of the rows a rank receives "
        f"(its own included){held}: {rates.source}; across domains NCCL's all-to-all rule"
    )
    if rates.borrowed:
        out += f"; BORROWED: {rates.borrowed}"
    return [out, *runs[1:]]


def _deepep_runs(est: Estimate) -> list[str]:
    """Under ``deepep``, first the line that its group exceeds the 8 ranks its normal kernels
    reach over NVLink (:attr:`model.moe_run.Dispatcher.nvlink_ranks`) and runs the internode
    kernels with their RDMA hop on the NIC, said where the part's NVLink domain is larger
    ("" where the group fits one run of 8 or the domain is 8; ``[""]`` under another
    dispatcher); then, where its runs of 8 span hosts of fewer GPUs (GB200,
    GB300: 4 a tray), that DeepEP maps their buffers only through CUDA fabric handles, which its
    ``Buffer`` uses under ``allow_mnnvl=True`` (deepseek-ai/DeepEP dd758ca ``deep_ep/buffers/
    legacy.py`` passes the flag as ``use_fabric``, ``csrc/utils/shared_memory.hpp``) and
    Megatron-Core's ``get_buffer`` does not pass (NVIDIA/Megatron-LM d98e8a64dd ``moe/
    fused_a2a.py``: ``Buffer(group, num_nvl_bytes, num_rdma_bytes)``): an assumption."""
    lay, d = est.layout, est.device
    run = est.training.moe_run.dispatcher
    reach = run.nvlink_ranks
    if reach is None:
        return [""]
    ranks = deepep_group_ranks(str(lay.framework), lay.ep, lay.expert_tp)
    out = [""]  # first: the internode kernels' line, "" where the group fits one run
    if ranks > reach and (d.placement_domain or 0) > reach:  # NVLink reaches further than DeepEP
        out[0] = (
            f"expert dispatch and combine (deepep): its group of {ranks} ranks exceeds the {reach} "
            "its normal kernels reach over NVLink (LEGACY_NUM_MAX_NVL_PEERS), so it runs the "
            f"internode kernels: NVLink inside runs of {reach} ranks, RDMA between them through "
            "the GPU's NIC (IBGDA writes, internode.cu), inside one NVLink domain as across "
            "domains, timed on the NIC"
        )
    if d.gpus_per_node < min(ranks, reach):
        out.append(
            f"deepep on {d.name}: its runs of {min(ranks, reach)} ranks span hosts of "
            f"{d.gpus_per_node} GPUs, whose buffers DeepEP maps through CUDA fabric handles only "
            "with Buffer(allow_mnnvl=True), which Megatron-Core's get_buffer does not pass: "
            "ASSUMED set"
        )
    return out


def moe_run_dict(run: MoERun) -> dict[str, Any]:
    """The run's MoE routing and dispatch (:class:`model.moe_run.MoERun`), by the option names."""
    cf = run.capacity_factor
    return {
        "moe_capacity_factor": None if cf is None else float(cf),
        "moe_pad_to_capacity": run.pad_to_capacity,
        "moe_imbalance": float(run.imbalance),
        "moe_node_limit": run.node_limit,
        "moe_dispatcher": str(run.dispatcher),
        "moe_ep_overlap": str(run.ep_overlap),
    }


HOST_CALLS_FROM = 2
"""Local experts from which :func:`host_calls_note` speaks: one expert a GPU issues a dense
layer's GEMM calls."""


def host_calls_note(est: Estimate) -> list[str]:
    """Where the layout's MoE layers issue one GEMM call per local expert
    (:func:`model.host_calls.expert_gemm_calls`, at least :data:`HOST_CALLS_FROM` experts a
    GPU): that the step time leaves out the host's time to issue them, with their count per
    layer and micro-batch (the recomputed forward's too, :func:`model.host_calls.
    expert_forwards`; both counts where only some MoE layers recompute) and what they take on
    the host at the measured time of one call (:data:`model.host_calls.EXPERT_GEMM_HOST_S`);
    empty otherwise (a dense model, one expert a GPU, ``fsdp2``'s grouped kernel,
    ``textbook``)."""
    arch, lay = est.model.arch, est.layout
    if arch is None or arch.moe is None:
        return []
    moe = arch.moe
    local = local_experts(moe.num_experts, lay.ep)
    if local < HOST_CALLS_FROM:
        return []
    forwards = expert_forwards(arch, lay, est.training)
    calls = [expert_gemm_calls(moe.num_experts, lay.ep, str(lay.framework), f) for f in forwards]
    if not forwards or not calls[-1]:
        return []
    passes = "the forward, " + ("its recomputation, " if forwards == (2,) else "")
    counts = f"{calls[-1]:,} expert GEMM calls per micro-batch on a GPU here ({local:,} experts "
    if len(calls) > 1:
        counts = f"{calls[0]:,} expert GEMM calls per micro-batch on a GPU here ({calls[-1]:,} "
        counts += f"in a layer recomputed in full, its forward run twice; {local:,} experts "
    host_ms = " or ".join(f"{c * EXPERT_GEMM_HOST_S * 1e3:,.1f}" for c in calls)
    return [
        "step time leaves out the host's time to issue the routed experts' calls: each MoE "
        f"layer issues {counts}a GPU, one GEMM per expert for {passes}the input and weight "
        f"gradient of both expert linears), about {host_ms} ms of host time at "
        f"{EXPERT_GEMM_HOST_S * 1e6:g} µs a call (the median an nsys trace measured on a DGX "
        f"B200){fp8_quantise_clause(est, forwards)}; where the GPU's own work per layer and "
        "micro-batch is shorter than the host's, the step is bound by the host and slower than "
        "shown — a larger micro-batch or fewer experts a GPU (a larger ep) shrinks the gap"
    ]


QUANTISE_STEPS = {4: ": the amax reset, the amax, the scale and the cast"}
"""What each of a recipe's per-expert quantise kernels does, by their number
(:func:`model.moe_kernels.expert_cast_kernels`: current scaling's four)."""


def fp8_quantise_clause(est: Estimate, forwards: tuple[int, ...]) -> str:
    """Under FP8, the kernel launches that quantise the routed experts' tensors one expert at a
    time (:func:`model.host_calls.expert_quantise_calls` for each of ``forwards``), per expert
    and tensor by recipe, without a host time (none is published); or that the recipe
    quantises every expert in one call per tensor; "" under BF16."""
    t, lay, arch = est.training, est.layout, est.model.arch
    if t.precision is not Precision.FP8 or arch is None or arch.moe is None:
        return ""
    fw = str(lay.framework)
    recipe, saved = fp8_recipe_of(fw, t.fp8_recipe), saved_originals(fw, lay.recompute, t)
    n = [
        expert_quantise_calls(arch.moe.num_experts, lay.ep, fw, recipe, est.device, f, saved,
                              arch.linear_bias)
        for f in forwards
    ]  # fmt: skip
    lead = f"; under FP8 (recipe {recipe}) Transformer Engine "
    if not n[-1]:
        return f"{lead}quantises all experts' inputs and output gradients in one call per tensor, none per expert"
    k = expert_cast_kernels(recipe, est.device)
    parts = [f"{k} per expert and tensor{QUANTISE_STEPS.get(k, '')}"] if k else []
    if recipe is Fp8Recipe.DELAYED and k:
        parts[0] += ", as this GPU keeps no FP8 transpose, which one fused cast for all needs"
    what, bias = "each expert's inputs and output gradients", "FC1's output gradient"
    if not k:  # delayed scaling with the transpose: only FC1's bias gradient goes expert by expert
        what, bias, parts = f"{bias} with its bias gradient", "", ["the rest in one call a tensor"]
    if arch.linear_bias:
        b = f"{fc1_grad_kernels(recipe, est.device, True)} per expert"
        parts.insert(0 if not k else 1, f"{bias} with its bias gradient, {b}" if bias else b)
    counts = f"{n[0]:,}" + (f" ({n[-1]:,} in a layer recomputed in full)" if len(n) > 1 else "")
    again = ", and the inputs saved in BF16 again in the backward," if saved else ""
    return (
        f"{lead}also quantises {what}{again} one expert at a "
        f"time: {counts} more kernel launches per micro-batch on a GPU here "
        f"({'; '.join(parts)}), whose host time is not counted (no measurement of one is published)"
    )


def routing_words(run: MoERun, experts: int = 0, top_k: int = 1, ep: int = 1) -> str:
    """How the ep traffic row counts the routed rows, in words for its bound note: uniform
    routing, or under ``moe_imbalance`` the busiest rank's rows (:func:`model.moe_rows.rank_rows`,
    which the row and the step time read), with the figure counted where it exceeds what a rank
    can receive at this ``ep`` (:func:`model.moe_rows.imbalance_bound`; ``experts`` 0: not
    checked).

    >>> from fractions import Fraction
    >>> routing_words(MoERun()), routing_words(MoERun(imbalance=Fraction(3, 2)))
    ('assumes uniform routing', "counts the busiest rank's rows (`moe_imbalance`=1.5)")
    >>> routing_words(MoERun(imbalance=Fraction(5)), 8, 2, 8)
    "counts the busiest rank's rows (`moe_imbalance`=5, counted as 4: the most a rank receives at ep 8 with 8 experts, top-2)"
    """
    if run.imbalance == 1:
        return "assumes uniform routing"
    typed = f"`moe_imbalance`={shown_number(run.imbalance)}"
    bound = imbalance_bound(experts, top_k, ep) if experts else run.imbalance
    if run.imbalance > bound:
        typed += (
            f", counted as {shown_number(bound)}: the most a rank receives at ep {ep} with "
            f"{experts} experts, top-{top_k}"
        )
    return f"counts the busiest rank's rows ({typed})"


def estimate_routing_words(est: Estimate) -> str:
    """:func:`routing_words` for an estimate's MoE run, experts, top-k and ep."""
    moe = est.model.arch.moe if est.model.arch is not None else None
    if moe is None:
        return routing_words(est.training.moe_run)
    return routing_words(
        est.training.moe_run, moe.num_experts, moe.experts_per_token, est.layout.ep
    )


def bound_notes(est: Estimate) -> list[str]:
    """Figures the model states as bounds rather than estimates, said where they are printed:
    expert-parallel all-to-all traffic (model.comm_layers.ep_traffic) at uniform routing or the
    busiest rank's rows (:func:`interface.render.moe_text.routing_words`), with every routed copy
    sent on its own under the NCCL all-to-all dispatcher, an upper bound on a deduplicating
    dispatcher, which sends a token once per destination (DeepEP; timed under
    ``moe_dispatcher = deepep``, :mod:`model.moe_run`), and on node-limited routing, cited only
    for a model whose router is group-limited (:attr:`model.arch_parts.MoESpec.group_limit`:
    DeepSeek-V3's at most 4 nodes a token, DeepSeek-V3 Technical Report, arXiv 2412.19437,
    §2.1.2 and §3.2.2); and the optimizer step under ``grad_clip_scaling`` ``above_limit``, a
    lower bound on a step whose gradient norm exceeds the clip
    (:func:`model.step_passes.clip_scaling_note`)."""
    notes = []
    nccl = est.training.moe_run.dispatcher is Dispatcher.ALLTOALL
    if nccl and any(r.traffic.axis == "ep" and r.traffic.bytes_per_step > 0 for r in est.traffic):
        moe = est.model.arch.moe if est.model.arch is not None else None
        limit = moe.group_limit if moe is not None else None
        less = (
            "deduplication sends less (`moe_dispatcher`=deepep times it)"
            if limit is None
            else f"this model's node-limited routing with deduplication (DeepSeek-V3 §2.1.2, "
            f"§3.2.2: at most {limit} nodes per token) sends less (`moe_dispatcher`=deepep "
            f"`moe_node_limit`={limit} times it)"
        )
        notes.append(
            f"ep traffic is an upper bound: the all-to-all {estimate_routing_words(est)} "
            f"and sends every routed copy on its own; {less}"
        )
    elif _imbalance_above_bound(est):  # said in the ep note above under the NCCL all-to-all
        notes.append(f"the model {estimate_routing_words(est)}")
    clip = clip_scaling_note(
        est.options.grad_clip_scaling, est.layout.framework, est.training.distributed_optimizer
    )
    return notes + ([clip] if clip else []) + host_calls_note(est)


def _imbalance_above_bound(est: Estimate) -> bool:
    """Whether the typed ``moe_imbalance`` exceeds what a rank can receive at the layout's ep
    (:func:`model.moe_rows.imbalance_bound`), so the model counts it at the bound."""
    moe = est.model.arch.moe if est.model.arch is not None else None
    run = est.training.moe_run
    if moe is None or run.imbalance <= 1:
        return False
    return bool(
        run.imbalance > imbalance_bound(moe.num_experts, moe.experts_per_token, est.layout.ep)
    )
