"""The published-runs report (``python -m trainplan.interface.fidelity [--markdown]``): every row
under the roofline time model beside the previous single-efficiency model, calibration and
held-out rows marked, the goals checked, and the memory sections of
:mod:`interface.fidelity.memory`. ``docs/fidelity-published.md`` is this page.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from trainplan.interface.fidelity.memory import appendix_b_530b, llama3_memory_walk
from trainplan.interface.fidelity.published import (
    CALCULON_TABLE5,
    CALIBRATION_ROWS,
    MEGATRON_SCRIPT,
    RunResult,
    evaluate_all,
)
from trainplan.interface.render.report import table_text
from trainplan.model.roofline import (
    GEMM_EFFICIENCY_BY_GENERATION,
    RooflineParams,
    gemm_efficiency,
    roofline_params_for,
)
from trainplan.model.timing import (
    ATTENTION_EFFICIENCY_BY_GENERATION,
    DEFAULT_OVERLAP,
    KERNEL_EFFICIENCY_BY_GENERATION,
    KERNEL_EFFICIENCY_HALF_HIDDEN,
)

__all__ = [
    "GOALS",
    "table",
    "summary",
    "goal_lines",
    "summary_tables",
    "text_report",
    "markdown_report",
]

GOALS = {
    "korthikanti_mean_pct": 3.0,
    "korthikanti_max_pct": 8.0,
    "points": 2.0,
}
"""Issue 16's goals: Korthikanti Table 5 held-out iteration time mean |error| ≤ 3 %, max ≤ 8 %;
Megatron-LM Table 1 and Llama 3 Table 4 held-out rows within 2 points of utilisation."""


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f}"


def _gib(x: float) -> str:
    return f"{x / 2**30:.1f}"


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _err(points: float, time: float) -> str:
    return f"{points:+.1f} pts, {_pct(time)} time"


def table(results: Sequence[RunResult]) -> tuple[list[str], list[list[str]]]:
    """(header, rows): each run's published figure, the previous and the roofline model's
    prediction and error (points of utilisation, and % of step time), role, memory."""
    head = [
        "row",
        "recipe",
        "published",
        "previous model",
        "roofline model",
        "error, previous",
        "error, roofline",
        "role",
        "memory GB",
        "fits",
    ]
    body = []
    for res in results:
        r = res.run
        fmt = "{:.2f}" if r.published_unit == "s/iter" else "{:.0f}"
        body.append(
            [
                f"{r.paper}: {r.label}",
                r.recipe,
                f"{fmt.format(r.published_value)} {r.published_unit} "
                f"({100 * r.published_util:.1f}% {r.metric.upper()})",
                f"{fmt.format(res.previous_value)} ({100 * res.previous_util:.1f}%)",
                f"{fmt.format(res.predicted_value)} ({100 * res.predicted_util:.1f}%)",
                _err(res.previous_error_points, res.previous_time_error),
                _err(res.error_points, res.time_error),
                "calibration" if r.calibration else "held out",
                f"{_gb(res.memory_bytes)} / {_gb(res.estimate.capacity_bytes)}",
                "yes" if res.fits else "NO",
            ]
        )
    return head, body


def _korthikanti(results: Sequence[RunResult], full: bool | None) -> list[RunResult]:
    return [
        r
        for r in results
        if r.run.paper == "Korthikanti Table 5"
        and (full is None or r.run.key.endswith("-full") == full)
    ]


def _time_stats(rows: Sequence[RunResult], previous: bool = False) -> tuple[float, float]:
    errs = [abs(r.previous_time_error if previous else r.time_error) for r in rows]
    return 100 * statistics.fmean(errs), 100 * max(errs)


def _calculon_stats(full: bool | None) -> tuple[float, float]:
    errs = [
        abs(delta)
        for deltas in CALCULON_TABLE5.values()
        for k, delta in enumerate(deltas)
        if full is None or (k == 0) == full
    ]
    return statistics.fmean(errs), max(errs)


def _held_out_points(results: Sequence[RunResult], paper: str, previous: bool = False) -> float:
    return max(
        abs(r.previous_error_points if previous else r.error_points)
        for r in results
        if r.run.paper == paper and not r.run.calibration
    )


def goal_lines(results: Sequence[RunResult]) -> list[str]:
    """Each goal of :data:`GOALS`, met or not, with the previous model's figure beside it."""
    out = []
    for name, full in (("selective + SP", False), ("all eight", None)):
        rows = _korthikanti(results, full)
        mean, worst = _time_stats(rows)
        pmean, pworst = _time_stats(rows, previous=True)
        cmean, cworst = _calculon_stats(full)
        met = mean <= GOALS["korthikanti_mean_pct"] and worst <= GOALS["korthikanti_max_pct"]
        out.append(
            f"Korthikanti Table 5 ({name}, held out): iteration time mean |error| {mean:.1f}%, "
            f"max {worst:.1f}% (goal ≤ {GOALS['korthikanti_mean_pct']:g}%, ≤ "
            f"{GOALS['korthikanti_max_pct']:g}%: {'met' if met else 'NOT met'}); previous model "
            f"{pmean:.1f}%, {pworst:.1f}%; Calculon {cmean:.2f}%, {cworst:.2f}%"
        )
    for paper in ("Megatron-LM Table 1", "Llama 3 Table 4"):
        worst = _held_out_points(results, paper)
        prev = _held_out_points(results, paper, previous=True)
        met = worst <= GOALS["points"]
        out.append(
            f"{paper} held-out rows: largest |error| {worst:.1f} points (goal ≤ "
            f"{GOALS['points']:g}: {'met' if met else 'NOT met'}); previous model {prev:.1f}"
        )
    return out


