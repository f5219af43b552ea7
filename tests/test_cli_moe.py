"""The ``--moe-*`` options (model.moe_run) as a user runs them: evaluate in its own process, text
and ``--json``, the refusals one line each. Figures derived by hand here."""

from __future__ import annotations

import json
import math

import pytest

from tests.cli_runs import refusal, run_many
from trainplan.model.moe import expected_distinct_nodes
from trainplan.model.moe_dispatch import dispatch_time_share
from trainplan.model.moe_run import MoERun

GPT_OSS_20B = [
    *("evaluate", "--model", "gpt-oss-20b", "--gpu", "H100-SXM", "--gpus", "8", "--dp", "8"),
    *("--ep", "8", "--global-batch", "8", "--seq-len", "4096"),
]
"""gpt-oss-20b (24 MoE layers, 32 experts, top-4, h = 2,880) on one 8-GPU H100 node, ep 8,
one micro-batch of one 4,096-token sequence per GPU."""

EP_BYTES = 4096 * 4 * 2880 * 2 * 7 // 8 * 2 * 2 * 24
"""Per dispatch 4,096·4 = 16,384 routed rows of 2,880 BF16, 7/8 of them to other ranks:
82,575,360 bytes; dispatch and combine, forward and backward, 24 layers, 1 micro-batch:
7,927,234,560 bytes."""

INTERLEAVED = [
    *("evaluate", "--model", "gpt-oss-20b", "--gpu", "H100-SXM", "--gpus", "16", "--dp", "8"),
    *("--pp", "2", "--ep", "8", "--global-batch", "64", "--schedule", "interleaved"),
    *("--virtual-stages", "2"),
]
"""gpt-oss-20b on 16 H100, pp 2 interleaved (v 2), ep 8: m = 64 / 8 = 8 micro-batches."""

DEEPSEEK_V3 = [
    *("evaluate", "--model", "deepseek-v3", "--gpu", "H800", "--gpus", "2048", "--dp", "128"),
    *("--pp", "16", "--ep", "64", "--global-batch", "15360", "--seq-len", "4096"),
    *("--precision", "fp8"),
]


@pytest.fixture(scope="module")
def runs():
    return run_many(
        {
            "default": [*GPT_OSS_20B, "--json"],
            "padded": [*GPT_OSS_20B, "--set", "moe_capacity_factor=2", "--set", "moe_pad_to_capacity=true", "--json"],
            "imbalanced": [*GPT_OSS_20B, "--set", "moe_imbalance=1.5", "--json"],
            "deepep": [*GPT_OSS_20B, "--set", "moe_dispatcher=deepep", "--json"],
            "text": [*GPT_OSS_20B, "--set", "moe_imbalance=1.5"],
            "v3": [*DEEPSEEK_V3, "--json"],
            "v3 deepep": [*DEEPSEEK_V3, "--set", "moe_dispatcher=deepep", "--set", "moe_node_limit=4", "--json"],
            "v3 hybridep": [*DEEPSEEK_V3, "--set", "moe_dispatcher=hybridep", "--set", "moe_node_limit=4", "--json"],
            "interleaved": [*INTERLEAVED, "--json"],
            "overlap": [*INTERLEAVED, "--set", "moe_ep_overlap=overlap_moe_expert_parallel_comm", "--json"],
            "overlap 1f1b": [
                *INTERLEAVED[:-4], "--set", "moe_ep_overlap=overlap_moe_expert_parallel_comm",
            ],
            "no moe": ["evaluate", "--model", "llama3-8b", "--set", "moe_capacity_factor=1.25"],
            "limit alone": [*GPT_OSS_20B, "--set", "moe_node_limit=4"],
            "deepspeed deepep": [*GPT_OSS_20B, "--framework", "deepspeed", "--set", "moe_dispatcher=deepep"],
            "fsdp2 overlap": [
                *GPT_OSS_20B, "--framework", "fsdp2", "--set", "moe_ep_overlap=overlap_moe_expert_parallel_comm",
            ],
            "no shared": [*GPT_OSS_20B, "--set", "moe_ep_overlap=moe_shared_expert_overlap"],
            "imbalance below 1": [*GPT_OSS_20B, "--set", "moe_imbalance=0.5"],
        }
    )  # fmt: skip


def _ep(out: dict) -> dict:
    return next(a for a in out["traffic"] if a["axis"] == "ep")


