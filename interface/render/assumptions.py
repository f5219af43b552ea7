"""The assumptions an estimate rests on, one sentence per mechanism (the ``assumptions`` list of
the evaluate ``--json`` object and the text report): the time model and its overlaps, the
tensor-parallel plan and selective recomputation, context parallelism, offload, precision,
model state and data-parallel traffic, and the capacity each figure is measured against."""

from __future__ import annotations

from trainplan.interface.render.moe_text import dispatcher_kernel_sentence, grouped_mm_sentence
from trainplan.interface.render.offload_text import offload_sentence
from trainplan.interface.render.part_text import (
    collectives_said,
    nvlink_bound_said,
    part_sentences,
)
from trainplan.interface.render.precision_text import loss_sentence, precision_sentence
from trainplan.interface.render.step_terms import accumulation_said
from trainplan.model.comm import p2p_overlapped, reduces_beside_compute
from trainplan.model.deepspeed_mechanisms import sp_comm_bytes
from trainplan.model.elementwise import elementwise_mode
from trainplan.model.estimate import Estimate
from trainplan.model.frameworks import (
    CUBLAS_WORKSPACE_BYTES,
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION_ALLOWANCE_BYTES,
    Framework,
)
from trainplan.model.hardware import runtime_reserve_for
from trainplan.model.launch_order import launch_order_kept
from trainplan.model.layout import Layout
from trainplan.model.mechanisms import Mechanism, mechanism
from trainplan.model.memory import keeps_gathered_inputs
from trainplan.model.op_rates import FAMILY, params_in_force
from trainplan.model.op_time import TpOverlap, tp_overlap_for, tp_overlap_run
from trainplan.model.overlapped_chunks import overlapped_mechanism
from trainplan.model.roofline import generation_of, roofline_params_for
from trainplan.model.split import default_chunk_sizes
from trainplan.model.terms.step import uses_roofline
from trainplan.model.timing import attention_efficiency_for

__all__ = ["assumptions", "elementwise", "tp_block_inputs"]


_FRAMEWORK_SPLITS = {
    "deepspeed": "pipeline stages as DeepSpeed splits them (Megatron-DeepSpeed's "
    "partition_method='type:transformer'): ⌊L/pp⌋ layers each, the first L mod pp stages one more",
    "torchtitan": "pipeline stages as torchtitan splits them (_generate_llm_fqn_per_model_part): "
    "the embedding and the output counted as one layer each, L + 2 spread evenly over the model "
    "chunks, the first chunks one more",
}
"""The split sentence of a framework's own split rule (:func:`model.split.split_rule_of`)."""


def _attention_note(est: Estimate) -> str:
    """Where the FlashAttention core's efficiency in the step time comes from."""
    o, device = est.options, est.device
    if o.attention_efficiency is None or not est.training.flash_attention:
        return ""
    if o.attention_efficiency != attention_efficiency_for(device.part):
        why = "given"
    elif generation_of(device.part) == "H100":
        why = "FlashAttention-2 on Hopper, Shah et al. 2024"
    else:
        why = "FlashAttention-2's H100 figure, borrowed: none for this accelerator"
    return f" (the FlashAttention core at {o.attention_efficiency:g}: {why})"