def _both(stats: tuple[float, float], digits: int = 1) -> str:
    return f"{stats[0]:.{digits}f} % / {stats[1]:.{digits}f} %"


def summary_tables(results: Sequence[RunResult]) -> list[str]:
    """The goals under both models beside Calculon's, then each row's published figure and both
    models' errors: Markdown lines, the tables ``docs/fidelity.md`` shows (``python -m
    trainplan.interface.fidelity --goals``; :func:`goal_lines` says the same in words)."""
    lines = [
        "| measure (target) | single model | roofline model | Calculon |",
        "| --- | --- | --- | --- |",
    ]
    for name, full in (("selective + SP", False), ("all eight", None)):
        rows = _korthikanti(results, full)
        measure = (
            f"Korthikanti Table 5, {name}, mean / max \\|time error\\| "
            f"(≤ {GOALS['korthikanti_mean_pct']:g} % / ≤ {GOALS['korthikanti_max_pct']:g} %)"
            if full is False
            else f"Korthikanti Table 5, {name}"
        )
        lines.append(
            f"| {measure} | {_both(_time_stats(rows, previous=True))} | "
            f"{_both(_time_stats(rows))} | {_both(_calculon_stats(full), 2)} |"
        )
    for paper in ("Megatron-LM Table 1", "Llama 3 Table 4"):
        lines.append(
            f"| {paper} held out, largest \\|error\\| (≤ {GOALS['points']:g} points) | "
            f"{_held_out_points(results, paper, previous=True):.1f} | "
            f"{_held_out_points(results, paper):.1f} | — |"
        )
    held = [r for r in results if not r.run.calibration]
    lines += [
        "| median \\|error\\|, held-out utilisation rows | "
        f"{statistics.median(abs(r.previous_error_points) for r in held):.1f} points | "
        f"{statistics.median(abs(r.error_points) for r in held):.1f} points | — |",
        "",
        "| row | published | single model | roofline model | role |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        run = r.run
        published = (
            f"{run.published_value:.2f} s"
            if run.published_unit == "s/iter"
            else f"{100 * run.published_util:.1f}% {run.metric.upper()}"
        )
        lines.append(
            f"| {run.paper}: {run.label} | {published} | "
            f"{_err(r.previous_error_points, r.previous_time_error)} | "
            f"{_err(r.error_points, r.time_error)} | "
            f"{'calibration' if run.calibration else 'held out'} |"
        )
    return lines


def summary(results: Sequence[RunResult]) -> list[str]:
    """The report's summary lines: goals, medians, defaults of both models, calibration rows."""
    p = RooflineParams(gemm_efficiency=0.5)
    held = [r for r in results if not r.run.calibration]
    lines = goal_lines(results) + [
        "median |error| on held-out utilisation rows: "
        f"{statistics.median(abs(r.error_points) for r in held):.1f} points (previous model "
        f"{statistics.median(abs(r.previous_error_points) for r in held):.1f})",
        "roofline model (model.roofline): GEMM efficiency e·k/(k + k₀) × the GEMM's tile and "
        "wave share over the part's SMs with e "
        + ", ".join(f"{k} {v:g}" for k, v in GEMM_EFFICIENCY_BY_GENERATION.items())
        + " (fitted on the former calibration rows before published runs were kept for "
        "validation only, then re-expressed with the wave share counted per GEMM; the fit is "
        "retired: `python -m trainplan.interface.fidelity --residuals` reports those rows' "
        "errors; the per-operation anchors of model.gemm_anchors are not in force, as they make "
        "every published run faster: docs/time-model-sources.md section 2); "
        "the attention core at its kernel's published rate by chunk length, head dims and mask "
        "(FlashAttention-2 on A100, cuDNN under Transformer Engine on Hopper and Blackwell; "
        "model.op_rates), else 0.35 of peak on Hopper; "
        f"HBM {p.hbm_efficiency:g} (the optimizer step at the part's STREAM triad), "
        f"NVLink {p.scaleup_efficiency:g}, "
        f"scale-out {p.scaleout_efficiency:g} of nominal; NCCL latencies; {p.kernel_overhead_s * 1e6:g} µs "
        "per kernel",
        "previous model (model.timing, `--set time_model=single`): kernel efficiency e∞·h/(h + h₀) "
        "with e∞ "
        + ", ".join(f"{k} {v:g}" for k, v in KERNEL_EFFICIENCY_BY_GENERATION.items())
        + f", h₀ {KERNEL_EFFICIENCY_HALF_HIDDEN}; FlashAttention core "
        + ", ".join(f"{k} {v:g}" for k, v in ATTENTION_EFFICIENCY_BY_GENERATION.items())
        + "; overlap "
        + ", ".join(f"{k} {v:g}" for k, v in DEFAULT_OVERLAP.items()),
        "calibration rows (both models): " + ", ".join(sorted(CALIBRATION_ROWS)),
        f"layouts that fit: {sum(r.fits for r in results)} of {len(results)}",
    ]
    return lines


def _gemm_share(r: RunResult) -> float:
    """e(k)/e_GEMM of the row's row-parallel GEMMs, depth k = h/tp
    (:func:`model.roofline.gemm_efficiency`), 0–1."""
    est = r.estimate
    assert est.model.arch is not None and est.device.hbm_bytes_per_s is not None
    p = roofline_params_for(est.device.name)
    k = est.model.arch.hidden_size / est.layout.tp
    eff = gemm_efficiency(k, est.device.peak_flops_per_s, est.device.hbm_bytes_per_s, p)
    return eff / p.gemm_efficiency


def _bubble_share(r: RunResult) -> str:
    """The bubble's share of the predicted step, as a percentage with one decimal."""
    assert r.estimate.time_terms is not None and r.estimate.step_s
    return f"{r.estimate.time_terms.bubble_s / r.estimate.step_s:.1%}"


def gap_section(results: Sequence[RunResult]) -> list[str]:
    """Where the Korthikanti Table 5 gap comes from: the selective rows' time error against the
    hidden size, the bubble's share of the predicted step, and the roofline GEMM efficiency of
    the row-parallel GEMMs (depth k = h/tp) relative to its cap e_GEMM
    (:func:`model.roofline.gemm_efficiency`). Markdown lines; every figure of the prose is read
    off ``results`` (its claims — every row too slow, the error rising with h — are held by
    ``tests/test_fidelity_published.py``)."""
    head = "| row | h | tp × pp | k = h/tp | e(k)/e_GEMM | bubble share | MFU published / model | time error |"
    lines = [
        "## Remaining gap and its cause",
        "",
        head,
        "|" + "---|" * (head.count("|") - 1),
    ]
    sel = _korthikanti(results, False)
    for r in sel:
        arch, lay = r.estimate.model.arch, r.estimate.layout
        assert arch is not None
        lines.append(
            f"| {r.run.label} | {arch.hidden_size:,} | {lay.tp} × {lay.pp} | "
            f"{arch.hidden_size / lay.tp:,.0f} | {_gemm_share(r):.3f} | {_bubble_share(r)} | "
            f"{100 * r.run.published_util:.1f}% / {100 * r.predicted_util:.1f}% | "
            f"{100 * r.time_error:+.1f}% |"
        )
    r22, r175, r530, r1t = sel

    def util(r: RunResult, published: bool) -> str:
        return f"{100 * (r.run.published_util if published else r.predicted_util):.1f} %"

    lines += [
        "",
        "Two effects. (1) Every row is predicted too slow, and from the 22B to the 530B the "
        "error grows with the hidden size at fixed tp 8 and s 2,048: "
        f"{100 * r22.time_error:+.1f} % on the 22B (no pipeline, no bubble), "
        f"{100 * r175.time_error:+.1f} % on the 175B, {100 * r530.time_error:+.1f} % on the "
        f"530B, whose bubble is about the 175B's ({_bubble_share(r530)} of its step against "
        f"{_bubble_share(r175)}); the full-recomputation rows follow the same trend ("
        + ", ".join(f"{100 * r.time_error:+.1f} %" for r in _korthikanti(results, True))
        + "). The roofline's GEMM rule rises with a GEMM's depth k = h/tp, from "
        f"{_gemm_share(r22):.3f} of the cap e_GEMM on the 22B to {_gemm_share(r530):.3f} on the 530B (column "
        f"above), and the model's MFU with it, {util(r22, False)} → {util(r530, False)}; the "
        f"measured MFU rises further, {util(r22, True)} → {util(r530, True)}. The cap e_GEMM "
        "is fitted on the calibration rows (Megatron-LM Table 1 under the 2021 code, and "
        "Llama 3's 8K row); these rows are held out. Each GEMM's m·n tile count over the SMs "
        "(tile and wave quantisation, docs/concepts/time-model.md) is in the model and the trend "
        "remains. (2) The 1T row adds the pipeline: pp 64, m 512 and no interleaving (as "
        "Calculon's validation runs it; the paper does not state v for 1T) give a bubble of "
        f"{_bubble_share(r1t)} of the predicted step, and the last stage — two layers plus the output "
        "layer, whose logits GEMMs (6·s·h·V/tp) add about 8 % to that stage — paces the "
        f"pipeline. The measured MFU is the 530B's ({util(r1t, True)} against "
        f"{util(r530, True)}), so the real run lost less to the pipeline than the closed form "
        "gives; with v 2 the bubble would halve.",
    ]
    return lines


def text_report(results: Sequence[RunResult] | None = None) -> str:
    """The report for the terminal."""
    results = results or evaluate_all()
    head, body = table(results)
    b = appendix_b_530b()
    out = [table_text([dict(zip(head, row, strict=True)) for row in body]), "", *summary(results)]
    out.append(
        "Korthikanti Appendix B, 530B activations per GPU: first stage "
        f"{_gib(b.first_stage_bytes)} GiB (paper ≈ {b.published_first_gib}), with output "
        f"deallocation {_gib(b.first_stage_deallocated_bytes)} GiB (≈ "
        f"{b.published_first_deallocated_gib}), last stage {_gib(b.last_stage_bytes)} GiB "
        f"(≈ {b.published_last_gib})"
    )
    return "\n".join(out) + "\n"


def markdown_report(results: Sequence[RunResult] | None = None) -> str:
    """The page ``docs/fidelity-published.md``."""
    results = results or evaluate_all()
    head, body = table(results)
    lines = [
        "# Fidelity against published runs",
        "",
        "Generated by `python -m trainplan.interface.fidelity --markdown`; checked by "
        "`tests/test_fidelity_published.py`. Every configuration of `scenarios/published.toml` "
        "is evaluated with the layout and recipe its paper states, under the roofline time "
        "model (the default for the physical profiles) and, beside it, the previous "
        "single-efficiency model (`--set time_model=single`), so a change shows what it bought. "
        "*util* is the paper's own utilisation: HFU for Megatron-LM Table 1 (Eq. 3 hardware "
        "FLOPs / time), MFU for Korthikanti (Appendix A model FLOPs) and Llama 3 (6·N + causal "
        "attention). Errors are predicted − published: points of utilisation, and % of step "
        "time (for a utilisation row the time is implied, ∝ 1/util). Calibration rows are the "
        "rows the efficiencies were fitted on; every other row is held out.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    lines += ["", "## Summary", ""] + [f"- {s}" for s in summary(results)]
    lines += ["", *gap_section(results)]
    lines += ["", *_memory_sections()]
    lines += ["", "## Conventions", ""] + [f"- {c}" for c in CONVENTIONS]
    return "\n".join(lines) + "\n"


def _memory_sections() -> list[str]:
    b = appendix_b_530b()
    lines = [
        "## Korthikanti et al. Appendix B: 530B activations per pipeline stage",
        "",
        "| stage | model (GiB) | paper (≈ GiB, read off the figure) |",
        "|---|---|---|",
        f"| first, outputs kept | {_gib(b.first_stage_bytes)} | {b.published_first_gib} |",
        f"| first, outputs deallocated | {_gib(b.first_stage_deallocated_bytes)} | "
        f"{b.published_first_deallocated_gib} |",
        f"| last | {_gib(b.last_stage_bytes)} | {b.published_last_gib} |",
        "",
        "Assumptions:",
        "",
    ]
    lines += [f"- {a}" for a in b.assumptions]
    walk = llama3_memory_walk()
    lines += [
        "",
        "## Llama 3 405B on 8,192 GPUs: what brings the published layout toward a fit",
        "",
        "TP 8, PP 16, DP 64, s 8192, b 1, m 32, no activation checkpointing, FSDP as ZeRO-2 "
        "(§3.3.2 and Table 4). One mechanism at a time, peak per GPU on the busiest stage:",
        "",
        "| recipe | source | busiest stage | micro-batches in flight | layer activations GB | "
        "total GB | fits 80 GB |",
        "|---|---|---|---|---|---|---|",
    ]
    for w in walk:
        lines.append(
            f"| {w.recipe} | {w.source} | {w.busiest_stage} | {w.microbatches_in_flight:.3f} | "
            f"{_gb(w.activation_bytes)} | {_gb(w.total_bytes)} | {'yes' if w.fits else 'NO'} |"
        )
    stage_input_only = (walk[1].total_bytes + walk[2].total_bytes) / 2
    lines += [
        "",
        "The last recipe is the one the Table 4 rows above use. It is an inference: §3.3.2 says "
        "the input and output tensors of each pipeline stage are deallocated, and a stage's input "
        "can only be freed when the layer's first norm does not keep it; memory-efficient norms "
        "(both of each layer's norms, as Apex and Megatron-LM apply them) are the mechanism "
        "modelled. Freeing only each one-layer chunk's input (half the saving: one of the two "
        f"equal norm inputs) would give {_gb(stage_input_only)} GB. "
        "Per layer and micro-batch "
        "(tp 8 with sequence parallelism, paper convention) a Llama 3 405B layer keeps "
        "(12·h + 4·g·d + 6·f)·s/t and SDPA's FP32 log-sum-exp 4·(a/t)·s = "
        f"{walk[1].activation_bytes / 141 / 1e6:.1f} MB; "
        "memory-efficient norms drop the two 2·s·h/t norm inputs "
        f"({walk[2].activation_bytes / 141 / 1e6:.1f} MB). Rank 1 holds 2·(16 − 2) + 7·16 + 1 = "
        "141 one-layer chunks at the peak (17.6 micro-batches of its 8 layers): "
        f"{_gb(walk[2].activation_bytes)} GB, plus "
        f"{_gb(walk[2].total_bytes - walk[2].activation_bytes)} GB of model state (FP32 "
        "gradients sharded over DP 64), communicators and one layer's backward working set. "
        f"That is {_gb(walk[2].total_bytes - walk[2].capacity_bytes)} GB over the usable "
        "capacity: the run fitted, so Meta's stack holds less than these recipes count by at "
        "least that much, by a mechanism the paper does not name. "
        "Not modelled: Llama 3's tunable number of consecutive "
        "micro-batches per chunk round (N ≥ PP in their Figure 6, which would hold more).",
    ]
    return lines


CONVENTIONS = (
    "Megatron-LM Table 1: §5.1 uses the interleaved schedule with scatter/gather; micro-batch "
    f"and v per row from {MEGATRON_SCRIPT} (b 16, 16, 16, 8, 4, 2, 2, 1, 1, 1; v 3, 2, 2, 3 for "
    "76B, 145B, 310B, 530B, 1 elsewhere); fp16 with 16 B/param model state, no ZeRO (DDP "
    "all-reduce); full recomputation; TP without sequence parallelism; no FlashAttention; "
    "A100-80GB links 300 GB/s NVLink, 25 GB/s scale-out per GPU (Selene: 8 HDR NICs per node). "
    "Roofline mechanisms of the 2021 code: every tensor-parallel all-reduce waits "
    "(tp_comm_overlap none) and the gradient all-reduce follows the last backward "
    "(grad_reduce_overlap false); the clip scales only above the limit and the loss scale is "
    "undone every step (grad_clip_scaling above_limit, loss_scaling true).",
    "Korthikanti Table 5: both columns, selective recomputation + sequence parallelism and "
    "full recomputation (tensor parallelism without sequence parallelism, pipeline sends split "
    "over tp as Megatron-LM then did), b and B of Table 3, dp 1, v 3 for 175B and 530B; MFU "
    "from the iteration time with Appendix A model FLOPs; the 2022 code overlaps the backward "
    "tensor-parallel collectives with the gradient GEMMs (tp_comm_overlap async) and its clip "
    "scales only above the limit (grad_clip_scaling above_limit). Calculon's "
    "figures are its own validation command's output, for reference.",
    "Llama 3 Table 4: FSDP that shards optimizer states and gradients and keeps weights "
    "gathered between forward and backward is modelled as ZeRO-2 with FP32 gradients (§3.3.2: "
    "FP32 accumulation and reduce-scatter; 2 B weights + 16/D B per parameter); "
    "no activation checkpointing; v = 8 (§3.3.2's first chunk holding only the embedding means "
    "one-layer chunks: 126 layers + 2 empty end chunks = 16 × 8; the stages hold 7, 8 × 14, 7 "
    "layers); memory-efficient norms (§3.3.2 frees each stage's input tensor, which only a norm "
    "that keeps its output instead of its input allows); b = 1 so m = batch per DP rank "
    "(32, 16, 16); MFU = (6·N + causal attention FLOPs) / (time × G × 989.4 TFLOP/s); context "
    "parallelism all-gathers K and V, exposed (§3.3.2; cp_kind all-gather).",
    "Roofline model: each operation of each layer (GEMMs by shape, the attention core, norms, "
    "activations, dropout, residual adds, router and permutation, embedding, output layer and "
    "cross-entropy; model.ops) at max(FLOPs / (peak × e(k)), bytes / (HBM × e_HBM)) + t_kernel; "
    "tp, cp and ep collectives with NCCL's latency and bandwidth over their link, overlapped by "
    "mechanism (model.layer_time); the slowest stage paces m micro-batches × (1 + bubble_ratio); "
    "pipeline messages, data-parallel traffic by mechanism and the optimizer step added "
    "(model.step_time). Previous model: hardware FLOPs at one kernel efficiency, one overlap "
    "fraction per axis (model.timing).",
)
