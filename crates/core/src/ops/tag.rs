//! `tag`: changing the tags of snapshots. A snapshot is immutable and named by its
//! content, so a changed one is written as a new snapshot (same content but the tags, so a
//! new id), made durable, and the old file is then removed as `forget` removes one
//! ([`crate::ops::forget::remove_snapshots`]: out of this host's record, listed in a forget
//! record, deleted), so that no host takes the old id's absence for a rollback. Killed in
//! between, both are there with the same root: harmless (run `tag` again, or forget the
//! old one).

use crate::error::{Error, Result};
use crate::host::seen::StateDir;
use crate::ops::forget::remove_snapshots;
use serde::Serialize;
use std::collections::BTreeSet;

/// Which snapshots, and how their tags change: `set` replaces them (when given), then
/// `add` and `remove` apply.
#[derive(Clone, Debug, Default)]
pub struct TagOptions {
    /// Snapshot ids (prefixes) or `latest`.
    pub snapshots: Vec<String>,
    pub add: Vec<String>,
    pub remove: Vec<String>,
    pub set: Option<Vec<String>>,
    /// This host's state directory (see [`crate::ops::forget::ForgetOptions::state`]).
    pub state: Option<StateDir>,
}

/// One snapshot whose tags changed.
#[derive(Clone, Debug, Serialize)]
pub struct Retagged {
    pub old: String,
    pub new: String,
    pub tags: Vec<String>,
}

/// What [`tag`] did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TagReport {
    pub changed: Vec<Retagged>,
    /// Snapshots whose tags were already as asked: not rewritten.
    pub unchanged: Vec<String>,
    /// The forget record that lists the replaced ids.
    pub record: Option<String>,
    pub warnings: Vec<String>,
}

/// A tag must be a word the tag lists of `forget --keep-tag a,b` can name.
fn valid(tag: &str) -> Result<()> {
    if tag.is_empty() || tag.contains(',') || tag.chars().any(char::is_control) {
        return Err(Error::InvalidInput(format!(
            "tag {tag:?}: a tag is not empty and has no comma or control character"
        )));
    }
    Ok(())
}

/// Changes the tags of `opts.snapshots` in `repo`.
pub fn tag(repo: &crate::Repository, opts: &TagOptions) -> Result<TagReport> {
    if opts.add.is_empty() && opts.remove.is_empty() && opts.set.is_none() {
        return Err(Error::InvalidInput(
            "nothing to do: give --add, --remove or --set".into(),
        ));
    }
    if opts.snapshots.is_empty() {
        return Err(Error::InvalidInput("no snapshot given".into()));
    }
    for t in opts.add.iter().chain(opts.set.iter().flatten()) {
        valid(t)?;
    }
    repo.refuse_if_migrating()?;
    // Shared: a prune (exclusive) never lists snapshots while one is being swapped for
    // its retagged copy (it could miss both, and delete what they use).
    let _lock = repo.lock(crate::repo::lock::LockKind::Shared, "tag")?;
    let mut rep = TagReport::default();
    let mut done = BTreeSet::new();
    let mut replaced = Vec::new();
    for which in &opts.snapshots {
        let old = repo.find_snapshot(which)?;
        if !done.insert(old.id) {
            continue;
        }
        let mut tags: Vec<String> = match &opts.set {
            Some(set) => set.clone(),
            None => old.tags.clone(),
        };
        for t in &opts.add {
            if !tags.contains(t) {
                tags.push(t.clone());
            }
        }
        tags.retain(|t| !opts.remove.contains(t));
        let mut dedup = BTreeSet::new();
        tags.retain(|t| dedup.insert(t.clone()));
        if tags == old.tags {
            rep.unchanged.push(old.id.to_hex());
            continue;
        }
        let mut new = old.clone();
        new.tags = tags;
        // Durable before the old one goes.
        let id = repo.save_snapshot(&new)?;
        rep.changed.push(Retagged {
            old: old.id.to_hex(),
            new: id.to_hex(),
            tags: new.tags,
        });
        replaced.push(old.id);
    }
    let (record, warnings) = remove_snapshots(repo, &replaced, opts.state.as_ref())?;
    rep.record = record;
    rep.warnings = warnings;
    Ok(rep)
}
