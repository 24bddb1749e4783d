//! Object Lock (S3's WORM retention): objects nobody can delete or overwrite before a
//! date, not even with the bucket owner's credentials in compliance mode
//! (docs/security.md, *Object Lock*).
//!
//! The bucket carries the policy: created with Object Lock on and a default retention
//! (`mailvault init --lock-days N`), it gives every object written to it, by any host,
//! that retention from its creation, so a mail server needs no rights beyond writing.
//! What needs more is the maintenance host's, through [`ObjectLock`]: `prune` asks an
//! object's retention before it deletes it and keeps what is still locked, deletes every
//! version of what is not (a plain delete only hides an object of a versioned bucket),
//! and extends the retention of what the kept snapshots still need; `check` reports what
//! they need and nothing protects any more; `tag hold` puts a legal hold on a snapshot's
//! objects.

use crate::error::Result;
use jiff::Timestamp;

/// Who may shorten a retention: in governance mode, credentials allowed to bypass it;
/// in compliance mode nobody.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LockMode {
    Governance,
    Compliance,
}

impl LockMode {
    /// The name S3 uses.
    pub fn s3_name(self) -> &'static str {
        match self {
            LockMode::Governance => "GOVERNANCE",
            LockMode::Compliance => "COMPLIANCE",
        }
    }

    /// Parses S3's name or ours, in any case.
    pub fn parse(s: &str) -> Option<LockMode> {
        match s.to_ascii_lowercase().as_str() {
            "governance" => Some(LockMode::Governance),
            "compliance" => Some(LockMode::Compliance),
            _ => None,
        }
    }
}

/// The bucket's default retention: every new object is locked this long from its creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LockPolicy {
    pub mode: LockMode,
    pub days: u32,
}

impl LockPolicy {
    /// The retention a kept object gets when prune extends it: `days` from now.
    pub fn until_from(&self, now: Timestamp) -> Timestamp {
        now + jiff::SignedDuration::from_hours(24 * i64::from(self.days))
    }

    /// An object whose retention ends before this needs extending: half the period from
    /// now. Each object is then extended about every `days / 2` days, and one whose
    /// extension was missed (a prune that did not run) still has half a period left.
    pub fn extend_before(&self, now: Timestamp) -> Timestamp {
        now + jiff::SignedDuration::from_hours(12 * i64::from(self.days))
    }

    /// Whether an object with retention `r` needs extending at `now`.
    pub fn due(&self, r: &Retention, now: Timestamp) -> bool {
        r.until.is_none_or(|u| u < self.extend_before(now))
    }
}

/// One object's protection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    pub mode: Option<LockMode>,
    /// The end of its retention, if it has one.
    pub until: Option<Timestamp>,
    /// Under legal hold: kept whatever the date, until the hold is lifted.
    pub legal_hold: bool,
}

impl Retention {
    /// Whether a delete of this object's version fails at `now`.
    pub fn locked_at(&self, now: Timestamp) -> bool {
        self.legal_hold || self.until.is_some_and(|u| u > now)
    }
}

/// One version of an object in a versioned bucket, or a delete marker (what a plain
/// delete leaves: the object looks gone, its versions stay).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub path: String,
    pub id: String,
    /// The object's current version: a marker here means the object is deleted.
    pub latest: bool,
    pub marker: bool,
    pub size: u64,
    /// When it was written.
    pub modified: Option<Timestamp>,
    /// The store's tag of its content (S3's ETag: the MD5 of a single-part upload).
    pub etag: Option<String>,
}

/// The calls on a store with Object Lock (implemented by [`super::S3Store`]). Paths are
/// repository paths, as everywhere in [`super::Backend`].
pub trait ObjectLock: Send + Sync {
    /// The bucket's default retention; `None` when the bucket has no Object Lock, or no
    /// default retention.
    fn policy(&self) -> Result<Option<LockPolicy>>;
    /// Every version and delete marker under `prefix`.
    fn versions(&self, prefix: &str) -> Result<Vec<Version>>;
    /// The retention and legal hold of an object's current version, or of `version`.
    fn retention(&self, path: &str, version: Option<&str>) -> Result<Retention>;
    /// Sets the retention of an object's current version to end at `until` (only ever
    /// later: a store refuses a shorter one).
    fn extend(&self, path: &str, mode: LockMode, until: Timestamp) -> Result<()>;
    /// Puts a legal hold on an object's current version, or lifts it.
    fn legal_hold(&self, path: &str, on: bool) -> Result<()>;
    /// The bytes of one version of an object.
    fn read_version(&self, path: &str, version: &str) -> Result<Vec<u8>>;
    /// Deletes one version (or delete marker) for good. Fails on a version still locked.
    fn remove_version(&self, path: &str, version: &str) -> Result<()>;

    /// Every version and delete marker under `prefix`, by object (each object's oldest first).
    fn versions_by_path(&self, prefix: &str) -> Result<Vec<(String, Vec<Version>)>> {
        let mut by_path: std::collections::BTreeMap<String, Vec<Version>> = Default::default();
        for v in self.versions(prefix)? {
            by_path.entry(v.path.clone()).or_default().push(v);
        }
        for vs in by_path.values_mut() {
            vs.sort_by_key(|v| v.modified);
        }
        Ok(by_path.into_iter().collect())
    }

    /// Deletes every version of an object and its delete markers: what frees its space
    /// in a versioned bucket. Fails on a version still locked.
    fn remove_versions(&self, path: &str) -> Result<()> {
        for v in self.versions(path)?.into_iter().filter(|v| v.path == path) {
            self.remove_version(path, &v.id)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_locks_until_its_date_and_a_hold_until_lifted() {
        let now: Timestamp = "2026-11-28T12:00:00Z".parse().unwrap();
        let policy = LockPolicy {
            mode: LockMode::Compliance,
            days: 30,
        };
        let later = Retention {
            mode: Some(LockMode::Compliance),
            until: Some(policy.until_from(now)),
            legal_hold: false,
        };
        assert!(later.locked_at(now));
        assert!(!later.locked_at(policy.until_from(now)));
        assert!(!Retention::default().locked_at(now));
        let held = Retention {
            legal_hold: true,
            ..Retention::default()
        };
        assert!(held.locked_at(now));
        assert_eq!(
            policy.extend_before(now).to_string(),
            "2026-12-13T12:00:00Z"
        );
        assert_eq!(LockMode::parse("COMPLIANCE"), Some(LockMode::Compliance));
        assert_eq!(LockMode::parse("governance"), Some(LockMode::Governance));
        assert_eq!(LockMode::parse("none"), None);
    }
}
