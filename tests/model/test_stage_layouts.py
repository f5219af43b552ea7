"""Stage layouts (issue 11 item 5): explicit layers per stage or per model chunk, Megatron-Core's
first/last-stage counts and embedding/loss accounting, and the checked errors.

Sources: Narayanan et al. 2021 (arXiv 2104.04473) §2.2.2 for the chunk placement; Megatron-Core
``transformer_block.get_num_layers_to_build`` for ``--decoder-first/last-pipeline-num-layers``
and ``--account-for-embedding/loss-in-pipeline-split``; Llama 3 (Dubey et al. 2024) §3.3.2 for
the embedding-only first and output-only last stage.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainplan.model.errors import LayoutError
from trainplan.model.layout import Layout
from trainplan.model.megatron_split import megatron_stage_layers
from trainplan.model.params import count_params, layer_params, stage_params
from trainplan.model.split import default_chunk_sizes, split_layers
from trainplan.model.terms.activation_fields import stage_layer_counts
from trainplan.model.terms.step import stage_core_flops
from trainplan.model.timing import microbatch_flop_terms, stage_peak_seconds
from trainplan.optimizer.case import Case
from trainplan.scenarios.catalogue import get_model

LLAMA3_405B = {
    "model": "llama3-405b",
    "tp": 8,
    "pp": 16,
    "dp": 8,
    "seq_len": 8192,
    "global_batch_size": 2048,
}


def test_llama3_405b_layer_params_by_hand():
    """One Llama 3 405B layer (h 16,384, 128 heads, 8 KV heads of 128, FFN 53,248, SwiGLU,
    RMSNorm; Dubey et al. 2024 Table 3): q and o 2·h² = 536,870,912; k and v 2·h·8·128 =
    33,554,432; MLP 3·h·53,248 = 2,617,245,696; two norms 2·h = 32,768; = 3,187,703,808."""
    arch = get_model("llama3-405b").model.arch
    assert layer_params(arch, 0).dense == 536_870_912 + 33_554_432 + 2_617_245_696 + 32_768
    assert layer_params(arch, 0).dense == 3_187_703_808


def test_explicit_stage_layers_move_parameters_and_activations():
    """--stage-layers 6,8×15: stage 0 holds the embedding (V·h = 128,256 × 16,384 =
    2,101,346,304) and 6 layers (6 × 3,187,703,808 = 19,126,222,848) = 21,227,569,152 parameters,
    against 7 layers by default; its activations scale with its layers: 6/7 of the default's."""
    default = Case.of(**LLAMA3_405B).evaluate()
    given_ = Case.of(**{**LLAMA3_405B, "stage_layers": "6," + ",".join(["8"] * 15)}).evaluate()
    assert [s.num_layers for s in given_.stages] == [6] + [8] * 15
    # dense parameters on one tp rank (megatron keeps the norms whole on every rank: 6 layers ×
    # 2 norms × h, and no positions; it pads V = 128,256 to a multiple of 128 × tp = 1,024:
    # 129,024 rows × h = 2,113,929,216): (2,113,929,216 + 6 × 3,187,671,040) / 8 + 196,608
    # = 21,239,955,456 / 8 + 196,608 = 2,655,191,040
    h = 16_384
    per_rank = Fraction(129_024 * h + 6 * (3_187_703_808 - 2 * h), 8) + 6 * 2 * h
    assert given_.stages[0].dense_params == per_rank == Fraction(2_655_191_040)
    a6, a7 = given_.stages[0].activations, default.stages[0].activations
    assert a6.layers_bytes / a7.layers_bytes == Fraction(6, 7)
    assert a6.microbatches_in_flight == a7.microbatches_in_flight == 16
    assert given_.layout.stage_layers == (6, *[8] * 15)


def test_megatron_accounting_is_llama3s_split():
    """--account-for-embedding --account-for-loss on 126 layers, pp 16: (126 + 2) / 16 = 8 slots
    per stage; the first gives one to the embedding and the last one to the loss: 7, 8 × 14, 7
    (the split Llama 3 405B trained with, §3.3.2)."""
    assert megatron_stage_layers(126, 16, account_for_embedding=True, account_for_loss=True) == (
        7,
    ) + (8,) * 14 + (7,)
    # embedding only: (126 + 1) / ... 127 is prime: not divisible by 16
    with pytest.raises(LayoutError, match="127 is not divisible by pp 16"):
        megatron_stage_layers(126, 16, account_for_embedding=True)
    # interleaved: 128 slots over 16 × 8 = 128 chunks of one; the first chunk is the embedding
    # alone, the last the loss alone — Llama 3's "first model chunk … only the embedding"
    sizes = megatron_stage_layers(126, 16, 8, account_for_embedding=True, account_for_loss=True)
    assert sizes[0] == 0 and sizes[-1] == 0 and sizes[1:-1] == (1,) * 126
    assert sizes == default_chunk_sizes(126, 16, 8)


