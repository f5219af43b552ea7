"""Tables for people and files. Terminal tables with tabulate (fast to import); DataFrames and CSV
with pandas, imported only when a frame is built.

Raw base units (bytes, seconds) in CSV and JSON; GB (10^9 bytes), ms and % only here, on screen.
"""

from __future__ import annotations

import shlex
from typing import Any

from tabulate import tabulate

from trainplan.interface.flags import with_flags
from trainplan.interface.outputs import output_path, writing
from trainplan.interface.render.bubble_note import equal_stage_bubble
from trainplan.interface.render.memory_labels import FREED_LABEL, gathered_label, library_labels
from trainplan.model.durations import duration, seconds_text, step_text
from trainplan.model.layout import SEARCHED_FIELDS

__all__ = [
    "frame",
    "table_text",
    "evaluate_text",
    "layout_line",
    "gb",
    "duration",
    "step_text",
    "seconds_text",
    "percent_text",
    "objective_text",
    "readable",
    "csv_text",
    "write_csv",
]


def gb(value: float | int | None) -> str:
    """Bytes as decimal GB with 2 decimals ("—" for unknown)."""
    return "—" if value is None else f"{value / 1e9:,.2f} GB"


def objective_text(kind: str, key: str, value: float, tokens: int | None = None) -> str:
    """A search objective for people, from :func:`optimizer.problem.objective_value`'s key and
    base-unit value: "22.8 days to train 1.5e+13 tokens", "$2,345,678 to train …", "10.441 s per
    step", "3,120 tokens/s per GPU".

    Examples
    --------
    >>> objective_text("time-to-train", "objective_s", 1971183.7881, 15 * 10**12)
    '22.8 days to train 15,000,000,000,000 tokens'
    """
    budget = f" to train {tokens:,} tokens" if tokens else " to train the token budget"
    if key == "objective_usd":
        return dollars(value, cents=False) + budget
    if key == "objective_gpu_s_per_token":
        return f"{1 / value:,.0f} tokens/s per GPU"
    if kind == "time-to-train":
        return duration(value) + budget
    return f"{step_text(value)} per step"


def dollars(value: float | None, per: str = "", cents: bool = True) -> str:
    """An amount of US dollars as people write it: ``$20,480.00/hour``, ``$1,234,567``
    (``cents`` False); ``—`` when unknown.

    >>> dollars(20480.0, "/hour"), dollars(1234567.4, cents=False), dollars(None)
    ('$20,480.00/hour', '$1,234,567', '—')
    """
    if value is None:
        return "—"
    return f"${value:,.{2 if cents else 0}f}{per}"


def percent_text(value: float | None) -> str:
    """A 0–1 fraction as a percentage to one decimal (``44.1%``), ``—`` unknown."""
    return "—" if value is None else f"{value * 100:.1f}%"


def frame(rows: list[dict[str, Any]], columns: list[str] | None = None) -> Any:
    """Rows of dicts as a pandas DataFrame with a fixed column order."""
    import pandas as pd

    df = pd.DataFrame(rows)
    return df[columns] if columns else df


def readable(row: dict[str, Any]) -> dict[str, Any]:
    """A JSON row for the screen, each cell by the unit its key names: ``*_bytes`` in GB (the
    suffix dropped from the header), ``*_s`` as a duration, other numbers with thousands
    separators; None as "—".

    Examples
    --------
    >>> readable({"stage": 0, "stage_total_bytes": 72_812_345_678, "step_s": 10.44064})
    {'stage': '0', 'stage_total': '72.81 GB', 'step': '10.441 s'}
    """
    out: dict[str, Any] = {}
    for key, value in row.items():
        if key.endswith("_bytes"):
            out[key.removesuffix("_bytes")] = gb(value)
        elif key.endswith("_s") and not isinstance(value, bool):
            out[key.removesuffix("_s")] = "—" if value is None else duration(value)
        elif value is None:
            out[key] = "—"
        elif isinstance(value, float):
            out[key] = f"{value:,.4g}"
        elif isinstance(value, int) and not isinstance(value, bool):
            out[key] = f"{value:,}"
        else:
            out[key] = str(value)
    return out


def table_text(rows: list[dict[str, Any]]) -> str:
    """Rows of already-formatted cells as an aligned text table."""
    if not rows:
        return "(none)"
    return tabulate(rows, headers="keys", tablefmt="simple", disable_numparse=True)


