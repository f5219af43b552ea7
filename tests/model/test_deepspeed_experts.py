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
DENSE_PER_GPU = (
    STAGE_LAYERS * (H * (2 * H + 2 * KV) // 8 + H * EXPERTS + 2 * H) + VOCAB * H // 8 + H
)
"""Stage 1's other parameters on one GPU at tp 8: attention ÷ tp, the router and the two norms
whole on every tp rank, the output layer ÷ tp (32,000 rows, no padding under deepspeed) and the
final norm: 100,929,536."""


def test_rule_per_framework():
    assert expert_tp_of(8, None, Framework.DEEPSPEED) == 1
    assert expert_tp_of(8, None, Framework.MEGATRON) == 8
    assert expert_tp_of(8, 8, Framework.DEEPSPEED) == 8
    # DeepSpeed's expert data-parallel group: dp·cp/ep whatever etp is; Megatron-Core's tp·dp·cp/(etp·ep)
    assert expert_shard_degree_of(8, 2, 1, None, 1, Framework.DEEPSPEED) == 2
    assert expert_shard_degree_of(8, 2, 1, 8, 1, Framework.DEEPSPEED) == 2
    assert expert_shard_degree_of(8, 4, 1, None, 2, Framework.DEEPSPEED) == 2
    assert expert_shard_degree_of(8, 2, 1, 1, 1, Framework.MEGATRON) == 16


def test_replicated_experts_bytes_mixtral_tp8_pp2_dp2():
    """Mixtral 8x7B on 32 GPUs, dp 2 × tp 8 × pp 2, deepspeed ZeRO-1, stage 1 (16 layers).
    Experts whole on every tp rank (the default): 22,548,578,304 expert parameters, 2 B each
    for the weights and the gradients, Adam's 12 B ÷ D_e = dp = 2; the dense parameters
    (100,929,536 per GPU) ÷ D = 2 likewise:

    * weights 2 · (22,548,578,304 + 100,929,536) = 45,299,015,680 B;
    * optimizer 12 · (22,548,578,304 + 100,929,536) / 2 = 135,897,047,040 B.

    With ``--enable-expert-tensor-parallelism`` (etp 8) the experts are ÷ 8:
    2 · (2,818,572,288 + 100,929,536) = 5,839,003,648 B and 6 · (…) = 17,517,010,944 B."""
    case = Case.of("mixtral-8x7b", "H100-SXM")
    assert EXPERT_PARAMS == 22_548_578_304 and DENSE_PER_GPU == 100_929_536
    whole = case.evaluate(Layout(dp=2, tp=8, pp=2, framework="deepspeed")).stages[1].state
    split = case.evaluate(Layout(dp=2, tp=8, pp=2, etp=8, framework="deepspeed")).stages[1].state
    assert whole.weights_bytes == 2 * (EXPERT_PARAMS + DENSE_PER_GPU) == 45_299_015_680
    assert whole.optimizer_bytes == 12 * (EXPERT_PARAMS + DENSE_PER_GPU) // 2 == 135_897_047_040
    assert split.weights_bytes == 2 * (EXPERT_PARAMS // 8 + DENSE_PER_GPU) == 5_839_003_648
    assert split.optimizer_bytes == 12 * (EXPERT_PARAMS // 8 + DENSE_PER_GPU) // 2


@pytest.mark.parametrize("etp", [2, 4])
def test_other_etp_refused_under_deepspeed(etp):
    case = Case.of("mixtral-8x7b", "H100-SXM")
    lay = Layout(dp=2, tp=8, pp=2, etp=etp, framework="deepspeed")
    with pytest.raises(
        LayoutError, match=rf"etp: {etp} under framework deepspeed must be 1 .* or tp = 8"
    ):
        lay.validate(case.model, case.training, 32)
    Layout(dp=2, tp=8, pp=2, etp=etp).validate(case.model, case.training, 32)  # megatron: legal
