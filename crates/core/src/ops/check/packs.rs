//! The checks of packs and of the named files (index, dictionaries, keys, snapshots):
//! every file's bytes against its name, every pack header against the index, and with
//! `read_data` every blob against its id.

use crate::error::Result;
use crate::ops::check::damage::{
    CheckError, DamageKind, State, REPAIR_BOTH, REPAIR_INDEX, REPAIR_SNAPSHOTS,
};
use crate::repo::compress::{self, Codec};
use crate::repo::format::Version;
use crate::repo::id::Id;
use crate::repo::index::Location;
use crate::repo::pack::{self, PackEntry};
use crate::repo::{file_id, lock, Repository};
use crate::store::Store;
use rayon::prelude::*;
use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;

/// Checks every pack the index names and every pack in `data/`; fills the state's bad
/// blobs. Returns the number of files in `data/`.
pub(crate) fn check_packs(
    repo: &Repository,
    st: &State,
    read_data: bool,
    warnings: &mut Vec<String>,
) -> Result<u64> {
    let store = repo.store();
    let index = repo.index();
    index.will_need();
    let by_pack = index.by_pack();
    // A pack's blobs, as the index has them (one pack's at a time in memory).
    let blobs_of = |pack: &Id| -> Vec<(Id, Location)> {
        (index.pack_position_of(pack)).map_or_else(Vec::new, |p| by_pack.blobs(p).collect())
    };
    let packs = store.list("data/")?;
    let present: HashSet<Id> = packs.iter().filter_map(|p| file_id(&p.path).ok()).collect();
    for pack_id in index.packs() {
        if !present.contains(pack_id) {
            let path = pack::pack_path(pack_id);
            let blobs = blobs_of(pack_id);
            let i = st.error(
                DamageKind::Pack,
                Some(&path),
                "pack is missing from the repository",
            );
            st.set_repair(i, REPAIR_BOTH);
            for (id, _) in &blobs {
                st.lose(i, id, None);
            }
        }
    }
    let unindexed: Vec<&str> = packs
        .iter()
        .filter(|p| {
            file_id(&p.path).is_ok_and(|id| {
                !index.has_pack(&id) && !repo.migration_leftover_pack(&p.path, p.size)
            })
        })
        .map(|p| p.path.as_str())
        .collect();
    // A file in data/ that no index lists is what a killed backup leaves, or something that
    // does not belong: it is read and verified (as a backup would before reusing it), so
    // the advice fits what it is.
    let verdicts: Vec<String> = unindexed
        .par_iter()
        .map(|path| match repo.verify_pack(path, &[repo.version()]) {
            Ok(v) if v.name_matches && v.bad.is_empty() => format!(
                "{path}: pack not in any index (left by an interrupted backup or prune; the next backup reuses it when a killed backup left its lock, `mailvault prune` deletes it, or run `{REPAIR_INDEX}` to index it now)"
            ),
            verdict => {
                let why = match verdict {
                    Ok(v) if !v.name_matches => "its bytes do not match its name".to_string(),
                    Ok(v) => v.bad.first().map_or_else(String::new, |(_, e)| e.to_string()),
                    Err(e) => e.to_string(),
                };
                format!(
                    "{path}: not a pack of this repository, and no index lists it ({why}): it was copied into data/ or damaged, not left by a backup; no snapshot needs it. `mailvault prune` deletes it: move it out of the repository first if it is yours"
                )
            }
        })
        .collect();
    warnings.extend(verdicts);
    for p in &packs {
        if file_id(&p.path).is_err() {
            warnings.push(format!(
                "{}: not a repository file (its name is not a pack id): it does not belong in data/; move it out of the repository",
                p.path
            ));
        }
    }
    packs.par_iter().for_each(|p| {
        if let Ok(id) = file_id(&p.path) {
            if index.has_pack(&id) {
                check_pack(repo, st, &p.path, &id, &blobs_of(&id), read_data);
            }
        }
    });
    Ok(packs.len() as u64)
}

