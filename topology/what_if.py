"""Hardware what-ifs: a catalogue accelerator with some of its figures multiplied, as a new
:class:`~model.hardware.DeviceSpec` whose name says what changed (``H100-SXM[hbm×1.5]``).

The catalogue (``topology/accelerators.toml``, :func:`topology.accelerators.load_accelerators`)
is never changed: :func:`what_if_part` returns a new frozen value. The figures a what-if may
multiply (:data:`WHAT_IFS`) are the ones a Calculon system file holds and its co-design studies
vary (Isaev et al., "Calculon", SC'23; calculon-ai/calculon ``systems/h100_80g_nvl8.json``:
``matrix.tflops``, ``mem1.GiB`` and ``mem1.GBps``, ``networks[].bandwidth`` and ``size``;
``h100_80g_nvl256.json`` is the same part with a 256-GPU NVLink domain); every other figure —
the runtime reserve, the host link, the source — stays the catalogue part's. A what-if part
keeps the catalogue name in front, so the calibrated efficiencies the cost model keys by
generation (:func:`model.roofline.generation_of`, :func:`model.timing.kernel_efficiency_for`)
are the catalogue part's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

from trainplan.model.errors import InputError
from trainplan.model.hardware import DeviceSpec
from trainplan.topology.rate_bounds import rate_over_bound

__all__ = ["WhatIf", "WHAT_IFS", "what_if_part", "what_if_label"]


@dataclass(frozen=True, slots=True)
class WhatIf:
    """One figure a what-if multiplies."""

    key: str
    """The multiplier's name in a sweep grid (``[what_if]`` table, results column)."""
    tag: str
    """Its short name in the what-if part's name: ``H100-SXM[hbm×1.5]``."""
    fields: tuple[str, ...]
    """The :class:`DeviceSpec` fields multiplied (the first must be known for the part)."""
    whole: bool = False
    """Whether the result must be a whole number (GPUs, bytes)."""
    meaning: str = ""


WHAT_IFS: dict[str, WhatIf] = {
    w.key: w
    for w in (
        WhatIf(
            "hbm_capacity",
            "hbm",
            ("memory_bytes", "hbm_bytes"),
            True,
            "device memory (HBM) capacity, bytes; the runtime reserve stays the part's",
        ),
        WhatIf("hbm_bandwidth", "hbm_bw", ("hbm_bytes_per_s",), False, "HBM bandwidth, bytes/s"),
        WhatIf(
            "nvlink_domain",
            "nvlink",
            ("nvlink_domain",),
            True,
            "GPUs per scale-up (NVLink) domain: 8 × 9 = 72 is an NVL72 rack",
        ),
        WhatIf(
            "nvlink_bandwidth",
            "nvlink_bw",
            ("nvlink_bytes_per_s",),
            False,
            "scale-up bandwidth per GPU per direction, bytes/s",
        ),
        WhatIf(
            "scaleout_bandwidth",
            "scaleout_bw",
            ("scaleout_bytes_per_s",),
            False,
            "scale-out (NIC) bandwidth per GPU per direction, bytes/s",
        ),
        WhatIf(
            "peak_flops",
            "flops",
            ("peak_flops_per_s", "fp8_flops_per_s"),
            False,
            "dense tensor peak, BF16 and FP8 alike, FLOP/s",
        ),
    )
}
"""The what-ifs by their grid key, in the order a part's name lists them."""


def _shown(m: Fraction) -> str:
    """A multiplier as written in a name: ``1.5``, ``2``, ``0.75``."""
    return f"{float(m):g}"


def what_if_label(name: str, multipliers: dict[str, Fraction]) -> str:
    """The name of catalogue part ``name`` under ``multipliers`` (×1 ones left out):
    ``H100-SXM[hbm×1.5,flops×2]``; the catalogue name itself when every multiplier is 1.

    >>> what_if_label("H100-SXM", {"hbm_capacity": Fraction(3, 2), "peak_flops": Fraction(1)})
    'H100-SXM[hbm×1.5]'
    """
    tags = [
        f"{w.tag}×{_shown(multipliers[k])}"
        for k, w in WHAT_IFS.items()
        if multipliers.get(k, 1) != 1
    ]
    return f"{name}[{','.join(tags)}]" if tags else name