def test_default_is_every_routed_copy(runs):
    out = json.loads(runs["default"].stdout)
    assert EP_BYTES == 7_927_234_560
    assert _ep(out)["bytes_per_step"] == EP_BYTES
    assert out["layout"]["moe"] == {
        "moe_capacity_factor": None,
        "moe_pad_to_capacity": False,
        "moe_imbalance": 1.0,
        "moe_node_limit": None,
        "moe_dispatcher": "alltoall",
        "moe_ep_overlap": "none",
    }


def test_padding_to_capacity_moves_e_times_c(runs):
    """cf 2 padded: C = ceil(4096·4/32 · 2) = 1,024, so E·C = 32,768 rows per dispatch, twice
    the 16,384 routed rows: twice the bytes, and a slower step (the experts compute them too)."""
    default, padded = (json.loads(runs[k].stdout) for k in ("default", "padded"))
    assert _ep(padded)["bytes_per_step"] == 2 * EP_BYTES
    assert padded["time"]["compute_s"] > default["time"]["compute_s"]
    assert padded["time"]["mfu"] < default["time"]["mfu"]
    assert padded["layout"]["moe"]["moe_capacity_factor"] == 2.0


def test_imbalance_slows_the_busiest_rank_and_the_table_counts_its_rows(runs):
    """At imbalance 1.5 the busiest rank receives ceil(1.5 × 16,384) = 24,576 rows in each
    dispatch and sends them back in each combine, the rows its all-to-all waits on: the ep row
    counts those (model.moe_rows.rank_rows, the layer clock's rule), 1.5 × EP_BYTES =
    11,890,851,840 bytes, and says so; the mean rank's 7,927,234,560 is what it counted before."""
    default, heavy = (json.loads(runs[k].stdout) for k in ("default", "imbalanced"))
    assert _ep(heavy)["bytes_per_step"] == EP_BYTES * 3 // 2 == 11_890_851_840
    assert _ep(heavy)["collective"] == "all-to-all (dispatch + combine), the busiest rank's rows"
    assert _ep(default)["collective"] == "all-to-all (dispatch + combine)"
    assert _ep(heavy)["exposed_seconds"] > _ep(default)["exposed_seconds"]
    assert heavy["time"]["step_s"] > default["time"]["step_s"]
    assert runs["text"].returncode == 0 and "Traceback" not in runs["text"].stderr
    # the bound note says which rows the row counts: the busiest rank's, not uniform routing
    assert "the all-to-all counts the busiest rank's rows (--set moe_imbalance=1.5)" in (
        runs["text"].stdout
    )
    assert "assumes uniform routing" not in runs["text"].stdout
    assert any("the all-to-all assumes uniform routing" in n for n in default["notes"])
    assert any("counts the busiest rank's rows" in n for n in heavy["notes"])


ROUTED_ROWS_PER_LAYER = 6 * 2 * 4 * 4096 * 2880 + 4 * 4 * 4096
"""The saved bytes one gpt-oss-20b MoE layer holds of the rows its experts receive, per
micro-batch under the megatron profile (k 4, S 4,096, h = f_e = 2,880, BF16): FC1's input
k·β·S·h = 94,371,840, the SwiGLU input 2·β·k·S·f_e = 188,743,680, the clamped GLU copy
188,743,680, FC2's input 94,371,840, the routing weights in the activation 4·k·S = 65,536:
566,296,576 bytes (model.activation_rows.mlp_rows)."""


def test_imbalance_and_padding_size_the_busiest_ranks_activations(runs):
    """The rank whose experts receive 1.5 times the mean holds 1.5 times the saved rows of
    what they receive (model.moe_rows.row_factors): 0.5 × 566,296,576 B × 24 MoE layers × one
    micro-batch in flight = 6,795,558,912 B more; padded to capacity factor 2 every rank's
    experts receive E·C = 2·k·S rows: 13,591,117,824 B more. The routed experts' backward
    working set (its largest step, FC2's: the input gradient of FC1's input and the
    activation's output, k·β·S·h each) grows by 0.5·2·94,371,840 = 94,371,840 B and
    2·94,371,840. Switching the scaling off (factors 1) gives the default's figures back."""
    default, heavy, padded = (
        json.loads(runs[k].stdout)["memory"] for k in ("default", "imbalanced", "padded")
    )
    assert ROUTED_ROWS_PER_LAYER == 566_296_576
    acts = default["activations_bytes"]
    assert heavy["activations_bytes"] - acts == ROUTED_ROWS_PER_LAYER * 24 // 2 == 6_795_558_912
    assert padded["activations_bytes"] - acts == ROUTED_ROWS_PER_LAYER * 24 == 13_591_117_824
    bwd = default["backward_working_bytes"]
    assert heavy["backward_working_bytes"] - bwd == 94_371_840
    assert padded["backward_working_bytes"] - bwd == 2 * 94_371_840
    assert heavy["total_bytes"] > default["total_bytes"]


