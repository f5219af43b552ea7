"""GEMM efficiency by shape, and the FP8 / MXFP8 recipes against BF16, from published
per-operation measurements (``scenarios/kernels/gemm.toml`` and ``lowp.toml``).

In the step time: the wave rule times the routed experts' grouped GEMMs
(:mod:`model.grouped_gemm`); dense GEMMs keep :func:`model.roofline.gemm_efficiency`.

The proposed rule for a GEMM of ``groups`` × ``[m, k] × [k, n]`` on one GPU:

``e(m, n, k) = f_large(part, dtype) × w(m, n, groups; SMs, tile) × k / (k + k₀)``

* ``f_large`` — the fraction of the datasheet peak a large GEMM sustains, from a published
  large-GEMM measurement with the other two factors of its own shape divided out
  (:func:`large_gemm_fraction`), so the rule reproduces that measurement exactly;
* ``w`` — tile and wave quantisation (NVIDIA, "Matrix Multiplication Background User's Guide",
  DU-09799-001, §3.1 Tile Quantization, §3.2 Wave Quantization): the output is cut into
  ``block_m × block_n`` tiles, one per SM at a time, so a GEMM takes ``waves = ⌈tiles / SMs⌉``
  tile-times; the useful share is ``groups·m·n / (waves · SMs · block_m · block_n)``
  (:func:`wave_efficiency`). The tile is the one a library picks for the shape: DeepGEMM's rule
  (:func:`deepgemm_blocks`) is the published one;
* ``k / (k + k₀)`` — the depth rule of :func:`model.roofline.gemm_efficiency` (a tile's output
  write-back after its main loop), with ``k₀`` from the part's balance point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainplan.model.errors import InputError
from trainplan.model.kernel_tables import BlockFormat, GemmTable, LayerGemms, ShapeGemms, SmCount
from trainplan.model.roofline import RooflineParams, gemm_efficiency

__all__ = [
    "GemmPart", "sm_count", "DEEPGEMM_BLOCK_M", "DEEPGEMM_BLOCK_N", "deepgemm_blocks",
    "wave_efficiency", "gemm_point", "depth_factor", "large_gemm_fraction", "shape_efficiency",
    "shape_seconds", "recipe_speedup", "quantization_share", "cached_weight_speedup", "layer_row",
    "layer_ms", "cast_elements", "block_scale_bytes",
]  # fmt: skip

DEEPGEMM_BLOCK_M = (64, 128, 256)
"""DeepGEMM's candidate M blocks on Hopper (deepseek-ai/DeepGEMM ``deep_gemm/jit_kernels/gemm.py``
``get_best_configs`` at commit 989c9e36, the commit of its README's performance tables); a
contiguous grouped GEMM uses the layout's M alignment, 128 (``utils.py``
``get_m_alignment_for_contiguous_layout``)."""

DEEPGEMM_BLOCK_N = (*range(16, 129, 8), 144, 160)
"""DeepGEMM's candidate N blocks on Hopper (same function): 16 to 128 by 8, then 144 and 160;
a 256-row M block only with an N block of at most 128."""


@dataclass(frozen=True, slots=True)
class GemmPart:
    """What the shape rule reads of a part besides the GEMM: its SMs (``gemm.toml``), dense
    peak (TFLOP/s, of the GEMM's input dtype) and HBM bandwidth (TB/s) from the accelerator
    table, and the fraction of that bandwidth a streaming kernel reaches (e.g. BabelStream's
    triad, :func:`model.kernels.stream_fraction`)."""

    sms: int
    peak_tflops: float
    hbm_tbps: float
    hbm_efficiency: float


def sm_count(rows: Sequence[SmCount], part: str) -> int:
    """The SMs of ``part`` (``gemm.toml`` ``[[sm_count]]``).

    Raises
    ------
    InputError
        For a part without a sourced count (the wave rule does not apply to it).

    Examples
    --------
    >>> from trainplan.scenarios.kernel_data import gemm_data
    >>> sm_count(gemm_data().sm_counts, "H800")
    132
    """
    for row in rows:
        if row.part == part:
            return row.sms
    have = ", ".join(r.part for r in rows)
    raise InputError(f"gpu: {part!r} has no sourced SM count (the wave rule needs one): {have}")


def _waves(m: int, n: int, groups: int, sms: int, bm: int, bn: int) -> tuple[int, int]:
    """(waves, tiles in the last wave) of ``groups`` GEMMs cut into ``bm × bn`` tiles."""
    tiles = groups * math.ceil(m / bm) * math.ceil(n / bn)
    return math.ceil(tiles / sms), tiles % sms or sms


def deepgemm_blocks(
    m: int, n: int, groups: int, sms: int, contiguous: bool = False
) -> tuple[int, int]:
    """The ``(block_m, block_n)`` DeepGEMM picks for ``groups`` GEMMs with output ``[m, n]``
    over ``sms`` SMs (``get_best_configs`` at commit 989c9e36, read and re-stated here): the
    fewest waves; among those, the fullest last wave; among those, a smaller block on the same
    M or N (less padding) or, for different M and N blocks, the larger N block.

    Examples
    --------
    A 4096 × 7168 output over 132 SMs: 256 × 128 tiles make 16 × 56 = 896 tiles, 7 waves
    (6.8 rounded up), the last holding 104 of 132; no candidate needs fewer waves or fills the
    last one more:

    >>> deepgemm_blocks(4096, 7168, 1, 132)
    (256, 128)
    """
    block_ms = (128,) if contiguous else DEEPGEMM_BLOCK_M
    best: tuple[int, int] | None = None
    for bm in block_ms:
        for bn in (b for b in DEEPGEMM_BLOCK_N if bm <= 128 or b <= 128):
            if best is None:
                best = (bm, bn)
                continue
            waves, util = _waves(m, n, groups, sms, bm, bn)
            best_waves, best_util = _waves(m, n, groups, sms, *best)
            if waves != best_waves:
                better = waves < best_waves
            elif util != best_util:
                better = util > best_util
            else:
                better = (
                    (bm == best[0] and bn < best[1])
                    or (bn == best[1] and bm < best[0])
                    or (bm != best[0] and bn > best[1])
                )
            if better:
                best = (bm, bn)
    assert best is not None
    return best


def wave_efficiency(m: int, n: int, groups: int, sms: int, block_m: int, block_n: int) -> float:
    """The useful share of the tile-times a GEMM occupies: ``groups·m·n / (waves · SMs ·
    block_m · block_n)``, ``waves = ⌈groups·⌈m/block_m⌉·⌈n/block_n⌉ / SMs⌉`` (tile and wave
    quantisation, NVIDIA's Matrix Multiplication Background guide §3.1–3.2).

    Raises
    ------
    InputError
        A non-positive dimension.

    Examples
    --------
    One 1024 × 1024 output in 128 × 128 tiles on 132 SMs: 64 tiles, one wave of 132 slots:

    >>> round(wave_efficiency(1024, 1024, 1, 132, 128, 128), 4)  # 64 / 132
    0.4848
    """
    if min(m, n, groups, sms, block_m, block_n) <= 0:
        raise InputError(f"gemm shape: m {m}, n {n}, groups {groups} must be positive")
    waves, _ = _waves(m, n, groups, sms, block_m, block_n)
    return groups * m * n / (waves * sms * block_m * block_n)


def gemm_point(
    tables: Sequence[GemmTable],
    library: str,
    part: str,
    dtype: str,
    layout: str,
    m: int,
    n: int,
    k: int,
    groups: int = 1,
) -> float:
    """A published GEMM's TFLOP/s, exactly as the table prints it (no interpolation across
    shapes: a GEMM's rate is not smooth in (m, n, k), which is what the wave rule models).

    Raises
    ------
    InputError
        A shape the table does not publish (the message lists the table's shapes).

    Examples
    --------
    >>> from trainplan.scenarios.kernel_data import gemm_data
    >>> gemm_point(gemm_data().gemms, "deepgemm", "H800", "fp8", "dense", 4096, 7168, 16384)
    1520
    """
    for t in tables:
        if (t.library, t.part, t.dtype, t.layout) != (library, part, dtype, layout):
            continue
        rows = zip(t.groups, t.m, t.n, t.k, t.tflops_per_s, strict=True)
        for g, mm, nn, kk, tflops in rows:
            if (g, mm, nn, kk) == (groups, m, n, k):
                return tflops
        shapes = [f"{g}x{a}x{b}x{c}" for g, a, b, c in zip(t.groups, t.m, t.n, t.k, strict=True)]
        raise InputError(
            f"gemm shape: {groups}x{m}x{n}x{k} (groups x m x n x k) is not in the {library} "
            f"table on {part}; published: {', '.join(shapes)}"
        )
    raise InputError(f"gemm: no published {library} {dtype} {layout} table on {part}")


def depth_factor(
    k: int, fraction: float, peak_tflops: float, hbm_tbps: float, hbm_efficiency: float, beta: int
) -> float:
    """``k / (k + k₀)``, ``k₀ = (β/2)·fraction·peak / (e_HBM·HBM)``: the depth rule of
    :func:`model.roofline.gemm_efficiency` without its e_GEMM (one rule, read from there).

    Examples
    --------
    >>> round(depth_factor(512, 0.7, 1979, 3.35, 0.9, 2), 4)  # k₀ = 0.7·1979/(0.9·3350) ≈ 459.5
    0.527
    """
    p = RooflineParams(gemm_efficiency=fraction, hbm_efficiency=hbm_efficiency)
    return gemm_efficiency(k, peak_tflops * 1e12, hbm_tbps * 1e12, p, beta) / fraction


def large_gemm_fraction(
    measured_tflops: float,
    m: int,
    n: int,
    k: int,
    groups: int,
    part: GemmPart,
    beta: int,
    contiguous: bool = False,
) -> float:
    """``f_large``: the fraction of the peak that makes :func:`shape_efficiency` return the
    measured rate at the measured shape. With ``r = measured / (peak · w)`` and the depth rule's
    ``k₀ = c·f``, ``c = (β/2)·peak/(e_HBM·HBM)``: ``r = f·k/(k + c·f)``, so
    ``f = r·k / (k − r·c)``.

    Raises
    ------
    InputError
        When no fraction in (0, 1] reproduces the measurement (the rule cannot express it).

    Examples
    --------
    DeepGEMM's 4096 × 7168 × 16384 FP8 GEMM on H800, 1,520 of 1,978.9 TFLOP/s, BF16 output
    (β = 2): w = 896/(7·132) = 0.9697 (256 × 128 tiles), r = 1520/(1978.9·0.9697) = 0.7921,
    c = 1978.9/(0.9·3.35) = 656.3, f = 0.7921·16384/(16384 − 0.7921·656.3):

    >>> h800 = GemmPart(sms=132, peak_tflops=1978.9, hbm_tbps=3.35, hbm_efficiency=0.9)
    >>> round(large_gemm_fraction(1520, 4096, 7168, 16384, 1, h800, 2), 4)
    0.8181
    """
    bm, bn = deepgemm_blocks(m, n, groups, part.sms, contiguous)
    r = measured_tflops / (part.peak_tflops * wave_efficiency(m, n, groups, part.sms, bm, bn))
    c = beta / 2 * part.peak_tflops / (part.hbm_efficiency * part.hbm_tbps)
    if not 0 < r * c < k:
        raise InputError(f"gemm: {measured_tflops} TFLOP/s at k = {k} is beyond the depth rule")
    f = r * k / (k - r * c)
    if not 0 < f <= 1:
        raise InputError(
            f"gemm: {measured_tflops} TFLOP/s at {m}x{n}x{k} needs a peak fraction {f:.3f} "
            "outside (0, 1]"
        )
    return f


def shape_efficiency(
    m: int, n: int, k: int, groups: int, fraction: float, part: GemmPart, beta: int,
    contiguous: bool = False,
) -> float:  # fmt: skip
    """The proposed rule (module docstring): ``fraction × w(m, n, groups) × k/(k + k₀)``, the
    tile DeepGEMM's (:func:`deepgemm_blocks`).

    Examples
    --------
    The H800 anchor above reproduces its own measurement:

    >>> h800 = GemmPart(sms=132, peak_tflops=1978.9, hbm_tbps=3.35, hbm_efficiency=0.9)
    >>> f = large_gemm_fraction(1520, 4096, 7168, 16384, 1, h800, 2)
    >>> round(1978.9 * shape_efficiency(4096, 7168, 16384, 1, f, h800, 2), 6)
    1520.0
    """
    bm, bn = deepgemm_blocks(m, n, groups, part.sms, contiguous)
    w = wave_efficiency(m, n, groups, part.sms, bm, bn)
    depth = depth_factor(k, fraction, part.peak_tflops, part.hbm_tbps, part.hbm_efficiency, beta)
    return fraction * w * depth


def shape_seconds(
    m: int,
    n: int,
    k: int,
    groups: int,
    fraction: float,
    part: GemmPart,
    bytes_in_out: tuple[float, int],
    kernel_overhead_s: float,
    contiguous: bool = False,
) -> float:
    """Seconds of ``groups`` GEMMs ``[m, k] × [k, n]`` on the roofline of
    :func:`model.roofline.gemm_seconds` with :func:`shape_efficiency` as the compute term:
    ``max(2·groups·m·n·k / (peak · e), groups·((m·k + k·n)·b_in + m·n·b_out) /
    (e_HBM · HBM)) + t_kernel``, ``bytes_in_out = (b_in, b_out)`` bytes per element of the
    operands and of the output (the depth rule's β is ``b_out``).

    Against the published tables (``tests/model/test_gemm_shapes.py`` holds the figures):
    within a few per cent where m, n, k ≥ 2048 (DeepGEMM's dense and contiguous-grouped H800
    tables, cuBLASLt's on A100 and H100), up to +25 % on DeepGEMM's masked layout with 256
    tokens per expert, and up to +50 % on 1024-sized GEMMs, whose fixed cost exceeds t_kernel.

    Examples
    --------
    A decode-sized GEMM is memory-bound: 64 × 7168 × 16384 in FP8 on H800 reads 117 MB of
    weight at 0.887 × 3.35 TB/s (BabelStream triad on H100) in 39.6 µs, plus 3 µs:

    >>> h800 = GemmPart(sms=132, peak_tflops=1978.9, hbm_tbps=3.35, hbm_efficiency=0.887)
    >>> t = shape_seconds(64, 7168, 16384, 1, 0.8, h800, (1, 2), 3e-6)
    >>> round(2 * 64 * 7168 * 16384 / t / 1e12)  # TFLOP/s (published: 336)
    348
    """
    in_bytes, out_bytes = bytes_in_out
    e = shape_efficiency(m, n, k, groups, fraction, part, out_bytes, contiguous)
    flops = 2.0 * groups * m * n * k
    moved = groups * ((m * k + k * n) * in_bytes + m * n * out_bytes)
    compute = flops / (part.peak_tflops * 1e12 * e)
    memory = moved / (part.hbm_tbps * 1e12 * part.hbm_efficiency)
    return max(compute, memory) + kernel_overhead_s


_PASSES = ("fprop", "dgrad", "wgrad")


def layer_row(rows: Sequence[LayerGemms], part: str, mode: str, recipe: str) -> LayerGemms:
    """The ``lowp.toml`` layer profile of ``part`` in ``mode`` publishing ``recipe`` (else InputError)."""
    for row in rows:
        if (row.part, row.mode) == (part, mode) and recipe in row.recipes:
            return row
    have = ", ".join(
        sorted({x for r in rows if (r.part, r.mode) == (part, mode) for x in r.recipes})
    )
    raise InputError(
        f"recipe: no published {recipe} ({mode}) on {part}; published there: {have or 'none'}"
    )


def layer_ms(row: LayerGemms, recipe: str, passes: Sequence[str]) -> float:
    """Milliseconds of ``recipe``'s ``passes`` (fprop, dgrad, wgrad) in a layer profile."""
    bad = [p for p in passes if p not in _PASSES]
    if bad:
        raise InputError(f"passes: {bad[0]!r} is not one of {', '.join(_PASSES)}")
    j = row.recipes.index(recipe)
    return sum(
        {"fprop": row.fprop_ms, "dgrad": row.dgrad_ms, "wgrad": row.wgrad_ms}[p][j] for p in passes
    )


def recipe_speedup(
    rows: Sequence[LayerGemms],
    part: str,
    recipe: str,
    mode: str = "autocast",
    passes: Sequence[str] = _PASSES,
) -> float:
    """How much faster a layer's linear GEMMs run under ``recipe`` than in BF16 on ``part``:
    the published BF16 milliseconds over the recipe's, summed over ``passes`` (``autocast``:
    with the quantisation kernels, as training runs; ``pre-quantized``: the GEMMs alone).

    Raises
    ------
    InputError
        A recipe, mode or part without a published row.

    Examples
    --------
    H200 NVL, per-tensor current scaling, autocast: 32.014 ms / 20.285 ms.

    >>> from trainplan.scenarios.kernel_data import low_precision_data
    >>> rows = low_precision_data().layer_gemms
    >>> round(recipe_speedup(rows, "H200-NVL", "fp8-current"), 4)
    1.5782
    """
    row = layer_row(rows, part, mode, recipe)
    return layer_ms(row, "bf16", passes) / layer_ms(row, recipe, passes)


def quantization_share(
    rows: Sequence[LayerGemms], part: str, recipe: str, passes: Sequence[str] = _PASSES
) -> float:
    """The share of a recipe's autocast GEMM time spent outside the GEMM kernels (casts,
    amax reductions, transposes, scale computation): ``1 − pre-quantized / autocast``.

    Raises
    ------
    InputError
        No pair of rows, or ``fp8-delayed`` (its pre-quantized run keeps its quantisation).

    Examples
    --------
    H200 NVL, current scaling: 1 − 16.785 / 20.285 (Transformer Engine's own reading: ~17 %).

    >>> from trainplan.scenarios.kernel_data import low_precision_data
    >>> round(quantization_share(low_precision_data().layer_gemms, "H200-NVL", "fp8-current"), 4)
    0.1725
    """
    if recipe == "fp8-delayed":
        raise InputError("recipe: fp8-delayed has no kernel-only time (it always quantises)")
    auto = layer_ms(layer_row(rows, part, "autocast", recipe), recipe, passes)
    pre = layer_ms(layer_row(rows, part, "pre-quantized", recipe), recipe, passes)
    return 1 - pre / auto


def cast_elements(row: LayerGemms, gemm_pass: str) -> tuple[int, int]:
    """(activation, weight) elements the benchmark's ``te.Linear`` quantises in one pass
    (``benchmarks/gemm/benchmark_gemm.py`` ``compute_gemm_shapes``: each pass a forward
    ``te.Linear`` of its shape, quantising input ``M × K`` and weight ``K × N``): QKV (h → 3h),
    output (h → h), MLP up (h → f), down (f → h); dgrad swaps K and N."""
    m, h, f = row.tokens, row.hidden, row.ffn_hidden
    fprop = ((h, 3 * h), (h, h), (h, f), (f, h))
    shapes = fprop if gemm_pass == "fprop" else tuple((n, k) for k, n in fprop)
    return sum(m * k for k, _ in shapes), sum(k * n for k, n in shapes)


def cached_weight_speedup(
    rows: Sequence[LayerGemms], part: str, recipe: str, passes: Sequence[str] = _PASSES
) -> float:
    """:func:`recipe_speedup` for a layer as Megatron-Core runs Transformer Engine: the GEMM
    kernels (``pre-quantized``) plus the casts a training pass makes per micro-batch. The
    ``autocast`` time quantises each GEMM's input and weight on every call; in training TE
    quantises a weight once per step (Megatron-Core ``TELinear.forward`` passes
    ``is_first_microbatch``; TE ``linear.py`` requantises only when it is None or True), and
    wgrad reads the columnwise copies the forward's and dgrad's casts made (TE ``linear.py``:
    the input quantiser's ``columnwise`` usage). So fprop pays the input's cast, dgrad the output
    gradient's, wgrad none: each pass's cast time (autocast − pre-quantized) in proportion to
    the elements it quantises (one cast kernel for inputs and weights; :func:`cast_elements`).
    Delayed scaling's benchmark always quantises, but its GEMM is current scaling's per-tensor
    FP8 GEMM (TE ``pytorch/tensor/float8_tensor.py``: ``Float8Quantizer`` and
    ``Float8CurrentScalingQuantizer`` both make a ``Float8Tensor``; only the scale's origin
    differs), so its kernel-only time is current scaling's pre-quantized row.

    Raises
    ------
    InputError
        No pair of rows (``fp8-block`` on Hopper is not benchmarked pre-quantized).

    Examples
    --------
    H200 NVL, current scaling: fprop 5.577 + 0.6933 × 0.926, dgrad 5.661 + 0.7443 × 1.134,
    wgrad 5.547 ms against BF16's 32.014 ms.

    >>> from trainplan.scenarios.kernel_data import low_precision_data
    >>> round(cached_weight_speedup(low_precision_data().layer_gemms, "H200-NVL",
    ...                             "fp8-current"), 4)
    1.7522
    """
    kernel = "fp8-current" if recipe == "fp8-delayed" else recipe
    auto_row = layer_row(rows, part, "autocast", recipe)
    pre_row = layer_row(rows, part, "pre-quantized", kernel)
    ms = 0.0
    for p in passes:
        pre = layer_ms(pre_row, kernel, (p,))
        if p == "wgrad":
            ms += pre
            continue
        act, weight = cast_elements(auto_row, p)
        ms += pre + act / (act + weight) * (layer_ms(auto_row, recipe, (p,)) - pre)
    return layer_ms(auto_row, "bf16", passes) / ms


def shape_speedup(rows: Sequence[ShapeGemms], part: str, recipe: str, op: str, mode: str) -> float:
    """One published shape's BF16 time over the recipe's (``lowp.toml`` ``[[shape_gemms]]``).

    Examples
    --------
    B300, the attention output projection 15872 × 4096 × 4096: 0.307 / 0.269 ms under MXFP8.

    >>> from trainplan.scenarios.kernel_data import low_precision_data
    >>> round(shape_speedup(low_precision_data().shape_gemms, "B300", "mxfp8", "Attn Out",
    ...                     "autocast"), 4)
    1.1413
    """
    for row in rows:
        if (row.part, row.mode) == (part, mode) and recipe in row.recipes and op in row.op:
            ms = row.ms[row.op.index(op)]
            return ms[row.recipes.index("bf16")] / ms[row.recipes.index(recipe)]
    raise InputError(f"recipe: no published {op} shape under {recipe} ({mode}) on {part}")


def block_scale_bytes(elements: int, fmt: BlockFormat) -> float:
    """Bytes of the block scales of a tensor of ``elements`` in a block-scaled format: one
    ``scale_bits`` scale per ``block_elements``, twice when the format keeps rowwise and
    columnwise copies (MXFP8: 1/32 B per element per copy).

    Examples
    --------
    >>> from trainplan.scenarios.kernel_data import low_precision_data
    >>> block_scale_bytes(4096 * 4096, low_precision_data().block_format)  # 2 · 4096²/32
    1048576.0
    """
    copies = 2 if fmt.copies == "rowwise+columnwise" else 1
    return copies * math.ceil(elements / fmt.block_elements) * fmt.scale_bits / 8
