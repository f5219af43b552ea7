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