def _time_sentence(est: Estimate, overlap: str) -> str:
    """How the step time was reckoned: the roofline model's figures and mechanisms, or the
    single model's efficiency and overlaps."""
    o = est.options
    if not uses_roofline(o, est.layout.framework, est.device):
        return (
            f"step time (single model): hardware FLOPs at kernel efficiency "
            f"{o.kernel_efficiency:g} of the dense peak"
            + _attention_note(est)
            + f"; × (1 + bubble_ratio); plus exposed communication with overlap {overlap}"
        )

    p = params_in_force(o.roofline, est.device.part, o.attention_kernel, str(est.layout.framework))
    gen = generation_of(est.device.part)
    fitted = f"fitted on {gen}" if gen else "the H100's, no calibration for this accelerator"
    if p.gemm_efficiency != roofline_params_for(est.device.part).gemm_efficiency:
        fitted = "given (--set gemm_efficiency or --calibration)"
    attention = ""
    if est.training.flash_attention and p.attention_kernel is not None and FAMILY.get(p.part):
        attention = (
            f"the attention core at {p.attention_kernel}'s published rate for its chunk length, "
            "head dimensions and causal mask; "
        )
    elif est.training.flash_attention and p.attention_efficiency is not None:
        attention = f"the FlashAttention core at {p.attention_efficiency:g} of peak; "
    if p.clock_fraction != 1:
        attention += (
            f"tensor cores at {p.clock_fraction:.3f} of the rated peak under the part's power "
            "limit; "
        )
    if p.optimizer_hbm_efficiency is not None:
        attention += f"optimizer step at {p.optimizer_hbm_efficiency:.3f} of HBM (STREAM triad); "
    curve = (
        "all-reduce, all-gather and reduce-scatter inside the NVLink domain at the published "
        "nccl-tests bus bandwidth for their message size, other "
        if p.busbw_curve
        else ""
    )
    return (
        "step time (roofline model): each operation max(FLOPs / (peak × GEMM efficiency for "
        f"its depth k, e·k/(k + k₀), e = {p.gemm_efficiency:g} {fitted}), bytes / (HBM × "
        f"{p.hbm_efficiency:g})) + {p.kernel_overhead_s * 1e6:g} µs; {attention}{curve}collectives "
        f"{collectives_said(p.part)} (link × {p.scaleup_efficiency:g} NVLink, "
        f"{p.scaleout_efficiency:g} scale-out{nvlink_bound_said(p)}); "
        f"tp overlap {_tp_overlap_said(est)}, "
        f"cp {_cp_overlap(est)}, "
        f"{_dp_overlap(est)}{_p2p_waits(est)}{_nccl_charge(est)}; "
        "m × slowest stage × (1 + bubble_ratio) + pipeline messages + exposed dp + optimizer step"
    )


def _tp_overlap_said(est: Estimate) -> str:
    """The tp overlap the layout runs (:func:`model.op_time.tp_overlap_run`; ``full`` at tp > 1
    with its userbuffers configuration's GEMM chunks and SM margin, :mod:`model.userbuffers_gemm`)."""
    fw, tp, cfg = est.layout.framework, est.layout.tp, est.options.tp_comm_overlap_cfg
    gathered = keeps_gathered_inputs(Framework(fw), est.training)
    lay, ep = est.layout, est.training.moe_run.ep_overlap
    ordered = launch_order_kept(est.device.part, ep, fw, lay.zero_stage)
    chosen = tp_overlap_for(fw, est.options.tp_comm_overlap, gathered, ordered)
    runs = tp_overlap_run(chosen, tp, est.layout.sp)
    if runs is not chosen and tp > 1:
        return f"{runs} (async-tp fuses all-gathers and reduce-scatters: none without sp)"
    if not ordered and (tp > 1 or lay.cp > 1):
        why = "Megatron-FSDP" if lay.zero_stage == 3 else "--overlap-moe-expert-parallel-comm"
        asked = " as asked: not sure to hide" if runs is TpOverlap.ASYNC else ""
        return (
            f"{runs}{asked} ({why} before Blackwell runs without CUDA_DEVICE_MAX_CONNECTIONS=1, "
            "so the async tp collectives and the cp ring's sends may start after the GEMM they "
            "would hide under: the ring's sends wait too)"
        )
    ub = f" (userbuffers {cfg}: GEMM chunks and its kernels' SMs charged)"
    return f"{runs}{ub if runs is TpOverlap.FULL and tp > 1 else ''}"


def _dp_overlap(est: Estimate) -> str:
    """What the dp phrase of the roofline line says: the once-per-step traffic overlapped or
    exposed, under DeepSpeed ZeRO-1/2 without ``overlap_comm`` every reduction exposed
    (:func:`model.comm.reduces_beside_compute`), and DeepSpeed's accumulation in the backwards."""
    lay, o, tt = est.layout, est.options, est.time_terms
    more = f", {accumulation_said(str(lay.framework))}" if tt and tt.grad_accumulation_s else ""
    if not reduces_beside_compute(
        str(lay.framework), lay.zero_stage, est.training.deepspeed_overlap_comm
    ):
        return f"dp reductions exposed (DeepSpeed overlap_comm off: on the compute stream){more}"
    return f"dp once-per-step traffic {'overlapped' if o.grad_reduce_overlap else 'exposed'}{more}"


