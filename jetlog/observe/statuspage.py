"""The HTTP port's ``/``: a small status page for a browser (cluster members and roles, streams
with leader, ISR and lag, consumers with pending) that refreshes itself from ``/status.json``.

One static document, no external assets (operators open it on hosts without internet access);
the data comes from ``Monitor.status`` (``observe/monitor.py``).
"""

from __future__ import annotations

PAGE = b"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>jetlog</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; color: #1d2330; background: #fafbfc; }
 h1 { font-size: 22px; margin: 0 0 4px 0; }
 h2 { font-size: 16px; margin: 24px 0 8px 0; }
 .sub { color: #5b6475; font-size: 13px; }
 table { border-collapse: collapse; background: #fff; box-shadow: 0 1px 2px rgba(0,0,0,.08); min-width: 480px; }
 th, td { text-align: left; padding: 6px 12px; border-bottom: 1px solid #e6e8ec; font-size: 13px; }
 th { background: #f0f2f5; font-weight: 600; }
 td.num { text-align: right; font-variant-numeric: tabular-nums; }
 .ok { color: #137333; font-weight: 600; }
 .bad { color: #b3261e; font-weight: 600; }
 .none { color: #8a91a0; }
</style>
</head>
<body>
<h1>jetlog <span id="node"></span></h1>
<div class="sub" id="summary">loading...</div>
<h2>Cluster</h2>
<table id="members"><thead><tr><th>Node</th><th>Role</th><th>State</th></tr></thead><tbody></tbody></table>
<h2>Streams</h2>
<table id="streams"><thead><tr><th>Stream</th><th>Messages</th><th>Size</th><th>Leader</th><th>In sync</th><th>Lag</th></tr></thead><tbody></tbody></table>
<h2>Consumers</h2>
<table id="consumers"><thead><tr><th>Stream</th><th>Consumer</th><th>Pending</th><th>Ack pending</th><th>Redelivered</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
function cell(text, cls) { const td = document.createElement("td"); td.textContent = text; if (cls) td.className = cls; return td; }
function fill(id, rows, empty) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  if (!rows.length) { const tr = document.createElement("tr"); const td = cell(empty, "none"); td.colSpan = 6; tr.append(td); body.append(tr); return; }
  for (const r of rows) { const tr = document.createElement("tr"); tr.append(...r); body.append(tr); }
}
function size(n) { const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0; while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; } return (i ? n.toFixed(1) : n) + " " + u[i]; }
async function refresh() {
  let s;
  try { const r = await fetch("status.json", {cache: "no-store"}); s = await r.json(); }
  catch (e) { document.getElementById("summary").textContent = "cannot reach the node: " + e; return; }
  document.getElementById("node").textContent = s.node;
  document.getElementById("summary").textContent =
    (s.ready ? "ready" : "not ready: " + s.why) + " \\u00b7 " + s.streams.length + " streams \\u00b7 " +
    s.consumers.length + " consumers \\u00b7 jetlog " + s.version + " \\u00b7 updated " + new Date().toLocaleTimeString();
  fill("members", s.members.map(m => [cell(m.name), cell(m.role), cell(m.alive ? "up" : "DOWN", m.alive ? "ok" : "bad")]), "single node");
  fill("streams", s.streams.map(x => [cell(x.name), cell(x.messages.toLocaleString(), "num"), cell(size(x.bytes), "num"),
    cell(x.leader || "-"), cell(x.isr.join(", ") || "-", x.isr.length >= x.replicas ? "ok" : "bad"),
    cell(Object.entries(x.lag).map(([k, v]) => k + " " + v).join(", ") || "-")]), "no streams");
  fill("consumers", s.consumers.map(c => [cell(c.stream), cell(c.name), cell(c.num_pending.toLocaleString(), "num"),
    cell(c.num_ack_pending.toLocaleString(), "num"), cell(c.num_redelivered.toLocaleString(), "num")]), "no consumers led here");
}
refresh();
setInterval(refresh, 2000);
</script>
</body>
</html>
"""