def _memory_lines(d: dict[str, Any]) -> list[str]:
    m, ub = d["memory"], d["memory"].get("userbuffer_bytes") or 0
    lines = [f"Memory per GPU (busiest pipeline stage: {m['busiest_stage']}, counted from 0)"]
    parts = [
        ("weights", m["weights_bytes"]),
        ("gradients", m["gradients_bytes"]),
        ("optimizer states", m["optimizer_bytes"]),
        ("= model state", m["model_state_bytes"]),
        (gathered_label(m), m.get("zero3_gathered_bytes")),
        ("FP8 weight cache", m.get("weight_cache_bytes")),
        (library_labels(d)[0], m.get("dispatch_buffer_bytes")),
        ("buffers in forward/backward", m.get("buffers_bytes")),
        ("activations (layers, in flight)", m["activations_bytes"]),
        ("embedding / output-layer activations", m["embedding_activations_bytes"]),
        ("recompute transient", m["recompute_transient_bytes"]),
        ("backward working set (one layer)", m.get("backward_working_bytes")),
        (FREED_LABEL, m.get("output_layer_freed_bytes")),  # subtracted: the label says less
        ("loss working set beyond them (one micro-batch)", m.get("loss_transient_bytes")),
        ("MoE forward working set (one layer)", m.get("moe_forward_transient_bytes")),
        ("causal mask being built (one micro-batch)", m.get("batch_load_transient_bytes")),
        ("pipeline stage outputs and receive buffers", m.get("pipeline_output_bytes")),
        ("context-parallel buffers (one layer)", m.get("cp_transient_bytes")),
        ("offloaded activations still on GPU", m.get("activation_offload_buffer_bytes")),
        ("optimizer step extra (no activations then)", m.get("optimizer_step_bytes")),
        ("persistent buffers (whole run)", m.get("persistent_buffers_bytes")),
        ("NCCL communicator buffers (whole run)", (m.get("communicator_bytes") or 0) - ub),
        (library_labels(d)[1], ub),
        (f"= total (peak: {m.get('peak_phase', 'forward-backward')})", m["total_bytes"]),
        (f"capacity ({d['gpu']['name']}, usable)", m["capacity_bytes"]),
    ]
    always = ("=", "capacity")  # the total and the capacity always, others where they apply
    shown = [(name, value) for name, value in parts if value or name.startswith(always)]
    width = max([44, *(len(name) for name, _ in shown)])
    lines += [f"  {name:<{width}} {gb(value):>14}" for name, value in shown]
    if m["activations_unavailable"]:
        lines.append(f"  activations unavailable: {m['activations_unavailable']}")
    verdict = "fits" if m["fits"] else f"DOES NOT FIT: over by {gb(m['overflow_bytes'])}"
    if m["fits"] and m.get("allocator_retries"):
        verdict += " (with allocator retries, below)"
    if m.get("fits_covers", "model state and activations") != "model state and activations":
        verdict += f" ({m['fits_covers']}: activations unknown without the dimensions, " + (
            "so the whole step may not fit)" if m["fits"] else "which would only add to it)"
        )
    if m.get("host_bytes"):
        cap = m.get("host_capacity_bytes")
        lines.append(
            f"  {'host memory (offloaded), per GPU':<{width}} {gb(m['host_bytes']):>14}"
            f"  (per node {gb(m['host_bytes_per_node'])}"
            + (f"; host capacity per GPU {gb(cap)})" if cap else "; host capacity unknown)")
        )
        if m.get("host_fits") is False:
            verdict = f"DOES NOT FIT: host memory over by {gb(m['host_bytes'] - cap)}"
    lines.append(f"  verdict: {verdict}")
    lines += _reserved_lines(m, width)
    if m.get("construction_bytes"):
        lines.append(
            f"  model construction without deepspeed.zero.Init: {gb(m['construction_bytes'])} "
            "per GPU (the whole BF16 model before ZeRO-3 partitions it; not in the total)"
        )
    return lines


