"""ZeRO-3 / FSDP all-gathers counted as the frameworks issue them, and a ring's latency as NCCL
charges it by where the group's ranks lie.

* Each pass gathers its units in its own calls (model/dp_exposure.py ``dp_seconds``): FSDP2
  ``FSDPParamGroup.unshard`` from ``pre_forward`` and again from ``pre_backward`` after
  ``post_forward``'s ``reshard``; Megatron-FSDP ``_pre_forward_param_unshard`` and
  ``_pre_backward_param_unshard`` per bucket; DeepSpeed ``fetch_sub_module`` in each pass.
* NCCL's ring latency (nccl 5067397c ``src/graph/tuning.cc`` ``ncclTopoTuneModel``):
  ``baseLat + (nsteps − nInterSteps)·intraLat + nInterSteps·interLat``, ``nInterSteps =
  nNodes − 1`` for an all-gather or reduce-scatter, ``2(nNodes − 1)`` for an all-reduce
  (model/nccl_latency.py).
* DeepSpeed ZeRO-3's calls per pass (model/deepspeed_fetches.py): one ``all_gather_coalesced``
  per prefetch, closed at ``stage3_prefetch_bucket_size`` (5e7 elements) or, beyond
  ``stage3_max_live_parameters`` (1e9), one a weight; weights of at most 1e5 elements persist.
* The textbook's ZeRO-2 reduce-scatters its 1/D gradients every micro-batch (ZeRO §5.2;
  DeepSpeed ``stage_1_and_2.py`` ``reduce_ready_partitions_and_remove_grads``).
"""

from __future__ import annotations

import pytest

from trainplan.model.comm import dp_bytes
from trainplan.model.deepspeed_fetches import (
    deepspeed_gather_calls,
    layer_fetches,
    pass_gathers,
)
from trainplan.model.dp_exposure import dp_seconds
from trainplan.model.mechanisms import mechanism
from trainplan.model.roofline import Collective, RooflineParams, collective_latency
from trainplan.model.specs import Architecture
from trainplan.optimizer.case import Case

P = RooflineParams(gemm_efficiency=0.7)
"""No bus-bandwidth curve: every collective on the α-β clock (NCCL's latency + bytes / rate)."""

LLAMA3_405B = Architecture(
    num_layers=126, hidden_size=16384, num_attention_heads=128, num_kv_heads=8,
    ffn_hidden_size=53248, vocab_size=128256, mlp="swiglu",
)  # fmt: skip


def test_ring_latency_by_placement():
    """NCCL's model, Simple protocol: base 8.4 µs, NVLink ring step 3.4 µs, network step 14 µs.

    * All-gather over 1,024 ranks with 18 in each NVL72 domain (dp 1024 outside tp 4 on GB200):
      ⌈1024/18⌉ = 57 domains, 56 of the 1,023 steps cross the network: 8.4 + 56·14 + 967·3.4
      = 4080.2 µs; with every step charged the network, 8.4 + 1023·14 = 14330.4 µs (3.5×).
    * Reduce-scatter over 256 ranks, 2 on each of 128 nodes: 8.4 + 127·14 + 128·3.4 = 2221.6 µs.
    * All-reduce over 64 ranks, 8 on each of 8 nodes: the ring 2·63 = 126 steps, 14 of them
      between nodes, 8.4 + 112·3.4 + 14·14 = 585.2 µs; NCCL's tree 2·((8 − 1)·4 + log₂8·14)
      = 140.0 µs + 8.4 = 148.4 µs, the quicker (the tree's NVLink hop is its own 4 µs,
      ``hwLatencies[NVLINK][TREE][SIMPLE]``, not the ring's 3.4).
    * Inside one NVLink domain every step is NVLink's whatever ``per_domain`` says.
    """
    ag, rs, ar = Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE
    assert collective_latency(ag, 1024, False, P, 18) == pytest.approx(
        (8.4 + 56 * 14 + 967 * 3.4) * 1e-6
    )
    assert collective_latency(ag, 1024, False, P) == pytest.approx((8.4 + 1023 * 14) * 1e-6)
    assert collective_latency(rs, 256, False, P, 2) == pytest.approx(2221.6e-6)
    assert collective_latency(ar, 64, False, P, 8) == pytest.approx(148.4e-6)
    assert collective_latency(ag, 8, True, P, 1) == pytest.approx((8.4 + 7 * 3.4) * 1e-6)


def test_each_pass_gathers_in_its_own_calls():
    """Megatron-FSDP (BF16 weights, FP32 gradients): per parameter 2 B gathered for the forward,
    2 B for the backward, 4 B reduce-scattered. 1 GB of traffic a micro-batch in 10 buckets over
    64 ranks, one on each node (every step over the network: 8.4 + 63·14 = 890.4 µs a call),
    50 GB/s at 0.96: the reduce-scatter 10 calls of 50 MB, the gathers 2 × 10 calls of 25 MB
    (not 10 of 50 MB): 0.5 GB / 48 GB/s twice plus (10 + 20) × 890.4 µs = 20.833 + 26.712 =
    47.545 ms; the forward's
    half of the gathers, 0.25 GB / 48 GB/s + 10 × 890.4 µs."""
    mech = mechanism("megatron", 3)
    assert (mech.gathers_per_microbatch, mech.reduce_bytes, mech.weight_bytes) == (2, 4, 2)
    s = dp_seconds(mech, 0.0, 1e9, 64, 10, 50e9, False, P)
    latency = (8.4 + 63 * 14) * 1e-6
    rate = 50e9 * 0.96
    assert s.microbatch_reduce_s == pytest.approx(0.5e9 / rate + 10 * latency)
    assert s.microbatch_s == pytest.approx(1e9 / rate + 30 * latency)
    assert s.microbatch_s == pytest.approx(0.0475453, abs=1e-7)
    assert s.forward_s == pytest.approx(0.25e9 / rate + 10 * latency)
    # 8 of the 64 ranks on each node: 7 network steps, 56 NVLink ones
    local = dp_seconds(mech, 0.0, 1e9, 64, 10, 50e9, False, P, per_domain=8)
    assert local.microbatch_s == pytest.approx(1e9 / rate + 30 * (8.4 + 7 * 14 + 56 * 3.4) * 1e-6)


