"""Published runs against the cost model (``interface.fidelity``): the held-out errors of the
roofline time model beside the previous model's, the fitted efficiencies reproducible from the
calibration rows, every published layout fitting in memory with its paper's recipe, and
Korthikanti et al. 2022 Appendix B's per-stage activation figures for the 530B model. Sources
are named in ``interface/fidelity/published.py`` and ``docs/fidelity-published.md``. The goals of issue
16 are reported (``docs/fidelity-published.md``), not asserted: a missed goal is a finding."""

from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import pytest

from trainplan.interface.fidelity.memory import appendix_b_530b, llama3_memory_walk
from trainplan.interface.fidelity.published import (
    CALIBRATION_ROWS,
    build_run_case,
    evaluate_all,
    median_abs_error,
    published_runs,
    residuals,
)
from trainplan.interface.fidelity.report import goal_lines, markdown_report, summary_tables
from trainplan.model.layout import Layout
from trainplan.model.pipeline import interleaved_chunks_held, microbatches_in_flight
from trainplan.model.specs import TrainingSpec
from trainplan.model.terms.activations import stage_activations
from trainplan.scenarios.catalogue import get_model

GOAL_POINTS = 3.0  # issue 5: median |MFU error| on the held-out rows
RESULTS = evaluate_all()
IDS = [r.run.key for r in RESULTS]
GB = 1e9


def test_every_published_row_is_evaluated():
    keys = {r.key for r in published_runs()}
    assert len(keys) == 10 + 8 + 3  # Korthikanti Table 5: both columns
    assert CALIBRATION_ROWS < keys
    assert len(keys - CALIBRATION_ROWS) == 15


def test_held_out_median_error_meets_the_goal():
    assert median_abs_error(RESULTS, calibration=False) <= GOAL_POINTS


def test_roofline_improves_on_the_previous_model_where_it_was_held_out():
    """The roofline model's held-out Korthikanti Table 5 iteration times (all eight, none of
    them fitted) are closer to the paper than the previous model's, on average and at worst."""
    rows = [r for r in RESULTS if r.run.key.startswith("korthikanti-t5/")]
    assert len(rows) == 8 and not any(r.run.calibration for r in rows)
    new = [abs(r.time_error) for r in rows]
    old = [abs(r.previous_time_error) for r in rows]
    assert sum(new) < sum(old) and max(new) < max(old)


def test_residuals_report_the_former_calibration_rows_and_fit_nothing():
    """`--residuals` reports the step-time error of the rows that once calibrated the model,
    per generation, as the evaluation gives it: no figure is fitted to a published run."""
    out = residuals()
    expected = {r.run.key: round(100 * r.time_error, 2) for r in RESULTS if r.run.calibration}
    assert {k: v for rows in out.values() for k, v in rows.items()} == expected
    assert set(out) == {"A100", "H100"}


def test_goal_lines_name_every_goal_and_its_verdict():
    lines = goal_lines(RESULTS)
    assert len(lines) == 4
    assert all(("met" in line) for line in lines)
    assert "Calculon 3.65%, 8.87%" in lines[1]


