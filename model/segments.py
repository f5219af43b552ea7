"""Where a job's ranks lie on a part whose NVLink domain spans several host nodes (GB200 and
GB300 NVL72: 18 compute trays of 4 GPUs a rack): in Slurm segments, as NVIDIA's own benchmark
launcher places its jobs, not filling 72-GPU racks edge to edge.

Sources. Megatron-Bridge ``scripts/performance/utils/executors.py`` ``slurm_executor`` (NVIDIA's
launcher of its published performance runs, at 067f987df): on nodes of 4 GPUs it passes sbatch
``--segment`` = the job's node count where that is at most 18 (one rack's trays), else the
largest divisor of the node count at most 18. NVIDIA's developer blog "Unlock exascale
performance on NVIDIA GB200 NVL72 with Slurm topology-aware job scheduling" gives the same size
for large jobs (segment 16 for jobs of 128+ GPUs, MoE training its example). Slurm's topology/
block plugin (Slurm 23.11) and sbatch's ``--segment``: a segment's nodes lie in one base block
(here one rack's NVLink domain), the segments of one job need not share a block, and the job's
node count divides into whole segments.

The rule (:func:`advised_segment_gpus`), for a job on ``n`` nodes of a part whose NVLink domain
holds ``t`` nodes (18 on NVL72): ``n`` itself where ``n ≤ t`` (the whole job in one rack), else
the largest divisor of ``n`` at most ``t``. The job's ranks fill the segments in rank order, so
the placement's domain is the segment (:attr:`model.hardware.DeviceSpec.placement_domain`, read
by :func:`model.rank_groups.in_one_domain` through :class:`model.hardware.ClusterLinks` and every
term that places a group): a group on NVLink when it lies in one segment, else on the scale-out
fabric (two segments may lie in two racks). ``segment_gpus`` (``--set segment_gpus=…``) replaces
the launcher's choice; ``--set nvlink_domain=…`` alone states whole domains the job owns (no
segments).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trainplan.model.errors import InputError
from trainplan.model.hardware import DeviceSpec
from trainplan.model.rank_groups import in_one_domain
from trainplan.model.units import shown_number

__all__ = [
    "SEGMENT_PARTS", "advised_segment_gpus", "placed_for",
    "segment_notes",
]  # fmt: skip

SEGMENT_PARTS: tuple[str, ...] = ("GB200", "GB300")
"""Parts whose NVLink domain is a rack of several host nodes that Slurm's topology/block plugin
places jobs on in segments (the blog above: GB200 NVL72, and GB300 NVL72 built the same way)."""


def advised_segment_gpus(num_gpus: int, gpus_per_node: int, domain: int) -> int:
    """GPUs of the segment NVIDIA's launcher gives a job of ``num_gpus`` GPUs on nodes of
    ``gpus_per_node`` in NVLink domains of ``domain`` GPUs (module docstring): the whole job
    where its nodes fit one domain, else the largest divisor of its nodes at most a domain's.
    Units: GPUs.

    >>> advised_segment_gpus(4096, 4, 72), advised_segment_gpus(128, 4, 72)
    (64, 64)
    >>> advised_segment_gpus(64, 4, 72), advised_segment_gpus(72, 4, 72)
    (64, 72)
    >>> advised_segment_gpus(144, 4, 72), advised_segment_gpus(136, 4, 72)
    (72, 68)
    """
    nodes = -(-num_gpus // gpus_per_node)
    most = max(1, domain // gpus_per_node)
    segment = nodes if nodes <= most else max(s for s in range(1, most + 1) if nodes % s == 0)
    return segment * gpus_per_node


def placed_for(device: DeviceSpec, num_gpus: int | None, strict: bool = True) -> DeviceSpec:
    """``device`` with :attr:`~model.hardware.DeviceSpec.placement_segment` set for a job of
    ``num_gpus`` GPUs: its ``segment_gpus`` where given (0: none, ranks fill whole domains; not
    applied on a part whose NVLink domain is one host's, :func:`_multi_node`),
    else NVIDIA's launcher's (:func:`advised_segment_gpus`) on a part of :data:`SEGMENT_PARTS` whose
    domain spans several nodes, else none. None ``num_gpus``: unchanged. ``strict`` false: a
    ``segment_gpus`` that does not divide ``num_gpus`` is taken (a case whose job size is not
    known yet: the search's, placed again for each job, :meth:`optimizer.case.Case.placed`).

    Raises
    ------
    InputError
        ``segment_gpus`` not a whole number of nodes, above the NVLink domain, or (``strict``)
        not dividing the job (Slurm's ``--segment`` splits a job's nodes into whole segments).

    >>> from trainplan.topology.accelerators import get_accelerator
    >>> gb200 = get_accelerator("GB200")
    >>> placed_for(gb200, 4096).placement_domain, placed_for(gb200, 64).placement_domain
    (64, 64)
    >>> placed_for(get_accelerator("H100-SXM"), 4096).placement_domain
    8
    """
    if num_gpus is None:
        return device
    given = device.segment_gpus
    if given is None:
        domain, gpn = device.nvlink_domain or 0, device.gpus_per_node
        advised = device.part in SEGMENT_PARTS and domain > gpn
        segment = advised_segment_gpus(num_gpus, gpn, domain) if advised else 0
        return replace(device, placement_segment=segment)
    if given and not _multi_node(device):
        return replace(device, placement_segment=0)  # no segments on one-host domains: note
    if given:
        _check_segment(device, given, num_gpus if strict else given)
    return replace(device, placement_segment=given)


def _multi_node(device: DeviceSpec) -> bool:
    """Whether the part's NVLink domain spans several host nodes (an NVL72 rack): the parts a
    Slurm segment applies to; on others (an HGX host's 8-GPU domain) a given ``segment_gpus``
    is not applied (a search over several parts takes it for those that have one; the note of
    :func:`segment_notes` says so)."""
    return (device.nvlink_domain or 0) > device.gpus_per_node


def _check_segment(device: DeviceSpec, segment: int, num_gpus: int) -> None:
    """Refuse a ``segment_gpus`` that Slurm could not place (:func:`placed_for`)."""
    gpn, domain = device.gpus_per_node, device.nvlink_domain
    if segment % gpn:
        raise InputError(
            f"segment_gpus: {shown_number(segment)} must be a whole number of the {device.name}'s nodes of "
            f"{gpn} GPUs (Slurm's --segment counts nodes)"
        )
    if domain is not None and segment > domain:
        raise InputError(
            f"segment_gpus: {shown_number(segment)} must be at most the NVLink domain of {domain} GPUs (a "
            "segment lies in one domain)"
        )
    if num_gpus % segment:
        raise InputError(
            f"segment_gpus: {shown_number(segment)} must divide the job's {num_gpus} GPUs (Slurm's --segment "
            "splits a job's nodes into whole segments)"
        )


def segment_notes(device: DeviceSpec, links: Any, total: int) -> list[str]:
    """The lines that say where segments decided an axis's link: for each axis of ``links``
    (:class:`topology.placement.AxisLink`, or None) whose groups a whole-domain placement
    would put on the other link (:func:`model.rank_groups.in_one_domain` of its span over the
    segment and over the domain), the link and the assumption, with the setting that changes
    it. Empty where no segment applies, the job is one segment, or no link moves."""
    segment, domain = device.placement_segment, device.nvlink_domain
    if device.segment_gpus and not _multi_node(device):
        return [
            f"segment_gpus {shown_number(device.segment_gpus)} not applied on the {device.name}: "
            f"its NVLink domain ({domain or 1} GPUs) lies in one host; a segment applies to "
            "parts whose domain spans several nodes"
        ]
    if not links or not segment or not domain or segment >= domain or total <= segment:
        return []
    moved = []
    for axis, link in links.items():
        if link is None or link.group_size < 2 or axis == "dp_cp" and "dp" in links:
            continue
        by_segment = bool(in_one_domain(link.span, total, segment))
        if by_segment != bool(in_one_domain(link.span, total, domain)):
            moved.append(f"{axis} {link.group_size} on {'NVLink' if by_segment else 'scale-out'}")
    if not moved:
        return []
    return [
        f"{', '.join(moved)}: ranks fill Slurm segments of {segment} GPUs, each in one "
        f"{domain}-GPU NVLink domain ({_words(device, total)}); `segment_gpus`=N for "
        f"another segment, or `nvlink_domain`={domain} if the job owns whole domains"
    ]


def _words(device: DeviceSpec, total: int) -> str:
    """Where the segment comes from: NVIDIA's launcher for the job's size, or the user's."""
    if device.segment_gpus is not None:
        return "`segment_gpus` as given"
    nodes = device.placement_segment // device.gpus_per_node
    return f"as NVIDIA's launcher places a job of {total} GPUs: --segment={nodes}"
