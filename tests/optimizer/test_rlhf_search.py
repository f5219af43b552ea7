"""The RLHF placement search (issue 12): CP-SAT equal to the exhaustive oracle on small clusters,
every answer re-composed by the cost model, and the 7B and 70B GRPO runs on 64 H100 answered in
seconds, proven optimal within the model, with the reason it colocates or splits."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from tests.archs import TINY_GQA
from trainplan.model.errors import InfeasibleError, InputError
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.rlhf.packing import split_peak_tokens
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.model.rlhf.step import PROCESS_BYTES
from trainplan.optimizer.rlhf import search
from trainplan.optimizer.rlhf.cpsat import PlacementModel
from trainplan.optimizer.rlhf.search import (
    TABLES_SHARE,
    enumerate_placement,
    objective_ns,
    placement_plan,
    search_placement,
)
from trainplan.optimizer.rlhf.tables import RLHFProblem, build_tables, dominant, pool_sizes
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

TINY = TINY_GQA

ACCUMULATE_10_NS = round(10 * 6 * 187_188_224 / (0.9 * 3.35e12) * 1e9)
"""DeepSpeed ZeRO-1's 10 adds of a 6 B gradient element over TINY's 187,188,224 parameters at
0.9 of the test part's 3.35 TB/s (model/deepspeed_accumulate.py), nanoseconds."""

SYNC_LATENCY_NS = 75 * 20_400
"""The weight sync to an engine on GPUs of its own, one tensor at a time
(model.rlhf.sync_time.broadcast_seconds): TINY's 75 tensors (8 layers × 9 + 3) × NCCL's ring
broadcast latency over 3 ranks (actor rank 0 and a 2-GPU engine) in one NVLink domain, base +
nRanks hops at the tree's Simple NVLink latency (model.nccl_latency.broadcast_latency, NCCL
tuning.cc), 8.4 + 3 × 4.0 = 20.4 µs: 1,530,000 ns on every split placement (the actor at
ZeRO-1/2, tp 1, gathers nothing). The other ring collectives' form, 8.4 + 3 × 3.4 = 18.6 µs,
gave 1,395,000 ns: 75 × 1.8 µs = 135,000 ns less."""

RAY_NS = round(75 / 1950.1566973268486 * 1e9)
"""OpenRLHF's Ray call to the engine per tensor (model.rlhf.sync_time.RAY_ACTOR_CALL_S: the
inverse of Ray's published ``1_1_actor_calls_sync``, 1,950.1567 calls/s, 512.7793 µs): TINY's
75 tensors, 38,458,448 ns on every placement under ``deepspeed`` (broadcast or CUDA IPC)."""


def _small(
    mem_gib: int, algorithm="grpo", reward="rule", off_policy=0, framework="megatron"
) -> RLHFProblem:
    """A 4-GPU node of a small-memory accelerator, so memory decides between placements; with
    H100's host link and host memory bandwidth, so CPU Adam is among the options. The memory has
    room for one process beside the reserve's (``PROCESS_BYTES``: the engine's worker beside
    verl's fused one), so the cases keep the regime they were chosen for."""
    dev = DeviceSpec(
        name="H100-test", memory_bytes=mem_gib * 2**30 + PROCESS_BYTES, memory_unit="GiB",
        peak_flops_per_s=989.4e12, nvlink_bytes_per_s=450e9, nvlink_domain=4,
        scaleout_bytes_per_s=50e9, hbm_bytes_per_s=3.35e12, host_link_bytes_per_s=64e9,
        host_memory_bytes_per_s=76.8e9, runtime_reserve_bytes=2**29,
    )  # fmt: skip
    spec = RLHFSpec(
        algorithm=algorithm, policy=TINY, reward=reward, prompts=16, samples_per_prompt=8,
        prompt_tokens=256, completion_tokens=1024, off_policy=off_policy, max_num_seqs=32,
        framework=framework,
    )  # fmt: skip
    return RLHFProblem(
        spec, dev, 4, ClusterLinks.from_device(dev), fractions=(Fraction(1, 2), Fraction(4, 5))
    )


