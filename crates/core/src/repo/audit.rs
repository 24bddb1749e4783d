//! The audit log of `mailvault serve`: who logged in, searched, viewed, downloaded and
//! restored what, and when. Kept in the repository as `audit/<id>`, each a batch of
//! events in sealed, content-named JSON (named and sealed as the forget records are), so
//! that every host reading the repository sees the same log, nobody without the key can
//! read, forge or alter an event, and a deleted record is a name that is gone.
//!
//! Records are only ever created, never rewritten or deleted by mailvault (`prune` leaves
//! them, as it leaves forget records): an append-only host (docs/security.md) writes them
//! too, and Object Lock keeps them as long as anything.

use crate::error::{Error, Result};
use crate::repo::named::Named;
use crate::repo::{file_id, Repository};
use crate::store::Store;
use serde::{Deserialize, Serialize};

/// Where the audit records are kept.
pub const AUDIT_DIR: &str = "audit/";

/// One thing a user did.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AuditEvent {
    /// Unix seconds.
    pub time: i64,
    /// `admin`, or the mail user's address (`--user-auth`); for a login that failed, the
    /// name given.
    pub who: String,
    /// The client's address.
    pub address: String,
    /// `login`, `login failed`, `search`, `view`, `download`, `restore`, `cancel`,
    /// `imap login`, `imap open` ...
    pub action: String,
    /// What it concerned: a route and its parameters, a query, a job and its target.
    pub detail: String,
    /// The answer's HTTP status (200, 404 ...), or 0 where there is none.
    #[serde(default)]
    pub status: u16,
}

/// A batch of events: `audit/<id>`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AuditRecord {
    /// The host `serve` ran on.
    pub hostname: String,
    /// When the batch was written (Unix seconds).
    pub written: i64,
    /// In the order they happened.
    pub events: Vec<AuditEvent>,
    /// Events that were not kept before this batch (the server held more than it may
    /// while the repository could not be written): counted, so a gap shows.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lost_before: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Audit records with their paths, and a warning for each record that cannot be read.
pub type Records = (Vec<(String, AuditRecord)>, Vec<String>);

/// Writes `record` as a new `audit/<id>` (made durable); its path.
pub fn write(repo: &Repository, record: &AuditRecord) -> Result<String> {
    let json =
        serde_json::to_vec(record).map_err(|e| Error::corrupt("audit record", e.to_string()))?;
    let (id, sealed) = repo.seal_named(Named::Audit, &json);
    let path = format!("{AUDIT_DIR}{id}");
    let store = repo.store();
    crate::store::put_content_named(store, &path, &sealed)?;
    store.flush()?;
    Ok(path)
}

/// Every audit record that opens, with its path, oldest batch first; a warning for each
/// that does not (damaged, or written without the key).
pub fn records(repo: &Repository) -> Result<Records> {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for f in repo.store().list(AUDIT_DIR)? {
        match read(repo, &f.path) {
            Ok(r) => out.push((f.path, r)),
            Err(e) => warnings.push(unreadable(&f.path, &e)),
        }
    }
    out.sort_by_key(|(path, r)| (r.written, path.clone()));
    Ok((out, warnings))
}

/// The paths of the audit records, in no order.
pub fn paths(repo: &Repository) -> Result<Vec<String>> {
    Ok((repo.store().list(AUDIT_DIR)?.into_iter())
        .map(|f| f.path)
        .collect())
}

/// The audit record at `path` (one of [`paths`]), opened and checked.
pub fn read(repo: &Repository, path: &str) -> Result<AuditRecord> {
    file_id(path)
        .and_then(|_| repo.store().get(path))
        .and_then(|sealed| repo.open_named(Named::Audit, path, sealed))
        .and_then(|plain| {
            serde_json::from_slice::<AuditRecord>(&plain)
                .map_err(|e| Error::corrupt(path, format!("not an audit record: {e}")))
        })
}

/// The warning for record `path` that did not open with `e`.
pub fn unreadable(path: &str, e: &Error) -> String {
    format!("{path}: cannot be read ({e}): audit events may be missing")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repo::memory_repository as memory_repo;

    fn event(who: &str, action: &str) -> AuditEvent {
        AuditEvent {
            time: 1_700_000_000,
            who: who.into(),
            address: "127.0.0.1".into(),
            action: action.into(),
            detail: "/message?snapshot=ab".into(),
            status: 200,
        }
    }

    #[test]
    fn records_are_sealed_named_by_content_and_read_back() {
        let repo = memory_repo();
        let a = AuditRecord {
            hostname: "h".into(),
            written: 2,
            events: vec![event("admin", "login"), event("bob@example.org", "view")],
            lost_before: 0,
        };
        let b = AuditRecord {
            written: 1,
            lost_before: 3,
            ..a.clone()
        };
        let pa = write(&repo, &a).unwrap();
        write(&repo, &b).unwrap();
        assert!(pa.starts_with(AUDIT_DIR));
        let sealed = repo.store().get(&pa).unwrap();
        assert!(
            !sealed.windows(7).any(|w| w == b"bob@exa"),
            "readable in the repository"
        );
        let (all, warnings) = records(&repo).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(all.len(), 2);
        assert_eq!((&all[0].1, &all[1].1), (&b, &a), "oldest batch first");
        // A record moved to another name, or altered, does not open: a warning.
        let other = format!("{AUDIT_DIR}{}", "ab".repeat(32));
        repo.store().put(&other, &sealed).unwrap();
        let (all, warnings) = records(&repo).unwrap();
        assert_eq!((all.len(), warnings.len()), (2, 1), "{warnings:?}");
        assert!(warnings[0].contains(&other), "{warnings:?}");
    }
}
