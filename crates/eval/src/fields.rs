//! Field values both task formats share (runner's task files and Harbor's task folders):
//! durations given in seconds, and ids that become folder names.

use std::time::Duration;

/// A positive number of seconds as a duration, at most thirty days (a longer limit is no
/// limit, and an absurd one must not overflow a timer).
pub fn seconds(s: f64) -> Option<Duration> {
    const MAX: f64 = 30.0 * 24.0 * 3600.0;
    (s.is_finite() && s > 0.0).then(|| Duration::from_secs_f64(s.min(MAX)))
}

/// Whether a task id can name a folder as it is: no separators, no dot names.
pub(super) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id != "."
        && id != ".."
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// An id that can name a folder: each other character becomes `_`.
pub(super) fn sanitize(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if valid_id(&s) { s } else { "task".into() }
}

/// A task folder's id (both folder layouts): its name, made safe for a file name.
pub(super) fn folder_id(dir: &std::path::Path) -> String {
    dir.file_name()
        .map(|n| sanitize(&n.to_string_lossy()))
        .unwrap_or_else(|| "task".into())
}
