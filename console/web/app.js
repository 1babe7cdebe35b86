// The moerl console page: polls the coordinator's /api/v1/ once a second and redraws.
// The token comes from the URL fragment (#token=..., what `moerl up` prints) or the login
// form, and is kept in sessionStorage for this tab only. Every value is inserted as text
// (textContent), never as HTML.
"use strict";

const POLL_MS = 1000;
const PHASE_COLOURS = {
  generate: "#4e79a7", env: "#b07aa1", reward: "#59a14f", buffer: "#bab0ac", train: "#e15759",
  "weights publish": "#f28e2b", checkpoint: "#76b7b2", "weights fetch": "#edc948",
};
let token = "";
let isOperator = false;

function $(id) { return document.getElementById(id); }

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function svgEl(tag, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function fmt(x, digits) {
  if (typeof x !== "number" || !isFinite(x)) return "-";
  return digits === undefined ? String(x) : x.toFixed(digits);
}

async function api(path, options) {
  const o = options || {};
  o.headers = Object.assign({ Authorization: "Bearer " + token }, o.headers || {});
  const r = await fetch(path, o);
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) {
    const msg = body && body.error ? body.error.message : r.statusText;
    const err = new Error(r.status + ": " + msg);
    err.status = r.status;
    throw err;
  }
  return body;
}

function fillTable(tbody, rows) {
  tbody.replaceChildren();
  for (const row of rows) {
    const tr = el("tr");
    for (const cell of row) {
      if (cell instanceof Node) { const td = el("td"); td.appendChild(cell); tr.appendChild(td); }
      else tr.appendChild(el("td", cell));
    }
    tbody.appendChild(tr);
  }
}

// ---- overview ----------------------------------------------------------------------------

function drawLineChart(svg, series, yLines) {
  svg.replaceChildren();
  const w = +svg.getAttribute("width"), h = +svg.getAttribute("height"), pad = 30;
  const all = series.flatMap(s => s.points.map(p => p[1])).concat(yLines.map(l => l.y));
  if (!all.length) return;
  const xs = series.flatMap(s => s.points.map(p => p[0]));
  const x0 = Math.min(...xs, 0), x1 = Math.max(...xs, 1);
  const y0 = Math.min(0, ...all), y1 = Math.max(...all, 1e-9);
  const X = x => pad + (x - x0) / (x1 - x0 || 1) * (w - 2 * pad);
  const Y = y => h - pad + (y0 - y) / (y1 - y0 || 1) * (h - 2 * pad);
  svg.appendChild(svgEl("line", { x1: pad, y1: h - pad, x2: w - pad, y2: h - pad, stroke: "#aab" }));
  svg.appendChild(svgEl("text", { x: 2, y: Y(y1) + 4, "font-size": 10 }, fmt(y1, 2)));
  svg.appendChild(svgEl("text", { x: 2, y: Y(y0) + 4, "font-size": 10 }, fmt(y0, 2)));
  svg.appendChild(svgEl("text", { x: w - pad, y: h - 8, "font-size": 10, "text-anchor": "end" }, String(x1)));
  for (const l of yLines) {
    svg.appendChild(svgEl("line", { x1: pad, x2: w - pad, y1: Y(l.y), y2: Y(l.y), stroke: l.colour,
      "stroke-dasharray": "4 3" }));
    svg.appendChild(svgEl("text", { x: w - pad, y: Y(l.y) - 3, "font-size": 10, "text-anchor": "end",
      fill: l.colour }, l.label));
  }
  for (const s of series) {
    if (!s.points.length) continue;
    const d = s.points.map((p, i) => (i ? "L" : "M") + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1)).join(" ");
    svg.appendChild(svgEl("path", { d, fill: "none", stroke: s.colour, "stroke-width": 1.5 }));
  }
}

