"""Per-operation measurements as published, in typed form: attention kernels, GEMMs by shape,
low-precision recipes, collectives and memory-bound kernels.

The data live in ``scenarios/kernels/*.toml`` (each table with its ``source``: paper and figure, or
repository file and commit); :mod:`trainplan.scenarios.kernel_data` reads them through
:mod:`importlib.resources` and hands the parsed TOML to the ``parse_*`` functions here, which check
every key strictly (an unknown or missing key, a wrong type, arrays of unequal length or a sequence
out of order is a :class:`~trainplan.model.errors.ScenarioError` naming the file, the table and the
key) and return frozen dataclasses. Pure functions, no I/O. Not yet used by the step time: the
functions of :mod:`model.kernels`, :mod:`model.gemm_shapes` and :mod:`model.collective_rates` read
these tables, and the step-time terms will call them once they are wired (docs/time-model-sources.md).

Units are in the field names: ``*_tflops_per_s`` in 10^12 FLOP/s, ``*_gbps`` in GB/s = 10^9 B/s,
``*_tbps`` in TB/s = 10^12 B/s, ``*_us`` in microseconds, ``*_ms`` in milliseconds, shapes in
elements, ``bytes`` in bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from types import MappingProxyType
from typing import Any

from trainplan.model.errors import ScenarioError

__all__ = [
    "AttentionCurve",
    "SmCount",
    "GemmTable",
    "PeakFraction",
    "BlockFormat",
    "LayerGemms",
    "ShapeGemms",
    "NcclLatency",
    "BusBwCurve",
    "BusBwPeak",
    "ExpertAllToAll",
    "StreamRow",
    "NormCurve",
    "KERNELS",
    "DTYPES",
    "DIRECTIONS",
    "FLOP_COUNTS",
    "parse_tables",
    "parse_nccl_latency",
    "parse_block_format",
]

KERNELS = ("flash-attention-2", "flash-attention-3", "cudnn", "pytorch-sdpa-cudnn")
DTYPES = ("fp16", "bf16", "fp8", "mxfp8")
DIRECTIONS = ("fwd", "bwd", "fwd+bwd")
FLOP_COUNTS = ("fa-half", "nonmasked")
"""How a benchmark counted attention FLOPs (:func:`model.kernels.attention_kernel_flops`)."""


def _where(file: str, table: str, index: int, row: Mapping[str, Any]) -> str:
    label = row.get("part") or row.get("library") or row.get("kernel") or ""
    return f"scenarios/kernels/{file}: {table} {index + 1}" + (f" ({label})" if label else "")


def _check(value: Any, kind: str, where: str, key: str) -> Any:
    """``value`` of the type ``kind`` names; lists become tuples."""
    scalar = {
        "str": lambda v: isinstance(v, str) and bool(v.strip()),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
        "num": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and v >= 0,
        "bool": lambda v: isinstance(v, bool),
    }
    if kind.endswith("s") and kind[:-1] in scalar:
        ok = isinstance(value, list) and value and all(scalar[kind[:-1]](v) for v in value)
        if not ok:
            raise ScenarioError(f"{where}: key '{key}' must be a non-empty list of {kind[:-1]}")
        return tuple(value)
    if kind == "numss":
        ok = isinstance(value, list) and value and all(isinstance(r, list) for r in value)
        if not ok:
            raise ScenarioError(f"{where}: key '{key}' must be a list of lists of numbers")
        return tuple(_check(r, "nums", where, key) for r in value)
    if not scalar[kind](value):
        raise ScenarioError(f"{where}: key '{key}' must be a {kind} (positive), got {value!r}")
    return value


def _build(cls: type, row: Any, where: str, kinds: Mapping[str, str]) -> Any:
    """One dataclass from one TOML table: every field of ``cls`` by its kind in ``kinds``;
    fields with a default are optional, unknown keys refused."""
    if not isinstance(row, dict):
        raise ScenarioError(f"{where}: expected a table, got {row!r}")
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(row) - set(names))
    if unknown:
        raise ScenarioError(f"{where}: unknown key '{unknown[0]}' (allowed: {', '.join(names)})")
    values = {}
    for f in fields(cls):
        if f.name in row:
            values[f.name] = _check(row[f.name], kinds[f.name], where, f.name)
        elif f.default is MISSING:
            raise ScenarioError(f"{where}: missing required key '{f.name}'")
    return cls(**values)


def _same_length(obj: Any, names: tuple[str, ...], where: str) -> None:
    lengths = {n: len(getattr(obj, n)) for n in names if getattr(obj, n) is not None}
    if len(set(lengths.values())) > 1:
        raise ScenarioError(
            f"{where}: {', '.join(lengths)} must have one value each, got {lengths}"
        )


def _one_of(value: str, allowed: tuple[str, ...], where: str, key: str) -> None:
    if value not in allowed:
        raise ScenarioError(f"{where}: key '{key}' is {value!r}, not one of {', '.join(allowed)}")


def _ascending(values: tuple[float, ...], where: str, key: str) -> None:
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ScenarioError(f"{where}: key '{key}' must be strictly ascending, got {values}")


@dataclass(frozen=True, slots=True)
class AttentionCurve:
    """Achieved TFLOP/s of one attention kernel by sequence length (``attention.toml``)."""

    kernel: str
    version: str
    part: str
    dtype: str
    direction: str
    causal: bool
    head_dim_qk: int
    head_dim_v: int
    q_heads: int
    kv_heads: int
    flop_count: str
    seq_len: tuple[int, ...]
    """Sequence lengths (tokens), ascending."""
    tflops_per_s: tuple[float, ...]
    """Achieved 10^12 FLOP/s at each length, in :attr:`flop_count`'s convention."""
    read: str
    source: str
    batch: int | None = None
    """Sequences per call, when fixed."""
    batch_times_seq_len: int | None = None
    """batch × seq_len held constant (tokens), when the batch shrinks as the sequence grows."""
    notes: str = ""
    extends: bool = False
    """A longer sweep of the same kernel, part, direction, mask and head dims that only
    continues the main curve beyond its longest length: its rate relative to its own rate at
    the main curve's last length (:func:`model.kernels.attention_rate`)."""

    def check(self, where: str) -> None:
        """The curve's own rules (enumerations, lengths, order, one batch convention)."""
        _one_of(self.kernel, KERNELS, where, "kernel")
        _one_of(self.dtype, DTYPES, where, "dtype")
        _one_of(self.direction, DIRECTIONS, where, "direction")
        _one_of(self.flop_count, FLOP_COUNTS, where, "flop_count")
        _one_of(self.read, ("csv", "bar labels", "transcription"), where, "read")
        _same_length(self, ("seq_len", "tflops_per_s"), where)
        _ascending(self.seq_len, where, "seq_len")
        if (self.batch is None) == (self.batch_times_seq_len is None):
            raise ScenarioError(f"{where}: give exactly one of 'batch' and 'batch_times_seq_len'")
        if self.flop_count == "fa-half" and self.head_dim_qk != self.head_dim_v:
            raise ScenarioError(f"{where}: flop_count 'fa-half' counts one head dim: d_qk = d_v")


