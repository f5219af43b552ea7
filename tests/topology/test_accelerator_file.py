"""An accelerator described in a file (``--gpu PATH.toml``, :mod:`topology.accelerator_file`):
the table's keys read by the table's loader, a ``base`` part's figures for the keys the file
leaves out, ``like`` naming the catalogue part whose per-part rates stand for it, every figure
with its source; and the cost model reading the file's figures (hand derivations below)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest

from trainplan.api import evaluate
from trainplan.model.errors import ScenarioError
from trainplan.model.frameworks import DEFAULT_RUNTIME_RESERVE_BYTES, DRIVER_RESERVED_BYTES
from trainplan.topology.accelerator_file import part_file_row, part_from_table, read_part_file
from trainplan.topology.accelerators import catalogue_row, get_accelerator

ROOT = Path(__file__).resolve().parents[2]
A3_HIGH = str(ROOT / "scenarios" / "gpus" / "h100-a3-high.toml")
H100_600W = {"base": "H100-SXM", "name": "H100-600W", "bf16_tflops": 900, "source": "our measurement"}  # fmt: skip
OWN = {"name", "source", "status", "like", "origin", "fp8_source", "bandwidth_source",
       "host_source", "driver_source"}  # fmt: skip
"""DeviceSpec fields a file part holds of its own even where its figures are its base's."""


def part(table: dict, where: str = "test") -> object:
    return part_from_table(table, where, "the test's table")[0]