def _check(problem: RLHFProblem, colocate=None) -> None:
    """CP-SAT over the tables less their dominated options (what the search solves) against the
    exhaustive oracle over the full tables: the pruning loses no optimum."""
    tables = build_tables(problem)
    pruned = dominant(tables)
    assert pruned.num_options < tables.num_options
    found = PlacementModel(pruned, colocate=colocate).solve()
    oracle = enumerate_placement(tables, colocate=colocate)
    if oracle is None:
        assert found is None
        return
    assert found is not None and found.status == "optimal"
    assert found.objective_ns == oracle[0]
    costs = tuple(c for _, c in found.chosen)
    assert objective_ns(problem, costs, found.slots) == found.objective_ns
    plan = placement_plan(problem, costs, found.slots)
    assert plan.fits
    # the solver's integer nanoseconds are the plan's seconds, rounded per role
    assert abs(plan.step_s * 1e9 - found.objective_ns) <= len(costs)
    if colocate is None:  # the whole search: incumbent bound, floors, dominance, three solves
        assert search_placement(problem).best.objective_ns == oracle[0]


@pytest.mark.parametrize(
    ("mem", "algorithm", "reward", "off"),
    [(4, "grpo", "rule", 1), (3, "ppo", "model", 0)],
)
def test_cpsat_equals_the_oracle(mem, algorithm, reward, off):
    """On 4 GPUs, CP-SAT's step time equals the least of every partition of the roles into
    pools, every pool size and every role option (the oracle), and its answer re-composes."""
    _check(_small(mem, algorithm, reward, off))


def test_cpsat_equals_the_oracle_when_roles_add_their_groups():
    """Under FSDP2 every role's communicators add up on its pool (groups of its own), and any
    tp × pp may share a pool: CP-SAT still equals the oracle. Under Megatron-Core (the tests
    above) a pool's roles share one set and one tp × pp."""
    problem = _small(4, "ppo", "model", 0, framework="fsdp2")
    costs = [c for by in build_tables(problem).options.values() for o in by.values() for _, c in o]
    assert any(c.resident_bytes for c in costs) and not any(c.groups for c in costs)
    _check(problem)


def test_cpsat_equals_the_oracle_when_each_role_is_a_process():
    """Under DeepSpeed (OpenRLHF: a Ray actor per role on each GPU) every role and the engine's
    worker are processes of their own, each with a CUDA context and a cuBLAS workspace,
    666,632,192 + 33,554,432 = 700,186,624 B, beyond the one the runtime reserve holds. PPO on
    one pool would run five processes (4 × 700,186,624 = 2,800,746,496 B more) and does not fit
    here; with OpenRLHF's roles planned at tp 1 and pp 1 (model.rlhf.roles; at 6 GiB nothing fits
    then) the answer on 9 GiB splits the roles into OpenRLHF's pools (model/rlhf/split.py
    pool_refusal): the engine alone on 2 GPUs, one process; the actor with the reference and the
    critic with the reward model (--train.colocate_actor_ref, --train.colocate_critic_reward) on
    one GPU each, two processes, 700,186,624 B beyond the reserve's. 993,684,090 ns a step →
    1,359,376,852 (OpenRLHF's pools, model/rlhf/split.py: 993,684,090 put the engine and the actor on one pool
    and counted the engine asleep there, which OpenRLHF does not do without every role on the
    pool, --train.colocate_all, and the critic, reference and reward model on the other) →
    1,359,771,503 ns (+ the engine's tp all-reduces, model/rollout_reduce.py: the engine runs tp 1 × dp 2, not
    tp 2 × dp 1, +394,651 ns, as in test_scoring_roles_keep_the_actors_split) → 1,398,886,205
    ns (decode's reads at the part's streaming share, model.rlhf.engine.decode_efficiency: 0.9,
    hbm_efficiency, for this test part without a BabelStream run) → 1,402,611,344 ns (DeepSpeed's
    ZeRO-1 accumulates each micro-batch's 16-bit gradient into ``.grad`` by autograd's add,
    model/deepspeed_accumulate.py: the trained roles' update at b = ⌊16,384 / 1,280⌋ = 12
    sequences is m = ⌈128 / 12⌉ = 11 micro-batches on one GPU, 10 adds of 6 B × 187,188,224
    parameters at 0.9 of 3.35 TB/s, 3,725,139 ns more; the actor and the critic train on
    pools of their own, side by side) → 1,481,526,690 ns (the scoring forwards timed as the
    forward-only pipeline of the forward's own operations, model.terms.forward_gather.
    forward_pass_term, not a third of the three passes: +78,915,346 ns) → 1,482,921,690 ns (the
    weight sync one tensor at a time, 75 × 18.6 µs) → 1,483,056,690 ns (NCCL's broadcast as
    tuning.cc models it, SYNC_LATENCY_NS = 75 × 20.4 µs: + 75 × 1.8 µs = 135,000 ns; the engine
    is on a pool of its own) → 1,521,515,138 ns (OpenRLHF's Ray call to the engine per tensor,
    RAY_NS = 75 × 512.7793 µs = 38,458,448 ns; the same pools). CP-SAT still equals the
    oracle."""
    problem = _small(9, "ppo", "model", 0, framework="deepspeed")
    _check(problem)
    r = search_placement(problem)
    assert ACCUMULATE_10_NS == 3_725_139
    assert ACCUMULATE_10_NS + 1_398_886_205 + 78_915_346 == 1_481_526_690
    assert 1_481_526_690 + 75 * 18_600 == 1_482_921_690
    assert 1_482_921_690 + 75 * (20_400 - 18_600) == 1_481_526_690 + SYNC_LATENCY_NS
    assert RAY_NS == 38_458_448
    assert r.colocated is None and r.best.objective_ns == 1_483_056_690 + RAY_NS == 1_521_515_138
    pools = sorted((p.roles, p.processes, p.process_bytes) for p in r.best.plan.pools)
    assert pools == [
        (("actor", "reference"), 2, 700_186_624),
        (("critic", "reward"), 2, 700_186_624),
        (("rollout",), 1, 0),
    ]


