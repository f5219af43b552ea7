"""The split-backward schedules' pipeline tab as text: the summary lines with each figure's source
and the timeline, one row per rank, ``F`` forward, ``B`` full backward, ``I`` input-gradient
backward, ``W`` weight-gradient backward, ``&`` an overlapped forward-and-backward block
(DualPipe); lower-case letters are micro-batches fed from the other end (DualPipe's reverse
direction); ``'`` marks a V placement's second chunk."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

__all__ = ["render_split_timeline", "split_summary"]

_LETTER = {"forward": "F", "backward": "B", "backward_input": "I", "backward_weight": "W"}
_FILL = {"F": "-", "B": "=", "I": "~", "W": "+", "&": "&"}


def split_summary(r: dict[str, Any]) -> list[str]:
    """The report's figures as lines, each with where it comes from."""
    t = r["pass_times"]
    times = f"T_F {t['t_f']:g}, T_B {t['t_b']:g}, T_W {t['t_w']:g}" + (
        f", F&B {t['t_fb']:g}" if t["t_fb"] is not None else ""
    )
    closed = r["closed_form"]
    lines = [
        f"{r['schedule']}: {r['stages']} ranks × {r['microbatches']} micro-batches, "
        f"v = {r['virtual_stages']}; {times} (one chunk's passes)",
        f"bubble          {r['bubble_time_units']:g} time units = {r['bubble_fraction'] * 100:.1f}% of "
        f"the step ({r['bubble_fraction_formula']}) — {r['bubble_source']}",
    ]
    if closed["applies"]:
        lines.append(
            f"closed form     {closed['formula']} = {closed['value']:g} — {closed['source']}"
        )
    else:
        lines.append(f"closed form     none: {closed['why']}; the simulation stands")
    held = " ".join(f"{h:g}" for h in r["chunks_held_per_stage"])
    pending = " ".join(f"{h:g}" for h in r["w_pending_per_stage"])
    lines += [
        f"span bubble     {r['span_bubble_units']:g} time units — {r['span_bubble_source']}",
        f"step            {r['step_time_units']:g} time units — {r['step_source']}",
        f"held per rank   {held} chunk micro-batches in flight (forward to last backward); "
        f"W buffers {pending} — {r['held_source']}",
        f"parameters      {r['parameter_copies']} cop{'y' if r['parameter_copies'] == 1 else 'ies'}"
        f" of each stage; stages per rank {r['stage_placement']}",
        f"runs under      {', '.join(r['frameworks'])} ({'; '.join(r['implementations'])})",
    ]
    return lines


def _blocks(row: dict[str, Any]) -> list[tuple[Fraction, Fraction, str, str, bool]]:
    """(start, end, kind letter, label, reverse) per block of a rank; an overlapped pair is one
    ``&`` block labelled with both micro-batches."""
    out: list[tuple[Fraction, Fraction, str, str, bool]] = []
    slots = row["slots"]
    i = 0
    while i < len(slots):
        s = slots[i]
        a = Fraction(s["start"]).limit_denominator(10**6)
        b = Fraction(s["end"]).limit_denominator(10**6)
        if s.get("overlapped") and i + 1 < len(slots):
            f, g = s, slots[i + 1]
            label = _label(f) + "&" + _label(g)
            out.append((a, b, "&", label, bool(f.get("direction"))))
            i += 2
            continue
        out.append((a, b, _LETTER[s["pass"]], _label(s), bool(s.get("direction"))))
        i += 1
    return out


def _label(s: dict[str, Any]) -> str:
    """``F3``; lower case fed from the other end (DualPipe); ``'`` a V placement's second chunk."""
    letter = _LETTER[s["pass"]]
    if s.get("direction"):
        return letter.lower() + str(s["microbatch"])
    return letter + str(s["microbatch"]) + ("'" if s.get("chunk") else "")


def render_split_timeline(report: dict[str, Any], width: int = 120) -> list[str]:
    """The timeline as text, one row per rank, at most ``width`` columns; with room each block
    is labelled (``F3--``, ``I3~~``, ``W3++``, ``F3&b5&&``), else the time axis is scaled and
    each column shows the pass that fills most of it. ``.`` is idle."""
    p = report["stages"]
    rows = [_blocks(row) for row in report["timeline"]]
    total = Fraction(report["step_time_units"]).limit_denominator(10**6)
    shortest = min(b - a for row in rows for a, b, *_ in row)
    prefix = len(f"rank {p - 1} |")
    cols = max(10, width - prefix)
    scaled = cols * shortest / total < 2
    dt = total / cols if scaled else shortest / (cols * shortest // total)
    ncols = cols if scaled else math.ceil(total / dt)
    out = []
    for i, row in enumerate(rows):
        cells = _scaled(row, dt, ncols) if scaled else _labelled(row, dt, ncols)
        out.append(f"rank {i:>{len(str(p - 1))}} |" + "".join(cells))
    how = (
        f"scaled: 1 column = {float(dt):.3g} time units; F forward, B backward, I input gradient, "
        "W weight gradient"
        if scaled
        else "F<mb>-- forward, B<mb>== backward, I<mb>~~ input gradient, W<mb>++ weight gradient"
    )
    return [
        *out,
        how,
        "& overlapped forward and backward; lower case: fed from the other end; ' second chunk; . idle",
    ]


def _labelled(row: list, dt: Fraction, ncols: int) -> list[str]:
    cells = ["."] * ncols
    for a, b, kind, label, _ in row:
        lo, hi = round(a / dt), round(b / dt)
        text = label if len(label) <= hi - lo else label[: max(1, hi - lo)]
        cells[lo:hi] = list(text + _FILL[kind] * (hi - lo - len(text)))
    return cells


def _scaled(row: list, dt: Fraction, ncols: int) -> list[str]:
    busy: list[dict[tuple[str, bool], Fraction]] = [{} for _ in range(ncols)]
    for a, b, kind, _, reverse in row:
        for c in range(int(a / dt), min(ncols, math.ceil(b / dt))):
            share = max(Fraction(0), min(b, (c + 1) * dt) - max(a, c * dt))
            busy[c][kind, reverse] = busy[c].get((kind, reverse), Fraction(0)) + share
    cells = []
    for col in busy:
        if sum(col.values(), Fraction(0)) <= dt / 2:
            cells.append(".")
            continue
        kind, reverse = max(col, key=lambda k: col[k])
        cells.append(kind.lower() if reverse else kind)
    return cells
