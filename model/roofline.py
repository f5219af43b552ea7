"""The roofline clock: seconds of one operation on one GPU, and of one collective over a link.

An operation takes ``max(FLOPs / (peak × e(shape)), bytes / (HBM × e_HBM)) + t_kernel``
(Williams, Waterman & Patterson 2009, "Roofline", CACM 52(4)): compute-bound kernels (GEMMs,
the FlashAttention core) by the first term, memory-bound ones (norms, activations, dropout,
residual adds, softmax, the optimizer step) by the second. A collective takes
``latency + bytes sent per GPU / (link bandwidth × e_link)`` (Hockney's α-β model, with NCCL's
own latency figures; Thakur, Rabenseifner & Gropp 2005 for the ring and tree byte counts).

Every figure of :class:`RooflineParams` is a stated default with its source, or a fitted
efficiency (``trainplan calibrate``; the published-runs report marks its calibration rows).
Pure functions over floats; no state.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from trainplan.model.busbw_curve import published_busbw
from trainplan.model.errors import InputError
from trainplan.model.nccl_latency import collective_latency
from trainplan.model.nccl_tuner import TUNED, nccl_arch, tuned_seconds
from trainplan.model.nvlink_bound import ring_busbw
from trainplan.model.nvls import nvls_ring_on_link
from trainplan.model.part_family import catalogue_part
from trainplan.model.xp import maximum, where

__all__ = [
    "RooflineParams", "GEMM_EFFICIENCY_BY_GENERATION", "DEFAULT_GEMM_EFFICIENCY", "generation_of",
    "roofline_params_for", "CALIBRATABLE", "gemm_efficiency", "gemm_seconds", "attention_seconds",
    "memory_seconds", "transfer_seconds", "Collective", "LinkTime", "collective_seconds",
    "collective_time", "collective_latency", "ring_share", "published_busbw",
]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class RooflineParams:
    """What the roofline clock reads besides the accelerator's peak and HBM bandwidth.

    Efficiencies are fractions in (0, 1]; latencies in seconds. Defaults: :data:`DEFAULT_*`
    figures below, each with its source; ``gemm_efficiency`` per accelerator generation is fitted
    (:func:`roofline_params_for`).
    """

    gemm_efficiency: float
    """e_GEMM: fraction of the dense peak a GEMM's main loop sustains (its shape's rule:
    :func:`gemm_efficiency`). Fitted on published runs per generation
    (:data:`GEMM_EFFICIENCY_BY_GENERATION`) or on the user's own steps (``trainplan calibrate``)."""
    attention_efficiency: float | None = None
    """Fraction of the dense peak of the FlashAttention core (one fused kernel, forward and
    backward); None = the core runs as batched GEMMs at :attr:`gemm_efficiency`'s rule (the
    accelerator has no separate figure). Hopper: 0.35 (FlashAttention-2 on H100, Shah et al. 2024,
    FlashAttention-3, arXiv 2407.08608, abstract)."""
    hbm_efficiency: float = 0.9
    """e_HBM: fraction of the datasheet HBM bandwidth a streaming kernel reaches. 0.9: Calculon's
    A100 memory-efficiency table gives 0.90 for transfers of 100 MB and more
    (calculon-ai/calculon ``systems/a100_80g.json``, ``mem1.MB_efficiency``), the size of a
    layer's element-wise tensors here."""
    scaleup_efficiency: float = 0.8
    """Fraction of the nominal NVLink bandwidth per GPU a collective's bus bandwidth reaches.
    0.8: NCCL's topology model counts 20 GB/s per A100 NVLink (``SM80_NVLINK_BW 20.0`` in
    ``src/graph/topo.h``) of the 25 GB/s per direction NVLink 3 carries, and 20.6 of 25 per H100
    link (``SM90_NVLINK_BW``; 40.1 of 50 on Blackwell)."""
    scaleout_efficiency: float = 0.96
    """Fraction of the NIC's line rate a collective reaches. 0.96: NCCL counts 12 GB/s for a
    100 Gb/s (12.5 GB/s) NIC (``NET_BW 12.0`` in ``src/graph/topo.h``)."""
    collective_base_latency_s: float = 8.4e-6
    """Fixed latency of one collective NCCL's tuner does not time (an all-to-all, a send; any
    collective on a part outside NCCL, :func:`model.nccl_tuner.nccl_arch`): 8.4 µs, the
    ``Simple`` protocol's ``baseLat`` of ring and tree (NCCL ``src/graph/tuning.cc``). The tuned
    collectives read NCCL's whole table (``collectives.toml`` ``[nccl_latency]``)."""
    scaleup_hop_latency_s: float = 3.4e-6
    """Latency of one such ring step or hop over NVLink: 3.4 µs (``hwLat`` NVLink, ring)."""
    scaleout_hop_latency_s: float = 14e-6
    """Latency of one such step over the network: 14 µs (``hwLat`` NET, ring and tree, Simple)."""
    scaleup_tree_hop_latency_s: float = 4.0e-6
    """Latency of one such tree step over NVLink: 4.0 µs (:func:`model.nccl_latency.tree_latency`)."""
    attention_kernel: str | None = None
    """The published attention kernel whose curves time the FlashAttention core by sequence
    length, head dimensions and mask (:func:`model.attention_rates.attention_fractions`: flash-attention-2,
    flash-attention-3, cudnn, pytorch-sdpa-cudnn); None, or a part without curves: the core runs
    at :attr:`attention_efficiency`. Set by :func:`model.op_rates.deployed_params`."""
    part: str = ""
    """The accelerator's catalogue name, for the per-operation tables (:mod:`model.op_rates`)."""
    clock_fraction: float = 1.0
    """Fraction of the rated dense peak the tensor cores sustain under the part's power limit
    (:data:`model.op_rates.SUSTAINED_CLOCK`); multiplies the peak of GEMMs and the attention
    core, not the MFU's denominator."""
    optimizer_hbm_efficiency: float | None = None
    """Fraction of the datasheet HBM bandwidth the optimizer step streams at: BabelStream's triad
    on the part (:func:`model.op_rates.stream_triad_fraction`); None = :attr:`hbm_efficiency`."""
    nvls_allreduce_speedup: float = 1.0
    """How much faster an all-reduce inside the NVLink domain moves its bytes than a ring
    collective there, where NCCL runs it as NVLink SHARP (NVLS, in-switch reduction): the
    stated peak bus bandwidths' ratio (:func:`model.nvlink_rates.nvls_allreduce_speedup`); 1 where
    the fabric has none or none is published."""
    busbw_curve: tuple[tuple[float, float], ...] = ()
    """The part's published all-reduce bus bandwidth by message size inside its NVLink domain:
    ``(buffer bytes, GB/s)`` pairs, ascending (nccl-tests ``all_reduce_perf``,
    ``scenarios/kernels/collectives.toml`` ``[[busbw]]``; :func:`model.nvlink_rates.busbw_curve_for`).
    Empty = none published for the part: scale-up collectives run at
    :attr:`scaleup_efficiency` of the link (:func:`collective_time`)."""
    busbw_curve_link_gbps: float = 0.0
    """The nominal NVLink bandwidth per GPU per direction (GB/s) of the system
    :attr:`busbw_curve` was measured on: the curve is scaled by the link in use over it (a
    part with fewer NVLinks, a what-if)."""
    kernel_overhead_s: float = 3e-6
    """t_kernel: the gap a dependent kernel adds on one stream (launch and the last partial wave
    draining), per operation. 3 µs: the few-microsecond launch overhead of the CUDA C++ Best
    Practices Guide ("kernel launch overhead"); Calculon's A100 GEMM-efficiency table (0.6 at
    1 GFLOP, 0.9 at 16 GFLOP) implies 2–6 µs per GEMM. An estimate, stated; not fitted."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name.endswith("_efficiency") and not 0 < value <= 1:
                raise InputError(f"{f.name}: {value} must be a fraction in (0, 1]")
            if f.name.endswith("_s") and not 0 <= value < 1:
                raise InputError(f"{f.name}: {value} must be seconds in [0, 1)")
        if self.nvls_allreduce_speedup < 1:
            raise InputError(
                f"nvls_allreduce_speedup: {self.nvls_allreduce_speedup} must be at least 1"
            )
        if not 0 < self.clock_fraction <= 1:
            raise InputError(f"clock_fraction: {self.clock_fraction} must be a fraction in (0, 1]")

    def with_(self, **changes: Any) -> RooflineParams:
        """A copy with some figures changed (checked again)."""
        return replace(self, **changes)

    @property
    def streaming_hbm_efficiency(self) -> float:
        """The HBM share a kernel streaming whole tensors reaches (:attr:`optimizer_hbm_efficiency`,
        else :attr:`hbm_efficiency`): the optimizer step's and the rollout's decode reads'."""
        return self.optimizer_hbm_efficiency or self.hbm_efficiency


