//! Full-text search over the repository (issue 27; docs/search.md).
//!
//! One tantivy document per message *content* (the keyed hash a snapshot entry carries),
//! however many snapshots and mailboxes hold it, kept in the repository as sealed splits
//! ([`split`]); where each content is (account, folder, file name, flags, snapshots)
//! comes from the snapshots, folded into a map kept in the local cache ([`places`]). `index` ([`build`]) adds
//! the contents no split holds; `search` ([`exec`]) evaluates a query ([`query`]) over
//! both.

pub mod build;
pub mod exec;
pub mod extract;
pub mod facets;
pub mod headers;
pub mod inline;
pub mod merge;
pub mod phrase;
pub mod places;
pub mod query;
pub mod schema;
pub mod show;
pub mod split;
pub mod verify;
pub mod words;

pub use split::open_split;
