//! The search index in the repository: splits (`search/<id>`), each a complete tantivy
//! index of one segment, sealed and content-named like an index file; and their local
//! copies, opened in place.
//!
//! A split's plaintext is `"mvsplit1"`, the length of its header (u32, little endian),
//! the header ([`SplitHeader`], postcard), then the index's files back to back in the
//! header's order. An `index` run writes a split whenever it has gathered
//! [`super::build::IndexOptions::split_docs`] documents, so a killed run keeps every split
//! it finished. A split that merges others names them in `supersedes`; readers skip the
//! splits some present split supersedes, and `prune` deletes them.
//!
//! The local copy (`<cache>/<split id>/`, directories 0700, files 0600: plaintext that only
//! the cache's owner may read) is written under a temporary name and renamed when whole;
//! copies of splits no longer in the repository are removed.

use crate::error::{Error, Result};
use crate::repo::id::Id;
use crate::repo::named::Named;
use crate::repo::{file_id, Repository};
use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Where the splits are kept in the repository.
pub const SEARCH_DIR: &str = "search/";

const MAGIC: &[u8; 8] = b"mvsplit1";

/// Bounds on what a split may claim: a damaged or planted one must not make a reader
/// allocate or write without limit (its seal already keeps out anyone without the key).
const MAX_FILES: usize = 64;

/// What a split holds, before its files.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct SplitHeader {
    /// Who wrote it, and when (Unix seconds).
    pub hostname: String,
    pub time: i64,
    /// Its documents: one per message content.
    pub docs: u64,
    /// The splits whose documents it holds (a merge): they are skipped, then pruned.
    pub supersedes: Vec<Id>,
    /// The index's files, in the order their bytes follow: name and length.
    pub files: Vec<(String, u64)>,
}

/// The path of split `id` in the repository.
pub fn split_path(id: &Id) -> String {
    format!("{SEARCH_DIR}{id}")
}

