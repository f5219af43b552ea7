"""Expert capacity as the frameworks compute it, and the traffic table's expert row at the rows
the clock times. Figures derived by hand here, from the frameworks' code:

* Megatron-Core's ``get_capacity`` (Megatron-LM d98e8a64dd
  ``megatron/core/transformer/moe/moe_utils.py``): ``math.ceil((num_tokens / num_experts) *
  capacity_factor)`` in float64, ``num_tokens = T·k``, no ``min_capacity`` at its MoE call sites;
* DeepSpeed's ``_capacity`` (DeepSpeed edaa72212 ``deepspeed/moe/sharded_moe.py``):
  ``ceil((T / E) * torch.tensor(cf·k))`` in float32, raised to ``min_capacity`` (4 for a
  ``deepspeed.moe.layer.MoE``); dropless, ``topkgating`` takes the group's largest expert count
  (``all_reduce(MAX)``) with no ``min_capacity``;
* the traffic table's ep row (:func:`model.comm_layers.ep_bytes`) counts the busiest rank's rows,
  as the layer clock's :func:`model.moe_dispatch.all_to_all_sent` does.
"""

from __future__ import annotations

import struct
from fractions import Fraction

import numpy as np

from trainplan.model.arch_parts import MoESpec
from trainplan.model.comm_layers import ep_bytes, ep_traffic
from trainplan.model.layout import Layout
from trainplan.model.moe import capacity_rows, expert_capacity
from trainplan.model.moe_dispatch import all_to_all_sent
from trainplan.model.moe_rows import (
    DEEPSPEED_MIN_CAPACITY,
    deepspeed_capacity,
    deepspeed_slots,
    mean_rows_sent,
    rank_rows,
    row_factors,
)
from trainplan.model.moe_run import MoERun
from trainplan.model.specs import Architecture, TrainingSpec


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def test_megatron_capacity_takes_the_float_products_ceiling():
    """T = 1,000 tokens, k = 1, E = 10, cf = 1.1: get_capacity computes (1000 / 10) * 1.1 =
    110.00000000000001 in float64 and math.ceil gives 111, one more than the exact 110. Padded,
    a rank sends E·C = 1,110 rows; the array path (the search's tables) gets the same."""
    assert (1000 / 10) * 1.1 == 110.00000000000001
    assert expert_capacity(1000, 10, 1, Fraction(11, 10)) == 111
    assert capacity_rows(1000, 10, Fraction(11, 10)) == 111
    run = MoERun(Fraction(11, 10), pad_to_capacity=True)
    assert mean_rows_sent(run, 1000, 10, 1) == 1110
    assert rank_rows(run, 1000, 10, 1) == Fraction(1110)
    assert mean_rows_sent(run, np.array([1000.0]), 10, 1).tolist() == [1110.0]
    # a whole product stays whole: 4,096·8/256 × 1.5 = 192.0 exactly
    assert capacity_rows(4096 * 8, 256, Fraction(3, 2)) == 192


def test_deepspeed_capacity_in_float32_and_min_capacity():
    """DeepSpeed's _capacity for the same T = 1,000, E = 10, cf·k = 1.1: float32(1.1) =
    1.10000002384…, 100 × that = 110.0000023…, which float32 (spacing 2⁻¹⁷·… ≈ 7.6e-6 near 110)
    rounds to 110.0: C = 110, one fewer than Megatron-Core's 111 for the same inputs.

    T = 64, E = 64, k = 2, cf = 1: ceil(1 × 2) = 2 < min_capacity 4, so C = 4 and the buffers hold
    E·C = 256 rows, twice the 128 routed copies."""
    assert _f32(_f32(1000 / 10) * _f32(1.1)) == 110.0
    assert deepspeed_capacity(MoERun(Fraction(11, 10)), 1000, 10, 1) == 110
    assert DEEPSPEED_MIN_CAPACITY == 4
    small = MoERun(Fraction(1))
    assert deepspeed_capacity(small, 64, 64, 2) == 4
    assert deepspeed_slots(small, Fraction(64), 64, 2) == 256
    assert row_factors(small, Fraction(64), 64, 2, 8, padded=True) == (Fraction(2), Fraction(2))
    # the array path: the same C per element
    assert deepspeed_capacity(small, np.array([64.0, 4096.0]), 64, 2).tolist() == [4.0, 128.0]


