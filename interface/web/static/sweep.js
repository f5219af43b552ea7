// The sweep tab: a grid's text sent to /api/sweep, its progress followed from the stream (the URL
// keeps the sweep's id, so a reload follows it again), then the summary, the downloads and the
// figure. Every figure and number comes from the API: nothing is computed here.
"use strict";

(async () => {
  // the ways in and the catalogues every tab has (the accelerator table at the bottom)
  await TP.start();
  const form = TP.$("#inputs"), run = TP.$("#run"), cancel = TP.$("#cancel");
  const bar = TP.$("#bar"), text = TP.$("#progress-text"), status = TP.$("#status");

  const layout = (r) => `dp ${r.dp} tp ${r.tp} pp ${r.pp} cp ${r.cp} ep ${r.ep}, ZeRO-${r.zero_stage}, recompute ${r.recompute}, b ${r.micro_batch_size}, ${r.schedule}${r.virtual_stages > 1 ? " v" + r.virtual_stages : ""}`;

  function progress(e) {
    if (e.event === "start") {
      bar.max = Math.max(1, e.todo);
      bar.value = 0;
      text.textContent = `${TP.num(e.todo)} of ${TP.num(e.points)} points to run`;
    } else if (e.event === "progress") {
      bar.value = e.done;
      const left = e.done >= e.todo ? ", done" : `, about ${TP.secs(e.seconds_left)} left`;
      const rate = e.points_per_s ? `, ${TP.fixed(e.points_per_s, 2)} points/s${left}` : "";
      text.textContent = `${TP.num(e.done)} of ${TP.num(e.todo)} points${rate}`;
    }
  }

  function summary(id, s) {
    const counts = Object.entries(s.statuses).map(([k, n]) => `${TP.num(n)} ${k}`).join(", ");
    status.className = "";
    status.innerHTML = `<b id="sweep-done">${TP.num(s.points)} points</b>: ${TP.esc(counts)} <span class="note">(${TP.num(s.ran)} run in ${TP.fixed(s.seconds, 1)} s)</span>`
      + (s.notes || []).map((n) => `<p class="note sweep-note">note: ${TP.esc(n)}</p>`).join("");
    const why = [...s.infeasible.map((w) => ["infeasible", w]), ...s.errors.map((w) => ["refused", w])];
    TP.$("#why").innerHTML = why.length
      ? `<ul class="plain" id="why-list">${why.map(([k, w]) => `<li>${k}, ${TP.esc(w.why)}: ${TP.num(w.points)} point(s), e.g. point ${w.example_point}: ${TP.esc(w.example)}</li>`).join("")}</ul>`
      : "";
    TP.$("#best").innerHTML = TP.table(s.best, [
      ["model", (r) => TP.esc(r.model)],
      ["part", (r) => TP.esc(r.part)],
      ["GPUs", (r) => TP.num(r.gpus)],
      ["layout", (r) => `<span class="mono">${TP.esc(layout(r))}</span>`],
      ["step time", (r) => TP.exact(r.step_s)],
      ["MFU", (r) => TP.pct(r.mfu)],
      ["time to train", (r) => TP.secs(r.time_to_train_s)],
      ["cost", (r) => (r.cost_usd === null ? "—" : `$${TP.num(Math.round(r.cost_usd))}`)],
    ], 'id="best-table"');
    TP.$("#csv").href = `/api/sweep/${id}/results.csv`;
    TP.$("#parquet").href = `/api/sweep/${id}/results.parquet`;
    TP.$("#answer").hidden = false;
    // only the metrics the results have (time to train needs tokens, cost a price too), the
    // one `trainplan sweep-plot` draws first
    const metric = TP.$("#metric");
    for (const o of [...metric.options]) o.hidden = o.disabled = !s.metrics.includes(o.value);
    metric.value = s.metric;
    metric.closest("p").hidden = !s.metrics.length; // no point answered: no figure to draw
    const draw = () => TP.figure(TP.$("#chart"), `/api/sweep/${id}/figure.svg?kind=scaling&metric=${metric.value}`);
    metric.onchange = draw;
    TP.$("#chart").innerHTML = "";
    if (s.metrics.length) draw();
  }

  async function follow(id) {
    TP.setPageParam("id", id);
    TP.$("#progress").hidden = false;
    TP.$("#answer").hidden = true;
    status.className = "muted";
    status.textContent = "running…";
    run.disabled = true;
    cancel.hidden = false;
    cancel.onclick = () => {
      cancel.disabled = true; // the batches running now end first, then the stream says cancelled
      status.textContent = "cancelling… (after the batches running now)";
      fetch(`/api/sweep/${id}`, { method: "DELETE" });
    };
    const last = await TP.stream(`/api/sweep/${id}/stream`, progress);
    run.disabled = false;
    cancel.hidden = true;
    cancel.disabled = false;
    TP.$("#progress").hidden = true;
    if (!last) return;
    if (last.event === "cancelled") {
      status.textContent = `cancelled after ${TP.num(last.done)} points; their rows are in the downloads`;
      TP.$("#csv").href = `/api/sweep/${id}/results.csv`;
      TP.$("#parquet").href = `/api/sweep/${id}/results.parquet`;
      TP.$("#answer").hidden = false;
      return;
    }
    summary(id, last.summary);
  }

  // Another sweep runs on the server (one at a time): beside the refusal, its page and a button
  // that cancels it and follows it here until it stops (then Start runs this grid).
  function busy(id) {
    const box = TP.$("#error");
    const link = document.createElement("a");
    link.id = "running-sweep";
    link.href = `/sweep?id=${encodeURIComponent(id)}`;
    link.textContent = "follow the running sweep";
    const stop = document.createElement("button");
    stop.type = "button";
    stop.id = "cancel-running";
    stop.textContent = "Cancel it";
    stop.addEventListener("click", async () => {
      stop.disabled = true;
      await fetch(`/api/sweep/${encodeURIComponent(id)}`, { method: "DELETE" });
      TP.showError("");
      follow(id);
    });
    box.append(" ", link, " ", stop);
  }

  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const res = await fetch("/api/sweep", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ grid: TP.$("#grid").value }),
    });
    const body = await res.json().catch(() => ({ error: `the server answered ${res.status}` }));
    if (!res.ok) {
      TP.showError(body.error);
      if (body.running) busy(body.running);
      return;
    }
    TP.showError("");
    follow(body.id);
  });

  const id = new URLSearchParams(location.search).get("id");
  if (id) follow(id);
  document.body.dataset.ready = "true"; // listening: what the user does now is seen
})();