CALIBRATABLE: tuple[str, ...] = (
    "gemm_efficiency",
    "attention_efficiency",
    "hbm_efficiency",
    "scaleup_efficiency",
    "scaleout_efficiency",
)
"""The figures ``trainplan calibrate`` may fit (the latencies and t_kernel stay as sourced)."""

GEMM_EFFICIENCY_BY_GENERATION: MappingProxyType[str, float] = MappingProxyType(
    {"A100": 0.6996, "H100": 0.5725}
)
"""e_GEMM by accelerator generation, once fitted on published runs (A100 on Megatron-LM Table
1's former calibration rows, H100 on Llama 3 Table 4's 8,192-GPU row: 0.6794 and 0.556 under
a clock without tile and wave quantisation). Dense GEMMs now pay their own wave share
(:func:`model.op_rates.dense_wave_efficiency`), which the old figures held as an average over
those rows' shapes, so each is re-expressed as the figure under which those same rows' predicted
step times are unchanged (geometric mean of the ratios 1; A100 per row within 1.4 %): A100
0.6794 → 0.6996, H100 0.556 → 0.5725. No published figure entered the re-expression; it only
moves the old fit's wave losses out of e_GEMM into the shapes that have them. The project no longer
fits time constants to end-to-end runs: the fit is retired (``python -m
trainplan.interface.fidelity --residuals`` reports those rows' errors and fits nothing). The
per-operation anchors exist (:func:`model.gemm_anchors.anchored_gemm_efficiency`: the best BF16
``torch.mm`` rates of the Maximum Achievable Matmul FLOPS table under this module's own rule,
A100 0.907, H100 0.845, B200 0.848) but are not in force: they make every validation run faster
(dense mean error 9.9 → 26.1 %, MoE 24.9 → 36.0 %), so these figures stay, standing in for time
the model does not have (``docs/time-model-sources.md`` §2 lists the candidates: ordinary shapes
against the best one, SMs taken by overlapped collectives, host time between kernels).
Same-architecture parts share their generation's figure (:func:`generation_of`); accelerators
never calibrated use the newest calibrated one (H100), an assumption stated in the output."""

