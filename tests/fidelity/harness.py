"""Measure the bytes real PyTorch layers keep for backward (bf16, CPU, one process).

Every tensor autograd saves passes through :class:`SavedBytes`'s ``saved_tensors_hooks``: each
storage is counted once (Q, K and V views of one buffer are one storage), parameters and module
buffers are left out, and storages are released when autograd drops its last saved reference, so
the peak during backward is measured too. Layers tag the tensors they create (:func:`tag`) with
the name :mod:`model.activations` gives them, so a measurement is reported term by term.

Mirroring a GPU run on the CPU:

* dropout is ``torch.ops.aten.native_dropout`` (a 1-byte bool mask, as the CUDA kernel keeps;
  ``F.dropout`` on the CPU keeps a 2-byte mask);
* LayerNorm and RMSNorm are :class:`GpuLayerNorm` / :class:`GpuRMSNorm`, which keep what the CUDA
  kernels keep: the input and fp32 statistics (aten's CUDA ``native_layer_norm`` keeps mean and
  rstd in the accumulate type, fp32 for bf16; CUDA ``_fused_rms_norm``, Transformer Engine and
  Apex keep rstd in fp32). The CPU's own kernels differ (``F.layer_norm`` keeps bf16 statistics,
  ``F.rms_norm`` is a composite that keeps fp32 copies of its input); ``norm="aten"`` measures
  them, named in :data:`CPU_NORM_TERMS`;
* SDPA gets Q, K, V as ``[b, a, s, d]`` views of a ``[b, s, ·, d]`` buffer, so its output is
  ``[b, s, a, d]`` in memory and the output projection reads a view of it (as with CUDA flash);
  the CPU flash kernel has no dropout (it falls back to the fp32 math path), so attention dropout
  inside SDPA is off (CUDA flash regenerates its mask from a 16-byte RNG state);
* recomputation is ``torch.utils.checkpoint(..., use_reentrant=True)``, whose recomputed
  forward runs inside backward where the hooks still see it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

BF16 = torch.bfloat16

# ---------------------------------------------------------------------------------------------
# saved-tensor accounting


class _Handle:
    """What the pack hook returns: holds the tensor; its death releases the storage's count."""

    __slots__ = ("tensor", "key", "owner")

    def __init__(self, tensor: torch.Tensor, key: int, owner: SavedBytes) -> None:
        self.tensor, self.key, self.owner = tensor, key, owner

    def __del__(self) -> None:
        self.owner._release(self.key)


@dataclass
class SavedBytes:
    """Live bytes of the storages autograd keeps, by name; peak over the run."""

    exclude: set[int] = field(default_factory=set)
    """Storage addresses never counted (parameters, buffers)."""
    live: dict[int, list] = field(default_factory=dict)
    """storage address -> [bytes, saved references, name or None, description]."""
    current: int = 0
    peak: int = 0
    names: dict[int, str] = field(default_factory=dict)
    """storage address -> name, from :func:`tag`."""

    def _pack(self, t: torch.Tensor) -> object:
        st = storage(t)
        key, nbytes = st.data_ptr(), st.nbytes()
        if key in self.exclude or nbytes == 0:
            return t
        entry = self.live.get(key)
        if entry is None:
            self.live[key] = [nbytes, 1, self.names.get(key), _untagged(t)]
            self.current += nbytes
            self.peak = max(self.peak, self.current)
        else:
            entry[1] += 1
        return _Handle(t, key, self)

    def _release(self, key: int) -> None:
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]
            self.names.pop(key, None)  # the address may be reused by another tensor

    @staticmethod
    def _unpack(packed: object) -> torch.Tensor:
        return packed.tensor if isinstance(packed, _Handle) else packed  # type: ignore[return-value]

    def by_name(self) -> dict[str, int]:
        """Bytes of the live saved storages, summed by name."""
        out: dict[str, int] = {}
        for nbytes, _, name, descr in self.live.values():
            out[name or descr] = out.get(name or descr, 0) + nbytes
        return out

    def claim(self, name: str) -> None:
        """Name every live storage that has no name yet (what the op just run saved)."""
        for entry in self.live.values():
            if entry[2] is None:
                entry[2] = name

    @contextmanager
    def hooks(self) -> Iterator[SavedBytes]:
        global _ACTIVE
        prev, _ACTIVE = _ACTIVE, self
        try:
            with torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack):
                yield self
        finally:
            _ACTIVE = prev


