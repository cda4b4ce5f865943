//! `runner eval report DIR`: one self-contained HTML file (no network, no CDN) with the
//! summary, a table of attempts that filters by status and sorts by any column, and each
//! attempt's diff, verify log and transcript.
//!
//! Everything in it that came from a task (diffs, logs, transcripts) is untrusted: the
//! agent wrote it. It travels as JSON inside a `<script type="application/json">` block
//! (with `<` escaped, so no text can close the block) and is put on the page with
//! `textContent` only, never as markup.
//!
//! A file of an attempt can be as large as what the agent wrote (a patch of a gigabyte):
//! the report reads a head and a tail of each, never the whole, and links the file on
//! disk for the rest. Its memory does not follow the agent's output.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::EvalError;
use super::results::{self, Status};

/// Per file shown in the report (half from its start, half from its end); the rest is on
/// disk beside it, linked.
const SHOWN_BYTES: u64 = 256 * 1024;
/// A session file larger than this is shown as its lines' head and tail, not read whole
/// and turned into a transcript.
const SESSION_READ_LIMIT: u64 = 32 << 20;

/// Writes `DIR/report.html` and returns its path.
pub fn write(out: &Path) -> Result<PathBuf, EvalError> {
    let summary = super::summary(out)?;
    let all = results::collect(out);
    let attempts = results::attempts_of(out, &all);
    let rows: Vec<Value> = all
        .iter()
        .map(|r| {
            let dir = results::attempt_dir(out, &r.id, r.attempt, attempts);
            let transcript = transcript_of(&dir);
            let link = |name: &str| {
                let path = dir.join(name);
                path.is_file()
                    .then(|| path.strip_prefix(out).ok().map(|p| p.display().to_string()))
                    .flatten()
            };
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
                "files": {
                    "diff.patch": link("diff.patch"),
                    "verify.log": link("verify.log"),
                    "session.jsonl": link("session.jsonl"),
                    "agent.log": link("agent.log"),
                },
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

/// The attempt's conversation; the oracle has none, and what its solution printed stands
/// in. A session too large to read whole is shown as its raw head and tail.
fn transcript_of(dir: &Path) -> String {
    let session = dir.join("session.jsonl");
    let size = std::fs::metadata(&session).map_or(0, |m| m.len());
    if size > SESSION_READ_LIMIT {
        return shown(&session);
    }
    crate::agent::record::Loaded::read(&session)
        .map(|l| crate::agent::transcript::transcript(&l))
        .unwrap_or_else(|_| shown(&dir.join("agent.log")))
}

/// A file as the report shows it: whole when small, else its head and its tail with how
/// much is left out between them; never read whole.
fn shown(path: &Path) -> String {
    head_and_tail(path).unwrap_or_default()
}

fn head_and_tail(path: &Path) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    if size <= SHOWN_BYTES {
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        return Ok(String::from_utf8_lossy(&bytes).into_owned());
    }
    let half = SHOWN_BYTES / 2;
    let mut head = vec![0u8; half as usize];
    file.read_exact(&mut head)?;
    file.seek(SeekFrom::Start(size - half))?;
    let mut tail = Vec::with_capacity(half as usize);
    file.take(half).read_to_end(&mut tail)?;
    Ok(format!(
        "{}\n\n… {} bytes not shown here; the whole file is {} in the attempt's folder (linked above) …\n\n{}",
        String::from_utf8_lossy(&head),
        size - 2 * half,
        path.file_name().unwrap_or_default().to_string_lossy(),
        String::from_utf8_lossy(&tail)
    ))
}

/// Text made here (a transcript) held to the report's size per file.
fn cut(mut text: String) -> String {
    let limit = SHOWN_BYTES as usize;
    if text.len() > limit {
        let mut at = limit;
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
<p id="detail-files"></p>
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
  // The attempt's files on disk, whole: a big one is shown above only in part.
  const files = document.getElementById("detail-files");
  files.textContent = "";
  for (const [name, path] of Object.entries(r.files || {})) {
    if (!path) continue;
    const a = el("a", name);
    a.href = path.split("/").map(encodeURIComponent).join("/");
    files.appendChild(a);
    files.appendChild(document.createTextNode(" "));
  }
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

#[cfg(test)]
mod big_files {
    use super::*;

    /// A file past the limit is shown as its head and tail with what is left out between;
    /// a small one whole.
    #[test]
    fn a_big_file_is_shown_by_its_head_and_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("diff.patch");
        let mut body = b"FIRST-LINE\n".to_vec();
        body.resize(3 << 20, b'x');
        body.extend_from_slice(b"\nLAST-LINE\n");
        std::fs::write(&path, &body).unwrap();
        let text = shown(&path);
        assert!(text.starts_with("FIRST-LINE\n"), "{}", &text[..40]);
        assert!(text.ends_with("LAST-LINE\n"));
        assert!(text.len() < SHOWN_BYTES as usize + 512, "{}", text.len());
        let left_out = body.len() as u64 - SHOWN_BYTES;
        assert!(text.contains(&format!("… {left_out} bytes not shown here")));
        std::fs::write(&path, "small\n").unwrap();
        assert_eq!(shown(&path), "small\n");
    }
}