def test_scoring_roles_keep_the_actors_split(monkeypatch):
    """OpenRLHF's scoring split (model/rlhf/packing.py, split_peak_tokens) on :func:`_small`'s
    step: 16 × 8 = 128 rollouts of 256 + 1,024 = 1,280 tokens, 12 to a first-fit micro-batch,
    k = ⌈128 / 12⌉ = 11. dp 1: 11 micro-batches, ⌈128 / 11⌉ = 12 rollouts, 15,360 tokens; dp 2:
    10, 13 rollouts, 16,640. OpenRLHF splits once, at the actor's dp, for every scoring role, so
    a reference on a 1-GPU pool beside an actor alone on 2 GPUs (and the engine on the last GPU:
    pools OpenRLHF makes) would run 16,640-token forwards while its options are costed at
    15,360: that placement is refused (compose, the oracle, CP-SAT); with the rule patched out
    it would take 1,224,259,249 ns a step (its 1-GPU engine is tp 1: no all-reduces; 1,302,488,653
    with decode at 0.9 of HBM), above the
    answer (the engine on 2 GPUs, the actor and the reference on one each, all at 15,360
    tokens). With a reward model the answer puts the actor and the reference on one GPU, so
    every scoring role is at dp 1, 15,360 tokens. The refusal once cost that problem
    908,140,859 − 893,883,653 ns, beside an engine on the actor's pool counted asleep; OpenRLHF's
    pools (model/rlhf/split.py pool_refusal) no longer allow that placement. CP-SAT equals the
    oracle.

    The answers: without a reward model 1,120,087,186 ns (OpenRLHF's pools, model/rlhf/split.py) →
    1,120,481,837 ns (+ the engine's tp all-reduces, model/rollout_reduce.py); with
    one 908,140,859 → 1,359,376,852 (OpenRLHF's pools; 908,535,510 with the all-reduces alone)
    → 1,359,771,503 ns (both). The 2-GPU engine pool ran tp 2 × dp 1,
    rollout 371,648,447 ns; with its all-reduces timed that option takes 1,383,681,528 ns (4
    waves of 32: 4,096 decode steps × 16 all-reduces (2 × 8 layers) of 32 × 1,024 × 2 =
    65,536 B at 15.382 µs + 4 × 16 prefill all-reduces of one 8,192-token chunk, 16 MiB at
    61.803 µs = 1.008078 + 0.003955 = 1.012033 s more), so the engine runs tp 1 × dp 2 instead,
    372,043,098 ns (no all-reduces at tp 1): +394,651 ns on each step. Decode's reads at the
    part's streaming share (model.rlhf.engine.decode_efficiency; 0.9 for this test part, which
    has no BabelStream run): the engine's rollout 372,043,098 → 411,157,800 ns (all 2,048
    decode steps HBM-bound: 352,032,317 ns of reads at the datasheet's bandwidth → 391,147,019
    ns at 0.9 of it, 39,114,702 ns more), so
    1,359,771,503 → 1,398,886,205 ns with a reward model, 1,120,481,837 → 1,159,596,539 without.
    DeepSpeed's ZeRO-1 accumulates the actor's 16-bit gradients by autograd's add
    (model/deepspeed_accumulate.py): m = ⌈128 / (12 · dp)⌉ micro-batches an update, 10 adds at
    dp 1 and 5 at dp 2 of 6 B × 187,188,224 parameters at 0.9 of 3.35 TB/s (372,513.9 ns
    each): 1,402,611,344 and 1,163,321,678 ns; the refused placement 1,304,351,222 ns. The
    scoring forwards timed as the forward-only pipeline (model.terms.forward_gather.
    forward_pass_term: the forward's own operations, not a third of the three passes):
    1,481,526,690 and 1,202,779,351 ns; the refused placement 1,343,808,895 ns. DeepSpeed
    ZeRO-1/2's own optimizer-step passes (model.step_passes.step_pass_bytes, 38 → 98 B an
    element): without a reward model the actor alone on its GPU steps all 187,188,224 elements,
    +60 B × 187,188,224 / (0.9 × 3.35 TB/s) = +3,725,139 ns: 1,206,504,490 ns; the refused
    placement's actor at dp 2 steps half, +1,862,569.4 ns: 1,345,671,465 ns. The weight sync
    one tensor at a time adds SYNC_LATENCY_NS to each (the engine on a pool of its own):
    1,482,921,690 and 1,207,899,490 ns at 75 × 18.6 µs; the refused placement's 1-GPU engine 75
    × 15.2 µs: 1,346,811,465 ns. NCCL's broadcast as tuning.cc models it (base + nRanks hops at
    the tree's Simple NVLink 4.0 µs, model.nccl_latency.broadcast_latency): 3 ranks 20.4 µs,
    + 75 × 1.8 µs = 135,000 ns: 1,483,056,690 and 1,208,034,490 ns; 2 ranks 16.4 µs, + 75 × 1.2
    µs = 90,000 ns: 1,346,901,465 ns. OpenRLHF's Ray call per tensor (RAY_NS, 75 × 512.7793 µs
    = 38,458,448 ns, the same placements): 1,521,515,138, 1,246,492,938 and 1,385,359,913 ns."""
    assert split_peak_tokens(128, 16_384, 1_280, None, 1) == 12 * 1_280 == 15_360
    assert split_peak_tokens(128, 16_384, 1_280, None, 2) == 13 * 1_280 == 16_640
    model = _small(9, "grpo", "model", 0, framework="deepspeed")
    _check(model)
    best = search_placement(model).best
    assert 1_359_771_503 + 39_114_702 + ACCUMULATE_10_NS == 1_402_611_344
    assert best.objective_ns == 1_481_526_690 + SYNC_LATENCY_NS + RAY_NS == 1_521_515_138
    assert best.plan.phase_s[0] == pytest.approx(0.411157800 + 0.001530 + 0.038458448, abs=1e-9)
    assert {c.split_tokens for c in best.plan.costs if c.option.role != Role.ROLLOUT} == {15_360}
    problem = _small(9, "grpo", "rule", 0, framework="deepspeed")
    _check(problem)
    best = search_placement(problem).best
    assert 1_120_481_837 + 39_114_702 + ACCUMULATE_10_NS == 1_163_321_678
    step_passes = round(60 * 187_188_224 / (0.9 * 3.35e12) * 1e9)  # ZeRO-1/2: 38 -> 98 B
    assert 1_202_779_351 + step_passes == 1_206_504_490
    assert 1_206_504_490 + SYNC_LATENCY_NS == 1_208_034_490
    assert best.objective_ns == 1_208_034_490 + RAY_NS == 1_246_492_938
    engine = next(c for c in best.plan.costs if c.option.role is Role.ROLLOUT)
    assert (engine.option.tp, engine.option.dp, engine.option.gpus) == (1, 2, 2)
    assert 372_043_098 - 371_648_447 == 394_651
    assert 4_096 * 16 * 15.382e-6 + 4 * 16 * 61.803e-6 == pytest.approx(1.012033, abs=1e-5)
    tables = build_tables(problem)
    engine = next(c for _, c in tables.options[Role.ROLLOUT][1])
    actor = next(c for _, c in tables.options[Role.ACTOR][2] if c.option.offload == "none")
    ref = next(c for _, c in tables.options[Role.REFERENCE][1])
    costs, slots = (engine, actor, ref), (0, 1, 2)
    assert (actor.split_tokens, ref.split_tokens) == (16_640, 15_360)
    assert objective_ns(problem, costs, slots) is None
    with pytest.raises(InputError, match="actor's dp 2 .* reference at dp 1 would be counted"):
        placement_plan(problem, costs, slots)
    monkeypatch.setattr(search, "split_refusal", lambda costs: None)
    # decode's reads at 0.9 of the test part's HBM: its 1-GPU engine decodes twice the 2-GPU
    # engine's share of the rollouts, so twice its 39,114,702 ns more
    five = round(5 * 6 * 187_188_224 / (0.9 * 3.35e12) * 1e9)  # the actor's 5 adds at dp 2
    assert 1_302_488_653 + five == 1_304_351_222
    half = 60 * 187_188_224 / 2 / (0.9 * 3.35e12) * 1e9  # its actor's passes at dp 2, ns
    assert half == pytest.approx(1_862_569.4, abs=0.01)  # 1,343,808,895 was itself rounded:
    assert 1_343_808_895 + 1_862_570 == 1_345_671_465  # the forward-only scoring, then the passes
    # its 1-GPU engine's broadcast: 2 ranks, 8.4 + 2 × 4.0 = 16.4 µs a tensor (8.4 + 2 × 3.4 =
    # 15.2 µs as the other ring collectives, 1,346,811,465 ns), 75 × 16,400 ns
    assert 1_345_671_465 + 75 * 15_200 == 1_346_811_465
    assert 1_345_671_465 + 75 * 16_400 == 1_346_901_465
    assert objective_ns(problem, costs, slots) == 1_346_901_465 + RAY_NS == 1_385_359_913


