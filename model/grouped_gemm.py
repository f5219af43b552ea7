"""The routed experts' grouped GEMMs by their own shape: tile and wave quantisation over the
part's SMs, and FP8 under Megatron-Core as the GEMM kernels plus the casts of the rows each
expert receives — not the dense layer's speed-up.

* **Shape.** A grouped GEMM of ``groups`` local experts, each ``[m, k] × [k, n]``, is cut into
  ``block_m × block_n`` output tiles per expert (an expert's rows never share a tile with
  another's: DeepGEMM's contiguous layout aligns each expert's rows to the 128-row M block,
  ``get_m_alignment_for_contiguous_layout``), and the tiles of all experts run in waves over the
  SMs. :func:`grouped_shape` returns the useful share of those tile-times
  (:func:`model.op_rates.gemm_wave_efficiency`: DeepGEMM's tile rule, NVIDIA's Matrix
  Multiplication Background guide §3.1–3.2), which multiplies the GEMM's efficiency
  (:func:`model.roofline.gemm_seconds` ``shape``). Tile quantisation is inside it, so the rows
  are not rounded as well. A part without a sourced SM count keeps the rounding to the M block
  alone (:func:`model.moe_run.grouped_rows`).
* **FP8 under Megatron-Core.** ``TEGroupedLinear.forward`` passes ``is_first_microbatch`` as
  ``TELinear`` does (``megatron/core/extensions/transformer_engine.py``), so Transformer
  Engine's ``GroupedLinear`` quantises each expert's weight once per step and the weight
  gradient reads the columnwise copies; what a micro-batch pays besides the FP8 GEMM kernels
  is the cast of the expert's input rows (forward) and of its output gradient (input gradient).
  The dense layer's cached-weight speed-up (:func:`model.gemm_shapes.cached_weight_speedup`)
  charges those casts in the dense layer's proportion to its GEMMs; here each grouped GEMM is
  charged its own: the FP8 kernels at the profile's kernel-only speed-up per pass
  (``pre-quantized`` rows) and ``m·k`` cast elements per expert at the profile's measured
  seconds per cast element (:func:`cast_seconds_per_element`), scaled from the profile part's
  HBM bandwidth to the part's (a cast is a streaming pass). What does not depend on those rows
  is charged wherever ``GroupedLinear`` runs under an FP8 recipe, profiled or not (block
  scaling on Hopper has no kernel-only row): the per-expert cast launches, FC1's bias-gradient
  launches and read, and a saved BF16 input's second cast, at its bytes
  (:func:`forward_cast_seconds`) where no rate is measured; the GEMMs then at the linear
  layers' speed-up, their casts inside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import lru_cache

from trainplan.model.errors import InputError
from trainplan.model.gemm_shapes import cast_elements, layer_ms, layer_row
from trainplan.model.hardware import DeviceSpec
from trainplan.model.kernel_tables import LayerGemms
from trainplan.model.moe_kernels import (
    expert_cast_kernels,
    fc1_bias_grad_reads,
    fc1_grad_kernels,
)
from trainplan.model.moe_run import grouped_rows
from trainplan.model.op_rates import (
    RECIPE_PART,
    check_fp8_recipe,
    gemm_wave_efficiency,
    te_caches_fp8_weights,
)
from trainplan.model.part_family import FAMILY
from trainplan.model.precision import Fp8Recipe, Precision
from trainplan.model.roofline import RooflineParams, memory_seconds
from trainplan.model.saved_originals import cast_bytes, requantise_share
from trainplan.scenarios.kernel_data import low_precision_data

__all__ = [
    "RECIPE_PART_HBM_TBPS",
    "GroupedFp8",
    "grouped_shape",
    "kernel_speedup",
    "cast_seconds_per_element",
    "grouped_fp8_rates",
    "forward_cast_seconds",
    "experts_fp8",
    "expert_cast_seconds",
    "dense_requantise_seconds",
]

RECIPE_PART_HBM_TBPS: dict[str, tuple[float, str]] = {
    "H200-NVL": (4.8, "NVIDIA H200 datasheet: H200 NVL, 4.8 TB/s HBM3e"),
    "B300": (8.0, "NVIDIA HGX B300: 8 TB/s HBM3e per GPU (topology/accelerators.toml B300)"),
}
"""HBM bandwidth (TB/s) of the parts whose Transformer Engine GEMM profile stands for a family
(:data:`model.op_rates.RECIPE_PART`; the H200 NVL is not in the accelerator table)."""


@dataclass(frozen=True, slots=True)
class GroupedFp8:
    """How the routed experts' FP8 grouped GEMMs run on a part (:func:`grouped_fp8_rates`)."""

    kernel_speedup: tuple[float, float, float] | None
    """(forward, input-gradient, weight-gradient) BF16 milliseconds over the FP8 GEMM kernels'
    alone (:func:`kernel_speedup`); None where the part's profile has no kernel-only rows for
    the recipe (block scaling on Hopper, a part without a profile): the GEMMs, dense and grouped,
    then run at :attr:`model.op_time.Clock.linear_speedup`, the recipe's casts inside it."""
    cast_s_per_element: tuple[float, float] | None
    """Seconds per element of the forward's input cast and the input gradient's output-gradient
    cast on this part (:func:`cast_seconds_per_element`, scaled by HBM bandwidth); None with
    :attr:`kernel_speedup` None (a second cast then at :attr:`cast_bytes`,
    :func:`forward_cast_seconds`)."""
    cast_kernels: int = 0
    """Kernels each local expert's cast launches beyond the profile's one cast of the whole
    operand (:func:`model.moe_kernels.expert_cast_kernels` of the recipe on the part: 4 under
    current scaling, 1 under MXFP8 and block scaling, 0 under delayed scaling where the part
    keeps an FP8 transpose, 1 on Blackwell)."""
    fc1_grad_kernels: int | None = None
    """Kernels each local expert launches to quantise FC1's output gradient
    (:func:`model.moe_kernels.fc1_grad_kernels`: with its bias gradient where the experts' FC1
    has a bias); None: :attr:`cast_kernels`."""
    fc1_bias_reads: bool = False
    """FC1's bias gradient reads its output gradient in a pass of its own
    (:func:`model.moe_kernels.fc1_bias_grad_reads`: current and block scaling)."""
    requantised: tuple[bool, bool] = (False, False)
    """(FC1, FC2): the linear saves its BF16 input and its weight-gradient pass quantises it
    again (:func:`model.expert_saved_inputs.requantised_inputs`)."""
    dense_requantised: frozenset[str] = frozenset()
    """Names of the dense linear layers (:func:`model.ops.layer_ops`') that save their BF16
    input and quantise it again for the weight gradient (:func:`model.saved_originals.
    requantised_linears`)."""
    requantise_shares: tuple[float, float] = (1.0, 1.0)
    """(dense, grouped): what that second quantisation costs as a share of the forward's
    both-ways cast (:func:`model.saved_originals.requantise_share` of the recipe)."""
    cast_bytes: int = 0
    """HBM bytes per element of one both-ways cast of a 16-bit tensor under the recipe
    (:func:`model.saved_originals.cast_bytes`): what a cast costs where
    :attr:`cast_s_per_element` is None (:func:`forward_cast_seconds`)."""