DEFAULT_GEMM_EFFICIENCY = GEMM_EFFICIENCY_BY_GENERATION["H100"]
"""The figure for an accelerator of no calibrated generation (see above)."""

GENERATION_OF: MappingProxyType[str, str] = MappingProxyType(
    {"A100": "A100", "H100": "H100", "H800": "H100", "H200": "H100", "GH200": "H100"}
)
"""Name prefix → calibrated generation (NVIDIA H800/H200 datasheets: Hopper like the H100)."""

_ATTENTION_EFFICIENCY: MappingProxyType[str, float] = MappingProxyType({"H100": 0.35})
"""FlashAttention core efficiency by generation (see :attr:`RooflineParams.attention_efficiency`;
A100: FlashAttention-2 reaches 50–73% of peak there, Dao 2023, arXiv 2307.08608, the GEMMs'
range, so the core follows the GEMM rule)."""


def generation_of(device_name: str) -> str | None:
    """The calibrated generation of catalogue part ``device_name`` (:data:`GENERATION_OF`, by
    the name before ``-``, a what-if suffix left out; :attr:`model.hardware.DeviceSpec.part`).

    >>> generation_of("H200[hbm×1.5]"), generation_of("A100-40GB"), generation_of("B200")
    ('H100', 'A100', None)
    """
    return GENERATION_OF.get(catalogue_part(device_name).split("-")[0].upper())