_ACTIVE: SavedBytes | None = None


def storage(t: torch.Tensor) -> torch.UntypedStorage:
    """The storage ``t``'s bytes live in on this process: a DTensor's local shard (what a rank
    of a tensor-parallel group holds), else the tensor's own."""
    local = getattr(t, "_local_tensor", None)  # torch.distributed.tensor.DTensor
    return (t if local is None else local).untyped_storage()


def tag(t: torch.Tensor, name: str) -> torch.Tensor:
    """Name ``t``'s storage for the active measurement, before or after it is saved (the last
    tag wins: a name left at a reused address by a tensor that was never saved is replaced)."""
    if _ACTIVE is not None:
        key = storage(t).data_ptr()
        _ACTIVE.names[key] = name
        entry = _ACTIVE.live.get(key)
        if entry is not None:
            entry[2] = name
    return t


def claim(name: str) -> None:
    """Name what the op just run saved and nobody named (its own outputs or statistics)."""
    if _ACTIVE is not None:
        _ACTIVE.claim(name)


def _untagged(t: torch.Tensor) -> str:
    return f"untagged {t.dtype} {tuple(t.shape)}"


# ---------------------------------------------------------------------------------------------
# norms that keep what the CUDA kernels keep


class _NormFn(torch.autograd.Function):
    """LayerNorm (``bias`` given) or RMSNorm (``bias`` None) keeping what the CUDA kernels keep:
    the input and fp32 statistics (LayerNorm mean and rstd, RMSNorm rstd); or, with
    ``keep_output`` (Apex ``FusedLayerNorm`` / ``FusedRMSNorm(memory_efficient=True)``), the
    output and fp32 rstd, backward recovering x̂ = (y − bias)/weight."""

    @staticmethod
    def forward(ctx, x, weight, bias, eps, name, keep_output):  # type: ignore[override]
        xf = x.float()
        layernorm = bias is not None
        mean = xf.mean(-1, keepdim=True) if layernorm else None
        centred = xf - mean if layernorm else xf
        rstd = torch.rsqrt(centred.pow(2).mean(-1, keepdim=True) + eps)
        y = centred * rstd * weight.float()
        y = (y + bias.float() if layernorm else y).to(x.dtype)
        if keep_output:
            tag(rstd, f"{name} statistics (fp32 rstd)")
            ctx.save_for_backward(y, weight, bias, rstd)
        else:
            stats = "fp32 mean, rstd" if layernorm else "fp32 rstd"
            for t in (mean, rstd):
                if t is not None:
                    tag(t, f"{name} statistics ({stats})")
            ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.keep_output, ctx.layernorm = keep_output, layernorm
        return y

    @staticmethod
    def backward(ctx, dy):  # type: ignore[override]
        if ctx.keep_output:
            y, weight, bias, rstd = ctx.saved_tensors
            shifted = y.float() - bias.float() if ctx.layernorm else y.float()
            xhat, dtype = shifted / weight.float(), y.dtype
        else:
            x, weight, bias, mean, rstd = ctx.saved_tensors
            xhat = (x.float() - mean if ctx.layernorm else x.float()) * rstd
            dtype = x.dtype
        dyf = dy.float()
        g = dyf * weight.float()
        inner = g - g.mean(-1, keepdim=True) if ctx.layernorm else g
        dx = rstd * (inner - xhat * (g * xhat).mean(-1, keepdim=True))
        red = tuple(range(dy.dim() - 1))
        dw = (dyf * xhat).sum(red).to(weight.dtype)
        db = dyf.sum(red).to(weight.dtype) if ctx.layernorm else None
        return dx.to(dtype), dw, db, None, None, None


