//! `webfetch`: one HTTP(S) GET, its body returned as markdown, text or raw HTML, or an image
//! as an attachment. It runs on the host, not in the sandbox (whose network may be off), so
//! the permission rules are what stands between the model and the network, and the
//! session's [`runner_network::outbound`] policy what stands between it and the host's own
//! network: loopback, private and metadata addresses, refused when each connection is made
//! unless the user's own config names them.

use std::time::Duration;

use base64::Engine;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{Attachment, Tool, ToolContext, ToolError, ToolOutput, ToolResult, lenient};
use runner_permission::PermissionRequest;

/// Bodies over this are refused, whether the server says so up front or not.
pub const MAX_BYTES: usize = 5 * 1024 * 1024;
pub const DEFAULT_TIMEOUT_SECS: u64 = 30;
pub const MAX_TIMEOUT_SECS: u64 = 120;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Text,
    #[default]
    Markdown,
    Html,
}

#[derive(Debug, Deserialize, JsonSchema)]
pub struct WebFetchParams {
    /// The URL to fetch; it must start with http:// or https://
    pub url: String,
    /// What to return: markdown (the default), text, or html
    #[serde(default)]
    pub format: Option<Format>,
    /// How long to wait, in seconds (default 30, at most 120)
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub timeout: Option<u64>,
}

pub struct WebFetchTool;

impl Tool for WebFetchTool {
    type Params = WebFetchParams;

    fn id(&self) -> &'static str {
        "webfetch"
    }

    fn description(&self) -> &'static str {
        include_str!("webfetch.txt")
    }

    async fn permissions(
        &self,
        params: &WebFetchParams,
        _ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        let url = checked_url(&params.url)?;
        Ok(vec![
            PermissionRequest::new("webfetch", vec![url.to_string()], vec!["*".into()])
                .with_metadata(serde_json::json!({
                    "url": url,
                    "format": format_name(params.format.unwrap_or_default()),
                })),
        ])
    }

    async fn execute(&self, params: WebFetchParams, ctx: &ToolContext) -> ToolResult {
        let url = checked_url(&params.url)?.to_string();
        ctx.ask_all(self.permissions(&params, ctx).await?).await?;
        let format = params.format.unwrap_or_default();
        let secs = params
            .timeout
            .unwrap_or(DEFAULT_TIMEOUT_SECS)
            .clamp(1, MAX_TIMEOUT_SECS);
        let fetched = tokio::select! {
            r = fetch(&url, format, secs, ctx) => r?,
            _ = ctx.cancel.cancelled() => return Err(ToolError::Cancelled),
        };
        present(&url, format, fetched).await
    }
}

fn checked_url(url: &str) -> Result<&str, ToolError> {
    let url = url.trim();
    let lower = url.to_ascii_lowercase();
    if !(lower.starts_with("http://") || lower.starts_with("https://")) {
        return Err(ToolError::Failed(format!(
            "The URL must start with http:// or https://, got {url:?}"
        )));
    }
    reqwest::Url::parse(url)
        .map_err(|e| ToolError::Failed(format!("{url:?} is not a valid URL: {e}")))?;
    Ok(url)
}

fn format_name(format: Format) -> &'static str {
    match format {
        Format::Text => "text",
        Format::Markdown => "markdown",
        Format::Html => "html",
    }
}

/// What the server sent.
struct Fetched {
    /// Where the content came from, after redirects.
    url: String,
    /// The media type, lower case, without parameters (empty when the server gave none).
    mime: String,
    /// The header as the server sent it, for the title.
    content_type: String,
    body: Vec<u8>,
}

fn accept(format: Format) -> &'static str {
    match format {
        Format::Markdown => {
            "text/markdown;q=1.0, text/x-markdown;q=0.9, text/plain;q=0.8, text/html;q=0.7, */*;q=0.1"
        }
        Format::Text => "text/plain;q=1.0, text/markdown;q=0.9, text/html;q=0.8, */*;q=0.1",
        Format::Html => {
            "text/html;q=1.0, application/xhtml+xml;q=0.9, text/plain;q=0.8, text/markdown;q=0.7, */*;q=0.1"
        }
    }
}

/// At most this many redirects are followed.
const MAX_REDIRECTS: usize = 10;

