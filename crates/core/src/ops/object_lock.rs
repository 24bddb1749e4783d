//! Object Lock in prune and check (the calls: `crate::store::object_lock`).
//!
//! A bucket with Object Lock keeps versions: a delete there only hides an object behind a
//! delete marker, and its locked versions stay until their retention ends.
//! - **What prune deletes** it deletes as everywhere: the object is gone from the
//!   repository at once, whether or not it is locked, so the repository stays one whole
//!   (an index file prune replaces is gone, with it every pack it lists that no snapshot
//!   needs). The space comes back at [`sweep`], which ends every prune: each hidden
//!   version whose retention has ended is deleted for good; a version still locked is
//!   kept, never asked to go, and counted with the date its retention ends. The next
//!   prune after it deletes it.
//! - **What prune extends** ([`extend`]): every object the repository keeps (packs,
//!   index files, snapshots, keys, config, dictionaries, search splits) whose retention
//!   ends within half the bucket's period gets the whole period again, from now. A pack
//!   a new snapshot shares with an old one so never expires under it, as long as prune
//!   runs at least every half period. Every object is asked (one HEAD request each).
//! - **Legal hold** (in [`extend`]): the objects snapshots tagged `hold` need get S3's
//!   legal hold; those no held snapshot needs any more lose it.
//! - **What check reports** ([`audit`]): the objects that need extending, and those
//!   nothing protects any more (retention over or none: written before the bucket had a
//!   default retention, or shortened in governance mode).

use crate::error::{Error, Result};
use crate::store::object_lock::{LockMode, LockPolicy, ObjectLock, Retention, Version};
use crate::store::{Backend, Store};
use jiff::Timestamp;
use serde::Serialize;

/// Requests in flight at once asking or changing retentions.
const CALLS: usize = 8;

/// The Object Lock part of a prune's or a check's report.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LockReport {
    /// The bucket's default retention.
    pub mode: Option<LockMode>,
    pub days: u32,
    /// Versions of deleted objects, deleted for good (their retention had ended).
    pub versions_removed: u64,
    pub bytes_removed: u64,
    /// Versions of deleted objects kept until their retention ends, and their bytes.
    pub versions_locked: u64,
    pub bytes_locked: u64,
    /// The earliest end of those retentions: the next prune after it deletes them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locked_until: Option<String>,
    /// Objects whose retention was asked, and those whose retention was extended (prune)
    /// or ends within half the period (check: the next prune extends them).
    pub objects_asked: u64,
    pub extended: u64,
    /// Objects under S3 legal hold because a held snapshot needs them (`tag hold`), holds
    /// put on and lifted by this prune.
    pub legal_holds: u64,
    pub legal_holds_set: u64,
    pub legal_holds_lifted: u64,
    /// Objects the repository keeps that nothing protects (check; prune extends them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unprotected: Vec<String>,
}

impl LockReport {
    pub fn new(policy: LockPolicy) -> LockReport {
        LockReport {
            mode: Some(policy.mode),
            days: policy.days,
            ..LockReport::default()
        }
    }
}

/// The retention of every object the repository keeps: everything `store` lists but
/// lock and writer records (they last a command). Every one is asked, young ones too: a
/// retention shortened in governance mode shows only so (one HEAD request each, in
/// parallel). An object deleted since the listing is left out.
fn kept_retentions(store: &dyn Backend, lock: &dyn ObjectLock) -> Result<Vec<(String, Retention)>> {
    use rayon::prelude::*;
    let kept: Vec<String> = (store.list("")?.into_iter())
        .filter(|o| !o.path.starts_with("locks/") && !o.path.starts_with("writers/"))
        .map(|o| o.path)
        .collect();
    let asked: Vec<Option<(String, Retention)>> = pool()?.install(|| {
        kept.into_par_iter()
            .map(|p| match lock.retention(&p, None) {
                Ok(r) => Ok(Some((p, r))),
                Err(Error::NotFound(_)) => Ok(None),
                Err(e) => Err(e),
            })
            .collect::<Result<_>>()
    })?;
    Ok(asked.into_iter().flatten().collect())
}

