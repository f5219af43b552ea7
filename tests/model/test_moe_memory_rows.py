"""The busiest expert-parallel rank's routed rows size the memory terms that hold them
(model.moe_rows.row_factors): the saved rows of the expert layers (model.activation_rows.mlp_rows),
the MoE forward working set (model.moe_working_set) and the routed experts' backward working set
(model.backward_working). Figures derived by hand here; dropless and balanced nothing moves."""

from __future__ import annotations

from fractions import Fraction

from trainplan.model.activation_rows import mlp_rows
from trainplan.model.activations import ActivationContext
from trainplan.model.arch_parts import MoESpec
from trainplan.model.moe_rows import rank_rows, row_factors
from trainplan.model.moe_run import DROPLESS, MoERun
from trainplan.model.moe_working_set import megatron_forward_working_set
from trainplan.model.specs import Architecture

ARCH = Architecture(
    num_layers=1, hidden_size=2880, num_attention_heads=64, ffn_hidden_size=2880,
    vocab_size=8, mlp="swiglu", moe=MoESpec(num_experts=32, experts_per_token=4, expert_ffn_hidden_size=2880),
)  # fmt: skip
"""gpt-oss's MoE dimensions: h 2,880, 32 experts, top-4, f_e 2,880 (SwiGLU)."""

S, K, H, F = 4096, 4, 2880, 2880

EXPERT_SIDE = (
    "routed expert inputs (top-k copies)",
    "routed expert SwiGLU input (gate, up)",
    "routed expert down projection input",
)
SOURCE_SIDE = ("routed expert outputs for the combine",)


def _rows(run: MoERun, ep: int) -> dict[str, Fraction]:
    ctx = ActivationContext(
        seq_len=S, cp=1, micro_batch_size=1, tp=1, sequence_parallel=False,
        flash_attention=True, ep=ep, moe_run=run,
    )  # fmt: skip
    return {name: value for name, value, _ in mlp_rows(ARCH, 0, ctx)}


def test_row_factors_follow_the_clocks_rank_rows():
    """Imbalance 1.3 at ep 8: the experts receive 1.3·k·S = 1.3 × 16,384 = 21,299.2 rows,
    whole rows 21,300 (the all-to-all returns a tensor of whole rows), 21,300/16,384 =
    5,325/4,096 of k·S; the rank sends k·S; capacity factor 2 padded: C = ceil(4,096·4/32·2)
    = 1,024, E·C = 32,768 = 2·k·S rows on both sides; dropping
    at cf 1/2: C = 256, E·C = 8,192 = k·S/2 (the capacity caps 1.3); ep 1: one rank holds every
    expert and receives what it sends."""
    imb = MoERun(imbalance=Fraction(13, 10))
    assert row_factors(imb, Fraction(S), 32, K, 8) == (1, Fraction(21_300, 16_384))
    assert Fraction(21_300, 16_384) == Fraction(5325, 4096)
    assert row_factors(imb, Fraction(S), 32, K, 1) == (1, 1)
    padded = MoERun(Fraction(2), pad_to_capacity=True)
    assert row_factors(padded, Fraction(S), 32, K, 8) == (2, 2)
    dropping = MoERun(Fraction(1, 2), imbalance=Fraction(13, 10))
    assert row_factors(dropping, Fraction(S), 32, K, 8) == (Fraction(1, 2), Fraction(1, 2))
    for run in (imb, padded, dropping):  # the experts' side is the clock's rows
        assert row_factors(run, Fraction(S), 32, K, 8)[1] * K * S == rank_rows(run, S, 32, K)
    assert row_factors(DROPLESS, Fraction(S), 32, K, 8) == (1, 1)


def test_saved_rows_scale_on_the_experts_side_only():
    """Imbalance 3/2 at ep 8: FC1's input (k·β·S·h = 94,371,840 B), the SwiGLU input
    (2·β·k·S·f = 188,743,680 B) and FC2's input (94,371,840 B) are the busiest rank's received
    rows, × 3/2; the combine's outputs are back on the source side (k·β·S·h, unchanged);
    the router's rows are per token. At ep 1 nothing moves."""
    base, heavy = _rows(DROPLESS, 8), _rows(MoERun(imbalance=Fraction(3, 2)), 8)
    assert base["routed expert inputs (top-k copies)"] == K * 2 * S * H == 94_371_840
    assert base["routed expert SwiGLU input (gate, up)"] == 2 * 2 * K * S * F == 188_743_680
    for name in EXPERT_SIDE:
        assert heavy[name] == Fraction(3, 2) * base[name], name
    for name in SOURCE_SIDE:
        assert heavy[name] == base[name] == K * 2 * S * H
    moved = set(EXPERT_SIDE)
    assert all(heavy[n] == base[n] for n in base if n not in moved)
    assert _rows(MoERun(imbalance=Fraction(3, 2)), 1) == _rows(DROPLESS, 1)


def test_padding_scales_both_sides():
    """Padded to capacity factor 2 (E·C = 2·k·S): the combine's outputs, on the source side,
    double with the experts' rows."""
    base, padded = _rows(DROPLESS, 8), _rows(MoERun(Fraction(2), pad_to_capacity=True), 8)
    for name in (*EXPERT_SIDE, *SOURCE_SIDE):
        assert padded[name] == 2 * base[name], name


def test_megatron_working_set_reads_both_sides():
    """Megatron-Core's alltoall dispatcher, BF16, 4 local experts, etp 1, ep 8
    (model.moe_working_set._alltoall_working_set): held while the experts run = the permuted
    tokens Us + the all-to-all's output U (the sort's input; the sorted experts' input is what FC1
    saves); the combine's peak adds the experts' output U and its un-sorted copy U:
    Us + 3·U, above the experts' own Us + 2·U. Dropless and balanced Us = U = β·k·S·h:
    4·94,371,840; the busiest rank at imbalance 3/2 receives U = 3/2·β·k·S·h while it sends
    Us = β·k·S·h: (1 + 9/2)·94,371,840 = 519,045,120."""
    u = 2 * K * S * H
    args = (H, K, Fraction(S), 2, 8, 1, 4, False, False)
    assert megatron_forward_working_set(*args) == 4 * u
    heavy = megatron_forward_working_set(*args, rows=(Fraction(1), Fraction(3, 2)))
    assert heavy == Fraction(11, 2) * u == 519_045_120
