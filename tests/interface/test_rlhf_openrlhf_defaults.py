"""Under ``--framework deepspeed`` the engine's default memory fraction is OpenRLHF's own,
``--vllm.gpu_memory_utilization`` 0.95 (``openrlhf/cli/train_ppo_ray.py``, 3c3be6234), passed to
every engine, colocated or not; verl's 0.5 (colocated) and vLLM's 0.9 (alone) stay
the ``megatron`` and ``fsdp2`` defaults."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.interface.rlhf.faithful import evaluate_placement, rlhf_inputs
from trainplan.model.frameworks import Framework
from trainplan.model.rlhf.spec import Role, default_fraction

HBM = 85_017_493_504  # H100-SXM bytes vLLM multiplies (cuda_total_bytes)


def _engine(framework: str, **kw):
    inp = rlhf_inputs(
        {"algorithm": "grpo", "model": "qwen2.5-7b", "reward": "rule", "gpus": 64,
         "framework": framework, "bandwidth_efficiency": 1} | kw,  # at the datasheet HBM, as derived
        placement=False,
    )  # fmt: skip
    plan = evaluate_placement(inp)
    return next(c for c in plan.costs if c.option.role is Role.ROLLOUT), plan


def test_deepspeed_engine_takes_openrlhfs_095_by_default():
    """Qwen2.5 7B GRPO on 64 H100, everything colocated: the engine's budget is 0.95 × 85,017,493,504
    = 80,766,618,828.8 B (80.77 GB; was 0.5 × = 42.51 GB). The pool needs 131.33 GB in the rollout
    (was 93.07 GB: DOES NOT FIT either way); the step 343.1 → 333.7 s (more KV space, more
    sequences decoded at once), 333.8 s with the actor's ZeRO-2 gradients all-reduced whole
    (DeepSpeed's use_multi_rank_bucket_allreduce default). The engine's tp all-reduces
    (model/rollout_reduce.py; its tp 2 × dp 32, 512 rollouts a replica, 256 at once: 2 waves)
    add 8,192 decode steps × 56 × 24.609 µs (1,835,008 B at the H100 curve's 74.565 GB/s, each
    rank sending it once) = 11.290 s and 2 × 32 prefill chunks × 56 × 168.245 µs (58,720,256 B
    at 349.017 GB/s) = 0.603 s: 333.8 → 345.7 s. The embedding's all-reduce and the logits
    all-gather, one each a forward (model/rollout_reduce.py): 8,192 × (24.609 + 136.453) µs —
    256 rows of 152,064 BF16 logits, 77,856,768 B, at (361.78 + 0.21432 × 38.83) / (480/370) =
    285.287 GB/s, each rank receiving half — and 64 × (168.245 + 17.162) µs (a chunk's 8 rows,
    2,433,024 B at 70.886 GB/s) = 1.319 + 0.012 = 1.331 s: 345.7 → 347.0 s. DeepSpeed's ZeRO-1
    accumulates the actor's 16-bit gradients by autograd's add (model/deepspeed_accumulate.py):
    its update at dp 64, b 3 is m = ⌈16,384 / 192⌉ = 86 micro-batches, 85 adds of 6 B ×
    7,615,616,512 parameters at the H100's triad (3.35 TB/s × 0.8866) = 1.308 s: 348.3 s.

    NCCL runs an all-reduce of 2 GPUs of an H100 node as a ring (model/nccl_search.py: NVLS's
    102 GB/s of bus bandwidth against the ring's 360), the NVLS curve ÷ 480/370: the engine's
    all-reduces 11.893 × 480/370 = 15.429 s, its embedding's 0.212 × 480/370 = 0.275 s: 3.599 s
    more, 351.9 s. The actor's dp collectives (64 ranks, 8 on each of 8 nodes) at NCCL's latency
    by placement, only the ring's 7 steps between nodes at the network's 14 µs (an all-gather
    8.4 + 7 × 14 + 56 × 3.4 = 296.8 µs a call where 890.4 were charged; model/nccl_latency.py):
    0.010 s less, 351.9 s. Under NCCL's tuner (model/nccl_tuner.py: ``ncclTopoTuneModel``,
    ``ncclTopoGetAlgoTime``) the actor's 16 bucket all-reduces of its bf16 gradients
    (⌈7,615,616,512 ∕ 5e8⌉, DeepSpeed's ``reduce_bucket_size``; 1,874,155,626 B sent a rank each)
    had the tree's latency, 8.4 + 2 × (7 × 4.0 + 3 × 14) = 148.4 µs, with the ring's bandwidth;
    timed whole, the tree's bytes at half its bus bandwidth, 0.5 × min(0.92 × 384, 8 × 36.0) =
    144 GB/s (6,759.2 µs), lose to the ring in Simple, its latency × 1.4 once the buffer is
    past the plateau, (8.4 + 2 × (7 × 14 + 56 × 3.4)) × 1.4 = 819.28 µs, and the bytes at
    384 GB/s (5,699.9 µs; LL128 6,666.2): 670.88 µs more a call, +10.7 ms, 351.9 s. The
    all-gathers (937.1 MB a rank) stay Simple ring, as timed before. The scoring forwards timed
    as forward-only pipelines (model.terms.forward_gather.forward_pass_term: the forward's own
    operations, not a third of the three passes): 2.058 s more, 354.0 s. DeepSpeed ZeRO-1/2's own
    optimizer-step passes (model.step_passes.step_pass_bytes: 38 → 98 B an element with bf16
    gradients, the overflow check and the clip's scaling): +60 B × 118,994,008 owned elements
    (7,615,616,512 / dp 64) / (3.35 TB/s × 0.8866) = +2.404 ms, 353.966 → 353.967 s.

    The actor's dp ring across nodes (8 ranks a node) moves at the slower of its NICs and its
    NVLink (model/nvlink_bound.py ``ring_busbw``: NCCL's search keeps the graph every link fits):
    min(8 × 50 × 0.96, 450 × 0.8) = 360 GB/s, not 384. Its all-reduces stay the Simple ring
    (819.28 + 1,874,155,626 B / 360 GB/s = 6,025.3 µs against LL128's 6,666.2 and the tree's
    bytes at 0.5 × min(0.92 × 360, 8 × 36.0) = 144 GB/s), its all-gathers too: the update's
    6 B × 7,615,616,512 × 63/64 = 44,979,735,024 B of dp traffic, all exposed, × (1/360 − 1/384)
    ns a byte = 7.809 ms more, 353.975 s. The weight sync sends the whole model to each engine
    GPU (model.rlhf.engine.sync_weights_bytes), not the tp 2 engine's share: 0.152 s more,
    354.127 s. The sync by placement (model.rlhf.sync_time): beside the actor the engine takes
    each tensor over CUDA IPC, three collectives' latency per tensor and no broadcast: 0.053 s
    less, 354.074 s. OpenRLHF's Ray call to the engine per tensor (339 × 512.78 µs, Ray's
    published ``1_1_actor_calls_sync``) and its clone of each tensor before the hand-over (4N /
    (3.35 TB/s × 0.9) + 339 × 3 µs): 0.185 s more, 354.259 s, the same placement."""
    eng, plan = _engine("deepspeed")
    assert eng.option.fraction == Fraction(19, 20) == default_fraction(False, Framework.DEEPSPEED)
    assert eng.budget_bytes == Fraction(19, 20) * HBM
    ring = 480 / 370  # tp 2's all-reduces as rings: the curve ÷ 480/370
    ar = 8_192 * 56 * 1_835_008 / 74.565e9 + 2 * 32 * 56 * 58_720_256 / 349.017e9
    assert ar == pytest.approx(11.893, abs=1e-3) and (eng.option.tp, eng.option.dp) == (2, 32)
    ar *= ring
    decode_gather, chunk_gather = 77_856_768 / 2 / 285.287e9, 2_433_024 / 2 / 70.886e9
    assert (decode_gather * 1e6, chunk_gather * 1e6) == pytest.approx((136.453, 17.162), abs=1e-3)
    ends = 8_192 * (1_835_008 / 74.565e9 * ring + decode_gather)
    ends += 64 * (58_720_256 / 349.017e9 * ring + chunk_gather)
    assert ends == pytest.approx(1.394, abs=1e-3)
    adds = 85 * 6 * 7_615_616_512 / (3.35e12 * 0.8865671641791045)
    assert adds == pytest.approx(1.308, abs=1e-3)
    step_s = float(plan.step_s)
    placed = -0.0097  # the actor's dp rings' latency by their placement
    placed += 16 * ((8.4 + 2 * (7 * 14 + 56 * 3.4)) * 1.4 - 148.4) * 1e-6  # NCCL's tuner: 0.0107
    scoring = 2.058  # the forward-only scoring pipelines over a third of the three passes
    step_passes = 60 * 7_615_616_512 / 64 / (3.35e12 * 0.8865671641791045)  # ZeRO-2: 38 -> 98 B
    assert step_passes == pytest.approx(2.404e-3, abs=1e-6)
    dp_bytes = 6 * 7_615_616_512 * 63 // 64  # the actor's all-reduce (2 × 2 B) + all-gather (2 B)
    assert dp_bytes == 44_979_735_024
    nvlink = dp_bytes * (1 / 360e9 - 1 / 384e9)  # the ring at NVLink's 360 GB/s, not 384
    assert nvlink == pytest.approx(7.809e-3, abs=1e-6)
    # the engine's weight sync, the whole model to each GPU (model.rlhf.engine.
    # sync_weights_bytes), not its tp 2 share: (15,231,233,024 − 7,615,820,800) B / 50 GB/s
    sync = (15_231_233_024 - 7_615_820_800) / 50e9
    assert sync == pytest.approx(0.1523, abs=1e-4)
    # the sync by placement (model.rlhf.sync_time): the engine shares the 64-GPU pool of the
    # actor at ZeRO-2, tp 1 (its parameters whole): no bytes cross a link; per tensor OpenRLHF's
    # CUDA IPC path runs two all-gathers over 64 ranks on 8 nodes (8.4 + 56 × 3.4 + 7 × 14 =
    # 296.8 µs each) and a one-element all-reduce (the tree, 8.4 + 2 × (7 × 4 + 3 × 14) = 148.4
    # µs): 339 × 742 µs = 0.2515 s in place of the 2N broadcast's 0.3046 s
    shared = 339 * 742e-6 - 15_231_233_024 / 50e9
    assert shared == pytest.approx(-0.0531, abs=1e-4)
    # OpenRLHF's Ray call per tensor and clone (model.rlhf.sync_time.RAY_ACTOR_CALL_S,
    # clone_seconds): 0.173832 + 0.011121 s
    shared += 339 / 1950.1566973268486 + 4 * 7_615_616_512 / (3.35e12 * 0.9) + 339 * 3e-6
    assert not plan.fits and step_s == pytest.approx(
        333.775 + ar + ends + adds + placed + scoring + step_passes + nvlink + sync + shared,
        abs=1e-3,
    )
    assert round(step_s, 2) == 354.26
    split, _ = _engine("deepspeed", rollout_gpus=16)
    assert split.option.fraction == Fraction(19, 20)
    verl, _ = _engine("megatron")
    assert verl.option.fraction == Fraction(1, 2) and verl.budget_bytes == HBM / 2