def roofline_params_for(device_name: str, **overrides: Any) -> RooflineParams:
    """The default :class:`RooflineParams` of an accelerator: its generation's fitted
    e_GEMM (:data:`GEMM_EFFICIENCY_BY_GENERATION`, the H100's for uncalibrated parts) and
    FlashAttention efficiency, the sourced defaults for the rest; ``overrides`` replace any.

    Examples
    --------
    >>> roofline_params_for("H100-SXM").attention_efficiency
    0.35
    >>> roofline_params_for("A100-80GB", hbm_efficiency=0.8).hbm_efficiency
    0.8
    """
    gen = generation_of(device_name) or "H100"
    base = RooflineParams(
        gemm_efficiency=GEMM_EFFICIENCY_BY_GENERATION[gen],
        attention_efficiency=_ATTENTION_EFFICIENCY.get(gen),
    )
    return base.with_(**overrides) if overrides else base


def gemm_efficiency(
    k: float, peak_flops_per_s: float, hbm_bytes_per_s: float, p: RooflineParams, beta: int = 2
) -> float:
    """The efficiency rule for a GEMM of reduction depth ``k`` (per GPU, after sharding):

    ``e(k) = e_GEMM · k / (k + k₀)``,  ``k₀ = (β/2) · e_GEMM·peak / (e_HBM·HBM)``

    Each output tile of a GEMM runs its main loop (``2·k`` FLOPs per output element) and then
    writes the tile back (``β`` bytes per element), and on a kernel that computes one tile after
    another the write-back does not overlap that tile's main loop (NVIDIA, "Matrix
    Multiplication Background User's Guide": a GEMM's output is written once per tile;
    CUTLASS's epilogue follows the main loop). So the GEMM takes its math time plus its output's
    write time, which is the efficiency above: ``k₀`` is the accelerator's balance point in
    FLOP per byte (A100-80GB: 0.74·312/(0.9·2,039) ≈ 126; H100-SXM: 0.60·989/(0.9·3,350) ≈ 197).
    A GEMM whose per-GPU depth ``k`` is a few hundred — the row-parallel projections at high tp,
    whose ``k = h/tp`` or ``f/tp`` — runs measurably slower: smaller shards, lower efficiency.

    Examples
    --------
    >>> p = RooflineParams(gemm_efficiency=0.8, hbm_efficiency=1.0)
    >>> round(gemm_efficiency(100, 100e12, 1e12, p), 6)  # k₀ = 0.8·100 = 80: 0.8·100/180
    0.444444
    """
    k0 = beta / 2 * p.gemm_efficiency * peak_flops_per_s / (p.hbm_efficiency * hbm_bytes_per_s)
    return p.gemm_efficiency * k / (k + k0)


def gemm_seconds(
    m: float,
    n: float,
    k: float,
    batch: float,
    peak_flops_per_s: float,
    hbm_bytes_per_s: float,
    p: RooflineParams,
    beta: int = 2,
    extra_bytes: float = 0.0,
    shape: float = 1.0,
) -> float:
    """Seconds of ``batch`` GEMMs ``[m, k] × [k, n]`` on one GPU: the roofline of its
    ``2·m·n·k·batch`` FLOPs at :func:`gemm_efficiency` × ``shape`` (the useful share of the tiles
    the kernel runs, :func:`model.grouped_gemm.grouped_shape`; 1 for a dense GEMM) and the bytes
    it moves (both inputs and the output, ``β`` bytes each, plus ``extra_bytes``, e.g. an FP32
    gradient accumulated in place), plus t_kernel.

    Examples
    --------
    A 4096³ GEMM on an A100-80GB at e_GEMM 0.74: 2·4096³ FLOPs / (312e12 · 0.74·4096/(4096 + k₀))
    with k₀ = 0.74·312e12 / (0.9·2.039e12), plus 3 µs:

    >>> import math
    >>> p = RooflineParams(gemm_efficiency=0.74)
    >>> k0 = 0.74 * 312e12 / (0.9 * 2.039e12)
    >>> t = 2 * 4096**3 / (312e12 * 0.74 * 4096 / (4096 + k0)) + 3e-6
    >>> math.isclose(gemm_seconds(4096, 4096, 4096, 1, 312e12, 2.039e12, p), t)
    True
    """
    flops = 2.0 * m * n * k * batch
    moved = beta * batch * (m * k + k * n + m * n) + extra_bytes
    e = gemm_efficiency(k, peak_flops_per_s, hbm_bytes_per_s, p, beta)
    return (
        max(flops / (peak_flops_per_s * e * shape), moved / (hbm_bytes_per_s * p.hbm_efficiency))
        + p.kernel_overhead_s
    )


