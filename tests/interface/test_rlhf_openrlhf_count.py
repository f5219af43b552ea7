"""OpenRLHF cannot run a step with fewer rollouts than the actor's dp
(:func:`model.rlhf.openrlhf.check_split_count`): ``split_rollout_samples`` (experience_maker.py,
3c3be6234) asks ``get_seqlen_balanced_partitions`` for max(first-fit count rounded down to a
multiple of dp, dp) micro-batches, and that function asserts ``len(seqlen_list) >=
k_partitions``. The plan used to count one rollout a micro-batch there; now the actor's option
is refused (a LayoutError: the search does not offer it, the CLI exits 2 in one line)."""

from __future__ import annotations

import math

import pytest

import trainplan.model.rlhf.network as network
from trainplan.interface.rlhf.faithful import rlhf_inputs
from trainplan.model.errors import InputError, LayoutError
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import Role
from trainplan.optimizer.rlhf.search import search_placement
from trainplan.optimizer.rlhf.tables import cost_of


def _problem(prompts: int, samples: int, gpus: int, framework: str = "deepspeed"):
    inp = rlhf_inputs(
        {"algorithm": "grpo", "model": "qwen2.5-7b", "reward": "rule", "prompts": prompts,
         "samples_per_prompt": samples, "gpus": gpus, "framework": framework,
         "bandwidth_efficiency": 1},  # decode at the datasheet HBM bandwidth, as derived
        placement=False,
    )  # fmt: skip
    return inp.problem


def test_actor_dp_above_the_steps_rollouts_is_refused_under_openrlhf_only():
    """2 prompts × 2 rollouts = 4 rollouts: OpenRLHF asks for max(⌊k/8⌋·8, 8) = 8 partitions
    at actor dp 8 (k = ⌈4 / ⌊16,384 / 5,120⌋⌉ = 2 by first fit), 8 > 4 items: refused; at dp 4
    it asks for 4 (one rollout each) and runs. The rule is the actor's (``effective_actor_num``);
    the reference at dp 8 is not refused by it. Under verl (``megatron``) the rule is not the
    actor's: its agent loop refuses the 4 rollouts before any layout, 4 mod 8 ≠ 0
    (:func:`model.rollout_prefix.check_agent_loop_chunks`); 8 rollouts at actor dp 8 stand."""
    p = _problem(2, 2, 8)
    with pytest.raises(LayoutError, match=r"^actor dp: 8 — above the step's 4 rollouts"):
        cost_of(p, RoleOption(Role.ACTOR, 8, 8, 1, 1))
    assert cost_of(p, RoleOption(Role.ACTOR, 4, 4, 1, 1)).split_tokens == 5_120
    cost_of(p, RoleOption(Role.REFERENCE, 8, 8, 1, 1))
    with pytest.raises(InputError, match=r"^prompts: 2 × `samples_per_prompt` 2 = 4 samples"):
        _problem(2, 2, 8, "megatron")
    cost_of(_problem(2, 4, 8, "megatron"), RoleOption(Role.ACTOR, 8, 8, 1, 1))


