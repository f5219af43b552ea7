"""What a communication kernel running beside a GEMM costs the GEMM, measured on one CUDA device.

Run on a machine with a GPU (not in CI; nothing requires it):

    python -m tests.fidelity.device.measure_contention --out "$OUT/contention.json"

or copied anywhere inside a checkout (it finds ``tests/fidelity/device/measure_kernels.py`` in a
folder above itself and imports the shapes and the layer from there; it never imports trainplan).
The analysis runs on any machine, from the file: ``tests/fidelity/test_device_h200_contention.py``.

An NCCL collective runs as one CTA per channel, each CTA moving its share of the data through
HBM for as long as the collective lasts, with ``NCCL_SIMPLE_MAX_NTHREADS`` = 512 threads (ring,
Simple protocol; ``topoGetAlgoInfo`` in src/enqueue.cc adds one sync warp) — src/include/device.h
and src/graph/tuning.cc ``ncclTopoTuneModel`` at NVIDIA/nccl 5067397c. One device has no peer to
send to, so the stand-in is a persistent copy kernel of ``k`` CTAs of 512 threads (Triton, 16
warps) that copies HBM to HBM at its own pace until a flag in device memory tells it to stop. It
holds its ``k`` SMs the whole time, as NCCL's CTAs do while a collective runs.

Sections (each catches its own failure and records it):

* ``copy_alone`` — the stand-in copy alone at k = 8, 16, 24, 32, 64 CTAs: bytes per second;
  and a hold-only stand-in (k CTAs of register arithmetic, no memory traffic) at k = 8, 32, 64,
  which separates the SMs taken from the HBM bandwidth and power taken.
* ``gemm_sm_copy`` — BF16 ``torch.mm`` at validation shapes (``measure_kernels.layer_gemms``),
  alone (before and after) and beside the stand-in at each k: the GEMM's time and the copy's
  achieved bandwidth while beside it; and beside the hold-only stand-in.
* ``gemm_copy_engine`` — the same GEMMs beside copies that no SM runs: pinned host → device and
  device → host ``cudaMemcpyAsync`` on two side streams (the copy engines; HBM traffic without
  SM contention), and beside a device → device ``copy_`` of 256 MiB buffers on a side stream
  (cudaMemcpyAsync; whether the driver runs it on a copy engine or on SMs shows in the result).
* ``layer`` — forward + backward of two torchtitan-style Llama 3 70B blocks at tp 8 widths
  (8 query heads of 128, one K/V head, FFN 3,584; ``measure_kernels._LlamaBlock``), one sequence
  of 8,192 tokens, alone and beside the stand-in at 32 and 64 CTAs and the hold-only one at 32.

Each row carries its shapes and the SM clock and board power sampled while it ran; the header
carries the versions.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def _kernels_module() -> Any:
    """``measure_kernels`` from the checkout this file sits in (by package, else by path)."""
    try:
        from tests.fidelity.device import measure_kernels
    except ImportError:
        for up in Path(__file__).resolve().parents:
            if (up / "tests" / "fidelity" / "device" / "measure_kernels.py").exists():
                sys.path.insert(0, str(up))
                break
        from tests.fidelity.device import measure_kernels
    return measure_kernels


mk = _kernels_module()

NCCL_THREADS = 512
"""NCCL_SIMPLE_MAX_NTHREADS (src/include/device.h, NVIDIA/nccl 5067397c): ring/Simple CTA size."""
CTAS = (8, 16, 24, 32, 64)
REGION_BYTES = 16 * 2**20
"""Each CTA's own region of the source and destination: 16 MiB, so k = 8 spans 2.5× the L2."""
SLICE_BYTES = 2**20
"""Bytes a CTA copies between two looks at the stop flag."""
HOLDS = (8, 32, 64)
"""CTA counts of the hold-only stand-in (SMs taken, no memory traffic)."""
CAPS: dict[tuple[bool, int], int] = {}
"""Per k, the most slices a CTA copies before it stops unasked: one second at its rate alone."""
GEMMS = (
    mk.layer_gemms("llama3-70b", 8, 8192)
    + [g for g in mk.layer_gemms("llama3-8b", 1, 8192) if g["gemm"] == "fprop"]
    + [g for g in mk.layer_gemms("llama3-405b", 8, 8192) if g["linear"] == "fc1"]
)
"""Llama 3 70B at tp 8 (all 12 GEMMs), 8B at tp 1 (forward GEMMs), 405B at tp 8 (FC1): 8,192
tokens per micro-batch, as the validation set's dense Hopper runs split them."""