def test_deepspeed_fetches_llama3_405b_tp4():
    """Megatron-DeepSpeed's four linears a layer at tp 4 (h 16384, 128 heads of 128, 8 KV heads,
    f 53248, gated): QKV 16384·(128 + 2·8)·128/4 = 75,497,472; output 16384·128·128/4 =
    67,108,864; gate and up 2·16384·53248/4 = 436,207,616; down 218,103,808 elements. The stage's
    126 layers hold 126 × 797 M ≫ 1e9 live elements, and each weight alone passes the 5e7
    prefetch bucket: one call a weight, 504 a pass, 1,008 a micro-batch (forward and backward;
    ⌈P/5e8⌉ = 203 reduce buckets before, for both passes together)."""
    dense, moe_dense, experts = layer_fetches(LLAMA3_405B, 4, 4, 1)
    assert dense == (75_497_472, 67_108_864, 436_207_616, 218_103_808) == moe_dense
    assert experts == ()
    assert 126 * sum(dense) > 1e9
    assert deepspeed_gather_calls(LLAMA3_405B, 4, 4, 1, 126, 0) == (504, 1)
    assert 2 * 504 == 1008


def test_deepspeed_prefetch_buckets_below_max_live():
    """Llama 3 8B at tp 8 on a stage of 8 layers: 3,145,728 + 2,097,152 + 14,680,064 +
    7,340,032 = 27,262,976 elements a layer, 218 M in all (within 1e9 live): the prefetch closes
    when it reaches 5e7, at 54,525,952 after two layers: 4 calls. Within a layer weights below
    1e5 elements (norms) persist and are never gathered."""
    layer = (3_145_728, 2_097_152, 14_680_064, 7_340_032)
    assert sum(layer) == 27_262_976 and 2 * sum(layer) >= 5e7 > sum(layer)
    assert pass_gathers(layer, 8) == 4
    assert pass_gathers((4096,) + layer, 8) == 4
    assert pass_gathers(layer, 1) == 1  # what is left open still goes out


def test_deepspeed_zero3_405b_on_h100_by_calls():
    """Llama 3 405B on 4,096 H100s, dp 512 × tp 8, DeepSpeed ZeRO-3, full recompute, m = 4. The
    stage's 126 layers hold 126 × 398 M > 1e9 live elements at tp 8: one call a weight, 504 a
    pass, 1,008 a micro-batch; the reduce-scatter ⌈405.85e9/8 / 5e8⌉ = 102 buckets. The dp group
    has one rank on each of 512 nodes, every ring step over the network: 8.4 + 511 × 14 =
    7162.4 µs a call. The step's 1,215.27 GB at 50 GB/s × 0.96 take 25.318 s; with the latency
    4 × (102 + 1,008) × 7162.4 µs = 31.801 s, 57.119 s of dp traffic (31.163 s when both
    passes' gathers shared 102 calls: 4 × 204 × 7162.4 µs + 25.318 s)."""
    est = Case.of(
        "llama3-405b", "H100-SXM", framework="deepspeed", dp=512, tp=8, zero_stage=3,
        recompute="full",
    ).evaluate()  # fmt: skip
    assert deepspeed_gather_calls(LLAMA3_405B, 8, 8, 1, 126, 0)[0] == 504
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    assert dp.traffic.bytes_per_step == 1_215_268_997_376
    wire = dp.traffic.bytes_per_step / (50e9 * 0.96)
    latency = (8.4 + 511 * 14) * 1e-6
    assert dp.seconds == pytest.approx(wire + 4 * (102 + 2 * 504) * latency, rel=1e-9)
    assert dp.seconds == pytest.approx(57.119, abs=1e-3)


def test_textbook_zero2_reduces_every_microbatch():
    """The textbook's ZeRO-2 holds its gradients at 1/D, so every backward reduce-scatters them:
    per step m reductions of g bytes a parameter and one all-gather of w. 1e9 parameters over
    D = 8 (ring share 7/8), BF16 weights and gradients, m = 4: 7/8·1e9·(2 + 4·2) = 8.75 GB a
    step, 1.75 GB each micro-batch. ZeRO-1 holds them whole and reduces once: 7/8·1e9·4."""
    z2, z1 = mechanism("textbook", 2), mechanism("textbook", 1)
    assert z2.reduce_per_microbatch and z2.grads_sharded == 2 and z2.grads_full == 0
    assert not z1.reduce_per_microbatch and z1.grads_full == 2
    assert dp_bytes(z2, 1e9, 0, 8, 1, 4) == (pytest.approx(8.75e9), pytest.approx(1.75e9))
    assert dp_bytes(z1, 1e9, 0, 8, 1, 4) == (pytest.approx(3.5e9), 0)
