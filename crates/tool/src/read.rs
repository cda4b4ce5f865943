//! `read`: a file's lines with their numbers, a directory's entries, or an image/PDF as an
//! attachment. Large files are read in pieces through the sandbox, so reading the last
//! lines of a huge log never loads all of it at once.

use std::path::{Path, PathBuf};

use base64::Engine;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{Attachment, Tool, ToolContext, ToolError, ToolOutput, ToolResult, lenient};
use runner_permission::PermissionRequest;
use runner_protocol::{ErrorKind, FileKind, ReadResponse, Stat};
use runner_sandbox::SandboxError;

pub const DEFAULT_LIMIT: u64 = 2000;
pub const MAX_LINE_CHARS: usize = 2000;
pub const MAX_BYTES: usize = 50 * 1024;
const CHUNK: u64 = 1024 * 1024;
const MAX_ATTACHMENT: u64 = 20 * 1024 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReadParams {
    /// The absolute path to the file or directory to read
    pub file_path: String,
    /// The line number to start reading from (1-indexed)
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub offset: Option<u64>,
    /// The maximum number of lines to read (defaults to 2000)
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    #[schemars(with = "Option<u64>")]
    pub limit: Option<u64>,
}

pub struct ReadTool;

impl Tool for ReadTool {
    type Params = ReadParams;

    fn id(&self) -> &'static str {
        "read"
    }

    fn description(&self) -> &'static str {
        include_str!("read.txt")
    }

    /// The directory first (the path itself when it is a directory), then `read` for the
    /// worktree-relative path.
    async fn permissions(
        &self,
        params: &ReadParams,
        ctx: &ToolContext,
    ) -> Result<Vec<PermissionRequest>, ToolError> {
        Ok(asks(&locate(params, ctx).await?, ctx))
    }

    async fn execute(&self, params: ReadParams, ctx: &ToolContext) -> ToolResult {
        let offset = params.offset.unwrap_or(1);
        if offset < 1 {
            return Err(ToolError::Failed(
                "offset must be greater than or equal to 1".into(),
            ));
        }
        let limit = params.limit.unwrap_or(DEFAULT_LIMIT).max(1);
        let path = ctx.resolve(&params.file_path)?;
        let found = ask_first(&path, ctx).await?;
        let rel = ctx.relative(&path);
        let first = match found {
            Found::Missing => return Err(ToolError::Failed(not_found_message(ctx, &path).await)),
            Found::Kind(FileKind::Dir) => return read_dir(ctx, &path, &rel, offset, limit).await,
            Found::Kind(FileKind::File) | Found::Unknown => {
                ctx.services.sandbox.client.read(&path, 0, CHUNK).await
            }
            Found::Kind(_) => return Err(not_a_file(&path)),
        };
        let first = match first {
            Ok(first) => first,
            // Nothing looked first: the read's refusal says what is there instead.
            Err(SandboxError::Api(e)) if matches!(found, Found::Unknown) => {
                return match e.kind {
                    ErrorKind::IsDirectory => read_dir(ctx, &path, &rel, offset, limit).await,
                    ErrorKind::NotFound => {
                        Err(ToolError::Failed(not_found_message(ctx, &path).await))
                    }
                    ErrorKind::NotAFile => Err(not_a_file(&path)),
                    _ => Err(SandboxError::Api(e).into()),
                };
            }
            Err(e) => return Err(e.into()),
        };
        let mut out = read_file(ctx, &path, &rel, offset, limit, first).await?;
        if out.attachments.is_empty() {
            with_folder_instructions(&mut out, ctx, &path).await;
        }
        Ok(out)
    }
}

/// What was known of a path once its asks were answered.
enum Found {
    /// Nothing yet: the read says.
    Unknown,
    Missing,
    Kind(FileKind),
}

