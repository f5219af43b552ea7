"""OpenRLHF's pools under ``--framework deepspeed`` (:func:`model.rlhf.split.pool_refusal`).
OpenRLHF (OpenRLHF/OpenRLHF 3c3be6234, ``openrlhf/cli/train_ppo_ray.py``
``train``) shares GPUs between roles only through a placement group it makes for the actor and
the reference (``--train.colocate_actor_ref``), the critic and the reward model
(``--train.colocate_critic_reward``) or every model (``--train.colocate_all``); it hands that
group to the vLLM engines only under ``colocate_all`` without ``--train.async_enable``
(``create_vllm_engines`` otherwise packs them on whole GPUs of their own,
``openrlhf/trainer/ray/vllm_engine.py``), and turns vLLM's sleep off without ``colocate_all``.
So an engine beside the actor on a pool the other roles do not share never sleeps — and is never
launched."""

from __future__ import annotations

from fractions import Fraction

import pytest

import trainplan.model.rlhf.step as step
from trainplan.interface.rlhf.faithful import rlhf_inputs
from trainplan.model.errors import InputError
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import Role
from trainplan.optimizer.rlhf.search import objective_ns, placement_plan, search_placement
from trainplan.optimizer.rlhf.tables import cost_of

CAPACITY = 83_210_009_600  # H100-SXM usable bytes
HBM = 85_017_493_504  # H100-SXM cudaMemGetInfo total: the engine's fraction is of it
RING = 24 * 12 * 2**20  # one NCCL ring inside a node, 24 channels × 12 MiB: 301,989,888 B


def _problem(**kw):
    workload = {"algorithm": "grpo", "model": "qwen2.5-7b", "gpus": 16, "framework": "deepspeed",
                "bandwidth_efficiency": 1}  # fmt: skip  # decode at the datasheet HBM, as derived
    return rlhf_inputs(workload | kw, placement=False).problem


def test_the_engine_beside_the_actor_alone_is_refused(monkeypatch):
    """``rlhf-plan --algorithm grpo --model qwen2.5-7b --gpus 16 --framework
    deepspeed`` answered 2,653.5 s with the engine (tp 4 × dp 2, fraction 0.3) and the actor (dp
    8) on pool 0, the reference and the reward model on 4 GPUs each, the engine counted asleep
    outside the rollout. Pool 0 held 44,230,244,608 B; its peaks were 69,433,502,771.2 (rollout),
    62,915,868,928 (scoring) and 71,703,266,048 B (training). The engine's awake bytes are its
    budget less the communicator inside it: 0.3 × 85,017,493,504 − 301,989,888 =
    25,203,258,163.2 B (= 69,433,502,771.2 − 44,230,244,608). OpenRLHF keeps it awake there, so
    training would need 71,703,266,048 + 25,203,258,163.2 = 96,906,524,211.2 B, 13.70 GB above the
    83,210,009,600 usable, and scoring 88,119,127,091.2 B — but it never puts the engine there:
    compose, the oracle and CP-SAT refuse the pool, in one line naming OpenRLHF's rule.

    With NVLink SHARP counted (:mod:`model.terms.nvls_memory`) the actor's dp ring of 8 in the
    node, which reduces its gradients, holds 2 MiB of credits and 16 × 2 × (128 KiB × 8) × 8 =
    256 MiB of buffers, the world ring 2 MiB of credits: every figure of pool 0 holds 260 MiB =
    272,629,760 B more: held 44,502,874,368 B, peaks 69,706,132,531.2, 63,188,498,688 and
    71,975,895,808 B; training with the engine awake 97,179,153,971.2 B, scoring
    88,391,756,851.2 B, both still above the usable."""
    p = _problem()
    opts = (
        RoleOption(Role.ROLLOUT, 8, 2, 4, 1, "none", Fraction(3, 10)),
        RoleOption(Role.ACTOR, 8, 8, 1, 1),
        RoleOption(Role.REFERENCE, 4, 4, 1, 1),
        RoleOption(Role.REWARD, 4, 4, 1, 1),
    )
    costs, slots = tuple(cost_of(p, o) for o in opts), (0, 0, 1, 2)
    awake = Fraction(3, 10) * HBM - RING
    assert costs[0].rollout_bytes == awake == Fraction(126_016_290_816, 5)
    with pytest.raises(InputError, match=r"^placement: pool 0 puts rollout, actor on one set"):
        placement_plan(p, costs, slots)
    assert objective_ns(p, costs, slots) is None
    monkeypatch.setattr(step, "pool_refusal", lambda *args: None)  # the old count
    pool = placement_plan(p, costs, slots).pools[0]
    nvls = (2 + 256 + 2) * 2**20
    assert nvls == 272_629_760
    # + the engine's CUDA graph pool, held in every phase (an assumed 386,547,057 B,
    # model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES)
    graphs = 386_547_057
    assert pool.held_bytes == 44_230_244_608 + nvls + graphs == 44_889_421_425
    old = (Fraction(347_167_513_856, 5), 62_915_868_928, 71_703_266_048)
    assert pool.peak_bytes == tuple(x + nvls + graphs for x in old)
    assert pool.peak_bytes[0] - pool.held_bytes == awake
    assert pool.peak_bytes[2] + awake == Fraction(485_895_769_856, 5) + graphs > CAPACITY
    assert pool.peak_bytes[1] + awake == Fraction(441_958_784_256, 5) + graphs > CAPACITY


