//! A large index's sorted array in a local file ([`Table`]): 50 bytes a blob on disk, 4
//! in memory.
//!
//! At 10 million messages the index holds about 18 million blobs: 900 MB as the sorted
//! array [`super::Index`] keeps in memory. A table keeps only the first four bytes of each
//! id in memory (`fp`, sorted as the entries are). A lookup of an id the repository does
//! not have, which is most of a backup's, ends there without reading the disk but for
//! one id in 2^32 / n; an id whose four bytes match reads the one block that holds its
//! entry and checks it.
//!
//! ```text
//! table   = "MVIT" 0x01 header_len:u32 header blake3(all before it):[32]
//!           block* fp:u32{count} tail count:u64 tail_len:u32 blake3(fp tail):[32]
//! header  = packs:u32 (pack_id:[32] version:u8)* files:u32 file_id:[32]*
//! block   = entry{BLOCK; the last block fewer} blake3(its entries)[..8]
//! entry   = id:[32] pack:u32 offset:u32 stored_len:u32 raw_len:u32 kind:u8 codec:u8
//! tail    = totals trees:u32 (entry position:u32)*
//! totals  = data:u64 trees:u64 spans:u32 (pack:u32 start:u64 end:u64)*
//! ```
//! Numbers are little-endian; `fp` is each entry's id's first four bytes read
//! big-endian, so that it sorts as the ids do. `pack` is a position in the header's
//! packs; `files` are the index files whose blobs the table holds. `totals` sum what
//! is asked of the whole index often ([`Totals`]), so that it is not read for them.
//! The tree blobs' entries are in the tail too, with their positions, and held in
//! memory (about 1% of the blobs): a backup, `ls` and a restore look up trees first
//! and often, and each such lookup would otherwise read a block, from disk when the
//! cache is cold.
//!
//! A table is built by a `Builder`: entries in any order, sorted in runs of a bounded
//! size spilled to temporary files and merged, so that building one never holds more
//! than a run and the `fp` column in memory.
//!
//! The checksums find damage (a torn write, a bad disk), not an attacker: a table is in
//! the owner's local cache, beside the cached objects it was made from.

use super::entry::{Entry, Location};
use crate::error::{Error, Result};
use crate::repo::compress::Codec;
use crate::repo::format::{BlobKind, Version};
use crate::repo::id::Id;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 5] = b"MVIT\x01";
const ENTRY: usize = 50;
/// Entries a block holds: a lookup reads one block (808 bytes) and checks its sum.
const BLOCK: usize = 16;
/// Bytes of a block's checksum.
const SUM: usize = 8;
/// The last bytes: the count, the tail's length and the hash of `fp` and the tail.
const TRAILER: u64 = 8 + 4 + 32;

/// What is asked of the whole index often, summed as a table is written: the bytes its
/// blobs take in their packs by kind (`serve`'s metrics), and where each pack's tree
/// blobs are (a backup reads them ahead).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub data: u64,
    pub trees: u64,
    /// Per pack holding tree blobs (by position): from its first tree blob's offset to
    /// the end of its last, in pack order.
    pub tree_spans: std::collections::BTreeMap<u32, (u64, u64)>,
}

impl Totals {
    /// Counts a blob at `loc` in.
    pub fn add(&mut self, loc: &Location) {
        let (start, len) = (u64::from(loc.offset), u64::from(loc.stored_len));
        match loc.kind {
            BlobKind::Data => self.data += len,
            BlobKind::Tree => {
                self.trees += len;
                let s = (self.tree_spans.entry(loc.pack)).or_insert((start, start + len));
                s.0 = s.0.min(start);
                s.1 = s.1.max(start + len);
            }
        }
    }
}

/// What a table's header says besides its entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// The packs the entries' `pack` fields point into, each with its format.
    pub packs: Vec<(Id, Version)>,
    /// The index files whose blobs the table holds.
    pub files: Vec<Id>,
}

/// A table opened for lookups (see the module's documentation).
pub struct Table {
    file: File,
    path: PathBuf,
    header: Header,
    totals: Totals,
    /// The tree blobs' entries and positions, sorted by id (and so by position).
    trees: Vec<(Entry, u32)>,
    /// A bit per position: a tree blob's (found in `trees` by its position).
    is_tree: Vec<u64>,
    /// Where the first block starts.
    blocks_at: u64,
    /// The first four bytes of each entry's id, big-endian, in entry order.
    fp: Vec<u32>,
    /// `fp[buckets[p]..buckets[p + 1]]` holds the entries whose first `bits` bits are `p`.
    buckets: Vec<u32>,
    bits: u32,
}

