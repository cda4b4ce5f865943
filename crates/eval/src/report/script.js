"use strict";
// Everything below comes from the JSON block and reaches the page through textContent
// or attributes set one by one: no text of a task's is ever parsed as markup.
const data = JSON.parse(document.getElementById("data").textContent);
// The SVG namespace, from a chart the markup already holds (the page names no URL).
const SVG = document.getElementById("chart-status").namespaceURI;
// Columns marked "wide" make way for the panel while it is open.
const columns = [
  ["id", "task"], ["attempt", "attempt"], ["status", "status"], ["reward", "reward"],
  ["steps", "steps", "wide"], ["tokens_in", "tokens in", "wide"], ["tokens_cached", "cached", "wide"],
  ["tokens_out", "tokens out", "wide"], ["cost_usd", "cost $"], ["build_s", "build s", "wide"],
  ["agent_s", "agent s", "wide"], ["verify_s", "verify s", "wide"], ["total_s", "total s"], ["error", "why"],
];
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
function svg(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}
function bytes(n) {
  if (n === null || n === undefined) return "";
  if (n < 1024) return n + " B";
  if (n < 1048576) return (n / 1024).toFixed(1) + " KiB";
  return (n / 1048576).toFixed(1) + " MiB";
}
function date(s) {
  return s ? new Date(s * 1000).toISOString().replace("T", " ").slice(0, 16) + " UTC" : "unknown";
}
function key(r) { return encodeURIComponent(r.id) + "/" + r.attempt; }

// The run's facts.
const s = data.summary;
const runs = data.runs || [];
const first = runs.length ? runs[0].started_unix_s : data.started_unix_s;
const dl = el("dl");
const facts = [["run date", date(first)]];
if (runs.length > 1) facts.push(["resumed", runs.length - 1 + " times, last " + date(runs[runs.length - 1].started_unix_s)]);
const versions = data.runner_versions.length ? data.runner_versions
  : runs.map((r) => r.runner_version).filter((v, i, a) => a.indexOf(v) === i);
facts.push(["runner", versions.length ? versions.join(", ") : "unknown (report by " + s.runner_version + ")"]);
facts.push(["model", s.model], ["task set", s.task_set_hash], ["tasks", s.tasks], ["attempts", s.attempts],
  ["resolved rate", (s.resolved_rate * 100).toFixed(1) + "%"]);
for (const [k, v] of Object.entries(s.pass_at || {})) facts.push(["pass@" + k, (v * 100).toFixed(1) + "%"]);
facts.push(["tokens", s.usage.input + " in, " + s.usage.output + " out, " + s.usage.cache_read + " cached"]);
if (s.cost_usd !== undefined && s.cost_usd !== null) facts.push(["cost", "$" + s.cost_usd.toFixed(4)]);
facts.push(["time", "build " + (s.build_ms / 1000).toFixed(1) + " s, agent " + (s.agent_ms / 1000).toFixed(1) + " s, verify " + (s.verify_ms / 1000).toFixed(1) + " s, total " + (s.total_ms / 1000).toFixed(1) + " s"]);
for (const [k, v] of facts) { dl.appendChild(el("dt", k)); dl.appendChild(el("dd", v)); }
document.getElementById("summary").appendChild(dl);
const settings = document.getElementById("settings-list");
const latest = runs.length ? runs[runs.length - 1].settings : null;
if (latest) {
  for (const [k, v] of Object.entries(latest)) {
    settings.appendChild(el("dt", k));
    settings.appendChild(el("dd", typeof v === "string" ? v : JSON.stringify(v)));
  }
} else {
  settings.appendChild(el("dd", "not recorded: the run predates run.json's settings"));
}