/// Puts the call's asks before anything is read. Inside the worktree they are the same
/// whatever the path is, so nothing is looked at first and the read itself says what is
/// there: one round trip to the sandbox instead of a `stat` and then a read. Outside it,
/// `external_directory` names the path itself when it is a directory, so it is looked at
/// first (and a failure of that look is kept until the rules have had their say: they are
/// asked before the sandbox's refusal is reported).
async fn ask_first(path: &Path, ctx: &ToolContext) -> Result<Found, ToolError> {
    if let Some(inside) = ctx.file_asks_inside(path, "read") {
        ctx.ask_all(inside).await?;
        return Ok(Found::Unknown);
    }
    let target = Target {
        path: path.to_path_buf(),
        stat: ctx.stat_if_exists(path).await,
    };
    ctx.ask_all(asks(&target, ctx)).await?;
    Ok(match target.stat? {
        None => Found::Missing,
        Some(stat) => Found::Kind(stat.kind),
    })
}

fn not_a_file(path: &Path) -> ToolError {
    ToolError::Failed(format!("{} is not a regular file", path.display()))
}

/// Appends the instructions of the folders above a file read for the first time in this
/// conversation ([`super::instructions`]), and lists them in `metadata.loaded`.
async fn with_folder_instructions(out: &mut ToolOutput, ctx: &ToolContext, path: &Path) {
    let found = super::instructions::unseen_around(ctx, path).await;
    if found.is_empty() {
        return;
    }
    out.output
        .push_str(&super::instructions::reminder(ctx, &found));
    let loaded: Vec<String> = found
        .iter()
        .map(|(p, _)| p.to_string_lossy().into_owned())
        .collect();
    out.metadata
        .insert("loaded".into(), serde_json::json!(loaded));
}

/// The path a read names and what is there (a stat failure is kept, not raised: the rules
/// are asked before the sandbox's refusal is reported).
struct Target {
    path: PathBuf,
    stat: Result<Option<Stat>, SandboxError>,
}

async fn locate(params: &ReadParams, ctx: &ToolContext) -> Result<Target, ToolError> {
    let path = ctx.resolve(&params.file_path)?;
    let stat = ctx.stat_if_exists(&path).await;
    Ok(Target { path, stat })
}

/// `external_directory` names the directory itself when the path is one (OpenCode's kind
/// `dir`), else its parent. A path outside the sandbox's reach cannot be looked at through
/// it; where the sandbox shares the host's file system (none, landlock) the host's view says
/// whether it is a directory, which only picks the pattern asked about.
fn asks(target: &Target, ctx: &ToolContext) -> Vec<PermissionRequest> {
    let is_dir = match &target.stat {
        Ok(Some(s)) => s.kind == FileKind::Dir,
        Ok(None) => false,
        Err(_) => {
            ctx.sandbox().backend != runner_sandbox::BackendKind::Docker
                && std::fs::metadata(&target.path).is_ok_and(|m| m.is_dir())
        }
    };
    ctx.file_asks(&target.path, is_dir, "read")
}

/// `File not found: {path}`, followed by OpenCode's "Did you mean one of these?" and up to
/// three full paths from the same directory (see [`similar_names`]). The directory is
/// listed through the sandbox; if that fails, the message has no suggestions.
async fn not_found_message(ctx: &ToolContext, path: &Path) -> String {
    let not_found = format!("File not found: {}", path.display());
    let (Some(dir), Some(base)) = (path.parent(), path.file_name()) else {
        return not_found;
    };
    let Ok(entries) = ctx.services.sandbox.client.list(dir).await else {
        return not_found;
    };
    let base = base.to_string_lossy();
    let suggestions: Vec<String> = similar_names(&base, entries.iter().map(|e| e.name.as_str()))
        .into_iter()
        .map(|name| dir.join(name).to_string_lossy().into_owned())
        .collect();
    if suggestions.is_empty() {
        not_found
    } else {
        format!(
            "{not_found}\n\nDid you mean one of these?\n{}",
            suggestions.join("\n")
        )
    }
}

/// How many suggestions a not-found error lists (OpenCode's number).
const MAX_SUGGESTIONS: usize = 3;

