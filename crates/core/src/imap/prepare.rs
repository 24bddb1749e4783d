//! Getting messages ready for the wire: a restore batch is read from the repository,
//! checked and converted to CRLF into one reusable buffer, in a single pass per message.
//!
//! [`crlf_into`] is the LF -> CRLF conversion of [`mailvault_imap::to_crlf`] (same rules:
//! every LF not preceded by CR becomes CRLF, nothing else changes), but it appends to a
//! buffer, takes the byte before its input (a message is converted blob by blob, and a
//! CR may end one blob while the LF starts the next), and finds line feeds eight bytes at
//! a time, which makes it about six times faster: it was the restore's largest client-side
//! cost. [`read_message_crlf`] converts a message blob by blob straight into the batch
//! buffer. [`BlobCache`] keeps recently opened blobs: the same message delivered to several
//! mailboxes is one blob in the repository, and decrypting and decompressing it again for
//! every mailbox was a third of the restore's client CPU. Every blob is checked against
//! its id (keyed BLAKE3) when it is read, so a cached blob is not hashed again; the
//! message is the checked blobs in the order its (authenticated) tree lists them, and its
//! size is checked. Hashing each blob once instead of every whole message once per
//! mailbox, and no longer assembling multi-blob messages in a scratch buffer first, cut
//! the client's CPU by about 7% on the `large` preset (bench/IMAP.md).

use crate::repo::id::Id;
use crate::repo::tree::MessageEntry;
use crate::repo::{lock, Repository};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::{Arc, Mutex};

const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
const LFS: u64 = 0x0a0a_0a0a_0a0a_0a0a;

/// Appends `data` to `out`, every LF not preceded by CR turned into CRLF. `prev` is the
/// byte just before `data` in the message (0 at its start).
pub fn crlf_into(out: &mut Vec<u8>, data: &[u8], prev: u8) {
    out.reserve(data.len() + data.len() / 32 + 16);
    let mut copied = 0;
    let before = |i: usize| if i == 0 { prev } else { data[i - 1] };
    let at_lf = |out: &mut Vec<u8>, i: usize, copied: &mut usize| {
        if before(i) != b'\r' {
            out.extend_from_slice(&data[*copied..i]);
            out.extend_from_slice(b"\r\n");
            *copied = i + 1;
        }
    };
    let mut words = data.chunks_exact(8);
    let mut base = 0;
    for w in &mut words {
        let v = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]) ^ LFS;
        // The high bit of every byte that was an LF (exact: no carries between bytes).
        let mut m = !(((v & LOW7).wrapping_add(LOW7)) | v | LOW7);
        while m != 0 {
            at_lf(out, base + (m.trailing_zeros() / 8) as usize, &mut copied);
            m &= m - 1;
        }
        base += 8;
    }
    for (j, &b) in words.remainder().iter().enumerate() {
        if b == b'\n' {
            at_lf(out, base + j, &mut copied);
        }
    }
    out.extend_from_slice(&data[copied..]);
}

/// Why a message could not be made ready.
#[derive(Debug)]
pub enum PrepareError {
    /// A blob could not be read (missing, damaged, I/O).
    Read(crate::Error),
    /// The blobs were read and checked but together do not have the message's size.
    Mismatch,
}

/// Opened (decrypted, decompressed) blobs, least recently used out first, up to a byte
/// budget, shared by every thread of a restore.
pub struct BlobCache {
    budget: usize,
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    map: HashMap<Id, (Arc<Vec<u8>>, u64)>,
    /// Use tick -> blob, oldest first.
    order: BTreeMap<u64, Id>,
    tick: u64,
    bytes: usize,
    hits: u64,
    misses: u64,
}

impl BlobCache {
    /// A cache of at most `budget` bytes of blobs (0: no cache).
    pub fn new(budget: usize) -> BlobCache {
        BlobCache {
            budget,
            inner: Mutex::new(CacheInner::default()),
        }
    }

    /// The blob `id`, from the cache or read (and checked against its id) and kept.
    pub fn get(&self, repo: &Repository, id: &Id) -> crate::Result<Arc<Vec<u8>>> {
        self.get_with(id, || repo.read_blob(id))
    }

