"""The sentence of the answer's assumptions (:func:`interface.render.assumptions.assumptions`)
for an accelerator described in a file (``--gpu PATH.toml``, :mod:`topology.accelerator_file`):
where its figures come from, and which catalogue part's per-part rates stand for it."""

from __future__ import annotations

from trainplan.model.hardware import DeviceSpec
from trainplan.model.nccl_tuner import nccl_arch
from trainplan.model.roofline import RooflineParams, generation_of

__all__ = ["part_sentences", "rates_of", "collectives_said"]


def collectives_said(part: str) -> str:
    """How the step time times collectives off the published curves on ``part``
    (:func:`model.roofline.collective_time`): on a part NCCL runs on, an all-reduce, all-gather
    or reduce-scatter at the algorithm and protocol NCCL's tuner picks (:mod:`model.nccl_tuner`);
    else, and for all-to-alls and sends, NCCL's Simple latency.

    >>> collectives_said("MI300X")
    'NCCL latency + bytes /'
    """
    if not nccl_arch(part):
        return "NCCL latency + bytes /"
    return (
        "as NCCL's tuner runs them (all-reduce, all-gather, reduce-scatter: the ring or tree in "
        "LL, LL128 or Simple; all-to-alls and sends NCCL's Simple latency + bytes), Simple's "
        "bus bandwidth"
    )


def rates_of(part: str) -> str:
    """Which catalogue part's per-part tables a part reads (``part``,
    :attr:`model.hardware.DeviceSpec.part`), and its calibrated generation or the lack of one.

    >>> rates_of("H100-SXM")
    "the H100-SXM's: H100 generation"
    >>> rates_of("MI355X")
    "the MI355X's: no calibrated generation, so the H100's efficiencies, borrowed"
    """
    gen = generation_of(part)
    said = f"{gen} generation" if gen else "no calibrated generation, so the H100's efficiencies"
    return f"the {part}'s: {said}" + ("" if gen else ", borrowed")


def part_sentences(device: DeviceSpec) -> list[str]:
    """``figures from: FILE`` with the file's source, and the catalogue part whose per-part rates
    (calibrated efficiencies, SM count, published kernel and collective curves) the cost model
    reads; nothing for a part of the accelerator table."""
    if not device.origin:
        return []
    return [
        f"accelerator {device.name}: figures from: {device.origin} ({device.source}); per-part "
        f"rates (calibrated efficiencies, SM count, published kernel and collective curves) "
        f"{rates_of(device.part)}"
    ]


def nvlink_bound_said(p: RooflineParams) -> str:
    """The NVLink bound of a ring across domains (:func:`model.nvlink_bound.ring_busbw`), said
    on parts NCCL runs on: the ring moves at the slower of its members' NICs × the scale-out
    efficiency and NVLink × the scale-up efficiency, so NVLink binds wherever its figure is
    the lower."""
    if not nccl_arch(p.part):
        return ""
    return f", NVLink × {p.scaleup_efficiency:g} across domains where NVLink binds the ring"
