// The RLHF tab: /api/rlhf — the roles' resident memory and the phases' shares.
"use strict";
(async () => {
  await TP.start("algorithm=grpo&policy-params=70e9&reward=rule");
  const tb = (b) => `${TP.fixed(b / 1e12, 3)} TB`;
  // a size in billions as the CLI prints it (f"{x / 1e9:g}B": six significant digits, 30.5321B)
  const billions = (x) => `${Number((x / 1e9).toPrecision(6))}B`;
  const gbs = (b) => TP.fixed(b / 1e9, 2, true); // the CLI's GB columns (text.py _gb)
  const s1 = (x) => TP.fixed(x, 1, true); // its seconds (text.py _s)
  const PHASES = ["rollout", "scoring", "training"];
  const bar = (x) => `<div class="bar" title="${TP.pct(x)}"><span style="width:${(x * 100).toFixed(2)}%"></span></div>`;
  TP.bind(TP.$("#inputs"), async (q) => {
    const r = await TP.api("rlhf", `/api/rlhf?${q}`);
    if (!r) return;
    TP.$("#summary").innerHTML = [
      ["resident memory", tb(r.resident_bytes), "resident"],
      ["bytes per policy parameter", `${r.bytes_per_policy_param}`],
      ["networks", `${r.networks}`],
      ...(r.algorithm === "ppo" ? [] : [["fewer than PPO", TP.pct(r.fewer_than_ppo)]]),
    ].map(([k, v, id]) => `<div><b ${id ? `id="${id}"` : ""}>${v}</b><span>${k}</span></div>`).join("");
    const rows = r.network_table.map((x) => ({ ...x }));
    for (const [k, v] of Object.entries(r.extra_bytes)) rows.push({ role: k.replace(/_bytes$/, "").replace(/_/g, " ") + (k === "kv_cache_bytes" ? ` (${r.rollout_batch} sequences at once)` : ""), bytes: v });
    TP.$("#roles").innerHTML = TP.table(rows, [
      ["role", (x) => TP.esc(x.role)], ["params", (x) => (x.params ? billions(x.params) : "")],
      ["state", (x) => (x.trainable === undefined ? "" : x.trainable ? "trainable" : "frozen")],
      ["B/param", (x) => x.bytes_per_param ?? ""], ["memory", (x) => tb(x.bytes)], ["share", (x) => bar(x.bytes / r.resident_bytes)],
    ], 'id="roles-table"');
    TP.$("#phases").innerHTML = TP.table(["rollout", "scoring", "training"], [
      ["phase", (p) => p], ["FLOPs", (p) => TP.sci(r.phase_flops[p], 3)],
      ["FLOPs share", (p) => `${TP.pct(r.phase_flops_share[p])} ${bar(r.phase_flops_share[p])}`],
      ["time", (p) => TP.secs(r.phase_seconds[p])], ["time share", (p) => `${TP.pct(r.phase_time_share[p])} ${bar(r.phase_time_share[p])}`],
    ], 'id="phases-table"');
    // a mixture of experts: the FLOPs count the parameters a token passes through (the CLI's line)
    const moe = r.network_table.filter((x) => x.active_params !== x.params);
    TP.$("#moe").textContent = moe.length ? `FLOPs count the active parameters (mixture of experts): ${moe.map((x) => `${x.role} ${billions(x.active_params)} of ${billions(x.params)}`).join(", ")}` : "";
    // the figure used first, then whose it is (the MFU tab's and trainplan mfu's words)
    TP.$("#assumptions").textContent = `${r.assumptions}. Peak: ${TP.num(r.peak_flops_per_s / 1e12)} TFLOP/s per chip — ${r.peak_source}`;
    faithful(r.faithful);
  });

  // With a model: the faithful accounting (trainplan rlhf --model's second part, interface/rlhf/
  // text.py plan_lines): the verdict as prominent as the planner's, the placement, each pool's
  // peak per phase against the usable memory, the roles, the terms with their sources, the step.
  function faithful(f) {
    const box = TP.$("#faithful");
    box.hidden = !f;
    if (!f) return;
    const how = f.off_policy ? "one-step off-policy" : "synchronous";
    TP.$("#faithful-head").textContent = `${f.framework} ZeRO-${f.zero_stage}, ${f.recompute} recompute, logits ${f.logits}: ${f.policy} on ${TP.num(f.gpus)} × ${f.gpu}, ${TP.num(f.sequences)} rollouts of ${TP.num(f.tokens_per_sequence)} tokens`;
    const v = TP.$("#rlhf-verdict");
    v.className = `verdict ${f.fits ? "fits" : "nofit"}`;
    v.textContent = `placement: ${f.placement}, ${how} — ${f.fits ? "fits" : "DOES NOT FIT"}`;
    TP.$("#rlhf-why").innerHTML = [...(f.does_not_fit || []).map((x) => `does not fit: ${TP.esc(x)}`), ...(f.to_fit || []).map((x) => `to fit: ${TP.esc(x)}`)].map((x) => `<li>${x}</li>`).join("");
    const fl = f.phase_flops_total;
    TP.$("#rlhf-flops").textContent = `FLOPs per step: rollout ${TP.sci(fl.rollout, 3)} (2N per token, prefill and decode), scoring ${TP.sci(fl.scoring, 3)} (2N per token: ${Object.keys(f.flops_by_role.scoring).join(", ")}), training ${TP.sci(fl.training, 3)} (6N per token × ${f.epochs} epoch(s))`;
    TP.$("#rlhf-pools").innerHTML = TP.table(f.pools, [
      ["pool", (p) => p.pool], ["GPUs", (p) => `${p.first_gpu}–${p.first_gpu + p.gpus - 1}`], ["roles", (p) => TP.esc(p.roles.join(", "))],
      ["processes", (p) => p.processes], ...PHASES.map((ph) => [`peak ${ph} GB`, (p) => gbs(p.peak_bytes[ph])]),
      ["capacity GB", () => gbs(f.capacity_bytes)], ["fits", (p) => (p.fits ? "yes" : '<b class="bad">DOES NOT FIT</b>')],
    ], 'id="rlhf-pools-table"');
    const layout = (x) => (x.role === "rollout" ? `tp ${x.layout.tp} × dp ${x.layout.dp}, fraction ${x.engine_memory_fraction}`
      : `dp ${x.layout.dp} × tp ${x.layout.tp} × pp ${x.layout.pp}${{ none: "", optimizer: ", optimizer offload", idle: ", offloaded when idle" }[x.offload]}`);
    TP.$("#rlhf-roles").innerHTML = TP.table(f.roles, [
      ["role", (x) => TP.esc(x.role)], ["pool", (x) => x.pool], ["GPUs", (x) => x.gpus], ["layout", (x) => TP.esc(layout(x))],
      ["held GB", (x) => (x.swap_bytes ? `${x.held_bytes ? gbs(x.held_bytes) : 0} (+${gbs(x.swap_bytes)})` : gbs(x.held_bytes))],
      ...PHASES.map((ph) => [`${ph} GB`, (x) => gbs(x.phase_bytes[ph])]), ["host GB/GPU", (x) => gbs(x.host_bytes_per_gpu)],
      ...PHASES.map((ph) => [`${ph} s`, (x) => s1(x.seconds[ph])]),
    ], 'id="rlhf-roles-table"');
    const value = (t) => (t.unit === "bytes" ? `${gbs(t.value)} GB` : t.unit === "s" ? `${TP.fixed(t.value, 2, true)} s` : TP.num(t.value));
    TP.$("#rlhf-terms").innerHTML = TP.table(f.terms, [
      ["role", (t) => TP.esc(t.role)], ["term", (t) => TP.esc(t.term)], ["phase", (t) => t.phase], ["value", value],
      ["source", (t) => `<span title="${TP.esc(f.sources[t.source] || "")}">[${TP.esc(t.source)}]</span>`],
    ]);
    TP.$("#rlhf-sources").innerHTML = Object.entries(f.sources).map(([k, t]) => `<li>[${TP.esc(k)}] ${TP.esc(t)}</li>`).join("");
    const ph = f.step_phase_seconds;
    TP.$("#rlhf-step").textContent = `step: rollout ${s1(ph.rollout)} s, scoring ${s1(ph.scoring)} s, training ${s1(ph.training)} s → ${s1(f.step_seconds)} s per step (${how}); ${TP.fixed(f.tokens_per_second, 0, true)} tokens/s`;
  }
})();