    /// [`Self::get`] with the blob, when it is not in the cache, from `read` (which
    /// checks it against its id as [`Repository::read_blob`] does).
    pub fn get_with(
        &self,
        id: &Id,
        read: impl FnOnce() -> crate::Result<Vec<u8>>,
    ) -> crate::Result<Arc<Vec<u8>>> {
        if self.budget == 0 {
            return Ok(Arc::new(read()?));
        }
        {
            let mut g = lock(&self.inner);
            let c = &mut *g;
            c.tick += 1;
            if let Some((data, used)) = c.map.get_mut(id) {
                c.order.remove(used);
                *used = c.tick;
                c.order.insert(c.tick, *id);
                c.hits += 1;
                return Ok(Arc::clone(data));
            }
            c.misses += 1;
        }
        let data = Arc::new(read()?);
        // A blob bigger than a sixteenth of the budget would push out too much.
        if data.len() <= self.budget / 16 {
            let mut g = lock(&self.inner);
            let c = &mut *g;
            c.tick += 1;
            if !c.map.contains_key(id) {
                c.map.insert(*id, (Arc::clone(&data), c.tick));
                c.order.insert(c.tick, *id);
                c.bytes += data.len();
                while c.bytes > self.budget {
                    let Some((_, old)) = c.order.pop_first() else {
                        break;
                    };
                    if let Some((d, _)) = c.map.remove(&old) {
                        c.bytes -= d.len();
                    }
                }
            }
        }
        Ok(data)
    }

    /// Whether the cache holds blob `id` (now: it may be pushed out before it is used).
    pub fn contains(&self, id: &Id) -> bool {
        self.budget > 0 && lock(&self.inner).map.contains_key(id)
    }

    /// (hits, misses) so far.
    pub fn stats(&self) -> (u64, u64) {
        let c = lock(&self.inner);
        (c.hits, c.misses)
    }
}

