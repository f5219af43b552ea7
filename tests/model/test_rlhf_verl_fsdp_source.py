"""`rlhf --framework fsdp2` is verl's FSDP workers, whose default is FSDP1.

verl b178a3cd5 ``trainer/config/_generated_ppo_trainer.yaml``: ``actor.strategy: fsdp``;
``verl/workers/fsdp_workers.py`` ``_build_model_optimizer`` wraps the HF model in FSDP1's
``FullyShardedDataParallel`` for ``fsdp`` (flat parameters, ``use_orig_params`` False,
``FULL_SHARD`` while ``reshard_after_forward`` is True, ``MixedPrecision(param_dtype=bf16,
reduce_dtype=fp32)``) and in ``fully_shard`` for ``fsdp2``. The bytes counted are FSDP2's per
parameter, the same under both: FP32 sharded master 4/D + FP32 sharded gradients 4/D + Adam
moments 8/D = 16/D, no whole weights at ZeRO-3, two bf16 gathers and an FP32 reduce-scatter per
micro-batch. Only the cited source changes: the state terms name verl, not torchtitan.
"""

from __future__ import annotations

from trainplan.model.mechanisms import mechanism
from trainplan.model.rlhf.roles import VERL_FSDP_SOURCE, rlhf_mechanism


def test_fsdp2_state_terms_cite_verl_fsdp1():
    verl, plain = rlhf_mechanism("fsdp2", 3), mechanism("fsdp2", 3)
    assert verl.source == VERL_FSDP_SOURCE and "FSDP1" in verl.source
    assert "torchtitan" in plain.source and "torchtitan" not in verl.source
    held = (verl.weights_sharded, verl.grads_sharded, verl.optimizer_sharded, verl.weights_full)
    assert held == (4, 4, 8, 0)  # 16/D, nothing whole
    assert verl.traffic_terms() == plain.traffic_terms() == (0, 2 + 2 + 4)


def test_other_profiles_keep_their_source():
    assert rlhf_mechanism("megatron", 1) == mechanism("megatron", 1)
    assert rlhf_mechanism("deepspeed", 3) == mechanism("deepspeed", 3)