/// Reads a content-named file and checks it against its name
/// ([`Repository::verify_name`]): its bytes, or `None` for a leftover of an unfinished
/// migration (a file of the other format, skipped); on failure the number of the error
/// recorded.
pub(crate) fn verify_named_file(
    repo: &Repository,
    st: &State,
    path: &str,
    kind: DamageKind,
) -> std::result::Result<Option<Vec<u8>>, usize> {
    let data = match repo.store().get(path) {
        Ok(d) => d,
        Err(e) => return Err(st.error(kind, Some(path), e)),
    };
    let verdict = repo.verify_name(path, &data);
    if verdict.as_ref().is_err_and(|e| repo.migration_leftover(e)) {
        return Ok(None);
    }
    st.files.fetch_add(1, Relaxed);
    st.bytes.fetch_add(data.len() as u64, Relaxed);
    match verdict {
        Ok(()) => Ok(Some(data)),
        Err(e) => Err(st.error(kind, Some(path), e)),
    }
}

/// Checks one pack: its bytes against its name, its header against the index, the
/// dictionaries its blobs need and (with `read_data`, or when it is damaged) every blob.
fn check_pack(
    repo: &Repository,
    st: &State,
    path: &str,
    id: &Id,
    indexed: &[(Id, Location)],
    read_data: bool,
) {
    let lose_all = |idx: usize| {
        for (b, _) in indexed {
            st.lose(idx, b, None);
        }
    };
    let (bytes, damaged) = match verify_named_file(repo, st, path, DamageKind::Pack) {
        Ok(Some(b)) => (b, None),
        // Packs are named by their bytes' hash whatever their format: never a leftover.
        Ok(None) => return,
        Err(idx) => match repo.store().get(path) {
            // Damaged: find out which of its blobs are lost by reading each.
            Ok(b) => (b, Some(idx)),
            Err(_) => return lose_all(idx),
        },
    };
    if let Some(i) = damaged {
        st.set_repair(i, REPAIR_BOTH);
    }
    let (version, mut header): (_, Vec<PackEntry>) =
        match pack::header_of(&bytes, repo.key(), path, repo.pack_versions()) {
            Ok(h) => h,
            Err(e) => {
                let idx = damaged.unwrap_or_else(|| st.error(DamageKind::Pack, Some(path), e));
                st.set_repair(idx, REPAIR_BOTH);
                return lose_all(idx);
            }
        };
    // The index says which format the pack is in; its header must agree.
    if let Some((_, loc)) = indexed.first() {
        let listed = repo.index().pack_version(loc.pack);
        if listed != version {
            let idx = damaged.unwrap_or_else(|| {
                st.error(
                    DamageKind::Index,
                    Some(path),
                    format!("the index lists it as a format-{listed} pack; it is format {version}"),
                )
            });
            st.set_repair(idx, REPAIR_INDEX);
            return lose_all(idx);
        }
    }
    let p = PackCheck {
        repo,
        st,
        path,
        indexed,
        bytes,
        damaged,
    };
    p.compare_header(id, &mut header);
    if damaged.is_none() {
        p.check_dictionaries();
    }
    if read_data || damaged.is_some() {
        p.verify_blobs(version);
    }
}

/// One pack being checked: its bytes, and the error it is damaged with, if it is.
struct PackCheck<'a> {
    repo: &'a Repository,
    st: &'a State,
    path: &'a str,
    indexed: &'a [(Id, Location)],
    bytes: Vec<u8>,
    damaged: Option<usize>,
}

