"""The NVLink domain's collective rates the step time reads, per part: the NVLS all-reduce's
speed-up on Hopper baseboards and the published all-reduce bus-bandwidth curves standing for each
part's domain (data: ``scenarios/kernels/collectives.toml``, loaded by
:mod:`trainplan.scenarios.kernel_data`; per-operation measurements, never an end-to-end run)."""

from __future__ import annotations

from functools import lru_cache

from trainplan.model.collective_rates import busbw_peak
from trainplan.model.errors import InputError
from trainplan.model.nvls import nvls_channels
from trainplan.model.part_family import catalogue_part
from trainplan.scenarios.kernel_data import collective_data

__all__ = [
    "NVLS_PARTS",
    "nvls_allreduce_speedup",
    "BUSBW_PARTS",
    "BUSBW_LINK_GBPS",
    "busbw_curve_for",
]


NVLS_PARTS: dict[str, str] = {
    "H100-SXM": "H100-SXM",
    "H100-96GB-500W": "H100-SXM",
    "H800": "H100-SXM",
    "H200": "H100-SXM",
}
"""Parts on an 8-GPU HGX Hopper baseboard (third-generation NVSwitch, NVLink SHARP) and the
part whose stated NCCL peak stands for them (``collectives.toml`` ``busbw_peak``)."""


def nvls_allreduce_speedup(device_name: str) -> float:
    """The NVLS all-reduce's stated peak bus bandwidth over the ring's on the part's board:
    NCCL's maintainer states ~480 GB/s busbw for an 8-GPU H100 all-reduce with NVLink SHARP and
    ~370 GB/s for ring collectives (NVIDIA/nccl-tests issue 212): 480/370. It needs messages
    beyond 256 MB to reach that peak; smaller all-reduces are credited it too (an upper bound,
    as the ring's 0.8 of nominal is). 1 on a part without NVLS (:func:`model.nvls.nvls_channels`,
    the rule the memory's NVLS buffers read) or without a published NVLS peak.

    Examples
    --------
    >>> round(nvls_allreduce_speedup("H200"), 4), nvls_allreduce_speedup("A100-80GB")
    (1.2973, 1.0)
    """
    part = NVLS_PARTS.get(catalogue_part(device_name))
    if part is None or not nvls_channels(device_name):
        return 1.0
    rows = collective_data().busbw_peaks
    return busbw_peak(rows, part, "all-reduce", "NVLS") / busbw_peak(
        rows, part, "all-reduce", "ring"
    )


BUSBW_PARTS: dict[str, str] = {
    "A100-40GB": "A100-80GB",
    "A100-80GB": "A100-80GB",
    "H100-SXM": "H100-SXM",
    "H100-96GB-500W": "H100-SXM",
    "H800": "H100-SXM",
    "H200": "H200",
    "GB200": "GB200",
    "GB300": "GB200",
    "B200": "GB200",
    "B300": "GB200",
}
"""Parts and the system whose published all-reduce bus-bandwidth curve (``collectives.toml``
``[[busbw]]``) stands for their NVLink domain: the A100s' 8-GPU HGX board (third-generation
NVSwitch); the Hopper HGX parts the H100's (the H800 with its 8 NVLinks of 18 through the
link-bandwidth scaling); the H200 its own; every fifth-generation NVLink part (900 GB/s per
GPU) the GB200 host's 4-GPU ring — the only NVLink 5 curve published (nothing for the 8-GPU
B200/B300 boards or the 72-GPU NVL72 domain), so those read it as a stand-in. Parts not here
(H20, H100-PCIe/NVL, AMD, TPU) keep :attr:`model.roofline.RooflineParams.scaleup_efficiency`."""

BUSBW_LINK_GBPS: dict[str, float] = {
    "A100-80GB": 300.0,
    "H100-SXM": 450.0,
    "H200": 450.0,
    "GB200": 900.0,
}
"""NVLink bandwidth per GPU per direction (GB/s) of each system a curve was measured on: the
rows of ``topology/accelerators.toml`` (vendor datasheets; ``tests/model/test_op_rates.py``
holds them equal)."""


@lru_cache(maxsize=64)
def busbw_curve_for(device_name: str) -> tuple[tuple[tuple[float, float], ...], float]:
    """(the published all-reduce curve standing for the part's NVLink domain as ``(bytes,
    GB/s)`` pairs, the NVLink GB/s of the system it was measured on) (:data:`BUSBW_PARTS`);
    ``((), 0.0)`` for a part without one.

    Examples
    --------
    >>> curve, link = busbw_curve_for("H800")
    >>> curve[-1], link
    ((8589934592, 478.87), 450.0)
    >>> busbw_curve_for("MI300X")
    ((), 0.0)
    """
    part = BUSBW_PARTS.get(catalogue_part(device_name))
    if part is None:
        return (), 0.0
    for c in collective_data().busbw:
        if (c.part, c.collective) == (part, "all-reduce"):
            return tuple(zip(c.bytes, c.busbw_gbps, strict=True)), BUSBW_LINK_GBPS[part]
    raise InputError(f"busbw: no published all-reduce curve on {part}")
