// The planner tab: /api/evaluate and its memory figure for the form's inputs.
"use strict";
(async () => {
  const { gpus } = await TP.start("model=llama3-70b&dp=2&tp=4&pp=8");
  const form = TP.$("#inputs");
  const params = TP.restoreLarge(new URLSearchParams(location.search)); // the uploaded file too
  // a link that left its uploaded file out (TP.largeLink) and found none in this tab: the file's
  // source, waiting for the file, not the default model's figures for the link's layout
  // A link with model dimensions and no model (/planner?arch=gpt&layers=80&…): the model by its
  // dimensions, as the command line plans it, not the default catalogue model.
  const dimsGiven = TP.$$("[data-source=size] [name]", form).some((el) => el.name !== "params" && params.get(el.name));
  const source = params.get("config") || TP.leftOut().includes("config") ? "config"
    : params.get("params") || (dimsGiven && !params.get("model")) ? "size" : "catalogue";
  TP.$(`input[name=_source][value=${source}]`).checked = true;

  function showSource() {
    const mode = TP.$("input[name=_source]:checked").value;
    for (const box of TP.$$("[data-source]")) box.hidden = box.dataset.source !== mode;
  }
  showSource();
  form.addEventListener("change", (e) => { if (e.target.name === "_source") showSource(); });

  TP.upload(form);

  // The text report's memory lines in its order (interface/render/report.py _memory_lines): each
  // term shown where it applies, so the rows add up to the total as the CLI's do.
  const MEMORY = [
    ["weights", (m) => m.weights_bytes], ["gradients", (m) => m.gradients_bytes], ["optimizer states", (m) => m.optimizer_bytes],
    ["= model state", (m) => m.model_state_bytes], ["gathered weights", (m) => m.zero3_gathered_bytes],
    ["FP8 weight cache", (m) => m.weight_cache_bytes], ["expert dispatch buffers", (m) => m.dispatch_buffer_bytes],
    ["buffers in forward/backward", (m) => m.buffers_bytes], ["activations (layers, in flight)", (m) => m.activations_bytes],
    ["embedding / output-layer activations", (m) => m.embedding_activations_bytes], ["recompute transient", (m) => m.recompute_transient_bytes],
    ["backward working set (one layer)", (m) => m.backward_working_bytes],
    ["less: output layer, freed before the backward", (m) => m.output_layer_freed_bytes], // subtracted
    ["loss working set beyond them (one micro-batch)", (m) => m.loss_transient_bytes],
    ["MoE forward working set (one layer)", (m) => m.moe_forward_transient_bytes],
    ["causal mask being built (one micro-batch)", (m) => m.batch_load_transient_bytes],
    ["pipeline stage outputs and receive buffers", (m) => m.pipeline_output_bytes],
    ["context-parallel buffers (one layer)", (m) => m.cp_transient_bytes],
    ["offloaded activations still on GPU", (m) => m.activation_offload_buffer_bytes],
    ["optimizer step extra (no activations then)", (m) => m.optimizer_step_bytes],
    ["persistent buffers (whole run)", (m) => m.persistent_buffers_bytes],
    ["NCCL communicator buffers (whole run)", (m) => (m.communicator_bytes || 0) - (m.userbuffer_bytes || 0)],
    ["Transformer Engine userbuffers (whole run)", (m) => m.userbuffer_bytes || 0],
  ];

  // Every part is drawn from this answer or cleared: nothing of a previous model stays on screen
  // (a size alone has no activations, FLOPs or step time: those read "—").
  function render(d) {
    const m = d.memory, lay = d.layout, t = d.time || {}, p = d.pipeline || {}, flops = d.flops || {};
    // the CLI's first two lines (interface/render/report.py evaluate_text, layout_line): the
    // active parameters, the cp flavour the layout runs (the framework's default when not given)
    const cpKind = lay.cp > 1 ? ` ${lay.cp_a2a ? `${lay.cp_kind} (a2a ${lay.cp_a2a})` : lay.cp_kind}` : "";
    const active = d.model.num_active_params !== undefined && d.model.num_active_params !== null ? ` (${TP.num(d.model.num_active_params)} active)` : "";
    TP.$("#headline").innerHTML = `<b>${TP.esc(d.model.name)}</b>: ${TP.num(d.model.num_params)} parameters${active} on ${TP.num(d.num_gpus)} × ${TP.esc(d.gpu.name)}<br>` +
      `<span class="mono" id="layout-line">dp ${lay.dp} × tp ${lay.tp} × pp ${lay.pp} × cp ${lay.cp}${TP.esc(cpKind)} (ep ${lay.ep}${lay.etp !== undefined && lay.etp !== lay.tp ? `, etp ${lay.etp}` : ""}), ${lay.framework} ZeRO-${lay.zero_stage}, recompute ${lay.recompute}, ${lay.schedule}${lay.virtual_stages > 1 ? " v=" + lay.virtual_stages : ""}, b ${lay.micro_batch_size}, B ${TP.num(lay.global_batch_size)}, m ${TP.num(lay.num_microbatches)}, s ${TP.num(lay.seq_len)}, rank order ${lay.rank_order || "tp-cp-ep-dp-pp"}</span>`;
    const v = TP.$("#verdict");
    v.className = `verdict ${m.fits ? "fits" : "nofit"}`;
    v.textContent = (m.fits ? "fits" : `DOES NOT FIT: over by ${TP.gb(m.overflow_bytes)}`) +
      ` — total ${TP.gb(m.total_bytes)} at the peak (${m.peak_phase}) of ${TP.gb(m.capacity_bytes)} usable` +
      (m.fits_covers !== "model state and activations" ? ` (${m.fits_covers})` : "");
    v.dataset.totalBytes = m.total_bytes;
    // the gathered line says what is gathered, as the text report does (memory.zero3_gathered_what)
    // the overlap buffers' line names PyTorch's symmetric memory under fsdp2 (report.py _library_labels)
    const overlap = lay.framework === "fsdp2" ? "async-TP symmetric memory (whole run)" : null;
    // the dispatcher's buffers' line names the library that holds them (report.py _library_labels)
    const dispatcher = (lay.moe || {}).moe_dispatcher === "hybridep" ? "HybridEP" : "DeepEP";
    const label = (name) => (name === "gathered weights" && m.zero3_gathered_what ? `${name} (${m.zero3_gathered_what})`
      : name === "Transformer Engine userbuffers (whole run)" && overlap ? overlap
      : name === "expert dispatch buffers" ? `${name} (${dispatcher})` : name);
    const rows = MEMORY.map(([name, f]) => ({ name: label(name), v: f(m) })).filter((r) => r.v || r.name.startsWith("="));
    rows.push({ name: `= total (peak: ${m.peak_phase})`, v: m.total_bytes, id: "total" });
    rows.push({ name: `capacity (${d.gpu.name}, usable)`, v: m.capacity_bytes });
    if (m.stream_pool_bytes) rows.push({ name: `reserved at least (max_memory_reserved): allocated ${TP.gb(m.allocated_bytes)} + ${TP.gb(m.stream_pool_bytes)} idle in a side stream's pool; not in the verdict: freed before out-of-memory`, v: m.reserved_bytes });
    // reserved above capacity: the allocator releases its cache and retries each step (not charged)
    // (as the text report: only where the step fits; over by the allocated peak, no run retries)
    if (m.allocator_retries && m.fits) rows.push({ name: "reserved + communicators over capacity: allocator retries at least once a step (cudaFree, device sync; not in the step time)", v: m.reserved_over_bytes });
    TP.$("#memory-table").innerHTML = TP.table(rows, [["term", (r) => TP.esc(r.name)], ["bytes per GPU", (r) => `<span ${r.id ? 'id="memory-total"' : ""}>${TP.gb(r.v)}</span>`]]) +
      (m.activations_unavailable ? `<p class="note">activations unavailable: ${TP.esc(m.activations_unavailable)}</p>` : "");
    // evaluate --per-stage's stages (the answer's `stages`, present only when asked for)
    TP.$("#stages-box").hidden = !d.stages;
    TP.$("#stages-table").innerHTML = d.stages ? TP.table(d.stages, [
      ["stage", (r) => r.stage], ["layers", (r) => r.stage_layers], ["model state", (r) => TP.gb(r.stage_state_bytes)],
      ["activations (layers)", (r) => TP.gb(r.stage_activation_bytes)], ["other activations", (r) => TP.gb(r.stage_other_activation_bytes)],
      ["in flight", (r) => r.stage_in_flight], ["total", (r) => TP.gb(r.stage_total_bytes)],
    ], 'id="stages"') : "";
    TP.$("#zero-table").innerHTML = TP.table(d.zero_table || [], [
      ["ZeRO", (r) => r.zero_stage], ["model state", (r) => TP.gb(r.model_state_bytes)],
      ["reduction", (r) => `${TP.fixed(r.reduction, 2)}×`], ["DP bytes/step", (r) => TP.gb(r.dp_bytes_per_step)],
    ]);
    TP.$("#traffic-table").innerHTML = TP.table(d.traffic || [], [
      ["axis", (r) => r.axis], ["collective", (r) => TP.esc(r.collective)], ["group", (r) => r.group_size],
      ["bytes/step", (r) => TP.gb(r.bytes_per_step)], ["link", (r) => (r.link === "nvlink" ? "NVLink (fits in a domain)" : TP.esc(r.link))],
      ["time if not overlapped", (r) => TP.secs(r.seconds)], ["exposed", (r) => TP.secs(r.exposed_seconds)],
    ], 'id="traffic"');
    TP.$("#step").innerHTML = [
      ["pipeline bubble, share of the step", TP.pct(p.bubble_fraction)], ["pipeline bubble against compute + exposed tp, cp, ep", TP.pct(p.bubble_ratio)],
      ["micro-batches in flight", p.microbatches_in_flight ?? "—"],
      ["layers per stage (stages counted from 0)", p.microbatches_in_flight === null || p.microbatches_in_flight === undefined ? "layers unknown (size-only model)" : `[${(lay.stage_layers || []).join(", ")}]`, "layers-per-stage"],
      ["step time", TP.exact(t.step_s), "step-time"],
      // the step line's throughput, as the CLI prints it (report.py _pipeline_and_step)
      ["tokens/s (per GPU)", t.tokens_per_s === null || t.tokens_per_s === undefined ? "—" : `${TP.fixed(t.tokens_per_s, 0, true)} (${TP.fixed(t.tokens_per_s / d.num_gpus, 0, true)} per GPU)`, "tokens-per-s"],
      // every term of the CLI's Step: line, from the answer's own list (time.step_terms), so the
      // terms add up to the step time on the page as they do there
      [(t.step_terms || []).map((x) => x.term).join(" + ") || "compute + bubble + exposed comm",
        (t.step_terms || []).map((x) => TP.exact(x.s)).join(" + ") + (t.activation_offload_s ? ` (activation offload ${TP.exact(t.activation_offload_s)} exposed, in compute)` : ""), "step-terms"],
      [`MFU (${flops.convention || "needs the model's dimensions"})`, TP.pct(t.mfu), "mfu"], ["MFU with attention FLOPs", TP.pct(t.mfu_with_attention)], [`HFU (${flops.convention || "needs the model's dimensions"})`, TP.pct(t.hfu), "hfu"], ["HFU with attention FLOPs", TP.pct(t.hfu_with_attention)],
      // packed documents: the MFU of a counter taking each pack for one sequence (its s² attention), as the CLI's Step line gives it beside the MFU
      ...(t.mfu_pack !== null && t.mfu_pack !== undefined && t.mfu_pack !== t.mfu ? [["MFU counting each pack as one sequence (its s² attention)", TP.pct(t.mfu_pack), "mfu-pack"]] : []),
    ].map(([k, val, id]) => `<div><b ${id ? `id="${id}"` : ""}>${val}</b><span>${k}</span></div>`).join("");
    TP.$("#assumptions").innerHTML = (d.assumptions || []).map((a) => `<li>${TP.esc(a)}</li>`).join("");
    const used = Object.entries(d.defaults_used || {});
    TP.$("#defaults").textContent = used.length ? "Defaults used: " + used.map(([k, x]) => `${k} = ${x}`).join(", ") : "";
    TP.$("#notes").innerHTML = (d.notes || []).map((n) => `<li>Note: ${TP.esc(n)}</li>`).join("");
  }

  // An accelerator whose table row lacks a link figure takes it from the Links fields: each
  // field shows the chosen accelerator's figure, or that it must be given.
  const LINKS = { "scaleout-gbps": "scaleout_gbps", "nvlink-gbps": "nvlink_gbps", "nvlink-domain": "nvlink_domain" };
  function showLinks() {
    const name = TP.value(form, "gpu") || "H100-SXM", g = gpus.find((x) => x.name === name);
    const missing = [];
    for (const [field, key] of Object.entries(LINKS)) {
      const el = TP.$(`input[name=${field}]`, form), known = g && g[key] !== null && g[key] !== undefined;
      el.placeholder = known ? `${TP.num(g[key])} (table)` : "needed: not in the table";
      el.closest("label").classList.toggle("needed", !known && !el.value.trim());
      if (!known) missing.push(field);
    }
    TP.$("#links-note").textContent = missing.length
      ? `${name}'s row in the accelerator table has no ${missing.join(", ")}: give ${missing.length > 1 ? "them" : "it"} here (your cluster's figures per GPU and per direction; e.g. scale-out 50 GB/s is one 400 Gb/s NIC per GPU).`
      : `${name}'s figures come from the accelerator table, unless given here.`;
  }
  showLinks();
  form.addEventListener("change", showLinks);
  form.addEventListener("input", showLinks);

  // A link from the search or frontier may set options this form has no field for: they are kept
  // as they came, and said.
  const extra = TP.linkOnly(form);
  TP.$("#link-only").textContent = extra.length
    ? "From the link, options without a field here (kept): " + extra.map(([k, x]) => `${k} = ${x}`).join(", ")
    : "";
  // A link that names a model (or a config.json, or neither: the default model) and also model
  // dimensions (/planner?model=llama3-70b&layers=12): the size fields are hidden and not sent, so
  // the page would show the named model as if the dimensions were read. The API's refusal of the
  // two together (as the CLI's) is said instead, and the named model shown.
  if (source !== "size") {
    const dims = TP.$$("[data-source=size] [name]", form).map((el) => el.name).filter((n) => n !== "params" && params.get(n));
    if (dims.length) {
      const q = new URLSearchParams(source === "config" ? { config: params.get("config") } : { model: params.get("model") || form.elements.model.dataset.default });
      for (const n of dims) q.append(n, params.get(n));
      const body = await TP.send(`/api/evaluate?${q}`).then((r) => r.json()).catch(() => ({}));
      if (body.error) TP.refuseLink(body.error);
    }
  }

  TP.bind(form, async (q) => {
    if (TP.$("input[name=_source]:checked").value === "config" && !q.get("config")) return; // no file yet
    const d = await TP.api("evaluate", `/api/evaluate?${q}`);
    if (!d) return;
    render(d);
    TP.figure(TP.$("#memory-figure"), `/api/figures/memory?${q}`, `${d.model.name} on ${TP.num(d.num_gpus)} × ${d.gpu.name}: total ${TP.gb(d.memory.total_bytes)} of ${TP.gb(d.memory.capacity_bytes)}, ${d.memory.fits ? "fits" : "does not fit"}`);
  });
})();
