//! Verification of a repository.
//!
//! `check` reads every repository file and compares it with its name (packs, index files
//! and snapshots are named by the BLAKE3 of their bytes), so any flipped byte anywhere is
//! found and the file named; it opens every pack header and compares it with the index,
//! opens every snapshot and walks every tree, and names the messages that damaged or
//! missing blobs belong to. With `read_data` it also decrypts, decompresses and verifies
//! every blob against its id.

use crate::error::{Error, Result};
use crate::id::Id;
use crate::index::Location;
use crate::pack::{self, PackEntry};
use crate::repo::{file_id, lock, Repository};
use crate::report::Failure;
use crate::tree::{AccountTree, RootTree};
use rayon::prelude::*;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Clone, Debug, Default)]
pub struct CheckOptions {
    /// Decrypt and verify every blob too.
    pub read_data: bool,
    /// Worker threads; 0 means one per core.
    pub jobs: usize,
}

/// One problem found.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct CheckError {
    /// The repository file concerned, if any.
    pub file: Option<String>,
    /// The blob concerned, if any.
    pub blob: Option<String>,
    pub error: String,
    /// Messages (snapshot, account, folder, key) whose content is affected.
    pub messages: Vec<String>,
}

#[derive(Clone, Debug, Serialize, Default)]
pub struct CheckReport {
    pub files_checked: u64,
    pub bytes_checked: u64,
    pub packs: u64,
    pub blobs: u64,
    pub blobs_verified: u64,
    pub snapshots: u64,
    pub messages: u64,
    pub errors: Vec<CheckError>,
    /// Things that are not damage: packs a killed backup left, unreadable-but-unused files.
    pub warnings: Vec<String>,
    pub elapsed_secs: f64,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

struct State {
    errors: Mutex<Vec<CheckError>>,
    /// Blobs that cannot be read back, with the file they were in.
    bad_blobs: Mutex<HashMap<Id, usize>>,
    files: AtomicU64,
    bytes: AtomicU64,
    verified: AtomicU64,
}

impl State {
    fn error(&self, file: Option<&str>, blob: Option<&Id>, error: impl std::fmt::Display) -> usize {
        let mut errs = lock(&self.errors);
        errs.push(CheckError {
            file: file.map(str::to_string),
            blob: blob.map(Id::to_hex),
            error: error.to_string(),
            messages: Vec::new(),
        });
        errs.len() - 1
    }
}

/// Checks the repository.
pub fn check(repo: &Repository, opts: &CheckOptions) -> Result<CheckReport> {
    let started = Instant::now();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.jobs)
        .build()
        .map_err(|e| {
            Error::InvalidInput(format!("cannot start {} worker threads: {e}", opts.jobs))
        })?;
    pool.install(|| check_inner(repo, opts, started))
}

