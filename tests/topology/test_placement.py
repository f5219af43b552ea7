"""Rank groups, spans, NVLink fit and per-axis links."""

import pytest

from trainplan.model.errors import LayoutError
from trainplan.model.hardware import ClusterLinks
from trainplan.topology.graph import build_cluster
from trainplan.topology.placement import (
    AXES,
    axis_groups,
    axis_links,
    axis_span,
    fits_in_domain,
    world_size,
)

LLAMA3_405B = {"tp": 8, "pp": 16, "dp": 128}  # Llama 3 paper, Table 4: 16,384 GPUs
DEEPSEEK_V3 = {"tp": 1, "pp": 16, "dp": 128, "ep": 64}  # DeepSeek-V3 report §3.2: 2,048 GPUs
H100 = ClusterLinks(nvlink_domain=8, nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9)


def test_world_size_ignores_ep():
    assert world_size(LLAMA3_405B) == 16384
    assert world_size(DEEPSEEK_V3) == 2048


def test_llama3_405b_spans():
    spans = {a: axis_span(LLAMA3_405B, a) for a in ("tp", "cp", "dp", "pp")}
    assert spans == {"tp": 8, "cp": 8, "dp": 1024, "pp": 16384}
    assert fits_in_domain(LLAMA3_405B, "tp", 8)
    assert not fits_in_domain(LLAMA3_405B, "dp", 8)
    assert not fits_in_domain(LLAMA3_405B, "pp", 8)


def test_deepseek_v3_ep_goes_scale_out():
    assert axis_span(DEEPSEEK_V3, "ep") == 64
    assert not fits_in_domain(DEEPSEEK_V3, "ep", 8)
    links = axis_links(DEEPSEEK_V3, H100)
    assert links["ep"].link == "scale-out"
    assert links["ep"].bandwidth_bytes_per_s == 50e9
    assert links["tp"].link == "none" and links["tp"].bandwidth_bytes_per_s is None


def test_default_order_spans():
    d = {"tp": 2, "cp": 3, "ep": 2, "dp": 4, "pp": 5}
    spans = {a: axis_span(d, a) for a in AXES}
    assert spans == {"tp": 2, "cp": 6, "ep": 4, "dp": 24, "dp_cp": 24, "edp": 24, "pp": 120}


@pytest.mark.parametrize("axis", AXES)
def test_groups_partition_the_ranks(axis):
    d = {"tp": 2, "cp": 2, "ep": 2, "dp": 4, "pp": 3}
    groups = axis_groups(d, axis)
    flat = sorted(r for g in groups for r in g)
    assert flat == list(range(world_size(d)))
    size = {"dp_cp": 8, "edp": 4}.get(axis) or d[axis]  # edp: cp·dp/ep = 2·4/2
    assert all(len(g) == size for g in groups)
    assert all(max(g) - min(g) < axis_span(d, axis) for g in groups)


def test_megatron_groups():
    d = {"tp": 2, "cp": 2, "dp": 2, "ep": 2}
    assert axis_groups(d, "tp")[0] == [0, 1]
    assert axis_groups(d, "cp")[0] == [0, 2]
    assert axis_groups(d, "dp")[0] == [0, 4]
    assert axis_groups(d, "dp_cp")[0] == [0, 2, 4, 6]
    assert axis_groups(d, "ep")[:2] == [[0, 2], [1, 3]]
    # Megatron-Core's expert order etp-ep-edp: etp 2 at stride 1, ep 2 at stride 2, so the
    # expert data-parallel group's cp·dp/ep = 2 ranks stride etp·ep = 4
    assert axis_groups(d, "edp") == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_expert_dp_group_placement():
    """The expert data-parallel group (``edp``) as each rank order and etp lay it (the dense
    group, ``dp_cp``, strides tp)."""
    # dp 32, ep 8, tp 1: ep groups 8 consecutive ranks, so edp = 32/8 = 4 ranks at stride 8
    assert axis_groups({"dp": 32, "ep": 8}, "edp")[:2] == [[0, 8, 16, 24], [1, 9, 17, 25]]
    # ep after dp (tp-cp-dp-ep-pp): ep groups stride cp·dp/ep = 8, edp is 8 consecutive ranks
    d, order = {"dp": 16, "ep": 2}, ("tp", "cp", "dp", "ep", "pp")
    assert axis_groups(d, "edp", order) == [list(range(8)), list(range(8, 16))]
    # etp 1 under tp 4 (Megatron-Core's etp-ep-edp over the tp·cp·dp block of 16): edp
    # = 16/(1·4) = 4 ranks at stride etp·ep = 4
    d = {"tp": 4, "dp": 4, "ep": 4, "etp": 1}
    assert axis_groups(d, "edp") == [[0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]]


def test_expert_dp_link_one_nic():
    """qwen3-30b-a3b's dp 256 × ep 8 on 8-GPU nodes: the dense group has 8 members a node, the
    expert group (32 ranks at stride 8, span 256) one: 256·32 // 256 … 8·32 // 256 = 1."""
    links = axis_links({"dp": 256, "ep": 8}, H100)
    assert (links["dp_cp"].group_size, links["dp_cp"].span) == (256, 256)
    assert (links["edp"].group_size, links["edp"].span) == (32, 256)
    assert links["edp"].link == "scale-out" and links["edp"].bandwidth_bytes_per_s == 50e9


def test_two_tier_links_agree_with_fits_in_domain():
    d = {"tp": 4, "cp": 2, "ep": 4, "dp": 8, "pp": 2}
    for axis, link in axis_links(d, H100).items():
        if link.group_size == 1:
            continue
        assert (link.link == "nvlink") == fits_in_domain(d, axis, 8)


def test_graph_links_report_first_group_bottleneck():
    g = build_cluster(2048, 8, 450e9, 50e9, pod_size=1024, oversubscription=2.0)
    d = {"tp": 8, "pp": 2, "dp": 128}
    links = axis_links(d, g)
    assert (links["tp"].link, links["tp"].bandwidth_bytes_per_s) == ("nvlink", 450e9)
    assert (links["dp"].link, links["dp"].bandwidth_bytes_per_s) == ("scale-out", 50e9)
    assert links["pp"].bandwidth_bytes_per_s == 25e9  # stages in different pods


def test_bad_layouts():
    with pytest.raises(LayoutError, match="ep: 3 must divide dp·cp"):
        world_size({"dp": 4, "ep": 3})
    with pytest.raises(LayoutError, match="tp: 0"):
        axis_span({"tp": 0}, "tp")
    with pytest.raises(LayoutError, match="unknown axis 'sp'"):
        axis_groups({"tp": 2}, "sp")
    with pytest.raises(LayoutError, match="rank_order"):
        axis_span({"tp": 2}, "tp", ("tp", "dp", "pp"))
    with pytest.raises(LayoutError, match="needs G = 32"):
        axis_links({"tp": 8, "dp": 4}, build_cluster(16, 8, 450e9, 50e9))