/// GETs `url`, following redirects (asking before one leaves the origin), within `secs`
/// (time spent waiting for an answer to such an ask does not count).
async fn fetch(
    url: &str,
    format: Format,
    secs: u64,
    ctx: &ToolContext,
) -> Result<Fetched, ToolError> {
    let (mut response, current, deadline) = follow(url, format, secs, ctx).await?;
    let status = response.status();
    if !status.is_success() {
        return Err(ToolError::Failed(format!(
            "The request failed: {current} answered with status {status}"
        )));
    }
    if response
        .content_length()
        .is_some_and(|n| n > MAX_BYTES as u64)
    {
        return Err(too_large());
    }
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let body = async {
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| failed(&current, e, secs))?
        {
            if body.len() + chunk.len() > MAX_BYTES {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    let body = tokio::time::timeout_at(deadline, body)
        .await
        .map_err(|_| timed_out(secs))??;
    Ok(Fetched {
        url: current.to_string(),
        mime,
        content_type,
        body,
    })
}

/// Sends the GET and follows redirects by hand: one to another origin is asked about
/// first, so a rule that allows one site does not let it send the request somewhere else,
/// and every hop's address is judged again (the session's client judges each name when it
/// connects). The final response, its URL, and the deadline (moved on by the time an ask
/// waited).
async fn follow(
    url: &str,
    format: Format,
    secs: u64,
    ctx: &ToolContext,
) -> Result<(reqwest::Response, reqwest::Url, tokio::time::Instant), ToolError> {
    let client = ctx
        .services
        .outbound
        .client()
        .map_err(|e| ToolError::Failed(e.to_string()))?;
    let mut current = reqwest::Url::parse(url)
        .map_err(|e| ToolError::Failed(format!("{url:?} is not a valid URL: {e}")))?;
    let mut deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut redirects = 0;
    loop {
        judge(ctx, &current).await?;
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let response = client
            .get(current.clone())
            .timeout(left)
            .header(reqwest::header::ACCEPT, accept(format))
            .header(reqwest::header::ACCEPT_LANGUAGE, "en-US,en;q=0.9")
            .send();
        let response = tokio::time::timeout_at(deadline, response)
            .await
            .map_err(|_| timed_out(secs))?
            .map_err(|e| failed(&current, e, secs))?;
        let Some(next) = redirect_target(&current, &response)? else {
            return Ok((response, current, deadline));
        };
        redirects += 1;
        if redirects > MAX_REDIRECTS {
            return Err(ToolError::Failed(format!(
                "{url} redirected more than {MAX_REDIRECTS} times; gave up at {current}"
            )));
        }
        // A hop to a closed address is refused before anybody is asked about it.
        judge(ctx, &next).await?;
        if next.origin() != current.origin() {
            let asked = tokio::time::Instant::now();
            ctx.ask(
                PermissionRequest::new("webfetch", vec![next.to_string()], vec!["*".into()])
                    .with_metadata(serde_json::json!({
                        "url": next.as_str(),
                        "redirectedFrom": current.as_str(),
                        "format": format_name(format),
                    })),
            )
            .await?;
            deadline += asked.elapsed();
        }
        current = next;
    }
}

/// Where a redirect leads, if the response is one.
fn redirect_target(
    current: &reqwest::Url,
    response: &reqwest::Response,
) -> Result<Option<reqwest::Url>, ToolError> {
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok());
    let (true, Some(location)) = (response.status().is_redirection(), location) else {
        return Ok(None);
    };
    let next = current.join(location).map_err(|e| {
        ToolError::Failed(format!(
            "{current} redirected to {location:?}, which is not a valid URL: {e}"
        ))
    })?;
    if !matches!(next.scheme(), "http" | "https") {
        return Err(ToolError::Failed(format!(
            "{current} redirected to {next}, which is not an http:// or https:// URL"
        )));
    }
    Ok(Some(next))
}

/// Why a request failed: the address rules' refusal, the timeout, or what reqwest's chain
/// of causes says.
fn failed(url: &reqwest::Url, e: reqwest::Error, secs: u64) -> ToolError {
    if let Some(r) = runner_network::outbound::Outbound::refusal_in(&e) {
        refused(url, r)
    } else if e.is_timeout() {
        timed_out(secs)
    } else {
        ToolError::Failed(format!("Fetching {url} failed: {}", error_chain(&e)))
    }
}

/// A request the host's address rules stopped before it was made.
/// The URL judged before a request to it ([`runner_network::outbound::Outbound::judge`]).
async fn judge(ctx: &ToolContext, url: &reqwest::Url) -> Result<(), ToolError> {
    use runner_network::outbound::OutboundError;
    ctx.services.outbound.judge(url).await.map_err(|e| match e {
        OutboundError::Refused(r) => refused(url, &r),
        other => ToolError::Failed(format!("webfetch refused {url}: {other}")),
    })
}

fn refused(url: &reqwest::Url, why: &runner_network::outbound::Refused) -> ToolError {
    ToolError::Failed(format!("webfetch refused {url}: {why}"))
}

fn too_large() -> ToolError {
    ToolError::Failed("Response too large (exceeds 5 MB limit)".into())
}

fn timed_out(secs: u64) -> ToolError {
    ToolError::Failed(format!(
        "The request timed out after {secs} s. Try again with a longer timeout (at most {MAX_TIMEOUT_SECS}), or another URL."
    ))
}

/// reqwest's own message is terse ("error sending request"); the causes say what happened.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = cause.source();
    }
    s
}

