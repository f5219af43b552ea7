"""The expert dispatcher's resident buffers on one GPU of a pipeline stage (DeepEP's normal
``Buffer`` and its workspace; across nodes its RDMA part as the NVSHMEM heap granules that
hold it and NVSHMEM's IBGDA queue pairs, :func:`model.nvshmem_heap.nvshmem_gpu_bytes`), a part
of the model-state term
(:func:`model.terms.state.model_state_term`).

Units: bytes on one GPU. Exact for one layout; element-wise over the search's columns.
"""

from __future__ import annotations

from typing import Any

from trainplan.model.frameworks import Framework
from trainplan.model.moe import DEEPEP_DISPATCH_CONFIGS
from trainplan.model.moe_run import Dispatcher, deepep_group_ranks, dispatch_buffer_bytes
from trainplan.model.pipeline import Schedule
from trainplan.model.terms.activation_fields import (
    LAYER_FIELDS,
    mirror_layer_counts,
    stage_layer_counts,
)
from trainplan.model.terms.fields import Context, Fields
from trainplan.model.terms.stage_params import any_dualpipe
from trainplan.model.xp import where

__all__ = ["dispatch_buffer_term"]


def _dispatch_buffers(run: Any, hidden: int, ep: int, expert_tp: int, framework: str) -> int:
    """:func:`model.moe_run.dispatch_buffer_bytes` of the framework's DeepEP group
    (:func:`model.moe_run.deepep_group_ranks`); 0 for a group DeepEP has no config for, which
    the legality rule ``moe_layout`` refuses (the search's columns of candidates not yet masked
    stay defined). DeepEP's workspace, the NVSHMEM heap's granules and its queue pairs under a
    physical profile only (``textbook`` counts no library's own allocations or rounding:
    :attr:`model.frameworks.Framework.physical`)."""
    ranks = deepep_group_ranks(framework, ep, expert_tp)
    if ranks not in DEEPEP_DISPATCH_CONFIGS:
        return 0
    return dispatch_buffer_bytes(run, hidden, ranks, heap=Framework(framework).physical)


def dispatch_buffer_term(c: Context, f: Fields) -> Any:
    """Bytes of the expert dispatcher's resident buffers on one GPU of stage ``f.stage``:
    :func:`model.moe_run.dispatch_buffer_bytes` (DeepEP's normal ``Buffer`` under
    ``moe_dispatcher = deepep``, a group of more than one rank) where the stage holds MoE layers (the buffer is made on
    the first dispatch: Megatron-Core ``moe/fused_a2a.py`` ``get_buffer``), under DualPipe where
    either of the rank's two stages does; 0 otherwise."""
    arch, run = c.model.arch, c.training.moe_run
    if arch is None or arch.moe is None or run.dispatcher is not Dispatcher.DEEPEP:
        return 0
    _, moe = f.per_stage(stage_layer_counts, (arch,), *LAYER_FIELDS)
    if any_dualpipe(f):
        _, mirror = f.per_stage(mirror_layer_counts, (arch,), *LAYER_FIELDS)
        moe = moe + where(f.schedule == Schedule.DUALPIPE, mirror, 0)
    buffers = f.lookup(_dispatch_buffers, (run, arch.hidden_size), "ep", "expert_tp", "framework")
    return where(moe > 0, buffers, 0)