impl Table {
    /// Opens the table at `path`, checking its header and `fp` column.
    pub fn open(path: &Path) -> Result<Table> {
        let bad = |why: &str| Error::corrupt(path.display().to_string(), why.to_string());
        let io = |e| Error::io(path, e);
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let mut start = [0u8; 9];
        file.read_exact_at(&mut start, 0).map_err(io)?;
        if &start[..5] != MAGIC {
            return Err(bad("not an index table"));
        }
        let header_len = u64::from(u32::from_le_bytes([start[5], start[6], start[7], start[8]]));
        let blocks_at = 9 + header_len + 32;
        if blocks_at + TRAILER > len {
            return Err(bad("truncated"));
        }
        let mut head = vec![0u8; 9 + header_len as usize + 32];
        file.read_exact_at(&mut head, 0).map_err(io)?;
        let (body, sum) = head.split_at(head.len() - 32);
        if blake3::hash(body).as_bytes() != sum {
            return Err(bad("its header does not match its checksum"));
        }
        let header = decode_header(&body[9..]).ok_or_else(|| bad("a bad header"))?;
        let mut trailer = [0u8; TRAILER as usize];
        file.read_exact_at(&mut trailer, len - TRAILER)
            .map_err(io)?;
        let count = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
        let totals_len = u64::from(u32::from_le_bytes(trailer[8..12].try_into().expect("4")));
        let fp_len = count.checked_mul(4).ok_or_else(|| bad("a bad count"))?;
        let blocks_len = blocks_len(count).ok_or_else(|| bad("a bad count"))?;
        if blocks_at + blocks_len + fp_len + totals_len + TRAILER != len
            || count > u64::from(u32::MAX)
        {
            return Err(bad("its length does not match its count"));
        }
        let mut raw = vec![0u8; (fp_len + totals_len) as usize];
        file.read_exact_at(&mut raw, blocks_at + blocks_len)
            .map_err(io)?;
        if blake3::hash(&raw).as_bytes()[..] != trailer[12..] {
            return Err(bad("its fingerprints do not match their checksum"));
        }
        let (totals, trees) = decode_tail(&raw[fp_len as usize..], header.packs.len(), count)
            .ok_or_else(|| bad("a bad tail"))?;
        raw.truncate(fp_len as usize);
        let fp: Vec<u32> = (raw.chunks_exact(4))
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect();
        drop(raw);
        let trees_agree = trees.is_sorted_by(|a, b| a.0.id.0 < b.0.id.0)
            && (trees.iter()).all(|(e, i)| fp.get(*i as usize) == Some(&fingerprint(&e.id)));
        if fp.is_sorted() && trees_agree {
            let (buckets, bits) = fp_buckets(&fp);
            let mut is_tree = vec![0u64; fp.len().div_ceil(64)];
            for &(_, i) in &trees {
                is_tree[i as usize / 64] |= 1 << (i % 64);
            }
            Ok(Table {
                file,
                path: path.to_path_buf(),
                header,
                totals,
                trees,
                is_tree,
                blocks_at,
                fp,
                buckets,
                bits,
            })
        } else {
            Err(bad("its fingerprints are not sorted"))
        }
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn totals(&self) -> &Totals {
        &self.totals
    }

    pub fn is_empty(&self) -> bool {
        self.fp.is_empty()
    }

    pub fn len(&self) -> usize {
        self.fp.len()
    }

    /// The position and location of `id`, if the table has it.
    pub(super) fn find(&self, id: &Id) -> Result<Option<(usize, Location)>> {
        for i in self.candidates(fingerprint(id)) {
            let e = self.entry_held(i)?;
            if e.id == *id {
                return Ok(Some((i, e.loc)));
            }
        }
        Ok(None)
    }

    /// The positions whose fingerprint is `f` (most often none: an absent id ends here).
    fn candidates(&self, f: u32) -> std::ops::Range<usize> {
        let p = (u64::from(f) >> (32 - self.bits)) as usize;
        let (lo, hi) = match self.buckets.get(p..p + 2) {
            Some(&[lo, hi]) => (lo as usize, hi as usize),
            _ => return 0..0,
        };
        let run = &self.fp[lo..hi];
        lo + run.partition_point(|&x| x < f)..lo + run.partition_point(|&x| x <= f)
    }

    /// The entry at position `i`: a tree's from memory, another's read.
    fn entry_held(&self, i: usize) -> Result<Entry> {
        match self.is_tree[i / 64] & (1 << (i % 64)) {
            0 => self.entry(i),
            _ => Ok(self.trees[self.trees.partition_point(|&(_, at)| (at as usize) < i)].0),
        }
    }

    /// The entry at position `i`: its block read (on the stack) and checked.
    pub(super) fn entry(&self, i: usize) -> Result<Entry> {
        let b = i / BLOCK;
        let n = BLOCK.min(self.len().saturating_sub(b * BLOCK));
        if n == 0 {
            return Err(self.damaged("a position past its end"));
        }
        let mut buf = [0u8; BLOCK * ENTRY + SUM];
        let raw = &mut buf[..n * ENTRY + SUM];
        let at = self.blocks_at + (b * (BLOCK * ENTRY + SUM)) as u64;
        self.file
            .read_exact_at(raw, at)
            .map_err(|e| Error::io(&self.path, e))?;
        let (body, sum) = raw.split_at(n * ENTRY);
        if blake3::hash(body).as_bytes()[..SUM] != *sum {
            return Err(self.damaged("a block that does not match its checksum"));
        }
        let k = i % BLOCK;
        self.checked(&body[k * ENTRY..(k + 1) * ENTRY], i)
    }

    /// The entry at position `i` from its bytes, which must agree with `fp` (what a
    /// lookup found it by) and name a pack of the header.
    fn checked(&self, raw: &[u8], i: usize) -> Result<Entry> {
        let e = decode_entry(raw).ok_or_else(|| self.damaged("a bad entry"))?;
        if self.fp.get(i) != Some(&fingerprint(&e.id))
            || e.loc.pack as usize >= self.header.packs.len()
        {
            return Err(self.damaged("an entry its fingerprints do not know"));
        }
        Ok(e)
    }

    /// Asks the kernel to read the entries into the page cache now, in the background:
    /// before many lookups (a restore's plan, `check`, `prune`), each of which would
    /// otherwise read its block from disk on a cold cache.
    pub(super) fn will_need(&self) {
        let _ = rustix::fs::fadvise(
            &self.file,
            self.blocks_at,
            std::num::NonZeroU64::new(blocks_len(self.len() as u64).unwrap_or(0)),
            rustix::fs::Advice::WillNeed,
        );
    }

    /// A block's entries from its bytes (`first` is its first entry's position).
    fn decode_block(&self, raw: &[u8], first: usize) -> Result<Vec<Entry>> {
        let (body, sum) = raw.split_at(raw.len() - SUM);
        if blake3::hash(body).as_bytes()[..SUM] != *sum {
            return Err(self.damaged("a block that does not match its checksum"));
        }
        (body.chunks_exact(ENTRY).enumerate())
            .map(|(k, raw)| self.checked(raw, first + k))
            .collect()
    }

    /// Every entry in id order, read a few hundred blocks at a time.
    pub(super) fn iter(&self) -> impl Iterator<Item = Result<Entry>> + '_ {
        const READ: usize = 1024;
        let blocks = self.len().div_ceil(BLOCK);
        let mut next = 0;
        let mut done = false;
        std::iter::from_fn(move || {
            if done || next >= blocks {
                return None;
            }
            let upto = (next + READ).min(blocks);
            let first = next * BLOCK;
            let entries = self.len().min(upto * BLOCK) - first;
            let mut raw = vec![0u8; entries * ENTRY + (upto - next) * SUM];
            let at = self.blocks_at + (next * (BLOCK * ENTRY + SUM)) as u64;
            let read = (self.file.read_exact_at(&mut raw, at))
                .map_err(|e| Error::io(&self.path, e))
                .and_then(|()| {
                    let mut out = Vec::with_capacity(entries);
                    for (k, b) in raw.chunks(BLOCK * ENTRY + SUM).enumerate() {
                        out.extend(self.decode_block(b, first + k * BLOCK)?);
                    }
                    Ok(out)
                });
            next = upto;
            match read {
                Ok(v) => Some(v.into_iter().map(Ok).collect::<Vec<_>>()),
                Err(e) => {
                    done = true;
                    Some(vec![Err(e)])
                }
            }
        })
        .flatten()
    }

