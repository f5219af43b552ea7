"""An accelerator named by its family and memory size (``H100-80GB``, ``H200 141GB``): the
catalogue parts of that family with that many GB of memory (:func:`sized_names`), so that
:func:`topology.accelerators.get_accelerator` takes the one there is, or names the several
(the 80 GB H100 is the SXM or the PCIe part), rather than suggesting parts of other sizes."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

__all__ = ["sized_names"]

_SIZED = re.compile(r"^(.+?)[\s\-_]+(\d+)\s*GB$", re.IGNORECASE)
"""A name ending in a whole number of GB after its family and a separator (``H100-80GB``,
``H200 141GB``)."""


def sized_names(name: str, memory_bytes: Mapping[str, int], key: Callable[[str], str]) -> list[str]:
    """The catalogue names (``memory_bytes``: name → bytes of memory) whose normalised
    spelling (``key``) starts with ``name``'s family and whose memory is its GB (10⁹ bytes, as
    the datasheets give them, or GiB, rounded); [] when ``name`` ends in no size.

    >>> parts = {"H100-SXM": 80 * 10**9, "H100-PCIe": 80 * 10**9, "H100-NVL": 94 * 10**9}
    >>> sized_names("H100-80GB", parts, str.lower), sized_names("h100 94gb", parts, str.lower)
    (['H100-SXM', 'H100-PCIe'], ['H100-NVL'])
    >>> sized_names("H100", parts, str.lower)
    []
    """
    found = _SIZED.match(name.strip())
    if found is None:
        return []
    family, size = key(found.group(1)), int(found.group(2))
    return [
        n
        for n, b in memory_bytes.items()
        if family and key(n).startswith(family) and size in (round(b / 10**9), round(b / 2**30))
    ]