@pytest.mark.parametrize("framework", ["deepspeed", "megatron"])
def test_cpsat_equals_the_oracle_with_an_off_policy_engine_alone(framework):
    """One-step off-policy: an engine on a pool without the actor is alone there
    (model/rlhf/split.py), and under DeepSpeed it holds the model-update ring and receives each
    whole parameter over NCCL. CP-SAT equals the oracle over all placements and, kept off the
    actor's pool (``colocate=False``), no other role joins the engine."""
    problem = _small(6, "ppo", "model", 1, framework=framework)
    _check(problem)
    _check(problem, colocate=False)
    found = PlacementModel(dominant(build_tables(problem)), colocate=False).solve()
    if found is not None:
        rollout = found.slots[[c.option.role for _, c in found.chosen].index(Role.ROLLOUT)]
        assert found.slots.count(rollout) == 1


@pytest.mark.parametrize("off", [0, 1])
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
@pytest.mark.parametrize("mem", [9, 12, 16])
def test_cpsat_equals_the_oracle_on_openrlhfs_pools(mem, algorithm, off):
    """Under DeepSpeed a pool of two or more roles is one OpenRLHF makes (model/rlhf/split.py
    pool_refusal): actor + reference, critic + reward, or every role (every role but the engine
    off-policy). CP-SAT (a no-good row per refused set and slot) equals the oracle, whole and kept
    off the actor's pool, and its answer's pools are those sets. On 9 GiB nothing fits together
    beyond the pairs; on 16 GiB the synchronous answer is every role on one pool and the
    off-policy one, for GRPO, every role but the engine."""
    problem = _small(mem, algorithm, "model", off, framework="deepspeed")
    _check(problem)
    _check(problem, colocate=False)
    roles = {str(r) for r in build_tables(problem).roles}
    every = roles - {"rollout"} if off else roles
    allowed = [{"actor", "reference"}, {"critic", "reward"}, every]
    pools = [set(q.roles) for q in search_placement(problem).best.plan.pools]
    assert all(len(q) == 1 or q in allowed for q in pools), pools
    if mem == 16:
        assert (every in pools) == (not off or algorithm == "grpo")