    fn damaged(&self, what: &str) -> Error {
        Error::corrupt(
            self.path.display().to_string(),
            format!("index table: {what}"),
        )
    }
}

/// The bytes of `count` entries' blocks.
fn blocks_len(count: u64) -> Option<u64> {
    let blocks = count.div_ceil(BLOCK as u64);
    count
        .checked_mul(ENTRY as u64)?
        .checked_add(blocks.checked_mul(SUM as u64)?)
}

/// The first four bytes of `id`, big-endian.
fn fingerprint(id: &Id) -> u32 {
    u32::from_be_bytes([id.0[0], id.0[1], id.0[2], id.0[3]])
}

/// The buckets of a sorted `fp` column: two to four entries each, at most 2^20.
fn fp_buckets(fp: &[u32]) -> (Vec<u32>, u32) {
    let bits = (usize::BITS - (fp.len() >> 2).leading_zeros()).clamp(1, 20);
    let mut buckets = vec![0u32; (1 << bits) + 1];
    for &f in fp {
        buckets[(f >> (32 - bits)) as usize + 1] += 1;
    }
    for p in 1..buckets.len() {
        buckets[p] += buckets[p - 1];
    }
    (buckets, bits)
}

fn encode_entry(out: &mut Vec<u8>, e: &Entry) {
    let loc = e.loc;
    out.extend_from_slice(&e.id.0);
    out.extend_from_slice(&{ loc.pack }.to_le_bytes());
    out.extend_from_slice(&{ loc.offset }.to_le_bytes());
    out.extend_from_slice(&{ loc.stored_len }.to_le_bytes());
    out.extend_from_slice(&{ loc.raw_len }.to_le_bytes());
    out.push(loc.kind as u8);
    out.push(loc.codec as u8);
}

