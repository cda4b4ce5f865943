//! Bounds on what one session writes: repeats folded, and a budget.
//!
//! A command inside the wall decides how often runner decides: a loop of refused
//! connections costs it nothing and wrote two lines each (the rule's decision and the
//! connection), 3.3 MB for 1,500 of them. Two bounds keep a trail readable and its disk
//! safe without losing what happened:
//! - **Folding.** Decisions alike in everything but their time (the same rule on the same
//!   subject or destination with the same outcome) are written one by one only up to
//!   [`Limits::fold_after`] per window of [`Limits::fold_window_ms`]. The rest of that
//!   window are counted, and when the window closes (or the session ends) one record says
//!   how many, with OCSF's `count`, `start_time` and `end_time` (and the bytes they carried
//!   summed): every decision is still accounted for.
//! - **A budget.** Past [`Limits::max_bytes`] of lines in one session, decisions are
//!   counted, not written; a record says so when it happens and another, at the end, how
//!   many lines and bytes were dropped. The sandbox's start and stop and those two records
//!   are always written.

use std::collections::HashMap;

use serde_json::{Value, json};

/// How much one session writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Decisions alike written one by one per window; the rest are counted.
    pub fold_after: u64,
    /// The window repeats are counted over, in milliseconds.
    pub fold_window_ms: u64,
    /// Bytes of lines one session writes at most (`[audit] max_bytes`).
    pub max_bytes: u64,
}

/// The default budget of one session's lines: far above what a session's own decisions
/// make once repeats are folded, far below what fills a disk.
pub const DEFAULT_MAX_BYTES: u64 = 16 << 20;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            fold_after: 10,
            fold_window_ms: 60_000,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// Decisions counted within one window, to be written as one record.
#[derive(Debug, Clone)]
pub(crate) struct Folded {
    count: u64,
    first: u64,
    last: u64,
    /// The last of them, as it would have been written.
    record: Value,
    bytes_in: u64,
    bytes_out: u64,
}

impl Folded {
    /// The record for all of them: the last one's, with how many, from when to when, and
    /// the bytes they carried in all.
    pub(crate) fn into_record(self, limits: &Limits) -> Value {
        let mut r = self.record;
        r["count"] = json!(self.count);
        r["start_time"] = json!(self.first);
        r["end_time"] = json!(self.last);
        r["time"] = json!(self.last);
        let message = r["message"].as_str().unwrap_or_default().to_string();
        r["message"] = json!(format!(
            "{} more like this within {} s, after the first {} written one by one: {message}",
            self.count,
            limits.fold_window_ms / 1000,
            limits.fold_after
        ));
        if r.get("traffic").is_some() {
            r["traffic"] = json!({
                "bytes_out": self.bytes_out,
                "bytes_in": self.bytes_in,
                "bytes": self.bytes_out + self.bytes_in,
            });
        }
        r
    }

    #[cfg(test)]
    pub(crate) fn count(&self) -> u64 {
        self.count
    }
}

struct Group {
    window_start: u64,
    seen: u64,
    folded: Option<Folded>,
}

/// What to do with a decision offered to [`Folds::offer`].
pub(crate) struct Offer {
    /// Its kind's previous window, closed by this one's arrival: to be written first.
    pub closed: Option<Folded>,
    /// The decision's record, to be written as it is; `None`: it was counted.
    pub record: Option<Value>,
}

/// The open windows, by what makes decisions alike.
#[derive(Default)]
pub(crate) struct Folds {
    groups: HashMap<String, Group>,
    /// The earliest time a window closes: before it nothing is due.
    next_close: Option<u64>,
}

impl Folds {
    /// A decision alike to others by `key`, made at `now`: written, or counted into
    /// `record`'s window (the record is only built when it is counted or written).
    pub fn offer(
        &mut self,
        key: &str,
        now: u64,
        limits: &Limits,
        record: impl FnOnce() -> Value,
    ) -> Offer {
        let window = limits.fold_window_ms;
        let group = self.groups.entry(key.to_string()).or_insert(Group {
            window_start: now,
            seen: 0,
            folded: None,
        });
        let mut closed = None;
        if now >= group.window_start + window {
            closed = group.folded.take();
            group.window_start = now;
            group.seen = 0;
        }
        group.seen += 1;
        let ends = group.window_start + window;
        self.next_close = Some(self.next_close.map_or(ends, |n| n.min(ends)));
        let built = record();
        if group.seen <= limits.fold_after {
            return Offer {
                closed,
                record: Some(built),
            };
        }
        let (bytes_in, bytes_out) = traffic(&built);
        let f = group.folded.get_or_insert(Folded {
            count: 0,
            first: now,
            last: now,
            record: Value::Null,
            bytes_in: 0,
            bytes_out: 0,
        });
        f.count += 1;
        f.last = now;
        f.bytes_in += bytes_in;
        f.bytes_out += bytes_out;
        f.record = built;
        Offer {
            closed,
            record: None,
        }
    }