function drawOverview(snap, scale) {
  const st = snap.status, it = snap.iterations, list = it.iterations || [];
  const last = list.length ? list[list.length - 1] : {};
  $("job").textContent = (it.task ? "task " + it.task : "job") + (st.done ? " (done)" : "");
  $("iteration").textContent = st.iteration + " / " + st.iterations;
  $("reward").textContent = fmt(last.mean_reward, 3);
  $("samples-per-s").textContent = fmt(it.samples_per_s, 0);
  $("queue-depth").textContent = st.queue_depth;
  $("leases").textContent = st.leases;
  $("nodes-alive").textContent = st.nodes_alive;
  $("desired-rollout").textContent = scale ? scale.desired_replicas.rollout : "-";
  const lines = [];
  if (typeof it.reward_random === "number") lines.push({ y: it.reward_random, colour: "#c0392b", label: "random " + fmt(it.reward_random, 3) });
  if (typeof it.reward_max === "number") lines.push({ y: it.reward_max, colour: "#1f8a4c", label: "max " + fmt(it.reward_max, 2) });
  drawLineChart($("reward-curve"), [{ colour: "#4e79a7", points: list.filter(p => typeof p.mean_reward === "number").map(p => [p.iteration, p.mean_reward]) }], lines);

  const a = st.accounting || {};
  const dropped = Object.values(a.dropped || {}).reduce((x, y) => x + y, 0);
  const rows = [["dispatched", a.dispatched], ["committed", a.committed], ["in flight", a.in_flight],
    ["dropped", dropped], ["lost", a.lost], ["duplicated", a.duplicated], ["trained", a.trained]];
  fillTable($("accounting").tBodies[0], rows);
  rows.forEach(([k], i) => $("accounting").tBodies[0].rows[i].id = "accounting-" + k.replace(" ", "-"));
  const balanced = a.dispatched === a.committed + a.in_flight + dropped + a.lost;
  const ok = st.invariant_ok && a.lost === 0 && a.duplicated === 0 && balanced;
  const inv = $("invariant");
  inv.textContent = ok ? "invariant holds" : "INVARIANT BROKEN";
  inv.className = "badge " + (ok ? "ok" : "bad");
  $("invariant-equation").textContent = "dispatched " + a.dispatched + " = committed " + a.committed +
    " + in flight " + a.in_flight + " + dropped " + dropped + " + lost " + a.lost +
    (balanced ? " (balanced)" : " (does not balance)") + "; violations seen: " + st.invariant_violations;
  fillTable($("waste").tBodies[0], Object.entries(a.dropped || {}).map(([k, v]) => [k, v]));
}

// ---- nodes -------------------------------------------------------------------------------

async function act(body) {
  const out = $("action-result");
  try {
    const r = await api("/api/v1/actions", { method: "POST", body: JSON.stringify(body),
      headers: { "Content-Type": "application/json" } });
    out.textContent = r.action + " sent to " + r.node;
  } catch (e) {
    out.textContent = "refused: " + e.message;
  }
}

function nodeActions(n) {
  const span = el("span");
  if (n.state !== "running" && n.state !== "draining") return span;
  for (const kind of ["drain", "spot", "rebalance", "sigterm", "kill"]) {
    const b = el("button", kind, { "data-node": n.name, "data-action": kind });
    b.onclick = () => {
      if ((kind === "kill" || kind === "sigterm") && !confirm(kind + " " + n.name + "?")) return;
      act(kind === "drain" ? { action: "drain", node: n.name } : { action: "inject", kind, node: n.name });
    };
    span.appendChild(b);
  }
  return span;
}

// What a node's row says about it. A figure a node does not report is left out, not shown as
// "undefined": a trainer group's members other than its leader (rank 0) claim no batches
// (the leader claims them for the group), and a node that just joined has no stats yet.
function nodeDetail(n) {
  const s = n.stats || {}, parts = [];
  if (n.group) parts.push("group " + n.group + (typeof n.rank === "number" ? " rank " + n.rank : ""));
  if (n.role === "buffer" && typeof s.resident_samples === "number")
    parts.push("resident " + s.resident_samples + "/" + s.capacity_samples + " samples");
  if (n.role === "trainer") {
    if (typeof s.batches === "number") parts.push("batches " + s.batches + ", stall " + fmt(s.stall_s, 1) + " s");
    else if (n.group && n.rank > 0) parts.push("steps with its group's leader (rank 0), which claims the batches");
    else if (n.state === "running") parts.push("no batch yet");
  }
  if (n.role === "weights" && typeof s.version === "number") parts.push("serving v" + s.version);
  if (n.role === "reward" && typeof s.scored === "number") parts.push("scored " + s.scored);
  if (n.down_reason) parts.push(n.down_reason);
  return parts.join("; ");
}

