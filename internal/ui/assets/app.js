// detour's map page: it follows the agent's server-sent events and draws
// the sites, the matrix of one-way delays, this site's paths and the route
// changes. Nothing is fetched from anywhere but the agent.
"use strict";

const $ = (s) => document.querySelector(s);
const SVG = "http://www.w3.org/2000/svg";
// A token given in the page's address (?access_token=...) goes with every
// request: EventSource cannot send an Authorization header.
const token = new URLSearchParams(location.search).get("access_token");
const auth = token ? "?access_token=" + encodeURIComponent(token) : "";

const state = { last: null, sites: "", pos: {}, selected: null, detailAt: 0, matrixSites: "", truth: null };

// ---- the lab's truth ----

// In the lab (detour-lab testbed ui), /lab/truth gives the emulator's real
// delays; the page then shows them beside the agent's estimates. An agent
// answers 404 there, and the page shows estimates only.
async function pollTruth() {
  try {
    const r = await fetch("/lab/truth");
    if (!r.ok) return;
    const t = await r.json();
    state.truth = new Map((t.links || []).map((l) => [l.from + ">" + l.to, l]));
    $("#truth-note").hidden = false;
    setTimeout(pollTruth, 2000);
  } catch (e) {
    /* not in the lab */
  }
}

// truthOf returns the emulator's delay from → to (configured delay plus
// queueing now), or null.
function truthOf(from, to) {
  const l = state.truth && state.truth.get(from + ">" + to);
  return l ? l.expected_ms : null;
}

function el(tag, attrs, text) {
  const e = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}

// ---- connection ----

let source = null;
function connect() {
  source = new EventSource("/v1/events" + auth);
  source.addEventListener("live", (e) => {
    setConn(true);
    render(JSON.parse(e.data));
  });
  source.onerror = () => setConn(false); // it reconnects by itself
}
// A stream the browser gave up on (an error status) is opened again.
setInterval(() => {
  if (source && source.readyState === EventSource.CLOSED) connect();
pollTruth();
}, 2000);

function setConn(up) {
  const c = $("#conn");
  c.textContent = up ? "live" : "reconnecting";
  c.className = "conn " + (up ? "up" : "down");
  document.body.dataset.connected = up ? "yes" : "no";
}

// ---- colours ----

// colour maps a delay to green (fast) .. red (slow) within [lo, hi], with
// opacity alpha.
function colour(ms, lo, hi, alpha = 1) {
  if (ms == null) return "#bbb";
  const t = hi > lo ? Math.min(1, Math.max(0, Math.log(ms / lo) / Math.log(hi / lo))) : 0;
  const stops = [[26, 152, 80], [253, 174, 97], [215, 48, 39]];
  const i = t < 0.5 ? 0 : 1, f = t < 0.5 ? t * 2 : (t - 0.5) * 2;
  const c = stops[i].map((v, k) => Math.round(v + (stops[i + 1][k] - v) * f));
  return `rgba(${c[0]},${c[1]},${c[2]},${alpha})`;
}

function range(m) {
  let lo = Infinity, hi = 0;
  for (const row of m.one_way_ms) for (const v of row) if (v != null && v > 0) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  return lo === Infinity ? [1, 2] : [Math.max(lo, 0.1), Math.max(hi, lo * 1.01)];
}

// ---- layout: classical multidimensional scaling of the delays ----

function layout(m) {
  const n = m.sites.length;
  const d = [];
  let max = 0;
  for (let i = 0; i < n; i++) {
    d.push([]);
    for (let j = 0; j < n; j++) {
      const a = m.one_way_ms[i][j], b = m.one_way_ms[j][i];
      const v = i === j ? 0 : a != null && b != null ? (a + b) / 2 : a != null ? a : b;
      d[i].push(v);
      if (v != null) max = Math.max(max, v);
    }
  }
  for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) if (d[i][j] == null) d[i][j] = max * 1.5 || 1;
  // B = -1/2 J D² J, then its two leading eigenvectors by power iteration.
  const sq = d.map((r) => r.map((v) => v * v));
  const rowMean = sq.map((r) => r.reduce((a, b) => a + b, 0) / n);
  const all = rowMean.reduce((a, b) => a + b, 0) / n;
  const B = sq.map((r, i) => r.map((v, j) => -0.5 * (v - rowMean[i] - rowMean[j] + all)));
  const vecs = [];
  for (let k = 0; k < 2; k++) {
    let v = B.map((_, i) => Math.sin(i + 1 + k));
    let lambda = 0;
    for (let it = 0; it < 100; it++) {
      let w = B.map((r) => r.reduce((a, x, j) => a + x * v[j], 0));
      for (const [u, l] of vecs) {
        const dot = u.reduce((a, x, j) => a + x * v[j], 0);
        w = w.map((x, j) => x - l * dot * u[j]);
      }
      const norm = Math.hypot(...w) || 1;
      lambda = norm;
      v = w.map((x) => x / norm);
    }
    vecs.push([v, lambda]);
  }
  const pts = m.sites.map((_, i) => vecs.map(([v, l]) => v[i] * Math.sqrt(Math.max(l, 0))));
  const xs = pts.map((p) => p[0]), ys = pts.map((p) => p[1]);
  const [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  const pos = {};
  m.sites.forEach((s, i) => {
    pos[s] = [50 + (500 * (pts[i][0] - x0)) / (x1 - x0 || 1), 40 + (380 * (pts[i][1] - y0)) / (y1 - y0 || 1)];
  });
  return pos;
}

