"""The JSON-able form of an :class:`model.estimate.Estimate` (the ``--json`` object of evaluate).

Bytes are exact: ints when whole, floats otherwise; times in seconds; rates as 0–1 fractions.
"""

from __future__ import annotations

from dataclasses import asdict
from fractions import Fraction
from typing import Any

from trainplan.interface.flags import with_flags
from trainplan.interface.launch_split import split_flags
from trainplan.interface.render.assumptions import assumptions, elementwise, tp_block_inputs
from trainplan.interface.render.moe_text import bound_notes, moe_run_dict
from trainplan.interface.render.step_terms import step_terms
from trainplan.model.deepspeed_mechanisms import sp_comm_bytes
from trainplan.model.estimate import Estimate
from trainplan.model.flops import utilisation
from trainplan.model.frameworks import Framework
from trainplan.model.launch_order import launch_order_kept
from trainplan.model.mechanisms import mechanism
from trainplan.model.memory import keeps_gathered_inputs
from trainplan.model.op_rates import params_in_force
from trainplan.model.op_time import tp_overlap_for, tp_overlap_run
from trainplan.model.overlapped_chunks import overlapped_mechanism
from trainplan.model.phases import construction_peak_bytes
from trainplan.model.precision import Precision
from trainplan.model.rank_split import chunk_layers_of, stage_layers_of
from trainplan.model.terms.peak import fit_bytes, reserved_over_capacity
from trainplan.model.terms.step import uses_roofline
from trainplan.model.units import as_json_number

__all__ = [
    "estimate_to_dict",
    "assumptions",
    "mfu_with_attention",
    "hfu_with_attention",
    "bound_notes",
]
_FP8_GATHERS = ("megatron", "fsdp2")  # the profiles that read fp8_param_gather


def _time_model(est: Estimate) -> str:
    return "roofline" if uses_roofline(est.options, est.layout.framework, est.device) else "single"


def _efficiencies(est: Estimate) -> dict[str, Any]:
    """The time model's figures: the roofline's (``roofline``) or the single model's kernel and
    attention efficiencies."""
    flash = est.training.flash_attention
    if _time_model(est) == "single":
        return {
            "kernel_efficiency": est.options.kernel_efficiency,
            "attention_efficiency": est.options.attention_efficiency if flash else None,
        }
    figures = asdict(
        params_in_force(
            est.options.roofline,
            est.device.name,
            est.options.attention_kernel,
            str(est.layout.framework),
        )
    )
    if not flash:
        figures["attention_efficiency"] = None
    return {
        "roofline": figures,
        "tp_comm_overlap": str(
            tp_overlap_run(
                tp_overlap_for(
                    est.layout.framework,
                    est.options.tp_comm_overlap,
                    keeps_gathered_inputs(Framework(est.layout.framework), est.training),
                    launch_order_kept(
                        est.device.part,
                        est.training.moe_run.ep_overlap,
                        est.layout.framework,
                        est.layout.zero_stage,
                    ),
                ),
                est.layout.tp,
                est.layout.sp,
            )
        ),
        "grad_reduce_overlap": est.options.grad_reduce_overlap,
        "p2p_overlap": est.options.p2p_overlap,
        "p2p_warmup_flush": est.options.p2p_warmup_flush,
        "p2p_forward_send_wait": est.options.p2p_forward_send_wait,
        "nccl_sm_charge": est.options.nccl_sm_charge,
        "nccl_channel_setup": est.options.nccl_channel_setup,
        "nccl_nvls": est.options.nccl_nvls,
        "use_multi_rank_bucket_allreduce": est.options.use_multi_rank_bucket_allreduce,
        "lp_grads_set_to_none": est.options.lp_grads_set_to_none,
        "grad_stats_group": est.options.grad_stats_group,
        "grad_clip_scaling": est.options.grad_clip_scaling,
        "loss_scaling": est.options.loss_scaling,
        "tp_comm_overlap_cfg": est.options.tp_comm_overlap_cfg,
    }


def _n(value: Fraction | int | float | None) -> int | float | None:
    return None if value is None else as_json_number(value)


def mfu_with_attention(est: Estimate) -> float | None:
    """MFU under the ``6n+attention`` convention (PaLM Appendix B: 6·N plus the attention FLOPs,
    halved for the causal mask when ``causal_attention_flops``), whatever convention the estimate
    uses — printed beside a ``6n`` MFU, which leaves attention out and so understates long
    contexts (Llama 3's Table 4 counts it), with the HFU of the same convention
    (:func:`hfu_with_attention`). A 0–1 fraction; None without dimensions or a step time."""
    return _utilisation(est, est.flops.with_attention_model_flops if est.flops else None)