def test_deepep_with_node_limit_shortens_deepseek_v3s_all_to_all(runs):
    """EP 64 over 8 H800 nodes: NCCL sends 7 of a token's 8 copies off the node on average
    (8·56/64); DeepEP with M = 4 sends E[min(D, 4)]·7/8 ≈ 3.49 — the scale-out time falls to
    about half. The bytes the dispatch moves over both links grow: those RDMA rows plus the
    NVLink forward, once per destination rank other than the forwarder, R·7/8 with R =
    64·(1 − C(252, 8)/C(256, 8)) ≈ 7.676 (uniform routing's count; test_moe_dispatch), in place
    of 8·63/64 = 7.875 copies. Each of DeepEP's internode rows carries, beside its 14,336
    bytes, the 8-byte SourceMeta and in the forward dispatch 8 int32 indices and 8 float32
    weights, in the backward combine the weights' gradient, aligned to 16 bytes: 80, 16, 48 and
    16 bytes in the layer's four transfers (model.moe_dispatch.side_bytes), × (1 + 160/57,344)."""
    base, deepep = (json.loads(runs[k].stdout) for k in ("v3", "v3 deepep"))
    limited = float(expected_distinct_nodes(256, 8, 8, 4))
    r = 64 * (1 - math.comb(252, 8) / math.comb(256, 8))
    share = (limited * 7 / 8 + r * 7 / 8) / (8 * 63 / 64)
    assert share == pytest.approx(1.2954, abs=5e-5)
    rows = 1 + (80 + 16 + 48 + 16) / (4 * 14336)
    assert _ep(deepep)["bytes_per_step"] == pytest.approx(
        _ep(base)["bytes_per_step"] * share * rows
    )
    ratio = _ep(deepep)["exposed_seconds"] / _ep(base)["exposed_seconds"]
    assert 0.45 < ratio < 0.55
    assert deepep["time"]["step_s"] < base["time"]["step_s"]


def test_deepep_buffers_are_resident_memory(runs):
    """DeepEP's normal Buffer at h 7,168 and EP 64 (model.moe's derivation): 377,677,824 NVLink
    bytes + its 33,554,432-byte workspace + the 512 MiB granule NVSHMEM maps for the 336,047,360
    RDMA bytes + NVSHMEM's 169 IBGDA queue pairs, 121,876,547 B (test_nvshmem_heap) on every
    GPU of a stage with MoE layers, in its peak."""
    base, deepep = (json.loads(runs[k].stdout) for k in ("v3", "v3 deepep"))
    buffers = deepep["memory"]["dispatch_buffer_bytes"]
    assert buffers == 377_677_824 + 33_554_432 + 536_870_912 + 121_876_547 == 1_069_979_715
    assert base["memory"]["dispatch_buffer_bytes"] == 0


def test_deepep_in_one_node_sends_a_token_once_to_each_rank(runs):
    """DeepEP's intranode dispatch copies a token once to each rank whose ``is_token_in_rank``
    flag is set (any of the rank's 4 experts took it): a token's 4 experts of 32 reach R =
    8·(1 − C(28, 4)/C(32, 4)) = 8·15,485/35,960 = 3.444939 ranks, so the step's all-to-all bytes
    are EP_BYTES·R/4 = 6,137,661,358,080/899 ≈ 6.827 GB of hidden vectors in place of 7.927 GB
    (tests/model/test_moe_dispatch.py); the forward dispatch's rows carry the token's 4 int64
    indices and 4 float32 weights, 48 bytes, the backward combine's the weights' gradient, 16,
    beside 5,760 (intranode.cu; model.moe_dispatch.side_bytes): × (4·5,760 + 64)/(4·5,760)."""
    out = json.loads(runs["deepep"].stdout)
    rows = (4 * 5760 + 48 + 16) / (4 * 5760)
    assert _ep(out)["bytes_per_step"] == pytest.approx(6_137_661_358_080 / 899 * rows, rel=1e-12)
    assert 6_137_661_358_080 / 899 == pytest.approx(EP_BYTES * 8 * 15485 / 35960 / 4, rel=1e-15)