@dataclass(frozen=True, slots=True)
class SmCount:
    """Streaming multiprocessors of a part (``gemm.toml``)."""

    part: str
    sms: int
    status: str
    source: str


@dataclass(frozen=True, slots=True)
class GemmTable:
    """One published table of GEMM TFLOP/s by shape (``gemm.toml``); row ``i`` is
    ``groups[i]`` GEMMs ``[m, k] × [k, n]``."""

    library: str
    part: str
    dtype: str
    scaling: str
    layout: str
    groups: tuple[int, ...]
    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    tflops_per_s: tuple[float, ...]
    read: str
    source: str
    memory_gbps: tuple[float, ...] | None = None
    notes: str = ""

    def check(self, where: str) -> None:
        """Enumerations and one value per row in every column."""
        _one_of(self.layout, ("dense", "grouped-contiguous", "grouped-masked"), where, "layout")
        _one_of(self.dtype, DTYPES, where, "dtype")
        cols = ("groups", "m", "n", "k", "tflops_per_s", "memory_gbps")
        _same_length(self, cols, where)


@dataclass(frozen=True, slots=True)
class PeakFraction:
    """A large GEMM's published fraction of the theoretical peak, by dtype (``gemm.toml``)."""

    library: str
    part: str
    m: int
    n: int
    k: int
    dtype: tuple[str, ...]
    fraction: tuple[float, ...]
    read: str
    source: str
    notes: str = ""

    def check(self, where: str) -> None:
        """One fraction per dtype, each in (0, 1]."""
        _same_length(self, ("dtype", "fraction"), where)
        if not all(0 < f <= 1 for f in self.fraction):
            raise ScenarioError(f"{where}: key 'fraction' must be fractions in (0, 1]")


