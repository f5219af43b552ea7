// trainplan's pages: the URL is the page's state; every figure and number comes from the API.
// This file: reading and writing the state, calling the API, the error line, formatting for the
// eye (GB, %, durations), tables, and the accelerator table at the bottom of every page.
"use strict";

const TP = (() => {
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

  // ---------------------------------------------------------------- formatting (display only)
  const gb = (b) => (b === null || b === undefined ? "—" : `${(b / 1e9).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 })} GB`);
  const pct = (x) => (x === null || x === undefined ? "—" : `${(x * 100).toFixed(1)}%`);
  const num = (x) => (x === null || x === undefined ? "—" : Number(x).toLocaleString("en-US"));
  function secs(s) {
    if (s === null || s === undefined) return "—";
    if (s < 1) return `${(s * 1e3).toLocaleString("en-US", { maximumFractionDigits: 1, minimumFractionDigits: 1 })} ms`;
    if (s < 120) return `${s.toFixed(3)} s`;
    if (s < 7200) return `${(s / 60).toFixed(1)} min`;
    if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
    return `${(s / 86400).toFixed(1)} days`;
  }
  const esc = (t) => String(t).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

  // A table from rows and [header, cell(row)] columns.
  function table(rows, columns, attrs = "") {
    const head = columns.map(([h]) => `<th>${esc(h)}</th>`).join("");
    const body = rows
      .map((r, i) => `<tr data-row="${i}">${columns.map(([, f]) => `<td>${f(r, i)}</td>`).join("")}</tr>`)
      .join("");
    return `<table ${attrs}><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
  }

  // ---------------------------------------------------------------- the state: URL <-> form
  // Each form field's name is the query parameter (the CLI option without dashes). Empty fields
  // are left out (the CLI's default); a field with data-multi holds a comma list sent repeated.
  function fill(form, params) {
    for (const el of $$("[name]", form)) {
      if (el.name.startsWith("_")) continue; // the page's own controls, not parameters
      const values = params.getAll(el.name);
      if (el.type === "checkbox") el.checked = values.includes("true");
      else if (el.type === "radio") el.checked = values.includes(el.value);
      else el.value = el.dataset.multi !== undefined ? values.join(",") : values.length ? values[values.length - 1] : "";
    }
  }

  function query(form) {
    const q = new URLSearchParams();
    for (const el of $$("[name]", form)) {
      if (el.disabled || el.closest("[hidden]") || el.name.startsWith("_")) continue;
      if (el.type === "checkbox") {
        if (el.checked) q.append(el.name, "true");
      } else if (el.type === "radio") {
        if (el.checked && el.value) q.append(el.name, el.value);
      } else if (el.dataset.multi !== undefined) {
        for (const v of el.value.split(",").map((x) => x.trim()).filter(Boolean)) q.append(el.name, v);
      } else if (el.value.trim() !== "") q.append(el.name, el.value.trim());
    }
    return q;
  }

  // The link's options that have no field on the form (a search answer's cluster options, say):
  // with passThrough they travel with every query, unchanged, so the page shows the linked plan.
  function linkOnly(form) {
    const names = new Set($$("[name]", form).map((el) => el.name));
    return [...new URLSearchParams(location.search)].filter(([k]) => !names.has(k));
  }

  // Keep the URL in step with the form; call update(query) now and on every change (debounced).
  function bind(form, update, { wait = 250, pageOnly = [], passThrough = false } = {}) {
    fill(form, new URLSearchParams(location.search));
    const extra = passThrough ? linkOnly(form) : [];
    const full = () => {
      const q = query(form);
      for (const [k, v] of extra) q.append(k, v);
      return q;
    };
    let timer = null;
    const changed = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        const q = full();
        const keep = new URLSearchParams(location.search);
        for (const k of pageOnly) if (keep.has(k)) q.set(k, keep.get(k));
        history.replaceState(null, "", `${location.pathname}?${q}`);
        update(q);
      }, wait);
    };
    form.addEventListener("input", changed);
    form.addEventListener("change", changed);
    form.addEventListener("submit", (e) => e.preventDefault());
    update(full());
    return changed;
  }

  // A first visit (no query) starts from an example, so every tab shows something.
  function example(q) {
    if (!location.search) history.replaceState(null, "", `${location.pathname}?${q}`);
  }

  function setPageParam(key, value) {
    const q = new URLSearchParams(location.search);
    q.set(key, value);
    history.replaceState(null, "", `${location.pathname}?${q}`);
  }

  // ---------------------------------------------------------------- the API
  // The error line is the CLI's: "Error: " and the API's one line.
  function showError(message) {
    const box = $("#error");
    box.textContent = message ? `Error: ${message}` : "";
    box.hidden = !message;
    document.body.classList.toggle("has-error", Boolean(message));
  }

  const latest = {};
  // GET a JSON object; answers null for a stale reply (a newer call of the same kind was made).
  async function api(kind, url) {
    const ticket = (latest[kind] = (latest[kind] || 0) + 1);
    const res = await fetch(url);
    const body = await res.json().catch(() => ({ error: `the server answered ${res.status}` }));
    if (ticket !== latest[kind]) return null;
    if (!res.ok || body.error) {
      showError(body.error || `the server answered ${res.status}`);
      return null;
    }
    showError("");
    return body;
  }

  // An API figure (SVG) into a container, inline (its text and links stay live).
  async function figure(container, url) {
    const ticket = (container._ticket = (container._ticket || 0) + 1);
    container.classList.add("loading");
    const res = await fetch(url);
    const text = await res.text();
    if (ticket !== container._ticket) return false;
    container.classList.remove("loading");
    if (!res.ok) return false;
    container.innerHTML = text;
    container.dataset.src = url;
    return true;
  }

  // ---------------------------------------------------------------- catalogue, GPUs, the table
  async function catalogues() {
    const [gpus, models] = await Promise.all([fetch("/api/gpus").then((r) => r.json()), fetch("/api/models").then((r) => r.json())]);
    for (const sel of $$("select[data-gpus]")) {
      const keep = new URLSearchParams(location.search).get(sel.name);
      for (const g of gpus) sel.add(new Option(`${g.name} (${g.memory_gb} ${g.memory_unit}, ${g.bf16_tflops} TFLOP/s)`, g.name));
      if (keep) sel.value = keep;
    }
    for (const sel of $$("select[data-models]")) {
      const keep = new URLSearchParams(location.search).get(sel.name);
      for (const m of models) sel.add(new Option(`${m.name} (${(m.num_params / 1e9).toFixed(1)}B)`, m.name));
      if (keep) sel.value = keep;
    }
    const box = $("#gpu-table");
    if (box) {
      box.innerHTML = table(gpus, [
        ["accelerator", (g) => esc(g.name)],
        ["memory", (g) => `${g.memory_gb} ${esc(g.memory_unit)}`],
        ["dense BF16 TFLOP/s", (g) => num(g.bf16_tflops)],
        ["NVLink GB/s", (g) => num(g.nvlink_gbps)],
        ["NVLink domain", (g) => num(g.nvlink_domain)],
        ["scale-out GB/s", (g) => num(g.scaleout_gbps)],
        ["status", (g) => esc(g.status)],
        ["source", (g) => esc(g.source)],
      ]);
    }
  }

  return { $, $$, example, gb, pct, num, secs, esc, table, bind, linkOnly, query, fill, setPageParam, api, figure, showError, catalogues };
})();

// The tab's script waits for the catalogues, so its form's selects are filled before it reads them.
window.catalogues = TP.catalogues();

// A search or frontier with its progress (/api/…/stream: one JSON event a line); onEvent(event)
// for each; answers the last event, or null after an error (shown as the error line).
TP.stream = async (url, onEvent) => {
  const res = await fetch(url);
  if (!res.ok) {
    const body = await res.json().catch(() => ({ error: `the server answered ${res.status}` }));
    TP.showError(body.error);
    return null;
  }
  TP.showError("");
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", last = null;
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (!line) continue;
      last = JSON.parse(line);
      if (last.event === "error") { TP.showError(last.error); return null; }
      onEvent(last);
    }
    if (done) return last;
  }
};

// The search and frontier tabs: run on the button (and on arrival when the URL holds a job),
// with a visible progress indicator; render(result event, query) draws the answer.
TP.searchPage = async (kind, render) => {
  TP.example("model=llama3-70b&gpus=64");
  await window.catalogues;
  const form = TP.$("#inputs"), bar = TP.$("#bar"), text = TP.$("#progress-text"), button = TP.$("#run");
  TP.fill(form, new URLSearchParams(location.search));
  const keepUrl = () => history.replaceState(null, "", `${location.pathname}?${TP.query(form)}`);
  form.addEventListener("input", keepUrl);
  form.addEventListener("change", keepUrl);
  async function run() {
    const q = TP.query(form);
    keepUrl();
    button.disabled = true;
    TP.$("#progress").hidden = false;
    TP.$("#status").className = "muted";
    TP.$("#status").textContent = "";
    TP.$("#explanation").innerHTML = "";
    bar.removeAttribute("value");
    const t0 = performance.now();
    const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(1)} s`;
    text.textContent = "building the cost tables…";
    const tick = setInterval(() => { text.dataset.elapsed = elapsed(); }, 200);
    const last = await TP.stream(`/api/${kind}/stream?${q}`, (e) => {
      if (e.event === "tables") {
        bar.max = e.total;
        bar.value = e.done;
        text.textContent = `cost tables: ${TP.num(e.done)} of ${TP.num(e.total)} shapes; CP-SAT solving…`;
      } else if (e.event === "solution") {
        bar.removeAttribute("value");
        text.textContent = `CP-SAT: ${e.count} solution(s) found, best so far ${e.best}`;
      }
    });
    clearInterval(tick);
    button.disabled = false;
    if (!last) { TP.$("#progress").hidden = true; return; }
    bar.max = 1;
    bar.value = 1;
    text.textContent = `done in ${elapsed()}`;
    const r = last.result, status = TP.$("#status");
    // A per-stage answer (search --per-stage) holds its proof status in per_stage, in the CLI's
    // words; the per-stage frontier (per_stage true) in status, in the same words.
    const proof = r.per_stage && r.per_stage.status ? r.per_stage.status : r.status;
    status.className = `status ${proof}`;
    status.id = "status";
    status.textContent = r.per_stage
      ? { optimal: "OPTIMAL (proven over the shapes searched)", feasible: "FEASIBLE (best found within the time limit, not proven)" }[proof]
      : { optimal: "proven optimal (CP-SAT)", feasible: "best found within the time limit — not proven optimal", infeasible: "no layout satisfies the constraints" }[proof];
    TP.$("#explanation").innerHTML = (r.explanation || []).map((l) => `<li>${TP.esc(l)}</li>`).join("");
    render(last, q);
  }
  form.addEventListener("submit", (e) => { e.preventDefault(); run(); });
  const q0 = new URLSearchParams(location.search);
  if ((q0.get("model") || q0.get("params")) && q0.get("gpus")) run();
};
