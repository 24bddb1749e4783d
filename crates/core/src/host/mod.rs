//! This host's own state, kept outside the repository: the record of the snapshots and
//! the format it has seen in each repository ([`seen`]), which turns a rollback of the
//! storage into an error. The library never reads it on its own: the caller (the CLI)
//! opens the state directory and passes it to the operations that use it.

pub mod seen;