def test_deepspeed_dropless_capacity_has_no_minimum_and_at_most_t():
    """Dropless (drop_tokens=False) topkgating sets C to the group's largest expert count, no
    min_capacity: T = 64, E = 64, k = 2 balanced, C = ceil(128/64) = 2, 128 slots (not 4·64).
    An expert takes a token once, so C ≤ T: imbalance 5, T = 100, E = 8, k = 2 gives
    ceil(5·200/8) = 125, held to 100, E·C = 800 rows."""
    assert deepspeed_capacity(MoERun(), 64, 64, 2) == 2
    assert deepspeed_slots(MoERun(), Fraction(64), 64, 2) == 128
    assert deepspeed_capacity(MoERun(imbalance=Fraction(5)), 100, 8, 2) == 100
    assert deepspeed_slots(MoERun(imbalance=Fraction(5)), Fraction(100), 8, 2) == 800
    # the busiest rank's figure bounds the busiest (source, expert) count from below:
    # imbalance 1.5, T = 4,096, k = 8, E = 256: 1.5 × 32,768 / 256 = 192 a pair at least
    assert deepspeed_capacity(MoERun(imbalance=Fraction(3, 2)), 4096, 256, 8) == 192


ARCH = Architecture(
    num_layers=1, hidden_size=8, num_attention_heads=2, ffn_hidden_size=32, vocab_size=16,
    moe=MoESpec(num_experts=4, experts_per_token=2, expert_ffn_hidden_size=16),
)  # fmt: skip


def test_traffic_table_ep_row_counts_the_busiest_ranks_rows():
    """h 8, E 4, k 2, seq 4, micro-batch 1, dp 2 × ep 2, global batch 2 (m = 1), BF16:
    T = 4 tokens, k·T = 8 rows. Balanced: each of the 4 transfers (forward dispatch and combine,
    backward the two) moves 8 × 1/2 rows of 16 bytes = 64 bytes, 256 a step. At imbalance 1.5
    the busiest rank receives ceil(1.5 × 8) = 12 rows in each dispatch and sends them back in
    each combine: 12 × 1/2 × 16 = 96 bytes a transfer — the clock's all_to_all_sent — 384 a
    step, and the table names it."""
    layout = Layout(dp=2, ep=2)
    balanced = ep_traffic(ARCH, 1, layout, TrainingSpec(seq_len=4, global_batch_size=2))
    assert balanced.bytes_per_step == 256
    assert balanced.collective == "all-to-all (dispatch + combine)"
    run = MoERun(imbalance=Fraction(3, 2))
    training = TrainingSpec(seq_len=4, global_batch_size=2, moe_run=run)
    busiest = ep_traffic(ARCH, 1, layout, training)
    assert all_to_all_sent(run, 4, 4, 2, 2, 2, 16) == 96.0
    assert busiest.bytes_per_step == 4 * 96 == 384
    assert busiest.collective == "all-to-all (dispatch + combine), the busiest rank's rows"
    # the array path of the same rule
    rows = ep_bytes(ARCH, 1, np.array([2]), 1, 1, 1, 1, 4, 2, False, False, run)
    assert rows.tolist() == [384.0]


