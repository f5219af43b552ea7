"""DeepEP's and HybridEP's dispatch and combine inside one NVLink domain at their kernels'
published bandwidth (model.ep_kernels). Figures: deepseek-ai/DeepEP docs/legacy.md at dd758ca
(H800 intranode, EP 8: 153 GB/s FP8 dispatch, 158 GB/s BF16 combine) and branch hybrid-ep
94a9f8f6b1 docs/README_Hybrid-EP.md (kernel-only, BF16: B200 EP 8 at 16 SMs 734.95 / 673.84;
GB200 at 16 SMs EP 8 750.15 / 684.27, EP 16 661.93 / 600.75, EP 36 612.85 / 543.27), both
counted as the bytes a rank receives, its own rows included (tests/legacy/test_intranode.py
``nvl_recv_bytes``; tests/test_hybrid_ep.py ``nvl_dispatch``). Every time derived by hand."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from tests.archs import one_moe_layer
from trainplan.model.ep_kernels import kernel_rates, kernel_seconds
from trainplan.model.layer_time import ep_all_to_all_seconds
from trainplan.model.moe import expected_distinct_nodes
from trainplan.model.moe_run import MoERun
from trainplan.model.op_time import Clock
from trainplan.model.ops import LayerShape
from trainplan.model.roofline import Collective, LinkTime, RooflineParams, collective_seconds
from trainplan.topology.accelerator_file import accelerator_of

P = RooflineParams(gemm_efficiency=0.6)


def test_deepep_h800_ep8_at_its_combine_rate_both_ways():
    """DeepSeek-V3's 4,096 tokens a rank at EP 8 on H800, k 8 of 256 experts: a token reaches
    R = 8·(1 − C(224, 8)/C(256, 8)) = 5.294652 ranks, so a rank receives 4,096·R rows of
    7,168 BF16 (14,336 bytes) = 310.90 MB, its own included. DeepEP publishes the BF16 combine
    at 158 GB/s and the dispatch in FP8 only: the BF16 dispatch borrows 158. Each way
    310.90 MB / 158 GB/s = 1,967.7 µs — against NCCL's rule, 11.8 µs + 272.04 MB (the 7/8 sent
    to others) / (0.8 · 200 GB/s) = 1,712.05 µs, 181.6 GB/s as DeepEP counts: 15 % faster
    than DeepEP's own kernel, which the rule no longer times. Forward: a dispatch and a combine;
    backward: their transposes (a combine and a dispatch). The forward dispatch's rows carry
    the token's 8 int64 indices and 8 float32 weights beside it, 96 bytes, the backward
    combine's the weights' gradient, 32 (intranode.cu; DeepEP's benchmark timed a cached
    dispatch and a weightless combine, whose rows carry neither): 1,980.9 and 1,972.1 µs."""
    r = float(expected_distinct_nodes(256, 8, 8))
    assert r == pytest.approx(5.294652, abs=1e-6)
    received = 4096 * r * 14336
    assert received / 1e6 == pytest.approx(310.90, abs=0.01)
    rates = kernel_rates("deepep", "H800", 200e9, 8)
    assert rates is not None and rates.at(8) == (158e9, 158e9)
    assert "BF16 combine" in rates.borrowed
    link = LinkTime(200e9, True)
    x = LayerShape(one_moe_layer(256), True, 4096, 1, 1, ep=8, moe_run=MoERun(dispatcher="deepep"))
    fwd, bwd = ep_all_to_all_seconds(
        x, Clock(989e12, 3.35e12, P, ep_link=link, ep_kernel=rates.at(8)), False
    )
    assert received / 158e9 * 1e6 == pytest.approx(1967.7, abs=0.05)
    dispatch, combine = (received * (14336 + e) / 14336 / 158e9 for e in (96, 32))
    assert (dispatch * 1e6, combine * 1e6) == pytest.approx((1980.9, 1972.1), abs=0.05)
    assert fwd == pytest.approx(dispatch + received / 158e9, rel=1e-12)
    assert bwd == pytest.approx(combine + received / 158e9, rel=1e-12)
    nccl, _ = ep_all_to_all_seconds(x, Clock(989e12, 3.35e12, P, ep_link=link), False)
    one = collective_seconds(Collective.ALL_TO_ALL, 8, received * 7 / 8, link, P)
    first = collective_seconds(Collective.ALL_TO_ALL, 8, received * 7 / 8 * 14432 / 14336, link, P)
    assert nccl == pytest.approx(first + one) and one * 1e6 == pytest.approx(1712.05, abs=0.01)


def test_hybridep_b200_ep8_kernel_only_each_direction():
    """HybridEP on B200, EP 8 with 8 experts a rank (64, k 8): R = 8·(1 − C(56, 8)/C(64, 8))
    = 5.432551 ranks; a rank receives 4,096·R·14,336 = 319.00 MB, 434.04 µs at the
    kernel-only 734.95 GB/s BF16 dispatch and 473.41 µs at the 673.84 GB/s combine (NCCL's
    rule: 11.8 µs + 279.13 MB / 720 GB/s = 399.5 µs each way). The benchmark's rows carried
    their probability row, 8 experts × 8 ranks × 4 = 256 bytes, in both (test_hybrid_ep.py:
    a dispatch with probabilities, a combine with them): the kernels moved 14,592/14,336 of the
    counted bytes, 748.07 and 685.87 GB/s. This layout is the benchmark's: the forward dispatch
    and the backward combine (rows with their probabilities) take the published 434.04 and
    473.41 µs; the forward combine and the backward dispatch (rows without) 465.10 and 426.43."""
    r = 8 * (1 - math.comb(56, 8) / math.comb(64, 8))
    assert float(expected_distinct_nodes(64, 8, 8)) == pytest.approx(r, rel=1e-12)
    assert r == pytest.approx(5.432551, abs=1e-6)
    received = 4096 * r * 14336
    rates = kernel_rates("hybridep", "B200", 900e9, 8)
    moved = 14592 / 14336
    assert rates is not None and not rates.borrowed
    assert rates.at(8) == pytest.approx((734.95e9 * moved, 673.84e9 * moved), rel=1e-12)
    assert (rates.at(8)[0] / 1e9, rates.at(8)[1] / 1e9) == pytest.approx(
        (748.07, 685.87), abs=0.005
    )
    d, c = kernel_seconds(received * 7 / 8 * moved, 8, rates.at(8)) or (0.0, 0.0)
    assert (d * 1e6, c * 1e6) == pytest.approx((434.04, 473.41), abs=0.01)
    bare_d, bare_c = kernel_seconds(received * 7 / 8, 8, rates.at(8)) or (0.0, 0.0)
    assert (bare_c * 1e6, bare_d * 1e6) == pytest.approx((465.10, 426.43), abs=0.01)
    x = LayerShape(one_moe_layer(64), True, 4096, 1, 1, ep=8, moe_run=MoERun(dispatcher="hybridep"))
    clock = Clock(2.25e15, 8e12, P, ep_link=LinkTime(900e9, True), ep_kernel=rates.at(8))
    fwd, bwd = ep_all_to_all_seconds(x, clock, False)
    assert (fwd, bwd) == (pytest.approx(d + bare_c), pytest.approx(c + bare_d))
    nccl = collective_seconds(Collective.ALL_TO_ALL, 8, received * 7 / 8, LinkTime(900e9, True), P)
    assert nccl * 1e6 == pytest.approx(399.5, abs=0.05)


def test_gb200_rows_at_the_charged_sms_between_and_beyond_published_sizes():
    """GB200 publishes EP 8 to 36 at 16 and 32 SMs; the model charges HybridEP 24 SMs in one
    domain (DeepEP's ``Configurer`` default), so the 16-SM rows are read, each as the bytes its
    kernels moved: rows of 14,336 bytes with 8 × ep float32 probabilities beside them, × 14,592
    / 14,336 at EP 8, 14,848 / 14,336 at EP 16, 15,488 / 14,336 at EP 36. EP 12 lies
    log2(12/8) = 0.58496 of the way from EP 8 to 16: dispatch 763.55 − 0.58496·(763.55 −
    685.57) = 717.93 GB/s, combine 696.49 − 0.58496·(696.49 − 622.21) = 653.04; EP 64 (one NVL72
    domain) holds EP 36's 612.85 / 543.27 × 15,488 / 14,336 = 662.10 / 586.93."""
    rates = kernel_rates("hybridep", "GB200", 900e9, 72)
    assert rates is not None and "16 SMs" in rates.source
    at8 = (750.15 * 14592 / 14336, 684.27 * 14592 / 14336)
    at16 = (661.93 * 14848 / 14336, 600.75 * 14848 / 14336)
    assert at8 == pytest.approx((763.55, 696.49), abs=0.005)
    assert at16 == pytest.approx((685.57, 622.21), abs=0.005)
    d, c = rates.at(12)
    f = math.log2(12 / 8)
    assert d / 1e9 == pytest.approx(at8[0] - f * (at8[0] - at16[0]), rel=1e-12)
    assert c / 1e9 == pytest.approx(at8[1] - f * (at8[1] - at16[1]), rel=1e-12)
    assert (d / 1e9, c / 1e9) == pytest.approx((717.93, 653.04), abs=0.005)
    held = rates.at(64)
    assert held == pytest.approx((612.85e9 * 15488 / 14336, 543.27e9 * 15488 / 14336))
    assert (held[0] / 1e9, held[1] / 1e9) == pytest.approx((662.10, 586.93), abs=0.005)


def test_parts_without_a_row_borrow_and_say_so():
    """B300 and GB300 read B200's and GB200's rows (same 900 GB/s NVLink and domain); DeepEP
    on H100 (450 GB/s) scales H800's 158 by 450/200 = 355.5 GB/s; HybridEP on H100 scales
    B200's by 450/900: 367.475 / 336.92. HybridEP's, as its kernels moved them, × 14,592 /
    14,336 (EP 8) and 14,848 / 14,336 (EP 16): the benchmark's rows carried their
    probabilities. The NCCL all-to-all has no kernel rates."""
    b300 = kernel_rates("hybridep", "B300", 900e9, 8)
    gb300 = kernel_rates("hybridep", "GB300", 900e9, 72)
    at8, at16 = 14592 / 14336, 14848 / 14336
    assert b300 is not None and "B200's" in b300.borrowed
    assert b300.at(8) == pytest.approx((734.95e9 * at8, 673.84e9 * at8), rel=1e-12)
    assert gb300 is not None
    assert gb300.at(16) == pytest.approx((661.93e9 * at16, 600.75e9 * at16), rel=1e-12)
    h100 = kernel_rates("deepep", "H100-SXM", 450e9, 8)
    assert h100 is not None and h100.at(8) == pytest.approx((355.5e9, 355.5e9))
    hy = kernel_rates("hybridep", "H100-SXM", 450e9, 8)
    assert hy is not None and hy.at(8) == pytest.approx((367.475e9 * at8, 336.92e9 * at8))
    assert kernel_rates("alltoall", "H800", 200e9, 8) is None
    assert kernel_seconds(1e9, 8, None) is None and kernel_seconds(1e9, 1, (1.0, 1.0)) is None


def test_a_job_on_part_of_an_nvl72_rack_and_a_file_part_read_the_racks_rows():
    """A job on 64 GPUs of each NVL72 rack (``nvlink_domain`` 64, Slurm ``--segment=16``) runs
    on the same multi-node NVLink fabric as on all 72: GB300 borrows GB200's HybridEP rows, not
    the 8-GPU B200 board's (EP 16: 661.93 / 600.75 GB/s × 14,848 / 14,336, as on 72); a part
    from a file is looked up by the catalogue part it names (``like``), not by its file name."""
    at16 = 14848 / 14336
    for domain in (64, 72):
        gb300 = kernel_rates("hybridep", "GB300", 900e9, domain)
        assert gb300 is not None and gb300.borrowed.startswith("GB200's"), domain
        assert gb300.at(16) == pytest.approx((661.93e9 * at16, 600.75e9 * at16), rel=1e-12)
    gb200 = accelerator_of("GB200")
    mine = replace(gb200, name="my-gb200", like="GB200")
    assert mine.part == "GB200"
    own = kernel_rates("hybridep", mine.part, mine.nvlink_bytes_per_s, mine.nvlink_domain)
    assert own is not None and own.borrowed == ""
    assert own == kernel_rates("hybridep", "GB200", gb200.nvlink_bytes_per_s, 72)


def test_the_rows_measured_systems_are_the_accelerator_tables():
    """The NVLink figures a borrowing part is scaled by are the accelerator table's for the
    measured part (topology/accelerators.toml)."""
    from trainplan.scenarios.kernel_data import collective_data
    from trainplan.topology.accelerators import get_accelerator

    rows = [
        r
        for r in collective_data().expert_all_to_all
        if r.link == "nvlink" and r.library in ("deepep-v1-normal", "hybridep")
    ]
    assert {r.part for r in rows} == {"H800", "B200", "GB200"}
    for r in rows:
        a = get_accelerator(r.part)
        assert r.nvlink_gbps is not None
        assert (r.nvlink_gbps * 1e9, r.nvlink_domain) == (a.nvlink_bytes_per_s, a.nvlink_domain)
