"""The accelerator table: sources, units, lookup, strict keys."""

import json

import pytest

from trainplan.model.errors import ScenarioError
from trainplan.topology import accelerators
from trainplan.topology.accelerators import (
    _devices_from_text,
    accelerator_rows,
    get_accelerator,
    load_accelerators,
)

SEED_NAMES = [
    "V100-SXM2-32GB", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H100-NVL", "H800",
    "H200", "B200", "GB200", "GB300", "MI250X", "MI300X", "MI325X", "MI355X", "TPUv4", "TPUv5e",
    "TPUv5p", "TPUv6e", "Gaudi2", "Gaudi3", "Trainium2",
]  # fmt: skip


def test_every_seed_row_is_kept():
    assert list(load_accelerators()) == SEED_NAMES


def test_every_row_has_a_source_and_a_positive_dense_peak():
    for row in accelerator_rows():
        assert row["source"].strip(), row["name"]
        assert row["dense"] is True
        assert row["bf16_tflops"] > 0
        assert row["status"] in ("vendor", "secondary", "derived")


def test_units_are_converted_to_base_units():
    h100 = get_accelerator("H100-SXM")
    assert h100.memory_bytes == 80 * 10**9
    assert h100.peak_flops_per_s == 989.4e12
    assert h100.nvlink_bytes_per_s == 450e9
    assert h100.nvlink_domain == 8
    assert h100.scaleout_bytes_per_s == 50e9
    tpu = get_accelerator("TPUv4")
    assert tpu.memory_unit == "GiB"
    assert tpu.memory_bytes == 34_359_738_368
    assert tpu.peak_flops_per_s == 275e12


def test_pinned_figures():
    assert get_accelerator("A100-80GB").peak_flops_per_s == 312e12
    h800 = get_accelerator("H800")
    assert (h800.peak_flops_per_s, h800.nvlink_bytes_per_s, h800.scaleout_bytes_per_s) == (
        989.4e12,
        200e9,
        50e9,
    )


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("h100-sxm", "H100-SXM"),
        ("h100 sxm5", "H100-SXM"),
        ("V100", "V100-SXM2-32GB"),
        ("TPU v4", "TPUv4"),
        ("tpu-v4", "TPUv4"),
        ("gaudi 3", "Gaudi3"),
    ],
)
def test_aliases_and_case(alias, name):
    assert get_accelerator(alias).name == name


def test_unknown_name_suggests():
    with pytest.raises(ScenarioError, match=r"unknown gpu 'H10O'; did you mean .*H100"):
        get_accelerator("H10O")


def test_rows_are_json_able_and_carry_bytes():
    rows = accelerator_rows()
    json.dumps(rows)
    tpu = next(r for r in rows if r["name"] == "TPUv4")
    assert tpu["memory_bytes"] == 32 * 2**30
    assert set(rows[0]) == {
        "name", "memory_gb", "memory_unit", "memory_bytes", "bf16_tflops", "dense",
        "hbm_bandwidth_gbps", "nvlink_gbps", "nvlink_domain", "scaleout_gbps", "source", "status",
    }  # fmt: skip


def test_every_row_has_its_hbm_bandwidth_with_a_source_comment():
    """The roofline time model needs each accelerator's HBM bandwidth; every row states it, and
    its line carries its source (the vendor datasheet), as ``hbm_gib`` does."""
    lines = accelerators._table_text().splitlines()
    rows = [line for line in lines if line.startswith("hbm_bandwidth_gbps")]
    assert len(rows) == len(load_accelerators())
    assert all("#" in line and len(line.split("#", 1)[1].strip()) > 10 for line in rows)
    assert load_accelerators()["H100-SXM"].hbm_bytes_per_s == 3.35e12
    assert load_accelerators()["A100-80GB"].hbm_bytes_per_s == 2.039e12
    assert load_accelerators()["A100-40GB"].hbm_bytes_per_s == 1.555e12
    assert load_accelerators()["H200"].hbm_bytes_per_s == 4.8e12
    assert load_accelerators()["B200"].hbm_bytes_per_s == 8e12


def test_loader_is_cached():
    assert load_accelerators() is load_accelerators()


GOOD = """
[[accelerator]]
name = "X1"
memory_gb = 10
memory_unit = "GB"
bf16_tflops = 100
dense = true
source = "test"
status = "vendor"
"""


def test_unknown_key_names_file_row_and_key():
    with pytest.raises(
        ScenarioError, match=r"accelerators.toml: accelerator row 1 \(X1\).*'tflops'"
    ):
        _devices_from_text(GOOD + "tflops = 3\n")


def test_missing_key_names_file_row_and_key():
    text = GOOD.replace('source = "test"\n', "")
    with pytest.raises(ScenarioError, match=r"accelerator row 1 \(X1\): missing .*'source'"):
        _devices_from_text(text)


def test_bad_values_are_rejected():
    with pytest.raises(ScenarioError, match="memory_unit"):
        _devices_from_text(GOOD.replace('"GB"', '"TB"'))
    with pytest.raises(ScenarioError, match="bf16_tflops"):
        _devices_from_text(GOOD.replace("100", "-1"))
    with pytest.raises(ScenarioError, match="duplicate"):
        _devices_from_text(GOOD + GOOD.replace("X1", "x-1"))


def test_table_is_package_data():
    assert accelerators.TABLE_FILE == "accelerators.toml"
    assert accelerators._table_text().lstrip().startswith("#")
