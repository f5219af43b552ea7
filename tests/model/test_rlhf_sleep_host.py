"""OpenRLHF's sleeping engine's host copy (:func:`model.rlhf.openrlhf.sleep_host`), held to
hand-derived bytes in the placement's host check, the exhaustive oracle and the CP-SAT model.

The rule, from the code: OpenRLHF (3c3be6234) sleeps its engines at level 1
(``LLMRayActor.sleep(level=1)``, ``vllm_engine.py``), and only with every role colocated
(``train_ppo_ray.py`` turns ``--vllm.enable_sleep`` off without ``--train.colocate_all``). vLLM's
level 1 offloads the ``weights`` allocations (``Worker.sleep``: ``offload_tags = ("weights",)``)
and ``CuMemAllocator.sleep`` copies each into a pinned ``cpu_backup_tensor`` until ``wake_up``:
the engine's BF16 weights ÷ tp per GPU sit in host memory beside the roles' offloaded state.
verl sleeps at level 2 (``VLLM_SLEEP_LEVEL``), which discards them: nothing under ``megatron``
or ``fsdp2``."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.archs import TINY_GQA
from trainplan.model.hardware import ClusterLinks, DeviceSpec
from trainplan.model.rlhf.engine import engine_weights_bytes
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.model.rlhf.step import PROCESS_BYTES, compose
from trainplan.optimizer.rlhf.cpsat import PlacementModel
from trainplan.optimizer.rlhf.search import enumerate_placement, objective_ns
from trainplan.optimizer.rlhf.tables import RLHFProblem, build_tables, cost_of, dominant
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

QWEN = get_model("qwen2.5-7b").model
N_QWEN = 7_615_616_512
H100 = get_accelerator("H100-SXM")
CAPACITY = 83_210_009_600  # H100-SXM usable bytes
HOST = 2 * 10**12  # HOST_BYTES_PER_NODE


def _problem(framework: str) -> RLHFProblem:
    spec = RLHFSpec(
        algorithm="grpo", policy=QWEN, reward="rule", prompts=4, samples_per_prompt=16,
        prompt_tokens=1024, completion_tokens=4096, framework=framework,
    )  # fmt: skip
    return RLHFProblem(spec, H100, 8, ClusterLinks.from_device(H100))


def test_llama3_70b_engine_at_tp8_by_hand():
    """Llama 3 70B: 70,553,706,496 parameters, of which the norms' 2 × 80 × 8,192 + 8,192 =
    1,318,912 are whole on every tp rank and the rest split: at tp 8, (70,553,706,496 −
    1,318,912)/8 + 1,318,912 = 8,820,367,360 per GPU, 2 B each = 17,640,734,720 B, 17.64 GB;
    the eight GPUs of a node hold 141.1 GB of it in host memory."""
    spec = RLHFSpec(
        algorithm="grpo", policy=get_model("llama3-70b").model, reward="rule", prompts=4,
        samples_per_prompt=16, prompt_tokens=1024, completion_tokens=4096, framework="deepspeed",
    )  # fmt: skip
    weights = engine_weights_bytes(spec.role(Role.ROLLOUT), 8)
    assert weights == 2 * ((70_553_706_496 - 1_318_912) // 8 + 1_318_912) == 17_640_734_720
    assert 8 * weights == 141_125_877_760


@pytest.mark.parametrize("framework", ["deepspeed", "fsdp2", "megatron"])
def test_the_host_copy_counts_on_the_actors_pool_under_openrlhf(framework):
    """Qwen2.5 7B, engine tp 1 at fraction 0.5 and actor dp 8 on 8 H100. Under ``deepspeed`` the
    sleeping engine keeps 2 B × 7,615,616,512 = 15,231,233,024 B per GPU in host memory: the
    colocated pool's host bytes are the actor's (0: no offload) + 15,231,233,024 B. On separate
    pools the engine never sleeps (OpenRLHF forces sleep off without ``colocate_all``): 0 on
    both. verl's profiles sleep at level 2: 0 everywhere."""
    p = _problem(framework)
    engine = cost_of(p, RoleOption(Role.ROLLOUT, 8, 8, 1, 1, "none", Fraction(1, 2)))
    actor = cost_of(p, RoleOption(Role.ACTOR, 8, 8, 1, 1))
    copy = 2 * N_QWEN if framework == "deepspeed" else 0
    assert copy in (0, 15_231_233_024)
    assert engine.sleep_host_bytes == copy and engine.host_bytes == 0 == actor.host_bytes
    terms = {t.name: t for t in engine.terms if t.phase == "host"}
    assert [t.value for t in terms.values()] == ([copy] if copy else [])
    together = compose((engine, actor), (0, 0), CAPACITY, HOST, 8)
    assert together.pools[0].host_bytes == copy
    apart = compose((engine, actor), (0, 1), CAPACITY, HOST, 8)
    assert [q.host_bytes for q in apart.pools] == [0, 0]
    # a node of 8 × 15,231,233,024 B less one byte of host memory: the colocated pool's host
    # share, 15,231,233,023 B per GPU, is one byte short under deepspeed
    tight = compose((engine, actor), (0, 0), CAPACITY, 8 * 15_231_233_024 - 8, 8)
    over = [o for o in tight.overflows() if o[0] == "host"]
    assert over == ([("host", 0, "host", copy, Fraction(15_231_233_023))] if copy else [])


