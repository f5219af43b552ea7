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
    "V100-SXM2-32GB", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H100-NVL",
    "H100-96GB-500W", "H800", "H20", "H200", "B200", "B300", "GB200", "GB300", "MI250X",
    "MI300X", "MI325X", "MI355X", "TPUv4", "TPUv5e", "TPUv5p", "TPUv6e", "Gaudi2", "Gaudi3", "Trainium2",
]  # fmt: skip


def test_every_seed_row_is_kept():
    """The seed's 22 rows and the parts published runs were deployed on (H100-96GB-500W, H20,
    B300), in file order."""
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
    with pytest.raises(ScenarioError, match=r"unknown gpu 'H100-SXN'; did you mean H100-SXM"):
        get_accelerator("H100-SXN")
    # since the H20 row, 'H10O' is closest to H20, H800 and H200 (difflib's ratio)
    with pytest.raises(ScenarioError, match=r"unknown gpu 'H10O'; did you mean H20, H800, H200"):
        get_accelerator("H10O")


def test_rows_are_json_able_and_carry_bytes():
    rows = accelerator_rows()
    json.dumps(rows)
    tpu = next(r for r in rows if r["name"] == "TPUv4")
    assert tpu["memory_bytes"] == 32 * 2**30
    assert set(rows[0]) == {
        "name", "memory_gb", "memory_unit", "memory_bytes", "bf16_tflops", "fp8_tflops",
        "fp8_source", "dense",
        "nvlink_gbps", "nvlink_domain", "scaleout_gbps", "hbm_tbps", "host_link_gbps",
        "bandwidth_source", "host_memory_gb", "host_memory_gbps", "host_cores", "host_source", "power_w",
        "power_source", "source", "status",
        "device_bytes", "runtime_reserve_bytes", "usable_bytes",  # what evaluate's capacity reads
    }  # fmt: skip


def test_hbm_and_host_link_bandwidths_carry_their_source():
    """The rollout's decode reads weights and the KV cache at the HBM bandwidth; optimizer
    offload crosses the host link. H100 SXM datasheet: 3.35 TB/s HBM3, PCIe Gen5 128 GB/s both
    ways (64 GB/s per direction)."""
    h100 = get_accelerator("H100-SXM")
    assert h100.hbm_bytes_per_s == 3.35e12 and h100.host_link_bytes_per_s == 64e9
    assert "3.35 TB/s" in h100.bandwidth_source
    assert get_accelerator("B200").host_link_bytes_per_s is None  # not sourced: left out
    assert all(d.hbm_bytes_per_s for d in load_accelerators().values())
    bad = GOOD.replace('status = "vendor"', 'hbm_tbps = 1.0\nstatus = "vendor"')
    with pytest.raises(ScenarioError, match="need a bandwidth_source"):
        _devices_from_text(bad)


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


# ---------------------------------------------------------------------------------------------
# Parts as deployed in published runs, each against its source's figures


def test_grand_teton_h100_is_the_runs_own_description():
    """torchtitan's benchmarks (llama3_h100_202412_torchtitan.md, Hardware): 96GB HBM2e at
    2.4 TB/s, 8 GPUs fully connected with NVLink, 400 Gb/s RDMA per GPU, 500 W power limit.
    The peaks are the H100 SXM's ratings, which the run divides by for MFU (footnote 2)."""
    gt, sxm = get_accelerator("H100-96GB-500W"), get_accelerator("H100-SXM")
    assert gt.memory_bytes == 96 * 10**9 and gt.hbm_bytes == 96 * 2**30
    assert gt.hbm_bytes_per_s == 2.4e12 < sxm.hbm_bytes_per_s
    assert (gt.peak_flops_per_s, gt.fp8_flops_per_s) == (sxm.peak_flops_per_s, 1978.9e12)
    assert (gt.nvlink_bytes_per_s, gt.nvlink_domain) == (450e9, 8)
    assert gt.scaleout_bytes_per_s == 400e9 / 8
    row = next(r for r in accelerator_rows() if r["name"] == "H100-96GB-500W")
    assert row["power_w"] == 500 and "500W power limit" in row["power_source"]
    # the cap's clock is not published: the source bounds it by the H100 NVL's dense peak
    assert "835.5" in row["source"] and get_accelerator("H100-NVL").peak_flops_per_s == 835.5e12


def test_h20_figures():
    """NVIDIA H20 as secondary sources copy it: 96 GB HBM3 at 4.0 TB/s, 148 TFLOPS dense
    FP16/BF16, 296 dense FP8, NVLink 900 GB/s bidirectional, 400 W."""
    h20 = get_accelerator("H20")
    assert h20.memory_bytes == 96 * 10**9 and h20.hbm_bytes_per_s == 4.0e12
    assert (h20.peak_flops_per_s, h20.fp8_flops_per_s) == (148e12, 296e12)
    assert (h20.nvlink_bytes_per_s, h20.nvlink_domain) == (900e9 / 2, 8)
    assert h20.scaleout_bytes_per_s is None  # no standard NIC per GPU is stated
    assert h20.status == "secondary"