/// Reads `e`'s content (its blobs from `cache`, else from `read`, which checks each
/// against its id: [`Repository::read_blob`], or a restore's
/// [`crate::model::reader::Fetched::blob`]) and appends its CRLF form to `buf`; returns
/// where it is. The message is checked against its size; on any error `buf` is left as it
/// was.
pub fn read_message_crlf(
    cache: &BlobCache,
    e: &MessageEntry,
    buf: &mut Vec<u8>,
    read: impl Fn(&Id) -> crate::Result<Vec<u8>>,
) -> Result<Range<usize>, PrepareError> {
    let start = buf.len();
    let mut prev = 0u8;
    let mut size = 0u64;
    for id in &e.content {
        let blob = match cache.get_with(id, || read(id)) {
            Ok(b) => b,
            Err(err) => {
                buf.truncate(start);
                return Err(PrepareError::Read(err));
            }
        };
        crlf_into(buf, &blob, prev);
        if let Some(&last) = blob.last() {
            prev = last;
        }
        size += blob.len() as u64;
    }
    if size != e.size {
        buf.truncate(start);
        return Err(PrepareError::Mismatch);
    }
    Ok(start..buf.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailvault_imap::to_crlf;
    use proptest::prelude::*;

    fn conv(data: &[u8]) -> Vec<u8> {
        let mut out = b"x".to_vec();
        crlf_into(&mut out, data, 0);
        out.split_off(1)
    }

    #[test]
    fn examples() {
        assert_eq!(conv(b"a\nb\r\nc\rd\n\ne"), b"a\r\nb\r\nc\rd\r\n\r\ne");
        assert_eq!(conv(b"\n"), b"\r\n");
        assert_eq!(conv(b"\r\n"), b"\r\n");
        assert_eq!(conv(b""), b"");
        let long = b"0123456\n89abcdef\r\n\n\n\n\n\n\n\n\nxyz\n".repeat(5);
        assert_eq!(conv(&long), to_crlf(&long).as_ref());
        // A CR at the end of one piece and the LF at the start of the next: already CRLF.
        let mut out = Vec::new();
        crlf_into(&mut out, b"a\r", 0);
        crlf_into(&mut out, b"\nb\n", b'\r');
        assert_eq!(out, b"a\r\nb\r\n");
    }

    /// A repository in memory holding `blobs` (uncompressed), and their ids.
    fn repo_with(blobs: &[&[u8]]) -> (Repository, Vec<Id>) {
        use crate::repo::crypto::KdfParams;
        use crate::repo::pack::BlobKind;
        use crate::repo::{BlobSaver, InitOptions};
        use crate::store::MemoryStore;
        let opts = InitOptions {
            kdf: KdfParams {
                m_cost: 64,
                t_cost: 1,
                p_cost: 1,
            },
            ..Default::default()
        };
        let mut repo = Repository::init(std::sync::Arc::new(MemoryStore::new()), b"pw", &opts)
            .unwrap_or_else(|e| panic!("{e}"));
        let (ids, packs) = {
            let saver = BlobSaver::new(&repo, crate::repo::compress::Compression::None);
            let ids: Vec<Id> = blobs
                .iter()
                .map(|b| {
                    saver
                        .save(BlobKind::Data, b)
                        .unwrap_or_else(|e| panic!("{e}"))
                })
                .collect();
            (ids, saver.finish().unwrap_or_else(|e| panic!("{e}")))
        };
        repo.add_packs(&packs);
        (repo, ids)
    }

    #[test]
    fn blob_cache_keeps_recent_blobs_within_budget() {
        let blobs: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 100]).collect();
        let refs: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
        let (repo, ids) = repo_with(&refs);
        // Room for sixteen 100-byte blobs (a blob may take a sixteenth of the budget).
        let cache = BlobCache::new(1600);
        let get = |i: usize| cache.get(&repo, &ids[i]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(*get(0), blobs[0]);
        assert_eq!(*get(0), blobs[0]);
        assert_eq!(cache.stats(), (1, 1));
        for (i, b) in blobs.iter().enumerate().skip(1) {
            assert_eq!(*get(i), *b);
        }
        assert_eq!(lock(&cache.inner).bytes, 1600);
        // The most recent is there, the oldest was pushed out.
        get(19);
        assert_eq!(cache.stats(), (2, 20));
        assert_eq!(*get(0), blobs[0]);
        assert_eq!(cache.stats(), (2, 21));
        // Off: every read goes to the repository.
        let off = BlobCache::new(0);
        assert_eq!(
            *off.get(&repo, &ids[1]).unwrap_or_else(|e| panic!("{e}")),
            blobs[1]
        );
        assert_eq!(off.stats(), (0, 0));
    }

    /// A message of two blobs with a CR at the end of the first and the LF at the start of
    /// the second: converted blob by blob, the pair stays one CRLF. A size that does not
    /// match and a missing blob are errors that leave the buffer as it was.
    #[test]
    fn messages_from_checked_blobs() {
        let (a, b) = (b"Subject: x\r".to_vec(), b"\nbody\n".to_vec());
        let (repo, ids) = repo_with(&[&a, &b]);
        let entry = |content: Vec<Id>, size: u64| MessageEntry {
            key: b"k".to_vec(),
            name: b"k:2,S".to_vec(),
            new: false,
            size,
            mtime: Default::default(),
            mode: 0o600,
            uid: 0,
            gid: 0,
            hash: Id::default(),
            content,
            from: String::new(),
            subject: String::new(),
            date: None,
        };
        let cache = BlobCache::new(1 << 20);
        let mut buf = b"before".to_vec();
        let good = entry(ids.clone(), (a.len() + b.len()) as u64);
        let r = read_message_crlf(&cache, &good, &mut buf, |id| repo.read_blob(id))
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(&buf[r], b"Subject: x\r\nbody\r\n");
        let kept = buf.clone();
        let short = entry(ids.clone(), 3);
        assert!(matches!(
            read_message_crlf(&cache, &short, &mut buf, |id| repo.read_blob(id)),
            Err(PrepareError::Mismatch)
        ));
        assert_eq!(buf, kept);
        let fresh = BlobCache::new(0);
        let missing = entry(vec![ids[0], Id([7; 32])], good.size);
        assert!(matches!(
            read_message_crlf(&fresh, &missing, &mut buf, |id| repo.read_blob(id)),
            Err(PrepareError::Read(crate::Error::BlobNotFound(_)))
        ));
        assert_eq!(buf, kept);
    }

    proptest! {
        #[test]
        fn same_as_to_crlf(data in proptest::collection::vec(
            prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'a'), Just(0x8a_u8), any::<u8>()], 0..300),
            cut in 0usize..300,
        ) {
            let want = to_crlf(&data).into_owned();
            prop_assert_eq!(conv(&data), want.clone());
            // Converted in two pieces, the byte before the second given.
            let cut = cut.min(data.len());
            let mut out = Vec::new();
            crlf_into(&mut out, &data[..cut], 0);
            crlf_into(&mut out, &data[cut..], if cut == 0 { 0 } else { data[cut - 1] });
            prop_assert_eq!(out, want);
        }
    }
}
