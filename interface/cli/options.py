"""The options evaluate, example, search and frontier share, and the groups their ``--help``
shows them in (cloup's option groups, :func:`option_groups`): what most runs give first, then
the rarely typed knobs under headings that begin with "Advanced". Every option also works in the
web API (the query parameter of its long name) and, for search and frontier, as the scenario
file's key of the same name (:mod:`interface.scenario`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click
import cloup

from trainplan.interface.cli.common import COUNT, NUMBER, WHOLE

__all__ = [
    "Decorator",
    "option_groups",
    "MODEL",
    "RECIPE",
    "LINKS",
    "TIME",
    "CONVENTIONS",
    "CALIBRATION",
    "advanced",
]

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def option_groups(*groups: tuple[str, Sequence[Decorator]]) -> Decorator:
    """A decorator adding each (title, options) group in order: ``--help`` lists the groups in
    this order, each under its title (:func:`cloup.option_group`; the command's class is a
    :class:`cloup.Command`, :class:`interface.cli.common.GuardedCommand`)."""

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        for title, options in reversed(groups):
            f = cloup.option_group(title, *options)(f)
        return f

    return apply


MODEL: list[Decorator] = [
    click.option(
        "--model",
        "model",
        help="Catalogue name (trainplan models lists them) or a config.json path.",
    ),
    click.option(
        "--params", "params", type=NUMBER, help="Model size taken as given (70B, 1.5T, 7.5e9)."
    ),
    click.option(
        "--arch",
        type=click.Choice(["gpt", "llama"]),
        help="Layer family for --params with dimensions.",
    ),
    click.option("--layers", type=COUNT, help="L, transformer layers (with --params)."),
    click.option("--hidden", type=COUNT, help="h, hidden size (with --params)."),
    click.option("--heads", type=COUNT, help="a, attention heads (with --params)."),
    click.option("--kv-heads", "kv_heads", type=COUNT, help="g, KV heads (GQA; default a)."),
    click.option(
        "--ffn-hidden", "ffn_hidden", type=COUNT, help="f, FFN hidden size (with --params)."
    ),
    click.option("--vocab", type=COUNT, help="V, vocabulary size (with --params)."),
    click.option(
        "--mtp-layers",
        "mtp_layers",
        type=WHOLE,
        help="Multi-token-prediction modules trained with the model (DeepSeek-V3: 1; 0 drops "
        "them); default the model's.",
    ),
]
"""The model: a catalogue name or config.json, or a size with dimensions."""

CALIBRATION: Decorator = click.option(
    "--calibration",
    "calibration",
    type=click.Path(exists=True, dir_okay=False),
    help="A file written by trainplan calibrate: its fitted figures for its GPU.",
)
"""A calibration file: with the accelerator it was fitted on."""

RECIPE: list[Decorator] = [
    click.option(
        "--flash/--no-flash",
        "flash_attention",
        default=None,
        help="FlashAttention (default on).",
    ),
    click.option(
        "--precision",
        type=click.Choice(["bf16", "fp8"]),
        help="GEMM precision of the linear layers (default bf16). fp8 = Transformer Engine: "
        "cached FP8 weight + transpose (+2 B per linear weight), linear inputs saved in FP8, "
        "linear GEMMs at the FP8 peak; embedding, output layer, norms, router and attention "
        "core stay BF16.",
    ),
    click.option(
        "--fp8-recipe",
        "fp8_recipe",
        type=click.Choice(["delayed", "tensorwise", "blockwise", "mxfp8"]),
        help="With --precision fp8: Megatron-Core's --fp8-recipe (default delayed; NeMo's "
        "FP8-CS is tensorwise, FP8-MX is mxfp8, Blackwell only). Sets the linear GEMMs' "
        "published speed-up per pass and the scales' bytes.",
    ),
    click.option(
        "--gradient-dtype",
        "gradient_dtype",
        type=click.Choice(["bf16", "fp32"]),
        help="Gradient accumulation and reduction dtype (Megatron-LM "
        "--accumulate-allreduce-grads-in-fp32; Llama 3 §3.3.2). Default: the framework's "
        "(megatron fp32 main_grad, fsdp2 fp32 reduction, deepspeed and textbook bf16).",
    ),
    click.option(
        "--optimizer-dtype",
        "optimizer_dtype",
        type=click.Choice(["fp32", "bf16"]),
        help="Adam moments' dtype (Megatron-Core --exp-avg-dtype and its second moment; "
        "DeepSeek-V3 keeps them in BF16). Default fp32.",
    ),
    click.option(
        "--master-weights/--no-master-weights",
        "master_weights",
        default=None,
        help="Keep an FP32 master copy of the weights in the optimizer (default on).",
    ),
    click.option(
        "--memory-efficient-norm/--no-memory-efficient-norm",
        "memory_efficient_norm",
        default=None,
        help="Norms keep their output, not their input (Apex memory_efficient, Megatron-LM "
        "--memory-efficient-layer-norm): 2 fewer S·h tensors per layer.",
    ),
    click.option(
        "--tp-block-inputs",
        "tp_block_inputs",
        type=click.Choice(["sharded", "gathered"]),
        help="fsdp2 with tp > 1: what tensor parallelism keeps of each attention and MLP "
        "block's all-gathered input for backward. gathered (the default): the whole input "
        "on every tp rank, torchtitan's DTensor plan; sharded: the sequence shard, gathered "
        "again in backward, as FSDP beside Megatron-style sequence parallelism (how Meta ran "
        "Llama 3 405B). Refused under megatron, deepspeed and textbook (they keep the "
        "shard), with tp 1 and without sequence parallelism.",
    ),
    click.option(
        "--moe-capacity-factor",
        "moe_capacity_factor",
        type=NUMBER,
        help="MoE: tokens an expert takes from a rank, × the mean (Megatron-Core "
        "--moe-expert-capacity-factor, DeepSpeed capacity_factor); tokens over it are dropped. "
        "Default dropless.",
    ),
    click.option(
        "--moe-pad-to-capacity/--no-moe-pad-to-capacity",
        "moe_pad_to_capacity",
        default=None,
        help="MoE with a capacity factor: pad every expert's input to its capacity (Megatron-Core "
        "--moe-pad-expert-input-to-capacity, DeepSpeed drop_tokens): E x C rows computed and "
        "sent whatever the routing.",
    ),
    click.option(
        "--moe-imbalance",
        "moe_imbalance",
        type=NUMBER,
        help="MoE: routed rows the busiest expert-parallel rank receives / the mean (>= 1; "
        "default 1, balanced). Sets that rank's expert GEMMs and all-to-all receive.",
    ),
    click.option(
        "--moe-node-limit",
        "moe_node_limit",
        type=COUNT,
        help="MoE with the deepep dispatcher: nodes a token's experts may span (DeepSeek-V3's "
        "node-limited routing, M = 4; Megatron-Core's --moe-router-group-topk with "
        "Megatron-Core's --moe-router-num-groups = nodes).",
    ),
    click.option(
        "--moe-dispatcher",
        "moe_dispatcher",
        type=click.Choice(["alltoall", "deepep"]),
        help="MoE token dispatcher: alltoall (NCCL; every routed copy sent by itself; the "
        "default) or deepep (DeepEP normal kernels: one copy per remote node, forwarded over "
        "NVLink; resident buffers). deepep runs under megatron (flex) and fsdp2 (torchtitan).",
    ),
    click.option(
        "--moe-ep-overlap",
        "moe_ep_overlap",
        type=click.Choice(
            ["none", "moe_shared_expert_overlap", "overlap_moe_expert_parallel_comm"]
        ),
        help="megatron only: what hides the expert all-to-all. moe_shared_expert_overlap: the "
        "shared experts run beside the forward dispatch and combine; "
        "overlap_moe_expert_parallel_comm: one micro-batch's all-to-alls under another's "
        "compute (combined 1F1B; needs interleaving when pp > 1, no full recompute). "
        "Default none.",
    ),
    click.option(
        "--offload-optimizer",
        "offload_optimizer",
        help="Fraction 0-1 of the optimizer state (and its step) on the host: Megatron-Core "
        "--optimizer-offload-fraction; DeepSpeed offload_optimizer = 1. The CPU runs Adam; "
        "gradients and weights cross the host link.",
    ),
    click.option(
        "--offload-params",
        "offload_params",
        is_flag=True,
        default=None,
        help="ZeRO-3 parameter shards, their gradients and the optimizer on the host "
        "(DeepSpeed offload_param, FSDP2 CPUOffloadPolicy).",
    ),
    click.option(
        "--offload-activations",
        "offload_activations",
        help="Comma list of modules whose saved activations go to the host between forward "
        "and backward, named as Megatron-Core's --offload-modules names them (attn_norm, "
        "core_attn, attn_proj, mlp_norm, expert_fc1, moe_act; its fine-grained activation "
        "offloading). Copies overlap the next layer's compute; recompute none or selective.",
    ),
    click.option(
        "--recompute-modules",
        "recompute_modules",
        help="Comma list of what --recompute selective recomputes, named as Megatron-Core's "
        "--recompute-modules names them (core_attn, layernorm, mla_up_proj, mlp, moe_act, moe, "
        "shared_experts); default core_attn. Megatron-Core and textbook profiles only.",
    ),
    click.option(
        "--fp8-param-gather",
        "fp8_param_gather",
        is_flag=True,
        default=None,
        help="FP8 primary weights (Megatron-Core --fp8-param-gather, on in NeMo's FP8 current "
        "scaling recipe): the linear weights are 1 B FP8 tensors and only their transpose is "
        "cached. Needs --precision fp8 and --framework megatron.",
    ),
    click.option(
        "--document-length",
        "document_length",
        type=NUMBER,
        help="Sequences are packs of documents of this mean length (tokens) under document "
        "masking: attention FLOPs and time follow the documents' sum of squared lengths, not "
        "the pack's; MFU is shown both ways, as Megatron-LM's counter does. A histogram: the "
        "scenario file's or the API's document_lengths.",
    ),
    click.option(
        "--document-length-spread",
        "document_length_spread",
        type=NUMBER,
        help="Standard deviation of --document-length (tokens; default 0): documents of mean "
        "± spread, half each.",
    ),
]
"""The training recipe: kernels, numerics, what each framework keeps and what goes to the host,
and packed documents."""

LINKS: list[Decorator] = [
    click.option(
        "--nvlink-domain",
        "nvlink_domain",
        type=COUNT,
        help="GPUs per NVLink domain; default the accelerator's.",
    ),
    click.option(
        "--nvlink-gbps",
        "nvlink_gbps",
        type=NUMBER,
        help="NVLink GB/s per GPU per direction; default the accelerator's.",
    ),
    click.option(
        "--scaleout-gbps",
        "scaleout_gbps",
        type=NUMBER,
        help="Scale-out NIC GB/s per GPU per direction; default the accelerator's.",
    ),
    click.option(
        "--fabric",
        type=click.Choice(["two-tier", "fat-tree", "rail"]),
        help="Links from the two-tier rule (default) or a cluster graph's bottlenecks.",
    ),
    click.option("--pod-size", "pod_size", type=COUNT, help="GPUs per pod (graph fabrics)."),
    click.option(
        "--oversubscription", type=NUMBER, help="Scale-out oversubscription above a pod (≥ 1)."
    ),
    click.option(
        "--host-link-gbps",
        "host_link_gbps",
        help="GPU-host link, GB/s per GPU per direction (default: the accelerator table's).",
    ),
    click.option(
        "--host-memory-gbps",
        "host_memory_gbps",
        help="Host memory bandwidth per GPU, GB/s, for the CPU optimizer step (default: the "
        "table's reference node).",
    ),
    click.option(
        "--memory-reserve",
        "memory_reserve_gib",
        type=NUMBER,
        help="GiB of each GPU kept for the driver, CUDA context, NCCL and fragmentation under "
        "a physical --framework (default 3).",
    ),
]
"""Advanced: the accelerator table's links and memory, overridden."""

