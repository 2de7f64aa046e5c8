//! The kube-apiserver audit log (JSON lines, one per request at stage ResponseComplete with the
//! policy below): who wrote what, when the request was received.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

/// Logs every write verb of every user at Metadata level (no bodies), once per request.
pub const WRITES_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [\"RequestReceived\"]
rules:
- level: Metadata
  verbs: [\"create\", \"update\", \"patch\", \"delete\", \"deletecollection\"]
- level: None
";

/// One audited write.
#[derive(Clone, Debug)]
pub struct Write {
    pub user: String,
    pub verb: String,
    /// `requestReceivedTimestamp`.
    pub received: Timestamp,
    /// `stageTimestamp` (when the response completed).
    pub completed: Timestamp,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i64,
}

impl Write {
    fn parse(line: &str) -> Option<Write> {
        let v: Value = serde_json::from_str(line).ok()?;
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let ts = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)?
                .parse::<Timestamp>()
                .ok()
        };
        Some(Write {
            user: s("/user/username"),
            verb: s("/verb"),
            received: ts("/requestReceivedTimestamp")?,
            completed: ts("/stageTimestamp")?,
            resource: s("/objectRef/resource"),
            subresource: s("/objectRef/subresource"),
            namespace: s("/objectRef/namespace"),
            name: s("/objectRef/name"),
            code: v
                .pointer("/responseStatus/code")
                .and_then(Value::as_i64)
                .unwrap_or(0),
        })
    }

    /// `verb resource[/sub] ns/name code @received`.
    pub fn describe(&self) -> String {
        let sub = if self.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", self.subresource)
        };
        format!(
            "{} {} {}{sub} {}/{} -> {} at {}",
            self.user,
            self.verb,
            self.resource,
            self.namespace,
            self.name,
            self.code,
            self.received
        )
    }

    pub fn is_lease(&self) -> bool {
        self.resource == "leases"
    }
}

/// Reads the audit log incrementally, keeping the writes of users with a given prefix.
pub struct AuditLog {
    path: PathBuf,
    offset: usize,
    prefix: String,
    pub writes: Vec<Write>,
}

impl AuditLog {
    pub fn new(path: &Path, user_prefix: &str) -> AuditLog {
        AuditLog {
            path: path.to_path_buf(),
            offset: 0,
            prefix: user_prefix.to_string(),
            writes: Vec::new(),
        }
    }

    /// Reads the complete lines written since the last call.
    pub fn refresh(&mut self) {
        let bytes = std::fs::read(&self.path).unwrap_or_default();
        let Some(end) = bytes[self.offset.min(bytes.len())..]
            .iter()
            .rposition(|b| *b == b'\n')
            .map(|i| self.offset + i + 1)
        else {
            return;
        };
        let text = String::from_utf8_lossy(&bytes[self.offset..end]);
        for line in text.lines() {
            if let Some(w) = Write::parse(line)
                && w.user.starts_with(&self.prefix)
            {
                self.writes.push(w);
            }
        }
        self.offset = end;
    }

    /// The first write of `user` received at or after `since`.
    pub fn first_write(&self, user: &str, since: Timestamp) -> Option<&Write> {
        self.writes
            .iter()
            .filter(|w| w.user == user && w.received >= since)
            .min_by_key(|w| w.received)
    }

    /// Writes of `user` received at or after `since`.
    pub fn writes_since(&self, user: &str, since: Timestamp) -> Vec<&Write> {
        let mut v: Vec<&Write> = self
            .writes
            .iter()
            .filter(|w| w.user == user && w.received >= since)
            .collect();
        v.sort_by_key(|w| w.received);
        v
    }

    /// Counts of writes per user per phase; the phases are the intervals between `bounds`
    /// (received time), named by `names` (one more name than bounds). Lease writes are counted
    /// apart (`+N lease`).
    pub fn phase_table(&self, users: &[&str], bounds: &[Timestamp], names: &[&str]) -> String {
        let mut out = String::new();
        out.push_str(&format!("{:<14}", "identity"));
        for n in names {
            out.push_str(&format!(" | {n:<30}"));
        }
        out.push('\n');
        for user in users {
            let mut counts: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
            for w in self.writes.iter().filter(|w| w.user == *user) {
                let phase = bounds.iter().filter(|b| w.received >= **b).count();
                let e = counts.entry(phase).or_default();
                if w.is_lease() {
                    e.1 += 1;
                } else {
                    e.0 += 1;
                }
            }
            out.push_str(&format!("{user:<14}"));
            for i in 0..names.len() {
                let (objects, leases) = counts.get(&i).copied().unwrap_or_default();
                out.push_str(&format!(" | {:<30}", format!("{objects} + {leases} lease")));
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"c2cf32e2-887b-448e-bd6d-29e794c54e84","stage":"ResponseComplete","requestURI":"/apis/source.toolkit.fluxcd.io/v1/namespaces/failover-lrfi35/gitrepositories/repo-0/status?","verb":"patch","user":{"username":"rflux-sc-a","groups":["system:masters","system:authenticated"]},"sourceIPs":["127.0.0.1"],"objectRef":{"resource":"gitrepositories","namespace":"failover-lrfi35","name":"repo-0","apiGroup":"source.toolkit.fluxcd.io","apiVersion":"v1","subresource":"status"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-12-01T18:51:29.291019Z","stageTimestamp":"2026-12-01T18:51:29.312998Z"}"#;

    #[test]
    fn a_real_audit_line_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        std::fs::write(&path, format!("{LINE}\n{{\"partial")).unwrap();
        let mut log = AuditLog::new(&path, "rflux-sc-a");
        log.refresh();
        assert_eq!(log.writes.len(), 1);
        let w = &log.writes[0];
        assert_eq!(
            (w.verb.as_str(), w.resource.as_str(), w.subresource.as_str()),
            ("patch", "gitrepositories", "status")
        );
        assert_eq!(w.code, 200);
        let before: Timestamp = "2026-12-01T18:51:27.917575Z".parse().unwrap();
        assert_eq!(log.writes_since("rflux-sc-a", before).len(), 1);
        assert!(log.writes_since("rflux-sc-b", before).is_empty());
        let after: Timestamp = "2026-12-01T18:51:30Z".parse().unwrap();
        assert!(log.writes_since("rflux-sc-a", after).is_empty());
        // Another user's writes are not kept.
        assert!(AuditLog::new(&path, "rflux-kc").writes.is_empty());
    }
}