// ---- groups ------------------------------------------------------------------------------

function drawGroups(groups) {
  fillTable($("groups-table").tBodies[0], (groups || []).map(g => {
    const re = g.reformed || [];
    const last = re.length ? re[re.length - 1] : null;
    return [g.name, g.role, (g.members || []).join(", "), g.incarnation, g.state,
      re.length ? re.length + " (last: " + last.cause + (typeof last.downtime_s === "number"
        ? ", down " + fmt(last.downtime_s, 1) + " s" : "") + ")" : "none"];
  }));
  [...$("groups-table").tBodies[0].rows].forEach((r, i) => r.dataset.group = groups[i].name);
}

// ---- autoscaling signal --------------------------------------------------------------------

const AUTOSCALE_ROWS = [  // [path in /api/v1/autoscale, label, digits, meaning]
  ["desired_replicas.rollout", "desired rollout replicas", 0, "what KEDA scales the rollout Deployment to"],
  ["desired_replicas.env", "desired env replicas", 0, "keeps the configured env:rollout ratio"],
  ["running.rollout", "rollouts running", 0, ""],
  ["running.env", "env nodes running", 0, ""],
  ["inputs.trainer_consumption_samples_per_s", "trainer consumption", 1, "samples/s the trainer takes when it never waits"],
  ["inputs.rollout_generation_samples_per_s", "generation per rollout", 1, "samples/s one rollout node makes"],
  ["inputs.interruptions_per_node_s", "interruption rate", 6, "interruptions per node-second"],
  ["inputs.replacement_s", "replacement time", 1, "s from a node's loss to its replacement working (-1: none yet)"],
  ["inputs.num_replacements", "replacements seen", 0, ""],
  ["inputs.queue_depth", "queue depth", 0, "units waiting: the upper bound with leases"],
  ["inputs.leases", "leases", 0, ""],
  ["terms.base", "base", 2, "consumption / generation"],
  ["terms.out_share", "out share", 3, "min(0.5, rate x replacement time): capacity out at any moment"],
  ["terms.headroom", "headroom", 3, "1 / (1 - out share)"],
  ["inputs.done", "job done", undefined, "0 replicas once done"],
];

function drawAutoscale(scale) {
  const at = (o, path) => path.split(".").reduce((x, k) => (x && typeof x === "object" ? x[k] : undefined), o);
  fillTable($("autoscale-table").tBodies[0], AUTOSCALE_ROWS.filter(([p]) => at(scale, p) !== undefined)
    .map(([p, label, digits, meaning]) => {
      const v = at(scale, p);
      return [label, typeof v === "number" ? fmt(v, digits) : String(v), meaning];
    }));
  [...$("autoscale-table").tBodies[0].rows].forEach(r => r.cells[1].className = "num");
  $("autoscale-formula").textContent = scale && scale.formula ? "formula: " + scale.formula : "";
}

function drawNodes(nodes) {
  const tbody = $("nodes-table").tBodies[0];
  tbody.replaceChildren();
  for (const n of nodes) {
    const tr = el("tr", null, { class: "state-" + n.state, "data-node": n.name });
    for (const v of [n.name, n.role, n.state, n.pid, n.restarts, n.leases, nodeDetail(n)]) tr.appendChild(el("td", v));
    const td = el("td", null, { class: "op" });
    td.appendChild(nodeActions(n));
    tr.appendChild(td);
    tbody.appendChild(tr);
  }
}