async fn present(url: &str, format: Format, f: Fetched) -> ToolResult {
    let title = if f.content_type.is_empty() {
        url.to_string()
    } else {
        format!("{url} ({})", f.content_type)
    };
    let mut metadata = crate::meta! {
        "url" => url,
        "contentType" => f.content_type,
        "bytes" => f.body.len(),
    };
    if f.url != url {
        metadata.insert("finalUrl".into(), f.url.clone().into());
    }
    if f.mime.starts_with("image/") && f.mime != "image/svg+xml" {
        let data = base64::engine::general_purpose::STANDARD.encode(&f.body);
        return Ok(ToolOutput {
            title,
            output: "Image fetched successfully".into(),
            metadata,
            attachments: vec![Attachment {
                url: format!("data:{};base64,{data}", f.mime),
                mime: f.mime,
                filename: file_name(&f.url),
            }],
        });
    }
    let head = &f.body[..f.body.len().min(8192)];
    let is_html = f.mime == "text/html"
        || f.mime == "application/xhtml+xml"
        || (f.mime.is_empty() && looks_like_html(head));
    if !is_html && head.contains(&0) {
        return Err(ToolError::Failed(format!(
            "{url} returned binary content ({}, {} bytes), which cannot be shown as text.",
            if f.mime.is_empty() {
                "no content type"
            } else {
                &f.mime
            },
            f.body.len()
        )));
    }
    let text = String::from_utf8_lossy(&f.body).into_owned();
    let output = if !is_html || format == Format::Html {
        text
    } else {
        // Parsing a few MB of HTML is real work; keep it off the async threads.
        tokio::task::spawn_blocking(move || match format {
            Format::Markdown => html_to_markdown(&text),
            _ => html_to_text(&text),
        })
        .await
        .map_err(|e| ToolError::Failed(format!("Converting the page failed: {e}")))?
    };
    Ok(ToolOutput {
        title,
        output,
        metadata,
        attachments: Vec::new(),
    })
}

fn looks_like_html(head: &[u8]) -> bool {
    let start = String::from_utf8_lossy(&head[..head.len().min(512)])
        .trim_start()
        .to_ascii_lowercase();
    start.starts_with("<!doctype html") || start.starts_with("<html")
}

fn file_name(url: &str) -> String {
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let after_host = path.splitn(4, '/').nth(3).unwrap_or("");
    after_host
        .rsplit('/')
        .find(|s| !s.is_empty())
        .unwrap_or("image")
        .to_string()
}

/// Elements whose content is not part of the page's text.
const SKIPPED: &[&str] = &[
    "script", "style", "noscript", "template", "iframe", "object", "embed", "svg", "head",
];

fn html_to_markdown(html: &str) -> String {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED.to_vec())
        .build();
    match converter.convert(html) {
        Ok(md) => md,
        // The parser does not fail on bad HTML; keep the text if it ever does.
        Err(_) => html_to_text(html),
    }
}

