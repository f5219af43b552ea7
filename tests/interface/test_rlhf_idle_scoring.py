"""Idle offload brings a role's weights back for its scoring turn and its whole state for its
training turn (:func:`model.rlhf.openrlhf.scoring_state_bytes`, ``RoleCost.swap_in``):
verl's Megatron actor and reference score after ``load_megatron_model_to_gpu(load_grad=False)``
and only ``update_actor`` loads the gradients and ``load_megatron_optimizer``; verl's Megatron
critic (``compute_values``) loads with the gradient buffers; verl's FSDP workers load the
parameter shards (``update_policy`` ends with ``zero_grad()``, the gradients freed); OpenRLHF
reloads the offloaded states only around ``fit`` (``PPOTrainer.ppo_train._run_sleep``), scoring on
the BF16 weights it keeps on the GPU. One rule, read by compose, the oracle and CP-SAT
(``int_costs``' swapped-in bytes per phase)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.interface.rlhf.faithful import rlhf_inputs
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import Role
from trainplan.optimizer.rlhf.search import placement_plan, search_placement
from trainplan.optimizer.rlhf.tables import cost_of, int_costs

LINK = 64 * 10**9  # H100 host link, PCIe Gen5 64 GB/s per direction


def _problem(**kw):
    inp = rlhf_inputs({"algorithm": "grpo", "model": "llama3-70b", "reward": "rule", "gpus": 64,
                       "bandwidth_efficiency": 1}  # decode at the datasheet HBM, as derived
                      | kw, placement=False)  # fmt: skip
    return inp.problem


def test_llama3_70b_megatron_actor_brings_back_its_bf16_weights_for_scoring():
    """The actor at dp 8 × tp 4 × pp 2, offloaded when idle. Its busiest stage holds
    P = 8,820,236,288 parameters per GPU (40 layers and the output layer ÷ tp 4, the final norm
    whole): BF16 weights 2P = 17,640,472,576 B, FP32 gradients 4P, the distributed optimizer's
    12 B ÷ dp 8 = 1.5P; the whole state 7.5P = 66,151,772,160 B goes to the host. Scoring brings
    back 2P (the update 7.5P): 17,640,472,576 = 66,151,772,160 × 2 / 7.5; the round trip over
    the host link 2 × 2P / 64 GB/s = 0.551264768 s for scoring (was the whole state's
    2.06724288 s) and 2 × 7.5P / 64 GB/s for training."""
    c = cost_of(_problem(), RoleOption(Role.ACTOR, 64, 8, 4, 2, "idle"))
    whole = 66_151_772_160
    p = whole * 2 // 15
    assert p == 8_820_236_288 and c.swap_bytes == whole
    assert c.scoring_swap_bytes == 2 * p == 17_640_472_576
    assert (c.swap_in("rollout"), c.swap_in("scoring"), c.swap_in("training")) == (0, 2 * p, whole)
    assert int_costs(c)[4] == (0, 17_640_472_576, 66_151_772_160)  # what CP-SAT reads
    busy = cost_of(_problem(), RoleOption(Role.ACTOR, 64, 8, 4, 2, "none"))
    assert c.scoring_s - busy.scoring_s == pytest.approx(2 * 2 * p / LINK) == 0.551264768
    assert c.training_s - busy.training_s == pytest.approx(2 * whole / LINK) == 2.06724288
    terms = {t.name: t.value for t in c.terms if t.phase == "scoring"}
    assert terms["weights back for scoring"] == 2 * p


def test_the_searched_70b_plan_scores_at_29_gb_not_77():
    """``rlhf-plan --algorithm grpo --model llama3-70b --reward rule --gpus 64``: the actor and
    the reference (dp 8 × tp 4 × pp 2) offloaded when idle beside the engine. The pool holds
    2,935,750,656 B in every phase (communicators, buffers, the engine's, its process; the sum of
    tests/interface/test_rlhf_resident.py's PPO 70B test, the same groups: 1,606,418,432 of the
    roles' one set of communicators and the "mpu" buffer, the engine's 629,145,600, the second
    process 700,186,624); scoring adds the larger turn: the actor's weights 17,640,472,576 + its
    old log-probs with the entropy 12 B × 20,480 × 128,256 / 4 = 7,880,048,640 (the reference:
    17,640,472,576 + 8 B × … = 3,940,024,320 less). Peak 28,456,271,872 B (was 77.48 GB with
    the whole 66.15 GB state); step 3,028.8 → 3,027.3 s (the actor's scoring round trip 0.55 s
    in place of 2.07 s).

    With NCCL's channels by placement and their set-up (model/terms/comm_memory.py) the pool
    holds 507,510,784 B less than the 3,443,261,440 it held with 32-channel rings and no set-up:
    the roles' 132 connections × 12 MiB = 1,660,944,384 became (484 + 148 + 76 + 292 + 292) MiB
    = 1,354,760,192 (306,184,192 less), the engine's two tp 8 rings 2 × 32 → 2 × 24 channels ×
    12 MiB (201,326,592 less). Peak 28,963,782,656 → 28,456,271,872 B.

    NCCL's SM charge (``nccl_sm_charge``, on by default) adds to the actor's one update
    (GRPO: no critic) what its once-per-step dp traffic over 8 nodes, c = 0.529385 s, costs the
    backward it hides under: φ·c with φ = 1 − 1/1.314 = 0.238965, where its last of 221 buckets,
    c / 221, waited before (model.step_time.dp_exposed_seconds): 0.124 s, 3,027.27 →
    3,027.39 s.

    The model-parallel group Megatron-LM's train_step all-reduces over at every ZeRO stage
    (model/terms/comm_groups.py ``megatron_rings``; the roles' layout tp 4 × pp 2: the tp block
    of 4 at the pp stride of 32, 4 ranks a node on 2 nodes, 16 channels, 192 + 100 = 292 MiB)
    adds 306,184,192 B to the roles' set: 2,935,750,656 → 3,241,934,848 B held, peak
    28,456,271,872 → 28,762,456,064 B; the step does not move. NVLink SHARP
    (model/terms/nvls_memory.py): the tp 4 ring in a node 2 MiB of credits (NCCL's tuner runs a
    4-GPU all-reduce of an H100 node as a ring, model/nccl_search.py: no buffers; 16 × 2 × (128
    KiB × 8) × 4 = 128 MiB more were counted before); the dp, gradient-statistics, world and
    model-parallel rings (≥ 2 ranks a node across nodes) 2 MiB of credits each: 10 MiB,
    3,252,420,608 B held, peak 28,772,941,824 B.

    The engine's tp all-reduces (model/rollout_reduce.py; vLLM RowParallelLinear, 2·80 = 160 a
    forward over tp 8) add to its rollout: 32,768 decode steps × 160 × 57.019 µs (256 tokens ×
    8,192 × 2 B = 2^22 B at the curve's 128.73 GB/s, each rank sending 1.75 × it) = 298.94 s,
    and 8 waves × 32 prefill chunks of 8,192 tokens × 160 × 586.31 µs (2^27 B at 400.61 GB/s) =
    24.02 s: 3,027.39 → 3,350.35 s, the same placement. The embedding's all-reduce and the
    logits all-gather, one each a forward (model/rollout_reduce.py; tests/model/
    test_rollout_reduce.py's 70B engine): 32,768 × (57.019 + 207.229) µs + 256 × (586.308 +
    28.854) µs = 8.659 + 0.157 s: 3,359.17 s. The engine's CUDA graph pool, an assumed
    386,547,057 B (model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES), is held in every phase: 386,547,057
    B more held and in the scoring peak, the same placement and step.

    NCCL's SM charge reaches the layers' and the output layer's asynchronous tp 4 collectives
    too (model.step_time.kind_parts; as in tests/interface/test_rlhf_resident.py's PPO 70B, the
    same layout): the actor's update 15.391 s more (φ × the 64.313 s they hid under their GEMMs
    uncharged, 15.369 s, with the 1F1B bubble's share), the actor's and the reference's scoring
    a third of it each: 15.391 + 2 × 5.130 = 25.65 s, 3,359.17 → 3,384.82 s.

    Since the charge follows the algorithm NCCL runs each group's collectives as
    (model.nccl_channels): the update's dp group, 8 ranks 2 on each of 4 nodes, on the ring's 8
    blocks, φ_dp = 1 − 1/1.177 = 0.150382: (0.150382 − 1/221) × 0.529385 = 0.0772 s (0.1241 s
    at NVLS's 0.238965); the tp 4 all-gathers and reduce-scatters (sequence parallelism) on the
    node's 24, φ_tp = 1 − 1/1.350 = 0.259259: 0.259259 × 64.313 = 16.674 s, 16.698 s with the
    bubble's share, 16.698 + 2 × 16.698/3 = 27.83 s: 3,386.95 s, the same placement.

    The scoring forwards timed as forward-only pipelines (model.terms.forward_gather.
    forward_pass_term: the forward's own operations and tp 4 collectives, exposed in a forward
    where the backward's hide under their GEMMs; no third of the update's backward-only terms,
    its SM charge among them): each role's scoring 413.96 → 439.06 s, this placement's step
    3,386.90 → 3,437.09 s, its bytes unchanged. The search now answers the actor and the
    reference at dp 4 × tp 2 × pp 8 (fewer forward collectives a micro-batch), 3,419.33 s, still
    scoring at 29.2 GB. The weight sync sends the whole model to each engine GPU
    (model.rlhf.engine.sync_weights_bytes), not the tp 8 engine's share: + 2.469 s to both,
    3,439.56 and 3,421.80 s.

    verl sends each of a prompt's 16 samples as its own request, round robin over the engine's 8
    replicas, prefix caching on (model.rollout_prefix): the second sample of a prompt on a
    replica reuses ⌊1,023/16⌋·16 = 1,008 prompt tokens, 504 a sample on average, so each
    prefills 520 tokens: the prefill's compute 73.032 → 37.087 s and its chunks' tp collectives
    24.015 → 12.264 s (16 chunks of 8,192 tokens and one of 2,048 a wave, not 32 of 8,192):
    47.697 s less, 3,391.86 s.

    The actor trains, so its last stage holds Transformer Engine's placeholder weight gradients
    for the whole run (model/terms/dummy_wgrads.py; at tp 4 QKV [2,560, 8,192], proj [8,192,
    2,048], FC1 [14,336, 8,192], FC2 [8,192, 7,168] and the output layer [32,128, 8,192] in BF16:
    954,204,160 B), in every phase and in the pool's groups' resident bytes; the reference
    scores only and holds none: the pool holds 4,593,171,825 B and scores at 30.11 GB."""
    problem = _problem()
    engine = cost_of(problem, RoleOption(Role.ROLLOUT, 64, 8, 8, 1, "none", Fraction(9, 10)))
    roles = [
        cost_of(problem, RoleOption(r, 64, 8, 4, 2, "idle")) for r in (Role.ACTOR, Role.REFERENCE)
    ]
    plan = placement_plan(problem, (engine, *roles), (0, 0, 0))
    (pool,) = plan.pools
    assert 12 * 20_480 * 128_256 // 4 == 7_880_048_640
    held = 1_606_418_432 + 629_145_600 + 700_186_624
    assert held == 3_443_261_440 - 507_510_784 == 2_935_750_656
    fewer = (1_660_944_384 - (484 + 148 + 76 + 292 + 292) * 2**20) + 2 * 8 * 12 * 2**20
    assert fewer == 306_184_192 + 201_326_592 == 507_510_784
    mp, nvls, graphs = 292 * 2**20, (2 + 4 * 2) * 2**20, 386_547_057
    assert held + mp + nvls + graphs == 3_252_420_608 + graphs == 3_638_967_665
    dummies = 2 * 8192 * (2560 + 2048 + 14336 + 7168 + 32128)
    assert dummies == 954_204_160
    assert pool.held_bytes == 3_638_967_665 + dummies == 4_593_171_825
    assert held + 17_640_472_576 + 7_880_048_640 == 28_456_271_872
    assert 28_456_271_872 + mp + nvls + graphs == 29_159_488_881
    assert pool.peak_bytes[1] == 29_159_488_881 + dummies == 30_113_693_041
    charge = (1 - 1 / 1.177 - 1 / 221) * 0.529385  # the dp group's 8 ring blocks
    assert charge == pytest.approx(0.0772, abs=1e-4)
    decode = 32_768 * 160 * (2**22 * 1.75 / 128.73e9)
    prefill = 8 * 32 * 160 * (2**27 * 1.75 / 400.61e9)
    assert (decode, prefill) == (pytest.approx(298.943, abs=1e-3), pytest.approx(24.015, abs=1e-3))
    ends = 32_768 * (57.019e-6 + 207.229e-6) + 256 * (586.308e-6 + 28.854e-6)
    assert ends == pytest.approx(8.816, abs=1e-3)
    update = (1 - 1 / 1.350) * 64.313 * 15.391 / 15.369  # the ring's 24 blocks; the bubble's share
    assert update == pytest.approx(16.698, abs=1e-3)
    tp = update + 2 * update / 3  # the update and two roles' scoring
    # the roles' 1F1B bubbles the order's own on stages of unequal time (model.pipeline_onef):
    # 0.052 s under the closed forms' that the derivation above sums
    # the engine's weight sync, the whole model to each GPU (model.rlhf.engine.
    # sync_weights_bytes), not its tp 8 share: (141,107,412,992 − 17,640,734,720) B / 50 GB/s
    sync = (141_107_412_992 - 17_640_734_720) / 50e9
    assert sync == pytest.approx(2.4693, abs=1e-4)
    # verl's samples share their prompt's blocks (model.rollout_prefix; the docstring):
    # 16 samples over 8 replicas, each prefilling 520 of its 1,024 prompt tokens on average —
    # the prefill's compute 73.032 → 37.087 s, its chunks' tp collectives 24.015 → 12.264 s
    prefix = -(73.032 - 73.032 * 520 / 1_024) - (24.015 - 12.264)
    assert prefix == pytest.approx(-47.697, abs=1e-3)
    step = 3027.27 + charge + decode + prefill + ends + tp - 0.052 + sync + prefix
    assert step == pytest.approx(3341.67, abs=0.05)  # scoring a third of the three passes
    # the sync by placement (model.rlhf.sync_time): the engine shares the pool of the tp 4 × pp 2
    # actor, whose export brings each GPU 2N·7/8 B over NVLink, + 723 tensors × (a tp 4
    # all-gather's 18.6 µs + a pp 2 broadcast in one node, 8.4 + 2 × 4.0 = 16.4 µs as NCCL's
    # tuning.cc models Broadcast, model.nccl_latency.broadcast_latency): 0.2997 s, not the 2N
    # broadcast's 2.8221 (0.2988 s, -2.5233, with the 15.2 µs of 8.4 + 2 × 3.4: + 723 × 1.2 µs)
    whole = 141_107_412_992 / 50e9
    shared = 141_107_412_992 * 7 / 8 / 450e9 + 723 * (18.6e-6 + 16.4e-6) - whole
    assert shared == pytest.approx(-2.5225, abs=1e-4)
    assert plan.step_s - step - shared == pytest.approx(2 * (439.06 - 413.96), abs=0.05)
    assert plan.step_s == pytest.approx(3437.09 + 2.469 - 47.697 + shared, abs=0.01)
    assert roles[0].scoring_s == roles[1].scoring_s == pytest.approx(439.06, abs=0.01)
    best = search_placement(problem).best.plan
    assert {(c.option.dp, c.option.tp, c.option.pp) for c in best.costs[1:]} == {(4, 2, 8)}
    # its actor at tp 2 × pp 8 exports over two nodes: 2N·15/16 B at the NIC + 723 × (a tp 2
    # all-gather's 11.8 µs + a pp 8 broadcast over two nodes, 8.4 + 8 × 14 = 120.4 µs) = 2.7413
    # s (2.6954 s, -0.1268, with the 56.8 µs of 8.4 + 6 × 3.4 + 2 × 14: + 723 × 63.6 µs =
    # 45.98 ms on the step, the same layouts)
    apart_nodes = 141_107_412_992 * 15 / 16 / 50e9 + 723 * (11.8e-6 + 120.4e-6) - whole
    assert apart_nodes == pytest.approx(-0.0808, abs=1e-4)
    assert best.step_s == pytest.approx(3419.33 + 2.469 - 47.697 - 0.300 + apart_nodes, abs=0.01)
    # with the samples' shared prompt blocks (docstring) the search takes the engine at 0.8, whose
    # 50,373,260,083 B of KV space hold 256 samples of 4,616 tokens' KV (240 of 5,120 before), and
    # keeps the reference resident, its scoring 0.300 s shorter (no weights brought back): the
    # pool scores at 29,207,788,913 B + the reference's resident state, 9,607,397,376 B (the
    # model's figure), 38.8 GB — still not 77; and the actor's placeholder weight gradients on
    # its tp 2 last stage (model/terms/dummy_wgrads.py: [5,120, 8,192], [8,192, 4,096], [28,672,
    # 8,192], [8,192, 14,336] and the output layer [64,128, 8,192] in BF16), 1,906,311,168 B:
    # 40.7 GB
    assert {c.option.offload for c in best.costs[1:]} == {"idle", "none"}
    tp2 = 2 * 8192 * (5120 + 4096 + 28672 + 14336 + 64128)
    assert tp2 == 1_906_311_168
    assert best.pools[0].peak_bytes[1] == 29_207_788_913 + 9_607_397_376 + tp2


def test_the_megatron_critic_brings_back_its_gradient_buffers_too():
    """PPO Llama 3 8B on 8 GPUs, the critic at dp 8 offloaded when idle: verl's Megatron
    ``CriticWorker.compute_values`` calls ``load_megatron_model_to_gpu(critic_module)`` with
    ``load_grad=True``: BF16 weights 2 B + FP32 gradient buffers 4 B = 6 B of its 7.5 B a
    parameter. The critic is the policy (8,030,261,248) with verl's value head
    (``LinearForLastLayer(h, 1)``, bias on: h + 1 = 4,097) in place of the 128,256 × 4,096 =
    525,336,576 output layer (model.value_head): P = 7,504,928,769 (8,030,261,248 with the LM
    head, 60,226,959,360 B moved). The gradients are allocated and zeroed, not copied: the round
    trip moves the weights only, 2 × 2P / 64 GB/s."""
    prob = rlhf_inputs({"algorithm": "ppo", "model": "llama3-8b", "gpus": 8}, placement=False)
    c = cost_of(prob.problem, RoleOption(Role.CRITIC, 8, 8, 1, 1, "idle"))
    busy = cost_of(prob.problem, RoleOption(Role.CRITIC, 8, 8, 1, 1, "none"))
    p = 8_030_261_248 - 128_256 * 4_096 + 4_096 + 1
    assert p == 7_504_928_769
    assert c.swap_bytes == Fraction(15, 2) * p == Fraction(112_573_931_535, 2)
    assert c.scoring_swap_bytes == 6 * p == 45_029_572_614
    assert c.scoring_s - busy.scoring_s == pytest.approx(2 * 2 * p / LINK)


def test_fsdp2_brings_back_the_fp32_shard_and_openrlhf_nothing():
    """PPO Llama 3 8B on 8 GPUs: the actor has P = 8,030,261,248 parameters, the critic the
    policy's with a value head in place of the 128,256 × 4,096 = 525,336,576 output layer
    (model.value_head): verl's with a bias, h + 1 (P = 7,504,928,769), OpenRLHF's without, h
    (P = 7,504,928,768). ``fsdp2`` (verl FSDP, dp 8): scoring brings back the FP32 parameter
    shard, 4 B × P / 8 (the actor's 4,015,130,624 B), of the 12 B × P / 8 state it moves (the
    actor's 12,045,391,872 B: weights 4 B ÷ 8, optimizer 8 B ÷ 8; its FP32 gradients, 4 B ÷ 8, are
    freed by ``update_policy``'s final ``zero_grad()`` and made by the update itself, not moved).
    ``deepspeed`` (OpenRLHF, ZeRO-1): the BF16 weights stay on the GPU and nothing else comes
    back before ``fit``: 0 for scoring, 3.5 B × P moved (all but 2P) for training, the actor's
    28,105,914,368 B."""
    actor = 8_030_261_248
    critic = actor - 128_256 * 4_096 + 4_096  # + 1 with verl's bias
    for fw, bias in (("fsdp2", 1), ("deepspeed", 0)):
        prob = rlhf_inputs(
            {"algorithm": "ppo", "model": "llama3-8b", "gpus": 8, "framework": fw}, placement=False
        )
        for role, p in ((Role.ACTOR, actor), (Role.CRITIC, critic + bias)):
            scoring, swap = (
                (Fraction(p, 2), Fraction(3 * p, 2)) if fw == "fsdp2" else (0, Fraction(7, 2) * p)
            )
            c = cost_of(prob.problem, RoleOption(role, 8, 8, 1, 1, "idle"))
            assert (c.swap_in("scoring"), c.swap_in("training")) == (scoring, swap)
    assert 4 * actor // 8 == 4_015_130_624 and 28_105_914_368 == 3.5 * actor
    assert 12 * actor // 8 == 12_045_391_872
    assert (critic + 1, critic) == (7_504_928_769, 7_504_928_768)
