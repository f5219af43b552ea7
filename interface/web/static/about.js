// The About tab: the named examples, each a link that opens its tab with its parameters.
"use strict";
(async () => {
  const { info } = await TP.start();
  const hash = { planner: "plan" };
  TP.$("#examples").innerHTML = TP.table(info.examples, [
    ["example", (e) => `<a href="/#${hash[e.page] || e.page}?example=${encodeURIComponent(e.name)}">${TP.esc(e.name)}</a>`],
    ["tab", (e) => TP.esc(e.tab)],
    ["shows", (e) => TP.esc(e.says)],
  ], 'id="examples-table"');
  document.body.dataset.ready = "true";
})();