fn check_inner(repo: &Repository, opts: &CheckOptions, started: Instant) -> Result<CheckReport> {
    let st = State {
        errors: Mutex::new(Vec::new()),
        bad_blobs: Mutex::new(HashMap::new()),
        files: AtomicU64::new(0),
        bytes: AtomicU64::new(0),
        verified: AtomicU64::new(0),
    };
    let mut warnings = Vec::new();
    let store = repo.store();
    let index = repo.index();

    // Index files: the ones that did not open, and every one's bytes against its name.
    for (path, e) in repo.index_errors() {
        st.error(Some(path), None, e);
    }
    let mut index_files = store.list("index/")?;
    index_files.extend(store.list("dicts/")?);
    index_files.par_iter().for_each(|f| {
        let _ = verify_named_file(repo, &st, &f.path);
    });

    // Packs: bytes against name, header against the index, blobs when asked.
    let mut by_pack: HashMap<Id, Vec<(Id, Location)>> = HashMap::new();
    for (id, loc) in index.iter() {
        by_pack
            .entry(index.pack_id(loc.pack))
            .or_default()
            .push((*id, *loc));
    }
    let packs = store.list("data/")?;
    let present: HashSet<Id> = packs.iter().filter_map(|p| file_id(&p.path).ok()).collect();
    for pack_id in index.packs() {
        if !present.contains(pack_id) {
            let path = pack::pack_path(pack_id);
            let idx = st.error(Some(&path), None, "pack is missing from the repository");
            let mut bad = lock(&st.bad_blobs);
            for (id, _) in by_pack.get(pack_id).map(Vec::as_slice).unwrap_or_default() {
                bad.insert(*id, idx);
            }
        }
    }
    for p in &packs {
        match file_id(&p.path) {
            Ok(id) if !index.has_pack(&id) => warnings.push(format!(
                "{}: pack not in any index (left by an interrupted backup; the next backup reuses it when that backup left its record in writers/)",
                p.path
            )),
            Ok(_) => {}
            Err(_) => warnings.push(format!("{}: not a repository file", p.path)),
        }
    }
    packs.par_iter().for_each(|p| {
        if let Ok(id) = file_id(&p.path) {
            if index.has_pack(&id) {
                check_pack(
                    repo,
                    &st,
                    &p.path,
                    &id,
                    by_pack.get(&id).map(Vec::as_slice).unwrap_or_default(),
                    opts.read_data,
                );
            }
        }
    });

    // Snapshots and trees.
    let snaps = store.list("snapshots/")?;
    snaps.par_iter().for_each(|f| {
        let _ = verify_named_file(repo, &st, &f.path);
    });
    let mut snapshots = Vec::new();
    for f in &snaps {
        match repo.snapshots_one(&f.path) {
            Ok(s) => snapshots.push(s),
            Err(e) => {
                st.error(Some(&f.path), None, e);
            }
        }
    }
    let messages = AtomicU64::new(0);
    let seen_chunks = Mutex::new(HashSet::new());
    let bad = std::mem::take(&mut *lock(&st.bad_blobs));
    let affected: Mutex<Vec<(usize, String)>> = Mutex::new(Vec::new());
    let report_blob = |id: &Id, what: &str| {
        if let Some(&i) = bad.get(id) {
            lock(&affected).push((i, what.to_string()));
        } else if !index.contains(id) {
            st.error(
                None,
                Some(id),
                format!("blob is missing from the index; needed by {what}"),
            );
        }
    };
    for s in &snapshots {
        let sname = format!("snapshot {}", s.id.short());
        let root: RootTree = match repo.read_tree(&s.root) {
            Ok(r) => r,
            Err(e) => {
                report_blob(&s.root, &sname);
                st.error(None, Some(&s.root), format!("root tree of {sname}: {e}"));
                continue;
            }
        };
        for acc in &root.accounts {
            let aname = format!("{sname} account {}", acc.name);
            let t: AccountTree = match repo.read_tree(&acc.tree) {
                Ok(t) => t,
                Err(e) => {
                    report_blob(&acc.tree, &aname);
                    st.error(None, Some(&acc.tree), format!("tree of {aname}: {e}"));
                    continue;
                }
            };
            t.folders.par_iter().for_each(|f| {
                let fname = format!("{aname} folder {}", f.name);
                for file in &f.files {
                    for id in &file.content {
                        report_blob(
                            id,
                            &format!("{fname} file {}", String::from_utf8_lossy(&file.name)),
                        );
                    }
                }
                for c in &f.chunks {
                    if !lock(&seen_chunks).insert(*c) {
                        continue;
                    }
                    let chunk = match repo.read_chunk(c) {
                        Ok(ch) => ch,
                        Err(e) => {
                            let what = format!("{fname} (message list)");
                            report_blob(&c.entries, &what);
                            report_blob(&c.names, &what);
                            st.error(
                                None,
                                Some(&c.entries),
                                format!("message list of {fname}: {e}"),
                            );
                            continue;
                        }
                    };
                    for m in &chunk {
                        messages.fetch_add(1, Relaxed);
                        let mname = format!("{fname} message {}", String::from_utf8_lossy(&m.key));
                        let mut raw = 0u64;
                        for id in &m.content {
                            report_blob(id, &mname);
                            raw += index.get(id).map_or(0, |l| u64::from(l.raw_len));
                        }
                        if m.content.iter().all(|id| index.contains(id)) && raw != m.size {
                            st.error(
                                None,
                                None,
                                format!(
                                    "{mname}: blobs add up to {raw} bytes, message has {}",
                                    m.size
                                ),
                            );
                        }
                    }
                }
            });
        }
    }
    let mut errors = std::mem::take(&mut *lock(&st.errors));
    for (i, m) in std::mem::take(&mut *lock(&affected)) {
        errors[i].messages.push(m);
    }
    for e in &mut errors {
        e.messages.sort();
        e.messages.dedup();
    }
    Ok(CheckReport {
        files_checked: st.files.load(Relaxed),
        bytes_checked: st.bytes.load(Relaxed),
        packs: packs.len() as u64,
        blobs: index.len() as u64,
        blobs_verified: st.verified.load(Relaxed),
        snapshots: snapshots.len() as u64,
        messages: messages.load(Relaxed),
        errors,
        warnings,
        elapsed_secs: started.elapsed().as_secs_f64(),
    })
}

