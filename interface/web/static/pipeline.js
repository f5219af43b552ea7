// The pipeline tab: /api/pipeline (its numbers, without the passes) and its timeline figure.
"use strict";
(async () => {
  await TP.start("stages=4&microbatches=8&schedule=1f1b");
  const form = TP.$("#inputs"), v = TP.$("input[name=virtual-stages]", form);
  // interleaved needs v > 1 (a 422 at once with v = 1): choosing it with v empty or 1 sets v = 2,
  // and leaving it takes back the 2 it set (a v the user typed stays)
  let setV = false;
  TP.$("select[name=schedule]", form).addEventListener("change", (e) => {
    if (e.target.value === "interleaved" && ["", "1"].includes(v.value.trim())) { v.value = "2"; setV = true; }
    else if (e.target.value !== "interleaved" && setV && v.value.trim() === "2") { v.value = ""; setV = false; }
  });
  v.addEventListener("input", () => { setV = false; });
  const g = (x) => `${Number(Number(x).toPrecision(6))}`; // the CLI's f"{x:g}"
  TP.bind(form, async (q) => {
    const r = await TP.api("pipeline", `/api/pipeline?${q}&timeline=false`);
    if (!r) return;
    TP.$("#bubble").innerHTML = [
      ["bubble_fraction", `${r.bubble_fraction_exact} = ${TP.pct(r.bubble_fraction)}`, `idle share of the step, ${r.bubble_fraction_formula}`, "bubble-fraction"],
      ["bubble_ratio", TP.pct(r.bubble_ratio), `bubble / ideal compute, ${r.bubble_ratio_formula}`, "bubble-ratio"],
      ["step", `${r.step_time_units} units`, `${r.schedule}: ${r.stages} ${r.pass_times ? "ranks" : "stages"} × ${r.microbatches} micro-batches, v = ${r.virtual_stages}, ${r.pass_times ? `T_F ${g(r.pass_times.t_f)}, T_B ${g(r.pass_times.t_b)}, T_W ${g(r.pass_times.t_w)}${r.pass_times.t_fb === null ? "" : `, F&B ${g(r.pass_times.t_fb)}`} (one chunk's passes)` : `backward = ${r.backward_ratio} × forward`}`],
    ].map(([k, v, note, id]) => `<div><b ${id ? `id="${id}"` : ""}>${TP.esc(v)}</b><span>${k}: ${TP.esc(note)}</span></div>`).join("");
    // the split-backward schedules (zb-*, dualpipe*): the CLI's summary (interface/render/
    // timeline_text.py split_summary) — its closed form, span bubble and, per rank, the chunk
    // micro-batches in flight and the W buffers, not held_per_stage (those in a rank's layers)
    const split = r.chunks_held_per_stage !== undefined, c = r.closed_form;
    TP.$("#split").hidden = !split;
    if (split) {
      TP.$("#split").innerHTML = [
        ["bubble", `${TP.esc(g(r.bubble_time_units))} time units = ${TP.pct(r.bubble_fraction)} of the step (${TP.esc(r.bubble_fraction_formula)}) — ${TP.esc(r.bubble_source)}`],
        ["closed form", c.applies ? `<span id="closed-form">${TP.esc(c.formula)} = ${TP.esc(g(c.value))}</span> — ${TP.esc(c.source)}` : `none: ${TP.esc(c.why)}; the simulation stands`],
        ["span bubble", `<span id="span-bubble">${TP.esc(g(r.span_bubble_units))} time units</span> — ${TP.esc(r.span_bubble_source)}`],
        ["step", `${TP.esc(g(r.step_time_units))} time units — ${TP.esc(r.step_source)}`],
      ].map(([k, v]) => `<li><b>${k}</b> ${v}</li>`).join("");
    }
    TP.$("#held-note").textContent = split ? `Per rank: chunk micro-batches in flight (forward to last backward) and W buffers (between I and W) — ${r.held_source}.` : "Activations of this many micro-batches are held at each stage's peak (stage 0 first).";
    TP.$("#held").innerHTML = split
      ? TP.table(r.chunks_held_per_stage.map((h, i) => ({ h, i, w: r.w_pending_per_stage[i] })), [["rank", (x) => x.i], ["chunk micro-batches in flight", (x) => g(x.h)], ["W buffers", (x) => g(x.w)]], 'id="held-table"')
      : TP.table(r.held_per_stage.map((h, i) => ({ h, i })), [["stage", (x) => x.i], ["micro-batches held", (x) => g(x.h)]], 'id="held-table"');
    TP.figure(TP.$("#timeline"), `/api/figures/pipeline?${q}`, `${r.schedule}, ${r.stages} stages, ${r.microbatches} micro-batches, v = ${r.virtual_stages}, bubble ${TP.pct(r.bubble_fraction)}`);
  });
})();
