"""DeepEP's and HybridEP's dispatch and combine inside one NVLink domain at their kernels'
published bandwidth (the ``deepep-v1-normal`` and ``hybridep`` NVLink rows of
``scenarios/kernels/collectives.toml`` ``[[expert_all_to_all]]``), not at NCCL's share of the
link that the all-to-all rule applies (:func:`model.roofline.collective_time`).

**How the kernels count.** DeepEP's ``tests/legacy/test_intranode.py`` (deepseek-ai/DeepEP
dd758ca) divides ``nvl_recv_bytes`` — ``recv_x.numel()`` × 2, the rows a rank receives in the
dispatch, one per token that has any expert on it and its own tokens' rows included, FP8 rows at
``(1 + 4/128)/2`` of BF16's — by the dispatch's time, and the combine's ``combine_bf16_nvl_send_
bytes``, the same rows sent back, by the combine's. HybridEP's ``tests/test_hybrid_ep.py``
(branch ``hybrid-ep`` 94a9f8f6b1, ``test_hybrid_ep_benchmark``) counts the same
(``nvl_dispatch = dispatched_hidden.numel() * 2``, ``nvl_combine = nvl_dispatch``); its
"Kernel Only" figures time the kernels alone (Kineto). The model's timed bytes
(:func:`model.moe_dispatch.all_to_all_sent`) are the rows sent to the ``ep − 1`` other ranks,
``R·(ep − 1)/ep`` a token: ×``ep/(ep − 1)`` gives the rows the kernels count
(:func:`kernel_seconds`).

**What else the rows carried.** The counted bytes are the hidden vectors alone; the timed kernels
moved what the benchmark's rows carried beside them too (:data:`BENCHMARK_TRANSFERS`):
HybridEP's dispatch and combine a float32 probability per expert of the domain, ``4·8·ep``
bytes a row at its 8 local experts (1,152 at GB200's EP 36, 8 % of a 14,336-byte row); DeepEP's
cached dispatch and weightless combine nothing beyond the 4-byte source index every row has.
So each published figure is read as the bytes moved, × ``(2h + side)/2h`` (:func:`_moved`),
and the model's rows carry their own side bytes at that rate
(:func:`model.moe_dispatch.side_bytes`: the run's probabilities, DeepEP's top-k).

**Which figure** (:func:`kernel_rates`): BF16 dispatch and combine — Megatron-Core dispatches
BF16 rows through both flex backends (``model.dispatch_buffers``); at the SM count the model
charges the kernels (:data:`model.comm_sms.DISPATCHER_SMS`, one domain), the published row
with the most SMs not above it (HybridEP's 24 → its 16-SM rows), interpolated in log2(ep) between
published sizes and held at the ends (:func:`model.kernels.interpolate_log2`). DeepEP publishes
its H800 dispatch in FP8 only: the BF16 dispatch borrows the BF16 combine's figure (HybridEP's
B200 BF16 dispatch runs 9 % above its combine, so a lower bound). A part without a row borrows,
said in :attr:`KernelRates.borrowed`: the rows of a published part with the same NVLink
bandwidth and the same kind of domain — one 8-GPU board's NVSwitch, or a multi-node NVLink
domain over more (:data:`BOARD_GPUS`; B300 ← B200, GB300 ← GB200, whether a job's share of an
NVL72 rack is 72 or 64 GPUs) — else the library's first part's figures
scaled by the two parts' nominal NVLink bandwidths (DeepEP's H800 for every other part,
HybridEP's B200).

No latency term is added: the published figure is the kernel's whole time at 4,096 tokens a
rank; fewer tokens would run below it (not modelled). Units: bytes/s, seconds.

HybridEP's permute is a kernel of its own under Megatron-Core's default, timed by
:mod:`model.ops` at the received rows: ``_HybridEPManager.dispatch`` calls
``hybrid_ep_dispatch`` with ``fused=config.moe_permute_fusion_into_hybridep`` (default False,
``transformer_config.py``; Megatron-LM d98e8a64dd ``moe/token_dispatcher.py``, ``moe/fused_a2a.py``
``HybridEPDispatch.forward``), and unfused the library's ``Executor::dispatch_postprocess``
launches ``permute_launcher`` from the dispatch's receive buffer into the experts'
``[num_permuted_tokens, h]`` input after the dispatch kernel, ``combine_preprocess``
``unpermute_launcher`` before the combine (deepseek-ai/DeepEP ``hybrid-ep`` 94a9f8f6b1
``csrc/hybrid_ep/executor/executor.cu``). Only ``moe_permute_fusion_into_hybridep=True``
(``fuse_permute_dispatch``) writes the permuted rows from the dispatch kernel itself, which the
planner does not offer: no time of that fused kernel is published (``docs/README_Hybrid-EP.md``
"Performance Results" time ``dispatch`` and ``combine`` alone; ``tests/test_hybrid_ep.py`` runs
the fused path, ``fuse_permute_dispatch=True``, without a published figure), and its permute
blocks (``num_blocks_permute``, "standalone or fused permute-dispatch",
``docs/Hybrid-EP_Implementation.md``, branch ``hybrid-ep`` 94a9f8f) still write every permuted
row beside the dispatch's, so removing the permute's time would be unsourced. The permute
reads one row per token a rank receives and writes one per local expert; both are counted at
the received rows (an upper bound on the read).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from trainplan.model.comm_sms import DISPATCHER_SMS
from trainplan.model.kernel_tables import ExpertAllToAll
from trainplan.model.kernels import interpolate_log2
from trainplan.model.moe_dispatch import side_bytes
from trainplan.model.moe_run import Dispatcher, MoERun
from trainplan.scenarios.kernel_data import collective_data

__all__ = [
    "KERNEL_LIBRARY",
    "BENCHMARK_TRANSFERS",
    "KernelRates",
    "kernel_rates",
    "kernel_seconds",
    "transfer_seconds",
]

KERNEL_LIBRARY = {"deepep": "deepep-v1-normal", "hybridep": "hybridep"}
"""The ``[[expert_all_to_all]]`` library whose NVLink rows time each flex dispatcher."""


@dataclass(frozen=True, slots=True)
class KernelRates:
    """A dispatcher's BF16 dispatch and combine bandwidth inside one NVLink domain by
    expert-parallel size (GB/s of the rows a rank receives, its own included, as the bytes the
    kernels moved: the hidden vectors and what the rows carried beside them, module
    docstring)."""

    ep: tuple[int, ...]
    dispatch_gbps: tuple[float, ...]
    combine_gbps: tuple[float, ...]
    source: str
    """The rows read: library, part, SMs and the table's source."""
    borrowed: str = ""
    """What was borrowed and why ("" when the part's own BF16 rows were read)."""

    def at(self, ep: int) -> tuple[float, float]:
        """(dispatch, combine) bytes/s at ``ep`` ranks (log2 interpolation, held at the ends).

        >>> r = KernelRates((8, 16), (700.0, 600.0), (650.0, 550.0), "")
        >>> r.at(8), r.at(64)
        ((700000000000.0, 650000000000.0), (600000000000.0, 550000000000.0))
        """
        d = interpolate_log2(self.ep, self.dispatch_gbps, ep).value
        c = interpolate_log2(self.ep, self.combine_gbps, ep).value
        return d * 1e9, c * 1e9


