"""The pipeline, MFU, checkpointing and RLHF tabs as report dictionaries (the ``--json`` output).

Each ``*_report`` takes its tab's request (:mod:`interface.tab_requests`, built once where the
inputs enter: click, the web's query, an example's table) or its fields as arguments (the names
of ``scenarios/examples.toml``), checks them (a :class:`~model.errors.PlannerError` naming the
parameter, value and rule), calls the cost model in :mod:`model` and returns plain JSON values:
ints when whole, floats otherwise, rates as 0–1 floats. :data:`TAB_REPORTS` maps tab to report.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from typing import Any

from trainplan.interface.inputs import parse_framework
from trainplan.interface.mfu_measurements import check_one_measurement
from trainplan.interface.mfu_model import mfu_model, model_attention, model_recomputed
from trainplan.interface.render import pipeline_tab
from trainplan.interface.rlhf.tab import RLHF_DEFAULTS, rlhf_report
from trainplan.interface.tab_requests import (
    CkptRequest,
    MfuRequest,
    PipelineRequest,
    as_request,
)
from trainplan.interface.tab_values import (
    choice_word,
    fmt_number,
    jsonable,
    optional_count,
    percent,
    positive,
    resolve_peak,
)
from trainplan.model import checkpointing as ck
from trainplan.model import mfu as mf
from trainplan.model.errors import InputError, check_applicable
from trainplan.model.pipeline import bubble_fraction, bubble_ratio
from trainplan.model.pipeline_zb import SplitSchedule
from trainplan.model.schedule import TIMELINE_SCHEDULES, simulate
from trainplan.model.schedule_support import INTERLEAVED_V1, check_schedule_framework
from trainplan.model.specs import Architecture
from trainplan.model.units import Limit, check_limit, parse_count, parse_number

__all__ = [
    "pipeline_report",
    "mfu_report",
    "ckpt_report",
    "rlhf_report",
    "TAB_REPORTS",
    "resolve_peak",
    "fmt_number",
    "RLHF_DEFAULTS",
]


def pipeline_report(*args: Any, **kw: Any) -> dict[str, Any]:
    """The pipeline tab of a :class:`~interface.tab_requests.PipelineRequest` (or its fields, by
    position and name): simulated timeline, bubble (both conventions), activations held.

    ``bubble_fraction`` and ``held_per_stage`` come from the simulation (:func:`model.schedule.
    simulate`) and are checked here against the closed forms of :mod:`model.pipeline`. The
    split-backward schedules (``zb-h1``, ``zb-h2``, ``zb-v``, ``dualpipe``, ``dualpipev``) take the
    pass times ``t_f``, ``t_b``, ``t_w`` (and ``t_fb``) instead of ``backward_ratio``; their report
    is :func:`interface.render.pipeline_tab.split_report`'s. With ``framework`` a schedule that framework
    cannot run is refused (:func:`model.schedule_support.check_schedule_framework`).

    Examples
    --------
    >>> r = pipeline_report(4, 8)
    >>> r["bubble_fraction_exact"], r["held_per_stage"]
    ('3/11', [4, 3, 2, 1])
    >>> pipeline_report(4, 8, "zb-h1")["closed_form"]["value"]
    3
    """
    r = as_request(PipelineRequest, args, kw)
    p, m = parse_count(r.stages, "stages"), parse_count(r.microbatches, "microbatches")
    v = None if r.virtual_stages is None else parse_count(r.virtual_stages, "virtual_stages")
    name = str(r.schedule).lower()
    if r.framework is not None and name in TIMELINE_SCHEDULES:
        # the name echoed as typed (``'Bogus'``), read in any case
        check_schedule_framework(name, parse_framework(str(r.framework).strip()), p, m)
    if name in {s.value for s in SplitSchedule}:
        check_applicable(
            {"backward_ratio": r.backward_ratio},
            {"backward_ratio": f"{name} splits the backward: give `t_b` and `t_w`"},
        )
        times = pipeline_tab.pass_times(SplitSchedule(name), r.t_f, r.t_b, r.t_w, r.t_fb)
        return jsonable(pipeline_tab.split_report(p, m, name, v, times))
    given = {"t_f": r.t_f, "t_b": r.t_b, "t_w": r.t_w, "t_fb": r.t_fb}
    check_applicable(
        given, dict.fromkeys(given, f"{name} runs whole backwards: give `backward_ratio`")
    )
    v = 1 if v is None else v
    if name == "interleaved" and v < 2 and p > 1:  # the rule of the layouts (schedule_support)
        raise InputError(f"virtual_stages: {v} under schedule interleaved {INTERLEAVED_V1}")
    ratio = positive("backward_ratio", 2 if r.backward_ratio is None else r.backward_ratio)
    return jsonable(_whole_backward_report(p, m, r.schedule, v, ratio))


def _whole_backward_report(p: int, m: int, schedule: str, v: int, ratio: Any) -> dict[str, Any]:
    """The pipeline tab of a schedule with whole backwards (1F1B, GPipe, interleaved): its
    simulated timeline, checked against the closed forms of the bubble."""
    t = simulate(p, m, schedule, v, ratio)
    frac = t.idle_fraction(0)
    idle = t.step_time - t.busy_time(0)
    if frac != bubble_fraction(p, m, v) or idle / t.busy_time(0) != bubble_ratio(p, m, v):
        raise AssertionError(f"simulated bubble {frac} ≠ closed form")  # pragma: no cover
    return {
        "tab": "pipeline",
        "stages": p,
        "microbatches": m,
        "schedule": str(t.schedule),
        "virtual_stages": v,
        "backward_ratio": ratio,
        "bubble_fraction": frac,
        "bubble_fraction_exact": f"{frac.numerator}/{frac.denominator}",
        "bubble_fraction_formula": f"(p − 1)/(v·m + p − 1) = {p - 1}/({v}·{m} + {p - 1})",
        "bubble_ratio": idle / t.busy_time(0),
        "bubble_ratio_formula": f"(p − 1)/(v·m) = {p - 1}/({v}·{m})",
        "held_per_stage": [t.peak_held(i) for i in range(p)],
        "step_time_units": t.step_time,
        "busy_time_units": t.busy_time(0),
        "time_unit": "one stage's forward of one micro-batch",
        "timeline": [
            {
                "stage": i,
                "slots": [s.to_dict() for s in t.slots[i]],
                "held_over_time": [list(e) for e in t.held_over_time(i)],
            }
            for i in range(p)
        ],
    }


# ------------------------------------------------------------------------------------ MFU
def _too_high(mode: str, value: Fraction, line: str, chips: int) -> InputError:
    likely = {
        "step": "`step_seconds` (seconds per whole step?), `tokens` (tokens in the step, all "
        f"chips) or `chips` ({chips}: the job's chip count)",
        "tokens_per_second": f"`tokens_per_second` (all chips together?) or `chips` ({chips})",
        "flop_rate": "`achieved_pflops` (aggregate over all chips; per-GPU rates go to "
        f"`achieved_tflops_per_gpu`) or `chips` ({chips})",
        "flop_rate_per_gpu": "`achieved_tflops_per_gpu` (one chip's rate, in TFLOP/s)",
    }[mode]
    return InputError(
        f"mfu: {line} = {percent(value)} is above 100%, impossible; the likely wrong input is "
        f"{likely}, else the peak (`peak_tflops` / `gpu`)"
    )


def _flop_rate(pflops: Any, tflops_per_gpu: Any, peak: Fraction, chips: int):
    """(model FLOP/s of the job, arithmetic) from a reported rate."""
    if pflops is not None:
        rate = positive("achieved_pflops", pflops) * 10**15
        return rate, f"{fmt_number(rate)} FLOP/s ÷ ({fmt_number(peak)} · {chips})"
    per_chip = positive("achieved_tflops_per_gpu", tflops_per_gpu) * 10**12
    return per_chip * chips, f"{fmt_number(per_chip)} FLOP/s per chip ÷ {fmt_number(peak)}"


def _token_rate(tokens: Any, step_seconds: Any, tps: Any, peak: Fraction, chips: int):
    """(mode, tokens per second, arithmetic tail) from a step or a throughput."""
    if tps is not None:
        rate = positive("tokens_per_second", tps)
        return (
            "tokens_per_second",
            rate,
            f"{fmt_number(rate)} tokens/s ÷ ({fmt_number(peak)} · {chips})",
        )
    for name, value, other in (
        ("tokens", tokens, "step_seconds"),
        ("step_seconds", step_seconds, "tokens"),
    ):
        if value is None:
            raise InputError(
                f"{name}: missing; MFU from a step needs both `tokens` (tokens in the step, all "
                f"chips) and `step_seconds` (seconds per step): `{other}` alone is given"
            )
    d, secs = positive("tokens", tokens), positive("step_seconds", step_seconds)
    tail = f"{fmt_number(d)} ÷ ({fmt_number(peak)} · {chips} · {fmt_number(secs)} s)"
    return "step", d / secs, tail


def mfu_report(*args: Any, **kw: Any) -> dict[str, Any]:
    """The MFU tab of a :class:`~interface.tab_requests.MfuRequest` (or its fields, by name): MFU
    (with and without attention FLOPs) and HFU from one measurement.

    Give one of: ``params + tokens + step_seconds``; ``params + tokens_per_second``;
    ``achieved_pflops`` (aggregate) or ``achieved_tflops_per_gpu``. Peak from ``gpu`` or
    ``peak_tflops``. HFU from ``recomputed_flops_pct`` or ``recompute`` (selective|full).

    Raises
    ------
    InputError
        Missing, conflicting, zero or negative inputs; an MFU above 100% (naming the likely
        wrong input).

    Examples
    --------
    >>> r = mfu_report(params=70e9, tokens=4e6, step_seconds=7, peak_tflops=989, chips=512)
    >>> r["arithmetic"]
    '6 · 70e9 · 4e6 ÷ (989e12 · 512 · 7 s) = 47.4%'
    """
    asked = as_request(MfuRequest, args, kw)
    recompute = choice_word("recompute", asked.recompute, mf.RECOMPUTE_MODES)
    r, model, arch = mfu_model(replace(asked, recompute=recompute))
    check_one_measurement(r)
    n_chips = parse_count(r.chips, "chips")
    peak, peak_source = resolve_peak(r.gpu, r.peak_tflops)
    dims = _mfu_dims(r)
    n = None if r.params is None else Fraction(parse_count(r.params, "params"))
    attn, attn_text = _attention(r, dims, arch)
    out: dict[str, Any] = {
        "tab": "mfu",
        "chips": n_chips,
        "peak_flops_per_s": peak,
        "peak_source": peak_source,
        "model": model,
    }
    mode, rate, line, plain, per_token = _achieved(r, n, attn, attn_text, peak, n_chips, out)
    mfu = mf.utilisation(rate, peak, n_chips)
    if mfu > 1:
        raise _too_high(mode, mfu, line, n_chips)
    seq = dims["seq_len"]
    own = model_attention(arch, seq, bool(r.causal))[0] if arch and seq else None
    recompute_args = (seq, bool(r.causal), r.recompute, bool(r.attention))
    again = None if arch is None else model_recomputed(arch, *recompute_args)
    extra, how = _recomputed_share(r, dims, n, per_token, mfu, own, again)
    out.update(
        mode=mode,
        achieved_model_flops_per_s=rate,
        mfu=mfu,
        mfu_without_attention=plain,
        hfu=mfu * (1 + extra),
        recomputed_flops_share=extra,
        attention=_attention_record(r, attn, attn_text, arch is not None),
        arithmetic=f"{line} = {percent(mfu)}",
        hfu_arithmetic=f"hfu = mfu × (1 + {how}) = {percent(mfu * (1 + extra))}"
        if how
        else "hfu = mfu (no recomputation given)",
    )
    return jsonable(out)


def _attention(
    r: MfuRequest, dims: dict[str, int | None], arch: Architecture | None
) -> tuple[Any, str]:
    """(attention FLOPs per token, their formula) when ``attention`` is on, else (0, ""): a
    model's own per-layer count (``arch``: :func:`interface.mfu_model.model_attention`, the
    count of evaluate's MFU), else PaLM's from the typed dimensions
    (:func:`model.mfu.attention_term`)."""
    if not r.attention:
        return 0, ""
    if arch is not None and dims["seq_len"] is not None:
        return model_attention(arch, dims["seq_len"], bool(r.causal))
    return mf.attention_term(
        dims["layers"],
        dims["heads"],
        dims["head_dim"],
        dims["hidden"],
        dims["seq_len"],
        bool(r.causal),
    )


def _attention_record(r: MfuRequest, attn: Any, attn_text: str, own: bool) -> dict[str, Any]:
    """The report's ``attention`` object: whether counted, causal, FLOPs per token, formula
    (``own``: the model's own per-layer count)."""
    note = " (causal: halved)" if r.causal else " (non-causal)"
    if own:
        note = (
            " (causal: each layer's attended pairs)"
            if r.causal
            else " (non-causal: s² a layer, PaLM's)"
        )
    return {
        "included": bool(r.attention),
        "causal": bool(r.causal) if r.attention else None,
        "flops_per_token": attn,
        "formula": attn_text + note if r.attention else "not counted",
    }


def _mfu_dims(r: MfuRequest) -> dict[str, int | None]:
    """The model's dimensions of the MFU tab (``layers heads head_dim hidden seq_len``) as
    counts, None where not given.

    Raises
    ------
    InputError
        A dimension, ``causal``, ``attention`` or ``params`` given where it enters nothing (a
        dimension without attention FLOPs; attention or a parameter count with a reported FLOP
        rate, which counts what it counts); a dimension that is not a count.
    """
    named = {"layers": r.layers, "heads": r.heads, "head_dim": r.head_dim, "hidden": r.hidden}
    ignored: dict[str, str] = {}
    if r.achieved_pflops is not None or r.achieved_tflops_per_gpu is not None:
        ignored["attention"] = "a reported FLOP rate already counts what it counts"
        ignored["params"] = "a reported FLOP rate already counts what it counts; N is not read"
    if not r.attention:
        why = (
            "it enters only attention FLOPs (--attention); without them the 6·N MFU counts no "
            "attention and its HFU adds no recomputed attention core"
        )
        ignored.update(dict.fromkeys((*named, "seq_len", "causal"), why))
    causal = None if r.causal is None else ("causal" if r.causal else "non-causal")
    given = {**named, "seq_len": r.seq_len, "causal": causal, "attention": r.attention}
    check_applicable({**given, "params": r.params}, ignored)
    return {k: optional_count(k, x) for k, x in {**named, "seq_len": r.seq_len}.items()}


def _achieved(
    r: MfuRequest,
    n: Fraction | None,
    attn: Any,
    attn_text: str,
    peak: Fraction,
    chips: int,
    out: dict[str, Any],
) -> tuple[str, Any, str, Any, Any]:
    """(mode, achieved model FLOP/s of the job, its arithmetic, the MFU without attention FLOPs,
    model FLOPs per token or None) of the one measurement given; from tokens, ``out`` gets
    ``tokens_per_second`` and ``model_flops_per_token``.

    Raises
    ------
    InputError
        Not exactly one measurement given; tokens without ``params``; a rate not positive.
    """
    rate_given = r.achieved_pflops is not None or r.achieved_tflops_per_gpu is not None
    if rate_given:
        mode = "flop_rate" if r.achieved_pflops is not None else "flop_rate_per_gpu"
        rate, line = _flop_rate(r.achieved_pflops, r.achieved_tflops_per_gpu, peak, chips)
        return mode, rate, line, mf.utilisation(rate, peak, chips), None
    if n is None:
        raise InputError("params: missing; MFU from tokens needs the parameter count N")
    mode, tps, tail = _token_rate(r.tokens, r.step_seconds, r.tokens_per_second, peak, chips)
    per_token = mf.model_flops_per_token(n, attn)
    head = f"(6 · {fmt_number(n)} + {attn_text})" if r.attention else f"6 · {fmt_number(n)}"
    out.update(tokens_per_second=tps, model_flops_per_token=per_token)
    plain = mf.utilisation(6 * n * tps, peak, chips)
    return mode, per_token * tps, f"{head} · {tail}", plain, per_token


def _recomputed_share(
    r: MfuRequest,
    dims: dict[str, int | None],
    n: Fraction | None,
    per_token: Any,
    mfu: Any,
    attention: Fraction | None = None,
    recomputed: Fraction | None = None,
) -> tuple[Any, str]:
    """(recomputed FLOPs / model FLOPs, its arithmetic) from ``recomputed_flops_pct`` or
    ``recompute`` (:func:`model.mfu.recompute_share`; ``attention``: a model's own attention
    FLOPs per token, forward + backward, instead of PaLM's from the dimensions; ``recomputed``:
    a model's own recomputed forward FLOPs per token, evaluate's count, by the MFU's convention).

    Raises
    ------
    InputError
        A percentage that is not a number; an HFU above 100%; selective with a FLOP rate alone.
    """
    rate = r.achieved_pflops is not None or r.achieved_tflops_per_gpu is not None
    if rate and r.recompute == "selective" and r.recomputed_flops_pct is None:
        raise InputError(
            "recompute: 'selective' cannot be counted from a reported FLOP rate: what it re-runs "
            "(the attention cores) is a share of the model's FLOPs that a rate does not give; "
            "give `recomputed_flops_pct` (the recomputed FLOPs as a percentage of model FLOPs), or "
            "measure by tokens (`tokens_per_second`, or `tokens` and `step_seconds`) with "
            "`model` or `params`"
        )
    hq = dims["heads"] * dims["head_dim"] if dims["heads"] and dims["head_dim"] else dims["hidden"]
    extra, how = mf.recompute_share(
        r.recompute,
        r.recomputed_flops_pct,
        n,
        per_token,
        dims["layers"],
        hq,
        dims["seq_len"],
        bool(r.causal),
        attention,
        recomputed,
        bool(r.attention),
    )
    if mfu * (1 + extra) > 1:
        raise InputError(
            f"hfu: mfu {percent(mfu)} × (1 + {how}) = {percent(mfu * (1 + extra))} is above 100%, impossible; "
            "the likely wrong input is `recomputed_flops_pct` (a percentage of model FLOPs, e.g. 25) "
            f"or `recompute`, else the step (`step_seconds`, `tokens`, `chips`) that gives the "
            f"mfu of {percent(mfu)}"
        )
    return extra, how


# ------------------------------------------------------------------------------------ ckpt
CKPT_LAYERS = Limit(
    1000,
    "layers",
    "the walk-through lists every tensor at every one of its 3·n steps, n² cells: use a smaller "
    "n to see the pattern",
)
"""Largest chain the checkpointing walk-through lays out (its output grows with n²): the one
limit of its ``layers``, below the 10,000 of a model's (:data:`model.units.LIMITS`), and so the
one message for any n above it."""


def _ckpt_layers(layers: Any) -> int:
    """The walk-through's n: a count up to :data:`CKPT_LAYERS`, refused above it in
    :func:`model.units.check_limit`'s words (the one message for any n above it, 4,000 or 10⁵:
    the model's own 10,000-layer limit is never reached first).

    Raises
    ------
    InputError
        Not a number, not a whole one, below 1, or above 1,000.
    """
    value = parse_number(layers, "layers")
    check_limit("layers", value, layers if isinstance(layers, str) else None, CKPT_LAYERS)
    return parse_count(layers, "layers")


def _shown_steps(steps: list[Any], step: Any) -> list[Any]:
    """Every step of the walk, or only step ``step`` (1-based) when it is given.

    Raises
    ------
    InputError
        A step outside 1 … 3·n.
    """
    if step is None:
        return steps
    s = parse_count(step, "step", 1)
    if not 1 <= s <= len(steps):
        raise InputError(f"step: {step} must be from 1 to {len(steps)} (3 × layers)")
    return [steps[s - 1]]


def ckpt_report(*args: Any, **kw: Any) -> dict[str, Any]:
    """The checkpointing tab of a :class:`~interface.tab_requests.CkptRequest` (or its fields, by
    position and name): every step of the walk, peak held against ``n + 1``, overhead.
    ``every`` (k) defaults to round(√n), Chen et al. 2016's choice; counts are tensors (one
    layer's output each), time in forward-of-one-layer units.

    Examples
    --------
    >>> r = ckpt_report(9, 3)
    >>> r["peak_held"], r["peak_held_without_checkpointing"], r["checkpoints"]
    (6, 10, ['input', 'out3', 'out6'])
    """
    r = as_request(CkptRequest, args, kw)
    layers, every, labels = r.layers, r.every, str(choice_word("labels", r.labels, ck.LABELS))
    n = _ckpt_layers(layers)
    if every is None:
        every = max(1, round(math.sqrt(n)))
    k = parse_count(every, "every")
    names = ck.tensor_labels(n, labels)
    steps = ck.walk(n, k)
    ckpts = frozenset(ck.checkpoints(n, k))
    shown = _shown_steps(steps, r.step)
    ratio = positive("backward_ratio", r.backward_ratio)
    peak = max(len(st.held) for st in steps)
    formula = ck.peak_held_formula(n, k)
    if peak != formula:
        raise AssertionError(f"walk peak {peak} ≠ formula {formula}")  # pragma: no cover
    return jsonable(
        {
            "tab": "ckpt",
            "layers": n,
            "every": k,
            "labels": labels,
            "checkpoints": [names[i] for i in sorted(ckpts)],
            "peak_held": peak,
            "peak_held_formula": f"n/k + k = {n}/{k} + {k}"
            if n % k == 0
            else f"max(⌈n/k⌉ + last segment, ⌈n/k⌉ − 1 + k) = {formula}",
            "peak_held_without_checkpointing": n + 1,
            "recompute_overhead": ck.recompute_overhead(ratio),
            "recompute_overhead_formula": f"one extra forward: 1/(1 + {fmt_number(ratio)})",
            "steps": [st.to_dict(names, ckpts) for st in shown],
            "held_over_time": {
                "checkpointing": [list(e) for e in ck.held_over_time(n, k, ratio)],
                "without_checkpointing": [list(e) for e in ck.held_over_time(n, None, ratio)],
            },
        }
    )


TAB_REPORTS: dict[str, Callable[..., dict[str, Any]]] = {
    "pipeline": pipeline_report,
    "mfu": mfu_report,
    "ckpt": ckpt_report,
    "rlhf": rlhf_report,
}
"""Each tab's report function, called with the tab's request (:data:`interface.tab_requests.
TAB_REQUESTS`)."""
