//! What the proxy keeps of each connection: kept one by one up to a limit, counted after.
//!
//! A process inside can open connections in a loop (refused ones cost it nothing), and
//! every record is held on the host and written to the session file. Past
//! [`MAX_KEPT`] finished connections a sandbox's records are only counted; the last one
//! kept says so, so that a reader of the session file knows the list stops there.

use std::collections::BTreeMap;

use serde::Serialize;

/// Finished connections kept one by one per sandbox.
pub const MAX_KEPT: usize = 10_000;

/// One connection as the session keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ConnectionRecord {
    pub host: String,
    pub port: u16,
    /// `allow` or `deny`.
    pub decision: String,
    /// Why it was refused or failed; the rule that decided, where one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The address connected to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// From the sandbox to the destination.
    pub bytes_sent: u64,
    /// From the destination to the sandbox.
    pub bytes_received: u64,
    /// One request of an inspected connection: `METHOD host/path` as the `http` rules
    /// judged it (each request is a record of its own, beside its connection's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// How that request came: `http` (plain, read as it passed) or `https` (read inside
    /// TLS by the inspector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// The origin's status for an inspected request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The secrets put into the request (or whose placeholder refused it), by name:
    /// never a value.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// The secrets whose value the answer carried back and the proxy replaced with the
    /// placeholder again ([`crate::scrub`]), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scrubbed: Vec<String>,
}

impl ConnectionRecord {
    /// A connection to `host:port`, allowed until it is refused.
    pub fn new(host: &str, port: u16) -> ConnectionRecord {
        ConnectionRecord {
            host: host.to_string(),
            port,
            decision: "allow".into(),
            reason: None,
            address: None,
            bytes_sent: 0,
            bytes_received: 0,
            request: None,
            scheme: None,
            status: None,
            secrets: Vec::new(),
            scrubbed: Vec::new(),
        }
    }

    /// One line for a person: `allow pypi.org:443 (12 B sent, 3400 B received)`. The
    /// bytes are there for every connection that reached its destination, also one cut
    /// later for what it carried.
    pub fn line(&self) -> String {
        let mut s = match &self.request {
            Some(request) => format!("{} {request} (port {})", self.decision, self.port),
            None => format!("{} {}:{}", self.decision, self.host, self.port),
        };
        if let Some(status) = self.status {
            s.push_str(&format!(" {status}"));
        }
        if !self.secrets.is_empty() {
            s.push_str(&format!(" [secrets: {}]", self.secrets.join(", ")));
        }
        if !self.scrubbed.is_empty() {
            s.push_str(&format!(
                " [scrubbed from the answer: {}]",
                self.scrubbed.join(", ")
            ));
        }
        // Through the host's upstream proxy: which one.
        if let Some(via) = self.address.as_deref().filter(|a| a.starts_with("via ")) {
            s.push_str(&format!(" {via}"));
        }
        if self.decision == "allow" || self.address.is_some() {
            s.push_str(&format!(
                " ({} B sent, {} B received)",
                self.bytes_sent, self.bytes_received
            ));
        }
        if let Some(r) = &self.reason {
            s.push_str(&format!(": {r}"));
        }
        s
    }
}

/// Connections past the limit: how many were allowed and refused.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Uncounted {
    pub allowed: u64,
    pub denied: u64,
}

/// One sandbox's connections.
pub(crate) struct Log {
    /// Open connections by the number [`Log::open`] gave them. Bounded by the proxy's
    /// limit on connections at once.
    open: BTreeMap<u64, ConnectionRecord>,
    next: u64,
    /// Finished, by the same numbers: the order they were judged in.
    done: BTreeMap<u64, ConnectionRecord>,
    past_limit: Uncounted,
    limit: usize,
}

impl Log {
    pub fn new(limit: usize) -> Log {
        Log {
            open: BTreeMap::new(),
            next: 0,
            done: BTreeMap::new(),
            past_limit: Uncounted::default(),
            limit: limit.max(1),
        }
    }

    pub fn open(&mut self, record: ConnectionRecord) -> u64 {
        let id = self.next;
        self.next += 1;
        self.open.insert(id, record);
        id
    }