/// The text of a page: tags dropped (and the content of [`SKIPPED`] elements), whitespace
/// collapsed as a browser does, block elements on lines of their own and a blank line
/// between paragraphs, headings and lists; common entities decoded.
pub fn html_to_text(html: &str) -> String {
    /// Elements that start a line.
    const LINES: &[&str] = &["br", "dd", "div", "dt", "li", "tr", "title", "option"];
    /// Elements set off by a blank line.
    const PARAGRAPHS: &[&str] = &[
        "address",
        "article",
        "aside",
        "blockquote",
        "dl",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hr",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "table",
        "ul",
    ];
    let mut text = Text::default();
    // ASCII lower-casing keeps byte offsets, so one lower-case copy serves every search.
    let lower = html.to_ascii_lowercase();
    let mut pos = 0;
    while let Some(rel) = html[pos..].find('<') {
        let lt = pos + rel;
        let after = html[lt + 1..].chars().next();
        if !after.is_some_and(|c| c.is_ascii_alphabetic() || matches!(c, '/' | '!' | '?')) {
            // A `<` that opens no tag is text.
            text.push(&html[pos..lt + 1]);
            pos = lt + 1;
            continue;
        }
        text.push(&html[pos..lt]);
        if lower[lt..].starts_with("<!--") {
            pos = lower[lt..].find("-->").map_or(html.len(), |i| lt + i + 3);
            continue;
        }
        let Some(gt) = html[lt..].find('>').map(|i| lt + i) else {
            pos = html.len();
            break;
        };
        let tag = &lower[lt + 1..gt];
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        pos = gt + 1;
        if !closing && !tag.ends_with('/') && SKIPPED.contains(&name.as_str()) {
            let close = format!("</{name}");
            pos = match lower[pos..].find(&close) {
                Some(i) => lower[pos + i..]
                    .find('>')
                    .map_or(html.len(), |j| pos + i + j + 1),
                None => html.len(),
            };
            continue;
        }
        if PARAGRAPHS.contains(&name.as_str()) {
            text.brk(2);
        } else if LINES.contains(&name.as_str()) {
            text.brk(1);
        } else if matches!(name.as_str(), "td" | "th") {
            text.push(" ");
        }
    }
    text.push(&html[pos..]);
    text.out.trim_end().to_string()
}

/// Text being assembled: words with single spaces, and the strongest break asked for since
/// the last word (1 a new line, 2 a blank line), written only when more text follows.
#[derive(Default)]
struct Text {
    out: String,
    pending: u8,
}

impl Text {
    fn brk(&mut self, strength: u8) {
        self.pending = self.pending.max(strength);
    }

    fn push(&mut self, raw: &str) {
        if raw.is_empty() {
            return;
        }
        let decoded = decode_entities(raw);
        let words = decoded.split_whitespace().collect::<Vec<_>>().join(" ");
        let lead = decoded.starts_with(char::is_whitespace);
        let trail = decoded.ends_with(char::is_whitespace);
        if words.is_empty() {
            if self.pending == 0 && !self.out.is_empty() && !self.out.ends_with([' ', '\n']) {
                self.out.push(' ');
            }
            return;
        }
        if self.out.is_empty() {
            self.pending = 0;
        }
        if self.pending > 0 {
            let kept = self.out.trim_end_matches(' ').len();
            self.out.truncate(kept);
            self.out
                .push_str(if self.pending == 2 { "\n\n" } else { "\n" });
            self.pending = 0;
        } else if lead && !self.out.is_empty() && !self.out.ends_with([' ', '\n']) {
            self.out.push(' ');
        }
        self.out.push_str(&words);
        if trail {
            self.out.push(' ');
        }
    }
}

