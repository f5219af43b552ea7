"""The thread blocks NCCL runs a collective on, by the algorithm it runs it as
(:mod:`model.nccl_channels`; NVIDIA/nccl at 5067397c), and what they cost the computation the
collective hides under (:func:`model.comm_sms.collective_sm_share`): derivations from NCCL's
code, written out."""

from __future__ import annotations

import pytest

from trainplan.model.layer_time import output_time
from trainplan.model.nccl_channels import collective_blocks, group_blocks
from trainplan.model.nccl_search import nvlink_node
from trainplan.model.op_rates import deployed_params
from trainplan.model.op_time import Clock, TpOverlap
from trainplan.model.ops import LayerShape
from trainplan.model.roofline import Collective, LinkTime, collective_time
from trainplan.model.specs import Architecture
from trainplan.model.userbuffers_gemm import userbuffers_for
from trainplan.optimizer.case import Case

AR, RING, A2A = "all-reduce", "ring", "send-recv"
H100 = nvlink_node("H100-SXM", 450e9)
A100 = nvlink_node("A100-80GB", 300e9)
B200 = nvlink_node("B200", 900e9)


def test_one_node_blocks_by_algorithm() -> None:
    """One 8-GPU node (src/graph/search.cc ncclTopoCompute, connect.cc ncclTopoPostset):

    * H100: 18 NVLinks × SM90_NVLINK_BW 20.6 = 370.8 GB/s a GPU; sm90SpeedArrayIntra starts at
      60: 6 rings (360 GB/s; 7 × 50 and 9 × 40 no more), DupChannels (60 ≥ 50) 12 at 30 GB/s,
      Postset 24 = comm->nChannels. An all-reduce runs as NVLS (ncclTopoTuneModel: 8 heads ×
      min(40 × 0.85 × 7/8 × 2, 60) = 476 GB/s against the ring's 12 × 30 = 360, at the same
      n/(2(n−1))) on comm->nvlsChannels = NVLS_NCHANNELS_SM90 = 16 (enqueue.cc
      topoGetAlgoInfo); a reduce-scatter or all-gather as a ring (NVLS's 8 × 40 × 0.85 ×
      (7/8)² = 208 GB/s against the ring's 360 × 8/7 = 411) on 24; the all-to-all on
      p2pnChannels = pow2Up(24) = 32 (paths.cc ncclTopoComputeP2pChannels).
    * A100: 12 NVLinks × SM80_NVLINK_BW 20 = 240 GB/s; speedArrayIntra starts at 40: 6 rings
      (240 GB/s: the search stops, "perfect"), DupChannels (Ampere: only ≥ 25 GB/s needed) 12
      at 20, Postset 24 — "Channel 23/24" on an HGX A100 (NVIDIA/nccl-tests#100). No NVLS:
      every collective on the ring's (or tree's: the same) 24; the all-to-all on 32.
    * NCCL_NVLS_ENABLE=0 (nccl_nvls=false, Megatron Bridge's recipes): the H100's all-reduce on
      the ring's 24."""
    assert [collective_blocks(k, "H100-SXM", True, 8, 1, None, H100) for k in (AR, RING, A2A)] == [
        16, 24, 32
    ]  # fmt: skip
    assert [collective_blocks(k, "A100-80GB", True, 8, 1, None, A100) for k in (AR, RING)] == [
        24, 24
    ]  # fmt: skip
    assert collective_blocks(A2A, "A100-80GB", True, 8, 1, None, A100) == 32
    assert collective_blocks(AR, "H100-SXM", False, 8, 1, None, H100) == 24
    # Blackwell (NVLink 5, 18 × 40.1 = 721.8 GB/s): 8 rings at 90, ×2, ×2 = 32; NVLS 24
    assert collective_blocks(RING, "B200", True, 8, 1, None, B200) == 32
    assert collective_blocks(AR, "B200", True, 8, 1, None, B200) == 24


