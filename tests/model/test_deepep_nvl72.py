"""DeepEP in an NVLink domain of more than 8 GPUs (a GB200 NVL72): its normal kernels reach 8
ranks over NVLink (deepseek-ai/DeepEP dd758ca ``LEGACY_NUM_MAX_NVL_PEERS`` = 8,
``csrc/legacy/buffer.hpp``: ``rdma_rank = rank / 8``, ``num_rdma_ranks = num_ranks / 8``), so a
group of 64 ranks runs the internode kernels, whose hop between runs of 8 is an IBGDA RDMA
write through the GPU's NIC (``csrc/kernels/legacy/internode.cu`` ``dispatch``:
``nvshmemi_ibgda_put_nbi_warp``), whether or not the 64 share one NVLink domain
(model.moe_dispatch.kernel_members, model.terms.ep_link). HybridEP reaches the whole domain.
Every figure derived by hand."""

from __future__ import annotations

import json
import math

import pytest

from tests.archs import one_moe_layer
from tests.cli_runs import refusal, run_many
from trainplan.model.layer_time import ep_all_to_all_seconds
from trainplan.model.moe import expected_remote_nodes
from trainplan.model.moe_dispatch import dispatch_copies, kernel_members
from trainplan.model.moe_run import MoERun
from trainplan.model.op_time import Clock
from trainplan.model.ops import LayerShape
from trainplan.model.roofline import Collective, LinkTime, RooflineParams, collective_seconds
from trainplan.model.step_time import all_to_all_bandwidth

DEEPEP, HYBRIDEP = MoERun(dispatcher="deepep"), MoERun(dispatcher="hybridep")
P = RooflineParams(gemm_efficiency=0.6)
ARGS = ("evaluate", "--model", "deepseek-v3", "--gpu", "GB200", "--dp", "64", "--pp", "4",
        "--ep", "64", "--json")  # fmt: skip


def test_deepep_joins_runs_of_8_ranks_over_nvlink_whatever_the_domain():
    """EP 64 in one 72-GPU domain: HybridEP's kernels reach the 64, DeepEP's runs of 8; under
    Megatron-Core DeepEP's group is etp·ep (128 at etp 2), its runs of 8 ranks hold 4 ep
    members; a group of at most 8 ranks is one run (the intranode kernels)."""
    assert kernel_members(HYBRIDEP, 64, 64, 64) == 64
    assert kernel_members(DEEPEP, 64, 64, 64) == 8
    assert kernel_members(DEEPEP, 64, 64, 128) == 4
    assert kernel_members(DEEPEP, 8, 8, 8) == 8
    assert kernel_members(DEEPEP, 0, 64, 64) == 8  # the domain unknown: still runs of 8
    # the search's tables hand the members as floats (its lookups gather into float columns)
    assert type(kernel_members(DEEPEP, 64.0, 64, 64)) is int
    assert dispatch_copies(DEEPEP, 256, 8, 64, 8.0) == dispatch_copies(DEEPEP, 256, 8, 64, 8)


def test_deepep_ep64_in_an_nvl72_times_its_rdma_hop_on_the_nic():
    """DeepSeek-V3 (256 experts, k 8, h 7,168 BF16: 14,336 B a row), 4,096 tokens a rank, EP 64
    in runs of 8: a token reaches D = 8·(1 − C(224, 8)/C(256, 8)) = 5.294652 runs, 7/8 of them
    remote, D_r = 4.632821 RDMA rows a token. The link rule hands the NIC ``(ep − 1)/(ep − g)``
    = 63/56 of them and times them at 50 GB/s × 63/56 = 56.25 GB/s (one ConnectX-7 a GB200),
    so 4,096 × 4.632821 × 63/56 × 14,336 = 306.045 MB of hidden vectors a transfer, 5.6675 ms at
    0.96 of it before NCCL's latency and the rows' side bytes; a MoE layer's forward and
    backward are two transfers each."""
    d = 8 * (1 - math.comb(224, 8) / math.comb(256, 8))
    assert d == pytest.approx(5.294652, abs=1e-6)
    d_r = float(expected_remote_nodes(256, 8, 8, None))
    assert d_r == pytest.approx(d * 7 / 8, rel=1e-12)
    sent, timed = dispatch_copies(DEEPEP, 256, 8, 64, kernel_members(DEEPEP, 64, 64, 64))
    assert float(timed) == pytest.approx(d_r * 63 / 56, rel=1e-12)
    nic = all_to_all_bandwidth(50e9, 64, 64, 8, 900e9)
    assert nic == pytest.approx(50e9 * 63 / 56) and nic == pytest.approx(56.25e9)
    transfer = 4096 * d_r * 63 / 56 * 14336
    assert transfer / 1e6 == pytest.approx(306.045, abs=1e-3)
    assert transfer / (nic * 0.96) * 1e3 == pytest.approx(5.6675, abs=1e-4)
    x = LayerShape(one_moe_layer(256), True, 4096, 1, 1, ep=64, moe_run=DEEPEP)
    link = LinkTime(nic, False)
    fwd, bwd = ep_all_to_all_seconds(
        x, Clock(2.5e15, 8e12, P, ep_link=link, ep_per_domain=8), False
    )
    # each RDMA row carries its 8-byte SourceMeta, and the forward dispatch k int32 indices and
    # k float32 weights, the backward combine the weights' gradient, aligned to 16 bytes:
    # 14,416 / 14,352 (forward), 14,384 / 14,352 (backward) bytes (model.moe_dispatch.side_bytes)
    rows = {n: transfer / 14336 * n for n in (14416, 14352, 14384)}

    def one(n: int) -> float:
        return collective_seconds(Collective.ALL_TO_ALL, 64, rows[n], link, P)

    assert fwd == pytest.approx(one(14416) + one(14352), rel=1e-12)
    assert bwd == pytest.approx(one(14384) + one(14352), rel=1e-12)