// ---- drawing ----

function render(u) {
  state.last = u;
  $("#site").textContent = u.site;
  document.querySelectorAll(".self").forEach((e) => (e.textContent = u.site));
  $("#updated").textContent = "updated " + new Date(u.at).toLocaleTimeString();
  const key = u.matrix.sites.join(",");
  if (key !== state.sites) {
    state.sites = key;
    state.pos = layout(u.matrix);
  }
  drawMap(u);
  drawRoutes(u);
  drawCounters(u);
  drawMatrix(u);
  addChanges(u.changes);
  if (state.selected && Date.now() - state.detailAt > 5000) showDetail(...state.selected);
}

function fullPath(u, r) {
  return [u.site, ...r.path];
}

function drawMap(u) {
  const svg = $("#map");
  svg.replaceChildren();
  const m = u.matrix, [lo, hi] = range(m), pos = state.pos;
  const n = m.sites.length;
  for (let i = 0; i < n; i++)
    for (let j = i + 1; j < n; j++) {
      const a = m.one_way_ms[i][j], b = m.one_way_ms[j][i];
      if (a == null && b == null) continue;
      const [p, q] = [pos[m.sites[i]], pos[m.sites[j]]];
      const lossy = Math.max(m.loss_pct[i][j], m.loss_pct[j][i]) >= 1;
      svg.append(el("svg:line", { x1: p[0], y1: p[1], x2: q[0], y2: q[1], stroke: colour(Math.min(a ?? b, b ?? a), lo, hi),
        "stroke-width": 1.2, opacity: 0.45, "stroke-dasharray": lossy ? "4 3" : "" }));
    }
  // Direct paths first, so that the relayed ones show on top.
  for (const r of [...u.routes].sort((a, b) => a.relayed - b.relayed)) {
    const path = fullPath(u, r);
    for (let k = 0; k + 1 < path.length; k++) {
      const [p, q] = [pos[path[k]], pos[path[k + 1]]];
      if (!p || !q) continue;
      svg.append(el("svg:line", { x1: p[0], y1: p[1], x2: q[0], y2: q[1], stroke: r.relayed ? "#7b3294" : "#2166ac",
        "stroke-width": 3, opacity: 0.8, "data-route": r.dest }));
    }
  }
  const relays = new Set(u.routes.flatMap((r) => r.path.slice(0, -1)));
  for (const s of m.sites) {
    const [x, y] = pos[s];
    const self = s === u.site;
    svg.append(el("svg:circle", { cx: x, cy: y, r: self ? 9 : 6, fill: self ? "#234" : relays.has(s) ? "#7b3294" : "#fff",
      stroke: "#234", "stroke-width": 2 }));
    const right = x > 430; // labels of sites near the right edge go to their left
    svg.append(el("svg:text", { x: right ? x - 10 : x + 10, y: y - 8, "font-size": 12, "text-anchor": right ? "end" : "start" }, s));
  }
}

function drawRoutes(u) {
  const body = $("#routes tbody");
  body.replaceChildren();
  for (const r of [...u.routes].sort((a, b) => a.dest.localeCompare(b.dest))) {
    const path = fullPath(u, r);
    const tr = el("tr", { "data-dest": r.dest, "data-path": path.join(">"), class: r.relayed ? "relayed" : "direct" });
    tr.append(el("td", {}, r.dest), el("td", { class: "path" }, path.join(" › ") + (r.pinned ? " (pinned)" : "")),
      el("td", {}, r.latency_ms.toFixed(2)), el("td", {}, r.direct_ms ? r.direct_ms.toFixed(2) : "down"),
      el("td", {}, r.saving_ms > 0 ? r.saving_ms.toFixed(2) : ""));
    tr.onclick = () => select(u.site, r.dest);
    body.append(tr);
  }
}