def _scaled(device: DeviceSpec, what: WhatIf, field: str, m: Fraction) -> int | float | None:
    value = getattr(device, field)
    if value is None:
        if field == what.fields[0]:
            raise InputError(
                f"what_if {what.key}: the {device.name} has no {field} in the accelerator table "
                "to multiply (trainplan gpus)"
            )
        return None
    scaled = Fraction(value) * m if isinstance(value, int) else Fraction(repr(value)) * m
    if not what.whole:
        return float(scaled)
    if field == "nvlink_domain" and scaled.denominator != 1:
        raise InputError(
            f"what_if {what.key}: ×{_shown(m)} of the {device.name}'s {value} GPUs is "
            f"{float(scaled):g}, not a whole number of GPUs"
        )
    if scaled < 1:
        raise InputError(f"what_if {what.key}: ×{_shown(m)} leaves the {device.name} under 1")
    return int(scaled)  # bytes: whole bytes, rounded down


def what_if_part(device: DeviceSpec, multipliers: dict[str, Fraction]) -> DeviceSpec:
    """``device`` with the figures of :data:`WHAT_IFS` multiplied, named by :func:`what_if_label`
    (``device`` itself when every multiplier is 1). Byte counts round down to whole bytes; an
    NVLink domain must come out a whole number of GPUs.

    Raises
    ------
    InputError
        An unknown what-if, a multiplier not above 0, a figure the part's row lacks (the
        MI250X's NVLink domain), a domain that is not whole, memory left no larger than the
        runtime reserve, or a bandwidth or FLOP rate above the bound every part described
        outside the table is held to (:func:`topology.rate_bounds.rate_over_bound`); one line
        naming the what-if, the multiplier and the rule.

    Examples
    --------
    >>> from trainplan.topology.accelerators import get_accelerator
    >>> h100 = get_accelerator("H100-SXM")
    >>> big = what_if_part(h100, {"hbm_capacity": Fraction(3, 2), "nvlink_domain": Fraction(9)})
    >>> big.name, big.physical_bytes == h100.physical_bytes * 3 // 2, big.nvlink_domain, h100.nvlink_domain
    ('H100-SXM[hbm×1.5,nvlink×9]', True, 72, 8)
    """
    changes: dict[str, int | float | None] = {}
    for key, m in multipliers.items():
        if key not in WHAT_IFS:
            raise InputError(f"what_if: unknown key {key!r} (known: {', '.join(WHAT_IFS)})")
        if m <= 0:
            raise InputError(f"what_if {key}: {_shown(m)} must be a multiplier above 0")
        if m != 1:
            what = WHAT_IFS[key]
            changes.update({f: _scaled(device, what, f, m) for f in what.fields})
    if not changes:
        return device
    physical = changes.get("hbm_bytes") or changes.get("memory_bytes") or device.physical_bytes
    if physical <= device.runtime_reserve_bytes:  # DeviceSpec would refuse it, naming the reserve
        raise InputError(
            f"what_if hbm_capacity: ×{_shown(multipliers['hbm_capacity'])} leaves the "
            f"{device.name} no memory above its {device.runtime_reserve_bytes / 2**30:.2f} GiB "
            "runtime reserve"
        )
    for key, m in multipliers.items():
        for field in WHAT_IFS[key].fields if m != 1 else ():
            over = rate_over_bound(field, changes.get(field))  # type: ignore[arg-type]
            if over is not None:
                raise InputError(f"what_if {key}: ×{_shown(m)} of the {device.name}: {over}")
    part = replace(device, **changes)  # type: ignore[arg-type]
    name = what_if_label(device.name, multipliers)
    source = f"{device.source}; what-if: {name} (figures multiplied, not a product)"
    return replace(part, name=name, source=source, status="derived")