def hfu_with_attention(est: Estimate) -> float | None:
    """HFU under the same ``6n+attention`` convention (model FLOPs + recomputed FLOPs,
    :attr:`model.flops.StepFlops.with_attention_hardware_flops`): never below
    :func:`mfu_with_attention`."""
    return _utilisation(est, est.flops.with_attention_hardware_flops if est.flops else None)


def _utilisation(est: Estimate, flops: int | None) -> float | None:
    if flops is None or est.step_s is None:
        return None
    return utilisation(flops, est.step_s, est.layout.num_gpus, est.device.peak_flops_per_s)


def loss_beyond_recompute(acts: Any) -> Fraction:
    """What the last stage's loss working set adds to the peak beyond the layers' backward phase
    (the recompute transient, the context-parallel buffers and the working set, less the output
    layer's released bytes; they do not coincide, the peak holds the larger):
    ``max(loss − layer backward, 0)``
    (:attr:`model.terms.activations.StageActivations.loss_over_bytes`), so that the memory lines
    sum to the total."""
    return Fraction(acts.loss_over_bytes)


def _backward_phase(acts: Any) -> dict[str, Any]:
    """The lines of the layers' backward phase beside the loss's (None for a size-only model):
    the loss beyond it, one layer's backward working set, the output layer's released bytes, and
    a MoE layer's forward working set beyond both phases (:attr:`model.terms.activations.
    StageActivations.moe_over_bytes`) and DeepSpeed's causal mask being built beyond all three
    (:attr:`model.terms.activations.StageActivations.load_over_bytes`)."""
    return {
        "loss_transient_bytes": _n(loss_beyond_recompute(acts)) if acts else None,
        "backward_working_bytes": _n(acts.backward_working_bytes) if acts else None,
        "output_layer_freed_bytes": _n(acts.output_layer_freed_bytes) if acts else None,
        "moe_forward_transient_bytes": _n(acts.moe_over_bytes) if acts else None,
        "batch_load_transient_bytes": _n(acts.load_over_bytes) if acts else None,
    }


def _gathered_what(est: Estimate) -> str | None:
    """What ``zero3_gathered_bytes`` holds, in words (:attr:`model.mechanisms.Mechanism.
    gathered_what` of the layout's framework and ZeRO stage); None where nothing is gathered."""
    lay, t = est.layout, est.training
    mech = mechanism(
        lay.framework, lay.zero_stage, t.weight_bytes, t.gradient_bytes, t.optimizer_bytes,
        pipelined=lay.pp > 1, distributed_optimizer=t.distributed_optimizer,
        overlap_comm=t.deepspeed_overlap_comm, sp_comm=sp_comm_bytes(t, lay.cp),
    )  # fmt: skip
    mech = overlapped_mechanism(mech, lay.schedule)  # the memory term's (model.terms.state)
    return mech.gathered_what if est.peak.state.gathered_bytes else None


def fit_figure(est: Estimate, allocator_retries_ok: bool = False) -> int | float | None:
    """``memory.fit_bytes``: the most any stage's GPU must find in its usable capacity by the
    rule the search, the per-stage search and the frontier fit layouts by
    (:func:`model.terms.peak.fit_bytes`, one sum: :func:`model.terms.peak.fit_total`) — the
    allocated peak, the side streams' pools and the communicators; with
    ``allocator_retries_ok`` without the pools (then ``memory.total_bytes``). Bytes."""
    return _n(max(fit_bytes(st, allocator_retries_ok) for st in est.stages))