def _nccl_charge(est: Estimate) -> str:
    """Whether the SMs NCCL's collectives hold are charged to the computation they hide under
    (:func:`model.comm_sms.collective_sm_share`, on by default), with each group's ``φ`` in
    force (:attr:`model.estimate.TimeTerms.sm_shares`); empty where none is charged."""
    if not est.options.nccl_sm_charge:
        return "; NCCL's SMs not charged to overlapped computation (--set nccl_sm_charge=false)"
    shares = est.time_terms.sm_shares if est.time_terms else ()
    if not shares:
        return ""
    phis = ", ".join(f"{group} {phi:.3f}" for group, phi in shares)
    return (
        "; the SMs NCCL's collectives hold (NVLS's or the ring's channels) charged to the "
        f"computation they hide under (φ {phis})"
    )


def _p2p_waits(est: Estimate) -> str:
    """Under Megatron-Core's overlapped interleaved schedule, which sends still wait
    (:func:`model.comm.p2p_waiting_sends`); empty elsewhere."""
    lay, o = est.layout, est.options
    if not (o.p2p_overlap and lay.pp > 1 and p2p_overlapped(
        str(lay.framework), str(lay.schedule), lay.virtual_stages
    )):  # fmt: skip
        return ""
    waits = [] if o.p2p_warmup_flush else ["warm-up and cool-down"]
    waits += ["every forward (Megatron-Core ≥ 0.18)"] if o.p2p_forward_send_wait else []
    return f"; interleaved pipeline sends waited: {', '.join(waits) or 'fill and drain only'}"


def tp_block_inputs(est: Estimate) -> str | None:
    """What tensor parallelism keeps of the attention and MLP blocks' all-gathered inputs:
    ``gathered`` (whole on every tp rank, torchtitan's DTensor plan) or ``sharded`` (the sequence
    shard, Megatron-Core's); None without sequence parallelism, where every tp rank holds the
    whole input (:func:`model.memory.keeps_gathered_inputs`)."""
    if not est.layout.sp:
        return None
    return "gathered" if keeps_gathered_inputs(est.layout.framework, est.training) else "sharded"


def elementwise(est: Estimate) -> str:
    """How the layers' elementwise passes (norms, rotary embedding, MLP activation, residual
    adds) run, in time and in memory (:func:`model.elementwise.elementwise_mode`): ``eager``
    (``fsdp2`` without ``torch.compile``, torchtitan's default), ``compiled`` (``fsdp2`` under
    ``compile = true``) or ``fused`` (the other profiles' fused kernels)."""
    return str(elementwise_mode(est.layout.framework, est.training.compile))


def _elementwise_sentence(est: Estimate) -> list[str]:
    """The ``fsdp2`` profile's elementwise mode, as one sentence (none for the other profiles,
    whose layers are fused kernels whatever the recipe says)."""
    mode = elementwise(est)
    if mode == "eager":
        return [
            "elementwise passes eager (fsdp2 without torch.compile, torchtitan's default; "
            "--set compile=true for Inductor's): one PyTorch kernel per operator in the step "
            "time, and the tensors each operator saves (the RMSNorms' FP32 input copies and "
            "rstd, repeat_kv's K/V copies, SDPA's log-sum-exp, SiLU's output) in the "
            "activations where recomputation does not re-run them"
        ]
    if mode == "compiled":
        return [
            "elementwise passes compiled (fsdp2 with torch.compile): one Inductor kernel per "
            "pass in the step time, the GQA K/V repeat copied; the activations' paper count"
        ]
    return []


def _selective_clause(est: Estimate) -> str:
    """What ``recompute selective`` keeps under the profile: torchtitan's op-level policy
    (:mod:`model.op_checkpoint`) or Megatron-Core's recompute modules."""
    if str(est.layout.recompute) != "selective":
        return ""
    if est.layout.framework.op_selective:
        return (
            " (torchtitan's op-level policy: the block input, every other matmul output and "
            "the attention kernel's outputs kept in dense layers)"
        )
    return f" (recompute modules {', '.join(est.training.recompute_modules)})"


def _tp_plan_clause(est: Estimate) -> str:
    plan = tp_block_inputs(est)
    if plan == "gathered":
        return " (blocks' all-gathered inputs kept whole on every tp rank, torchtitan's plan)"
    if plan == "sharded" and est.layout.framework.gathers_block_inputs:
        return " (blocks' inputs kept as the sequence shard, gathered again in backward)"
    return ""


def _masks_clause(est: Estimate) -> str:
    """Which dropout masks the layers keep: the model's (with dropout), Megatron-DeepSpeed's
    TorchScript bias-dropout-add's at p 0 (:data:`model.activation_rows.BIAS_DROPOUT_MASKS`),
    or none."""
    arch = est.model.arch
    if arch is None or arch.dropout:
        return "1-byte dropout masks"
    if str(est.layout.framework) == "deepspeed" and est.training.bias_dropout_fusion:
        return "no dropout (p 0), but 1-byte masks of the TorchScript bias-dropout-add, two a layer"
    return "no dropout (p 0), no masks"