def test_hybridep_sends_once_per_domain_and_holds_its_buffers(runs):
    """HybridEP under the same routing: a token crosses to each remote domain (an H800 node)
    once, as DeepEP's does (the rule of model.moe_dispatch.all_to_all_sent; nothing overlapped,
    so no SM share enters); their rows differ beside the hidden 14,336 bytes: HybridEP's
    forward dispatch and backward combine carry the probability row of the domain's 4 × 8
    experts, 128 bytes each, DeepEP's RDMA rows 80, 16, 48 and 16 (model.moe_dispatch.
    side_bytes), so HybridEP moves (57,344 + 256)/(57,344 + 160) of DeepEP's bytes and takes
    the difference's scale-out share (model.moe_dispatch.dispatch_time_share) longer at 0.96 of
    50 × 63/56 GB/s; neither sets up NCCL's ep − 1 all-to-all peers;
    its HybridEPBuffer for 4,096 tokens a rank, 4 experts a rank, 8 domains of 8 at h 7,168
    holds 3,917,479,936 NVLink-registered and 1,314,390,016 RDMA bytes
    (tests/model/test_hybridep.py) on every GPU of a stage with MoE layers, in its peak."""
    deepep, hybrid = (json.loads(runs[k].stdout) for k in ("v3 deepep", "v3 hybridep"))
    d, h = _ep(deepep), _ep(hybrid)
    assert h["bytes_per_step"] == pytest.approx(d["bytes_per_step"] * 57600 / 57504, rel=1e-12)
    share = float(dispatch_time_share(MoERun(dispatcher="hybridep", node_limit=4), 256, 8, 64, 8))
    longer = (h["bytes_per_step"] - d["bytes_per_step"]) * share / (0.96 * 50e9 * 63 / 56)
    assert h["seconds"] - d["seconds"] == pytest.approx(longer, rel=1e-9)
    assert hybrid["memory"]["communicator_bytes"] == deepep["memory"]["communicator_bytes"]
    assert hybrid["memory"]["dispatch_buffer_bytes"] == 3_917_479_936 + 1_314_390_016
    assert hybrid["layout"]["moe"]["moe_node_limit"] == 4


def test_combined_1f1b_leaves_the_warmup_and_cooldown_exposed(runs):
    """Megatron-Core's overlap_moe_expert_parallel_comm, pp 2 × v 2, m 8: rank 0 runs
    2·(2 − 1) + (2 − 1)·2 + 1 = 5 of its 16 chunk forwards (and as many backwards) without a
    partner; gpt-oss-20b's expert GEMMs on one node cover the paired all-to-alls, so 5/16 of
    the all-to-all time stays exposed, and the paired 11/16 wait the SMs NCCL's all-to-all
    holds beside the computation (model.comm_sms.collective_sm_share, on by default: its
    expert-parallel group in one H100 node runs on the node's 32 point-to-point channels, the
    ring's 24 rounded up to a power of two, φ = 1 − 1/1.542 = 0.35149), φ·a each:
    (5 + 11·0.35149)/16 = 0.55415 of it (0.47679 when NVLS's 16 blocks were its floor)."""
    plain, overlap = (json.loads(runs[k].stdout) for k in ("interleaved", "overlap"))
    assert _ep(overlap)["seconds"] == _ep(plain)["seconds"]
    assert _ep(plain)["exposed_seconds"] == pytest.approx(_ep(plain)["seconds"])
    phi = 1 - 1 / 1.542
    share = (5 + 11 * phi) / 16
    assert _ep(overlap)["exposed_seconds"] == pytest.approx(share * _ep(plain)["seconds"])
    assert overlap["layout"]["moe"]["moe_ep_overlap"] == "overlap_moe_expert_parallel_comm"


@pytest.mark.parametrize(
    ("name", "line"),
    [
        (
            "no moe",
            "--set moe_capacity_factor: routing and dispatch options apply to a model with MoE",
        ),
        ("limit alone", "--set moe_node_limit: node-limited routing is modelled with the deepep"),
        ("deepspeed deepep", "--set moe_dispatcher: 'deepep' does not run under deepspeed"),
        (
            "fsdp2 overlap",
            "--set moe_ep_overlap: 'overlap_moe_expert_parallel_comm' is Megatron-Core's",
        ),
        ("no shared", "--set moe_ep_overlap: 'moe_shared_expert_overlap' needs shared experts"),
        ("imbalance below 1", "--set moe_imbalance: 0.5 must be at least 1"),
        (
            "overlap 1f1b",
            "--set moe_ep_overlap: 'overlap_moe_expert_parallel_comm' with pp > 1 needs",
        ),
    ],
)
def test_refusals_name_the_option(runs, name, line):
    assert refusal(runs[name]).startswith(line)