def test_imbalance_rows_round_alike_in_the_tables_and_the_evaluator():
    """T = 3,000 tokens, k = 2, E = 8 at imbalance 1.1: the busiest rank receives
    ceil(1.1 × 6,000) = 6,600 rows exactly, but 6,000 × 1.1 is 6,600.000000000001 in float64,
    whose ceiling is 6,601. The search's tables (arrays) and the evaluator (exact scalars) must
    round the same: 6,600 both. DeepSpeed's dropless C = min(T, ceil(1.1 × 6,000 / 8)) =
    min(3,000, 825) = 825 both (825.0000000000001 in float64, 826 rounded up)."""
    assert 6000 * 1.1 == 6600.000000000001
    run = MoERun(imbalance=Fraction(11, 10))
    assert rank_rows(run, 3000, 8, 2) == 6600
    assert rank_rows(run, np.array([3000.0]), 8, 2).tolist() == [6600.0]
    assert deepspeed_capacity(run, 3000, 8, 2) == 825
    assert deepspeed_capacity(run, np.array([3000.0]), 8, 2).tolist() == [825.0]
    # balanced routing keeps array arithmetic: T = 2,048.5 (a fractional share), T·k = 4,097
    assert rank_rows(MoERun(), np.array([2048.5]), 8, 2).tolist() == [4097.0]


def _te_row_ids(routing_map: list[list[int]]) -> dict[tuple[int, int], int]:
    """Transformer Engine's destination row of each routed (token, expert) pair, written out from
    d0067d0da ``transformer_engine/common/triton/permutation.py``: ``_row_id_map_pass_1_kernel``
    takes the cumulative sum down each expert's column of the ``[T, E]`` map, and
    ``_row_id_map_pass_2_kernel`` adds the non-zeros of every earlier (expert, token block):
    the pair's rank among the map's non-zeros in expert-major order."""
    rows, n = {}, 0
    for e in range(len(routing_map[0])):
        for t, row in enumerate(routing_map):
            if row[e]:
                rows[(t, e)] = n
                n += 1
    return rows


def test_padded_capacity_above_t_misplaces_rows_under_the_fused_permute():
    """Padded to C > T, Megatron-Core's router keeps every token for every expert (an all-ones
    map: ``apply_router_token_dropping``), and the all-to-all dispatcher asks for
    ``num_out_tokens = C·E`` rows it reads as E blocks of C (``token_dispatch``, ``view(…,
    capacity, …)``). Transformer Engine's fused permute (``moe_permute_fusion``) writes the pairs
    compactly: at T = 4, E = 3, C = 6, expert 1's first row lands on row 4 (= 1·T) inside
    expert 0's block [0, 6), not on row 6 (= 1·C); rows E·T = 12 to C·E = 18 are never written
    (``torch.empty``). At C ≤ T each column holds exactly C non-zeros and the rows fill the
    blocks exactly. The planner refuses C > T padded under either path (the unfused one raises
    in ``permute``'s ``view(num_experts, capacity)``), and its line says both."""
    T, E, C = 4, 3, 6
    rows = _te_row_ids([[1] * E for _ in range(T)])
    assert rows[(0, 1)] == 1 * T == 4 and rows[(0, 1)] // C == 0  # in expert 0's block
    assert max(rows.values()) + 1 == E * T == 12 < C * E == 18  # 6 rows never written
    capped = [[1, 1, 0], [1, 0, 1], [0, 1, 1]]  # C = 2: two per column
    assert {
        e: sorted(r for (_, x), r in _te_row_ids(capped).items() if x == e) for e in range(3)
    } == {
        0: [0, 1],
        1: [2, 3],
        2: [4, 5],  # expert e's rows fill [e·C, e·C + C)
    }
    from trainplan.model.moe_rules import capacity_violation

    # gpt-oss dimensions: T 4,096, E 32, k 4, cf 9 → C = ceil(4,096·4/32 · 9) = 4,608 > T
    line = capacity_violation(
        MoERun(Fraction(9), pad_to_capacity=True), "megatron", 4096, 32, 4, 2880
    )
    assert line is not None and "C = 4,608 rows" in line
    assert "unfused it raises" in line and "moe_permute_with_probs" in line
