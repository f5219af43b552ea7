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
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

from trainplan.model.errors import ScenarioError
from trainplan.model.table_checks import (
    ascending,
    build_row,
    check_value,
    checked_mapping,
    field_kinds,
    one_of,
    row_where,
    same_length,
)

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
    window: int | None = None
    """W, keys of a top-left sliding-window band each query attends to, its own included
    (cudnn-frontend's ``sliding_window_size``, cuDNN's ``diagonal_band_left_bound``), on top of
    the causal mask; None: no band. A windowed curve is read only for a band of the same W
    (:func:`model.kernels.attention_rate`)."""
    extends: bool = False
    """A longer sweep of the same kernel, part, direction, mask and head dims that only
    continues the main curve beyond its longest length: its rate relative to its own rate at
    the main curve's last length (:func:`model.kernels.attention_rate`)."""

    def check(self, where: str) -> None:
        """The curve's own rules (enumerations, lengths, order, one batch convention)."""
        one_of(self.kernel, KERNELS, where, "kernel")
        one_of(self.dtype, DTYPES, where, "dtype")
        one_of(self.direction, DIRECTIONS, where, "direction")
        one_of(self.flop_count, FLOP_COUNTS, where, "flop_count")
        one_of(self.read, ("csv", "bar labels", "transcription"), where, "read")
        same_length(self, ("seq_len", "tflops_per_s"), where)
        ascending(self.seq_len, where, "seq_len")
        if (self.batch is None) == (self.batch_times_seq_len is None):
            raise ScenarioError(f"{where}: give exactly one of 'batch' and 'batch_times_seq_len'")
        if self.window is not None and not (self.causal and self.flop_count == "nonmasked"):
            raise ScenarioError(f"{where}: a 'window' band is causal and counted 'nonmasked'")
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
        one_of(self.layout, ("dense", "grouped-contiguous", "grouped-masked"), where, "layout")
        one_of(self.dtype, DTYPES, where, "dtype")
        cols = ("groups", "m", "n", "k", "tflops_per_s", "memory_gbps")
        same_length(self, cols, where)


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
        same_length(self, ("dtype", "fraction"), where)
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
        one_of(self.mode, ("autocast", "pre-quantized"), where, "mode")
        same_length(self, ("recipes", "fprop_ms", "dgrad_ms", "wgrad_ms"), where)
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
        same_length(self, ("op", "m", "k", "n", "ms"), where)
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
    ll_max_bw_gbps: Mapping[str, tuple[float, ...]]
    """``llMaxBws`` rows, GB/s of bus bandwidth for one node, two, more (N1, N2, N4)."""
    ring_ll128_channel_gbps: Mapping[str, tuple[float, ...]]
    """``perChMaxRingLL128Bws`` by generation, GB/s a channel (N1, N2, N4)."""
    tree_channel_gbps: Mapping[str, tuple[float, ...]]
    """``perChMaxTreeBws`` by generation, GB/s a channel (N1, N2, N4): a tree all-reduce's cap."""
    tree_ll128_channel_gbps: Mapping[str, tuple[float, ...]]
    """``perChMaxTreeLL128Bws`` by generation, GB/s a channel (N1, N2, N4)."""
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
        one_of(self.collective, ("all-reduce", "all-gather", "reduce-scatter"), where, "collective")
        same_length(self, ("bytes", "busbw_gbps"), where)
        ascending(self.bytes, where, "bytes")


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
    nvlink_gbps: float | None = None
    """The measured part's nominal NVLink bandwidth per GPU (GB/s, one direction; as
    ``topology/accelerators.toml``): what a part without rows scales by (:mod:`model.ep_kernels`)."""
    nvlink_domain: int | None = None
    """GPUs in the measured part's NVLink domain (as ``topology/accelerators.toml``)."""
    local_experts: int | None = None
    """Experts a rank in the benchmark, where its rows carry a probability per expert of the
    domain (HybridEP's: :func:`model.moe_dispatch.side_bytes`); None where they carry none."""

    def check(self, where: str) -> None:
        """A known link; one value per EP size; sizes ascending."""
        one_of(self.link, ("nvlink", "rdma"), where, "link")
        cols = ("ep", "dispatch_gbps", "combine_gbps", "dispatch_us", "combine_us", "sms")
        same_length(self, cols, where)
        ascending(self.ep, where, "ep")


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
        same_length(self, ("kernels", "tbps"), where)


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
        one_of(self.norm, ("rms_norm", "layer_norm"), where, "norm")
        same_length(self, ("rows", "hidden", "fwd_gbps", "bwd_gbps"), where)


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
        where = row_where(file, table, i, row if isinstance(row, dict) else {})
        item = build_row(cls, row, where, field_kinds(cls))
        if hasattr(item, "check"):
            item.check(where)
        out.append(item)
    return tuple(out)


