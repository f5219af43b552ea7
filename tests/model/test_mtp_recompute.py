"""Recompute ``sqrt`` of a model with MTP modules under ``megatron`` (:func:`model.mtp_rules.
mtp_recompute_rule`): Megatron-Core's ``MultiTokenPredictionLayer._checkpointed_forward``
(``megatron/core/transformer/multi_token_prediction.py``, Megatron-LM d98e8a64dd) asserts
``recompute_num_layers == 1`` under ``--recompute-method uniform``, and the plan's √n mode is
that method with k = round(√n) layers a segment. Before the rule, ``trainplan search --model
deepseek-v3 --gpus 256 --gpu B200 --recompute sqrt --pp 8`` answered a sqrt plan (interleaved
v = 2, 108.161 s a step) that stops at its first step.

Hand derivation, DeepSeek-V3 (61 layers, one MTP block): at pp 8 Megatron-LM's split is
7, 7, 8, 8, 8, 8, 8, 7 and the MTP block sits with the last rank's 7, so the rank with the most
layers holds n = 8 and k = round(√8) = round(2.83) = 3 > 1: refused. At pp 16 (3, 3, then 4 a
rank, the last 3 + the MTP block) n = 4, k = 2: refused too. At pp 32 (1, 1, then 2 a rank, the
last 1 + the MTP block) n = 2, k = round(√2) = round(1.41) = 1: Megatron's uniform 1, as
``full``, and it runs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trainplan.model.errors import LayoutError
from trainplan.model.layout import Layout, Recompute
from trainplan.model.mtp_rules import mtp_segment
from trainplan.model.split import stage_layers
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import build_tables
from trainplan.scenarios.catalogue import get_model

LINE = "recompute: sqrt with `framework` megatron and 1 MTP module checkpoints 3 layers a segment"
DSV3 = get_model("deepseek-v3").model.arch


def test_the_split_and_the_segment_by_hand() -> None:
    split = stage_layers(DSV3, 8, 1, True, None, "1f1b")
    assert [len(r) for r in split] == [7, 7, 8, 8, 8, 8, 8, 8]  # the last: 7 layers + MTP
    assert split[-1][-1] == 61  # the MTP block (index L) on the last rank
    assert mtp_segment(DSV3, 8, 1, True, None, "1f1b") == 3  # round(√8)
    assert [len(r) for r in stage_layers(DSV3, 16, 1, True, None, "1f1b")][-1] == 4
    assert mtp_segment(DSV3, 16, 1, True, None, "1f1b") == 2  # round(√4)
    split32 = [len(r) for r in stage_layers(DSV3, 32, 1, True, None, "1f1b")]
    assert split32[:3] == [1, 1, 2] and max(split32) == 2 and split32[-1] == 2  # 1 + MTP
    assert mtp_segment(DSV3, 32, 1, True, None, "1f1b") == 1  # round(√2)


def _case(mtp_layers: int = 1) -> Case:
    case = Case.of("deepseek-v3", "H100-SXM", global_batch_size=1024, seq_len=4096)
    if mtp_layers == 1:
        return case
    arch = dataclasses.replace(DSV3, mtp_layers=mtp_layers)
    return dataclasses.replace(case, model=dataclasses.replace(case.model, arch=arch))


def _layout(pp: int, recompute: str, dp: int = 16) -> Layout:
    return Layout(dp=dp, pp=pp, ep=8, etp=1, zero_stage=1, framework="megatron",
                  recompute=recompute, sequence_parallel=False)  # fmt: skip


def test_evaluate_refuses_sqrt_with_the_mtp_module_at_pp_8() -> None:
    with pytest.raises(LayoutError) as refused:
        _case().evaluate(_layout(8, "sqrt"))
    assert str(refused.value).startswith(LINE)
    assert "recompute_num_layers must be 1 for MTP recompute" in str(refused.value)


@pytest.mark.parametrize("recompute", ["full", "selective", "none"])
def test_other_modes_stay_legal(recompute) -> None:
    _case().evaluate(_layout(8, recompute))  # no LayoutError (fit is not asked here)


def test_sqrt_stays_legal_without_mtp_and_where_segments_are_one_layer() -> None:
    _case(mtp_layers=0).evaluate(_layout(8, "sqrt"))
    _case().evaluate(_layout(32, "sqrt", dp=8))  # k = 1: Megatron's uniform 1, as full


def test_search_tables_never_offer_sqrt_with_the_mtp_module() -> None:
    """At pp 8 sqrt is illegal (so never fits, never chosen) for every Megatron shape at every
    ZeRO stage, full stays a candidate; without the MTP block sqrt is a candidate again."""
    space = SearchSpace(num_gpus=128, tp=(1,), pp=(8,), ep=(8,), micro_batch_size=(1,),
                        recomputes=(Recompute.SQRT, Recompute.FULL))  # fmt: skip
    sqrt, full = 0, 1
    for mtp, offered in ((1, False), (0, True)):
        tables = build_tables(Problem(jobs=(Job(_case(mtp), 128, "128"),), space=space))
        assert tables.recomputes[sqrt] is Recompute.SQRT
        assert tables.recomputes[full] is Recompute.FULL
        assert bool(np.asarray(tables.legal)[:, :, sqrt].any()) is offered
        assert np.asarray(tables.legal)[:, :, full].any()


# --- per-stage counts (Megatron's block method) never recompute the MTP block ---------------
#
# Megatron-Core's ``--recompute-method block --recompute-num-layers N`` checkpoints the first N
# layers of each model chunk's ``TransformerBlock`` (``megatron/core/recompute.py``
# ``checkpointed_forward``, Megatron-LM d98e8a64dd); the MTP block is no layer of it, and its
# own ``MultiTokenPredictionLayer._checkpointed_forward`` (``multi_token_prediction.py``, since
# 08abeedbfe) warns "recompute_method == 'block' is not supported for MTP yet. Skipping
# recompute." and runs the block plainly. Before the rule a count as large as the last chunk
# (its decoder layers and the MTP block) recomputed the MTP block too.


def _small_mtp(**extra: object) -> Case:
    """A Llama-like 2,048-wide model of 11 decoder layers and one MTP block (index 11), pp 2,
    interleaved v 2 with model chunks of 3, 3, 3, 2 layers: stage 0 holds chunks (0, 1, 2) and
    (6, 7, 8), stage 1 holds (3, 4, 5) and (9, 10, 11): the MTP block rides the last chunk."""
    from tests.archs import llama_like
    from trainplan.model.model_spec import ModelSpec

    arch = dataclasses.replace(llama_like(11, 2048, 16, 5504, 32000), mtp_layers=1)
    return Case.of(
        model=ModelSpec(name="small-mtp", source="test", arch=arch), pp=2, tp=2,
        seq_len=2048, global_batch_size=8, device="H100-SXM", stage_layers="3,3,3,2",
        virtual_stages=2, schedule="interleaved", **extra,
    )  # fmt: skip


def test_counts_leave_the_mtp_block_out_of_the_recomputed_flops() -> None:
    """Counts 3,3: each chunk's first 3 decoder layers — all 11 decoder layers (stage 1's last
    chunk has only 2, 9 and 10), never the MTP block 11: 11 alike blocks' causal forward,
    2·s·B·W + the causal core = 1,795,363,438,592 FLOPs each (before the rule the counts
    recomputed the MTP block too, as ``full``). ``full`` (Megatron's uniform 1, which checkpoints
    the whole MTP module, ``_proj_and_transformer_layer``) recomputes the 12 blocks and the
    module's 2h → h projection, 2·s·B·2h·h = 2·2,048·8·2·2,048·2,048 = 274,877,906,944."""
    from trainplan.model.flops import layer_forward_flops

    full = _small_mtp(recompute="full").evaluate()
    counts = _small_mtp(recompute="none", recompute_layers="3,3").evaluate()
    arch = full.model.arch
    one_block = layer_forward_flops(arch, 11, 2048, 8, causal=True)
    assert one_block == 1_795_363_438_592
    eh_proj = 2 * 2048 * 8 * 2 * 2048 * 2048
    assert eh_proj == 274_877_906_944
    assert full.flops.recomputed_flops == 12 * one_block + eh_proj
    assert counts.flops.recomputed_flops == 11 * one_block
    assert counts.step_s < full.step_s  # one block fewer re-run on the last stage


