//! The repository's forget records, `forgotten/<id>`: sealed, content-named JSON listing
//! the snapshots removed on purpose (by `forget` or `tag`,
//! `ops::forget`). Every host takes the ids listed there as
//! removed on purpose, not rolled back ([`crate::host::seen`]). Someone without the key
//! cannot write one.

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
}

/// The snapshots the forget records in the repository list as removed on purpose, and a
/// warning for each record that cannot be read (its ids are not taken as forgotten: a
/// record someone without the key wrote does not open).
pub fn forgotten(repo: &Repository) -> Result<(BTreeSet<Id>, Vec<String>)> {
    let mut ids = BTreeSet::new();
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
            Ok(r) => ids.extend(r.snapshots.iter().filter_map(|h| Id::from_hex(h))),
            // Written before `migrate`: it lists format-1 ids, which are gone anyway.
            Err(Error::OtherFormat { found: 1, .. }) if repo.version() == Version::V2 => {}
            Err(e) => warnings.push(format!(
                "{}: cannot be read ({e}): the snapshots it lists count as missing",
                f.path
            )),
        }
    }
    Ok((ids, warnings))
}
