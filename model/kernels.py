"""Attention kernels and memory-bound kernels at the rates their authors published.

Reads the tables of :mod:`model.kernel_tables` (loaded by :mod:`trainplan.scenarios.kernel_data`
from ``scenarios/kernels/attention.toml`` and ``memory.toml``). The step time reads the attention
curves through :func:`model.attention_rates.attention_fractions` (the FlashAttention core by its kernel,
length, head dims and mask) and the STREAM rows through :func:`model.op_rates.stream_triad_fraction`;
the norm curves are not read yet (``docs/time-model-sources.md`` §5).

**Interpolation** (:func:`interpolate_log2`): between two published points, linear in the value
against log2 of the size (sequence length, message bytes, elements): kernel throughput grows with
the size roughly by doublings, and every published sweep here is in powers of two. Outside the
published range the value is held at the nearest end point and the result says so
(:attr:`Interpolated.clamped`), so a caller can report it rather than extrapolate silently.

**Attention FLOPs**: each benchmark counted FLOPs its own way (:func:`attention_kernel_flops`);
a time is the benchmark's FLOPs for the shape over its published rate, never the model's FLOP
count over that rate (the model counts causal pairs as s(s+1)/2 and the backward as 2× the
forward; FlashAttention's benchmarks count s²/2 and 2.5×).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainplan.model.attention import AttentionSpan, attended_pairs
from trainplan.model.errors import InputError
from trainplan.model.kernel_tables import AttentionCurve, NormCurve, StreamRow
from trainplan.model.part_family import FAMILY

__all__ = [
    "AttentionKey",
    "Interpolated",
    "interpolate_log2",
    "attention_kernel_flops",
    "AttentionRate",
    "attention_rate",
    "published_attention_seconds",
    "stream_fraction",
    "norm_bandwidth",
]

_DTYPE_CLASS = {"fp16": "16-bit", "bf16": "16-bit", "fp8": "fp8", "mxfp8": "mxfp8"}
"""FP16 and BF16 run at one tensor-core rate on every part here (one ``bf16_tflops`` figure in
the accelerator table), so a BF16 lookup reads an FP16 curve and the reverse."""


@dataclass(frozen=True, slots=True)
class Interpolated:
    """A value read from a published table."""

    value: float
    clamped: str | None = None
    """None inside the published range; ``"below"`` or ``"above"`` when held at an end point."""


def interpolate_log2(xs: Sequence[float], ys: Sequence[float], x: float) -> Interpolated:
    """``y(x)`` from published points ``(xs, ys)`` (``xs`` ascending, positive): the published
    value at a published ``x``; between two points, linear in log2(x); outside, the end value,
    flagged.

    Raises
    ------
    InputError
        ``x`` not positive.

    Examples
    --------
    Between 1024 (153) and 2048 (162), 1448 ≈ 2^10.5 lies half-way in log2:

    >>> interpolate_log2([1024, 2048], [153, 162], 2 ** 10.5).value
    157.5
    >>> interpolate_log2([1024, 2048], [153, 162], 512)
    Interpolated(value=153, clamped='below')
    """
    if not x > 0:
        raise InputError(f"size: {x} must be positive to be looked up in a published table")
    if x <= xs[0]:
        return Interpolated(ys[0], None if x == xs[0] else "below")
    if x >= xs[-1]:
        return Interpolated(ys[-1], None if x == xs[-1] else "above")
    i = next(j for j in range(1, len(xs)) if xs[j] >= x)
    if xs[i] == x:
        return Interpolated(ys[i])
    t = (math.log2(x) - math.log2(xs[i - 1])) / (math.log2(xs[i]) - math.log2(xs[i - 1]))
    return Interpolated(ys[i - 1] + t * (ys[i] - ys[i - 1]))


def attention_kernel_flops(
    flop_count: str,
    direction: str,
    batch: float,
    q_heads: int,
    seq_len: int,
    head_dim_qk: int,
    head_dim_v: int,
    causal: bool,
    window: int | None = None,
) -> float:
    """FLOPs a benchmark counts for one attention call (``seq_len`` queries and keys per
    sequence; ``window``: a causal band of W keys), by its convention:

    * ``fa-half`` — ``F = 4·b·s²·h·d``, halved under the causal mask; backward ``2.5·F``,
      forward and backward ``3.5·F`` (flash-attention ``benchmarks/benchmark_flash_attention.py``
      ``flops``; cudnn-frontend ``benchmark_{bf16,fp8}_sdpa.py`` at commit 0b1577c8).
    * ``nonmasked`` — ``E = s²`` pairs, ``s(s + 1)/2`` under the causal mask; forward
      ``2·b·h·E·(d_qk + d_v)``, backward ``2·b·h·E·(3·d_qk + 2·d_v)`` (cudnn-frontend
      ``benchmark/sdpa_benchmark_training/benchmark_single_sdpa.py`` ``flops``); under a causal
      band of W keys ``E = W(W + 1)/2 + (s − W)·W`` (the same function's ``sliding_window_size``
      branch, at fb682ce7: :func:`model.attention.attended_pairs` of a ``local`` layer).

    Raises
    ------
    InputError
        An unknown convention or direction, or ``fa-half`` with d_qk ≠ d_v or a window.

    Examples
    --------
    The H200 cuDNN 9.19 point at s = 32,768, causal, b = 1, 64 heads of 128 (688 TFLOP/s in
    25.566 ms): 2·64·(32768·32769/2)·256 FLOPs.

    >>> f = attention_kernel_flops("nonmasked", "fwd", 1, 64, 32768, 128, 128, True)
    >>> round(f / 25.566e-3 / 1e12)
    688
    >>> attention_kernel_flops("fa-half", "bwd", 1, 1, 4, 8, 8, False)  # 2.5 · 4·16·8
    1280.0
    """
    if flop_count == "fa-half":
        if window is not None:
            raise InputError("flop_count: fa-half counts no sliding window")
        if head_dim_qk != head_dim_v:
            raise InputError("flop_count: fa-half counts one head dimension (d_qk = d_v)")
        forward = 4.0 * batch * seq_len * seq_len * q_heads * head_dim_qk / (2 if causal else 1)
        factor = {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}
    elif flop_count == "nonmasked":
        pairs = seq_len * (seq_len + 1) / 2 if causal else float(seq_len) * seq_len
        if window is not None and causal:
            pairs = float(attended_pairs(AttentionSpan.LOCAL, seq_len, window, True))
        forward = 2.0 * batch * q_heads * pairs * (head_dim_qk + head_dim_v)
        backward = (3 * head_dim_qk + 2 * head_dim_v) / (head_dim_qk + head_dim_v)
        factor = {"fwd": 1.0, "bwd": backward, "fwd+bwd": 1.0 + backward}
    else:
        raise InputError(f"flop_count: {flop_count!r} is not one of fa-half, nonmasked")
    if direction not in factor:
        raise InputError(f"direction: {direction!r} is not one of fwd, bwd, fwd+bwd")
    return forward * factor[direction]


@dataclass(frozen=True, slots=True)
class AttentionKey:
    """Which published kernel to read: the kernel (``attention.toml``'s names), the part, the
    input dtype (fp16 and bf16 read each other's curves), the direction (fwd, bwd, fwd+bwd) and
    the causal mask, and the sliding window's W keys on top of it (None: no band; a curve is read
    only for its own W)."""

    kernel: str
    part: str
    dtype: str
    direction: str
    causal: bool
    window: int | None = None


@dataclass(frozen=True, slots=True)
class AttentionRate:
    """A kernel's published rate for one shape, with the convention it is counted in."""

    tflops_per_s: float
    flop_count: str
    clamped: str | None
    """Set when the sequence length or head dimension lay outside the published range."""
    sources: tuple[str, ...]


def _matching(curves: Sequence[AttentionCurve], key: AttentionKey) -> list[AttentionCurve]:
    cls = _DTYPE_CLASS.get(key.dtype)
    if cls is None:
        raise InputError(f"dtype: {key.dtype!r} is not one of {', '.join(_DTYPE_CLASS)}")
    found = [
        c
        for c in curves
        if (c.kernel, c.part, c.direction, c.causal, c.window)
        == (key.kernel, key.part, key.direction, key.causal, key.window)
        and _DTYPE_CLASS[c.dtype] == cls
    ]
    if not found:
        have = sorted(
            {
                f"{c.kernel}/{c.part}/{c.dtype}/{c.direction}/causal={c.causal}"
                + (f"/window={c.window}" if c.window else "")
                for c in curves
            }
        )
        band = f", window={key.window}" if key.window else ""
        raise InputError(
            f"attention kernel: no published curve for {key.kernel} on {key.part} ({key.dtype}, "
            f"{key.direction}, causal={key.causal}{band}); published: {', '.join(have)}"
        )
    return found


def attention_rate(
    curves: Sequence[AttentionCurve],
    key: AttentionKey,
    head_dims: tuple[int, int],
    seq_len: int,
) -> AttentionRate:
    """The published TFLOP/s of ``key``'s kernel for one shape: the curve with these
    ``head_dims`` (d_qk, d_v), interpolated in log2(seq_len) (:func:`interpolate_log2`);
    beyond its longest length, continued by a longer sweep of the same kernel on the same part,
    else on a part of its family (:data:`model.part_family.FAMILY`) (``extends``: the main
    curve's last rate × the sweep's rate at ``seq_len`` over its rate at that last length), else
    held there (flagged). For
    equal head dimensions without a curve of their own, linear in the head dimension between
    the two nearest published ones (held at the nearest outside them, flagged).

    Raises
    ------
    InputError
        No curve for the kernel, part, dtype, direction and mask (the message lists what is
        published), or head dimensions that are neither published nor equal.

    Examples
    --------
    >>> from trainplan.scenarios.kernel_data import attention_curves
    >>> key = AttentionKey("flash-attention-2", "A100-80GB", "bf16", "fwd+bwd", False)
    >>> r = attention_rate(attention_curves(), key, (64, 64), 2048)
    >>> r.tflops_per_s, r.flop_count, r.clamped
    (162, 'fa-half', None)
    """
    found = _matching(curves, key)
    longer = [c for c in found if c.extends] + _family_extensions(curves, key)
    found = [c for c in found if not c.extends]
    exact = [c for c in found if (c.head_dim_qk, c.head_dim_v) == head_dims]
    if exact:
        ext = [e for e in longer if (e.head_dim_qk, e.head_dim_v) == head_dims]
        return _extended_rate(exact[0], ext[0] if ext else None, seq_len)
    d_qk, d_v = head_dims
    square = sorted(
        (c for c in found if c.head_dim_qk == c.head_dim_v), key=lambda c: c.head_dim_qk
    )
    if d_qk != d_v or not square:
        dims = sorted({(c.head_dim_qk, c.head_dim_v) for c in found})
        raise InputError(
            f"head_dim: ({d_qk}, {d_v}) has no published {key.kernel} curve on {key.part}; "
            f"published (d_qk, d_v): {dims}"
        )
    rates = [interpolate_log2(c.seq_len, c.tflops_per_s, seq_len) for c in square]
    by_dim = interpolate_linear([c.head_dim_qk for c in square], [r.value for r in rates], d_qk)
    clamped = by_dim.clamped or next((r.clamped for r in rates if r.clamped), None)
    conventions = {c.flop_count for c in square}
    if len(conventions) > 1:
        raise InputError(
            f"attention kernel: {key.kernel} on {key.part} mixes FLOP conventions {conventions}"
        )
    return AttentionRate(
        by_dim.value, square[0].flop_count, clamped, tuple(c.source for c in square)
    )


def _family_extensions(curves: Sequence[AttentionCurve], key: AttentionKey) -> list[AttentionCurve]:
    """The longer sweeps (``extends``) of ``key``'s kernel, direction, mask and dtype class on
    the other parts of ``key.part``'s family: only the shape of a kernel's rate beyond a main
    curve's end is read from them, and parts of one die share it."""
    family = FAMILY.get(key.part)
    cls = _DTYPE_CLASS.get(key.dtype)
    return [
        c
        for c in curves
        if c.extends
        and family is not None
        and c.part != key.part
        and FAMILY.get(c.part) == family
        and (c.kernel, c.direction, c.causal, c.window)
        == (key.kernel, key.direction, key.causal, key.window)
        and _DTYPE_CLASS.get(c.dtype) == cls
    ]


def _extended_rate(c: AttentionCurve, e: AttentionCurve | None, seq_len: int) -> AttentionRate:
    """:func:`attention_rate` of one curve ``c``, continued beyond its longest length by the
    longer sweep ``e`` of the same kernel (``c``'s last rate × ``e``'s rate at ``seq_len`` over
    its rate at that last length)."""
    r = interpolate_log2(c.seq_len, c.tflops_per_s, seq_len)
    sources: tuple[str, ...] = (c.source,)
    if r.clamped == "above" and e is not None:
        shape = interpolate_log2(e.seq_len, e.tflops_per_s, seq_len)
        at_end = interpolate_log2(e.seq_len, e.tflops_per_s, c.seq_len[-1]).value
        r = Interpolated(r.value * shape.value / at_end, shape.clamped)
        sources += (e.source,)
    return AttentionRate(r.value, c.flop_count, r.clamped, sources)


def interpolate_linear(xs: Sequence[float], ys: Sequence[float], x: float) -> Interpolated:
    """``y(x)`` linear in ``x`` between published points, held at the end values outside
    (flagged); ``xs`` ascending.

    Examples
    --------
    >>> interpolate_linear([64, 128], [300, 400], 96).value
    350.0
    >>> interpolate_linear([64, 128], [300, 400], 256)
    Interpolated(value=400, clamped='above')
    """
    if x <= xs[0]:
        return Interpolated(ys[0], None if x == xs[0] else "below")
    if x >= xs[-1]:
        return Interpolated(ys[-1], None if x == xs[-1] else "above")
    i = next(j for j in range(1, len(xs)) if xs[j] >= x)
    t = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
    return Interpolated(ys[i - 1] + t * (ys[i] - ys[i - 1]))


def published_attention_seconds(
    curves: Sequence[AttentionCurve],
    key: AttentionKey,
    batch: float,
    q_heads: int,
    seq_len: int,
    head_dims: tuple[int, int],
) -> float:
    """Seconds of one attention call of ``batch`` sequences and ``q_heads`` query heads at the
    published rate: the FLOPs the benchmark would count for this shape
    (:func:`attention_kernel_flops`) over :func:`attention_rate`. Heads and batch enter only
    the FLOPs: the published rate is taken to hold for any number of heads (the benchmarks ran
    16 to 128 query heads on full GPUs).

    Examples
    --------
    FlashAttention-2 on A100, forward and backward, 32 heads of 64, s = 2048, b = 8 (the
    published point: 162 TFLOP/s): 3.5 · 4·8·2048²·32·64 = 9.62e11 FLOPs over 162e12 FLOP/s.

    >>> from trainplan.scenarios.kernel_data import attention_curves
    >>> key = AttentionKey("flash-attention-2", "A100-80GB", "fp16", "fwd+bwd", False)
    >>> t = published_attention_seconds(attention_curves(), key, 8, 32, 2048, (64, 64))
    >>> round(t * 1e3, 4)  # ms
    5.9387
    """
    rate = attention_rate(curves, key, head_dims, seq_len)
    flops = attention_kernel_flops(
        rate.flop_count, key.direction, batch, q_heads, seq_len, *head_dims, key.causal,
        key.window,
    )  # fmt: skip
    return flops / (rate.tflops_per_s * 1e12)


def stream_fraction(rows: Sequence[StreamRow], part: str, kernel: str, hbm_tbps: float) -> float:
    """The achieved fraction of the datasheet HBM bandwidth ``hbm_tbps`` (TB/s) of a STREAM
    kernel (copy, mul, add, triad, dot) on ``part``.

    Raises
    ------
    InputError
        No published row for the part or kernel.

    Examples
    --------
    BabelStream triad on H100 SXM: 2.97 of 3.35 TB/s.

    >>> from trainplan.scenarios.kernel_data import memory_data
    >>> round(stream_fraction(memory_data().stream, "H100-SXM", "triad", 3.35), 4)
    0.8866
    """
    for row in rows:
        if row.part == part and kernel in row.kernels:
            return row.tbps[row.kernels.index(kernel)] / hbm_tbps
    have = sorted({f"{r.part}/{k}" for r in rows for k in r.kernels})
    raise InputError(f"stream: no published {kernel} on {part}; published: {', '.join(have)}")


def norm_bandwidth(
    curves: Sequence[NormCurve], part: str, norm: str, backend: str, direction: str, elements: float
) -> Interpolated:
    """Achieved GB/s of a normalisation kernel over a ``[rows, hidden]`` input of ``elements``
    = rows·hidden, interpolated in log2(elements) (shapes of equal size published twice are
    averaged; outside the range held, flagged). The bytes it is counted over are the
    benchmark's (``fwd``: x read, y written; ``bwd``: dy and x read, dx written; plus the
    statistics and the scale) — the model's norm bytes (:mod:`model.ops`) to within the
    per-row statistics.

    Raises
    ------
    InputError
        No curve for the part, norm and backend, or a direction other than fwd or bwd.

    Examples
    --------
    On H200 three published shapes hold 2^26 elements (16384 × 4096, 8192 × 8192, 4096 × 16384:
    3708.1, 3770.9 and 3845.2 GB/s forward); their mean:

    >>> from trainplan.scenarios.kernel_data import memory_data
    >>> round(norm_bandwidth(memory_data().norms, "H200", "rms_norm", "cudnn", "fwd", 2 ** 26).value, 2)
    3774.73
    """
    if direction not in ("fwd", "bwd"):
        raise InputError(f"direction: {direction!r} is not one of fwd, bwd")
    for c in curves:
        if (c.part, c.norm, c.backend) == (part, norm, backend):
            gbps = c.fwd_gbps if direction == "fwd" else c.bwd_gbps
            sizes: dict[int, list[float]] = {}
            for r, h, g in zip(c.rows, c.hidden, gbps, strict=True):
                sizes.setdefault(r * h, []).append(g)
            xs = sorted(sizes)
            return interpolate_log2(xs, [sum(sizes[x]) / len(sizes[x]) for x in xs], elements)
    have = sorted({f"{c.part}/{c.norm}/{c.backend}" for c in curves})
    raise InputError(
        f"norm: no published {norm} ({backend}) on {part}; published: {', '.join(have)}"
    )