TIME: list[Decorator] = [
    click.option(
        "--time-model",
        "time_model",
        type=click.Choice(["roofline", "single"]),
        help="roofline (default for megatron, deepspeed, fsdp2): every operation on the "
        "roofline, collectives by mechanism; single: one kernel efficiency and per-axis "
        "overlaps (the original model; textbook always uses it).",
    ),
    click.option(
        "--gemm-efficiency",
        "gemm_efficiency",
        type=NUMBER,
        help="Roofline: fraction of peak of a GEMM's main loop; default fitted per "
        "accelerator generation (model.roofline).",
    ),
    click.option(
        "--hbm-efficiency",
        "hbm_efficiency",
        type=NUMBER,
        help="Roofline: fraction of the HBM bandwidth memory-bound kernels reach (0.9).",
    ),
    click.option(
        "--scaleup-efficiency",
        "scaleup_efficiency",
        type=NUMBER,
        help="Roofline: fraction of NVLink bandwidth collectives reach (0.8, NCCL's figure).",
    ),
    click.option(
        "--scaleout-efficiency",
        "scaleout_efficiency",
        type=NUMBER,
        help="Roofline: fraction of the NIC's rate collectives reach (0.96, NCCL's figure).",
    ),
    click.option(
        "--attention-efficiency",
        "attention_efficiency",
        type=NUMBER,
        help="Fraction of peak of the FlashAttention core; default 0.35 on Hopper "
        "(FlashAttention-2), the GEMM rule (single: the kernel efficiency) on A100.",
    ),
    click.option(
        "--tp-comm-overlap",
        "tp_comm_overlap",
        type=click.Choice(["none", "async", "full", "async-tp"]),
        help="Roofline: none (Megatron-LM 2021), async (backward collectives under the "
        "gradient GEMMs; default), full (Transformer Engine userbuffers), async-tp "
        "(torchtitan's async tensor parallelism; fsdp2 only).",
    ),
    click.option(
        "--attention-kernel",
        "attention_kernel",
        type=click.Choice(
            ["flash-attention-2", "flash-attention-3", "cudnn", "pytorch-sdpa-cudnn"]
        ),
        help="Roofline: the attention kernel whose published curves time the attention core "
        "by sequence length and head size (default: Transformer Engine's choice, cudnn on "
        "Hopper and Blackwell, flash-attention-2 on A100; PyTorch SDPA runs flash-attention-2).",
    ),
    click.option(
        "--grad-reduce-overlap/--no-grad-reduce-overlap",
        "grad_reduce_overlap",
        default=None,
        help="Roofline: overlap the once-per-step gradient reduction and weight gather with "
        "compute (default on; Megatron-Core --overlap-grad-reduce).",
    ),
    click.option(
        "--kernel-efficiency",
        "kernel_efficiency",
        type=NUMBER,
        help="Single time model: fraction of peak in kernels; default calibrated per "
        "accelerator generation and hidden size (model.timing.kernel_efficiency_for).",
    ),
    click.option(
        "--overlap",
        "overlap",
        multiple=True,
        help="Single time model: AXIS=FRACTION hidden behind compute (repeatable).",
    ),
]
"""Advanced: the step-time model's figures and overlaps (``trainplan calibrate`` fits them)."""

