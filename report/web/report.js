// Draws the run report from the report.json(s) inlined in #moerl-runs (report/report_html.cpp
// puts them there): inline SVG, no network. Every value goes in as text (textContent), never
// as HTML. One run fills one column; two or more sit side by side under a comparison.
"use strict";

const PHASES = [  // report.json's per-iteration timings, in the order a step runs them
  ["t_generate", "generate", "#4e79a7"], ["t_env", "env", "#b07aa1"], ["t_reward", "reward", "#59a14f"],
  ["t_buffer", "buffer", "#bab0ac"], ["t_train", "train", "#e15759"],
  ["t_weights", "weights publish", "#f28e2b"], ["t_checkpoint", "checkpoint", "#76b7b2"],
];
// The 10-iteration mean's colour is used nowhere else, so a screenshot's pixels of it are the
// reward curve (the report test counts them).
const REWARD_MEAN_COLOUR = "#1b4f8a";
const RUN_COLOURS = ["#4e79a7", "#e15759", "#59a14f", "#b07aa1"];
const W = 640, PAD_L = 44, PAD_R = 12, PAD_T = 12, PAD_B = 26;
const SVG_NS = "http://www.w3.org/2000/svg";

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function num(x) { return typeof x === "number" && isFinite(x); }
function fmt(x, digits) { return num(x) ? (digits === undefined ? String(x) : x.toFixed(digits)) : "-"; }
function secs(s) {
  if (!num(s)) return "-";
  if (s < 120) return s.toFixed(1) + " s";
  return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
}
// Sub-second durations in ms (a version's publish and redistribution times).
function dur(s) { return num(s) && s < 1 ? Math.round(s * 1000) + " ms" : secs(s); }
function bytes(b) {
  if (!num(b)) return "-";
  const u = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : String(b)) + " " + u[i];
}

function fillTable(table, rows, empty) {
  const tbody = table.tBodies[0];
  tbody.replaceChildren();
  if (!rows.length) {
    const cols = table.tHead ? table.tHead.rows[0].cells.length : 2;
    tbody.appendChild(el("tr")).appendChild(el("td", empty || "none", { colspan: cols, class: "empty" }));
    return;
  }
  for (const row of rows) {
    const tr = tbody.appendChild(el("tr"));
    for (const cell of row) tr.appendChild(el("td", cell));
  }
}

// The mean of the last `n` values up to each index.
// At most `n` of `items`, evenly spaced, the first and the last always in (a run of 800
// versions is a table of 24 rows; report.json keeps every one).
function sample(items, n) {
  if (items.length <= n) return items;
  const out = [];
  for (let i = 0; i < n; ++i) out.push(items[Math.round(i * (items.length - 1) / (n - 1))]);
  return out;
}

// "cache 75% / peer 25%": the shares of a version's bytes the rollout nodes read from each
// source, the sources they did not use left out.
function sourceMix(from) {
  const keys = ["cache", "peer", "store"], total = keys.reduce((t, k) => t + (num(from[k]) ? from[k] : 0), 0);
  if (!total) return "-";
  return keys.filter(k => num(from[k]) && from[k] > 0).map(k => k + " " + Math.round(100 * from[k] / total) + "%").join(" / ");
}

const VERSION_ROWS = 24;

function fillVersions(table, note, w) {
  const all = w.versions || [], shown = sample(all, VERSION_ROWS);
  fillTable(table, shown.map(v => [fmt(v.version), fmt(v.num_shards), fmt(v.checkpoint_shards), bytes(v.bytes), bytes(v.coordinator_bytes),
    dur(v.t_publish), dur(v.t_redistribute_p50), dur(v.t_redistribute_max), fmt(v.num_readers),
    sourceMix(v.bytes_from || {}), bytes(v.shard_bytes_max)]), "no policy versions published");
  note.textContent = shown.length < all.length ? shown.length + " of " + all.length +
    " versions shown, evenly spaced (every version is in report.json)" : "";
}

function runningMean(values, n) {
  let sum = 0;
  return values.map((v, i) => {
    sum += v;
    if (i >= n) sum -= values[i - n];
    return sum / Math.min(i + 1, n);
  });
}

// ---- what a run's report says --------------------------------------------------------------