def test_blocks_across_nodes() -> None:
    """Across nodes, one NIC per GPU: each GPU of the communicator on a node carries one search
    channel at the fastest inter speed its NIC and PCIe path allow, DupChannels, Postset ×2.

    * H100 (400 Gb/s NICs, PCIe Gen5 48 GB/s): 1 a node: 1 at 48 → 2 at 24 → 4; 2 a node: 2 →
      4 → 8; 8 a node: 8 at 48 (no DupChannels on sm90 below 50 GB/s with more than 4) → 16.
      Reduce-scatters and all-gathers: NVLS is off across nodes without CollNet
      (tuning.cc: NCCL_ALGO_NVLS disabled for nNodes > 1), so the ring's (PAT's at one rank a
      node: the same comm->nChannels). An all-reduce with ≥ 2 ranks a node: NVLS-tree on the
      16 NVLS channels; at one rank a node no NVLS (ncclNvlsInit: fewer than 2 local GPUs): 4.
    * A100 (200 Gb/s NICs, 25 GB/s; PCIe Gen4 24 GB/s): 24 GB/s a channel, under DupChannels'
      25: 2 a node → 2 → 4; 8 a node → 16.
    * The reviewer's GPT-3 175B layout on 1,024 A100s, dp 256 × tp 4: the dp group has 2 ranks
      on each of 128 nodes (256 ranks over 1,024 consecutive ones): 4 blocks."""
    assert collective_blocks(RING, "H100-SXM", True, 1, 16, 50e9, H100) == 4
    assert collective_blocks(RING, "H100-SXM", True, 2, 128, 50e9, H100) == 8
    assert collective_blocks(RING, "H100-SXM", True, 8, 8, 50e9, H100) == 16
    assert collective_blocks(AR, "H100-SXM", True, 2, 128, 50e9, H100) == 16
    assert collective_blocks(AR, "H100-SXM", True, 1, 16, 50e9, H100) == 4
    assert collective_blocks(RING, "A100-80GB", True, 2, 128, 25e9, A100) == 4
    assert collective_blocks(RING, "A100-80GB", True, 8, 4, 25e9, A100) == 16
    assert group_blocks(RING, "A100-80GB", True, 256, 1024, 8, 1024, False, 25e9, A100) == 4
    with pytest.raises(ValueError):
        collective_blocks("broadcast-tree", "H100-SXM", True, 8, 1, None, H100)