    pub fn update(&mut self, id: u64, f: impl FnOnce(&mut ConnectionRecord)) {
        if let Some(r) = self.open.get_mut(&id) {
            f(r);
        }
    }

    /// The connection is over. Its final record, if it is kept (to be told on).
    pub fn finish(&mut self, id: u64) -> Option<ConnectionRecord> {
        let mut record = self.open.remove(&id)?;
        if self.done.len() >= self.limit {
            match record.decision.as_str() {
                "allow" => self.past_limit.allowed += 1,
                _ => self.past_limit.denied += 1,
            }
            return None;
        }
        if self.done.len() + 1 == self.limit {
            let note = format!(
                "the last connection recorded one by one: later ones are only counted ({} per sandbox)",
                self.limit
            );
            record.reason = Some(match record.reason.take() {
                Some(r) => format!("{r}; {note}"),
                None => note,
            });
        }
        self.done.insert(id, record.clone());
        Some(record)
    }

    /// Ends every connection still open (the proxy is going away), with `reason` where it
    /// has none; the records to be told on.
    pub fn cut_open(&mut self, reason: &str) -> Vec<ConnectionRecord> {
        let ids: Vec<u64> = self.open.keys().copied().collect();
        ids.into_iter()
            .filter_map(|id| {
                self.update(id, |r| {
                    r.reason.get_or_insert_with(|| reason.to_string());
                });
                self.finish(id)
            })
            .collect()
    }

    /// The connections kept, finished or open, in the order they were judged.
    pub fn records(&self) -> Vec<ConnectionRecord> {
        let mut all: Vec<(&u64, &ConnectionRecord)> =
            self.done.iter().chain(self.open.iter()).collect();
        all.sort_by_key(|(id, _)| **id);
        all.into_iter().map(|(_, r)| r.clone()).collect()
    }

    pub fn past_limit(&self) -> Uncounted {
        self.past_limit
    }

    /// Whether a connection is still open.
    pub fn any_open(&self) -> bool {
        !self.open.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(host: &str, decision: &str) -> ConnectionRecord {
        ConnectionRecord {
            decision: decision.into(),
            ..ConnectionRecord::new(host, 443)
        }
    }

    #[test]
    fn a_loop_of_connections_is_counted_not_kept_and_the_last_kept_says_so() {
        let mut log = Log::new(3);
        let long = log.open(rec("long.example", "allow"));
        for n in 0..10 {
            let id = log.open(rec(
                &format!("h{n}"),
                if n % 2 == 0 { "deny" } else { "allow" },
            ));
            let told = log.finish(id);
            assert_eq!(told.is_some(), n < 3, "connection {n}");
        }
        let recs = log.records();
        let hosts: Vec<&str> = recs.iter().map(|r| r.host.as_str()).collect();
        assert_eq!(hosts, ["long.example", "h0", "h1", "h2"]);
        assert!(recs[3].reason.as_deref().unwrap().contains("only counted"));
        assert_eq!(
            log.past_limit(),
            Uncounted {
                allowed: 4,
                denied: 3
            }
        );
        // An open connection finishing past the limit is counted by its final decision.
        log.update(long, |r| r.decision = "deny".into());
        assert!(log.finish(long).is_none());
        assert_eq!(log.past_limit().denied, 4);
        assert_eq!(log.records().len(), 3);
    }

    #[test]
    fn updates_reach_the_open_record_and_finishing_twice_tells_once() {
        let mut log = Log::new(MAX_KEPT);
        let id = log.open(rec("pypi.org", "allow"));
        log.update(id, |r| r.bytes_received = 42);
        assert_eq!(log.records()[0].bytes_received, 42);
        assert_eq!(log.finish(id).map(|r| r.bytes_received), Some(42));
        assert!(log.finish(id).is_none());
        assert_eq!(log.records().len(), 1);
        // What is still open when the proxy goes is finished, and says why.
        let open = log.open(rec("files.example", "allow"));
        let cut = log.cut_open("cut: the sandbox closed");
        assert_eq!(cut.len(), 1);
        assert_eq!(cut[0].reason.as_deref(), Some("cut: the sandbox closed"));
        assert!(log.finish(open).is_none());
        assert_eq!(log.records().len(), 2);
    }
}
