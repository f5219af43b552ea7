"""The attention core's efficiency by the kernel a framework runs, its sequence length, head
dimensions and mask, from the kernels' published throughput curves (``scenarios/kernels/
attention.toml``, :mod:`trainplan.scenarios.kernel_data`), never from an end-to-end run; a
curve stands for the parts of its family (:mod:`model.part_family`).

**Attention kernels** (:func:`attention_fractions`): the kernel a framework runs —
Transformer Engine's ``DotProductAttention`` prefers cuDNN's fused attention on Hopper and newer
("Disabling FlashAttention to give FusedAttention preference on Hopper+ for performance
reasons", ``transformer_engine/pytorch/attention/dot_product_attention/utils.py``
``get_attention_backend``, NVIDIA/TransformerEngine at d0067d0) and FlashAttention-2 on A100;
PyTorch's ``scaled_dot_product_attention`` tries FlashAttention-2 first (``priority_order`` in
``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` of the releases after 2.5.0, whose
cuDNN-first order on Hopper was reverted in 2.5.1), as do llm-foundry's and DeepSpeed's
FlashAttention paths. :func:`default_attention_kernel` states the choice; a run overrides it.
"""

from __future__ import annotations

from functools import lru_cache

from trainplan.model.attention import AttentionSpan, attended_pairs
from trainplan.model.band_tiles import band_seconds
from trainplan.model.errors import InputError
from trainplan.model.frameworks import Framework
from trainplan.model.kernel_tables import AttentionCurve
from trainplan.model.kernels import (
    AttentionKey,
    attention_kernel_flops,
    attention_rate,
    interpolate_linear,
)
from trainplan.model.part_family import FAMILY, catalogue_part
from trainplan.scenarios.kernel_data import attention_curves

__all__ = [
    "ATTENTION_KERNELS",
    "PUBLISHED_PEAK_TFLOPS",
    "ATTENTION_CURVE_PARTS",
    "ATTENTION_PART_CURVES",
    "attention_curve_parts",
    "default_attention_kernel",
    "framework_kernels",
    "attention_fractions",
    "ring_fractions",
    "window_fractions",
]


ATTENTION_KERNELS = ("flash-attention-2", "flash-attention-3", "cudnn", "pytorch-sdpa-cudnn")
"""The attention kernels with published curves (``attention.toml``)."""

PUBLISHED_PEAK_TFLOPS: dict[str, float] = {
    "A100-80GB": 312.0,
    "H100-SXM": 989.4,
    "H200": 989.4,
    "B200": 2250.0,
    "GB200": 2500.0,
    "GB300": 2500.0,
}
"""Dense BF16 peak (10^12 FLOP/s) of each part a curve was measured on: the rows of
``topology/accelerators.toml`` (vendor datasheets; ``tests/model/test_op_rates.py`` holds them
equal), what a published rate is a fraction of."""

ATTENTION_CURVE_PARTS: dict[tuple[str, str], tuple[str, ...]] = {
    ("flash-attention-2", "ampere"): ("A100-80GB",),
    ("flash-attention-2", "hopper"): ("H100-SXM",),
    ("flash-attention-2", "blackwell"): ("B200",),
    ("flash-attention-3", "hopper"): ("H100-SXM",),
    ("cudnn", "hopper"): ("H200", "H100-SXM"),
    ("cudnn", "blackwell"): ("GB200", "B200"),
    ("pytorch-sdpa-cudnn", "blackwell"): ("B200",),
}
"""Per (kernel, family), the published parts to read, first match first: cuDNN on Hopper from
cuDNN 9.19's H200 sweep (forward and backward, causal), then the FlashAttention-3 paper's H100
figures; on Blackwell from cuDNN 9.22's GB200 sweep (forward and backward, both masks, MLA head
dims), then cuDNN 9.13's B200 CSVs."""

ATTENTION_PART_CURVES: dict[tuple[str, str], tuple[str, ...]] = {
    ("cudnn", "GB300"): ("GB300",),
    ("cudnn", "B300"): ("GB300",),
}
"""Per (kernel, part), published parts read before the family's (:data:`ATTENTION_CURVE_PARTS`):
Blackwell Ultra (B300, GB300) doubles the SFU's exponential throughput that the softmax of
attention runs on (NVIDIA, "Inside NVIDIA Blackwell Ultra", 2025: "2X attention-layer
acceleration"), so its attention kernels run faster than Blackwell's at the same dense peak;
cuDNN 9.22's GB300 sweep (the GB200 sweep's companion run: same script, configs and cuDNN)
measures it, e.g. causal 128-dim BF16 at 32K: 1,953 TFLOP/s forward and 1,490 backward against
GB200's 1,622 and 1,226. Shapes it lacks fall back to the family's curves."""


