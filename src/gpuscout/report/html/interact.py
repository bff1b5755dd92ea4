"""The page's one script: sort a table by a header, filter its rows. The table is complete HTML without it.

A table made with `sortable=True` (`parts.table`) marks itself `data-sortable`; each cell that sorts by a
number carries it in `data-sort` (seconds as hours, money in the shown currency), each header that
filters names how in `data-filter` ("text": the cell holds the words typed; "max": its number is at most
the one typed). The script adds the controls itself, so with scripts off the page shows no dead input,
only the whole table in the order gpuscout ranked it.

The Content-Security-Policy allows this script and no other, by the SHA-256 of its exact text
(`SCRIPT_HASH`, computed here from `SCRIPT`): a string from a result that escaped escaping could still not
run, and no inline handler or fetched script could either.
"""

from __future__ import annotations

import base64
import hashlib

SCRIPT = """
(function () {
  "use strict";
  var collate = new Intl.Collator(undefined, {numeric: true}).compare;
  function key(row, i) {
    var cell = row.cells[i];
    if (!cell) return "";
    var s = cell.getAttribute("data-sort");
    return s === null ? cell.textContent.trim().toLowerCase() : parseFloat(s);
  }
  function compare(a, b) {
    var x = typeof a === "number" && !isNaN(a), y = typeof b === "number" && !isNaN(b);
    if (x && y) return a - b;
    if (x !== y) return x ? -1 : 1;
    return collate(String(a), String(b));
  }
  document.querySelectorAll("table[data-sortable]").forEach(function (table) {
    var head = table.tHead.rows[0], body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows), inputs = [];
    var controls = document.createElement("tr");
    controls.className = "filters";
    var count = document.createElement("p");
    count.className = "note shown-count";
    count.setAttribute("aria-live", "polite");
    function apply() {
      var shown = 0;
      rows.forEach(function (row) {
        var keep = inputs.every(function (input) {
          var want = input.value.trim(), i = +input.getAttribute("data-col");
          if (!want) return true;
          if (input.type === "number") {
            var v = key(row, i);
            return typeof v === "number" && !isNaN(v) && v <= parseFloat(want);
          }
          var text = row.cells[i] ? row.cells[i].textContent.toLowerCase() : "";
          return want.toLowerCase().split(/\\s+/).every(function (w) { return text.indexOf(w) >= 0; });
        });
        row.hidden = !keep;
        if (keep) shown += 1;
      });
      count.textContent = shown + " of " + rows.length + " rows shown";
    }
    Array.prototype.forEach.call(head.cells, function (th, i) {
      var cell = document.createElement("th"), how = th.getAttribute("data-filter");
      controls.appendChild(cell);
      if (how) {
        var input = document.createElement("input");
        input.type = how === "max" ? "number" : "search";
        input.placeholder = how === "max" ? "\\u2264 " + (th.getAttribute("data-unit") || "") : "filter";
        input.setAttribute("aria-label", "filter by " + th.textContent);
        input.setAttribute("data-col", String(i));
        input.addEventListener("input", apply);
        cell.appendChild(input);
        inputs.push(input);
      }
      var button = document.createElement("button");
      button.type = "button";
      button.textContent = th.textContent;
      th.textContent = "";
      th.appendChild(button);
      button.addEventListener("click", function () {
        var up = th.getAttribute("aria-sort") !== "ascending";
        Array.prototype.forEach.call(head.cells, function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", up ? "ascending" : "descending");
        var keyed = rows.map(function (row, n) { return [key(row, i), n, row]; });
        keyed.sort(function (a, b) { return (up ? 1 : -1) * compare(a[0], b[0]) || a[1] - b[1]; });
        rows = keyed.map(function (k) { return k[2]; });
        var moved = document.createDocumentFragment();
        rows.forEach(function (row) { moved.appendChild(row); });
        body.appendChild(moved);
      });
    });
    table.tHead.appendChild(controls);
    table.parentNode.insertBefore(count, table.nextSibling);
    apply();
  });
})();
"""
SCRIPT_HASH = "sha256-" + base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
CSS = """
table[data-sortable] th button { font: inherit; font-weight: 600; background: none; border: 0; padding: 0;
  cursor: pointer; text-align: inherit; color: inherit; }
table[data-sortable] th[aria-sort="ascending"] button::after { content: " ▲"; font-size: 0.7em; }
table[data-sortable] th[aria-sort="descending"] button::after { content: " ▼"; font-size: 0.7em; }
table[data-sortable] td.num { white-space: nowrap; }
tr.filters th { background: #fafafa; padding-top: 0; } tr.filters input { width: 100%; min-width: 4em;
  box-sizing: border-box; font: inherit; font-size: 0.8rem; }
"""
