// The checkpointing tab: /api/ckpt, one frame per step (/api/figures/ckpt-step) to step through
// or play, and the held-over-time chart. The step shown is the page's own (step= in the address,
// never sent to /api/ckpt, which would answer that step alone); the player works from the keyboard.
"use strict";
(async () => {
  await TP.start("layers=9&every=3&step=1");
  let report = null, query = null, timer = null;
  let step = Number(new URLSearchParams(location.search).get("step")) || 1;
  const slider = TP.$("#slider"), play = TP.$("#play"), delay = TP.$("#delay"), player = TP.$("#player");

  function show(s) {
    if (!report) return;
    const total = report.steps.length;
    step = Math.min(Math.max(1, s), total);
    slider.max = total;
    slider.value = step;
    slider.setAttribute("aria-valuetext", `step ${step} of ${total}`);
    const st = report.steps[step - 1];
    TP.$("#step-info").textContent = `step ${step} of ${total}: ${st.phase} layer ${st.layer} — ${st.held} held (no checkpointing: ${st.held_without_checkpointing})`;
    TP.$("#step-info").dataset.step = step;
    TP.setPageParam("step", step);
    const q = new URLSearchParams(query);
    q.set("step", step);
    return TP.figure(TP.$("#frame"), `/api/figures/ckpt-step?${q}`, `step ${step} of ${total}, ${st.phase} layer ${st.layer}, ${st.held} held`);
  }

  // Playing: the next step is asked for once the figure of this one is in and the delay since it
  // was asked has passed — never a request while another is on its way (a frame at n = 1,000
  // took 5.5 s to draw, and a request every 0.6 s swamped the server).
  const pause = (ms) => new Promise((done) => setTimeout(done, ms));
  async function playFrom(run) {
    while (timer === run && report && step < report.steps.length) {
      const t0 = performance.now();
      await show(step + 1);
      await pause(Math.max(0, Math.max(50, Number(delay.value) * 1000) - (performance.now() - t0)));
    }
    if (timer === run) stop();
  }

  function stop() {
    timer = null;
    play.textContent = "▶ play";
    play.setAttribute("aria-label", "play");
  }
  function toggle() {
    if (!report) return;
    if (timer) return stop();
    play.textContent = "⏸ pause";
    play.setAttribute("aria-label", "pause");
    const run = (timer = {});
    (step >= report.steps.length ? show(1) : Promise.resolve()).then(() => playFrom(run));
  }
  play.addEventListener("click", toggle);
  TP.$("#first").addEventListener("click", () => { stop(); show(1); });
  TP.$("#prev").addEventListener("click", () => { stop(); show(step - 1); });
  TP.$("#next").addEventListener("click", () => { stop(); show(step + 1); });
  TP.$("#last").addEventListener("click", () => { stop(); show(report.steps.length); });
  slider.addEventListener("input", () => { stop(); show(Number(slider.value)); });
  player.addEventListener("keydown", (e) => {
    if (!report || e.target === delay) return;
    const keys = { ArrowLeft: () => show(step - 1), ArrowRight: () => show(step + 1), Home: () => show(1), End: () => show(report.steps.length) };
    if (e.key === " " && e.target.tagName !== "BUTTON") { e.preventDefault(); toggle(); return; }
    if (keys[e.key] && e.target !== slider) { e.preventDefault(); stop(); keys[e.key](); }
  });

  TP.bind(TP.$("#inputs"), async (q) => {
    stop();
    const r = await TP.api("ckpt", `/api/ckpt?${q}`);
    if (!r) return;
    report = r;
    query = q;
    TP.$("#summary").innerHTML = [
      ["peak held", `${r.peak_held}`, r.peak_held_formula, "peak-held"],
      ["without checkpointing", `${r.peak_held_without_checkpointing}`, "n + 1 tensors"],
      ["recompute overhead", `+${TP.fixed(r.recompute_overhead * 100, 1)}%`, r.recompute_overhead_formula],
      ["checkpoints", r.checkpoints.join(", "), `every ${r.every} of ${r.layers} layers`],
    ].map(([k, v, note, id]) => `<div><b ${id ? `id="${id}"` : ""}>${TP.esc(v)}</b><span>${k}: ${TP.esc(note)}</span></div>`).join("");
    show(step);
    TP.figure(TP.$("#held"), `/api/figures/ckpt-held?${q}`, `peak ${r.peak_held} against ${r.peak_held_without_checkpointing}`);
  });
})();
