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
* DeepSpeed ZeRO-3's launches (model/deepspeed_coordinator.py walk over
  model/deepspeed_fetches.py module_trace): one ``all_gather_coalesced`` per fetch or prefetch
  that finds a parameter not gathered, each prefetch taking whole parameters up to
  min(``stage3_max_live_parameters`` − ``n_available``, ``stage3_prefetch_bucket_size``);
  weights of at most 1e5 elements persist; the output weight gathered once a step, the
  embedding once a backward (and in the step's first forward), the weights within
  ``stage3_max_reuse_distance`` (1e9) of their backward, or whose backward the prefetcher
  reached while they were gathered, kept from the forward.
* The textbook's ZeRO-2 reduce-scatters its 1/D gradients every micro-batch (ZeRO §5.2;
  DeepSpeed ``stage_1_and_2.py`` ``reduce_ready_partitions_and_remove_grads``).
"""

from __future__ import annotations

import pytest

from trainplan.model.comm import dp_bytes
from trainplan.model.deepspeed_fetches import (
    deepspeed_gather_calls,
    deepspeed_unfetched,
    head_fetches,
    layer_fetches,
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
    67,108,864; gate and up 2·16384·53248/4 = 436,207,616; down 218,103,808 elements. Each
    weight alone passes the 5e7 prefetch bucket, so every prefetch that finds room takes one
    weight: one launch a weight, 504 a pass over the layers. With the output weight and the
    embedding (32,064·16,384 = 525,336,576 each) and the weights kept into the backward (the
    last layer's down and gate-up): 1,009 launches in the step's first micro-batch, 1,007 in
    each later one, so 504.5 a pass at m = 1 (test_deepspeed_fetches_by_step below)."""
    dense, moe_dense, experts = layer_fetches(LLAMA3_405B, 4, 4, 1)
    assert dense == (75_497_472, 67_108_864, 436_207_616, 218_103_808) == moe_dense
    assert experts == ()
    assert min(dense) > 5e7
    assert deepspeed_gather_calls(LLAMA3_405B, 4, 4, 1, 126, 0) == (1009 / 2, 1.0)


LLAMA3_8B = Architecture(
    num_layers=32, hidden_size=4096, num_attention_heads=32, num_kv_heads=8,
    ffn_hidden_size=14336, vocab_size=128256, mlp="swiglu",
)  # fmt: skip


LLAMA3_70B = Architecture(
    num_layers=80, hidden_size=8192, num_attention_heads=64, num_kv_heads=8,
    ffn_hidden_size=28672, vocab_size=128256, mlp="swiglu", norm="rmsnorm",
)  # fmt: skip