def parse_block_format(raw: Any) -> BlockFormat:
    """``lowp.toml``'s ``[format]`` table, checked."""
    return build_row(
        BlockFormat, raw, "scenarios/kernels/lowp.toml: format", field_kinds(BlockFormat)
    )


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
    protocols = check_value(raw["protocols"], "strs", where, "protocols")
    hw = raw["hw_us"]
    if not isinstance(hw, dict):
        raise ScenarioError(f"{where}: key 'hw_us' must be a table of links")
    out = NcclLatency(
        protocols=protocols,
        base_us=checked_mapping(raw["base_us"], f"{where}.base_us", "nums"),
        hw_us=MappingProxyType(
            {k: checked_mapping(v, f"{where}.hw_us.{k}", "nums") for k, v in hw.items()}
        ),
        nvls_efficiency=checked_mapping(raw["nvls_efficiency"], f"{where}.nvls_efficiency", "num"),
        ring_plateau=checked_mapping(raw["ring_plateau"], f"{where}.ring_plateau", "num"),
        pat_rank_us=check_value(raw["pat_rank_us"], "num", where, "pat_rank_us"),
        pat_inter_divisor=check_value(raw["pat_inter_divisor"], "num", where, "pat_inter_divisor"),
        net_overhead_us=checked_mapping(raw["net_overhead_us"], f"{where}.net_overhead_us", "num"),
        tree_correction=checked_mapping(raw["tree_correction"], f"{where}.tree_correction", "nums"),
        ll_max_bw_gbps=checked_mapping(raw["ll_max_bw_gbps"], f"{where}.ll_max_bw_gbps", "nums"),
        ring_ll128_channel_gbps=checked_mapping(
            raw["ring_ll128_channel_gbps"], f"{where}.ring_ll128_channel_gbps", "nums"
        ),
        tree_channel_gbps=checked_mapping(
            raw["tree_channel_gbps"], f"{where}.tree_channel_gbps", "nums"
        ),
        tree_ll128_channel_gbps=checked_mapping(
            raw["tree_ll128_channel_gbps"], f"{where}.tree_ll128_channel_gbps", "nums"
        ),
        source=check_value(raw["source"], "str", where, "source"),
    )
    lists = [*out.base_us.values(), *(v for link in out.hw_us.values() for v in link.values())]
    if any(len(v) != len(protocols) for v in lists):
        raise ScenarioError(f"{where}: every latency list needs one value per protocol {protocols}")
    if any(len(v) != 24 for v in out.tree_correction.values()):
        raise ScenarioError(f"{where}: tree_correction lists need 24 values (64 B to 256 MiB)")
    caps = (
        *out.ll_max_bw_gbps.values(), *out.ring_ll128_channel_gbps.values(),
        *out.tree_channel_gbps.values(), *out.tree_ll128_channel_gbps.values(),
    )  # fmt: skip
    if any(len(v) != 3 for v in caps):
        raise ScenarioError(f"{where}: the per-node-count caps need 3 values each (N1 N2 N4)")
    return out
