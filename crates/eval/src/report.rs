//! `runner eval report DIR`: one self-contained HTML file (no network, no CDN) with the
//! summary, a table of attempts that filters by status and sorts by any column, and each
//! attempt's diff, verify log and transcript.
//!
//! Everything in it that came from a task (diffs, logs, transcripts) is untrusted: the
//! agent wrote it. It travels as JSON inside a `<script type="application/json">` block
//! (with `<` escaped, so no text can close the block) and is put on the page with
//! `textContent` only, never as markup.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::EvalError;
use super::results::{self, Status};

/// Per file shown in the report; the rest is on disk beside it.
const SHOWN_BYTES: usize = 256 * 1024;

/// Writes `DIR/report.html` and returns its path.
pub fn write(out: &Path) -> Result<PathBuf, EvalError> {
    let summary = super::summary(out)?;
    let all = results::collect(out);
    let attempts = results::attempts_of(out, &all);
    let rows: Vec<Value> = all
        .iter()
        .map(|r| {
            let dir = results::attempt_dir(out, &r.id, r.attempt, attempts);
            // The oracle has no conversation: what its solution printed stands in.
            let transcript = crate::agent::record::Loaded::read(&dir.join("session.jsonl"))
                .map(|l| crate::agent::transcript::transcript(&l))
                .unwrap_or_else(|_| shown(&dir.join("agent.log")));
            json!({
                "id": r.id,
                "attempt": r.attempt,
                "status": r.status.name(),
                "reward": r.reward,
                "steps": r.steps,
                "tokens_in": r.usage.input + r.usage.cache_read + r.usage.cache_write,
                "tokens_cached": r.usage.cache_read,
                "tokens_out": r.usage.output,
                "cost_usd": r.cost_usd.map(|c| (c * 1e4).round() / 1e4),
                "build_s": r.timings.build_ms as f64 / 1000.0,
                "agent_s": r.timings.agent_ms as f64 / 1000.0,
                "verify_s": r.timings.verify_ms as f64 / 1000.0,
                "total_s": r.timings.total_ms as f64 / 1000.0,
                "error": r.reason().unwrap_or_default(),
                "diff": shown(&dir.join("diff.patch")),
                "verify": shown(&dir.join("verify.log")),
                "transcript": cut(transcript),
            })
        })
        .collect();
    let statuses: Vec<&str> = Status::ALL.iter().map(|s| s.name()).collect();
    let data = json!({"summary": summary, "rows": rows, "statuses": statuses});
    let html = page(&data);
    let path = out.join("report.html");
    crate::workspace::write_file(&path, html.as_bytes()).map_err(EvalError::io("write", &path))?;
    Ok(path)
}

fn shown(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| cut(String::from_utf8_lossy(&b).into_owned()))
        .unwrap_or_default()
}

fn cut(mut text: String) -> String {
    if text.len() > SHOWN_BYTES {
        let mut at = SHOWN_BYTES;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push_str("\n… (cut here; the whole file is in the task's folder)");
    }
    text
}

