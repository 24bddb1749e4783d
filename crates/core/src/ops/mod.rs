//! The operations on a repository, one module each, called by the CLI command of the same
//! name: backup and restore (one driver each, any source or target), check, ls, stats,
//! forget, tag, prune, undelete, repair and migrate.

pub mod backup;
pub mod check;
pub mod forget;
pub mod ls;
pub mod migrate;
pub mod object_lock;
pub mod prune;
pub mod repair;
pub mod restore;
pub mod stats;
pub mod tag;
pub mod undelete;