def _reserved_lines(m: dict[str, Any], width: int = 44) -> list[str]:
    """The allocator's reserved peak where a side stream's pool adds to it (fsdp2's all-gather
    outputs, DeepSpeed ZeRO-3's reduce-scatter copies: :func:`model.terms.peak.stream_pool_term`):
    what ``torch.cuda.max_memory_reserved`` counts at least; not in the total or the verdict (the
    allocator frees idle cached blocks before it raises out-of-memory). Where the reserved bytes
    and the communicators exceed the capacity (``memory.allocator_retries``), a second line says
    the run pays those releases, at least one per step, which the step time does not charge.
    ``width``: the memory lines' label column, so the figure stands under theirs."""
    if not m.get("stream_pool_bytes"):
        return []
    lines = [
        f"  {'reserved at least (max_memory_reserved)':<{width}} {gb(m['reserved_bytes']):>14}"
        f"  (allocated {gb(m['allocated_bytes'])} + {gb(m['stream_pool_bytes'])} idle in a "
        "side stream's pool; not in the verdict: freed before out-of-memory)"
    ]
    if m.get("allocator_retries") and m["fits"]:  # over by the allocated peak: no run to retry
        lines.append(
            f"  allocator retries: the reserved bytes and the communicators would exceed the "
            f"capacity by {gb(m['reserved_over_bytes'])}, so at least once a step the allocator "
            "frees its cached blocks (cudaFree, a device synchronisation) and retries, and "
            "max_memory_reserved stays under the memory; not charged in the step time (no "
            "per-operation source)"
        )
    return lines


def _cp_kind_text(lay: dict[str, Any]) -> str:
    """``ring``, ``ulysses``, … and the hybrid's inner degree: ``a2a+p2p (a2a 2)``."""
    kind = lay.get("cp_kind", "ring")
    return f"{kind} (a2a {lay['cp_a2a']})" if lay.get("cp_a2a") else kind


def _mfu_conventions(d: dict[str, Any], which: str) -> str:
    """Beside a 6n MFU or HFU (``which``), which leaves attention out, the attention-inclusive
    figure: each HFU beside the MFU of its own convention, so neither is below its MFU."""
    flops, t = d.get("flops") or {}, d["time"]
    if flops.get("convention") != "6n" or t.get(f"{which}_with_attention") is None:
        return ""
    tail = ", 6n+attention" if which == "mfu" else ""
    return f" (6n; {percent_text(t[f'{which}_with_attention'])} with attention FLOPs{tail})"


def _pack_mfu(t: dict[str, Any]) -> str:
    """Beside the MFU of packed documents (``t``: the JSON object's ``time``), the MFU a counter
    that takes each pack for one sequence reports (``time.mfu_pack``: its s² attention pairs
    where the documents' mask keeps Σ lᵢ², :attr:`model.estimate.Estimate.mfu_pack`); "" without
    packed documents or where the convention counts no attention (both figures the same)."""
    pack = t.get("mfu_pack")
    if pack is None or t.get("mfu") is None or pack == t["mfu"]:
        return ""
    return f" ({percent_text(pack)} counting each pack as one sequence, its s² attention)"


def evaluate_text(d: dict[str, Any], defaults_used: dict[str, Any] | None = None) -> str:
    """The evaluate command's human output from its JSON object."""
    lay, model = d["layout"], d["model"]
    out = [
        f"{model['name']}: {model['num_params']:,} parameters ({model['num_active_params']:,} active) "
        f"on {d['num_gpus']:,} × {d['gpu']['name']}",
        f"layout: {layout_line(lay)}",
        "",
        *_memory_lines(d),
        "",
        *_tables(d),
        "",
    ]
    out += _pipeline_and_step(d)
    out += ["", "Assumptions:"] + [f"  - {a}" for a in d["assumptions"]]
    if defaults_used:
        said = [
            f"{k} = {v:,}" if type(v) is int else f"{k} = {v}" for k, v in defaults_used.items()
        ]
        out.append("Defaults used: " + ", ".join(said))  # a whole number as 8,192
    out += [f"Note: {with_flags(n)}" for n in d["notes"]]  # a `parameter` as its flag
    return "\n".join(out)


def layout_line(lay: dict[str, Any]) -> str:
    """A layout as the evaluate text's ``layout:`` line writes it (``lay``: the JSON object's
    ``layout``): degrees, framework, ZeRO, recompute, schedule, batch (packed documents beside the
    sequence length), rank order; counts in the
    one number form of every message (thousands grouped: ``B 4,000,000``, ``s 8,192``)."""
    return (
        f"dp {lay['dp']:,} × tp {lay['tp']} × pp {lay['pp']} × cp {lay['cp']}"
        + (f" {_cp_kind_text(lay)}" if lay["cp"] > 1 else "")
        + f" (ep {lay['ep']}"
        + (f", etp {lay['etp']}" if lay.get("etp", lay["tp"]) != lay["tp"] else "")
        + f"), {lay.get('framework', 'textbook')} ZeRO-{lay['zero_stage']}, recompute {lay['recompute']}"
        + (
            f" (full on the first {','.join(map(str, lay['recompute_layers']))} layers per "
            + ("stage)" if lay["virtual_stages"] == 1 else "model chunk of each stage)")
            if lay.get("recompute_layers") is not None and any(lay["recompute_layers"])
            else ""
        )
        + f", {lay['schedule']}"
        + (f" v={lay['virtual_stages']}" if lay["virtual_stages"] > 1 else "")
        + f", b {lay['micro_batch_size']:,}, B {lay['global_batch_size']:,}, "
        f"m {lay['num_microbatches']:,}, s {lay['seq_len']:,}{_packed(lay)}, rank order {lay.get('rank_order', 'tp-cp-ep-dp-pp')}"
    )


