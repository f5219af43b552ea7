// trainplan's pages: the URL is the page's state; every figure and number comes from the API.
// This file: the ways in (hash links #plan?…, the named examples, a tab's last
// state), reading and writing the state, calling the API, errors next to their field, formatting
// for the eye (GB, %, durations), tables, and the accelerator table at the bottom of every page.
// The page never reads a number itself: each field's text goes to the API as typed, and the API
// reads it with the command line's grammar (4e6, 4,000,000 and 70B are numbers; lists are ranges
// or values separated by spaces) and refuses what it cannot read, naming the field.
"use strict";

const TP = (() => {
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));
  const PAGE = document.body.dataset.page;

  // ---------------------------------------------------------------- formatting (display only)
  // One rounding rule, the CLI's: Python's format of a float (f"{x:.2f}", f"{x:,.3f}",
  // f"{x:.3e}") rounds the double's exact decimal value, half to even on an exact tie (0.0625 →
  // 6.2%), where JS's toFixed and toExponential break ties upward (6.3%) and write "e+0" for
  // Python's "e+00". exactDigits: |x|'s exact decimal digits (toFixed(100) is exact; a double at
  // or above 1e21 is a whole number, BigInt's digits).
  function exactDigits(x) {
    const a = Math.abs(x);
    if (a >= 1e21) return [BigInt(a).toString(), ""];
    const [i, f] = a.toFixed(100).split(".");
    return [i, f];
  }
  const tie = (rest) => /^50*$/.test(rest); // the digits past the cut: exactly half a unit
  const grouped = (t) => t.replace(/^(-?)(\d+)/, (m, sign, i) => sign + i.replace(/\B(?=(\d{3})+(?!\d))/g, ","));
  // x with d decimals as Python's f"{x:.{d}f}" (group: f"{x:,.{d}f}")
  function fixed(x, d, group = false) {
    let t = Math.abs(x) >= 1e21 ? BigInt(Math.round(x)).toString() + (d ? "." + "0".repeat(d) : "") : x.toFixed(d);
    const [i, f] = exactDigits(x);
    if (tie(f.slice(d))) { // toFixed rounded the tie away from zero; Python keeps the even digit
      const cut = d ? `${i}.${f.slice(0, d)}` : i;
      if (Number(cut[cut.length - 1]) % 2 === 0) t = (x < 0 ? "-" : "") + cut;
    }
    return group ? grouped(t) : t;
  }
  // x with d decimals of mantissa as Python's f"{x:.{d}e}" (an exponent of two digits at least)
  function sci(x, d) {
    let t = x.toExponential(d);
    const [i, f] = exactDigits(x);
    const all = (i + f).replace(/^0+/, ""), lead = i.replace(/^0+/, "");
    if (all && tie(all.slice(d + 1).replace(/0+$/, "0"))) {
      const sig = all.slice(0, d + 1), e = lead ? lead.length - 1 : -(f.length - f.replace(/^0+/, "").length + 1);
      if (Number(sig[sig.length - 1]) % 2 === 0) t = `${x < 0 ? "-" : ""}${sig[0]}${d ? "." + sig.slice(1) : ""}e${e < 0 ? "-" : "+"}${Math.abs(e)}`;
    }
    return t.replace(/e([+-])(\d)$/, "e$10$2");
  }
  const gb = (b) => (b === null || b === undefined ? "—" : `${fixed(b / 1e9, 2, true)} GB`);
  const pct = (x) => (x === null || x === undefined ? "—" : `${fixed(x * 100, 1)}%`);
  const num = (x) => (x === null || x === undefined ? "—" : Number(x).toLocaleString("en-US"));
  function secs(s) {
    if (s === null || s === undefined) return "—";
    if (s < 1) return `${fixed(s * 1e3, 1, true)} ms`;
    if (s < 120) return `${fixed(s, 3)} s`;
    if (s < 7200) return `${fixed(s / 60, 1)} min`;
    if (s < 172800) return `${fixed(s / 3600, 1)} h`;
    return `${fixed(s / 86400, 1)} days`;
  }
  // A step time as the CLI prints it (seconds with 3 decimals, milliseconds below 1 s): the
  // tables' form, where rows 0.1 min apart must still read apart (291.541 s against 291.664 s).
  // (a no-break space before the unit: a narrow column never splits "291.541 s")
  const exact = (s) => (s === null || s === undefined ? "—" : s < 1 ? secs(s) : `${fixed(s, 3, true)}\u00a0s`);
  // A step time as the CLI's step_text writes it (model/durations.py): the seconds as the JSON
  // gives them (two plans 0.1 min apart still read apart), and from two minutes on the minutes,
  // hours or days beside them (290.512 s (4.8 min)).
  const stepTime = (s) => (s === null || s === undefined || s < 120 ? exact(s) : `${exact(s)} (${secs(s)})`);
  const esc = (t) => String(t).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

  // A table from rows and [header, cell(row)] columns.
  function table(rows, columns, attrs = "") {
    // a header may mark where it may wrap ("memory/<wbr>GPU", given as { html }): nothing else
    const head = columns.map(([h]) => `<th>${h && h.html ? h.html : esc(h)}</th>`).join("");
    const body = rows
      .map((r, i) => `<tr data-row="${i}">${columns.map(([, f]) => `<td>${f(r, i)}</td>`).join("")}</tr>`)
      .join("");
    return `<table ${attrs}><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
  }

  // ---------------------------------------------------------------- the ways in
  // Hash links: #plan?dp=8&tp=4 opens the Planner with those values.
  const HASH_TABS = { plan: "planner", planner: "planner", pipeline: "pipeline", mfu: "mfu", ckpt: "ckpt", rlhf: "rlhf", search: "search", frontier: "frontier", about: "about" };
  // Parameters of the page itself, never sent to the API: the example shown, the player's step.
  // (plan: the RLHF tab's placement plan form, its own query, rlhf_plan.js)
  const PAGE_ONLY = ["example", "step", "plan"];
  const SOURCES = ["model", "params", "config"]; // the planner's three ways to give a model
  let INFO = { examples: [], aliases: {} };

  function fromHash() {
    const m = /^#([a-z]+)(?:\?(.*))?$/i.exec(location.hash);
    const page = m && HASH_TABS[m[1].toLowerCase()];
    return page ? { page, query: m[2] || "" } : null;
  }
  const never = () => new Promise(() => {});
  const go = (path) => { location.replace(path); return never(); };
  window.addEventListener("hashchange", () => { const r = fromHash(); if (r) location.replace(`/${r.page}?${r.query}`); });

  const fieldNames = (form) => new Set(form ? $$("[name]", form).map((el) => el.name) : []);

  // A link's names as the page's: seq_len → seq-len, zero_stage → zero, p → stages, and the
  // hash links' (gpus → chips on the MFU tab). A name the page does not know is left out and
  // refused at the top, naming it and the page's names (never sent for click to guess at).
  function canonical(params, form) {
    const names = fieldNames(form), aliases = INFO.aliases[PAGE] || {}, out = new URLSearchParams();
    const own = new Set((INFO.names || {})[PAGE] || []), unknown = [];
    for (const [k, v] of params) {
      const dashed = k.replace(/_/g, "-");
      const name = names.has(k) ? k : aliases[k] || (PAGE_ONLY.includes(k) ? k : names.has(dashed) ? dashed : aliases[dashed] || dashed);
      if (own.size && !own.has(name) && !PAGE_ONLY.includes(name)) unknown.push(k);
      else out.append(name, v);
    }
    if (unknown.length) {
      const known = [...own, ...Object.keys(aliases)].sort();
      startError = `link: ${unknown.map((k) => `'${k}'`).join(", ")} ${unknown.length > 1 ? "are" : "is"} no parameter of this tab; its names are ${known.join(", ")}`;
    }
    return out;
  }

  // example=NAME: the example's parameters, then the link's (which override them).
  function withExample(params) {
    const name = params.get("example");
    if (!name) return params;
    const ex = INFO.examples.find((e) => e.name === name);
    if (!ex) {
      params.delete("example");
      startError = `example: '${name}' is not a named example; the examples are ${INFO.examples.map((e) => e.name).join(", ")}`;
      return params;
    }
    if (ex.page !== PAGE) return null; // the example's own page shows it
    const given = new Set(params.keys()), merged = new URLSearchParams({ example: name });
    const source = SOURCES.some((k) => given.has(k));
    for (const [k, v] of ex.query) if (!given.has(k) && !(source && SOURCES.includes(k))) merged.append(k, v);
    for (const [k, v] of params) if (k !== "example") merged.append(k, v);
    return merged;
  }
  let startError = "";
  // A tab's own refusal of its link (before bind): said at the top until the user edits.
  function refuseLink(message) { startError = message; }

  function showPreset() {
    const box = $("#preset"), name = new URLSearchParams(location.search).get("example");
    const ex = name && INFO.examples.find((e) => e.name === name);
    if (!box) return;
    box.hidden = !ex;
    if (ex) box.innerHTML = `Example <b>${esc(ex.name)}</b>: ${esc(ex.says)}${ex.source ? ` <span class="note">(${esc(ex.source)})</span>` : ""}`;
  }

  // Once the user edits a field the address holds every value itself, not the example's name.
  function dropExample() {
    const q = new URLSearchParams(location.search);
    if (!q.has("example")) return;
    q.delete("example");
    setAddress(q);
    const box = $("#preset");
    if (box && !box.hidden) box.innerHTML += ' <span class="note">— edited</span>';
  }

  // Each tab keeps its last state for this browser tab: the navigation returns to it.
  const KEY = (page) => `trainplan:${page}`;

  // The address holds the page's state, but not an uploaded file too large for it: a query
  // longer than POST_LIMIT characters (an uploaded config.json of hundreds of kilobytes) would
  // make a reload a GET the HTTP server refuses with a bare 400. Its `config` and `accelerator`
  // are left out of the address and kept in this tab's sessionStorage with the short address
  // they belong to, so a reload (or the navigation back) restores them; the page says the link
  // does not carry the file, and whether a reload restores it or needs the file again.
  const LARGE = ["config", "accelerator"];
  const LARGE_KEY = (page) => `trainplan:${page}:large`;
  function setAddress(q) {
    const full = new URLSearchParams(q);
    const short = new URLSearchParams(full);
    for (const k of LARGE) short.delete(k);
    const large = `${full}`.length > POST_LIMIT && LARGE.some((k) => full.has(k));
    let kept = false;
    if (large) {
      const values = Object.fromEntries(LARGE.filter((k) => full.has(k)).map((k) => [k, full.get(k)]));
      try { sessionStorage.setItem(LARGE_KEY(PAGE), JSON.stringify({ address: `${short}`, values })); kept = true; } catch { /* storage full or off */ }
    } else {
      try { sessionStorage.removeItem(LARGE_KEY(PAGE)); } catch { /* none */ }
    }
    history.replaceState(null, "", `${location.pathname}?${large ? short : full}`);
    addressNote(large, kept);
  }
  function addressNote(large, kept) {
    let box = $("#address-note");
    if (!box && !large) return;
    if (!box) {
      box = document.createElement("p");
      box.id = "address-note";
      box.className = "note";
      box.setAttribute("role", "status");
      ($("#results .card") || $("#results") || document.body).prepend(box);
    }
    box.hidden = !large;
    box.textContent = !large ? "" : "This page's address and links do not carry the uploaded file (too large for a URL): " +
      (kept ? "a reload of this tab restores it from the tab's storage; to share the layout, share the file too."
        : "this browser tab could not keep it, so a reload needs the file again.");
  }
  // A link whose uploaded file this tab does not hold (opened in a new tab, or shared): said,
  // instead of the page showing another model's figures for the link's layout.
  function leftOutNote() {
    addressNote(false, false);
    startError = `${leftOut}: this link did not carry the uploaded file (too large for a URL) and this browser tab does not hold it; choose the file again to see the layout's figures`;
  }
  // The stashed file of the address `q` (a reload of a page setAddress shortened), into `q`.
  function restoreLarge(q) {
    if (LARGE.some((k) => q.has(k))) return q;
    let saved = null;
    try { saved = JSON.parse(sessionStorage.getItem(LARGE_KEY(PAGE)) || "null"); } catch { /* none */ }
    if (!saved || saved.address !== `${q}`) return q;
    const out = new URLSearchParams(q);
    for (const [k, v] of Object.entries(saved.values || {})) out.set(k, v);
    return out;
  }
  // A link to another tab (a search answer's or frontier point's "planner" link) whose query is
  // over POST_LIMIT characters (it carries the search's uploaded config.json): its address leaves
  // `config` and `accelerator` out and adds large=config; a click first keeps them in this
  // browser tab's storage under the target tab's key, with the short address they belong to, so
  // the target restores them as after a reload (restoreLarge). A link opened elsewhere (a new
  // tab, shared) does not find them, and the target says the file must be chosen again.
  function largeLink(a, url = a.getAttribute("href")) {
    const at = url.indexOf("?");
    if (url.length <= POST_LIMIT || at < 0) { a.setAttribute("href", url); return; }
    const path = url.slice(0, at), full = new URLSearchParams(url.slice(at + 1)), short = new URLSearchParams(full);
    const left = LARGE.filter((k) => full.has(k));
    for (const k of left) short.delete(k);
    const values = Object.fromEntries(left.map((k) => [k, full.get(k)]));
    const withMark = new URLSearchParams(short);
    withMark.set("large", left.join(","));
    a.setAttribute("href", `${path}?${withMark}`);
    a.title = "opens with the uploaded file in this browser tab; the link itself does not carry it (too large for a URL)";
    a.classList.add("large-link");
    const keep = () => {
      try { sessionStorage.setItem(LARGE_KEY(path.replace(/^\//, "")), JSON.stringify({ address: `${short}`, values })); } catch { /* storage full or off */ }
    };
    a.addEventListener("click", keep);
    a.addEventListener("auxclick", keep);
  }
  // large=config on arrival (largeLink): which parameters the link left out; "" when none.
  let leftOut = "";
  function remember() {
    try { sessionStorage.setItem(KEY(PAGE), location.search); } catch { /* storage off: nothing kept */ }
    navLinks();
  }
  function navLinks() {
    for (const a of $$("header nav a[data-tab]")) {
      let saved = null;
      try { saved = sessionStorage.getItem(KEY(a.dataset.tab)); } catch { /* none */ }
      a.href = `/${a.dataset.tab}${saved || ""}`;
    }
  }

  // Before anything else: the hash link, the example, the saved state or the first-visit example;
  // the catalogues (model and GPU selects), the examples and the link names. Resolves when the
  // address holds the page's state in its own names (or never, when another page shows it).
  async function start(first = "") {
    const route = fromHash();
    if (route && route.page !== PAGE) return go(`/${route.page}?${route.query}`);
    if (route) history.replaceState(null, "", `/${PAGE}?${route.query}`);
    if (!location.search && !route) {
      let saved = null;
      try { saved = sessionStorage.getItem(KEY(PAGE)); } catch { /* none */ }
      if (saved || first) history.replaceState(null, "", `${location.pathname}${saved || `?${first}`}`);
    }
    const [gpus, models, info] = await Promise.all(["/api/gpus", "/api/models", "/api/examples"].map((u) => fetch(u).then((r) => r.json())));
    INFO = info;
    catalogues(gpus, models);
    const form = $("#inputs");
    const raw = new URLSearchParams(location.search);
    leftOut = raw.get("large") || "";
    raw.delete("large"); // the page's marker (largeLink), never a parameter
    let exName = raw.get("example");
    if (exName && !INFO.examples.some((e) => e.name === exName)) {
      // another case or separator (FSDP-70B-64), read by the server's rule as the command line
      // reads it (interface.examples.example_name); an unknown name, its refusal
      const body = await fetch(`/api/examples?${new URLSearchParams({ example: exName })}`).then((r) => r.json()).catch(() => ({}));
      if (body.example) raw.set("example", (exName = body.example));
      else if (body.error) { raw.delete("example"); startError = body.error; exName = null; }
    }
    const ex = exName && INFO.examples.find((e) => e.name === exName);
    if (ex && ex.page !== PAGE) return go(`/${ex.page}?${raw}`);
    // the uploaded file a shortened address left out (setAddress), back beside the link's names
    const params = restoreLarge(withExample(canonical(raw, form)));
    if (leftOut && LARGE.some((k) => params.has(k))) leftOut = ""; // restored from this tab
    setAddress(params);
    if (leftOut) leftOutNote();
    for (const sel of $$("select[data-gpus], select[data-models]")) {
      const keep = params.get(sel.name);
      if (!keep) continue;
      // a name the catalogue lacks (a typo in a link) is kept and sent, so the API names it, as
      // the CLI does, instead of the select falling back to its default without a word
      if (!sel.multiple && ![...sel.options].some((o) => o.value === keep)) sel.add(new Option(`${keep} (not in the list)`, keep));
      sel.value = keep;
    }
    showPreset();
    remember();
    return { gpus, models, info };
  }

  // ---------------------------------------------------------------- the state: URL <-> form
  // Each form field's name is the query parameter (the CLI option without dashes). A field's
  // text goes as typed; an empty one is left out, or sends its data-default (shown as its
  // placeholder) unless the field named by data-default-unless holds a value.
  function fill(form, params) {
    for (const el of $$("[name]", form)) {
      if (el.name.startsWith("_")) continue; // the page's own controls, not parameters
      const values = params.getAll(el.name);
      if (el.type === "checkbox") el.checked = values.includes("true");
      // a select left out of the link, with no empty choice, keeps the choice the page marks
      // (an empty value would select nothing and send nothing: "algorithm: required")
      else if (el.tagName === "SELECT" && !el.multiple && !values.length && ![...el.options].some((o) => o.value === "")) el.selectedIndex = Math.max(0, [...el.options].findIndex((o) => o.defaultSelected));
      else if (el.type === "radio") el.checked = values.includes(el.value);
      // data-lines (the --set field): one value a line, each its own repeat of the parameter
      else if (el.type !== "file") el.value = el.dataset.list !== undefined ? values.join(document.body.dataset.listSeparator) : el.dataset.lines !== undefined ? values.join("\n") : values.length ? values[values.length - 1] : "";
    }
  }

  const active = (el) => !el.disabled && !el.closest("[hidden]") && !el.name.startsWith("_") && el.type !== "file";
  function value(form, name) {
    const els = $$(`[name="${name}"]`, form).filter(active);
    for (const el of els) {
      if (el.type === "checkbox") { if (el.checked) return "true"; }
      else if (el.type === "radio") { if (el.checked) return el.value; }
      else if (el.value.trim() !== "") return el.value.trim();
    }
    return "";
  }

  // data-default-unless="gpu model": the field's default is not sent while any of those holds a
  // value, on the form or (a parameter without a field, as the RLHF tab's model) in the address.
  function overridden(form, el) {
    const given = new URLSearchParams(location.search);
    return (el.dataset.defaultUnless || "").split(/\s+/).filter(Boolean).some((n) => value(form, n) || given.get(n));
  }

  function query(form, withDefaults = true) {
    const q = new URLSearchParams();
    for (const el of $$("[name]", form).filter(active)) {
      if (el.type === "checkbox") {
        if (el.checked) q.append(el.name, "true");
      } else if (el.type === "radio") {
        if (el.checked && el.value) q.append(el.name, el.value);
      } else if (el.dataset.lines !== undefined) {
        for (const line of el.value.split("\n")) if (line.trim() !== "") q.append(el.name, line.trim());
      } else if (el.value.trim() !== "") q.append(el.name, el.value);
      else if (withDefaults && el.dataset.default && !overridden(form, el)) q.append(el.name, el.dataset.default);
    }
    return q;
  }

  // data-off-when="algorithm=dpo; algorithm=grpo&reward=rule": the field does not apply (it is
  // disabled, kept but not sent) while any ;-clause holds, a clause being &-joined name=value
  // terms (a checkbox's value is "true" when ticked, "" when not); name!=value holds while the
  // field reads otherwise ("model!=": while a model is chosen).
  function conditions(form, { keepHeld = false } = {}) {
    for (const el of $$("[data-off-when]", form)) {
      const off = el.dataset.offWhen.split(";").some((clause) => clause.trim().split("&").every((term) => {
        const [k, v = ""] = term.split("=");
        const not = k.trim().endsWith("!");
        return (value(form, k.trim().replace(/!$/, "")) === v.trim()) !== not;
      }));
      // on opening a link (keepHeld), a text field the link filled stays on even where it does
      // not apply: it is sent, and the API's refusal ("t-fb: '2' does not apply …") says so — a
      // link's value is never dropped unseen; after an edit a field that stops applying is off
      const holds = keepHeld && el.tagName === "INPUT" && el.type === "text" && el.value.trim() !== "";
      el.disabled = off && !holds;
      el.closest("label")?.classList.toggle("off", off && !holds);
    }
  }

  // The link's options that have no field on the form (a search answer's cluster options, say):
  // they travel with every query, unchanged, so the API takes them (or refuses them, by name).
  function linkOnly(form) {
    const names = fieldNames(form);
    return [...new URLSearchParams(location.search)].filter(([k]) => !names.has(k) && !PAGE_ONLY.includes(k));
  }

  // Keep the URL in step with the form; call update(query) now and on every change (debounced).
  // A change that leaves the query as last sent sends nothing: a text field fires "input" as
  // it is typed in and "change" again when it is left, and Enter in a field (the form's
  // implicit submission) fires "change" with nothing edited — each would send the request
  // just answered a second time.
  function bind(form, update, { wait = 250 } = {}) {
    fill(form, restoreLarge(new URLSearchParams(location.search)));
    conditions(form, { keepHeld: true });
    const extra = linkOnly(form);
    const withExtra = (q) => { for (const [k, v] of extra) q.append(k, v); return q; };
    let timer = null;
    let sent = null;
    const send = (q) => {
      if (q.toString() === sent) return;
      sent = q.toString();
      update(q);
    };
    const changed = (e) => {
      if (e && e.isTrusted) { dropExample(); startError = ""; edited(e.target); }
      conditions(form);
      clearTimeout(timer);
      timer = setTimeout(() => {
        const address = withExtra(query(form, false));
        const keep = new URLSearchParams(location.search);
        for (const k of PAGE_ONLY) if (keep.has(k)) address.set(k, keep.get(k));
        setAddress(address);
        remember();
        send(withExtra(query(form)));
      }, wait);
    };
    form.addEventListener("input", changed);
    form.addEventListener("change", changed);
    form.addEventListener("submit", (e) => e.preventDefault());
    if (startError) showError(startError, form);
    send(withExtra(query(form)));
    document.body.dataset.ready = "true"; // listening: what the user does now is seen
    return changed;
  }

  function setPageParam(key, val) {
    const q = restoreLarge(new URLSearchParams(location.search));
    q.set(key, val);
    setAddress(q);
    remember();
  }

  // ---------------------------------------------------------------- errors next to their field
  // The API's line names the parameter first ("tp: '0' must be at least 1", "reward: 'rule'
  // does not apply…"); a line that asks for another ("give --tp", or "give scaleout-gbps" for a
  // knob the command line takes by --set, named by its query parameter) goes to that one, but a
  // value refused as not applying ("t-fb: '2' does not apply: 1f1b runs whole backwards: give
  // backward-ratio") stays with its own field: that is the one to clear.
  function fieldFor(form, message) {
    if (!form) return null;
    const aliases = INFO.aliases[PAGE] || {};
    // a rule of several fields ("global-batch: 2,048 is not divisible by micro_batch_size 1,000
    // × dp 2") goes to the one the user just edited when the line names it; an aside that
    // explains ("(the walk-through lists every tensor …)") names no field, though its words
    // may spell one (the checkpointing tab's every)
    const rule = message.replace(/\(the [^()]*\)/g, "");
    const named = (rule.match(/[A-Za-z][\w-]*/g) || []).map((w) => aliases[w] || aliases[w.replace(/_/g, "-")] || w.replace(/_/g, "-"));
    const mine = lastEdited && named.includes(lastEdited) && $$(`[name="${lastEdited}"]`, form).find(active);
    if (mine) return mine;
    const names = [];
    const give = /give (?:--)?([a-z][\w-]*)/.exec(message);
    const head = /^(?:--)?([A-Za-z][\w-]*)/.exec(message);
    // a key typed in Other settings (set=KEY=VALUE) is refused there, where it was typed, not
    // beside the dedicated field of the same knob, which the user left empty
    const other = $$('[name="set"]', form).find(active);
    const dashed = (w) => w.replace(/_/g, "-");
    if (other && head && other.value.split("\n").some((line) => line.includes("=") && dashed(line.split("=")[0].trim()) === dashed(head[1]))) return other;
    const heads = head ? [head[1], head[1].replace(/_/g, "-"), aliases[head[1]]] : [];
    const ownValue = head && /^[^:]+: .*? does not apply\b/.test(message);
    if (ownValue) names.push(...heads);
    if (give) names.push(give[1]);
    names.push(...heads);
    for (const name of names.filter(Boolean)) {
      const el = $$(`[name="${name}"]`, form).find(active);
      if (el) return el;
    }
    return null;
  }

  // The field the user last edited (by name): its old error goes at once, while the answer to
  // its new value is on its way, and a rule naming it among others is said beside it.
  let lastEdited = null;
  function edited(el) {
    if (!el?.name || el.name.startsWith("_")) return;
    lastEdited = el.name;
    $(`#error-${CSS.escape(el.name)}`)?.remove();
    if (el.getAttribute("aria-invalid") === "true") { el.removeAttribute("aria-invalid"); el.removeAttribute("aria-describedby"); }
  }

  // Results waiting for an answer (a request of any kind in flight): dimmed, as the search
  // tab's, and aria-busy, until the latest answer of each kind is in.
  const pending = new Set();
  function busy(kind, on) {
    if (on) pending.add(kind); else pending.delete(kind);
    const results = $("#results");
    if (!results) return;
    results.classList.toggle("stale", pending.size > 0);
    results.setAttribute("aria-busy", String(pending.size > 0 || document.body.classList.contains("has-error")));
  }

  function clearFieldErrors() {
    for (const p of $$(".field-error")) p.remove();
    for (const el of $$("[aria-invalid=true]")) { el.removeAttribute("aria-invalid"); el.removeAttribute("aria-describedby"); }
  }

  // Show the error line (the CLI's "Error: " and the API's line) next to its field, with a link
  // to it at the top (the field may be out of view), or at the top alone when no field is named;
  // the results that no longer match the inputs are dimmed until the next good answer.
  function showError(message, form = $("#inputs")) {
    clearFieldErrors();
    const box = $("#error");
    const el = message ? fieldFor(form, message) : null;
    box.textContent = message ? `Error: ${message}` : "";
    if (el) {
      const p = document.createElement("p");
      p.className = "field-error";
      p.id = `error-${el.name}`;
      p.textContent = `Error: ${message}`;
      (el.closest("label") || el).after(p);
      el.setAttribute("aria-invalid", "true");
      el.setAttribute("aria-describedby", p.id);
      box.textContent = `Error at the ${el.name} field: `;
      const link = document.createElement("a");
      link.href = "#";
      link.className = "to-field";
      link.textContent = "go to the field";
      link.addEventListener("click", (e) => { e.preventDefault(); el.focus(); });
      box.append(link);
    }
    box.hidden = !message;
    document.body.classList.toggle("has-error", Boolean(message));
    $("#results")?.setAttribute("aria-busy", message ? "true" : "false");
  }

  // ---------------------------------------------------------------- the API
  // A request to an endpoint with a POST form (interface/web/body.py) whose URL is longer than
  // POST_LIMIT characters (an uploaded config.json of hundreds of kilobytes: the HTTP server
  // refuses a URL that long with a bare 400) goes as a JSON body of the same parameters, each a
  // list of its values; every other request is the GET it was.
  const POST_LIMIT = 8000;
  const POSTABLE = new Set(["/api/evaluate", "/api/figures/memory", "/api/figures/frontier", "/api/figures/frontier.csv", "/api/search", "/api/frontier", "/api/search/stream", "/api/frontier/stream"]);
  function send(url, init = {}) {
    const at = url.indexOf("?");
    const path = at < 0 ? url : url.slice(0, at);
    if (url.length <= POST_LIMIT || !POSTABLE.has(path)) return fetch(url, init);
    const body = {};
    for (const [k, v] of new URLSearchParams(url.slice(at + 1))) (body[k] ||= []).push(v);
    return fetch(path, { ...init, method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  }

  const latest = {};
  // GET a JSON object; answers null for a stale reply (a newer call of the same kind was made).
  // While it is on its way the results are marked busy (busy); a reply older than the latest
  // request of its kind is dropped.
  async function api(kind, url) {
    const ticket = (latest[kind] = (latest[kind] || 0) + 1);
    busy(kind, true);
    let res, body;
    try {
      res = await send(url);
      body = await res.json().catch(() => ({ error: `the server answered ${res.status}` }));
    } catch (e) {
      if (ticket === latest[kind]) busy(kind, false);
      throw e;
    }
    if (ticket !== latest[kind]) return null;
    busy(kind, false);
    if (!res.ok || body.error) {
      showError(body.error || `the server answered ${res.status}`);
      return null;
    }
    showError(startError); // a link's refused name stays said until the user edits
    return body;
  }

  // An API figure (SVG) into a container, inline (its text and links stay live), named for
  // assistive technology by the container's data-label and ``label``.
  // A newer figure for the same container aborts the request of the one before (the server
  // is not left drawing frames nobody will see); the old figure stays, dimmed, until then.
  async function figure(container, url, label = "") {
    const ticket = (container._ticket = (container._ticket || 0) + 1);
    container._abort?.abort();
    const controller = (container._abort = new AbortController());
    container.classList.add("loading");
    let res, text;
    try {
      res = await send(url, { signal: controller.signal });
      text = await res.text();
    } catch (e) {
      if (e.name === "AbortError") return false;
      throw e;
    }
    if (ticket !== container._ticket) return false;
    container.classList.remove("loading");
    if (!res.ok) return false;
    container.innerHTML = text;
    container.dataset.src = url;
    const svg = $("svg", container);
    if (svg) {
      svg.setAttribute("role", $("a", svg) ? "group" : "img"); // a chart of links stays navigable
      svg.setAttribute("aria-label", [container.dataset.label, label].filter(Boolean).join(": "));
    }
    return true;
  }

  // ---------------------------------------------------------------- catalogue, GPUs, the table
  function catalogues(gpus, models) {
    for (const sel of $$("select[data-gpus]")) {
      for (const g of gpus) sel.add(new Option(`${g.name} (${g.memory_gb} ${g.memory_unit}, ${g.bf16_tflops} TFLOP/s)`, g.name));
    }
    for (const sel of $$("select[data-models]")) {
      for (const m of models) sel.add(new Option(`${m.name} (${fixed(m.num_params / 1e9, 1)}B)`, m.name));
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
        // the status column, headed and explained by the legend under the table (trainplan gpus')
        [$("#gpu-status-legend")?.dataset.header || "status", (g) => esc(g.status)],
        // on a narrow screen two lines of it, the rest on a tap (style.css .clamp)
        ["source", (g) => `<span class="clamp" title="${esc(g.source)}">${esc(g.source)}</span>`],
      ]);
      box.addEventListener("click", (e) => e.target.closest?.(".clamp")?.classList.toggle("open"));
    }
  }

  return { send, POST_LIMIT, setAddress, restoreLarge, largeLink, leftOut: () => leftOut, $, $$, PAGE, gb, pct, num, secs, fixed, sci, esc, table, start, bind, refuseLink, linkOnly, query, fill, value, conditions, setPageParam, api, figure, showError, exact, stepTime, busy, dropExample, remember, info: () => INFO };
})();

// A search or frontier with its progress (/api/…/stream: one JSON event a line); onEvent(event)
// for each; answers the last event, or null after an error (shown next to its field) or a cancel
// (signal aborted: the server stops the search when the request closes).
// form: the one whose fields a refusal names (the page's inputs unless given).
TP.stream = async (url, onEvent, signal, form = undefined) => {
  let res;
  try {
    res = await TP.send(url, { signal });
  } catch (e) {
    if (e.name === "AbortError") return null;
    throw e;
  }
  if (!res.ok) {
    const body = await res.json().catch(() => ({ error: `the server answered ${res.status}` }));
    TP.showError(body.error, form);
    return null;
  }
  TP.showError("", form);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", last = null;
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch (e) {
      if (e.name === "AbortError") return null;
      throw e;
    }
    const { value, done } = chunk;
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 1);
      if (!line) continue;
      last = JSON.parse(line);
      if (last.event === "error") { TP.showError(last.error, form); return null; }
      onEvent(last);
    }
    if (done) return last;
  }
};