def _memory(est: Estimate) -> dict[str, Any]:
    st, cap, total = est.peak, est.capacity_bytes, est.total_bytes
    acts = st.activations
    built = construction_peak_bytes(
        est.layout.framework, est.layout.zero_stage, st.dense_params + st.expert_params,
        est.training.weight_bytes,
    )  # fmt: skip
    return {
        "busiest_stage": st.stage,
        "weights_bytes": _n(st.state.weights_bytes),
        "gradients_bytes": _n(st.state.gradients_bytes),
        "optimizer_bytes": _n(st.state.optimizer_bytes),
        "model_state_bytes": _n(st.state.total_bytes),
        "zero3_gathered_bytes": _n(st.state.gathered_bytes),
        "zero3_gathered_what": _gathered_what(est),
        "weight_cache_bytes": _n(st.state.weight_cache_bytes),
        "dispatch_buffer_bytes": _n(st.state.dispatch_buffer_bytes),
        "host_bytes": _n(est.host_bytes),
        "host_bytes_per_node": _n(est.host_bytes * est.device.gpus_per_node),
        "host_capacity_bytes": est.device.host_memory_bytes,
        "host_fits": est.host_fits,
        "activations_bytes": _n(acts.layers_bytes) if acts else None,
        "embedding_activations_bytes": _n(acts.embedding_bytes) if acts else None,
        "recompute_transient_bytes": _n(acts.recompute_transient_bytes) if acts else None,
        **_backward_phase(acts),
        "construction_bytes": _n(built),
        "pipeline_output_bytes": _n(acts.pipeline_output_bytes) if acts else None,
        "cp_transient_bytes": _n(acts.cp_transient_bytes) if acts else None,
        "activation_offload_buffer_bytes": _n(acts.offload_buffer_bytes) if acts else None,
        "activation_offload_host_bytes": _n(acts.offload_host_bytes) if acts else None,
        "buffers_bytes": _n(st.state.buffers_bytes),
        "optimizer_step_bytes": _n(st.state.step_bytes),
        "persistent_buffers_bytes": _n(st.persistent_buffers_bytes),
        "communicator_bytes": _n(st.communicator_bytes),
        "userbuffer_bytes": _n(st.userbuffer_bytes),
        "allocated_bytes": _n(st.allocated_bytes),
        "stream_pool_bytes": _n(st.stream_pool_bytes),
        "reserved_bytes": _n(st.reserved_bytes),
        "allocator_retries": bool(reserved_over_capacity(est.stages, cap)),
        "reserved_over_bytes": _n(reserved_over_capacity(est.stages, cap)),
        "fit_bytes": fit_figure(est),
        "total_bytes": _n(total),
        "peak_phase": st.peak_phase,
        "steady_bytes": _n(st.steady_bytes),
        "capacity_bytes": cap,
        "capacity_unit": est.device.memory_unit
        if not est.layout.framework.physical or not est.device.hbm_bytes
        else "GiB",
        "runtime_reserve_bytes": est.device.runtime_reserve_bytes
        if est.layout.framework.physical
        else 0,
        "fits": total <= cap,
        "fits_covers": "model state and activations" if acts else "model state only",
        "overflow_bytes": _n(max(total - cap, Fraction(0))),
        "activations_unavailable": None
        if acts
        else "size-only model: no dimensions to derive activations from",
    }


def _stage_rows(est: Estimate) -> list[dict[str, Any]]:
    rows = []
    for s in est.stages:
        acts = s.activations
        rows.append(
            {
                "stage": s.stage,
                "stage_layers": s.num_layers,
                "stage_state_bytes": _n(s.state.total_bytes),
                "stage_activation_bytes": _n(acts.layers_bytes) if acts else None,
                "stage_other_activation_bytes": _n(
                    acts.embedding_bytes
                    + acts.recompute_transient_bytes
                    + acts.backward_working_bytes
                    - acts.output_layer_freed_bytes
                    + loss_beyond_recompute(acts)
                    + acts.cp_transient_bytes
                    + acts.offload_buffer_bytes
                    + acts.load_over_bytes
                )
                if acts
                else None,
                "stage_in_flight": _n(acts.microbatches_in_flight) if acts else None,
                "stage_total_bytes": _n(s.total_bytes),
            }
        )
    return rows