@pytest.mark.parametrize(
    ("arch", "tp", "level", "per_layer", "first", "later"),
    [
        # 8B tp 1: O = 525,336,576 and two layers of 218,103,808 ahead: 961,544,192.
        (LLAMA3_8B, 1, 525_336_576 + 2 * 218_103_808, 3, 187, 185),
        # 70B tp 4: O = 262,668,288 and three layers of 213,909,504: 904,396,800.
        (LLAMA3_70B, 4, 262_668_288 + 3 * 213_909_504, 2, 317, 315),
        # 70B tp 8: O = 131,334,144 and eight layers of 106,954,752: 986,972,160.
        (LLAMA3_70B, 8, 131_334_144 + 8 * 106_954_752, 3, 443, 441),
    ],
)  # fmt: skip
def test_deepspeed_launches_walked(arch, tp, level, per_layer, first, later):
    """DeepSpeed 38327e07's coordinator over Megatron-DeepSpeed's hooked modules, ten forward
    fetches a layer (the layer, ``input_layernorm``, ``self_attention``, ``query_key_value``,
    ``core_attention_flash``, ``dense``, ``post_attention_layernorm``, ``mlp``,
    ``dense_h_to_4h``, ``dense_4h_to_h``; model/deepspeed_coordinator.py cites the lines).
    Every fetch prefetches min(1e9 − n_available, 5e7) elements of whole parameters, and
    ``n_available`` counts a prefetch from its launch: ten prefetches of up to 5e7 a layer
    against one layer released, so within a few layers ``n_available`` reaches 1e9 and stays
    there (the adversary's premise, that releases keep it below and every prefetch closes at
    5e7, does not hold; nor does one launch a weight).

    The steady state of a later micro-batch's forward, Llama 3 8B tp 1 (QKV 25,165,824, output
    16,777,216, gate-up 117,440,512, down 58,720,256), n_available at layer j − 1's
    ``dense_4h_to_h`` fetch 961,544,192 (the output weight 525,336,576 held, and two layers
    ahead):

    1. ``dense_4h_to_h`` of layer j − 1: room min(38,455,808, 5e7) → a down projection
       (58,720,256 ≥ room): launch 1, 1,020,264,448; its release → 961,544,192.
    2. layer j's fetch: room 38,455,808 → QKV 25,165,824 (< room), + output = 41,943,040:
       launch 2, 1,003,487,232. ``input_layernorm``, ``self_attention``, ``query_key_value``:
       no room. QKV's release → 978,321,408.
    3. ``core_attention_flash``: room 21,678,592 → a gate-up 117,440,512: launch 3,
       1,095,761,920; ``dense``'s release → 1,078,984,704; ``post_attention_layernorm``,
       ``mlp``, ``dense_h_to_4h``: no room; gate-up's release → 961,544,192, the start.

    3 launches a layer (the old rule: 4, one a weight; the adversary's: 2). The backward runs
    the mirror: 3. 70B tp 4 (21.0 M, 16.8 M, 117.4 M, 58.7 M) holds 904,396,800 there, room
    95,603,200 > 5e7: a down, then QKV + output + gate-up closing at the bucket: 2 a layer, as
    the adversary found. 70B tp 8 (10.5 M, 8.4 M, 58.7 M, 29.4 M) at 986,972,160: room
    13,027,840 → a down; QKV + output (18,874,368 ≥ room); after QKV's release room 4,639,232
    → a gate-up: 3 a layer (the adversary's 82 a pass assumed 5e7 buckets). Each layer
    more adds 2 × per_layer launches a micro-batch; the ends (warm-up from the held output and
    embedding, the layers kept at the turn, the embedding's own gather) make the totals:
    8B 6·32 − 7 = 185, 70B tp 4 4·80 − 5 = 315, tp 8 6·80 − 39 = 441; the step's first
    micro-batch also gathers the output weight and the embedding (2 more)."""
    qkv, out, up, down = layer_fetches(arch, tp, tp, 1)[0]
    layer = qkv + out + up + down
    room = min(10**9 - level, 50_000_000)
    if per_layer == 3:  # a down alone, then QKV + output, then a gate-up
        assert down >= room > qkv and qkv + out >= room
        after_qkv = level + qkv + out - qkv
        assert 0 < 10**9 - after_qkv <= up
    else:  # the bucket binds: QKV + output below it, + gate-up past it
        assert room == 50_000_000 and qkv + out < room <= qkv + out + up and down >= room
    n = arch.num_layers
    calls = [step_fetches(arch, tp, tp, 1, k, 0, True)[1][0] for k in (n - 1, n)]
    assert calls[1] - calls[0] == 2 * per_layer
    f, later_, _ = step_fetches(arch, tp, tp, 1, n, 0, True)
    assert (f[0], later_[0]) == (first, later)
    assert layer * n > 10**9


