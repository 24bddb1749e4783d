//! `repair overwrites`: puts back, on a bucket that keeps versions (S3 versioning, always on
//! with Object Lock), the original of every object someone overwrote.
//!
//! mailvault writes every object once (a conditional put refuses an existing name), and
//! replaces only `config` (at migrate's commit). An object with more than one version
//! (besides `config`, lock and writer records) was therefore overwritten by someone else:
//! an intruder with credentials that may put (S3 has no right to create without the right
//! to replace, docs/security.md, *Overwrites*). Its oldest version is the one mailvault
//! wrote; it is written again as the current version, and the overwriting versions stay
//! as older versions (evidence, and locked anyway under Object Lock). `check --read-data`
//! afterwards verifies every object against its name or seal.
//!
//! It works on the storage alone, without the password or a lock: an overwritten key file
//! may be why the repository does not open, and it changes only objects that mailvault
//! never writes twice.

use crate::error::Result;
use crate::store::object_lock::{ObjectLock, Version};
use crate::store::{Backend, Store};
use serde::Serialize;

/// What [`repair_overwrites`] did (or, in a dry run, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct OverwritesRepair {
    pub dry_run: bool,
    /// Objects whose versions were looked at.
    pub objects: u64,
    /// Objects overwritten, whose original was (or would be) put back.
    pub restored: Vec<String>,
}

/// Whether mailvault may write `path` more than once: then its versions say nothing.
fn rewritten_by_us(path: &str) -> bool {
    path == "config" || path.starts_with("locks/") || path.starts_with("writers/")
}

/// Puts back the original of every overwritten object (see the module's text).
pub fn repair_overwrites(
    store: &dyn Backend,
    calls: &dyn ObjectLock,
    dry_run: bool,
) -> Result<OverwritesRepair> {
    let by_path = calls.versions_by_path("")?;
    let mut rep = OverwritesRepair {
        dry_run,
        objects: by_path.len() as u64,
        ..Default::default()
    };
    let overwritten: Vec<(String, Version)> = (by_path.into_iter())
        .filter(|(p, _)| !rewritten_by_us(p))
        // Deleted objects (a delete marker on top) are prune's, not overwritten.
        .filter(|(_, vs)| vs.iter().any(|v| v.latest && !v.marker))
        .filter_map(|(p, vs)| {
            // What came after the last delete marker: an object deleted and written again
            // (an index file a prune wrote again, the same bytes) is not overwritten.
            let after = vs.iter().rposition(|v| v.marker).map_or(0, |i| i + 1);
            let data = &vs[after..];
            let oldest = data.first()?.clone();
            let latest = data.iter().find(|v| v.latest)?;
            // Put back already (the current version is the original's copy).
            let same = oldest.etag.is_some() && latest.etag == oldest.etag;
            (data.len() > 1 && !same).then_some((p, oldest))
        })
        .collect();
    for (path, original) in overwritten {
        if !dry_run {
            let bytes = calls.read_version(&path, &original.id)?;
            store.replace(&path, &bytes)?;
        }
        rep.restored.push(path);
    }
    if !dry_run {
        store.flush()?;
    }
    Ok(rep)
}