impl PackCheck<'_> {
    /// The pack's error for `what` (its damage, or one made the first time).
    fn group(&self, what: &str, error: &str, kind: DamageKind, repair: &str) -> usize {
        self.damaged.unwrap_or_else(|| {
            self.st.group(format!("{what}:{}", self.path), || {
                let mut e = CheckError::new(kind, Some(self.path), error);
                e.repair = Some(repair.into());
                e
            })
        })
    }

    fn sealed_of(&self, loc: &Location) -> Option<&[u8]> {
        let start = loc.offset as usize;
        self.bytes.get(start..start + loc.stored_len as usize)
    }

    /// Every index entry of the pack must match its header.
    /// (Sorted by id in place and searched: a map of a pack's 40,000 entries was 10 MB of a
    /// check's peak.)
    fn compare_header(&self, id: &Id, header: &mut [PackEntry]) {
        header.sort_unstable_by_key(|e| e.id.0);
        for (blob, loc) in self.indexed {
            let from = header.partition_point(|e| e.id.0 < blob.0);
            let mut listed = header[from..].iter().take_while(|e| e.id == *blob);
            let ok = listed.any(|e| {
                e.offset == loc.offset
                    && e.stored_len == loc.stored_len
                    && e.raw_len == loc.raw_len
                    && e.codec == loc.codec
            });
            if !ok {
                let i = self.group(
                    "header",
                    &format!(
                        "index entries do not match the header of pack {}",
                        id.short()
                    ),
                    DamageKind::Index,
                    REPAIR_INDEX,
                );
                self.st.lose(
                    i,
                    blob,
                    Some(format!(
                        "blob {}: index entry does not match the pack header",
                        blob.short()
                    )),
                );
            }
        }
    }

    /// Blobs compressed with a dictionary: the dictionary their frame names must be there.
    /// Their first bytes are decrypted without the tag check, which the pack's hash makes
    /// unnecessary (and which `read_data` does anyway).
    fn check_dictionaries(&self) {
        let (repo, st, path) = (self.repo, self.st, self.path);
        for (blob, loc) in self.indexed {
            if loc.codec != Codec::ZstdDict {
                continue;
            }
            let Some(sealed) = self.sealed_of(loc) else {
                continue;
            };
            let what = format!("blob {} in {path}", blob.short());
            let dict = repo
                .key()
                .peek_unauthenticated(sealed, compress::FRAME_HEADER_MAX, &what)
                .ok()
                .and_then(|start| compress::frame_dictionary(&start));
            match dict {
                Some(d) if repo.dictionaries().has(d) => {
                    st.dict_blobs.fetch_add(1, Relaxed);
                }
                Some(d) => {
                    let i = st.group(format!("dict:{d:08x}"), || {
                        let mut e = CheckError::new(
                            DamageKind::Dictionary,
                            None,
                            format!("zstd dictionary {d:08x} is missing from dicts/ (no dictionary file holds it)"),
                        );
                        e.repair = Some(REPAIR_SNAPSHOTS.into());
                        e
                    });
                    st.lose(i, blob, None);
                }
                None => {
                    let i = self.group(
                        "nodict",
                        "blobs stored as dictionary-compressed name no dictionary",
                        DamageKind::Pack,
                        REPAIR_BOTH,
                    );
                    st.lose(
                        i,
                        blob,
                        Some(format!("{what}: zstd frame names no dictionary")),
                    );
                }
            }
        }
    }

    /// Decrypts, decompresses and verifies every blob not already known to be lost.
    fn verify_blobs(&self, version: Version) {
        let st = self.st;
        let bad_already: HashSet<Id> = {
            let bad = lock(&st.bad_blobs);
            self.indexed
                .iter()
                .filter(|(b, _)| bad.contains_key(b))
                .map(|(b, _)| *b)
                .collect()
        };
        for (blob, loc) in self.indexed {
            if bad_already.contains(blob) {
                continue;
            }
            let Some(sealed) = self.sealed_of(loc) else {
                let i = self.group(
                    "blobs",
                    "blobs do not verify",
                    DamageKind::Pack,
                    REPAIR_BOTH,
                );
                st.lose(
                    i,
                    blob,
                    Some(format!("blob {}: past the end of the pack", blob.short())),
                );
                continue;
            };
            match self.repo.decode_blob(blob, loc, version, sealed, self.path) {
                Ok(_) => {
                    st.verified.fetch_add(1, Relaxed);
                }
                Err(e) => {
                    let i = self.group(
                        "blobs",
                        "blobs do not verify",
                        DamageKind::Pack,
                        REPAIR_BOTH,
                    );
                    st.lose(i, blob, Some(e.to_string()));
                }
            }
        }
    }
}
