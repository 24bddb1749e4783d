//! The walk of every snapshot's trees: every blob each snapshot needs is in the index and
//! readable, and each error is told which snapshots and messages it costs.

use crate::error::Error;
use crate::ops::check::damage::{
    CheckError, ChunkOutcome, ChunkResult, DamageKind, State, REPAIR_SNAPSHOTS,
};
use crate::repo::id::Id;
use crate::repo::snapshot::Snapshot;
use crate::repo::tree::{AccountTree, ChunkRef, FolderNode, RootTree};
use crate::repo::{lock, Repository};
use rayon::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// What an error costs: (error, snapshot, what, messages).
pub(crate) type Affected = (usize, String, String, u64);

/// The walk's state: the messages counted, the outcome of each chunk seen (a chunk
/// shared by snapshots is read once) and what each error costs.
pub(crate) struct Walk<'a> {
    repo: &'a Repository,
    st: &'a State,
    messages: AtomicU64,
    chunks: Mutex<HashMap<ChunkRef, Arc<ChunkResult>>>,
    affected: Mutex<Vec<Affected>>,
}

impl<'a> Walk<'a> {
    pub(crate) fn new(repo: &'a Repository, st: &'a State) -> Walk<'a> {
        Walk {
            repo,
            st,
            messages: AtomicU64::new(0),
            chunks: Mutex::new(HashMap::new()),
            affected: Mutex::new(Vec::new()),
        }
    }

    /// The messages counted and what each error costs.
    pub(crate) fn finish(self) -> (u64, Vec<Affected>) {
        let affected = std::mem::take(&mut *lock(&self.affected));
        (self.messages.load(Relaxed), affected)
    }

    fn attribute(&self, idx: usize, snap: &str, what: String, n: u64) {
        lock(&self.affected).push((idx, snap.to_string(), what, n));
    }

    /// The errors that make blob `id` unreadable, if any.
    fn blob_errors(&self, id: &Id) -> Option<usize> {
        let st = self.st;
        if let Some(&i) = lock(&st.bad_blobs).get(id) {
            return Some(i);
        }
        if self.repo.index().contains(id) {
            return None;
        }
        let i = st.group("unindexed".into(), || {
            CheckError::new(
                DamageKind::Unindexed,
                None,
                "blobs the snapshots need are not in the index",
            )
        });
        st.lose(i, id, None);
        Some(i)
    }

    /// A tree blob that could not be read: its error, or a new one.
    fn tree_error(&self, id: &Id, what: &str, e: Error) -> usize {
        self.blob_errors(id).unwrap_or_else(|| {
            let st = self.st;
            let mut err = CheckError::new(DamageKind::Tree, None, format!("{what}: {e}"));
            err.blob = Some(id.to_hex());
            let i = st.push(err);
            st.lose(i, id, None);
            st.set_repair(i, REPAIR_SNAPSHOTS);
            i
        })
    }

    /// Walks one snapshot's trees.
    pub(crate) fn snapshot(&self, s: &Snapshot) {
        let repo = self.repo;
        let sid = s.id.short();
        let sname = format!("snapshot {sid}");
        let root: RootTree = match repo.read_tree(&s.root) {
            Ok(r) => r,
            Err(e) => {
                let i = self.tree_error(&s.root, &format!("root tree of {sname}"), e);
                self.attribute(i, &sid, format!("{sname} (all of it)"), s.summary.messages);
                return;
            }
        };
        for acc in &root.accounts {
            let aname = format!("{sname} account {}", acc.name);
            let t: AccountTree = match repo.read_tree(&acc.tree) {
                Ok(t) => t,
                Err(e) => {
                    let i = self.tree_error(&acc.tree, &format!("tree of {aname}"), e);
                    self.attribute(i, &sid, format!("{aname} (all of it)"), acc.messages);
                    continue;
                }
            };
            (t.folders.par_iter().chain(&t.home)).for_each(|f| self.folder(&sid, &aname, f));
        }
        if let Some(tree) = &root.store {
            let what = format!("{sname} the store's own files");
            match repo.read_tree::<AccountTree>(tree) {
                Ok(t) => t.home.par_iter().for_each(|f| self.folder(&sid, &what, f)),
                Err(e) => {
                    let i = self.tree_error(tree, &format!("tree of {what}"), e);
                    self.attribute(i, &sid, format!("{what} (all of them)"), 0);
                }
            }
        }
    }

    /// Walks one folder: its files' blobs and its message chunks.
    fn folder(&self, sid: &str, aname: &str, f: &FolderNode) {
        let fname = format!("{aname} folder {}", f.name);
        for file in &f.files {
            let what = || format!("{fname} file {}", String::from_utf8_lossy(&file.name));
            // A large file's ids are in content lists: each read (and so checked).
            let mut ids = file.content.clone();
            for l in &file.lists {
                match self.repo.read_tree::<crate::repo::tree::ContentList>(l) {
                    Ok(list) => ids.extend(list.ids),
                    Err(e) => self.attribute(self.tree_error(l, &what(), e), sid, what(), 0),
                }
            }
            for id in &ids {
                if let Some(i) = self.blob_errors(id) {
                    self.attribute(i, sid, what(), 0);
                }
            }
        }
        let damaged = |id: &Id, e| {
            let what = format!(
                "{fname} (a list of message lists, of its {} messages)",
                f.messages
            );
            let i = self.tree_error(id, &what, e);
            self.attribute(i, sid, what, 0);
        };
        for c in &self.repo.folder_chunks_or(f, &mut { damaged }) {
            match &*self.chunk(c) {
                Ok(o) => {
                    for (key, idxs) in &o.bad {
                        for &i in idxs {
                            self.attribute(i, sid, format!("{fname} message {key}"), 1);
                        }
                    }
                }
                Err(idxs) => {
                    for &i in idxs {
                        self.attribute(
                            i,
                            sid,
                            format!("{fname} (a message list, of its {} messages)", f.messages),
                            0,
                        );
                    }
                }
            }
        }
    }

    /// A chunk's outcome: checked the first time it is seen.
    fn chunk(&self, c: &ChunkRef) -> Arc<ChunkResult> {
        let cached = lock(&self.chunks).get(c).cloned();
        match cached {
            Some(o) => o,
            None => {
                let o = Arc::new(check_chunk(
                    self.repo,
                    self.st,
                    c,
                    &|id| self.blob_errors(id),
                    &|id, what, e| self.tree_error(id, what, e),
                ));
                if let Ok(ok) = &*o {
                    self.messages.fetch_add(ok.messages, Relaxed);
                }
                lock(&self.chunks).insert(*c, o.clone());
                o
            }
        }
    }
}