// Two charts: attempts per status, and each attempt's time (or cost, when every attempt has one).
function statusChart() {
  const chart = document.getElementById("chart-status");
  const counts = s.counts, most = Math.max(1, ...Object.values(counts));
  const width = 260, line = 18;
  chart.setAttribute("width", width);
  chart.setAttribute("height", data.statuses.length * line + 4);
  data.statuses.forEach((st, i) => {
    const n = counts[st] || 0, w = Math.round((n / most) * (width - 130));
    const bar = svg("rect", { x: 80, y: i * line + 3, width: Math.max(w, n ? 1 : 0), height: line - 6, class: "bar " + st, "data-status": st });
    bar.appendChild(svg("title", {}, st + ": " + n));
    bar.addEventListener("click", () => { filter.value = st; apply(); });
    chart.appendChild(svg("text", { x: 0, y: i * line + 14 }, st));
    chart.appendChild(bar);
    chart.appendChild(svg("text", { x: 84 + w, y: i * line + 14, class: "count" }, n));
  });
}
function timeChart() {
  const chart = document.getElementById("chart-time");
  const byCost = data.rows.length > 0 && data.rows.every((r) => r.cost_usd !== null && r.cost_usd !== undefined);
  const value = (r) => (byCost ? r.cost_usd : r.total_s) || 0;
  document.getElementById("chart-time-title").textContent = byCost ? "Cost per attempt ($)" : "Time per attempt (s)";
  const most = Math.max(0, ...data.rows.map(value)) || 1;
  const height = 90, width = Math.max(120, Math.min(600, data.rows.length * 6));
  const step = width / Math.max(1, data.rows.length);
  chart.setAttribute("width", width + 40);
  chart.setAttribute("height", height + 16);
  chart.appendChild(svg("text", { x: width + 2, y: 10 }, (byCost ? "$" : "") + most.toFixed(byCost ? 4 : 1)));
  chart.appendChild(svg("line", { x1: 0, y1: height, x2: width, y2: height, stroke: "#999" }));
  data.rows.forEach((r, i) => {
    const h = Math.max(1, Math.round((value(r) / most) * (height - 4)));
    const bar = svg("rect", { x: (i * step).toFixed(2), y: height - h, width: Math.max(1, step - 1).toFixed(2), height: h, class: "bar " + r.status });
    bar.appendChild(svg("title", {}, r.id + " #" + r.attempt + ": " + (byCost ? "$" + value(r) : value(r) + " s")));
    bar.addEventListener("click", () => { location.hash = key(r); });
    chart.appendChild(bar);
  });
}
statusChart();
timeChart();

// The table and its controls.
const filter = document.getElementById("filter");
const reason = document.getElementById("reason");
const search = document.getElementById("search");
for (const st of data.statuses) filter.appendChild(el("option", st)).value = st;
const kinds = {};
for (const r of data.rows) if (r.kind) kinds[r.kind] = (kinds[r.kind] || 0) + 1;
for (const k of Object.keys(kinds).sort()) reason.appendChild(el("option", k + " (" + kinds[k] + ")")).value = k;
const head = document.querySelector("#tasks thead tr");
const body = document.querySelector("#tasks tbody");
const byKey = new Map();
const rows = data.rows.map((r, i) => {
  const tr = el("tr");
  tr.dataset.status = r.status;
  tr.dataset.kind = r.kind;
  tr.dataset.index = i;
  tr.id = "row-" + key(r);
  for (const [k, , wide] of columns) {
    const v = r[k];
    tr.appendChild(el("td", v === null ? "" : v, k === "status" ? r.status : k === "error" ? "why" : wide));
  }
  tr.addEventListener("click", () => { location.hash = key(r); });
  body.appendChild(tr);
  byKey.set(key(r), i);
  return tr;
});
function apply() {
  const q = search.value.trim().toLowerCase();
  let n = 0;
  rows.forEach((tr, i) => {
    const r = data.rows[i];
    const visible = (!filter.value || r.status === filter.value)
      && (!reason.value || r.kind === reason.value)
      && (!q || r.id.toLowerCase().includes(q));
    tr.hidden = !visible;
    if (visible) n++;
  });
  document.getElementById("shown").textContent = n + " of " + rows.length + " shown";
}

