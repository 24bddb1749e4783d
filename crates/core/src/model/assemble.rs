//! A message or file put back together from its blobs, checked against its size and,
//! where the snapshot has one, its whole-content hash.

use crate::error::{Error, Result};
use crate::repo::id::Id;
use crate::repo::tree::FileEntry;
use crate::repo::Repository;

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
        for id in content {
            repo.read_blob(id)?;
        }
        return Err(Error::corrupt(
            "message",
            "reassembled content does not match its hash",
        ));
    }
    Ok(data)
}