def grouped_shape(part: str, m: float, n: float, groups: float, rows: bool) -> tuple[float, float]:
    """(M the kernel computes, shape factor) of ``groups`` GEMMs with output ``[m, n]`` each:
    ``m`` and the wave rule's useful share (module docstring) on a part with a sourced SM count;
    else ``m`` rounded up to the 128-row M block where ``rows`` (``m`` is an expert's routed
    rows, not the weight gradient's feature dimension) and factor 1. 0 rows stay 0.

    Examples
    --------
    16 experts of 256 rows, n = 1,536, on a B200 (148 SMs): DeepGEMM's 128 × 120 tiles,
    16·2·13 = 416 tiles in 3 waves of 148, the useful share 16·256·1536 / (3·148·128·120):

    >>> m, w = grouped_shape("B200", 256, 1536, 16, True)
    >>> m, round(w, 4)
    (256, 0.9225)
    >>> grouped_shape("TPUv5p", 40, 1536, 16, True)  # no sourced SM count: the M block only
    (128.0, 1.0)
    """
    if m <= 0 or n <= 0:
        return m, 1.0
    w = gemm_wave_efficiency(part, math.ceil(m - 1e-9), math.ceil(n - 1e-9), int(groups))
    if w is None:
        return (grouped_rows(m) if rows else m), 1.0
    return m, w


