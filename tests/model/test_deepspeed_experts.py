"""Routed experts under ``deepspeed``: whole on every tp rank unless etp = tp
(:mod:`trainplan.model.expert_groups`).

Megatron-DeepSpeed (f4157bea) builds a MoE layer's expert MLPs with ``moe=True`` and slices them
over tp only under ``--enable-expert-tensor-parallelism`` (``megatron/core/tensor_parallel/
layers.py``, ``ColumnParallelLinear`` / ``RowParallelLinear.__init__``:
``is_expert_without_slicing``); DeepSpeed carves the expert-parallel and expert data-parallel
groups out of each tp rank's data-parallel group (``deepspeed/utils/groups.py``
``_get_expert_parallel_ranks``), so an expert's gradients and optimizer state are sharded over
dp·cp/ep ranks whether or not it is split over tp."""

from __future__ import annotations

import pytest

from trainplan.model.errors import LayoutError
from trainplan.model.expert_groups import expert_shard_degree_of, expert_tp_of
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case

H, KV, F_E, EXPERTS, VOCAB = 4096, 1024, 14336, 8, 32000
"""Mixtral 8x7B: hidden size, K/V width (8 heads × 128), expert FFN width, experts, vocabulary."""
STAGE_LAYERS = 16
"""Layers of pipeline stage 1 of 2 (32 layers)."""
EXPERT_PARAMS = STAGE_LAYERS * EXPERTS * 3 * H * F_E
"""Routed-expert parameters of stage 1: 16 layers × 8 experts × (gate, up, down) = 22.5 B."""
DENSE_PER_GPU = STAGE_LAYERS * (H * (2 * H + 2 * KV) + H * EXPERTS + 2 * H) + VOCAB * H + H
"""Stage 1's other parameters on one GPU at tp 1: attention, the router and the two norms per
layer, the output layer (32,000 rows, no padding under deepspeed) and the final norm:
802,820,096."""


def test_rule_per_framework():
    assert expert_tp_of(8, None, Framework.DEEPSPEED) == 1
    assert expert_tp_of(8, None, Framework.MEGATRON) == 8
    assert expert_tp_of(8, 8, Framework.DEEPSPEED) == 8
    assert expert_shard_degree_of(1, 16, 1, None, 8, Framework.DEEPSPEED) == 2
    assert expert_shard_degree_of(8, 2, 1, 1, 1, Framework.MEGATRON) == 16


def test_experts_bytes_mixtral_dp16_pp2_ep8():
    """Mixtral 8x7B on 32 GPUs, dp 16 × pp 2 × ep 8, deepspeed ZeRO-1, stage 1 (16 layers): one
    whole expert per GPU per layer, 16 · 3 · 4,096 · 14,336 = 2,818,572,288 parameters, its Adam
    state (12 B) sharded over the expert data-parallel group dp·cp/ep = 2; the dense parameters
    (802,820,096) over dp = 16:

    * weights and gradients 2 · (2,818,572,288 + 802,820,096) = 7,242,784,768 B each;
    * optimizer 12 · 2,818,572,288 / 2 + 12 · 802,820,096 / 16 = 17,513,548,800 B."""
    case = Case.of("mixtral-8x7b", "H100-SXM")
    assert EXPERT_PARAMS // EXPERTS == 2_818_572_288 and DENSE_PER_GPU == 802_820_096
    state = case.evaluate(Layout(dp=16, pp=2, ep=8, framework="deepspeed")).stages[1].state
    one_expert = EXPERT_PARAMS // EXPERTS
    assert state.weights_bytes == 2 * (one_expert + DENSE_PER_GPU) == 7_242_784_768
    assert state.gradients_bytes == state.weights_bytes
    assert state.optimizer_bytes == 12 * one_expert // 2 + 12 * DENSE_PER_GPU // 16
    assert state.optimizer_bytes == 17_513_548_800


def test_tp_refused_under_deepspeed_with_experts():
    """DeepSpeed's MOELayer drops the tokens duplicated over tp before the all-to-all and gathers
    them after (deepspeed/moe/sharded_moe.py); not counted, so tp > 1 is refused for a MoE model
    (a dense one keeps it)."""
    case = Case.of("mixtral-8x7b", "H100-SXM")
    for etp in (None, 8):
        lay = Layout(dp=2, tp=8, pp=2, etp=etp, framework="deepspeed")
        with pytest.raises(LayoutError, match="^tp: 8 under framework deepspeed with routed"):
            lay.validate(case.model, case.training, 32)
    dense = Case.of("llama3-8b", "H100-SXM")
    Layout(dp=4, tp=8, framework="deepspeed").validate(dense.model, dense.training, 32)


@pytest.mark.parametrize("etp", [2, 4])
def test_other_etp_refused_under_deepspeed(etp):
    case = Case.of("mixtral-8x7b", "H100-SXM")
    lay = Layout(dp=2, tp=8, pp=2, etp=etp, framework="deepspeed")
    with pytest.raises(
        LayoutError, match=rf"etp: {etp} under framework deepspeed must be 1 .* or tp = 8"
    ):
        lay.validate(case.model, case.training, 32)
    Layout(dp=2, tp=8, pp=2, etp=etp).validate(case.model, case.training, 32)  # megatron: legal
