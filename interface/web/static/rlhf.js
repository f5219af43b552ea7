// The RLHF tab: /api/rlhf — the roles' resident memory and the phases' shares; under them the
// placement plan section (rlhf_plan.js, /api/rlhf-plan/stream).
"use strict";
(async () => {
  await TP.start("algorithm=grpo&policy-params=70e9&reward=rule");
  const tb = (b) => `${TP.fixed(b / 1e12, 3)} TB`;
  // a size in billions as the CLI prints it (f"{x / 1e9:g}B": six significant digits, 30.5321B)
  const billions = (x) => `${Number((x / 1e9).toPrecision(6))}B`;
  const bar = (x) => `<div class="bar" title="${TP.pct(x)}"><span style="width:${(x * 100).toFixed(2)}%"></span></div>`;
  // the placement plan section listens at once (Plan pressed before the first answer was the
  // browser's own submit of its form, which reloaded the page); a link's plan runs once the first
  // answer is in: its refusal, on arrival, is not then cleared by this answer's line
  let arrival = TP.placementPlan();
  TP.bind(TP.$("#inputs"), async (q) => {
    const r = await TP.api("rlhf", `/api/rlhf?${q}`);
    if (arrival) {
      arrival();
      arrival = null;
    }
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
    TP.$("#faithful-head").textContent = `${f.framework} ZeRO-${f.zero_stage}, ${f.recompute} recompute, logits ${f.logits}: ${f.policy} on ${TP.num(f.gpus)} × ${f.gpu}, ${TP.num(f.sequences)} rollouts of ${TP.num(f.tokens_per_sequence)} tokens`;
    const fl = f.phase_flops_total;
    TP.$("#rlhf-flops").textContent = `FLOPs per step: rollout ${TP.sci(fl.rollout, 3)} (2N per token, prefill and decode), scoring ${TP.sci(fl.scoring, 3)} (2N per token: ${Object.keys(f.flops_by_role.scoring).join(", ")}), training ${TP.sci(fl.training, 3)} (6N per token × ${f.epochs} epoch(s))`;
    TP.$("#rlhf-plan").innerHTML = TP.rlhfPlanHtml(f, "rlhf"); // rlhf_plan.js: the CLI's plan_lines
  }
})();