function figures(run) {
  const r = run.report, curve = (r.reward_curve || []).filter(p => num(p.mean_reward));
  const mean10 = runningMean(curve.map(p => p.mean_reward), 10);
  const max = num(r.reward_max) ? r.reward_max : null;
  const at90 = max === null ? -1 : mean10.findIndex(m => m >= 0.9 * max);
  const its = r.iterations || [];
  const a = r.accounting || {};
  const dropped = Object.values(a.dropped || {}).reduce((x, y) => x + y, 0);
  // Samples/s between the first and last iteration end the timings hold (they may be a tail
  // of the run, and the curve may miss iterations: matched by number).
  const trainS = its.length > 1 ? (its[its.length - 1].end_unix_ms - its[0].end_unix_ms) / 1000 : null;
  const samples = its.length > 1 ? curve.filter(p => p.iteration > its[0].iteration &&
    p.iteration <= its[its.length - 1].iteration).reduce((s, p) => s + (p.samples || 0), 0) : 0;
  return {
    id: r.run_id || run.source,
    outcome: r.failure ? "failed" : r.done ? "done" : "not done",
    task: r.task || "-",
    iterations: curve.length ? curve[curve.length - 1].iteration : r.policy_version,
    wall_s: r.wall_s,
    reward: mean10.length ? mean10[mean10.length - 1] : null,
    reward_random: r.reward_random, reward_max: max,
    at90: at90 >= 0 ? curve[at90].iteration : null,
    samples_per_s: trainS ? samples / trainS : null,
    lost: a.lost, duplicated: a.duplicated, dropped,
    invariant_ok: a.invariant_ok === true && a.lost === 0 && a.duplicated === 0,
    interruptions: (r.interruptions || []).length,
    replacements: (r.replacements || []).length,
    curve, mean10,
  };
}

// The iteration that was running at unix time `ms` (the first to end after it), for markers.
function iterationAt(its, ms) {
  if (!num(ms) || !its.length) return null;
  const after = its.find(it => it.end_unix_ms >= ms);
  return after ? after.iteration : its[its.length - 1].iteration;
}

// ---- plots -----------------------------------------------------------------------------------

// Scales for a plot of height h over [x0, x1] x [y0, y1], with its axes drawn; the x axis is
// labelled with the first and last iteration shown (xFirst, xLast).
function axes(svg, h, x0, x1, y0, y1, yLabel, xFirst, xLast) {
  const X = x => PAD_L + (x - x0) / (x1 - x0 || 1) * (W - PAD_L - PAD_R);
  const Y = y => h - PAD_B - (y - y0) / (y1 - y0 || 1) * (h - PAD_T - PAD_B);
  svg.appendChild(svgEl("line", { x1: PAD_L, y1: h - PAD_B, x2: W - PAD_R, y2: h - PAD_B, stroke: "#aab" }));
  svg.appendChild(svgEl("line", { x1: PAD_L, y1: PAD_T, x2: PAD_L, y2: h - PAD_B, stroke: "#aab" }));
  for (const y of [y0, (y0 + y1) / 2, y1])
    svg.appendChild(svgEl("text", { x: PAD_L - 4, y: Y(y) + 4, "font-size": 10, "text-anchor": "end" }, yLabel(y)));
  svg.appendChild(svgEl("text", { x: PAD_L, y: h - 8, "font-size": 10 }, "iteration " + xFirst));
  svg.appendChild(svgEl("text", { x: W - PAD_R, y: h - 8, "font-size": 10, "text-anchor": "end" }, String(xLast)));
  return { X, Y };
}

// A polyline through `points` ([x, y] pairs); data-points says how many it has.
function path(svg, points, X, Y, attrs) {
  if (!points.length) return;
  const d = points.map((p, i) => (i ? "L" : "M") + X(p[0]).toFixed(1) + " " + Y(p[1]).toFixed(1)).join(" ");
  svg.appendChild(svgEl("path", Object.assign({ d, fill: "none", "data-points": points.length }, attrs)));
}

function hline(svg, X0, X1, y, colour, label) {
  svg.appendChild(svgEl("line", { x1: X0, x2: X1, y1: y, y2: y, stroke: colour, "stroke-dasharray": "4 3" }));
  svg.appendChild(svgEl("text", { x: X1 - 2, y: y - 3, "font-size": 10, "text-anchor": "end", fill: colour }, label));
}

function marker(svg, x, h, colour, title) {
  const l = svgEl("line", { x1: x, x2: x, y1: PAD_T, y2: h - PAD_B, stroke: colour, "stroke-width": 1.5, class: "marker" });
  l.appendChild(svgEl("title", {}, title));
  svg.appendChild(l);
}