/// Extends the retention of every object the repository keeps whose retention ends
/// within half the period, and puts S3's legal hold on the objects in `holds` that lack
/// it and lifts it from those that have it and are not in `holds` any more; adds what it
/// did to `rep`.
pub fn extend(
    store: &dyn Backend,
    lock: &dyn ObjectLock,
    policy: LockPolicy,
    holds: &std::collections::HashSet<String>,
    rep: &mut LockReport,
) -> Result<()> {
    use rayon::prelude::*;
    let now = Timestamp::now();
    let asked = kept_retentions(store, lock)?;
    rep.objects_asked += asked.len() as u64;
    let until = policy.until_from(now);
    let due: Vec<&String> = (asked.iter())
        .filter(|(_, r)| policy.due(r, now))
        .map(|(p, _)| p)
        .collect();
    pool()?.install(|| {
        due.par_iter()
            .try_for_each(|p| match lock.extend(p, policy.mode, until) {
                // Deleted meanwhile (a lock record's neighbour, a search split merged).
                Err(Error::NotFound(_)) => Ok(()),
                other => other,
            })
    })?;
    rep.extended += due.len() as u64;
    let changes: Vec<(&String, bool)> = (asked.iter())
        .filter(|(p, r)| r.legal_hold != holds.contains(p))
        .map(|(p, r)| (p, !r.legal_hold))
        .collect();
    pool()?.install(|| {
        changes
            .par_iter()
            .try_for_each(|(p, on)| match lock.legal_hold(p, *on) {
                Err(Error::NotFound(_)) => Ok(()),
                other => other,
            })
    })?;
    rep.legal_holds_set += changes.iter().filter(|c| c.1).count() as u64;
    rep.legal_holds_lifted += changes.iter().filter(|c| !c.1).count() as u64;
    rep.legal_holds = holds.len() as u64;
    Ok(())
}

/// What check reports: the objects whose retention ends within half the period (the
/// next prune extends them), and those nothing protects any more.
pub fn audit(store: &dyn Backend, lock: &dyn ObjectLock, policy: LockPolicy) -> Result<LockReport> {
    let now = Timestamp::now();
    let mut rep = LockReport::new(policy);
    let asked = kept_retentions(store, lock)?;
    rep.objects_asked = asked.len() as u64;
    rep.extended = asked.iter().filter(|(_, r)| policy.due(r, now)).count() as u64;
    rep.unprotected = (asked.into_iter())
        .filter(|(_, r)| !r.locked_at(now))
        .map(|(p, _)| p)
        .collect();
    rep.unprotected.sort();
    Ok(rep)
}

/// Deletes for good the versions of deleted objects whose retention has ended (each
/// asked first: a locked one is never asked to go), their delete markers with the last
/// of them; adds what it did and kept to `rep`.
pub fn sweep(lock: &dyn ObjectLock, rep: &mut LockReport) -> Result<()> {
    let now = Timestamp::now();
    let hidden: Vec<Vec<Version>> = (lock.versions_by_path("")?.into_iter())
        .map(|(_, vs)| vs)
        .filter(|vs| vs.iter().any(|v| v.latest && v.marker))
        .collect();
    let data: Vec<(String, String)> = (hidden.iter().flatten())
        .filter(|v| !v.marker)
        .map(|v| (v.path.clone(), v.id.clone()))
        .collect();
    let asked = version_retentions(lock, data)?;
    let mut until: Option<Timestamp> = None;
    for vs in &hidden {
        let mut left = 0;
        for v in vs.iter().filter(|v| !v.marker) {
            let r = asked
                .get(&(v.path.clone(), v.id.clone()))
                .copied()
                .unwrap_or_default();
            if r.locked_at(now) {
                left += 1;
                rep.versions_locked += 1;
                rep.bytes_locked += v.size;
                until = match (until, r.until) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                continue;
            }
            lock.remove_version(&v.path, &v.id)?;
            rep.versions_removed += 1;
            rep.bytes_removed += v.size;
        }
        if left == 0 {
            for m in vs.iter().filter(|v| v.marker) {
                lock.remove_version(&m.path, &m.id)?;
            }
        }
    }
    rep.locked_until = until.map(|u| u.to_string());
    Ok(())
}

/// The retention of each (path, version), asked in parallel.
fn version_retentions(
    lock: &dyn ObjectLock,
    versions: Vec<(String, String)>,
) -> Result<std::collections::HashMap<(String, String), Retention>> {
    use rayon::prelude::*;
    pool()?.install(|| {
        versions
            .into_par_iter()
            .map(|(p, v)| match lock.retention(&p, Some(&v)) {
                Ok(r) => Ok(((p, v), r)),
                Err(Error::NotFound(_)) => Ok(((p, v), Retention::default())),
                Err(e) => Err(e),
            })
            .collect()
    })
}

fn pool() -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(CALLS)
        .build()
        .map_err(|e| Error::InvalidInput(format!("cannot start {CALLS} threads: {e}")))
}
