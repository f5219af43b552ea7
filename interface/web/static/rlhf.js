// The RLHF tab: /api/rlhf — the roles' resident memory and the phases' shares.
"use strict";
(async () => {
  await TP.start("algorithm=grpo&policy-params=70e9&reward=rule");
  const tb = (b) => `${TP.fixed(b / 1e12, 3)} TB`;
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
      ["role", (x) => TP.esc(x.role)], ["params", (x) => (x.params ? `${x.params / 1e9}B` : "")],
      ["state", (x) => (x.trainable === undefined ? "" : x.trainable ? "trainable" : "frozen")],
      ["B/param", (x) => x.bytes_per_param ?? ""], ["memory", (x) => tb(x.bytes)], ["share", (x) => bar(x.bytes / r.resident_bytes)],
    ], 'id="roles-table"');
    TP.$("#phases").innerHTML = TP.table(["rollout", "scoring", "training"], [
      ["phase", (p) => p], ["FLOPs", (p) => TP.sci(r.phase_flops[p], 3)],
      ["FLOPs share", (p) => `${TP.pct(r.phase_flops_share[p])} ${bar(r.phase_flops_share[p])}`],
      ["time", (p) => TP.secs(r.phase_seconds[p])], ["time share", (p) => `${TP.pct(r.phase_time_share[p])} ${bar(r.phase_time_share[p])}`],
    ], 'id="phases-table"');
    // the figure used first, then whose it is (the MFU tab's and trainplan mfu's words)
    TP.$("#assumptions").textContent = `${r.assumptions}. Peak: ${TP.num(r.peak_flops_per_s / 1e12)} TFLOP/s per chip — ${r.peak_source}`;
  });
})();