def _activations_sentence(est: Estimate) -> str:
    """How the activations are counted: the paper, FlashAttention, sequence parallelism and the
    tensor-parallel plan, recomputation, the schedule, the convention and the norms."""
    t, lay = est.training, est.layout
    return (
        f"activations: Korthikanti et al. 2022 per-layer tensors, 16-bit, {_masks_clause(est)}; "
        f"FlashAttention {'on' if t.flash_attention else 'off'}; sequence parallelism "
        f"{'on' if lay.sp else 'off'}{_tp_plan_clause(est)}; recompute {lay.recompute}"
        f"{_selective_clause(est)}; "
        f"schedule {lay.schedule}; "
        f"convention {t.activation_convention}"
        + (
            "; memory-efficient norms (keep their output, not their input)"
            if t.memory_efficient_norm
            else ""
        )
    )


def _mfu_sentence(est: Estimate) -> str:
    """The MFU convention and which attention FLOPs it counts."""
    o = est.options
    return f"MFU convention {o.mfu_convention}; attention FLOPs " + (
        "over the (query, key) pairs each layer's mask keeps (causal: s(s+1)/2 per sequence; "
        "fewer for a sliding window or chunks)"
        if o.causal_attention_flops
        else "over the full s×s per layer (no causal masking; windows and chunks save nothing)"
    )


def assumptions(est: Estimate) -> list[str]:
    """Every convention and default behind the figures, as sentences for the output."""
    t, lay, o = est.training, est.layout, est.options
    overlap = ", ".join(f"{k} {v:g}" for k, v in o.overlap.items())
    mech = mechanism(
        lay.framework, lay.zero_stage, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes,
        pipelined=lay.pp > 1, distributed_optimizer=t.distributed_optimizer,
        overlap_comm=t.deepspeed_overlap_comm, multi_rank_allreduce=o.use_multi_rank_bucket_allreduce,
        sp_comm=sp_comm_bytes(t, lay.cp), flat_parameters=t.flat_parameters,
    )  # fmt: skip
    mech = overlapped_mechanism(mech, lay.schedule)  # the memory term's (model.terms.state)
    out = [
        f"framework {lay.framework}: ZeRO-{lay.zero_stage} is {mech.name} ({mech.source})",
        *part_sentences(est.device),
        precision_sentence(est),
        *offload_sentence(est),
        _state_sentence(mech, lay, bool(est.peak.state.gathered_bytes)),
        _capacity_sentence(est),
        _activations_sentence(est),
        loss_sentence(est),
        *_elementwise_sentence(est),
        "total = the peak over the step's phases on the busiest pipeline stage: forward/backward "
        "(model state + gathered units + buffers + layer activations + embedding/output-layer "
        "activations + the largest of the loss's working set, a MoE layer's forward working set "
        "and the layers' backward phase: the recompute transient + context-parallel buffers + "
        "one layer's backward working set, less the output layer's tensors released before it) "
        "or the optimizer step (model state + what the step materialises)",
        "traffic: ring bytes sent per GPU per step; an axis rides NVLink when its group spans at most "
        "one NVLink domain (rank order tp, cp, ep, dp, pp)",
        _time_sentence(est, overlap),
        f"data-parallel traffic: {_dp_sentence(mech, lay)}",
        _mfu_sentence(est),
    ]
    if lay.cp > 1:
        out.append(_cp_sentence(lay))
    if est.model.arch is not None and est.model.arch.moe is not None:
        out += _deepspeed_experts_sentence(lay)
        out += grouped_mm_sentence(est) + dispatcher_kernel_sentence(est)
    if est.model.size_only or est.model.num_params_declared is not None:
        out.append(
            "parameters taken as given and divided evenly over tp·pp (the textbook convention)"
        )
    out += _split_sentences(est)
    if lay.recompute_layers is not None:
        where = "stage" if lay.virtual_stages == 1 else "stage's model chunks (per chunk)"
        out.append(
            "per-stage recomputation: the first "
            f"{', '.join(map(str, lay.recompute_layers))} layers of each {where} fully "
            f"recomputed (Megatron-LM --recompute-method block), the others {lay.recompute}; "
            "each keeps its input and adds one forward in backward"
        )
    return out