// A long job's progress line once its Cancel was pressed: the bar emptied, the line and the status
// say the server stopped it (after: the time it ran, as the progress line writes it).
TP.showCancelled = (bar, text, status, after) => {
  bar.max = 1;
  bar.value = 0;
  text.textContent = `cancelled after ${after}; the server stopped the search`;
  status.textContent = "cancelled";
  status.className = "status cancelled";
};

// A config.json chosen in #config-file, into the form's hidden config field (compact JSON: the
// API names a text that is not JSON); with dropOn, choosing a model there drops the file.
TP.upload = (form, dropOn = null) => {
  TP.$("#config-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (!file) return;
    const text = await file.text();
    let compact = text;
    try { compact = JSON.stringify(JSON.parse(text)); } catch { /* the API names the error */ }
    TP.$("#config").value = compact;
    if (dropOn) dropOn.value = "";
    TP.$("#config-name").textContent = `${file.name}: ${compact.length.toLocaleString("en-US")} characters`;
    form.dispatchEvent(new Event("change"));
  });
  dropOn?.addEventListener("change", () => {
    if (!dropOn.value || !TP.$("#config").value) return;
    TP.$("#config").value = "";
    TP.$("#config-file").value = "";
    TP.$("#config-name").textContent = "the config.json was dropped: the model is the one chosen";
  });
};
