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
  HBM bandwidth to the part's (a cast is a streaming pass).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from trainplan.model.errors import InputError
from trainplan.model.gemm_shapes import cast_elements, layer_ms, layer_row
from trainplan.model.hardware import DeviceSpec
from trainplan.model.kernel_tables import LayerGemms
from trainplan.model.moe_kernels import expert_cast_kernels
from trainplan.model.moe_run import grouped_rows
from trainplan.model.op_rates import (
    RECIPE_PART,
    check_fp8_recipe,
    gemm_wave_efficiency,
    te_caches_fp8_weights,
)
from trainplan.model.part_family import FAMILY
from trainplan.model.precision import Fp8Recipe, Precision
from trainplan.scenarios.kernel_data import low_precision_data

__all__ = [
    "RECIPE_PART_HBM_TBPS",
    "GroupedFp8",
    "grouped_shape",
    "kernel_speedup",
    "cast_seconds_per_element",
    "grouped_fp8_rates",
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

    kernel_speedup: tuple[float, float, float]
    """(forward, input-gradient, weight-gradient) BF16 milliseconds over the FP8 GEMM kernels'
    alone (:func:`kernel_speedup`)."""
    cast_s_per_element: tuple[float, float]
    """Seconds per element of the forward's input cast and the input gradient's output-gradient
    cast on this part (:func:`cast_seconds_per_element`, scaled by HBM bandwidth)."""
    cast_kernels: int = 0
    """Kernels each local expert's cast launches beyond the profile's one cast of the whole
    operand (:func:`model.moe_kernels.expert_cast_kernels` of the recipe on the part: 4 under
    current scaling, 1 under MXFP8 and block scaling, 0 under delayed scaling where the part
    keeps an FP8 transpose, 1 on Blackwell)."""


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
    """:class:`GroupedFp8` of the part under the run's FP8 recipe where Transformer Engine caches
    the FP8 weights (:func:`model.op_rates.te_caches_fp8_weights`: Megatron-Core) and the part's
    family has a profile with kernel-only rows; None otherwise (bf16, another framework, a part
    without a profile, block scaling on Hopper): the grouped GEMMs then take the linear layers'
    speed-up (:attr:`model.op_time.Clock.linear_speedup`).

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
    """
    r = check_fp8_recipe(precision, recipe, device)
    part = RECIPE_PART.get(FAMILY.get(device.part, ""))
    if r is None or part is None or not te_caches_fp8_weights(framework):
        return None
    if not device.hbm_bytes_per_s:
        return None
    rows, name = low_precision_data().layer_gemms, r.table_name
    scale = RECIPE_PART_HBM_TBPS[part][0] * 1e12 / device.hbm_bytes_per_s
    try:
        kernel = tuple(kernel_speedup(rows, part, name, p) for p in ("fprop", "dgrad", "wgrad"))
        casts = tuple(
            scale * cast_seconds_per_element(rows, part, name, p) for p in ("fprop", "dgrad")
        )
    except InputError:
        return None
    return GroupedFp8(
        (kernel[0], kernel[1], kernel[2]), (casts[0], casts[1]), expert_cast_kernels(r, device)
    )
