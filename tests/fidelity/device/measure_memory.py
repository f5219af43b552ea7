"""GPU memory the cost model cannot measure on a CPU, measured on one CUDA device.

Run on a machine with a GPU (not in CI; nothing requires it), from the repository's root with
trainplan installed (``pip install --no-deps -e .``: the ``loss`` sections read the model):

    python -m tests.fidelity.device.measure_memory --out "$OUT/memory.json"

The results of one H200 are in ``tests/data/device/h200-2026-12-04/`` and set beside the model
in ``tests/fidelity/test_device_h200.py``.

It writes one JSON object with, per measurement, the figure trainplan's model predicts beside
what the device shows:

* ``loss``: the peak the loss's working set adds on top of what is kept, for PyTorch's
  ``cross_entropy`` on an fp32 copy of BF16 logits as torchtitan runs it (``del pred`` before
  ``backward``), measured with ``torch.cuda.max_memory_allocated`` — against
  :func:`model.loss_memory.loss_peak_bytes_per_element` (12 B per logit at tp 1). With
  ``loss_parallel`` on a one-rank mesh (16 B predicted) when ``torch.distributed`` initialises.
* ``allocator``: a stack of Llama-like blocks under full activation checkpointing followed by
  that loss, one step: ``max_memory_allocated`` and ``max_memory_reserved`` (what torchtitan's
  and Megatron's logs print), their gap, and the largest single block allocated
  (``memory_stats()['largest_alloc']`` where the allocator reports it); with and without
  ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (run the script twice).
* ``nccl``: device memory that communicators take outside the caching allocator: free memory
  (``torch.cuda.mem_get_info``) before and after creating each of ``--groups`` one-rank NCCL
  process groups and running one all-reduce on each, per communicator, at the default
  ``NCCL_BUFFSIZE``.
* ``fp8_cache``: where Transformer Engine is installed, the bytes a ``te.Linear`` holds between
  steps under ``fp8_autocast`` beyond its BF16 weight (the cached FP8 weight and transpose:
  2 B per element predicted on Hopper, 1 B on Blackwell), per recipe available.

Each section catches its own failure and records it, so one missing library costs one figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import torch

GIB = 2**30


def _reset() -> None:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def measure_loss(tokens: int, vocab: int) -> dict[str, Any]:
    """Peak allocated bytes of the loss beyond the BF16 logits' producer, per logit element."""
    from trainplan.model.loss_memory import loss_peak_bytes_per_element

    dev = torch.device("cuda")
    hidden = torch.randn(tokens, 256, device=dev, dtype=torch.bfloat16, requires_grad=True)
    head = torch.randn(vocab, 256, device=dev, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,), device=dev)
    _reset()
    base = torch.cuda.memory_allocated()
    pred = hidden @ head.t()  # the output layer's BF16 logits
    loss = torch.nn.functional.cross_entropy(pred.float(), labels)
    kept = torch.cuda.memory_allocated() - base
    del pred
    loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    grads = hidden.grad.numel() * 2 + head.grad.numel() * 2
    elements = tokens * vocab
    return {
        "tokens": tokens,
        "vocab": vocab,
        "peak_bytes_per_logit": (peak - grads) / elements,
        "kept_after_forward_bytes_per_logit": kept / elements,
        "model_peak_bytes_per_logit": loss_peak_bytes_per_element("fsdp2", 1),
        "note": "peak less the two weight/input gradients, per element of [tokens, vocab]",
    }