/// The files of the index in `dir` that a split carries: its `meta.json` and the files of
/// the segments it lists (not lock files, nor files of segments merged away).
pub(crate) fn index_files(index: &tantivy::Index, dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let metas = index
        .searchable_segment_metas()
        .map_err(|e| Error::search("listing a split's segments", e))?;
    let live: Vec<String> = metas.iter().map(|m| m.id().uuid_string() + ".").collect();
    let mut out = vec![("meta.json".to_string(), dir.join("meta.json"))];
    for e in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let e = e.map_err(|e| Error::io(dir, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let ours = name == super::headers::FILE;
        if ours || live.iter().any(|p| name.starts_with(p)) && !name.ends_with(".temp") {
            out.push((name, e.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Seals the index built in `dir` (under `cache`) as a split and stores it; returns its
/// id. `dir` then becomes the split's local copy, which needs no reading back.
pub fn write_split(
    repo: &Repository,
    cache: &Path,
    index: &tantivy::Index,
    dir: tempfile::TempDir,
    header: SplitHeader,
) -> Result<Id> {
    seal_split(repo, index, dir, header)?.write(repo, cache)
}

/// A split sealed and named, not yet in the repository ([`SealedSplit::write`]): what
/// `backup --index` makes while the snapshot is written, and stores once it is saved.
pub(crate) struct SealedSplit {
    id: Id,
    sealed: Vec<u8>,
    dir: tempfile::TempDir,
    header: SplitHeader,
}

impl SealedSplit {
    /// Stores the split and makes its directory the local copy; its id.
    pub(crate) fn write(self, repo: &Repository, cache: &Path) -> Result<Id> {
        crate::store::put_content_named(repo.store(), &split_path(&self.id), &self.sealed)?;
        drop(self.sealed);
        keep_built(cache, &self.id, self.dir, &self.header)?;
        Ok(self.id)
    }
}

/// The index in `dir`, made the local copy of split `id` (`header`, its files listed),
/// unless one is there.
fn keep_built(cache: &Path, id: &Id, dir: tempfile::TempDir, header: &SplitHeader) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let target = cache.join(id.to_string());
    if target.join(HEADER_FILE).exists() {
        return Ok(());
    }
    // The split's files alone (not the writer's lock and bookkeeping files), plaintext
    // for the cache's owner alone: as a copy read from the repository is.
    for e in fs::read_dir(dir.path()).map_err(|e| Error::io(dir.path(), e))? {
        let e = e.map_err(|e| Error::io(dir.path(), e))?;
        let path = e.path();
        let name = e.file_name();
        if header.files.iter().any(|(f, _)| name.to_str() == Some(f)) {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
                .map_err(|e| Error::io(&path, e))?;
        } else {
            fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
        }
    }
    let head = postcard::to_stdvec(header).map_err(|e| Error::corrupt("split", e.to_string()))?;
    private_file(&dir.path().join(HEADER_FILE), &head)?;
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o700))
        .map_err(|e| Error::io(dir.path(), e))?;
    let built = dir.keep();
    if fs::rename(&built, &target).is_err() {
        // Another process put it there first (or cannot be replaced): read back later.
        let _ = fs::remove_dir_all(&built);
    }
    Ok(())
}

/// Seals the index in `dir` as a split, with the files of `header` listed.
pub(crate) fn seal_split(
    repo: &Repository,
    index: &tantivy::Index,
    dir: tempfile::TempDir,
    mut header: SplitHeader,
) -> Result<SealedSplit> {
    let files = index_files(index, dir.path())?;
    let mut bodies = Vec::with_capacity(files.len());
    header.files.clear();
    for (name, path) in files {
        let bytes = fs::read(&path).map_err(|e| Error::io(path, e))?;
        header.files.push((name, bytes.len() as u64));
        bodies.push(bytes);
    }
    let head = postcard::to_stdvec(&header).map_err(|e| Error::corrupt("split", e.to_string()))?;
    let total = bodies.iter().map(Vec::len).sum::<usize>();
    let mut plain = Vec::with_capacity(MAGIC.len() + 4 + head.len() + total);
    plain.extend_from_slice(MAGIC);
    plain.extend_from_slice(&(head.len() as u32).to_le_bytes());
    plain.extend_from_slice(&head);
    for b in bodies {
        plain.extend_from_slice(&b);
    }
    // Compressed as packs are: the term dictionary and the postings shrink by a quarter
    // (12.3% of the mail's bytes to 8.9% on the SpamAssassin corpus).
    let packed = zstd::bulk::compress(&plain, COMPRESSION_LEVEL)
        .map_err(|e| Error::corrupt("compressing a split", e.to_string()))?;
    drop(plain);
    let (id, sealed) = repo.seal_named(Named::Search, &packed);
    Ok(SealedSplit {
        id,
        sealed,
        dir,
        header,
    })
}

/// A split's files: name and bytes.
type SplitFiles<'a> = Vec<(String, &'a [u8])>;

/// A split's header and its files' bytes, from its plaintext; `what` names it.
fn unbundle<'a>(plain: &'a [u8], what: &str) -> Result<(SplitHeader, SplitFiles<'a>)> {
    let bad = |why: &str| Error::corrupt(what, format!("not a search index split: {why}"));
    let rest = plain
        .strip_prefix(&MAGIC[..])
        .ok_or_else(|| bad("no magic"))?;
    let (len, rest) = rest.split_at_checked(4).ok_or_else(|| bad("truncated"))?;
    let len = u32::from_le_bytes(len.try_into().map_err(|_| bad("truncated"))?) as usize;
    let (head, mut body) = rest.split_at_checked(len).ok_or_else(|| bad("truncated"))?;
    let header: SplitHeader = postcard::from_bytes(head).map_err(|e| bad(&e.to_string()))?;
    if header.files.len() > MAX_FILES {
        return Err(bad("too many files"));
    }
    let mut files = Vec::with_capacity(header.files.len());
    for (name, size) in &header.files {
        // A file name is one plain component: never a path out of the split's directory.
        let plain_name = !name.is_empty()
            && name.len() <= 128
            && !name.starts_with('.')
            && name
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c));
        if !plain_name {
            return Err(bad("a file name is not a plain name"));
        }
        let (bytes, rest) = usize::try_from(*size)
            .ok()
            .and_then(|n| body.split_at_checked(n))
            .ok_or_else(|| bad("truncated"))?;
        files.push((name.clone(), bytes));
        body = rest;
    }
    if !body.is_empty() {
        return Err(bad("bytes after its files"));
    }
    Ok((header, files))
}

/// The header of a split's plaintext, checked as a reader checks it (file names, lengths):
/// what `check` and the fuzz target call.
pub fn split_header(plain: &[u8]) -> Result<SplitHeader> {
    unbundle(plain, "split").map(|(h, _)| h)
}

/// Reads split `id` from the repository, opened and checked against its name.
pub fn read_split(repo: &Repository, id: &Id) -> Result<(SplitHeader, Vec<u8>)> {
    let path = split_path(id);
    let opened = repo.open_named_read(Named::Search, &path, repo.store().get(&path)?)?;
    let plain = unpacked(opened, &path)?;
    let (header, _) = unbundle(&plain, &path)?;
    Ok((header, plain))
}

/// zstd's level for splits (packs use the same).
const COMPRESSION_LEVEL: i32 = 3;

/// Decompressed bytes a split may have at most: a bound against a frame that claims
/// more than any index holds (only a holder of the key can seal one).
const MAX_UNPACKED: u64 = 1 << 36;

