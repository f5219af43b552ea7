"""The faithful RLHF accounting of issue 12, held to hand-derived figures: the rollout engine's KV
cache and decode time for a GQA model, the logits buffers, host memory under offload, the pool
memory and step-time rules of a placement."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from tests.model._rlhf_specs import qwen_grpo as _spec
from trainplan.model.errors import InputError, LayoutError
from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf.logits import logits_bytes
from trainplan.model.rlhf.roles import RoleCost, RoleOption
from trainplan.model.rlhf.spec import RLHFSpec
from trainplan.model.rlhf.step import compose, step_seconds
from trainplan.model.rollout import (
    decode_seconds,
    engine_memory,
    kv_bytes_per_token,
    rollout_time,
)
from trainplan.model.timing import kernel_efficiency_for
from trainplan.optimizer.rlhf.tables import RLHFProblem, build_tables, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

QWEN = get_model("qwen2.5-7b").model  # L 28, h 3584, a 28, g 4, d 128, V 152,064
N_QWEN = 7_615_616_512
H100 = get_accelerator("H100-SXM")


def test_kv_cache_per_token_gqa_by_hand():
    """Per token: 2 (K and V) · L · g · d · 2 B = 2·28·4·128·2 = 57,344 B. vLLM splits the 4 KV
    heads over tp ≤ 4 and keeps one whole head per GPU beyond: 28,672 at tp 2, 14,336 at 4 and 8.
    Llama 3 70B (L 80, g 8): 327,680 B, as the seed's kv_cache_bytes."""
    assert kv_bytes_per_token(QWEN.arch) == 2 * 28 * 4 * 128 * 2 == 57_344
    assert [kv_bytes_per_token(QWEN.arch, tp) for tp in (2, 4, 8)] == [28_672, 14_336, 14_336]
    llama = get_model("llama3-70b").model.arch
    assert kv_bytes_per_token(llama) == 2 * 80 * 8 * 128 * 2 == 327_680
    with pytest.raises(LayoutError, match="KV heads"):
        kv_bytes_per_token(get_model("llama3-8b").model.arch, 3)


def test_engine_memory_and_concurrency_by_hand():
    """An 80 GiB H100, fraction 0.5: budget 0.5·80·2^30 = 42,949,672,960 B; Qwen2.5 7B's BF16
    weights 2·7,615,616,512 = 15,231,233,024 B; KV space 27,718,439,936 B. A 1,024 + 4,096 token
    sequence holds 57,344·5,120 = 293,601,280 B: ⌊27,718,439,936 / 293,601,280⌋ = 94 at once,
    below vLLM's max_num_seqs 256."""
    m = engine_memory(
        QWEN.arch, Fraction(2 * N_QWEN), 80 * 2**30, Fraction(1, 2), 256, 10_000, 5120, 1
    )
    assert m.budget_bytes == 42_949_672_960 and m.weights_bytes == 15_231_233_024
    assert m.kv_space_bytes == 42_949_672_960 - 15_231_233_024 == 27_718_439_936
    assert m.kv_per_sequence_bytes == 57_344 * 5120 == 293_601_280
    assert m.concurrent == 27_718_439_936 // 293_601_280 == 94 and m.limited_by == "kv_space"
    assert m.kv_cache_bytes == 94 * 293_601_280
    few = engine_memory(
        QWEN.arch, Fraction(2 * N_QWEN), 80 * 2**30, Fraction(9, 10), 256, 64, 5120, 1
    )
    assert (few.concurrent, few.limited_by) == (64, "sequences")
    with pytest.raises(
        InputError, match=r"engine_memory_fraction: 1.2 must be above 0 and below 1"
    ):
        engine_memory(QWEN.arch, Fraction(0), 80 * 2**30, Fraction(6, 5), 256, 1, 1, 1)