/// The names (out of `names`, a directory listing) to suggest for a missing `base`, at most
/// [`MAX_SUGGESTIONS`]. First OpenCode's rule, in listing order: one lowercase name contains
/// the other (`config` → `config.json`). Then, if there is room, names a typo or two away
/// (`mian.rs` → `main.rs`), closest first: at most two single-character edits (an insertion,
/// a deletion, a substitution or the swap of two neighbours), and at most one per three
/// characters of `base`, so short names do not suggest everything.
fn similar_names<'n>(base: &str, names: impl IntoIterator<Item = &'n str>) -> Vec<&'n str> {
    let base_lower = base.to_lowercase();
    let base_chars: Vec<char> = base_lower.chars().collect();
    let bound = (base_chars.len() / 3).min(2);
    let mut containing = Vec::new();
    let mut close: Vec<(usize, &str)> = Vec::new();
    for name in names {
        let lower = name.to_lowercase();
        if lower.contains(&base_lower) || base_lower.contains(&lower) {
            containing.push(name);
        } else if bound > 0
            && let Some(distance) = edit_distance_within(&base_chars, &lower, bound)
        {
            close.push((distance, name));
        }
    }
    // Stable: equally close names keep the listing order.
    close.sort_by_key(|&(distance, _)| distance);
    containing
        .into_iter()
        .chain(close.into_iter().map(|(_, name)| name))
        .take(MAX_SUGGESTIONS)
        .collect()
}

/// The edit distance between `a` and `b` when it is at most `bound`, counting insertions,
/// deletions, substitutions and swaps of adjacent characters as one edit each (optimal
/// string alignment); `None` when it is larger. Gives up as soon as a whole row of the table
/// exceeds `bound`, so a long listing of unrelated names costs little.
fn edit_distance_within(a: &[char], b: &str, bound: usize) -> Option<usize> {
    let b: Vec<char> = b.chars().collect();
    if a.len().abs_diff(b.len()) > bound {
        return None;
    }
    // Three rows of the table: two back (for swaps), the previous one and the current one.
    let mut before: Vec<usize> = Vec::new();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut current = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (previous[j] + 1)
                .min(current[j - 1] + 1)
                .min(previous[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(before[j - 2] + 1);
            }
            current[j] = best;
        }
        if current.iter().all(|&d| d > bound) {
            return None;
        }
        before = std::mem::replace(&mut previous, current);
    }
    let distance = previous[b.len()];
    (distance <= bound).then_some(distance)
}

async fn read_dir(
    ctx: &ToolContext,
    path: &Path,
    rel: &str,
    offset: u64,
    limit: u64,
) -> ToolResult {
    let mut entries: Vec<String> = ctx
        .sandbox()
        .client
        .list(path)
        .await?
        .into_iter()
        .map(|e| {
            if e.kind == FileKind::Dir {
                format!("{}/", e.name)
            } else {
                e.name
            }
        })
        .collect();
    // Close to localeCompare: case-insensitive first, so `README` sits beside `readme.txt`.
    entries.sort_by(|a, b| a.to_lowercase().cmp(&b.to_lowercase()).then(a.cmp(b)));
    let start = ((offset - 1) as usize).min(entries.len());
    let end = start.saturating_add(limit as usize).min(entries.len());
    let shown = &entries[start..end];
    let truncated = end < entries.len();
    let footer = if truncated {
        format!(
            "(Showing {} of {} entries. Use 'offset' parameter to read beyond entry {})",
            shown.len(),
            entries.len(),
            offset as usize + shown.len() - 1
        )
    } else {
        format!("({} entries)", entries.len())
    };
    let output = format!(
        "<path>{}</path>\n<type>directory</type>\n<entries>\n{}\n\n{footer}\n</entries>",
        path.display(),
        shown.join("\n")
    );
    Ok(ToolOutput {
        title: rel.to_string(),
        output,
        metadata: crate::meta! {
            "preview" => shown.iter().take(20).cloned().collect::<Vec<_>>().join("\n"),
            "truncated" => truncated,
        },
        attachments: Vec::new(),
    })
}

/// Extensions that are binary whatever their bytes look like (OpenCode's list).
const BINARY_EXTENSIONS: &[&str] = &[
    "zip", "tar", "gz", "exe", "dll", "so", "class", "jar", "war", "7z", "doc", "docx", "xls",
    "xlsx", "ppt", "pptx", "odt", "ods", "odp", "bin", "dat", "obj", "o", "a", "lib", "wasm",
    "pyc", "pyo",
];

