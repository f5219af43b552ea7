"""Hardware what-ifs: a catalogue part with figures multiplied is a new value with a name saying
what changed; the catalogue is untouched; a part renamed but not changed answers as the part."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest

from trainplan.interface.inputs import build_case
from trainplan.model.errors import InputError, PlannerError
from trainplan.topology.accelerators import get_accelerator, load_accelerators
from trainplan.topology.what_if import what_if_label, what_if_part

H100 = get_accelerator("H100-SXM")


def test_hbm_capacity_scales_the_stated_and_the_physical_bytes():
    # The H100's "80 GB" is 80·10^9 stated; its driver reports 81,559 MiB (accelerators.toml
    # driver_total_mib): ×1.5 is 120·10^9 stated, 122,338.5 MiB physical; usable = that less the
    # runtime reserve, which stays the part's: its driver's 480 MiB + the CUDA context
    # 666,632,192 B + cuBLAS 67,109,888 B + the 1 GiB allowance = 2,310,800,384 B.
    big = what_if_part(H100, {"hbm_capacity": Fraction(3, 2)})
    assert big.name == "H100-SXM[hbm×1.5]"
    assert big.memory_bytes == 120 * 10**9
    assert big.physical_bytes == 81_559 * 3 * 2**19
    assert big.usable_bytes() == 81_559 * 3 * 2**19 - 2_310_800_384
    assert big.status == "derived" and "what-if" in big.source
    assert big.peak_flops_per_s == H100.peak_flops_per_s  # nothing else changed


def test_the_catalogue_is_never_changed():
    before = dict(load_accelerators())
    what_if_part(H100, {"peak_flops": Fraction(2), "nvlink_domain": Fraction(9)})
    assert load_accelerators() == before
    assert get_accelerator("H100-SXM") == H100


def test_each_what_if_multiplies_its_figures():
    # H100-SXM: 989.4 TFLOP/s BF16, 1,978.9 FP8, HBM 3.35 TB/s, NVLink 450 GB/s per direction
    # in domains of 8, scale-out 50 GB/s (accelerators.toml).
    part = what_if_part(
        H100,
        {
            "peak_flops": Fraction(2),
            "hbm_bandwidth": Fraction(3, 2),
            "nvlink_domain": Fraction(9),
            "nvlink_bandwidth": Fraction(2),
            "scaleout_bandwidth": Fraction(4),
        },
    )
    assert part.peak_flops_per_s == pytest.approx(2 * 989.4e12)
    assert part.fp8_flops_per_s == pytest.approx(2 * 1978.9e12)
    assert part.hbm_bytes_per_s == pytest.approx(1.5 * 3.35e12)
    assert part.nvlink_domain == 72
    assert part.nvlink_bytes_per_s == pytest.approx(2 * H100.nvlink_bytes_per_s)
    assert part.scaleout_bytes_per_s == pytest.approx(4 * H100.scaleout_bytes_per_s)
    assert part.name == "H100-SXM[hbm_bw×1.5,nvlink×9,nvlink_bw×2,scaleout_bw×4,flops×2]"


def test_a_part_without_fp8_keeps_none():
    a100 = what_if_part(get_accelerator("A100-80GB"), {"peak_flops": Fraction(2)})
    assert a100.fp8_flops_per_s is None
    assert a100.peak_flops_per_s == pytest.approx(2 * 312e12)


def test_times_one_is_the_catalogue_part_itself():
    assert what_if_part(H100, {"hbm_capacity": Fraction(1)}) is H100
    assert what_if_label("H100-SXM", {"hbm_capacity": Fraction(1)}) == "H100-SXM"


@pytest.mark.parametrize(
    ("gpu", "what", "m", "message"),
    [
        ("H100-SXM", "nvlink_domain", Fraction(3, 10), "×0.3 of the H100-SXM's 8 GPUs is 2.4"),
        ("MI250X", "nvlink_domain", Fraction(2), "the MI250X has no nvlink_domain"),
        (
            "H100-SXM",
            "hbm_capacity",
            Fraction(1, 100),
            "no memory above its 2.15 GiB runtime reserve",
        ),
        ("H100-SXM", "hbm_capacity", Fraction(0), "0 must be a multiplier above 0"),
        ("H100-SXM", "memory", Fraction(2), "unknown key 'memory'"),
    ],
)
def test_refusals_name_the_what_if_and_the_rule(gpu, what, m, message):
    with pytest.raises(InputError, match="what_if") as err:
        what_if_part(get_accelerator(gpu), {what: m})
    assert message in str(err.value)


def _step(device):
    # the links given, as some rows lack them (MI300X: no scale-out figure)
    params = {"model": "llama3-8b", "gpu": device, "tp": 8, "dp": 1, "global_batch_size": 16}
    params.update(nvlink_domain=8, nvlink_gbps=100, scaleout_gbps=50)
    est = build_case(params).evaluate()
    return est.step_s, est.peak.total_bytes


@pytest.mark.parametrize("name", list(load_accelerators()))
def test_a_renamed_part_answers_as_the_part(name):
    # The cost model looks calibrated efficiencies up by the name before the first "-"; a what-if
    # name keeps the catalogue name in front, so a part renamed without a change answers the same.
    part = load_accelerators()[name]
    try:
        want = _step(name)
    except PlannerError:
        pytest.skip(f"{name}: llama3-8b at tp 8 is refused on the part itself")
    assert _step(replace(part, name=what_if_label(name, {"peak_flops": Fraction(2)}))) == want


def test_a_what_if_part_changes_the_answer_as_its_figure_says():
    # Twice the peak: the GEMMs' time halves, so the step is faster but not twice as fast
    # (communication and memory-bound kernels stay).
    base, _ = _step(H100)
    fast, _ = _step(what_if_part(H100, {"peak_flops": Fraction(2)}))
    assert base / 2 < fast < base