def write(tmp_path: Path, text: str, name: str = "part.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_example_file_is_the_h100_with_its_own_scale_out():
    """``scenarios/gpus/h100-a3-high.toml`` gives ``scaleout_gbps = 12.5`` (Google Cloud's A3
    High: four 200 Gb/s GPU NICs for eight GPUs, 800/8 = 100 Gb/s = 12.5 GB/s per GPU); every
    other figure is the H100-SXM row's, and its per-part rates are the H100-SXM's."""
    a3, h100 = read_part_file(A3_HIGH), get_accelerator("H100-SXM")
    assert (a3.name, a3.part, a3.origin, a3.status) == (
        "H100-A3-High",
        "H100-SXM",
        A3_HIGH,
        "derived",
    )
    assert a3.scaleout_bytes_per_s == 800e9 / 8 / 8 == 12.5e9
    for f in fields(h100):
        if f.name not in OWN | {"scaleout_bytes_per_s"}:
            assert getattr(a3, f.name) == getattr(h100, f.name), f.name


def test_each_figure_says_whose_it_is():
    """The file's keys are headed by its source; the base's keep the base's, said as the
    base's: the scale-out figure is Google's, the peak NVIDIA's datasheet's as the H100-SXM row
    gives it, the HBM and host link the row's ``bandwidth_source``."""
    a3, h100 = read_part_file(A3_HIGH), catalogue_row("H100-SXM")
    assert a3.source.startswith("scaleout_gbps: Google Cloud, Compute Engine")
    assert a3.source.endswith(f"; the other figures the H100-SXM's: {h100['source']}")
    assert a3.bandwidth_source == f"the H100-SXM's: {h100['bandwidth_source']}"
    assert a3.fp8_source == f"the H100-SXM's: {h100['fp8_source']}"
    row = part_file_row(A3_HIGH)
    assert (row["file"], row["base"], row["like"]) == (A3_HIGH, "H100-SXM", "H100-SXM")
    assert row["given"] == ["base", "name", "scaleout_gbps", "source", "status"]
    assert (row["scaleout_gbps"], row["nvlink_gbps"], row["bf16_tflops"]) == (12.5, 450, 989.4)


def test_the_brief_example_a_power_capped_h100():
    """``base = "H100-SXM"``, ``name = "H100-600W"``, ``bf16_tflops = 900``, ``source = "our
    measurement"``: the peak is 900e12 FLOP/s, status ``derived`` (the base's figures, one
    replaced), the FP8 peak still the base's, said so."""
    p = part(H100_600W)
    assert (p.peak_flops_per_s, p.status, p.part) == (900e12, "derived", "H100-SXM")
    assert p.source.startswith("bf16_tflops: our measurement; the other figures the H100-SXM's")
    assert p.fp8_flops_per_s == 1978.9e12 and p.fp8_source.startswith("the H100-SXM's: FP8 1,978.9")


def test_a_capacity_given_drops_the_bases_driver_capture():
    """The H100-SXM row's driver capture (81,559 MiB, 480 MiB reserved) measured its 80 GB; a
    file giving ``memory_gb = 96`` has 96·10⁹ bytes as stated, the default driver reserve
    (841 MiB, an H100's of its 80 GiB) and so the default runtime reserve: usable
    96·10⁹ − 2,689,336,320."""
    p = part({**H100_600W, "memory_gb": 96})
    assert (p.memory_bytes, p.hbm_bytes, p.driver_source) == (96 * 10**9, None, "")
    assert p.driver_reserved_bytes == DRIVER_RESERVED_BYTES == 841 * 2**20
    assert p.usable_bytes() == 96 * 10**9 - DEFAULT_RUNTIME_RESERVE_BYTES
    assert DEFAULT_RUNTIME_RESERVE_BYTES == 2_689_336_320


def test_a_figure_with_a_source_of_its_own_needs_it():
    """``hbm_tbps`` stands under ``bandwidth_source``: given alone it is refused (the base's
    source is of its own 3.35 TB/s); with one, the host link it leaves keeps the base's
    figure, and the source says so."""
    with pytest.raises(ScenarioError, match=r"^t: hbm_tbps needs bandwidth_source beside it"):
        part({**H100_600W, "hbm_tbps": 4.0}, "t")
    p = part({**H100_600W, "hbm_tbps": 4.0, "bandwidth_source": "our STREAM run"})
    assert (p.hbm_bytes_per_s, p.host_link_bytes_per_s) == (4e12, 64e9)
    assert p.bandwidth_source.startswith("our STREAM run; host_link_gbps the H100-SXM's: NVIDIA")
    with pytest.raises(ScenarioError, match="power_source is given without power_w"):
        part({**H100_600W, "power_source": "x"})


def test_without_a_base_like_is_required_and_read_as_the_table_spells_it():
    """A part like nothing named would fall back to a default generation unsaid: ``like`` (or
    ``base``) is required, and names a catalogue part."""
    own = {"name": "Z1", "memory_gb": 100, "memory_unit": "GB", "bf16_tflops": 1000,
           "dense": True, "source": "vendor sheet", "status": "vendor"}  # fmt: skip
    with pytest.raises(ScenarioError, match=r"^t: missing key 'like' \(or 'base'\): the catalogue"):
        part(own, "t")
    assert part({**own, "like": "mi355x"}).part == "MI355X"
    with pytest.raises(ScenarioError, match=r"^t: like 'Z9' is not in the accelerator table"):
        part({**own, "like": "Z9"}, "t")
    with pytest.raises(ScenarioError, match=r"^t: base 'x.toml' must name a part of the"):
        part({**own, "base": "x.toml"}, "t")
    with pytest.raises(ScenarioError, match=r"^t: missing required key 'status'"):
        part({k: v for k, v in own.items() if k != "status"} | {"like": "B200"}, "t")


def test_a_file_part_has_a_name_of_its_own():
    with pytest.raises(ScenarioError, match=r"name 'h100-sxm' is the accelerator table's H100-SXM"):
        part({**H100_600W, "name": "h100-sxm"})
    with pytest.raises(ScenarioError, match="has a bracket, which marks a what-if part"):
        part({**H100_600W, "name": "H100[x]"})


def test_a_power_capped_like_part_keeps_its_own_clock_only():
    """``H100-96GB-500W`` runs at 0.896 of its 989.4 rating (model.op_rates.SUSTAINED_CLOCK):
    a file on that base that changes neither the peak nor the power keeps it; one that gives
    its own peak is refused (the fraction derates the catalogue rating, not the file's)."""
    base = {"base": "H100-96GB-500W", "name": "Grand-Teton-2", "source": "s", "nvlink_domain": 8}
    assert part(base).part == "H100-96GB-500W"
    with pytest.raises(ScenarioError, match=r"like H100-96GB-500W runs its tensor cores at 0.896"):
        part({**base, "bf16_tflops": 880})


def test_a_part_never_loses_its_derating_silently():
    """A derated base under another ``like`` would run at the rated 989.4 TFLOP/s, 1/0.896 =
    1.116× the base's sustained rate (9.2 % less step time on Llama 3 8B); a ``power_w``
    without its ``bf16_tflops`` would be read by no term. Both refused; with the sustained
    peak given, the part is the file's."""
    base = {"base": "H100-96GB-500W", "like": "H100-SXM", "name": "U", "source": "s"}
    with pytest.raises(
        ScenarioError, match=r"base H100-96GB-500W runs .* at 0.896 .* like H100-SXM would drop"
    ):
        part(base)
    assert part({**base, "bf16_tflops": 886.5}).peak_flops_per_s == 886.5e12
    with pytest.raises(ScenarioError, match=r"power_w 500 is shown, not read by the time model"):
        capped = {k: v for k, v in H100_600W.items() if k != "bf16_tflops"}
        part({**capped, "power_w": 500, "power_source": "cap"})


def test_files_with_one_part_each(tmp_path):
    two = '[[accelerator]]\nbase = "H100-SXM"\nname = "A"\nsource = "s"\n' * 2
    with pytest.raises(ScenarioError, match=r"holds 2 \[\[accelerator\]\] tables; a file"):
        read_part_file(write(tmp_path, two))
    with pytest.raises(ScenarioError, match="not valid TOML"):
        read_part_file(write(tmp_path, "[[accelerator]\n"))
    with pytest.raises(ScenarioError, match="nothing is there"):
        read_part_file(str(tmp_path / "missing.toml"))


def test_a_part_equal_to_its_base_plans_as_its_base(tmp_path):
    """Nothing but a name over ``base = "H100-SXM"``, and every figure of the H100-SXM row
    restated with ``like = "H100-SXM"`` (its capacity as the vendor states it, 80·10⁹ B): the
    same step time, to the last bit, as the catalogue part (the per-part rates are the
    H100-SXM's through ``like``, every figure the same)."""
    h100 = catalogue_row("H100-SXM")
    restated = {k: v for k, v in h100.items() if not k.startswith("driver_")} | {
        "name": "H100-restated",
        "like": "H100-SXM",
    }
    text = "[[accelerator]]\n" + "".join(f"{k} = {v!r}\n" for k, v in restated.items())
    text = text.replace("True", "true").replace("'", '"')
    args = dict(model="llama3-8b", dp=2, tp=4, global_batch_size=64)
    want = evaluate(gpu="H100-SXM", **args)
    for table in ('[[accelerator]]\nbase = "H100-SXM"\nname = "Same"\nsource = "s"\n', text):
        got = evaluate(gpu=write(tmp_path, table), **args)
        assert got.step_s == want.step_s and got.mfu == want.mfu


def test_like_chooses_the_calibrated_generation():
    """``like = "A100-80GB"`` on the H100's figures: the GEMM efficiency is the A100
    generation's 0.6996 (model.roofline.GEMM_EFFICIENCY_BY_GENERATION), said so; ``like =
    "MI355X"`` has no calibrated generation, and the output says the H100's is borrowed."""
    h100 = {k: v for k, v in catalogue_row("H100-SXM").items() if not k.startswith("driver_")}
    for like, said in (("A100-80GB", "e = 0.6996 fitted on A100"),
                       ("MI355X", "e = 0.5725 the H100's, no calibration")):  # fmt: skip
        p = part({**h100, "name": "P", "like": like})
        est = evaluate(model="llama3-8b", gpu=p, dp=8, global_batch_size=64)
        text = " ".join(a for a in _assumptions(est))
        assert said in text, like
    assert "no calibrated generation, so the H100's efficiencies, borrowed" in text


def _assumptions(est) -> list[str]:
    from trainplan.interface.render.assumptions import assumptions

    return assumptions(est)


def test_a_slower_nic_costs_exactly_its_bandwidth():
    """Llama 3 70B on 64 GPUs at tp 8 × pp 2: dp 4 crosses four nodes, one rank each, so its
    reduce-scatter + all-gather rides the NIC: latency + bytes / (link × 0.96, the scale-out
    efficiency). The same bytes and latency on both parts, so the A3 High's time less the
    H100-SXM's is bytes × (1/(12.5e9 · 0.96) − 1/(50e9 · 0.96)) = bytes × 0.0625e-9."""
    args = dict(model="llama3-70b", num_gpus=64, tp=8, pp=2)
    sxm, a3 = (
        next(t for t in evaluate(gpu=g, **args).traffic if t.traffic.axis == "dp")
        for g in ("H100-SXM", A3_HIGH)
    )
    assert sxm.traffic.bytes_per_step == a3.traffic.bytes_per_step == 19_849_383_936
    assert (sxm.link, a3.link) == ("scale-out", "scale-out")
    want = a3.traffic.bytes_per_step * (1 / (12.5e9 * 0.96) - 1 / (50e9 * 0.96))
    assert a3.seconds - sxm.seconds == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(1.240586496, rel=1e-12)


def test_the_files_peak_is_the_mfu_peak():
    """MFU (6n) = 6 · N · B · s / (G · peak · step): the 600 W part's 900e12 FLOP/s, not the
    H100-SXM's 989.4e12."""
    est = evaluate(model="llama3-8b", gpu=part(H100_600W), dp=8, global_batch_size=64)
    n, tokens = est.num_params, 64 * 8192
    assert est.mfu == pytest.approx(6 * n * tokens / (8 * 900e12 * est.step_s), rel=1e-12)
