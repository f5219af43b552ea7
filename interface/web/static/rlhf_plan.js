// The RLHF tab's step plans (loaded before rlhf.js, see interface/web/pages.py SCRIPTS): one step
// plan presented as the CLI's plan_lines prints it (interface/rlhf/text.py), for the faithful
// accounting and for the placement plan; and the placement plan section, trainplan rlhf-plan
// (/api/rlhf-plan/stream) run on its button with its progress and Cancel. Nothing is computed
// here: every figure is the JSON object's.
"use strict";

(() => {
  const PHASES = ["rollout", "scoring", "training"];
  const gbs = (b) => TP.fixed(b / 1e9, 2, true); // the CLI's GB columns (text.py _gb)
  const s1 = (x) => TP.fixed(x, 1, true); // its seconds (text.py _s)
  // interface.rlhf.text.step_kind: a colocated plan of an off-policy search runs synchronously
  const how = (p) => (p.off_policy && p.placement !== "colocated" ? "one-step off-policy" : "synchronous");
  const said = (p) => (p.off_policy && p.placement === "colocated"
    ? "synchronous (one-step off-policy needs the engine on GPUs of its own: colocated, the next rollout cannot run beside training)"
    : how(p));

  // A step plan (interface/rlhf/report.py plan_dict: the faithful object, rlhf-plan's best) as
  // HTML, its elements' ids prefixed with `id`: the verdict, why it does not fit, the pools'
  // peaks per phase, the step, the roles, the terms with their sources.
  TP.rlhfPlanHtml = (f, id) => {
    const layout = (x) => (x.role === "rollout" ? `tp ${x.layout.tp} × dp ${x.layout.dp}, fraction ${x.engine_memory_fraction}`
      : `dp ${x.layout.dp} × tp ${x.layout.tp} × pp ${x.layout.pp}${{ none: "", optimizer: ", optimizer offload", idle: ", offloaded when idle" }[x.offload]}`);
    const why = [...(f.does_not_fit || []).map((x) => `does not fit: ${TP.esc(x)}`), ...(f.to_fit || []).map((x) => `to fit: ${TP.esc(x)}`)];
    const value = (t) => (t.unit === "bytes" ? `${gbs(t.value)} GB` : t.unit === "s" ? `${TP.fixed(t.value, 2, true)} s` : TP.num(t.value));
    const ph = f.step_phase_seconds;
    return `<div id="${id}-verdict" class="verdict ${f.fits ? "fits" : "nofit"}">placement: ${TP.esc(f.placement)}, ${said(f)} — ${f.fits ? "fits" : "DOES NOT FIT"}</div>
      <ul class="note" id="${id}-why">${why.map((x) => `<li>${x}</li>`).join("")}</ul>
      <h3>Pools: peak per GPU in each phase</h3>
      <div class="table-wrap">${TP.table(f.pools, [
        ["pool", (p) => p.pool], ["GPUs", (p) => `${p.first_gpu}–${p.first_gpu + p.gpus - 1}`], ["roles", (p) => TP.esc(p.roles.join(", "))],
        ["processes", (p) => p.processes], ...PHASES.map((x) => [`peak ${x} GB`, (p) => gbs(p.peak_bytes[x])]),
        ["capacity GB", () => gbs(f.capacity_bytes)], ["fits", (p) => (p.fits ? "yes" : '<b class="bad">DOES NOT FIT</b>')],
      ], `id="${id}-pools-table"`)}</div>
      <p class="mono" id="${id}-step">step: rollout ${s1(ph.rollout)} s, scoring ${s1(ph.scoring)} s, training ${s1(ph.training)} s → ${TP.stepTime(f.step_seconds)} per step (${how(f)}); ${TP.fixed(f.tokens_per_second, 0, true)} tokens/s</p>
      <h3>Roles (per GPU of the role's pool; seconds per step)</h3>
      <div class="table-wrap">${TP.table(f.roles, [
        ["role", (x) => TP.esc(x.role)], ["pool", (x) => x.pool], ["GPUs", (x) => x.gpus], ["layout", (x) => TP.esc(layout(x))],
        ["held GB", (x) => (x.swap_bytes ? `${x.held_bytes ? gbs(x.held_bytes) : 0} (+${gbs(x.swap_bytes)})` : gbs(x.held_bytes))],
        ...PHASES.map((p) => [`${p} GB`, (x) => gbs(x.phase_bytes[p])]), ["host GB/GPU", (x) => gbs(x.host_bytes_per_gpu)],
        ...PHASES.map((p) => [`${p} s`, (x) => s1(x.seconds[p])]),
      ], `id="${id}-roles-table"`)}</div>
      <details><summary>Terms, each with its source</summary>
        <div class="table-wrap" id="${id}-terms">${TP.table(f.terms, [
          ["role", (t) => TP.esc(t.role)], ["term", (t) => TP.esc(t.term)], ["phase", (t) => t.phase], ["value", value],
          ["source", (t) => `<span title="${TP.esc(f.sources[t.source] || "")}">[${TP.esc(t.source)}]</span>`],
        ])}</div>
        <ol class="note" id="${id}-sources">${Object.entries(f.sources).map(([k, t]) => `<li>[${TP.esc(k)}] ${TP.esc(t)}</li>`).join("")}</ol>
      </details>`;
  };

  // rlhf-plan's answer (interface/rlhf/text.py result_lines): the headline with the status, the
  // best plan, the best colocated and split steps, why; no placement fits: its explanation.
  function answer(r) {
    const limit = r.time_limit_seconds;
    const said = {
      optimal: " (proven optimal within the model)",
      feasible: r.unproven ? ` (${r.unproven})` : limit ? ` (the best found within the time limit of ${limit} s, not proven optimal)` : "",
      unknown: limit ? ` (the time limit of ${limit} s ran out before any placement was found)` : "",
    }[r.status] || "";
    const hbm = r.hbm_bytes_per_s ? `, HBM ${TP.fixed(r.hbm_bytes_per_s / 1e12, 2, true)} TB/s` : "";
    TP.$("#plan-head").textContent = `${r.algorithm.toUpperCase()} ${r.policy} on ${TP.num(r.gpus)} × ${r.gpu} (peak ${TP.fixed(r.peak_flops_per_s / 1e12, 1, true)} TFLOP/s dense BF16 per GPU${hbm}; ${r.framework} ZeRO-${r.zero_stage}): ${TP.num(r.options)} role options (${TP.num(r.tried)} costed${r.skipped ? `, ${TP.num(r.skipped)} bounded out` : ""}); tables ${TP.fixed(r.tables_seconds, 2)} s${r.tables_complete === false ? " (cut short by the time limit)" : ""}, CP-SAT ${TP.fixed(r.solve_seconds, 2)} s`;
    const status = TP.$("#plan-status");
    status.className = `status ${r.status}`;
    status.textContent = `${r.status}${said}`;
    const best = r.best, box = TP.$("#plan-answer");
    if (!best) { box.innerHTML = `<p class="note" id="plan-reason">why: ${TP.esc(r.reason)}</p>`; return; }
    const none = (s) => ({ beyond: "none within the bound of the best colocated step (not searched further)", unknown: "none found within the time limit" })[s] || "none fits";
    const alt = (k) => `<li id="plan-${k}">best ${k}: ${r[k] ? `${TP.stepTime(r[k].step_seconds)} per step` : none((r.alternatives || {})[k])}</li>`;
    box.innerHTML = `<div class="card"><div class="big"><div><b id="plan-step-time">${TP.stepTime(best.step_seconds)}</b><span>best: per step</span></div></div>
      ${TP.rlhfPlanHtml(best, "plan")}
      <ul class="plain">${alt("colocated")}${alt("split")}</ul>
      <p class="note" id="plan-reason">why: ${TP.esc(r.reason)}</p></div>`;
  }

  // The section: its form's query is the page address's plan= (a link reproduces it); Plan runs
  // the search with its progress, Cancel (or a new Plan) closes the request, which stops it on
  // the server. Answers the arrival's run: a link whose plan holds a model and GPUs runs it when
  // the tab calls it.
  TP.placementPlan = () => {
    const form = TP.$("#plan-inputs"), bar = TP.$("#plan-bar"), text = TP.$("#plan-progress-text");
    const cancel = TP.$("#plan-cancel"), results = TP.$("#plan-results"), status = TP.$("#plan-status");
    const given = new URLSearchParams(new URLSearchParams(location.search).get("plan") || "");
    // a name the catalogue lacks (a typo in a link) is kept and sent, so the API names it, as
    // the tab's own selects do (app.js start)
    for (const sel of TP.$$("select[data-gpus], select[data-models]", form)) {
      const keep = given.get(sel.name);
      if (keep && ![...sel.options].some((o) => o.value === keep)) sel.add(new Option(`${keep} (not in the list)`, keep));
    }
    TP.fill(form, given);
    let answered = null, running = null;
    const staleness = () => {
      const edited = answered !== null && TP.query(form).toString() !== answered;
      results.classList.toggle("stale", edited || running !== null);
      results.setAttribute("aria-busy", String(running !== null));
      results.title = edited ? "the inputs changed: press Plan for their answer" : "";
    };
    const keepUrl = (e) => {
      if (e && e.isTrusted) { staleness(); TP.dropExample(); }
      if (e && e.isTrusted && e.target?.getAttribute?.("aria-invalid") === "true") TP.showError("", form);
      const q = TP.query(form, false).toString();
      TP.setPageParam("plan", q);
    };
    form.addEventListener("input", keepUrl);
    form.addEventListener("change", keepUrl);
    cancel.addEventListener("click", () => running?.abort());
    async function run() {
      running?.abort();
      const controller = (running = new AbortController());
      const q = TP.query(form);
      keepUrl();
      cancel.hidden = false;
      TP.$("#plan-progress").hidden = false;
      status.className = "muted";
      status.textContent = "";
      staleness();
      bar.removeAttribute("value");
      const t0 = performance.now();
      const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(1)} s`;
      text.textContent = "building the cost tables…";
      const last = await TP.stream(`/api/rlhf-plan/stream?${q}`, (e) => {
        if (e.event === "tables") {
          bar.max = e.total;
          bar.value = e.done;
          text.textContent = `cost tables: ${TP.num(e.done)} of ${TP.num(e.total)} pool sizes × roles`;
        } else if (e.event === "solve") {
          bar.max = e.total;
          bar.value = e.done;
          text.textContent = e.done < e.total ? `CP-SAT: solve ${e.done + 1} of ${e.total} (${["the best", "the best colocated", "the best split"][e.done]} placement)` : "CP-SAT: done";
        }
      }, controller.signal, form);
      if (running !== controller) return; // a newer run took over
      running = null;
      cancel.hidden = true;
      if (controller.signal.aborted) {
        TP.showCancelled(bar, text, status, elapsed());
        staleness();
        return;
      }
      if (!last) { // refused: the error line names the field; the last answer stays dimmed
        TP.$("#plan-progress").hidden = true;
        status.textContent = "not run: an input is refused (the error names it)";
        staleness();
        return;
      }
      answered = q.toString();
      staleness();
      bar.max = 1;
      bar.value = 1;
      text.textContent = `done in ${elapsed()}`;
      const r = last.result;
      TP.$("#plan-explanation").innerHTML = (r.explanation || []).map((l) => `<li>${TP.esc(l)}</li>`).join("");
      if (r.status === "infeasible") {
        TP.$("#plan-head").textContent = "";
        status.className = "status infeasible";
        status.textContent = "infeasible: no placement fits";
        TP.$("#plan-answer").innerHTML = "";
        return;
      }
      answer(r);
    }
    form.addEventListener("submit", (e) => { e.preventDefault(); run(); });
    // the arrival's run, for the tab to call once its own first answer is in (a link's plan
    // refusal is then not cleared by that answer's line); not when Plan was pressed already
    return () => {
      if (answered === null && running === null && TP.value(form, "model") && TP.value(form, "gpus")) run();
    };
  };
})();