def _packed(lay: dict[str, Any]) -> str:
    """`` (packed documents of 1,024 tokens)`` after the sequence length where the layout's
    sequences are packed documents (``document_lengths``, [[length, count], …]; a spread as
    ``512–2,048``); "" where they are not.

    >>> _packed({"document_lengths": [[1024, 1]]}), _packed({"document_lengths": None})
    (' (packed documents of 1,024 tokens)', '')
    >>> _packed({"document_lengths": [[512, 1], [2048, 1]]})
    ' (packed documents of 512–2,048 tokens)'
    """
    docs = lay.get("document_lengths")
    if not docs:
        return ""
    low, high = min(n for n, _ in docs), max(n for n, _ in docs)
    span = f"{low:,}" if low == high else f"{low:,}–{high:,}"
    return f" (packed documents of {span} tokens)"


def _tables(d: dict[str, Any]) -> list[str]:
    """The ZeRO table and the traffic per axis, each under its title."""
    return [
        "ZeRO stages for this layout (model state per GPU)",
        table_text(
            [
                {
                    "ZeRO": r["zero_stage"],
                    "model state": gb(r["model_state_bytes"]),
                    "reduction": f"{r['reduction']:.2f}×",
                    "DP bytes/step": gb(r["dp_bytes_per_step"]),
                }
                for r in d["zero_table"]
            ]
        ),
        "",
        "Traffic per axis (ring bytes sent per GPU per step)",
        table_text(
            [
                {
                    "axis": r["axis"],
                    "collective": r["collective"],
                    "group": r["group_size"],
                    "bytes/step": gb(r["bytes_per_step"]),
                    "link": r["link"],
                    "time if not overlapped": seconds_text(r["seconds"]),
                    "exposed": seconds_text(r["exposed_seconds"]),
                }
                for r in d["traffic"]
            ]
        ),
    ]


def _count(value: Any) -> str:
    """A count that may be fractional (an interleaved stage's micro-batches in flight, whole
    chunks of a micro-batch) as the ``--per-stage`` table writes it: four significant figures.

    >>> _count(4.428571428571429), _count(3), _count(None)
    ('4.429', '3', 'None')
    """
    return f"{value:,.4g}" if isinstance(value, float) else f"{value}"


def _mtp_apart(d: dict[str, Any]) -> str:
    """The pipeline line's word on the MTP blocks, which ``layers per stage`` (decoder layers,
    what ``--stage-layers`` takes) leaves out: on the stage of the last chunk."""
    mtp = d["model"].get("mtp_layers") or 0
    if not mtp:
        return ""
    return f"; the MTP block{'s' if mtp > 1 else ''} ({mtp}) beside them with the output layer"


def _pipeline_and_step(d: dict[str, Any]) -> list[str]:
    """The pipeline line (bubble, micro-batches in flight, layers per stage) and the step line
    (its terms, MFU and HFU)."""
    lay, out = d["layout"], []
    p, t = d["pipeline"], d["time"]
    out.append(
        f"Pipeline: bubble_fraction {percent_text(p['bubble_fraction'])} of the step, bubble_ratio "
        f"{percent_text(p['bubble_ratio'])} of the micro-batches' time (compute + exposed tp, cp, ep); "
        + (
            f"{_count(p['microbatches_in_flight'])} micro-batch"
            f"{'' if p['microbatches_in_flight'] == 1 else 'es'} in flight on the busiest stage; "
            "layers per stage "
            f"{lay['stage_layers']} (stages counted from 0{_mtp_apart(d)})"
            if p["microbatches_in_flight"] is not None
            else "layers unknown (size-only model)"
        )
    )
    equal = equal_stage_bubble(lay)
    if equal:
        out.append(equal)
    if p.get("stage_microbatch_s"):  # what the schedule's order runs: the bubble's inputs
        out.append(
            "  one micro-batch per stage (forward + backward): "
            + ", ".join(
                f"{r['stage']}: {seconds_text(r['forward_s'])} + {seconds_text(r['backward_s'])}"
                for r in p["stage_microbatch_s"]
            )
        )
    if p.get("megatron_split_flags"):  # what Megatron-LM must be told to build this split
        out.append(
            "  Megatron-LM builds this split with "
            + shlex.join(p["megatron_split_flags"])
            + " (without them it builds L/pp layers a stage and asserts pp divides L: "
            "megatron/training/arguments.py validate_args)"
        )
    terms = " + ".join(f"{x['term']} {seconds_text(x['s'])}" for x in t["step_terms"])
    out.append(
        f"Step: {terms}"
        + (
            f" (activation offload {seconds_text(t['activation_offload_s'])} exposed, in compute)"
            if t.get("activation_offload_s")
            else ""
        )
        + f" = {seconds_text(t['step_s'])}; MFU {percent_text(t['mfu'])}"
        + _mfu_conventions(d, "mfu")
        + _pack_mfu(t)
        + f", HFU {percent_text(t['hfu'])}"
        + _mfu_conventions(d, "hfu")
        + (
            f"; {t['tokens_per_s']:,.0f} tokens/s ({t['tokens_per_s'] / d['num_gpus']:,.0f} per GPU)"
            if t.get("tokens_per_s")
            else ""
        )
    )
    return out


