package outputs

// Page is the self-contained HTML view of /debug/krt: it loads the graph as JSON from the same
// server, lays the collections out in columns by depth (inputs on the left), draws primary
// inputs as solid arrows and Fetches as dashed ones, and refreshes every two seconds. It loads
// nothing from anywhere else.
const Page = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>krteds collection graph</title>
<style>
body { font-family: Helvetica, Arial, sans-serif; margin: 16px; color: #1d2330; background: #fafbfc; }
h1 { font-size: 18px; margin: 0 0 4px 0; }
#status { font-size: 12px; color: #5c6670; margin-bottom: 8px; }
svg { background: #fff; border: 1px solid #d8dde3; }
.node rect { rx: 6; ry: 6; stroke-width: 1.5; }
.node.input rect { fill: #e8f1fb; stroke: #3b78c2; }
.node.derived rect { fill: #eef8ef; stroke: #3f9a4a; }
.node.index rect { fill: #f3eefb; stroke: #7a52b3; }
.node.unsynced rect { fill: #fdf0e6; stroke: #d9822b; }
.node text { font-size: 12px; }
.node .name { font-weight: bold; }
.edge { fill: none; stroke: #8a94a0; stroke-width: 1.3; }
.edge.fetch { stroke-dasharray: 5 4; stroke: #b0b7c0; }
.legend { font-size: 12px; color: #5c6670; margin-top: 6px; }
</style></head>
<body>
<h1>krteds collection graph</h1>
<div id="status">loading…</div>
<svg id="graph" width="1200" height="600"></svg>
<div class="legend">boxes: collections (blue: inputs, green: derived, purple: indexes, orange: not synced) — solid arrows: primary input — dashed arrows: Fetch dependencies</div>
<script>
"use strict";
const NS = "http://www.w3.org/2000/svg";
const W = 230, H = 58, GX = 90, GY = 24, PAD = 20;
function el(tag, attrs, parent) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}
function layout(g) {
  const byName = {}; g.nodes.forEach(n => byName[n.name] = n);
  const preds = {}; g.nodes.forEach(n => preds[n.name] = []);
  (g.edges || []).forEach(e => { if (preds[e.to] && byName[e.from]) preds[e.to].push(e.from); });
  const depth = {};
  function d(name, seen) {
    if (depth[name] !== undefined) return depth[name];
    if (seen[name]) return 0;
    seen[name] = true;
    let m = 0;
    preds[name].forEach(p => { m = Math.max(m, d(p, seen) + 1); });
    depth[name] = m;
    return m;
  }
  g.nodes.forEach(n => d(n.name, {}));
  const cols = {};
  g.nodes.forEach(n => { (cols[depth[n.name]] = cols[depth[n.name]] || []).push(n); });
  const pos = {};
  let maxRows = 0, maxCol = 0;
  Object.keys(cols).forEach(c => {
    cols[c].forEach((n, i) => { pos[n.name] = { x: PAD + c * (W + GX), y: PAD + i * (H + GY) }; });
    maxRows = Math.max(maxRows, cols[c].length); maxCol = Math.max(maxCol, +c);
  });
  return { pos, width: PAD * 2 + (maxCol + 1) * (W + GX), height: PAD * 2 + maxRows * (H + GY) };
}
function draw(g) {
  const svg = document.getElementById("graph");
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const L = layout(g);
  svg.setAttribute("width", L.width); svg.setAttribute("height", L.height);
  const defs = el("defs", {}, svg);
  const m = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" }, defs);
  el("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8a94a0" }, m);
  (g.edges || []).forEach(e => {
    const a = L.pos[e.from], b = L.pos[e.to];
    if (!a || !b) return;
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    const mx = (x1 + x2) / 2;
    el("path", { class: "edge " + e.kind, d: "M" + x1 + "," + y1 + " C" + mx + "," + y1 + " " + mx + "," + y2 + " " + x2 + "," + y2, "marker-end": "url(#arrow)" }, svg);
  });
  g.nodes.forEach(n => {
    const p = L.pos[n.name];
    const cls = "node " + (n.synced ? n.kind : "unsynced");
    const grp = el("g", { class: cls, transform: "translate(" + p.x + "," + p.y + ")", "data-name": n.name }, svg);
    el("rect", { width: W, height: H }, grp);
    const t = el("text", { x: 10, y: 20, class: "name" }, grp); t.textContent = n.name;
    const s = el("text", { x: 10, y: 38 }, grp);
    s.textContent = "size " + n.size + " · recomputed " + n.recomputations + " · events " + n.events;
    const c = el("text", { x: 10, y: 52 }, grp);
    c.textContent = n.lastChange ? "changed " + new Date(n.lastChange).toLocaleTimeString() : "no change yet";
  });
}
async function refresh() {
  try {
    const r = await fetch("?format=json", { cache: "no-store" });
    const g = await r.json();
    draw(g);
    document.getElementById("status").textContent = g.nodes.length + " collections, " + (g.edges || []).length + " edges — updated " + new Date().toLocaleTimeString();
  } catch (e) {
    document.getElementById("status").textContent = "refresh failed: " + e;
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body></html>
`
