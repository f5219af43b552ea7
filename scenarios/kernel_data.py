"""The per-operation measurements of ``scenarios/kernels/*.toml``, read through
:mod:`importlib.resources` and checked into :mod:`trainplan.model.kernel_tables` values.

Data access only (each file read once per process); the functions that interpolate and combine
the tables are pure and live in :mod:`trainplan.model` (``kernels``, ``gemm_shapes``,
``collective_rates``). Not yet used by the step time (docs/time-model-sources.md says how it will be).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from trainplan import scenarios
from trainplan.model.errors import ScenarioError
from trainplan.model.kernel_tables import (
    AttentionCurve,
    BlockFormat,
    BusBwCurve,
    BusBwPeak,
    ExpertAllToAll,
    GemmTable,
    LayerGemms,
    NcclLatency,
    NormCurve,
    PeakFraction,
    ShapeGemms,
    SmCount,
    StreamRow,
    parse_block_format,
    parse_nccl_latency,
    parse_tables,
)

__all__ = [
    "FILES",
    "GemmData",
    "LowPrecisionData",
    "CollectiveData",
    "MemoryData",
    "attention_curves",
    "gemm_data",
    "low_precision_data",
    "collective_data",
    "memory_data",
]

FILES = ("attention", "gemm", "lowp", "collectives", "memory")
"""The files of ``scenarios/kernels/``."""


@dataclass(frozen=True, slots=True)
class GemmData:
    """``gemm.toml``: SM counts, GEMM tables by shape, large-GEMM peak fractions."""

    sm_counts: tuple[SmCount, ...]
    gemms: tuple[GemmTable, ...]
    peak_fractions: tuple[PeakFraction, ...]


@dataclass(frozen=True, slots=True)
class LowPrecisionData:
    """``lowp.toml``: the MXFP8 format and Transformer Engine's GEMM times by recipe."""

    block_format: BlockFormat
    layer_gemms: tuple[LayerGemms, ...]
    shape_gemms: tuple[ShapeGemms, ...]


@dataclass(frozen=True, slots=True)
class CollectiveData:
    """``collectives.toml``: NCCL's latency constants, bus bandwidth by size, DeepEP."""

    nccl_latency: NcclLatency
    busbw: tuple[BusBwCurve, ...]
    busbw_peaks: tuple[BusBwPeak, ...]
    expert_all_to_all: tuple[ExpertAllToAll, ...]


@dataclass(frozen=True, slots=True)
class MemoryData:
    """``memory.toml``: STREAM-like HBM bandwidth, normalisation kernels by shape."""

    stream: tuple[StreamRow, ...]
    norms: tuple[NormCurve, ...]


def _load(name: str, tables: tuple[str, ...]) -> dict:
    raw = scenarios.load("kernels", name)
    unknown = sorted(set(raw) - set(tables))
    if unknown:
        raise ScenarioError(
            f"scenarios/kernels/{name}.toml: unknown table '{unknown[0]}' "
            f"(allowed: {', '.join(tables)})"
        )
    return raw


@cache
def attention_curves() -> tuple[AttentionCurve, ...]:
    """Every curve of ``attention.toml``.

    Examples
    --------
    >>> c = [c for c in attention_curves() if c.part == "A100-80GB"][0]
    >>> c.kernel, c.direction, c.tflops_per_s[0]
    ('flash-attention-2', 'fwd+bwd', 132)
    """
    raw = _load("attention", ("curve",))
    return parse_tables(AttentionCurve, "attention.toml", "curve", raw.get("curve"))


@cache
def gemm_data() -> GemmData:
    """``gemm.toml``, checked."""
    raw = _load("gemm", ("sm_count", "gemm", "peak_fraction"))
    return GemmData(
        parse_tables(SmCount, "gemm.toml", "sm_count", raw.get("sm_count")),
        parse_tables(GemmTable, "gemm.toml", "gemm", raw.get("gemm")),
        parse_tables(PeakFraction, "gemm.toml", "peak_fraction", raw.get("peak_fraction")),
    )


@cache
def low_precision_data() -> LowPrecisionData:
    """``lowp.toml``, checked."""
    raw = _load("lowp", ("format", "layer_gemms", "shape_gemms"))
    return LowPrecisionData(
        parse_block_format(raw.get("format")),
        parse_tables(LayerGemms, "lowp.toml", "layer_gemms", raw.get("layer_gemms")),
        parse_tables(ShapeGemms, "lowp.toml", "shape_gemms", raw.get("shape_gemms")),
    )


@cache
def collective_data() -> CollectiveData:
    """``collectives.toml``, checked."""
    tables = ("nccl_latency", "busbw", "busbw_peak", "expert_all_to_all")
    raw = _load("collectives", tables)
    return CollectiveData(
        parse_nccl_latency(raw.get("nccl_latency")),
        parse_tables(BusBwCurve, "collectives.toml", "busbw", raw.get("busbw")),
        parse_tables(BusBwPeak, "collectives.toml", "busbw_peak", raw.get("busbw_peak")),
        parse_tables(
            ExpertAllToAll, "collectives.toml", "expert_all_to_all", raw.get("expert_all_to_all")
        ),
    )


@cache
def memory_data() -> MemoryData:
    """``memory.toml``, checked."""
    raw = _load("memory", ("stream", "norm"))
    return MemoryData(
        parse_tables(StreamRow, "memory.toml", "stream", raw.get("stream")),
        parse_tables(NormCurve, "memory.toml", "norm", raw.get("norm")),
    )
