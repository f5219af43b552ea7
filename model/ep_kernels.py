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

**Which figure** (:func:`kernel_rates`): BF16 dispatch and combine — Megatron-Core dispatches
BF16 rows through both flex backends (``model.dispatch_buffers``); at the SM count the model
charges the kernels (:data:`model.comm_sms.DISPATCHER_SMS`, one domain), the published row
with the most SMs not above it (HybridEP's 24 → its 16-SM rows), interpolated in log2(ep) between
published sizes and held at the ends (:func:`model.kernels.interpolate_log2`). DeepEP publishes
its H800 dispatch in FP8 only: the BF16 dispatch borrows the BF16 combine's figure (HybridEP's
B200 BF16 dispatch runs 9 % above its combine, so a lower bound). A part without a row borrows,
said in :attr:`KernelRates.borrowed`: the rows of a published part with the same NVLink
bandwidth and domain (B300 ← B200, GB300 ← GB200), else the library's first part's figures
scaled by the two parts' nominal NVLink bandwidths (DeepEP's H800 for every other part,
HybridEP's B200).

No latency term is added: the published figure is the kernel's whole time at 4,096 tokens a
rank; fewer tokens would run below it (not modelled). Units: bytes/s, seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from trainplan.model.comm_sms import DISPATCHER_SMS
from trainplan.model.kernel_tables import ExpertAllToAll
from trainplan.model.kernels import interpolate_log2
from trainplan.scenarios.kernel_data import collective_data

__all__ = ["KERNEL_LIBRARY", "KernelRates", "kernel_rates", "kernel_seconds"]

KERNEL_LIBRARY = {"deepep": "deepep-v1-normal", "hybridep": "hybridep"}
"""The ``[[expert_all_to_all]]`` library whose NVLink rows time each flex dispatcher."""


@dataclass(frozen=True, slots=True)
class KernelRates:
    """A dispatcher's BF16 dispatch and combine bandwidth inside one NVLink domain by
    expert-parallel size (GB/s, counted as the kernels count: module docstring)."""

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


def _bf16(library: str, part: str) -> tuple[KernelRates, str] | None:
    """The part's own rates of ``library`` (with what was borrowed for a missing BF16
    dispatch), None without a row."""
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
    if bf16:
        return KernelRates(row.ep, row.dispatch_gbps, row.combine_gbps, where), ""
    note = f"{library}'s BF16 dispatch on {part} at its BF16 combine's rate (FP8 dispatch only)"
    return KernelRates(row.ep, row.combine_gbps, row.combine_gbps, where), note


def _listed(library: str, part: str) -> tuple[KernelRates, str]:
    """:func:`_bf16` of a part the library's rows name."""
    got = _bf16(library, part)
    assert got is not None, f"{library} on {part}: listed without rows"
    return got


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
    H800's 200) 158 × 2.25; HybridEP on B300 reads B200's rows:

    >>> kernel_rates("deepep", "H800", 200e9, 8).at(8)
    (158000000000.0, 158000000000.0)
    >>> round(kernel_rates("deepep", "H100-SXM", 450e9, 8).at(8)[0] / 1e9, 1)
    355.5
    >>> b300 = kernel_rates("hybridep", "B300", 900e9, 8)
    >>> b300.at(8), b300.borrowed.startswith("B200's")
    ((734950000000.0, 673840000000.0), True)
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
    for other, (gbps, domain) in systems.items():
        if gbps is not None and (gbps * 1e9, domain) == (nvlink_bytes_per_s, nvlink_domain):
            rates, note = _listed(library, other)
            said = f"{other}'s {library} rows for {part} (same NVLink bandwidth and domain)"
            borrowed = "; ".join(x for x in (said, note) if x)
            return KernelRates(
                rates.ep, rates.dispatch_gbps, rates.combine_gbps, rates.source, borrowed
            )
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
    """(dispatch, combine) seconds of one dispatch and its combine inside one NVLink domain:
    the model's timed bytes (:func:`model.moe_dispatch.all_to_all_sent`, the rows sent to the
    other ``ep − 1`` ranks) × ``ep/(ep − 1)`` — the rows the kernels count, the rank's own
    included — over each direction's rate (bytes/s, :meth:`KernelRates.at`); None without rates
    (NCCL's all-to-all rule holds).

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
