"""DeepSpeed ZeRO-3's reduce-scatter copies in their side stream's pool (model/terms/peak.py
stream_pool_term, model/terms/reduce_pool.py): ``overlap_comm`` is on at stage 3 (DeepSpeed
edaa72212 ``zero/config.py`` ``overlap_comm_valid``), ``stage3.py`` flushes the IPG bucket when
the next gradient would take it past ``reduce_bucket_size`` (5e8 elements,
``reduce_independent_p_g_buckets_and_remove_grads``) and reduce-scatters each flush on
``reduce_and_partition_stream``; ``comm/coalesced_collectives.py`` ``reduce_scatter_coalesced``
concatenates the flush's interleaved partitions into a new buffer (``torch.cat``) unless the
flush is one tensor the world size divides. The caching allocator serves a copy from a cached
segment at least as large, else makes a segment rounded up to 2 MiB: the pool holds one segment
per record-setting flush.

Llama 3 70B at tp 4 (per GPU, backward order): the output layer 128,256 × 8,192 ÷ 4 =
262,668,288, the final norm 8,192, then per layer fc2 8,192 × 28,672 ÷ 4 = 58,720,256, fc1
2 × 28,672 × 8,192 ÷ 4 = 117,440,512, the post-attention norm 8,192, the output projection
8,192 × 8,192 ÷ 4 = 16,777,216, QKV (64 + 16) × 128 × 8,192 ÷ 4 = 20,971,520, the input norm
8,192: 213,925,888 a layer.

* flush 1: output + norm + the last layer = 476,602,368 elements (the next fc2 would pass 5e8),
  953,204,736 B in BF16, a segment of ⌈953,204,736 ÷ 2,097,152⌉ = 455 × 2 MiB = 954,204,160 B;
* flush 2: two layers + the next fc2 = 2 × 213,925,888 + 58,720,256 = 486,572,032 elements,
  973,144,064 B: larger than the first segment, a second of 465 × 2 MiB = 975,175,680 B;
* later flushes: fc1 and the rest of a layer, a layer and fc2, 427,851,776 elements: they fit
  in the first segment; the embedding's gradient (262,668,288) comes last.

Pool: 954,204,160 + 975,175,680 = 1,929,379,840 B (0.954 + 0.975 GB); every tensor divides by
16 (no padding)."""

import pytest

import trainplan
from trainplan.interface.scenario import build_problem
from trainplan.interface.search_commands import per_stage_json
from trainplan.optimizer.search import search

POOL_70B_TP4 = 455 * 2 * 2**20 + 465 * 2 * 2**20
# dp 16 × tp 4 on 64 H100s, the communicators with their set-up (model/terms/comm_memory.py):
# the tp ring in a node, 24 channels × 12 MiB + (32 × 3 + 2) × 2 MiB = 484 MiB; the dp ring over
# 64 consecutive ranks, 2 a node on 8 nodes (2 → dup 4 → Postset 8 channels), 96 + (8 × 3 + 2) ×
# 2 = 148 MiB; the world ring and the model-parallel group's ring (tests/model/
# test_deepspeed_groups.py), placed as the 64 GPUs (16 channels), 192 + 100 = 292 MiB each:
# 1,216 MiB = 1,275,068,416 B (was 4 × 384 MiB = 1,610,612,736 B, 32 channels, no set-up).
# NVLink SHARP (model/terms/nvls_memory.py): the tp 4 ring in a node 2 MiB of credits (no
# buffers: NCCL's tuner runs a 4-GPU all-reduce of an H100 node as a ring, NVLS's 240 GB/s of bus
# bandwidth against the ring's 360, model/nccl_search.py; 128 MiB more were counted before), the
# three rings across nodes with ≥ 2 ranks a node 2 MiB of credits each: 8 MiB more, 1,224 MiB =
# 1,283,457,024 B.
COMM_70B_TP4 = (484 + 148 + 292 + 292 + 2 + 3 * 2) * 2**20
# DeepSpeed ZeRO-3's gathered weights at dp 16 × tp 4 from the walk of its coordinator
# (model/deepspeed_gathered.py): the turn's 1,101,529,088 elements (the output weight, the last
# layers the reuse distance keeps, the prefetch), 2 B each, where the turn bound counted
# 1,117,440,512: 31,822,848 B less (tests/model/test_deepspeed_gathered.py)
WALK_70B_TP4 = 2 * (1_117_440_512 - 1_101_529_088)
COMMON_70B = dict(model="llama3-70b", gpu="H100-SXM", dp=16, tp=4, framework="deepspeed",
                  zero_stage=3, global_batch_size=2048, recompute="none", micro_batch_size=1)  # fmt: skip


