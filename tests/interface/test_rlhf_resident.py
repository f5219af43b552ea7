"""What an RLHF role holds in every phase of the step: its NCCL communicators and the
framework's persistent buffers (``RoleCost.resident_bytes``), counted by the pool in every phase
— the rollout and scoring included — whatever the role's offload, once per set of shared process
groups (:func:`model.rlhf.step.pool_resident`); under the ``megatron`` profile the roles of a pool
share one set (verl: one process per GPU, ``mpu.initialize_model_parallel`` once), so they run one
tp × pp. Every process on a GPU beyond the reserve's one — the engine's worker, and under
``deepspeed`` (OpenRLHF) each role's own — adds its CUDA context and cuBLAS workspace
(:func:`model.rlhf.step.process_bytes`)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.interface.rlhf.faithful import rlhf_inputs
from trainplan.model.errors import InputError, LayoutError
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import Role
from trainplan.model.rlhf.step import compose
from trainplan.optimizer.rlhf.search import placement_plan, search_placement
from trainplan.optimizer.rlhf.tables import cost_of

MIB = 2**20
CONNECTION = 12 * MIB  # one NCCL connection: 10 MiB of receive buffers + 2 MiB send side
CAPACITY = 83_210_009_600  # H100-SXM usable bytes (HBM less the runtime reserve)
GRAPHS = 386_547_057
"""The engine's CUDA graph pool, an assumed 0.36 GiB = 0.36 × 1,073,741,824 = 386,547,056.64 B,
rounded up (model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES), held in every phase of its pool."""

SYNC_70B_OLD = 141_107_412_992 / 50e9
"""The weight sync the plans below were first derived with: Llama 3 70B's whole BF16 weights
(2N) broadcast to each engine GPU at the 50 GB/s NIC, 2.822 s, wherever the engine ran."""
SYNC_70B_SHARED = 141_107_412_992 * 15 / 16 / 50e9 + 723 * (11.8e-6 + 120.4e-6)
"""The sync to an engine on the actor's pool (model.rlhf.sync_time): verl's Megatron actor at
tp 2 × pp 8 exports each tensor whole, 2N·(1 − 1/16) B per GPU over the NIC (the 16 ranks span two
nodes), 2.6458 s, plus 723 tensors (80 layers × 9 + 3) × (a tp 2 all-gather's 8.4 + 3.4 µs and a
pp 8 broadcast over two nodes, base + nRanks hops at the network's 14 µs as NCCL's tuning.cc
models Broadcast, 8.4 + 8 × 14 = 120.4 µs, model.nccl_latency.broadcast_latency) = 95.6 ms:
2.7413 s, 0.0808 s less. (With the pp 8 broadcast at the other ring collectives' 8.4 + 6 × 3.4 +
2 × 14 = 56.8 µs it was 2.6954 s: 723 × 63.6 µs = 45.98 ms less.)"""


def _ppo_70b():
    # first-fit packing: micro-batches of 3 whole rollouts, 15,360 tokens, as derived below (verl's
    # balanced packing, the megatron default, holds 4: tests/model/test_rlhf_micro_batch_tokens.py)
    return rlhf_inputs(
        # decode at the datasheet HBM bandwidth, as the figures below were derived (the
        # default is the part's BabelStream share: tests/model/test_rlhf_time.py)
        {"algorithm": "ppo", "model": "llama3-70b", "gpus": 64, "packing": "first-fit",
         "bandwidth_efficiency": 1},
        placement=False,
    )  # fmt: skip


def test_ppo_70b_on_64_h100_counts_the_colocated_roles_communicators():
    """``rlhf-plan --algorithm ppo --model llama3-70b --gpus 64``. The old answer placed the
    actor at dp 8 × tp 4 × pp 2, the critic at dp 8 × tp 2 × pp 4, the reference at dp 16 × tp 2
    × pp 2 and the reward model at dp 32 × tp 1 × pp 2 on one pool, and fit the critic's update
    with 379 MB to spare while the actor's 1,660,944,384 B of communicators (and the others')
    were live beside it, uncounted: over capacity. verl cannot run four layouts on one pool (its
    Megatron workers share one process per GPU and initialise Megatron-Core's groups once), and
    the plan now gives every training and scoring role one layout, dp 8 × tp 4 × pp 2.

    Bytes held in every phase, by hand (12 MiB per NCCL connection; each communicator's
    collective channels by placement and their set-up, (pow2Up(channels) × 3 + 2) × 2 MiB,
    model/terms/comm_memory.py): the tp 4 ring in a node, 24 channels, 288 + 196 = 484 MiB; the
    dp 8 ring over 32 consecutive ranks, 2 a node (8 channels), 96 + 52 = 148 MiB; the pipeline
    neighbour on another node, 4 channels (a 50 GB/s NIC ÷ 14 GB/s per channel, rounded up to a
    power of two), 48 + 28 = 76 MiB; the distributed optimizer's gradient-statistics ring and the
    world group's ring over 8 nodes (16 channels), 192 + 100 = 292 MiB each: 1,292 MiB =
    1,354,760,192 B (132 connections, 1,660,944,384 B, at 32 channels a ring without set-up); the
    last stage adds the output layer's "mpu" all-gather buffer, 2 B × b 3 × s 5,120 × h 8,192 =
    251,658,240 B: 1,606,418,432 B, once for the four roles (one set of groups). Since
    Megatron-LM's model-parallel group (train_step's all-reduces, every ZeRO stage; the tp block
    of 4 at the pp stride of 32, 4 a node on 2 nodes, 16 channels) is counted, 292 MiB more:
    1,912,602,624 B, and every figure below that holds it 306,184,192 B more.

    Two processes on each GPU (verl's fused worker and the engine's vLLM worker): one CUDA
    context 666,632,192 B + one cuBLAS workspace 33,554,432 B = 700,186,624 B beyond the
    reserve's. Held: 1,606,418,432 + 700,186,624 = 2,306,605,056 B, and the engine's tp 8
    communicators (its PyNccl ring and custom all-reduce outside its budget, torch's ring for the
    logits all-gather inside it; a node's 24 channels each): 2 × 301,989,888 + 25,165,824 =
    629,145,600 B.

    Peaks: rollout 76,515,744,153.6 (the engine's 0.9 × 85,017,493,504 B) + 2,306,605,056 +
    327,155,712; scoring the actor's 66,151,772,160 swapped in + 5,910,036,480 (its old
    log-probs with the entropy under verl Megatron: 12 B × 15,360 × 128,256 / 4,
    model.rlhf.logits; 8 B, 3,940,024,320, before the path was read) + 2,935,750,656 =
    74,997,559,296 before scoring brought back the weights only (now the critic's 6 B a
    parameter and its forward, 56,895,258,624 below); training the actor's 66,151,772,160 +
    8,144,486,400 (the update's logits at 8 B per element under verl Megatron: FP32 logits, the
    cross-entropy's in-place gradient and DivBackward's new FP32 gradient of
    logits.div_(temperature), 2 B × 15,360 × 128,256 / 4 = 985,006,080 above the 6 B without it,
    and the recomputed layer's softmax statistics, 983,040) + 2,935,750,656 = 77,232,009,216 —
    each within
    83,210,009,600 B. Step 5,346.8 s → 5,496.4 s.

    NCCL's SM charge (:class:`model.timing.CostOptions` ``nccl_sm_charge``, on by
    default): the actor's and the critic's updates each overlap the distributed optimizer's
    once-per-step dp traffic, c = 0.529385 s over 8 nodes, with the last micro-batch's backward,
    where uncharged only its last of 221 buckets waited, c / 221 = 2.395 ms; charged, the
    computation it hides under runs on 1 − φ of the SMs, φ = 1 − 1/1.314 = 0.238965
    (:func:`model.comm_sms.collective_sm_share`), and max(φ·c, c − window) = φ·c = 126.505 ms
    waits (model.step_time.dp_exposed_seconds): 2 updates × (126.505 − 2.395) ms = 0.248 s,
    5,493.394 → 5,493.642 s.

    The charge reaches the layers' and the output layer's asynchronous tp 4 collectives too
    (model.step_time.kind_parts): of each update's 223.579 s of tp collectives, 64.313 s hid
    under their GEMMs uncharged, each shorter than (1 − φ) of its GEMM, so φ × 64.313 = 15.369 s
    more waits, 15.391 s of the update with the 1F1B bubble's share (pp 2); each of the four
    roles' scoring is a third of the passes (model.rlhf.network._forward_s), 15.391 / 3 =
    5.130 s more: 2 × 15.391 + 4 × 5.130 = 51.30 s, 5,825.41 → 5,876.72 s.

    NCCL runs a 4-GPU all-reduce of an H100 node as a ring (model/nccl_search.py): the tp 4
    ring holds NVLS's 2 MiB of credits, not 130 MiB (134,217,728 B less held in every phase),
    and the roles' cross-entropy all-reduces read the NVLS curve ÷ 480/370: 0.076 s more.

    The scoring forwards timed as forward-only pipelines (model.terms.forward_gather.
    forward_pass_term: the forward's own operations and tp 4 collectives, no third of the
    update's backward-only terms or SM charge): each role's scoring 413.967 → 439.057 s, this
    placement 5,880.88 → 5,981.26 s, its bytes unchanged; the search now answers every role at
    dp 4 × tp 2 × pp 8, 5,945.74 s.

    Megatron-Core's own optimizer-step passes (model.step_passes.step_pass_bytes, 38 → 50 B an
    element: the clip always scales, +8, and the master weight re-read, +4): the actor's and the
    critic's updates each step the busiest stage's elements a GPU, (10 × 855,654,400 +
    1,050,673,152 embedding) ÷ tp 2 ÷ dp 4 = 1,200,902,144, +12 B × 1,200,902,144 / (3.35 TB/s ×
    0.8866) = +4.852 ms each: the answer 5,945.742 → 5,945.752 s (+9.704 ms), the same layouts;
    the dp 8 × tp 4 × pp 2 placement (40 layers and the embedding ÷ 32 = 1,102,401,536 a GPU,
    +4.454 ms each) 5,981.263 → 5,981.272 s (+8.909 ms).

    The weight sync sends the whole model to each engine GPU (model.rlhf.engine.
    sync_weights_bytes: each parameter whole, the engine rank keeps its shard), not its tp 8
    share: (141,107,412,992 − 17,640,734,720) B / 50 GB/s = +2.469 s, the answer 5,945.752 →
    5,948.221 s, the same layouts.

    verl sends each of a prompt's 16 samples as its own request, round robin over the engine's 8
    replicas, prefix caching on (model.rollout_prefix): 2 samples of each prompt on each
    replica, the second reusing ⌊1,023/16⌋·16 = 1,008 prompt tokens — 504 a sample on average,
    neither prefilled nor held. The engine at 0.9 prefills 520 tokens a sample, not 1,024: 97.047
    → 49.350 s (compute 73.032 × 520/1,024 = 37.087 s; the prefill chunks' tp collectives
    24.015 → 12.264 s, 16 chunks of 8,192 tokens and one of 2,048 a wave). A sample now holds
    4,616 tokens of KV: at fraction 0.8 the KV space, 0.8 × 85,017,493,504 − 17,640,734,720 =
    50,373,260,083 B, holds 256 of 40,960 × 4,616 = 189,071,360 B (it held 240 of 5,120 tokens'
    209,715,200 B: 9 waves, which the old answer's 0.9 avoided), so the search now takes the
    engine at 0.8 and keeps the reference resident, its scoring 0.300 s shorter (no weights to
    bring back): 5,948.221 − 47.697 − 0.300 = 5,900.224 s, the same layouts.

    The weight sync by placement: the engine shares the actor's pool, so the actor's export
    (SYNC_70B_SHARED, 2.6954 s with the pp 8 broadcast at 56.8 µs) replaces the 2N broadcast
    (2.8221 s): 5,900.097 s. NCCL's Broadcast as tuning.cc models it (120.4 µs over two nodes):
    the export 2.7413 s, + 723 × 63.6 µs = 45.98 ms, 5,900.143 s, the same layouts.

    The critic and the reward model carry a value head, not the LM head (model.value_head: verl's
    ``LinearForLastLayer(h, 1)``): their slowest pipeline stage is the last, 10 layers and the
    128,256 × 8,192 output layer at tp 2 (1,050,673,152 parameters, more than a layer's
    855,654,400), with its cross-entropy and tp collectives; with the value head it runs its 10
    layers and an [h → 1] linear. The critic's and the reward model's scoring each 438.468 →
    384.929 s, the critic's update 1,649.481 → 1,510.774 s: 2 × 53.539 + 138.707 = 245.785 s
    less, 5,900.143 → 5,654.358 s, the same layouts (with the LM heads, 5,900.143 comes back)."""
    inp = _ppo_70b()
    p = inp.problem
    r = search_placement(p)
    assert r.status == "optimal" and r.best.colocated and r.best.plan.fits
    layouts = {(o.dp, o.tp, o.pp) for o in r.best.options if o.role is not Role.ROLLOUT}
    assert layouts == {(4, 2, 8)}
    assert (141_107_412_992 - 17_640_734_720) / 50e9 == pytest.approx(2.4693, abs=1e-4)
    kv_space = Fraction(4, 5) * 85_017_493_504 - 17_640_734_720
    assert (kv_space // (40_960 * 4_616), kv_space // (40_960 * 5_120)) == (266, 240)
    assert 73.032 * 520 / 1_024 == pytest.approx(37.087, abs=1e-3)
    heads = 2 * (438.468 - 384.929) + (1649.481 - 1510.774)
    assert heads == pytest.approx(245.785, abs=1e-3)
    step = 5945.752 + 2.469 - 47.697 - 0.300 - SYNC_70B_OLD + SYNC_70B_SHARED - heads
    assert r.best.plan.step_s == pytest.approx(step, abs=0.01)
    seconds = {c.option.role: (c.scoring_s, c.training_s) for c in r.best.plan.costs}
    assert seconds[Role.ACTOR] == pytest.approx((438.468, 1649.481), abs=1e-3)
    assert seconds[Role.CRITIC] == pytest.approx((384.929, 1510.774), abs=1e-3)
    assert seconds[Role.REWARD] == pytest.approx((384.929, 0.0), abs=1e-3)
    roles = (Role.ACTOR, Role.CRITIC, Role.REFERENCE, Role.REWARD)
    engine = RoleOption(Role.ROLLOUT, 64, 8, 8, 1, "none", Fraction(9, 10))
    options = (engine, *(RoleOption(x, 64, 8, 4, 2, "idle") for x in roles))
    plan = placement_plan(p, tuple(cost_of(p, o) for o in options), (0,) * 5)
    before_mp = (484 + 148 + 76 + 292 + 292) * MIB + 2 * 3 * 5120 * 8192
    assert before_mp == 1_606_418_432
    # + the model-parallel group (tp 4 × pp 2: 4 ranks a node on 2 nodes, 16 channels), 292 MiB
    assert before_mp + 292 * MIB == 1_912_602_624
    # + NVLink SHARP (model/terms/nvls_memory.py): the tp 4 ring in a node 2 MiB of credits, no
    # buffers (NCCL's tuner runs a 4-GPU all-reduce of an H100 node as a ring: NVLS's 240 GB/s of
    # bus bandwidth against the ring's 360, model/nccl_search.py; 16 × 2 × (128 KiB × 8) × 4 =
    # 128 MiB more were counted before); the dp ring (2 a node), the gradient-statistics, world
    # and model-parallel rings (≥ 2 a node across nodes, or one-float all-reduces NCCL runs as
    # rings, src/graph/tuning.cc) 2 MiB of credits each: 10 MiB
    resident = before_mp + 292 * MIB + 10 * MIB
    assert resident == 1_923_088_384
    # the engine at tp 8: its PyNccl ring 24 × 12 MiB + custom all-reduce 3 × 8 MiB outside its
    # budget, and torch's ring for the logits all-gather, 24 × 12 MiB, inside it
    outside, inside = 24 * CONNECTION + 3 * 8 * MIB, 24 * CONNECTION
    assert (outside, inside) == (327_155_712, 301_989_888)
    # + the engine's CUDA graph pool, an assumed 0.36 GiB rounded up (ENGINE_GRAPH_POOL_BYTES),
    # beyond its budget and kept asleep: in every phase
    graphs = 386_547_057
    # + the trained roles' Transformer Engine placeholder weight gradients (model/terms/
    # dummy_wgrads.py) on their last stage at tp 4: QKV [2,560, 8,192], proj [8,192, 2,048], FC1
    # [14,336, 8,192], FC2 [8,192, 7,168] and the output layer [32,128, 8,192] (V padded to
    # 128,512) in BF16, 427,819,008 + 526,385,152 = 954,204,160 B; the pool holds the actor's
    # (the groups' largest); the reference and the reward model run no backward: none
    dummies = 2 * 8192 * (2560 + 2048 + 14336 + 7168) + 2 * 32128 * 8192
    assert dummies == 427_819_008 + 526_385_152 == 954_204_160
    (pool,) = plan.pools
    held = resident + dummies + outside + inside + graphs + 666_632_192 + 33_554_432
    assert pool.processes == 2 and pool.process_bytes == 700_186_624
    assert pool.resident_bytes == resident + dummies + outside + inside + graphs
    assert held == 2_935_750_656 + 306_184_192 + 10 * MIB + graphs + dummies
    assert pool.held_bytes == held == 3_252_420_608 + graphs + dummies == 4_593_171_825
    costs = {str(c.option.role): c for c in plan.costs}
    layers = 427_819_008  # the four layer shapes' placeholders, without the output layer's
    assert costs["actor"].resident_bytes == resident + dummies
    assert costs["reference"].resident_bytes == resident  # no backward: no placeholders
    # the critic's value head (model.value_head) gathers nothing: no "mpu" buffer on its last
    # stage, 251,658,240 B less; a plain nn.Linear, it has no placeholder either: its layers' only
    assert costs["critic"].resident_bytes == resident - 2 * 3 * 5120 * 8192 + layers
    assert costs["actor"].swap_bytes == 66_151_772_160
    assert costs["actor"].scoring_bytes == 12 * 15_360 * 128_256 // 4 == 5_910_036_480
    # + Transformer Engine's FP32 softmax statistics of the recomputed layer, 4 B × 64/4 heads ×
    # 15,360 tokens = 983,040
    assert costs["actor"].training_bytes == 7_158_497_280 + 985_006_080 + 983_040 == 8_144_486_400
    engine = Fraction(9, 10) * 85_017_493_504
    assert costs["rollout"].rollout_bytes == engine - inside
    # scoring: each idle role brings back its weights only (verl compute_log_prob /
    # compute_ref_log_prob load_grad=False), the Megatron critic its gradient buffers too
    # (compute_values, load_grad=True): 6 B × P, P = 66,151,772,160 / 7.5 = 8,820,236,288 for the
    # actor's busiest stage, beside its forward working set, 1,038,090,240 B; the actor 2P +
    # 5,910,036,480 is less. The critic's value head (model.value_head) leaves its last stage the
    # lighter: its busiest is the first, 40 layers and the embedding, without the final norm's
    # 8,192 (8,820,236,288 for either end stage with the LM head): P = 8,820,228,096
    assert costs["critic"].swap_bytes == Fraction(15, 2) * (8_820_236_288 - 8_192)
    critic = 6 * (8_820_236_288 - 8_192) + 1_038_090_240
    assert critic == 53_959_458_816 > 2 * 8_820_236_288 + 5_910_036_480
    assert pool.peak_bytes == (
        engine + held - inside,
        critic + held,
        66_151_772_160 + 8_144_486_400 + held,
    )
    # the pool held 3,443,261,440 B before NCCL's placed channels (above): scoring 57,402,769,408
    # and training 77,739,520,000 then, 507,510,784 B less each after (56,895,258,624 and
    # 77,232,009,216), 306,184,192 B more each with the model-parallel ring, NVLS's 10 MiB
    # (57,211,928,576 and 77,548,679,168), 386,547,057 B more each with the engine's graph
    # pool; the critic's value head, 6 × 8,192 = 49,152 B less in scoring (57,598,475,633 with
    # the LM head); and the placeholders' 954,204,160 B
    peaks = (57_598_426_481 + dummies, 77_935_226_225 + dummies)
    assert pool.peak_bytes[1:] == peaks == (58_552_630_641, 78_889_430_385)
    assert pool.peak <= CAPACITY
    # the actor's and the critic's scoring round trips move 2P, not 7.5P: 2 × 2 × 5.5P / 64 GB/s
    # = 3.03 s less than 5,496.4 s: 5,493.39 s; NCCL's SM charge on the two updates' dp traffic
    # (docstring): 2 × (φ − 1/221) × 0.529385 s = 0.248 s more
    phi = 1 - 1 / 1.177  # the dp group's 8 ring blocks (2 ranks a node)
    charge = 2 * (phi - 1 / 221) * 0.529385
    assert charge == pytest.approx(0.1544, abs=1e-4)
    # the engine's tp 8 all-reduces (model/rollout_reduce.py), as in test_rlhf_idle_scoring.py's
    # GRPO 70B: 32,768 decode steps × 160 × 57.019 µs + 8 × 32 prefill chunks × 160 × 586.31 µs
    # = 298.94 + 24.02 = 322.96 s more: 5,493.64 → 5,816.60 s, the same placement; the
    # embedding's all-reduce and the logits all-gather, one each a forward (tests/model/
    # test_rollout_reduce.py's 70B engine): 32,768 × (57.019 + 207.229) µs + 256 × (586.308 +
    # 28.854) µs = 8.816 s more: 5,825.42 s
    ar = 32_768 * 160 * (2**22 * 1.75 / 128.73e9) + 8 * 32 * 160 * (2**27 * 1.75 / 400.61e9)
    assert ar == pytest.approx(322.958, abs=1e-3)
    ends = 32_768 * (57.019e-6 + 207.229e-6) + 256 * (586.308e-6 + 28.854e-6)
    assert (1 - 1 / 1.350) * 64.313 == pytest.approx(16.674, abs=1e-3)
    update = 16.674 * 15.391 / 15.369  # with the 1F1B bubble's share (pp 2)
    tp = 2 * update + 4 * update / 3  # the two updates and the four roles' scoring
    # the roles' tp 4 cross-entropy all-reduces run as rings (NCCL's tuner: NVLS's 240 GB/s of
    # bus bandwidth at 4 GPUs against the ring's 360, model/nccl_search.py), the NVLS curve ÷
    # 480/370: 0.076 s more
    xent = 0.076
    # the roles' 1F1B bubbles the order's own on stages of unequal time (model.pipeline_onef):
    # 0.174 s under the closed forms' that the derivation above sums
    onef = -0.174
    # the engine's weight sync, the whole model to each GPU (model.rlhf.engine.
    # sync_weights_bytes), not its tp 8 share: (141,107,412,992 − 17,640,734,720) B / 50 GB/s
    sync = (141_107_412_992 - 17_640_734_720) / 50e9
    # verl's samples share their prompt's blocks (model.rollout_prefix; the test's docstring):
    # 16 samples over 8 replicas, each prefilling 520 of its 1,024 prompt tokens on average —
    # the prefill's compute 73.032 → 37.087 s, its chunks' tp collectives 24.015 → 12.264 s
    prefix = -(73.032 - 73.032 * 520 / 1_024) - (24.015 - 12.264)
    assert prefix == pytest.approx(-47.697, abs=1e-3)
    step = 5493.39 + charge + ar + ends + tp + xent + onef + sync + prefix
    assert step == pytest.approx(5835.65, abs=0.05)  # scoring a third of the three passes
    # the sync by placement (model.rlhf.sync_time): the engine on the actor's pool receives the
    # actor's export at tp 4 × pp 2, 2N·7/8 B over NVLink + 723 × (a tp 4 all-gather's 18.6 µs +
    # a pp 2 broadcast in one node, 8.4 + 2 × 4.0 = 16.4 µs as NCCL's tuning.cc models Broadcast;
    # 15.2 µs, -2.5233 s, at the other ring collectives' 8.4 + 2 × 3.4) = 0.2744 + 0.0253 s, not
    # the 2N broadcast's 2.8221 s
    shared = 141_107_412_992 * 7 / 8 / 450e9 + 723 * (18.6e-6 + 16.4e-6)
    assert shared - SYNC_70B_OLD == pytest.approx(-2.5225, abs=1e-4)
    # the critic and the reward model carry value heads (model.value_head): their last stage,
    # 40 layers and the 128,256 × 8,192 output layer at tp 4 with its cross-entropy and tp
    # collectives, runs 40 layers and an [h → 1] head: each one's scoring 439.057 → 425.620 s,
    # the critic's update 1,666.063 → 1,631.499 s (5,933.522 s with the LM heads)
    seconds = {c.option.role: (c.scoring_s, c.training_s) for c in plan.costs}
    assert seconds[Role.ACTOR] == pytest.approx((439.057, 1666.063), abs=1e-3)
    assert seconds[Role.CRITIC] == pytest.approx((425.620, 1631.499), abs=1e-3)
    assert seconds[Role.REWARD][0] == pytest.approx(425.620, abs=1e-3)
    heads = 2 * (439.057 - 425.620) + (1666.063 - 1631.499)
    assert heads == pytest.approx(61.438, abs=1e-3)
    moved = plan.step_s - step - (shared - SYNC_70B_OLD) + heads
    assert moved == pytest.approx(4 * (439.057 - 413.967), abs=0.05)
    passes = 2 * 12 * 1_102_401_536 / 2.97e12  # Megatron-Core's step passes, 38 -> 50 B
    assert passes == pytest.approx(8.908e-3, abs=1e-6)
    step = 5981.27 + 2.469 - 47.697 + shared - SYNC_70B_OLD - heads
    assert plan.step_s == pytest.approx(step, abs=0.01)


def test_the_old_four_layout_answer_is_refused():
    """The old answer's four layouts on one pool are refused in one line: one process per GPU,
    one set of Megatron-Core groups, one tp × pp."""
    inp = _ppo_70b()
    p = inp.problem
    opts = [
        RoleOption(Role.ROLLOUT, 64, 8, 8, 1, "none", Fraction(9, 10)),
        RoleOption(Role.ACTOR, 64, 8, 4, 2, "idle"),
        RoleOption(Role.CRITIC, 64, 8, 2, 4, "idle"),
        RoleOption(Role.REFERENCE, 64, 16, 2, 2, "idle"),
        RoleOption(Role.REWARD, 64, 32, 1, 2, "idle"),
    ]
    costs = tuple(cost_of(p, o) for o in opts)
    # each role's own groups, as evaluate() counts them, at its busiest stage (MiB; each
    # communicator's placed channels × 12 MiB and its set-up, model/terms/comm_memory.py), the
    # gradient-statistics and world rings over 8 nodes 292 each, a pipeline pair across nodes
    # (4 channels) 48 + 28 = 76 on an end stage, and the "mpu" buffer on a tp > 1 last stage:
    # the actor, tp 4 in a node 484 + dp 8 at 2 a node (8 channels) 148 = 1,292; the critic
    # (dp 8 × tp 2 × pp 4) and the reference (dp 16 × tp 2 × pp 2), tp 2 484 + dp at 4 a node
    # (16 channels) 292 = 1,436 (the critic's middle stages, two neighbours, 96 + 28: 1,484
    # without the buffer, fewer); the reward model, dp 32 at 8 a node 292: 952 (no tp ring, no
    # buffer). And each role's model-parallel group, which Megatron-LM's train_step all-reduces
    # over at every ZeRO stage (model/terms/comm_groups.py megatron_rings), placed as a tp block
    # at each pp stride: the actor's 4 × 2 ranks, 4 a node on 2 nodes, 16 channels, 292; the
    # critic's 2 × 4 and the reference's 2 × 2, 2 a node on 4 and 2 nodes, 8 channels, 96 + 52 =
    # 148; the reward model's 1 × 2, one a node on 2 nodes, 4 channels, 76. NVLink SHARP
    # (model/terms/nvls_memory.py): the tp ring in a node 2 MiB of credits, no buffers (NCCL's
    # tuner runs an all-reduce of 4 or 2 GPUs of an H100 node as a ring, model/nccl_search.py;
    # 130 and 66 MiB with the buffers before), and 2 MiB of credits on each other ring with ≥ 2
    # ranks a node (dp, gradient statistics, world, model-parallel: 8; the reward model's
    # model-parallel ring, one rank a node: none, 6). The critic's value head (model.value_head:
    # verl's LinearForLastLayer, a torch.nn.Linear on each rank's own tokens) gathers nothing, so
    # no "mpu" buffer: its busiest stage is a middle one, two pipeline neighbours 96 + 28 MiB
    # (1,721,761,792 B; with the LM head its last stage's 1,923,088,384 B, the reference's)
    mpu = 251_658_240
    actor, reference = (
        (484 + 148 + 76 + 584 + 292 + 2 + 8) * MIB + mpu,
        (484 + 292 + 76 + 584 + 148 + 2 + 8) * MIB + mpu,
    )
    critic = (484 + 292 + 96 + 28 + 584 + 148 + 2 + 8) * MIB
    assert (critic, reference) == (1_721_761_792, 1_923_088_384)
    reward = (292 + 76 + 584 + 76 + 6) * MIB
    # the trained roles' last stages also hold Transformer Engine's placeholder weight gradients
    # (model/terms/dummy_wgrads.py, BF16): the actor at tp 4 [2,560, 8,192], [8,192, 2,048],
    # [14,336, 8,192], [8,192, 7,168] and the output layer [32,128, 8,192], 954,204,160 B; the
    # critic at tp 2 [5,120, 8,192], [8,192, 4,096], [28,672, 8,192], [8,192, 14,336] (its value
    # head a plain nn.Linear: none), 855,638,016 B; the scoring roles none
    tp4 = 2 * 8192 * (2560 + 2048 + 14336 + 7168 + 32128)
    tp2 = 2 * 8192 * (5120 + 4096 + 28672 + 14336)
    assert (tp4, tp2) == (954_204_160, 855_638_016)
    got = [c.resident_bytes for c in costs[1:]]
    assert got == [actor + tp4, critic + tp2, reference, reward]
    with pytest.raises(InputError, match=r"need one tp × pp: actor tp 4 × pp 2, critic tp 2"):
        placement_plan(p, costs, (0, 0, 0, 0, 0))


def test_scoring_and_rollout_count_the_roles_own_communicators():
    """GRPO, Llama 3 8B on 16 H100, the actor and the reference at dp 16, colocated with the
    engine: the actor's communicators — the dp 16 ring, the gradient-statistics ring and the world
    ring, each over 2 nodes at 8 a node, 16 channels × 12 MiB + (16 × 3 + 2) × 2 MiB of set-up =
    292 MiB (model/terms/comm_memory.py): 876 MiB = 918,552,576 B (tp 1: no tp ring, no "mpu"
    buffer; 96 connections of 32-channel rings, 1,207,959,552 B, before the placed channels) —
    count in the rollout and scoring phases as in training. Before, the scoring phase left them
    out (80.00 GB where 81.21 GB were held)."""
    inp = rlhf_inputs(
        {"algorithm": "grpo", "model": "llama3-8b", "reward": "rule", "gpus": 16},
        placement=False,
    )
    p = inp.problem
    actor = cost_of(p, RoleOption(Role.ACTOR, 16, 16, 1, 1))
    ref = cost_of(p, RoleOption(Role.REFERENCE, 16, 16, 1, 1))
    engine = cost_of(p, RoleOption(Role.ROLLOUT, 16, 8, 2, 1, "none", Fraction(1, 2)), None, True)
    # and NVLink SHARP's 2 MiB of credits on each (8 ranks a node; model/terms/nvls_memory.py)
    assert ref.resident_bytes == 3 * (292 + 2) * MIB == 924_844_032
    # the actor trains: its Transformer Engine placeholder weight gradients too (model/terms/
    # dummy_wgrads.py) at tp 1, QKV [6,144, 4,096], proj [4,096, 4,096], FC1 [28,672, 4,096],
    # FC2 [4,096, 14,336] and the output layer [128,256, 4,096] in BF16, 1,486,880,768 B; the
    # reference scores only (no backward): none
    dummies = 2 * 4096 * (6144 + 4096 + 28672 + 14336 + 128256)
    assert dummies == 436_207_616 + 1_050_673_152 == 1_486_880_768
    assert actor.resident_bytes == 924_844_032 + dummies == 2_411_724_800
    # the engine's tp 2: PyNccl's ring 24 + torch's all-gather ring 24 connections (the 24
    # collective channels of a node, model/terms/comm_memory.py RING_CHANNELS; no set-up counted
    # for the engine's rings), custom all-reduce 24 MiB; and its CUDA graph pool (GRAPHS)
    assert engine.resident_bytes == 48 * CONNECTION + 24 * MIB + GRAPHS == 1_015_692_657
    plan = compose((engine, actor, ref), (0, 0, 0), CAPACITY, 2 * 10**12, 8)
    (pool,) = plan.pools
    # once: one set of groups (the actor's, the larger); the engine's; and the engine's worker,
    # a second process
    held = actor.held_bytes + ref.held_bytes + 2_411_724_800 + 1_015_692_657 + 700_186_624
    assert pool.held_bytes == held
    assert pool.peak_bytes[0] == held + engine.rollout_bytes
    assert pool.peak_bytes[1] == held + max(actor.scoring_bytes, ref.scoring_bytes)
    assert pool.peak_bytes[2] == held + actor.training_bytes


def test_roles_with_groups_of_their_own_add_up():
    """Under FSDP2 each role builds its own device mesh (verl ``create_device_mesh`` in every
    worker): the pool adds every role's bytes held in every phase."""
    inp = rlhf_inputs(
        {"algorithm": "grpo", "model": "qwen2.5-7b", "reward": "rule", "gpus": 64,
         "framework": "fsdp2"},
        placement=False,
    )  # fmt: skip
    p = inp.problem
    actor = cost_of(p, RoleOption(Role.ACTOR, 64, 64, 1, 1))
    ref = cost_of(p, RoleOption(Role.REFERENCE, 64, 64, 1, 1, "idle"))
    assert actor.groups == ref.groups == "" and actor.resident_bytes > 0
    plan = compose((actor, ref), (0, 0), CAPACITY, 2 * 10**12, 8)
    assert plan.pools[0].resident_bytes == actor.resident_bytes + ref.resident_bytes


def test_a_sleeping_engine_keeps_its_communicators_and_its_graphs():
    """verl's defaults (``free_cache_engine`` true, ``enforce_eager`` false, vLLM
    ``sleep(level=1)``) free the engine's weights and KV cache between rollouts. What stays is
    counted in every phase where vLLM's code sizes it — the tp group's PyNccl ring and custom
    all-reduce buffers (outside the budget) and the torch communicator of the logits all-gather,
    a ring (inside it, so the rollout phase holds it once) — and the CUDA graph pool, beyond the
    budget (captured after the KV cache) and kept asleep, at the assumed 0.36 GiB =
    0.36 × 1,073,741,824 = 386,547,056.64 → 386,547,057 B (ENGINE_GRAPH_POOL_BYTES). At tp 1 the
    engine opens no tp communicator: its resident bytes are the graph pool alone."""
    import trainplan.model.rollout as rollout

    inp = _ppo_70b()
    engine = cost_of(inp.problem, RoleOption(Role.ROLLOUT, 64, 8, 8, 1, "none", Fraction(9, 10)))
    inside = 24 * CONNECTION  # a ring of a node's 24 collective channels (RING_CHANNELS)
    graphs = 386_547_057
    assert engine.resident_bytes == 24 * CONNECTION + 24 * MIB + inside + graphs == 1_015_692_657
    assert engine.budget_resident_bytes == inside and engine.held_bytes == 0
    assert engine.scoring_bytes == engine.training_bytes == 0
    assert engine.rollout_bytes == Fraction(9, 10) * 85_017_493_504 - inside
    assert not engine.over_budget
    grpo = rlhf_inputs(
        {"algorithm": "grpo", "model": "qwen2.5-7b", "reward": "rule", "gpus": 64},
        placement=False,
    )
    one = cost_of(grpo.problem, RoleOption(Role.ROLLOUT, 64, 64, 1, 1, "none", Fraction(3, 10)))
    assert (one.resident_bytes, one.budget_resident_bytes) == (graphs, 0)
    (term,) = [t for t in one.terms if "CUDA graph pool" in t.name]
    assert (term.phase, term.value) == ("held", graphs) and "ASSUMED" in term.source
    doc = " ".join((rollout.__doc__ or "").split())
    assert "The engine's CUDA graphs: an assumed allowance." in doc and "#56373" in doc
    # the vLLM each profile runs: verl b178a3cd5 allows 0.8.5 to 0.12.0, OpenRLHF pins 0.27.1
    assert "0.8.5 to 0.12.0" in doc and "pins 0.27.1" in doc


def test_grpo_qwen7b_on_64_h100_counts_the_sleeping_engine():
    """``rlhf-plan --algorithm grpo --model qwen2.5-7b --reward rule --gpus 64``: the engine at
    tp 4 × dp 16, fraction 0.3, shares its pool with the actor and the reference. Before, its
    communicators held nothing outside the rollout, and the old answer (actor's optimizer on the
    GPU) peaked at 82,946,630,688 B in scoring. The engine's tp 4 group now holds, in every
    phase: the PyNccl ring 32 × 12 MiB = 402,653,184 B, custom all-reduce 3 × 8 MiB = 25,165,824
    B and torch's ring for the logits all-gather, 402,653,184 B (inside the 0.3 × 85,017,493,504
    B budget): 830,472,192 B. The old placement's scoring peak became 82,946,630,688 +
    830,472,192 = 83,777,102,880 B, above the 83,210,009,600 usable, and the answer put the
    actor's optimizer on the CPU (322.2 s). With the reference's logits read from verl's Megatron
    path (model.rlhf.logits: FP32 logits + the BF16 output at the cast, 6 B per element where
    8 B were counted), the reference's scoring — the pool's binding moment — holds
    2 B × 15,360 × 152,064 = 4,671,406,080 B less: 79,105,696,800 B. The old placement fits
    again and is the answer, 322.1 s (the actor's old log-probs, 12 B per element, 28.03 GB,
    stay below the reference's 15.23 GB swapped in + 14.01 GB). All of this at first-fit
    packing, 15,360-token micro-batches; verl's balanced packing (the default) is
    test_grpo_qwen7b_under_verl_packing_moves_off_dp64.

    With NCCL's channels by placement and their set-up (model/terms/comm_memory.py) the engine's
    two rings are a node's 24 channels, 24 × 12 MiB each: 629,145,600 B (201,326,592 fewer), and
    the actor's dp 64, gradient-statistics and world rings over 8 nodes 16 channels with their
    set-up, 292 MiB each, 876 MiB against 3 × 384 = 1,152 MiB (289,406,976 fewer): the old
    placement's scoring peak is 79,105,696,800 − 490,733,568 = 78,614,963,232 B, the same
    answer at 322.1 s.

    NCCL's SM charge (``nccl_sm_charge``, on by default): the actor's one update overlaps
    the distributed optimizer's once-per-step dp traffic over 8 nodes, c = 0.329050 s, with the
    last micro-batch's backward; charged at φ = 1 − 1/1.314 = 0.238965 it leaves φ·c = 78.631 ms
    waiting where its last of 119 buckets, c / 119 = 2.765 ms, did
    (model.step_time.dp_exposed_seconds): 75.9 ms more, 322.130 → 322.206 s, the same answer.

    With the engine's tp all-reduces timed (model/rollout_reduce.py) that placement takes
    357.88 s and the answer moves to a tp 2 engine, the actor offloaded when idle: 336.12 s.
    With the embedding's all-reduce and the logits all-gather too, 361.88 s and 337.45 s (the tp
    2 engine, 256 at once in 2 waves, + 1.331 s: tests/interface/
    test_rlhf_openrlhf_defaults.py), the same answer. NCCL runs an all-reduce of 2 or 4 GPUs of
    an H100 node as a ring (model/nccl_search.py: NVLS's 102 and 240 GB/s of bus bandwidth
    against the ring's 360), the NVLS curve ÷ 480/370: 372.67 s and 341.05 s, the same answer."""
    inp = rlhf_inputs(  # decode at the datasheet HBM bandwidth, as derived below
        {"algorithm": "grpo", "model": "qwen2.5-7b", "reward": "rule", "gpus": 64,
         "packing": "first-fit", "bandwidth_efficiency": 1},
        placement=False,
    )  # fmt: skip
    p = inp.problem
    engine = cost_of(p, RoleOption(Role.ROLLOUT, 64, 16, 4, 1, "none", Fraction(3, 10)))
    sleeping = 24 * CONNECTION + 3 * 8 * MIB + 24 * CONNECTION
    assert engine.resident_bytes == sleeping + GRAPHS == 629_145_600 + GRAPHS
    old = [
        RoleOption(Role.ROLLOUT, 64, 16, 4, 1, "none", Fraction(3, 10)),
        RoleOption(Role.ACTOR, 64, 64, 1, 1),
        RoleOption(Role.REFERENCE, 64, 64, 1, 1, "idle"),
    ]
    plan = placement_plan(p, tuple(cost_of(p, o) for o in old), (0,) * 3)
    less = 2 * 15_360 * 152_064
    assert less == 4_671_406_080
    fewer = (830_472_192 - 629_145_600) + (1152 - 876) * MIB
    assert fewer == 490_733_568
    assert 83_777_102_880 - less - fewer == 78_614_963_232
    # and NVLink SHARP's 2 MiB of credits on each of the actor's three rings (8 ranks a node
    # across nodes, model/terms/nvls_memory.py): 6 MiB; + the engine's CUDA graph pool, kept
    # asleep (GRAPHS); + the actor's Transformer Engine placeholder weight gradients
    # (model/terms/dummy_wgrads.py) at tp 1, QKV [4,608, 3,584], proj [3,584, 3,584], FC1
    # [37,888, 3,584], FC2 [3,584, 18,944] and the output layer [152,064, 3,584] in BF16,
    # 1,556,086,784 B, held in every phase (the reference scores only: none)
    dummies = 2 * 3584 * (4608 + 3584 + 37888 + 18944 + 152064)
    assert dummies == 1_556_086_784
    assert 78_614_963_232 + 6 * MIB + GRAPHS == 79_007_801_745
    assert plan.pools[0].peak_bytes[1] == 79_007_801_745 + dummies == 80_563_888_529
    assert plan.fits
    r = search_placement(p)
    assert r.status == "optimal" and r.best.colocated and r.best.plan.fits
    charge = (1 - 1 / 1.314 - 1 / 119) * 0.329050  # the docstring's SM charge
    assert charge == pytest.approx(0.0759, abs=1e-4)
    # the engine's tp 4 all-reduces (model/rollout_reduce.py), rings: 16,384 decode steps × 56 ×
    # 47.889 µs + 4 waves × 32 prefill chunks × 56 × 327.395 µs (tests/model/
    # test_rollout_reduce.py) = 43.938 + 2.347 s on the old placement: 322.21 → 368.49 s; the
    # embedding's all-reduce and the logits all-gather: 16,384 × (47.889 + 204.680) µs + 4 × 32
    # × (327.395 + 25.742) µs = 4.138 + 0.045 s more: 372.67 s
    ar = 16_384 * 56 * 47.889e-6 + 4 * 32 * 56 * 327.395e-6
    ends = 16_384 * (47.889e-6 + 204.680e-6) + 4 * 32 * (327.395e-6 + 25.742e-6)
    assert ends == pytest.approx(4.183, abs=1e-3)
    # and its scoring forwards as forward-only pipelines (model.terms.forward_gather.
    # forward_pass_term, not a third of the three passes): 2.087 s more, 374.76 s
    scoring = 2.087
    # and the weight sync of the whole model to each engine GPU (model.rlhf.engine.
    # sync_weights_bytes), not its tp 4 share: (15,231,233,024 − 3,808,114,688) B / 50 GB/s =
    # 0.228 s more, 374.99 s
    sync = (15_231_233_024 - 3_808_114_688) / 50e9
    assert sync == pytest.approx(0.2285, abs=1e-4)
    # and the sync by placement (model.rlhf.sync_time): the engine shares the pool of verl's
    # Megatron actor at tp 1 × pp 1, whose weights are whole on every GPU: its export gathers
    # nothing and hands each bucket over CUDA IPC, so the 2N broadcast's 0.3046 s goes: 374.69 s
    shared = 0.0 - 15_231_233_024 / 50e9
    step = 322.13 + charge + ar + ends + scoring + sync + shared
    assert plan.step_s == pytest.approx(step, abs=0.05)
    assert plan.step_s == pytest.approx(374.69, abs=0.05)
    # and the answer leaves it: engine tp 2 × dp 32 at 0.6, actor and reference dp 64 offloaded
    # when idle, 336.12 s with its 56 all-reduces a forward on the NVLS curve, 8,192 decode
    # steps × 56 × 24.609 µs + 64 prefill chunks × 56 × 168.245 µs = 11.892 s; NCCL runs them as
    # rings, × 480/370: 3.536 s more, 339.66 s; + 8,192 × (31.925 + 136.453) µs + 64 × (218.264
    # + 17.162) µs = 1.394 s for its embedding's all-reduce (a ring too) and logits all-gather:
    # 341.05 s
    by = {o.role: o for o in r.best.options}
    assert (by[Role.ROLLOUT].tp, by[Role.ROLLOUT].fraction) == (2, Fraction(3, 5))
    assert by[Role.ACTOR].offload == by[Role.REFERENCE].offload == "idle"
    rollout = next(c for c in r.best.plan.costs if c.option.role is Role.ROLLOUT)
    assert (rollout.option.dp, rollout.concurrent) == (32, 256)
    rings = (8_192 * 56 * 24.609e-6 + 64 * 56 * 168.245e-6) * (480 / 370 - 1)
    assert rings == pytest.approx(3.536, abs=1e-3)
    ends = 8_192 * (31.925e-6 + 136.453e-6) + 64 * (218.264e-6 + 17.162e-6)
    assert ends == pytest.approx(1.394, abs=1e-3)
    # and its scoring forwards as forward-only pipelines: 2.090 s more, 343.14 s; and its
    # whole-model weight sync, not the tp 2 share: (15,231,233,024 − 7,615,820,800) B / 50 GB/s
    # = 0.152 s more, 343.29 s
    sync = (15_231_233_024 - 7_615_820_800) / 50e9
    # and, its actor at tp 1 × pp 1 on the engine's pool, no broadcast (above): 342.99 s
    step = 336.12 + rings + ends + 2.090 + sync + shared
    assert r.best.plan.step_s == pytest.approx(step, abs=0.05)
    assert r.best.plan.step_s == pytest.approx(342.99, abs=0.05)
    assert r.best.plan.step_s < plan.step_s


def test_grpo_qwen7b_under_verl_packing_moves_off_dp64():
    """The same command at the megatron default, verl's balanced packing: micro-batches of
    ⌈16,384 / 5,120⌉ = 4 rollouts, 20,480 tokens. The actor's old log-probs (12 B per element)
    grow by 12 × 5,120 × 152,064 = 9,342,812,160 B over first-fit's 15,360 tokens, so the 322.1 s
    placement (actor dp 64 × tp 1) no longer fits its pool in scoring, and the answer takes
    tp 2 for the actor and the reference: 334.9 s (334.94 s; 334.99 s with NCCL's SM charge, on
    by default: the actor's update, dp 32 over 8 nodes, overlaps the distributed
    optimizer's c = 0.200219 s of once-per-step dp traffic, charged φ·c = 0.238965 × c =
    47.845 ms where its last of 96 buckets, c / 96 = 2.086 ms, waited: 45.8 ms more).

    With the engine's tp all-reduces timed (model/rollout_reduce.py; +35.68 s for a tp 4 engine,
    tests/model/test_rollout_reduce.py) the answer is instead the rlhf guide's: engine tp 1 ×
    dp 64 at 0.7 with no all-reduce, the actor and the reference at dp 64 × tp 1 offloaded when
    idle, 343.00 s; 354.83 s with decode at the H100's BabelStream share.

    With the engine's CUDA graph pool counted in every phase (GRAPHS, 386,547,057 B assumed) that
    placement's training peak, 82.86 GB of 83.21, becomes 83.25 GB: it no longer fits, and the
    answer is an engine at tp 2 × dp 32, fraction 0.6, the actor at dp 32 × tp 2 on the GPU and
    the reference at dp 32 × tp 2 offloaded when idle: 358.0 s (rollout 105.3 + scoring 84.9 +
    training 167.7).

    NCCL's SM charge reaches the layers' and the output layer's asynchronous tp 2 collectives
    (model.step_time.kind_parts): of the actor's update's 12.459 s of them 3.574 s hid under
    their GEMMs uncharged, each shorter than (1 − φ) of its GEMM, so φ × 3.574 = 0.854 s more
    waits (no pipeline); the actor's and the reference's scoring, a third of the passes
    (model.rlhf.network._forward_s), 0.285 s more each: 357.96 + 0.854 + 2 × 0.285 = 359.39 s
    (rollout 105.3 + scoring 85.5 + training 168.6), the same placement. Since the charge
    follows the algorithm NCCL runs (model.nccl_channels), the tp 2 all-gathers and
    reduce-scatters (sequence parallelism) hold the ring's 24 blocks of a node, φ = 1 − 1/1.350
    = 0.259259: 0.259259 × 3.574 = 0.927 s, 0.309 s each scoring, 359.51 s; the dp group (32
    over 8 nodes, 4 a node: 16 ring blocks, 0.238965) is charged as before.

    NCCL runs an all-reduce of 2 GPUs of an H100 node as a ring (model/nccl_search.py: NVLS's
    102 GB/s of bus bandwidth against the ring's 360), the NVLS curve ÷ 480/370: the tp 2
    engine's all-reduces 3.600 s more (3.536 s its layers', 0.064 s its embedding's:
    test_grpo_qwen7b_on_64_h100_counts_the_sleeping_engine), the actor's and the reference's
    tp 2 cross-entropy all-reduces 0.005 s: 363.11 s (rollout 108.9), the same placement. The
    actor's dp ring (32 ranks, 4 on each of 8 nodes) charged by NCCL's model only its 7 steps
    between nodes at the network's 14 µs, 8.4 + 7 × 14 + 24 × 3.4 = 188.0 µs a call where
    8.4 + 31 × 14 = 442.4 were (model/nccl_latency.py): 0.012 s less, 363.10 s."""
    inp = rlhf_inputs(
        {"algorithm": "grpo", "model": "qwen2.5-7b", "reward": "rule", "gpus": 64},
        placement=False,
    )
    p = inp.problem
    assert p.spec.micro_batch_peak_tokens() == 20_480
    ff = rlhf_inputs(
        {"algorithm": "grpo", "model": "qwen2.5-7b", "reward": "rule", "gpus": 64,
         "packing": "first-fit"},
        placement=False,
    ).problem  # fmt: skip
    actor = RoleOption(Role.ACTOR, 64, 64, 1, 1)
    grow = cost_of(p, actor).scoring_bytes - cost_of(ff, actor).scoring_bytes
    assert grow >= 12 * 5_120 * 152_064 == 9_342_812_160
    old = [
        RoleOption(Role.ROLLOUT, 64, 16, 4, 1, "none", Fraction(3, 10)),
        actor,
        RoleOption(Role.REFERENCE, 64, 64, 1, 1, "idle"),
    ]
    plan = placement_plan(p, tuple(cost_of(p, o) for o in old), (0,) * 3)
    assert not plan.fits and plan.pools[0].peak_bytes[1] > CAPACITY
    r = search_placement(p)
    assert r.status == "optimal" and r.best.plan.fits
    by = {o.role: o for o in r.best.options}
    assert (by[Role.ROLLOUT].tp, by[Role.ROLLOUT].dp, by[Role.ROLLOUT].fraction) == (
        2,
        32,
        Fraction(3, 5),
    )
    assert by[Role.ACTOR].tp == by[Role.REFERENCE].tp == 2
    assert (by[Role.ACTOR].offload, by[Role.REFERENCE].offload) == ("none", "idle")
    # the 354.83 s placement (engine tp 1 × dp 64 at 0.7, actor and reference dp 64 offloaded
    # when idle) peaks in training GRAPHS above its former 82.86 GB: above the capacity
    prior = [
        RoleOption(Role.ROLLOUT, 64, 64, 1, 1, "none", Fraction(7, 10)),
        RoleOption(Role.ACTOR, 64, 64, 1, 1, "idle"),
        RoleOption(Role.REFERENCE, 64, 64, 1, 1, "idle"),
    ]
    was = placement_plan(p, tuple(cost_of(p, o) for o in prior), (0,) * 3)
    assert not was.fits and was.pools[0].peak_bytes[2] > CAPACITY
    # (its former 82.86 GB: less the graphs and the actor's Transformer Engine placeholder
    # weight gradients at tp 1, 1,556,086,784 B held in every phase, model/terms/dummy_wgrads.py)
    dummies = 2 * 3584 * (4608 + 3584 + 37888 + 18944 + 152064)
    assert was.pools[0].peak_bytes[2] - GRAPHS - dummies <= CAPACITY
    tp = (1 - 1 / 1.350) * 3.574
    assert tp == pytest.approx(0.927, abs=1e-3)
    rings = 3.600 + 0.005  # the tp 2 engine's and the roles' tp 2 all-reduces as rings
    placed = -0.0118  # the dp ring's latency by its placement
    # the scoring forwards as forward-only pipelines (model.terms.forward_gather.
    # forward_pass_term: no third of the update's tp SM charge, 2 × tp / 3, nor of its other
    # backward-only terms): 5.490 s more than a third of the three passes, 368.59 s
    scoring = 5.490
    # the engine's whole-model weight sync (model.rlhf.engine.sync_weights_bytes), not its tp 2
    # share: (15,231,233,024 − 7,615,820,800) B / 50 GB/s = 0.152 s more, 368.74 s
    sync = (15_231_233_024 - 7_615_820_800) / 50e9
    # the sync by placement (model.rlhf.sync_time): the engine on the pool of verl's Megatron
    # actor at tp 2 receives its export, 2N·½ B over NVLink + 339 tensors × a tp 2 all-gather's
    # 8.4 + 3.4 µs = 0.0169 + 0.0040 s, not the 2N broadcast's 0.3046 s: 368.46 s
    shared = 7_615_616_512 / 450e9 + 339 * 11.8e-6 - 15_231_233_024 / 50e9
    assert shared == pytest.approx(-0.2837, abs=1e-4)
    assert r.best.plan.step_s == pytest.approx(
        357.963 + tp + 2 * tp / 3 + rings + placed + scoring + sync + shared, abs=0.005
    )
    assert r.best.plan.step_s == pytest.approx(368.46, abs=0.005)


def test_ppo_8b_under_deepspeed_counts_a_process_per_role():
    """``rlhf-plan --algorithm ppo --model llama3-8b --gpus 16 --framework deepspeed``, the stack
    of OpenRLHF: the actor, critic, reference and reward model are Ray actors of their own
    (``num_gpus_per_actor=0.2`` on a shared placement group) and the engine's vLLM worker is one
    more — each process beyond the reserve's one adds a CUDA context and a cuBLAS workspace,
    666,632,192 + 33,554,432 B, in every phase. Each process opens its own NCCL communicators
    too, so the roles' add up.

    OpenRLHF has no pipeline parallelism and plans its roles at tp 1 here
    (:func:`model.rlhf.roles.training_tp_limit`), ZeRO-1 keeps the BF16 weights whole, and a
    frozen role cannot be offloaded below ZeRO-3 (:mod:`model.rlhf.openrlhf`): the four models
    and the engine do not fit on one pool, so the answer splits, into OpenRLHF's pools
    (:func:`model.rlhf.split.pool_refusal`): the engine alone (awake), the actor and the
    reference (``--train.colocate_actor_ref``), the critic and the reward model
    (``--train.colocate_critic_reward``), each pair at dp 4, the actor and the critic with CPU
    Adam — 5,579.2 s with the engine at tp 8 × dp 1, 5,767.1 s at tp 2 × dp 4 once its tp
    all-reduces are timed (below). It was 3,408.4 s with the engine, the actor and the reference
    on one pool and the engine counted asleep there, a pool OpenRLHF does not make
    (``train_ppo_ray.py``: the engines share the actor's placement group only under
    ``--train.colocate_all``).

    With the engine's tp all-reduces timed (model/rollout_reduce.py) the engine alone
    runs tp 2 × dp 4 at 0.9 instead, 204 sequences at once (its KV space), 4,096 rollouts a
    replica in 20 waves of 204 and one of 16 (Tp 1,024, Tc 4,096), 1,286.71 s without the
    all-reduces, plus 64 all-reduces a forward (2 · 32 layers), each rank sending 2(2 − 1)/2 =
    1 × S on the H100 curve: decode 20 × 4,096 × 64 × 24.078 µs (204 × 4,096 × 2 = 1,671,168 B,
    69.41 GB/s) + 4,096 × 64 × 24.273 µs (16 × 4,096 × 2 = 131,072 B, 5.40 GB/s) = 126.24 +
    6.36 = 132.60 s; prefill 20 × (25 × 64 × 185.50 µs (a 8,192-token chunk, 2^26 B at
    361.78 GB/s) + 64 × 113.54 µs (the 4,096-token rest, 2^25 B at 295.53 GB/s)) + 2 × 64 ×
    185.50 µs = 6.081 + 0.024 = 6.105 s; 1,286.71 + 138.71 = 1,425.41 s. The tp 8 × dp 1 engine
    (256 at once) would add 262,144 × 64 × 44.79 µs (2^21 B at 81.93 GB/s, 1.75 ×) + 64 × 32 ×
    64 × 324.62 µs = 794.08 s to its 1,237.53 s (2,031.60 s), tp 4 × dp 2 (256 at once)
    340.32 s to 1,237.55 s (1,577.86 s), tp 1 × dp 8 (90 at once) none to 1,532.33 s. Step
    3,408.4 s → 5,579.2 s (OpenRLHF's pools, model/rlhf/split.py) → 5,579.25 − 1,237.53 + 1,425.41 =
    5,767.1 s (+ the engine's tp all-reduces, model/rollout_reduce.py; the actor's and critic's pools keep
    their 1,466.93 s scoring and 2,875.91 s training: 2,874.80 s with the CPU Adam step at the
    DIMMs' 76.8 GB/s, +1.107 s at the DGX H100's 14 cores × CPU-Adam's 2.27 GB/s = 31.777 GB/s,
    model/offload.py host_step_bytes_per_s).

    The embedding's all-reduce and the logits all-gather, one each a forward
    (model/rollout_reduce.py), add to the tp 2 engine: decode 20 × 4,096 × (24.078 + 100.422)
    µs (204 rows of 128,256 BF16 logits, 52,328,448 B, at (295.53 + 0.64109 × 66.25) /
    (480/370) = 260.549 GB/s, each rank receiving half) + 4,096 × (24.273 + 20.919) µs (16 rows,
    4,104,192 B, at (81.93 + 0.96867 × 46.80) / 1.2973 = 98.098 GB/s) = 10.199 + 0.185 s;
    prefill 20 × (25 × (185.50 + 16.488) µs (8 rows a chunk, 2,052,096 B at 62.231 GB/s) +
    (113.54 + 15.478) µs (the rest's 4 rows, 1,026,048 B at 33.146 GB/s)) + 2 × (185.50 +
    16.488) µs = 0.104 s: 10.488 s more, 1,435.90 s, step 5,777.63 s, the same placement (the
    other engines' collectives only grow, tp 1's stay none).

    DeepSpeed's ZeRO-1 accumulates the actor's and the critic's 16-bit gradients by autograd's
    add (model/deepspeed_accumulate.py): each update at dp 4, b 3 is m = ⌈16,384 / 12⌉ = 1,366
    micro-batches, 1,365 adds of 6 B × 8,030,261,248 parameters at the H100's triad (3.35 TB/s
    × 0.8866) = 22.144 s: training 2,875.91 → 2,898.05 s, step 5,778.74 → 5,800.88 s.

    Pool 0, the engine alone: one process, none beyond; resident: the engine at tp 2 (PyNccl's
    ring and the all-gather ring, a node's 24 channels × 12 MiB each, and custom all-reduce
    24 MiB) 629,145,600 + the model-update ring it receives the weights on, 24 × 12 MiB =
    301,989,888: 931,135,488. Pools 1 and 2: two processes, one beyond: 700,186,624; resident:
    each role's groups, its dp-4 ring and DeepSpeed's world ring inside the node, 24 channels ×
    12 MiB + (32 × 3 + 2) × 2 MiB of set-up = 484 MiB a ring (model/terms/comm_memory.py),
    968 MiB = 1,015,021,568 each: 2,030,043,136; with NVLink SHARP (model/terms/nvls_memory.py)
    the dp-4 ring's 2 MiB of credits (its all-reduces NCCL runs as rings, model/nccl_search.py:
    no buffers; 16 × 2 × (128 KiB × 8) × 4 = 128 MiB more were counted before), the world
    ring's (the barrier's one float, run as a ring: no buffers) 2 MiB of credits, 4 MiB a role:
    2,038,431,744; pool 1 also DeepSpeed rank 0's side of the model-update ring, 301,989,888:
    2,340,421,632. Pool 1 holds that, the process, the reference's BF16 weights (2 B ×
    8,030,261,248 parameters = 16,060,522,496) and the actor's held state: 52,272,848,896 B
    (52,239,294,464 before the actor's ring was counted, 52,541,284,352 with the dp-4 ring's
    NVLS buffers).

    NCCL runs an all-reduce of 2 or 4 GPUs of an H100 node as a ring (model/nccl_search.py:
    NVLS's 102 and 240 GB/s of bus bandwidth against the ring's 360): the tp 2 engine's
    all-reduces read the curve ÷ 480/370, decode 172.02 s and prefill 7.920 s (179.94 s), its
    embedding's all-reduces and logits all-gathers 11.132 s: rollout 1,286.71 + 179.94 + 11.132
    = 1,477.78 s, still the fastest engine (tp 4 × dp 2: 1,237.55 + 340.32 × 480/370 =
    1,679.05 s; tp 8 and tp 1 as above); the actor's and the critic's dp 4 all-reduces 0.012 s
    more in training: step 5,842.78 s, the same placement."""
    inp = rlhf_inputs(
        {"algorithm": "ppo", "model": "llama3-8b", "gpus": 16, "framework": "deepspeed",
         "bandwidth_efficiency": 1},  # decode at the datasheet HBM bandwidth, as derived
        placement=False,
    )  # fmt: skip
    p = inp.problem
    r = search_placement(p)
    assert r.status == "optimal" and not r.best.colocated
    pool0, pool1, pool2 = r.best.plan.pools
    assert [q.roles for q in r.best.plan.pools] == [
        ("rollout",),
        ("actor", "reference"),
        ("critic", "reward"),
    ]
    one = 666_632_192 + 33_554_432
    assert [(q.processes, q.process_bytes) for q in (pool0, pool1, pool2)] == [
        (1, 0),
        (2, one),
        (2, one),
    ]
    assert one == 700_186_624
    engine = 24 * CONNECTION + 24 * MIB + 24 * CONNECTION
    assert engine == 629_145_600
    assert pool0.resident_bytes == engine + 24 * CONNECTION + GRAPHS == 931_135_488 + GRAPHS
    role = 2 * (24 * CONNECTION + (32 * 3 + 2) * 2 * MIB)
    assert role == 968 * MIB == 1_015_021_568
    assert 2 * role == 2_030_043_136
    nvls = (2 + 2) * MIB
    assert pool2.resident_bytes == 2 * (role + nvls) == 2_038_431_744
    # the actor's pool also holds DeepSpeed rank 0's side of the model-update ring, 24 × 12 MiB
    # (OpenRLHF _init_vllm_sync_group; review-o MED-1): 2,038,431,744 + 301,989,888
    assert pool1.resident_bytes == 2_038_431_744 + 24 * 12 * MIB == 2_340_421_632
    costs = {c.option.role: c for c in r.best.plan.costs}
    assert all(
        c.option.tp == 1 and c.option.pp == 1
        for role, c in costs.items()
        if role is not Role.ROLLOUT
    )
    assert costs[Role.REFERENCE].held_bytes == 2 * 8_030_261_248 == 16_060_522_496
    held = 2_340_421_632 + 700_186_624 + 16_060_522_496 + costs[Role.ACTOR].held_bytes
    assert pool1.held_bytes == held == 52_272_848_896
    # the engine's tp all-reduces (model/rollout_reduce.py; 2 · 32 = 64 a forward) move it from
    # tp 8 × dp 1 to tp 2 × dp 4 (docstring): its rollout 1,237.53 → 1,466.65 s; NCCL runs the
    # tp 2 (and tp 4) all-reduces as rings (model/nccl_search.py), the curve ÷ 480/370
    ring = 480 / 370
    decode = (20 * 4_096 * 64 * 24.078e-6 + 4_096 * 64 * 24.273e-6) * ring
    prefill = (20 * (25 * 64 * 185.50e-6 + 64 * 113.54e-6) + 2 * 64 * 185.50e-6) * ring
    tp2 = decode + prefill
    tp8 = 262_144 * 64 * (2**21 * 1.75 / 81.93e9) + 64 * 32 * 64 * (2**26 * 1.75 / 361.78e9)
    assert (decode, prefill) == (pytest.approx(172.02, abs=0.01), pytest.approx(7.920, abs=1e-3))
    assert (tp2, tp8) == (pytest.approx(179.94, abs=0.01), pytest.approx(794.08, abs=0.01))
    assert 1286.71 + tp2 < min(1237.53 + tp8, 1237.55 + 340.32 * ring, 1532.33)
    engine = costs[Role.ROLLOUT]
    assert (engine.option.tp, engine.option.dp, engine.option.fraction) == (2, 4, Fraction(9, 10))
    ends = 20 * 4_096 * (24.078e-6 * ring + 100.422e-6) + 4_096 * (24.273e-6 * ring + 20.919e-6)
    ends += 20 * (25 * (185.50e-6 * ring + 16.488e-6) + 113.54e-6 * ring + 15.478e-6)
    ends += 2 * (185.50e-6 * ring + 16.488e-6)
    assert ends == pytest.approx(11.132, abs=1e-3)
    # the weight sync of the whole model to each engine GPU (model.rlhf.engine.
    # sync_weights_bytes), not its tp 2 share: (16,060,522,496 − 8,030,527,488) B / 50 GB/s
    sync = (16_060_522_496 - 8_030_527_488) / 50e9
    assert sync == pytest.approx(0.1606, abs=1e-4)
    # the engine's own rollout seconds no longer hold the sync (2N / 50 GB/s = 0.3212 s): the
    # step adds it by placement (model.rlhf.sync_time); apart from the actor, the broadcast one
    # tensor at a time, + 291 tensors × NCCL's ring broadcast over actor rank 0 and the 8 engine
    # GPUs on 2 nodes, base + nRanks hops at the network's 14 µs (tuning.cc's Broadcast,
    # model.nccl_latency.broadcast_latency), 8.4 + 9 × 14 = 134.4 µs: 39.11 ms more (60.2 µs,
    # 17.52 ms, at the other ring collectives' 8.4 + 7 × 3.4 + 2 × 14: + 291 × 74.2 µs =
    # 21.59 ms on the rollout phase and the step); the actor at ZeRO-2, tp 1, gathers nothing
    whole = 16_060_522_496 / 50e9
    latency = 291 * 134.4e-6
    assert latency - 291 * 60.2e-6 == pytest.approx(291 * 74.2e-6, abs=1e-12)
    # and OpenRLHF's Ray call to the engine per tensor (model.rlhf.sync_time.RAY_ACTOR_CALL_S,
    # Ray's 1_1_actor_calls_sync: 1 / 1,950.1567 s = 512.78 µs): 291 × that = 149.22 ms more
    ray = 291 / 1950.1566973268486
    assert ray == pytest.approx(0.14922, abs=1e-5)
    latency += ray
    assert engine.sync_s == pytest.approx(whole + latency, rel=1e-12)
    rollout = 1286.71 + tp2 + ends + sync - whole
    assert (engine.concurrent, engine.rollout_s) == (204, pytest.approx(rollout, abs=0.01))
    adds = 1_365 * 6 * 8_030_261_248 / (3.35e12 * 0.8865671641791045)
    assert adds == pytest.approx(22.144, abs=1e-3)
    rings = 0.012  # the actor's and the critic's dp 4 all-reduces as rings (docstring)
    # the scoring forwards as forward-only pipelines (model.terms.forward_gather.
    # forward_pass_term, not a third of the three passes): scoring 1,466.93 → 1,482.37 s
    scoring = 1482.37 - 1466.93
    assert r.best.plan.phase_s == pytest.approx(
        (1477.78 + sync + latency, 1466.93 + scoring, 2875.91 + adds + rings), abs=0.01
    )
    step_s = 5579.25 - 1237.53 + 1477.78 + sync + 1.107 + adds + rings + scoring + latency
    assert r.best.plan.step_s == pytest.approx(step_s, abs=0.05)
    # 5,858.40 s with the 60.2 µs broadcast; + 21.59 ms: 5,858.42 s; + the Ray calls' 149.22 ms:
    # 5,858.57 s, the same placement
    assert r.best.plan.step_s == pytest.approx(5858.42 + 0.1492, abs=0.05)
    assert r.best.plan.step_s == pytest.approx(5858.57, abs=0.05)
    for role in (Role.REFERENCE, Role.REWARD):
        with pytest.raises(LayoutError, match="only ZeRO-3"):
            cost_of(p, RoleOption(role, 16, 16, 1, 1, "idle"))


def test_an_engine_alone_or_sharing_the_actors_weights_adds_no_process():
    """The engine on a pool of its own is that pool's one process (the reserve's); with a shared
    weight copy (HybridFlow's 3D-HybridEngine) it runs in the actor's process."""
    inp = rlhf_inputs(
        {"algorithm": "grpo", "model": "llama3-8b", "reward": "rule", "gpus": 16},
        placement=False,
    )
    p = inp.problem
    actor = cost_of(p, RoleOption(Role.ACTOR, 8, 8, 1, 1))
    ref = cost_of(p, RoleOption(Role.REFERENCE, 8, 8, 1, 1))
    engine = cost_of(p, RoleOption(Role.ROLLOUT, 8, 4, 2, 1, "none", Fraction(1, 2)), None, True)
    split = compose((engine, actor, ref), (0, 1, 1), CAPACITY, 2 * 10**12, 8)
    assert [(q.processes, q.process_bytes) for q in split.pools] == [(1, 0), (1, 0)]
    shared = compose((engine, actor, ref), (0, 0, 0), CAPACITY, 2 * 10**12, 8, shared_weights=True)
    assert (shared.pools[0].processes, shared.pools[0].process_bytes) == (1, 0)
    apart = compose((engine, actor, ref), (0, 0, 0), CAPACITY, 2 * 10**12, 8)
    assert (apart.pools[0].processes, apart.pools[0].process_bytes) == (2, 700_186_624)


def test_a_colocated_pool_says_what_it_leaves_for_the_engines_graphs():
    """The engine's CUDA graphs are counted at an assumed 0.36 GiB = 0.39 GB (a floor: vLLM
    35d5cda captures them after sizing its KV cache, beyond its budget, and sleep keeps them;
    #47654 measured 1.50 GB at TP8). Under a pool where
    the engine shares GPUs with scoring or training, the text says what the largest of the three
    phases' peaks leaves of the capacity, 83.21 − 82.35 = 0.86 GB; with the rollout the largest
    (82.95 GB), 83.21 − 82.95 = 0.26 GB, which the scoring and training peaks alone put at 0.86;
    a pool of the engine alone, or one that does not fit, says nothing."""
    from trainplan.interface.rlhf.text import pools_lines

    def pool(roles, fits=True):
        peaks = {"rollout": 73.53e9, "scoring": 82.35e9, "training": 74.02e9}
        return {"pool": 0, "gpus": 64, "first_gpu": 0, "roles": roles, "processes": 2,
                "peak_bytes": peaks, "fits": fits}  # fmt: skip

    plan = {"capacity_bytes": 83.21e9, "pools": [pool(["rollout", "actor", "reference"])]}
    (line,) = pools_lines(plan)[3:]
    assert line.startswith("pool 0: the engine's CUDA graphs are counted at an assumed 0.39 GB")
    assert "the rollout, scoring and training peaks leave 0.86 GB beyond them" in line
    tight = pool(["rollout", "actor", "reference"])
    tight["peak_bytes"] = {**tight["peak_bytes"], "rollout": 82.95e9}
    (line,) = pools_lines({"capacity_bytes": 83.21e9, "pools": [tight]})[3:]
    assert "the rollout, scoring and training peaks leave 0.26 GB beyond them" in line
    for other in ([pool(["rollout"])], [pool(["rollout", "actor"], fits=False)]):
        assert len(pools_lines({"capacity_bytes": 83.21e9, "pools": other})) == 3
