"""The sentence of the answer's assumptions (:func:`interface.render.assumptions.assumptions`)
for an accelerator described in a file (``--gpu PATH.toml``, :mod:`topology.accelerator_file`):
where its figures come from, and which catalogue part's per-part rates stand for it."""

from __future__ import annotations

from trainplan.model.hardware import DeviceSpec
from trainplan.model.roofline import generation_of

__all__ = ["part_sentences", "rates_of"]


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
