"""Megatron-LM's parallelism flags for a layout beyond the degrees: the CP flavour, expert and
sequence parallelism, the distributed optimizer and Megatron-FSDP (Megatron-LM d98e8a64dd
``megatron/training/arguments.py``); :func:`interface.launch.megatron_flags` writes them."""

from __future__ import annotations

from trainplan.model.launch_order import BLACKWELL_PARTS, one_connection
from trainplan.model.layout import Layout
from trainplan.model.moe_run import Dispatcher, EpOverlap
from trainplan.model.recompute_modules import DEFAULT_RECOMPUTE_MODULES
from trainplan.model.specs import TrainingSpec

__all__ = [
    "BLACKWELL_PARTS",
    "CP_COMM_TYPE",
    "megatron_env",
    "megatron_parallel_flags",
    "megatron_run_flags",
]

CP_COMM_TYPE = {
    "ring": "p2p",
    "all-gather": "allgather",
    "ulysses": "a2a",
    "a2a+p2p": "a2a+p2p",
    "pytorch-allgather": "allgather",
    "pytorch-alltoall": "p2p",
}
"""Megatron-LM's ``--cp-comm-type`` for each ``cp_kind`` (Transformer Engine's ``cp_comm_type``;
PyTorch's flavours as the Megatron exchange closest to theirs); any other: ``a2a``."""


