"""NCCL's node on a multi-node NVLink domain is the NVLink clique, not the 4-GPU tray
(:func:`model.rank_groups.nccl_node_size`, NVIDIA/nccl 5067397c ``src/graph/topo.cc``
``ncclTopoGetSystem``: under ``comm->MNNVL`` the topologies of the clique's ranks are fused,
``nLocalRanks = comm->clique.size``), so the channels a collective runs on (and the SMs it
holds) count the group's ranks in the clique; and the step does not fall as the NIC slows where
NCCL's channel count does not change with it."""

from __future__ import annotations

import pytest

from trainplan.interface.inputs import build_case
from trainplan.model.nccl_channels import collective_channels, group_channels
from trainplan.model.nccl_search import nvlink_node
from trainplan.model.rank_groups import nccl_node_size

GB200_405B = {"model": "llama3-405b", "gpu": "GB200", "num_gpus": 512, "dp": 128, "tp": 4,
              "zero_stage": 3, "global_batch_size": 2048}  # fmt: skip
H100_70B = {"model": "llama3-70b", "gpu": "H100-SXM", "num_gpus": 64, "dp": 8, "tp": 8,
            "zero_stage": 1, "global_batch_size": 256}  # fmt: skip


def test_nccl_node_is_the_clique_on_mnnvl_and_the_host_elsewhere() -> None:
    """GB200: trays of 4, the job's 64-GPU segment (the placement's domain) is the clique;
    H100: the 8-GPU host is the NVLink domain; a part with NVLink pairs in an 8-GPU host: the
    host (NCCL fuses the host's GPUs whatever their NVLinks)."""
    assert nccl_node_size(4, 64) == 64
    assert nccl_node_size(4, 72) == 72
    assert nccl_node_size(8, 8) == 8
    assert nccl_node_size(8, 2) == 8
    assert nccl_node_size(8, None) == 8


def test_gb200_405b_dp_channels_by_clique() -> None:
    """dp 128 at stride 4 (tp 4 innermost) over 512 GB200s in 8 segments of 64: 16 members in
    each of 8 cliques, one a tray. NVIDIA/nccl 5067397c, ``src/graph/search.cc``
    ``ncclTopoCompute`` on the fused clique: one search channel per member's NIC at 48 GB/s
    (400 Gb/s = 50 GB/s, under ``sm100SpeedArrayInter``'s 80: 48) → 16;
    ``ncclTopoDupChannels``: ``ccMin > 80 && bwIntra 48 < 50 && nChannels 16 > 4`` → no
    doubling; ``src/graph/connect.cc`` ``ncclTopoPostset`` doubles → 32; 32 ≥ 16, no further
    doubling. Counted per tray (the bug) it was 1 a node on 128 nodes: 1 → 2 → 4."""
    nvl5 = nvlink_node("GB200", 900e9)
    assert collective_channels(16, 8, 50e9, nvl5) == 32
    assert collective_channels(1, 128, 50e9, nvl5) == 4
    assert group_channels(128, 512, nccl_node_size(4, 64), 512, False, 50e9, nvl5) == 32
    assert group_channels(128, 512, 4, 512, False, 50e9, nvl5) == 4
    est = build_case(GB200_405B).evaluate()
    assert est.time_terms is not None
    # 32 blocks of the GB200's 148 SMs (model.comm_sms.held_sm_share): 0.3116, not 4's 0.0671
    assert dict(est.time_terms.sm_shares)["dp"] == pytest.approx(0.31161, abs=1e-5)


def test_h100_dp_channels_one_rank_a_host() -> None:
    """dp 8 at stride 8 (tp 8) over 64 H100s: one member on each of 8 hosts (the host is the
    NVLink domain, nothing changes): 1 search channel at 48 GB/s, doubled (48 ≥ 25, 1 ≤ 4) to
    2, ``ncclTopoPostset`` 4, 4 < 16 at 24 GB/s a channel (not > 45): 4. At 25 GB/s NICs the
    speed is 24, no ``ncclTopoDupChannels`` (bwIntra < 25): 1 → 2."""
    h100 = nvlink_node("H100-SXM", 450e9)
    node = nccl_node_size(8, 8)
    assert group_channels(8, 64, node, 64, False, 50e9, h100) == 4
    assert group_channels(8, 64, node, 64, False, 25e9, h100) == 2


@pytest.mark.parametrize("case", [GB200_405B, H100_70B], ids=["gb200-405b", "h100-70b"])
def test_step_does_not_fall_as_the_nic_slows(case: dict[str, object]) -> None:
    """The step over scale-out NICs of 10 … 50 GB/s never falls as the NIC slows. (Where NCCL
    itself halves its channels on a slower NIC, below ``ncclTopoDupChannels``' 25 GB/s, the
    SMs held fall with them and the step can fall: tests/interface/test_nic_channels_charge.py
    pins that case, faithful to NCCL.)"""
    steps = [
        build_case({**case, "scaleout_gbps": x}).evaluate().step_s for x in (10, 20, 25, 30, 40, 50)
    ]
    assert all(a >= b for a, b in zip(steps, steps[1:], strict=False)), steps


def test_segment_zero_is_whole_domains_and_one_host_domains_take_no_segment() -> None:
    """``segment_gpus`` 0: no segments, the ranks fill whole NVLink domains, the same step as
    ``nvlink_domain`` 72 alone (model/hardware.py ``DeviceSpec.segment_gpus``); on an H100
    (its 8-GPU domain in one host) a segment of 32 is not applied and a note says so, where it
    was refused (a search over GB200 and H100 with ``segment_gpus`` 32 was refused for the
    H100)."""
    base = {"model": "llama3-70b", "gpu": "GB200", "num_gpus": 128, "dp": 16, "tp": 8}
    zero = build_case({**base, "segment_gpus": 0}).evaluate()
    racks = build_case({**base, "nvlink_domain": 72}).evaluate()
    assert zero.step_s == racks.step_s
    h100 = {"model": "llama3-70b", "gpu": "H100-SXM", "num_gpus": 64, "dp": 8, "tp": 8}
    est = build_case({**h100, "segment_gpus": 32}).evaluate()
    assert est.step_s == build_case(h100).evaluate().step_s
    assert any(n.startswith("segment_gpus 32 not applied on the H100-SXM") for n in est.notes)