def test_the_16_gpu_answer_is_the_best_pools_openrlhf_makes():
    """The same search answered 3,313.8 s (was 2,653.5 s, 24.9 % faster than anything OpenRLHF
    can launch; the old answer's "best split" was this 3,313.8 s): the engine alone on 4 GPUs (tp 4,
    fraction 0.3), the actor (CPU Adam) and the reference on 8 (``colocate_actor_ref``), the
    reward model on 4; rollout 1,319.877 + scoring 674.157 + training 1,319.784 s. Nothing fits
    with every role on the 16 GPUs (``colocate_all``).

    With the engine's tp all-reduces timed (model/rollout_reduce.py) the pools stay and the
    engine runs tp 1 × dp 4 at 0.9 instead: 3,313.8 s (OpenRLHF's pools, model/rlhf/split.py) → 3,388.5 s
    (+ the all-reduces). The tp 4 engine (256 sequences at once, 64 waves of 4,096 steps) now
    pays 262,144 steps × 56 all-reduces × 36.914 µs (256 × 3,584 × 2 = 1,835,008 B) + 64 × 32
    prefill chunks × 56 × 252.367 µs = 541.90 + 28.94 = 570.85 s: 1,319.877 → 1,890.72 s; the tp
    1 engine (208 at once, its KV space at 0.9) pays none, 1,394.574 s, and takes its place:
    1,394.574 + 674.157 + 1,319.784 = 3,388.514 s. The embedding's all-reduce and the logits
    all-gather, one each a forward (model/rollout_reduce.py; tests/model/test_rollout_reduce.py:
    204.680 µs to gather 256 rows of 152,064 BF16 logits, 25.742 µs for a chunk's 8 rows), add
    262,144 × (36.914 + 204.680) µs + 64 × 32 × (252.367 + 25.742) µs = 63.33 + 0.57 = 63.90 s
    more to the tp 4 engine: 1,954.62 s; still none to tp 1. The actor's CPU Adam step at the
    DGX H100's 14 cores × CPU-Adam's 2.27 GB/s = 31.777 GB/s, not the DIMMs' 76.8
    (model/offload.py host_step_bytes_per_s), adds 30 B × 951,952,064 × (1/31.777e9 −
    1/76.8e9) = 0.52686 s to training: 1,319.784 → 1,320.310 s, 3,388.514 → 3,389.041 s, the
    same placement. DeepSpeed's ZeRO-1 accumulates the actor's 16-bit gradients by autograd's
    add (model/deepspeed_accumulate.py): its update at dp 8, b 3 is m = ⌈16,384 / 24⌉ = 683
    micro-batches, 682 adds of 6 B × 7,615,616,512 parameters at the H100's triad (3.35 TB/s ×
    0.8866): 10.493 s, training 1,320.310 → 1,330.803 s, 3,389.041 → 3,399.533 s, the same
    placement. NCCL runs an all-reduce of 4 GPUs of an H100 node as a ring
    (model/nccl_search.py: NVLS's 240 GB/s of bus bandwidth against the ring's 360): the tp 4
    engine's all-reduces read the curve ÷ 480/370, 47.889 and 327.395 µs
    (tests/model/test_rollout_reduce.py): 703.01 + 37.55 = 740.56 s and its embedding's and
    gathers 66.21 + 0.72 = 66.93 s, 2,127.37 s; the tp 1 engine keeps its place.

    The engine's pool holds, in every phase, the model-update ring (301,989,888 B) and no tp
    communicators (tp 1; at tp 4 629,145,600 B more); with its awake bytes, the whole budget
    (nothing of it is a communicator at tp 1) 0.9 × 85,017,493,504 = 76,515,744,153.6 B,
    76,817,734,041.6 B in scoring and training, and in the rollout the largest parameter
    received whole, the embedding 152,064 × 3,584 × 2 = 1,089,994,752 B, more:
    77,907,728,793.6 B. Its CUDA graph pool, an assumed 386,547,057 B
    (model.rlhf.engine.ENGINE_GRAPH_POOL_BYTES), adds to every phase: 688,536,945 B held.

    The scoring forwards timed as forward-only pipelines (model.terms.forward_gather.
    forward_pass_term: the forward's own operations, not a third of the three passes): scoring
    674.157 → 690.499 s, 3,399.533 → 3,415.876 s, the same placement.

    The weight sync one tensor at a time (model.rlhf.sync_time.broadcast_seconds): 339 tensors ×
    NCCL's ring broadcast over actor rank 0 and the 4 engine GPUs on 2 nodes, 8.4 + 3 × 3.4 + 2 ×
    14 = 46.6 µs, 15.797 ms more (the actor at ZeRO-2, tp 1, gathers nothing): 3,415.892 s.
    NCCL's Broadcast as tuning.cc models it (model.nccl_latency.broadcast_latency): base + nRanks
    hops at the network's 14 µs, 8.4 + 5 × 14 = 78.4 µs, + 339 × 31.8 µs = 10.780 ms:
    3,415.902 s, the same placement. OpenRLHF's Ray call to the engine per tensor
    (model.rlhf.sync_time.RAY_ACTOR_CALL_S, Ray's published ``1_1_actor_calls_sync``: 1 /
    1,950.1567 s = 512.78 µs): + 339 × 512.78 µs = 173.832 ms, 3,416.076 s, the same
    placement."""
    r = search_placement(_problem())
    assert r.status == "optimal" and r.colocated is None
    assert 3_415_875_678_553 + 339 * 46_600 - 1 == 3_415_891_475_952  # 1 ns of rounding
    assert 3_415_891_475_952 + 339 * (78_400 - 46_600) == 3_415_902_256_152
    assert 3_415_875_678_553 + 339 * 78_400 - 1 == 3_415_902_256_152
    ray = round(339 / 1950.1566973268486 * 1e9)
    assert 3_415_902_256_152 + ray + 1 == 3_416_076_088_338  # 1 ns of rounding
    assert r.best.objective_ns == r.split.objective_ns == 3_416_076_088_338
    host_step = 112 / 8 * 10e9 * 28 / (2.57 * 48)
    cpu = 30 * 951_952_064 * (1 / host_step - 1 / 76.8e9)
    assert 3_389_040_573_638 - 3_388_513_709_455 == pytest.approx(cpu * 1e9, abs=2)
    adds = 682 * 6 * 7_615_616_512 / (3.35e12 * 0.8865671641791045)
    assert 3_399_533_200_833 - 3_389_040_573_638 == pytest.approx(adds * 1e9, abs=2)
    assert [q.roles for q in r.best.plan.pools] == [
        ("rollout",),
        ("actor", "reference"),
        ("reward",),
    ]
    assert [q.gpus for q in r.best.plan.pools] == [4, 8, 4]
    option = next(c.option for c in r.best.plan.costs if c.option.role is Role.ROLLOUT)
    assert (option.tp, option.dp, option.fraction) == (1, 4, Fraction(9, 10))
    old = cost_of(_problem(), RoleOption(Role.ROLLOUT, 4, 1, 4, 1, "none", Fraction(3, 10)))
    reduces = 262_144 * 56 * 47.889e-6 + 64 * 32 * 56 * 327.395e-6  # rings (docstring)
    assert reduces == pytest.approx(740.56, abs=0.01)
    ends = 262_144 * (47.889e-6 + 204.680e-6) + 64 * 32 * (327.395e-6 + 25.742e-6)
    assert ends == pytest.approx(66.93, abs=0.01)
    # its weight sync, the whole model to each engine GPU (model.rlhf.engine.sync_weights_bytes),
    # not its tp 4 share: (15,231,233,024 − 3,808,114,688) B / 50 GB/s = 0.228 s more; the tp 1
    # engine the search keeps already received the whole model
    sync = (15_231_233_024 - 3_808_114_688) / 50e9
    # the engine's own rollout seconds no longer hold the sync, 2N / 50 GB/s = 0.3046 s: the
    # step adds it by placement (model.rlhf.sync_time)
    whole = 15_231_233_024 / 50e9
    assert old.rollout_s == pytest.approx(1_319.877 + reduces + ends + sync - whole, abs=0.01)
    engine = r.best.plan.pools[0]
    graphs = 386_547_057
    assert engine.held_bytes == RING + graphs == 688_536_945
    awake = RING + graphs + Fraction(9, 10) * HBM
    assert engine.peak_bytes == (awake + 152_064 * 3_584 * 2, awake, awake)
    assert awake == Fraction(384_088_670_208, 5) + graphs
    # the rollout phase + 15.797 ms (the docstring's broadcast latency per tensor at 46.6 µs):
    # 1,394.5894 s; at 78.4 µs + 339 × 31.8 µs = 10.780 ms more: 1,394.6002 s; with OpenRLHF's
    # Ray call per tensor, + 339 × 512.78 µs = 173.832 ms: 1,394.7740 s
    assert [round(s, 3) for s in r.best.plan.phase_s] == [1_394.774, 690.499, 1_330.803]