def test_b300_figures_are_the_hgx_boards_divided():
    """HGX B300: 8 GPUs, 2.3 TB HBM3e (288 GB each), 36 PFLOPS FP16/BF16 and 72 PFLOPS FP8 with
    sparsity per board, NVLink 1.8 TB/s per GPU, 1.6 TB/s networking per board."""
    b300 = get_accelerator("B300")
    assert b300.memory_bytes == 288 * 10**9
    assert b300.peak_flops_per_s == 36e15 / 2 / 8 == 2.25e15
    assert b300.fp8_flops_per_s == 72e15 / 2 / 8
    assert b300.nvlink_bytes_per_s == 1.8e12 / 2 and b300.nvlink_domain == 8
    assert b300.scaleout_bytes_per_s == 1.6e12 / 2 / 8 == 800e9 / 8
    assert b300.hbm_bytes_per_s == 8e12


def test_rack_scale_and_other_parts_published_runs_use_are_in_the_table():
    """GB200 in NVL72 domains (72 GPUs on one NVLink domain), MI300X/MI325X and TPU v5p/v6e."""
    assert get_accelerator("GB200").nvlink_domain == 72
    assert get_accelerator("GB300").nvlink_domain == 72
    for name in ("MI300X", "MI325X", "TPUv5p", "TPUv6e"):
        assert get_accelerator(name).source


def test_a_power_limit_needs_its_source():
    with pytest.raises(ScenarioError, match="power_w needs a non-empty power_source"):
        _devices_from_text(GOOD + "power_w = 500\n")
    with pytest.raises(ScenarioError, match="power_w needs a non-empty power_source"):
        _devices_from_text(GOOD + 'power_source = "x"\n')
    with pytest.raises(ScenarioError, match="'power_w' must be positive"):
        _devices_from_text(GOOD + 'power_w = -1\npower_source = "x"\n')


def test_grace_blackwell_capacity_is_what_the_driver_reports():
    """GB200 and GB300 start from the memory the driver reports, less what it keeps from every
    process: ``nvidia-smi -q -x`` on nodes of 4 GB200 and 4 GB300 under driver 580.173.02
    (NVIDIA/k8s-test-infra tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-gb200.xml and
    qx-gb300.xml), FB Memory Usage on every GPU: Total 189,471 MiB, Reserved 742 MiB (GB200);
    284,208 MiB and 947 MiB (GB300). The process then keeps the CUDA context (666,632,192 B),
    the cuBLAS workspaces (2·32 MiB + 1 KiB = 67,109,888 B) and the 1 GiB allowance:
    1,807,483,904 B. GB200: (189,471 − 742) MiB = 197,896,699,904 B, less that,
    196,089,216,000 B = 196.09 GB usable, where 186·10⁹ less the 2,186,019,840 B reserve then
    used for every part gave 183.81 GB."""
    gb200, gb300 = get_accelerator("GB200"), get_accelerator("GB300")
    process = 666_632_192 + 67_109_888 + 2**30
    assert (gb200.physical_bytes, gb200.driver_reserved_bytes) == (189_471 * 2**20, 742 * 2**20)
    assert gb200.runtime_reserve_bytes == 742 * 2**20 + process == 2_585_527_296
    assert gb200.usable_bytes(True) == 188_729 * 2**20 - process == 196_089_216_000
    assert gb200.usable_bytes(False) == 186 * 10**9  # textbook: the datasheet's figure
    assert gb300.usable_bytes(True) == (284_208 - 947) * 2**20 - process == 295_213_202_432
    assert "qx-gb200.xml" in gb200.driver_source and "qx-gb300.xml" in gb300.driver_source


