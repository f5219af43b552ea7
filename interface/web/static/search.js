// The search tab: the best layout, proven optimal by CP-SAT, with its progress.
"use strict";
TP.searchPage("search", (last, q) => {
  const r = last.result, box = TP.$("#answers");
  if (r.status === "infeasible") { box.innerHTML = ""; return; }
  const answers = r.answers || [r, ...(r.top || [])];
  box.innerHTML = answers.map((a, i) => {
    const lay = a.layout, m = a.memory, t = a.time;
    return `<div class="card answer" data-answer="${i}">
      <h3>${answers.length > 1 ? `#${i + 1}: ` : ""}${TP.esc(a.job)}</h3>
      <p>objective (${TP.esc(a.objective_kind)}): <b class="objective">${TP.esc(a.objective_text)}</b></p>
      <p class="mono">dp ${lay.dp} × tp ${lay.tp} × pp ${lay.pp} × cp ${lay.cp} (ep ${lay.ep}), ${lay.framework} ZeRO-${lay.zero_stage}, recompute ${lay.recompute}, ${lay.schedule}${lay.virtual_stages > 1 ? " v=" + lay.virtual_stages : ""}, b ${lay.micro_batch_size}, B ${lay.global_batch_size}, m ${lay.num_microbatches}, s ${lay.seq_len}</p>
      <div class="big"><div><b class="total">${TP.gb(m.total_bytes)}</b><span>memory per GPU of ${TP.gb(m.capacity_bytes)}</span></div>
      <div><b class="step">${TP.secs(t.step_s)}</b><span>step time</span></div><div><b class="mfu">${TP.pct(t.mfu)}</b><span>MFU</span></div>
      <div><b>${TP.pct(t.hfu)}</b><span>HFU</span></div></div>
      <p><a class="planner-link" href="${TP.esc(last.planner[i])}">Open this layout in the Planner</a></p>
      <div class="figure memory-figure"></div>
    </div>`;
  }).join("") + `<p class="note">Searched ${TP.num(r.candidates)} candidates (${TP.num(r.shapes)} shapes × ZeRO × recompute, ${r.jobs} job(s)); tables ${r.tables_seconds.toFixed(2)} s, CP-SAT ${r.solve_seconds.toFixed(2)} s.</p>`;
  TP.$$(".answer").forEach((card, i) => TP.figure(TP.$(".memory-figure", card), `/api/figures/memory?${last.planner[i].split("?")[1]}`));
});