def kernel_speedup(rows: tuple[LayerGemms, ...], part: str, recipe: str, gemm_pass: str) -> float:
    """One pass's BF16 milliseconds over the recipe's GEMM kernels alone (the profile's
    ``pre-quantized`` row; delayed scaling's kernel is current scaling's per-tensor FP8 GEMM, as
    in :func:`model.gemm_shapes.cached_weight_speedup`).

    Raises
    ------
    InputError
        No pair of rows (block scaling on Hopper has no kernel-only row).

    Examples
    --------
    H200 NVL, current scaling, forward: 10.653 / 5.577 ms.

    >>> round(kernel_speedup(low_precision_data().layer_gemms, "H200-NVL", "fp8-current",
    ...                      "fprop"), 4)
    1.9102
    """
    kernel = "fp8-current" if recipe == "fp8-delayed" else recipe
    bf16 = layer_ms(layer_row(rows, part, "autocast", recipe), "bf16", (gemm_pass,))
    return bf16 / layer_ms(layer_row(rows, part, "pre-quantized", kernel), kernel, (gemm_pass,))


def cast_seconds_per_element(
    rows: tuple[LayerGemms, ...], part: str, recipe: str, gemm_pass: str
) -> float:
    """Seconds per element the profile's casts take in one pass on the profile's part: the
    pass's autocast milliseconds less its kernel-only ones, over the elements that pass
    quantises (the benchmark's ``te.Linear`` per GEMM: input and weight,
    :func:`model.gemm_shapes.cast_elements`).

    Examples
    --------
    H200 NVL, current scaling, forward: (6.503 − 5.577) ms over 15,872·28,672 input and
    4,096·49,152 weight elements (656,408,576): 1.411 ps each — 6.1 bytes per element at 0.9 of
    4.8 TB/s, an amax pass and a cast reading BF16 and writing FP8 rowwise and columnwise.

    >>> rows = low_precision_data().layer_gemms
    >>> round(cast_seconds_per_element(rows, "H200-NVL", "fp8-current", "fprop") * 1e12, 3)
    1.411
    """
    kernel = "fp8-current" if recipe == "fp8-delayed" else recipe
    auto_row = layer_row(rows, part, "autocast", recipe)
    pre = layer_ms(layer_row(rows, part, "pre-quantized", kernel), kernel, (gemm_pass,))
    act, weight = cast_elements(auto_row, gemm_pass)
    return (layer_ms(auto_row, recipe, (gemm_pass,)) - pre) * 1e-3 / (act + weight)


@lru_cache(maxsize=64)
def grouped_fp8_rates(
    precision: Precision | str, recipe: Fp8Recipe | str | None, device: DeviceSpec, framework: str
) -> GroupedFp8 | None:
    """:class:`GroupedFp8` of the part under the run's FP8 recipe where Transformer Engine's
    ``GroupedLinear`` runs it (:func:`model.op_rates.te_caches_fp8_weights`: Megatron-Core);
    None otherwise (bf16, another framework). The per-expert cast launches
    (:func:`model.moe_kernels.expert_cast_kernels`) are the recipe's whatever the profile holds;
    the kernel-only speed-ups and measured cast rates only where the part's family has a
    profile with kernel-only rows for the recipe — else (block scaling on Hopper, a part without
    a profile) both are None: the GEMMs take the linear layers' speed-up
    (:attr:`model.op_time.Clock.linear_speedup`) and a second cast its bytes
    (:attr:`GroupedFp8.cast_bytes`, :func:`forward_cast_seconds`).

    Examples
    --------
    >>> from trainplan.model.hardware import DeviceSpec
    >>> h100 = DeviceSpec(name="H100-SXM", memory_bytes=80 * 10**9, memory_unit="GB",
    ...                   peak_flops_per_s=989.4e12, fp8_flops_per_s=1978.9e12,
    ...                   hbm_bytes_per_s=3.35e12)
    >>> g = grouped_fp8_rates("fp8", "tensorwise", h100, "megatron")
    >>> [round(x, 3) for x in g.kernel_speedup], round(g.cast_s_per_element[0] * 1e12, 3)
    ([1.91, 1.91, 1.902], 2.021)
    >>> grouped_fp8_rates("fp8", "tensorwise", h100, "fsdp2") is None
    True
    >>> b = grouped_fp8_rates("fp8", "blockwise", h100, "megatron")  # no kernel-only row
    >>> b.kernel_speedup, b.cast_s_per_element, b.cast_kernels, b.cast_bytes
    (None, None, 1, 4)
    """
    r = check_fp8_recipe(precision, recipe, device)
    if r is None or not te_caches_fp8_weights(framework):
        return None
    bare = GroupedFp8(None, None, expert_cast_kernels(r, device), cast_bytes=cast_bytes(r, 2))
    part = RECIPE_PART.get(FAMILY.get(device.part, ""))
    if part is None or not device.hbm_bytes_per_s:
        return bare
    rows, name = low_precision_data().layer_gemms, r.table_name
    scale = RECIPE_PART_HBM_TBPS[part][0] * 1e12 / device.hbm_bytes_per_s
    try:
        kernel = tuple(kernel_speedup(rows, part, name, p) for p in ("fprop", "dgrad", "wgrad"))
        casts = tuple(
            scale * cast_seconds_per_element(rows, part, name, p) for p in ("fprop", "dgrad")
        )
    except InputError:
        return bare
    return replace(
        bare,
        kernel_speedup=(kernel[0], kernel[1], kernel[2]),
        cast_s_per_element=(casts[0], casts[1]),
    )


