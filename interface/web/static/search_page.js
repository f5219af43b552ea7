// The search and frontier tabs' shared page (loaded after app.js on those two tabs only, see
// interface/web/pages.py SCRIPTS): the form, the streamed run with its progress and Cancel.
"use strict";

// A proven gap (per_stage.gap_s, a per-stage frontier point's gap_s; seconds; null: the time
// limit left no bound) in the unit it is read in, as the CLI prints it
// (interface/render/per_stage_report.py gap_text): ns below a µs, µs below a ms, then seconds.
TP.gapText = (s) => (s === null || s === undefined ? "none proven (time limit)"
  : s < 1e-6 ? `${TP.fixed(s * 1e9, 0)} ns` : s < 1e-3 ? `${TP.fixed(s * 1e6, 1, true)} µs` : TP.exact(s));

// The search and frontier tabs: run on the button (and on arrival when the URL holds a job),
// with a visible progress indicator and a Cancel button; render(result event, query) draws the
// answer. The button stays live while a search runs (the first visit's example, or the user's
// last): a click cancels that search and starts the one the fields now hold.
TP.searchPage = async (kind, render) => {
  await TP.start("model=llama3-70b&gpus=64");
  const form = TP.$("#inputs"), bar = TP.$("#bar"), text = TP.$("#progress-text"), cancel = TP.$("#cancel");
  TP.fill(form, TP.restoreLarge(new URLSearchParams(location.search)));
  TP.conditions(form); // the per-stage fields and the FP8 recipe apply only with their switch
  TP.upload(form, TP.$("select[name=model]", form));
  const extra = TP.linkOnly(form);
  const withExtra = (q) => { for (const [k, v] of extra) q.append(k, v); return q; };
  // the query the shown answer ran (null: none yet): an edit that leaves the fields elsewhere
  // dims the answer, as the planner's pending request does — the address already holds the
  // new inputs, and the answer under it is not theirs until Search runs them
  let answered = null, running = null;
  const staleness = () => {
    const edited = answered !== null && withExtra(TP.query(form)).toString() !== answered;
    TP.$("#results").classList.toggle("stale", edited || running !== null);
    TP.$("#results").title = edited ? "the inputs changed: press Search for their answer" : "";
  };
  const keepUrl = (e) => {
    if (e && e.isTrusted) staleness();
    if (e && e.isTrusted) TP.dropExample();
    TP.conditions(form);
    // the field an error was said against, edited: the error no longer describes the inputs
    if (e && e.isTrusted && e.target?.getAttribute?.("aria-invalid") === "true") TP.showError("");
    TP.setAddress(withExtra(TP.query(form, false)));
    TP.remember();
  };
  form.addEventListener("input", keepUrl);
  form.addEventListener("change", keepUrl);
  cancel.addEventListener("click", () => running?.abort());
  async function run() {
    running?.abort();
    const controller = (running = new AbortController());
    const q = withExtra(TP.query(form));
    keepUrl();
    TP.showError(""); // a new search: the last one's refusal is not this one's
    cancel.hidden = false;
    TP.$("#progress").hidden = false;
    const status = TP.$("#status");
    status.className = "muted";
    status.textContent = "";
    TP.$("#explanation").innerHTML = "";
    TP.$("#settings-cost").hidden = true;
    if (TP.$("#time-limit-note")) TP.$("#time-limit-note").hidden = true;
    TP.$("#results").classList.add("stale");
    bar.removeAttribute("value");
    const t0 = performance.now();
    const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(1)} s`;
    text.textContent = "building the cost tables…";
    const tick = setInterval(() => { text.dataset.elapsed = elapsed(); }, 200);
    const last = await TP.stream(`/api/${kind}/stream?${q}`, (e) => {
      if (e.event === "tables") {
        bar.max = e.total;
        bar.value = e.done;
        // CP-SAT starts once every shape is costed, or once a time limit cut the tables short
        // (e.cut: the CLI's words for what it left out); the table building says so until then
        text.textContent = e.cut ? `${e.cut}; CP-SAT solving…`
          : `cost tables: ${TP.num(e.done)} of ${TP.num(e.total)} shapes` + (e.done >= e.total ? "; CP-SAT solving…" : "");
      } else if (e.event === "solution") {
        bar.removeAttribute("value");
        text.textContent = `CP-SAT: ${e.count} solution(s) found, best so far ${e.best}`;
      }
    }, controller.signal);
    clearInterval(tick);
    if (running !== controller) return; // a newer run took over
    running = null;
    cancel.hidden = true;
    if (controller.signal.aborted) {
      TP.showCancelled(bar, text, status, elapsed());
      return;
    }
    if (!last) { // refused: the error line above names the field; the last answer stays dimmed
      TP.$("#progress").hidden = true;
      status.textContent = "not run: an input is refused (the error above names it)";
      return;
    }
    answered = q.toString();
    staleness();
    bar.max = 1;
    bar.value = 1;
    // a search the server answered before comes from its cache: this request's time is said,
    // and the answer's own times (tables, CP-SAT) are the earlier run's
    text.textContent = last.cached
      ? `done in ${elapsed()}: the server's saved answer to this same search (the times below are of the run that computed it)`
      : `done in ${elapsed()}`;
    const r = last.result;
    // A per-stage answer (search --per-stage) holds its proof status in per_stage, in the CLI's
    // words; the per-stage frontier (per_stage true) in status, in the same words.
    const proof = r.per_stage && r.per_stage.status ? r.per_stage.status : r.status;
    status.className = `status ${proof}`;
    // the per-stage frontier cut by its budget or a time limit says why in the CLI's headline
    // words (proof); a per-stage optimal is said with what it is proven over (proof_scope: the
    // answer's in per_stage, the frontier's at the top; interleaved shapes only over equal chunks)
    const scope = (r.per_stage && r.per_stage.proof_scope) || r.proof_scope;
    status.textContent = r.proof && proof !== "optimal" ? `${proof.toUpperCase()} (${r.proof})` : r.per_stage
      ? { optimal: `OPTIMAL (proven over ${scope})`, feasible: "FEASIBLE (not proven: a time limit stopped it, or a gap is left)" }[proof]
      : { optimal: "proven optimal (CP-SAT)", feasible: "best found within the time limit — not proven optimal", infeasible: "no layout satisfies the constraints" }[proof];
    TP.$("#explanation").innerHTML = (r.explanation || []).map((l) => `<li>${TP.esc(l)}</li>`).join("");
    // what --time-limit did (the tables it cut, the time it passed: the CLI's "Note:" line)
    const limited = TP.$("#time-limit-note"), limitNote = r.time_limit_note || r.params_note;
    if (limited) {
      limited.hidden = !limitNote;
      limited.textContent = limitNote ? `note: ${limitNote}` : "";
    }
    // what the user's own settings cost: the best layout without them (the CLI's note)
    const cost = TP.$("#settings-cost"), costNote = r.settings_cost && r.settings_cost.note;
    cost.hidden = !costNote;
    cost.textContent = costNote ? `note: ${costNote}` : "";
    render(last, q);
  }
  form.addEventListener("submit", (e) => { e.preventDefault(); run(); });
  document.body.dataset.ready = "true";
  const q0 = new URLSearchParams(location.search);
  if ((q0.get("model") || q0.get("params")) && q0.get("gpus")) run();
};
