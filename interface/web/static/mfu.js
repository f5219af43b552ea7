// The MFU & HFU tab: /api/mfu from one of three measurements (a step, a throughput, a FLOP rate).
"use strict";
(async () => {
  await TP.start("params=70e9&tokens=4e6&step-seconds=7&peak-tflops=989&chips=512");
  const q0 = new URLSearchParams(location.search);
  const mode = q0.has("tokens-per-second") ? "throughput" : q0.has("achieved-pflops") || q0.has("achieved-tflops-per-gpu") ? "rate" : "step";
  const form = TP.$("#inputs");
  // A mode shows its fields; the others' are hidden, so not sent (the params field serves two).
  function showMode() {
    const m = TP.$("input[name=_mode]:checked").value;
    for (const box of TP.$$("[data-mode]")) box.hidden = !box.dataset.mode.split(" ").includes(m);
  }
  TP.$(`input[name=_mode][value=${mode}]`).checked = true;
  showMode();
  form.addEventListener("change", (e) => { if (e.target.name === "_mode") showMode(); });
  TP.bind(form, async (q) => {
    const r = await TP.api("mfu", `/api/mfu?${q}`);
    if (!r) return;
    TP.$("#figures").innerHTML = [["MFU", TP.pct(r.mfu), "mfu"], ["MFU without attention FLOPs", TP.pct(r.mfu_without_attention)], ["HFU", TP.pct(r.hfu), "hfu"],
      ["model FLOP/s of the job", `${TP.fixed(r.achieved_model_flops_per_s / 1e15, 1)} PFLOP/s`]]
      .map(([k, v, id]) => `<div><b ${id ? `id="${id}"` : ""}>${v}</b><span>${k}</span></div>`).join("");
    TP.$("#arithmetic").textContent = r.arithmetic;
    TP.$("#attention-line").textContent = r.attention.included ? `attention ${r.attention.formula}` : "attention FLOPs not counted";
    TP.$("#hfu-arithmetic").textContent = r.hfu_arithmetic;
    TP.$("#peak").textContent = `peak ${r.peak_flops_per_s / 1e12} TFLOP/s per chip — ${r.peak_source}`;
  });
})();
