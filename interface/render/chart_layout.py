"""What the charts say and where their labels go: plain Python over the ``--json`` objects, no
matplotlib (:mod:`interface.render.plots` draws with these)."""

from __future__ import annotations

from typing import Any

__all__ = [
    "STATE_LEGEND",
    "MEMORY_PARTS",
    "memory_bars",
    "tensor_label",
    "layout_key",
    "place_labels",
    "fitted_legend",
    "staircase",
    "chunk_letter",
    "pass_label",
]

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


def chunk_letter(chunk: int) -> str:
    """Model chunk ``chunk`` (0, 1, …) of a stage as the timelines name it: ``a``, ``b``, … (``z``
    and beyond count on as ``c26``…). Chunk c of stage i holds virtual stage c·p + i
    (Narayanan et al. 2021 §2.2.2; Megatron-LM ``get_model_chunk_id``)."""
    return chr(ord("a") + chunk) if chunk < 26 else f"c{chunk}"


def pass_label(slot: dict[str, Any], chunks: int, kind: bool = True) -> str:
    """A timeline slot's label: ``F3`` (forward of micro-batch 3), ``B3`` (its backward); with
    ``chunks`` > 1 the model chunk's letter follows (``F3a``, ``B3b``). ``kind=False`` leaves out
    the F/B (the picture says it by colour)."""
    head = ("F" if slot["pass"] == "forward" else "B") if kind else ""
    tail = chunk_letter(slot.get("chunk", 0)) if chunks > 1 else ""
    return f"{head}{slot['microbatch']}{tail}"