/// Reads a content-named file and compares its BLAKE3 with its name; on failure returns
/// the number of the error recorded.
fn verify_named_file(
    repo: &Repository,
    st: &State,
    path: &str,
) -> std::result::Result<Vec<u8>, usize> {
    let data = match repo.store().get(path) {
        Ok(d) => d,
        Err(e) => return Err(st.error(Some(path), None, e)),
    };
    st.files.fetch_add(1, Relaxed);
    st.bytes.fetch_add(data.len() as u64, Relaxed);
    match file_id(path) {
        Ok(id) if id == Id::of_file(&data) => Ok(data),
        Ok(_) => Err(st.error(
            Some(path),
            None,
            "content does not match its name: the file is damaged",
        )),
        Err(e) => Err(st.error(Some(path), None, e)),
    }
}

fn check_pack(
    repo: &Repository,
    st: &State,
    path: &str,
    id: &Id,
    indexed: &[(Id, Location)],
    read_data: bool,
) {
    let mark_all = |idx: usize| {
        let mut bad = lock(&st.bad_blobs);
        for (b, _) in indexed {
            bad.insert(*b, idx);
        }
    };
    let bytes = match verify_named_file(repo, st, path) {
        Ok(b) => b,
        Err(idx) => return mark_all(idx),
    };
    let header: Vec<PackEntry> = match pack::header_of(&bytes, repo.key(), path) {
        Ok(h) => h,
        Err(e) => return mark_all(st.error(Some(path), None, e)),
    };
    let in_header: HashMap<Id, &PackEntry> = header.iter().map(|e| (e.id, e)).collect();
    for (blob, loc) in indexed {
        let ok = in_header.get(blob).is_some_and(|e| {
            e.offset == loc.offset
                && e.stored_len == loc.stored_len
                && e.raw_len == loc.raw_len
                && e.codec == loc.codec
        });
        if !ok {
            let idx = st.error(
                Some(path),
                Some(blob),
                format!(
                    "index entry does not match the header of pack {}",
                    id.short()
                ),
            );
            lock(&st.bad_blobs).insert(*blob, idx);
        }
    }
    if read_data {
        for (blob, loc) in indexed {
            let range = loc.offset as usize..(loc.offset as usize + loc.stored_len as usize);
            let Some(sealed) = bytes.get(range) else {
                continue;
            };
            match repo.decode_blob(blob, loc, sealed, path) {
                Ok(_) => {
                    st.verified.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    let idx = st.error(Some(path), Some(blob), e);
                    lock(&st.bad_blobs).insert(*blob, idx);
                }
            }
        }
    }
}

/// Turns a report's errors into failures for a generic listing.
pub fn failures(r: &CheckReport) -> Vec<Failure> {
    r.errors
        .iter()
        .map(|e| {
            Failure::new(
                e.file
                    .clone()
                    .or_else(|| e.blob.clone())
                    .unwrap_or_default(),
                &e.error,
            )
        })
        .collect()
}
