"""The clock's routed rows follow the rule memory sizes them by (model.moe_rows.row_factors,
model.moe_rows.routed_rows): the busiest expert-parallel rank's experts compute ``imbalance``
times the mean at ep > 1, in whole rows, and at ep = 1 the rank computes its own ``k·T`` copies
whatever the imbalance (Megatron-LM d98e8a64dd ``token_dispatcher.py``
``MoEAlltoAllTokenDispatcher.preprocess``: ``output_splits``, the rows received, which
``experts.py`` ``TEGroupedMLP.forward`` runs); DeepSpeed's native MoE pads every buffer to
``E·C`` on both sides at any ep (DeepSpeed edaa72212 ``deepspeed/moe/sharded_moe.py``
``MOELayer.forward``, ``_sparse_encode``, ``topkgating``). Figures derived by hand here."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.activation_rows import mlp_rows
from trainplan.model.activations import ActivationContext
from trainplan.model.arch_parts import MoESpec
from trainplan.model.comm_layers import ep_bytes
from trainplan.model.moe_dispatch import all_to_all_sent
from trainplan.model.moe_kernels import NO_EXPERT_PASSES, ExpertPasses
from trainplan.model.moe_rows import row_factors
from trainplan.model.moe_run import DROPLESS, MoERun
from trainplan.model.moe_working_set import deepspeed_gate_rows, moe_forward_working_set
from trainplan.model.ops import LayerShape, layer_ops
from trainplan.model.specs import Architecture

ARCH = Architecture(
    num_layers=1, hidden_size=2880, num_attention_heads=64, ffn_hidden_size=2880,
    vocab_size=8, mlp="swiglu", moe=MoESpec(num_experts=32, experts_per_token=4, expert_ffn_hidden_size=2880),
)  # fmt: skip
"""gpt-oss's MoE dimensions: h 2,880, 32 experts, top-4, f_e 2,880 (SwiGLU)."""

S, K, H, E = 4096, 4, 2880, 32
IMB = MoERun(imbalance=Fraction(13, 10))
DEEPSPEED = ExpertPasses(deepspeed=True)


def _ops(run: MoERun, ep: int, passes: ExpertPasses = NO_EXPERT_PASSES) -> dict:
    x = LayerShape(ARCH, True, S, 1, 1, ep=ep, moe_run=run, expert_passes=passes)
    return {op.name: op for op in layer_ops(x)}


def test_ep1_computes_its_own_rows_whatever_the_imbalance():
    """One rank holds all 32 experts: its grouped GEMMs run all k·S = 16,384 rows, 512 an expert
    on average (16,384 · etp 1 · ep 1 / 32); the imbalance moves rows between its experts, not
    onto or off the rank. Every operation is the balanced one; no all-to-all runs."""
    assert _ops(IMB, 1) == _ops(DROPLESS, 1)
    assert _ops(IMB, 1)["experts up"].m == 16_384 / 32 == 512
    assert all_to_all_sent(IMB, S, E, K, 1, 1, 2 * H) == 0.0


def test_ep8_busiest_rank_computes_whole_rows():
    """ep 8: the busiest rank receives 1.3 × 16,384 = 21,299.2 rows, whole 21,300; its 4 local
    experts run 21,300 · 8 / 32 = 5,325 rows each on average (balanced 16,384 · 8 / 32 = 4,096:
    the timed expert GEMMs grow by 1.3 to whole rows). Permuting before the dispatch and
    un-permuting after the combine touch the rank's own 16,384 sent rows: 2 × 2 × β 2 × 16,384 ×
    2,880 = 377,487,360 bytes. The dispatch's bytes are the received rows' from the 7 other
    ranks: 21,300 × 5,760 × 7/8 = 107,352,000."""
    heavy, base = _ops(IMB, 8), _ops(DROPLESS, 8)
    assert heavy["experts up"].m == 5325 and base["experts up"].m == 4096
    perm = heavy["token permutation"]
    assert perm == base["token permutation"]
    assert perm.forward_bytes == 2 * 2 * 2 * 16_384 * 2880 == 377_487_360
    assert all_to_all_sent(IMB, S, E, K, 8, 8, 2 * H) == 21_300 * 5760 * 7 / 8 == 107_352_000