def attention_seconds(
    flops: float,
    moved_bytes: float,
    peak_flops_per_s: float,
    hbm_bytes_per_s: float,
    p: RooflineParams,
) -> float:
    """Seconds of the fused FlashAttention core: the roofline of its FLOPs at
    :attr:`RooflineParams.attention_efficiency` and its bytes (Q, K, V, O and their gradients),
    plus t_kernel.

    Raises
    ------
    InputError
        When ``p`` has no attention efficiency (the core is then batched GEMMs).
    """
    if p.attention_efficiency is None:
        raise InputError("attention_efficiency: none given for a fused FlashAttention core")
    return (
        max(
            flops / (peak_flops_per_s * p.attention_efficiency),
            moved_bytes / (hbm_bytes_per_s * p.hbm_efficiency),
        )
        + p.kernel_overhead_s
    )


def memory_seconds(moved_bytes: float, hbm_bytes_per_s: float, p: RooflineParams) -> float:
    """Seconds of a memory-bound kernel moving ``moved_bytes`` through HBM: bytes / (HBM ×
    e_HBM) + t_kernel (its few FLOPs per byte are far below any accelerator's balance point).

    Examples
    --------
    A LayerNorm over [8192, 6144] bf16 on an A100-80GB reads and writes 2·2·8192·6144 bytes:

    >>> p = RooflineParams(gemm_efficiency=0.7)
    >>> round(memory_seconds(2 * 2 * 8192 * 6144, 2.039e12, p) * 1e6, 2)  # µs: 109.71 + 3
    112.71
    """
    return moved_bytes / (hbm_bytes_per_s * p.hbm_efficiency) + p.kernel_overhead_s


class Collective(StrEnum):
    """A collective or point-to-point message, as NCCL runs it."""

    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_REDUCE = "all-reduce"
    ALL_TO_ALL = "all-to-all"
    SEND_RECV = "send-recv"


@dataclass(frozen=True, slots=True)
class LinkTime:
    """The link an axis's collective rides, as the α-β clock reads it."""

    bandwidth_bytes_per_s: float
    """Nominal bandwidth per GPU per direction (the accelerator table's or the cluster's)."""
    scaleup: bool
    """True for the NVLink-class domain, False for the scale-out network."""
    per_domain: int = 1
    """Ranks of the group in each NVLink domain (:func:`model.terms.fields.axis_members`),
    whose ring steps ride NVLink (:func:`collective_latency`); 1: every step off ``scaleup``
    over the network."""
    domains: int = 0
    """NCCL's node count of the group (``comm->nNodes``: the distinct NVLink domains its ranks
    lie on, :func:`model.rank_groups.nccl_nodes`), whose ring crosses the network ``domains − 1``
    times a round; 0: ``⌈group ∕ per_domain⌉`` (groups that line up with the domains)."""
    other: tuple[float, bool, int, int] | None = None
    """``(bandwidth, scaleup, per_domain, domains)`` of the axis's groups on another number of
    domains (:func:`collective_time`'s ``other``); None where every group lies as this one."""
    nic_bytes_per_s: float = 0.0
    """One GPU's NIC, bytes/s a direction (the scale-out tier's figure before
    :func:`model.step_time.rings_bandwidth` multiplies and caps it; a what-if's included): what
    NCCL's ring graph across nodes is bound by (:func:`model.nccl_tuner.ring_graph`); 0: unknown
    (``bandwidth ÷ per_domain``)."""
    nvlink_bytes_per_s: float = 0.0
    """The cluster's NVLink a GPU, bytes/s a direction (:attr:`model.hardware.DeviceSpec.
    nvlink_bytes_per_s`, a what-if's included): where a link across domains reached it, NVLink
    binds (:func:`model.nvlink_bound.ring_busbw`); 0: unknown (the NIC's rule)."""


