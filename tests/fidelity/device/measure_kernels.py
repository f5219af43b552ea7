"""Per-operation rates of a training step's kernels, measured on one CUDA device.

Run on a machine with a GPU (not in CI; nothing requires it):

    python -m tests.fidelity.device.measure_kernels --out "$OUT/kernels.json"

It writes one JSON object of raw measurements (the analysis against the cost model runs on any
machine, from the file: ``tests/fidelity/test_device_kernels.py``). Every time is the mean of
back-to-back calls timed with CUDA events after warm-up calls, the GPU kept busy throughout (so
its clocks are the sustained ones a training step sees, not a lone call's boost); inputs rotate
over enough buffers that no call finds its operands in the L2 cache.

Sections (each catches its own failure and records it, so one missing kernel costs one figure):

* ``gemm_bf16`` — ``torch.mm`` in BF16 at the shapes of a transformer layer's four linear layers
  (QKV, attention output, FC1 of a gated MLP, FC2) as the validation set's dense runs on Hopper
  split them (tensor parallelism divides n of QKV/FC1 and k of the output/FC2 GEMMs), each as its
  three GEMMs: forward ``(m, n, k)``, input gradient ``(m, k, n)`` and weight gradient
  ``(n, k, m)``; plus square shapes and the best shape of ml-engineering's search on H100 SXM
  (2048×2048×13312), to set the two tables side by side.
* ``gemm_fp8`` — ``torch._scaled_mm`` (E4M3 × E4M3, one scale per tensor, BF16 output) at the same
  shapes: the FP8 speed-up by shape.
* ``attention`` — ``scaled_dot_product_attention`` under its FlashAttention and cuDNN backends,
  causal, BF16, 32 heads of 128, forward and forward + backward, 1K to 128K tokens.
* ``ring_chunks`` — one rank's attention calls of a load-balanced causal ring (context
  parallelism as torch's ``_templated_ring_attention`` and Transformer Engine's p2p run it): one
  causal call over the rank's two chunks, then ``cp − 1`` unmasked calls of ``2c × c`` pairs; the
  sum of their times against the unsplit causal call's over cp.
* ``grouped_gemm`` — ``torch._grouped_mm`` (BF16) at MoE expert shapes, against one dense GEMM of
  the same FLOPs and against a loop of one ``torch.mm`` per expert (whose host time shows at few
  tokens per expert).
* ``host`` — the host's time to issue one kernel, one ``torch.mm``, one ``nn.Linear`` forward and
  backward, while the GPU waits on the host.
* ``optimizer`` — one fused and one for-each ``torch.optim.AdamW`` step over FP32 parameters:
  seconds per parameter and the bytes it moves per second.
* ``stream`` — a device-to-device copy: the part's achievable memory bandwidth here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch

from tests.fidelity.device.measure_memory import _Block

LAYERS = {
    # name: (hidden, q width, kv width, ffn, gated)
    "llama3-8b": (4096, 4096, 1024, 14336, True),
    "llama3-70b": (8192, 8192, 1024, 28672, True),
    "llama3-405b": (16384, 16384, 1024, 53248, True),
    "mpt-7b": (4096, 4096, 4096, 16384, False),
    "mpt-30b": (7168, 7168, 7168, 28672, False),
    "mpt-70b": (8192, 8192, 1024, 32768, False),
}
"""Layer widths (Llama 3 paper Table 3; MPT model cards), as the model catalogue has them."""

CASES = [
    ("llama3-8b", 1, 8192),
    ("llama3-8b", 1, 16384),
    ("llama3-8b", 2, 8192),
    ("llama3-70b", 2, 8192),
    ("llama3-70b", 4, 8192),
    ("llama3-70b", 8, 8192),
    ("llama3-405b", 8, 8192),
    ("mpt-7b", 1, 12288),
    ("mpt-30b", 1, 6144),
    ("mpt-70b", 1, 16384),
]
"""(model, tp, tokens per micro-batch m)."""

L2_BYTES = 50 * 2**20
DEV = "cuda"
"""The device measured; ``--device cpu`` only checks that the script runs (tiny shapes)."""


def _sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def _free() -> None:
    if DEV == "cuda":
        torch.cuda.empty_cache()


def timed(fn: Callable[[int], Any], iters: int, warmup: int = 3) -> float:
    """Mean seconds of ``fn(i)`` over ``iters`` back-to-back calls after ``warmup`` calls."""
    for i in range(warmup):
        fn(i)
    _sync()
    if DEV != "cuda":
        t0 = time.perf_counter()
        for i in range(iters):
            fn(i)
        return (time.perf_counter() - t0) / iters
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(iters):
        fn(i)
    end.record()
    _sync()
    return start.elapsed_time(end) / 1e3 / iters


def _copies(nbytes: int) -> int:
    """Buffers to rotate over so no call finds its operands in L2."""
    return max(1, min(8, -(-4 * L2_BYTES // max(nbytes, 1))))


def _iters(flops: float, rate: float = 6e14, seconds: float = 0.15) -> int:
    return int(min(50, max(3, seconds * rate / max(flops, 1.0))))


def layer_gemms(model: str, tp: int, m: int) -> list[dict[str, Any]]:
    """The 12 GEMMs of one layer's four linear layers at tensor-parallel size ``tp``."""
    h, q, kv, f, gated = LAYERS[model]
    linears = {
        "qkv": ((q + 2 * kv) // tp, h),
        "proj": (h, q // tp),
        "fc1": ((2 * f if gated else f) // tp, h),
        "fc2": (h, f // tp),
    }
    out = []
    for name, (n, k) in linears.items():
        for kind, shape in (("fprop", (m, n, k)), ("dgrad", (m, k, n)), ("wgrad", (n, k, m))):
            out.append({"model": model, "tp": tp, "linear": name, "gemm": kind, "mnk": shape})
    return out


def gemm_shapes() -> list[dict[str, Any]]:
    rows = [g for case in CASES for g in layer_gemms(*case)]
    for s in (1024, 2048, 4096, 8192, 16384):
        rows.append({"model": "square", "mnk": (s, s, s)})
    rows.append({"model": "mamf-best-h100", "mnk": (2048, 2048, 13312)})
    return rows


def bench_mm(m: int, n: int, k: int, dtype: str) -> float:
    """Seconds of one (m, k) × (k, n) GEMM: BF16 ``torch.mm`` or FP8 ``torch._scaled_mm``."""
    dev = DEV
    r = _copies(2 * (m * k + k * n))
    a = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(r)]
    # the weight-like operand column-major, as F.linear's W^T and cuBLASLt's FP8 "TN" need
    b = [torch.randn(n, k, device=dev, dtype=torch.bfloat16).t() for _ in range(r)]
    if dtype == "bf16":
        outs = [torch.empty(m, n, device=dev, dtype=torch.bfloat16) for _ in range(2)]

        def call(i: int) -> None:
            torch.mm(a[i % r], b[i % r], out=outs[i % 2])
    else:
        a8 = [x.to(torch.float8_e4m3fn) for x in a]
        b8 = [x.to(torch.float8_e4m3fn) for x in b]
        one = torch.ones((), device=dev, dtype=torch.float32)
        del a, b

        def call(i: int) -> None:
            torch._scaled_mm(a8[i % r], b8[i % r], one, one, out_dtype=torch.bfloat16)

    t = timed(call, _iters(2.0 * m * n * k))
    return t


def measure_gemm(dtype: str) -> dict[str, Any]:
    rows = []
    for g in gemm_shapes():
        m, n, k = g["mnk"]
        try:
            t = bench_mm(m, n, k, dtype)
            rows.append({**g, "seconds": t, "tflops": 2.0 * m * n * k / t / 1e12})
        except Exception as exc:
            rows.append({**g, "error": f"{type(exc).__name__}: {exc}"})
        _free()
    return {"dtype": dtype, "rows": rows}


def _sdpa(backend: str) -> Any:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(
        SDPBackend.FLASH_ATTENTION if backend == "flash" else SDPBackend.CUDNN_ATTENTION
    )


def bench_attention(b: int, sq: int, skv: int, causal: bool, backend: str) -> dict[str, float]:
    """Forward and forward + backward seconds of one SDPA call, 32 heads of 128, BF16."""
    heads, d = 32, 128
    q = torch.randn(b, heads, sq, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, heads, skv, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, heads, skv, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    go = torch.randn(b, heads, sq, d, device=DEV, dtype=torch.bfloat16)
    pairs = b * heads * (sq * (sq + 1) / 2 if causal else sq * skv)
    n = _iters(4.0 * pairs * d, 4e14, 0.3)
    f = torch.nn.functional.scaled_dot_product_attention
    with _sdpa(backend):
        with torch.no_grad():
            fwd = timed(lambda i: f(q, k, v, is_causal=causal), n)

        def both(i: int) -> None:  # autograd.grad: no accumulation kernel into .grad
            torch.autograd.grad(f(q, k, v, is_causal=causal), (q, k, v), go)

        total = timed(both, n, warmup=2)
    return {"fwd_s": fwd, "bwd_s": total - fwd, "pairs_per_head": pairs / (b * heads)}


def measure_attention() -> dict[str, Any]:
    rows = []
    for backend in ("flash", "cudnn"):
        for s in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072):
            b = max(1, 32768 // s)
            try:
                r = bench_attention(b, s, s, True, backend)
                rows.append({"backend": backend, "batch": b, "seq": s, "causal": True, **r})
            except Exception as exc:
                rows.append({"backend": backend, "seq": s, "error": f"{type(exc).__name__}: {exc}"})
            _free()
    return {"heads": 32, "head_dim": 128, "dtype": "bf16", "rows": rows}


def _gqa_row(backend: str, d: int, s: int) -> dict[str, Any]:
    b = 32768 // s
    f = torch.nn.functional.scaled_dot_product_attention
    q = torch.randn(b, 64, s, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, 8, s, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, 8, s, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    go = torch.randn_like(q)

    def both(i: int) -> None:
        torch.autograd.grad(f(q, k, v, is_causal=True, enable_gqa=True), (q, k, v), go)

    with _sdpa(backend):
        with torch.no_grad():
            fwd = timed(lambda i: f(q, k, v, is_causal=True, enable_gqa=True), 10)
        total = timed(both, 10)
    return {"backend": backend, "head_dim": d, "seq": s, "batch": b, "fwd_s": fwd,
            "bwd_s": total - fwd}  # fmt: skip


def measure_attention_gqa() -> dict[str, Any]:
    """SDPA with grouped K/V heads (``enable_gqa``): 64 query heads over 8 K/V heads of 128
    (Llama 3 70B's attention), and 64 over 8 of 64 (gpt-oss's head size), causal, BF16."""
    rows = []
    for backend in ("flash", "cudnn"):
        for d in (128, 64):
            for s in (4096, 8192):
                try:
                    rows.append(_gqa_row(backend, d, s))
                except Exception as exc:
                    err = f"{type(exc).__name__}: {exc}"
                    rows.append({"backend": backend, "head_dim": d, "seq": s, "error": err})
                _free()
    return {"q_heads": 64, "kv_heads": 8, "dtype": "bf16", "rows": rows}


def measure_sustained(seconds: float = 20.0) -> dict[str, Any]:
    """One BF16 GEMM (Llama 3 70B's FC1 at tp 4, 8,192 tokens) back to back for ``seconds``:
    the rate in each half-second window, as the clocks settle under the power limit."""
    m, n, k = 8192, 14336, 8192
    a = [torch.randn(m, k, device=DEV, dtype=torch.bfloat16) for _ in range(2)]
    b = [torch.randn(n, k, device=DEV, dtype=torch.bfloat16).t() for _ in range(2)]
    per = timed(lambda i: torch.mm(a[i % 2], b[i % 2]), 5)
    calls = max(1, int(0.5 / per))
    windows = []
    t_end = time.time() + seconds
    while time.time() < t_end:
        t = timed(lambda i: torch.mm(a[i % 2], b[i % 2]), calls, warmup=0)
        windows.append(
            {
                "at_s": round(seconds - (t_end - time.time()), 2),
                "tflops": 2.0 * m * n * k / t / 1e12,
            }
        )
    return {"mnk": [m, n, k], "windows": windows}


class _LlamaBlock(_Block):
    """torchtitan's Llama 3 block in eager PyTorch (``torchtitan/models/llama3/model``): RMSNorm,
    separate wq/wk/wv, complex rotary embedding, SDPA over repeated K/V heads, wo, SwiGLU (the
    layers of :class:`measure_memory._Block`, with the rotary embedding)."""

    def _rope(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs).flatten(3).type_as(x)

    def forward(self, x: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        y = self.n1(x)
        q = self._rope(self.wq(y).view(b, s, self.heads, self.d), freqs)
        k = self._rope(self.wk(y).view(b, s, self.kv, self.d), freqs)
        v = self.wv(y).view(b, s, self.kv, self.d)
        rep = self.heads // self.kv
        k = k[:, :, :, None, :].expand(b, s, self.kv, rep, self.d).reshape(b, s, self.heads, self.d)
        v = v[:, :, :, None, :].expand(b, s, self.kv, rep, self.d).reshape(b, s, self.heads, self.d)
        o = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.wo(o.transpose(1, 2).reshape(b, s, -1))
        y = self.n2(x)
        return x + self.w2(torch.nn.functional.silu(self.w1(y)) * self.w3(y))


def _kernel_table(prof: Any) -> list[dict[str, Any]]:
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
        if t > 0:
            rows.append({"name": e.key[:120], "calls": e.count, "device_us": t})
    return sorted(rows, key=lambda r: -r["device_us"])[:60]


def _layer_row(name: str, layers: int, backend: str) -> dict[str, Any]:
    h, q, _, f, _ = LAYERS[name]
    heads, kv, s = q // 128, 8, 8192
    blocks = torch.nn.ModuleList(_LlamaBlock(h, heads, kv, f) for _ in range(layers))
    blocks = blocks.to(DEV, torch.bfloat16)
    pos = torch.arange(s, device=DEV, dtype=torch.float32)
    inv = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, device=DEV).float() / 128))
    freqs = torch.polar(torch.ones(s, 64, device=DEV), torch.outer(pos, inv))[None, :, None, :]
    x = torch.randn(1, s, h, device=DEV, dtype=torch.bfloat16, requires_grad=True)

    def step(i: int) -> None:
        y = x
        for blk in blocks:
            y = blk(y, freqs)
        y.sum().backward()

    with _sdpa(backend):
        t = timed(step, 5, warmup=2)
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step(0)
            _sync()
    return {"model": name, "layers": layers, "seq": s, "batch": 1, "backend": backend,
            "step_s": t, "per_layer_s": t / layers, "kernels": _kernel_table(prof)}  # fmt: skip


def measure_layer() -> dict[str, Any]:
    """Forward and backward of a stack of torchtitan-style Llama 3 blocks (BF16 weights, eager,
    no recomputation), one sequence of 8,192 tokens: the whole step's time and, from one
    profiled step, each kernel's device time — what a layer runs beside its GEMMs and attention."""
    rows = []
    for name, layers in (("llama3-8b", 4), ("llama3-70b", 2)):
        for backend in ("flash", "cudnn"):
            try:
                rows.append(_layer_row(name, layers, backend))
            except Exception as exc:
                rows.append(
                    {"model": name, "backend": backend, "error": f"{type(exc).__name__}: {exc}"}
                )
            _free()
    return {"rows": rows}


def measure_ring_chunks(seq: int = 131072) -> dict[str, Any]:
    """One rank's calls of a load-balanced causal ring over cp ranks, against the whole call."""
    rows = []
    for backend in ("flash", "cudnn"):
        try:
            whole = bench_attention(1, seq, seq, True, backend)
        except Exception as exc:
            rows.append({"backend": backend, "error": f"{type(exc).__name__}: {exc}"})
            continue
        for cp in (2, 4, 8):
            c = seq // (2 * cp)
            try:
                diag = bench_attention(1, 2 * c, 2 * c, True, backend)
                off = bench_attention(1, 2 * c, c, False, backend)
            except Exception as exc:
                rows.append({"backend": backend, "cp": cp, "error": f"{type(exc).__name__}: {exc}"})
                continue
            rows.append({
                "backend": backend, "seq": seq, "cp": cp, "chunk": c,
                "diag": diag, "off_diag": off, "off_diag_calls": cp - 1,
                "rank_fwd_s": diag["fwd_s"] + (cp - 1) * off["fwd_s"],
                "rank_bwd_s": diag["bwd_s"] + (cp - 1) * off["bwd_s"],
                "whole_over_cp_fwd_s": whole["fwd_s"] / cp,
                "whole_over_cp_bwd_s": whole["bwd_s"] / cp,
            })  # fmt: skip
            _free()
    return {"heads": 32, "head_dim": 128, "rows": rows}


def _grouped_row(groups: int, tokens: int, n: int, k: int) -> dict[str, Any]:
    """Grouped, per-expert loop and same-FLOPs dense seconds of G experts of T tokens each."""
    x = torch.randn(groups * tokens, k, device=DEV, dtype=torch.bfloat16)
    w = torch.randn(groups, n, k, device=DEV, dtype=torch.bfloat16)
    offs = torch.arange(1, groups + 1, device=DEV, dtype=torch.int32) * tokens
    flops = 2.0 * groups * tokens * n * k
    row: dict[str, Any] = {"groups": groups, "tokens_per_group": tokens, "n": n, "k": k}
    calls: dict[str, Callable[[int], Any]] = {
        "grouped_mm_s": lambda i: torch._grouped_mm(x, w.transpose(-2, -1), offs=offs),
        "loop_mm_s": lambda i: [x[g * tokens : (g + 1) * tokens] @ w[g].t() for g in range(groups)],
        "dense_same_flops_s": lambda i: x @ w[0].t(),
    }
    for name, call in calls.items():
        try:
            row[name] = timed(call, _iters(flops, 4e14))
        except Exception as exc:
            row[name] = f"{type(exc).__name__}: {exc}"
    row["flops"] = flops
    return row


def measure_grouped(hidden: int = 2048, ffn: int = 768) -> dict[str, Any]:
    """Experts' FC1 forward (tokens × hidden → 2·ffn) for G local experts of T tokens each."""
    rows = [
        _grouped_row(groups, tokens, 2 * ffn, hidden)
        for groups, tokens in ((16, 2048), (16, 512), (16, 128), (4, 2048), (8, 4096))
    ]
    return {"dtype": "bf16", "layer": "expert FC1 (gated), Qwen3-30B-A3B widths", "rows": rows}


def _host_per_call(fn: Callable[[], Any], calls: int = 2000) -> float:
    """Host seconds per call while the GPU waits on the host (tiny operands)."""
    for _ in range(50):
        fn()
    _sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    _sync()
    return (t1 - t0) / calls


def measure_host() -> dict[str, Any]:
    x = torch.randn(64, 64, device=DEV, dtype=torch.bfloat16)
    lin = torch.nn.Linear(64, 64, bias=False, device=DEV, dtype=torch.bfloat16)
    xi = torch.randn(64, 64, device=DEV, dtype=torch.bfloat16, requires_grad=True)

    def fwd_bwd() -> None:
        lin(xi).sum().backward()

    return {
        "add_s": _host_per_call(lambda: x.add_(1)),
        "mm_s": _host_per_call(lambda: torch.mm(x, x)),
        "linear_fwd_s": _host_per_call(lambda: lin(x)),
        "linear_fwd_bwd_s": _host_per_call(fwd_bwd, 500),
        "cpu": _cpu_name(),
    }


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def measure_optimizer(params: int = 2**28) -> dict[str, Any]:
    """One AdamW step over ``params`` FP32 parameters in 64 tensors (FP32 gradients)."""
    out: dict[str, Any] = {"parameters": params}
    ps = [torch.nn.Parameter(torch.randn(params // 64, device=DEV)) for _ in range(64)]
    for p in ps:
        p.grad = torch.randn_like(p)
    for mode in ("fused", "foreach"):
        opt = torch.optim.AdamW(ps, lr=1e-4, **{mode: True})
        t = timed(lambda i, o=opt: o.step(), 5, warmup=2)
        # read param, grad, m, v; write param, m, v: 7 × 4 B a parameter
        out[mode] = {"seconds": t, "s_per_param": t / params, "bytes_per_s": 28 * params / t}
        del opt
    return out


def measure_stream(nbytes: int = 4 * 2**30) -> dict[str, Any]:
    a = torch.empty(nbytes, device=DEV, dtype=torch.uint8)
    b = torch.empty_like(a)
    t = timed(lambda i: b.copy_(a), 10)
    return {"bytes": nbytes, "seconds": t, "read_plus_write_bytes_per_s": 2 * nbytes / t}


def _section(name: str, fn: Callable[[], dict[str, Any]], results: dict[str, Any]) -> None:
    t0 = time.time()
    try:
        results[name] = fn()
    except Exception as exc:
        results[name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    results[name]["wall_s"] = round(time.time() - t0, 1)
    print(name, json.dumps(results[name])[:300], flush=True)
    _free()


SECTIONS: dict[str, Callable[[], dict[str, Any]]] = {
    "stream": measure_stream,
    "host": measure_host,
    "gemm_bf16": lambda: measure_gemm("bf16"),
    "gemm_fp8": lambda: measure_gemm("fp8"),
    "grouped_gemm": measure_grouped,
    "optimizer": measure_optimizer,
    "attention": measure_attention,
    "attention_gqa": measure_attention_gqa,
    "sustained": measure_sustained,
    "layer": measure_layer,
    "ring_chunks": measure_ring_chunks,
}


def _header() -> dict[str, Any]:
    """The device, the library versions and the run's date and PyTorch/NCCL settings."""
    props = torch.cuda.get_device_properties(0)
    return {
        "device": torch.cuda.get_device_name(),
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "date": time.strftime("%Y-%m-%d"),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("PYTORCH_", "NCCL_"))},
    }


def run_sections(
    argv: list[str] | None,
    sections: dict[str, Callable[[], dict[str, Any]]],
    header: Callable[[], dict[str, Any]],
    doc: str | None,
) -> int:
    """The measuring scripts' command line: ``--out`` JSON (rewritten after each section, so a
    timeout keeps what ran), ``--only`` sections; exit 2 without a CUDA device."""
    p = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--only", default="", help="comma-separated sections (default: all)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA device: nothing measured", file=sys.stderr)
        return 2
    results = header()
    for name in [s for s in args.only.split(",") if s] or list(sections):
        _section(name, sections[name], results)
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_sections(argv, SECTIONS, _header, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
