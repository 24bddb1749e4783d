//! A message or file put back together from its blobs (or kept in them, for a target
//! that takes a message in pieces), checked against its size and, where the snapshot has
//! one, its whole-content hash.

use crate::error::{Error, Result};
use crate::repo::id::Id;
use crate::repo::tree::{FileEntry, FolderNode};
use crate::repo::Repository;

/// The file `name` of folder `node` (`dovecot-uidlist`, `dovecot-keywords`...), read
/// whole, if the folder has one.
pub fn folder_file(repo: &Repository, node: &FolderNode, name: &[u8]) -> Result<Option<Vec<u8>>> {
    match node.files.iter().find(|f| f.name == name) {
        Some(f) => assemble_file(repo, f).map(Some),
        None => Ok(None),
    }
}

/// Reads a whole file of a folder (its content lists too, for a large one).
pub fn assemble_file(repo: &Repository, f: &FileEntry) -> Result<Vec<u8>> {
    assemble(repo, &repo.file_content(f)?, f.size, None)
}

/// Reassembles content from its blobs (each read and checked), and checks the whole
/// against `size` and, if given, `hash`.
pub fn assemble(
    repo: &Repository,
    content: &[Id],
    size: u64,
    hash: Option<&Id>,
) -> Result<Vec<u8>> {
    // With a whole-content hash to check, the blobs need not be hashed one by one too.
    assemble_by(repo, content, size, hash, |id| match hash {
        Some(_) => repo.read_blob_unverified(id),
        None => repo.read_blob(id),
    })
}

/// [`assemble`] with the blobs given by `blob` (hashed against their ids or not: with
/// `hash`, the whole is checked); if the whole does not match, the blobs are read again
/// verified to name the culprit.
pub(crate) fn assemble_by<B: AsRef<[u8]>>(
    repo: &Repository,
    content: &[Id],
    size: u64,
    hash: Option<&Id>,
    blob: impl Fn(&Id) -> Result<B>,
) -> Result<Vec<u8>> {
    let mut data = Vec::with_capacity(size as usize);
    for id in content {
        data.extend_from_slice(blob(id)?.as_ref());
    }
    if data.len() as u64 != size || hash.is_some_and(|h| repo.key().blob_id(&data) != *h) {
        return Err(culprit(repo, content));
    }
    Ok(data)
}

/// The blobs of content given by `blob` (as [`assemble_by`] takes them), not put
/// together: checked as [`assemble_by`] checks the whole, against `size` and `hash`,
/// the same keyed hash fed piece by piece (it is the same digest).
pub(crate) fn checked_parts<B: AsRef<[u8]>>(
    repo: &Repository,
    content: &[Id],
    size: u64,
    hash: &Id,
    blob: impl Fn(&Id) -> Result<B>,
) -> Result<Vec<B>> {
    let mut parts = Vec::with_capacity(content.len());
    let mut hasher = AlignedHasher::new(repo.key().hasher());
    for id in content {
        let b = blob(id)?;
        hasher.update(b.as_ref());
        parts.push(b);
    }
    let (len, digest) = hasher.finalize();
    if len != size || Id(*digest.as_bytes()) != *hash {
        return Err(culprit(repo, content));
    }
    Ok(parts)
}

/// BLAKE3 fed in pieces at its full speed. BLAKE3 hashes many 1 KiB chunks at once
/// (sixteen with AVX-512) only over input that starts at a multiple of that run from the
/// start of the message; a piece that starts elsewhere (the rest of a message after its
/// trace prefix) is hashed a chunk or a few at a time until the position is aligned
/// again, which doubled the hash's cost on the IMAP restore. So whole runs of a piece go
/// straight to the hasher while the position is aligned, and the ends of pieces are
/// gathered in a small buffer until they make a run.
struct AlignedHasher {
    hasher: blake3::Hasher,
    stage: Vec<u8>,
    len: u64,
}

impl AlignedHasher {
    /// The run: sixteen chunks.
    const RUN: usize = 16 << 10;

    fn new(hasher: blake3::Hasher) -> Self {
        AlignedHasher {
            hasher,
            stage: Vec::new(),
            len: 0,
        }
    }

    fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if !self.stage.is_empty() {
            let take = data.len().min(Self::RUN - self.stage.len());
            self.stage.extend_from_slice(&data[..take]);
            data = &data[take..];
            if self.stage.len() < Self::RUN {
                return;
            }
            self.hasher.update(&self.stage);
            self.stage.clear();
        }
        let whole = data.len() / Self::RUN * Self::RUN;
        self.hasher.update(&data[..whole]);
        self.stage.extend_from_slice(&data[whole..]);
    }

    /// Bytes fed and the digest.
    fn finalize(mut self) -> (u64, blake3::Hash) {
        self.hasher.update(&self.stage);
        (self.len, self.hasher.finalize())
    }
}

/// The error for content whose whole does not match: the blobs read again, each checked
/// against its id, to name the one at fault.
fn culprit(repo: &Repository, content: &[Id]) -> Error {
    for id in content {
        if let Err(e) = repo.read_blob(id) {
            return e;
        }
    }
    Error::corrupt("message", "reassembled content does not match its hash")
}

#[cfg(test)]
mod tests {
    use super::{checked_parts, AlignedHasher};
    use crate::repo::id::Id;
    use proptest::prelude::*;

    /// A message kept in its blobs passes only with its size and whole hash; the pieces
    /// are the blobs, in order.
    #[test]
    fn parts_are_checked_as_the_whole() {
        let (a, b) = (b"Return-Path: <a@x>\n".to_vec(), vec![b'z'; 40_000]);
        let (repo, ids) = crate::model::reader::tests::repo_with(&[&a, &b]);
        let whole = [a.clone(), b.clone()].concat();
        let hash = repo.key().blob_id(&whole);
        let size = whole.len() as u64;
        let check =
            |size: u64, hash: &Id| checked_parts(&repo, &ids, size, hash, |id| repo.read_blob(id));
        let parts = check(size, &hash).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(parts, vec![a.clone(), b]);
        assert!(check(size - 1, &hash).is_err(), "a wrong size passed");
        let other = repo.key().blob_id(&a);
        assert!(check(size, &other).is_err(), "a wrong hash passed");
    }

    proptest! {
        /// Fed in pieces cut anywhere, the same digest and length as the whole.
        #[test]
        fn aligned_hasher_is_the_hash_of_the_whole(
            len in 0usize..80_000,
            cuts in proptest::collection::vec(0usize..80_000, 0..6),
        ) {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(len)).collect();
            cuts.push(0);
            cuts.push(len);
            cuts.sort_unstable();
            let mut h = AlignedHasher::new(blake3::Hasher::new());
            for w in cuts.windows(2) {
                h.update(&data[w[0]..w[1]]);
            }
            let (n, digest) = h.finalize();
            prop_assert_eq!(n, len as u64);
            prop_assert_eq!(digest, blake3::hash(&data));
        }
    }
}
