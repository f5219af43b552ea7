"""The ``deepspeed`` profile's (OpenRLHF's) idle offload and weight sync, held to hand-derived
bytes (:mod:`model.rlhf.openrlhf`): the BF16 weights stay on the GPU when a trainable role is
offloaded, a frozen role offloads only at ZeRO-3, and a pool holding the engine and the actor
counts the moment the actor sends its largest parameter over CUDA IPC beside the engine's woken
weights."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.model._rlhf_specs import qwen_grpo
from trainplan.model.errors import LayoutError
from trainplan.model.hardware import ClusterLinks
from trainplan.model.params import largest_parameter_bytes
from trainplan.model.rlhf.openrlhf import sync_transient_bytes
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import Role
from trainplan.model.rlhf.step import compose
from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

QWEN = get_model("qwen2.5-7b").model  # h 3,584, V 152,064
N_QWEN = 7_615_616_512
H100 = get_accelerator("H100-SXM")
CAPACITY = 83_210_009_600  # H100-SXM usable bytes
HOST = 2 * 10**12


def _problem(framework: str, zero_stage: int | None = None) -> RLHFProblem:
    spec = qwen_grpo(framework=framework, zero_stage=zero_stage)
    return RLHFProblem(spec, H100, 8, ClusterLinks.from_device(H100))


def test_largest_parameter_and_sync_transient_by_hand():
    """Llama 3 70B's largest parameter is its embedding (and output) matrix, 128,256 × 8,192 ×
    2 B = 2,101,346,304 B (an MLP projection is 8,192 × 28,672). The sync clones it for CUDA
    IPC; where it is sharded (ZeRO-3, or tensor parallel) it is gathered whole first: twice.
    Qwen3 235B-A22B's is a MoE layer's fused experts (transformers 5 ``gate_up_proj``
    [E, 2·f_e, h]): 128 × 2 × 1,536 × 4,096 × 2 B = 3,221,225,472 B, above its embedding's
    151,936 × 4,096 × 2 = 1,244,659,712 B."""
    llama = get_model("llama3-70b").model.arch
    assert largest_parameter_bytes(llama) == 128_256 * 8_192 * 2 == 2_101_346_304
    assert sync_transient_bytes(llama, 1, 1) == 2_101_346_304
    assert sync_transient_bytes(llama, 1, 2) == 2 * 2_101_346_304 == 4_202_692_608
    assert sync_transient_bytes(llama, 3, 1) == 4_202_692_608
    moe = get_model("qwen3-235b-a22b").model.arch
    assert largest_parameter_bytes(moe) == 128 * 2 * 1_536 * 4_096 * 2 == 3_221_225_472


def test_idle_offload_under_deepspeed_keeps_the_bf16_weights():
    """Qwen2.5 7B actor on 8 H100 (dp 8 × tp 1), DeepSpeed ZeRO-1: OpenRLHF's
    ``offload_deepspeed_states`` moves the optimizer state, the FP32 master copy and the
    gradients, not the BF16 weights (``lp_params`` left out): 2 B × 7,615,616,512 =
    15,231,233,024 B stay held, the rest is swapped. Under ``megatron`` (verl) nothing stays."""
    ds = _problem("deepspeed")
    whole = cost_of(ds, RoleOption(Role.ACTOR, 8, 8, 1, 1))
    idle = cost_of(ds, RoleOption(Role.ACTOR, 8, 8, 1, 1, "idle"))
    assert idle.held_bytes == 2 * N_QWEN == 15_231_233_024
    assert idle.swap_bytes == whole.held_bytes - 15_231_233_024
    assert idle.host_bytes == idle.swap_bytes
    verl = cost_of(_problem("megatron"), RoleOption(Role.ACTOR, 8, 8, 1, 1, "idle"))
    assert verl.held_bytes == 0


def test_a_frozen_role_offloads_only_at_zero3_under_deepspeed():
    """OpenRLHF offloads the reference with DeepSpeed's ``offload_param``, run by ZeRO-3 only:
    refused at ZeRO-1 (the search skips the option); at ZeRO-3 its weights, ÷ dp, all go."""
    with pytest.raises(LayoutError, match="only ZeRO-3 runs"):
        cost_of(_problem("deepspeed"), RoleOption(Role.REFERENCE, 8, 8, 1, 1, "idle"))
    z3 = cost_of(_problem("deepspeed", 3), RoleOption(Role.REFERENCE, 8, 8, 1, 1, "idle"))
    assert z3.held_bytes == 0 and z3.swap_bytes == 2 * N_QWEN / 8


def test_the_weight_sync_moment_binds_when_the_kv_space_is_small():
    """Engine (tp 1, fraction 0.185: a budget of 0.185 × 85,017,493,504 B) and actor (dp 8,
    ZeRO-1) on one pool of 8 H100. OpenRLHF wakes the engine's weights alone, 2 B × N =
    15,231,233,024 B, and the actor sends each parameter through ``param.data.clone()``: the
    embedding, 152,064 × 3,584 × 2 B = 1,089,994,752 B (whole at ZeRO-1, tp 1: no gathered
    copy). The sync moment, held + 16,321,227,776 B, is above the generation's held + budget,
    whose KV space is under 1,089,994,752 B. Under ``fsdp2`` (verl, :mod:`model.rlhf.verl_sync`)
    the engine's weights wake too, and the actor streams through a 2,048 MiB IPC bucket that the
    engine clones, each parameter gathered in FP32 and cast to BF16 (three times the embedding's
    BF16 bytes): 2 × 2,147,483,648 + 3 × 1,089,994,752 = 7,564,951,552 B, beside
    ``state_dict()``'s FP32 shard clones (torch 2.13 ``_create_chunk_dtensor``), 4 × N / 8 =
    3,807,808,256 B: 11,372,759,808 B. The actor's FP32 gradients, the same 3,807,808,256 B, are
    not held then (``update_policy`` ends with ``zero_grad()``): the sync moment is unchanged."""
    clones = 4 * N_QWEN // 8
    assert clones == 3_807_808_256
    actor_sync = {
        "deepspeed": 1_089_994_752,
        "fsdp2": 2 * 2_147_483_648 + 3 * 1_089_994_752 + clones,
    }
    assert actor_sync["fsdp2"] == 11_372_759_808
    for framework in ("deepspeed", "fsdp2"):
        p = _problem(framework)
        engine = cost_of(p, RoleOption(Role.ROLLOUT, 8, 8, 1, 1, "none", Fraction(37, 200)))
        actor = cost_of(p, RoleOption(Role.ACTOR, 8, 8, 1, 1))
        assert engine.budget_bytes == Fraction(37, 200) * 85_017_493_504
        assert engine.rollout_bytes == engine.budget_bytes  # tp 1: no communicator inside
        assert engine.budget_bytes - 15_231_233_024 < 1_089_994_752
        plan = compose((engine, actor), (0, 0), CAPACITY, HOST, 8)
        held = plan.pools[0].held_bytes
        sync = actor_sync[framework]
        assert (engine.sync_bytes, actor.sync_bytes) == (15_231_233_024, sync)
        assert plan.pools[0].peak_bytes[0] == held + 15_231_233_024 + sync
        split = compose((engine, actor), (0, 1), CAPACITY, HOST, 8)
        # CUDA IPC on the same pool only; on a pool of its own the engine receives over NCCL
        # (tests/model/test_rlhf_split_engine.py): the model-update ring, 24 channels × 12 MiB =
        # 301,989,888 B, and the embedding whole, 1,089,994,752 B, under deepspeed and under
        # fsdp2 (verl's one-step off-policy recipe, DetachSync.sync_rollout_weights: was 0);
        # beyond the budget too, the engine's CUDA graph pool, an assumed 386,547,057 B
        receive = 301_989_888 + 1_089_994_752
        assert split.pools[0].peak_bytes[0] == engine.budget_bytes + receive + 386_547_057


def test_one_stage_parameter_count_and_largest_parameter_for_both_stacks():
    """The parameters a pipeline stage holds on one GPU are ``StageMemory.params``, read by the
    scoring role's whole-weights figure (model.rlhf.network) and verl's sync (model.rlhf.
    verl_sync) alike; the largest parameter lives in model.params, read by OpenRLHF's sync and
    verl's. By hand: a stage of 1,000 dense and 24 expert parameters holds 1,024."""
    from trainplan.model.rlhf import openrlhf, verl_sync
    from trainplan.model.terms.peak import StageMemory

    st = StageMemory(0, 1, Fraction(1_000), Fraction(24), None, None)  # type: ignore[arg-type]
    assert st.params == 1_024
    assert verl_sync.largest_parameter_bytes is largest_parameter_bytes
    assert openrlhf.largest_parameter_bytes is largest_parameter_bytes
