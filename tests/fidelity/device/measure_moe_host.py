"""Host issue time against GPU time of a Megatron-style MoE layer, measured on one CUDA device.

Run on a machine with a GPU (not in CI; nothing requires it):

    python -m tests.fidelity.device.measure_moe_host --out "$OUT/moe_host.json"

or copied anywhere inside a checkout (it finds ``measure_kernels.py`` as
``measure_contention.py`` does; it never imports trainplan). Nothing analyses its file yet: it
is the measurement that would settle whether a per-layer host term belongs in the cost model
(issue 23, fine-grained MoE rows predicted 13–65 % fast; the mechanism and its code citations are
in the session report that prepared this script).

The mechanism it isolates. Megatron-Core's dropless MoE layer copies the routing's token counts
to the host and waits for them once per layer's forward (``MoEAlltoAllTokenDispatcher``:
``_maybe_dtoh_and_synchronize`` ends in ``self.d2h_event.synchronize()`` at ``cuda_sync_point``
"before_ep_alltoall"; DeepEP's dispatch busy-waits on the received counts; HybridEP copies them
when ``num_permuted_tokens`` is not given), because the all-to-all's splits and Transformer
Engine's ``GroupedLinear`` (``m_splits: List[int]``) need them as host integers. After the wait
the GPU's queue holds only what the host issued since, so the rest of the layer runs at the
host's pace wherever issuing a kernel takes longer than running it: few tokens per expert, many
local experts, per-expert kernels (one GEMM per expert, per-expert FP8 casts). No sync is in the
backward (the splits are saved), so there the host may run ahead across layers.

The layer here (plain PyTorch, BF16; one GPU stands in for one expert-parallel rank, no
all-to-all): pre-MLP RMSNorm; router ``[T, h] × [h, E]`` in FP32, softmax, top-k, the auxiliary
loss's per-expert counts; the rank's rows are the routed copies whose expert is one of the
first ``E / ep`` (≈ ``T·k/ep`` rows under balanced routing, their count data-dependent as in a
run); their counts per local expert go to the host (``tolist``, the sync; every other size is
static, as Megatron's dropless ``num_out_tokens`` is); permutation by expert (``argsort``,
``index_select``); each local expert's gated FC1, SwiGLU and FC2, as ``torch._grouped_mm`` (one
launch per GEMM) or as a loop of one ``torch.mm`` per expert (Transformer Engine's
GroupedLinear launches one cuBLAS GEMM per expert, ``general_grouped_gemm``); optionally, on each
expert's rows of each GEMM input, forward, and of each output gradient, backward, the kernels of
a current-scaling cast (amax, scale, cast to E4M3: seven small eager kernels here, four in
Transformer Engine's C++ ``Float8CurrentScalingQuantizer``); the probabilities' product and the
scatter back (``index_add``).

Variants per row: ``sync`` (the counts read by the host every layer) and ``static`` (the first
call's permutation and counts reused: the host never waits, as under Megatron's drop-and-pad,
where ``_maybe_dtoh_and_synchronize`` does nothing). Each row records, per layer and
micro-batch, the wall time of a stack of layers' forward and backward (``wall_s``), the GPU's
busy time from one profiled step (the sum of its kernels' device time, ``gpu_s``), the host's
time to issue the ``static`` step before it waits at the end (``issue_s``) and the kernels
launched (``kernels``). What the sync exposes is ``wall_s(sync) − max(gpu_s, wall_s(static))``;
the host cost per kernel is ``issue_s / kernels``. A ``host`` section repeats
``measure_kernels``' per-call host times on this machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

# Run as a module from the checkout root (python -m tests.fidelity.device.measure_moe_host), as
# the device tool does; measure_contention.py carries the by-path fallback for a bare script.
from tests.fidelity.device import measure_kernels as mk  # noqa: E402

MOE = {
    # name: (hidden, expert FFN, experts, top-k)
    "qwen3-30b-a3b": (2048, 768, 128, 8),
    "qwen3-235b-a22b": (4096, 1536, 128, 8),
    "gpt-oss-120b": (2880, 2880, 128, 4),
    "deepseek-v3": (7168, 2048, 256, 8),
}
"""MoE layer widths (the models' Hugging Face configs, as the catalogue has them)."""

CASES = [
    ("qwen3-30b-a3b", 8, 1), ("qwen3-30b-a3b", 8, 2), ("qwen3-30b-a3b", 8, 4),
    ("qwen3-30b-a3b", 8, 8), ("qwen3-235b-a22b", 8, 1), ("qwen3-235b-a22b", 32, 1),
    ("qwen3-235b-a22b", 8, 2), ("gpt-oss-120b", 8, 1), ("gpt-oss-120b", 8, 4),
    ("deepseek-v3", 8, 1), ("deepseek-v3", 64, 1),
]  # fmt: skip
"""(model, ep, micro-batch size) of the validation set's Megatron Bridge rows, 4,096 tokens a
sequence."""

SEQ = 4096
LAYERS = 4


class _Casts(torch.autograd.Function):
    """Identity whose forward and backward each launch, per local expert's rows, the kernels of
    an FP8 current-scaling cast (amax, scale, cast to E4M3) on their operand, result discarded."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, splits: list[int]) -> torch.Tensor:
        ctx.splits = splits
        for chunk in x.split(splits):
            _cast(chunk)
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        for chunk in g.split(ctx.splits):
            _cast(chunk)
        return g, None


def _cast(x: torch.Tensor) -> None:
    scale = 448.0 / x.abs().amax().float().clamp(min=1e-12)
    (x * scale).to(torch.float8_e4m3fn)


class MoELayer(torch.nn.Module):
    """The rank's part of one dropless MoE layer (see the module docstring)."""

    def __init__(self, h: int, f: int, experts: int, top_k: int, ep: int) -> None:
        super().__init__()
        self.e, self.k, self.local, self.f = experts, top_k, experts // ep, f
        self.norm = torch.nn.RMSNorm(h)
        self.router = torch.nn.Parameter(torch.randn(h, experts) / h**0.5)
        self.w1 = torch.nn.Parameter(torch.randn(self.local, 2 * f, h) / h**0.5)
        self.w2 = torch.nn.Parameter(torch.randn(self.local, h, f) / f**0.5)
        self.grouped, self.casts, self.static = True, False, False
        self._cached: tuple[torch.Tensor, torch.Tensor, list[int]] | None = None

    def _route(self, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[int], Any]:
        """(token of each of the rank's rows, its probability, rows per local expert, aux
        loss); the rows per local expert are read by the host: the layer's one sync."""
        probs = torch.softmax(y.float() @ self.router.float(), dim=-1)
        top_p, top_i = torch.topk(probs, self.k, dim=-1)
        flat = top_i.flatten()
        counts = torch.zeros(self.e, device=y.device, dtype=torch.long)
        counts.scatter_add_(0, flat, torch.ones_like(flat))  # no sync (bincount would)
        aux = (probs.mean(0) * counts.float()).sum() * 1e-3
        if self.static and self._cached is not None:
            token, sel, splits = self._cached
            return token, top_p.flatten()[sel], splits, aux
        order = torch.argsort(flat, stable=True)
        splits = counts[: self.local].tolist()  # the host waits here
        sel = order[: sum(splits)]
        token = sel // self.k
        self._cached = (token, sel, splits)
        return token, top_p.flatten()[sel], splits, aux

    def _experts(self, xs: torch.Tensor, splits: list[int]) -> torch.Tensor:
        if self.grouped:
            offs = torch.tensor(splits, device=xs.device, dtype=torch.int32).cumsum(0)
            offs = offs.to(torch.int32)
            a = torch._grouped_mm(self._q(xs, splits), self.w1.transpose(-2, -1), offs=offs)
            a = torch.nn.functional.silu(a[:, : self.f]) * a[:, self.f :]
            return torch._grouped_mm(self._q(a, splits), self.w2.transpose(-2, -1), offs=offs)
        xs, outs, start = self._q(xs, splits), [], 0
        for e, n in enumerate(splits):
            a = xs[start : start + n] @ self.w1[e].t()
            a = torch.nn.functional.silu(a[:, : self.f]) * a[:, self.f :]
            outs.append(self._q(a, [n]) @ self.w2[e].t())
            start += n
        return torch.cat(outs)

    def _q(self, x: torch.Tensor, splits: list[int]) -> torch.Tensor:
        """``x`` with the per-expert casts' kernels launched on each expert's rows."""
        return _Casts.apply(x, splits) if self.casts else x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        token, p, splits, aux = self._route(y)
        xs = y.index_select(0, token)
        out = self._experts(xs, splits) * p.to(xs.dtype)[:, None]
        moe = torch.zeros_like(y).index_add(0, token, out)
        return x + moe + aux.to(x.dtype) * 0


def _stack(name: str, ep: int, mbs: int) -> tuple[torch.nn.ModuleList, torch.Tensor]:
    h, f, experts, k = MOE[name]
    layers = torch.nn.ModuleList(MoELayer(h, f, experts, k, ep) for _ in range(LAYERS))
    layers = layers.to(mk.DEV, torch.bfloat16)
    x = torch.randn(SEQ * mbs, h, device=mk.DEV, dtype=torch.bfloat16, requires_grad=True)
    return layers, x


def _step(layers: torch.nn.ModuleList, x: torch.Tensor) -> Callable[[int], Any]:
    def step(i: int) -> None:
        y = x
        for layer in layers:
            y = layer(y)
        y.float().sum().backward()

    return step


def _profiled(step: Callable[[int], Any]) -> tuple[float, int]:
    """(GPU busy seconds, kernels launched) of one step: the profiled kernels' device time."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if mk.DEV == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        step(0)
        mk._sync()
    busy, kernels = 0.0, 0
    for e in prof.events():
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
            busy += e.device_time_total
            kernels += 1
    return busy * 1e-6, kernels


def _issue_seconds(step: Callable[[int], Any], iters: int = 5) -> float:
    """Host seconds to issue one step, timed before the wait at its end (static variant)."""
    total = 0.0
    for i in range(iters):
        mk._sync()
        t0 = time.perf_counter()
        step(i)
        total += time.perf_counter() - t0
        mk._sync()
    return total / iters


def _variant(layers: torch.nn.ModuleList, x: torch.Tensor, static: bool) -> dict[str, Any]:
    for layer in layers:
        layer.static, layer._cached = static, None
    step = _step(layers, x)
    wall = mk.timed(step, 5, warmup=2) / LAYERS
    gpu, kernels = _profiled(step)
    row = {"wall_s": wall, "gpu_s": gpu / LAYERS, "kernels": kernels / LAYERS}
    if static:
        row["issue_s"] = _issue_seconds(step) / LAYERS
    x.grad = None
    for p in layers.parameters():
        p.grad = None
    return row


def _case(name: str, ep: int, mbs: int, grouped: bool, casts: bool) -> dict[str, Any]:
    layers, x = _stack(name, ep, mbs)
    for layer in layers:
        layer.grouped, layer.casts = grouped, casts
    h, f, experts, k = MOE[name]
    row: dict[str, Any] = {
        "model": name, "ep": ep, "micro_batch": mbs, "tokens": SEQ * mbs,
        "local_experts": experts // ep, "rows_balanced": SEQ * mbs * k // ep,
        "experts": "grouped_mm" if grouped else "loop_mm", "casts": casts, "layers": LAYERS,
    }  # fmt: skip
    for static in (False, True):
        try:
            row["static" if static else "sync"] = _variant(layers, x, static)
        except Exception as exc:
            row["static" if static else "sync"] = {"error": f"{type(exc).__name__}: {exc}"}
    del layers, x
    mk._free()
    return row


def measure_moe_layer() -> dict[str, Any]:
    """Every case of :data:`CASES` under grouped and looped experts, with and without the
    per-expert casts' kernels."""
    rows = []
    for name, ep, mbs in CASES:
        for grouped in (True, False):
            for casts in (False, True):
                try:
                    rows.append(_case(name, ep, mbs, grouped, casts))
                except Exception as exc:
                    rows.append({"model": name, "ep": ep, "micro_batch": mbs,
                                 "error": f"{type(exc).__name__}: {exc}"})  # fmt: skip
                    mk._free()
    return {"seq": SEQ, "dtype": "bf16", "rows": rows}


SECTIONS: dict[str, Callable[[], dict[str, Any]]] = {
    "host": mk.measure_host,
    "moe_layer": measure_moe_layer,
}


def _header() -> dict[str, Any]:
    out = mk._header()
    out["cpu"] = mk._cpu_name()
    return out


def main(argv: list[str] | None = None) -> int:
    return mk.run_sections(argv, SECTIONS, _header, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
