"""A parallel group whose ranks straddle two NVLink domains rides the scale-out fabric
(:func:`model.rank_groups.in_one_domain`, :func:`model.rank_groups.fewest_in_domain`): the
evaluator's links (:func:`topology.placement.axis_links`, two tiers and graph), the search's
columns (:class:`optimizer.columns.ShapeColumns`) and the CLI, on the two cases a user found."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.cli_runs import run_many
from trainplan.model.estimate import objective_ns
from trainplan.model.hardware import ClusterLinks
from trainplan.model.layout import Recompute
from trainplan.model.pipeline import Schedule
from trainplan.model.rank_groups import fewest_in_domain, in_one_domain
from trainplan.model.step_time import link_time
from trainplan.optimizer.case import Case
from trainplan.optimizer.columns import ShapeColumns
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.search import NS_TOLERANCE
from trainplan.optimizer.space import SearchSpace, Shape
from trainplan.optimizer.tables import build_tables
from trainplan.topology.accelerators import get_accelerator
from trainplan.topology.graph import build_cluster
from trainplan.topology.placement import axis_groups, axis_links, fits_in_domain

GB200 = get_accelerator("GB200")
NVL72 = ClusterLinks.from_device(GB200, 144)
# cp 2 after tp 8 on 144 GB200s: cp's groups are blocks of tp·cp = 16 consecutive ranks
LLAMA_CP = {"tp": 8, "cp": 2, "dp": 9}
# tp 2 × pp 2 on 12 GPUs in domains of 3: tp's groups {0,1},{2,3},…; domains {0,1,2},{3,4,5},…
THREES = ClusterLinks(nvlink_domain=3, nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9)
TP2 = {"tp": 2, "pp": 2, "dp": 3}


def test_cp_block_64_to_79_straddles_the_nvl72_domains():
    """By hand: the domains are ranks 0–71 and 72–143; cp's blocks of 16 start at 0, 16, …, 64,
    … and 72 / 16 = 4.5, so the fifth block, ranks 64–79, holds ranks of both: its cp groups
    are {64 + t, 72 + t} (t < 8), one rank on each side, each ring hop through the NICs. Before
    the rule cp was charged NVLink (span 16 ≤ 72): 900 GB/s; now the scale-out NIC's 50 GB/s
    (the GB200 row's ConnectX-7, 400 Gb/s) with one rank a domain, so one NIC: 50 GB/s.
    tp (blocks of 8: 72 / 8 = 9) and the dp·cp group (144 ranks, 9 in each domain at stride 8)
    are as before."""
    assert [64, 72] in axis_groups(LLAMA_CP, "cp") and [56, 64] not in axis_groups(LLAMA_CP, "cp")
    assert (NVL72.nvlink_domain, NVL72.nvlink_bytes_per_s, NVL72.scaleout_bytes_per_s) == (
        72, 900e9, 50e9,
    )  # fmt: skip
    links = axis_links(LLAMA_CP, NVL72)
    cp, tp, dp = links["cp"], links["tp"], links["dp_cp"]
    assert (cp.link, cp.span, cp.bandwidth_bytes_per_s, cp.per_domain) == ("scale-out", 16, 50e9, 1)
    assert (tp.link, tp.bandwidth_bytes_per_s, tp.per_domain) == ("nvlink", 900e9, 8)
    assert (dp.link, dp.bandwidth_bytes_per_s, dp.per_domain) == ("scale-out", 50e9, 9)
    assert not fits_in_domain(LLAMA_CP, "cp", 72) and fits_in_domain(LLAMA_CP, "tp", 72)
    # the ring's rate: one NIC (g = 1), not g = 2 (the span's closed form, 72·2 // 16 ≥ 2)
    assert link_time(cp, 900e9, 72).bandwidth_bytes_per_s == 50e9
    # the graph: the least bottleneck over every cp group, ranks 64 and 72 through their NICs
    graph = axis_links(LLAMA_CP, build_cluster(144, 72, 900e9, 50e9))
    assert (graph["cp"].link, graph["cp"].bandwidth_bytes_per_s) == ("scale-out", 50e9)
    assert (graph["tp"].link, graph["tp"].bandwidth_bytes_per_s) == ("nvlink", 900e9)


def test_tp_2_straddles_domains_of_3():
    """By hand: tp's groups {0,1}, {2,3}, {4,5}, … against domains {0,1,2}, {3,4,5}, …: {2,3}
    has rank 2 in the first and rank 3 in the second (3 % 2 ≠ 0), so tp rides the NICs, one
    rank a domain: 50 GB/s where it was charged NVLink's 450. dp (stride 2, 3 ranks: {0,2,4},
    domains 0, 0, 1) straddles too, one rank in domain 1: 50 GB/s × 1."""
    assert [2, 3] in axis_groups(TP2, "tp")
    links = axis_links(TP2, THREES)
    assert (links["tp"].link, links["tp"].bandwidth_bytes_per_s, links["tp"].per_domain) == (
        "scale-out", 50e9, 1,
    )  # fmt: skip
    assert (links["dp"].link, links["dp"].per_domain) == ("scale-out", 1)
    assert link_time(links["tp"], 450e9, 3).bandwidth_bytes_per_s == 50e9
    graph = axis_links(TP2, build_cluster(12, 3, 450e9, 50e9))
    assert (graph["tp"].link, graph["tp"].bandwidth_bytes_per_s) == ("scale-out", 50e9)


def test_aligned_blocks_and_one_domain_stay_on_nvlink():
    """span ≤ domain and domain % span = 0 (tp 8 in 72), or the whole layout in one domain
    (cp 2 after tp 8 on 64 GB200s: 64 ≤ 72): NVLink; the closed form of aligned layouts
    (dp 32 at stride 8 over domains of 8: one rank each; dp 8 at stride 1 in 32: 8 each)."""
    assert in_one_domain(8, 144, 72) and in_one_domain(16, 64, 72)
    assert not in_one_domain(16, 144, 72) and not in_one_domain(2, 12, 3)
    assert fewest_in_domain(8, 32, 256, 8) == 1 and fewest_in_domain(1, 32, 256, 8) == 8
    links = axis_links({"tp": 8, "cp": 2, "dp": 4}, NVL72)
    assert (links["cp"].link, links["cp"].bandwidth_bytes_per_s) == ("nvlink", 900e9)


def _ring_rate(group: list[int], domain: int, nvlink: float, nic: float) -> float:
    """A ring over ``group``'s rate by hand: NVLink inside one domain; else each domain's
    members leave through their own NICs, so the fewest members any domain holds bound it
    (NCCL's inter-node rings, one NIC a channel), capped at NVLink."""
    counts: dict[int, int] = {}
    for r in group:
        counts[r // domain] = counts.get(r // domain, 0) + 1
    return nvlink if len(counts) == 1 else min(nvlink, nic * min(counts.values()))


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([1, 2, 3, 4, 8]),
    st.sampled_from([1, 2, 3, 4]),
    st.sampled_from([1, 2, 3, 4, 6]),
    st.sampled_from([1, 2, 3]),
    st.integers(1, 20),
)
def test_the_link_charged_is_never_faster_than_the_slowest_group(tp, cp, dp, pp, domain):
    """Over degrees and domain sizes: each axis's charged rate (the placement's link through
    :func:`model.step_time.link_time`) is the slowest of its groups' rates by hand — never
    faster — and ``nvlink`` exactly when every group lies in one domain; the domains NCCL counts
    (``comm->nNodes``) those its slowest group's ranks lie on, and the other groups' placement
    (:func:`model.rank_groups.other_placement`); the search's columns say the
    same."""
    degrees = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    links = ClusterLinks(nvlink_domain=domain, nvlink_bytes_per_s=450e9, scaleout_bytes_per_s=50e9)
    placed = axis_links(degrees, links, axes=("tp", "cp", "dp", "dp_cp", "pp"))
    for axis, link in placed.items():
        groups = axis_groups(degrees, axis)
        if link.link == "none":
            continue
        slowest = min(_ring_rate(g, domain, 450e9, 50e9) for g in groups)
        charged = link_time(link, 450e9, domain).bandwidth_bytes_per_s
        assert charged <= slowest and charged == pytest.approx(slowest), (axis, groups)
        one = all(len({r // domain for r in g}) == 1 for g in groups)
        assert (link.link == "nvlink") == one, (axis, groups)
        # NCCL's nNodes of the slowest group: the distinct domains of its ranks, by hand
        held = [
            [sum(r // domain == k for r in g) for k in {r // domain for r in g}] for g in groups
        ]
        fewest = min(min(h) for h in held)
        assert link.per_domain == fewest
        assert link.domains == max(len(h) for h in held if min(h) == fewest), (axis, groups)
        # the groups on another number of domains: their fewest members and that number
        others = [h for h in held if len(h) != link.domains]
        if others:
            m = min(min(h) for h in others)
            o = max(len(h) for h in others if min(h) == m)
            assert (link.other_per_domain, link.other_domains) == (m, o), (axis, groups)
            assert m >= fewest and o < link.domains
        else:
            assert (link.other_per_domain, link.other_domains) == (0, 0)
    shape = Shape(dp, tp, pp, cp, 1, 1, Schedule.ONE_F_ONE_B, 1)
    table = ShapeColumns([shape], 64, links)
    for axis, key in (("tp", "tp"), ("cp", "cp"), ("dp", "dp_cp"), ("pp", "pp")):
        if placed[key].link == "none":
            continue
        bandwidth, nvlink, span, per_domain, domains, o_per, o_dom = (
            a[0] for a in table.links[axis]
        )
        assert (bandwidth, bool(nvlink), span, per_domain, domains, o_per, o_dom) == (
            placed[key].bandwidth_bytes_per_s, placed[key].link == "nvlink", placed[key].span,
            placed[key].per_domain, placed[key].domains, placed[key].other_per_domain,
            placed[key].other_domains,
        )  # fmt: skip


def test_the_search_times_the_straddling_layout_as_the_evaluator_does():
    """Llama 3 70B on 144 GB200s at 32k tokens, tp 8: the search's tables time cp 2 (straddling)
    on the NIC as the evaluator does, to the nanosecond, and the answer's layout is checked
    against the evaluator (``check_against_evaluate``). The job owns its two racks
    (``nvlink_domain=72``: ranks fill them edge to edge, no Slurm segments, model.segments)."""
    racks = get_accelerator("GB200").with_links(nvlink_domain=72)
    case = Case.of("llama3-70b", racks, global_batch_size=72, seq_len=32768)
    space = SearchSpace(
        num_gpus=144, tp=(8,), pp=(1,), cp=(1, 2), micro_batch_size=(1,),
        schedules=(Schedule.ONE_F_ONE_B,), zero_stages=(1,), recomputes=(Recompute.NONE,),
    )  # fmt: skip
    tables = build_tables(Problem(jobs=(Job(case, 144, "llama"),), space=space))
    rows = [s for s, sh in enumerate(tables.shapes) if sh.cp == 2 and sh.tp == 8]
    assert rows
    for s in rows:
        lay = tables.shapes[s].layout(1, Recompute.NONE)
        est = case.evaluate(lay)
        cp = next(t for t in est.traffic if t.traffic.axis == "cp")
        assert (cp.link, cp.bandwidth_bytes_per_s) == ("scale-out", 50e9)
        t1, t2 = objective_ns(est.time_terms)
        assert abs(t1 - tables.t1_at(s, 0, 0)) <= NS_TOLERANCE
        assert abs(t2 - tables.t2_ns[s, 0, 0]) <= NS_TOLERANCE


def test_the_cli_charges_the_straddling_groups_the_nic(tmp_path):
    """``trainplan evaluate`` in its own processes, the two cases a user found: cp on GB200's
    144 GPUs filling its two racks (``nvlink_domain=72``), and tp 2 on an accelerator file with
    3-GPU domains, both ``scale-out`` at 50 GB/s. By default the 144 GPUs (36 trays) lie in
    Slurm segments of 18 trays (NVIDIA's launcher: the largest divisor of 36 up to 18;
    model.segments), 72 GPUs, one a rack: the same placement, the same straddle; given segments
    of 48 GPUs (``segment_gpus=48``, 12 trays) they hold whole cp groups of 16 ranks: NVLink at
    900 GB/s."""
    part = tmp_path / "threes.toml"
    part.write_text(
        '[[accelerator]]\nbase = "H100-SXM"\nname = "H100-SXM-3"\nnvlink_domain = 3\n'
        'gpus_per_node = 3\nstatus = "derived"\n'
        'source = "test: an H100 SXM in NVLink domains of 3 GPUs"\n'
    )
    runs = run_many({
        "nvl72": ["evaluate", "--model", "llama3-70b", "--gpu", "GB200", "--gpus", "144",
                  "--tp", "8", "--cp", "2", "--seq-len", "32768", "--global-batch", "72",
                  "--json", "--set", "nvlink_domain=72"],
        "segments": ["evaluate", "--model", "llama3-70b", "--gpu", "GB200", "--gpus", "144",
                     "--tp", "8", "--cp", "2", "--seq-len", "32768", "--global-batch", "72",
                     "--json", "--set", "segment_gpus=48"],
        "default": ["evaluate", "--model", "llama3-70b", "--gpu", "GB200", "--gpus", "144",
                    "--tp", "8", "--cp", "2", "--seq-len", "32768", "--global-batch", "72",
                    "--json"],
        "threes": ["evaluate", "--model", "llama3-8b", "--gpu", str(part), "--gpus", "12",
                   "--tp", "2", "--pp", "2", "--global-batch", "96", "--json"],
    })  # fmt: skip
    for name, axis in (("nvl72", "cp"), ("default", "cp"), ("threes", "tp")):
        done = runs[name]
        assert done.returncode == 0, done.stderr[-2000:]
        row = next(r for r in json.loads(done.stdout)["traffic"] if r["axis"] == axis)
        assert (row["link"], row["bandwidth_bytes_per_s"]) == ("scale-out", 50e9), name
    row = next(r for r in json.loads(runs["segments"].stdout)["traffic"] if r["axis"] == "cp")
    assert (row["link"], row["bandwidth_bytes_per_s"]) == ("nvlink", 900e9)