def test_capacity_is_what_the_driver_reports_on_every_captured_part():
    """The same rule on every part the captures cover (NVIDIA/k8s-test-infra
    tests/e2e/go/assertions/nvidiasmi/testdata/hardware at 5f8956ad, FB Memory Usage of every
    GPU): H100 80GB HBM3 (qx-h100.xml, driver 580.105.08) Total 81,559 MiB, Reserved 480 MiB;
    B200 (qx-b200.xml, 580.105.08) 183,359 and 728 MiB; A100-SXM4-40GB (qx-a100.xml,
    570.148.08) 40,960 and 518 MiB. Usable = (Total − Reserved) MiB less the process's
    1,807,483,904 B (CUDA context 666,632,192 B, cuBLAS 67,109,888 B, the 1 GiB allowance):
    H100 (81,079 MiB) 85,017,493,504 − 1,807,483,904 = 83,210,009,600 B = 83.21 GB (was 80 GiB
    less 361 MiB and the process, 83.71 GB: over-credited by the 480 MiB Reserved); B200
    (182,631 MiB) 191,502,483,456 − 1,807,483,904 = 189,694,999,552 B = 189.69 GB (was 180·10⁹
    less the old reserve, 177.81 GB); A100-40GB (40,442 MiB) 42,406,510,592 − 1,807,483,904 =
    40,599,026,688 B. A part without a capture keeps what an H100's driver keeps of its 80 GiB,
    81,920 − 81,079 = 841 MiB: the H800 (the H100's 80 GiB, no capture) gets exactly the H100's
    figure."""
    process = 666_632_192 + 67_109_888 + 2**30
    h100, b200, a100 = (get_accelerator(n) for n in ("H100-SXM", "B200", "A100-40GB"))
    assert (h100.physical_bytes, h100.driver_reserved_bytes) == (81_559 * 2**20, 480 * 2**20)
    assert h100.usable_bytes(True) == 81_079 * 2**20 - process == 83_210_009_600
    assert (b200.physical_bytes, b200.driver_reserved_bytes) == (183_359 * 2**20, 728 * 2**20)
    assert b200.usable_bytes(True) == 182_631 * 2**20 - process == 189_694_999_552
    assert (a100.physical_bytes, a100.driver_reserved_bytes) == (40_960 * 2**20, 518 * 2**20)
    assert a100.usable_bytes(True) == 40_442 * 2**20 - process == 40_599_026_688
    for part, capture in ((h100, "qx-h100.xml"), (b200, "qx-b200.xml"), (a100, "qx-a100.xml")):
        assert capture in part.driver_source
        assert part.usable_bytes(False) == part.memory_bytes  # textbook: the datasheet's figure
    h800 = get_accelerator("H800")
    assert (h800.physical_bytes, h800.driver_reserved_bytes, h800.driver_source) == (
        80 * 2**30,
        841 * 2**20,
        "",
    )
    assert h800.usable_bytes(True) == h100.usable_bytes(True)
    # what CUDA reports (cudaMemGetInfo's total), what vLLM's gpu_memory_utilization multiplies
    assert h100.cuda_total_bytes == h800.cuda_total_bytes == 81_079 * 2**20
    assert b200.cuda_total_bytes == 182_631 * 2**20


def test_driver_figures_go_together():
    with pytest.raises(ScenarioError, match="driver_reserved_mib and a non-empty driver_source"):
        _devices_from_text(GOOD + "driver_total_mib = 200000\n")
    capture = 'driver_total_mib = 200000\ndriver_reserved_mib = 700\ndriver_source = "x"\n'
    with pytest.raises(ScenarioError, match="hbm_gib or driver_total_mib"):
        _devices_from_text(GOOD + capture + "hbm_gib = 200\n")
    with pytest.raises(ScenarioError, match="at least memory_gb"):
        _devices_from_text(GOOD + capture.replace("200000", "10"))


def test_h200_and_h100_nvl_capacity_is_what_the_driver_reports():
    """Recorded ``nvidia-smi -a`` outputs, FB Memory Usage: one H200 under driver 550.90.12
    (thamada/gls gls/H200_smi.py at c0bed08d) Total 143,771 MiB, Reserved 700 MiB; two H100 NVL
    under 550.54.14 (thamada/nvidia-smi nvsim/H100NVLx2_smi.py at 198aebb6) 95,830 and 594 MiB.
    Usable = (Total − Reserved) MiB less the process's 1,807,483,904 B: H200 143,071 MiB =
    150,020,816,896 − 1,807,483,904 = 148,213,332,992 B = 148.21 GB (was the datasheet's 141·10⁹
    less an H100's 841 MiB and the process, 138.31 GB: the "141 GB" is about the total in GiB,
    140.4); H100 NVL 95,236 MiB = 99,862,183,936 − 1,807,483,904 = 98,054,700,032 B = 98.05 GB
    (was 91.31 GB from the datasheet's 94·10⁹)."""
    process = 666_632_192 + 67_109_888 + 2**30
    h200, nvl = get_accelerator("H200"), get_accelerator("H100-NVL")
    assert (h200.physical_bytes, h200.driver_reserved_bytes) == (143_771 * 2**20, 700 * 2**20)
    assert h200.usable_bytes(True) == 143_071 * 2**20 - process == 148_213_332_992
    assert (nvl.physical_bytes, nvl.driver_reserved_bytes) == (95_830 * 2**20, 594 * 2**20)
    assert nvl.usable_bytes(True) == 95_236 * 2**20 - process == 98_054_700_032
    assert "H200_smi.py" in h200.driver_source and "H100NVLx2_smi.py" in nvl.driver_source
    assert h200.usable_bytes(False) == 141 * 10**9 and nvl.usable_bytes(False) == 94 * 10**9
    assert h200.cuda_total_bytes == 143_071 * 2**20 and nvl.cuda_total_bytes == 95_236 * 2**20