    /// The counts of every window closed by `now`; those windows are forgotten.
    pub fn closed_by(&mut self, now: u64, limits: &Limits) -> Vec<Folded> {
        if self.next_close.is_none_or(|n| now < n) {
            return Vec::new();
        }
        let window = limits.fold_window_ms;
        let mut out = Vec::new();
        self.groups.retain(|_, g| {
            if now < g.window_start + window {
                return true;
            }
            out.extend(g.folded.take());
            false
        });
        self.next_close = self.groups.values().map(|g| g.window_start + window).min();
        out.sort_by_key(|f| f.first);
        out
    }

    /// Every count still open (the session is ending), oldest first.
    pub fn drain(&mut self) -> Vec<Folded> {
        let mut out: Vec<Folded> = self.groups.drain().filter_map(|(_, g)| g.folded).collect();
        self.next_close = None;
        out.sort_by_key(|f| f.first);
        out
    }

    /// When the next window closes, while any holds a count.
    pub fn next_due(&self, limits: &Limits) -> Option<u64> {
        self.groups
            .values()
            .filter(|g| g.folded.is_some())
            .map(|g| g.window_start + limits.fold_window_ms)
            .min()
    }
}

fn traffic(r: &Value) -> (u64, u64) {
    let t = &r["traffic"];
    (
        t["bytes_in"].as_u64().unwrap_or(0),
        t["bytes_out"].as_u64().unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            fold_after: 3,
            fold_window_ms: 1000,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }

    fn rec(n: u64) -> Value {
        json!({ "message": format!("refused {n}"), "traffic": { "bytes_in": n, "bytes_out": 1 } })
    }

    #[test]
    fn the_first_of_a_window_are_written_and_the_rest_counted_into_one_record() {
        let (l, mut folds) = (limits(), Folds::default());
        let mut written = 0;
        for n in 0..10u64 {
            let offer = folds.offer("k", 100 + n, &l, || rec(n));
            assert!(offer.closed.is_none());
            assert_eq!(offer.record.is_some(), n < 3, "decision {n}");
            written += u64::from(offer.record.is_some());
        }
        // Another kind is a window of its own.
        assert!(folds.offer("other", 105, &l, || rec(0)).record.is_some());
        assert!(folds.closed_by(1099, &l).is_empty(), "the window is open");
        assert_eq!(folds.next_due(&l), Some(1100));
        let closed = folds.closed_by(1100, &l);
        assert_eq!(closed.len(), 1, "only the kind with a count");
        let r = closed[0].clone().into_record(&l);
        assert_eq!(written + r["count"].as_u64().unwrap(), 10);
        assert_eq!(
            (r["start_time"].as_u64(), r["end_time"].as_u64()),
            (Some(103), Some(109))
        );
        assert_eq!(r["traffic"]["bytes_in"], 3 + 4 + 5 + 6 + 7 + 8 + 9);
        assert!(
            r["message"]
                .as_str()
                .unwrap()
                .starts_with("7 more like this"),
            "{r}"
        );
        assert!(r["message"].as_str().unwrap().ends_with("refused 9"), "{r}");
        assert!(folds.drain().is_empty(), "nothing left once written");
    }

    #[test]
    fn a_new_window_closes_the_last_and_the_end_drains_what_is_open() {
        let (l, mut folds) = (limits(), Folds::default());
        for n in 0..5 {
            folds.offer("k", n, &l, || rec(n));
        }
        // A decision after the window: the old count comes out first, this one is written.
        let offer = folds.offer("k", 2000, &l, || rec(9));
        assert!(offer.record.is_some());
        assert_eq!(offer.closed.map(|f| f.count()), Some(2));
        for n in 0..4 {
            folds.offer("k", 2001 + n, &l, || rec(n));
        }
        let open = folds.drain();
        assert_eq!(open.iter().map(Folded::count).collect::<Vec<_>>(), [2]);
    }
}