/// A NUL byte, or more than 30% control characters in the first 4 KiB, means binary.
pub fn looks_binary(path: &Path, head: &[u8]) -> bool {
    let ext = path.extension().map(|e| e.to_string_lossy().to_lowercase());
    if ext
        .as_deref()
        .is_some_and(|e| BINARY_EXTENSIONS.contains(&e))
    {
        return true;
    }
    let sample = &head[..head.len().min(4096)];
    if sample.is_empty() {
        return false;
    }
    if sample.contains(&0) {
        return true;
    }
    let odd = sample
        .iter()
        .filter(|&&b| b < 9 || (14..32).contains(&b))
        .count();
    odd * 10 > sample.len() * 3
}

/// The media type of the formats models can look at, from their magic numbers.
pub fn attachment_mime(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if head.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else if head.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else {
        None
    }
}

/// A file's lines from `offset`, given its first chunk (read from byte 0, up to [`CHUNK`]).
async fn read_file(
    ctx: &ToolContext,
    path: &Path,
    rel: &str,
    offset: u64,
    limit: u64,
    first: ReadResponse,
) -> ToolResult {
    let client = &ctx.services.sandbox.client;
    let stamp = first.stamp;

    if let Some(mime) = attachment_mime(&first.data) {
        return attachment(ctx, path, rel, mime, first.size).await;
    }
    if looks_binary(path, &first.data) {
        return Err(ToolError::Failed(format!(
            "Cannot read binary file: {}",
            path.display()
        )));
    }

    let lines = collect_lines(client, path, first, offset, limit).await?;
    ctx.conversation.file_times.record(path, stamp);

    let total = lines.total;
    if total < offset && !(total == 0 && offset == 1) {
        return Err(ToolError::Failed(format!(
            "Offset {offset} is out of range for this file ({total} lines)"
        )));
    }
    let shown = lines.kept.len() as u64;
    let last = (offset + shown).saturating_sub(1);
    let has_more = shown > 0 && last < total;
    let (footer, truncated) = if lines.capped_by_bytes {
        (
            format!(
                "(Output capped at 50 KB. Showing lines {offset}-{last}. Use offset={} to continue.)",
                last + 1
            ),
            true,
        )
    } else if has_more {
        (
            format!(
                "(Showing lines {offset}-{last} of {total}. Use offset={} to continue.)",
                last + 1
            ),
            true,
        )
    } else {
        (format!("(End of file - total {total} lines)"), false)
    };
    let numbered: Vec<String> = lines
        .kept
        .iter()
        .enumerate()
        .map(|(i, l)| format!("{}: {l}", offset + i as u64))
        .collect();
    let output = format!(
        "<path>{}</path>\n<type>file</type>\n<content>\n{}\n\n{footer}\n</content>",
        path.display(),
        numbered.join("\n")
    );
    Ok(ToolOutput {
        title: rel.to_string(),
        output,
        metadata: crate::meta! {
            "preview" => lines.kept.iter().take(20).cloned().collect::<Vec<_>>().join("\n"),
            "truncated" => truncated,
        },
        attachments: Vec::new(),
    })
}

/// An image or a PDF, whole, as an attachment the model sees (over the size limit: an
/// error saying so).
async fn attachment(
    ctx: &ToolContext,
    path: &Path,
    rel: &str,
    mime: &str,
    size: u64,
) -> ToolResult {
    if size > MAX_ATTACHMENT {
        return Err(ToolError::Failed(format!(
            "{} is {size} bytes, over the {MAX_ATTACHMENT}-byte limit for attachments",
            path.display(),
        )));
    }
    let whole = ctx
        .services
        .sandbox
        .client
        .read_all(path, MAX_ATTACHMENT)
        .await?;
    let kind = if mime == "application/pdf" {
        "PDF"
    } else {
        "Image"
    };
    let data = base64::engine::general_purpose::STANDARD.encode(&whole.data);
    Ok(ToolOutput {
        title: rel.to_string(),
        output: format!("{kind} read successfully"),
        metadata: crate::meta! { "preview" => format!("{kind} read successfully"), "truncated" => false },
        attachments: vec![Attachment {
            mime: mime.to_string(),
            url: format!("data:{mime};base64,{data}"),
            filename: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        }],
    })
}