@pytest.mark.parametrize(
    ("mem", "algorithm", "off", "colocate"),
    [
        pytest.param(*case, marks=pytest.mark.slow if case[0] == 3 else pytest.mark.exhaustive)
        for case in itertools.product(
            (3, 4, 6), (("grpo", "rule"), ("grpo", "model"), ("ppo", "model")), (0, 1),
            (None, True, False),
        )
    ],
)  # fmt: skip
def test_cpsat_equals_the_oracle_sweep(mem, algorithm, off, colocate):
    algo, rew = algorithm
    _check(_small(mem, algo, rew, off), colocate)


def test_pool_sizes_pack_onto_nodes():
    assert pool_sizes(64, 8) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert pool_sizes(16, 8) == (1, 2, 4, 8, 16)


@pytest.mark.parametrize("gpus", [64, 4096, 6144, 10**6, 2**24 - 8])
def test_pool_sizes_grow_with_the_digits_of_the_gpu_count(gpus):
    """Whole nodes: every count up to 8 nodes, powers of two, halves … eighths, and what those
    of an eighth or more leave — at most 8 + 3·log₂(nodes) + 14 sizes, so 10⁶ GPUs cost what a
    few thousand do (the old every-whole-node rule had 125,000 sizes there)."""
    sizes = pool_sizes(gpus, 8)
    nodes = gpus // 8
    assert len(sizes) <= 3 + 8 + 3 * nodes.bit_length() + 14
    assert all(n % 8 == 0 for n in sizes if n >= 8) and sizes[-1] == 8 * nodes
    for k in (2, 4, 8):  # two pools fill the cluster at a half, a quarter and an eighth
        if nodes % k == 0:
            assert 8 * nodes // k in sizes and 8 * (nodes - nodes // k) in sizes


