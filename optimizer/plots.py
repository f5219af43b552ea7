"""Charts of the pipeline and checkpointing tabs: the only matplotlib import (optional extra).

``pip install 'trainplan[plot]'`` installs matplotlib; without it every function here raises an
:class:`~model.errors.InputError` saying so. Each function takes the report dictionary of
:mod:`optimizer.tabs` (the ``--json`` output) and writes one file; the format follows the suffix
(``.png``, ``.svg``, ``.pdf``; ``.gif`` for the animation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainplan.model.checkpointing import tensor_state
from trainplan.model.errors import InputError
from trainplan.model.units import parse_positive

__all__ = ["pipeline_chart", "held_chart", "ckpt_gif"]

_FWD, _BWD, _IDLE = "#4c78a8", "#f58518", "#eeeeee"


def _pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend, or a clear error."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise InputError(
            "plots: matplotlib is not installed; pip install 'trainplan[plot]'"
        ) from None
    return plt


def _suffix(path: str | Path, allowed: tuple[str, ...]) -> Path:
    """The output file, checked by the one rule for output paths (optimizer.inputs.output_path)."""
    from trainplan.optimizer.inputs import output_path

    return output_path(path, "path", allowed)


def _save(fig: Any, out: Path) -> None:
    """Write a figure; what the file system refuses is an InputError (optimizer.inputs.writing)."""
    from trainplan.optimizer.inputs import writing

    with writing(out, "path"):
        fig.savefig(out)


def pipeline_chart(report: dict[str, Any], path: str | Path) -> Path:
    """Gantt chart of a simulated pipeline step: one row per stage, forward and backward colours,
    micro-batch numbers in the bars, the bubble left blank.

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = _suffix(path, (".png", ".svg", ".pdf"))
    plt = _pyplot()
    p = report["stages"]
    fig, ax = plt.subplots(figsize=(min(4 + report["step_time_units"] / 4, 24), 1 + 0.5 * p))
    for row in report["timeline"]:
        y = p - 1 - row["stage"]
        for s in row["slots"]:
            forward = s["pass"] == "forward"
            ax.barh(
                y,
                s["end"] - s["start"],
                left=s["start"],
                height=0.8,
                color=_FWD if forward else _BWD,
                edgecolor="white",
                linewidth=0.5,
            )
            if report["microbatches"] <= 32:
                ax.text(
                    (s["start"] + s["end"]) / 2,
                    y,
                    str(s["microbatch"]),
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="white",
                )
    ax.set_yticks(range(p), [f"stage {p - 1 - i}" for i in range(p)])
    ax.set_xlabel("time (one stage's forward of one micro-batch = 1)")
    ax.set_title(
        f"{report['schedule']}: p={p}, m={report['microbatches']}, "
        f"v={report['virtual_stages']}; bubble {report['bubble_fraction']:.1%} "
        f"(blue forward, orange backward)"
    )
    ax.set_xlim(0, report["step_time_units"])
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out


def held_chart(report: dict[str, Any], path: str | Path) -> Path:
    """Tensors held over time, with and without checkpointing (checkpointing tab).

    Raises
    ------
    InputError
        matplotlib missing, or a path that is not .png/.svg/.pdf in a writable folder.
    """
    out = _suffix(path, (".png", ".svg", ".pdf"))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for key, label in (
        ("checkpointing", f"checkpoint every {report['every']}"),
        ("without_checkpointing", "no checkpointing"),
    ):
        t, h = zip(*report["held_over_time"][key], strict=True)
        ax.step(t, h, where="post", label=label)
    ax.axhline(report["peak_held"], ls=":", color="grey")
    ax.set_xlabel("time (forward of one layer = 1, backward = 2)")
    ax.set_ylabel("tensors held")
    ax.set_title(
        f"{report['layers']} layers: peak {report['peak_held']} vs "
        f"{report['peak_held_without_checkpointing']}, "
        f"+{report['recompute_overhead']:.0%} compute"
    )
    ax.legend()
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out


def _colours() -> dict[str, str]:
    return {
        "recomputed": "#2ca02c",
        "kept": "#4c78a8",
        "held": "#9ecae1",
        "discarded": "#d62728",
        "free": _IDLE,
    }


def ckpt_gif(report: dict[str, Any], path: str | Path, delay_s: float = 0.6) -> Path:
    """Animated walk-through: one frame per step, a cell per tensor coloured by its state
    (checkpoint, held, recomputed, discarded, free).

    Raises
    ------
    InputError
        matplotlib missing, a path not ending in .gif or not in a writable folder, a report of
        one step only, or a delay that is not positive.
    """
    out = _suffix(path, (".gif",))
    plt = _pyplot()
    from matplotlib.animation import FuncAnimation, PillowWriter

    steps, n = report["steps"], report["layers"]
    if len(steps) < 2:
        raise InputError("gif: needs every step (leave out --step)")
    names = ["input"] + [f"x{i}" for i in range(1, n + 1)]
    fig, ax = plt.subplots(figsize=(min(2 + 0.5 * (n + 1), 20), 2.2))

    def draw(i: int) -> None:
        ax.clear()
        st = steps[i]
        colours = []
        for j in range(n + 1):
            label = _label(report, j)
            colours.append(_colours()[tensor_state(st, label)])
        ax.bar(range(n + 1), [1] * (n + 1), color=colours, edgecolor="white")
        ax.set_xticks(range(n + 1), names if n <= 24 else [""] * (n + 1), fontsize=7)
        ax.set_yticks([])
        ax.set_title(
            f"step {st['step']}: {st['phase']} layer {st['layer']} — {st['held']} held "
            f"(peak {report['peak_held']}, no checkpointing {n + 1})",
            fontsize=9,
        )

    anim = FuncAnimation(fig, draw, frames=len(steps))
    frame_s = float(parse_positive(delay_s, "delay"))
    from trainplan.optimizer.inputs import writing

    with writing(out, "path"):
        anim.save(out, writer=PillowWriter(fps=1 / frame_s))
    plt.close(fig)
    return out


def _label(report: dict[str, Any], j: int) -> str:
    if report["labels"] == "outputs":
        return "input" if j == 0 else f"out{j}"
    return "output" if j == report["layers"] else f"in{j + 1}"


def frontier_chart(rows: list[dict[str, Any]], against: str, path: str | Path) -> Path:
    """Step time against the second axis of a Pareto frontier (one marker per point)."""
    plt = _pyplot()
    out = _suffix(path, (".png", ".svg", ".pdf"))
    key = {"memory": "total_bytes", "gpus": "num_gpus", "price": "price_per_hour"}[against]
    scale = 1e9 if against == "memory" else 1
    xs = [r[key] / scale for r in rows]
    ys = [r["step_s"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(xs, ys, "o-", drawstyle="steps-post")
    for x, y, r in zip(xs, ys, rows, strict=True):
        ax.annotate(
            f"tp{r['tp']} pp{r['pp']} dp{r['dp']}",
            (x, y),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    ax.set_xlabel(
        {"memory": "memory per GPU (GB)", "gpus": "GPUs", "price": "cluster $ per hour"}[against]
    )
    ax.set_ylabel("step time (s)")
    ax.set_title("Pareto frontier")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, out)
    plt.close(fig)
    return out