// ---- timeline (from the trace: one code path for the page and Perfetto) ----------------------

function drawTimeline(trace) {
  const svg = $("timeline-svg");
  svg.replaceChildren();
  const events = trace.traceEvents || [];
  const names = {};
  for (const e of events) if (e.ph === "M" && e.name === "thread_name") names[e.tid] = e.args.name;
  const xs = events.filter(e => e.ph === "X");
  if (!xs.length) return;
  const end = Math.max(...xs.map(e => e.ts + e.dur));
  // The last ~20 trainer iterations' worth of time.
  const its = [...new Set(xs.map(e => e.args.iteration))].sort((a, b) => a - b);
  const firstIt = its[Math.max(0, its.length - 20)];
  const start = Math.min(...xs.filter(e => e.args.iteration >= firstIt).map(e => e.ts));
  const tids = Object.keys(names).map(Number).sort((a, b) => a - b);
  const laneH = 18, left = 170, w = +svg.getAttribute("width");
  svg.setAttribute("height", String(tids.length * laneH + 24));
  const X = t => left + (t - start) / (end - start || 1) * (w - left - 10);
  tids.forEach((tid, i) => svg.appendChild(svgEl("text", { x: 4, y: i * laneH + 13, "font-size": 11 }, names[tid])));
  for (const e of xs) {
    if (e.ts + e.dur < start) continue;
    const i = tids.indexOf(e.tid);
    if (i < 0) continue;
    const r = svgEl("rect", { x: X(Math.max(e.ts, start)), y: i * laneH + 2, height: laneH - 4,
      width: Math.max(1, X(e.ts + e.dur) - X(Math.max(e.ts, start))), fill: PHASE_COLOURS[e.name] || "#999" });
    r.appendChild(svgEl("title", {}, e.name + " v" + e.args.iteration + ": " + (e.dur / 1000).toFixed(1) + " ms"));
    svg.appendChild(r);
  }
  for (const e of events.filter(e => e.ph === "i" && e.ts >= start)) {
    const i = Math.max(0, tids.indexOf(e.tid));
    svg.appendChild(svgEl("text", { x: X(e.ts), y: i * laneH + 14, fill: "#c0392b", "font-size": 14 }, "\u26a1"));
  }
  const secs = ((end - start) / 1e6).toFixed(1);
  svg.appendChild(svgEl("text", { x: w - 10, y: tids.length * laneH + 18, "font-size": 10, "text-anchor": "end" }, "last " + secs + " s"));
  const legend = $("timeline-legend");
  legend.replaceChildren();
  for (const [k, c] of Object.entries(PHASE_COLOURS)) {
    const s = el("span"); const i = el("i"); i.style.background = c; s.appendChild(i); s.appendChild(document.createTextNode(k)); legend.appendChild(s);
  }
}

function drawStaleness(list) {
  const svg = $("staleness-svg");
  svg.replaceChildren();
  const pts = list.filter(p => typeof p.staleness === "number").slice(-60);
  if (!pts.length) return;
  const w = +svg.getAttribute("width"), h = +svg.getAttribute("height"), pad = 24;
  const top = Math.max(1, ...pts.map(p => p.staleness));
  const bw = (w - 2 * pad) / pts.length;
  pts.forEach((p, i) => {
    const bh = p.staleness / top * (h - 2 * pad);
    const r = svgEl("rect", { x: pad + i * bw, y: h - pad - bh, width: Math.max(1, bw - 1), height: bh, fill: "#f28e2b" });
    r.appendChild(svgEl("title", {}, "v" + p.iteration + ": " + fmt(p.staleness, 2)));
    svg.appendChild(r);
  });
  svg.appendChild(svgEl("text", { x: 2, y: pad, "font-size": 10 }, fmt(top, 1)));
  svg.appendChild(svgEl("text", { x: pad, y: h - 6, "font-size": 10 }, "v" + pts[0].iteration));
  svg.appendChild(svgEl("text", { x: w - pad, y: h - 6, "font-size": 10, "text-anchor": "end" }, "v" + pts[pts.length - 1].iteration));
}