fn decode_entry(raw: &[u8]) -> Option<Entry> {
    let u32_at = |i: usize| u32::from_le_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
    Some(Entry {
        id: Id(raw[..32].try_into().ok()?),
        loc: Location {
            pack: u32_at(32),
            offset: u32_at(36),
            stored_len: u32_at(40),
            raw_len: u32_at(44),
            kind: BlobKind::from_u8(raw[48])?,
            codec: Codec::from_u8(raw[49])?,
        },
    })
}

fn encode_header(h: &Header) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + h.packs.len() * 33 + h.files.len() * 32);
    out.extend_from_slice(&(h.packs.len() as u32).to_le_bytes());
    for (id, v) in &h.packs {
        out.extend_from_slice(&id.0);
        out.push(v.number() as u8);
    }
    out.extend_from_slice(&(h.files.len() as u32).to_le_bytes());
    for id in &h.files {
        out.extend_from_slice(&id.0);
    }
    out
}

fn encode_totals(t: &Totals) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + t.tree_spans.len() * 20);
    out.extend_from_slice(&t.data.to_le_bytes());
    out.extend_from_slice(&t.trees.to_le_bytes());
    out.extend_from_slice(&(t.tree_spans.len() as u32).to_le_bytes());
    for (&pack, &(start, end)) in &t.tree_spans {
        out.extend_from_slice(&pack.to_le_bytes());
        out.extend_from_slice(&start.to_le_bytes());
        out.extend_from_slice(&end.to_le_bytes());
    }
    out
}

/// The tail after the totals: the tree blobs' entries with their positions.
fn encode_trees(out: &mut Vec<u8>, trees: &[(Entry, u32)]) {
    out.extend_from_slice(&(trees.len() as u32).to_le_bytes());
    for (e, i) in trees {
        encode_entry(out, e);
        out.extend_from_slice(&i.to_le_bytes());
    }
}

/// A table's tail: its totals and tree entries, of packs in the header's `packs` and
/// positions below `count`.
fn decode_tail(b: &[u8], packs: usize, count: u64) -> Option<(Totals, Vec<(Entry, u32)>)> {
    let n = u32::from_le_bytes(b.get(16..20)?.try_into().ok()?) as usize;
    let (totals, rest) = b.split_at_checked(20 + n.checked_mul(20)?)?;
    let totals = decode_totals(totals, packs)?;
    let trees = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let rest = &rest[4..];
    if rest.len() != trees.checked_mul(ENTRY + 4)? {
        return None;
    }
    let mut out = Vec::with_capacity(trees);
    for raw in rest.chunks_exact(ENTRY + 4) {
        let e = decode_entry(&raw[..ENTRY])?;
        let i = u32::from_le_bytes(raw[ENTRY..].try_into().ok()?);
        if u64::from(i) >= count || e.loc.pack as usize >= packs {
            return None;
        }
        out.push((e, i));
    }
    Some((totals, out))
}

/// A table's totals, its spans in packs of the header's `packs`.
fn decode_totals(b: &[u8], packs: usize) -> Option<Totals> {
    let u64_at = |i: usize| Some(u64::from_le_bytes(b.get(i..i + 8)?.try_into().ok()?));
    let n = u32::from_le_bytes(b.get(16..20)?.try_into().ok()?) as usize;
    if b.len() != 20 + n.checked_mul(20)? {
        return None;
    }
    let mut t = Totals {
        data: u64_at(0)?,
        trees: u64_at(8)?,
        tree_spans: Default::default(),
    };
    for k in 0..n {
        let at = 20 + k * 20;
        let pack = u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?);
        if pack as usize >= packs {
            return None;
        }
        t.tree_spans
            .insert(pack, (u64_at(at + 4)?, u64_at(at + 12)?));
    }
    Some(t)
}

fn decode_header(mut b: &[u8]) -> Option<Header> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = b.split_at_checked(n)?;
        *b = rest;
        Some(head)
    }
    fn count(b: &mut &[u8]) -> Option<usize> {
        Some(u32::from_le_bytes(take(b, 4)?.try_into().ok()?) as usize)
    }
    fn id(b: &mut &[u8]) -> Option<Id> {
        Some(Id(take(b, 32)?.try_into().ok()?))
    }
    let mut h = Header::default();
    let packs = count(&mut b)?;
    if packs > b.len() / 33 {
        return None;
    }
    for _ in 0..packs {
        let pack = id(&mut b)?;
        let v = Version::from_number(u32::from(take(&mut b, 1)?[0])).ok()?;
        h.packs.push((pack, v));
    }
    let files = count(&mut b)?;
    if files != b.len() / 32 || !b.len().is_multiple_of(32) {
        return None;
    }
    for _ in 0..files {
        h.files.push(id(&mut b)?);
    }
    Some(h)
}

