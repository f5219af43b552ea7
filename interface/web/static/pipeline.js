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
  TP.bind(form, async (q) => {
    const r = await TP.api("pipeline", `/api/pipeline?${q}&timeline=false`);
    if (!r) return;
    TP.$("#bubble").innerHTML = [
      ["bubble_fraction", `${r.bubble_fraction_exact} = ${TP.pct(r.bubble_fraction)}`, `idle share of the step, ${r.bubble_fraction_formula}`, "bubble-fraction"],
      ["bubble_ratio", TP.pct(r.bubble_ratio), `bubble / ideal compute, ${r.bubble_ratio_formula}`, "bubble-ratio"],
      ["step", `${r.step_time_units} units`, `${r.schedule}: ${r.stages} stages × ${r.microbatches} micro-batches, v = ${r.virtual_stages}, backward = ${r.backward_ratio} × forward`],
    ].map(([k, v, note, id]) => `<div><b ${id ? `id="${id}"` : ""}>${TP.esc(v)}</b><span>${k}: ${TP.esc(note)}</span></div>`).join("");
    TP.$("#held").innerHTML = TP.table(r.held_per_stage.map((h, i) => ({ h, i })), [["stage", (x) => x.i], ["micro-batches held", (x) => x.h]], 'id="held-table"');
    TP.figure(TP.$("#timeline"), `/api/figures/pipeline?${q}`, `${r.schedule}, ${r.stages} stages, ${r.microbatches} micro-batches, v = ${r.virtual_stages}, bubble ${TP.pct(r.bubble_fraction)}`);
  });
})();