@dataclass(frozen=True, slots=True)
class BlockFormat:
    """A block-scaled number format (``lowp.toml`` ``[format]``)."""

    name: str
    block_elements: int
    scale_bits: int
    scale_format: str
    copies: str
    source: str


@dataclass(frozen=True, slots=True)
class LayerGemms:
    """One layer's GEMM milliseconds by recipe, forward, input- and weight-gradient (``lowp.toml``)."""

    part: str
    mode: str
    tokens: int
    hidden: int
    ffn_hidden: int
    recipes: tuple[str, ...]
    fprop_ms: tuple[float, ...]
    dgrad_ms: tuple[float, ...]
    wgrad_ms: tuple[float, ...]
    source: str
    notes: str = ""

    def check(self, where: str) -> None:
        """One time per recipe; bf16 present (the baseline of every speed-up)."""
        _one_of(self.mode, ("autocast", "pre-quantized"), where, "mode")
        _same_length(self, ("recipes", "fprop_ms", "dgrad_ms", "wgrad_ms"), where)
        if "bf16" not in self.recipes:
            raise ScenarioError(f"{where}: key 'recipes' must include bf16 (the baseline)")


@dataclass(frozen=True, slots=True)
class ShapeGemms:
    """Per-shape forward GEMM milliseconds by recipe (``lowp.toml``); ``ms[i][j]`` is op ``i``
    under recipe ``j``."""

    part: str
    mode: str
    recipes: tuple[str, ...]
    op: tuple[str, ...]
    m: tuple[int, ...]
    k: tuple[int, ...]
    n: tuple[int, ...]
    ms: tuple[tuple[float, ...], ...]
    source: str

    def check(self, where: str) -> None:
        """One row per op, one column per recipe."""
        _same_length(self, ("op", "m", "k", "n", "ms"), where)
        if any(len(row) != len(self.recipes) for row in self.ms):
            raise ScenarioError(f"{where}: each row of 'ms' needs one time per recipe")


@dataclass(frozen=True, slots=True)
class NcclLatency:
    """NCCL's latency constants (``collectives.toml`` ``[nccl_latency]``), microseconds; each
    per-protocol tuple in the order of :attr:`protocols`."""

    protocols: tuple[str, ...]
    base_us: Mapping[str, tuple[float, ...]]
    hw_us: Mapping[str, Mapping[str, tuple[float, ...]]]
    nvls_efficiency: Mapping[str, float]
    ring_plateau: Mapping[str, float]
    pat_rank_us: float
    pat_inter_divisor: float
    net_overhead_us: Mapping[str, float]
    tree_correction: Mapping[str, tuple[float, ...]]
    source: str