def test_megatron_first_last_stage_layers():
    """Megatron-Core: first/last stages hold the given counts, the others share the rest evenly
    (30 − 6 − 6 = 18 over 2 stages = 9); with virtual stages each stage's count splits evenly
    into its chunks (per rank 6, 9, 9, 6 → v = 3: 2, 3, 3, 2 per chunk, repeated 3 times)."""
    assert megatron_stage_layers(30, 4, first=6, last=6) == (6, 9, 9, 6)
    assert megatron_stage_layers(30, 4, first=6) == (6, 8, 8, 8)
    assert megatron_stage_layers(30, 4, 3, first=6, last=6) == (2, 3, 3, 2) * 3
    with pytest.raises(LayoutError, match="not divisible by virtual_stages 2"):
        megatron_stage_layers(30, 4, 2, first=6, last=6)  # 9 layers on a rank of 2 chunks
    with pytest.raises(LayoutError, match="do not split evenly over the other 2 stages"):
        megatron_stage_layers(30, 4, first=5, last=6)  # 19 over 2 stages
    with pytest.raises(LayoutError, match="does not combine"):
        megatron_stage_layers(30, 4, first=6, account_for_loss=True)


def test_interleaved_chunks_in_model_order():
    """8 layers, pp 2, v 2, chunks (1, 3, 2, 2) in model order: chunk 0 = layer 0, chunk 1 =
    layers 1–3, chunk 2 = layers 4–5, chunk 3 = layers 6–7; rank 0 holds chunks 0 and 2, rank 1
    chunks 1 and 3."""
    assert split_layers(8, 2, 2, sizes=(1, 3, 2, 2)) == ((0, 4, 5), (1, 2, 3, 6, 7))
    # per-rank counts are divided over the chunks: 4, 4 → 2, 2, 2, 2
    assert Layout(pp=2, virtual_stages=2, schedule="interleaved", stage_layers=(4, 4)).stage_layers
    assert Layout(
        pp=2, virtual_stages=2, schedule="interleaved", stage_layers=(4, 4)
    ).stage_layers == (2, 2, 2, 2)


def test_embedding_and_loss_as_their_own_stages():
    """Llama 3 8B (32 layers) on pp 4 with chunks 0, 16, 16, 0: the first stage holds only the
    embedding (128,256 × 4,096 = 525,336,576) and the last only the final norm and the output
    layer (4,096 + 525,336,576)."""
    arch = get_model("llama3-8b").model.arch
    stages = stage_params(arch, 4, sizes=(0, 16, 16, 0))
    assert stages[0].dense == 525_336_576 and stages[0].layers == ()
    assert stages[3].dense == 4_096 + 525_336_576 and stages[3].layers == ()
    assert sum(s.dense for s in stages) == count_params(arch).total == 8_030_261_248


def test_the_slowest_stage_sets_the_pace():
    """Llama 3 8B, pp 4, chunks 5, 9, 9, 9: the last stage (9 layers and the output layer) is the
    slowest; the micro-batch time is its FLOPs, not the default 8-layer stages'."""
    arch = get_model("llama3-8b").model.arch
    assert stage_layer_counts(arch, 4, 1, True, (5, 9, 9, 9)) == ((5, 0), (9, 0), (9, 0), (9, 0))
    base = {"model": "llama3-8b", "pp": 4, "dp": 2, "seq_len": 8192, "global_batch_size": 64}
    even = Case.of(**base).evaluate()
    skew = Case.of(**{**base, "stage_layers": "5,9,9,9"}).evaluate()
    terms = microbatch_flop_terms(arch, 8192, 1, skew.layout.recompute, True)
    o = skew.options
    core9 = stage_core_flops(arch, 4, 1, 8192, True, True, (5, 9, 9, 9))[3]
    core8 = stage_core_flops(arch, 4, 1, 8192, True)[3]
    assert core9 * 8 == core8 * 9  # every Llama 3 layer is global: the cores scale with layers
    eff, attn = o.kernel_efficiency, o.attention_efficiency
    nine = stage_peak_seconds(terms, 9, 0, True, core9, 3, eff, attn)
    eight = stage_peak_seconds(terms, 8, 0, True, core8, 3, eff, attn)
    assert skew.step_s / even.step_s == pytest.approx(nine / eight, rel=0.02)
    assert skew.step_s > even.step_s


@given(
    st.integers(1, 6).flatmap(
        lambda pp: st.integers(1, 3).flatmap(
            lambda v: st.tuples(
                st.just(pp),
                st.just(v),
                st.lists(st.integers(0, 5), min_size=pp * v, max_size=pp * v),
            )
        )
    )
)
def test_any_explicit_split_places_every_layer_once(case):
    """Property: explicit chunk sizes place every layer exactly once, rank i holding chunks
    i, i + pp, … in model order."""
    pp, v, sizes = case
    total = sum(sizes)
    ranks = split_layers(total, pp, v, sizes=tuple(sizes))
    assert sorted(j for r in ranks for j in r) == list(range(total))
    for i, r in enumerate(ranks):
        assert len(r) == sum(sizes[i::pp])
        assert list(r) == sorted(r)
