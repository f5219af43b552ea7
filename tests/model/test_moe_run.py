"""MoE as a run executes it (model.moe_run) and its place in the layer clock (model.layer_time):
each figure derived by hand here."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainplan.model.dispatch_buffers import dispatch_buffer_bytes
from trainplan.model.errors import InputError
from trainplan.model.layer_time import ep_all_to_all_seconds, layer_time
from trainplan.model.layout import Recompute
from trainplan.model.moe_dispatch import all_to_all_sent
from trainplan.model.moe_rows import mean_rows_sent, rank_rows
from trainplan.model.moe_run import (
    Dispatcher,
    EpOverlap,
    MoERun,
    exposed_all_to_all,
    grouped_rows,
    members_per_domain,
    stage_unpaired_fraction,
    steady_chunk_pairs,
    unpaired_fraction,
    unpaired_share,
)
from trainplan.model.op_time import TE_COMPUTE_STREAMS, Clock, op_seconds
from trainplan.model.ops import LayerShape, Op, OpKind
from trainplan.model.roofline import Collective, LinkTime, RooflineParams, collective_seconds
from trainplan.model.specs import Architecture, MoESpec

V3_LIKE = Architecture(
    num_layers=1, hidden_size=7168, num_attention_heads=8, ffn_hidden_size=18432,
    vocab_size=1024, moe=MoESpec(num_experts=256, experts_per_token=8, expert_ffn_hidden_size=2048),
)  # fmt: skip
P = RooflineParams(gemm_efficiency=0.6)


# ------------------------------------------------------------------ routing and rows
def test_rows_per_mode():
    """4,096 tokens on a rank, 256 experts, top-8: mean T·k = 32,768 rows a rank receives.
    * dropless, imbalance 1.25: the busiest rank gets 1.25 × 32,768 = 40,960;
    * cf 1 dropping at imbalance 1.25: C = ceil(128·1) = 128, a rank's 256/ep local experts
      take at most C from each of ep sources, E·C = 32,768 in all → capped at 32,768;
    * cf 1.5 padded: C = ceil(128·1.5) = 192, exactly E·C = 49,152 whatever the imbalance."""
    assert rank_rows(MoERun(imbalance=Fraction(5, 4)), 4096, 256, 8) == 40960
    assert rank_rows(MoERun(Fraction(1), imbalance=Fraction(5, 4)), 4096, 256, 8) == 32768
    padded = MoERun(Fraction(3, 2), pad_to_capacity=True, imbalance=Fraction(2))
    assert rank_rows(padded, 4096, 256, 8) == 49152
    assert mean_rows_sent(padded, 4096, 256, 8) == 49152
    # dropping at cf 0.5: E·C = 256·64 = 16,384 of the 32,768 copies go out
    assert mean_rows_sent(MoERun(Fraction(1, 2)), 4096, 256, 8) == 16384


def test_bad_runs_are_refused_with_the_parameter_named():
    with pytest.raises(InputError, match="moe_imbalance"):
        MoERun(imbalance=Fraction(1, 2))
    with pytest.raises(InputError, match="moe_pad_to_capacity"):
        MoERun(pad_to_capacity=True)
    with pytest.raises(InputError, match="moe_capacity_factor"):
        MoERun(Fraction(0))
    with pytest.raises(InputError, match="moe_node_limit"):
        MoERun(node_limit=4)  # the alltoall dispatcher sends every copy


# ------------------------------------------------------------------ dispatch volume
def test_alltoall_volume_is_every_remote_copy():
    """NCCL all-to-all over ep 64: each of the 32,768 BF16 rows of 7,168 goes to another rank
    with probability 63/64: 32,768 · 14,336 · 63/64 = 462,422,016 bytes per dispatch."""
    assert all_to_all_sent(MoERun(), 4096, 256, 8, 64, 8, 14336) == 462422016


def test_deepep_volume_is_deduplicated_per_node():
    """DeepEP across 8 nodes of 8 GPUs (ep 64), 256 experts (32 a node), top-8, no node limit.
    E[D] = 8·(1 − C(224, 8)/C(256, 8)); remote nodes per token E[D]·7/8. The link rule times
    the whole message at NIC·(n − 1)/(n − g) = NIC·63/56, so the scale-out bytes
    T·E[remote]·row are handed to it as T·E[remote]·row·63/56."""
    d = 8 * (1 - math.comb(224, 8) / math.comb(256, 8))
    expected = 4096 * d * 7 / 8 * 14336 * 63 / 56
    got = all_to_all_sent(MoERun(dispatcher="deepep"), 4096, 256, 8, 64, 8, 14336)
    assert got == pytest.approx(expected, rel=1e-12)
    # against NCCL's copies: 4.63 remote nodes per token in place of 7 remote copies
    nccl_offnode = 4096 * 8 * 14336 * 56 / 64  # the share of copies that leaves the node
    assert got * 56 / 63 / nccl_offnode == pytest.approx(d * 7 / 8 / 7, rel=1e-12)
    # within one node DeepEP sends a token once to each rank holding one of its experts
    # (test_moe_dispatch): R = 8·(1 − C(224, 8)/C(256, 8)) = d ranks of 32 experts, 7/8 remote
    intra = all_to_all_sent(MoERun(dispatcher="deepep"), 4096, 256, 8, 8, 8, 14336)
    assert intra == pytest.approx(4096 * d * 7 / 8 * 14336, rel=1e-12)
    assert intra / all_to_all_sent(MoERun(), 4096, 256, 8, 8, 8, 14336) == pytest.approx(d / 8)


def test_node_limited_routing_caps_the_remote_nodes():
    """M = 4 of 8 nodes: E[min(D, 4)] (model.moe's distribution) ≤ 4, so remote nodes per token
    ≤ 4·7/8 = 3.5 — the DeepSeek-V3 report's bound (§2.1.2: 'at most 4 nodes')."""
    limited = MoERun(dispatcher="deepep", node_limit=4)
    got = all_to_all_sent(limited, 4096, 256, 8, 64, 8, 14336) * 56 / 63
    assert got / (4096 * 14336) <= 3.5
    assert got < all_to_all_sent(MoERun(dispatcher="deepep"), 4096, 256, 8, 64, 8, 14336)


def test_link_rule_against_deepeps_published_bandwidth():
    """DeepEP's own H800 figures (docs/legacy.md, scenarios/kernels/collectives.toml): the
    internode dispatch at EP 64 reaches 51 GB/s of RDMA bandwidth per rank on a 400 Gb/s
    (50 GB/s) CX7 NIC. The clock's scale-out link is the NIC at 0.96 (NCCL's 12 of 12.5 GB/s):
    48 GB/s — 6 % under DeepEP's figure, so the de-duplicated dispatch is not timed faster than
    the kernel that runs it."""
    nic = 50e9 * RooflineParams(gemm_efficiency=0.6).scaleout_efficiency
    assert nic / 1e9 == pytest.approx(48.0)
    assert 0.9 < nic / 51e9 < 1.0


def test_members_per_domain():
    """ep 64 with tp 1 spans 64 ranks: 8 members per 8-GPU node; with tp 8 inside it spans 512:
    one per node; a group inside one NVLink domain is whole there; unknown span: 0."""
    assert members_per_domain(False, 64, 64, 8) == 8
    assert members_per_domain(False, 512, 64, 8) == 1
    assert members_per_domain(True, 8, 8, 8) == 8
    assert members_per_domain(False, 0, 64, 8) == 0


# ------------------------------------------------------------------ grouped GEMM
def test_grouped_gemm_rows_round_to_the_tile_and_add_launches():
    """A grouped GEMM of 16 experts with 40 rows each ([40, 2048] × [2048, 1536]): each group's
    rows round up to 128 (DeepGEMM's contiguous M alignment), and Transformer Engine's 16
    per-expert cuBLAS GEMMs over 4 streams add ceil(16/4) − 1 = 3 launch gaps of t_kernel."""
    assert grouped_rows(40.0) == 128.0
    c = Clock(989e12, 3.35e12, P)
    grouped = Op("experts up", OpKind.GEMM, m=40, n=1536, k=2048, batch=16)
    padded = Op("dense", OpKind.GEMM, m=128, n=1536, k=2048, batch=16, weights=False)
    assert TE_COMPUTE_STREAMS == 4
    gaps = 3 * P.kernel_overhead_s
    assert op_seconds(grouped, c) == pytest.approx(op_seconds(padded, c) + gaps, rel=1e-12)


# ------------------------------------------------------------------ overlap
def test_combined_1f1b_unpaired_share():
    """Megatron-Core combined 1F1B. pp = 1, m = 8: the first forward and the last backward run
    alone, 1/8. pp 4 × v 2, m 32 on rank 0: warm-up 2·3 + (2 − 1)·4 + 1 = 11 of 64 chunk
    forwards (and as many cool-down backwards). Tiny m: capped at everything."""
    o = EpOverlap.COMBINED_1F1B
    assert unpaired_fraction(o, 1, 1, 8) == Fraction(1, 8)
    assert unpaired_fraction(o, 4, 2, 32) == Fraction(11, 64)
    assert unpaired_fraction(o, 4, 2, 2) == 1
    assert unpaired_fraction(EpOverlap.NONE, 4, 2, 32) == 1
    with pytest.raises(InputError, match="virtual_stages"):
        unpaired_fraction(o, 4, 1, 32)


def test_combined_1f1b_charges_the_layers_uneven_chunks_run_alone():
    """Mixtral-8x7B (32 MoE layers), pp 2 × v 2, --stage-layers 8,8,9,7, m = 64 / (dp 4 · mb 1)
    = 16. Rank 0 holds chunks 0 and 2 (8 and 9 layers), rank 1 chunks 1 and 3 (8 and 7).

    Rank 0 (Megatron-LM d98e8a64dd schedules.py get_pp_rank_microbatches): W + 1 = 2·(2 − 1)
    + (2 − 1)·2 + 1 = 5 warm-up forwards of m·v = 32, so 27 steady steps k = 0…26; forward
    k + 5 is of chunk ⌊(k + 5)/2⌋ mod 2, backward k of chunk 1 − ⌊k/2⌋ mod 2. By k mod 4:
    0 → (0, 1), 1 → (1, 1), 2 → (1, 0), 3 → (0, 0): 7, 7, 7 and 6 steps. Each pairs
    min(n_f, n_b) layers (model_chunk_schedule_plan.py TransformerModelChunkSchedulePlan.run):
    8 except (1, 1)'s 9, so 27·8 + 7 = 223 pairs of 16·17 = 272 layer passes; unpaired
    1 − 223/272 = 49/272 ≈ 0.180. As forwards: the 5 warm-up forwards (chunks 0, 0, 1, 1, 0:
    42 layers) and the 7 (1, 0) steps' ninth layer, 42 + 7 = 49. The old whole-chunk count,
    5/32 = 0.156, took every steady step as wholly paired.

    Rank 1: W + 1 = 0 + 2 + 1 = 3, 29 steps; forward chunk ⌊(k + 3)/2⌋ mod 2, backward
    1 − ⌊k/2⌋ mod 2; both chunk 0 (8 layers) when k ≡ 2 mod 4: 7 steps, the rest pair 7:
    29·7 + 7 = 210 of 16·15 = 240, unpaired 30/240 = 1/8. The clock charges rank 0's (17 MoE
    layers, the slowest)."""
    from trainplan.scenarios.catalogue import get_model

    o = EpOverlap.COMBINED_1F1B
    assert steady_chunk_pairs(2, 2, 16, 0) == {(0, 1): 7, (1, 1): 7, (1, 0): 7, (0, 0): 6}
    assert stage_unpaired_fraction(o, 2, 16, 0, (8, 9)) == Fraction(49, 272)
    assert stage_unpaired_fraction(o, 2, 16, 1, (8, 7)) == Fraction(1, 8)
    arch = get_model("mixtral-8x7b").model.arch
    sizes = (8, 8, 9, 7)
    assert unpaired_share(o, arch, 2, 2, 16, True, sizes, "interleaved") == 49 / 272
    # one length: the old count, (W + 1)/(m·v) on rank 0
    assert unpaired_share(o, arch, 2, 2, 16, True, (8, 8, 8, 8), "interleaved") == 5 / 32
    assert unpaired_share(EpOverlap.NONE, arch, 2, 2, 16, True, sizes, "interleaved") == 1.0


@given(st.floats(0, 10), st.floats(0, 10), st.floats(0, 10), st.floats(0, 10), st.floats(0, 1))
def test_overlap_hides_at_most_everything(fwd, bwd, lf, lb, unpaired):
    """No overlap rule exposes more than all of it or less than nothing; pairing everything
    with computation at least as long hides everything."""
    total = fwd + bwd
    for o in EpOverlap:
        e = exposed_all_to_all(o, fwd, bwd, (lf, lb, lf / 2, lb / 2), (lf / 2, lf / 2), unpaired)
        assert -1e-12 <= e <= total + 1e-9
    cover = (bwd + 1, fwd + 1, fwd + 1, bwd + 1)
    hidden = exposed_all_to_all(EpOverlap.COMBINED_1F1B, fwd, bwd, cover, unpaired=0)
    assert hidden == 0


# ------------------------------------------------------------------ in the layer clock
def _clock(**kw) -> Clock:
    return Clock(989e12, 3.35e12, P, ep_link=LinkTime(400e9, True), **kw)


def test_layer_all_to_all_matches_the_hand_figure():
    """One MoE layer, micro-batch 1 × 4,096 tokens, ep 8 in one NVLink domain: each dispatch
    sends 32,768 · 14,336 · 7/8 bytes; forward dispatch + combine, backward the two again.
    Dropless balanced: the same as before the mechanisms (every copy, all exposed)."""
    x = LayerShape(V3_LIKE, True, 4096, 1, 1, ep=8)
    sent = 32768 * 14336 * 7 / 8
    one = collective_seconds(Collective.ALL_TO_ALL, 8, sent, LinkTime(400e9, True), P)
    fwd, bwd = ep_all_to_all_seconds(x, _clock(), False)
    assert (fwd, bwd) == (pytest.approx(2 * one), pytest.approx(2 * one))
    t = layer_time(x, _clock(), Recompute.NONE)
    assert t.ep_s == pytest.approx(4 * one) and t.ep_exposed_s == t.ep_s
    # full recompute dispatches again in the recomputed forward
    assert ep_all_to_all_seconds(x, _clock(), True)[0] == pytest.approx(4 * one)


def test_layer_overlap_and_imbalance_move_the_right_parts():
    """Imbalance 1.5 moves 1.5× the rows through the busiest rank's all-to-all and experts;
    combined 1F1B with everything paired hides what the partner's computation covers."""
    base = LayerShape(V3_LIKE, True, 4096, 1, 1, ep=8)
    heavy = LayerShape(V3_LIKE, True, 4096, 1, 1, ep=8, moe_run=MoERun(imbalance=Fraction(3, 2)))
    c = _clock()
    latency = collective_seconds(Collective.ALL_TO_ALL, 8, 1.0, LinkTime(400e9, True), P)
    b0 = layer_time(base, c, Recompute.NONE).ep_s - 4 * latency
    b1 = layer_time(heavy, c, Recompute.NONE).ep_s - 4 * latency
    assert b1 == pytest.approx(1.5 * b0, rel=1e-6)
    assert (
        layer_time(heavy, c, Recompute.NONE).compute_s
        > layer_time(base, c, Recompute.NONE).compute_s
    )
    paired = LayerShape(
        V3_LIKE, True, 4096, 1, 1, ep=8, moe_run=MoERun(ep_overlap=EpOverlap.COMBINED_1F1B)
    )
    t = layer_time(paired, _clock(ep_unpaired=0.0), Recompute.NONE)
    # the layer's compute (ms) far exceeds its NVLink all-to-alls (about 1 ms): all hidden
    assert t.ep_s > 0 and t.ep_exposed_s == 0.0
    t = layer_time(paired, _clock(ep_unpaired=0.25), Recompute.NONE)
    assert t.ep_exposed_s == pytest.approx(0.25 * t.ep_s)


# ------------------------------------------------------------------ buffers
def test_deepep_buffers_only_under_deepep():
    """DeepEP's normal Buffer at h 7,168, EP 64: 377,677,824 NVLink bytes + its 32 MiB workspace
    + the 512 MiB granule NVSHMEM maps for the 336,047,360 RDMA bytes + NVSHMEM's 169 IBGDA
    queue pairs, 121,876,547 B (model.moe's and test_nvshmem_heap's derivations) =
    1,069,979,715 per GPU; nothing for NCCL's all-to-all or at ep 1."""
    deepep = MoERun(dispatcher=Dispatcher.DEEPEP)
    total = 377677824 + 32 * 2**20 + 512 * 2**20 + 121876547
    assert dispatch_buffer_bytes(deepep, 7168, 64) == total == 1_069_979_715
    assert dispatch_buffer_bytes(deepep, 7168, 1) == 0
    assert dispatch_buffer_bytes(MoERun(), 7168, 64) == 0
    with pytest.raises(InputError, match="ep: 12"):
        dispatch_buffer_bytes(deepep, 7168, 12)


def test_layout_rules_are_megatrons_asserts():
    """overlap_moe_expert_parallel_comm: ep > 1, no full recomputation, interleaving with pp > 1
    (Megatron-Core transformer_config.py); DeepEP only at the EP sizes it has configs for."""
    from trainplan.model.moe_rules import moe_layout_violation, moe_recompute_violation

    run = MoERun(ep_overlap=EpOverlap.COMBINED_1F1B)
    assert moe_layout_violation(run, 8, 1, 1) is None
    assert moe_layout_violation(run, 8, 4, 2) is None
    assert "ep 1 has none" in moe_layout_violation(run, 1, 1, 1)
    assert "full recomputation" in moe_recompute_violation(run, True)
    assert moe_recompute_violation(run, False) is None
    assert "interleaved" in moe_layout_violation(run, 8, 4, 1)
    deepep = MoERun(dispatcher=Dispatcher.DEEPEP)
    assert moe_layout_violation(deepep, 64, 1, 1) is None
    assert moe_layout_violation(deepep, 12, 1, 1).startswith("ep: 12 has no DeepEP config")
    assert moe_layout_violation(MoERun(), 12, 4, 1) is None


def test_overlap_refuses_per_stage_counts_and_the_moe_module():
    """Megatron-LM d98e8a64dd ``transformer_config.py`` ``TransformerConfig.__post_init__``
    (l. 3020–3032), under ``overlap_moe_expert_parallel_comm``: ``recompute_num_layers is None``
    (so no per-stage block counts, over recompute none too) and ``"moe" not in
    recompute_modules``. Counts all 0 and the ``moe_act`` module run; so does the same plan
    without the overlap."""
    import trainplan
    from trainplan.model.errors import PlannerError

    case = dict(
        model="qwen3-235b-a22b", gpu="H100-SXM", framework="megatron", dp=2, pp=32, ep=2,
        zero_stage=1, precision="fp8", fp8_recipe="blockwise", micro_batch_size=1,
        global_batch_size=1024, schedule="interleaved", virtual_stages=2,
    )  # fmt: skip
    overlap = {"moe_ep_overlap": "overlap_moe_expert_parallel_comm"}
    ones = (1,) * 32
    with pytest.raises(PlannerError) as err:
        trainplan.evaluate(**case, **overlap, recompute="none", recompute_layers=ones)
    assert str(err.value) == (
        f"recompute_layers: {','.join(['1'] * 32)} under moe_ep_overlap "
        "'overlap_moe_expert_parallel_comm': Megatron-Core asserts recompute_num_layers is None "
        "and no full recomputation with it (TransformerConfig.__post_init__); use recompute none "
        "or selective on every layer"
    )
    with pytest.raises(PlannerError) as err:
        trainplan.evaluate(**case, **overlap, recompute="selective", recompute_modules=["moe"])
    assert str(err.value) == (
        "moe_ep_overlap: 'overlap_moe_expert_parallel_comm' does not run with the moe recompute "
        'module (Megatron-Core asserts "moe" not in recompute_modules); use moe_act or other '
        "modules"
    )
    assert trainplan.evaluate(**case, **overlap, recompute="none", recompute_layers=(0,) * 32)
    assert trainplan.evaluate(
        **case, **overlap, recompute="selective", recompute_modules=["moe_act"]
    )
    assert trainplan.evaluate(**case, recompute="none", recompute_layers=ones)
