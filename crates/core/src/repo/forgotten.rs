//! The repository's forget records, `forgotten/<id>`: sealed, content-named JSON listing
//! the snapshots removed on purpose (by `forget` or `tag`,
//! `ops::forget`). Every host takes the ids listed there as
//! removed on purpose, not rolled back ([`crate::host::seen`]). Someone without the key
//! cannot write one.
//!
//! An append-only host (docs/security.md) cannot delete snapshot files: its `forget`
//! writes the same record with `requested` set, a **forget request**. Its snapshots stay
//! (listed, restorable, not taken as forgotten) until a prune on the maintenance host
//! applies the request ([`crate::ops::forget::apply_requests`]).

use crate::error::{Error, Result};
use crate::repo::format::Version;
use crate::repo::id::Id;
use crate::repo::named::Named;
use crate::repo::{file_id, Repository};
use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// Where the forget records are kept.
pub const FORGOTTEN_DIR: &str = "forgotten/";

/// A forget record: `forgotten/<id>`, sealed JSON, content-named.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ForgetRecord {
    pub hostname: String,
    /// Unix seconds.
    pub time: i64,
    /// The ids (hex) of the snapshots removed on purpose.
    pub snapshots: Vec<String>,
    /// Not done yet: asked for by an append-only host, to be applied by the maintenance
    /// host's prune.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requested: bool,
}

/// Forget records with their paths, and a warning for each record that cannot be read.
pub type Records = (Vec<(String, ForgetRecord)>, Vec<String>);

/// The snapshots the forget records in the repository list as removed on purpose, and a
/// warning for each record that cannot be read (its ids are not taken as forgotten: a
/// record someone without the key wrote does not open). Requests are not in it.
pub fn forgotten(repo: &Repository) -> Result<(BTreeSet<Id>, Vec<String>)> {
    let (records, warnings) = records(repo)?;
    let ids = (records.iter())
        .filter(|(_, r)| !r.requested)
        .flat_map(|(_, r)| r.snapshots.iter().filter_map(|h| Id::from_hex(h)))
        .collect();
    Ok((ids, warnings))
}

/// The snapshots removed on purpose by the forget records written at Unix second `since`
/// or later (requests left out, records that cannot be read too: they are the warnings
/// of [`forgotten`]). A record written before `since` lists only snapshots older than
/// `since`.
pub fn forgotten_since(repo: &Repository, since: i64) -> Result<BTreeSet<Id>> {
    let (records, _) = records(repo)?;
    Ok((records.iter())
        .filter(|(_, r)| !r.requested && r.time >= since)
        .flat_map(|(_, r)| r.snapshots.iter().filter_map(|h| Id::from_hex(h)))
        .collect())
}

/// The forget requests of append-only hosts, each with its path, and a warning for each
/// record that cannot be read.
pub fn requests(repo: &Repository) -> Result<Records> {
    let (mut records, warnings) = records(repo)?;
    records.retain(|(_, r)| r.requested);
    Ok((records, warnings))
}

/// Every forget record that opens, with its path; a warning for each that does not.
fn records(repo: &Repository) -> Result<Records> {
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for f in repo.store().list(FORGOTTEN_DIR)? {
        let rec = file_id(&f.path)
            .and_then(|_| repo.store().get(&f.path))
            .and_then(|sealed| repo.open_named(Named::Forgotten, &f.path, sealed))
            .and_then(|plain| {
                serde_json::from_slice::<ForgetRecord>(&plain)
                    .map_err(|e| Error::corrupt(&f.path, format!("not a forget record: {e}")))
            });
        match rec {
            Ok(r) => out.push((f.path, r)),
            // Written before `migrate`: it lists format-1 ids, which are gone anyway.
            Err(Error::OtherFormat { found: 1, .. }) if repo.version() == Version::V2 => {}
            Err(e) => warnings.push(format!(
                "{}: cannot be read ({e}): the snapshots it lists count as missing",
                f.path
            )),
        }
    }
    Ok((out, warnings))
}