/// A split's plaintext from what its seal holds: a zstd frame, or (splits written before
/// they were compressed) the plaintext itself.
pub fn unpacked(opened: Vec<u8>, what: &str) -> Result<Vec<u8>> {
    use std::io::Read;
    const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];
    if !opened.starts_with(&ZSTD_MAGIC) {
        return Ok(opened);
    }
    let bad = |e: std::io::Error| Error::corrupt(what, format!("split does not decompress: {e}"));
    let mut out = Vec::new();
    zstd::stream::read::Decoder::new(&opened[..])
        .map_err(bad)?
        .take(MAX_UNPACKED + 1)
        .read_to_end(&mut out)
        .map_err(bad)?;
    if out.len() as u64 > MAX_UNPACKED {
        return Err(Error::corrupt(
            what,
            "split decompresses past any index's size",
        ));
    }
    Ok(out)
}

/// Where the local copies of a repository's splits go: `<cache root>/<repository
/// id>/search` (directories 0700), or a directory of this run alone without a cache root
/// (`--no-cache`).
pub enum SearchCache {
    Kept(PathBuf),
    Temporary(tempfile::TempDir),
}

impl SearchCache {
    /// The search cache of `repo` under `root`.
    pub fn of(root: Option<&Path>, repo: &Repository) -> Result<SearchCache> {
        let id = &repo.config().id;
        // The id is the config's: checked to be hex, so never a path out of the root.
        match root {
            Some(root) if !id.is_empty() && id.bytes().all(|c| c.is_ascii_hexdigit()) => {
                Ok(SearchCache::Kept(root.join(id).join("search")))
            }
            _ => {
                let tmp = tempfile::Builder::new()
                    .prefix("mailvault-search-")
                    .tempdir();
                Ok(SearchCache::Temporary(
                    tmp.map_err(|e| Error::io(std::env::temp_dir(), e))?,
                ))
            }
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            SearchCache::Kept(p) => p,
            SearchCache::Temporary(t) => t.path(),
        }
    }
}

/// The splits in the repository, by id (names that are not ids are left to `check`).
pub fn list_splits(repo: &Repository) -> Result<BTreeSet<Id>> {
    Ok(repo
        .store()
        .list(SEARCH_DIR)?
        .into_iter()
        .filter_map(|o| file_id(&o.path).ok())
        .collect())
}

/// A split copied to the local cache: its directory (a tantivy index) and header.
#[derive(Clone, Debug)]
pub struct LocalSplit {
    pub id: Id,
    pub dir: PathBuf,
    pub header: SplitHeader,
}

const HEADER_FILE: &str = "mailvault-split";

/// Creates `dir` (and its parents) readable by its owner alone.
pub(crate) fn private_dir(dir: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::io(dir, e))
}

fn private_file(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(bytes).map_err(|e| Error::io(path, e))
}

/// Writes the header file of `entries` (content, compact header) into the split being
/// built in `dir` ([`super::headers`]), readable by its owner alone.
pub(crate) fn write_header_file(dir: &Path, entries: Vec<(Id, Vec<u8>)>) -> Result<()> {
    private_file(
        &dir.join(super::headers::FILE),
        &super::headers::encode(entries),
    )
}