def test_counts_keep_the_mtp_block_whole_in_memory() -> None:
    """The last stage's kept form per micro-batch under counts 3,3: chunk (3, 4, 5) keeps 3
    checkpoints, chunk (9, 10, 11) keeps 2 checkpoints and the MTP block's full bytes — (dense
    full, dense selective, dense checkpoint, …) = (1, 0, 5, 0, …), where recomputing the MTP
    block gave (0, 0, 6, 0, …); stage 0 (no MTP block) keeps 6 checkpoints either way and its
    peak equals ``full``'s; the last stage holds more than under ``full``."""
    from trainplan.model.terms.activation_fields import kept_form

    arch = _small_mtp().model.arch
    forms = kept_form(arch, 2, 2, True, (3, 3, 3, 2), "interleaved", Recompute.NONE, (3, 3))
    assert forms == ((0, 0, 6, 0, 0, 0, 0, 0), (1, 0, 5, 0, 0, 0, 0, 0))
    full = _small_mtp(recompute="full").evaluate()
    counts = _small_mtp(recompute="none", recompute_layers="3,3").evaluate()
    assert counts.stages[0].total_bytes == full.stages[0].total_bytes
    assert counts.stages[1].total_bytes > full.stages[1].total_bytes


def test_a_count_past_the_decoder_layers_is_refused_naming_the_mtp_block() -> None:
    """pp 2, 6 and 5 decoder layers (the MTP block on stage 1): a count of 6 on stage 1 would
    only have meant the MTP block, which no count recomputes."""
    case = _small_mtp(recompute="none")
    lay = dict(virtual_stages=1, stage_layers=(6, 5), schedule="1f1b")
    with pytest.raises(LayoutError) as refused:
        case.evaluate(case.layout.with_(**lay, recompute_layers=(6, 6)))
    assert str(refused.value).startswith(
        "recompute_layers: 6 on stage 1 is more than its 5 decoder layers"
    )
    assert "MultiTokenPredictionLayer._checkpointed_forward" in str(refused.value)
    case.evaluate(case.layout.with_(**lay, recompute_layers=(6, 5)))  # runs