def test_openrlhfs_pools_by_step():
    """Synchronous: every role on one pool (``colocate_all``, the engine asleep) composes; the
    engine beside the actor alone does not (above), nor the reference beside the reward model
    (no ``colocate_*`` flag makes that group). One-step off-policy (``--train.async_enable``):
    the engine takes GPUs of its own even under ``colocate_all`` (``pg if colocate_all and not
    async_enable else None``), so every role on one pool is refused, and every role but the
    engine on one pool composes."""
    sync, off = _problem(reward="rule", gpus=8), _problem(reward="rule", gpus=8, off_policy=1)
    opts = (
        RoleOption(Role.ROLLOUT, 8, 2, 4, 1, "none", Fraction(3, 10)),
        RoleOption(Role.ACTOR, 8, 8, 1, 1, "optimizer"),
        RoleOption(Role.REFERENCE, 8, 8, 1, 1),
    )
    costs = tuple(cost_of(sync, o) for o in opts)
    assert placement_plan(sync, costs, (0, 0, 0)).colocated
    costs = tuple(cost_of(off, o) for o in opts)
    with pytest.raises(InputError, match=r"or every role but the engine \(--train.colocate_all"):
        placement_plan(off, costs, (0, 0, 0))
    p = _problem()
    opts = (
        RoleOption(Role.ROLLOUT, 4, 1, 4, 1, "none", Fraction(3, 10)),
        RoleOption(Role.ACTOR, 8, 8, 1, 1, "optimizer"),
        RoleOption(Role.REFERENCE, 4, 4, 1, 1),
        RoleOption(Role.REWARD, 4, 4, 1, 1),
    )
    costs = tuple(cost_of(p, o) for o in opts)
    with pytest.raises(InputError, match=r"pool 2 puts reference, reward .* OpenRLHF"):
        placement_plan(p, costs, (0, 1, 2, 2))