/// Reads one message chunk and finds its messages whose blobs cannot be read.
fn check_chunk(
    repo: &Repository,
    st: &State,
    c: &ChunkRef,
    blob_errors: &(dyn Fn(&Id) -> Option<usize> + Sync),
    tree_error: &(dyn Fn(&Id, &str, Error) -> usize + Sync),
) -> ChunkResult {
    let chunk = match repo.read_chunk(c) {
        Ok(ch) => ch,
        Err(e) => {
            let mut idxs: Vec<usize> = [c.entries, c.names]
                .iter()
                .filter_map(blob_errors)
                .collect();
            if idxs.is_empty() {
                idxs.push(tree_error(&c.entries, "message list", e));
            }
            idxs.dedup();
            return Err(idxs);
        }
    };
    let index = repo.index();
    let mut out = ChunkOutcome {
        messages: chunk.len() as u64,
        bad: Vec::new(),
    };
    for m in &chunk {
        let key = String::from_utf8_lossy(&m.key).to_string();
        let mut idxs: Vec<usize> = m.content.iter().filter_map(blob_errors).collect();
        if idxs.is_empty() {
            let raw: u64 = m
                .content
                .iter()
                .map(|id| index.get(id).map_or(0, |l| u64::from(l.raw_len)))
                .sum();
            if raw != m.size {
                idxs.push(st.group("size".into(), || {
                    let mut e = CheckError::new(
                        DamageKind::Size,
                        None,
                        "their blobs do not add up to their size",
                    );
                    e.repair = Some(REPAIR_SNAPSHOTS.into());
                    e
                }));
            }
        }
        idxs.sort_unstable();
        idxs.dedup();
        if !idxs.is_empty() {
            out.bad.push((key, idxs));
        }
    }
    Ok(out)
}
