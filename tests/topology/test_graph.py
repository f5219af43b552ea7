"""Cluster graphs and ring bottleneck bandwidth."""

import math

import pytest

from trainplan.model.errors import InputError
from trainplan.topology.accelerators import get_accelerator
from trainplan.topology.graph import (
    bottleneck_bandwidth,
    build_cluster,
    cluster_for_device,
    widest_path_bandwidth,
)

NVL, NIC = 450e9, 50e9


def test_nodes_and_edges():
    g = build_cluster(16, 8, NVL, NIC)
    gpus = [n for n, k in g.nodes(data="kind") if k == "gpu"]
    assert len(gpus) == 16
    assert sorted(g.nodes[n]["rank"] for n in gpus) == list(range(16))
    assert sum(1 for _, k in g.nodes(data="kind") if k == "nvswitch") == 2
    assert all("bandwidth_bytes_per_s" in attrs for *_, attrs in g.edges(data=True))


def test_inside_one_domain_is_nvlink():
    g = build_cluster(64, 8, NVL, NIC)
    assert bottleneck_bandwidth(g, range(8)) == NVL
    assert widest_path_bandwidth(g, 8, 15) == NVL


def test_across_domains_is_scaleout():
    g = build_cluster(64, 8, NVL, NIC)
    assert bottleneck_bandwidth(g, range(16)) == NIC
    assert bottleneck_bandwidth(g, range(0, 64, 8)) == NIC


def test_oversubscription_halves_cross_pod():
    g = build_cluster(64, 8, NVL, NIC, pod_size=32, oversubscription=2.0)
    assert bottleneck_bandwidth(g, range(0, 32, 8)) == NIC  # same pod
    assert bottleneck_bandwidth(g, [0, 32]) == NIC / 2  # crosses pods
    assert bottleneck_bandwidth(g, range(0, 64, 8)) == NIC / 2


def test_rail_optimized_matches_fat_tree_for_rings():
    g = build_cluster(64, 8, NVL, NIC, rail_optimized=True, pod_size=32, oversubscription=2.0)
    assert bottleneck_bandwidth(g, range(8)) == NVL
    assert bottleneck_bandwidth(g, [3, 11]) == NIC  # same rail, same pod
    assert bottleneck_bandwidth(g, [3, 12]) == NIC  # other rail: NVLink hop then rail
    assert bottleneck_bandwidth(g, [3, 35]) == NIC / 2


def test_single_rank_and_errors():
    g = build_cluster(16, 8, NVL, NIC)
    assert bottleneck_bandwidth(g, [5]) == math.inf
    with pytest.raises(InputError, match="rank 99"):
        bottleneck_bandwidth(g, [0, 99])
    with pytest.raises(InputError, match="pod_size"):
        build_cluster(64, 8, NVL, NIC, pod_size=12)
    with pytest.raises(InputError, match="oversubscription"):
        build_cluster(64, 8, NVL, NIC, oversubscription=0.5)
    with pytest.raises(InputError, match="num_gpus"):
        build_cluster(0, 8, NVL, NIC)


def test_graph_is_frozen_and_cached():
    g = build_cluster(16, 8, NVL, NIC)
    assert g is build_cluster(16, 8, NVL, NIC)
    with pytest.raises(Exception, match="Frozen"):
        g.add_node("x")


def test_cluster_for_device():
    g = cluster_for_device(get_accelerator("GB200"), 144)
    assert bottleneck_bandwidth(g, range(72)) == 900e9
    assert bottleneck_bandwidth(g, [0, 72]) == 50e9
    with pytest.raises(InputError, match="scaleout"):
        cluster_for_device(get_accelerator("TPUv4"), 16)


def test_16k_gpus_bottlenecks():
    build_cluster.cache_clear()
    g = build_cluster(16384, 8, NVL, NIC, pod_size=1024, oversubscription=2.0)
    assert bottleneck_bandwidth(g, range(0, 16384, 8)) == NIC / 2
    assert bottleneck_bandwidth(g, range(8 * 100, 8 * 101)) == NVL
