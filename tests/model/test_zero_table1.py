"""ZeRO (Rajbhandari et al. 2019) Table 1: model state per device, ZeRO-1/2/3, every row of
``scenarios/published.toml`` ``zero_table1`` within the file's ``rel`` (the paper truncates
a few cells, e.g. 1.875 → 1.88, 513.5 → 513). The paper's steady state is the ``textbook``
profile (docs/concepts/conventions.md "Two kinds of figures").

A cell matches within ``rel`` or within half a unit of its last printed digit, whichever is
wider: the paper prints 7.5B over 1024 GPUs under ZeRO-3 (exactly 0.1171875 GB) as 0.12, 2.4%
off, which ``rel`` = 1% alone would reject although it is the correct value rounded.
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from trainplan.model.layout import Layout
from trainplan.model.memory import model_state
from trainplan.model.specs import TrainingSpec

from ._shared import table_meta, table_rows

ROWS = table_rows("published.toml", "zero_table1")
REL = table_meta("published.toml", "zero_table1")["rel"]


def _printed_half_unit(value: float | int) -> float:
    """Half a unit of the last digit printed in the cell (0.12 → 0.005, 4187 → 0.5)."""
    text = repr(value)
    decimals = len(text.split(".")[1]) if "." in text and "e" not in text else 0
    return 0.5 * 10.0**-decimals


def _matches(got_gb: float, want_gb: float | int) -> bool:
    return abs(got_gb - want_gb) <= max(REL * want_gb, _printed_half_unit(want_gb)) + 1e-12


def test_cell_tolerance():
    assert _printed_half_unit(0.12) == 0.005 and _printed_half_unit(4187) == 0.5
    assert _matches(0.1171875, 0.12) and not _matches(0.11, 0.12)
    assert _matches(1.875, 1.88) and _matches(513.5, 513) and not _matches(520.0, 513)


def test_table_has_eighteen_rows():
    assert len(ROWS) == 18


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['params']:g}-dp{r['dp']}" for r in ROWS])
def test_zero_table1_row(row):
    params = Fraction(int(row["params"]))
    training = TrainingSpec(seq_len=1, global_batch_size=row["dp"])
    layout = Layout(dp=row["dp"], framework="textbook")
    stage0 = model_state(params, Fraction(0), layout, training, 0).total_bytes
    assert stage0 == 16 * params
    for stage in (1, 2, 3):
        got = model_state(params, Fraction(0), layout, training, stage).total_bytes
        want_gb = row[f"zero{stage}_gb"]
        assert _matches(float(got / 10**9), want_gb), (stage, float(got / 10**9), want_gb)


@pytest.mark.parametrize("row", ROWS, ids=[f"{r['params']:g}-dp{r['dp']}" for r in ROWS])
def test_zero_table1_exact_form(row):
    """The exact values behind the rounded cells: (2+2+12/D)·P, (2+14/D)·P, 16/D·P."""
    p, d = Fraction(int(row["params"])), row["dp"]
    training = TrainingSpec(seq_len=1, global_batch_size=d)
    lay = Layout(dp=d, framework="textbook")
    got = [model_state(p, Fraction(0), lay, training, z) for z in (1, 2, 3)]
    assert [s.total_bytes for s in got] == [
        (4 + Fraction(12, d)) * p,
        (2 + Fraction(14, d)) * p,
        Fraction(16, d) * p,
    ]
    # which part is sharded at each stage
    assert got[0].weights_bytes == 2 * p and got[0].gradients_bytes == 2 * p
    assert got[1].weights_bytes == 2 * p and got[1].gradients_bytes == Fraction(2, d) * p
    assert got[2].weights_bytes == Fraction(2, d) * p