TINY = TINY_GQA


def _small(host_memory_bytes: int) -> RLHFProblem:
    """4 GPUs of 16 GiB (tests/optimizer/test_rlhf_search.py ``_small``): under ``deepspeed``
    the synchronous GRPO answer is every role on one pool."""
    dev = DeviceSpec(
        name="H100-test", memory_bytes=16 * 2**30 + PROCESS_BYTES, memory_unit="GiB",
        peak_flops_per_s=989.4e12, nvlink_bytes_per_s=450e9, nvlink_domain=4,
        scaleout_bytes_per_s=50e9, hbm_bytes_per_s=3.35e12, host_link_bytes_per_s=64e9,
        host_memory_bytes_per_s=76.8e9, runtime_reserve_bytes=2**29,
    )  # fmt: skip
    spec = RLHFSpec(
        algorithm="grpo", policy=TINY, reward="rule", prompts=16, samples_per_prompt=8,
        prompt_tokens=256, completion_tokens=1024, max_num_seqs=32, framework="deepspeed",
        host_memory_bytes=host_memory_bytes,
    )  # fmt: skip
    return RLHFProblem(
        spec, dev, 4, ClusterLinks.from_device(dev), fractions=(Fraction(1, 2), Fraction(4, 5))
    )


@pytest.mark.parametrize("host_gb", [2000, 0])
def test_cpsat_and_the_oracle_count_the_copy_alike(host_gb):
    """With the default host memory the answer is every role on one pool and the engine's copy
    fits; with none (a host share of 0 B) no engine can sleep on the actor's pool, so CP-SAT and
    the oracle both keep the engine apart, and agree on the step time."""
    problem = _small(host_gb * 10**9)
    tables = build_tables(problem)
    found = PlacementModel(dominant(tables)).solve()
    oracle = enumerate_placement(tables)
    assert found is not None and oracle is not None
    assert found.objective_ns == oracle[0]
    costs = tuple(c for _, c in found.chosen)
    assert objective_ns(problem, costs, found.slots) == found.objective_ns
    roles = [c.option.role for c in costs]
    engine, actor = roles.index(Role.ROLLOUT), roles.index(Role.ACTOR)
    assert (found.slots[engine] == found.slots[actor]) == (host_gb > 0)
    assert costs[engine].sleep_host_bytes == engine_weights_bytes(
        problem.spec.role(Role.ROLLOUT), costs[engine].option.tp
    )