/// Builds a table from entries given in any order (see the module's documentation).
///
/// Where several entries have the same id, the first by (source, `pack`, `offset`) is
/// kept: a base table's before any other, then the order the caller's `pack` numbers
/// give (the index's loader numbers its listings in load order), as
/// [`super::Loader::finish`] keeps a blob's first location.
pub(super) struct Builder {
    /// The runs spilled so far.
    dir: tempfile::TempDir,
    runs: Vec<PathBuf>,
}

impl Builder {
    /// A builder whose runs go to a temporary directory in `dir`. It holds no entries
    /// itself: the caller's run is sorted and written where it is ([`Builder::spill`]),
    /// so making a table holds one run, not two.
    pub(super) fn new(dir: &Path) -> Result<Builder> {
        let tmp = tempfile::Builder::new()
            .prefix(".index-runs-")
            .tempdir_in(dir)
            .map_err(|e| Error::io(dir, e))?;
        Ok(Builder {
            dir: tmp,
            runs: Vec::new(),
        })
    }

    /// Sorts `run` and writes it to a file of its own; `run` is left empty (its room
    /// kept for the next).
    pub(super) fn spill(&mut self, run: &mut Vec<Entry>) -> Result<()> {
        let path = self.dir.path().join(format!("run-{}", self.runs.len()));
        sort_run(run);
        let io = |e| Error::io(&path, e);
        let mut w = BufWriter::with_capacity(1 << 20, File::create(&path).map_err(io)?);
        let mut buf = Vec::with_capacity(ENTRY);
        for e in run.drain(..) {
            buf.clear();
            encode_entry(&mut buf, &e);
            w.write_all(&buf).map_err(io)?;
        }
        w.into_inner()
            .map_err(|e| io(e.into_error()))?
            .sync_data()
            .map_err(io)?;
        self.runs.push(path);
        Ok(())
    }

    /// Writes the table to `target` (atomically: a temporary file renamed): `base`'s
    /// entries, the runs spilled and `last`, each of the others' `pack` made
    /// `pack(number)`, and opens it.
    pub(super) fn finish(
        self,
        mut last: Vec<Entry>,
        header: Header,
        base: Option<&Table>,
        pack: impl Fn(u32) -> u32,
        target: &Path,
    ) -> Result<Table> {
        sort_run(&mut last);
        let mut sources: Vec<Box<dyn Iterator<Item = Result<Entry>> + '_>> = Vec::new();
        if let Some(base) = base {
            sources.push(Box::new(base.iter()));
        }
        let pushed = sources.len();
        for path in &self.runs {
            let f = File::open(path).map_err(|e| Error::io(path, e))?;
            sources.push(Box::new(run_reader(f, path.clone())));
        }
        sources.push(Box::new(last.into_iter().map(Ok)));
        // The heap: (id, base first, pack, offset, source), least first.
        let mut heap = BinaryHeap::new();
        let key = |e: &Entry, s: usize| {
            let loc = e.loc;
            Reverse((e.id.0, s >= pushed, loc.pack, loc.offset, s))
        };
        let mut held: Vec<Option<Entry>> = Vec::with_capacity(sources.len());
        for (s, src) in sources.iter_mut().enumerate() {
            let e = src.next().transpose()?;
            if let Some(e) = &e {
                heap.push(key(e, s));
            }
            held.push(e);
        }
        let dir = target.parent().unwrap_or(Path::new("."));
        let mut out = TableWriter::new(dir, &header)?;
        let mut last: Option<Id> = None;
        while let Some(Reverse((_, _, _, _, s))) = heap.pop() {
            let mut e = held[s].take().expect("a held entry for each heap item");
            if let Some(next) = sources[s].next().transpose()? {
                heap.push(key(&next, s));
                held[s] = Some(next);
            }
            if last == Some(e.id) {
                continue;
            }
            last = Some(e.id);
            if s >= pushed {
                e.loc.pack = pack(e.loc.pack);
            }
            out.push(&e)?;
        }
        drop(sources);
        out.finish(target)?;
        Table::open(target)
    }
}

/// Sorts a run by (id, pack, offset) and keeps each id's first entry.
fn sort_run(run: &mut Vec<Entry>) {
    run.sort_unstable_by(|a, b| {
        let key = |e: &Entry| (e.loc.pack, e.loc.offset);
        a.id.0.cmp(&b.id.0).then_with(|| key(a).cmp(&key(b)))
    });
    run.dedup_by(|later, first| later.id == first.id);
}