def _sms_row(rows: list[ExpertAllToAll], charged: int) -> ExpertAllToAll:
    """The row measured on the most SMs not above ``charged`` (a row without an SM count as 0;
    the fewest SMs when every row is above)."""

    def sms(r: ExpertAllToAll) -> int:
        return max(r.sms) if r.sms else 0

    fits = [r for r in rows if sms(r) <= charged]
    return max(fits, key=sms) if fits else min(rows, key=sms)


BENCHMARK_TRANSFERS = {"deepep-v1-normal": (3, 1), "hybridep": (0, 2)}
"""Which of :data:`model.moe_dispatch.TRANSFERS` each library's published dispatch and combine
ran: DeepEP's ``tests/legacy/test_intranode.py`` (dd758ca) times a dispatch with the cached
handle and no top-k (the backward dispatch's row) and a combine without weights (the forward
combine's); HybridEP's ``tests/test_hybrid_ep.py`` ``test_hybrid_ep_benchmark`` (``hybrid-ep``
94a9f8f6b1) a dispatch with ``topk_weights`` turned into probabilities (the forward's) and a
combine with them (``with_probs``: the backward's)."""


def _moved(row: ExpertAllToAll, gbps: tuple[float, ...], transfer: int) -> tuple[float, ...]:
    """``gbps`` as the bytes the benchmark's kernel moved a row: the counted ``2h`` plus what
    its rows carried beside them in that transfer (:func:`model.moe_dispatch.side_bytes`:
    HybridEP's ``4·L·ep`` probabilities, ``L`` = the row's ``local_experts``; none of DeepEP's
    timed transfers carry any), × ``(2h + side)/2h`` at each ep."""
    dispatcher = next(k for k, v in KERNEL_LIBRARY.items() if v == row.library)
    hidden = 2 * row.hidden
    out = []
    for ep, rate in zip(row.ep, gbps, strict=True):
        experts = (row.local_experts or 0) * ep
        side = side_bytes(
            MoERun(dispatcher=Dispatcher(dispatcher)), hidden, row.top_k, experts, False
        )
        out.append(rate * (hidden + side[transfer]) / hidden)
    return tuple(out)