def test_llama3_70b_tp4_pools_two_segments_and_the_uniform_answer():
    """Llama 3 70B, dp 16 × tp 4, ZeRO-3, no recomputation, b 1: the two segments above.
    Allocated 82,758,106,624 B (81,707,433,472 before Megatron-DeepSpeed's 10 B loss added
    4·8,192·32,064 = 1,050,673,152, tests/model/test_deepspeed_loss.py) + the pool + 1,275,068,416
    B of communicators (COMM_70B_TP4) = 85,962,554,880 B, above the 83,210,009,600 usable:
    the uniform search's answer is tp 8. Megatron-DeepSpeed's embedding output, a view of the
    whole [s, b, h] under SP without dropout (model/deepspeed_layers.py keeps_embedding_view),
    adds 2·8,192·8,192 × 3/4 = 100,663,296 B: allocated 82,858,769,920, reserved
    86,063,218,176. Megatron-DeepSpeed's TorchScript bias-dropout-add keeps two bool masks of
    [s/tp, b, h] a layer at dropout 0 (model.activation_rows.BIAS_DROPOUT_MASKS), 80 × 2 ×
    8,192·8,192/4 = 2,684,354,560 B more; the answers below do not move. The gathered weights
    from the walk of DeepSpeed's coordinator: 31,822,848 B less (WALK_70B_TP4), allocated
    85,553,244,672 B.

    The answer's ZeRO stage moved with NCCL's SM charge (``nccl_sm_charge``, on by
    default), its tp did not. dp 8 × tp 8, b 1, m 256: compute, pipeline and the exposed tp
    collectives 293.726 s + the optimizer step 0.014 s, the same at either stage. ZeRO-3 gathers
    and reduce-scatters 247.951 s per step a micro-batch at a time under the computation, each
    pass under its own (model.dp_exposure.dp_exposed_seconds); uncharged, what waits is each
    micro-batch's last of 18 reduce buckets (DeepSpeed synchronizes the reduce stream after
    every backward, ``independent_gradient_partition_epilogue``): the reduce-scatter is
    0.323491 s of the micro-batch's 0.968558 s, so 255 × 0.323491/18 + 0.968558/18 = 4.637 s
    exposed; charged, the computation they hide under runs on 1 − φ of the SMs,
    φ = 1 − 1/1.314 = 0.238965 (model.comm_sms.collective_sm_share), so φ × 247.951 = 59.252 s
    waits: 298.376 → 352.991 s. DeepSpeed ZeRO-1 (``overlap_comm`` off by default below stage 3)
    reduces on the compute stream (model.comm.reduces_beside_compute): its 0.968 s all wait,
    beside no computation, charged nothing: 294.708 s either way. So the answer is ZeRO-1 at
    dp 8 × tp 8, 294.708 s, and with the charge off still the ZeRO-3 answer this test was
    written for, dp 8 × tp 8 at 298.376 s: tp 4 not taken, its pool does not fit. With NCCL's
    NVLink SHARP buffers (model/terms/nvls_memory.py: the tp 8 ring in a node 256 MiB and 2 MiB
    of credits, the rings across nodes 2 MiB each) ZeRO-1 at dp 8 × tp 8 holds 83,475,921,408 B,
    265,911,808 over the 83,210,009,600 usable, so the charged answer is ZeRO-1 at dp 4 × tp 8 ×
    pp 2, 299.479 s (still faster than ZeRO-3 at dp 8 × tp 8 charged, 352.991 s).

    The charge reaches the layers' and the output layer's asynchronous tp collectives too
    (model.step_time.kind_parts): at dp 8 × tp 8 30.121 s of the 78.400 s of them hid under
    their GEMMs uncharged; charged 6.263 s more waits (short of φ × 30.121 = 7.198 s: some
    outlast (1 − φ) of their GEMM and already waited a − c), so ZeRO-1 takes 300.971 s and
    ZeRO-3 359.255 s; the answer, ZeRO-1 at dp 4 × tp 8 × pp 2, 6.309 s of tp more (30.316 s
    hid): 305.801 s. Uncharged nothing moves.

    Since the charge follows the algorithm NCCL runs each group's collectives as
    (model.nccl_channels): the tp 8 group's all-gathers and reduce-scatters (sequence
    parallelism) run as rings on the node's 24 channels, φ_tp = 1 − 1/1.350 = 0.259259, so at
    dp 8 × tp 8 6.899 s more waits (short of 0.259259 × 30.121 = 7.809 s): ZeRO-1 301.607 s;
    the answer, ZeRO-1 at dp 4 × tp 8 × pp 2, 6.950 s: 306.442 s. ZeRO-3's dp group at tp 8
    has one rank on each of 8 nodes: 4 ring blocks (1 search channel at 48 GB/s, DupChannels,
    Postset), φ_dp = 0.15038 × 4/8 = 0.075191, so 0.075191 × 247.951 = 18.644 s waits:
    319.283 s, still slower than the answer.


    DeepSpeed's ZeRO-1 accumulates the 16-bit gradients by autograd's add in every backward
    after a step's first (model/deepspeed_accumulate.py), 6 B an element at the H100's triad
    (3.35 TB/s × 0.8866): at dp 8 × tp 8 255 adds over 8,820,367,360 parameters, 4.544 s,
    301.607 → 306.151 s (306.155 s with the all-reduce NCCL's tuner runs, below); at dp 4 ×
    tp 8 × pp 2, m + pp − 2 = 512 adds over the last stage's
    4,410,187,776, 4.562 s, and the pipeline engine's messages as its TrainSchedule runs them
    (model/deepspeed_pipe.py: at pp 2 each stage exchanges every other step, 2m transfers and
    2m gathers on the critical path, not 4 and 3 for each of m + pp − 1 cycles, each gather
    with its zeros and clone) 1.348 → 0.913 s: 306.442 → 310.569 s, the same answer (ZeRO-3
    at dp 8 × tp 8 319.283 s); 310.556 s with 1F1B's bubble the order's own (stage 0's
    micro-batch, not the slowest's).

    DeepSpeed ZeRO-3's all-gathers counted by its fetches (model/deepspeed_fetches.py: 80 layers
    of 4 weights at tp 8, 107 M elements a layer, beyond 1e9 live: one call a weight, 320 a pass,
    640 a micro-batch where the 18 reduce buckets carried both passes): 622 calls more a
    micro-batch at 8.4 + 7 × 14 = 106.4 µs each (one rank a node), 0.968558 → 1.034739 s a
    micro-batch, 247.951 → 264.893 s a step; uncharged (255 × 0.323491 + 1.034739)/18 = 4.640 s
    waits, 298.380 s, still the answer with the charge off; charged 0.075191 × 264.893 = 19.918
    s, 320.557 s, still slower than the answer.

    With the output weight (16,032 · 8,192 = 131,334,144 elements) gathered once a step by the
    root module, the embedding once a backward (and in the step's first forward), and
    DeepSpeed's coordinator walked (tests/model/test_zero_gather_calls.py
    test_deepspeed_launches_walked, 70B tp 8: n_available held at 986,972,160, 3 launches a
    layer a pass; the last eight layers, 855,638,016 elements, kept into the backward): 443
    launches in the step's first micro-batch, 441 in each later one, 441.008 a micro-batch;
    not gathered 131,334,144 + 855,638,016 in the first, 3 × 131,334,144 + 855,638,016 in the
    others, 1,248,614,400 elements a micro-batch, 2 B × 7/8 at 48 GB/s = 45.523 ms: 1.034739 →
    0.968043 s a micro-batch, 247.819 s a step (256.523 s with one launch a weight); uncharged
    (255 × 0.323491 + 0.968043)/18 = 4.637 s waits, 298.376 s, still the answer with the
    charge off; charged 0.075191 × 247.819 = 18.634 s, 319.273 s, still slower than the
    answer.

    DeepSpeed's own optimizer-step passes (model.step_passes.step_pass_bytes: ZeRO-1/2 98 B an
    element, 60 beyond Adam's 38; ZeRO-3 70 B, 32 beyond) at 3.35 TB/s × 0.8866, the answers
    not: the answer, ZeRO-1 at dp 4 × tp 8 × pp 2, +60 B × 4,410,187,776 / 4 owned elements =
    +22.274 ms, 310.556 → 310.578 s; ZeRO-1 at dp 8 × tp 8 +60 B × 8,820,367,360 / 8 =
    +22.274 ms, 306.155 → 306.177 s; ZeRO-3 at dp 8 × tp 8 +32 B × 8,820,367,360 / 8 =
    +11.879 ms, uncharged 298.376 → 298.388 s (charged 319.273 → 319.285 s by the hand count,
    still slower than the answer)."""
    assert 476_602_368 == 262_668_288 + 8_192 + 213_925_888
    assert 486_572_032 == 2 * 213_925_888 + 58_720_256
    assert (2 * 476_602_368, 2 * 486_572_032) == (953_204_736, 973_144_064)
    assert POOL_70B_TP4 == 954_204_160 + 975_175_680 == 1_929_379_840
    e = trainplan.evaluate(**COMMON_70B)
    p = e.peak
    assert p.dense_params + p.expert_params == 17_639_415_808
    assert p.stream_pool_bytes == POOL_70B_TP4
    view = 2 * 8192 * 8192 * 3 // 4
    assert view == 100_663_296
    # + each of the 80 layers' FP32 softmax statistics (flash-attn's softmax_lse under
    # Megatron-DeepSpeed): 4 B × 64/4 heads × 8,192 = 524,288 B
    lse = 80 * 4 * 16 * 8192
    masks = 80 * 2 * 8192 * 8192 // 4
    assert 81_707_433_472 + 1_050_673_152 + view + lse == 82_900_712_960
    assert p.allocated_bytes == 82_900_712_960 + masks - WALK_70B_TP4 == 85_553_244_672
    assert p.communicator_bytes == COMM_70B_TP4 == 1_283_457_024
    assert p.reserved_total_bytes == 85_553_244_672 + POOL_70B_TP4 + COMM_70B_TP4
    assert p.reserved_total_bytes == 88_766_081_536 > e.capacity_bytes == 83_210_009_600
    case = {"model": "llama3-70b", "gpus": "64", "gpu": "H100-SXM",
            "space": {"framework": ["deepspeed"]}}  # fmt: skip
    best = search(build_problem({}, case)).best.estimate
    assert (best.layout.dp, best.layout.tp, best.layout.pp, best.layout.zero_stage) == (4, 8, 2, 1)
    adds = 512 * 6 * 4_410_187_776 / (3.35e12 * 0.8865671641791045)
    assert adds == pytest.approx(4.562, abs=1e-3)
    pipe = 0.913186 - 1.348485  # the pipeline messages, as TrainSchedule runs them
    # + its bubble's share of the tp charge; 1F1B's bubble the order's own (model.pipeline_onef):
    # at pp 2 the fill and drain run stage 0's micro-batch (0.580426 s, the embedding's stage)
    # where the closed form charged the slowest stage's (0.593204 s, the output layer's)
    onef = 0.580426 - 0.593204
    # DeepSpeed ZeRO-1's own optimizer-step passes, 60 B over the last stage's quarter
    passes = 60 * 4_410_187_776 / 4 / (3.35e12 * 0.8865671641791045)
    assert passes == pytest.approx(0.022274, abs=1e-6)
    step = 299.479 + 6.950 + 0.013 + adds + pipe + onef + passes
    assert best.step_s == pytest.approx(step, abs=1e-3)
    assert best.time_terms is not None
    assert best.time_terms.bubble_s == pytest.approx(0.580426, abs=1e-6)
    phi = (1 - 1 / 1.177) * 4 / 8  # the dp group at one rank a node: 4 ring blocks
    zero1 = trainplan.evaluate(**(COMMON_70B | {"dp": 8, "tp": 8, "zero_stage": 1}))
    tp = 6.899  # the tp collectives' charge at dp 8 × tp 8 (the ring's 24 blocks)
    adds8 = 255 * 6 * 8_820_367_360 / (3.35e12 * 0.8865671641791045)
    assert adds8 == pytest.approx(4.544, abs=1e-3)
    # ZeRO-1's 18 all-reduces (1.715 GB a rank, one rank on each of 8 nodes) run NCCL's ring
    # in Simple, (8.4 + 14 × 14) × 1.4 µs (its plateau) where the tree's 92.4 µs had stood
    # with the ring's bandwidth (model.nccl_tuner): 0.968 → 0.972 s
    reduce8 = 0.968 + 18 * ((8.4 + 14 * 14) * 1.4 - 92.4) * 1e-6
    passes8 = 60 * 8_820_367_360 / 8 / (3.35e12 * 0.8865671641791045)  # ZeRO-1's own passes
    assert passes8 == pytest.approx(0.022274, abs=1e-6)
    total = 293.726 + tp + reduce8 + 0.014 + adds8 + passes8
    assert total == pytest.approx(zero1.step_s, abs=1e-3)
    assert round(zero1.step_s, 3) == 306.177
    assert int(zero1.peak.total_bytes) == 83_475_921_408 > zero1.capacity_bytes
    dp3 = 247.951 + 256 * 622 * 106.4e-6  # ZeRO-3's dp traffic, every weight in both passes
    assert dp3 == pytest.approx(264.893, abs=1e-3)
    calls = (443 + 255 * 441) / 256  # DeepSpeed's coordinator walked
    fewer = (640 - calls) * 106.4e-6 + 2 * 7 / 8 * 1_248_614_400 / (50e9 * 0.96)
    dp3 -= 256 * fewer
    assert dp3 == pytest.approx(247.819, abs=1e-3)
    passes3 = 32 * 8_820_367_360 / 8 / (3.35e12 * 0.8865671641791045)  # ZeRO-3's own passes
    assert passes3 == pytest.approx(0.011879, abs=1e-6)
    zero3 = 293.726 + tp + phi * dp3 + 0.014 + passes3  # ZeRO-3 at dp 8 × tp 8, charged
    assert zero3 == pytest.approx(319.285, abs=1e-3) and zero3 > best.step_s
    off = search(build_problem({}, case | {"cluster": {"nccl_sm_charge": False}})).best.estimate
    assert (off.layout.dp, off.layout.tp, off.layout.zero_stage) == (8, 8, 3)
    exposed = (255 * 0.323491 + 0.968558 + 622 * 106.4e-6 - fewer) / 18
    assert 293.726 + exposed + 0.014 + passes3 == pytest.approx(off.step_s, abs=1e-3) == 298.388


