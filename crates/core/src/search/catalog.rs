//! Where each message is: the entries of the snapshots a search covers, read once per
//! chunk.
//!
//! The search index holds a document per message *content*; which account, folder and
//! file name held it, with which flags, in which snapshots, comes from the snapshots
//! themselves, so that forgetting a snapshot takes its places out of every result at
//! once and the index never has to be rewritten for it. A chunk (about 32 entries) that
//! several snapshots share in the same folder is read once, and a folder whose chunk tree
//! an earlier snapshot had is not walked again: the catalog grows with what changed
//! between snapshots, not with their number.

use crate::error::Result;
use crate::model::folder_name;
use crate::repo::id::Id;
use crate::repo::snapshot::Snapshot;
use crate::repo::tree::{AccountTree, ChunkRef, FileEntry, MessageEntry, RootTree};
use crate::repo::{Repository, Snapshots};
use crate::report::Failure;
use mailvault_imap::maildir_flags::KeywordTable;
use std::collections::HashMap;

/// A folder of an account (the same name in two accounts is two folders).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FolderKey {
    pub account: String,
    pub folder: String,
}

/// A chunk of a folder's entries, and the snapshots (indexes into
/// [`Catalog::snapshots`]) that hold it there.
#[derive(Debug)]
pub struct Group {
    pub folder: u32,
    pub snapshots: Vec<u32>,
    pub entries: Vec<MessageEntry>,
}

/// The entries of a set of snapshots, by chunk.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Oldest first.
    pub snapshots: Vec<Snapshot>,
    pub folders: Vec<FolderKey>,
    pub groups: Vec<Group>,
    /// Per folder, its `dovecot-keywords` file in the newest snapshot that has one.
    pub keyword_files: Vec<Option<FileEntry>>,
    /// Trees that could not be read: their messages are missing from the catalog.
    pub failures: Vec<Failure>,
}

/// Which snapshots a catalog covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The newest snapshot of each host and source: the mail servers as they are now.
    Latest,
    /// Every snapshot.
    All,
    /// One snapshot (an id prefix, or `latest`).
    One(String),
}

/// The snapshots of `scope`, oldest first, and the snapshot files that cannot be read.
pub fn scoped(repo: &Repository, scope: &Scope) -> Result<(Vec<Snapshot>, Vec<Failure>)> {
    let Snapshots { mut list, damaged } = repo.snapshots()?;
    let failures = (damaged.into_iter())
        .map(|d| Failure::new(d.path, d.error))
        .collect();
    list.sort_by_key(|s| (s.time, s.time_nanos));
    let list = match scope {
        Scope::All => list,
        Scope::One(which) => vec![repo.find_snapshot(which)?],
        Scope::Latest => {
            let mut newest: HashMap<(&str, &str), usize> = HashMap::new();
            for (i, s) in list.iter().enumerate() {
                newest.insert((&s.hostname, &s.source), i);
            }
            let mut keep: Vec<usize> = newest.into_values().collect();
            keep.sort_unstable();
            keep.into_iter().map(|i| list[i].clone()).collect()
        }
    };
    Ok((list, failures))
}

/// What identifies a folder's list of chunks without reading it: its chunk tree's root,
/// or the chunks it holds itself.
#[derive(Clone, PartialEq, Eq, Hash)]
enum ChunksOf {
    Tree(Id),
    Inline(Vec<ChunkRef>),
}

impl Catalog {
    /// Reads the entries of `snapshots` (oldest first).
    pub fn read(repo: &Repository, snapshots: Vec<Snapshot>) -> Catalog {
        let mut c = Catalog {
            snapshots,
            ..Catalog::default()
        };
        let mut folders: HashMap<FolderKey, u32> = HashMap::new();
        // Per folder: the groups of a chunk list already read, and of each chunk.
        let mut lists: HashMap<(u32, ChunksOf), Vec<u32>> = HashMap::new();
        let mut chunks: HashMap<(u32, ChunkRef), u32> = HashMap::new();
        for s in 0..c.snapshots.len() {
            let snap = c.snapshots[s].clone();
            let item = format!("snapshot {}", snap.id.short());
            let root: RootTree = match repo.read_tree(&snap.root) {
                Ok(r) => r,
                Err(e) => {
                    c.failures.push(Failure::new(item, e));
                    continue;
                }
            };
            for acc in &root.accounts {
                let tree: AccountTree = match repo.read_tree(&acc.tree) {
                    Ok(t) => t,
                    Err(e) => {
                        c.failures
                            .push(Failure::new(format!("{item}: {}", acc.name), e));
                        continue;
                    }
                };
                for node in &tree.folders {
                    let key = FolderKey {
                        account: acc.name.clone(),
                        folder: folder_name(node).into_owned(),
                    };
                    let next = folders.len() as u32;
                    let f = *folders.entry(key.clone()).or_insert_with(|| {
                        c.folders.push(key);
                        c.keyword_files.push(None);
                        next
                    });
                    if let Some(k) = node.files.iter().find(|f| f.name == b"dovecot-keywords") {
                        c.keyword_files[f as usize] = Some(k.clone());
                    }
                    let of = match node.chunk_tree {
                        Some(id) => ChunksOf::Tree(id),
                        None => ChunksOf::Inline(node.chunks.clone()),
                    };
                    if let Some(groups) = lists.get(&(f, of.clone())) {
                        for &g in groups {
                            c.groups[g as usize].snapshots.push(s as u32);
                        }
                        continue;
                    }
                    let what = || format!("{item}: {}: {}", acc.name, folder_name(node));
                    let refs = match repo.folder_chunks(node) {
                        Ok(r) => r,
                        Err(e) => {
                            c.failures.push(Failure::new(what(), e));
                            continue;
                        }
                    };
                    let mut mine = Vec::with_capacity(refs.len());
                    for r in refs {
                        if let Some(&g) = chunks.get(&(f, r)) {
                            c.groups[g as usize].snapshots.push(s as u32);
                            mine.push(g);
                            continue;
                        }
                        match repo.read_chunk(&r) {
                            Ok(entries) => {
                                let g = c.groups.len() as u32;
                                c.groups.push(Group {
                                    folder: f,
                                    snapshots: vec![s as u32],
                                    entries,
                                });
                                chunks.insert((f, r), g);
                                mine.push(g);
                            }
                            Err(e) => c.failures.push(Failure::new(what(), e)),
                        }
                    }
                    lists.insert((f, of), mine);
                }
            }
        }
        c
    }

    /// Per folder, the keywords its `dovecot-keywords` names (none when it has none or it
    /// cannot be read).
    pub fn keywords(&self, repo: &Repository) -> Vec<KeywordTable> {
        let mut read: HashMap<Vec<Id>, KeywordTable> = HashMap::new();
        (self.keyword_files.iter())
            .map(|f| {
                let Some(f) = f else {
                    return KeywordTable::new();
                };
                let table = read.entry(f.content.clone()).or_insert_with(|| {
                    crate::model::assemble::assemble_file(repo, f)
                        .map(|d| KeywordTable::parse(&String::from_utf8_lossy(&d)))
                        .unwrap_or_default()
                });
                table.clone()
            })
            .collect()
    }

    /// Every distinct message content the catalog holds, once, with an entry that holds
    /// it (its content blobs and size).
    pub fn contents(&self) -> HashMap<Id, &MessageEntry> {
        let mut out = HashMap::new();
        for g in &self.groups {
            for e in &g.entries {
                out.entry(e.hash).or_insert(e);
            }
        }
        out
    }
}
