"""Where a ring across NVLink domains is bound by NVLink rather than by the NICs, and the bus
bandwidth a ring collective's bytes move at on its link: the one rule
:func:`model.roofline.collective_time` (and through it NCCL's tuner,
:func:`model.nccl_tuner.candidate_seconds`) and the optimizer step's gathers read.

A group of ``g`` ranks in each NVLink domain runs ``g`` rings across the domains at once, one
per NIC (:func:`model.step_time.rings_bandwidth`): its link is ``min(g × NIC, NVLink)`` a GPU.
Each channel of such a ring enters and leaves every GPU of its node over NVLink as well as over
the NIC, so NCCL's search (``ncclTopoCompute``, ``src/graph/search.cc`` at 5067397c) bounds the
channels by both: by the NIC and its PCIe path (``sm90SpeedArrayInter`` /
``sm100SpeedArrayInter``) and by the GPU's NVLinks at NCCL's per-link figure
(``ncclTopoNVLinkBw``, ``src/graph/topo.h``: 20.6 of NVLink 4's 25 GB/s, 40.1 of NVLink 5's
50; :func:`model.nccl_channels.inter_search`). ``ncclTopoTuneModel`` (``src/graph/tuning.cc``)
then takes the ring's bus bandwidth as the graph's ``nChannels × bwInter``, the least the
channels fit under every link they cross. So the ring moves at the slower of its two bounds:

* **The NICs**: ``g × NIC`` at the scale-out efficiency
  (:attr:`model.roofline.RooflineParams.scaleout_efficiency`, NCCL's ``NET_BW`` share of the
  line rate), capped at NVLink by :func:`model.step_time.rings_bandwidth`.
* **NVLink**: the GPU's NVLink at the scale-up efficiency
  (:attr:`model.roofline.RooflineParams.scaleup_efficiency`, NCCL's ``ncclTopoNVLinkBw`` share
  of the link): an H800's 8 × 20.6 = 164.8 GB/s carry 4 channels at 40 GB/s, 160 (200 × 0.8 =
  160); a GB200's 18 × 40.1 = 721.8, 16 at 45.1 = 721.6 (900 × 0.8 = 720); an H100's
  18 × 20.6 = 370.8, 8 at 45 = 360 (450 × 0.8 = 360) — so eight 50 GB/s NICs of an H100 node
  (8 × 50 × 0.96 = 384 under the NICs) run at NVLink's 360.

The slower of the two, not one rule picked by whether ``g × NIC`` reached NVLink: a faster NIC
only loosens the NIC's constraint in NCCL's search (it tries each speed from the fastest down and
keeps the first graph that fits), so the ring never slows as the NIC speeds up — an H100 node
finds 8 channels at 45 GB/s with 50 and with 100 GB/s NICs (:func:`model.nccl_channels.
inter_search`). Picking the rule by the cap ran 8 × 50 GB/s NICs at 384 GB/s and 8 × 100 at 360.

The NVLink a link carries is the cluster's (:attr:`model.roofline.LinkTime.nvlink_bytes_per_s`,
a what-if's included); 0 where unknown (a part without NVLink): the NIC's rule. The bound is
NCCL's search's, so a part NCCL does not run on (:func:`model.nccl_tuner.nccl_arch` empty:
Gaudi under HCCL, TPUs under XLA, AMD under RCCL) keeps the NIC's rule on the capped link.
Units: bytes/s; element-wise (:mod:`model.xp`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainplan.model.nccl_tuner import nccl_arch
from trainplan.model.xp import logical_not, minimum, where

if TYPE_CHECKING:
    from trainplan.model.roofline import RooflineParams

__all__ = ["ring_busbw", "ring_caps"]


def ring_busbw(bandwidth: Any, scaleup: Any, nvlink: Any, p: RooflineParams) -> Any:
    """Bytes/s of bus bandwidth a ring collective's Simple protocol moves at on a link of
    ``bandwidth`` bytes/s a GPU (module docstring): the link at ``p``'s scale-up efficiency
    inside an NVLink domain (``scaleup``); across domains the link at its scale-out efficiency,
    on a part NCCL runs on (``p.part``, :func:`model.nccl_tuner.nccl_arch`) at most the
    cluster's NVLink ``nvlink`` (bytes/s; 0: unknown) at the scale-up efficiency. Element-wise.

    An H800 node's eight 50 GB/s NICs under its 200 GB/s of NVLink: 200 × 0.8 = 160 GB/s
    (NCCL: 8 channels at 20); an H100 node's under its 450: min(400 × 0.96, 450 × 0.8) = 360
    (NCCL: 8 at 45), with 100 GB/s NICs (the link capped at 450) the same 360; a Gaudi 3
    node's eight 75 GB/s ports capped at its 525 GB/s of scale-up (no NCCL): 525 × 0.96 = 504:

    >>> from trainplan.model.op_rates import deployed_params as params
    >>> ring_busbw(200e9, False, 200e9, params("H800")) / 1e9
    160.0
    >>> ring_busbw(400e9, False, 450e9, params("H100-SXM")) / 1e9
    360.0
    >>> ring_busbw(450e9, False, 450e9, params("H100-SXM")) / 1e9
    360.0
    >>> ring_busbw(400e9, False, 0.0, params("H100-SXM")) / 1e9  # NVLink unknown: the NICs
    384.0
    >>> ring_busbw(525e9, False, 525e9, params("Gaudi3")) / 1e9
    504.0
    """
    nvlink = nvlink if nccl_arch(p.part) else 0.0
    out = bandwidth * where(scaleup, p.scaleup_efficiency, p.scaleout_efficiency)
    across = logical_not(scaleup) & (nvlink > 0)
    return where(across, minimum(out, nvlink * p.scaleup_efficiency), out)


def ring_caps(scaleup: Any, bandwidth: Any, nic: Any, nvlink: Any) -> tuple[Any, Any]:
    """``(NIC, NVLink)`` bytes/s a direction a ring's clock reads
    (:attr:`model.roofline.LinkTime.nic_bytes_per_s`, :attr:`~model.roofline.LinkTime.
    nvlink_bytes_per_s`): one GPU's NIC ``nic`` and the part's NVLink ``nvlink`` on a link
    across NVLink domains; ``(0, 0)`` where they change nothing — a scale-up link (``scaleup``)
    or none (``bandwidth`` ≤ 0) — so they add no distinct clocks to the search's tables. The one
    rule of the search's columns (:func:`model.terms.fields.link_caps`) and the rollout
    engines' collectives (:func:`model.rollout_reduce.engine_all_reduce`). Element-wise.

    >>> ring_caps(False, 400e9, 50e9, 450e9), ring_caps(True, 450e9, 50e9, 450e9)
    ((50000000000.0, 450000000000.0), (0.0, 0.0))
    """
    off = scaleup | (bandwidth <= 0)
    return where(off, 0.0, nic), where(off, 0.0, nvlink)