def forward_cast_seconds(g: GroupedFp8, hbm_bytes_per_s: float, p: RooflineParams) -> float:
    """Seconds per element of the forward's input cast: the profile's measured rate
    (:attr:`GroupedFp8.cast_s_per_element`), or where the profile has none for the recipe on
    the part, the recipe's both-ways cast bytes (:attr:`GroupedFp8.cast_bytes`,
    :func:`model.saved_originals.cast_bytes`, the rule the second casts' shares are counted in)
    streamed at ``hbm_bytes_per_s × p.hbm_efficiency`` — the rule the measured rate bears out:
    current scaling's 1.411 ps on the H200 NVL is 6.1 B at 0.9 of 4.8 TB/s against its 6 B.

    >>> p = RooflineParams(gemm_efficiency=0.74)  # e_HBM 0.9
    >>> round(forward_cast_seconds(GroupedFp8(None, None, 1, cast_bytes=4), 3.35e12, p) * 1e12, 3)
    1.327
    """
    if g.cast_s_per_element is not None:
        return g.cast_s_per_element[0]
    return g.cast_bytes / (hbm_bytes_per_s * p.hbm_efficiency)


def experts_fp8(
    g: GroupedFp8 | None,
    recipe: Fp8Recipe | str | None,
    device: DeviceSpec,
    fc1_bias: bool,
    requantised: tuple[bool, bool],
    dense_requantised: frozenset[str] = frozenset(),
) -> GroupedFp8 | None:
    """``g`` (:func:`grouped_fp8_rates`, by part and recipe) with what the model and layout add:
    FC1's output-gradient kernels with ``fc1_bias`` (the model's ``linear_bias``,
    :func:`model.moe_kernels.fc1_grad_kernels`), whether its bias gradient reads the gradient
    again (:func:`model.moe_kernels.fc1_bias_grad_reads`), which linears quantise their saved
    input again (``requantised``, :func:`model.expert_saved_inputs.requantised_inputs`; the
    dense ones ``dense_requantised``, :func:`model.saved_originals.requantised_linears`) and at
    what share of a cast (:func:`model.saved_originals.requantise_share`); None stays None (no
    FP8 grouped GEMM).

    >>> from trainplan.topology.accelerator_file import get_part
    >>> h100 = get_part("H100-SXM")
    >>> g = experts_fp8(grouped_fp8_rates("fp8", "delayed", h100, "megatron"), "delayed", h100,
    ...                 True, (False, False))
    >>> g.cast_kernels, g.fc1_grad_kernels, g.fc1_bias_reads
    (0, 2, False)
    """
    if g is None or recipe is None:
        return g
    reads = fc1_bias_grad_reads(recipe, fc1_bias)
    kernels = fc1_grad_kernels(recipe, device, fc1_bias)
    shares = (float(requantise_share(recipe, False)), float(requantise_share(recipe, True)))
    return replace(
        g,
        fc1_grad_kernels=kernels,
        fc1_bias_reads=reads,
        requantised=requantised,
        dense_requantised=dense_requantised,
        requantise_shares=shares,
    )