def attention_curve_parts(kernel: str, device_name: str) -> tuple[str, ...]:
    """The published parts whose curves stand for ``kernel`` on the part, first match first:
    the part's own (:data:`ATTENTION_PART_CURVES`), then its family's
    (:data:`ATTENTION_CURVE_PARTS`); empty for a part outside :data:`FAMILY`.

    >>> attention_curve_parts("cudnn", "B300"), attention_curve_parts("cudnn", "B200")
    (('GB300', 'GB200', 'B200'), ('GB200', 'B200'))
    """
    part = catalogue_part(device_name)
    own = ATTENTION_PART_CURVES.get((kernel, part), ())
    family = ATTENTION_CURVE_PARTS.get((kernel, FAMILY.get(part, "")), ())
    return tuple(dict.fromkeys(own + family))


def default_attention_kernel(framework: str, device_name: str) -> str | None:
    """The attention kernel a framework runs on a part: cuDNN's fused attention on Hopper and
    Blackwell under Megatron-Core (Transformer Engine's backend choice, module docstring) and
    under ``fsdp2`` (torchtitan's ``ScaledDotProductAttention`` calls PyTorch SDPA inside
    ``sdpa_kernel([CUDNN_ATTENTION, FLASH_ATTENTION, MATH], set_priority=True)``:
    ``torchtitan/models/common/attention.py`` at b5bcd76c6, cuDNN first on every part since
    torchtitan 6a3a9da95, 2025-10, on B200 since 3b85aa31f, 2025-05); FlashAttention-2 on A100 and
    under DeepSpeed (PyTorch SDPA's own order puts FlashAttention-2 first; Megatron-DeepSpeed's
    ``--use-flash-attn-v2`` calls the flash-attn package) and the reference profile ``textbook``
    as Megatron-Core; None for a part outside :data:`FAMILY`. A run of an older torchtitan
    (FlashAttention-2 first) names its kernel (``attention_kernel``).

    Examples
    --------
    >>> default_attention_kernel("megatron", "H100-SXM"), default_attention_kernel("fsdp2", "H200")
    ('cudnn', 'cudnn')
    >>> default_attention_kernel("deepspeed", "H100-SXM"), default_attention_kernel("fsdp2", "A100-80GB")
    ('flash-attention-2', 'flash-attention-2')
    >>> default_attention_kernel("megatron", "H20")
    """
    family = FAMILY.get(catalogue_part(device_name))
    if family is None:
        return None
    if str(framework) != Framework.DEEPSPEED and family != "ampere":
        return "cudnn"
    return "flash-attention-2"


@lru_cache(maxsize=64)
def framework_kernels(given: str | None, part: str | None) -> tuple[tuple[str, str | None], ...]:
    """(framework, the attention kernel it runs) for every profile: ``given`` (the run's
    ``attention_kernel``) where set, else :func:`default_attention_kernel` on the part named
    ``part``; None without a part.

    >>> dict(framework_kernels(None, "A100-80GB"))["megatron"], framework_kernels("cudnn", None)[0]
    ('flash-attention-2', ('megatron', 'cudnn'))
    """
    return tuple(
        (fw.value, given or (default_attention_kernel(fw.value, part) if part else None))
        for fw in Framework
    )


def _planner_flops(
    direction: str,
    seq_len: int,
    head_dims: tuple[int, int],
    causal: bool = True,
    window: int | None = None,
) -> float:
    """The planner's FLOPs of one call of one head (:func:`model.flops.
    attention_core_forward_flops`: ``2·pairs·(d_qk + d_v)`` forward, ``s(s + 1)/2`` pairs
    causal, ``s²`` unmasked, a band's :func:`model.attention.attended_pairs`; backward twice
    the forward)."""
    pairs = seq_len * (seq_len + 1) / 2 if causal else float(seq_len) ** 2
    if window is not None:
        pairs = float(attended_pairs(AttentionSpan.LOCAL, seq_len, window, True))
    forward = 2.0 * pairs * sum(head_dims)
    return forward * {"fwd": 1.0, "bwd": 2.0, "fwd+bwd": 3.0}[direction]