def estimate_to_dict(est: Estimate, per_stage: bool = False) -> dict[str, Any]:
    """The evaluate ``--json`` object (keys listed in docs/reference/json.md)."""
    acts = est.peak.activations
    out: dict[str, Any] = {
        "num_gpus": est.layout.num_gpus,
        "model": {
            "name": est.model.name,
            "num_params": est.num_params,
            "num_active_params": est.num_active_params,
            "padded_vocab_size": est.padded_vocab_size,
            "mtp_layers": 0 if est.model.arch is None else est.model.arch.mtp_layers,
            "source": est.model.source,
        },
        "gpu": {
            "name": est.device.name,
            "memory_bytes": est.device.memory_bytes,
            "peak_flops_per_s": est.device.peak_flops_per_s,
            "source": est.device.source,
            "file": est.device.origin or None,
            "part": est.device.part,
        },
        "layout": _layout(est),
        "memory": _memory(est),
        "zero_table": [
            {
                "zero_stage": r.zero_stage,
                "model_state_bytes": _n(r.model_state_bytes),
                "reduction": float(r.reduction),
                "dp_bytes_per_step": _n(r.dp_bytes_per_step),
            }
            for r in est.zero_table
        ],
        "traffic": _traffic(est),
        "pipeline": {
            "bubble_fraction": float(est.bubble_fraction),
            "bubble_ratio": float(est.bubble_ratio),
            "microbatches_in_flight": _n(acts.microbatches_in_flight) if acts else None,
            "megatron_split_flags": split_flags(est.model.arch, est.layout),
            "stage_microbatch_s": [
                {"stage": i, "forward_s": fw, "backward_s": bw}
                for i, (fw, bw) in enumerate(est.time_terms.stage_s if est.time_terms else ())
            ],
        },
        "flops": None
        if est.flops is None
        else {
            "model_flops": est.flops.model_flops,
            "hardware_flops": est.flops.hardware_flops,
            "pack_model_flops": est.flops.pack_model_flops,
            "convention": str(est.options.mfu_convention),
        },
        "time": _time(est),
        "assumptions": assumptions(est),
        "notes": [with_flags(n) for n in (*est.notes, *bound_notes(est))],
    }
    if per_stage:
        out["stages"] = _stage_rows(est)
    return out


def _etp(est: Estimate) -> int:
    """The layout's expert tensor-parallel degree; tp for a model without routed experts, which
    has no expert degree of its own, so every profile writes its layout line alike (deepspeed's
    etp 1 default is the experts')."""
    arch = est.model.arch
    return est.layout.expert_tp if arch is not None and arch.moe else est.layout.tp


def _layout(est: Estimate) -> dict[str, Any]:
    """The ``layout`` object: the layout's fields, the batch and the recipe as evaluated."""
    lay, t = est.layout, est.training
    framework, fp8 = str(lay.framework), t.precision is Precision.FP8
    megatron = framework == "megatron"
    fsdp2_pp = framework == "fsdp2" and lay.pp > 1
    modules = framework in ("megatron", "textbook") and str(lay.recompute) == "selective"
    zero1 = megatron and lay.zero_stage >= 1
    ds12 = framework == "deepspeed" and lay.zero_stage in (1, 2)
    sac_fp8 = framework == "fsdp2" and fp8 and str(lay.recompute) == "selective"
    return {
        "dp": lay.dp,
        "tp": lay.tp,
        "pp": lay.pp,
        "cp": lay.cp,
        "cp_kind": str(lay.cp_kind),
        "cp_a2a": lay.cp_a2a,
        "ep": lay.ep,
        "etp": _etp(est),
        "zero_stage": lay.zero_stage,
        "framework": str(lay.framework),
        "optimizer": str(lay.optimizer),
        "recompute": str(lay.recompute),
        "recompute_layers": (None if lay.recompute_layers is None else list(lay.recompute_layers)),
        "micro_batch_size": lay.micro_batch_size,
        "global_batch_size": t.global_batch_size,
        "num_microbatches": est.num_microbatches,
        "schedule": str(lay.schedule),
        "virtual_stages": lay.virtual_stages,
        "seq_len": t.seq_len,
        "sequence_parallel": lay.sp,
        "tp_block_inputs": tp_block_inputs(est),
        "elementwise": elementwise(est),
        "flash_attention": t.flash_attention,
        "activation_convention": t.activation_convention,
        "memory_efficient_norm": t.memory_efficient_norm,
        **_where(fsdp2_pp, "pipeline_frees_stage_tensors", t.pipeline_frees_stage_tensors),
        **_where(fsdp2_pp, "pipeline_keeps_outputs", t.pipeline_keeps_outputs),
        "precision": str(t.precision),
        "fp8_recipe": None if t.fp8_recipe is None else str(t.fp8_recipe),
        "gradient_bytes": t.gradient_bytes,
        "optimizer_bytes_per_param": t.optimizer_bytes,
        "stage_layers": stage_layers_of(est),
        "chunk_layers": chunk_layers_of(est),
        "rank_order": "-".join(lay.rank_order),
        "offload_activations": list(t.offload.activations),
        **_where(modules, "recompute_modules", list(t.recompute_modules)),
        **_where(fp8 and framework in _FP8_GATHERS, "fp8_param_gather", t.fp8_param_gather),
        **_where(megatron, "cross_entropy_fusion_impl", t.cross_entropy_fusion_impl),
        **_where(megatron and lay.zero_stage == 3, "fsdp_double_buffer", t.fsdp_double_buffer),
        "muon_tp_mode": t.muon_tp_mode,
        **_where(zero1, "distributed_optimizer", str(t.distributed_optimizer)),
        **_where(ds12, "deepspeed_overlap_comm", t.deepspeed_overlap_comm),
        **_where(framework == "deepspeed", "bias_dropout_fusion", t.bias_dropout_fusion),
        **_stack_keys(est),
        **_where(sac_fp8, "sac_saves_scaled_mm", t.sac_saves_scaled_mm),
        **_where(fp8, "fp8_activation_storage", t.fp8_activation_storage),
        "document_lengths": _documents(t),
        "moe": moe_run_dict(t.moe_run),
    }


