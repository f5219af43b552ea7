"""What the charts say and where their labels go: plain Python over the ``--json`` objects, no
matplotlib (:mod:`interface.plots` draws with these)."""

from __future__ import annotations

from typing import Any

__all__ = ["STATE_LEGEND", "MEMORY_PARTS", "tensor_label", "layout_key", "place_labels"]

STATE_LEGEND = {
    "kept": "checkpoint (kept)",
    "held": "held",
    "recomputed": "recomputed",
    "discarded": "discarded now",
    "free": "free",
}
"""Legend text of each tensor state (the text walk-through's C, #, R, x and .)."""


def tensor_label(report: dict[str, Any], j: int) -> str:
    """Name of tensor ``j`` of the checkpointing walk (0 … n), by layer outputs (``input``,
    ``out1`` …) or inputs (``in1`` … ``output``), as the text walk-through names it."""
    if report["labels"] == "outputs":
        return "input" if j == 0 else f"out{j}"
    return "output" if j == report["layers"] else f"in{j + 1}"


def layout_key(r: dict[str, Any], with_gpus: bool) -> str:
    """One frontier point's layout in full: degrees, ZeRO stage, recompute, micro-batch, schedule;
    a per-stage point (``frontier --per-stage``) adds its layers and fully recomputed layers per
    stage."""
    v = f" v{r['virtual_stages']}" if r["virtual_stages"] > 1 else ""
    gpus = f"{r['num_gpus']} × {r['gpu']}: " if with_gpus else ""
    per_stage = ""
    if r.get("stage_layers") is not None:  # a second line, indented under the first
        layers = "/".join(map(str, r["stage_layers"]))
        counts = "/".join(map(str, r["recompute_layers"]))
        per_stage = f"\n      per stage: layers {layers}, fully recomputed {counts}"
    return (
        f"{gpus}dp {r['dp']} tp {r['tp']} pp {r['pp']} cp {r['cp']} ep {r['ep']}, "
        f"ZeRO-{r['zero_stage']}, recompute {r['recompute']}, b {r['micro_batch_size']}, "
        f"{r['schedule']}{v}{per_stage}"
    )


OFFSETS = ((5, 4), (5, -12), (-14, 4), (-14, -12), (5, 14), (5, -22), (-14, 14), (-14, -22))
"""Label positions tried around a point, in points (right-above first)."""


def overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Whether two boxes (x, y, width, height) in display space overlap."""
    return not (
        a[0] + a[2] < b[0] or b[0] + b[2] < a[0] or a[1] + a[3] < b[1] or b[1] + b[3] < a[1]
    )


def place_labels(ax: Any, xs: list[float], ys: list[float], texts: list[str]) -> None:
    """Label each point where its label overlaps no earlier label and no marker: the first free
    offset of :data:`OFFSETS` (in display space), else the first offset."""
    fig = ax.figure
    fig.canvas.draw()  # fixes the axes' transform
    px_per_pt = fig.dpi / 72
    marks = [tuple(ax.transData.transform((x, y))) for x, y in zip(xs, ys, strict=True)]
    mark_boxes = [(mx - 4, my - 4, 8.0, 8.0) for mx, my in marks]
    taken: list[tuple[float, float, float, float]] = []
    for (x, y), (mx, my), text in zip(zip(xs, ys, strict=True), marks, texts, strict=True):
        size = ((6 * len(text) + 2) * px_per_pt, 10 * px_per_pt)
        chosen = OFFSETS[0]
        for dx, dy in OFFSETS:
            box = (mx + dx * px_per_pt, my + dy * px_per_pt, *size)
            if not any(overlaps(box, b) for b in (*taken, *mark_boxes)):
                chosen = (dx, dy)
                break
        taken.append((mx + chosen[0] * px_per_pt, my + chosen[1] * px_per_pt, *size))
        ax.annotate(
            text, (x, y), xytext=chosen, textcoords="offset points", fontsize=7, fontweight="bold"
        )


MEMORY_PARTS = (
    ("weights_bytes", "weights", "#4c78a8"),
    ("gradients_bytes", "gradients", "#72b7b2"),
    ("optimizer_bytes", "optimizer states", "#54a24b"),
    ("zero3_gathered_bytes", "gathered weights", "#b279a2"),
    ("buffers_bytes", "buffers", "#9d755d"),
    ("activations_bytes", "activations", "#f58518"),
    ("embedding_activations_bytes", "embedding/output activations", "#eeca3b"),
    ("recompute_transient_bytes", "recompute transient", "#e45756"),
    ("pipeline_output_bytes", "pipeline outputs kept", "#ff9da6"),
    ("optimizer_step_bytes", "optimizer step extra", "#bab0ac"),
)
"""The memory lines of the evaluate object stacked in the planner's bar, in the text's order."""