const shownCounters = [["frames_in", "frames from the site"], ["frames_out", "frames to the site"], ["bytes_sent", "bytes sent"],
  ["bytes_received", "bytes received"], ["relayed", "packets relayed for others"], ["holds", "switch holds"]];
// The key router's totals, shown only at a gateway with kv pools.
const kvCounters = [["kv_requests", "kv requests routed"], ["kv_failed_over", "kv requests failed over"], ["kv_errors", "kv errors answered"],
  ["kv_reads_local", "kv reads from a local replica"], ["kv_reads_nearby", "kv reads from a nearby replica"],
  ["kv_reads_remote", "kv reads from a remote replica"], ["kv_hedges_sent", "kv reads hedged"]];

function drawCounters(u) {
  const dl = $("#counters");
  dl.replaceChildren();
  const c = u.counters || {};
  let drops = 0;
  for (const k in c) if (k.startsWith("drop_")) drops += c[k];
  const kv = kvCounters.filter(([k]) => k in c);
  for (const [k, label] of [...shownCounters, ...kv, ["", "drops"]]) {
    dl.append(el("dt", {}, label), el("dd", { "data-counter": k || "drops" }, (k ? c[k] || 0 : drops).toLocaleString()));
  }
}

function drawMatrix(u) {
  const m = u.matrix, [lo, hi] = range(m), t = $("#matrix");
  const key = m.sites.join(",");
  if (key !== state.matrixSites) {
    state.matrixSites = key;
    t.replaceChildren();
    const head = el("tr", {}, "");
    head.append(el("th", {}, "from \\ to"));
    for (const s of m.sites) head.append(el("th", {}, s));
    t.append(el("thead"), el("tbody"));
    t.tHead.append(head);
    m.sites.forEach((from, i) => {
      const tr = el("tr");
      tr.append(el("th", {}, from));
      m.sites.forEach((to, j) => {
        const td = el("td", { "data-from": from, "data-to": to });
        if (i !== j) td.onclick = () => select(from, to);
        tr.append(td);
      });
      t.tBodies[0].append(tr);
    });
  }
  const tivs = new Map(u.tivs.map((v) => [v.from + ">" + v.to, v]));
  m.sites.forEach((from, i) => {
    const row = t.tBodies[0].rows[i];
    m.sites.forEach((to, j) => {
      const td = row.cells[j + 1];
      if (i === j) { td.textContent = ""; return; }
      const v = m.one_way_ms[i][j], tiv = tivs.get(from + ">" + to);
      td.textContent = v == null ? "–" : v.toFixed(1);
      td.style.background = v == null ? "" : colour(v, lo, hi, 0.35);
      const truth = truthOf(from, to);
      const off = truth != null && v != null && Math.abs(v - truth) > Math.max(0.5, 0.05 * truth);
      td.className = (v == null ? "down " : "") + (tiv ? "tiv " : "") + (off ? "off " : "") +
        (state.selected && state.selected[0] === from && state.selected[1] === to ? "selected" : "");
      td.title = `${from} → ${to}: ${v == null ? "down" : v.toFixed(2) + " ms"}, loss ${m.loss_pct[i][j]} %` +
        (tiv ? `\ndetour via ${tiv.via.join(", ")}: ${tiv.best_ms.toFixed(2)} ms, ${tiv.saving_ms.toFixed(2)} ms saved` : "") +
        (truth != null ? `\nemulator: ${truth.toFixed(2)} ms` : "");
      td.dataset.truth = truth != null ? truth.toFixed(2) : "";
    });
  });
}

function addChanges(changes) {
  const ol = $("#timeline");
  for (const c of changes) {
    const li = el("li", { "data-seq": c.seq },
      `${new Date(c.at).toLocaleTimeString()} ${c.dest}: ${(c.from || []).join(">") || "none"} → ${(c.to || []).join(">") || "none"} (${c.reason})`);
    ol.prepend(li);
  }
  while (ol.children.length > 200) ol.lastChild.remove();
}

// ---- one pair ----

function select(from, to) {
  state.selected = [from, to];
  showDetail(from, to);
  if (state.last) drawMatrix(state.last);
}

async function getJSON(path) {
  const r = await fetch(path + auth);
  if (!r.ok) throw new Error((await r.json().catch(() => ({}))).error || r.statusText);
  return r.json();
}