def test_the_sqrt_segment_counts_decoder_layers_only() -> None:
    """Megatron-LM's uniform ``--recompute-num-layers k`` cuts each chunk's ``TransformerBlock``
    layers; the MTP block is checkpointed apart (k must be 1 for it). 4 decoder layers on pp 2
    (2 and 2, the MTP block with the last): k = round(√2) = 1, the k the launch line writes
    (round(√ of the most decoder layers a stage holds)), so ``sqrt`` runs — where counting the
    MTP block (3 on the last rank, round(√3) = 2) refused it — and its memory is ``full``'s."""
    from tests.archs import llama_like
    from trainplan.model.model_spec import ModelSpec

    arch = dataclasses.replace(llama_like(4, 2048, 16, 5504, 32000), mtp_layers=1)
    assert [len(r) for r in stage_layers(arch, 2, 1, True, None, "1f1b")] == [2, 3]
    assert mtp_segment(arch, 2, 1, True, None, "1f1b") == 1
    case = Case.of(
        model=ModelSpec(name="small-mtp", source="test", arch=arch), pp=2, tp=2,
        seq_len=2048, global_batch_size=8, device="H100-SXM",
    )  # fmt: skip
    sqrt = case.evaluate(case.layout.with_(recompute="sqrt"))
    full = case.evaluate(case.layout.with_(recompute="full"))
    assert [s.total_bytes for s in sqrt.stages] == [s.total_bytes for s in full.stages]