/// The file's lines from `offset`, read a chunk at a time from the first one, until
/// `limit` lines or the byte cap: only what is shown (and the count) is ever held.
async fn collect_lines(
    client: &runner_sandbox::SandboxClient,
    path: &Path,
    first: runner_protocol::ReadResponse,
    offset: u64,
    limit: u64,
) -> Result<LineCollector, ToolError> {
    let mut lines = LineCollector::new(offset, limit);
    let mut pending: Vec<u8> = Vec::new();
    let mut chunk = first;
    let mut pos = 0u64;
    loop {
        pos += chunk.data.len() as u64;
        let at_end = chunk.data.is_empty() || pos >= chunk.size;
        pending.extend_from_slice(&chunk.data);
        let mut start = 0;
        while let Some(nl) = memchr(&pending[start..]) {
            lines.push(&pending[start..start + nl]);
            start += nl + 1;
        }
        pending.drain(..start);
        if at_end || lines.capped_by_bytes {
            break;
        }
        chunk = client.read(path, pos, CHUNK).await?;
    }
    if !pending.is_empty() && !lines.capped_by_bytes {
        lines.push(&pending);
    }
    Ok(lines)
}

fn memchr(haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == b'\n')
}

/// Counts every line and keeps the requested window, cut at 2000 lines / 50 KiB.
struct LineCollector {
    offset: u64,
    limit: u64,
    total: u64,
    kept: Vec<String>,
    bytes: usize,
    capped_by_bytes: bool,
}

impl LineCollector {
    fn new(offset: u64, limit: u64) -> Self {
        LineCollector {
            offset,
            limit,
            total: 0,
            kept: Vec::new(),
            bytes: 0,
            capped_by_bytes: false,
        }
    }