/// The entries of a spilled run, in order.
fn run_reader(f: File, path: PathBuf) -> impl Iterator<Item = Result<Entry>> {
    let mut r = BufReader::with_capacity(256 << 10, f);
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let mut raw = [0u8; ENTRY];
        match r.read_exact(&mut raw) {
            Ok(()) => Some(decode_entry(&raw).ok_or_else(|| {
                failed = true;
                Error::corrupt(path.display().to_string(), "a bad entry in a sorted run")
            })),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => None,
            Err(e) => {
                failed = true;
                Some(Err(Error::io(&path, e)))
            }
        }
    })
}

/// Writes a table's file as its entries come, in id order.
struct TableWriter {
    file: tempfile::NamedTempFile,
    w: BufWriter<File>,
    block: Vec<u8>,
    in_block: usize,
    fp: Vec<u32>,
    totals: Totals,
    trees: Vec<(Entry, u32)>,
}

impl TableWriter {
    fn new(dir: &Path, header: &Header) -> Result<TableWriter> {
        let file = tempfile::Builder::new()
            .prefix(".index-table-")
            .tempfile_in(dir)
            .map_err(|e| Error::io(dir, e))?;
        let handle = file.as_file().try_clone().map_err(|e| Error::io(dir, e))?;
        let mut w = BufWriter::with_capacity(1 << 20, handle);
        let h = encode_header(header);
        let mut head = Vec::with_capacity(9 + h.len() + 32);
        head.extend_from_slice(MAGIC);
        head.extend_from_slice(&(h.len() as u32).to_le_bytes());
        head.extend_from_slice(&h);
        let sum = blake3::hash(&head);
        head.extend_from_slice(sum.as_bytes());
        w.write_all(&head).map_err(|e| Error::io(file.path(), e))?;
        Ok(TableWriter {
            file,
            w,
            block: Vec::with_capacity(BLOCK * ENTRY),
            in_block: 0,
            fp: Vec::new(),
            totals: Totals::default(),
            trees: Vec::new(),
        })
    }

    fn push(&mut self, e: &Entry) -> Result<()> {
        if self.fp.last().is_some_and(|&f| f > fingerprint(&e.id)) {
            return Err(Error::corrupt(
                self.file.path().display().to_string(),
                "index table entries out of order",
            ));
        }
        if e.loc.kind == BlobKind::Tree {
            self.trees.push((*e, self.fp.len() as u32));
        }
        self.fp.push(fingerprint(&e.id));
        self.totals.add(&e.loc);
        encode_entry(&mut self.block, e);
        self.in_block += 1;
        if self.in_block == BLOCK {
            self.end_block()?;
        }
        Ok(())
    }

    fn end_block(&mut self) -> Result<()> {
        if self.in_block > 0 {
            let sum = blake3::hash(&self.block);
            self.block.extend_from_slice(&sum.as_bytes()[..SUM]);
            (self.w.write_all(&self.block)).map_err(|e| Error::io(self.file.path(), e))?;
            self.block.clear();
            self.in_block = 0;
        }
        Ok(())
    }

    fn finish(mut self, target: &Path) -> Result<()> {
        self.end_block()?;
        let path = self.file.path().to_path_buf();
        let io = |e| Error::io(&path, e);
        let mut raw: Vec<u8> = self.fp.iter().flat_map(|f| f.to_le_bytes()).collect();
        let mut totals = encode_totals(&self.totals);
        encode_trees(&mut totals, &self.trees);
        raw.extend_from_slice(&totals);
        self.w.write_all(&raw).map_err(io)?;
        self.w
            .write_all(&(self.fp.len() as u64).to_le_bytes())
            .map_err(io)?;
        self.w
            .write_all(&(totals.len() as u32).to_le_bytes())
            .map_err(io)?;
        self.w
            .write_all(blake3::hash(&raw).as_bytes())
            .map_err(io)?;
        self.w.flush().map_err(io)?;
        self.file.as_file().sync_data().map_err(io)?;
        drop(self.w);
        self.file
            .persist(target)
            .map_err(|e| Error::io(target, e.error))?;
        Ok(())
    }
}

/// Removes `path`, if it is there.
pub fn remove(path: &Path) {
    let _ = fs::remove_file(path);
}