def frontier_row(
    d: dict[str, Any], job_label: str, objective: tuple[str, float], peak_bytes: int
) -> dict[str, Any]:
    """One CSV row of a search answer from its evaluate JSON object: every layout field, every
    memory term, traffic per axis, bubble, step time, MFU, tokens/s, fits (units in the names;
    ``objective`` is the (key, value) of :func:`optimizer.problem.objective_value`, e.g.
    ``objective_s``)."""
    lay, mem, t, p = d["layout"], d["memory"], d["time"], d["pipeline"]
    row: dict[str, Any] = {k: lay[k] for k in SEARCHED_FIELDS}
    row.update(
        {
            "num_gpus": d["num_gpus"],
            "gpu": d["gpu"]["name"],
            "model": d["model"]["name"],
            "global_batch_size": lay["global_batch_size"],
            "seq_len": lay["seq_len"],
            "num_microbatches": lay["num_microbatches"],
            "job": job_label,
        }
    )
    for key in (
        "weights_bytes",
        "gradients_bytes",
        "optimizer_bytes",
        "model_state_bytes",
        "activations_bytes",
        "embedding_activations_bytes",
        "recompute_transient_bytes",
        "total_bytes", "fit_bytes", "capacity_bytes",
    ):  # fmt: skip
        row[key] = mem[key]
    row["peak_bytes_ceil"] = peak_bytes
    for r in d["traffic"]:
        axis = r["axis"] + ("_optimizer_step" if r.get("optimizer_step") else "")
        row[f"{axis}_bytes_per_step"] = r["bytes_per_step"]
        row[f"{axis}_link"] = r["link"]
        row[f"{axis}_exposed_s"] = r["exposed_seconds"]
    row.update(
        {
            "bubble_fraction": p["bubble_fraction"],
            "bubble_ratio": p["bubble_ratio"],
            "compute_s": t["compute_s"],
            "step_s": t["step_s"],
            "mfu": t["mfu"],
            "hfu": t["hfu"],
            "tokens_per_s": t["tokens_per_s"],
            "tokens_per_s_per_gpu": t["tokens_per_s"] / d["num_gpus"]
            if t["tokens_per_s"]
            else None,
            objective[0]: objective[1],
            "fits": mem["fits"],
        }
    )
    return row


def csv_text(rows: list[dict[str, Any]]) -> str:
    """Rows as the CSV text :func:`write_csv` writes (pandas; raw base units), for a download."""
    return str(_csv_frame(rows).to_csv(index=False))


def write_csv(rows: list[dict[str, Any]], path: str) -> None:
    """Rows to CSV with pandas (raw base units).

    Raises
    ------
    InputError
        A path that cannot be written (interface.outputs.output_path's rule).
    """
    out = output_path(path, "csv")
    with writing(out, "csv"):
        _csv_frame(rows).to_csv(out, index=False)


def _csv_frame(rows: list[dict[str, Any]]) -> Any:
    """Rows as a DataFrame for CSV: a list (a per-stage plan's layers per stage or chunk) as the
    comma-separated text the CLI's ``--stage-layers`` / ``--recompute-layers`` take."""
    return frame(
        [
            {k: ",".join(map(str, v)) if isinstance(v, list | tuple) else v for k, v in row.items()}
            for row in rows
        ]
    )