def measure_loss_parallel(tokens: int, vocab: int) -> dict[str, Any]:
    """As :func:`measure_loss` under ``loss_parallel`` on a one-rank mesh (Shard(1) logits)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor.parallel import loss_parallel

    from trainplan.model.loss_memory import loss_peak_bytes_per_element

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29511")
        dist.init_process_group("nccl", rank=0, world_size=1)
    mesh = init_device_mesh("cuda", (1,))
    dev = torch.device("cuda")
    logits = torch.randn(tokens, vocab, device=dev, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,), device=dev)
    _reset()
    base = torch.cuda.memory_allocated()
    with loss_parallel():
        pred = DTensor.from_local(logits * 1, mesh, [Shard(1)])
        loss = torch.nn.functional.cross_entropy(pred.float(), labels)
        del pred
        loss.backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    elements = tokens * vocab
    return {
        "tokens": tokens,
        "vocab": vocab,
        "peak_bytes_per_logit": (peak - 2 * elements) / elements,
        "model_peak_bytes_per_logit": loss_peak_bytes_per_element("fsdp2", 8),
        "note": "peak less the BF16 logits' gradient, per element",
    }


class _Block(torch.nn.Module):
    """A Llama-like block: RMSNorm, SDPA with GQA, SwiGLU."""

    def __init__(self, h: int, heads: int, kv: int, f: int) -> None:
        super().__init__()
        d = h // heads
        self.heads, self.kv, self.d = heads, kv, d
        self.n1, self.n2 = torch.nn.RMSNorm(h), torch.nn.RMSNorm(h)
        self.wq = torch.nn.Linear(h, heads * d, bias=False)
        self.wk = torch.nn.Linear(h, kv * d, bias=False)
        self.wv = torch.nn.Linear(h, kv * d, bias=False)
        self.wo = torch.nn.Linear(heads * d, h, bias=False)
        self.w1 = torch.nn.Linear(h, f, bias=False)
        self.w3 = torch.nn.Linear(h, f, bias=False)
        self.w2 = torch.nn.Linear(f, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        y = self.n1(x)
        q = self.wq(y).view(b, s, self.heads, self.d).transpose(1, 2)
        k = self.wk(y).view(b, s, self.kv, self.d).transpose(1, 2)
        v = self.wv(y).view(b, s, self.kv, self.d).transpose(1, 2)
        rep = self.heads // self.kv
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        y = self.n2(x)
        return x + self.w2(torch.nn.functional.silu(self.w1(y)) * self.w3(y))


def measure_allocator(layers: int, seq: int, vocab: int) -> dict[str, Any]:
    """One forward/backward of ``layers`` blocks under full checkpointing plus the loss."""
    from torch.utils.checkpoint import checkpoint

    dev = torch.device("cuda")
    h, heads, kv, f = 4096, 32, 8, 14336
    blocks = torch.nn.ModuleList(_Block(h, heads, kv, f) for _ in range(layers))
    blocks = blocks.to(dev, torch.bfloat16)
    head = torch.nn.Linear(h, vocab, bias=False).to(dev, torch.bfloat16)
    x = torch.randn(1, seq, h, device=dev, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (seq,), device=dev)
    _reset()
    for _ in range(2):  # the second step is the steady one (gradients already allocated)
        torch.cuda.reset_peak_memory_stats()
        y = x
        for blk in blocks:
            y = checkpoint(blk, y, use_reentrant=False)
        pred = head(y)
        loss = torch.nn.functional.cross_entropy(pred.flatten(0, 1).float(), labels)
        del pred
        loss.backward()
        torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    return {
        "layers": layers,
        "seq": seq,
        "vocab": vocab,
        "max_allocated_gib": torch.cuda.max_memory_allocated() / GIB,
        "max_reserved_gib": torch.cuda.max_memory_reserved() / GIB,
        "gap_gib": (torch.cuda.max_memory_reserved() - torch.cuda.max_memory_allocated()) / GIB,
        "largest_alloc_gib": stats.get("largest_alloc", 0) / GIB,
        "num_alloc_retries": stats.get("num_alloc_retries", 0),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
    }


def _pool_by_stream() -> dict[str, int]:
    """Reserved bytes per CUDA stream, from the allocator's snapshot (segments carry their
    stream)."""
    pools: dict[str, int] = {}
    for seg in torch.cuda.memory._snapshot()["segments"]:
        key = str(seg.get("stream", "?"))
        pools[key] = pools.get(key, 0) + int(seg["total_size"])
    return pools


class _Stack(torch.nn.Module):
    def __init__(self, blocks: torch.nn.ModuleList) -> None:
        super().__init__()
        self.blocks = blocks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return x


def measure_fsdp2_pool(layers: int, seq: int) -> dict[str, Any]:
    """FSDP2 (``fully_shard`` per block, BF16 compute, FP32 parameters) on a one-rank mesh: the
    reserved bytes per stream after a steady step, against two units' BF16 all-gather outputs
    (``model.terms.peak.stream_pool_term``'s ``2·w·U``)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29511")
        dist.init_process_group("nccl", rank=0, world_size=1)
    mesh = init_device_mesh("cuda", (1,))
    h, heads, kv, f = 4096, 32, 8, 14336
    blocks = torch.nn.ModuleList(_Block(h, heads, kv, f) for _ in range(layers)).cuda()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for blk in blocks:
        fully_shard(blk, mesh=mesh, mp_policy=mp)
    model = fully_shard(_Stack(blocks), mesh=mesh, mp_policy=mp)
    x = torch.randn(1, seq, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    _reset()
    for _ in range(2):
        torch.cuda.reset_peak_memory_stats()
        model(x).float().pow(2).mean().backward()
        torch.cuda.synchronize()
    unit = sum(p.numel() for p in blocks[0].parameters()) * 2
    return {
        "layers": layers,
        "seq": seq,
        "unit_bf16_bytes": unit,
        "model_two_units_bytes": 2 * unit,
        "max_allocated_bytes": torch.cuda.max_memory_allocated(),
        "max_reserved_bytes": torch.cuda.max_memory_reserved(),
        "reserved_by_stream_bytes": _pool_by_stream(),
        "default_stream": str(torch.cuda.default_stream().cuda_stream),
    }


def measure_nccl(groups: int) -> dict[str, Any]:
    """Device bytes each one-rank NCCL communicator takes outside the caching allocator."""
    import torch.distributed as dist

    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29511")
        dist.init_process_group("nccl", rank=0, world_size=1)
    t = torch.ones(1024, device="cuda")
    per = []
    for _ in range(groups):
        torch.cuda.synchronize()
        free_before, _ = torch.cuda.mem_get_info()
        reserved_before = torch.cuda.memory_reserved()
        g = dist.new_group([0])
        dist.all_reduce(t, group=g)
        torch.cuda.synchronize()
        free_after, _ = torch.cuda.mem_get_info()
        outside = (free_before - free_after) - (torch.cuda.memory_reserved() - reserved_before)
        per.append(outside)
    return {
        "communicators": groups,
        "bytes_outside_allocator_per_communicator": per,
        "NCCL_BUFFSIZE": os.environ.get("NCCL_BUFFSIZE", "default (4 MiB)"),
        "note": "one-rank groups: intra-process buffers only; peers over NVLink/IB add more",
    }


def measure_fp8_cache(h: int) -> dict[str, Any]:
    """Bytes a Transformer Engine Linear holds under FP8 beyond its BF16 weight."""
    import transformer_engine.pytorch as te  # type: ignore[import-not-found]
    from transformer_engine.common import recipe  # type: ignore[import-not-found]

    out: dict[str, Any] = {"h": h}
    recipes = {"delayed": recipe.DelayedScaling()}
    if hasattr(recipe, "Float8CurrentScaling"):
        recipes["current"] = recipe.Float8CurrentScaling()
    if hasattr(recipe, "MXFP8BlockScaling"):
        recipes["mxfp8"] = recipe.MXFP8BlockScaling()
    for name, rec in recipes.items():
        try:
            _reset()
            lin = te.Linear(h, h, bias=False, params_dtype=torch.bfloat16).cuda()
            x = torch.randn(h, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            base = torch.cuda.memory_allocated()
            with te.fp8_autocast(enabled=True, fp8_recipe=rec):
                y = lin(x, is_first_microbatch=True)
            y.sum().backward()
            del y
            x.grad = None
            lin.weight.grad = None
            torch.cuda.synchronize()
            held = torch.cuda.memory_allocated() - base
            out[name] = {"held_bytes_per_weight_element": held / (h * h)}
        except Exception as exc:  # one recipe the device or TE version lacks
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def _section(name: str, fn: Callable[[], dict[str, Any]], results: dict[str, Any]) -> None:
    try:
        results[name] = fn()
    except Exception as exc:
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    print(name, json.dumps(results[name])[:400], flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--vocab", type=int, default=128_256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--groups", type=int, default=4)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing measured", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    _section("loss", lambda: measure_loss(args.tokens, args.vocab), results)
    _section("loss_parallel", lambda: measure_loss_parallel(args.tokens, args.vocab), results)
    _section("allocator", lambda: measure_allocator(args.layers, args.tokens, args.vocab), results)
    _section("fsdp2_pool", lambda: measure_fsdp2_pool(args.layers, args.tokens), results)
    _section("nccl", lambda: measure_nccl(args.groups), results)
    _section("fp8_cache", lambda: measure_fp8_cache(4096), results)
    with open(args.out, "w") as fh:
        json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