def test_a100_zero3_pays_its_ring_channels() -> None:
    """GPT-3 175B on 1,024 A100-80GB, DeepSpeed ZeRO-3, dp 256 × tp 4, b 3, B 1536 (the
    search's answer for `trainplan search --model gpt3-175b --gpus 1024 --gpu A100-80GB
    --framework deepspeed`): the dp group's per-micro-batch all-gathers and reduce-scatters run
    on 4 blocks (above) of 108 SMs, 4·132/108 = 4.889 H200 blocks, φ = 0.15038 × 4.889/8 =
    0.09190; every pass waits φ of its traffic but each micro-batch's last reduce bucket, which
    runs after the backward's computation and waits whole (model.dp_exposure.
    microbatch_exposed_seconds; ZeRO-3's epilogue synchronises it), 988,742,470.9 B at 48 GB/s +
    2,221.6 µs = 22.820 ms: 0.09190 × (13.490 − 2 × 0.02282) + 2 × 0.02282 = 1.2812 s (1.2398 s
    when the last bucket was charged φ too; 0.0995 s uncharged, as A100 was charged before).
    The traffic, m = 2: 88 reduce-scatter buckets
    (⌈43.75e9 / 5e8⌉) a micro-batch; DeepSpeed's fetches (model.deepspeed_coordinator walking
    model.deepspeed_fetches.module_trace: a layer's QKV 113,246,208, output 37,748,736, fc1 and
    fc2 150,994,944 each; n_available held near stage3_max_live_parameters, 3 launches a layer
    a pass, a layer more adds 6 a micro-batch, 566 → 572 from 95 to 96 layers; the tied output
    weight, ⌈50,257/4⌉ · 12,288 = 154,398,720, gathered once a step by the root module; the
    learned positions, 2,048 · 12,288 = 25,165,824, in the first forward and every backward;
    kept into the backward the last layer and layer 94's output projection, fc1 and fc2,
    792,723,456 elements): 573 launches in the first micro-batch, 572 in the second, 572.5 a
    micro-batch. Not gathered, of both passes' every weight: 154,398,720 + 792,723,456 in the
    first, 2 · 154,398,720 + 25,165,824 + 792,723,456 in the second, 1,036,904,448 elements a
    micro-batch, 2 B at 255/256 at 48 GB/s = 43.03 ms off each micro-batch's 5.4381 s of bytes.
    2 ranks on each of 128 nodes, 2 NICs of 25 GB/s (48 GB/s at 0.96); NCCL's tuner
    (model.nccl_tuner) runs each reduce-scatter, 988.7 MB a rank, as the ring in Simple:
    8.4 + 127 × 14 + 128 × 3.4 = 2,221.6 µs and the bytes at 48 GB/s, 88 × 988,742,470.9 B =
    1.8127 s of them a micro-batch; each gather, about 300 MB a rank, as the ring in LL128:
    14 + 127 × 4.0 + 128 × 1.9 = 765.2 µs and the bytes at min(0.92 × 48, 2 × 20.0) = 40 GB/s
    (the ring graph's 2 channels at 24 GB/s, not doubled below 25; Simple is quicker only above
    349.5 MB sent: 1,456.4 µs ÷ (1/40 − 1/48) ns a byte), the 5.3950 − 1.8127 = 3.5823 s they
    took at 48 GB/s × 48/40: 2 × (1.8127 + 88 × 2.2216 ms + 4.2988 + 572.5 × 0.7652 ms) =
    13.490 s (13.725 s in Simple alone; 14.613 s with one launch a weight beyond 1e9 live,
    14.680 s when every pass gathered every weight, 12.136 s when both passes' gathers shared
    the 88 buckets and every ring step was charged 14 µs). The tp 4 group's asynchronous all-gathers and
    reduce-scatters on the node's 24 ring channels: 24·132/108 = 29.333 blocks, φ = 0.25926 +
    (5.333/8)·(0.35149 − 0.25926) = 0.32075: 0.72503 s wait uncharged, the other 1.20825 −
    0.72503 = 0.48322 s are hidden whole, so 0.72503 + 0.32075 × 0.48322 = 0.88002 s. The step
    16.641 → 17.977 s (17.936 s when the last bucket was charged φ)."""
    case = dict(num_gpus=1024, dp=256, tp=4, zero_stage=3, framework="deepspeed",
                micro_batch_size=3, global_batch_size=1536, seq_len=2048)  # fmt: skip
    on = Case.of("gpt3-175b", "A100-80GB", **case).evaluate()
    off = Case.of("gpt3-175b", "A100-80GB", nccl_sm_charge=False, **case).evaluate()
    dp_on, dp_off = (next(r for r in e.traffic if r.traffic.axis == "dp") for e in (on, off))
    tp_on, tp_off = (next(r for r in e.traffic if r.traffic.axis == "tp") for e in (on, off))
    phi_dp = (1 - 1 / 1.177) * (4 * 132 / 108) / 8
    phi_tp = (1 - 1 / 1.350) + (24 * 132 / 108 - 24) / 8 * ((1 - 1 / 1.542) - (1 - 1 / 1.350))
    assert dict(on.time_terms.sm_shares) == pytest.approx({"dp": phi_dp, "tp": phi_tp})
    wire = 12.13576 / 2 - 2 * 88 * (8.4 + 255 * 14) * 1e-6  # every weight in both passes
    assert wire == pytest.approx(5.43808, abs=1e-5)
    unfetched = (154_398_720 + 792_723_456 + 2 * 154_398_720 + 25_165_824 + 792_723_456) / 2
    assert unfetched == 1_036_904_448
    wire -= 2 * 255 / 256 * unfetched / (50e9 * 0.96)
    calls = (573 + 572) / 2
    simple = 2 * (wire + (88 + calls) * 2221.6e-6)
    assert simple == pytest.approx(13.72483, abs=5e-5)
    reduce = 88 * 988_742_470.9 / 48e9
    gathers = (wire - reduce) * 48 / 40
    assert (reduce, gathers) == (pytest.approx(1.8127, abs=1e-4), pytest.approx(4.2988, abs=1e-4))
    tuned = 2 * (reduce + 88 * 2221.6e-6 + gathers + calls * 765.2e-6)
    assert dp_on.seconds == pytest.approx(tuned, abs=5e-5)
    assert dp_on.seconds == pytest.approx(13.49019, abs=5e-5)
    last = 988_742_470.9 / 48e9 + 2221.6e-6  # each micro-batch's last reduce bucket, whole
    exposed = phi_dp * (dp_on.seconds - 2 * last) + 2 * last
    assert dp_on.exposed_seconds == pytest.approx(exposed, abs=5e-5)
    assert dp_on.exposed_seconds == pytest.approx(1.2812, abs=5e-5)
    assert dp_off.exposed_seconds == pytest.approx(0.09947, abs=5e-5)
    hidden = tp_on.seconds - tp_off.exposed_seconds
    assert tp_on.exposed_seconds == pytest.approx(tp_off.exposed_seconds + phi_tp * hidden)
    # + 3.2 ms each since DeepSpeed ZeRO-3's own optimizer-step passes (model.step_passes: 32 B
    # more an element stepped with BF16 gradients, over 43.75e9 / 256 at A100's 2.039 TB/s ×
    # 0.83, the BabelStream triad)
    own = 32 * 43.75e9 / 256 / (2.039e12 * 0.83)
    assert (off.step_s, on.step_s) == (pytest.approx(16.6408 + own, abs=5e-4),
                                       pytest.approx(17.9775 + own, abs=5e-4))  # fmt: skip