@dataclass(frozen=True, slots=True)
class BusBwCurve:
    """nccl-tests bus bandwidth by message size on one system (``collectives.toml``)."""

    part: str
    collective: str
    algorithm: str
    ranks: int
    nodes: int
    in_place: bool
    bytes: tuple[int, ...]
    """The nccl-tests size S of each point (bytes), ascending."""
    busbw_gbps: tuple[float, ...]
    nccl: str
    source: str
    notes: str = ""

    def check(self, where: str) -> None:
        """A known collective; one bandwidth per size; sizes ascending."""
        _one_of(
            self.collective, ("all-reduce", "all-gather", "reduce-scatter"), where, "collective"
        )
        _same_length(self, ("bytes", "busbw_gbps"), where)
        _ascending(self.bytes, where, "bytes")


@dataclass(frozen=True, slots=True)
class BusBwPeak:
    """A vendor engineer's stated peak bus bandwidth (``collectives.toml``)."""

    part: str
    collective: str
    algorithm: str
    ranks: int
    busbw_gbps: float
    source: str
    algbw_gbps: float | None = None
    notes: str = ""


@dataclass(frozen=True, slots=True)
class ExpertAllToAll:
    """DeepEP's dispatch/combine bandwidth by expert-parallel size (``collectives.toml``)."""

    library: str
    part: str
    link: str
    ep: tuple[int, ...]
    tokens: int
    hidden: int
    top_k: int
    dispatch_dtype: str
    combine_dtype: str
    dispatch_gbps: tuple[float, ...]
    combine_gbps: tuple[float, ...]
    source: str
    dispatch_us: tuple[float, ...] | None = None
    combine_us: tuple[float, ...] | None = None
    sms: tuple[int, ...] | None = None
    notes: str = ""

    def check(self, where: str) -> None:
        """A known link; one value per EP size; sizes ascending."""
        _one_of(self.link, ("nvlink", "rdma"), where, "link")
        cols = ("ep", "dispatch_gbps", "combine_gbps", "dispatch_us", "combine_us", "sms")
        _same_length(self, cols, where)
        _ascending(self.ep, where, "ep")


@dataclass(frozen=True, slots=True)
class StreamRow:
    """A STREAM-like benchmark's achieved HBM bandwidth per kernel (``memory.toml``)."""

    part: str
    benchmark: str
    kernels: tuple[str, ...]
    tbps: tuple[float, ...]
    source: str

    def check(self, where: str) -> None:
        """One bandwidth per kernel."""
        _same_length(self, ("kernels", "tbps"), where)


@dataclass(frozen=True, slots=True)
class NormCurve:
    """Achieved bandwidth of a normalisation kernel by shape (``memory.toml``)."""

    part: str
    norm: str
    backend: str
    rows: tuple[int, ...]
    hidden: tuple[int, ...]
    fwd_gbps: tuple[float, ...]
    bwd_gbps: tuple[float, ...]
    source: str

    def check(self, where: str) -> None:
        """A known norm; one value per shape."""
        _one_of(self.norm, ("rms_norm", "layer_norm"), where, "norm")
        _same_length(self, ("rows", "hidden", "fwd_gbps", "bwd_gbps"), where)


_KIND_OF = {
    "str": "str",
    "int": "int",
    "float": "num",
    "bool": "bool",
    "tuple[int, ...]": "ints",
    "tuple[float, ...]": "nums",
    "tuple[str, ...]": "strs",
    "tuple[tuple[float, ...], ...]": "numss",
}
"""The check each field's annotation asks for (:func:`_check`); ``X | None`` as ``X``."""


def _kinds(cls: type) -> dict[str, str]:
    return {f.name: _KIND_OF[str(f.type).removesuffix(" | None")] for f in fields(cls)}