def _split_sentences(est: Estimate) -> list[str]:
    """How the layers fall on the pipeline stages, where it is not an even split: as given, the
    framework's own uneven split (:func:`model.split.default_chunk_sizes`), or Megatron's ends
    holding one layer fewer first."""
    lay = est.layout
    out: list[str] = []
    if lay.stage_layers is not None:
        out.append(
            "stage layout as given: layers per model chunk "
            f"{', '.join(map(str, lay.stage_layers))} (model order; stage i holds chunks i, "
            "i + pp, …)"
        )
    elif est.model.arch and isinstance(lay.split_rule, str):
        sizes = default_chunk_sizes(
            est.model.arch.num_layers, lay.pp, lay.virtual_stages, lay.split_rule
        )
        if len(set(sizes)) > 1:  # the framework's own uneven split
            out.append(_FRAMEWORK_SPLITS[lay.split_rule])
    elif est.model.arch and est.model.arch.num_layers % (lay.pp * lay.virtual_stages):
        out.append("uneven pipeline stages: the end stages hold one layer fewer first")
    return out


def _cp_sentence(lay: Layout) -> str:
    """What the layout's context-parallel flavour sends and holds (model.context_parallel)."""
    what = {
        "ring": "each rank's K/V chunk passes cp − 1 hops around the ring per layer (Ring "
        "Attention; Megatron-Core p2p)",
        "all-gather": "K/V all-gathered per layer, re-gathered in backward and dK/dV "
        "reduce-scattered (Llama 3 §3.3.2; Megatron-Core all_gather); each query chunk's output "
        "kept apart",
        "ulysses": "Q, K, V all-to-all over heads before attention and O after, forward and "
        "backward (DeepSpeed-Ulysses; Megatron-Core a2a; cp divides the heads per tp rank)",
        "ulysses-kv-repeat": "as ulysses, each K/V head repeated max(cp // g, 1) times before the "
        "all-to-all (verl's Ulysses: cp may exceed the K/V heads)",
        "a2a+p2p": f"Ulysses inside groups of {lay.cp_a2a}, ring across the {lay.cp // (lay.cp_a2a or 1)} "
        "groups (Megatron-Core a2a+p2p)",
        "pytorch-allgather": "K/V all-gathered once per pass, cp SDPA calls merged in FP32, dK/dV "
        "sent to the next rank in FP32 (PyTorch context_parallel, rotate method allgather)",
        "pytorch-alltoall": "K/V sent cp − 1 hops per pass, cp SDPA calls merged in FP32, dK/dV "
        "sent to the next rank in FP32 (PyTorch context_parallel, rotate method alltoall)",
    }[str(lay.cp_kind)]
    return (
        f"context parallelism {lay.cp_kind} over cp = {lay.cp}: {what}; the sequence in 2·cp "
        "load-balanced chunks; the exchange's buffers counted once, each phase's at the step "
        "where they are live (cp_transient_bytes: what they add beyond the backward working set); "
        "the cp overlap fraction applies to every flavour"
        + ("; both parts timed on the whole cp group's link" if lay.cp_a2a else "")
    )


def _cp_overlap(est: Estimate) -> str:
    """How the roofline clock overlaps the layout's CP flavour (:mod:`model.layer_time`)."""
    lay = est.layout
    if lay.cp == 1:
        return "off"
    return {
        "ring": "ring K/V under the core",
        "all-gather": "all-gather exposed",
        "ulysses": "all-to-alls exposed",
        "ulysses-kv-repeat": "all-to-alls exposed",
        "a2a+p2p": "all-to-alls exposed, ring under the core",
        "pytorch-allgather": "K/V all-gather under the first SDPA call, the last FP32 dK/dV exposed",
        "pytorch-alltoall": "K/V sends under the SDPA calls, the last FP32 dK/dV exposed",
    }[str(lay.cp_kind)]


