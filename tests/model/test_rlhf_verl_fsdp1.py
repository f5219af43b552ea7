"""verl's FSDP1 root unit under ``rlhf --framework fsdp2`` (:mod:`model.rlhf.verl_fsdp1`), held to
hand-derived bytes on Qwen2.5 7B at dp 64.

The rule, from the code: verl b178a3cd5 defaults every role to ``strategy: fsdp`` (FSDP1;
``_generated_ppo_trainer.yaml``: the actor's, the critic's and the reward model's, the reference
following the actor), wraps the decoder layers only (``get_fsdp_wrap_policy``), so the embedding,
the final norm and the output layer are the root unit. PyTorch 2.13's ``_post_forward_reshard``
keeps the root gathered after forward (``not state._is_root``) until backward ends, and the output
layer's BF16 gradient waits for the embedding's (``split_with_sizes`` backward of the flat
parameter). At a layer's backward: ``2·R + 2·O + 2·2·L + 6·L`` bytes; in a forward ``2·R +
2·L``. evaluate()'s FSDP2 units count ``2·2·U`` gathered and ``6·U`` of gradients, U the largest
unit (the embedding)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model.hardware import ClusterLinks
from trainplan.model.rlhf import network
from trainplan.model.rlhf.roles import RoleOption
from trainplan.model.rlhf.spec import RLHFSpec, Role
from trainplan.model.rlhf.verl_fsdp1 import root_unit_bytes, root_unit_extra
from trainplan.optimizer.case import Case
from trainplan.optimizer.rlhf.tables import RLHFProblem, cost_of
from trainplan.scenarios.catalogue import get_model
from trainplan.topology.accelerators import get_accelerator

QWEN = get_model("qwen2.5-7b").model  # h 3,584, V 152,064, f 18,944, a 28, g 4, d 128
H100 = get_accelerator("H100-SXM")

EMBEDDING = 152_064 * 3_584  # 544,997,376; the output layer the same (untied)
ROOT = 2 * EMBEDDING + 3_584  # with the final norm: 1,089,998,336
LAYER = (
    3_584 * 3_584 + 3_584  # q with its bias
    + 2 * (3_584 * 512 + 512)  # k, v (4 heads × 128) with biases
    + 3_584 * 3_584  # o
    + 3 * 3_584 * 18_944  # gate, up, down
    + 2 * 3_584  # two RMSNorms
)  # fmt: skip


def test_qwen_7b_root_unit_by_hand():
    assert (EMBEDDING, ROOT, LAYER) == (544_997_376, 1_089_998_336, 233_057_792)
    est = Case.of(model="qwen2.5-7b", num_gpus=64, dp=64, framework="fsdp2", zero_stage=3,
                  global_batch_size=64, seq_len=4096).evaluate()  # fmt: skip
    backward = 2 * ROOT + 2 * EMBEDDING + 2 * 2 * LAYER + 6 * LAYER
    forward = 2 * ROOT + 2 * LAYER
    assert (root_unit_bytes(est, True), root_unit_bytes(est, False)) == (backward, forward)
    assert (backward, forward) == (5_600_569_344, 2_646_112_256)
    # FSDP2's units: two gathered embeddings and one embedding's BF16 + FP32 gradients
    state = est.stages[0].state
    assert state.gathered_bytes == 2 * 2 * EMBEDDING == 2_179_989_504
    assert state.buffers_bytes == 6 * EMBEDDING == 3_269_984_256
    assert root_unit_extra(est, True) == backward - 5_449_973_760 == 150_595_584
    assert root_unit_extra(est, False) == forward - 2_179_989_504 == 466_122_752


def test_nothing_where_unsharded_or_under_another_profile():
    one = Case.of(model="qwen2.5-7b", num_gpus=1, dp=1, framework="fsdp2", zero_stage=3,
                  global_batch_size=1, seq_len=4096).evaluate()  # fmt: skip
    assert root_unit_bytes(one, True) == 0 == root_unit_extra(one, True)
    meg = Case.of(model="qwen2.5-7b", num_gpus=64, dp=64, framework="megatron", zero_stage=1,
                  global_batch_size=64, seq_len=4096).evaluate()  # fmt: skip
    assert root_unit_extra(meg, True) == 0 == root_unit_extra(meg, False)


@pytest.mark.parametrize("role", [Role.ACTOR, Role.REFERENCE])
def test_the_roles_count_it_in_their_phases(role, monkeypatch):
    """GRPO's actor at dp 64: its update peak gains 150,595,584 B and its old-log-prob forward
    466,122,752 B; the reference's forward the same 466,122,752 B (FSDP1 too: it follows the
    actor's strategy). Against the same cost with the root unit left out."""
    spec = RLHFSpec(algorithm="grpo", policy=QWEN, reward="rule", prompts=64,
                    samples_per_prompt=16, prompt_tokens=1024, completion_tokens=3072,
                    framework="fsdp2")  # fmt: skip
    problem = RLHFProblem(spec, H100, 8, ClusterLinks.from_device(H100))
    option = RoleOption(role, 64, 64, 1, 1)
    counted = cost_of(problem, option)
    monkeypatch.setattr(network, "root_unit_extra", lambda est, backward: Fraction(0))
    without = cost_of(problem, option)
    assert counted.scoring_bytes - without.scoring_bytes == 466_122_752
    update = 150_595_584 if role is Role.ACTOR else 0
    assert counted.training_bytes - without.training_bytes == update
    names = {t.name: t.value for t in counted.terms if "FSDP1 root unit" in t.name}
    expected = {"FSDP1 root unit gathered in the forward (verl), beyond FSDP2's units": 466_122_752}
    if update:
        expected["FSDP1 root unit gathered through backward (verl), beyond FSDP2's units"] = update
    assert names == expected
