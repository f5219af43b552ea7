"""The per-stage search on models whose layers are not all alike: MoE layers after a leading
block of dense ones (DeepSeek-V3's first_k_dense_replace) and a multi-token-prediction block on
the last stage. The solver's plan is evaluated and checked against the tables stage by stage
(optimizer.per_stage._check: bytes to a byte, time to 2 ns), so a passing solve is the proof."""

from __future__ import annotations

import pytest

from tests.archs import llama_like
from trainplan.model.arch_parts import MoESpec
from trainplan.model.errors import InputError
from trainplan.model.model_spec import ModelSpec
from trainplan.optimizer.case import Case
from trainplan.optimizer.per_stage import solve_shape
from trainplan.optimizer.stage_rules import layer_counts, leading_layers


def _moe_case(dense: int, mtp: int, pp: int = 2, **extra: object):  # type: ignore[no-untyped-def]
    arch = llama_like(
        8, 256, 4, 688, 1024,
        moe=MoESpec(
            num_experts=8, experts_per_token=2, expert_ffn_hidden_size=128,
            first_k_dense_layers=dense,
        ),
        mtp_layers=mtp,
    )  # fmt: skip
    return Case.of(
        **{
            "model": ModelSpec(name="tiny-moe", source="test", arch=arch),
            "pp": pp,
            "seq_len": 8192,
            "global_batch_size": 8,
            "device": "H100-SXM",
            **extra,
        }
    )


def test_leading_layers() -> None:
    """DeepSeek-V3-like: the first 2 dense, the rest MoE → 2; all MoE → 0; the first stage holds
    at least the 2, the others at most L − 2."""
    assert leading_layers(_moe_case(2, 1).model.arch) == 2
    assert leading_layers(_moe_case(0, 0).model.arch) == 0
    assert list(layer_counts(8, 2, 0, 2)) == [2, 3, 4, 5, 6, 7, 8]
    assert list(layer_counts(8, 2, 1, 2)) == [0, 1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(("dense", "mtp"), [(0, 0), (2, 1)])
def test_moe_and_mtp_models_are_solved_and_agree_with_evaluate(dense: int, mtp: int) -> None:
    case = _moe_case(dense, mtp)
    got = solve_shape(case, case.layout)
    assert got.status == "optimal" and got.estimate is not None
    lay = got.estimate.layout
    assert lay.stage_layers is not None and sum(lay.stage_layers) == 8
    assert lay.stage_layers[0] >= dense  # the dense block stays on the first stage


def test_leading_block_with_interleaving_is_refused() -> None:
    case = _moe_case(2, 0, pp=2, schedule="interleaved", virtual_stages=2)
    with pytest.raises(InputError, match="first 2 layers differ from the rest"):
        solve_shape(case, case.layout)