def test_the_per_stage_answer_counts_the_second_segment():
    """``trainplan search --model llama3-70b --gpus 64 --gpu H100-SXM --framework deepspeed --zero 3
    --per-stage``: dp 16 × tp 4, ZeRO-3. With one segment (2 B × 5e8) it recomputed 2 layers; that
    layout now holds 81,348,820,480 allocated + 1,929,379,840 + 1,275,068,416 (COMM_70B_TP4) =
    84,553,268,736 B, over. The answer recomputes 5: allocated 79,234,891,264, fit 82,439,339,520 B;
    the search's tables and the evaluator read the same pool. Both carry the embedding output's
    whole [s, b, h] (keeps_embedding_view), 100,663,296 B more, and each layer kept whole its
    attention's FP32 softmax statistics, 524,288 B (78 and 75 layers).

    With Megatron-DeepSpeed's two TorchScript bias-dropout-add masks a layer kept whole
    (model.activation_rows.BIAS_DROPOUT_MASKS), 2 × 8,192·8,192/4 = 33,554,432 B, the answer
    recomputes 8: each recomputed layer frees its 738,197,504 B less its 33,554,432 B input
    (704,643,072), so 79,234,891,264 − 3 × 704,643,072 = 77,120,962,048, + the view + 72 × (lse
    + masks) = 79,675,293,184 allocated, fit 83,022,347,776 B with NVLS; 303.503 s, 1.047× the uniform ZeRO-3
    317.796 s (the figures below were 5 layers, 300.053 s, 1.059×).

    Held to ZeRO-3 (``--zero 3``) since NCCL's SM charge (``nccl_sm_charge``, on by default):
    charged at φ = 0.239 its 134.308 s of per-micro-batch gathers and reduce-scatters, the plan
    takes 300.053 s (32.095 s of them exposed, 0.029 s uncharged), slower than the uniform ZeRO-1 dp
    8 × tp 8 at 294.708 s (test_llama3_70b_tp4_pools_two_segments_and_the_uniform_answer), which is
    the answer over every stage (per-stage gain 1.0). Among ZeRO-3 layouts it is still the answer,
    1.059× the best uniform one (dp 64, full recomputation, b 2: 317.796 s); uncharged it was the
    answer over every stage, 267.987 s, 1.096× ZeRO-3 dp 8 × tp 8.

    The charge reaches its asynchronous tp 4 collectives too (model.step_time.kind_parts): 13.436
    s of their 34.935 s hid under their GEMMs uncharged, each shorter than (1 − φ) of its GEMM,
    so φ × 13.436 = 3.211 s more waits: 303.503 → 306.713 s, 1.036× the uniform ZeRO-3 plan
    (tp 1: unmoved).

    Since the charge follows the algorithm NCCL runs each group's collectives as
    (model.nccl_channels): the dp group at tp 4 has 2 ranks on each of 8 nodes, its all-gathers
    and reduce-scatters rings on 8 blocks, φ_dp = 1 − 1/1.177 = 0.15038 (not 0.239): 0.15038 ×
    134.308 = 20.197 s exposed instead of 32.095; the tp 4 group's (sequence parallelism) rings
    on the node's 24, φ_tp = 1 − 1/1.350 = 0.25926: 0.25926 × 13.436 = 3.483 s. The plan takes
    303.503 − 32.095 + 20.197 + 3.483 = 295.088 s, 1.077× the uniform ZeRO-3 317.796 s (dp 64,
    8 ranks a node: 16 blocks, φ 0.239 as before).

    NCCL runs a 4-GPU all-reduce of an H100 node as a ring (model/nccl_search.py: NVLS's 240
    GB/s of bus bandwidth against the ring's 360): the tp 4 ring holds NVLS's credits alone,
    134,217,728 B less (the fit 83,022,347,776 → 82,888,130,048 B, still 8 layers recomputed:
    a ninth kept whole needs 704,643,072 B more), and the cross-entropy's tp 4 all-reduces read
    the NVLS curve ÷ 480/370: 0.004 s more, 295.092 s.

    DeepSpeed ZeRO-3's all-gathers counted by its fetches (model/deepspeed_fetches.py: 4 weights
    a layer at tp 4, one call each, 640 a micro-batch where the 36 reduce buckets carried both
    passes) and a ring's latency by its placement (2 ranks on each of 8 nodes: 8.4 + 7 × 14 + 8 ×
    3.4 = 133.6 µs a call where 218.4 were charged): each of the 128 micro-batches (36 + 640) ×
    133.6 − (36 + 36) × 218.4 µs = 74.589 ms more, 134.308 → 143.855 s of dp traffic, φ_dp of it
    21.633 s: 296.528 s. The uniform best, ZeRO-3 dp 64 × tp 1 (full recomputation, b 2),
    317.796 → 317.716 s (its ring 8 ranks a node: 296.8 µs a call, not 890.4, against its 640
    fetches a micro-batch): 1.071×.

    With the output weight (32,064 · 8,192 = 262,668,288 elements) gathered once a step by the
    root module, the embedding once a backward (and in the step's first forward), and
    DeepSpeed's coordinator walked (tests/model/test_zero_gather_calls.py
    test_deepspeed_launches_walked, 70B tp 4: 2 launches a layer a pass; the last three layers,
    641,728,512 elements, kept into the backward), the first 8 layers recomputed in the backward
    (``recompute_layers`` 8: Megatron-DeepSpeed's block method, the walk with their recomputed
    forward, model.deepspeed_fetches.recompute_walk): 318 launches in the step's first
    micro-batch, 316 in each later one (one more than without recomputation); not gathered 262,668,288 + 641,728,512 in the first,
    3 × 262,668,288 + 641,728,512 in the others, 1,425,629,184 elements a micro-batch, 2 B ×
    15/16 at the link's 96 GB/s = 27.84 ms: 143.855 → 134.751 s of dp traffic (140.836 s with
    one launch a weight), φ_dp of its 0.443 s above the reduce-scatters' 134.308 s 0.066 s
    where 1.436 were: 295.159 s (295.156 s with the walk without recomputation). The uniform
    best, ZeRO-3 dp 64 × tp 1 (b 2, m 16):
    its output weight, 128,256 · 8,192 = 1,050,673,152 elements, passes 1e9 alone, so
    n_available never leaves room for a prefetch (every module gathers its own weight). The
    layout recomputes every layer, and the dp term reads that walk (the recomputed forward
    gathers each layer's weights again and keeps some for the backward right after,
    model.deepspeed_fetches.recompute_walk): 803 calls in the first micro-batch, 801 in each
    later one (801.125 a micro-batch where 640 were: + 16 × 161.125 × 296.8 µs = 765.2 ms);
    9,058,910,208 elements a micro-batch gathered beyond both passes' 2 × 70,552,387,584,
    2 B × 63/64 at the link's 384 GB/s: + 16 × 46.445 ms = + 743.1 ms; φ = 0.239 of the
    1,508.3 ms: 317.716 → 318.076 s, 1.078× (317.658 s, 1.076×, with the walk without
    recomputation: 641 calls, 3,020,685,312 elements not gathered).

    The gathered weights from the walk of DeepSpeed's coordinator (WALK_70B_TP4): 31,822,848 B
    less at tp 4, allocated 79,643,470,336, fit 82,856,307,200 B (a ninth layer kept whole still
    needs 704,643,072 B more); the uniform ZeRO-3 dp 64 × tp 1 holds 2 · 905,654,400 B less
    (the output weight alone past 1e9: no prefetch, tests/model/test_deepspeed_offload_grads.py),
    its time unmoved.

    Each micro-batch's last reduce bucket runs after the backward's computation, which ZeRO-3's
    epilogue waits for: whole, not φ of it (model.dp_exposure.microbatch_exposed_seconds). At
    tp 4, 1 of the 36 buckets of 70,552,387,584 / 4 BF16 gradients, 2 B × 15/16 at 96 GB/s +
    36 × 133.6 µs, ÷ 36 = 9.703 ms: + 128 × 9.703 ms × (1 − φ_dp) = 1.055 s, 296.214 s; the
    uniform dp 64 × tp 1, 1 of ⌈70,552,387,584 / 5e8⌉ = 142, 2 B × 63/64 at 384 GB/s + 142 ×
    296.8 µs, ÷ 142 = 2.844 ms: + 16 × 2.844 ms × (1 − φ) = 0.035 s, 318.111 s.

    DeepSpeed ZeRO-3's own optimizer-step passes (model.step_passes.step_pass_bytes: 70 B an
    element, 32 beyond Adam's 38) at 3.35 TB/s × 0.8866 on either layout's 70,552,387,584 / 64
    owned elements: +11.878 ms, the plan 296.214 → 296.226 s, the uniform 318.111 → 318.123 s,
    the answer unchanged (gain 1.0739).

    NCCL's ring across nodes moves at the slower of its NICs and its NVLink (model/nvlink_bound.py
    ``ring_busbw``): the plan's dp group (2 ranks a node, 2 NICs: 96 GB/s, under NVLink's 360)
    unmoved; the uniform dp 64 × tp 1 (8 ranks a node) at min(8 × 50 × 0.96, 450 × 0.8) = 360
    GB/s, not 384: its 6,952,680,935,424 B of dp traffic (16 micro-batches' reduce-scatters and
    gathers, the walk's included) × (1/360 − 1/384) ns a byte = 1.207 s more, φ of it 0.2884 s,
    and its last buckets' (1 − φ) share 16 × 978.1 MB × (1/360 − 1/384) × 0.761 = 0.0021 s:
    318.123 → 318.414 s, the answer unchanged (gain 1.0749)."""
    two = trainplan.evaluate(**COMMON_70B, recompute_layers=(2,)).peak
    view = 100_663_296
    lse = 4 * 16 * 8192  # a layer's FP32 softmax statistics (flash-attn's softmax_lse)
    # 78 layers kept whole hold theirs (the two recomputed hold their input only)
    masks = 2 * 8192 * 8192 // 4  # a layer's two bool masks (TorchScript bias-dropout-add)
    kept = view + 78 * (lse + masks)
    assert two.allocated_bytes == 81_348_820_480 - WALK_70B_TP4 + kept
    assert two.stream_pool_bytes == POOL_70B_TP4
    allocated = 81_348_820_480 - WALK_70B_TP4
    assert two.reserved_total_bytes == allocated + POOL_70B_TP4 + COMM_70B_TP4 + kept
    assert two.reserved_total_bytes == 84_529_834_496 + kept > 83_210_009_600
    run = per_stage_json({"model": "llama3-70b", "gpus": 64, "gpu": "H100-SXM",
                          "framework": "deepspeed", "zero": [3]})  # fmt: skip
    lay, m = run.json["layout"], run.json["memory"]
    assert (lay["dp"], lay["tp"], lay["zero_stage"], lay["recompute_layers"]) == (16, 4, 3, [8])
    # the docstring's step: φ × 134.308 s of per-micro-batch dp traffic is what waits
    assert (1 - 1 / 1.314) * 134.308 == pytest.approx(32.095, abs=1e-3)
    assert (1 - 1 / 1.177) * 134.308 == pytest.approx(20.197, abs=1e-3)
    assert (1 - 1 / 1.350) * 13.436 == pytest.approx(3.483, abs=1e-3)
    dp = 134.308 + 128 * ((36 + 640) * 133.6e-6 - (36 + 36) * 218.4e-6)
    assert dp == pytest.approx(143.855, abs=1e-3)
    calls = (318 + 127 * 316) / 128  # DeepSpeed's coordinator walked, 8 layers recomputed
    dp -= 128 * ((640 - calls) * 133.6e-6 + 2 * 15 / 16 * 1_425_629_184 / 96e9)
    assert dp == pytest.approx(134.751, abs=1e-3)
    fetches = (1 - 1 / 1.177) * (dp - 134.308)
    step = 303.503 - 32.095 + 20.197 + 3.483 + 0.004 + fetches  # + the tp 4 cross-entropy rings
    assert step == pytest.approx(295.159, abs=1e-3)
    params = 70_552_387_584
    last = (params / 4 * 2 * 15 / 16 / 96e9 + 36 * 133.6e-6) / 36  # the last bucket, whole
    step += 128 * last / 1.177
    assert step == pytest.approx(296.214, abs=1e-3)
    passes = 32 * params / 64 / (3.35e12 * 0.8865671641791045)  # ZeRO-3's own step passes
    assert passes == pytest.approx(0.011878, abs=1e-6)
    step += passes
    assert run.json["per_stage"]["step_s"] == pytest.approx(step, abs=1e-3)
    uniform = 317.716 + (1 - 1 / 1.314) * (
        16 * 161.125 * 296.8e-6 + 16 * 2 * 63 / 64 * 9_058_910_208 / 384e9
    )
    assert uniform == pytest.approx(318.076, abs=1e-3)
    uniform += 16 * (params * 2 * 63 / 64 / 384e9 + 142 * 296.8e-6) / 142 / 1.314
    assert uniform == pytest.approx(318.111, abs=1e-3)
    uniform += passes
    assert uniform == pytest.approx(318.123, abs=1e-3)
    ring = 1 / 360e9 - 1 / 384e9  # the dp 64 ring at NVLink's 360 GB/s, not the NICs' 384
    last_buckets = 16 * params * 2 * 63 / 64 / 142 * ring / 1.314
    assert last_buckets == pytest.approx(0.0021, abs=1e-4)
    uniform += (1 - 1 / 1.314) * 6_952_680_935_424 * ring + last_buckets
    assert uniform == pytest.approx(318.414, abs=1e-3)
    assert run.json["per_stage"]["uniform"]["step_s"] == pytest.approx(uniform, abs=1e-3)
    assert run.json["per_stage"]["gain"] == pytest.approx(uniform / step, abs=1e-4)
    assert m["stream_pool_bytes"] == POOL_70B_TP4
    # 72 layers kept whole, each with its softmax statistics and its two masks
    assert 79_234_891_264 - 3 * (738_197_504 - 33_554_432) == 77_120_962_048
    kept72 = 77_120_962_048 + view + 72 * (lse + masks)
    assert m["allocated_bytes"] == kept72 - WALK_70B_TP4 == 79_643_470_336
    assert m["fit_bytes"] == 79_643_470_336 + POOL_70B_TP4 + COMM_70B_TP4 == 82_856_307_200
    assert m["fit_bytes"] <= m["capacity_bytes"] == 83_210_009_600