function time(ms) { return typeof ms === "number" ? new Date(ms).toLocaleTimeString() : "-"; }

function drawInterruptions(list) {
  fillTable($("interruptions-table").tBodies[0], list.slice().reverse().map(r => [
    r.node, r.source, time(r.at), time(r.deadline), r.units_finished ?? "-", r.units_returned ?? "-",
    Object.entries(r).filter(([k]) => !["node", "source", "at", "deadline", "units_finished", "units_returned"].includes(k))
      .map(([k, v]) => k + "=" + (typeof v === "object" ? JSON.stringify(v) : v)).join(" ")]));
}

function drawLedger(l) {
  fillTable($("ledger-states").tBodies[0], Object.entries(l.by_state).map(([k, v]) => [k, v]).concat([["trained (all groups)", l.num_trained_units]]));
  fillTable($("ledger-attempts").tBodies[0], Object.entries(l.by_attempts).map(([k, v]) => [k, v]));
  fillTable($("ledger-shards").tBodies[0], Object.entries(l.by_shard).map(([k, v]) => [k, "pending " + v.pending + ", leased " + v.leased + ", committed " + v.committed]));
  fillTable($("ledger-units").tBodies[0], l.recent_units.slice(-15).reverse().map(u => [u.unit, u.state, u.attempt, u.shard, u.worker,
    u.committed_groups + "/" + u.trained_groups + "/" + u.groups]));
}

// ---- polling -----------------------------------------------------------------------------

async function poll() {
  const live = $("live");
  try {
    const d = await api("/api/v1/dashboard");
    const snap = d.snapshot, scale = d.autoscale, trace = d.trace;
    drawOverview(snap, scale);
    drawNodes(snap.nodes);
    drawTimeline(trace);
    drawStaleness(snap.iterations.iterations || []);
    drawInterruptions(snap.interruptions);
    drawLedger(snap.ledger);
    drawGroups(snap.groups);
    drawAutoscale(scale);
    live.textContent = "live " + new Date().toLocaleTimeString();
    live.className = "badge ok";
    live.dataset.polls = String(+(live.dataset.polls || 0) + 1);
  } catch (e) {
    live.textContent = "no answer: " + e.message;
    live.className = "badge bad";
    if (e.status === 401) return showLogin("the token was refused");
  }
  setTimeout(poll, POLL_MS);
}

async function open(t) {
  token = t;
  try {
    const who = await api("/api/v1/whoami");
    isOperator = who.role === "operator";
  } catch (e) {
    return showLogin(e.status === 401 ? "the token was refused" : e.message);
  }
  sessionStorage.setItem("moerl-token", token);
  document.body.classList.toggle("operator", isOperator);
  $("role").textContent = isOperator ? "operator" : "viewer";
  $("login").hidden = true;
  $("main").hidden = false;
  try {
    const planes = await api("/api/v1/planes");
    // Each plane's transport first, then its details.
    fillTable($("planes").tBodies[0], Object.entries(planes).map(([k, v]) => [k, Object.entries(v)
      .sort(([a], [b]) => (b === "transport") - (a === "transport")).map(([a, b]) => a + ": " + b).join(", ")]));
  } catch (e) { /* the table stays empty */ }
  $("trace-link").onclick = async ev => {
    ev.preventDefault();
    const blob = new Blob([JSON.stringify(await api("/api/v1/trace"))], { type: "application/json" });
    const a = el("a", null, { href: URL.createObjectURL(blob), download: "moerl-trace.json" });
    a.click();
  };
  poll();
}

function showLogin(why) {
  $("main").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = why || "";
}

$("login").onsubmit = ev => { ev.preventDefault(); open($("token-input").value.trim()); };

(function start() {
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (m) {
    history.replaceState(null, "", location.pathname);  // not left in the address bar
    return open(decodeURIComponent(m[1]));
  }
  const saved = sessionStorage.getItem("moerl-token");
  if (saved) return open(saved);
  showLogin("");
})();
