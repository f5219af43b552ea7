"""Megatron-LM (Narayanan et al. 2021, SC'21) Table 1, every row of
``scenarios/published.toml`` ``megatron_table1``: Eq. 2 parameter counts and Eq. 3 FLOPs
per iteration on the catalogue's ``megatron-*`` models (GPT conventions: learned positions,
biases, LayerNorm, tied embeddings, V = 51200, s = 2048), and Korthikanti et al. 2022's model
FLOPs (Appendix A)."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from trainplan.model.flops import (
    MfuConvention,
    korthikanti_model_flops,
    megatron_eq3_flops,
    step_flops,
)
from trainplan.model.layout import Recompute
from trainplan.model.params import count_params, megatron_eq2_params
from trainplan.model.specs import Norm, PositionEmbedding
from trainplan.scenarios.catalogue import get_model, model_names

from ._shared import table_meta, table_rows

ROWS = table_rows("published.toml", "megatron_table1")
V, S = 51200, 2048
PEAK_TFLOPS = 312  # A100, the table's caption


def _catalogue_name(row):
    """The catalogue model with the row's L, h and a (names like megatron-1.7b … megatron-1t)."""
    hits = []
    for name in model_names():
        if not name.startswith("megatron-"):
            continue
        arch = get_model(name).model.arch
        if (arch.num_layers, arch.hidden_size, arch.num_attention_heads) == (
            row["layers"],
            row["hidden"],
            row["heads"],
        ):
            hits.append(name)
    assert len(hits) == 1, (row, hits)
    return hits[0]


IDS = [f"{r['params_b']:g}B" for r in ROWS]


def test_ten_rows_ten_catalogue_models():
    assert len(ROWS) == 10
    names = {_catalogue_name(r) for r in ROWS}
    assert len(names) == 10
    assert "megatron-1.7b" in names and "megatron-1t" in names


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_catalogue_model_uses_the_papers_gpt_conventions(row):
    entry = get_model(_catalogue_name(row))
    arch = entry.model.arch
    assert arch.vocab_size == V and arch.ffn_hidden_size == 4 * arch.hidden_size
    assert (
        arch.position_embedding is PositionEmbedding.LEARNED and arch.max_position_embeddings == S
    )
    assert arch.linear_bias and arch.tie_embeddings and arch.norm is Norm.LAYERNORM
    assert entry.training == {"seq_len": S, "global_batch_size": row["batch"]}
    layout = entry.layout
    assert (layout["tp"], layout["pp"], layout["num_gpus"]) == (row["tp"], row["pp"], row["gpus"])
    assert layout["dp"] == row["gpus"] // (row["tp"] * row["pp"])


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_eq2_parameter_count_exact(row):
    """count_params less the final LayerNorm (2h, which Eq. 2 leaves out) = Eq. 2 exactly."""
    L, h = row["layers"], row["hidden"]
    counts = count_params(get_model(_catalogue_name(row)).model.arch)
    assert counts.final_norm == 2 * h
    eq2 = megatron_eq2_params(L, h, V, S)
    assert counts.total - counts.final_norm == eq2
    # Eq. 2 as printed: P = 12·L·h²·(1 + 13/(12h) + (V + s)/(12·L·h))
    assert 12 * L * h**2 * (1 + Fraction(13, 12 * h) + Fraction(V + S, 12 * L * h)) == eq2
    assert counts.active == counts.total  # dense


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_eq2_matches_the_printed_size(row):
    """params_b is Eq. 2 rounded to 0.1 B, except 1.652 B printed as 1.7 (the note's 3%)."""
    eq2_b = megatron_eq2_params(row["layers"], row["hidden"], V, S) / 1e9
    if row["params_b"] == 1.7:
        assert abs(eq2_b - 1.7) / 1.7 < 0.03
        assert "1.652" in table_meta("published.toml", "megatron_table1")["note"]
    else:
        assert abs(eq2_b - row["params_b"]) <= 0.05 + 1e-9, eq2_b


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_eq3_hardware_flops_and_korthikanti_model_flops_exact(row):
    L, h, B = row["layers"], row["hidden"], row["batch"]
    arch = get_model(_catalogue_name(row)).model.arch
    counts = count_params(arch)
    f = step_flops(arch, counts.active, S, B, Recompute.FULL, MfuConvention.MEGATRON)
    eq3 = megatron_eq3_flops(B, S, L, h, V)
    assert f.hardware_flops == eq3
    # Eq. 3 as printed: F = 96·B·s·L·h²·(1 + s/(6h) + V/(16·L·h))
    assert 96 * B * S * L * h**2 * (1 + Fraction(S, 6 * h) + Fraction(V, 16 * L * h)) == eq3
    model = korthikanti_model_flops(B, S, L, h, V)
    assert f.model_flops == model
    # Korthikanti Appendix A as printed: 72·B·L·s·h²·(1 + s/(6h) + V/(12·h·L))
    assert 72 * B * L * S * h**2 * (1 + Fraction(S, 6 * h) + Fraction(V, 12 * h * L)) == model
    # full recomputation adds exactly one forward of every layer: hardware = model + recomputed
    assert f.hardware_flops == f.model_flops + f.recomputed_flops
    assert 3 * f.recomputed_flops == f.model_flops - 3 * 2 * S * B * h * V


@pytest.mark.parametrize("row", ROWS, ids=IDS)
def test_table_data_sanity(row):
    """aggregate ≈ per-GPU × GPUs to 0.5% (the note), and pct_peak = per-GPU / 312 to rounding."""
    assert math.isclose(
        row["tflops_per_gpu"] * row["gpus"] / 1000, row["aggregate_pflops"], rel_tol=0.005
    )
    assert abs(row["tflops_per_gpu"] / PEAK_TFLOPS - row["pct_peak"]) <= 0.005