fn decode_entities(s: &str) -> String {
    if !s.contains('&') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let end = rest[1..].find(';').map(|i| i + 1).filter(|&i| i <= 10);
        let decoded = end.and_then(|end| {
            let entity = &rest[1..end];
            let c = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some(' '),
                _ => entity
                    .strip_prefix("#x")
                    .or_else(|| entity.strip_prefix("#X"))
                    .and_then(|h| u32::from_str_radix(h, 16).ok())
                    .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                    .and_then(char::from_u32),
            };
            c.map(|c| (c, end))
        });
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::Registry;
    use crate::registry::Outcome;
    use crate::testing::{TestCtx, ask};

    /// A one-response-per-connection HTTP/1.1 server on 127.0.0.1: `respond` gets the
    /// request's head (request line and headers) and returns the raw response bytes.
    async fn serve(respond: fn(&str) -> Vec<u8>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let response = respond(&String::from_utf8_lossy(&head));
                    let _ = sock.write_all(&response).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        format!("http://{addr}")
    }

    /// `network` rules of the user's own config, naming `hosts` exactly.
    fn users_rules(hosts: &[&str]) -> Vec<runner_permission::rules::Rule> {
        hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                runner_permission::rules::Rule::new(
                    "network",
                    h,
                    runner_permission::rules::Action::Allow,
                    "user config",
                    i + 1,
                )
                .in_layer(runner_permission::rules::Layer::User)
            })
            .collect()
    }

    /// A test context whose user has opened the loopback servers the tests run.
    async fn local() -> TestCtx {
        let mut t = TestCtx::new().await;
        let outbound =
            runner_network::outbound::Outbound::new(&users_rules(&["127.0.0.1", "localhost"]));
        t.ctx = t.ctx.clone().with_outbound(std::sync::Arc::new(outbound));
        t
    }

    fn response(status: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
        let mut r = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body);
        r
    }

    const PAGE: &str = "<!doctype html><html><head><title>T</title><style>body{color:red}</style></head>\
        <body><h1>Hello</h1><script>alert('x')</script><p>Some <b>bold</b> text &amp; a \
        <a href=\"/x\">link</a>.</p><ul><li>one</li><li>two</li></ul></body></html>";

    fn site(head: &str) -> Vec<u8> {
        let target = head.split_whitespace().nth(1).unwrap_or("/");
        let path = target.split('?').next().unwrap_or(target);
        match path {
            "/page" => response("200 OK", "text/html; charset=utf-8", PAGE.as_bytes()),
            "/plain" => response("200 OK", "text/plain", b"just <text>"),
            "/accept" => {
                let accept = head
                    .lines()
                    .find_map(|l| l.strip_prefix("accept: ").or_else(|| l.strip_prefix("Accept: ")))
                    .unwrap_or("")
                    .to_string();
                response("200 OK", "text/plain", accept.as_bytes())
            }
            "/redirect-here" => b"HTTP/1.1 302 Found\r\nLocation: /plain\r\nContent-Length: 0\r\n\r\n".to_vec(),
            "/redirect-away" => {
                // The same server under another name is another origin.
                let port = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("host: 127.0.0.1:").map(str::to_string))
                    .unwrap_or_default();
                format!("HTTP/1.1 301 Moved\r\nLocation: http://localhost:{}/plain\r\nContent-Length: 0\r\n\r\n", port.trim()).into_bytes()
            }
            "/loop" => b"HTTP/1.1 302 Found\r\nLocation: /loop\r\nContent-Length: 0\r\n\r\n".to_vec(),
            "/img.png" => response("200 OK", "image/png", b"\x89PNG\r\n\x1a\nfake"),
            "/bin" => response("200 OK", "application/octet-stream", b"a\0b"),
            "/huge-declared" => b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6000000\r\nConnection: close\r\n\r\nabc".to_vec(),
            "/huge-streamed" => {
                let mut r = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n".to_vec();
                r.extend(std::iter::repeat_n(b'x', MAX_BYTES + 1));
                r
            }
            _ => response("404 Not Found", "text/plain", b"no"),
        }
    }

    #[tokio::test]
    async fn html_becomes_markdown_text_or_stays_html() {
        let t = local().await;
        let base = serve(site).await;
        let reg = Registry::builtin();
        let url = format!("{base}/page");

        let r = reg.call("webfetch", json!({ "url": url }), &t.ctx).await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.title, format!("{url} (text/html; charset=utf-8)"));
        assert!(r.output.contains("# Hello"), "{}", r.output);
        assert!(r.output.contains("**bold**"), "{}", r.output);
        assert!(r.output.contains("[link](/x)"), "{}", r.output);
        assert!(
            !r.output.contains("alert") && !r.output.contains("color:red"),
            "{}",
            r.output
        );
        assert_eq!(t.asks(), vec![ask("webfetch", &[&url], &["*"])]);

        let r = reg
            .call("webfetch", json!({ "url": url, "format": "text" }), &t.ctx)
            .await;
        assert_eq!(r.output, "Hello\n\nSome bold text & a link.\n\none\ntwo");

        let r = reg
            .call(
                "webfetch",
                json!({ "url": url, "format": "html", "timeout": "5" }),
                &t.ctx,
            )
            .await;
        assert_eq!(r.output, PAGE);

        // Text that is not HTML comes back as it is.
        let r = reg
            .call(
                "webfetch",
                json!({ "url": format!("{base}/plain") }),
                &t.ctx,
            )
            .await;
        assert_eq!(r.output, "just <text>");

        let r = reg
            .call(
                "webfetch",
                json!({ "url": format!("{base}/accept"), "format": "html" }),
                &t.ctx,
            )
            .await;
        assert!(r.output.starts_with("text/html;q=1.0"), "{}", r.output);
    }

    #[tokio::test]
    async fn errors_status_size_and_scheme() {
        let t = local().await;
        let base = serve(site).await;
        let reg = Registry::builtin();

        let r = reg
            .call(
                "webfetch",
                json!({ "url": format!("{base}/missing") }),
                &t.ctx,
            )
            .await;
        assert_eq!(r.outcome, Outcome::Failed);
        let err = r.error.unwrap();
        assert!(err.contains("404"), "{err}");

        for path in ["/huge-declared", "/huge-streamed"] {
            let r = reg
                .call(
                    "webfetch",
                    json!({ "url": format!("{base}{path}") }),
                    &t.ctx,
                )
                .await;
            assert_eq!(
                r.error.as_deref(),
                Some("Response too large (exceeds 5 MB limit)"),
                "{path}"
            );
        }

        let r = reg
            .call("webfetch", json!({ "url": format!("{base}/bin") }), &t.ctx)
            .await;
        assert!(r.error.unwrap().contains("binary content"));

        let asked = t.asks().len();
        for url in ["file:///etc/passwd", "ftp://x", "localhost:80"] {
            let r = reg.call("webfetch", json!({ "url": url }), &t.ctx).await;
            assert_eq!(r.outcome, Outcome::Failed);
            assert!(r.error.unwrap().contains("http:// or https://"));
        }
        assert_eq!(t.asks().len(), asked, "a bad URL asks nothing");
    }

    #[tokio::test]
    async fn redirects_to_another_origin_are_asked_about() {
        let t = local().await;
        let base = serve(site).await;
        let reg = Registry::builtin();
        let here = format!("{base}/redirect-here");
        let r = reg.call("webfetch", json!({ "url": here }), &t.ctx).await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.output, "just <text>");
        assert_eq!(r.metadata["finalUrl"], json!(format!("{base}/plain")));
        assert_eq!(t.asks(), vec![ask("webfetch", &[&here], &["*"])]);

        let away = format!("{base}/redirect-away");
        let r = reg.call("webfetch", json!({ "url": away }), &t.ctx).await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        let port = base.rsplit(':').next().unwrap();
        let target = format!("http://localhost:{port}/plain");
        assert_eq!(
            t.asks()[1..],
            [
                ask("webfetch", &[&away], &["*"]),
                ask("webfetch", &[&target], &["*"])
            ]
        );

        // A rule that allows the first site does not carry over to where it redirects.
        struct OnlyFirstOrigin;
        impl runner_permission::PermissionGate for OnlyFirstOrigin {
            fn ask<'a>(
                &'a self,
                request: &'a runner_permission::PermissionRequest,
            ) -> runner_permission::AskFuture<'a> {
                let answer = if request.patterns.iter().any(|p| p.contains("localhost")) {
                    Err(runner_permission::PermissionError::Rejected { feedback: None })
                } else {
                    Ok(())
                };
                Box::pin(std::future::ready(answer))
            }
        }
        let ctx = ToolContext {
            gate: std::sync::Arc::new(OnlyFirstOrigin),
            ..t.ctx.clone()
        };
        let r = reg.call("webfetch", json!({ "url": away }), &ctx).await;
        assert_eq!(r.outcome, Outcome::Denied, "{:?}", r.error);

        let r = reg
            .call("webfetch", json!({ "url": format!("{base}/loop") }), &t.ctx)
            .await;
        assert!(r.error.unwrap().contains("redirected more than 10 times"));
    }

    /// A server on `ip` that counts the connections reaching it and answers each with a
    /// page.
    async fn counting(ip: &str) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let _ = sock
                    .write_all(&response("200 OK", "text/plain", b"instance-id: i-123"))
                    .await;
            }
        });
        (port, hits)
    }

    #[tokio::test]
    async fn the_hosts_own_addresses_are_refused_in_every_spelling() {
        // No rule of the user's opens anything: the plain tool context.
        let t = TestCtx::new().await;
        let (port, hits) = counting("127.0.0.1").await;
        let reg = Registry::builtin();
        for host in [
            "127.0.0.1",
            "localhost",
            "127.1",
            "0x7f000001",
            "2130706433",
            "0177.0.0.1",
            "[::ffff:127.0.0.1]",
            "[::ffff:7f00:1]",
            "[::1]",
            "[::]",
            "0.0.0.0",
            "169.254.169.254",
        ] {
            let url = format!("http://{host}:{port}/latest/meta-data");
            let r = reg.call("webfetch", json!({ "url": url }), &t.ctx).await;
            assert_eq!(r.outcome, Outcome::Failed, "{url}: {}", r.output);
            let err = r.error.unwrap();
            assert!(err.contains("webfetch refused"), "{url}: {err}");
            assert!(err.contains("[permission.network]"), "{url}: {err}");
        }
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "a refused request reached the server"
        );

        // Control: the user's own rule naming the address opens it, and only it.
        let opened = runner_network::outbound::Outbound::new(&users_rules(&["127.0.0.1"]));
        let ctx = t.ctx.clone().with_outbound(std::sync::Arc::new(opened));
        let url = format!("http://127.0.0.1:{port}/latest/meta-data");
        let r = reg.call("webfetch", json!({ "url": url }), &ctx).await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.output, "instance-id: i-123");
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
        let url = format!("http://[::1]:{port}/latest/meta-data");
        let r = reg.call("webfetch", json!({ "url": url }), &ctx).await;
        assert!(r.error.unwrap().contains("webfetch refused"));
    }

    #[tokio::test]
    async fn a_redirect_to_a_closed_address_is_refused_before_it_connects() {
        let t = TestCtx::new().await;
        // 127.0.0.2 is loopback too, and the user's rule names only 127.0.0.1.
        let (inner, hits) = counting("127.0.0.2").await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let outer = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let mut n = 0;
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                // Once to the metadata address, then to loopback under another address.
                let to = if n == 0 {
                    "http://169.254.169.254/latest/meta-data".to_string()
                } else {
                    format!("http://127.0.0.2:{inner}/latest/meta-data")
                };
                n += 1;
                let head =
                    format!("HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n");
                let _ = sock.write_all(head.as_bytes()).await;
            }
        });
        let opened = runner_network::outbound::Outbound::new(&users_rules(&["127.0.0.1"]));
        let ctx = t.ctx.clone().with_outbound(std::sync::Arc::new(opened));
        let reg = Registry::builtin();
        let url = format!("http://127.0.0.1:{outer}/away");
        for target in ["169.254.169.254 (link-local", "127.0.0.2 (loopback"] {
            let r = reg.call("webfetch", json!({ "url": url }), &ctx).await;
            let err = r.error.unwrap();
            assert!(err.contains(target), "{err}");
        }
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn an_image_is_an_attachment() {
        let t = local().await;
        let base = serve(site).await;
        let r = Registry::builtin()
            .call(
                "webfetch",
                json!({ "url": format!("{base}/img.png?v=1") }),
                &t.ctx,
            )
            .await;
        assert_eq!(r.outcome, Outcome::Ok, "{:?}", r.error);
        assert_eq!(r.output, "Image fetched successfully");
        let a = &r.attachments[0];
        assert_eq!(a.mime, "image/png");
        assert_eq!(a.filename, "img.png");
        let b64 = base64::engine::general_purpose::STANDARD.encode(b"\x89PNG\r\n\x1a\nfake");
        assert_eq!(a.url, format!("data:image/png;base64,{b64}"));
    }

    #[test]
    fn text_extraction_details() {
        assert_eq!(
            html_to_text("a < b &lt;c&gt; &#65;&#x42; &bogus; x"),
            "a < b <c> AB &bogus; x"
        );
        assert_eq!(
            html_to_text("<div>x<!-- <p>hidden</p> --></div><SCRIPT>no</SCRIPT><p>y</p>"),
            "x\n\ny"
        );
        assert_eq!(
            html_to_text("<table><tr><td>1</td><td>2</td></tr></table>"),
            "1 2"
        );
    }
}
