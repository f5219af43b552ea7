"""Recompute ``sqrt`` (multi-layer checkpoint segments) under ``fsdp2`` is refused by the one
legality rule set (:func:`model.frameworks.check_framework_recompute`): torchtitan's activation
checkpointing wraps each transformer block by itself (``torchtitan/distributed/
activation_checkpoint.py`` ``ActivationCheckpointing.apply``: full, per-op selective, or, in its
earlier config, every N-th block), so no multi-block segment can be launched. ``evaluate``
refuses it; the search's tables mark it illegal per (shape, ZeRO stage, recompute mode)."""

from __future__ import annotations

import numpy as np
import pytest

from trainplan.model.errors import LayoutError
from trainplan.model.frameworks import check_framework_recompute
from trainplan.model.layout import Layout, Recompute
from trainplan.optimizer.case import Case
from trainplan.optimizer.problem import Job, Problem
from trainplan.optimizer.space import SearchSpace
from trainplan.optimizer.tables import build_tables

LINE = "recompute: sqrt with `framework` fsdp2 is not a torchtitan mechanism"


@pytest.mark.parametrize("framework", ["megatron", "deepspeed", "textbook"])
def test_sqrt_stays_legal_where_the_framework_has_segments(framework) -> None:
    check_framework_recompute(framework, "sqrt")


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
def test_fsdp2_runs_its_block_wise_modes(mode) -> None:
    check_framework_recompute("fsdp2", mode)


def test_evaluate_refuses_sqrt_under_fsdp2() -> None:
    case = Case.of("llama3-8b", "H100-SXM", global_batch_size=64, seq_len=8192)
    with pytest.raises(LayoutError) as refused:
        case.evaluate(Layout(dp=8, zero_stage=3, framework="fsdp2", recompute="sqrt"))
    assert str(refused.value).startswith(LINE)


def test_search_tables_never_offer_sqrt_under_fsdp2() -> None:
    """Megatron and fsdp2 in one space: sqrt stays a candidate for Megatron's shapes and is
    illegal (so never fits, never chosen) for every fsdp2 shape at every ZeRO stage."""
    case = Case.of("llama3-8b", "H100-SXM", global_batch_size=64, seq_len=8192)
    space = SearchSpace(
        num_gpus=8, tp=(1, 2), pp=(1,), micro_batch_size=(1,), frameworks=("megatron", "fsdp2"),
        recomputes=(Recompute.SQRT, Recompute.FULL),
    )  # fmt: skip
    tables = build_tables(Problem(jobs=(Job(case, 8, "8"),), space=space))
    fsdp2 = np.array([str(s.framework) == "fsdp2" for s in tables.shapes])
    sqrt, full = (tables.recomputes.index(r) for r in (Recompute.SQRT, Recompute.FULL))
    assert fsdp2.any() and (~fsdp2).any()
    assert not tables.legal[fsdp2, :, sqrt].any() and not tables.fits[fsdp2, :, sqrt].any()
    assert tables.legal[fsdp2, :, full].any() and tables.fits[fsdp2, :, full].any()
    assert tables.fits[~fsdp2, :, sqrt].any()