# 16384-128k: 86,829,522,944 B before the context-parallel buffers were placed at the step where
# each phase holds them (model/terms/cp_phases.py) and dK/dV counted at the repeated heads
# (model/attention_core.py): −168,296,448 B, 86,661,226,496, still over; then NCCL's placed
# channels (below): −301,989,888 B, 86,359,236,608; then torchtitan's "batch" (dp 8, one rank a
# node) and "loss" (dp·cp 128) rings, 4 channels each, 2 × (48 + 28) MiB = +159,383,552 B; then
# NVLink SHARP (model/terms/nvls_memory.py): the tp 8 ring in a node 2 MiB of credits and
# 16 × 2 × (128 KiB × 8) × 8 = 256 MiB of buffers, the world ring (8 a node) 2 MiB of credits:
# +260 MiB = +272,629,760 B on both (88,511,987,712 and 86,535,397,376); then SDPA's FP32
# log-sum-exp, 4·(128/8)·8,192 = 524,288 B a layer and micro-batch (torchtitan's SDPA saves it
# compiled too: model/eager_saved.py): 141 × 524,288 = 73,924,608 B at 8K and 128 × 524,288 =
# 67,108,864 B at 128K, cp 16
CALLED_OVER = {"llama3-t4/8192": 88_585_912_320, "llama3-t4/16384-128k": 86_602_506_240}
"""Published runs the model calls "does not fit", with their peak bytes per GPU: Llama 3 405B
under FSDP beside the pipeline schedule holds the stage's gradients whole in FP32 until the last
micro-batch (PyTorch's ``PipelineStage`` turns gradient sync off; the Llama 3 paper §3.3.4 says
Meta accumulates them in FP32 over the micro-batches before the FP32 reduce-scatter), 12.75 GB
on the 8 layers of a stage, and NCCL's communicators with their channels' set-up, 1,176 MiB
(1,252 MiB at 128K; model/terms/comm_memory.py, derived in
test_llama3_8192_walk_one_mechanism_at_a_time: 48 MiB of it the pp group's ring, which
torchtitan's ``clip_grad_norm_`` opens to all-reduce the norm over the stages, and 292 MiB the
world ring of torchtitan's barrier after the first step, and 152 MiB torchtitan's "batch" and
"loss" groups, :func:`model.terms.comm_groups.data_rings`; NVLink SHARP's 260 MiB on top), and
one layer's backward working
set, 800 MiB (838,860,800 B, :data:`LLAMA3_BACKWARD_WORKING`); the 16,384-GPU 8K run fits
(82.16 GB), the 8,192-GPU run (m 32, more micro-batches in flight) and the 128K run do not, by
5.38 and 3.39 GB of the 83.21 GB usable: what Meta's stack holds less is not known. The
communicators moved both: 1,248 → 1,268 MiB (+20,971,520 B, 88.31 → 88.34 GB) and, at 128K,
1,632 → 1,344 MiB (cp 16's ring, one rank a node, 4 channels: 76 MiB instead of 384; dp 8 the
same; −301,989,888 B, 86.66 → 86.36 GB); then the "batch" and "loss" rings, one rank a node at
4 channels each, 2 × (48 + 28) = 152 MiB (+159,383,552 B: 88.34 → 88.50 GB, 86.36 → 86.52 GB);
then the pp group's ring on the pp group's own communicator, the one its sends use
(:func:`model.terms.comm_groups.group_rings`): its connections at the pp group's placement, one
rank a node, 4 channels, 48 MiB, set up with the sends' communicator, in place of 292 MiB
(−255,852,544 B: 88.50 → 88.24 GB, over by 5.03; 86.52 → 86.26 GB, over by 3.05); then NVLink
SHARP's credits and the tp ring's buffers, 260 MiB (+272,629,760 B: 88.24 → 88.51 GB, over by
5.30; 86.26 → 86.54 GB, over by 3.33); then SDPA's log-sum-exp (88.51 → 88.59 GB, over by 5.38;
86.54 → 86.60 GB, over by 3.39)."""

LLAMA3_BACKWARD_WORKING = (32 + 32 + 4 + 256 + 2 * 256 + 32 - (32 + 2 + 2 + 32)) * 2**20
"""One layer's backward working set of Llama 3 405B at s 8192, tp 8 with sequence parallelism
under fsdp2 (model/backward_working.py), MiB: its largest step, the QKV projection's backward,
holds the output gradient n = 2·s·h/t (32), dQ (32), dK and dV (2 + 2), the re-gathered norm
output 2·s·h (256), two whole input gradients (torchtitan's separate wq/wk/wv: 2 × 256) and the
reduce-scatter's output (32), less Q, K, V and the output projection's input it releases
(32 + 2 + 2 + 32): 800 MiB. It moved both runs' peaks up by 838,860,800 B (87.07 -> 87.91 and
85.55 -> 86.39 GB). The 128K run's context-parallel attention (all-gather flavour, cp 16) also
holds its forward's outputs until their merge (model/cp_outputs.py): the output O = 2·8,192·16,384/8
= 33,554,432 B and its log-sum-exp rows 4·8,192·128/8 = 524,288 B beyond what was counted,
86.39 -> 86.43 GB (86,392,791,040 + 34,078,720)."""