def _bf16(library: str, part: str) -> tuple[KernelRates, str] | None:
    """The part's own rates of ``library`` (with what was borrowed for a missing BF16
    dispatch), None without a row; as the bytes the kernels moved (:func:`_moved`)."""
    rows = [
        r
        for r in collective_data().expert_all_to_all
        if (r.library, r.part, r.link) == (library, part, "nvlink")
    ]
    if not rows:
        return None
    charged = DISPATCHER_SMS[next(k for k, v in KERNEL_LIBRARY.items() if v == library)][0]
    bf16 = [r for r in rows if r.dispatch_dtype == "bf16"]
    row = _sms_row(bf16 or rows, charged)
    sms = f", {max(row.sms)} SMs" if row.sms else ""
    where = f"{library} on {part}{sms} ({row.source})"
    dispatch, combine = BENCHMARK_TRANSFERS[library]
    moved = _moved(row, row.combine_gbps, combine)
    if bf16:
        return KernelRates(row.ep, _moved(row, row.dispatch_gbps, dispatch), moved, where), ""
    note = f"{library}'s BF16 dispatch on {part} at its BF16 combine's rate (FP8 dispatch only)"
    return KernelRates(row.ep, moved, moved, where), note


def _listed(library: str, part: str) -> tuple[KernelRates, str]:
    """:func:`_bf16` of a part the library's rows name."""
    got = _bf16(library, part)
    assert got is not None, f"{library} on {part}: listed without rows"
    return got


BOARD_GPUS = 8
"""GPUs of one board's NVSwitch domain (NVIDIA HGX H100, H200, B200, B300: 8 GPUs a baseboard);
an NVLink domain over more is a multi-node NVLink system (GB200/GB300 NVL72), whatever share
of it a job holds."""


@lru_cache(maxsize=64)
def kernel_rates(
    dispatcher: str, part: str, nvlink_bytes_per_s: float | None, nvlink_domain: int
) -> KernelRates | None:
    """The rates that time ``dispatcher``'s intra-domain dispatch and combine on ``part``
    (nominal NVLink ``nvlink_bytes_per_s`` per GPU, ``nvlink_domain`` GPUs a domain): its own
    rows, else borrowed (module docstring); None for the NCCL ``alltoall`` or a part without
    NVLink.

    Examples
    --------
    DeepEP on H800: the combine's 158 GB/s for both; on H100 (450 GB/s of NVLink against the
    H800's 200) 158 × 2.25; HybridEP on B300 reads B200's rows, 734.95 and 673.84 GB/s of
    14,336-byte rows that carried 4 × 8 × 8 = 256 bytes of probabilities each (× 14,592/14,336):

    >>> kernel_rates("deepep", "H800", 200e9, 8).at(8)
    (158000000000.0, 158000000000.0)
    >>> round(kernel_rates("deepep", "H100-SXM", 450e9, 8).at(8)[0] / 1e9, 1)
    355.5
    >>> b300 = kernel_rates("hybridep", "B300", 900e9, 8)
    >>> b300.at(8), b300.borrowed.startswith("B200's")
    ((748074107142.8572, 685872857142.8573), True)

    GB300 on 64 GPUs of each NVL72 rack reads GB200's rows, as on all 72:

    >>> kernel_rates("hybridep", "GB300", 900e9, 64).borrowed.startswith("GB200's")
    True
    """
    library = KERNEL_LIBRARY.get(str(dispatcher))
    if library is None or not nvlink_bytes_per_s:
        return None
    own = _bf16(library, part)
    if own is not None:
        rates, note = own
        return KernelRates(rates.ep, rates.dispatch_gbps, rates.combine_gbps, rates.source, note)
    systems = {
        r.part: (r.nvlink_gbps, r.nvlink_domain)
        for r in collective_data().expert_all_to_all
        if (r.library, r.link) == (library, "nvlink")
    }
    same = _same_system(systems, nvlink_bytes_per_s, nvlink_domain)
    if same is not None:
        rates, note = _listed(library, same)
        said = f"{same}'s {library} rows for {part} (same NVLink bandwidth and domain kind)"
        borrowed = "; ".join(x for x in (said, note) if x)
        return KernelRates(
            rates.ep, rates.dispatch_gbps, rates.combine_gbps, rates.source, borrowed
        )
    return _scaled(library, part, systems, nvlink_bytes_per_s)