CONVENTIONS: list[Decorator] = [
    click.option(
        "--activation-convention",
        "activation_convention",
        type=click.Choice(["paper", "pytorch"]),
        help="paper (Korthikanti, default) or pytorch (adds what PyTorch kernels keep; measured).",
    ),
    click.option(
        "--causal-attention-flops/--full-attention-flops",
        "causal_attention_flops",
        default=None,
        help="Count attention FLOPs over the (query, key) pairs the causal mask, window or "
        "chunks keep, or over the full s² (default: the pairs with FlashAttention).",
    ),
    click.option(
        "--zero3-regather",
        "zero3_regather",
        is_flag=True,
        default=None,
        help="ZeRO-3 gathers weights for every micro-batch (default: once per step, as textbook).",
    ),
    click.option(
        "--pad-vocab",
        "vocab_multiple",
        type=COUNT,
        help="Pad V to a multiple of this × tp (a whole number >= 1); default the "
        "framework's: megatron 128 (make_vocab_size_divisible_by), the others whole rows "
        "per tp rank.",
    ),
]
"""Advanced: counting conventions."""


def advanced(placement: Sequence[Decorator] = ()) -> tuple[tuple[str, Sequence[Decorator]], ...]:
    """The advanced groups, in order: links (with ``placement``, a command's rank-order option
    where it is no search dimension), the step-time model, the counting conventions."""
    return (
        ("Advanced: links, memory reserve and placement", [*LINKS, *placement]),
        ("Advanced: step-time model", TIME),
        ("Advanced: counting conventions", CONVENTIONS),
    )