// The panel beside the table.
function pre(text) { return el("pre", text); }
function showWhy(r) {
  const box = document.getElementById("detail-why");
  box.textContent = "";
  const w = r.why;
  if (!w) return;
  box.appendChild(el("h3", "Why"));
  box.appendChild(el("p", w.line, "why-line"));
  const v = w.verifier;
  if (v) {
    box.appendChild(el("p", v.exit === null ? "The verifier was stopped (no exit status)." : "The verifier exited with status " + v.exit + ".", "why-exit"));
    if (v.failing.length) {
      box.appendChild(el("p", "Its last failing lines:"));
      const f = pre(v.failing.join("\n"));
      f.id = "why-failing";
      box.appendChild(f);
    }
    const tail = el("details");
    tail.appendChild(el("summary", "Its last lines"));
    tail.appendChild(pre(v.tail));
    box.appendChild(tail);
  }
  if (w.diff_error) box.appendChild(el("p", "No diff: " + w.diff_error));
  // A reason that names a file ("see setup.log") links to it below.
  for (const log of r.logs) {
    const base = log.name.split("/").pop();
    if (log.text !== null && w.line.includes(base)) {
      const a = el("a", "open " + log.name);
      a.href = "#" + key(r);
      a.addEventListener("click", (e) => { e.preventDefault(); openLog(log.name); });
      box.appendChild(a);
    }
  }
}
function openLog(name) {
  for (const d of document.querySelectorAll("#detail-logs details")) {
    if (d.dataset.name === name) { d.open = true; d.scrollIntoView(); }
  }
}
function showLogs(r) {
  const box = document.getElementById("detail-logs");
  box.textContent = "";
  for (const log of r.logs) {
    const d = el("details", undefined, "log");
    d.dataset.name = log.name;
    const sum = el("summary");
    sum.appendChild(el("span", log.name, "name"));
    sum.appendChild(document.createTextNode(" "));
    sum.appendChild(el("span", bytes(log.size), "size"));
    if (log.cut) sum.appendChild(el("span", " (head and tail; " + bytes(log.cut) + " not shown)", "size"));
    d.appendChild(sum);
    const a = el("a", log.path, "path");
    a.href = log.path.split("/").map(encodeURIComponent).join("/");
    d.appendChild(a);
    d.appendChild(log.text === null ? el("p", log.note) : pre(log.text));
    box.appendChild(d);
  }
  if (!r.logs.length) box.appendChild(el("p", "(no files in " + r.folder + ")"));
}
function showDiff(r) {
  const note = document.getElementById("diff-note");
  const d = r.diff;
  document.getElementById("detail-diff").textContent = d ? (d.text || "(no changes)") : "(no diff.patch)";
  const said = [];
  if (d && d.binary.count) said.push(d.binary.count + " binary file" + (d.binary.count > 1 ? "s" : "") + " left out: " + d.binary.names.join(", "));
  if (d && d.ignored.count) said.push(d.ignored.count + " file" + (d.ignored.count > 1 ? "s" : "") + " left by running the tests left out (" + d.ignored.names.join(", ") + ")");
  if (d && d.cut) said.push(bytes(d.cut) + " cut from the middle; the whole diff is " + d.path);
  note.textContent = said.join("; ");
}
let selected = null;
function show(i) {
  const r = data.rows[i];
  const panel = document.getElementById("detail");
  panel.hidden = false;
  document.getElementById("main").className = "open";
  panel.dataset.task = r.id;
  panel.dataset.attempt = r.attempt;
  document.getElementById("detail-title").textContent = r.id + " (attempt " + r.attempt + "): " + r.status;
  document.getElementById("permalink").href = "#" + key(r);
  const meta = ["reward " + (r.reward === null ? "none" : r.reward), r.total_s + " s", "started " + date(r.started_unix_s)];
  if (r.cost_usd !== null) meta.push("$" + r.cost_usd);
  document.getElementById("detail-meta").textContent = meta.join(" · ");
  showWhy(r);
  const instruction = data.instructions[r.id];
  document.getElementById("detail-instruction").textContent = instruction === undefined ? "(not recorded in this attempt's result.json)" : instruction;
  showDiff(r);
  showLogs(r);
  document.getElementById("detail-transcript").textContent = r.transcript || "(no session)";
  if (selected) selected.classList.remove("selected");
  selected = rows[i];
  selected.classList.add("selected");
}
// `#TASK/ATTEMPT` opens that attempt; the older `#status=…&sort=…` form sets the view.
function route() {
  const hash = location.hash.slice(1);
  if (byKey.has(hash)) return show(byKey.get(hash));
  let decoded = hash;
  try { decoded = key({ id: decodeURIComponent(hash.slice(0, hash.lastIndexOf("/"))), attempt: hash.slice(hash.lastIndexOf("/") + 1) }); } catch (e) { /* not ours */ }
  if (byKey.has(decoded)) show(byKey.get(decoded));
}
let sortKey = null, ascending = true;
columns.forEach(([k, label, wide]) => {
  const th = el("th", label, wide);
  th.addEventListener("click", () => {
    ascending = sortKey === k ? !ascending : true;
    sortKey = k;
    for (const h of head.children) h.classList.remove("asc", "desc");
    th.classList.add(ascending ? "asc" : "desc");
    const sorted = rows.slice().sort((a, b) => {
      const x = data.rows[a.dataset.index][k], y = data.rows[b.dataset.index][k];
      const c = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
      return ascending ? c : -c;
    });
    for (const tr of sorted) body.appendChild(tr);
  });
  head.appendChild(th);
});
// The view a link carries: ?q=…&status=…&reason=…&sort=…&desc=1 (or the same after #).
function keepView() {
  const p = new URLSearchParams();
  if (search.value) p.set("q", search.value);
  if (filter.value) p.set("status", filter.value);
  if (reason.value) p.set("reason", reason.value);
  try { history.replaceState(null, "", (p.toString() ? "?" + p : location.pathname) + location.hash); } catch (e) { /* a file: page may refuse */ }
}
for (const c of [search, filter, reason]) c.addEventListener("input", () => { apply(); keepView(); });
const params = new URLSearchParams(location.search);
if (location.hash.includes("=")) for (const [k, v] of new URLSearchParams(location.hash.slice(1))) params.set(k, v);
if (params.get("q")) search.value = params.get("q");
if (params.get("status")) filter.value = params.get("status");
if (params.get("reason")) reason.value = params.get("reason");
apply();
const sortBy = columns.findIndex(([k]) => k === params.get("sort"));
if (sortBy >= 0) {
  head.children[sortBy].click();
  if (params.get("desc")) head.children[sortBy].click();
}
window.addEventListener("hashchange", route);
route();
document.body.dataset.ready = "1";