def _same_system(
    systems: dict[str, tuple[float | None, int | None]], nvlink_bytes_per_s: float, domain: int
) -> str | None:
    """The first published part with the same nominal NVLink bandwidth and the same kind of
    domain (:data:`BOARD_GPUS`), or None."""
    for other, (gbps, theirs) in systems.items():
        same_kind = theirs is not None and (theirs > BOARD_GPUS) == (domain > BOARD_GPUS)
        if gbps is not None and gbps * 1e9 == nvlink_bytes_per_s and same_kind:
            return other
    return None


def _scaled(
    library: str,
    part: str,
    systems: dict[str, tuple[float | None, int | None]],
    nvlink_bytes_per_s: float,
) -> KernelRates:
    """The library's first part's rates scaled by the two parts' nominal NVLink bandwidths."""
    first = next(iter(systems))
    rates, note = _listed(library, first)
    nominal = systems[first][0]
    assert nominal, f"{library} on {first}: no nvlink_gbps in collectives.toml"
    scale = nvlink_bytes_per_s / (nominal * 1e9)
    said = (
        f"{first}'s {library} rates for {part} scaled by the nominal NVLink bandwidths "
        f"({nvlink_bytes_per_s / 1e9:g} / {nominal:g} GB/s)"
    )
    return KernelRates(
        rates.ep,
        tuple(x * scale for x in rates.dispatch_gbps),
        tuple(x * scale for x in rates.combine_gbps),
        rates.source,
        "; ".join(x for x in (said, note) if x),
    )


def kernel_seconds(
    timed_bytes: float, ep: int, rates: tuple[float, float] | None
) -> tuple[float, float] | None:
    """(dispatch, combine) seconds of ``timed_bytes`` sent by a dispatch and by a combine inside
    one NVLink domain: the model's timed bytes (:func:`model.moe_dispatch.all_to_all_sent` of
    the transfer's row, hidden and side bytes, sent to the other ``ep − 1`` ranks) ×
    ``ep/(ep − 1)`` — the rows the kernels count, the rank's own included — over each
    direction's rate (bytes/s, :meth:`KernelRates.at`); None without rates (NCCL's all-to-all
    rule holds).

    Examples
    --------
    DeepSeek-V3's 4,096 tokens at EP 8 on H800 (``R`` = 5.2946 of 256 experts, rows of 7,168
    BF16): 310.90 MB received, 1,967.7 µs at 158 GB/s each way:

    >>> sent = 4096 * 5.294563 * 7 / 8 * 14336
    >>> d, c = kernel_seconds(sent, 8, (158e9, 158e9))
    >>> round(d * 1e6, 1), d == c, kernel_seconds(sent, 8, None)
    (1967.7, True, None)
    """
    if rates is None or ep < 2 or not timed_bytes:
        return None
    received = timed_bytes * ep / (ep - 1)
    return received / rates[0], received / rates[1]


def transfer_seconds(
    moved: list[float], ep: int, rates: tuple[float, float] | None, nccl: Callable[[float], float]
) -> list[float]:
    """Seconds of each of :data:`model.moe_dispatch.TRANSFERS` sending ``moved`` bytes (the
    model's timed bytes of its rows, :func:`kernel_seconds`): a dispatch (the forward's, the
    backward's transpose of the combine) at the kernels' dispatch rate, a combine at their
    combine rate, inside one NVLink domain; ``nccl(bytes)`` — NCCL's all-to-all rule on the
    group's link — without rates.

    >>> transfer_seconds([7e9, 7e9, 7e9, 7e9], 8, (8e9, 4e9), lambda b: 0.0)
    [1.0, 2.0, 2.0, 1.0]
    """
    out = []
    for sent, rate in zip(moved, (0, 1, 1, 0), strict=True):
        kernel = kernel_seconds(sent, ep, rates)
        out.append(kernel[rate] if kernel else nccl(sent))
    return out