    fn push(&mut self, raw: &[u8]) {
        if self.capped_by_bytes {
            return;
        }
        self.total += 1;
        if self.total < self.offset || self.kept.len() as u64 >= self.limit || self.capped_by_bytes
        {
            return;
        }
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = String::from_utf8_lossy(raw);
        let line = match text.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => format!(
                "{}... (line truncated to {MAX_LINE_CHARS} chars)",
                &text[..cut]
            ),
            None => text.into_owned(),
        };
        let cost = line.len() + usize::from(!self.kept.is_empty());
        if self.bytes + cost > MAX_BYTES {
            self.capped_by_bytes = true;
            // The line that did not fit is not shown, so it does not count as read.
            self.total -= 1;
            return;
        }
        self.bytes += cost;
        self.kept.push(line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path in the worktree is read with no look first (its asks are the same whatever it
    /// is), one outside it (the output folder, a root of its own) is looked at first: either
    /// way a directory is listed, a missing file gets its suggestions, and what is not a
    /// file is refused, in the same words.
    #[tokio::test]
    async fn with_or_without_a_look_first_the_words_are_the_same() {
        let t = crate::testing::TestCtx::new().await;
        let out = t.wt.parent().unwrap().join("out");
        let registry = crate::Registry::builtin();
        let mut said = Vec::new();
        for dir in [&t.wt, &out] {
            std::fs::create_dir_all(dir.join("sub")).unwrap();
            std::fs::write(dir.join("sub/notes.txt"), "n\n").unwrap();
            let _socket = std::os::unix::net::UnixListener::bind(dir.join("sock")).unwrap();
            let mut words = Vec::new();
            for name in ["sub", "sub/note", "sock", "sub/notes.txt"] {
                let path = dir.join(name);
                let r = registry
                    .call("read", serde_json::json!({ "filePath": path }), &t.ctx)
                    .await;
                let text = r.error.unwrap_or(r.output);
                words.push(text.replace(&dir.display().to_string(), "[DIR]"));
            }
            said.push(words);
        }
        let asks = t.asks();
        let outside: Vec<_> = asks
            .iter()
            .filter(|a| a.0 == "external_directory")
            .collect();
        assert_eq!(
            outside.len(),
            4,
            "only the output folder's reads ask: {asks:?}"
        );
        assert_eq!(said[0], said[1]);
        let w = &said[0];
        assert!(
            w[0].contains("<type>directory</type>") && w[0].contains("notes.txt"),
            "{}",
            w[0]
        );
        assert!(
            w[1].contains(
                "File not found: [DIR]/sub/note\n\nDid you mean one of these?\n[DIR]/sub/notes.txt"
            ),
            "{}",
            w[1]
        );
        assert!(
            w[2].contains("[DIR]/sock is not a regular file"),
            "{}",
            w[2]
        );
        assert!(w[3].contains("1: n\n"), "{}", w[3]);
    }

    #[test]
    fn binary_detection_by_extension_nul_and_control_ratio() {
        assert!(looks_binary(Path::new("a.pyc"), b"text"));
        assert!(looks_binary(Path::new("a.txt"), b"abc\0def"));
        assert!(looks_binary(Path::new("a.txt"), &[1, 2, 3, b'a', 4, 5]));
        assert!(!looks_binary(Path::new("a.txt"), b"plain\ttext\r\n"));
        assert!(!looks_binary(Path::new("a.txt"), b""));
        assert!(!looks_binary(
            Path::new("a.txt"),
            "héllo wörld ✓".as_bytes()
        ));
    }

    #[test]
    fn attachments_are_recognised_by_content() {
        assert_eq!(attachment_mime(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(attachment_mime(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(attachment_mime(b"%PDF-1.7"), Some("application/pdf"));
        assert_eq!(attachment_mime(b"<svg xmlns="), None);
    }

    #[test]
    fn suggestions_follow_opencode_containment_first() {
        let names = [
            "Config.json",
            "config.yaml",
            "myconfig",
            "unrelated.txt",
            "c",
        ];
        // Either lowercase name may contain the other; listing order; at most three.
        assert_eq!(
            similar_names("config", names),
            vec!["Config.json", "config.yaml", "myconfig"]
        );
        assert_eq!(
            similar_names("CONFIG.YAML", names),
            vec!["config.yaml", "c"]
        );
        assert!(similar_names("zzz.md", names).is_empty());
    }

    #[test]
    fn suggestions_fall_back_to_names_a_typo_away() {
        let names = ["lib.rs", "main.rs", "mod.rs", "maintenance.rs"];
        // A swap of neighbours is one edit.
        assert_eq!(similar_names("mian.rs", names), vec!["main.rs"]);
        // Containment first, then the closest typos (equally close: listing order).
        assert_eq!(
            similar_names("readme", ["reader", "readme.md", "redme", "raedme", "rdm"]),
            vec!["readme.md", "redme", "raedme"]
        );
        assert_eq!(
            similar_names("main.rs", ["mian.rs", "mn.rs", "man.rs"]),
            vec!["mian.rs", "man.rs", "mn.rs"]
        );
        // Short names only tolerate what their length allows.
        assert!(similar_names("ab", ["xy", "ax"]).is_empty());
        assert_eq!(similar_names("abc", ["abd", "xyz"]), vec!["abd"]);
        // Never more than two edits, however long the name.
        assert!(similar_names("application.rs", ["applicxyzon.rs"]).is_empty());
    }

    #[test]
    fn edit_distance_counts_single_character_edits() {
        let chars = |s: &str| s.chars().collect::<Vec<char>>();
        assert_eq!(edit_distance_within(&chars("main"), "main", 2), Some(0));
        assert_eq!(edit_distance_within(&chars("mian"), "main", 2), Some(1));
        assert_eq!(edit_distance_within(&chars("main"), "man", 2), Some(1));
        assert_eq!(edit_distance_within(&chars("man"), "main", 2), Some(1));
        assert_eq!(edit_distance_within(&chars("main"), "mojn", 2), Some(2));
        assert_eq!(edit_distance_within(&chars("main"), "xyzw", 2), None);
        assert_eq!(edit_distance_within(&chars("a"), "abcd", 2), None);
        assert_eq!(edit_distance_within(&chars("é.rs"), "e.rs", 1), Some(1));
        assert_eq!(edit_distance_within(&[], "ab", 2), Some(2));
    }

    #[test]
    fn collector_cuts_long_lines_and_caps_bytes() {
        let mut c = LineCollector::new(1, 10);
        c.push("x".repeat(2500).as_bytes());
        assert!(c.kept[0].ends_with("... (line truncated to 2000 chars)"));
        assert_eq!(c.kept[0].chars().filter(|&ch| ch == 'x').count(), 2000);

        let mut c = LineCollector::new(1, 100_000);
        for _ in 0..100 {
            c.push("y".repeat(1000).as_bytes());
        }
        assert!(c.capped_by_bytes);
        assert_eq!(c.kept.len(), 51);
        assert_eq!(c.total, 51);
    }
}
