// The search tab: the best layout, proven optimal by CP-SAT, with its progress; with "per stage",
// the per-stage plan (search --per-stage) beside the best uniform one, and its launch flags.
"use strict";

// A layout's line as the CLI prints it (degrees, ZeRO, recompute, schedule, micro-batch).
const layoutLine = (l) =>
  `dp ${l.dp} × tp ${l.tp} × pp ${l.pp} × cp ${l.cp}, ${l.framework} ZeRO-${l.zero_stage}, recompute ${l.recompute}, ${l.schedule}${l.virtual_stages > 1 ? " v=" + l.virtual_stages : ""}, b ${l.micro_batch_size}`;

// One shell word as Python's shlex.quote writes it, so the flags paste into a shell as the CLI prints them.
const shellWord = (w) => (w === "" ? "''" : /[^\w@%+=:,./-]/.test(w) ? `'${w.replace(/'/g, `'"'"'`)}'` : w);

// Megatron-LM's flags as shell words, each flag with its values in a box of its own: the block
// wraps between flags, never inside one ("--context-parallel-size 1 --" / "micro-batch-size 1"),
// and its text (what a copy takes) is the words with one space between.
const flagWords = (words) => {
  const groups = [];
  for (const w of words.map(shellWord)) {
    if (w.startsWith("--") || !groups.length) groups.push([w]);
    else groups[groups.length - 1].push(w);
  }
  return groups.map((g) => `<span class="flag">${TP.esc(g.join(" "))}</span>`).join(" ");
};

const notes = (list, cls) => (list.length ? `<ul class="plain ${cls}">${list.map((n) => `<li>note: ${TP.esc(n)}</li>`).join("")}</ul>` : "");

const stepTime = TP.stepTime;

// The base layouts not searched per stage (interleaved, their layers no split into equal
// chunks), as the CLI's lines under its headline: one per schedule, v and pp.
const notSearched = (shapes) => {
  const lines = [...new Set(shapes.filter((s) => s.note).map((s) => `${s.schedule} v=${s.virtual_stages}, pp ${s.pp}: ${s.note}`))];
  return lines.length ? `<ul class="plain not-searched">${lines.map((l) => `<li>${TP.esc(l)}</li>`).join("")}</ul>` : "";
};

// The CLI's search --per-stage --json object, presented: nothing computed here.
function perStage(r, link) {
  const ps = r.per_stage, launch = r.launch, u = ps.uniform;
  const lay = r.layout, v = lay.virtual_stages, pp = lay.pp;
  // interleaved: each stage's chunks (model order, every pp-th) and its count per chunk, as the CLI
  const chunks = (i) => lay.chunk_layers.filter((c, j) => j % pp === i).join("+");
  // each stage's peak memory per GPU: the JSON's stages rows (evaluate's, per stage), as the CLI's peak GB
  const peak = (i) => (r.stages && r.stages[i] ? r.stages[i].stage_total_bytes : null);
  const stages = ps.stage_layers.map((n, i) => ({ n, k: ps.recompute_layers[i], c: v > 1 ? chunks(i) : null, m: peak(i) }));
  return `<div class="card per-stage">
      <h3>${TP.esc(ps.job)}</h3>
      <p class="mono uniform-layout">best uniform: ${TP.esc(layoutLine(u.layout))}</p>
      <p class="mono per-stage-layout">per-stage: ${TP.esc(layoutLine(r.layout))}</p>
      <div class="big"><div><b class="uniform-step">${stepTime(u.step_s)}</b><span>best uniform step time</span></div>
      <div><b class="step">${stepTime(ps.step_s)}</b><span>per-stage step time</span></div>
      <div><b class="gain">${TP.fixed(ps.gain, 3)}×</b><span>gain (uniform ÷ per-stage)</span></div>
      <div><b class="total">${TP.gb(r.memory.total_bytes)}</b><span>memory per GPU of ${TP.gb(r.memory.capacity_bytes)}</span></div>
      <div><b class="mfu">${TP.pct(r.time.mfu)}</b><span>MFU</span></div>
      <div><b class="gap" id="per-stage-gap">${TP.gapText(ps.gap_s)}</b><span>proven gap: no split searched is faster by more</span></div></div>
      <p><a class="planner-link" href="${TP.esc(link)}">Open this plan in the Planner</a> (its stages' layers and recomputed layers included)</p>
      ${ps.gain === 1 ? `<p class="note">no per-stage plan is faster than the uniform one: the plan is the uniform one</p>` : ""}
      ${notSearched(ps.shapes)}
      <h3>Stages</h3>
      <div class="table-wrap">${TP.table(stages, [
        ["stage", (s, i) => i],
        ["layers", (s) => s.n],
        ...(v > 1 ? [["chunks", (s) => s.c], ["recomputed (full) per chunk", (s) => s.k]] : [["recomputed (full)", (s) => s.k]]),
        ["others", () => TP.esc(r.layout.recompute)],
        ["peak memory per GPU", (s) => TP.gb(s.m)],
      ], 'id="stage-table"')}</div>
    </div>
    <div class="card launch">
      <h3>Megatron-LM</h3>
      ${launch.megatron_env.length ? `<p class="note" id="megatron-env">environment: <code>${TP.esc(launch.megatron_env.map(shellWord).join(" "))}</code></p>` : ""}
      <pre class="launch-text" id="megatron-flags">${flagWords(launch.megatron)}</pre>
      ${notes(launch.megatron_notes, "megatron-notes")}
      ${launch.megatron_step_s === null ? "" : `<p class="note" id="megatron-step">with one --recompute-num-layers for every stage: ${stepTime(launch.megatron_step_s)} per step</p>`}
      <h3>torchtitan</h3>
      <pre class="launch-text" id="torchtitan-toml">${TP.esc(launch.torchtitan.join("\n"))}</pre>
      ${notes(launch.torchtitan_notes, "torchtitan-notes")}
      <h3>torchtitan HEAD (Python configuration)</h3>
      <pre class="launch-text" id="torchtitan-head">${TP.esc(launch.torchtitan_head.join("\n"))}</pre>
      ${notes(launch.torchtitan_head_notes, "torchtitan-head-notes")}
    </div>
    <p class="note">${ps.shapes.length || ps.status === "optimal"
      ? `Per-stage search over ${ps.shapes.length} base layout(s); uniform search ${TP.fixed(ps.uniform_seconds, 2)} s, stage tables ${TP.fixed(ps.tables_seconds, 2)} s, CP-SAT ${TP.fixed(ps.solve_seconds, 2)} s.`
      : `Uniform search ${TP.fixed(ps.uniform_seconds, 2)} s; the time limit ended the search before any base layout was searched per stage (no stage tables, no CP-SAT): the plan is the uniform one.`}</p>`;
}

TP.searchPage("search", (last, q) => {
  const r = last.result, box = TP.$("#answers");
  if (r.status === "infeasible") { box.innerHTML = ""; return; }
  if (r.per_stage) { box.innerHTML = perStage(r, last.planner[0]); TP.$$("a.planner-link", box).forEach((a) => TP.largeLink(a)); return; }
  const answers = r.answers || [r, ...(r.top || [])];
  box.innerHTML = answers.map((a, i) => {
    const lay = a.layout, m = a.memory, t = a.time;
    return `<div class="card answer" data-answer="${i}">
      <h3>${answers.length > 1 ? `#${i + 1}: ` : ""}${TP.esc(a.job)}</h3>
      <p>objective (${TP.esc(a.objective_kind)}): <b class="objective">${TP.esc(a.objective_text)}</b></p>
      <p class="mono">dp ${lay.dp} × tp ${lay.tp} × pp ${lay.pp} × cp ${lay.cp} (ep ${lay.ep}), ${lay.framework} ZeRO-${lay.zero_stage}, recompute ${lay.recompute}, ${lay.schedule}${lay.virtual_stages > 1 ? " v=" + lay.virtual_stages : ""}, b ${lay.micro_batch_size}, B ${TP.num(lay.global_batch_size)}, m ${TP.num(lay.num_microbatches)}, s ${TP.num(lay.seq_len)}</p>
      <div class="big"><div><b class="total">${TP.gb(m.total_bytes)}</b><span>memory per GPU of ${TP.gb(m.capacity_bytes)}</span></div>
      <div><b class="step">${TP.secs(t.step_s)}</b><span>step time</span></div><div><b class="mfu">${TP.pct(t.mfu)}</b><span>MFU</span></div>
      <div><b>${TP.pct(t.hfu)}</b><span>HFU</span></div></div>
      <p><a class="planner-link" href="${TP.esc(last.planner[i])}">Open this layout in the Planner</a></p>
      ${notes(a.notes || [], "answer-notes")}
      <div class="figure memory-figure" data-label="Memory per GPU of answer ${i + 1} against the usable capacity"></div>
    </div>`;
  }).join("") + `<p class="note">Searched ${TP.num(r.candidates)} candidates (${TP.num(r.shapes)} shapes × ZeRO × recompute, ${r.jobs} job(s)); tables ${TP.fixed(r.tables_seconds, 2)} s, CP-SAT ${TP.fixed(r.solve_seconds, 2)} s.</p>`;
  TP.$$("a.planner-link", box).forEach((a) => TP.largeLink(a)); // an uploaded config.json: not in the link
  TP.$$(".answer").forEach((card, i) => TP.figure(TP.$(".memory-figure", card), `/api/figures/memory?${last.planner[i].split("?")[1]}`));
});
