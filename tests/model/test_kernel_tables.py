"""The per-operation data files (``scenarios/kernels/*.toml``): every table loads, names its
source and a known part, and a malformed table is refused with a message naming the file, the
table and the key."""

from __future__ import annotations

import copy

import pytest

from trainplan.model.errors import ScenarioError
from trainplan.model.kernel_tables import (
    AttentionCurve,
    BusBwCurve,
    GemmTable,
    parse_nccl_latency,
    parse_tables,
)
from trainplan.scenarios import kernel_data, load, names
from trainplan.topology.accelerators import accelerator_rows

NOT_IN_TABLE = {"B300", "H200-NVL"}
"""Parts Transformer Engine's GEMM profiling guide measured that the accelerator table lacks."""


def _all_rows():
    g, lp, c, m = (
        kernel_data.gemm_data(),
        kernel_data.low_precision_data(),
        kernel_data.collective_data(),
        kernel_data.memory_data(),
    )
    return [
        *kernel_data.attention_curves(),
        *g.sm_counts,
        *g.gemms,
        *g.peak_fractions,
        *lp.layer_gemms,
        *lp.shape_gemms,
        *c.busbw,
        *c.busbw_peaks,
        *c.expert_all_to_all,
        *m.stream,
        *m.norms,
    ]


def test_every_kernel_file_is_package_data():
    assert names("kernels") == sorted(kernel_data.FILES)


def test_every_table_names_its_source_and_a_known_part():
    parts = {row["name"] for row in accelerator_rows()} | NOT_IN_TABLE
    rows = _all_rows()
    assert len(rows) > 100
    for row in rows:
        assert len(row.source) > 30, row
        assert row.part in parts, row.part
    assert "tuning.cc" in kernel_data.collective_data().nccl_latency.source
    assert "mxfp8.rst" in kernel_data.low_precision_data().block_format.source


def test_attention_curves_are_unique_per_lookup_key():
    keys = [
        (c.kernel, c.part, c.dtype, c.direction, c.causal, c.head_dim_qk, c.head_dim_v, c.extends)
        for c in kernel_data.attention_curves()
    ]
    assert len(keys) == len(set(keys))


def test_points_read_off_figures_say_so():
    """A point not printed on a figure (hidden by its legend) is marked with its reading."""
    curves = kernel_data.attention_curves()
    noted = [c for c in curves if "bar height" in c.notes]
    assert {(c.part, c.kernel, c.head_dim_qk, c.causal) for c in noted} == {
        ("A100-80GB", "flash-attention-2", 64, False),
        ("A100-80GB", "flash-attention-2", 128, False),
        ("H100-SXM", "flash-attention-3", 256, False),
    }
    assert all(c.notes for c in curves if c.read == "transcription")


CURVE = {
    "kernel": "cudnn",
    "version": "9",
    "part": "H200",
    "dtype": "bf16",
    "direction": "fwd",
    "causal": True,
    "head_dim_qk": 128,
    "head_dim_v": 128,
    "q_heads": 64,
    "kv_heads": 8,
    "batch": 1,
    "flop_count": "nonmasked",
    "seq_len": [2048, 4096],
    "tflops_per_s": [500, 600],
    "read": "csv",
    "source": "a benchmark",
}


@pytest.mark.parametrize(
    "change, message",
    [
        ({"tflops": [1]}, "unknown key 'tflops'"),
        ({"source": None}, "missing required key 'source'"),
        ({"causal": "yes"}, "key 'causal' must be a bool"),
        ({"seq_len": [4096, 2048]}, "key 'seq_len' must be strictly ascending"),
        ({"tflops_per_s": [500]}, "seq_len, tflops_per_s must have one value each"),
        ({"dtype": "fp4"}, "key 'dtype' is 'fp4'"),
        ({"batch_times_seq_len": 16384}, "exactly one of 'batch' and 'batch_times_seq_len'"),
        ({"flop_count": "fa-half", "head_dim_qk": 192}, "d_qk = d_v"),
        ({"q_heads": 0}, "key 'q_heads' must be a int"),
    ],
)
def test_malformed_attention_curve_is_refused(change, message):
    row = {**CURVE, **change}
    row = {k: v for k, v in row.items() if v is not None}
    with pytest.raises(ScenarioError) as err:
        parse_tables(AttentionCurve, "attention.toml", "curve", [row])
    assert str(err.value).startswith("scenarios/kernels/attention.toml: curve 1 (H200)")
    assert message in str(err.value)


def test_malformed_gemm_and_busbw_tables_are_refused():
    gemm = load("kernels", "gemm")["gemm"][0]
    with pytest.raises(ScenarioError, match="groups, m, n, k, tflops_per_s must have one value"):
        parse_tables(GemmTable, "gemm.toml", "gemm", [{**gemm, "k": gemm["k"][:-1]}])
    curve = load("kernels", "collectives")["busbw"][0]
    with pytest.raises(ScenarioError, match="'collective' is 'all-to-one'"):
        parse_tables(
            BusBwCurve, "collectives.toml", "busbw", [{**curve, "collective": "all-to-one"}]
        )
    with pytest.raises(ScenarioError, match="non-empty"):
        parse_tables(BusBwCurve, "collectives.toml", "busbw", [])


def test_malformed_nccl_constants_are_refused():
    raw = load("kernels", "collectives")["nccl_latency"]
    short = copy.deepcopy(raw)
    short["hw_us"]["nvlink"]["ring"] = [0.6, 1.9]
    with pytest.raises(ScenarioError, match="one value per protocol"):
        parse_nccl_latency(short)
    with pytest.raises(ScenarioError, match="unknown keys \\['extra'\\]"):
        parse_nccl_latency({**raw, "extra": 1})
    with pytest.raises(ScenarioError, match="24 values"):
        parse_nccl_latency({**raw, "tree_correction": {"LL": [1.0]}})


def test_unknown_table_in_a_kernel_file_is_refused(monkeypatch):
    monkeypatch.setattr(
        kernel_data.scenarios, "load", lambda kind, name: {"curve": [], "curves": []}
    )
    kernel_data.attention_curves.cache_clear()
    try:
        with pytest.raises(ScenarioError, match="unknown table 'curves'"):
            kernel_data.attention_curves()
    finally:
        monkeypatch.undo()
        kernel_data.attention_curves.cache_clear()