def test_the_planner_times_deepep_in_an_nvl72_as_across_8_gpu_domains():
    """The planner end to end (each run its own process): DeepEP at EP 64 on GB200 takes the
    same ep time, bytes and buffers in the 72-GPU domain as with ``nvlink_domain=8`` (the
    runs of 8 and the NIC are the same; its 9.737 s before this rule, on NVLink at the
    borrowed 711 GB/s, is gone), and the traffic table names the NIC (scale-out, 50 GB/s).
    HybridEP stays on NVLink's 900 GB/s where every ep group lies in one domain (the job on 16
    of each rack's 18 trays, ``nvlink_domain=64``); on 256 GPUs filling 72-GPU domains the ep
    group of ranks 64–127 has 8 ranks in domain 0 (0–71) and 56 in domain 1, which HybridEP
    cannot lay out (its buffer asserts ``64 % R == 0`` with ``R`` = 56 on ranks 72–127,
    :mod:`model.flex_domains`): refused, where it was timed on the NIC at 50 GB/s. DeepEP's
    runs of 8 (64–71, 72–79, …) each lie in one domain, so it runs there. The default placement
    of a 256-GPU job is NVIDIA's Slurm segments of 16 trays (:mod:`model.segments`): the
    ``nvlink_domain=64`` figures, so whole racks are asked for with ``nvlink_domain=72``."""
    hybrid = [*ARGS, "--set", "moe_dispatcher=hybridep"]
    runs = run_many({
        "nvl72": [*ARGS, "--set", "moe_dispatcher=deepep"],
        "nvl8": [*ARGS, "--set", "moe_dispatcher=deepep", "--set", "nvlink_domain=8"],
        "hybridep": [*hybrid, "--set", "nvlink_domain=64"],
        "segments": hybrid,
        "straddle": [*hybrid, "--set", "nvlink_domain=72"],
    })  # fmt: skip
    line = refusal(runs.pop("straddle"))
    assert line.startswith("--set moe_dispatcher: hybridep with ep 64 at stride 1 on NVLink ")
    assert "ranks 64–127 lie 8 + 56" in line
    out = {}
    for name, done in runs.items():
        assert done.returncode == 0, done.stderr[-2000:]
        est = json.loads(done.stdout)
        row = next(r for r in est["traffic"] if r["axis"] == "ep")
        out[name] = (row, est["memory"]["dispatch_buffer_bytes"])
    (nvl72, buf72), (nvl8, buf8), (hybrid, _) = out["nvl72"], out["nvl8"], out["hybridep"]
    assert out["segments"] == out["hybridep"]
    assert (nvl72["link"], nvl72["bandwidth_bytes_per_s"]) == ("scale-out", 50e9)
    assert nvl72["seconds"] == pytest.approx(nvl8["seconds"], rel=1e-12)
    assert nvl72["bytes_per_step"] == pytest.approx(nvl8["bytes_per_step"], rel=1e-12)
    assert buf72 == buf8 == 1_069_979_715
    # 240 micro-batches × 16 MoE layers × 4 transfers × 5.6675 ms = 87.05 s, + the rows' side
    # bytes (+0.28 %: 64 + 4 × 16 + 32 of 4 × 14,336 bytes) and NCCL's latency
    assert 87.05 * (1 + 160 / 57344) < nvl72["seconds"] < 87.05 * 1.01
    assert (hybrid["link"], hybrid["bandwidth_bytes_per_s"]) == ("nvlink", 900e9)