/// The local copy of split `id` under `cache`: read from the repository and written out
/// when missing or unreadable.
pub fn local_split(repo: &Repository, cache: &Path, id: &Id) -> Result<LocalSplit> {
    let dir = cache.join(id.to_string());
    if let Some(header) = fs::read(dir.join(HEADER_FILE))
        .ok()
        .and_then(|b| postcard::from_bytes::<SplitHeader>(&b).ok())
    {
        return Ok(LocalSplit {
            id: *id,
            dir,
            header,
        });
    }
    let (header, plain) = read_split(repo, id)?;
    let (_, files) = unbundle(&plain, &split_path(id))?;
    private_dir(cache)?;
    let part = cache.join(format!(".part-{id}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&part);
    private_dir(&part)?;
    for (name, bytes) in files {
        private_file(&part.join(&name), bytes)?;
    }
    let head = postcard::to_stdvec(&header).map_err(|e| Error::corrupt("split", e.to_string()))?;
    private_file(&part.join(HEADER_FILE), &head)?;
    let _ = fs::remove_dir_all(&dir);
    if let Err(e) = fs::rename(&part, &dir) {
        let _ = fs::remove_dir_all(&part);
        // Another process put it there first.
        if !dir.join(HEADER_FILE).exists() {
            return Err(Error::io(dir, e));
        }
    }
    Ok(LocalSplit {
        id: *id,
        dir,
        header,
    })
}

/// The live splits (present, and superseded by no present split), copied to `cache`;
/// copies of splits the repository no longer has are removed.
pub fn live_splits(repo: &Repository, cache: &Path) -> Result<Vec<LocalSplit>> {
    let present = list_splits(repo)?;
    let mut local = Vec::with_capacity(present.len());
    for id in &present {
        match local_split(repo, cache, id) {
            Ok(s) => local.push(s),
            // Deleted since the listing: a prune removed it, superseded.
            Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    if let Ok(rd) = fs::read_dir(cache) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let stale = match Id::from_hex(&name) {
                Some(id) => !present.contains(&id),
                // Left by a killed run (a download, a split being built).
                None => {
                    (name.starts_with(".part-") || name.starts_with(".build-"))
                        && is_stale(&e.path())
                }
            };
            if stale {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
    let superseded: BTreeSet<Id> = local
        .iter()
        .flat_map(|s| s.header.supersedes.iter().copied())
        .collect();
    local.retain(|s| !superseded.contains(&s.id));
    Ok(local)
}

/// Opens the local copy of a split, with the analyzer registered.
pub fn open_split(s: &LocalSplit) -> Result<tantivy::Index> {
    let index = tantivy::Index::open_in_dir(&s.dir)
        .map_err(|e| Error::search(format!("opening split {}", s.id.short()), e))?;
    super::schema::register(&index);
    Ok(index)
}

/// The contents the live splits hold.
pub fn indexed_contents(splits: &[LocalSplit]) -> Result<HashSet<Id>> {
    let mut out = HashSet::new();
    for s in splits {
        out.extend(split_contents(s)?);
    }
    Ok(out)
}

/// The contents split `s` holds: the terms of its `hash` column.
pub(crate) fn split_contents(s: &LocalSplit) -> Result<Vec<Id>> {
    let index = open_split(s)?;
    let reader = index
        .reader()
        .map_err(|e| Error::search("opening a split", e))?;
    let mut out = Vec::new();
    for seg in reader.searcher().segment_readers() {
        let column = seg
            .fast_fields()
            .bytes("hash")
            .map_err(|e| Error::search("reading a split's contents", e))?;
        let Some(column) = column else { continue };
        let mut buf = Vec::with_capacity(32);
        for ord in 0..column.num_terms() as u64 {
            buf.clear();
            column
                .ord_to_bytes(ord, &mut buf)
                .map_err(|e| Error::search("reading a split's contents", e))?;
            if let Ok(h) = <[u8; 32]>::try_from(&buf[..]) {
                out.push(Id(h));
            }
        }
    }
    Ok(out)
}

/// Whether a temporary file or directory was left an hour ago or more (by a killed run).
pub(crate) fn is_stale(path: &Path) -> bool {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age.as_secs() > 3600)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_split_is_unpacked_from_a_zstd_frame_or_taken_as_it_is() {
        let plain = b"mvsplit1 and the rest of an old, uncompressed split".to_vec();
        assert_eq!(unpacked(plain.clone(), "old").unwrap(), plain);
        let packed = zstd::bulk::compress(&plain, COMPRESSION_LEVEL).unwrap();
        assert_ne!(packed, plain);
        assert_eq!(unpacked(packed.clone(), "new").unwrap(), plain);
        let mut cut = packed;
        cut.truncate(cut.len() - 3);
        assert!(unpacked(cut, "cut").is_err(), "a cut frame is damage");
    }

    #[test]
    fn a_bundle_round_trips_and_refuses_bad_names_and_lengths() {
        let header = SplitHeader {
            hostname: "h".into(),
            time: 1,
            docs: 2,
            supersedes: vec![Id([7; 32])],
            files: vec![("a.idx".into(), 3), ("meta.json".into(), 2)],
        };
        let bundle = |h: &SplitHeader, body: &[u8]| {
            let head = postcard::to_stdvec(h).unwrap();
            let mut p = MAGIC.to_vec();
            p.extend_from_slice(&(head.len() as u32).to_le_bytes());
            p.extend_from_slice(&head);
            p.extend_from_slice(body);
            p
        };
        let p = bundle(&header, b"abcde");
        let (h, files) = unbundle(&p, "x").unwrap();
        assert_eq!(h, header);
        assert_eq!(
            files,
            vec![
                ("a.idx".to_string(), &b"abc"[..]),
                ("meta.json".to_string(), &b"de"[..])
            ]
        );
        assert!(unbundle(&bundle(&header, b"abcd"), "x").is_err(), "short");
        assert!(unbundle(&bundle(&header, b"abcdef"), "x").is_err(), "long");
        for bad in ["../x", "a/b", ".hidden", ""] {
            let mut h = header.clone();
            h.files[0].0 = bad.into();
            assert!(unbundle(&bundle(&h, b"abcde"), "x").is_err(), "{bad}");
        }
    }
}