def collective_seconds(
    kind: Collective, group_size: int, sent_bytes: float, link: LinkTime, p: RooflineParams
) -> float:
    """Seconds of one collective over ``group_size`` ranks in which each GPU sends
    ``sent_bytes`` (the ring counts of :mod:`model.comm`: ``(n − 1)/n·S`` for an all-gather or
    reduce-scatter of an ``S``-byte buffer, twice that for an all-reduce) over ``link``:
    :func:`collective_time`. ``group_size`` 1 or no bytes: 0.

    Examples
    --------
    An all-gather of a 2·8192·6144-byte buffer over 8 NVLink A100s (300 GB/s nominal, without
    the published curve): NCCL's tuner picks the ring in Simple, 8.4 + 7 × 3.4 µs +
    (7/8)·2·8192·6144 B / (0.8 · 300 GB/s) (LL128: 14 + 7 × 1.9 µs at 0.92 × 240 GB/s).

    >>> p = RooflineParams(gemm_efficiency=0.7, part="A100-80GB")
    >>> sent = 7 / 8 * 2 * 8192 * 6144
    >>> t = collective_seconds(Collective.ALL_GATHER, 8, sent, LinkTime(300e9, True), p)
    >>> round(t * 1e6, 1)  # µs: 32.2 of latency, 367.0 of bytes
    399.2
    """
    return collective_time(
        kind, group_size, sent_bytes, link.bandwidth_bytes_per_s, link.scaleup, p,
        link.per_domain, link.domains, link.other, nic=link.nic_bytes_per_s,
        nvlink=link.nvlink_bytes_per_s,
    )  # fmt: skip


def transfer_seconds(sent_bytes: Any, rate: Any) -> Any:
    """``sent_bytes / rate`` (seconds; bytes, bytes/s), element-wise, without dividing by a zero
    rate: an axis of size 1 has no link (rate 0) and sends nothing, 0 s; bytes over a zero rate
    would never arrive, inf."""
    rate_or_one = where(rate > 0, rate, 1.0)
    return where(rate > 0, sent_bytes / rate_or_one, where(sent_bytes > 0, float("inf"), 0.0))


def ring_share(kind: Collective, group_size: Any) -> Any:
    """nccl-tests' bus-bandwidth factor (``doc/PERFORMANCE.md``): the share of an ``S``-byte
    buffer each rank sends, ``2(n − 1)/n`` for an all-reduce, ``(n − 1)/n`` for an all-gather,
    reduce-scatter or all-to-all, 1 for a point-to-point send. Element-wise.

    >>> ring_share(Collective.ALL_REDUCE, 8), ring_share(Collective.ALL_GATHER, 4)
    (1.75, 0.75)
    """
    if kind is Collective.SEND_RECV:
        return 1.0
    share = (group_size - 1) / maximum(group_size, 1)
    return 2 * share if kind is Collective.ALL_REDUCE else share


_CURVE_KINDS = (Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER)