def expert_cast_seconds(
    g: GroupedFp8,
    linear: int,
    which: int,
    mnk: tuple[float, float, float],
    experts: float,
    hbm_bytes_per_s: float,
    p: RooflineParams,
) -> float:
    """Seconds the per-expert quantisations add to pass ``which`` (0 forward, 1 input gradient,
    2 weight gradient) of routed-expert linear ``linear`` (0 FC1, 1 FC2) of ``experts`` local
    experts, each ``[m, k] × [k, n]`` (``mnk`` as :class:`model.ops.Op` holds it), beyond the
    single cast the GEMM's own per-element cast charges (:func:`model.op_time._gemm`): each
    further launch a dependent kernel's ``t_kernel`` (``p.kernel_overhead_s``) —

    * forward and input gradient: ``(experts − 1) ×`` :attr:`GroupedFp8.cast_kernels`; FC1's
      input gradient ``experts ×`` (:attr:`GroupedFp8.fc1_grad_kernels` − ``cast_kernels``)
      more, and where :attr:`GroupedFp8.fc1_bias_reads` the bias gradient's read of the BF16
      output gradient (2·m·n bytes an expert at ``hbm × e_HBM``);
    * weight gradient, where :attr:`GroupedFp8.requantised` names the linear: its input cast
      again, ``m·k`` elements an expert at the forward cast's seconds per element
      (:func:`forward_cast_seconds`) × the grouped share of
      :attr:`GroupedFp8.requantise_shares` (the forward then casts row-wise only,
      :mod:`model.saved_originals`) plus the forward's ``(experts − 1) × cast_kernels``
      launches (Transformer Engine v2.9 ``_GroupedLinear.backward``:
      ``tex.split_quantize(inp_view, ctx.m_splits, ctx.input_quantizers)``); else 0.

    >>> from trainplan.model.roofline import RooflineParams, memory_seconds
    >>> g = GroupedFp8((1.9, 1.9, 1.9), (2e-12, 2e-12), 4, 5, True, (False, True))
    >>> p = RooflineParams(gemm_efficiency=0.74)  # t_kernel 3 µs, e_HBM 0.9
    >>> mnk = (1000.0, 2048.0, 768.0)
    >>> # FC1's input gradient: (15·4 + 16·(5 − 4))·3 µs + 2·1,000·2,048·16 B at 0.9·3 TB/s
    >>> round(expert_cast_seconds(g, 0, 1, mnk, 16, 3e12, p) * 1e6, 3)  # 228 + 24.273 µs
    252.273
    >>> # FC2's weight gradient re-quantises its input: 15·4·3 µs + 2 ps × 16·1,000·768
    >>> round(expert_cast_seconds(g, 1, 2, mnk, 16, 3e12, p) * 1e6, 3)
    204.576
    """
    m, n, k = mnk
    launches = (experts - 1) * g.cast_kernels
    if which == 2:
        if not g.requantised[linear]:
            return 0.0
        cast = (
            g.requantise_shares[1] * forward_cast_seconds(g, hbm_bytes_per_s, p) * m * k * experts
        )
        return launches * p.kernel_overhead_s + cast
    extra = 0.0
    if which == 1 and linear == 0:
        more = g.cast_kernels if g.fc1_grad_kernels is None else g.fc1_grad_kernels
        launches += experts * (more - g.cast_kernels)
        if g.fc1_bias_reads:  # the pass's bytes; its launches are among fc1_grad_kernels
            extra = memory_seconds(2 * m * n * experts, hbm_bytes_per_s, p) - p.kernel_overhead_s
    return launches * p.kernel_overhead_s + extra


def dense_requantise_seconds(
    g: GroupedFp8 | None,
    name: str,
    input_elements: float,
    hbm_bytes_per_s: float,
    p: RooflineParams,
) -> float:
    """Seconds the weight-gradient pass of dense linear layer ``name`` adds to quantise its
    saved BF16 input of ``input_elements`` elements again where :attr:`GroupedFp8.
    dense_requantised` names it: the forward cast's seconds per element on a part of
    ``hbm_bytes_per_s`` (:func:`forward_cast_seconds`) × the dense share of
    :attr:`GroupedFp8.requantise_shares` (Transformer Engine v2.9 ``_Linear.backward``:
    ``input_quantizer.set_usage(rowwise=False, columnwise=True)`` on the saved input;
    :mod:`model.saved_originals`); else 0.

    >>> p = RooflineParams(gemm_efficiency=0.74)
    >>> g = GroupedFp8((1.9, 1.9, 1.9), (2e-12, 2e-12), 4, dense_requantised=frozenset(
    ...     {"output projection"}), requantise_shares=(2 / 3, 5 / 6))
    >>> round(dense_requantise_seconds(g, "output projection", 8192 * 512, 3e12, p) * 1e6, 3)
    5.592
    >>> dense_requantise_seconds(g, "QKV projection", 8192 * 512, 3e12, p)
    0.0

    Block scaling on Hopper (no measured rate): 1/2 of a 4 B cast at 0.9 of 3.35 TB/s.

    >>> b = replace(g, kernel_speedup=None, cast_s_per_element=None, cast_bytes=4,
    ...             requantise_shares=(0.5, 0.5))
    >>> round(dense_requantise_seconds(b, "output projection", 8192 * 512, 3.35e12, p) * 1e6, 3)
    2.782
    """
    if g is None or name not in g.dense_requantised:
        return 0.0
    return g.requantise_shares[0] * forward_cast_seconds(g, hbm_bytes_per_s, p) * input_elements
