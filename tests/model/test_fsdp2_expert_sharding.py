"""Routed experts under ``fsdp2`` at ep > 1: whole on every tp rank, FSDP-sharded over
torchtitan's "efsdp" (dp·cp·tp/ep ranks), the ep groups consecutive ranks
(:func:`trainplan.model.expert_groups.expert_tp_of`).

torchtitan b5bcd76c6: ``distributed/parallel_dims.py`` ``build_mesh`` unflattens the world into
the sparse mesh ``("pp", "dp_replicate", "efsdp", "ep")`` with ``efsdp = dp_shard·cp·tp/ep``
(no tp dimension; ``_validate``: ep must divide dp_shard·cp·tp); ``models/common/
moe_sharding.py`` ``expert_param_placement_sparse`` places the routed experts ``Shard(0)`` on
"ep" and replicated on "efsdp" (FSDP shards them there); only at ep = 1
(``expert_param_placement_dense``) are they TP-sharded colwise/rowwise. The config has no
expert tensor-parallel degree (``config/configs.py``: only ``expert_parallel_degree``).
Before this rule the model took fsdp2's experts as split over tp (etp = tp) at any ep."""

from __future__ import annotations

import pytest

from trainplan.model.errors import LayoutError
from trainplan.model.expert_groups import (
    expert_placement_tp_of,
    expert_shard_degree_of,
    expert_tp_of,
)
from trainplan.model.frameworks import Framework
from trainplan.model.layout import Layout
from trainplan.optimizer.case import Case
from trainplan.topology.placement import axis_groups

H, F_E, STAGE_LAYERS = 4096, 14336, 16
"""Mixtral 8x7B: hidden size, expert FFN width; layers of pipeline stage 1 of 2."""
EXPERT = STAGE_LAYERS * 3 * H * F_E
"""One routed expert's parameters over stage 1's 16 layers (gate, up, down): 2,818,572,288."""


def test_rule():
    """ep 1: split over tp (etp = tp); ep > 1: whole (etp 1), sharded over tp·dp·cp/ep."""
    assert expert_tp_of(2, None, Framework.FSDP2, 1) == 2
    assert expert_tp_of(2, None, Framework.FSDP2, 4) == 1
    assert expert_tp_of(2, None, Framework.MEGATRON, 4) == 2  # Megatron-Core: etp = tp
    assert expert_shard_degree_of(2, 8, 1, None, 4, Framework.FSDP2) == 2 * 8 // 4 == 4
    assert expert_shard_degree_of(2, 8, 1, None, 1, Framework.FSDP2) == 8
    assert expert_placement_tp_of(2, None, Framework.FSDP2, 4) == 1


def test_mixtral_weights_and_gradients_whole_over_tp():
    """Mixtral 8x7B on 32 GPUs, dp 8 × tp 2 × pp 2, fsdp2 ZeRO-2 (reshard_after_forward=False:
    BF16 weights unsharded through the step, FP32 gradients accumulated unsharded), stage 1.
    ep 2: 8/2 = 4 whole experts per GPU; ep 4: 2. Everything else is the same on both (the
    dense part at tp 2; the FP32 sharded state, 4·8·EXPERT/(tp·dp) on both: ep·efsdp =
    tp·dp·cp = 16 ranks share the 8 experts either way), so

    * weights: 2 B × (4 − 2) × 2,818,572,288 = 11,274,289,152 B apart;
    * gradients: 4 B × (4 − 2) × 2,818,572,288 = 22,548,578,304 B apart;
    * optimizer states: equal (12 B × 8 · EXPERT / 16 either way).

    Taken as split over tp (the rule before), the experts were half that: 5,637,144,576 B of
    weights apart."""
    case = Case.of("mixtral-8x7b", "H100-SXM")
    state = {}
    for ep in (2, 4):
        lay = Layout.of(framework="fsdp2", dp=8, tp=2, pp=2, ep=ep, zero_stage=2)
        assert lay.expert_tp == 1 and lay.expert_shard_degree == 16 // ep
        state[ep] = case.evaluate(lay).stages[1].state
    assert EXPERT == 2_818_572_288
    weights = state[2].weights_bytes - state[4].weights_bytes
    assert weights == 2 * (4 - 2) * EXPERT == 11_274_289_152
    grads = state[2].gradients_bytes - state[4].gradients_bytes
    assert grads == 4 * (4 - 2) * EXPERT == 22_548_578_304
    assert state[2].optimizer_bytes == state[4].optimizer_bytes


def test_ep_groups_consecutive_ranks():
    """The sparse mesh's "ep" is its innermost dimension over torchtitan's world order (pp,
    dp_replicate, dp_shard, cp, tp): at tp 2 × dp 8, ep 4, ranks {0, 1, 2, 3}, …; "efsdp"
    strides them by ep, tp·dp/ep = 4 ranks: {0, 4, 8, 12}, {1, 5, 9, 13}, …"""
    lay = Layout.of(framework="fsdp2", dp=8, tp=2, ep=4)
    degrees = {"tp": 2, "dp": 8, "ep": 4, "etp": lay.expert_tp}
    assert axis_groups(degrees, "ep")[:2] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert axis_groups(degrees, "edp")[:2] == [[0, 4, 8, 12], [1, 5, 9, 13]]


def test_etp_refused_under_fsdp2():
    case = Case.of("mixtral-8x7b", "H100-SXM")
    lay = Layout.of(framework="fsdp2", dp=8, tp=2, pp=2, ep=4, etp=2)
    with pytest.raises(LayoutError, match=r"^etp: 2 under framework fsdp2 is not modelled"):
        lay.validate(case.model, case.training, 32)