def staircase(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    """The line of a Pareto frontier (both axes minimised) through its points: the best step
    time within each budget of the second axis. Points are taken in ascending ``x``; point i's
    level ``y_i`` runs from its own ``x_i`` right to the next point's ``x``, where the line drops
    to that point's (lower) level. No level reaches left of its point: a budget below ``x_i``
    cannot buy ``y_i``.

    Returns
    -------
    (list[float], list[float])
        The vertices, to draw with straight segments.
    """
    order = sorted(range(len(xs)), key=lambda i: (xs[i], ys[i]))
    sx: list[float] = []
    sy: list[float] = []
    for k, i in enumerate(order):
        if k:
            sx.append(xs[i])
            sy.append(ys[order[k - 1]])
        sx.append(xs[i])
        sy.append(ys[i])
    return sx, sy


OFFSETS = ((5, 4), (5, -12), (-14, 4), (-14, -12), (5, 14), (5, -22), (-14, 14), (-14, -22))
"""Label positions tried around a point, in points (right-above first)."""


def overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    """Whether two boxes (x, y, width, height) in display space overlap."""
    return not (
        a[0] + a[2] < b[0] or b[0] + b[2] < a[0] or a[1] + a[3] < b[1] or b[1] + b[3] < a[1]
    )


def place_labels(ax: Any, xs: list[float], ys: list[float], texts: list[str]) -> None:
    """Label each point where its label overlaps no earlier label and no marker: the first free
    offset of :data:`OFFSETS`, else the offset that overlaps least; overlap is measured on each
    label's real extent as the renderer lays it out (matplotlib's ``get_window_extent``)."""
    fig = ax.figure
    fig.canvas.draw()  # fixes the axes' transform
    renderer = fig.canvas.get_renderer()
    px_per_pt = fig.dpi / 72
    marks = [tuple(ax.transData.transform((x, y))) for x, y in zip(xs, ys, strict=True)]
    half = 4 * px_per_pt
    mark_boxes = [(mx - half, my - half, 2 * half, 2 * half) for mx, my in marks]
    taken: list[tuple[float, float, float, float]] = []
    for x, y, text in zip(xs, ys, texts, strict=True):
        note = ax.annotate(
            text, (x, y), xytext=OFFSETS[0], textcoords="offset points", fontsize=7,
            fontweight="bold",
        )  # fmt: skip
        tried = []
        for offset in OFFSETS:
            note.set_position(offset)
            e = note.get_window_extent(renderer)
            box = (e.x0, e.y0, e.width, e.height)
            tried.append((sum(overlaps(box, b) for b in (*taken, *mark_boxes)), offset, box))
            if not tried[-1][0]:
                break
        _, offset, box = min(tried, key=lambda t: t[0])  # the first of the fewest overlaps
        note.set_position(offset)
        taken.append(box)


MEMORY_PARTS = (
    ("weights_bytes", "weights", "#4c78a8"),
    ("gradients_bytes", "gradients", "#72b7b2"),
    ("optimizer_bytes", "optimizer states", "#54a24b"),
    ("zero3_gathered_bytes", "gathered weights", "#b279a2"),
    ("weight_cache_bytes", "FP8 weight cache", "#8c564b"),
    ("dispatch_buffer_bytes", "expert dispatch buffers", "#17becf"),
    ("buffers_bytes", "buffers", "#9d755d"),
    ("activations_bytes", "activations", "#f58518"),
    ("embedding_activations_bytes", "embedding/output activations", "#eeca3b"),
    ("recompute_transient_bytes", "recompute transient", "#e45756"),
    ("backward_working_bytes", "backward working set", "#bcbd22"),
    ("loss_transient_bytes", "loss working set", "#d6616b"),
    ("moe_forward_transient_bytes", "MoE forward working set", "#c44e52"),
    ("batch_load_transient_bytes", "causal mask being built", "#843c39"),
    ("pipeline_output_bytes", "pipeline outputs kept", "#ff9da6"),
    ("cp_transient_bytes", "context-parallel buffers", "#9467bd"),
    ("activation_offload_buffer_bytes", "offloaded activations on GPU", "#c5b0d5"),
    ("persistent_buffers_bytes", "persistent buffers", "#aec7e8"),
    ("communicator_bytes", "NCCL communicators", "#7f7f7f"),
    ("optimizer_step_bytes", "optimizer step extra", "#bab0ac"),
)
"""The memory lines of the evaluate object stacked in the planner's bar, in the text's order
(interface/render/report.py ``_memory_lines``; the communicators with Transformer Engine's
userbuffers in them, the output layer's released bytes taken from its activations:
:func:`memory_bars`)."""

HELD_IN_BOTH_PHASES = ("persistent_buffers_bytes", "communicator_bytes")
"""Held through the optimizer step too (``model.terms.peak.held_in_both_phases``)."""


def fitted_legend(fig: Any, handles: list[Any], labels: list[str], most: int) -> int:
    """Draw a figure legend at its bottom centre in the most columns (up to ``most``) whose row
    fits the figure's width — a one-panel sweep chart (4.6 in) held four parts in one row and
    cut the first and last off at its edges — and return its rows."""
    ncol, renderer = max(1, min(most, len(labels))), fig.canvas.get_renderer()
    while True:
        legend = fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8,
                            frameon=False)  # fmt: skip
        if ncol == 1 or legend.get_window_extent(renderer).width <= fig.bbox.width:
            return -(-len(labels) // ncol)
        legend.remove()
        ncol -= 1


def memory_bars(m: dict[str, Any]) -> dict[str, list[tuple[str, float]]]:
    """Each phase's stacked parts (key, bytes) from an evaluate object's ``memory``: the
    forward/backward bar sums to its peak (the text's lines, the output layer's tensors released
    before the backward phase taken from the embedding/output-layer activations), and where the
    step materialises bytes of its own, the optimizer step's bar (model state, what is held in
    both phases, the step's extra)."""

    def part(key: str) -> float:
        value = m.get(key) or 0
        if key == "embedding_activations_bytes":
            value -= m.get("output_layer_freed_bytes") or 0
        return value

    keys = [k for k, *_ in MEMORY_PARTS]
    bars = {"forward/backward": [(k, part(k)) for k in keys[:-1] if part(k)]}
    if m.get("optimizer_step_bytes"):
        step = [*keys[:3], *HELD_IN_BOTH_PHASES, "optimizer_step_bytes"]
        bars["optimizer step"] = [(k, part(k)) for k in keys if k in step and part(k)]
    return bars