def test_a_floor_never_exceeds_what_an_option_costs():
    """seconds_floor scales a cost's per-micro-batch compute to another dp; for every option of
    every size it stays at or below the option's own seconds (so the bound prunes nothing a
    placement under it needs)."""
    from trainplan.model.rlhf.network import seconds_floor

    for problem in (_small(6, "ppo", "model"), _small(6, "grpo", "rule", 1)):
        tables = build_tables(problem)
        largest = {}
        for role in tables.roles:
            for n in sorted(tables.sizes, reverse=True):
                for opt, cost in tables.options[role][n]:
                    key = (opt.tp, opt.pp, opt.offload)
                    ref = largest.setdefault((role, key), cost)
                    own = sum(cost.seconds(p) for p in ("rollout", "scoring", "training"))
                    assert seconds_floor(problem.spec, ref, opt.dp) <= own * (1 + 1e-9)


def _clock(step: float):
    """A clock that moves ``step`` seconds at every reading."""
    now = [0.0]

    def read() -> float:
        now[0] += step
        return now[0]

    return read


def test_out_of_time_is_unknown_or_feasible_never_infeasible():
    """A limit spent before any pool size is costed: status unknown, nothing found, and no
    'no placement fits' (that is only said when proven). A limit that lets the largest pool be
    costed: a placement, status feasible (not proven). (8 GiB: at 4 GiB verl's 2 GiB weight-sync
    bucket leaves no colocated placement that fits.)"""
    problem = _small(8)
    early = search_placement(problem, time_limit_s=1.0, clock=_clock(0.4))
    assert early.status == "unknown" and early.best is None and not early.complete
    assert "not proven infeasible" in early.reason
    full = search_placement(problem)
    readings: list[int] = []  # clock readings when the largest pool's roles are all costed
    clock = _clock(1.0)
    build_tables(problem, clock, 1e9, lambda done, _: readings.append(int(clock())))
    roles = len(problem.spec.roles)
    limit = (readings[roles - 1] + 3) / TABLES_SHARE  # the tables stop soon after
    late = search_placement(problem, time_limit_s=limit, clock=_clock(1.0))
    assert late.status == "feasible" and not late.complete
    assert late.best is not None and late.best.objective_ns >= full.best.objective_ns


