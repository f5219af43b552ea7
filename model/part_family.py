"""Which published part stands for a deployed one: a per-part table is keyed by the catalogue
name without a what-if suffix (:func:`catalogue_part`), and a published curve stands for the
parts of its family (:data:`FAMILY`).

**Families**: a published curve stands for the parts of its die and SM count
(:data:`FAMILY`): A100 (108 SMs), the 132-SM Hopper parts (H100 SXM, the 500 W H100 of
Meta's Grand Teton hosts, H800, H200, H100 NVL), Blackwell (B200, B300, GB200, GB300). A
kernel's efficiency is read as a fraction of the published part's dense BF16 peak and applied
to the part's own peak. Parts outside a family (H100 PCIe's 114 SMs, H20's 78, AMD, TPU,
Gaudi, Trainium) have no curve here: the clock keeps its constant figure and the output says so.
"""

from __future__ import annotations

__all__ = ["catalogue_part", "FAMILY"]


def catalogue_part(device_name: str) -> str:
    """The catalogue name a per-part table is keyed by: ``device_name`` without a what-if
    suffix (``"H100-SXM[flops×2]"`` → ``"H100-SXM"``, :func:`trainplan.topology.what_if.what_if_label`),
    so a part scaled or renamed on the command line keeps its published per-operation rates.

    >>> catalogue_part("H100-SXM[hbm×1.5]")
    'H100-SXM'
    """
    return device_name.split("[", 1)[0]


FAMILY: dict[str, str] = {
    "A100-40GB": "ampere",
    "A100-80GB": "ampere",
    "H100-SXM": "hopper",
    "H100-96GB-500W": "hopper",
    "H100-NVL": "hopper",
    "H800": "hopper",
    "H200": "hopper",
    "B200": "blackwell",
    "B300": "blackwell",
    "GB200": "blackwell",
    "GB300": "blackwell",
}
"""Parts whose kernels the published curves of their family stand for (same die and SM count:
A100 108, Hopper 132 — ``scenarios/kernels/gemm.toml`` SM counts; the Blackwell parts are one
die, rated by the power their system gives it)."""
