//! The page around the data: markup, style and script, all inline (the page fetches
//! nothing; its Content-Security-Policy forbids it). The script builds everything from the
//! JSON block with `textContent` and `createElementNS`, never from markup strings.

use serde_json::Value;

const STYLE: &str = include_str!("style.css");
const SCRIPT: &str = include_str!("script.js");

/// JSON that can sit inside a script element: no `<` survives to end it early.
pub(super) fn embeddable(data: &Value) -> String {
    data.to_string()
        .replace('<', "\\u003c")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

pub(super) fn page(data: &Value) -> String {
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
<header>
<h1>runner eval report</h1>
<div id="top">
<section id="summary"></section>
<section id="charts">
<figure><figcaption>Outcome by status</figcaption><svg id="chart-status" role="img"></svg></figure>
<figure><figcaption id="chart-time-title">Time per attempt</figcaption><svg id="chart-time" role="img"></svg></figure>
</section>
</div>
<details id="settings"><summary>Settings of the run</summary><dl id="settings-list"></dl></details>
</header>
<p id="controls"><label>Task id <input id="search" type="search" placeholder="search"></label>
<label>Status <select id="filter"><option value="">all</option></select></label>
<label>Reason <select id="reason"><option value="">all</option></select></label>
<span id="shown"></span></p>
<main id="main">
<div id="list"><table id="tasks"><thead><tr></tr></thead><tbody></tbody></table></div>
<aside id="detail" hidden>
<h2 id="detail-title"></h2>
<p><a id="permalink" href="#">permalink</a> · <span id="detail-meta"></span></p>
<section id="detail-why"></section>
<details id="instruction-box" open><summary>Instruction</summary><pre id="detail-instruction"></pre></details>
<h3>Diff</h3><p id="diff-note"></p><pre id="detail-diff"></pre>
<h3>Files</h3><div id="detail-logs"></div>
<h3>Transcript</h3><pre id="detail-transcript"></pre>
</aside>
</main>
<script type="application/json" id="data">{data}</script>
<script>{SCRIPT}</script>
</body>
</html>
"##,
        data = embeddable(data)
    )
}