@pytest.mark.parametrize("res", RESULTS, ids=IDS)
def test_published_layout_fits(res):
    if res.run.key in CALLED_OVER:
        assert not res.fits and res.memory_bytes == CALLED_OVER[res.run.key]
        return
    assert res.fits, (res.run.key, res.memory_bytes / GB)


def test_llama3_8192_walk_one_mechanism_at_a_time():
    """Llama 3 405B, TP 8 PP 16 DP 64, s 8192, m 32, no recomputation: v = 4 holds 19.25
    micro-batches on rank 1 and does not fit; one-layer chunks with empty end chunks (v = 8,
    §3.3.2) hold 141 one-layer chunks; memory-efficient norms drop 2 of the layer's tensors,
    and still the layout does not fit by 5.38 GB (FSDP2 under the pipeline schedule holds the
    stage's gradients whole in FP32, and backward one layer's working set,
    :data:`CALLED_OVER`)."""
    v4, v8, v8_me = llama3_memory_walk()
    assert [w.fits for w in (v4, v8, v8_me)] == [False, False, False]
    assert v8_me.total_bytes == CALLED_OVER["llama3-t4/8192"]
    assert v4.microbatches_in_flight == 19.25
    assert v8.microbatches_in_flight == v8_me.microbatches_in_flight == 141 / 8
    # per layer and micro-batch, tp 8 with sequence parallelism (h 16384, g·d 1024, f 53248):
    s, t, h, gd, f = 8192, 8, 16384, 1024, 53248
    layer = (12 * h + 4 * gd + 6 * f) * s // t  # 2 B each: 2 norm inputs, QKV in, Q, out-proj
    # in, FC1 in (12·h); K, V (4·g·d); SwiGLU gate, up and down-projection input (6·f)
    assert layer == 532_676_608
    lean = layer - 4 * h * s // t  # without the two norm inputs
    lse = 4 * (128 // t) * s  # SDPA's FP32 log-sum-exp, a/t heads (model/eager_saved.py)
    assert lse == 524_288
    assert v8.activation_bytes == 141 * (layer + lse)
    assert v8_me.activation_bytes == 141 * (lean + lse)
    # model state on rank 1 (8 layers): FSDP2 with no reshard after forward under the pipeline
    # schedule holds 2 B bf16 weights and 4 B FP32 gradients whole (gradient sync off until the
    # last micro-batch), and the FP32 master and Adam moments as shards:
    # 2 + 4 + (4 + 8)/64 B per parameter on this GPU.
    # per layer: q and o 2·h·(a·d), k and v 2·h·(g·d), SwiGLU 3·h·f ÷ tp 8; the two RMSNorms
    # (2·h) whole on every tp rank
    layer_params = 2 * h * h + 2 * h * gd + 3 * h * f + 2 * h
    assert layer_params == 3_187_703_808
    per_gpu = Fraction(layer_params - 2 * h, t) + 2 * h
    state = (2 + 4 + Fraction(12, 64)) * per_gpu * 8
    # in backward one layer's bf16 gradients, accumulated into the whole FP32 ones: 2 B
    buffers = 2 * per_gpu
    # NCCL's communicators on a middle stage, each its ring's channels × 12 MiB and its set-up
    # (pow2Up(channels) × 3 + 2) × 2 MiB (model/terms/comm_memory.py group_channels): tp 8 in a
    # node, 24 channels, 288 + 196 = 484; dp 64 over 512 consecutive ranks, one a node, 4
    # channels, 48 + 28 = 76; the pp group's one communicator: the ring torchtitan's
    # clip_grad_norm_ all-reduces the norm over the stages on (one rank a node, 4 channels,
    # 4 × 12 = 48), two pipeline neighbours across nodes, 4 channels × 12 MiB each, and its
    # set-up (4 channels) 28; the world ring of torchtitan's barrier after step 1, 292;
    # torchtitan's "batch" (dp 64) and "loss" (dp·cp 64) groups, placed as the dp ring, 2 × 76;
    # NVLink SHARP (model/terms/nvls_memory.py): the tp 8 ring in a node 2 MiB of credits and
    # 16 × 2 × (128 KiB × 8) × 8 = 256 MiB of buffers, the world ring (8 a node) 2 of credits
    comm = (484 + 76 + 48 + 2 * 4 * 12 + 28 + 292 + 2 * 76 + 258 + 2) * 2**20
    assert comm == (1420 - 244 + 260) * 2**20
    # and the backward working set of one layer (800 MiB, :data:`LLAMA3_BACKWARD_WORKING`)
    work = LLAMA3_BACKWARD_WORKING
    assert work == 838_860_800
    assert v8_me.total_bytes - v8_me.activation_bytes == state + buffers + comm + work


# Appendix B's figures are a Megatron-LM measurement, and Megatron-LM reports memory in binary
# units (megatron/utils.py report_memory at 55ba1f7b, May 2022, the code of the paper: bytes ÷
# 1024², printed as "MB"), so the plot's GB are read as GiB. Tolerance: half a unit, the precision
# a value read off the per-rank plot has (±0.5 GiB, 3.8 % of 13.0); the last stage's small figure
# is held to 20 % (the same half unit is a third of it).
GIB = 2**30
READ_OFF = 0.5 * GIB


def test_appendix_b_first_stage():
    """The first stage holds 14.01 GB of activations as Appendix B counts them plus one
    layer's backward working set (model/backward_working.py, Megatron-LM without sequence
    parallelism or flash attention, s 2048, h 20480, a 128, tp 8): the core attention's backward
    step holds the layer's output gradient n = 2·s·h (83,886,080 B), the output projection's
    input, Q and K, V gradients (4 × 2·s·h/t = 41,943,040 B) and the gradients of the
    probabilities and scores 2 × 2·(a/t)·s·s (268,435,456 B): 394,264,576 B, 14.40 GB in all:
    13.41 GiB against the paper's 13.0 GiB (0.41 GiB over, within the plot's half unit); with
    the outputs deallocated 10.68 GiB against 10.5 GiB."""
    b = appendix_b_530b()
    s, h, a, t = 2048, 20480, 128, 8
    work = 2 * s * h + 4 * 2 * s * h // t + 2 * 2 * (a // t) * s * s
    assert work == 394_264_576
    assert b.first_stage_bytes == 14_008_975_360 + work
    assert abs(b.first_stage_bytes - 13.0 * GIB) <= READ_OFF
    assert abs(b.first_stage_deallocated_bytes - 10.5 * GIB) <= READ_OFF


def test_appendix_b_deallocation_frees_one_output_per_microbatch_in_flight():
    b = appendix_b_530b()
    s, h, p = 2048, 20480, 35
    assert b.first_stage_bytes - b.first_stage_deallocated_bytes == 2 * s * h * p
    assert b.per_stage_bytes[-1] == b.per_stage_deallocated_bytes[-1]  # the last stage sends none


def test_appendix_b_last_stage_and_linear_decrease():
    b = appendix_b_530b()
    assert b.last_stage_bytes / GIB == pytest.approx(1.5, rel=0.20)
    steps = [x - y for x, y in zip(b.per_stage_bytes[:-2], b.per_stage_bytes[1:-1], strict=True)]
    assert len(set(steps[1:])) == 1  # one micro-batch fewer per rank: 4 × 2·s·b·h
    assert steps[1] == 4 * 2 * 2048 * 20480


def test_deallocation_default_keeps_todays_figures():
    arch = get_model("megatron-529.6b").model.arch
    t = TrainingSpec(seq_len=2048, global_batch_size=35, flash_attention=False)
    lay = Layout(tp=8, pp=35, recompute="full", sequence_parallel=False)
    a = stage_activations(arch, (0, 1, 2), 0, lay, t)
    assert a.pipeline_output_bytes == 0
    kept = stage_activations(arch, (0, 1, 2), 0, lay.with_(deallocate_pipeline_outputs=False), t)
    assert kept.total_bytes - a.total_bytes == 2 * 2048 * 20480 * 35


@pytest.mark.parametrize("pp,m,v", [(4, 8, 2), (8, 64, 3), (35, 280, 3), (16, 32, 4)])
def test_interleaved_chunks_held_equal_chunks_matches_closed_form(pp, m, v):
    for stage in range(pp):
        held = interleaved_chunks_held(pp, m, v, stage, (1,) * v)
        assert sum(held) == microbatches_in_flight(pp, m, "interleaved", v, stage) * v


def test_uneven_interleaved_first_stage_counts_its_small_first_chunk():
    # Llama 3 405B, 126 layers in 64 chunks: rank 0 holds chunks of 1, 2, 2, 2 layers; the
    # warm-up runs 16 forwards of each, then 15 more of the 1-layer chunk: 127 layer-micro-batches.
    assert interleaved_chunks_held(16, 32, 4, 0, (1, 2, 2, 2)) == (31, 16, 16, 16)


def test_doc_is_current():
    doc = Path(__file__).resolve().parents[1] / "docs" / "fidelity-published.md"
    assert doc.read_text() == markdown_report(RESULTS)


def test_empty_last_chunk_still_holds_the_output_layer():
    """Llama 3 at v = 8: the last stage's last chunk has no layer but holds the output layer's
    activations (fp32 logits 4·S·V/t and the final norm and projection inputs), and the peak is
    found by bytes, so one micro-batch of it is counted. Meta's pipeline frees the stage's
    outputs (``pipeline_frees_stage_tensors``): none of PyTorch's ``output_chunks`` are kept."""
    run = next(r for r in published_runs() if r.key == "llama3-t4/8192")
    est = build_run_case(run).evaluate()
    last = est.stages[-1].activations
    s, t, h, V = 8192, 8, 16384, 128256
    assert last.embedding_bytes == 4 * s * V // t + 2 * 2 * s * h // t  # one micro-batch


def test_the_manuals_tables_state_the_goals_and_every_row():
    """The tables docs/fidelity.md shows (``python -m trainplan.interface.fidelity --goals``;
    ``tests/prose_figures.py`` holds the page's block to it): Calculon's columns from its
    validation command's errors (CALCULON_TABLE5), selective 3.33, 0.81, 8.87, 7.62 → mean
    20.63 / 4 = 5.16 %, max 8.87 %; all eight, with the full column's 1.72, 0.56, 1.72, 4.60,
    29.23 / 8 = 3.65 %; then one row per run, the paper's own figure beside both models'
    errors."""
    lines = summary_tables(RESULTS)
    assert lines[2].endswith("| 5.16 % / 8.87 % |") and lines[3].endswith("| 3.65 % / 8.87 % |")
    assert lines[2].startswith("| Korthikanti Table 5, selective + SP, mean / max")
    rows = lines[lines.index("| row | published | single model | roofline model | role |") + 2 :]
    assert len(rows) == len(RESULTS) == 21
    k22 = next(r for r in RESULTS if r.run.key == "korthikanti-t5/22B")
    assert rows[10] == (
        "| Korthikanti Table 5: 22B, 8 GPUs, selective | 1.10 s | "
        f"{k22.previous_error_points:+.1f} pts, {100 * k22.previous_time_error:+.1f}% time | "
        f"{k22.error_points:+.1f} pts, {100 * k22.time_error:+.1f}% time | held out |"
    )
    assert rows[0].startswith("| Megatron-LM Table 1: 1.7B, 32 GPUs | 43.9% HFU |")
    assert rows[0].endswith("| calibration |")


def test_the_gap_sections_claims_hold():
    """What docs/fidelity-published.md's "Remaining gap" prose (:func:`gap_section`) and
    docs/fidelity.md say in words, held to the figures: every Korthikanti Table 5 row predicted
    too slow, the error rising with the model in both columns, the 530B's bubble about the
    175B's, and the measured MFU rising further from the 22B to the 530B than the model's; the
    roofline model closer to the papers than the single model on every held-out measure and only
    Llama 3's goal met. A change that breaks one fails here: re-word the prose, then this test."""
    for full in (False, True):
        rows = [r for r in RESULTS if r.run.paper == "Korthikanti Table 5"]
        rows = [r for r in rows if r.run.key.endswith("-full") == full]
        errors = [r.time_error for r in rows]
        assert all(e > 0 for e in errors) and errors == sorted(errors), errors
    r175, r530 = (
        next(r for r in RESULTS if r.run.key == f"korthikanti-t5/{m}") for m in ("175B", "530B")
    )
    share = [r.estimate.time_terms.bubble_s / r.estimate.step_s for r in (r175, r530)]
    assert abs(share[1] - share[0]) < 0.01
    r22 = next(r for r in RESULTS if r.run.key == "korthikanti-t5/22B")
    assert (
        r530.run.published_util / r22.run.published_util > r530.predicted_util / r22.predicted_util
    )
    # docs/fidelity.md: the roofline model closer than the single one on every held-out measure
    # (the goals table's two columns), and only Llama 3's goal met
    for line in summary_tables(RESULTS)[2:7]:
        single, roofline = (
            [float(x) for x in re.findall(r"[\d.]+", cell)] for cell in line.split(" | ")[1:3]
        )
        assert all(r < s for r, s in zip(roofline, single, strict=True)), line
    assert [("NOT met" not in line) for line in goal_lines(RESULTS)] == [False, False, False, True]


def test_a_set_key_evaluates_every_run_with_it(capsys):
    """``--set`` is what a mechanism moves: NCCL's SM charge off returns Korthikanti Table 5 to
    its figures before the charge reached A100 (8b1e770b: selective 6.0 % / 12.2 %, all eight
    6.4 % / 12.2 %; 5.8 % / 11.2 % and 6.2 % / 11.2 % since the 1T's 1F1B bubble is the order's
    own, model.pipeline_onef; selective 5.7 % / 11.2 % since the interleaved rows' bubble is
    Megatron-Core's order on their chunks as timed, model.pipeline_uneven, the 175B and 530B
    rows 0.1 point closer; 5.4 % / 11.2 % selective since Megatron-Core's own optimizer-step
    passes, model.step_passes, slowed the too-fast rows; 5.6 % / 11.2 % since the rows' clip
    scales only above the limit, grad_clip_scaling above_limit: the 22B selective row, +0.1 %
    with every-step scaling, runs 1.1 % fast without it, and --set grad_clip_scaling=every_step
    gives 5.4 % back; Megatron-LM Table 1 unmoved, its 2021 code overlapping no collective), and
    says it is not the model's defaults. Bad input is one line naming the key, exit 2."""
    from trainplan.interface.fidelity.__main__ import main

    assert main(["--goals", "--set", "nccl_sm_charge=false"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Every run with --set nccl_sm_charge=false: not the model's defaults."
    assert "| 5.6 % / 11.2 % | 5.16 % / 8.87 %" in out[4] and "| 6.2 % / 11.2 %" in out[5]
    assert out[6] == summary_tables(RESULTS)[4]  # Megatron-LM Table 1 held out
    assert main(["--set", "gemm_efficiency=2"]) == 2
    assert capsys.readouterr().err == (
        "python -m trainplan.interface.fidelity: error: --set gemm_efficiency: 2 must be a "
        "fraction of the peak from 0.01 to 1 (a fraction from 0 to 1, or a percent such as 40%)\n"
    )