def parse_tables(cls: type, file: str, table: str, raw: Any) -> tuple[Any, ...]:
    """Every ``[[table]]`` of ``file`` as ``cls`` values, each checked (keys, types and the
    class's own ``check``).

    Raises
    ------
    ScenarioError
        Naming the file, the table's position and label, and the offending key.

    Examples
    --------
    >>> row = {"part": "A100-80GB", "sms": 108, "status": "vendor", "source": "whitepaper"}
    >>> parse_tables(SmCount, "gemm.toml", "sm_count", [row])[0].sms
    108
    >>> try:
    ...     parse_tables(SmCount, "gemm.toml", "sm_count", [{**row, "SMs": 1}])
    ... except ScenarioError as err:
    ...     print(str(err).split(" (allowed")[0])
    scenarios/kernels/gemm.toml: sm_count 1 (A100-80GB): unknown key 'SMs'
    """
    if not isinstance(raw, list) or not raw:
        raise ScenarioError(
            f"scenarios/kernels/{file}: '{table}' must be a non-empty [[{table}]] list"
        )
    out = []
    for i, row in enumerate(raw):
        where = _where(file, table, i, row if isinstance(row, dict) else {})
        item = _build(cls, row, where, _kinds(cls))
        if hasattr(item, "check"):
            item.check(where)
        out.append(item)
    return tuple(out)


def parse_block_format(raw: Any) -> BlockFormat:
    """``lowp.toml``'s ``[format]`` table, checked."""
    return _build(BlockFormat, raw, "scenarios/kernels/lowp.toml: format", _kinds(BlockFormat))


def _mapping(raw: Any, where: str, kind: str) -> Mapping[str, Any]:
    if not isinstance(raw, dict) or not raw:
        raise ScenarioError(f"{where}: expected a non-empty table, got {raw!r}")
    return MappingProxyType({k: _check(v, kind, where, k) for k, v in raw.items()})


def parse_nccl_latency(raw: Any) -> NcclLatency:
    """``collectives.toml``'s ``[nccl_latency]`` table, checked: every per-protocol list has one
    value per protocol, every tree-correction list 24 (message sizes 64 B · 2^i)."""
    where = "scenarios/kernels/collectives.toml: nccl_latency"
    names = [f.name for f in fields(NcclLatency)]
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a table")
    unknown = sorted(set(raw) - set(names))
    missing = sorted(set(names) - set(raw))
    if unknown or missing:
        raise ScenarioError(f"{where}: unknown keys {unknown}, missing keys {missing}")
    protocols = _check(raw["protocols"], "strs", where, "protocols")
    hw = raw["hw_us"]
    if not isinstance(hw, dict):
        raise ScenarioError(f"{where}: key 'hw_us' must be a table of links")
    out = NcclLatency(
        protocols=protocols,
        base_us=_mapping(raw["base_us"], f"{where}.base_us", "nums"),
        hw_us=MappingProxyType(
            {k: _mapping(v, f"{where}.hw_us.{k}", "nums") for k, v in hw.items()}
        ),
        nvls_efficiency=_mapping(raw["nvls_efficiency"], f"{where}.nvls_efficiency", "num"),
        ring_plateau=_mapping(raw["ring_plateau"], f"{where}.ring_plateau", "num"),
        pat_rank_us=_check(raw["pat_rank_us"], "num", where, "pat_rank_us"),
        pat_inter_divisor=_check(raw["pat_inter_divisor"], "num", where, "pat_inter_divisor"),
        net_overhead_us=_mapping(raw["net_overhead_us"], f"{where}.net_overhead_us", "num"),
        tree_correction=_mapping(raw["tree_correction"], f"{where}.tree_correction", "nums"),
        source=_check(raw["source"], "str", where, "source"),
    )
    lists = [*out.base_us.values(), *(v for link in out.hw_us.values() for v in link.values())]
    if any(len(v) != len(protocols) for v in lists):
        raise ScenarioError(f"{where}: every latency list needs one value per protocol {protocols}")
    if any(len(v) != 24 for v in out.tree_correction.values()):
        raise ScenarioError(f"{where}: tree_correction lists need 24 values (64 B to 256 MiB)")
    return out