/// Removes what killed builders left in `dir` (temporary tables and runs) an hour old,
/// and tables of other repository formats than `current` (the table's name): a repository
/// migrated to a newer format never reads its old table again.
pub fn sweep(dir: &Path, current: &str) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let other_format = (name.to_str())
            .is_some_and(|n| n.starts_with("index-v") && n.ends_with(".table") && n != current);
        if other_format {
            let _ = fs::remove_file(e.path());
            continue;
        }
        let ours = (name.to_str())
            .is_some_and(|n| n.starts_with(".index-table-") || n.starts_with(".index-runs-"));
        let old = (e.metadata().and_then(|m| m.modified()).ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(3600));
        if ours && old {
            let _ = fs::remove_dir_all(e.path()).or_else(|_| fs::remove_file(e.path()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> Id {
        // Spread over the id space as keyed hashes are.
        Id(*blake3::hash(&n.to_le_bytes()).as_bytes())
    }

    fn entry(n: u64, pack: u32, offset: u32) -> Entry {
        Entry {
            id: id(n),
            loc: Location {
                pack,
                offset,
                stored_len: n as u32,
                raw_len: n as u32 + 1,
                kind: BlobKind::Data,
                codec: Codec::Zstd,
            },
        }
    }

    fn header(packs: u8) -> Header {
        Header {
            packs: (0..packs).map(|p| (Id([p; 32]), Version::V2)).collect(),
            files: vec![Id([7; 32]), Id([8; 32])],
        }
    }

    /// A builder fed one entry at a time, spilling every `max` (as the loader spills).
    struct Fed {
        b: Builder,
        run: Vec<Entry>,
        max: usize,
    }

    impl Fed {
        fn new(dir: &Path, max: usize) -> Fed {
            let b = Builder::new(dir).unwrap();
            Fed {
                b,
                run: Vec::new(),
                max,
            }
        }
        fn push(&mut self, e: Entry) {
            if self.run.len() == self.max {
                self.b.spill(&mut self.run).unwrap();
            }
            self.run.push(e);
        }
        fn finish(
            self,
            header: Header,
            base: Option<&Table>,
            pack: impl Fn(u32) -> u32,
            target: &Path,
        ) -> Result<Table> {
            self.b.finish(self.run, header, base, pack, target)
        }
    }

    fn same(a: &Entry, b: &Entry) -> bool {
        a.id == b.id && a.loc == b.loc
    }

    #[test]
    fn a_table_finds_what_was_pushed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        // Small runs: the entries are spilled in many runs and merged.
        let mut b = Fed::new(dir.path(), 97);
        let n = 5_000u64;
        for i in (0..n).rev() {
            b.push(entry(i, (i % 3) as u32, i as u32));
        }
        let t = b.finish(header(3), None, |p| p, &target).unwrap();
        assert_eq!(t.len(), n as usize);
        assert_eq!(t.header(), &header(3));
        for i in 0..n {
            let (pos, loc) = t.find(&id(i)).unwrap().expect("found");
            assert!(same(
                &Entry { id: id(i), loc },
                &entry(i, (i % 3) as u32, i as u32)
            ));
            assert!(same(
                &t.entry(pos).unwrap(),
                &entry(i, (i % 3) as u32, i as u32)
            ));
        }
        for i in n..n + 2_000 {
            assert!(t.find(&id(i)).unwrap().is_none());
        }
        let all: Vec<Entry> = t.iter().collect::<Result<_>>().unwrap();
        assert_eq!(all.len(), n as usize);
        assert!(all.windows(2).all(|w| w[0].id.0 < w[1].id.0));
        // Reopened, the same.
        let t = Table::open(&target).unwrap();
        assert!(t.find(&id(17)).unwrap().is_some());
        // No run is left behind, nor a temporary table.
        let left: Vec<_> = fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }

    #[test]
    fn the_first_location_is_kept_and_a_base_comes_first() {
        let dir = tempfile::tempdir().unwrap();
        let (t1, t2) = (dir.path().join("t1"), dir.path().join("t2"));
        let mut b = Fed::new(dir.path(), 4);
        // Blob 1 listed three times: the least (pack, offset) number wins, whichever run
        // it is in; pack numbers are mapped at the end.
        b.push(entry(1, 5, 10));
        b.push(entry(2, 1, 0));
        b.push(entry(1, 2, 30));
        for i in 10..20 {
            b.push(entry(i, 9, 0));
        }
        b.push(entry(1, 2, 20));
        let map = |p: u32| p / 2;
        let base = b.finish(header(5), None, map, &t1).unwrap();
        assert_eq!(base.len(), 12);
        let (_, loc) = base.find(&id(1)).unwrap().unwrap();
        assert_eq!(({ loc.pack }, { loc.offset }), (1, 20));
        // A base's entry wins over a pushed one; new ones join it.
        let mut b = Fed::new(dir.path(), 4);
        b.push(entry(1, 0, 99));
        b.push(entry(100, 3, 5));
        let t = b.finish(header(5), Some(&base), |p| p + 1, &t2).unwrap();
        assert_eq!(t.len(), 13);
        let (_, loc) = t.find(&id(1)).unwrap().unwrap();
        assert_eq!(({ loc.pack }, { loc.offset }), (1, 20));
        let (_, loc) = t.find(&id(100)).unwrap().unwrap();
        assert_eq!(
            { loc.pack },
            4,
            "a pushed entry's pack is mapped, a base's is not"
        );
    }

    #[test]
    fn totals_sum_the_kinds_and_span_each_pack_s_trees() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = Fed::new(dir.path(), 3);
        for i in 0..10u64 {
            let mut e = entry(i, (i % 2) as u32, 100 * i as u32);
            if i >= 6 {
                e.loc.kind = BlobKind::Tree;
            }
            b.push(e);
        }
        let t = b
            .finish(header(2), None, |p| p, &dir.path().join("t"))
            .unwrap();
        let want = Totals {
            data: (0..6).sum(),
            trees: (6..10).sum(),
            // Pack 0: blobs 6 and 8 (600..606, 800..808); pack 1: 7 and 9.
            tree_spans: [(0, (600, 808)), (1, (700, 909))].into(),
        };
        assert_eq!(t.totals(), &want);
        let t = Table::open(t.path()).unwrap();
        assert_eq!(t.totals(), &want);
        // Trees are answered from memory: found with every block unreadable, at the
        // position the entries have.
        let all: Vec<Entry> = t.iter().collect::<Result<_>>().unwrap();
        let mut bytes = fs::read(t.path()).unwrap();
        let blocks_at = t.blocks_at as usize;
        for b in &mut bytes[blocks_at..blocks_at + 10 * ENTRY] {
            *b ^= 0x33;
        }
        fs::write(t.path(), &bytes).unwrap();
        for i in 6..10 {
            let (pos, loc) = t.find(&id(i)).unwrap().expect("a tree");
            assert!(all[pos].id == id(i) && all[pos].loc == loc);
        }
        assert!(
            t.find(&id(0)).is_err(),
            "a data blob's block is read, and checked"
        );
    }

    #[test]
    fn an_empty_table_opens_and_finds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        let t = Fed::new(dir.path(), 10)
            .finish(Header::default(), None, |p| p, &target)
            .unwrap();
        assert_eq!(t.len(), 0);
        assert!(t.find(&id(1)).unwrap().is_none());
        assert_eq!(t.iter().count(), 0);
    }

    #[test]
    fn damage_is_found_not_believed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("t");
        let mut b = Fed::new(dir.path(), 1000);
        for i in 0..300 {
            b.push(entry(i, 0, i as u32));
        }
        let t = b.finish(header(1), None, |p| p, &target).unwrap();
        let (pos, _) = t.find(&id(42)).unwrap().unwrap();
        let t_totals = &t.totals().clone();
        drop(t);
        let good = fs::read(&target).unwrap();
        let totals = encode_totals(t_totals).len() + 4;
        let blocks_at = good.len()
            - (300 * ENTRY + 300usize.div_ceil(BLOCK) * SUM)
            - 300 * 4
            - totals
            - TRAILER as usize;
        // A flipped byte in an entry's block: the lookup fails, it does not answer.
        let mut bad = good.clone();
        bad[blocks_at + (pos / BLOCK) * (BLOCK * ENTRY + SUM) + (pos % BLOCK) * ENTRY + 40] ^= 1;
        fs::write(&target, &bad).unwrap();
        let t = Table::open(&target).unwrap();
        assert!(t.find(&id(42)).is_err());
        assert!(t.iter().any(|e| e.is_err()));
        // A flipped byte in the header, the fingerprints or the trailer: it does not open.
        for at in [6, 12, good.len() - 60, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 1;
            fs::write(&target, &bad).unwrap();
            assert!(Table::open(&target).is_err(), "byte {at}");
        }
        // Cut short: it does not open.
        fs::write(&target, &good[..good.len() - 1]).unwrap();
        assert!(Table::open(&target).is_err());
        fs::write(&target, &good[..3]).unwrap();
        assert!(Table::open(&target).is_err());
    }

    #[test]
    fn sweep_takes_old_formats_and_leftovers_of_killed_builders_only() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        for n in [
            "index-v1.table",
            "index-v2.table",
            "index-v3.table",
            "other.table",
        ] {
            fs::write(p(n), b"x").unwrap();
        }
        fs::create_dir(p(".index-runs-fresh")).unwrap();
        fs::create_dir(p(".index-runs-old")).unwrap();
        fs::write(p(".index-table-old"), b"x").unwrap();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7200);
        for n in [".index-runs-old", ".index-table-old"] {
            fs::File::open(p(n))
                .unwrap()
                .set_modified(hour_ago)
                .unwrap();
        }
        sweep(dir.path(), "index-v2.table");
        let mut left: Vec<String> = (fs::read_dir(dir.path()).unwrap())
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, [".index-runs-fresh", "index-v2.table", "other.table"]);
    }
}