def test_the_search_no_longer_offers_the_actor_at_dp_8_for_4_rollouts(monkeypatch):
    """4 rollouts on 8 H100: the old answer (the rule patched out) was everything colocated, the
    actor at dp 8, 6.01 s — a step OpenRLHF stops at the assertion. Now the actor is at dp 4,
    with CPU Adam: the engine (tp 4, fraction 0.3), the actor and the reference on 4 GPUs
    (OpenRLHF's --train.colocate_all); the engine alone on 4 GPUs and the actor and the
    reference on the other 4 take the same time (each pool works alone in its phases).
    7.445 s → 8.777 s (rollout 4.914 + scoring 0.987 + training 2.876; OpenRLHF's pools, model/rlhf/split.py:
    7.445 s put the engine beside the actor alone, counted asleep, and the reference on GPUs of
    its own, a pool OpenRLHF does not make, model/rlhf/split.py pool_refusal) → 15.095 s (+ the
    engine's tp all-reduces, model/rollout_reduce.py: rollout 4.914 + 6.318 = 11.232). The CPU
    Adam step at the DGX H100's 14 cores × CPU-Adam's 2.27 GB/s = 31.777 GB/s, not the DIMMs'
    76.8 (model/offload.py host_step_bytes_per_s), adds 30 B × 7,615,616,512 / 4 ×
    (1/31.777e9 − 1/76.8e9) = 1.054 s to training: 2.876 → 3.930 s, 15.301 → 16.355 s, the
    same placement.

    The all-reduces: 4 sequences a decode step, 56 all-reduces of 4 × 3,584 × 2 = 28,672 B =
    1.75 × 2^14 B, on the H100 curve 0.95 + 0.80735 × (1.71 − 0.95) = 1.5636 GB/s; one prefill
    chunk of 4 × 1,024 tokens, 56 of 29,360,128 B = 1.75 × 2^24 B at 234.45 + 0.80735 × 61.08 =
    283.763 GB/s. tp 4 (each rank sends 1.5 ×): 4,096 × 56 × 27.51 µs + 56 × 155.20 µs =
    6.309 + 0.009 = 6.318 s, so 4.914 + 6.318 + 0.987 + 2.876 = 15.095 s, the same placement;
    the refused tp 8 (1.75 ×): 4,096 × 56 × 32.09 µs + 56 × 181.07 µs = 7.371 s,
    6.010 → 13.381 s.

    The embedding's all-reduce and the logits all-gather (model/rollout_reduce.py; vLLM
    VocabParallelEmbedding.forward, LogitsProcessor._gather_logits), one each a forward: tp 4
    adds 4,096 × (27.51 µs + 22.81 µs) + (155.20 µs + 22.81 µs) = 0.206 s — the gather of 4 rows
    of 152,064 BF16 logits, 1,216,512 B = 1.16016 × 2^20 B, on the curve ÷ the NVLS speed-up
    480/370: (43.70 + 0.21432 × 38.23) / 1.2973 = 40.001 GB/s, each rank receiving 3/4 of it;
    the prefill chunk holds the 4 prompts, 4 rows too: 15.095 → 15.301 s, the same placement
    (the refused tp 8: + 0.241 s, 7/8 received, 26.61 µs a gather, 13.622 s).

    NCCL runs an all-reduce of 4 GPUs of an H100 node as a ring (model/nccl_search.py: NVLS's
    240 GB/s of bus bandwidth against the ring's 360), the curve ÷ 480/370: the tp 4 engine's
    all-reduces 6.318 × 480/370 = 8.196 s (35.69 µs a decode all-reduce, 201.34 µs a prefill
    one), its embedding's and gathers 0.240 s: rollout 4.914 + 8.196 + 0.240 = 13.350 s; the
    actor's dp 4 all-reduce in training likewise, 0.015 s more: 18.281 s, the same placement
    (the tp 8 engine's all-reduces, 8 GPUs, stay NVLS). The scoring forwards timed as
    forward-only pipelines (model.terms.forward_gather.forward_pass_term: the forward's own
    operations, not a third of the three passes): scoring 0.987 → 1.011 s, 18.305 s. The
    weight sync sends the whole model to each engine GPU (model.rlhf.engine.sync_weights_bytes),
    not the tp 4 engine's share: + 0.025 s over NVLink, 18.330 s (the tp 8 one + 0.030 s). The
    sync by placement: − 0.0115 s, 18.3185 s; OpenRLHF's Ray call per tensor and its clone
    (model.rlhf.sync_time): + 0.185 s, 18.504 s, the same placement."""
    r = search_placement(_problem(2, 2, 8))
    actor = next(o for o in r.best.options if o.role is Role.ACTOR)
    assert (actor.gpus, actor.dp, actor.offload) == (4, 4, "optimizer")
    decode, prefill = 28_672 / 1.5636e9, 29_360_128 / 283.763e9  # seconds per unit share
    tp4 = 4_096 * 56 * 1.5 * decode + 56 * 1.5 * prefill
    tp8 = 4_096 * 56 * 1.75 * decode + 56 * 1.75 * prefill
    assert (tp4, tp8) == (pytest.approx(6.318, abs=1e-3), pytest.approx(7.371, abs=1e-3))
    busbw = (43.70 + math.log2(1.16015625) * (81.93 - 43.70)) / (48 / 37)  # GB/s
    gather = 0.75 * 4 * 152_064 * 2 / (busbw * 1e9)  # 22.81 µs
    extra = 4_096 * (1.5 * decode + gather) + 1.5 * prefill + gather
    assert (extra, busbw) == (pytest.approx(0.206, abs=1e-3), pytest.approx(40.001, abs=1e-3))
    ring = 48 / 37  # tp 4's all-reduces run as rings: the curve ÷ 480/370
    ring_extra = 4_096 * (1.5 * decode * ring + gather) + 1.5 * prefill * ring + gather
    assert ring_extra == pytest.approx(0.240, abs=1e-3)
    rollout = 4.914 + tp4 * ring + ring_extra
    assert rollout == pytest.approx(13.350, abs=1e-3)
    # the weight sync sends the whole model to each engine GPU (model.rlhf.engine.
    # sync_weights_bytes), not its tp 4 share, over NVLink (8 GPUs, one domain, 450 GB/s):
    # (15,231,233,024 − 3,808,114,688) B / 450 GB/s = 0.025 s more
    rollout += (15_231_233_024 - 3_808_114_688) / 450e9
    assert rollout == pytest.approx(13.375, abs=1e-3)
    # the sync by placement (model.rlhf.sync_time): the engine shares the 4-GPU pool of the actor
    # at ZeRO-2, tp 1, whose parameters are whole: no bytes cross a link, but OpenRLHF's CUDA IPC
    # path runs per tensor all_gather_object (two all-gathers over 4 ranks, 8.4 + 3 × 3.4 = 18.6
    # µs each) and a barrier (a one-element all-reduce, 8.4 + 6 × 3.4 = 28.8 µs): 339 × 66 µs =
    # 0.022374 s in place of the 2N broadcast's 0.033847 s
    rollout += 339 * 66e-6 - 15_231_233_024 / 450e9
    assert rollout == pytest.approx(13.364, abs=1e-3)
    # OpenRLHF's Ray call to the engine per tensor, 339 × 1 / 1,950.1567 s (Ray's published
    # 1_1_actor_calls_sync, model.rlhf.sync_time.RAY_ACTOR_CALL_S) = 0.173832 s, and its clone of
    # each tensor before the IPC hand-over, a memory-bound copy reading and writing 2 B an
    # element: 4N / (3.35 TB/s × 0.9) + 339 × 3 µs = 0.011121 s (model.rlhf.sync_time.
    # clone_seconds): + 0.184953 s, the same placement
    ray, clone = 339 / 1950.1566973268486, 4 * 7_615_616_512 / (3.35e12 * 0.9) + 339 * 3e-6
    assert (ray, clone) == (pytest.approx(0.173832, abs=1e-6), pytest.approx(0.011121, abs=1e-6))
    rollout += ray + clone
    assert rollout == pytest.approx(13.549, abs=1e-3)
    host_step = 112 / 8 * 10e9 * 28 / (2.57 * 48)
    cpu = 30 * 7_615_616_512 / 4 * (1 / host_step - 1 / 76.8e9)
    assert cpu == pytest.approx(1.054, abs=1e-3)
    dp4 = 0.015  # the actor's dp 4 all-reduce as a ring (docstring)
    scoring = 1.011  # forward-only pipelines (0.987 s at a third of the three passes)
    assert r.best.plan.phase_s == pytest.approx((rollout, scoring, 2.876 + cpu + dp4), abs=0.001)
    assert r.best.plan.step_s == pytest.approx(rollout + scoring + 2.876 + cpu + dp4, abs=0.001)
    assert r.best.plan.step_s == pytest.approx(18.305 + 0.025 - 0.0115 + 0.185, abs=0.001)
    monkeypatch.setattr(network, "check_split_count", lambda spec, role, dp: None)
    old = search_placement(_problem(2, 2, 8))
    # without OpenRLHF's count rule the actor at dp 8 is no longer offered either: a dp above
    # the 4 sequences leaves a rank with none, which the tables now leave out
    # (model.rlhf.dp_batch.dp_refusal, read by optimizer.rlhf.tables._training_options and by
    # interface.rlhf.faithful._check_train_dp); the old answer, dp 8 at 14.202 s, is gone and
    # the answer stays the one above
    assert next(o.dp for o in old.best.options if o.role is Role.ACTOR) == 4
    assert old.best.plan.step_s == pytest.approx(r.best.plan.step_s, abs=0.001)
