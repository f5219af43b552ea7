"""e_GEMM from a per-operation measurement: the GEMM main-loop efficiency that makes the step
time's own GEMM rule reproduce a published BF16 GEMM on the part.

The step time times a dense GEMM ``[m, k] × [k, n]`` at

``rate = peak × e(k) × w(m, n)``,  ``e(k) = e_GEMM · k / (k + k₀)``,  ``k₀ = e_GEMM · c``,
``c = (β/2) · peak / (e_HBM · HBM)``

(:func:`model.roofline.gemm_efficiency`, the depth rule; ``w`` the useful share of the tiles,
:func:`model.op_rates.dense_wave_efficiency`; β = 2 bytes of a BF16 output; e_HBM the
:class:`~model.roofline.RooflineParams` default the rule reads). Given one measured rate ``R`` at
``(m, n, k)``, ``r = R / (peak · w)`` and ``r = e·k/(k + c·e)``, so

``e_GEMM = r·k / (k − r·c)``

(:func:`model.gemm_shapes.large_gemm_fraction`, which solves exactly this). The anchor of a
generation is the best BF16 ``torch.mm`` rate of the Maximum Achievable Matmul FLOPS table
(``scenarios/kernels/gemm.toml``, library ``torch-mm``; its row of the part in
:data:`ANCHOR_PART`). The figure leaves out t_kernel: the benchmark times each call between two
CUDA events on a stream already busy with the previous call's cache flush, so no launch gap is
in the measured time.

These figures are **not** in force: :data:`model.roofline.GEMM_EFFICIENCY_BY_GENERATION` (the
former fit) still times the step. Under the anchors every validation row's GEMMs run 30–48 %
faster and the step-time error grows (dense 9.9 → 26.1 %, MoE 24.9 → 36.0 %;
``docs/time-model-sources.md`` §2 gives the measurement and the mechanisms the fit stands in for).
"""

from __future__ import annotations

from dataclasses import fields
from types import MappingProxyType

from trainplan.model.errors import InputError
from trainplan.model.gemm_shapes import GemmPart, large_gemm_fraction, sm_count
from trainplan.model.kernel_tables import GemmTable
from trainplan.model.roofline import RooflineParams
from trainplan.scenarios.kernel_data import gemm_data

__all__ = ["ANCHOR_LIBRARY", "ANCHOR_PART", "anchor_gemm", "anchored_gemm_efficiency"]

ANCHOR_LIBRARY = "torch-mm"
"""The ``gemm.toml`` library whose BF16 rows anchor e_GEMM (Maximum Achievable Matmul FLOPS:
``torch.mm``, the best shape of a brute-force search, mean of 100 calls)."""

ANCHOR_PART: MappingProxyType[str, str] = MappingProxyType(
    {"A100": "A100-80GB", "H100": "H100-SXM", "B200": "B200"}
)
"""The part whose row anchors each generation (the keys of
:data:`model.roofline.GEMM_EFFICIENCY_BY_GENERATION`, plus B200 for Blackwell, which has no
fitted figure). B300's row (k = 1024) is not an anchor: the depth rule cannot reach its rate at
that depth (:func:`anchored_gemm_efficiency` refuses it)."""

_BETA = 2
"""Bytes per element of the BF16 output (the depth rule's β)."""


def _default_hbm_efficiency() -> float:
    """The e_HBM :func:`model.roofline.gemm_efficiency` reads by default (one figure, read from
    :class:`~model.roofline.RooflineParams`)."""
    default = next(f.default for f in fields(RooflineParams) if f.name == "hbm_efficiency")
    assert isinstance(default, float)
    return default


def anchor_gemm(part: str) -> GemmTable:
    """The one-row BF16 dense ``torch-mm`` table of ``part`` (``gemm.toml``).

    Raises
    ------
    InputError
        For a part without one.

    Examples
    --------
    >>> t = anchor_gemm("H100-SXM")
    >>> t.m, t.n, t.k, t.tflops_per_s
    ((2048,), (2048,), (13312,), (794.5,))
    """
    for t in gemm_data().gemms:
        if (t.library, t.part, t.dtype, t.layout) == (ANCHOR_LIBRARY, part, "bf16", "dense"):
            return t
    have = sorted({t.part for t in gemm_data().gemms if t.library == ANCHOR_LIBRARY})
    raise InputError(
        f"gpu: {part!r} has no BF16 {ANCHOR_LIBRARY} row in gemm.toml: {', '.join(have)}"
    )


def anchored_gemm_efficiency(part: str, peak_flops_per_s: float, hbm_bytes_per_s: float) -> float:
    """e_GEMM of ``part`` from its published BF16 GEMM (:func:`anchor_gemm`), solved under the
    step time's own rule (module docstring), with the part's dense BF16 peak and HBM bandwidth
    from the accelerator table (FLOP/s, bytes/s) and its SM count from ``gemm.toml``.

    Raises
    ------
    InputError
        A part without a row or an SM count, or a row the rule cannot reproduce with a fraction
        in (0, 1] (B300's: 1,769 TFLOP/s at k = 1024).

    Examples
    --------
    H100 SXM, 794.5 TFLOP/s at 2048 × 2048 × 13312: DeepGEMM's 256 × 128 tiles make 128 tiles in
    one wave of 132 (w = 0.9697), r = 794.5 / (989.4 · w) = 0.8281, c = 989.4 / (0.9 · 3,350) =
    328.2 FLOP/B, e = 0.8281 · 13312 / (13312 − 0.8281 · 328.2):

    >>> round(anchored_gemm_efficiency("H100-SXM", 989.4e12, 3.35e12), 4)
    0.8454
    """
    row = anchor_gemm(part)
    (m,), (n,), (k,), (tflops,) = row.m, row.n, row.k, row.tflops_per_s
    gemm_part = GemmPart(
        sms=sm_count(gemm_data().sm_counts, part),
        peak_tflops=peak_flops_per_s / 1e12,
        hbm_tbps=hbm_bytes_per_s / 1e12,
        hbm_efficiency=_default_hbm_efficiency(),
    )
    return large_gemm_fraction(tflops, m, n, k, 1, gemm_part, _BETA)