def test_llama3_8b_tp1_pools_one_segment():
    """Llama 3 8B at tp 1 over 8 ranks: the output layer (128,256 × 4,096 = 525,336,576) is
    larger than the bucket, alone in its flush, and divides by 8: reduced in place, no copy.
    Then the final norm (4,096) and layers of 218,112,000 (fc2 58,720,256, fc1 117,440,512,
    norm 4,096, output projection 16,777,216, QKV 25,165,824, norm 4,096) until the next fc2
    would pass 5e8: 4,096 + 2 × 218,112,000 + 58,720,256 = 494,948,352 elements, 989,896,704 B,
    a segment of 473 × 2 MiB = 991,952,896 B. Later flushes (436,224,000 elements at most) fit
    in it, the embedding comes last alone and divides by 8: one segment."""
    assert 494_948_352 == 4_096 + 2 * 218_112_000 + 58_720_256
    assert 218_112_000 == 58_720_256 + 117_440_512 + 16_777_216 + 25_165_824 + 2 * 4_096
    assert 473 * 2 * 2**20 == 991_952_896 >= 2 * 494_948_352 > 472 * 2 * 2**20
    p = trainplan.evaluate(model="llama3-8b", gpu="H100-SXM", dp=8, framework="deepspeed",
                           zero_stage=3, global_batch_size=64).peak  # fmt: skip
    assert p.stream_pool_bytes == 991_952_896


def test_a_stage_smaller_than_the_bucket_pools_its_own_size():
    """Megatron 1.7B at tp 4 has fewer parameters on a GPU than the bucket holds: one flush of
    all 416,848,896 of them (the tied embedding's gradient last), 833,697,792 B, a segment of
    398 × 2 MiB = 834,666,496 B. ZeRO-1 and -2 (overlap_comm off by default) and dp 1 (no
    reduce-scatter) pool nothing."""
    common = dict(model="megatron-1.7b", gpu="H100-SXM", framework="deepspeed",
                  global_batch_size=64)  # fmt: skip
    p = trainplan.evaluate(dp=8, tp=4, zero_stage=3, **common).peak
    assert p.dense_params + p.expert_params == 416_848_896 < 500_000_000
    assert p.stream_pool_bytes == 398 * 2 * 2**20 == 834_666_496 >= 2 * 416_848_896
    for zero in (1, 2):
        assert trainplan.evaluate(dp=8, tp=4, zero_stage=zero, **common).peak.stream_pool_bytes == 0
    assert trainplan.evaluate(dp=1, tp=4, zero_stage=3, **common).peak.stream_pool_bytes == 0