def _copy_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def copy_until(src, dst, flag, rounds_out, region, slice_elems, slices, max_rounds,
                   BLOCK: tl.constexpr, COPY: tl.constexpr):  # fmt: skip
        base = tl.program_id(0).to(tl.int64) * region
        rounds = tl.full((), 0, tl.int32)
        acc = tl.zeros((BLOCK,), tl.float32)
        stop = tl.load(flag, volatile=True)
        while (stop == 0) & (rounds < max_rounds):
            if COPY:
                start = base + (rounds % slices) * slice_elems
                for off in range(0, slice_elems, BLOCK):
                    idx = start + off + tl.arange(0, BLOCK)
                    tl.store(dst + idx, tl.load(src + idx))
            else:  # hold the SM without touching memory: a few µs of FMAs between flag reads
                for _ in range(256):
                    acc = acc * 0.999 + 1.0
            rounds += 1
            stop = tl.load(flag, volatile=True)
        tl.store(rounds_out + tl.program_id(0), rounds)
        if not COPY:
            tl.store(dst + base + tl.arange(0, BLOCK), acc.to(tl.int32))

    return triton, copy_until


class SmCopy:
    """The stand-in collective: ``ctas`` persistent CTAs copying HBM to HBM until stopped (or,
    ``copy=False``, holding their SMs with register arithmetic and moving nothing)."""

    def __init__(self, ctas: int, copy: bool = True) -> None:
        self.triton, self.kernel = _copy_kernel()
        self.ctas = ctas
        n = ctas * REGION_BYTES // 4
        self.src = torch.randint(0, 2**30, (n,), device="cuda", dtype=torch.int32)
        self.dst = torch.empty_like(self.src)
        self.flag = torch.zeros(1, device="cuda", dtype=torch.int32)
        self.rounds = torch.zeros(ctas, device="cuda", dtype=torch.int32)
        self.stream = torch.cuda.Stream()
        self.ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
        self.copy = copy
        self.max_rounds = CAPS.get((copy, ctas), 30_000 if copy else 300_000)
        self.compiled: Any = None

    def start(self) -> None:
        main = torch.cuda.current_stream()
        with torch.cuda.stream(self.stream):
            self.flag.zero_()
            self.ev[2].record()
            self.ev[0].record()
            self.compiled = self.kernel[(self.ctas,)](
                self.src, self.dst, self.flag, self.rounds, REGION_BYTES // 4, SLICE_BYTES // 4,
                REGION_BYTES // SLICE_BYTES, self.max_rounds, BLOCK=4096,
                COPY=self.copy, num_warps=NCCL_THREADS // 32,
            )  # fmt: skip
            self.ev[1].record()
        main.wait_event(self.ev[2])
        torch.cuda._sleep(50_000)  # ~25 µs: the copy's CTAs take their SMs before the GEMMs

    def stop(self) -> dict[str, Any]:
        self.flag.fill_(1)
        self.ev[1].synchronize()
        torch.cuda.current_stream().synchronize()  # the flag written before the next start
        seconds = self.ev[0].elapsed_time(self.ev[1]) / 1e3
        rounds = self.rounds.sum().item()
        moved = rounds * SLICE_BYTES if self.copy else 0
        return {"copy_s": seconds, "copied_bytes": moved,
                "copy_read_plus_write_bytes_per_s": 2 * moved / seconds,
                "capped": bool(self.rounds.max().item() >= self.max_rounds)}  # fmt: skip

    def kernel_info(self) -> dict[str, Any]:
        c = self.compiled
        info: dict[str, Any] = {"triton": self.triton.__version__, "threads": NCCL_THREADS}
        for key in ("n_regs", "n_spills"):
            info[key] = getattr(c, key, None)
        try:
            info["shared_bytes"] = c.metadata.shared
        except AttributeError:
            info["shared_bytes"] = None
        return info