def _one_direction(
    kernel: str,
    part: str,
    direction: str,
    head_dims: tuple[int, int],
    seq_len: int,
    causal: bool = True,
    window: int | None = None,
) -> tuple[float, bool]:
    """(fraction of ``part``'s peak in the planner's count, whether a fallback was taken) for
    a call with the mask ``causal`` (and a band of ``window`` keys: its own curve only); a
    missing curve of that mask falls back to the other mask's (its rate applied to this call's
    FLOPs), unequal head dims without a curve to the square curve of the larger one
    (:func:`model.kernels.attention_rate` interpolates in the dimension)."""
    curves = attention_curves()
    for masked in (causal,) if window is not None else (causal, not causal):
        key = AttentionKey(kernel, part, "bf16", direction, masked, window)
        for dims in dict.fromkeys((head_dims, (max(head_dims),) * 2)):
            try:
                rate = attention_rate(curves, key, dims, seq_len)
            except InputError:
                continue
            kernel_flops = attention_kernel_flops(
                rate.flop_count, direction, 1, 1, seq_len, *dims, causal, window
            )
            seconds = kernel_flops / (rate.tflops_per_s * 1e12)
            fraction = _planner_flops(direction, seq_len, dims, causal, window) / seconds
            fallback = masked != causal or dims != head_dims or rate.clamped is not None
            return fraction / (PUBLISHED_PEAK_TFLOPS[part] * 1e12), fallback
    raise InputError(f"attention kernel: no {direction} curve for {kernel} on {part}")


@lru_cache(maxsize=4096)
def attention_fractions(
    kernel: str,
    device_name: str,
    head_dims: tuple[int, int],
    seq_len: int,
    causal: bool = True,
) -> tuple[float, float] | None:
    """(forward, backward) efficiency of one attention call, causal (or unmasked when not
    ``causal``), as a fraction of the dense BF16 peak, counted in the planner's FLOPs (forward
    ``2·pairs·(d_qk + d_v)`` over the ``s(s + 1)/2`` causal pairs or the ``s²`` unmasked ones,
    backward twice that): the published rate of ``kernel`` on the
    part or its family (:func:`attention_curve_parts`) at ``seq_len`` (the query length one
    call sees: a ring step's chunk under context parallelism, :func:`ring_fractions`) in the
    benchmark's own FLOP count
    (:func:`model.kernels.attention_kernel_flops`), converted to the planner's. Where only a
    forward-and-backward curve is published (FlashAttention-2's figures) both passes take its
    fraction (its time split 1 : 2.5, as the benchmark counts). Outside the published lengths
    the end value holds. None when the part has no family or the kernel no curve on it.

    Examples
    --------
    cuDNN 9.19 on H200, causal, 128-dim heads, s = 32,768: 688 TFLOP/s forward in its own
    (``nonmasked``) count, which is the planner's forward: 688 / 989.4.

    >>> f, b = attention_fractions("cudnn", "H100-SXM", (128, 128), 32768)
    >>> round(f, 4)
    0.6954
    >>> attention_fractions("cudnn", "MI300X", (128, 128), 4096) is None
    True
    """
    if kernel not in ATTENTION_KERNELS:
        raise InputError(
            f"attention_kernel: {kernel!r} is not one of {', '.join(ATTENTION_KERNELS)}"
        )
    for part in attention_curve_parts(kernel, device_name):
        try:
            fwd, _ = _one_direction(kernel, part, "fwd", head_dims, seq_len, causal)
            bwd, _ = _one_direction(kernel, part, "bwd", head_dims, seq_len, causal)
        except InputError:
            try:
                both, _ = _one_direction(kernel, part, "fwd+bwd", head_dims, seq_len, causal)
            except InputError:
                continue
            fwd = bwd = both
        return fwd, bwd
    return None