class Norm(nn.Module):
    """LayerNorm or RMSNorm; ``impl="gpu"`` keeps what CUDA keeps, ``"memory-efficient"`` what
    Apex's ``memory_efficient=True`` kernels keep (output and rstd), ``"aten"`` is F.layer_norm /
    F.rms_norm as this CPU runs them."""

    def __init__(self, h: int, kind: str, name: str, impl: str) -> None:
        super().__init__()
        self.kind, self.name, self.impl = kind, name, impl
        self.weight = nn.Parameter(torch.ones(h, dtype=BF16))
        self.bias = nn.Parameter(torch.zeros(h, dtype=BF16)) if kind == "layernorm" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tag(x, f"{self.name} input")
        if self.impl in ("gpu", "memory-efficient"):
            keep_output = self.impl == "memory-efficient"
            return _NormFn.apply(x, self.weight, self.bias, 1e-5, self.name, keep_output)
        if self.kind == "layernorm":
            out = F.layer_norm(x, x.shape[-1:], self.weight, self.bias, 1e-5)
            claim(f"{self.name} statistics (CPU: bf16 mean, rstd)")
        else:
            out = F.rms_norm(x, x.shape[-1:], self.weight, 1e-5)
            claim(f"{self.name} CPU composite (fp32 input copy, fp32 rstd, fp32 normalized)")
        return out


def dropout(x: torch.Tensor, p: float, name: str) -> torch.Tensor:
    """The CUDA kernel's dropout on any device: a bool (1-byte) mask."""
    out, mask = torch.ops.aten.native_dropout(x, p, True)
    tag(mask, name)
    return out


# ---------------------------------------------------------------------------------------------
# layers