function drawReward(svg, run, f) {
  const r = run.report, h = 240, its = r.iterations || [];
  svg.replaceChildren();
  if (!f.curve.length) return svg.appendChild(svgEl("text", { x: W / 2, y: h / 2, "text-anchor": "middle" }, "no iterations in this report"));
  const ys = f.curve.map(p => p.mean_reward).concat([f.reward_random, f.reward_max].filter(num));
  const x0 = f.curve[0].iteration, x1 = Math.max(f.curve[f.curve.length - 1].iteration, x0 + 1);
  const { X, Y } = axes(svg, h, x0, x1, Math.min(0, ...ys), Math.max(...ys), y => fmt(y, 2), x0, x1);
  if (num(f.reward_random)) hline(svg, PAD_L, W - PAD_R, Y(f.reward_random), "#c0392b", "random " + fmt(f.reward_random, 3));
  if (num(f.reward_max)) hline(svg, PAD_L, W - PAD_R, Y(f.reward_max), "#1f8a4c", "max " + fmt(f.reward_max, 2));
  for (const i of r.interruptions || []) {
    const at = iterationAt(its, i.at);
    if (at !== null) marker(svg, X(at), h, "#c0392b", i.source + " notice to " + i.node + " (iteration " + at + ")");
  }
  for (const p of r.replacements || []) {
    const at = iterationAt(its, p.started_unix_ms);
    if (at !== null) marker(svg, X(at), h, "#f28e2b", p.node + " replaced by " + p.replacement + " (iteration " + at + ")");
  }
  path(svg, f.curve.map(p => [p.iteration, p.mean_reward]), X, Y, { stroke: "#9db4cf", "stroke-width": 1, class: "reward-raw" });
  path(svg, f.curve.map((p, i) => [p.iteration, f.mean10[i]]), X, Y, { stroke: REWARD_MEAN_COLOUR, "stroke-width": 2.5, class: "reward-mean" });
}

function drawTimeline(svg, legend, run) {
  const its = (run.report.iterations || []).filter(it => num(it.iteration)), h = 240;
  svg.replaceChildren();
  legend.replaceChildren();
  if (!its.length) return svg.appendChild(svgEl("text", { x: W / 2, y: h / 2, "text-anchor": "middle" }, "no per-iteration timings in this report"));
  const wall = its.map((it, i) => i && num(it.end_unix_ms) && num(its[i - 1].end_unix_ms)
    ? (it.end_unix_ms - its[i - 1].end_unix_ms) / 1000 : null);
  const stacked = its.map(it => PHASES.reduce((s, [k]) => s + (num(it[k]) ? it[k] : 0), 0));
  // The scale ignores the top 2% of iterations (a recovery can take 100 times a normal
  // one); a bar or point over it is clipped at the top.
  const sorted = stacked.concat(wall.filter(num)).sort((a, b) => a - b);
  const top = Math.max(sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.98))], 1e-3);
  const x0 = its[0].iteration - 0.5, x1 = its[its.length - 1].iteration + 0.5;
  const { X, Y } = axes(svg, h, x0, x1, 0, top, y => secs(y), its[0].iteration, its[its.length - 1].iteration);
  const bw = Math.max(0.5, (W - PAD_L - PAD_R) / its.length - 0.5);
  its.forEach((it, i) => {
    let base = 0;
    for (const [k, name, colour] of PHASES) {
      if (!num(it[k]) || it[k] <= 0) continue;
      const y0 = Math.min(base, top), y1 = Math.min(base + it[k], top);
      base += it[k];
      if (y1 <= y0) continue;
      const rect = svgEl("rect", { x: X(it.iteration) - bw / 2, width: bw, y: Y(y1), height: Y(y0) - Y(y1), fill: colour, class: "phase" });
      rect.appendChild(svgEl("title", {}, "iteration " + it.iteration + ": " + name + " " + secs(it[k])));
      svg.appendChild(rect);
    }
  });
  path(svg, its.map((it, i) => [it.iteration, wall[i]]).filter(p => num(p[1])).map(p => [p[0], Math.min(p[1], top)]),
    X, Y, { stroke: "#1d232a", "stroke-width": 1, class: "wall" });
  for (const [, name, colour] of PHASES) {
    const s = legend.appendChild(el("span"));
    s.appendChild(el("i")).style.background = colour;
    s.appendChild(document.createTextNode(name));
  }
}

