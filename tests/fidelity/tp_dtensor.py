"""Measure what a tensor-parallel Llama layer keeps for backward under torchtitan's plan, through
PyTorch DTensor on a gloo process group of CPU ranks.

The layer is :class:`tests.fidelity.harness.Layer` ("llama": RMSNorm, GQA with RoPE, SwiGLU) with
the plan torchtitan applies to every transformer block (``torchtitan/models/llama3/infra/
parallelize.py`` ``apply_tp``; the same placements as ``torchtitan/models/common/
decoder_sharding.py`` ``set_gqa_attention_sharding`` / ``set_dense_ffn_sharding`` today):

* ``attention_norm``, ``ffn_norm``: ``SequenceParallel()`` (the norm runs on the sequence shard);
* ``attention``, ``feed_forward``: ``PrepareModuleInput(input_layouts=(Shard(1),),
  desired_input_layouts=(Replicate(),))`` (the block's input all-gathered over the tp ranks);
* ``wq``, ``wk``, ``wv``, ``w1``, ``w3``: ``ColwiseParallel()``;
* ``wo``, ``w2``: ``RowwiseParallel(output_layouts=Shard(1))`` (reduce-scatter back to the
  sequence shard).

Each rank builds the layer, receives its sequence shard ``[b, s/tp, h]`` of the layer input, runs
the forward pass under :class:`tests.fidelity.harness.SavedBytes`' hooks (a DTensor counts as its
local shard's storage) and reports the bytes kept for backward by name.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.fidelity import harness as H
from tests.fidelity.harness import BF16, Dims


def _plan() -> dict[str, object]:
    """torchtitan's per-block tensor-parallel plan on the harness layer's module names
    (``norm1`` = ``attention_norm``, ``attn.q/k/v/proj`` = ``wq/wk/wv/wo``, ``norm2`` =
    ``ffn_norm``, ``mlp.gate/up/down`` = ``w1/w3/w2``)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    gather = {"input_layouts": (Shard(1),), "desired_input_layouts": (Replicate(),)}
    return {
        "norm1": SequenceParallel(),
        "attn": PrepareModuleInput(**gather),
        "attn.q": ColwiseParallel(),
        "attn.k": ColwiseParallel(),
        "attn.v": ColwiseParallel(),
        "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
        "norm2": SequenceParallel(),
        "mlp": PrepareModuleInput(**gather),
        "mlp.gate": ColwiseParallel(),
        "mlp.up": ColwiseParallel(),
        "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
    }


def _measure_rank(dims: Dims, tp: int, flash: bool) -> dict[str, int]:
    """On this rank: the bytes the parallelized layer keeps after its forward pass, by name."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (tp,))
    torch.manual_seed(0)
    layer = H.Layer("llama", dims, flash=flash)
    parallelize_module(layer, mesh, _plan())
    # the attention code reshapes to its local heads, a/tp and g/tp of them
    layer.attn.dims = Dims(
        s=dims.s, b=dims.b, h=dims.h // tp, heads=dims.heads // tp, kv_heads=dims.g // tp
    )
    # the FFN's gathered input (after PrepareModuleInput's own pre-hook)
    layer.mlp.register_forward_pre_hook(lambda _m, args: H.tag(args[0], "FC1 input"))
    torch.manual_seed(1 + dist.get_rank())
    x = torch.randn(dims.b, dims.s // tp, dims.h, dtype=BF16, requires_grad=True)
    rec = H.SavedBytes(exclude=H._exclude(layer))
    with rec.hooks():
        H.tag(x, "attention norm input")
        out = layer(x)
        kept = rec.by_name()
    del out
    return kept


def _worker(rank: int, world: int, port: int, folder: str, cases: list) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        found = [_measure_rank(Dims(**d), world, flash) for d, flash in cases]
        Path(folder, f"rank{rank}.json").write_text(json.dumps(found))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_tp_layers(cases: list[tuple[Dims, bool]], tp: int) -> list[list[dict[str, int]]]:
    """Each case (dims, flash) measured on ``tp`` spawned CPU ranks (gloo): per case, per rank,
    the bytes kept for backward by name. One process group serves every case."""
    plain = [
        ({k: getattr(d, k) for k in ("s", "b", "h", "heads", "kv_heads")}, f) for d, f in cases
    ]
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(_worker, args=(tp, _free_port(), folder, plain), nprocs=tp, join=True)
        ranks = [json.loads(Path(folder, f"rank{r}.json").read_text()) for r in range(tp)]
    return [[ranks[r][i] for r in range(tp)] for i in range(len(cases))]
