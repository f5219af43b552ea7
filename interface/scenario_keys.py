"""``--set KEY=VALUE``: any scenario-file key on the command line, read as a line of a scenario
file and checked by the file's own checks.

``KEY=VALUE`` is read as the TOML line ``KEY = VALUE`` (:mod:`tomllib`, as
:func:`interface.scenario_file.load_scenario` reads a file); a value that is not TOML by itself (``rail``,
``4,000,000``, ``core_attn;layernorm``) is the text as typed, as if quoted. A dotted key sets
one entry of a table (``overlap.dp=0.5``, ``gpu_hour_price.H100-SXM=2.5``). The keys then go
through :func:`interface.scenario_file.check_scenario` under their tables, so a value is refused by
the same rule and with the same line as in a file, and numbers have the one grammar of every
input (``4,000,000`` is one number). The option repeats; a key set twice with different values
is refused, and so is a key that a flag of the command also gives (:func:`merge`).

Most users never set the keys whose flags were moved off the command line
(:data:`interface.flags.MOVED_FLAGS`): their help lives here (:data:`KEY_HELP`), the others'
on their flags.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

from trainplan.interface.flags import flag_for
from trainplan.interface.scenario_file import (
    CLUSTER_KEYS,
    CONSTRAINT_KEYS,
    SPACE_KEYS,
    VALUE_KINDS,
    check_scenario,
    closest_key,
    switch_word,
)
from trainplan.model.errors import InputError
from trainplan.model.frameworks import DEFAULT_RUNTIME_RESERVE_BYTES
from trainplan.model.units import shown_text
from trainplan.optimizer.case import DEFAULT_GPU
from trainplan.topology.accelerators import load_accelerators

__all__ = [
    "SEARCH_KEYS",
    "EVALUATE_KEYS",
    "KEY_HELP",
    "closest_key",
    "read_sets",
    "read_line",
    "merge",
    "table_of",
]

SEARCH_KEYS = frozenset(VALUE_KINDS) - {"description", "source"}
"""What ``--set`` takes on search and frontier: every key of a scenario file (but its notes)."""
EVALUATE_KEYS = frozenset(CLUSTER_KEYS)
"""What ``--set`` takes on evaluate: the ``[cluster]`` table's keys (the recipe, links, time model
and conventions of one layout; the search's space has evaluate's own flags)."""


def _default_reserve() -> str:
    """The default reserve as the help states it: the default accelerator's (its driver capture,
    :func:`model.hardware.runtime_reserve_for`) and, for a part with no capture,
    :data:`model.frameworks.DEFAULT_RUNTIME_RESERVE_BYTES`, in GiB."""
    gpu = load_accelerators()[DEFAULT_GPU]
    return (
        f"the accelerator's: {gpu.runtime_reserve_bytes / 2**30:.2f} on the {DEFAULT_GPU}, "
        f"{DEFAULT_RUNTIME_RESERVE_BYTES / 2**30:.2f} on a part with no driver capture"
    )


KEY_HELP: dict[str, str] = {
    "nvlink_domain": "GPUs per NVLink domain; default the accelerator's. Given alone: the job "
    "owns whole domains (no Slurm segments).",
    "segment_gpus": "GPUs per Slurm segment (sbatch --segment x GPUs per node) the ranks fill, "
    "each in one NVLink domain; default on GB200/GB300 NVL72 as NVIDIA's benchmark launcher "
    "sets it: the whole job up to one rack, else the most trays up to 18 dividing the job "
    "(model.segments); 0: none, the ranks fill whole domains.",
    "nvlink_gbps": "NVLink GB/s per GPU per direction; default the accelerator's.",
    "scaleout_gbps": "Scale-out NIC GB/s per GPU per direction; default the accelerator's.",
    "fabric": "Links from the two-tier rule (default) or a cluster graph's bottlenecks.",
    "pod_size": "GPUs per pod (graph fabrics).",
    "oversubscription": "Scale-out oversubscription above a pod (>= 1).",
    "host_link_gbps": "GPU-host link, GB/s per GPU per direction (default: the accelerator "
    "table's).",
    "host_memory_gbps": "Host memory bandwidth per GPU, GB/s: the most the CPU optimizer step "
    "streams at, its cores allowing (default: the table's reference node).",
    "memory_reserve_gib": "GiB of each GPU kept out of the model's reach under a physical "
    "framework: the driver, the CUDA context, the cuBLAS workspaces and the allocator's "
    f"fragmentation (default {_default_reserve()}). NCCL's communicator buffers are not in it: "
    "they are counted per layout, by process group.",
    "time_model": "roofline (default for megatron, deepspeed, fsdp2): every operation on the "
    "roofline, collectives by mechanism; single: one kernel efficiency and per-axis overlaps "
    "(textbook always uses it).",
    "gemm_efficiency": "Roofline: fraction of peak of a GEMM's main loop; default fitted per "
    "accelerator generation (model.roofline).",
    "hbm_efficiency": "Roofline: fraction of the HBM bandwidth memory-bound kernels reach (0.9).",
    "scaleup_efficiency": "Roofline: fraction of NVLink bandwidth collectives reach (0.8, "
    "NCCL's figure).",
    "scaleout_efficiency": "Roofline: fraction of the NIC's rate collectives reach (0.96, "
    "NCCL's figure).",
    "attention_efficiency": "Fraction of peak of the FlashAttention core; default 0.35 on "
    "Hopper (FlashAttention-2), the GEMM rule (single: the kernel efficiency) on A100.",
    "tp_comm_overlap": "Roofline: none (Megatron-LM 2021), async (backward collectives under "
    "the gradient GEMMs; default), full (Transformer Engine userbuffers).",
    "attention_kernel": "Roofline: the attention kernel whose published curves time the "
    "attention core by sequence length and head size (default: Transformer Engine's choice, "
    "cudnn on Hopper and Blackwell, flash-attention-2 on A100; PyTorch SDPA runs "
    "flash-attention-2).",
    "tp_comm_overlap_cfg": "Roofline, tp_comm_overlap full: Transformer Engine's userbuffers "
    "configuration, each overlapped GEMM's method, SMs and SM margin (default te: Transformer "
    "Engine's own, what Megatron-LM runs without --tp-comm-overlap-cfg; te-1: before Transformer "
    "Engine 2.0; or a Megatron Bridge or NeMo launcher config by name, "
    "model.userbuffers_gemm.UB_CONFIGS).",
    "grad_reduce_overlap": "Roofline: overlap the once-per-step gradient reduction and weight "
    "gather with compute (default true; Megatron-Core --overlap-grad-reduce).",
    "p2p_overlap": "Roofline: run the pipeline's sends beside computation where the interleaved "
    "schedule does (default true; Megatron-Core overlap_p2p_comm with virtual stages).",
    "p2p_warmup_flush": "Roofline, megatron interleaved: run the warm-up and cool-down sends "
    "asynchronously too (default false; Megatron-LM --overlap-p2p-communication-warmup-flush, "
    "written in the launch flags when true; Megatron-Core before 0.10 behaves as true).",
    "p2p_forward_send_wait": "Roofline, megatron interleaved: each forward send is waited on "
    "right after it is posted (default true: Megatron-Core 0.18 and later, which the launch "
    "flags target; false: earlier Megatron-Core).",
    "nccl_sm_charge": "Roofline: charge the SMs NCCL's channels hold (NVLink SHARP's or the "
    "ring's, by the algorithm NCCL runs) to the computation an overlapped data-parallel or "
    "asynchronous tensor-parallel collective or NCCL expert all-to-all hides under (default "
    "true: measured per operation on an H200; false charges nothing; "
    "docs/time-model-sources.md).",
    "nccl_channel_setup": "Memory: count the device allocations NCCL makes to set up each "
    "communicator's channels, 2 MiB each, 196 MiB inside an H100 node (32 channels), 100 MiB "
    "across nodes (16) (default true; docs/memory-mechanisms.md, NCCL).",
    "nccl_nvls": "NCCL's NVLink SHARP on parts with it (NCCL_NVLS_ENABLE): its buffers in each "
    "ring communicator's bytes, 258 MiB on 8 H100s, and the all-reduce's speed-up in the step "
    "time (default true; false: NCCL_NVLS_ENABLE=0; docs/memory-mechanisms.md, NCCL).",
    "grad_stats_group": "Memory, megatron ZeRO ≥ 1: the group the distributed optimizer reduces "
    "its grad norm and zero count over: intra_dist_opt_instance (default, today's Megatron-Core: "
    "a world-sized communicator of its own, since Megatron-LM 8c1e094afe of 2025-04) or world "
    "(Megatron-Core before it, and Apex's DistributedFusedAdam under NeMo: the default group, "
    "no communicator more).",
    "use_multi_rank_bucket_allreduce": "deepspeed ZeRO-1/2: DeepSpeed's zero_optimization."
    "use_multi_rank_bucket_allreduce, each gradient bucket all-reduced (default true, DeepSpeed "
    "0.12.4 and later); false: the older reduce to each owning rank, a reduce-scatter's bytes.",
    "grad_clip_scaling": "Step time, megatron: when the gradient clip scales the FP32 gradients: "
    "every_step (default, today's Megatron-Core, since Megatron-LM 3d87bfc1b7 of 2026-04: 8 B an "
    "element every step) or above_limit (Megatron-LM before it: only steps whose norm exceeds "
    "--clip-grad; charged as the steady state under the clip, no pass; docs/time-model-sources.md).",
    "loss_scaling": "Step time, megatron: FP16 with a loss scale (--fp16 with --loss-scale or the "
    "dynamic scaler): the optimizer unscales every FP32 gradient every step, 8 B an element "
    "(default false: BF16, no scaler; docs/time-model-sources.md).",
    "lp_grads_set_to_none": "deepspeed BF16_Optimizer: clear_lp_grads frees each BF16 gradient "
    "before a backward (true: DeepSpeed of 2022-04 to 2025-03) rather than zeroing it and adding "
    "into it (default false: today's DeepSpeed; docs/time-model-sources.md).",
    "kernel_efficiency": "Single time model: fraction of peak in kernels; default calibrated "
    "per accelerator generation and hidden size (model.timing.kernel_efficiency_for).",
    "overlap": "Single time model: the fraction of each axis's traffic hidden behind compute, "
    "a table (overlap.dp=0.5; in a file overlap = { dp = 0.5 }).",
    "activation_convention": "paper (Korthikanti, default) or pytorch (adds what PyTorch "
    "kernels keep; measured).",
    "causal_attention_flops": "true: count attention FLOPs over the (query, key) pairs the "
    "causal mask, window or chunks keep; false: over the full s² (default: the pairs with "
    "FlashAttention).",
    "vocab_multiple": "Pad V to a multiple of this × tp (a whole number >= 1); default the "
    "framework's: megatron 128 (make_vocab_size_divisible_by), the others whole rows per tp "
    "rank.",
    "gradient_dtype": "Gradient accumulation and reduction dtype, bf16 or fp32 (Megatron-LM "
    "--accumulate-allreduce-grads-in-fp32; Llama 3 §3.3.2). Default: the framework's "
    "(megatron fp32 main_grad, fsdp2 fp32 reduction, deepspeed and textbook bf16).",
    "optimizer_dtype": "Adam moments' dtype, fp32 or bf16 (Megatron-Core --exp-avg-dtype and "
    "its second moment; DeepSeek-V3 keeps them in BF16). Default fp32.",
    "master_weights": "Keep an FP32 master copy of the weights in the optimizer (default true).",
    "compile": "fsdp2 (torchtitan): torch.compile of each block, its norms, rotary embedding and "
    "SwiGLU fused by Inductor; false runs them as PyTorch's eager operators with their FP32 "
    "upcasts (default false, torchtitan's). Refused under megatron, deepspeed and textbook, "
    "whose layers are fused kernels.",
    "memory_efficient_norm": "Norms keep their output, not their input (Apex memory_efficient, "
    "Megatron-LM --memory-efficient-layer-norm): 2 fewer S·h tensors per layer.",
    "pipeline_frees_stage_tensors": "fsdp2 with pp > 1: the pipeline runtime frees each stage's "
    "input and output tensors (Llama 3 §3.3.2) instead of keeping PyTorch pipelining's stage "
    "outputs, receive buffers and last-stage outputs, and does not free and gather model chunks "
    "as PyTorch's multi-stage runtime does (Meta's runtime; default false).",
    "pipeline_keeps_outputs": "fsdp2 with pp > 1: the last stage keeps every micro-batch's logits "
    "until the next step, as torchtitan did before 2025-10-22 (e5ef99aab; its trainer now passes "
    "return_outputs=False). Default false: today's torchtitan.",
    "tp_block_inputs": "fsdp2 with tp > 1: what tensor parallelism keeps of each attention and "
    "MLP block's all-gathered input for backward. gathered (the default): the whole input on "
    "every tp rank, torchtitan's DTensor plan; sharded: the sequence shard, gathered again in "
    "backward, as FSDP beside Megatron-style sequence parallelism (how Meta ran Llama 3 405B). "
    "Refused under megatron, deepspeed and textbook (they keep the shard), with tp 1 and "
    "without sequence parallelism.",
    "moe_capacity_factor": "MoE: tokens an expert takes from a rank, × the mean (Megatron-Core "
    "--moe-expert-capacity-factor, DeepSpeed capacity_factor); tokens over it are dropped. "
    "Default dropless.",
    "moe_pad_to_capacity": "MoE with a capacity factor: pad every expert's input to its "
    "capacity (Megatron-Core --moe-pad-expert-input-to-capacity, DeepSpeed drop_tokens): "
    "E x C rows computed and sent whatever the routing.",
    "moe_imbalance": "MoE: routed rows the busiest expert-parallel rank receives / the mean "
    "(>= 1; default 1, balanced). Sets that rank's expert GEMMs, all-to-all receive and the "
    "memory of the rows its experts receive. One figure for every ep a search tries: "
    "measure it at the ep you run (fewer ranks hold more experts each and are less uneven; "
    "at ep 1 it has no effect).",
    "moe_node_limit": "MoE with the deepep dispatcher: nodes a token's experts may span "
    "(DeepSeek-V3's node-limited routing, M = 4; Megatron-Core's --moe-router-group-topk with "
    "its --moe-router-num-groups = nodes).",
    "moe_dispatcher": "MoE token dispatcher: alltoall (NCCL; every routed copy sent by itself; "
    "the default), deepep (DeepEP normal kernels: one copy per destination rank; across nodes "
    "one per remote node, forwarded over NVLink once per rank; resident buffers) or hybridep "
    "(Megatron-Core's HybridEP: the same, NVLink domains as the nodes). deepep runs under "
    "megatron (flex) and fsdp2 (torchtitan), hybridep under megatron.",
    "moe_ep_overlap": "megatron only: what hides the expert all-to-all. "
    "moe_shared_expert_overlap: the shared experts run beside the forward dispatch and "
    "combine; overlap_moe_expert_parallel_comm: one micro-batch's all-to-alls under another's "
    "compute (combined 1F1B; needs interleaving when pp > 1, no full recompute). Default none.",
    "offload_activations": "Modules whose saved activations go to the host between forward and "
    "backward, named as Megatron-Core's --offload-modules names them (attn_norm, qkv_linear, "
    "core_attn, attn_proj, mlp_norm, expert_fc1, moe_act; its fine-grained activation offloading); a "
    "list or text with ; between the names. Copies overlap the next layer's compute; "
    "recompute none or selective.",
    "cpu_offloading_num_layers": "megatron, pp 1, recompute none, dense layers: this many "
    "transformer layers (the first ones) keep their saved activations on the host between "
    "forward and backward, as Megatron-Core's --cpu-offloading-num-layers does through "
    "Transformer Engine's CPU offload; the copies overlap the other layers' compute. Default 0.",
    "recompute_modules": "What recompute selective recomputes, named as Megatron-Core's "
    "--recompute-modules names them (core_attn, layernorm, mla_up_proj, mlp, moe_act, moe, "
    "shared_experts); a list or text with ; between the names; default core_attn. "
    "Megatron-Core and textbook profiles only.",
    "cross_entropy_fusion_impl": "megatron: which cross entropy the last stage runs, named as "
    "Megatron Bridge names it. none (the default, Megatron-LM's): the unfused vocab-parallel loss "
    "(an FP32 copy of the logits and its softmax kept for backward); native "
    "(--cross-entropy-loss-fusion): Megatron-Core's fused kernels, the same memory in fewer "
    "passes; te (--cross-entropy-fusion-impl te, Megatron Bridge's performance recipes): "
    "Transformer Engine's loss, which writes the gradient into the BF16 logits and keeps only "
    "them.",
    "fp8_param_gather": "FP8 primary weights (Megatron-Core --fp8-param-gather, on in NeMo's "
    "FP8 current scaling recipe): the linear weights are 1 B FP8 tensors and only their "
    "transpose is cached. Under fsdp2, torchao's FP8 all-gather (torchtitan's "
    "enable_fsdp_float8_all_gather with precompute_float8_dynamic_scale_for_fsdp): the linear "
    "weights are cast to FP8 before FSDP gathers them, 1 B an element, and not cast again in "
    "the GEMMs; fp8_recipe tensorwise, dense models, dp > 1. Needs precision fp8.",
    "fsdp_double_buffer": "megatron ZeRO-3 (Megatron-FSDP): --fsdp-double-buffer, persistent "
    "pools of two layer units for the gathered weights and the gradient buckets (forced by "
    "--nccl-ub; Megatron Bridge's Llama 3 70B recipes on GB200/B200/GB300 set it). Without it "
    "the reduce-scatter queue keeps up to four layers' gradient buckets in backward. Default "
    "false.",
    "deepspeed_overlap_comm": "deepspeed ZeRO-1/2: DeepSpeed's zero_optimization.overlap_comm "
    "(default false, DeepSpeed's own default below ZeRO-3): true reduces the gradient buckets on "
    "a side stream beside the backward and holds a second IPG bucket; false reduces them on the "
    "compute stream, every reduction exposed. ZeRO-3 always overlaps (DeepSpeed's default there).",
    "bias_dropout_fusion": "deepspeed: Megatron-DeepSpeed's TorchScript bias-dropout-add "
    "(default true, its default): each of a layer's two residual adds keeps a 1-byte mask of "
    "the residual's shape at any dropout rate, 0 included; false is --no-bias-dropout-fusion "
    "(eager dropout, which keeps nothing at rate 0).",
    "seq_parallel_communication_data_type": "deepspeed with cp > 1 (Ulysses): DeepSpeed's "
    "seq_parallel_communication_data_type, the gradients' dtype on the wire (default fp32, "
    "DeepSpeed's: its engine sets communication_data_type to it). Under ZeRO-3 it is also the "
    "IPG bucket's dtype (fp32: 2 GB, bf16: 1 GB) and the reduce-scatter's; under BF16_Optimizer "
    "(zero 1 with gradient_dtype fp32) bf16 adds the 2 B/param cast that fp32 makes none of. "
    "ZeRO-1/2's allreduce_bucket reduces in fp32 under Ulysses whatever this says: there it "
    "changes nothing.",
    "flat_parameters": "fsdp2 with pp 1: the run is PyTorch FSDP1 (torch.distributed.fsdp."
    "FullyShardedDataParallel, one flat parameter a wrapped unit: llm-foundry's Composer, "
    "verl's default), not FSDP2's fully_shard. FSDP1 gathers into the flat parameter, whose "
    "views the parameters are, and concatenates the flat gradient on the compute stream (2 + 2 B "
    "an element with BF16 parameters) where FSDP2 copies every gather out and every "
    "reduce-scatter's input in; memory and traffic as FSDP2's. Default false.",
    "sac_saves_scaled_mm": "fsdp2 with precision fp8 and recompute selective: torchtitan's "
    "op-level save list keeps the FP8 GEMM outputs (aten._scaled_mm; default true, today's "
    "torchtitan); false: the list torchtitan used until March 2026 (before commit 114151ad4), "
    "which recomputes every FP8 linear in backward and keeps none of their outputs. Under "
    "torch.compile before PyTorch's fix of pytorch/pytorch#128730 (2026-03) the compiler kept "
    "the FP8 GEMMs' inputs anyway and the published peaks equal BF16's: there false counts "
    "less than such a run held.",
    "distributed_optimizer": "megatron ZeRO-1's implementation, by NeMo's optim.name: "
    "mcore_distributed_optim (default; Megatron-Core's distributed optimizer) or "
    "distributed_fused_adam (Apex's, as NeMo's launcher configurations to 24.x run it: a whole "
    "gradient buffer in gradient_dtype reduce-scattered into a separate shard, the FP32 master "
    "kept as a 2 B remainder of the BF16 weight, FP32 embedding gradients).",
    "fp8_activation_storage": "precision fp8: how activations are saved for backward. "
    "linear_inputs (the default; Transformer Engine and torchao): each linear layer saves its "
    "own FP8 input, the attention output and the activation functions' inputs stay BF16; "
    "deepseek_v3 (DeepSeek-V3 report, arXiv 2412.19437 §3.3.3): the attention output kept once "
    "in E5M6 and the MoE SwiGLU inputs in FP8 with their 1×128 tiles' scales, the SwiGLU output "
    "recomputed. deepseek_v3 runs in DeepSeek's own framework only: the textbook profile "
    "(model.precision.FP8_ACTIVATION_STORAGE).",
    "muon_tp_mode": "megatron with the Muon optimizer and tp > 1, Megatron-Core's "
    "--muon-tp-mode: duplicated (its default since Megatron-LM bb47df5416) all-gathers each "
    "tensor-parallel matrix over tp and orthogonalises it whole on every tp rank (its traffic "
    "and working set counted); blockwise orthogonalises each rank's own block, nothing gathered "
    "(emerging_optimizers.py orthogonalize, partition_dim None). Its distributed mode is not "
    "modelled and refused; other frameworks orthogonalise whole matrices (model.muon."
    "muon_tp_gathers).",
    "document_length_spread": "Standard deviation of document_length (tokens; default 0): "
    "documents of mean ± spread, half each.",
    "document_lengths": "Packed documents as a histogram, [[length, count], …] (instead of "
    "document_length).",
}
"""Help of the keys without a flag of their own (the moved ones, and the file-only histogram);
the other keys' help is their flag's (:func:`interface.cli.reference.cli_markdown` lists both)."""

_TABLES = (("space", SPACE_KEYS), ("constraints", CONSTRAINT_KEYS), ("cluster", CLUSTER_KEYS))


def table_of(key: str) -> str | None:
    """The scenario table holding ``key`` (``space``, ``constraints``, ``cluster``), None at the
    top level (``framework`` is read at the top)."""
    if key == "framework":
        return None
    return next((name for name, keys in _TABLES if key in keys), None)


def read_line(item: str) -> dict[str, Any]:
    """``KEY=VALUE`` as TOML reads ``KEY = VALUE``, or with VALUE as quoted text."""
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise InputError(f"--set: {shown_text(item, 60)} must be KEY=VALUE, e.g. moe_node_limit=4")
    key, text = key.strip(), text.strip()
    on = switch_word(text) if VALUE_KINDS.get(key) == "flag" else None
    if on is not None:  # an on/off key's value in any case (ON_WORDS): compile=True
        return {key: on}
    for value in (text, json.dumps(text)):
        try:
            return tomllib.loads(f"{key} = {value}")
        except tomllib.TOMLDecodeError:
            continue
    raise InputError(
        f"--set: {shown_text(key, 60)} is not a key: letters, digits and _ (a dotted key sets "
        "one entry of a table, overlap.dp=0.5)"
    )


def _unknown(key: str, keys: Iterable[str], command: str, flags: Mapping[str, str]) -> InputError:
    """The refusal of ``key``, not a scenario key ``command`` takes: naming the command's flag
    that gives it where ``flags`` (the command's own, :func:`read_sets`) has one — by the
    parameter's name (``zero_stage``: ``--zero``) or its flag's spelling (``global_batch_size``:
    :func:`~trainplan.interface.flags.flag_for`'s ``--global-batch``) — else the nearest key.

    Examples
    --------
    >>> flags = {"zero_stage": "--zero", "global_batch": "--global-batch", "tp": "--tp"}
    >>> print(_unknown("zero_stage", (), "evaluate", flags))
    --set: 'zero_stage' is not a scenario key evaluate takes; give it as --zero (trainplan evaluate --set help lists them)
    >>> str(_unknown("global_batch_size", (), "search", flags)).split(";")[1]
    ' give it as --global-batch (trainplan search --set help lists them)'
    >>> str(_unknown("zero_stage", (), "evaluate", {})).split(";")[0]
    "--set: 'zero_stage' is not a scenario key evaluate takes (trainplan evaluate --set help lists them)"
    """
    near = closest_key(key, keys)
    hint = f"; did you mean {near}?" if near else ""
    options = set(flags.values())
    flag = flags.get(key) or flag_for(key, options=options)
    if flag in options:
        hint = f"; give it as {flag}"
    return InputError(
        f"--set: {shown_text(key, 60)} is not a scenario key {command} takes{hint} (trainplan "
        f"{command} --set help lists them)"
    )


def read_sets(
    items: Iterable[str],
    keys: frozenset[str],
    command: str,
    flags: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``--set`` items as {key: value, as a scenario file holds it}, each checked as a file's
    key is (:func:`interface.scenario.check_scenario`). ``flags``: the command's own flags by the
    parameter each gives, {name: flag} (:func:`interface.cli.options.command_flags`); a key that
    is not a scenario key but one of them is refused naming its flag.

    Raises
    ------
    InputError
        One line naming the key, the value and the rule: not KEY=VALUE, a key ``command`` does
        not take, a value of the wrong kind, a key set twice with different values.
    """
    out: dict[str, Any] = {}
    typed: dict[str, str] = {}  # each key's first item, as typed
    for item in items:
        for key, value in read_line(item).items():
            if key not in keys:
                raise _unknown(key, keys, command, flags or {})
            before = out.get(key)
            if isinstance(value, dict) and isinstance(before, dict):
                twice = [k for k in value if k in before and before[k] != value[k]]
                value = {**before, **value}
            else:
                twice = [key] if key in out and before != value else []
            if twice:
                raise InputError(
                    f"{key}: set twice with different values ({shown_text(typed[key], 40)}, "
                    f"then {shown_text(item.strip(), 40)}); give it once"
                )
            typed.setdefault(key, item.strip())
            out[key] = value
    nested: dict[str, Any] = {}
    for key, value in out.items():
        table = table_of(key)
        (nested.setdefault(table, {}) if table else nested)[key] = value
    check_scenario(nested, "--set")  # writes each choice as the choice (DeepEP: deepep)
    return {key: nested.get(table_of(key) or "", nested)[key] for key in out}


def merge(given: Mapping[str, Any], sets: Mapping[str, Any]) -> None:
    """Refuse a key that ``--set`` and a flag both give (``given``: the command's parameters by
    name, the keys' names).

    Raises
    ------
    InputError
        ``--set seq_len: --seq-len gives it too; give one``.
    """
    for key in sets:
        if given.get(key) not in (None, (), [], {}):
            raise InputError(
                f"--set {key}: {flag_for(key)} gives it too ({shown_text(given[key], 40)}); "
                "give one of them"
            )