@pytest.mark.parametrize(
    ("arch", "tp", "first", "later", "skipped_first", "skipped_later"),
    [
        # 8B tp 1: O = E = 525,336,576; a layer 218,103,808. Kept into the backward: the last
        # two layers, 436,207,616 (their backward entries popped by the prefetcher while they
        # were gathered, within the reuse distance).
        (LLAMA3_8B, 1, 187, 185, 525_336_576 + 436_207_616, 3 * 525_336_576 + 436_207_616),
        # 8B tp 4: O = E = 131,334,144; a layer 54,525,952. Kept: the last 15 layers and the
        # 16th's output, gate-up and down (48,234,496): 866,123,776.
        (LLAMA3_8B, 4, 145, 144, 131_334_144 + 866_123_776, 3 * 131_334_144 + 866_123_776),
        # 405B tp 1: O = E = 2,101,346,304 > 1e9: nothing kept. One launch a weight.
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
    post-backward: their inputs are token ids); a weight of the forward kept into its backward
    when its backward lies within stage3_max_reuse_distance (1e9) or the prefetcher popped its
    backward entry while it was gathered (model/deepspeed_coordinator.py). What each
    micro-batch does not gather, of the 2 × (O + E + layers) the two passes would: the first
    micro-batch's backward skips O and the kept weights; a later one also skips O and E in the
    forward."""
    layers = arch.num_layers
    f, later_, whole = step_fetches(arch, tp, tp, 1, layers, 0, True)
    assert (f[0], later_[0], f[1], later_[1]) == (first, later, 0, 0)
    assert 2 * whole[0] - f[2] == skipped_first
    assert 2 * whole[0] - later_[2] == skipped_later
    assert deepspeed_gather_calls(arch, tp, tp, 1, layers, 0, 4)[0] == (first + 3 * later) / 8
    assert deepspeed_unfetched(arch, tp, tp, 1, layers, 0, 4)[0] == pytest.approx(
        (skipped_first + 3 * skipped_later) / 4
    )


def test_deepspeed_reuse_distance_default():
    """stage3_max_reuse_distance's default, DeepSpeed 38327e07 ``zero/config.py``
    ``max_reuse_distance = Field(pp_int(1e9), …, alias="stage3_max_reuse_distance")``. A
    distance of 0 keeps nothing by distance: 8B tp 4 then frees the output weight at the root
    module's forward end and gathers it again in the backward (131,334,144 more a micro-batch);
    the weights the prefetcher marked (its look-ahead reached their backward while they were
    gathered, 866,123,776) are kept all the same."""
    assert DEEPSPEED_MAX_REUSE_DISTANCE_ELEMENTS == 1_000_000_000
    f, later, whole = step_fetches(LLAMA3_8B, 4, 4, 1, 32, 0, reuse=0)
    assert 2 * whole[0] - f[2] == 866_123_776
    assert 2 * whole[0] - later[2] == 2 * 131_334_144 + 866_123_776
    assert (f[0], later[0]) == (146, 145)


def test_deepspeed_prefetch_buckets_below_max_live():
    """Llama 3 8B at tp 8 on 8 layers: 3,145,728 + 2,097,152 + 14,680,064 + 7,340,032 =
    27,262,976 elements a layer, 218,103,808 in all; the output weight and the embedding
    16,032·4,096 = 65,667,072 each: 349,437,952, within 1e9 live and the reuse distance, so
    nothing is freed in the forward and the backward gathers nothing. The first micro-batch:
    the root module's own fetch of the output weight (1), its prefetch of the embedding
    (65,667,072 ≥ 5e7: 1), then prefetches of 5e7 closing after two layers (54,525,952): 4;
    6 launches. A later one finds the output weight and the embedding held: 4. Weights below
    1e5 elements (norms) persist and are never gathered."""
    layer = (3_145_728, 2_097_152, 14_680_064, 7_340_032)
    assert layer_fetches(LLAMA3_8B, 8, 8, 1)[0] == layer
    assert head_fetches(LLAMA3_8B, 8) == (65_667_072, (65_667_072,))
    assert 2 * sum(layer) >= 5e7 > sum(layer)
    f, later, whole = step_fetches(LLAMA3_8B, 8, 8, 1, 8, 0)
    assert (f[0], later[0]) == (6, 4)
    assert whole[0] == f[2] == 8 * sum(layer) + 2 * 65_667_072
    assert later[2] == 8 * sum(layer)


def test_deepspeed_zero3_405b_on_h100_by_calls():
    """Llama 3 405B on 4,096 H100s, dp 512 × tp 8, DeepSpeed ZeRO-3, full recompute, m = 4. A
    layer at tp 8: QKV 37,748,736, output 33,554,432, gate-up 218,103,808, down 109,051,904. The
    walk without recomputation (test_deepspeed_launches_walked's rule), n_available held near
    1e9: the forward launches a down, a QKV, then the output projection with a gate-up (the
    backward its mirror): 3 launches a layer a pass (a layer more adds 6 a micro-batch: 746 →
    752 from 125 to 126 layers) where the old rule had 4; the first micro-batch 754, each later
    one 752. The layout recomputes every layer, and the dp term reads that walk (the recomputed
    forward in the backward): 756 and 754, 3,018 a step; the reduce-scatter ⌈405.85e9/8 / 5e8⌉
    = 102 buckets a micro-batch. Not gathered, the mean of a micro-batch at m = 4: 1,055,129,600
    elements (without recomputation 1,382,285,312: the walk under full recomputation gathers a
    layer's gate-up and down, 218,103,808 + 109,051,904 = 327,155,712, more a micro-batch), 2 B
    each at the ring share 511/512: 8,424,550,400 bytes off the 1,215,268,997,376 both passes
    would send. The dp group has one rank on each of 512 nodes, every ring step over the
    network. Its calls send 263 MB to 993 MB a rank (the reduce-scatter's 102 a micro-batch
    992.9 MB, the gathers 262.9 and 265.7 MB), and NCCL's tuner (model.nccl_tuner) runs each as
    the ring in LL128: 14 + 511 × 8.5 = 4,357.5 µs (one rank a node: the tree's network hop)
    and the bytes at min(0.92 × 48, 2 × 36.7) = 44.16 GB/s — Simple's 8.4 + 511 × 14 =
    7,162.4 µs at 48 GB/s is quicker only above 1.55 GB sent (2,804.9 µs ÷ (1/44.16 − 1/48)
    ns a byte), LL's 6.6 + 511 × 5.0 µs at 20.4 GB/s below 68 MB. 1,206,844,446,976 B at 44.16
    GB/s take 27.329 s; with the latency (4 × 102 + 3,018) × 4,357.5 µs = 14.929 s, 42.258 s of
    dp traffic (in Simple 25.143 + 24.538 = 49.681 s; 49.569 s when it read the walk without
    recomputation)."""
    est = Case.of(
        "llama3-405b", "H100-SXM", framework="deepspeed", dp=512, tp=8, zero_stage=3,
        recompute="full",
    ).evaluate()  # fmt: skip
    first, later, _ = step_fetches(LLAMA3_405B, 8, 8, 1, 126, 0, True)
    assert (first[0], later[0]) == (754, 752)
    assert step_fetches(LLAMA3_405B, 8, 8, 1, 125, 0, True)[1][0] == 746
    assert deepspeed_unfetched(LLAMA3_405B, 8, 8, 1, 126, 0, 4)[0] == 1_382_285_312
    first, later, _ = step_fetches(LLAMA3_405B, 8, 8, 1, 126, 0, True, segment=1)
    assert (first[0], later[0]) == (756, 754)
    assert deepspeed_unfetched(LLAMA3_405B, 8, 8, 1, 126, 0, 4, "full")[0] == 1_055_129_600
    assert 1_382_285_312 - 1_055_129_600 == 218_103_808 + 109_051_904
    dp = next(r for r in est.traffic if r.traffic.axis == "dp")
    skipped = 4 * 1_055_129_600 * 2 * 511 // 512
    assert skipped == 8_424_550_400
    assert dp.traffic.bytes_per_step == 1_215_268_997_376 - skipped == 1_206_844_446_976
    wire = dp.traffic.bytes_per_step / 44.16e9
    latency = (14 + 511 * 8.5) * 1e-6
    assert dp.seconds == pytest.approx(wire + (4 * 102 + 756 + 3 * 754) * latency, rel=1e-9)
    assert dp.seconds == pytest.approx(42.258, abs=1e-3)
    simple = dp.traffic.bytes_per_step / (50e9 * 0.96) + 3426 * (8.4 + 511 * 14) * 1e-6
    assert simple == pytest.approx(49.681, abs=1e-3)


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