def test_deepspeed_pads_both_sides_at_every_ep():
    """DeepSpeed dropless: C = the busiest expert's count, ceil(1.3 × 16,384 / 32) = ceil(665.6)
    = 666, E·C = 21,312 rows on both sides, at ep 1 too: its 32 experts run 666 rows each and the
    encode and decode touch 21,312 rows (2 × 2 × 2 × 21,312 × 2,880 = 491,028,480 bytes).
    Capacity factor 1.5, not asked to pad: C = ceil(16,384/32 × 1.5) = 768, E·C = 24,576 = 1.5·k·S
    rows, padded all the same."""
    assert row_factors(IMB, Fraction(S), E, K, 1, padded=True) == (Fraction(21_312, 16_384),) * 2
    ops = _ops(IMB, 1, DEEPSPEED)
    assert ops["experts up"].m == 666
    assert ops["token permutation"].forward_bytes == 2 * 2 * 2 * 21_312 * 2880 == 491_028_480
    capped = MoERun(Fraction(3, 2))
    assert row_factors(capped, Fraction(S), E, K, 8, padded=True) == (Fraction(3, 2),) * 2
    assert row_factors(capped, Fraction(S), E, K, 8) == (1, 1)  # Megatron's dropping: no pad


def _ds_rows(run: MoERun, ep: int) -> dict[str, Fraction]:
    ctx = ActivationContext(
        seq_len=S, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
        flash_attention=True, ep=ep, moe_run=run, deepspeed_gate=True,
    )  # fmt: skip
    return {name: value for name, value, _ in mlp_rows(ARCH, 0, ctx)}


def test_deepspeed_slot_tensors_follow_capacity():
    """Capacity factor 1.5 under DeepSpeed (E·C = 24,576 rows, 6 a token): the encode's int64
    source index covers the E·C slots (8 × 24,576 = 196,608 B) and the decode's the [k, S] routes
    (8 × 16,384 = 131,072 B): 327,680 B, against 16·k·S = 262,144 B balanced. The experts' inputs
    are E·C rows (β·24,576·h = 141,557,760 B); the combine's saved ``routed`` is the k·S routes
    gathered back (β·16,384·h = 94,371,840 B), unpadded."""
    rows = _ds_rows(MoERun(Fraction(3, 2)), 8)
    assert rows["route slot indices (int64, encode and decode)"] == 327_680
    assert rows["routed expert inputs (top-k copies)"] == 2 * 24_576 * H == 141_557_760
    assert rows["routed expert outputs for the combine"] == 2 * 16_384 * H == 94_371_840
    base = {n: v for n, v, _ in deepspeed_gate_rows(ARCH, Fraction(S), 2)}
    assert base["route slot indices (int64, encode and decode)"] == 16 * K * S == 262_144


def test_deepspeed_forward_working_set_pads_only_the_slot_buffers():
    """DeepSpeed's working set at ``_sparse_decode`` with E·C = 1.5·k·S: the norm output
    β·S·h = 23,592,960, ``expert_output`` and ``padded_output`` 2 × β·E·C·h = 283,115,520, the
    FP32 ``routed * gates`` over the k·S routes 4·k·S·h = 188,743,680 and its FP32 sum
    4·S·h = 47,185,920: 542,638,080 bytes."""
    got = moe_forward_working_set(
        ARCH, "deepspeed", Fraction(S), 2, 8, 1, False, False,
        rows=(Fraction(3, 2), Fraction(3, 2)),
    )  # fmt: skip
    want = 2 * S * H + 2 * 2 * 24_576 * H + 4 * 16_384 * H + 4 * S * H
    assert want == 23_592_960 + 283_115_520 + 188_743_680 + 47_185_920 == 542_638_080
    assert got == want


def test_deepspeed_traffic_sends_every_slot():
    """The traffic table's all-to-all bytes per step at ep 8, one MoE layer, one micro-batch,
    capacity factor 1.5 not padded: Megatron-Core drops to min(k·S, E·C) = min(16,384, 24,576) =
    16,384 rows a rank sends; DeepSpeed sends its whole [E, C, h] buffer, E·C = 24,576 rows. Each
    of the forward's and the backward's dispatch and combine moves 7/8 of them at β·h = 5,760
    bytes a row: 24,576 × 7/8 × 4 × 5,760 = 495,452,160 bytes against 330,301,440."""
    args = (ARCH, 1, 8, 1, 1, 1, 1, S, 2, False, False, MoERun(Fraction(3, 2)))
    assert ep_bytes(*args) == 16_384 * 7 // 8 * 4 * 5760 == 330_301_440
    assert ep_bytes(*args, padded=True) == 24_576 * 7 // 8 * 4 * 5760 == 495_452_160
