//! How a review names one side of a changed path: a file with the mode a review shows and
//! its size, or a link. Both the change list (`changes`) and the patch writer (`diff`)
//! speak it, so it lives below both.

/// A file's mode as a review shows it and an apply compares it: 0o644 or 0o755 (the
/// executable bit, the only permission git keeps), with the setuid, setgid and sticky bits
/// the file has, which an apply drops ([`SPECIAL`]).
pub fn review_mode(st_mode: u32) -> u32 {
    let plain = if st_mode & 0o111 != 0 { 0o755 } else { 0o644 };
    plain | (st_mode & SPECIAL)
}

/// setuid, setgid and sticky.
pub const SPECIAL: u32 = 0o7000;

/// One side of a changed path, as the patch names it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Leaf {
    File { mode: u32, size: u64 },
    Link(String),
}