def test_full_keeps_only_the_mtp_modules_checkpoint() -> None:
    """Under ``full`` Megatron-Core checkpoints each MTP module's ``_proj_and_transformer_layer``
    as one unit (``MultiTokenPredictionLayer._checkpointed_forward``, uniform, k = 1): it keeps
    that call's inputs only — the shifted embedding (the block's one checkpoint, β·S·h ÷ tp) and
    the hidden state (β·S·h ÷ tp: the decoder's final-norm output, a tensor apart from the heads'
    input, which is a chunk of ``MultiTokenPredictionBlock.forward``'s ``torch.cat`` copy) —
    not the shifted embedding's norm input (β·S·h), the projection's input ``[S, 2h]``
    (2·β·S·h) nor the module's final-norm input (β·S·h): 4 units fewer a micro-batch in flight
    on the last stage; while it recomputes, its projection and final-norm inputs (3 units) are
    back beside its layer's own transient. The small model (4 layers and an MTP block, pp 2, tp
    2 with SP, s 2,048, h 2,048, BF16): one unit = 2·2,048·2,048/2 = 4,194,304 B; the last
    stage holds 1 micro-batch at its peak under 1F1B. Under ``none`` and ``selective`` the
    output layer and the module keep, with logits 4·S·V/tp = 4·2,048·32,000/2 = 131,072,000 B:
    2 head passes of (norm input + norm output + logits) = 2·(2·one + 131,072,000) =
    278,921,216, plus the module's 4 units (its two norms' inputs and its projection's input):
    295,698,432 B; under ``full`` the 2 head passes less the final-norm input, plus the
    hidden state: 278,921,216 B."""
    from tests.archs import llama_like
    from trainplan.model.model_spec import ModelSpec

    arch = dataclasses.replace(llama_like(4, 2048, 16, 5504, 32000), mtp_layers=1)
    case = Case.of(
        model=ModelSpec(name="small-mtp", source="test", arch=arch), pp=2, tp=2,
        seq_len=2048, global_batch_size=8, device="H100-SXM",
    )  # fmt: skip
    one = 2 * 2048 * 2048 // 2
    assert one == 4_194_304
    acts = {
        mode: [s.activations for s in case.evaluate(case.layout.with_(recompute=mode)).stages]
        for mode in ("none", "selective", "full")
    }
    assert acts["full"][1].microbatches_in_flight == 1
    assert acts["none"][1].embedding_bytes == acts["selective"][1].embedding_bytes == 295_698_432
    assert acts["full"][1].embedding_bytes == 295_698_432 - 4 * one == 278_921_216
    # the layers are alike: the last stage's transient is the first's plus the module's 3 units
    full_first, full_last = (a.recompute_transient_bytes for a in acts["full"])
    assert full_last - full_first == 3 * one == 12_582_912


def test_the_hidden_state_is_kept_apart_under_megatron_only() -> None:
    """Megatron-Core's heads read ``torch.cat(hidden_states_list)`` (``MultiTokenPredictionBlock.
    forward``, d98e8a64dd), a copy, so the MTP module's incoming hidden state (the decoder's
    final-norm output: its ``hnorm``'s input, or its checkpoint's under ``full``) is one unit
    more than the heads keep; ``textbook`` models the module as DeepSeek-V3 §2.2 draws it, the
    hidden state being the tensor the main head keeps. The small model of
    :func:`test_full_keeps_only_the_mtp_modules_checkpoint` (one unit 4,194,304 B, 1 micro-batch
    held on the last stage): 295,698,432 B under megatron, 295,698,432 − 4,194,304 =
    291,504,128 B under textbook (recompute none)."""
    from tests.archs import llama_like
    from trainplan.model.model_spec import ModelSpec

    arch = dataclasses.replace(llama_like(4, 2048, 16, 5504, 32000), mtp_layers=1)
    got = {}
    for framework in ("megatron", "textbook"):
        case = Case.of(
            model=ModelSpec(name="small-mtp", source="test", arch=arch), pp=2, tp=2,
            seq_len=2048, global_batch_size=8, device="H100-SXM", framework=framework,
        )  # fmt: skip
        got[framework] = case.evaluate().stages[1].activations.embedding_bytes
    assert got == {"megatron": 295_698_432, "textbook": 295_698_432 - 4_194_304}