/// JSON that can sit inside a script element: no `<` survives to end it early.
fn embeddable(data: &Value) -> String {
    data.to_string()
        .replace('<', "\\u003c")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

fn page(data: &Value) -> String {
    format!(
        r##"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>runner eval report</title>
<style>{STYLE}</style>
</head>
<body>
<h1>runner eval report</h1>
<section id="summary"></section>
<p><label>Status <select id="filter"><option value="">all</option></select></label>
<span id="shown"></span></p>
<table id="tasks"><thead><tr></tr></thead><tbody></tbody></table>
<section id="detail" hidden>
<h2 id="detail-title"></h2>
<h3>Diff</h3><pre id="detail-diff"></pre>
<h3>Verify log</h3><pre id="detail-verify"></pre>
<h3>Transcript</h3><pre id="detail-transcript"></pre>
</section>
<script type="application/json" id="data">{data}</script>
<script>{SCRIPT}</script>
</body>
</html>
"##,
        data = embeddable(data)
    )
}

const STYLE: &str = r##"
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: 4px 8px; text-align: left; }
th { cursor: pointer; user-select: none; background: #f4f4f4; }
th.asc::after { content: " ▲"; } th.desc::after { content: " ▼"; }
tr[hidden] { display: none; }
tbody tr:hover { background: #f8f8ff; cursor: pointer; }
.resolved { color: #17692b; } .unresolved { color: #8a5a00; }
.agent_error, .timeout, .infra_error { color: #a31515; }
pre { background: #f6f6f6; padding: 8px; overflow: auto; max-height: 40em; white-space: pre-wrap; }
#summary dl { display: grid; grid-template-columns: max-content auto; gap: 2px 12px; }
#summary dt { font-weight: 600; }
"##;

const SCRIPT: &str = r##"
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
const columns = [
  ["id", "task"], ["attempt", "attempt"], ["status", "status"], ["reward", "reward"],
  ["steps", "steps"], ["tokens_in", "tokens in"], ["tokens_cached", "cached"],
  ["tokens_out", "tokens out"], ["cost_usd", "cost $"], ["build_s", "build s"],
  ["agent_s", "agent s"], ["verify_s", "verify s"], ["total_s", "total s"], ["error", "why"],
];
function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}
const s = data.summary;
const dl = el("dl");
const facts = [["model", s.model], ["runner", s.runner_version], ["task set", s.task_set_hash],
  ["tasks", s.tasks], ["attempts", s.attempts],
  ["resolved rate", (s.resolved_rate * 100).toFixed(1) + "%"]];
for (const [k, v] of Object.entries(s.counts)) facts.push([k, v]);
for (const [k, v] of Object.entries(s.pass_at || {})) facts.push(["pass@" + k, (v * 100).toFixed(1) + "%"]);
facts.push(["tokens", s.usage.input + " in, " + s.usage.output + " out, " + s.usage.cache_read + " cached"]);
if (s.cost_usd !== undefined && s.cost_usd !== null) facts.push(["cost", "$" + s.cost_usd.toFixed(4)]);
facts.push(["time", "build " + (s.build_ms / 1000).toFixed(1) + " s, agent " + (s.agent_ms / 1000).toFixed(1) + " s, verify " + (s.verify_ms / 1000).toFixed(1) + " s, total " + (s.total_ms / 1000).toFixed(1) + " s"]);
for (const [k, v] of facts) { dl.appendChild(el("dt", k)); dl.appendChild(el("dd", v)); }
document.getElementById("summary").appendChild(dl);

const filter = document.getElementById("filter");
for (const st of data.statuses) filter.appendChild(el("option", st)).value = st;
const head = document.querySelector("#tasks thead tr");
const body = document.querySelector("#tasks tbody");
const rows = data.rows.map((r, i) => {
  const tr = el("tr");
  tr.dataset.status = r.status;
  tr.dataset.index = i;
  for (const [key] of columns) {
    const v = r[key];
    tr.appendChild(el("td", v === null ? "" : v, key === "status" ? r.status : ""));
  }
  tr.addEventListener("click", () => show(r));
  body.appendChild(tr);
  return tr;
});
function show(r) {
  document.getElementById("detail").hidden = false;
  document.getElementById("detail-title").textContent = r.id + " (attempt " + r.attempt + "): " + r.status;
  document.getElementById("detail-diff").textContent = r.diff || "(no changes)";
  document.getElementById("detail-verify").textContent = r.verify || "(no verify log)";
  document.getElementById("detail-transcript").textContent = r.transcript || "(no session)";
}
function applyFilter() {
  let n = 0;
  for (const tr of rows) {
    const visible = !filter.value || tr.dataset.status === filter.value;
    tr.hidden = !visible;
    if (visible) n++;
  }
  document.getElementById("shown").textContent = n + " of " + rows.length + " shown";
}
let sortKey = null, ascending = true;
columns.forEach(([key, label]) => {
  const th = el("th", label);
  th.addEventListener("click", () => {
    ascending = sortKey === key ? !ascending : true;
    sortKey = key;
    for (const h of head.children) h.className = "";
    th.className = ascending ? "asc" : "desc";
    const sorted = rows.slice().sort((a, b) => {
      const x = data.rows[a.dataset.index][key], y = data.rows[b.dataset.index][key];
      const c = (typeof x === "number" && typeof y === "number") ? x - y : String(x).localeCompare(String(y));
      return ascending ? c : -c;
    });
    for (const tr of sorted) body.appendChild(tr);
  });
  head.appendChild(th);
});
filter.addEventListener("change", applyFilter);
// A link can carry the view: report.html#status=resolved&sort=total_s&desc=1
const params = new URLSearchParams(location.hash.slice(1));
if (params.get("status")) filter.value = params.get("status");
applyFilter();
const sortBy = columns.findIndex(([key]) => key === params.get("sort"));
if (sortBy >= 0) {
  head.children[sortBy].click();
  if (params.get("desc")) head.children[sortBy].click();
}
document.body.dataset.ready = "1";
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_a_task_wrote_can_close_the_data_block() {
        let data = json!({"diff": "</script><script>alert(1)</script>\u{2028}"});
        let text = embeddable(&data);
        assert!(!text.contains('<'), "{text}");
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, data);
    }
}