function drawStaleness(svg, f) {
  const h = 140;
  svg.replaceChildren();
  const pts = f.curve.filter(p => num(p.staleness));
  if (!pts.length) return svg.appendChild(svgEl("text", { x: W / 2, y: h / 2, "text-anchor": "middle" }, "no staleness in this report"));
  const x0 = pts[0].iteration - 0.5, x1 = pts[pts.length - 1].iteration + 0.5;
  const top = Math.max(1, ...pts.map(p => p.staleness));
  const { X, Y } = axes(svg, h, x0, x1, 0, top, y => fmt(y, 1), pts[0].iteration, pts[pts.length - 1].iteration);
  const bw = Math.max(0.5, (W - PAD_L - PAD_R) / pts.length - 0.5);
  for (const p of pts) {
    if (p.staleness <= 0) continue;
    const r = svgEl("rect", { x: X(p.iteration) - bw / 2, width: bw, y: Y(p.staleness), height: Y(0) - Y(p.staleness), fill: "#f28e2b", class: "staleness-bar" });
    r.appendChild(svgEl("title", {}, "iteration " + p.iteration + ": " + fmt(p.staleness, 2)));
    svg.appendChild(r);
  }
}

// ---- tables ----------------------------------------------------------------------------------

function clock(ms, t0) { return num(ms) ? "+" + secs((ms - t0) / 1000) : "-"; }

function drawRun(node, run, index, count) {
  const r = run.report, f = figures(run), q = s => node.querySelector(s);
  const its = r.iterations || [];
  // Times on the page are relative to the first iteration's end (a report has no job start).
  const t0 = its.length && num(its[0].end_unix_ms) ? its[0].end_unix_ms : 0;
  node.dataset.run = String(index);
  q(".run-title").textContent = (count > 1 ? "run " + (index + 1) + ": " : "") + f.id;
  if (count > 1) q(".run-title").style.color = RUN_COLOURS[index % RUN_COLOURS.length];
  q(".source").textContent = run.source;
  // A failed run says why first (the cause its node reported, else the job's failure).
  const why = [r.failed_node && r.failure_cause ? r.failed_node + " gave up: " + r.failure_cause : "",
    r.failure || "", r.error || ""].filter(Boolean);
  if (why.length) {
    q(".failure").hidden = false;
    q(".failure").textContent = "FAILED: " + why.join("; ");
  }
  const cards = [["outcome", f.outcome], ["task", f.task], ["iterations", f.iterations],
    ["wall time", secs(f.wall_s)], ["reward (last 10)", fmt(f.reward, 3)],
    ["90% of max at", f.at90 === null ? "not reached" : "iteration " + f.at90],
    ["samples/s", fmt(f.samples_per_s, 0)], ["lost / dup", fmt(f.lost) + " / " + fmt(f.duplicated)],
    ["interruptions", f.interruptions], ["replacements", f.replacements]];
  for (const [k, v] of cards) {
    const c = q(".cards").appendChild(el("div", null, { class: "card" }));
    c.appendChild(el("div", k, { class: "k" }));
    c.appendChild(el("div", v, { class: "v" }));
  }
  drawReward(q("svg.reward"), run, f);
  drawTimeline(q("svg.timeline"), q(".timeline-legend"), run);
  drawStaleness(q("svg.staleness"), f);
  fillTable(q("table.interruptions"), (r.interruptions || []).map(i => [i.node, i.source, clock(i.at, t0),
    clock(i.deadline, t0), fmt(i.units_finished), fmt(i.units_returned), num(i.drain_ms) ? secs(i.drain_ms / 1000) : "-"]),
    "no interruptions");
  fillTable(q("table.replacements"), (r.replacements || []).map(p => [p.node, p.replacement, p.role,
    p.cause + (p.error ? " (failed: " + p.error + ")" : ""), clock(p.started_unix_ms, t0),
    secs(p.delay_ms / 1000), secs(p.time_to_productive_s)]), "no replacements");
  const a = r.accounting || {};
  const rows = [["dispatched", a.dispatched], ["committed", a.committed], ["in flight", a.in_flight],
    ["trained", a.trained], ["lost", a.lost], ["duplicated", a.duplicated]];
  for (const [reason, n] of Object.entries(a.dropped || {})) rows.push(["dropped: " + reason, n]);
  fillTable(q("table.accounting"), rows.map(([k, v]) => [k, fmt(v)]));
  const inv = q(".invariant");
  inv.textContent = f.invariant_ok ? "invariant holds" : "INVARIANT BROKEN";
  inv.className = "badge invariant " + (f.invariant_ok ? "ok" : "bad");
  q(".equation").textContent = "dispatched " + fmt(a.dispatched) + " = committed " + fmt(a.committed) +
    " + in flight " + fmt(a.in_flight) + " + dropped " + f.dropped + " + lost " + fmt(a.lost) +
    (a.invariant_error ? "; " + a.invariant_error : "");
  fillTable(q("table.groups"), (r.groups || []).map(g => [g.name, g.role, (g.members || []).join(", "),
    fmt(g.incarnation), g.state, (g.reformed || []).length ? (g.reformed || []).map(x =>
      x.cause + (num(x.downtime_s) ? " (down " + secs(x.downtime_s) + ")" : "")).join("; ") : "none"]), "no groups");
  const w = r.weights || {}, from = w.bytes_from || {};
  fillTable(q("table.weights"), [["versions published", (w.versions || []).length],
    ["bytes from the cache", bytes(from.cache)], ["bytes from peers", bytes(from.peer)],
    ["bytes from the object store", bytes(from.store)], ["bytes over shared memory", bytes(w.bytes_via_shm)],
    ["durable version", fmt(w.durable_version)]].map(([k, v]) => [k, v === undefined ? "-" : v]));
  fillVersions(q("table.versions"), q(".versions-note"), w);
  const p = r.provenance || {};
  fillTable(q("table.provenance"), [["version", p.version], ["commit", p.commit], ["compiler", p.compiler],
    ["build type", p.build_type], ["host", p.host ? p.host.hostname + ", " + p.host.cpus + " CPUs" : undefined],
    ["gpu", p.gpu], ["blas", p.blas]].filter(([, v]) => v !== undefined).map(([k, v]) => [k, String(v)]));
}

