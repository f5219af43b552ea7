"""The training recipe's refusals that the interface makes (:func:`interface.inputs.build_case`),
beside the model's own in tests/model/test_recipes.py."""

from __future__ import annotations

import pytest

from trainplan.interface.inputs import build_case
from trainplan.model.errors import InputError


def test_muon_tp_mode_is_refused_without_muon():
    """``muon_tp_mode`` applies to Muon only: refused with Adam, one line."""
    base = {"model": "llama3-8b", "dp": 8, "muon_tp_mode": "duplicated"}
    with pytest.raises(InputError, match="^muon_tp_mode: applies to optimizer muon, not adam"):
        build_case(base)
    with pytest.raises(InputError, match="^muon_tp_mode: 'distributed' .* is not modelled"):
        build_case({**base, "optimizer": "muon", "muon_tp_mode": "distributed"})