def _stack_keys(est: Estimate) -> dict[str, Any]:
    """``seq_parallel_communication_data_type`` where it is read (``deepspeed`` with cp > 1,
    :func:`model.deepspeed_mechanisms.sp_comm_bytes`) and ``flat_parameters`` where it is
    (``fsdp2`` with pp 1, :func:`model.key_rules.check_flat_parameters`), else null."""
    lay, t, key = est.layout, est.training, "seq_parallel_communication_data_type"
    ulysses = str(lay.framework) == "deepspeed" and lay.cp > 1
    fsdp1 = str(lay.framework) == "fsdp2" and lay.pp == 1
    return _where(ulysses, key, t.seq_parallel_communication_data_type) | _where(
        fsdp1, "flat_parameters", t.flat_parameters
    )


def _where(applies: bool, key: str, value: Any) -> dict[str, Any]:
    """``{key: value}`` where the setting applies to the layout's framework and recompute, else
    ``{key: None}``: every object has the same keys, and a setting the run does not read is null
    (docs/reference/json.md), never a value that looks as if it were used."""
    return {key: value if applies else None}


def _traffic(est: Estimate) -> list[dict[str, Any]]:
    """The ``traffic`` rows: per collective, its bytes, link, seconds and overlap."""
    return [
        {
            "axis": r.traffic.axis,
            "collective": r.traffic.collective,
            "group_size": r.traffic.group_size,
            "bytes_per_step": _n(r.traffic.bytes_per_step),
            "microbatch_bytes": _n(r.traffic.microbatch_bytes),
            "link": r.link,
            "bandwidth_bytes_per_s": r.bandwidth_bytes_per_s,
            "seconds": r.seconds,
            "overlap": r.overlap,
            "exposed_seconds": r.exposed_seconds,
            "optimizer_step": r.optimizer_step,
        }
        for r in est.traffic
    ]


def _time(est: Estimate) -> dict[str, Any]:
    """The ``time`` object: the step's terms (s) and their list ``step_terms``
    (:func:`step_terms`), MFU and HFU, tokens per second."""
    t = est.training
    out = {
        "time_model": _time_model(est),
        "compute_s": est.compute_s,
        "bubble_s": None if est.time_terms is None else est.time_terms.bubble_s,
        "exposed_comm_s": est.exposed_comm_s,
        "optimizer_s": None if est.time_terms is None else est.time_terms.optimizer_s,
        "offload_s": est.time_terms.offload_s if est.time_terms else None,
        "grad_accumulation_s": est.time_terms.grad_accumulation_s if est.time_terms else None,
        "activation_offload_s": est.time_terms.activation_offload_s if est.time_terms else None,
        "step_s": est.step_s,
        "mfu": est.mfu,
        "mfu_pack": est.mfu_pack,
        "mfu_with_attention": mfu_with_attention(est),
        "hfu": est.hfu,
        "hfu_with_attention": hfu_with_attention(est),
        "tokens_per_s": None
        if est.step_s is None
        else t.global_batch_size * t.seq_len / est.step_s,
        **_efficiencies(est),
    }
    return {**out, "step_terms": step_terms(out, str(est.layout.framework))}


def _documents(t: Any) -> list[list[Any]] | None:
    """The packed documents' histogram as [[length, count], …] (None: unpacked)."""
    if t.documents is None:
        return None
    return [[n, w] for n, w in zip(t.documents.lengths, t.documents.weights, strict=True)]