async function showDetail(from, to) {
  state.detailAt = Date.now();
  const box = $("#detail-box");
  box.hidden = false;
  $("#detail-title").textContent = `${from} → ${to}`;
  const u = state.last;
  let path = "";
  if (u && from === u.site) {
    const r = u.routes.find((r) => r.dest === to);
    if (r) path = "path in use: " + fullPath(u, r).join(" › ");
  } else if (u) {
    const t = u.tivs.find((t) => t.from === from && t.to === to);
    path = t ? `a detour via ${t.via.join(", ")} saves ${t.saving_ms.toFixed(2)} ms` : "the direct path is the fastest";
  }
  const truth = truthOf(from, to);
  $("#detail-path").textContent = path + (truth != null ? ` · emulator's one-way delay now: ${truth.toFixed(2)} ms` : "");
  $("#detail-why").textContent = "";
  if (u && from === u.site) {
    getJSON("/v1/why/" + encodeURIComponent(to)).then((w) => {
      $("#detail-why").textContent = `why: ${w.reason}\n` + w.candidates.map((c) =>
        `${[from, ...c.path].join(" › ")}: ${c.latency_ms.toFixed(2)} ms${c.loss_cost_ms ? ` + ${c.loss_cost_ms.toFixed(2)} ms for loss` : ""}${c.note ? " (" + c.note + ")" : ""}`).join("\n");
    }).catch((e) => ($("#detail-why").textContent = "why: " + e.message));
  }
  // The history of each link of the path in use (this site's pairs), or of
  // the pair's own link.
  let links = [[from, to]];
  const r = u && from === u.site && u.routes.find((r) => r.dest === to);
  if (r) {
    const p = fullPath(u, r);
    links = p.slice(1).map((s, i) => [p[i], s]);
  }
  const charts = $("#charts");
  charts.replaceChildren();
  for (const [a, b] of links) {
    const svg = el("svg:svg", { viewBox: "0 0 600 190", role: "img", "aria-label": `${a} → ${b} over the last hour`, "data-link": a + ">" + b });
    charts.append(svg);
    getJSON(`/v1/history/${encodeURIComponent(a)}/${encodeURIComponent(b)}`)
      .then((h) => drawChart(svg, `${a} → ${b}`, h.samples))
      .catch((e) => svg.replaceChildren(el("svg:text", { x: 10, y: 20 }, `${a} → ${b}: no history: ${e.message}`)));
  }
}

function drawChart(svg, title, samples) {
  svg.replaceChildren(el("svg:text", { x: 300, y: 12, "font-size": 12, "text-anchor": "middle" }, title));
  const first = samples.findIndex((s) => s.up);
  if (first < 0) {
    svg.append(el("svg:text", { x: 10, y: 20 }, "the link has not been up in the last hour"));
    return;
  }
  samples = samples.slice(first);
  const t0 = Date.parse(samples[0].at), t1 = Date.parse(samples[samples.length - 1].at) + 1000;
  const up = samples.filter((s) => s.up).map((s) => s.one_way_ms);
  const hi = Math.max(1, ...up) * 1.1, lo = Math.min(hi / 1.1, ...up) * 0.9;
  const x = (t) => 40 + (550 * (t - t0)) / Math.max(t1 - t0, 1);
  const y = (v) => 150 - (125 * (v - lo)) / (hi - lo || 1);
  let d = "", pen = false;
  for (const s of samples) {
    const t = Date.parse(s.at);
    if (!s.up) { pen = false; continue; }
    d += (pen ? "L" : "M") + x(t).toFixed(1) + " " + y(s.one_way_ms).toFixed(1);
    pen = true;
    if (s.loss_pct > 0) svg.append(el("svg:rect", { x: x(t), y: 170 - Math.min(20, s.loss_pct * 2), width: Math.max(1, x(t + s.seconds * 1000) - x(t)),
      height: Math.min(20, s.loss_pct * 2), fill: "#d73027" }));
  }
  svg.append(el("svg:path", { d, fill: "none", stroke: "#2166ac", "stroke-width": 1.5 }));
  svg.append(el("svg:text", { x: 2, y: 20, "font-size": 11 }, hi.toFixed(1) + " ms"));
  svg.append(el("svg:text", { x: 2, y: 150, "font-size": 11 }, lo.toFixed(1) + " ms"));
  const span = (t1 - t0) / 1000;
  svg.append(el("svg:text", { x: 40, y: 180, "font-size": 11 }, `last ${span < 120 ? Math.round(span) + " s" : Math.round(span / 60) + " min"} · blue: one-way delay · red: loss`));
}

connect();
pollTruth();