class EngineCopy:
    """Copies no SM runs: pinned host ↔ device on two side streams; or device → device."""

    def __init__(self, mode: str, nbytes: int = 256 * 2**20) -> None:
        self.mode = mode
        self.dev = [torch.empty(nbytes, device="cuda", dtype=torch.uint8) for _ in range(2)]
        self.host = (
            []
            if mode == "d2d"
            else [torch.empty(nbytes, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        )
        self.streams = [torch.cuda.Stream() for _ in range(2)]
        self.ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        self.nbytes, self.calls = nbytes, 0

    def start(self, seconds: float) -> None:
        rate = 5e10 if self.mode != "d2d" else 1.5e12
        self.calls = max(2, int(1.5 * seconds * rate / self.nbytes) + 1)
        pairs = (
            [(self.dev[0], self.dev[1])]
            if self.mode == "d2d"
            else [(self.dev[0], self.host[0]), (self.host[1], self.dev[1])]
        )
        for j, (dst, src) in enumerate(pairs):
            with torch.cuda.stream(self.streams[j]):
                self.ev[2 * j].record()
                for _ in range(self.calls):
                    dst.copy_(src, non_blocking=True)
                self.ev[2 * j + 1].record()
        self.pairs = len(pairs)

    def stop(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode, "bytes_per_call": self.nbytes}
        for j in range(self.pairs):
            self.ev[2 * j + 1].synchronize()
            s = self.ev[2 * j].elapsed_time(self.ev[2 * j + 1]) / 1e3
            name = ("h2d", "d2h")[j] if self.mode != "d2d" else "d2d"
            out[f"{name}_s"] = s
            out[f"{name}_bytes_per_s"] = self.calls * self.nbytes / s
        return out


def _clocks() -> dict[str, Any]:
    """SM clock (MHz) and board power (W) now, from NVML, else nvidia-smi."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return {"sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
                "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1e3}  # fmt: skip
    except Exception:
        pass
    try:
        q = "--query-gpu=clocks.sm,power.draw"
        out = subprocess.run(["nvidia-smi", q, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=5).stdout  # fmt: skip
        sm, w = out.strip().splitlines()[0].split(",")
        return {"sm_mhz": float(sm), "power_w": float(w)}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def timed_beside(fn: Callable[[int], Any], iters: int, warmup: int = 3) -> dict[str, Any]:
    """Mean seconds of ``fn(i)`` on the current stream, without synchronising the device (a
    persistent kernel on another stream may be running): the events alone are waited on."""
    for i in range(warmup):
        fn(i)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(iters):
        fn(i)
    end.record()
    clocks = _clocks()  # sampled while the queued calls run
    end.synchronize()
    return {"seconds": start.elapsed_time(end) / 1e3 / iters, "iters": iters, **clocks}


def _gemm_call(m: int, n: int, k: int) -> Callable[[int], Any]:
    r = mk._copies(2 * (m * k + k * n))
    a = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(r)]
    b = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() for _ in range(r)]
    outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    return lambda i: torch.mm(a[i % r], b[i % r], out=outs[i % 2])


def _beside(fn: Callable[[int], Any], iters: int, bg: Any, seconds: float) -> dict[str, Any]:
    if isinstance(bg, EngineCopy):
        bg.start(seconds)
    else:
        bg.start()
    try:
        row = timed_beside(fn, iters)
    finally:
        row_bg = bg.stop()
    return {**row, **row_bg}


def measure_copy_alone() -> dict[str, Any]:
    """The stand-in alone ~0.1 s at each k; sets each one's cap at one second of its rate."""
    torch.zeros(1, device="cuda", dtype=torch.int32).fill_(1)  # loaded now: lazy loading of
    torch.cuda._sleep(1_000)  # a kernel while the persistent one runs would wait for it
    rows = []
    for copy, ks in ((True, CTAS), (False, HOLDS)):
        for k in ks:
            bg = SmCopy(k, copy)
            bg.start()
            torch.cuda._sleep(200_000_000)  # ~0.1 s at the H200's 1.98 GHz
            row = bg.stop()
            per_cta = bg.rounds.float().mean().item() / row["copy_s"]
            CAPS[(copy, k)] = max(2_000, int(per_cta))
            rows.append({"ctas": k, "copy": copy, **row, **_clocks(), **bg.kernel_info()})
            del bg
            mk._free()
    return {"region_bytes_per_cta": REGION_BYTES, "slice_bytes": SLICE_BYTES, "rows": rows}


def _gemm_row(g: dict[str, Any], backgrounds: dict[str, Any]) -> dict[str, Any]:
    m, n, k = g["mnk"]
    fn = _gemm_call(m, n, k)
    iters = int(min(400, max(5, 0.08 * 6e14 / (2.0 * m * n * k))))  # about 80 ms a loop
    before = timed_beside(fn, iters)
    row: dict[str, Any] = {**g, "flops": 2.0 * m * n * k, "alone_before": before}
    for name, bg in backgrounds.items():
        try:
            row[name] = _beside(fn, iters, bg, before["seconds"] * (iters + 3))
        except Exception as exc:
            row[name] = {"error": f"{type(exc).__name__}: {exc}"}
    row["alone_after"] = timed_beside(fn, iters)
    return row


def _gemm_section(backgrounds: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for g in GEMMS:
        try:
            rows.append(_gemm_row(g, backgrounds))
        except Exception as exc:
            rows.append({**g, "error": f"{type(exc).__name__}: {exc}"})
        mk._free()
    return {"dtype": "bf16", "rows": rows}


def measure_gemm_sm_copy() -> dict[str, Any]:
    backgrounds: dict[str, Any] = {f"sm_copy_{k}": SmCopy(k) for k in CTAS}
    backgrounds.update({f"sm_hold_{k}": SmCopy(k, copy=False) for k in HOLDS})
    out = _gemm_section(backgrounds)
    out["copy_kernel"] = backgrounds["sm_copy_32"].kernel_info()
    return out


def measure_gemm_copy_engine() -> dict[str, Any]:
    return _gemm_section({"h2d_d2h": EngineCopy("h2d_d2h"), "d2d": EngineCopy("d2d")})


def _tp8_block(h: int, heads: int, kv: int, f: int) -> Any:
    """``measure_kernels._LlamaBlock`` at tensor-parallel widths (head size 128 kept)."""
    blk = mk._LlamaBlock(h, heads, kv, f)
    d = 128
    blk.d = d
    blk.wq = torch.nn.Linear(h, heads * d, bias=False)
    blk.wk = torch.nn.Linear(h, kv * d, bias=False)
    blk.wv = torch.nn.Linear(h, kv * d, bias=False)
    blk.wo = torch.nn.Linear(heads * d, h, bias=False)
    return blk


def measure_layer(layers: int = 2, s: int = 8192) -> dict[str, Any]:
    h, tp = 8192, 8
    heads, kv, f = 64 // tp, 8 // tp, 28672 // tp
    blocks = torch.nn.ModuleList(_tp8_block(h, heads, kv, f) for _ in range(layers))
    blocks = blocks.to("cuda", torch.bfloat16)
    pos = torch.arange(s, device="cuda", dtype=torch.float32)
    inv = 1.0 / (500000.0 ** (torch.arange(0, 128, 2, device="cuda").float() / 128))
    freqs = torch.polar(torch.ones(s, 64, device="cuda"), torch.outer(pos, inv))[None, :, None, :]
    x = torch.randn(1, s, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def step(i: int) -> None:
        y = x
        for blk in blocks:
            y = blk(y, freqs)
        y.sum().backward()

    out: dict[str, Any] = {"model": "llama3-70b", "tp": tp, "layers": layers, "seq": s,
                           "heads": heads, "kv_heads": kv, "ffn": f, "backend": "default sdpa"}  # fmt: skip
    with mk._sdpa("flash"):
        out["alone_before"] = timed_beside(step, 10)
        for k in (32, 64):
            out[f"sm_copy_{k}"] = _beside(step, 10, SmCopy(k), 0.0)
        out["sm_hold_32"] = _beside(step, 10, SmCopy(32, copy=False), 0.0)
        out["alone_after"] = timed_beside(step, 10)
    out["backend"] = "flash"
    return out


SECTIONS: dict[str, Callable[[], dict[str, Any]]] = {
    "copy_alone": measure_copy_alone,
    "gemm_sm_copy": measure_gemm_sm_copy,
    "gemm_copy_engine": measure_gemm_copy_engine,
    "layer": measure_layer,
}


def _header() -> dict[str, Any]:
    props = torch.cuda.get_device_properties(0)
    head: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "sms": props.multi_processor_count,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nccl": ".".join(map(str, torch.cuda.nccl.version())),
        "date": time.strftime("%Y-%m-%d"),
        "env": {k: v for k, v in os.environ.items() if k.startswith(("PYTORCH_", "NCCL_"))},
    }
    q = "--query-gpu=driver_version,power.limit,clocks.max.sm,clocks.max.mem"
    try:
        head["nvidia_smi"] = subprocess.run(["nvidia-smi", q, "--format=csv"], timeout=10,
                                            capture_output=True, text=True).stdout  # fmt: skip
    except Exception as exc:
        head["nvidia_smi"] = f"{type(exc).__name__}: {exc}"
    try:
        import triton

        head["triton"] = triton.__version__
    except Exception as exc:
        head["triton"] = f"not available ({type(exc).__name__}): stand-in copy not measured"
    return head


def main(argv: list[str] | None = None) -> int:
    return mk.run_sections(argv, SECTIONS, _header, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