@dataclass(frozen=True)
class Dims:
    """One point of the sweep (tp = cp = 1, no sequence parallelism)."""

    s: int
    b: int
    h: int
    heads: int
    kv_heads: int | None = None
    ffn: int | None = None
    experts: int = 4
    top_k: int = 2
    expert_ffn: int | None = None
    shared_experts: int = 0

    @property
    def g(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d(self) -> int:
        return self.h // self.heads

    def label(self) -> str:
        parts = [f"s={self.s}", f"b={self.b}", f"h={self.h}", f"a={self.heads}"]
        if self.g != self.heads:
            parts.append(f"g={self.g}")
        return " ".join(parts)


class Attention(nn.Module):
    """Self-attention: GPT (one fused QKV projection, learned positions, dropout) or Llama
    (separate Q, K, V projections, GQA, RoPE, no dropout); eager softmax or SDPA (flash)."""

    def __init__(self, dims: Dims, *, gpt: bool, flash: bool, selective: bool, p: float) -> None:
        super().__init__()
        h, a, g, d = dims.h, dims.heads, dims.g, dims.d
        self.dims, self.gpt, self.flash, self.selective, self.p = dims, gpt, flash, selective, p
        if gpt:
            self.qkv = nn.Linear(h, 3 * h, bias=True, dtype=BF16)
        else:
            self.q = nn.Linear(h, a * d, bias=False, dtype=BF16)
            self.k = nn.Linear(h, g * d, bias=False, dtype=BF16)
            self.v = nn.Linear(h, g * d, bias=False, dtype=BF16)
            inv = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
            self.register_buffer("inv_freq", inv, persistent=False)
        self.proj = nn.Linear(a * d, h, bias=gpt, dtype=BF16)

    def _rope(self, t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = t.shape[-1] // 2
        rot = torch.cat((-t[..., half:], t[..., :half]), dim=-1)
        return t * cos + rot * sin  # keeps cos and sin only

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dims = self.dims
        b, s, a, g, d = dims.b, dims.s, dims.heads, dims.g, dims.d
        tag(x, "QKV projection input")
        if self.gpt:
            qkv = tag(self.qkv(x), "Q, K, V").view(b, s, 3, a, d)
            q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [b, s, ·, d] views of one buffer
        else:
            q = self.q(x).view(b, s, a, d)
            k = self.k(x).view(b, s, g, d)
            v = self.v(x).view(b, s, g, d)
            with torch.no_grad():
                freqs = torch.outer(torch.arange(s, dtype=torch.float32), self.inv_freq)
                emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # [s, 1, d]
                cos, sin = emb.cos().to(BF16), emb.sin().to(BF16)
            tag(cos, "rotary cos and sin tables")
            tag(sin, "rotary cos and sin tables")
            q, k = tag(self._rope(q, cos, sin), "Q"), tag(self._rope(k, cos, sin), "K")
            tag(v, "V")
        core = self._flash if self.flash else self._eager
        if self.selective:
            ctx = checkpoint(core, q, k, v, use_reentrant=True)
        else:
            ctx = core(q, k, v)
        ctx = ctx.reshape(b, s, a * d)
        out = self.proj(tag(ctx, "output projection input"))
        if self.p:
            out = dropout(out, self.p, "attention output dropout mask")
        return out

    def _flash(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """SDPA on [b, ·, s, d] views of [b, s, ·, d] tensors; returns [b, s, a, d]."""
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2),
            k.transpose(1, 2),
            v.transpose(1, 2),
            is_causal=True,
            enable_gqa=self.dims.g != self.dims.heads,
        )
        tag(out, "output projection input")  # SDPA keeps its output: the projection's input
        claim("softmax statistics (fp32 logsumexp)")
        return out.transpose(1, 2)

    def _eager(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Softmax attention with grouped bmm (GQA without repeating K and V); returns
        [b, s, a, d]."""
        dims = self.dims
        b, s, a, g, d = dims.b, dims.s, dims.heads, dims.g, dims.d
        r = a // g
        # [b, s, a, d] -> [b·g, r·s, d]: queries of a KV group stacked along the rows
        # (reshape copies or views; either way each of Q, K and V is kept once)
        qg = tag(q.reshape(b, s, g, r, d).permute(0, 2, 3, 1, 4).reshape(b * g, r * s, d), "Q")
        kt = tag(k.permute(0, 2, 3, 1).reshape(b * g, d, s), "K")
        vg = tag(v.permute(0, 2, 1, 3).reshape(b * g, s, d), "V")
        bias = torch.full((s, s), float("-inf"), dtype=BF16).triu(1)  # causal, keeps nothing
        # the scale is applied to the scores (Megatron-LM's baddbmm alpha): a scalar product
        # keeps nothing, while scaling Q first would keep a scaled copy next to a view of Q
        scores = (torch.bmm(qg, kt) * (1.0 / math.sqrt(d))).view(b * g, r, s, s) + bias
        probs = torch.softmax(scores, dim=-1)
        claim("softmax output")
        if self.p:
            probs = tag(
                dropout(probs, self.p, "attention dropout mask"), "attention dropout output"
            )
        ctx = torch.bmm(probs.view(b * g, r * s, s), vg)  # [b·g, r·s, d]
        return ctx.view(b, g, r, s, d).permute(0, 3, 1, 2, 4).reshape(b, s, a, d)


class SwiGLU(nn.Module):
    """Gate, up and down matrices; eager ``silu(gate) * up``."""

    def __init__(self, h: int, f: int, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.gate = nn.Linear(h, f, bias=False, dtype=BF16)
        self.up = nn.Linear(h, f, bias=False, dtype=BF16)
        self.down = nn.Linear(f, h, bias=False, dtype=BF16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.prefix
        gate = tag(self.gate(x), f"{p} SwiGLU input (gate, up)")
        up = tag(self.up(x), f"{p} SwiGLU input (gate, up)")
        act = tag(F.silu(gate), f"{p} SiLU output (eager SwiGLU)")  # kept by the product
        return self.down(tag(act * up, f"{p} down projection input"))


class MoE(nn.Module):
    """Router (fp32 softmax, top-k), tokens permuted by expert (index_select by the sorted
    copies' tokens) and back (index_select by the inverse permutation), SwiGLU experts, the
    weighted combine, optional shared expert."""

    def __init__(self, dims: Dims) -> None:
        super().__init__()
        h, fe = dims.h, dims.expert_ffn or dims.h
        self.dims = dims
        self.router = nn.Linear(h, dims.experts, bias=False, dtype=BF16)
        self.experts = nn.ModuleList(SwiGLU(h, fe, "routed expert") for _ in range(dims.experts))
        self.shared = (
            SwiGLU(h, dims.shared_experts * fe, "shared expert") if dims.shared_experts else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dims = self.dims
        b, s, h, k, E = dims.b, dims.s, dims.h, dims.top_k, dims.experts
        xt = tag(x.reshape(b * s, h), "router and dispatch input")
        probs = torch.softmax(self.router(xt).float(), dim=-1)
        claim("router probabilities (fp32)")
        weights, idx = probs.topk(k, dim=-1)  # TopkBackward keeps idx
        claim("router top-k indices (int64)")
        weights = tag(weights.to(BF16), "routing weights for the combine")
        with torch.no_grad():
            flat = idx.reshape(-1)
            order = flat.argsort(stable=True)  # routed copies sorted by expert
            token = order // k  # the token of each sorted copy
            inverse = order.argsort()  # where each (token, slot) copy went
            counts = torch.bincount(flat, minlength=E).tolist()
        tag(inverse, "token permutation indices (int64, dispatch and combine)")
        tag(token, "token permutation indices (int64, dispatch and combine)")
        routed = tag(xt.index_select(0, token), "routed expert inputs (top-k copies)")
        outs, start = [], 0
        for e, n in enumerate(counts):
            if n:
                outs.append(self.experts[e](routed[start : start + n]))
            start += n
        combined = torch.cat(outs)
        # un-permute with a gather (index_select keeps only the index; an out-of-place
        # index_copy scatter would also keep its source, the expert outputs, once more)
        unperm = tag(combined.index_select(0, inverse), "routed expert outputs for the combine")
        y = (unperm.view(b * s, k, h) * weights.unsqueeze(-1)).sum(1)
        if self.shared is not None:
            y = y + self.shared(xt)
        return y.view(b, s, h)


class Layer(nn.Module):
    """One pre-norm transformer layer of ``kind`` "gpt", "llama" or "moe"."""

    def __init__(
        self,
        kind: str,
        dims: Dims,
        *,
        flash: bool,
        selective: bool = False,
        norm: str = "gpu",
        p: float = 0.1,
    ) -> None:
        super().__init__()
        gpt = kind == "gpt"
        nk = "layernorm" if gpt else "rmsnorm"
        self.kind, self.p = kind, (p if gpt else 0.0)
        self.norm1 = Norm(dims.h, nk, "attention norm", norm)
        self.attn = Attention(dims, gpt=gpt, flash=flash, selective=selective, p=self.p)
        self.norm2 = Norm(dims.h, nk, "MLP norm", norm)
        if gpt:
            f = dims.ffn or 4 * dims.h
            self.fc1 = nn.Linear(dims.h, f, bias=True, dtype=BF16)
            self.fc2 = nn.Linear(f, dims.h, bias=True, dtype=BF16)
        elif kind == "llama":
            self.mlp = SwiGLU(dims.h, dims.ffn or 3 * dims.h, "MLP")
        else:
            self.mlp = MoE(dims)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        y = self.norm2(x)
        if self.kind == "gpt":
            u = tag(self.fc1(tag(y, "FC1 input")), "MLP GeLU input")
            y = self.fc2(tag(F.gelu(u), "MLP FC2 input"))
            y = dropout(y, self.p, "MLP dropout mask")
        elif self.kind == "llama":
            y = self.mlp(tag(y, "FC1 input"))
        else:
            y = self.mlp(y)
        return x + y


# ---------------------------------------------------------------------------------------------
# measurements


MODES = ("none", "selective", "full")


@dataclass(frozen=True)
class Measurement:
    kept: int
    """Bytes saved for backward after the forward pass."""
    peak: int
    """Peak saved bytes while forward and backward run."""
    terms: tuple[tuple[str, int], ...]
    """``kept`` by name."""


def _exclude(module: nn.Module) -> set[int]:
    return {storage(t).data_ptr() for t in [*module.parameters(), *module.buffers()]}


def _run(module: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor], dims: Dims) -> Measurement:
    torch.manual_seed(0)
    x = torch.randn(dims.b, dims.s, dims.h, dtype=BF16, requires_grad=True)
    rec = SavedBytes(exclude=_exclude(module))
    with rec.hooks():
        tag(x, "attention norm input")
        out = fn(x)
        kept = rec.current
        terms = tuple(sorted(rec.by_name().items()))
        out.float().sum().backward()
        del out
    assert rec.current == 0, rec.live
    return Measurement(kept, rec.peak, terms)


def measure_layer(
    kind: str, dims: Dims, mode: str, *, flash: bool, norm: str = "gpu"
) -> Measurement:
    """One layer under ``mode`` none / selective (attention core checkpointed) / full (the whole
    layer checkpointed)."""
    layer = Layer(kind, dims, flash=flash, selective=mode == "selective", norm=norm)
    if mode == "full":
        return _run(layer, lambda x: checkpoint(layer, x, use_reentrant=True), dims)
    return _run(layer, layer, dims)


def measure_stack(
    kind: str, dims: Dims, n: int, k: int, *, flash: bool, norm: str = "gpu"
) -> Measurement:
    """n layers, checkpointed in segments of k (√n checkpointing; k = 1 is full)."""
    layers = nn.ModuleList(Layer(kind, dims, flash=flash, norm=norm) for _ in range(n))

    def segment(i: int) -> Callable[[torch.Tensor], torch.Tensor]:
        def run(x: torch.Tensor) -> torch.Tensor:
            for layer in layers[i : i + k]:
                x = layer(x)
            return x

        return run

    def forward(x: torch.Tensor) -> torch.Tensor:
        for i in range(0, n, k):
            x = checkpoint(segment(i), x, use_reentrant=True)
        return x

    return _run(layers, forward, dims)


# ---------------------------------------------------------------------------------------------
# model state


def measure_model_state(dims: Dims, *, fp32_grad_accumulation: bool) -> tuple[int, dict[str, int]]:
    """Mixed-precision AdamW after one step: (parameters, bytes by name).

    bf16 working weights and their gradients, fp32 master weights, AdamW's two fp32 moments; with
    ``fp32_grad_accumulation`` the gradients are accumulated in an fp32 ``main_grad`` buffer
    (Megatron-LM's) and the bf16 ``.grad`` is dropped. AdamW's per-tensor ``step`` counters are
    reported on their own line.
    """
    model = Layer("llama", dims, flash=True)
    params = [p for p in model.parameters()]
    master = [p.detach().float().clone().requires_grad_(True) for p in params]
    opt = torch.optim.AdamW(master, lr=1e-3)
    torch.manual_seed(0)
    x = torch.randn(dims.b, dims.s, dims.h, dtype=BF16)
    for _ in range(2):  # two micro-batches: gradient accumulation
        model(x).float().sum().backward()
        if fp32_grad_accumulation:
            for p in params:
                if not hasattr(p, "main_grad"):
                    p.main_grad = torch.zeros_like(p, dtype=torch.float32)
                p.main_grad += p.grad.float()
                p.grad = None
    for p, m in zip(params, master, strict=True):
        m.grad = p.main_grad if fp32_grad_accumulation else p.grad.float()
    opt.step()
    for m in master:
        m.grad = None  # the fp32 copy of a bf16 gradient lives only during the step
    with torch.no_grad():
        for p, m in zip(params, master, strict=True):
            p.copy_(m)
    seen: set[int] = set()
    out: dict[str, int] = {}

    def add(name: str, t: torch.Tensor | None) -> None:
        if t is None:
            return
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            out[name] = out.get(name, 0) + st.nbytes()

    for p in params:
        add("bf16 weights", p)
        add("bf16 gradients", p.grad)
        add("fp32 gradient accumulation buffer", getattr(p, "main_grad", None))
    for m in master:
        add("fp32 master weights", m)
        state = opt.state[m]
        add("AdamW first moment (fp32)", state["exp_avg"])
        add("AdamW second moment (fp32)", state["exp_avg_sq"])
        add("AdamW step counters", state["step"])
    return sum(p.numel() for p in params), out


def cpu_norm_delta(norm_kind: str, tokens: int, h: int) -> dict[str, int]:
    """Bytes this CPU's own norm kernels (``norm="aten"``) keep beyond the CUDA ones, per norm.

    * ``F.layer_norm`` on the CPU keeps mean and rstd in bf16 (2 + 2 B per token), not fp32.
    * ``F.rms_norm`` on the CPU is a composite: it keeps an fp32 copy of its input (4·S·h), rstd
      (fp32, as CUDA) and the fp32 normalized input (4·S·h), but not the bf16 input (2·S·h).
    """
    if norm_kind == "layernorm":
        return {"statistics in bf16, not fp32": -4 * tokens}
    return {
        "fp32 input copy": 4 * tokens * h,
        "fp32 normalized input": 4 * tokens * h,
        "bf16 input not kept": -2 * tokens * h,
    }
