"""Planner commands: evaluate (the planner tab), example, gpus, search."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from trainplan.interface.cli import cli
from trainplan.interface.cli.common import COUNT, NUMBER, WHOLE, echo_json
from trainplan.model.context_parallel import CpKind

__all__ = ["layout_options", "CP_KIND_CHOICES"]

CP_KIND_CHOICES = [k.value for k in CpKind] + ["p2p", "all_gather", "a2a", "hybrid"]
"""``--cp-kind`` values: the flavours' names and Megatron-Core's ``--cp-comm-type`` spellings."""


def model_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--model or --params with dimensions."""
    opts = [
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
    for opt in reversed(opts):
        f = opt(f)
    return f


def cluster_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Step-time conventions, topology and link overrides: shared by evaluate, example, search and
    frontier."""
    opts = [
        click.option(
            "--activation-convention",
            "activation_convention",
            type=click.Choice(["paper", "pytorch"]),
            help="paper (Korthikanti, default) or pytorch (adds what PyTorch kernels keep; measured).",
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
            "--precision",
            type=click.Choice(["bf16", "fp8"]),
            help="GEMM precision of the linear layers (default bf16). fp8 = Transformer Engine: "
            "cached FP8 weight + transpose (+2 B per linear weight), linear inputs saved in FP8, "
            "linear GEMMs at the FP8 peak; embedding, output layer, norms, router and attention "
            "core stay BF16.",
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
            "--master-weights/--no-master-weights",
            "master_weights",
            default=None,
            help="Keep an FP32 master copy of the weights in the optimizer (default on).",
        ),
        click.option(
            "--pad-vocab",
            "vocab_multiple",
            type=COUNT,
            help="Pad V to a multiple of this × tp (a whole number >= 1); default the "
            "framework's: megatron 128 (make_vocab_size_divisible_by), the others whole rows "
            "per tp rank.",
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
            "--fabric",
            type=click.Choice(["two-tier", "fat-tree", "rail"]),
            help="Links from the two-tier rule (default) or a cluster graph's bottlenecks.",
        ),
        click.option("--pod-size", "pod_size", type=COUNT, help="GPUs per pod (graph fabrics)."),
        click.option(
            "--oversubscription", type=NUMBER, help="Scale-out oversubscription above a pod (≥ 1)."
        ),
        click.option(
            "--memory-reserve",
            "memory_reserve_gib",
            type=NUMBER,
            help="GiB of each GPU kept for the driver, CUDA context, NCCL and fragmentation under "
            "a physical --framework (default 3).",
        ),
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
            "--tp-comm-overlap",
            "tp_comm_overlap",
            type=click.Choice(["none", "async", "full"]),
            help="Roofline: none (Megatron-LM 2021), async (backward collectives under the "
            "gradient GEMMs; default), full (Transformer Engine userbuffers).",
        ),
        click.option(
            "--grad-reduce-overlap/--no-grad-reduce-overlap",
            "grad_reduce_overlap",
            default=None,
            help="Roofline: overlap the once-per-step gradient reduction and weight gather with "
            "compute (default on; Megatron-Core --overlap-grad-reduce).",
        ),
        click.option(
            "--calibration",
            "calibration",
            type=click.Path(exists=True, dir_okay=False),
            help="A file written by trainplan calibrate: its fitted figures for its GPU.",
        ),
        click.option(
            "--kernel-efficiency",
            "kernel_efficiency",
            type=NUMBER,
            help="Single time model: fraction of peak in kernels; default calibrated per "
            "accelerator generation and hidden size (model.timing.kernel_efficiency_for).",
        ),
        click.option(
            "--attention-efficiency",
            "attention_efficiency",
            type=NUMBER,
            help="Fraction of peak of the FlashAttention core; default 0.35 on Hopper "
            "(FlashAttention-2), the GEMM rule (single: the kernel efficiency) on A100.",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def layout_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Degrees, knobs, GPU and cluster overrides shared by evaluate and example."""
    opts = [
        click.option("--gpu", help="Accelerator (trainplan gpus); default H100-SXM."),
        click.option("--gpus", "num_gpus", type=COUNT, help="Check that dp·tp·pp·cp equals this."),
        click.option("--dp", type=COUNT, help="Data-parallel degree (default 1)."),
        click.option("--tp", type=COUNT, help="Tensor-parallel degree (default 1)."),
        click.option("--pp", type=COUNT, help="Pipeline-parallel degree (default 1)."),
        click.option("--cp", type=COUNT, help="Context-parallel degree (default 1)."),
        click.option(
            "--cp-kind",
            "cp_kind",
            type=click.Choice(CP_KIND_CHOICES),
            help="How the cp ranks exchange attention's inputs: ring (K/V point to point, "
            "default), all-gather (Llama 3), ulysses (all-to-all over heads) or a2a+p2p "
            "(ulysses inside groups of --cp-a2a, ring across); Megatron's p2p, all_gather, a2a "
            "are aliases.",
        ),
        click.option(
            "--cp-a2a",
            "cp_a2a",
            type=COUNT,
            help="Inner all-to-all degree of --cp-kind a2a+p2p (Megatron-Core "
            "--hierarchical-context-parallel-sizes).",
        ),
        click.option(
            "--ep", type=COUNT, help="Expert-parallel degree, carved from dp·cp (default 1)."
        ),
        click.option(
            "--etp",
            type=COUNT,
            help="Expert tensor-parallel degree (Megatron-Core --expert-tensor-parallel-size); "
            "default tp.",
        ),
        click.option(
            "--framework",
            type=click.Choice(["megatron", "deepspeed", "fsdp2", "textbook"]),
            help="Whose mechanism a ZeRO stage is: peak memory and traffic as that framework runs "
            "it (default megatron); textbook = the ZeRO paper's steady state (the original planner's figures).",
        ),
        click.option(
            "--zero",
            "zero_stage",
            type=click.IntRange(0, 3),
            help="ZeRO stage 0-3 (3 = FSDP); default the framework's (megatron 1, deepspeed 1, "
            "fsdp2 3, textbook 1).",
        ),
        click.option(
            "--recompute",
            type=click.Choice(["none", "sqrt", "selective", "full"]),
            help="Activation recomputation (default none).",
        ),
        click.option(
            "--flash/--no-flash",
            "flash_attention",
            default=None,
            help="FlashAttention (default on).",
        ),
        click.option(
            "--sequence-parallel/--no-sequence-parallel",
            "sequence_parallel",
            default=None,
            help="Default: on when tp > 1.",
        ),
        click.option(
            "--seq-len", "seq_len", type=COUNT, help="s, tokens per sequence; default the model's."
        ),
        click.option(
            "--micro-batch", "micro_batch_size", type=COUNT, help="b, sequences per micro-batch."
        ),
        click.option(
            "--global-batch", "global_batch_size", type=COUNT, help="B, sequences per step."
        ),
        click.option(
            "--schedule",
            type=click.Choice(["gpipe", "1f1b", "interleaved"]),
            help="Pipeline schedule (default 1f1b).",
        ),
        click.option(
            "--virtual-stages",
            "virtual_stages",
            type=COUNT,
            help="v, model chunks per stage (interleaved).",
        ),
        click.option(
            "--stage-layers",
            "stage_layers",
            help="Transformer layers per pipeline stage, e.g. 7,8,8,7 (pp counts; or pp × "
            "virtual-stages counts, one per model chunk in model order); must sum to L. "
            "Default: as even as L allows, the end stages holding fewer.",
        ),
        click.option(
            "--recompute-layers",
            "recompute_layers",
            help="Layers fully recomputed on each pipeline stage, e.g. 2,4,4,0 (pp counts; the "
            "first that many layers of each stage, Megatron-LM's --recompute-method block; the "
            "others keep --recompute none or selective). With virtual-stages > 1 the count is "
            "per model chunk, as Megatron-LM's: the first that many layers of each of the "
            "stage's chunks.",
        ),
        click.option(
            "--first-stage-layers",
            "first_stage_layers",
            type=click.IntRange(0),
            help="Megatron-Core's --decoder-first-pipeline-num-layers: layers on the first "
            "stage, the rest split evenly over the others.",
        ),
        click.option(
            "--last-stage-layers",
            "last_stage_layers",
            type=click.IntRange(0),
            help="Megatron-Core's --decoder-last-pipeline-num-layers.",
        ),
        click.option(
            "--account-for-embedding/--no-account-for-embedding",
            "account_for_embedding",
            default=None,
            help="Megatron-Core's --account-for-embedding-in-pipeline-split: the embedding "
            "counts as a layer, so the first stage holds one transformer layer fewer.",
        ),
        click.option(
            "--account-for-loss/--no-account-for-loss",
            "account_for_loss",
            default=None,
            help="Megatron-Core's --account-for-loss-in-pipeline-split (the last stage).",
        ),
        click.option(
            "--overlap",
            "overlap",
            multiple=True,
            help="Single time model: AXIS=FRACTION hidden behind compute (repeatable).",
        ),
        click.option(
            "--mfu-convention",
            "mfu_convention",
            type=click.Choice(["6n", "6n+attention", "megatron"]),
            help="Model FLOPs: 6·N per token (default), plus PaLM's attention FLOPs, or "
            "Korthikanti's term by term.",
        ),
        click.option(
            "--rank-order", "rank_order", help="Axes inner to outer, e.g. tp-cp-ep-dp-pp (default)."
        ),
        click.option(
            "--per-stage", "per_stage", is_flag=True, help="Also list every pipeline stage."
        ),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return cluster_options(f)


def run_evaluate(params: dict[str, Any], as_json: bool, per_stage: bool) -> dict[str, Any]:
    """Evaluate flat parameters (:func:`interface.commands.evaluate_json`); print JSON or text;
    return the JSON object."""
    from trainplan.interface.commands import evaluate_json
    from trainplan.interface.report import evaluate_text

    out = evaluate_json(params, per_stage)
    if as_json:
        echo_json(out)
    else:
        click.echo(evaluate_text(out, out["defaults_used"]))
        if per_stage:
            from trainplan.interface.report import readable, table_text

            rows = [readable(row) for row in out["stages"]]
            click.echo("\nPer stage (bytes per GPU in GB, 10^9):\n" + table_text(rows))
    return out


@cli.command("evaluate")
@model_options
@layout_options
def evaluate_cmd(as_json: bool, per_stage: bool, **params: Any) -> None:
    """The planner: memory per GPU, ZeRO table, traffic per axis, bubble, step time, MFU.

    Example: trainplan evaluate --model llama3-405b --gpu H100-SXM --tp 8 --pp 16 --dp 128
    """
    run_evaluate(params, as_json, per_stage)


@cli.command("gpus")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def gpus_cmd(as_json: bool) -> None:
    """The accelerator table: memory, dense BF16 peak, links, each with its source."""
    from trainplan.interface.commands import gpus_json
    from trainplan.interface.report import gpus_text

    rows = gpus_json()
    if as_json:
        echo_json(rows)
        return
    click.echo(gpus_text(rows))
    click.echo("\nSources:")
    for r in rows:
        click.echo(f"  {r['name']}: {r['source']}")
        if r["bandwidth_source"]:
            click.echo(f"  {' ' * len(r['name'])}  HBM and host link: {r['bandwidth_source']}")
        if r["power_source"]:
            click.echo(f"  {' ' * len(r['name'])}  power: {r['power_source']}")


@cli.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def models_cmd(as_json: bool) -> None:
    """The model catalogue: names, sizes and sources."""
    from trainplan.interface.commands import models_json

    rows = models_json()
    if as_json:
        echo_json(rows)
        return
    from trainplan.interface.report import table_text

    click.echo(
        table_text(
            [
                {
                    k: (f"{v / 1e9:,.1f}B" if k.startswith("num") else v)
                    for k, v in r.items()
                    if k != "source"
                }
                for r in rows
            ]
        )
    )