def ring_fractions(
    kernel: str, device_name: str, head_dims: tuple[int, int], chunk: int, calls: int
) -> tuple[float, float] | None:
    """(forward, backward) efficiency of a causal core split over a load-balanced ring of
    ``calls`` steps whose rank holds ``chunk`` = s/r tokens (two chunks of s/(2r), head and
    tail): step 0 is one causal call on the local ``chunk`` × ``chunk``, every other step one
    unmasked call on ``chunk`` queries × ``chunk``/2 keys or ``chunk``/2 × ``chunk`` — equal
    work, (chunk²)/2 pairs each (Transformer Engine ``AttnFuncWithCPAndKVP2P``: sections
    "diagonal", "lower-triangle", "upper-triangle", ``transformer_engine/pytorch/attention/
    dot_product_attention/context_parallel.py`` at d0067d0; PyTorch ``_templated_ring_attention``
    and its backward, ``torch/distributed/tensor/experimental/_attention.py``: ``is_causal``
    on step 0 only, ``key.chunk(2)[0]`` for i ≤ rank, ``query.chunk(2)[1]`` otherwise). So 1/r
    of the work runs at the causal rate at ``chunk`` and (r − 1)/r at the unmasked rate, read at
    the shorter side ``chunk``/2 (the published sweeps have s_q = s_k); the fractions combine
    harmonically (time adds). ``calls`` = 1: :func:`attention_fractions` of the causal call.
    None where the kernel has no curve on the part.

    Examples
    --------
    FlashAttention-2 on the H100 at cp 8 of 262,144 tokens (chunk 32,768): the causal call at
    32K runs 358 ‰ forward, the unmasked 16K ones 374 ‰ (the FlashAttention-3 paper's
    FlashAttention-2 bars: 370 TFLOP/s at 16K), so 1/(1/(8·0.358) + 7/(8·0.374)).

    >>> f, b = ring_fractions("flash-attention-2", "H100-SXM", (128, 128), 32768, 8)
    >>> round(f, 3), round(1 / (1 / (8 * 0.3577) + 7 / (8 * 0.374)), 3)
    (0.372, 0.372)
    """
    causal = attention_fractions(kernel, device_name, head_dims, chunk)
    if causal is None or calls <= 1:
        return causal
    unmasked = attention_fractions(kernel, device_name, head_dims, max(chunk // 2, 1), False)
    assert unmasked is not None
    return (
        1 / (1 / (calls * causal[0]) + (calls - 1) / (calls * unmasked[0])),
        1 / (1 / (calls * causal[1]) + (calls - 1) / (calls * unmasked[1])),
    )


@lru_cache(maxsize=4096)
def window_fractions(
    kernel: str, device_name: str, head_dims: tuple[int, int], seq_len: int, window: int
) -> tuple[float, float] | None:
    """(forward, backward) efficiency of one call of ``seq_len`` queries under a causal band of
    ``window`` keys (a sliding-window layer), as a fraction of the dense BF16 peak, counted in
    the planner's FLOPs over the band's pairs (:func:`model.attention.attended_pairs`,
    backward twice the forward): the published windowed curve of ``kernel`` with this very
    ``window`` on the part or its family (:func:`attention_curve_parts`, first match first;
    cudnn-frontend's gpt-oss sweeps, ``attention.toml``). The kernel skips the key tiles
    outside the band, so its time is linear in ``seq_len`` and its rate depends on W; a
    curve of another W is not read. Without one, the causal call at the window's own length
    ``min(window, seq_len)`` (:func:`attention_fractions`; per query tile a band runs about
    W/T key tiles, the two on its edges partly masked, as the diagonal tiles of a causal call
    of W), unless that length lies below the part's causal sweep (cuDNN's start at 2,048, 3–4×
    too fast for a 128-key band): then the kernels' tiling, a query tile's fixed cost and its
    key tiles' from a sweep of the family at constant b·s (:func:`_tiled_band`, Ampere and
    Hopper; Blackwell has none and holds). Either way the band is charged no more than the
    causal call of ``seq_len`` it is a part of (its fraction at least the causal call's × the
    share of the causal pairs it keeps): its key tiles are a subset of the triangle's — where
    the curves say otherwise it is their head dimension (the sweeps' bands are d = 64, the
    causal curve standing for 64 is d = 128's), e.g. the H200's 1,024-key band at s = 2,048
    (75 % of the triangle's pairs, 310 TFLOP/s
    against 484 causal). None where the kernel has no curve on the part.

    Examples
    --------
    cuDNN 9.22 on GB200, W = 128, d = 64, s = 8,192: 165 TFLOP/s forward and 187 backward in
    the sweep's count (backward ``2·E·(3·d_qk + 2·d_v)``, 2.5× its forward; the planner's
    backward is 2×), so 165 / 2,500 and 187 · 0.8 / 2,500.

    >>> f, b = window_fractions("cudnn", "GB200", (64, 64), 8192, 128)
    >>> round(f, 4), round(b, 4)
    (0.066, 0.0598)
    """
    if kernel not in ATTENTION_KERNELS:
        raise InputError(
            f"attention_kernel: {kernel!r} is not one of {', '.join(ATTENTION_KERNELS)}"
        )
    causal = attention_fractions(kernel, device_name, head_dims, seq_len)
    if causal is None:
        return None
    band = None
    for part in attention_curve_parts(kernel, device_name):
        try:
            fwd, _ = _one_direction(kernel, part, "fwd", head_dims, seq_len, True, window)
            bwd, _ = _one_direction(kernel, part, "bwd", head_dims, seq_len, True, window)
        except InputError:
            continue
        band = fwd, bwd
        break
    if band is None and min(window, seq_len) < _shortest_causal(kernel, device_name):
        band = _tiled_band(kernel, device_name, head_dims, seq_len, window)
    if band is None:
        band = attention_fractions(kernel, device_name, head_dims, min(window, seq_len))
        assert band is not None
    kept = attended_pairs(AttentionSpan.LOCAL, seq_len, window, True) / (
        seq_len * (seq_len + 1) / 2
    )
    return max(band[0], causal[0] * kept), max(band[1], causal[1] * kept)


def _curves(kernel: str, part: str, direction: str, causal: bool) -> list[AttentionCurve]:
    """The main (not ``extends``) unbanded 16-bit curves of ``kernel`` on ``part``."""
    return [
        c
        for c in attention_curves()
        if (c.kernel, c.part, c.direction, c.causal, c.window, c.extends)
        == (kernel, part, direction, causal, None, False)
        and c.dtype in ("bf16", "fp16")
    ]


def _shortest_causal(kernel: str, device_name: str) -> int:
    """The shortest length (tokens) the causal sweep read for ``kernel`` on the part publishes:
    the first part of :func:`attention_curve_parts` with a causal curve (forward, else forward
    and backward); 0 where none."""
    for part in attention_curve_parts(kernel, device_name):
        for direction in ("fwd", "fwd+bwd"):
            found = _curves(kernel, part, direction, True)
            if found:
                return min(c.seq_len[0] for c in found)
    return 0


def _tiled_band(
    kernel: str, device_name: str, head_dims: tuple[int, int], seq_len: int, window: int
) -> tuple[float, float] | None:
    """(forward, backward) fractions of a band of ``window`` keys over ``seq_len`` queries by
    the kernels' tiling (:func:`model.band_tiles.band_seconds`), in the planner's FLOPs
    (:func:`_planner_flops` of the band) over the sweep's part's peak: per direction, the first
    part of :func:`attention_curve_parts` with a sweep of b·s held constant whose costs fit,
    causal before unmasked, these head dims, else the square ones linear in the larger dimension
    (held outside them, as :func:`model.kernels.attention_rate`); where only a
    forward-and-backward sweep fits, both passes take its fraction. None where no sweep fits.

    Examples
    --------
    The H100's 128-key band of 64-dim heads at s = 8,192: the FlashAttention-3 paper's cuDNN
    sweeps give 131 TFLOP/s forward (causal) and 97 backward (unmasked, in cudnn-frontend's 2.5×
    count) — the causal call held at 2,048 read 484 and 370.

    >>> f, b = _tiled_band("cudnn", "H100-SXM", (64, 64), 8192, 128)
    >>> round(f * 989.4), round(b * 989.4 / 0.8)
    (131, 97)
    """

    def fraction(c: AttentionCurve) -> float | None:
        seconds = band_seconds(c, seq_len, window)
        if seconds is None:
            return None
        dims = (c.head_dim_qk, c.head_dim_v)
        flops = _planner_flops(c.direction, seq_len, dims, True, window)
        return flops / seconds / (PUBLISHED_PEAK_TFLOPS[c.part] * 1e12)

    def one(direction: str) -> float | None:
        for part in attention_curve_parts(kernel, device_name):
            for causal in (True, False):
                fits = {
                    (c.head_dim_qk, c.head_dim_v): f
                    for c in _curves(kernel, part, direction, causal)
                    if (f := fraction(c)) is not None
                }
                if head_dims in fits:
                    return fits[head_dims]
                square = sorted((d, f) for (d, d_v), f in fits.items() if d == d_v)
                if square:
                    xs, ys = zip(*square, strict=True)
                    return interpolate_linear(xs, ys, max(head_dims)).value
        return None

    fwd, bwd = one("fwd"), one("bwd")
    if fwd is not None and bwd is not None:
        return fwd, bwd
    both = one("fwd+bwd")
    return None if both is None else (both, both)
