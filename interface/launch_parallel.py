"""Megatron-LM's parallelism flags for a layout beyond the degrees: the CP flavour, expert and
sequence parallelism, the distributed optimizer and Megatron-FSDP (Megatron-LM d98e8a64dd
``megatron/training/arguments.py``); :func:`interface.launch.megatron_flags` writes them."""

from __future__ import annotations

from trainplan.model.layout import Layout

__all__ = ["CP_COMM_TYPE", "megatron_parallel_flags"]

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
        out += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params"]
    return out