def test_the_output_layer_pays_nccls_share_under_full_overlap() -> None:
    """Megatron-Core's output layer is a tensor_parallel.ColumnParallelLinear, not a Transformer
    Engine layer: under tp_comm_overlap=full its backward collectives are NCCL's, not
    userbuffers', and pay the tp group's NCCL φ as under async. Llama-3-70B-wide output layer
    (hidden 8192), 8192 tokens, tp 8 with sequence parallelism, one H100 node: each all-gather
    of the final norm's output moves 7/8 × 2 B × 8192 × 8192 = 117,440,512 B, the
    reduce-scatter the same, ag = rs seconds on the published curve. Forward gather: waits
    whole; the backward's gather under the logits' dgrad and reduce-scatter under its wgrad
    (each ~4 ms, ten times longer): φ·ag each at φ = 1 − 1/1.350 (the ring's 24 blocks); the
    cross-entropy's three all-reduces of 4 B a token wait whole. So exposed = ag·(1 + 2φ) +
    the three — under full as under async (before: ag + the three under full, no φ)."""
    arch = Architecture(num_layers=1, hidden_size=8192, num_attention_heads=64,
                        ffn_hidden_size=28672, vocab_size=128256)  # fmt: skip
    x = LayerShape(arch, False, 8192, 1, 8, sequence_parallel=True)
    p = deployed_params("H100-SXM")
    phi = 1 - 1 / 1.350
    got = {}
    for mode in (TpOverlap.ASYNC, TpOverlap.FULL, TpOverlap.NONE):
        ub = userbuffers_for("te-1", 8) if mode is TpOverlap.FULL else None
        c = Clock(989.4e12, 3.35e12, p, tp_link=LinkTime(450e9, True), tp_comm_overlap=mode,
                  nccl_sm_share=phi, userbuffers=ub)  # fmt: skip
        got[mode] = output_time(x, c, 128256)
    ag = collective_time(Collective.ALL_GATHER, 8, 7 / 8 * 2 * 8192 * 8192, 450e9, True, p)
    cross_entropy = got[TpOverlap.NONE].tp_s - 3 * ag  # exposed whole under every mode
    assert cross_entropy > 0
    expected = ag * (1 + 2 * phi) + cross_entropy
    assert got[TpOverlap.FULL].tp_exposed_s == pytest.approx(expected, rel=1e-9)
    assert got[TpOverlap.ASYNC].tp_exposed_s == got[TpOverlap.FULL].tp_exposed_s
    assert got[TpOverlap.NONE].tp_exposed_s == pytest.approx(3 * ag + cross_entropy)
