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
  ``stage3_max_live_parameters`` (1e9), one a weight; weights of at most 1e5 elements persist;
  the output weight gathered once a step, the embedding once a backward (and in the step's
  first forward), the weights within ``stage3_max_reuse_distance`` (1e9) of their backward
  kept from the forward.
* The textbook's ZeRO-2 reduce-scatters its 1/D gradients every micro-batch (ZeRO §5.2;
  DeepSpeed ``stage_1_and_2.py`` ``reduce_ready_partitions_and_remove_grads``).
"""

from __future__ import annotations

import pytest

from trainplan.model.comm import dp_bytes
from trainplan.model.deepspeed_fetches import (
    deepspeed_gather_calls,
    deepspeed_unfetched,
    layer_fetches,
    pass_gathers,
    step_fetches,
)
from trainplan.model.deepspeed_gathered import DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS
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
      between nodes, 8.4 + 112·3.4 + 14·14 = 585.2 µs; NCCL's tree 2·((8 − 1)·3.4 + log₂8·14)
      = 131.6 µs + 8.4 = 140.0 µs, the quicker.
    * Inside one NVLink domain every step is NVLink's whatever ``per_domain`` says.
    """
    ag, rs, ar = Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE
    assert collective_latency(ag, 1024, False, P, 18) == pytest.approx(
        (8.4 + 56 * 14 + 967 * 3.4) * 1e-6
    )
    assert collective_latency(ag, 1024, False, P) == pytest.approx((8.4 + 1023 * 14) * 1e-6)
    assert collective_latency(rs, 256, False, P, 2) == pytest.approx(2221.6e-6)
    assert collective_latency(ar, 64, False, P, 8) == pytest.approx(140.0e-6)
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
    prefetch bucket: one call a weight, 504 a pass over the layers (⌈P/5e8⌉ = 203 reduce
    buckets before, for both passes together). With the output weight and the embedding
    (32,064·16,384 = 525,336,576 each) and the weights the reuse distance keeps (the last
    layer's down and gate-up: 2·F + 525,336,576 < 1e9 for F = 0 and 218,103,808, not for the
    output projection's 654,311,424): 1,009 calls in the step's first micro-batch, 1,007 in each
    later one, so 504.5 a pass at m = 1 (test_deepspeed_fetches_by_step below)."""
    dense, moe_dense, experts = layer_fetches(LLAMA3_405B, 4, 4, 1)
    assert dense == (75_497_472, 67_108_864, 436_207_616, 218_103_808) == moe_dense
    assert experts == ()
    assert 126 * sum(dense) > 1e9
    assert pass_gathers(dense, 126) == 504
    assert deepspeed_gather_calls(LLAMA3_405B, 4, 4, 1, 126, 0) == (1009 / 2, 1.0)


LLAMA3_8B = Architecture(
    num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
    ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu",
)  # fmt: skip


@pytest.mark.parametrize(
    ("arch", "tp", "first", "later", "skipped_first", "skipped_later"),
    [
        # 8B tp 1: O = E = 128,256·4,096 = 525,336,576; a layer QKV 25,165,824, output
        # 16,777,216, gate-up 117,440,512, down 58,720,256 (218,103,808). Kept: 2·F + O < 1e9,
        # F < 237,331,712: layer 31 whole (its QKV F = 192,937,984) and layer 30's down (F =
        # 218,103,808), not its gate-up (276,824,064): 5 weights, 276,824,064 elements.
        # First: forward O + E + 128, backward 128 − 5 + E = 124. Later: 128 + 124.
        (LLAMA3_8B, 1, 254, 252, 525_336_576 + 276_824_064, 3 * 525_336_576 + 276_824_064),
        # 8B tp 4: O = E = 32,064·4,096 = 131,334,144; a layer 54,525,952. F < 434,332,928:
        # the last 8 layers (layer 24's QKV F = 7·54,525,952 + 48,234,496 = 429,916,160; layer
        # 23's down 8·54,525,952 = 436,207,616): 32 weights. Backward 128 − 32 + 1 = 97.
        (LLAMA3_8B, 4, 130 + 97, 128 + 97, 131_334_144 + 8 * 54_525_952,
         3 * 131_334_144 + 8 * 54_525_952),
        # 405B tp 1: O = E = 128,256·16,384 = 2,101,346,304 > 1e9: nothing kept by the distance.
        # Forward 2 + 504, backward 504 + 1.
        (LLAMA3_405B, 1, 506 + 505, 504 + 505, 2_101_346_304, 3 * 2_101_346_304),
        # 405B tp 4: O = E = 525,336,576; kept the last down and gate-up (654,311,424).
        (LLAMA3_405B, 4, 506 + 503, 504 + 503, 525_336_576 + 654_311_424,
         3 * 525_336_576 + 654_311_424),
    ],
)  # fmt: skip
def test_deepspeed_fetches_by_step(arch, tp, first, later, skipped_first, skipped_later):
    """DeepSpeed 38327e07's coordinator over Megatron-DeepSpeed's GPTModel (pp 1, untied):
    the output weight, an external parameter of the root module, gathered by the root module's
    fetch in the step's first forward and held to the optimizer step; the word embeddings
    freed after their forward, gathered for their backward and held into the next forward (no
    post-backward: their inputs are token ids); a weight of the forward kept into its
    backward when 2·F + O < stage3_max_reuse_distance (1e9), F the weights after it in the
    forward, O the output weight the root module's backward holds (module docstring of
    model/deepspeed_fetches.py). Every pass here is beyond 1e9 live: one call a weight. What
    each micro-batch does not gather, of the 2 × (O + E + layers) the two passes would: the
    first micro-batch's backward skips O and the kept weights; a later one also skips O in the
    forward and E in the forward."""
    layers = arch.num_layers
    f, later_, whole = step_fetches(arch, tp, tp, 1, layers, 0)
    assert (f[0], later_[0], f[1], later_[1]) == (first, later, 0, 0)
    assert 2 * whole[0] - f[2] == skipped_first
    assert 2 * whole[0] - later_[2] == skipped_later
    assert deepspeed_gather_calls(arch, tp, tp, 1, layers, 0, 4)[0] == (first + 3 * later) / 8
    assert deepspeed_unfetched(arch, tp, tp, 1, layers, 0, 4)[0] == pytest.approx(
        (skipped_first + 3 * skipped_later) / 4
    )


def test_deepspeed_reuse_distance_default():
    """stage3_max_reuse_distance's default, DeepSpeed 38327e07 ``zero/config.py``
    ``max_reuse_distance = Field(pp_int(1e9), …, alias="stage3_max_reuse_distance")``; a
    distance of 0 keeps nothing: 8B tp 4 then gathers every weight in both passes, the output
    weight too (freed at the root module's forward end, gathered again by its backward, then
    held: no post-backward), and only the embedding's holding from a backward into the next
    forward saves: 2 + 128 forward, 1 + 128 + 1 backward; later 128 + 130."""
    assert DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS == 1_000_000_000
    f, later, _ = step_fetches(LLAMA3_8B, 4, 4, 1, 32, 0, reuse=0)
    assert (f[0], later[0]) == (2 + 128 + 1 + 128 + 1, 128 + 1 + 128 + 1)


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
    pass over the layers; with the output weight and the embedding (16,032·16,384 = 262,668,288
    each) and the last layer kept into the backward (2·F + 262,668,288 < 1e9 for its QKV's F =
    33,554,432 + 218,103,808 + 109,051,904 = 360,710,144; not layer 124's down, F = 398,458,880):
    the first micro-batch 2 + 504 forward and 504 − 4 + 1 backward, 1,007 calls, each later one
    1,005: 4,022 a step; the reduce-scatter ⌈405.85e9/8 / 5e8⌉ = 102 buckets a micro-batch. Not
    gathered, of 2 × the 50.73e9 weights a micro-batch: in the first the output weight in the
    backward and the last layer's 398,458,880, 661,127,168; in a later one the output weight
    twice and the embedding once more, 1,186,463,744: 4 × 1,055,129,600 elements a step, 2 B
    each at the ring share 511/512, 8,424,550,400 bytes off the 1,215,268,997,376 both passes
    would send. The dp group has one rank on each of 512 nodes, every ring step over the
    network: 8.4 + 511 × 14 = 7162.4 µs a call. 1,206,844,446,976 B at 50 GB/s × 0.96 take
    25.143 s; with the latency (4 × 102 + 4,022) × 7162.4 µs = 31.729 s, 56.872 s of dp traffic
    (57.119 s when every pass gathered every weight, 1,008 calls a micro-batch)."""
    est = Case.of(
        "llama3-405b", "H100-SXM", framework="deepspeed", dp=512, tp=8, zero_stage=3,
        recompute="full",
    ).evaluate()  # fmt: skip
    assert pass_gathers(layer_fetches(LLAMA3_405B, 8, 8, 1)[0], 126) == 504
    first, later, _ = step_fetches(LLAMA3_405B, 8, 8, 1, 126, 0)
    assert (first[0], later[0]) == (1007, 1005)
    assert deepspeed_unfetched(LLAMA3_405B, 8, 8, 1, 126, 0, 4)[0] == 1_055_129_600
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    assert dp.traffic.bytes_per_step == 1_215_268_997_376 - 8_424_550_400 == 1_206_844_446_976
    wire = dp.traffic.bytes_per_step / (50e9 * 0.96)
    latency = (8.4 + 511 * 14) * 1e-6
    assert dp.seconds == pytest.approx(wire + (4 * 102 + 1007 + 3 * 1005) * latency, rel=1e-9)
    assert dp.seconds == pytest.approx(56.872, abs=1e-3)


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
