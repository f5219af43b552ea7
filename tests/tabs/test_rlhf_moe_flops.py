"""``trainplan rlhf --model`` of a mixture of experts: the textbook section's FLOPs count the
active parameters (those a token passes through), as the faithful section's do, while its bytes
count every parameter. Found by a new user: Qwen3-30B-A3B's textbook rollout was 5.122e18 FLOPs
(2 × 30.53 B per token) beside the faithful 5.625e17 (2 × 3.35 B)."""

from __future__ import annotations

import json
from fractions import Fraction

from tests.cli_runs import run_many
from trainplan.model.rlhf import shares as rl
from trainplan.model.rlhf.phases import phase_flops, step_roles

# Qwen3-30B-A3B by hand from its config.json (scenarios/models/qwen3-30b-a3b.toml): 48 layers,
# hidden 2048, 32 query heads and 4 KV heads of 128, QK-norm, 128 SwiGLU experts of 768, top-8,
# bias-free router, untied embeddings of V = 151,936, a final RMSNorm.
L, H, V = 48, 2048, 151_936
ATTN = H * 32 * 128 + 2 * H * 4 * 128 + 32 * 128 * H + 2 * 128  # q, k, v, o, q/k norms
LAYER = ATTN + 2 * H + H * 128  # + two RMSNorms + the router
ACTIVE = 2 * V * H + L * (LAYER + 8 * 3 * H * 768) + H  # 8 of the 128 experts
TOTAL = 2 * V * H + L * (LAYER + 128 * 3 * H * 768) + H
TOKENS = 1024 * 16 * (1024 + 4096)  # the tab's defaults: 1,024 prompts × 16 of 1,024 + 4,096


def test_hand_counts():
    assert (ACTIVE, TOTAL) == (3_353_032_704, 30_532_122_624)  # the catalogue file's counts


def test_networks_flops_on_active_bytes_on_total():
    nets = rl.networks("grpo", TOTAL, reward="rule", policy_active=ACTIVE)
    assert [(n.role, n.flop_params) for n in nets] == [("actor", ACTIVE), ("reference", ACTIVE)]
    assert rl.network_bytes(nets) == 18 * TOTAL  # 16 B trained + 2 B frozen, every parameter
    assert rl.active_params(nets) == {"policy": ACTIVE}
    flops = phase_flops(step_roles("grpo", "rule"), rl.active_params(nets), 16 * 1024, 5120)
    # rollout 2N, scoring 2N + 2N (the reference and the actor's old log-probs), training 6N per
    # token, N = the active parameters: 2 · 3,353,032,704 · 83,886,080 = 5.625e17 each scorer
    assert flops == {"rollout": {"rollout": 2 * ACTIVE * TOKENS},
                     "scoring": {"actor": 2 * ACTIVE * TOKENS, "reference": 2 * ACTIVE * TOKENS},
                     "training": {"actor": 6 * ACTIVE * TOKENS}}  # fmt: skip
    dense = rl.networks("grpo", TOTAL, reward="rule")  # no active count: dense, all of them
    assert dense[0].flop_params == TOTAL


def test_reward_network_active_count():
    """PPO with a MoE policy and a dense reward model of its own size: the critic and reward
    model keep their own count (``reward_active`` None: dense); with no reward size they are
    the policy's network and take its active count."""
    nets = rl.networks("ppo", TOTAL, 8 * 10**9, policy_active=ACTIVE)
    assert rl.active_params(nets) == {"policy": ACTIVE, "reward": 8 * 10**9}
    assert {n.role: n.flop_params for n in nets} == {
        "actor": ACTIVE,
        "critic": 8 * 10**9,
        "reward": 8 * 10**9,
        "reference": ACTIVE,
    }
    same = rl.networks("ppo", TOTAL, policy_active=ACTIVE)
    assert {n.flop_params for n in same} == {Fraction(ACTIVE)}


def test_refuses_more_active_than_total():
    import pytest

    from trainplan.model.errors import InputError

    with pytest.raises(InputError, match="policy_active: 31 is more than the network's 30"):
        rl.networks("grpo", 30, reward="rule", policy_active=31)


def test_cli_textbook_and_faithful_flops_agree():
    args = ["rlhf", "--algorithm", "grpo", "--model", "qwen3-30b-a3b", "--reward", "rule"]
    done = run_many({"text": [*args, "--gpus", "32"], "json": [*args, "--gpus", "32", "--json"]})
    for d in done.values():
        assert d.returncode == 0, d.stderr[-2000:]
    r = json.loads(done["json"].stdout)
    assert r["phase_flops"]["rollout"] == 2 * ACTIVE * TOKENS  # 5.625e17, was 2 · TOTAL: 5.122e18
    assert r["phase_flops"]["training"] == 6 * ACTIVE * TOKENS
    # the two accountings count the same FLOPs in every phase (the textbook's scoring was the
    # reference's alone, 5.625e17, against the faithful 1.125e18 with the actor's old log-probs)
    assert r["phase_flops"] == r["faithful"]["phase_flops_total"]
    assert r["phase_flops"]["scoring"] == 4 * ACTIVE * TOKENS  # 1.125e18
    assert r["network_bytes"] == 18 * TOTAL  # bytes stay on every parameter
    assert [x["active_params"] for x in r["network_table"]] == [ACTIVE, ACTIVE]
    text = done["text"].stdout
    assert f"  rollout   {2 * ACTIVE * TOKENS:10.3e}" in text  # 5.625e+17 in the textbook table
    assert "  rollout    5.625e+17" in text
    # counts whole, as evaluate writes them (3,353,032,704: was "3.35303B")
    moe = "FLOPs count the active parameters (mixture of experts): "
    assert f"{moe}actor {ACTIVE:,} of {TOTAL:,}, reference {ACTIVE:,} of {TOTAL:,}" in text
    # a dense model says nothing of it
    dense = run_many({"d": ["rlhf", "--algorithm", "grpo", "--policy-params", "8B"]})["d"]
    assert dense.returncode == 0 and "active parameters" not in dense.stdout
