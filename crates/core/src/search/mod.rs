//! Full-text search over the repository (issue 27; docs/search.md).
//!
//! One tantivy document per message *content* (the keyed hash a snapshot entry carries),
//! however many snapshots and mailboxes hold it, kept in the repository as sealed splits
//! ([`split`]); where each content is (account, folder, file name, flags, snapshots)
//! comes from the snapshots when a search runs ([`catalog`]). `index` ([`build`]) adds
//! the contents no split holds; `search` ([`exec`]) evaluates a query ([`query`]) over
//! both.

pub mod build;
pub mod catalog;
pub mod exec;
pub mod extract;
pub mod query;
pub mod schema;
pub mod show;
pub mod split;
pub mod words;

use crate::error::{Error, Result};
use split::LocalSplit;

/// Opens the local copy of a split, with the analyzer registered.
pub fn open_split(s: &LocalSplit) -> Result<tantivy::Index> {
    let index = tantivy::Index::open_in_dir(&s.dir)
        .map_err(|e| Error::search(format!("opening split {}", s.id.short()), e))?;
    schema::register(&index);
    Ok(index)
}
