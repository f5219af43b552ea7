// The frontier tab: the Pareto frontier with its progress, its chart (each point a link to the
// Planner), its points, and the CSV download.
"use strict";
TP.searchPage("frontier", async (last, q) => {
  const r = last.result, answer = TP.$("#answer");
  answer.hidden = r.status === "infeasible";
  if (answer.hidden) return;
  csvLink(TP.$("#csv"), `/api/figures/frontier.csv?${q}`);
  // what --headroom held every point to, as the CLI's "Note:" lines (frontier JSON "notes")
  TP.$("#frontier-notes").innerHTML = (r.notes || []).map((n) => `<li>note: ${TP.esc(n)}</li>`).join("");
  // a token a narrow cell must not split ("ZeRO-1", "per-stage", "H100-SXM", "dp 8", "72.66 GB"):
  // the layout wraps between its pairs only, as the CLI's columns read
  const nw = (t) => `<span class="nw">${t}</span>`;
  const second = { memory: [{ html: "memory/<wbr>GPU" }, (p) => nw(TP.gb(p.total_bytes))], gpus: ["GPUs", (p) => TP.num(p.num_gpus)], price: ["$/hour", (p) => TP.num(p.price_per_hour)] }[r.against];
  TP.$("#points").innerHTML = TP.table(r.points, [
    // step times as the CLI's (seconds, 3 decimals): rows 0.1 min apart still read apart; against
    // the GPU count, the GPUs column below is that axis (no second column of it)
    ["#", (p, i) => i + 1], ["step", (p) => TP.exact(p.step_s)], ...(r.against === "gpus" ? [] : [second]), [{ html: "fit/<wbr>GPU" }, (p) => nw(TP.gb(p.fit_bytes))], ["MFU", (p) => TP.pct(p.mfu)],
    ["GPUs", (p) => `${TP.num(p.num_gpus)} × ${nw(TP.esc(p.gpu))}`],
    [{ html: "frame<wbr>work" }, (p) => TP.esc(p.framework)],
    // the layout in the CLI's words, on one line where the column has room, else two: the
    // degrees, then ZeRO, recomputation, micro-batch and schedule (never a token a line)
    ["layout", (p) => `${nw(`dp ${p.dp} tp ${p.tp} pp ${p.pp} cp ${p.cp} ep ${p.ep}`)} ${nw(`ZeRO-${p.zero_stage} ${TP.esc(p.recompute)} b ${p.micro_batch_size} ${TP.esc(p.schedule)}${p.virtual_stages > 1 ? " v" + p.virtual_stages : ""}`)}`],
    // the per-stage frontier (frontier --per-stage): each point's plan with its proven gap (as
    // the per-stage search's answer says it: no split searched is faster by more), its stages,
    // and the gain
    ...(r.per_stage ? [
      [{ html: "plan, proven <wbr>gap" }, (p) => nw(TP.esc(p.plan)) + (p.proven === false ? ", not proven" : "")
        + `<br><span class="nw gap" title="proven gap: no split searched is faster by more">${p.gap_s === null ? "no gap proven" : `gap ${TP.gapText(p.gap_s)}`}</span>`],
      // short headers and breakable cells: the table fits a 1,280-px window without a sideways
      // scroll; the layers over the recomputed layers, each list on a line of its own where it
      // fits (four stages do), breaking after a "/" where it does not
      ["layers / recomp. per stage", (p) => (p.stage_layers ? `<div class="stages">${p.stage_layers.join("/<wbr>")} /<br>${p.recompute_layers.join("/<wbr>")}</div>` : "—")],
      // the best uniform step at the same value over the gain: one column of two lines
      [{ html: "uniform step, <wbr>gain" }, (p) => `${p.uniform_step_s === null ? "none fits" : TP.exact(p.uniform_step_s)}<br><span class="gain">${p.gain === null ? "—" : `${TP.fixed(p.gain, 3)}×`}</span>`],
    ] : []),
    ["", (p, i) => `<a class="planner-link" href="${TP.esc(last.planner[i])}">planner</a>`],
  ], `id="points-table"${r.per_stage ? ' class="per-stage"' : ""}`);
  const chart = TP.$("#chart");
  await TP.figure(chart, `/api/figures/frontier?${q}`, `${r.points.length} points against ${r.against}`);
  // narrower than the chart (a phone): show its right end, where the fastest points and the
  // title are (interface/render/plots.frontier_chart), not its left axis alone
  chart.scrollLeft = chart.scrollWidth;
  TP.$$("a[target]", chart).forEach((a) => a.removeAttribute("target")); // open here, as a page link
  // an uploaded config.json too large for a URL: the table's links and the chart's points open
  // the planner with the file from this tab's storage (TP.largeLink; the chart's links, made by
  // the server, leave such a file out)
  TP.$$("#points-table a.planner-link").forEach((a) => TP.largeLink(a));
  TP.$$("g[id^=point-]", chart).forEach((g) => {
    const a = g.closest("a") || TP.$("a", g), i = Number(g.id.slice(6)) - 1;
    if (a && last.planner[i] && last.planner[i].length > TP.POST_LIMIT) {
      a.removeAttribute("xlink:href");
      TP.largeLink(a, last.planner[i]);
    }
  });
  const tip = TP.$("#tooltip");
  const rows = TP.$$("#points-table tbody tr");
  const light = (i, on) => {
    rows[i]?.classList.toggle("highlight", on);
    const g = TP.$(`#point-${i + 1}`, chart);
    if (g) g.style.opacity = on ? "1" : "";
  };
  TP.$$("g[id^=point-]", chart).forEach((g) => {
    const i = Number(g.id.slice(6)) - 1, p = r.points[i];
    g.style.cursor = "pointer";
    g.addEventListener("mouseenter", () => {
      light(i, true);
      tip.style.display = "block";
      tip.textContent = `#${i + 1}: ${TP.secs(p.step_s)} per step, ${TP.gb(p.total_bytes)} per GPU, MFU ${TP.pct(p.mfu)} — ${p.framework} dp ${p.dp} tp ${p.tp} pp ${p.pp} cp ${p.cp}, ZeRO-${p.zero_stage}, ${p.recompute}, b ${p.micro_batch_size}, ${p.schedule} (click: open in the Planner)`;
    });
    g.addEventListener("mousemove", (e) => { tip.style.left = `${e.clientX + 14}px`; tip.style.top = `${e.clientY + 10}px`; });
    g.addEventListener("mouseleave", () => { light(i, false); tip.style.display = "none"; });
  });
  rows.forEach((row, i) => {
    row.addEventListener("mouseenter", () => light(i, true));
    row.addEventListener("mouseleave", () => light(i, false));
  });
});

// The CSV download: a link while its URL is short; longer (an uploaded config.json), a click
// POSTs the query (TP.send) and saves the answer, as the chart and the search itself are sent.
function csvLink(a, url) {
  a.onclick = null;
  a.href = url.length <= TP.POST_LIMIT ? url : "#";
  if (url.length <= TP.POST_LIMIT) return;
  a.onclick = async (e) => {
    e.preventDefault();
    const res = await TP.send(url);
    if (!res.ok) return TP.showError((await res.json().catch(() => ({}))).error || `the server answered ${res.status}`);
    const blob = URL.createObjectURL(await res.blob());
    const save = Object.assign(document.createElement("a"), { href: blob, download: "frontier.csv" });
    document.body.append(save);
    save.click();
    save.remove();
    setTimeout(() => URL.revokeObjectURL(blob), 1000);
  };
}
