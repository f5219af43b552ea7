"""The RLHF placement search (issue 12): CP-SAT equal to the exhaustive oracle on small clusters,
every answer re-composed by the cost model, and the 7B and 70B GRPO runs on 64 H100 answered in
seconds, proven optimal within the model, with the reason it colocates or splits."""

from __future__ import annotations

import itertools
import time
from fractions import Fraction

import pytest

from trainplan.model.errors import InfeasibleError
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.model_spec import ModelSpec
from trainplan.model.rlhf_spec import RLHFSpec
from trainplan.model.specs import Architecture
from trainplan.optimizer.rlhf_cpsat import PlacementModel
from trainplan.optimizer.rlhf_search import (
    enumerate_placement,
    objective_ns,
    placement_plan,
    search_placement,
)
from trainplan.optimizer.rlhf_tables import RLHFProblem, build_tables, pool_sizes
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

TINY = ModelSpec(
    name="tiny",
    arch=Architecture(
        num_layers=8, hidden_size=1024, num_attention_heads=16, num_kv_heads=4,
        ffn_hidden_size=4096, vocab_size=32000, mlp="swiglu", norm="rmsnorm",
    ),
)  # fmt: skip


def _small(mem_gib: int, algorithm="grpo", reward="rule", off_policy=0) -> RLHFProblem:
    """A 4-GPU node of a small-memory accelerator, so memory decides between placements; with
    H100's host link and host memory bandwidth, so CPU Adam is among the options."""
    dev = DeviceSpec(
        name="H100-test", memory_bytes=mem_gib * 2**30, memory_unit="GiB",
        peak_flops_per_s=989.4e12, nvlink_bytes_per_s=450e9, nvlink_domain=4,
        scaleout_bytes_per_s=50e9, hbm_bytes_per_s=3.35e12, host_link_bytes_per_s=64e9,
        host_memory_bytes_per_s=76.8e9, runtime_reserve_bytes=2**29,
    )  # fmt: skip
    spec = RLHFSpec(
        algorithm=algorithm, policy=TINY, reward=reward, prompts=16, samples_per_prompt=8,
        prompt_tokens=256, completion_tokens=1024, off_policy=off_policy, max_num_seqs=32,
    )  # fmt: skip
    return RLHFProblem(
        spec, dev, 4, ClusterLinks.from_device(dev), fractions=(Fraction(1, 2), Fraction(4, 5))
    )


def _check(problem: RLHFProblem, colocate=None) -> None:
    tables = build_tables(problem)
    found = PlacementModel(tables, colocate=colocate).solve()
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


@pytest.mark.parametrize(
    ("mem", "algorithm", "reward", "off"),
    [(4, "grpo", "rule", 1), (3, "ppo", "model", 0)],
)
def test_cpsat_equals_the_oracle(mem, algorithm, reward, off):
    """On 4 GPUs, CP-SAT's step time equals the least of every partition of the roles into
    pools, every pool size and every role option (the oracle), and its answer re-composes."""
    _check(_small(mem, algorithm, reward, off))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mem", "algorithm", "off", "colocate"),
    list(
        itertools.product(
            (3, 4, 6), (("grpo", "rule"), ("grpo", "model"), ("ppo", "model")), (0, 1),
            (None, True, False),
        )
    ),
)  # fmt: skip
def test_cpsat_equals_the_oracle_sweep(mem, algorithm, off, colocate):
    algo, rew = algorithm
    _check(_small(mem, algo, rew, off), colocate)


def test_pool_sizes_pack_onto_nodes():
    assert pool_sizes(64, 8) == (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64)
    assert pool_sizes(16, 8) == (1, 2, 4, 8, 16)


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
    t0 = time.perf_counter()
    r = search_placement(_grpo(model))
    assert time.perf_counter() - t0 < 30  # ~2–3 s on an idle 2-core machine
    assert r.status == "optimal" and r.best.plan.fits
    assert r.best.colocated and r.reason.startswith("colocates")
    assert r.split is not None and r.split.plan.step_s > r.best.plan.step_s
    assert r.best.plan.step_s == pytest.approx(r.best.objective_ns / 1e9, abs=1e-8)


def test_one_step_off_policy_may_split():
    """One step off-policy lets a rollout pool run beside training: the answer is the better of
    the best colocated and the best split placement, and says which."""
    r = search_placement(_grpo("qwen2.5-7b", off_policy=1))
    best = min((p for p in (r.colocated, r.split) if p is not None), key=lambda p: p.objective_ns)
    assert r.best.objective_ns == best.objective_ns
    assert r.reason.split(":")[0] in ("colocates", "splits")