def _state_sentence(mech: Mechanism, lay: Layout, gathered: bool = True) -> str:
    """Bytes per parameter held whole and sharded, over which replicas; the gathered weights as
    counted (``gathered``: the model state holds them; a size-only model has no layers to gather,
    :func:`model.estimate._notes`)."""
    full = mech.weights_full + mech.grads_full + mech.optimizer_full
    sharded = mech.weights_sharded + mech.grads_sharded + mech.optimizer_sharded
    parts = [f"{full} B/param whole"] if full else []
    if sharded:
        parts.append(f"{sharded} B/param ÷ D")
    if mech.step_sharded:
        parts.append(f"+ {mech.step_sharded} B/param ÷ D during the optimizer step")
    if mech.gathered_what:
        parts.append(
            f"+ gathered weights ({mech.gathered_what})"
            if gathered
            else f"(its gathered weights, {mech.gathered_what}, not counted: see the note)"
        )
    group = (
        "dp·cp/ep"
        if str(lay.framework) == "deepspeed" or lay.expert_tp == lay.tp
        else "tp·dp·cp/(etp·ep)"
    )
    if str(lay.framework) == "fsdp2" and lay.expert_tp != lay.tp:
        group = "tp·dp·cp/ep (torchtitan's efsdp; each expert whole, not split over tp)"
    experts = f", experts over {group} = {lay.expert_shard_degree}" if lay.ep > 1 else ""
    return f"model state: {' '.join(parts)} with D = dp·cp = {lay.shard_degree}{experts}"


def _deepspeed_experts_sentence(lay: Layout) -> list[str]:
    """Under ``deepspeed`` with tp > 1: whether the routed experts are whole on every tp rank
    or sliced over tp, and the Megatron-DeepSpeed flag that chooses it
    (:func:`model.expert_groups.expert_tp_of`)."""
    if str(lay.framework) != "deepspeed" or lay.tp == 1:
        return []
    if lay.expert_tp == 1:
        how = (
            "whole on every tp rank (etp 1, Megatron-DeepSpeed's default; "
            "--enable-expert-tensor-parallelism would split them over tp)"
        )
    else:
        how = f"split over tp (etp {lay.expert_tp}, Megatron-DeepSpeed's --enable-expert-tensor-parallelism)"
    return [
        f"routed experts {how}; their gradients and optimizer state sharded over DeepSpeed's "
        f"expert data-parallel group (dp·cp/ep = {lay.expert_shard_degree})"
    ]


def _dp_sentence(mech: Mechanism, lay: Layout) -> str:
    if lay.framework.physical:
        return "the mechanism's own collectives (per micro-batch where it says so)"
    if lay.zero_stage == 2:
        return (
            "ZeRO-2 reduce-scatters its 1/D gradients every micro-batch and all-gathers the "
            "weights once per step (ZeRO §5.2: gradients held at 1/D are reduced as made)"
        )
    if lay.zero_stage != 3:
        return "one exchange per step (the textbook convention)"
    return (
        "ZeRO-3 gathers the weights for every micro-batch's forward and backward and "
        "reduce-scatters its 1/D gradients every micro-batch (ZeRO §7.2.2's 1.5× the traffic "
        "at one micro-batch a step, m times that at m)"
    )


def _capacity_sentence(est: Estimate) -> str:
    d = est.device
    if not est.layout.framework.physical:
        return f"capacity: {d.memory_bytes / 1e9:g} GB as the vendor states it (the textbook convention)"
    if d.hbm_bytes and d.driver_source:
        have = f"{d.hbm_bytes / 2**20:,.0f} MiB as the driver reports it"
    elif d.hbm_bytes:
        have = f"{d.hbm_bytes / 2**30:g} GiB of HBM"
    else:
        have = f"{d.memory_bytes / 1e9:g} GB as the vendor states it"
    head = f"capacity: {have} less a {d.runtime_reserve_bytes / 2**30:.2f} GiB runtime reserve"
    nccl = (
        "NCCL's communicators counted in the peak"
        + (
            ", with their channels' set-up"
            if est.options.nccl_channel_setup
            else ", without their channels' set-up (--set nccl_channel_setup=false)"
        )
        + ("" if est.options.nccl_nvls else ", without NVLink SHARP (--set nccl_nvls=false)")
    )
    if d.runtime_reserve_bytes != runtime_reserve_for(d.driver_reserved_bytes):
        return f"{head} (as given: --set memory_reserve_gib); {nccl}"
    return (
        f"{head}: the driver's {d.driver_reserved_bytes / 2**20:g} MiB, the CUDA context's "
        f"{CUDA_CONTEXT_BYTES / 2**20:.0f} MiB, cuBLAS workspaces "
        f"{CUBLAS_WORKSPACE_BYTES / 2**20:.0f} MiB and an ASSUMED "
        f"{FRAGMENTATION_ALLOWANCE_BYTES / 2**30:g} GiB fragmentation allowance for the caching "
        "allocator's reserved bytes beyond the tensors (no per-operation source; "
        f"--set memory_reserve_gib replaces it); {nccl}"
    )