def collective_time(
    kind: Collective, group_size: Any, sent_bytes: Any, bandwidth: Any, scaleup: Any,
    p: RooflineParams, per_domain: Any = 1, domains: Any = 0,
    other: tuple[Any, Any, Any, Any] | None = None, *, nic: Any = 0.0, nvlink: Any = 0.0,
) -> Any:  # fmt: skip
    """:func:`collective_seconds` from plain numbers: floats for one collective, element-wise
    for arrays of layouts (the search's tables), the same operations in the same order.

    Inside the NVLink domain (``scaleup``) of a part with a published bus-bandwidth curve an
    all-reduce, all-gather or reduce-scatter takes ``sent_bytes / busbw(S)`` — the buffer
    ``S = sent_bytes / ring_share`` read on the curve (:func:`published_busbw`), which measured
    the whole call, latency and NCCL's choice of protocol included; below the curve's smallest
    size, the smallest size's time (a latency floor). Elsewhere those three take the time of
    the algorithm and protocol NCCL's tuner picks (:func:`model.nccl_tuner.tuned_seconds`: the
    ring in LL, LL128 or Simple, the all-reduce's tree, NVLS where :func:`model.nvls.nvls_ring`
    says NCCL runs it), the Simple ring's bus bandwidth :func:`model.nvlink_bound.ring_busbw`'s
    (the link at the efficiency of its tier, or of NVLink where NVLink binds across domains;
    ``nic`` and ``nvlink``: :attr:`LinkTime.nic_bytes_per_s`, :attr:`LinkTime.
    nvlink_bytes_per_s`, which also bound NCCL's ring graph there); on a part
    NCCL does not run on (:func:`model.nccl_tuner.nccl_arch`), and for an all-to-all or a send,
    NCCL's Simple latency plus the bytes at the link's efficiency (Hockney's α-β model;
    :func:`collective_latency`). ``per_domain``: the group's members in each NVLink domain
    (1: every step crosses the network); ``domains``: the group's NCCL node count
    (:attr:`LinkTime.domains`; 0: ``⌈group ∕ per_domain⌉``).

    ``other``: ``(bandwidth, scaleup, per_domain, domains)`` of the axis's groups on another
    number of domains (:func:`model.rank_groups.other_placement`). NCCL tunes each group's
    communicator on its own and the step waits for the slowest, so the collective takes the
    longer of the two, each group at its own latency and bandwidth, ``max(α₁ + S ∕ β₁, α₂ + S ∕
    β₂)`` (an all-reduce of 13 ranks on 8-GPU nodes: tests/model/test_group_latency.py).
    """
    if other is not None:
        caps = {"nic": nic, "nvlink": nvlink}
        first = collective_time(kind, group_size, sent_bytes, bandwidth, scaleup, p, per_domain,
                                domains, **caps)  # fmt: skip
        second = collective_time(kind, group_size, sent_bytes, *other[:2], p, *other[2:], **caps)
        return maximum(first, second)
    busbw = ring_busbw(bandwidth, scaleup, nvlink if kind in TUNED else 0.0, p)  # rings alone
    on = kind is Collective.ALL_REDUCE and p.nvls_allreduce_speedup != 1
    nvls = nvls_ring_on_link(p.part, bandwidth, scaleup, group_size) if on else False
    if kind in TUNED and nccl_arch(p.part):
        faster = busbw * where(nvls, p.nvls_allreduce_speedup, 0.0)
        seconds = tuned_seconds(str(kind), group_size, sent_bytes, bandwidth, busbw, scaleup,
                                p.part, per_domain, domains, faster, nic, nvlink)  # fmt: skip
        seconds = where(bandwidth > 0, seconds, transfer_seconds(sent_bytes, bandwidth))
    else:
        latency = collective_latency(kind, group_size, scaleup, p, per_domain, domains)
        rate = busbw * where(nvls, p.nvls_allreduce_speedup, 1)
        seconds = latency + transfer_seconds(sent_bytes, rate)
    if p.busbw_curve and kind in _CURVE_KINDS:
        share = ring_share(kind, group_size)
        smallest = p.busbw_curve[0][0]
        buffer = maximum(sent_bytes / where(share > 0, share, 1.0), smallest)
        busbw = published_busbw(kind, buffer, where(bandwidth > 0, bandwidth, 1.0), p, nvls=nvls)
        seconds = where(scaleup, buffer * share / busbw, seconds)
    return where((group_size > 1) & (sent_bytes > 0), seconds, 0.0)