function drawCompare(runs, fs) {
  $("compare").hidden = false;
  const svg = $("compare-reward"), h = 240;
  const all = fs.flatMap(f => f.curve);
  const ys = fs.flatMap(f => f.mean10.concat([f.reward_random, f.reward_max].filter(num)));
  if (all.length) {
    const x1 = Math.max(...all.map(p => p.iteration));
    const { X, Y } = axes(svg, h, 0, Math.max(x1, 1), Math.min(0, ...ys), Math.max(...ys), y => fmt(y, 2), 0, x1);
    const max = fs.map(f => f.reward_max).find(num), rnd = fs.map(f => f.reward_random).find(num);
    if (num(rnd)) hline(svg, PAD_L, W - PAD_R, Y(rnd), "#c0392b", "random " + fmt(rnd, 3));
    if (num(max)) hline(svg, PAD_L, W - PAD_R, Y(max), "#1f8a4c", "max " + fmt(max, 2));
    fs.forEach((f, i) => path(svg, f.curve.map((p, j) => [p.iteration, f.mean10[j]]), X, Y,
      { stroke: RUN_COLOURS[i % RUN_COLOURS.length], "stroke-width": 2, class: "compare-mean" }));
  }
  const legend = $("compare-legend");
  fs.forEach((f, i) => {
    const s = legend.appendChild(el("span"));
    s.appendChild(el("i")).style.background = RUN_COLOURS[i % RUN_COLOURS.length];
    s.appendChild(document.createTextNode("run " + (i + 1) + ": " + f.id));
  });
  const table = $("compare-table");
  const head = table.createTHead().insertRow();
  head.appendChild(el("th", ""));
  fs.forEach((f, i) => head.appendChild(el("th", "run " + (i + 1))));
  const rows = [["run", f => f.id], ["outcome", f => f.outcome], ["iterations", f => fmt(f.iterations)],
    ["wall time", f => secs(f.wall_s)], ["reward (last 10)", f => fmt(f.reward, 3)],
    ["90% of max at", f => f.at90 === null ? "not reached" : "iteration " + f.at90],
    ["samples/s", f => fmt(f.samples_per_s, 0)], ["lost / dup", f => fmt(f.lost) + " / " + fmt(f.duplicated)],
    ["interruptions", f => f.interruptions], ["replacements", f => f.replacements]];
  fillTable(table, rows.map(([k, get]) => [k].concat(fs.map(get))));
}

function $(id) { return document.getElementById(id); }

(function main() {
  let runs;
  try {
    runs = JSON.parse($("moerl-runs").textContent);
    if (!Array.isArray(runs) || !runs.length) throw new Error("no runs in #moerl-runs");
  } catch (e) {
    $("error").hidden = false;
    $("error").textContent = "this report's data cannot be read: " + e.message;
    return;
  }
  const fs = runs.map(figures);
  $("title").textContent = fs.map(f => f.id).join(" vs ");
  document.title = "moerl run report: " + fs.map(f => f.id).join(" vs ");
  const main = $("runs");
  main.style.setProperty("--runs", String(runs.length));
  runs.forEach((run, i) => {
    const node = $("run-template").content.firstElementChild.cloneNode(true);
    main.appendChild(node);
    drawRun(node, run, i, runs.length);
  });
  if (runs.length > 1) drawCompare(runs, fs);
  document.body.dataset.drawn = String(runs.length);  // for tests: the page finished drawing
})();