def megatron_parallel_flags(layout: Layout, moe: bool = False) -> list[str]:
    """The CP flavour (``--cp-comm-type``, ``--hierarchical-context-parallel-sizes``), expert
    parallelism, sequence parallelism and the distributed optimizer's flags.

    For a MoE model (``moe``) ``--expert-tensor-parallel-size`` always, the expert
    tensor-parallel degree the plan counted (:attr:`model.layout.Layout.expert_tp`): absent, it
    is tp (``validate_args`` in ``megatron/training/arguments.py`` sets
    ``args.expert_tensor_parallel_size = args.tensor_model_parallel_size`` when None; the same
    in ``ModelParallelConfig.__post_init__``, ``megatron/core/model_parallel_config.py``), which
    is not the plan's where ``etp`` differs from tp or the profile is ``deepspeed`` (experts
    whole on every tp rank), and written out the line says it either way."""
    out = []
    if layout.cp > 1:
        out += ["--cp-comm-type", CP_COMM_TYPE.get(str(layout.cp_kind), "a2a")]
        if layout.cp_a2a:
            inner = str(layout.cp_a2a)
            out += ["--hierarchical-context-parallel-sizes", inner, str(layout.cp // layout.cp_a2a)]
    if layout.ep > 1:
        out += ["--expert-model-parallel-size", str(layout.ep)]
    if moe:
        out += ["--expert-tensor-parallel-size", str(layout.expert_tp)]
    if layout.sp:
        out.append("--sequence-parallel")
    if layout.zero_stage >= 1 and str(layout.framework) == "megatron":
        out.append("--use-distributed-optimizer")
    if layout.zero_stage == 3 and str(layout.framework) == "megatron":
        # validate_args: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format"
        # (the default, TrainingConfig.ckpt_format, is torch_dist)
        out += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
        out += ["--ckpt-format", "fsdp_dtensor"]
    return out


def megatron_env(flags: tuple[str, ...], part: str | None, notes: list[str]) -> tuple[str, ...]:
    """The environment a Megatron-LM line ``flags`` runs under, as ``NAME=VALUE`` words, read
    from the line itself by ``validate_args``'s rule (Megatron-LM d98e8a64dd
    ``megatron/training/arguments.py``), :func:`model.launch_order.one_connection` — the rule
    the time model's tp and cp overlap reads too (:func:`model.launch_order.launch_order_kept`):
    at ``--tensor-model-parallel-size`` or ``--context-parallel-size`` above 1 on a device of
    compute capability below 10 (``part``, a catalogue name, not in
    :data:`model.launch_order.BLACKWELL_PARTS`; None: assumed below 10) it asserts
    ``CUDA_DEVICE_MAX_CONNECTIONS`` is ``"1"`` — unless the line runs Megatron-FSDP
    (``--use-megatron-fsdp``, which asserts the opposite: "FSDP requires
    CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset") or ``--overlap-moe-expert-parallel-comm`` (a
    warning only, either value runs). Those two are said in ``notes`` (a script exporting 1 by
    habit fails validate_args under Megatron-FSDP), with the tp/cp overlap the plan does not
    credit for it.

    >>> megatron_env(("--tensor-model-parallel-size", "8", "--context-parallel-size", "1"),
    ...              "H100-SXM", [])
    ('CUDA_DEVICE_MAX_CONNECTIONS=1',)
    >>> megatron_env(("--tensor-model-parallel-size", "8", "--context-parallel-size", "1"),
    ...              "B200", [])
    ()
    """
    fsdp = "--use-megatron-fsdp" in flags
    ep_overlap = "--overlap-moe-expert-parallel-comm" in flags
    at = {f: flags[i + 1] for i, f in enumerate(flags[:-1]) if f.startswith("--")}
    sharded = any(
        int(at.get(f, "1")) > 1 for f in ("--tensor-model-parallel-size", "--context-parallel-size")
    )
    if one_connection(fsdp, ep_overlap, part):
        return ("CUDA_DEVICE_MAX_CONNECTIONS=1",) if sharded else ()
    unordered = sharded and one_connection(False, False, part)  # before Blackwell, tp or cp > 1
    if fsdp:
        notes.append(
            "Megatron-FSDP: leave CUDA_DEVICE_MAX_CONNECTIONS unset or above 1 (validate_args "
            'asserts "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset")'
            + (
                "; the async tp and cp overlap is then not sure to start before its GEMM and "
                "the plan credits none"
                if unordered
                else ""
            )
        )
    elif unordered:
        notes.append(
            "--overlap-moe-expert-parallel-comm with tp or cp above 1 before Blackwell: "
            "validate_args only warns (CUDA_DEVICE_MAX_CONNECTIONS 1 serves tp and cp, a larger "
            "value the all-to-all overlap); none is written, and the plan credits the all-to-all "
            "overlap and no async tp or cp overlap"
        )
    return ()


def megatron_run_flags(
    layout: Layout, training: TrainingSpec | None, moe: bool, notes: list[str]
) -> list[str]:
    """Flags for what the plan's memory counts of the run beyond the degrees (Megatron-LM
    d98e8a64dd):

    * ``--no-create-attention-mask-in-dataloader``: by default the data loader builds a bool
      ``[b, 1, s, s]`` causal mask for every micro-batch (``pretrain_gpt.py``
      ``create_attention_mask_in_dataloader``), which the recompute checkpoint saves among its
      inputs on the first and last stage; the plan counts none (the fused attention kernels
      mask causally without it), so the line turns it off;
    * for a MoE model with ``training``: the dispatcher the plan counted
      (:attr:`model.moe_run.MoERun.dispatcher`: ``--moe-token-dispatcher-type alltoall``, or
      ``flex`` with ``--moe-flex-dispatcher-backend deepep|hybridep``; Megatron-LM's default,
      ``allgather``, keeps other buffers), grouped expert GEMMs (``--moe-grouped-gemm``:
      ``TEGroupedMLP``, whose working set the plan counts), the fused permutation and router
      (``--moe-permute-fusion``, ``--moe-router-fusion``: :mod:`model.moe_working_set`), and
      the all-to-all overlap the plan timed (:attr:`model.moe_run.MoERun.ep_overlap`:
      ``--overlap-moe-expert-parallel-comm``, ``ModelParallelConfig.overlap_moe_expert_parallel_comm``,
      or ``--moe-shared-expert-overlap``, ``TransformerConfig.moe_shared_expert_overlap``; both
      off by default, so without the flag the run waits on its all-to-alls);
    * with ``training`` under selective recomputation on every layer, the modules the plan
      recomputes when they are not the default ``core_attn`` (``--recompute-modules M …``:
      ``TransformerConfig.recompute_modules``, a list field its ``ArgumentGroupFactory`` writes
      with ``nargs "+"``; without it the run recomputes ``core_attn`` only and keeps what the
      plan counted as recomputed).

    Under ``deepspeed`` at pp 1 a note: the plan counts Megatron-DeepSpeed's ``GPTModel``, built
    only with ``--no-pipeline-parallel`` (4efb479d ``pretrain_gpt.py`` ``model_provider``)."""
    out = ["--no-create-attention-mask-in-dataloader"]
    if moe and training is not None:
        dispatcher = training.moe_run.dispatcher
        if dispatcher is Dispatcher.ALLTOALL:
            out += ["--moe-token-dispatcher-type", "alltoall"]
        else:
            out += ["--moe-token-dispatcher-type", "flex"]
            out += ["--moe-flex-dispatcher-backend", str(dispatcher)]
        out += ["--moe-grouped-gemm", "--moe-permute-fusion", "--moe-router-fusion"]
        overlap = training.moe_run.ep_overlap
        if overlap is not EpOverlap.NONE:
            out.append(f"--{str(overlap).replace('_', '-')}")
    modules = () if training is None else training.recompute_modules
    if str(layout.recompute) == "selective" and modules != DEFAULT_RECOMPUTE_MODULES:
        out += ["--recompute-modules", *modules]
    if str(layout.framework) == "deepspeed" and layout.pp == 1:
        notes.append(
            "deepspeed at pp 1: the plan counts Megatron-DeepSpeed's GPTModel, which it builds "
            "only with --no-pipeline-parallel (pretrain_gpt.py model_provider); without it "
            "Megatron-DeepSpeed runs its pipeline engine with one stage (GPTModelPipe), whose "
            "buffers this plan does not count"
        )
    return out