def test_nothing_fits_is_explained():
    with pytest.raises(InfeasibleError) as err:
        search_placement(_small(1))
    assert any("no pool size" in line or "no sharing" in line for line in err.value.explanation)


H100 = get_accelerator("H100-SXM")


def _grpo(model: str, off_policy: int = 0) -> RLHFProblem:
    spec = RLHFSpec(
        algorithm="grpo", policy=get_model(model).model, reward="rule", prompts=1024,
        samples_per_prompt=16, prompt_tokens=1024, completion_tokens=4096, off_policy=off_policy,
    )  # fmt: skip
    return RLHFProblem(spec, H100, 64, ClusterLinks.from_device(H100))


@pytest.mark.parametrize("model", ["qwen2.5-7b", "llama3-70b"])
def test_grpo_on_64_h100_in_seconds_proven_optimal(model):
    """The issue's runs: GRPO of a 7B and a 70B policy (1,024 prompts × 16 rollouts of 1,024 +
    4,096 tokens, a rule reward) on 64 H100. Answered in seconds (tables and three CP-SAT solves:
    the best, the best colocated, the best split), proven optimal within the model. A
    synchronous step colocates: a pool of its own would idle while the others work."""
    r = search_placement(_grpo(model))
    assert r.status == "optimal" and r.best.plan.fits
    assert r.best.colocated and r.reason.startswith("colocates")
    assert r.split is not None and r.split.plan.step_s > r.best.plan.step_s
    assert r.best.plan.step_s == pytest.approx(r.best.objective_ns / 1e9, abs=1e-8)
    # the split's step as every other step reads: seconds, and minutes from two minutes
    # (qwen2.5-7b: 680.445 s, 11.3 min; it read "680.4 s" alone)
    seconds = f"{r.split.plan.step_s:,.3f} s"
    minutes = f" ({r.split.plan.step_s / 60:,.1f} min)" if r.split.plan.step_s >= 120 else ""
    assert f"takes {seconds}{minutes} per step" in r.reason


def test_one_step_off_policy_may_split():
    """One step off-policy lets a rollout pool run beside training: the answer is the better of
    the best colocated and the best split placement, and says which."""
    r = search_placement(_grpo("qwen2.5-7b", off_policy=1))
    best = min((p for p in (r.colocated, r.split) if p is not None), key=lambda p: p.objective_ns)
    assert r.best.objective_ns == best.objective_ns
    assert r.reason.split(":")[0] in ("colocates", "splits")


@pytest.mark.slow
def test_the_incumbent_bound_loses_no_optimum_on_64_gpus():
    """Qwen2.5 7B GRPO (256 prompts) on 64 H100: options whose floor exceeds twice the best
    colocated step are not costed (102 of them since the scoring forward's floor is the
    forward-only pipeline's per micro-batch, ``model.rlhf.role_time.forward_microbatch_s``; 100
    since NCCL's tuner runs the engine's tp 2–4 all-reduces as rings, ``model/nccl_search.py``;
    101 or more before), and the answer is the one the full tables give."""
    spec = RLHFSpec(
        algorithm="grpo", policy=get_model("qwen2.5-7b").model, reward="rule", prompts=256,
        samples_per_prompt=16, prompt_tokens=1024, completion_tokens=4096,
    )  # fmt: skip
    problem = RLHFProblem(spec, H100, 64, ClusterLinks.from_device(H100))
    bounded = search_placement(problem)
    assert bounded.skipped == 102 and bounded.status == "optimal"
    full = PlacementModel(dominant(build_tables(problem))).solve()
    assert full is not None and bounded.best.objective_ns == full.objective_ns
