"""The tier a link's collectives are timed on is the placement's flag, never a coincidence of
figures (model/step_time.py ``link_time_of``): a group across NVLink domains is scale-out even
where its NIC figure equals NVLink's, and a group inside one domain is scale-up.

NCCL builds an inter-node ring that enters and leaves each node through a NET device whatever
the NIC's speed (NVIDIA/nccl 5067397c ``src/graph/search.cc`` ``ncclTopoCompute``), so the
figure a NIC has does not move the group onto NVLink."""

from __future__ import annotations

import numpy as np

from trainplan.model.step_time import link_time, link_time_of
from trainplan.topology.placement import AxisLink

NVLINK = 450e9
"""An H100's NVLink, bytes/s a GPU per direction (H100 SXM datasheet: 900 GB/s both ways)."""


def test_a_nic_as_fast_as_nvlink_stays_scale_out():
    """dp 16 over two 8-GPU H100 nodes (span 16, 8 members a node) with 449, 450 and 451 GB/s
    NICs: each is scale-out, at 8 × NIC capped at NVLink's 450 GB/s
    (:func:`model.step_time.rings_bandwidth`): 450 GB/s three times, not scale-up at exactly
    450. Before, ``bandwidth == scaleup_bandwidth`` made the 450 GB/s NIC scale-up and it was
    timed on the in-node curve (llama3-8b: 148.7 ms of dp time where 449 and 451 took 153.6)."""
    for nic in (449e9, 450e9, 451e9):
        assert link_time_of(nic, False, 16, 16, NVLINK, 8) == (NVLINK, False)


def test_inside_one_domain_is_scale_up_whatever_its_figure():
    """tp 8 in one node: the placement's ``nvlink`` flag makes it scale-up, at its own figure."""
    assert link_time_of(NVLINK, True, 8, 8, NVLINK, 8) == (NVLINK, True)
    assert link_time_of(300e9, True, 8, 8, NVLINK, 8) == (300e9, True)


def test_arrays_of_layouts_read_the_flag_element_by_element():
    """The search's columns: the same rule element-wise; a group of one rank has no link."""
    bw = np.array([449e9, 450e9, 451e9, 450e9])
    nvlink = np.array([False, False, False, True])
    size = np.array([16, 16, 16, 1])
    rate, scaleup = link_time_of(bw, nvlink, np.array([16, 16, 16, 8]), size, NVLINK, 8)
    assert rate.tolist() == [NVLINK, NVLINK, NVLINK, 0.0]
    assert scaleup.tolist() == [False, False, False, False]


def test_a_placed_link_keeps_its_kind():
    """An :class:`topology.placement.AxisLink` the placement named ``scale-out`` at NVLink's
    figure is timed scale-out; named ``nvlink``, scale-up."""
    out = link_time(AxisLink("dp", 16, 16, "scale-out", NVLINK, 8, 2), NVLINK, 8)
    inside = link_time(AxisLink("tp", 8, 8, "nvlink", NVLINK, 8, 1), NVLINK, 8)
    assert out is not None and inside is not None
    assert (out.bandwidth_bytes_per_s, out.scaleup) == (NVLINK, False)
    assert (inside.bandwidth_bytes_per_s, inside.scaleup) == (NVLINK, True)