def test_decode_time_gqa_by_hand():
    """One engine replica (tp 1) decodes 64 Qwen2.5 7B rollouts of 1,024 + 4,096 tokens on an
    H100 at its datasheet 3.35 TB/s. A step computes 2·N·64 = 9.748e11 FLOPs: 2.13 ms at
    989.4 TFLOP/s × the calibrated 0.4631; it reads the weights, 15,231,233,024 B = 4.55 ms, and
    the cache so far — memory-bound from the first step. So decode is
    (4,096 · 15,231,233,024 + 64 · 57,344 · (4,096·1,024 + 4,096·4,097/2)) / 3.35e12
    = (62,387,130,466,304 + 46,187,004,559,360) / 3.35e12 = 32.410 s; prefill
    2·N·64·1,024 / (989.4e12 · 0.4631) = 2.179 s."""
    eff = kernel_efficiency_for("H100-SXM", 3584)
    assert eff == pytest.approx(0.56 * 3584 / 4334)
    t = rollout_time(**{**_ROLL, "kernel_efficiency": eff})  # _ROLL: the figures above
    weights = 4096 * 15_231_233_024
    kv = 64 * 57_344 * (4096 * 1024 + 4096 * 4097 // 2)
    assert weights == 62_387_130_466_304 and kv == 46_187_004_559_360
    assert t.decode_s == pytest.approx((weights + kv) / 3.35e12, rel=1e-12)
    assert t.decode_s == pytest.approx(32.410, abs=1e-3)
    assert t.memory_bound_steps == t.total_steps == 4096 and t.waves == 1
    assert t.prefill_s == pytest.approx(2 * N_QWEN * 64 * 1024 / (989.4e12 * eff), rel=1e-12)
    # 200 rollouts, 64 at once: three full waves and one of 8
    four = rollout_time(**{**_ROLL, "sequences_per_replica": 200})
    assert four.waves == 4


_ROLL = dict(
    active_params=N_QWEN,
    weights_bytes=Fraction(2 * N_QWEN),
    kv_per_token_bytes=57_344,
    sequences_per_replica=64,
    concurrent=64,
    prompt_tokens=1024,
    completion_tokens=4096,
    tp=1,
    peak_flops_per_s=989.4e12,
    kernel_efficiency=0.5,
    hbm_bytes_per_s=3.35e12,
    bandwidth_efficiency=1.0,
)


def test_decode_crossover_and_the_longest_rollout():
    """decode_seconds sums max(compute, read) per step in closed form; a longer longest rollout
    runs more steps (each reading the weights) with the same tokens generated."""
    total, bound = decode_seconds(Fraction(10), Fraction(1), Fraction(1), 20)
    assert total == sum(max(10, 1 + t) for t in range(1, 21)) and bound == 11
    same = rollout_time(**_ROLL, max_completion_tokens=4096)
    assert same.decode_s == rollout_time(**_ROLL).decode_s
    tail = rollout_time(**_ROLL, max_completion_tokens=8192)
    assert tail.total_steps == 8192 and tail.decode_s > same.decode_s
    with pytest.raises(InputError, match="max_completion_tokens"):
        rollout_time(**_ROLL, max_completion_tokens=100)


def test_rollout_role_cost_reads_the_engine_and_its_sources():
    """The engine's cost on one GPU: its budget in the rollout phase, nothing held; the decode
    term names the HBM figure's source. The budget is the fraction of what CUDA reports, the
    H100's 81,559 MiB less the 480 MiB its driver keeps (vLLM multiplies gpu_memory_utilization
    by torch.cuda.mem_get_info's total). Decode reads at the H100's BabelStream triad share,
    2.97 of 3.35 TB/s, the optimizer step's: test_decode_time_gqa_by_hand's 32.410 s at the
    datasheet's 3.35 becomes 32.410 × 3.35 / 2.97 = 36.557 s; --bandwidth-efficiency 1 keeps
    32.410 s."""
    spec = _spec(engine_memory_fraction=Fraction(9, 10))
    problem = RLHFProblem(spec, H100, 1, ClusterLinks.from_device(H100))
    cost = cost_of(problem, RoleOption("rollout", 1, 1, 1, 1, "none", Fraction(9, 10)))
    assert cost.held_bytes == 0 and cost.rollout_bytes == Fraction(9, 10) * 81_079 * 2**20
    assert cost.concurrent == 64  # the replica's 64 rollouts, all at once
    decode = next(t for t in cost.terms if t.name.startswith("decode"))
    assert "3.35 TB/s" in decode.source and "0.8866" in decode.source
    assert decode.value == pytest.approx(32.410 * 3.35 / 2.97, abs=0.01)
    assert decode.value == pytest.approx(36.557, abs=0.001)
    roofline = replace(problem, spec=replace(spec, bandwidth_efficiency=1.0))
    full = cost_of(roofline, RoleOption("rollout", 1, 1, 1, 1, "none", Fraction(9, 10)))
    decode = next(t for t in full.terms if t.name.startswith("decode"))
    assert decode.value == pytest.approx(32.41, abs=0.01)


def test_logits_buffers_of_a_7b_grpo_micro_batch():
    """Qwen2.5 7B, 16,384 tokens per micro-batch (verl's ppo_max_token_len_per_gpu) over
    V = 152,064 (2,491,416,576 elements): the update under verl Megatron holds FP32 logits
    4·16,384·152,064 = 9,965,666,304 B and, at Float16Module's cast, the BF16 output beside them,
    and on the backward DivBackward's new FP32 gradient of verl's logits.div_(temperature) beside
    the cross-entropy's in-place one, 4 B per element = 9,965,666,304 B (model.rlhf.logits).
    Chunked (2,048 tokens) keeps the logits and a
    4·2,048·152,064 = 1,245,708,288 B temporary."""
    full = logits_bytes(16384, 152064, 1, "full", pass_="update")
    assert full == (9_965_666_304, 9_965_666_304)
    assert logits_bytes(16384, 152064, 1, "chunked") == (9_965_666_304, 1_245_708_288)
    assert logits_bytes(16384, 152064, 1, "fused") == (1_245_708_288, 1_245_708_288)
    assert logits_bytes(16384, 152064, 4, "full")[0] == 9_965_666_304 // 4
    spec = _spec(completion_tokens=3072)  # 4,096 tokens: 4 sequences per micro-batch
    assert spec.micro_batch_sequences == 4
    problem = RLHFProblem(spec, H100, 8, ClusterLinks.from_device(H100))
    opt = RoleOption("actor", 8, 8, 1, 1)
    cost = cost_of(problem, opt)
    terms = {t.name: t.value for t in cost.terms}
    assert terms["logits (update)"] == 9_965_666_304
    assert terms["log-prob transient beside them (update)"] == 9_965_666_304
    chunked = cost_of(
        RLHFProblem(_spec(completion_tokens=3072, logits="chunked"), H100, 8, problem.links), opt
    )
    assert cost.training_bytes - chunked.training_bytes == 9_965_666_304 - 1_245_708_288


def test_old_log_prob_pass_and_phase_flops():
    """GRPO with a rule reward: scoring is the reference's 2N per token and the actor's old
    log-probs, another 2N; without the recompute (log-probs from the engine), only the first."""
    spec = _spec()
    tokens = 64 * 5120
    flops = spec.phase_flops()
    assert flops["rollout"] == {"rollout": 2 * N_QWEN * tokens}
    assert flops["scoring"] == {"actor": 2 * N_QWEN * tokens, "reference": 2 * N_QWEN * tokens}
    assert flops["training"] == {"actor": 6 * N_QWEN * tokens}
    assert _spec(old_log_prob=False).phase_flops()["scoring"] == {"reference": 2 * N_QWEN * tokens}
    assert _spec(algorithm="ppo", reward="model").role("critic").trainable


def test_host_memory_of_cpu_adam_roles():
    """A 70B trainable role with CPU Adam (model.offload): the host holds the FP32 master and
    two moments (12 B) and the FP32 gradient buffer CPU Adam reads (4 B) per element of the
    optimizer's shards — 16 × 70e9 = 1.12e12 B wherever the shards sit, 1.4e11 B on each of 8
    GPUs. One such role fits a DGX H100's 2 TB; two on one 8-GPU node need 2.24e12 B and do
    not (with 12 B they would have: 1.68e12)."""
    per_gpu = Fraction((12 + 4) * 70 * 10**9, 8)
    assert per_gpu == 140 * 10**9

    def role(name):
        return RoleCost(
            RoleOption(name, 8, 8), Fraction(0), Fraction(0), Fraction(0), Fraction(0),
            0.0, 0.0, 1.0, per_gpu, (), phases=("training",),
        )  # fmt: skip

    one = compose([role("actor")], [0], 80 * 10**9, 2 * 10**12, 8)
    assert one.pools[0].host_bytes * 8 == 1_120 * 10**9 and one.fits
    two = compose([role("actor"), role("critic")], [0, 0], 80 * 10**9, 2 * 10**12, 8)
    assert two.pools[0].host_bytes * 8 == 2 * 1_120 * 10**9 and not two.fits


LLAMA70 = get_model("llama3-70b").model
N_LLAMA70 = 70_553_706_496


def _llama70_actor(**kw) -> RLHFProblem:
    spec = RLHFSpec(
        algorithm="ppo", policy=LLAMA70, prompts=8, samples_per_prompt=1, prompt_tokens=512,
        completion_tokens=512, **kw,
    )  # fmt: skip
    return RLHFProblem(spec, H100, 8, ClusterLinks.from_device(H100))


def test_cpu_adam_of_a_real_70b_actor_is_the_offload_mechanism():
    """Llama 3 70B actor on 8 H100 (dp 8) under Megatron's distributed optimizer (FP32
    main_grad) with CPU Adam, evaluate() with Offload(optimizer=1). Each GPU's optimizer shard
    is e = N/8 = 8,819,213,312 elements.

    * GPU: the optimizer state, 12 B × e = 105,830,559,744 B, leaves what the role holds;
      weights (2 N) and FP32 gradients (4 N) stay; the update's peak above the held state is
      unchanged (Megatron's step adds nothing with FP32 gradients).
    * host: 12 B of state + 4 B of FP32 gradient buffer per element, 16 e per GPU, 16 N =
      1,128,859,303,936 B per node.
    * time, per update (one here): the FP32 gradients down once per step (Megatron-Core's
      HybridDeviceOptimizer) and the BF16 weights back, (4 + 2) B × e / 64 GB/s = 0.826801 s,
      plus CPU Adam streaming (2·12 + 4 + 2) B × e at the DGX H100's 14 cores per GPU ×
      ZeRO-Offload's CPU-Adam 10e9 × 28 B / (2.57 s × 48 cores) = 31.777 GB/s: 8.326057 s
      (3.445005 s at the DIMMs' 76.8 GB/s, before): 9.152859 s. The
      GPU's own Adam step leaves the step: 50 B × e (model.offload.adam_step_bytes(12, 2), 38,
      and Megatron-Core's own passes, model.step_passes.step_pass_bytes: the clip's scaling 8 and
      the master's second read 4) at 2.97 TB/s (BabelStream's triad on H100 SXM, the optimizer
      step's streaming rate) = 0.148472 s, but for the zeroing of the whole FP32 gradient buffer,
      which stays on the GPU (Megatron-LM ``zero_grad_buffer`` → ``grad_data.zero_()``,
      model.terms.optimizer_time.whole_buffer_zeroing_bytes): 4 B × 8e with the step on the host
      as beside it (the 50 B count 4 B × e of it, the other 7e's 4 B come on top), so 46 B × e
      leave, 0.136594 s.
    """
    problem = _llama70_actor()
    base = cost_of(problem, RoleOption("actor", 8, 8, 1, 1))
    cost = cost_of(problem, RoleOption("actor", 8, 8, 1, 1, "optimizer"))
    e = Fraction(N_LLAMA70, 8)
    assert e == 8_819_213_312
    assert base.held_bytes - cost.held_bytes == 12 * e == 105_830_559_744
    assert cost.held_bytes == (2 + 4) * N_LLAMA70 == 423_322_238_976
    assert cost.training_bytes == base.training_bytes
    assert cost.host_bytes == 16 * e and cost.host_bytes * 8 == 16 * N_LLAMA70 == 1_128_859_303_936
    link = (4 + 2) * 8_819_213_312 / 64e9
    host_step = 112 / 8 * 10e9 * 28 / (2.57 * 48)
    assert host_step == pytest.approx(31.7769131e9)
    adam = (2 * 12 + 4 + 2) * 8_819_213_312 / host_step
    assert link == pytest.approx(0.826801248) and adam == pytest.approx(8.326057302)
    gpu_adam = (38 + 8 + 4) * 8_819_213_312 / 2.97e12
    assert gpu_adam == pytest.approx(0.148471605)
    zeroing = 4 * 8_819_213_312 / 2.97e12  # the shard's 4 B stay: the whole buffer is zeroed
    assert gpu_adam - zeroing == pytest.approx(0.136593876)
    assert cost.training_s - base.training_s == pytest.approx(
        link + adam - gpu_adam + zeroing, rel=1e-9
    )
    terms = {t.name: t for t in cost.terms}
    assert terms["of which optimizer offload (host link + CPU Adam)"].value == pytest.approx(
        9.152858550, rel=1e-9
    )
    host = terms["optimizer state + FP32 gradient buffer (offloaded)"]
    assert (host.phase, host.value) == ("host", 16 * e) and "model.offload" in host.source
    assert "optimizer state" not in terms  # nothing of it is held on the GPU


def test_cpu_adam_under_deepspeed_zero2_sends_gradients_every_micro_batch():
    """Qwen2.5 7B actor on 8 H100 (dp 8), DeepSpeed ZeRO-2 with offload_optimizer: the 64
    sequences of 5,120 tokens go 3 per micro-batch, ⌈64/24⌉·24 = 72 on the dp ranks, m = 3
    micro-batches. e = N/8 = 951,952,064 elements per GPU. DeepSpeed accumulates BF16 gradients
    into the host's FP32 partition every micro-batch: 3 × 2 B × e down; up, 2 B × e of weights
    and, for each micro-batch after the first, the host-accumulated BF16 gradients brought back
    (``async_accumulate_grad_in_cpu_via_gpu``), 2 × 2 B × e: 12 B × e / 64 GB/s = 0.178491 s; CPU
    Adam 30 B × e / 31.777 GB/s (14 cores × CPU-Adam's 2.27 GB/s, as above) = 0.898720 s;
    1.077211 s per update, less the GPU's own Adam step (98 B × e at 2.97 TB/s, the triad,
    = 0.031411 s: the 38 B count and DeepSpeed's own passes, model.step_passes.step_pass_bytes,
    60 B at BF16 gradients: the overflow check 28, the norm through .double() 14 beyond the
    count's read, the flatten 4 and FP32 cast 6 of the partition, the clip's scaling 8, the
    master's second read 4, and no zeroing, −4).
    GPU: the 12 B optimizer shard and the 2 B BF16 gradient partition leave what the role
    holds (``copy_grads_in_partition`` returns before allocating ``grads_in_partition``
    under ``cpu_offload``; was 12 B only); host 16 B × e and, with m > 1,
    the BF16 accumulation buffers (``accumulated_grads_in_cpu``) 2 B × e: 18 B × e =
    17,135,137,152 B per GPU. Beside them DeepSpeed stages each gradient through a buffer of the
    largest parameter, on the GPU and its twin on the host (``DeepSpeedZeroOptimizer.__init__``:
    ``temp_grad_buffer_for_gpu_offload`` / ``_for_cpu_offload``): the embedding, 152,064 ×
    3,584 = 544,997,376 elements, 2 B each, 1,089,994,752 B on each side."""
    problem = RLHFProblem(
        _spec(framework="deepspeed", zero_stage=2), H100, 8, ClusterLinks.from_device(H100)
    )
    base = cost_of(problem, RoleOption("actor", 8, 8, 1, 1))
    cost = cost_of(problem, RoleOption("actor", 8, 8, 1, 1, "optimizer"))
    e = Fraction(N_QWEN, 8)
    assert e == 951_952_064
    staging = 2 * 152_064 * 3_584
    assert staging == 1_089_994_752
    assert base.held_bytes - cost.held_bytes == 14 * e - staging == 12_237_334_144
    assert cost.host_bytes == 18 * e + staging == 17_135_137_152 + staging
    host_step = 112 / 8 * 10e9 * 28 / (2.57 * 48)
    offload_s = (3 * 2 + 2 + 2 * 2) * 951_952_064 / 64e9 + 30 * 951_952_064 / host_step
    assert offload_s == pytest.approx(0.178491012 + 0.898720459, rel=1e-8)
    gpu_adam = (38 + 60) * 951_952_064 / 2.97e12  # the GPU's Adam step leaves, as above
    assert gpu_adam == pytest.approx(0.031411213)
    assert cost.training_s - base.training_s == pytest.approx(offload_s - gpu_adam, rel=1e-9)


def test_cpu_adam_refused_where_the_framework_cannot_run_it():
    """FSDP2's only offload is CPUOffloadPolicy (parameters, gradients and optimizer together):
    CPU Adam alone is illegal there, a LayoutError like any illegal layout — the placement
    search leaves those options out and keeps the others. Without a host-memory bandwidth the
    CPU step cannot be timed: one line naming it."""
    fsdp = RLHFProblem(_spec(framework="fsdp2"), H100, 8, ClusterLinks.from_device(H100))
    with pytest.raises(LayoutError, match="CPUOffloadPolicy"):
        cost_of(fsdp, RoleOption("actor", 8, 8, 1, 1, "optimizer"))
    assert cost_of(fsdp, RoleOption("actor", 8, 8, 1, 1, "idle")).swap_bytes > 0
    small = RLHFProblem(_spec(framework="fsdp2"), H100, 8, ClusterLinks.from_device(H100), max_tp=1)
    tables = build_tables(small)
    kept = {o.offload for by in tables.options.values() for v in by.values() for o, _ in v}
    assert "optimizer" not in kept and "idle" in kept
    no_memory = replace(H100, host_memory_bytes_per_s=None)
    mega = RLHFProblem(_spec(), no_memory, 8, ClusterLinks.from_device(no_memory))
    with pytest.raises(InputError, match="offload: the H100-SXM has no host memory bandwidth"):
        cost_of(mega, RoleOption("actor", 8, 8, 1, 1, "optimizer"))


def test_pool_memory_and_step_rules():
    """Peak = Σ held + the largest (swap + phase bytes) of the roles working in the phase: work on
    a pool serialises and a role offloaded when idle is on the GPU for its own turn only. The
    synchronous step adds each phase's slowest pool, one step off-policy overlaps."""

    def cost(name, held, phases, seconds, swap=0):
        b = {p: Fraction(phases.get(p, 0)) for p in ("rollout", "scoring", "training")}
        s = {p: seconds.get(p, 0.0) for p in ("rollout", "scoring", "training")}
        return RoleCost(
            RoleOption(name, 8, 8), Fraction(held), b["rollout"], b["scoring"], b["training"],
            s["rollout"], s["scoring"], s["training"], Fraction(0), (), swap_bytes=Fraction(swap),
            phases=tuple(p for p in b if b[p] or s[p]), process="one",
        )  # fmt: skip

    roll = cost("rollout", 0, {"rollout": 40}, {"rollout": 60.0})
    actor = cost("actor", 30, {"scoring": 10, "training": 20}, {"scoring": 5.0, "training": 30.0})
    ref = cost("reference", 0, {"scoring": 10}, {"scoring": 5.0}, swap=15)
    plan = compose([roll, actor, ref], [0, 0, 0], 100, 10**12, 8)
    # rollout 30 + 40; scoring 30 + max(10, 15 (the reference back) + 10); training 30 + 20
    assert plan.pools[0].peak_bytes == (70, 55, 50) and plan.fits
    big = cost("reward", 0, {"scoring": 10}, {"scoring": 5.0}, swap=35)
    both = compose([roll, actor, ref, big], [0, 0, 0, 0], 100, 10**12, 8)
    assert both.pools[0].peak_bytes[1] == 30 + 35 + 10  # one at a time, not 30 + 15 + 35 + 10
    assert plan.step_s == 60 + 10 + 30 == step_seconds([[60, 10, 30]], 0)
    split = compose([roll, actor, ref], [0, 1, 1], 100, 10**12, 8, off_policy=1)
    assert split.step_s == max(60, 10 + 30) == 60
    assert compose([roll, actor, ref], [0, 1, 1], 100, 10**12, 8).step_s == 100
    with pytest.raises(InputError, match="numbered"):
        compose([roll, actor, ref], [0, 2, 2], 100, 10**12, 8)


def test_spec_refuses_bad_inputs_with_the_rule():
    with pytest.raises(InputError, match="completion_tokens: 0 must be at least 1"):
        _spec(completion_tokens=0)
    with pytest.raises(InputError, match="not a multiple of the group size 16"):
        _spec(train_batch=8)
    with pytest.raises(InputError, match="must divide the step's 64 sequences"):
        _spec(train_batch=48)
    with pytest.raises(InputError, match="above 0 and below 1"):
        _spec(engine_memory_fraction=Fraction(0))
    with pytest.raises(InputError, match="ppo, grpo"):
        _spec(algorithm="dpo")
    with pytest.raises(InputError, match="offload"):
        RoleOption("actor", 8, 8, offload="disk")


def test_an_update_fits_by_the_searchs_figure(monkeypatch):
    """An actor's update is held to the figure the search fits layouts by
    (:func:`model.terms.peak.fit_total`: the allocated peak over both phases, the side streams'
    pools and the communicators in both phases). Qwen2.5 7B GRPO actor under FSDP2, dp 64 on 64
    H100: FSDP2's copy-in stream keeps two all-gather outputs of the largest unit reserved
    (:func:`model.terms.peak.stream_pool_term`), here the embedding, V·h = 152,064 × 3,584 =
    544,997,376 BF16 weights: 2 × 2 B × 544,997,376 = 2,179,989,504 B, and the next unit's
    copy-in buffer beside them, 2 B × 544,997,376 / 64 = 17,031,168 B: 2,197,020,672 B above
    the allocated peak."""
    import trainplan.model.rlhf.network as network

    spec = _spec(framework="fsdp2")
    problem = RLHFProblem(spec, H100, 64, ClusterLinks.from_device(H100))
    option = RoleOption("actor", 64, 64, 1, 1)
    cost = cost_of(problem, option)
    # the same update without the pools (the allocated peak with the communicators)
    monkeypatch.setattr(network, "fit_total", lambda a, pool, comm: a + comm)
    allocated = cost_of(problem, option)
    assert cost.held_bytes == allocated.held_bytes
    pool = 2 * 2 * 152_064 * 3_584 + 2 * 152_064 * 3_584 // 64
    assert cost.training_bytes - allocated.training_bytes == pool
    assert 2 * 2 * 152_064 * 3_584 == 2_179_989_504 and pool == 2_197_020_672
