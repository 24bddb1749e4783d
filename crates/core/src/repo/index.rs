//! Index files and the in-memory index: blob id -> (pack, offset, length).
//!
//! In memory ([`Index`]) a blob costs 50 bytes: its id and an 18-byte [`Location`] in one
//! array sorted by id, searched within the stretch of ids that share their first bits;
//! blobs added while a backup runs wait in a small hash map until it is folded into the
//! array. A [`Loader`] decodes index files straight into the array, from each file's last
//! pack to its first while the file's plaintext is cut behind it, and sorts it once.
//!
//! A large index (from [`table_at`] blobs, about two million) keeps its sorted array in a
//! local file instead, a table ([`table`]) in the repository's cache directory: 4 bytes
//! a blob in memory, and the index files it was made from are not read again at the
//! next open. Only the blobs of index files written since stay in memory, until they
//! are an eighth of the table and a new table is made with them.
//!
//! ```text
//! format 1: index file = seal("MVIX" 0x01 pack_count:u32 pack*)
//!           pack       = pack_id:[32] count:u32 entry*
//! format 2: index file = seal[Index(id)]("MVIX" 0x02 pack_count:u32 pack*)
//!           pack       = pack_id:[32] pack_version:u8 count:u32 entry*
//! entry      = kind:u8 codec:u8 offset:u32 stored_len:u32 raw_len:u32 id:[32]   (46 bytes)
//! ```
//! `pack_version` is the format the pack was written in: a repository migrated from
//! format 1 keeps its format-1 data packs, whose blobs are sealed without associated data.

use crate::error::{Error, Result};
use crate::repo::compress::Codec;
use crate::repo::format::BlobKind;
use crate::repo::format::Version;
use crate::repo::id::Id;
use crate::repo::pack::{IndexedPack, PackEntry};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const MAGIC: &[u8; 4] = b"MVIX";
const ENTRY_LEN: usize = 46;

/// Blobs the overlay may hold before it is folded into the sorted array: at least this
/// many, or a sixteenth of the array (each fold moves the array once, so a blob added is
/// moved about 16 times on average, and the overlay stays small next to the array).
const FOLD_AT: usize = 1 << 14;

/// The whole repository's index.
///
/// The blobs read at open sit in one array sorted by id, 50 bytes each (no hash-table
/// slack); a lookup binary-searches the stretch of the array whose ids share the looked-up
/// id's first bits (up to 16; ids are keyed hashes, so the stretches are even), which
/// `buckets` gives. Blobs added later ([`Index::add_pack`], as a backup writes packs) go
/// to a small hash map, folded into the array when it grows past `FOLD_AT` or a
/// sixteenth of the array.
#[derive(Default)]
pub struct Index {
    /// The blobs of the index files an earlier open read, in a local file: positions
    /// `0..base.len()`, before `sorted`'s.
    base: Option<table::Table>,
    /// Why the base could not be read, the first time it could not: its blobs then look
    /// absent, as a damaged index file's do (see [`Index::damage`]).
    base_damage: OnceLock<String>,
    packs: Vec<Id>,
    /// The format each pack in `packs` was written in.
    versions: Vec<Version>,
    pack_pos: HashMap<Id, u32>,
    /// One entry per blob, sorted by id.
    sorted: Vec<Entry>,
    /// `sorted[buckets[p]..buckets[p + 1]]` holds the ids whose first `bits` bits are `p`
    /// (empty while `sorted` is).
    buckets: Vec<u32>,
    bits: u32,
    /// Blobs added since the last fold; none of them is in `sorted`.
    overlay: HashMap<Id, Location>,
}

impl Index {
    pub fn get(&self, id: &Id) -> Option<Location> {
        if let Some(i) = self.find_sorted(id) {
            return Some(self.sorted[i].loc);
        }
        if let Some(loc) = self.overlay.get(id) {
            return Some(*loc);
        }
        self.find_base(id).map(|(_, loc)| loc)
    }
    pub fn contains(&self, id: &Id) -> bool {
        self.overlay.contains_key(id) || self.find(id).is_some()
    }
    /// Why the index's table could not be read, if it could not: its blobs looked absent
    /// since (a backup stores them again, a restore says what it cannot find). The table
    /// is removed, and the next open reads the index files again.
    pub fn damage(&self) -> Option<&str> {
        self.base_damage.get().map(String::as_str)
    }
    /// The bytes the blobs take in their packs: message contents, and trees (a table's
    /// from its totals, not read).
    pub fn stored(&self) -> (u64, u64) {
        let t = self.totals();
        (t.data, t.trees)
    }
    /// Per pack holding tree blobs (by position): from its first tree blob's offset to the
    /// end of its last.
    pub fn tree_spans(&self) -> Vec<(u32, u64, u64)> {
        (self.totals().tree_spans.into_iter())
            .map(|(p, (start, end))| (p, start, end))
            .collect()
    }
    fn totals(&self) -> table::Totals {
        let mut t = (self.base.as_ref()).map_or_else(Default::default, |b| b.totals().clone());
        for loc in (self.sorted.iter().map(|e| &e.loc)).chain(self.overlay.values()) {
            t.add(loc);
        }
        t
    }
    /// Before many lookups: the table's entries read into the page cache in the
    /// background (see [`table::Table`]).
    pub fn will_need(&self) {
        if let Some(t) = &self.base {
            t.will_need();
        }
    }
    /// Blobs held in a local table rather than in memory.
    pub fn in_table(&self) -> usize {
        self.base_len()
    }
    fn base_len(&self) -> usize {
        self.base.as_ref().map_or(0, table::Table::len)
    }
    /// `id`'s position and location in the base.
    fn find_base(&self, id: &Id) -> Option<(usize, Location)> {
        let t = self.base.as_ref()?;
        t.find(id).unwrap_or_else(|e| {
            self.base_failed(t, e);
            None
        })
    }
    /// The base's entry at position `i`.
    fn base_entry(&self, i: usize) -> Option<Entry> {
        let t = self.base.as_ref()?;
        t.entry(i).map_err(|e| self.base_failed(t, e)).ok()
    }
    /// Records the base's first failure, says it once and removes its file.
    fn base_failed(&self, t: &table::Table, e: Error) {
        if self.base_damage.set(e.to_string()).is_ok() {
            tracing::warn!("{e}: its blobs look absent; it is removed, and the next run reads the index files again");
            table::remove(t.path());
        }
    }
    pub fn pack_id(&self, pos: u32) -> Id {
        self.packs[pos as usize]
    }
    /// The format the pack at `pos` was written in.
    pub fn pack_version(&self, pos: u32) -> Version {
        self.versions[pos as usize]
    }
    pub fn has_pack(&self, id: &Id) -> bool {
        self.pack_pos.contains_key(id)
    }
    /// The position of pack `id` in [`Self::packs`].
    pub fn pack_position_of(&self, id: &Id) -> Option<u32> {
        self.pack_pos.get(id).copied()
    }
    pub fn packs(&self) -> &[Id] {
        &self.packs
    }
    pub fn len(&self) -> usize {
        self.base_len() + self.sorted.len() + self.overlay.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Every blob once, in no particular order (a table's as far as it can be read:
    /// see [`Index::damage`]).
    pub fn iter(&self) -> impl Iterator<Item = (Id, Location)> + '_ {
        (self.base_entries().chain(self.sorted.iter().copied()))
            .map(|e| (e.id, e.loc))
            .chain(self.overlay.iter().map(|(id, loc)| (*id, *loc)))
    }

    /// The base's entries in order, as far as it can be read (a failure is recorded).
    fn base_entries(&self) -> impl Iterator<Item = Entry> + '_ {
        self.base.iter().flat_map(move |t| {
            t.iter()
                .map_while(move |r| r.map_err(|e| self.base_failed(t, e)).ok())
        })
    }

    /// The blobs grouped by pack, 4 bytes a blob beside the index (a map from each pack to
    /// its blobs' entries, as `check` had, was a second index: 108 MB at 1.5 million
    /// blobs).
    pub fn by_pack(&self) -> ByPack<'_> {
        let overlay: Vec<(&Id, &Location)> = self.overlay.iter().collect();
        // Each blob's pack, by blob number (the base's, then `sorted`'s, then the
        // overlay's): the base read once, in order.
        let packs: Vec<u32> = (self.base_entries().chain(self.sorted.iter().copied()))
            .map(|e| e.loc.pack)
            .chain(overlay.iter().map(|(_, l)| l.pack))
            .collect();
        // Blob `k` of `packs` is number `k` in the base's part, as far as the base
        // could be read (what could not is left out), then `base_len + j`.
        let read = packs.len() - self.sorted.len() - overlay.len();
        let base = self.base_len();
        let number = |k: usize| if k < read { k } else { k - read + base };
        // A counting sort by pack position.
        let mut starts = vec![0u32; self.packs.len() + 1];
        for &p in &packs {
            starts[p as usize + 1] += 1;
        }
        for p in 1..starts.len() {
            starts[p] += starts[p - 1];
        }
        let mut next = starts.clone();
        let mut order = vec![0u32; packs.len()];
        for (k, &p) in packs.iter().enumerate() {
            order[next[p as usize] as usize] = number(k) as u32;
            next[p as usize] += 1;
        }
        ByPack {
            index: self,
            overlay,
            order,
            starts,
        }
    }

    /// Adds a pack's entries; a blob already known elsewhere keeps its first location.
    pub fn add_pack(&mut self, pack: Id, version: Version, entries: &[PackEntry]) {
        let pos = self.pack_position(pack, version);
        for e in entries {
            if !self.overlay.contains_key(&e.id) && self.find(&e.id).is_none() {
                self.overlay.entry(e.id).or_insert(Location::of(pos, e));
            }
        }
        if self.overlay.len() > FOLD_AT.max(self.sorted.len() / 16) {
            self.fold();
        }
    }

    /// The position of `pack` in [`Self::packs`], added at the end if it is new.
    fn pack_position(&mut self, pack: Id, version: Version) -> u32 {
        *self.pack_pos.entry(pack).or_insert_with(|| {
            self.packs.push(pack);
            self.versions.push(version);
            (self.packs.len() - 1) as u32
        })
    }

    /// The number of `id` (its position in the base, or the base's length and its
    /// position in `sorted`), unless it is in the overlay or absent.
    fn find(&self, id: &Id) -> Option<usize> {
        match self.find_sorted(id) {
            Some(i) => Some(self.base_len() + i),
            None => self.find_base(id).map(|(i, _)| i),
        }
    }

    /// The position of `id` in `sorted`.
    fn find_sorted(&self, id: &Id) -> Option<usize> {
        let p = prefix(id, self.bits);
        let (lo, hi) = match self.buckets.get(p..p + 2) {
            Some(&[lo, hi]) => (lo as usize, hi as usize),
            _ => return None,
        };
        let i = self.sorted[lo..hi].binary_search_by(|e| e.id.0.cmp(&id.0));
        i.ok().map(|i| lo + i)
    }

    /// Moves the overlay into the sorted array: sorted on its own, then merged from the
    /// back into the array grown by its size (no second copy of the array).
    fn fold(&mut self) {
        let overlay = std::mem::take(&mut self.overlay);
        let new: Vec<Entry> = (overlay.into_iter())
            .map(|(id, loc)| Entry { id, loc })
            .collect();
        merge_sorted(&mut self.sorted, new, |e| e.id.0);
        self.index_buckets();
    }

    /// Builds `buckets` for `sorted`: two to four entries a bucket, at most 2^16 buckets.
    fn index_buckets(&mut self) {
        let n = self.sorted.len();
        assert!(
            u32::try_from(n).is_ok(),
            "more than 2^32 blobs in the index"
        );
        self.bits = (usize::BITS - (n >> 2).leading_zeros()).min(16);
        let mut buckets = vec![0u32; (1 << self.bits) + 1];
        for e in &self.sorted {
            buckets[prefix(&e.id, self.bits) + 1] += 1;
        }
        for p in 1..buckets.len() {
            buckets[p] += buckets[p - 1];
        }
        self.buckets = buckets;
    }
}

/// A set of blob ids, a bit for each blob of the index's sorted array (190 KB for 1.5
/// million blobs, where a `HashSet` of their ids took 69 MB); an id the array does not
/// hold (added since the last fold, or not in the index) goes to a hash set.
pub struct BlobSet<'a> {
    index: &'a Index,
    bits: Vec<u64>,
    others: std::collections::HashSet<Id>,
    len: usize,
}

impl<'a> BlobSet<'a> {
    pub fn new(index: &'a Index) -> Self {
        BlobSet {
            index,
            bits: vec![0; (index.base_len() + index.sorted.len()).div_ceil(64)],
            others: Default::default(),
            len: 0,
        }
    }

    /// Adds `id`; whether it was not in the set.
    pub fn insert(&mut self, id: Id) -> bool {
        let new = match self.index.find(&id) {
            Some(i) => {
                let (word, bit) = (i / 64, 1u64 << (i % 64));
                let new = self.bits[word] & bit == 0;
                self.bits[word] |= bit;
                new
            }
            None => self.others.insert(id),
        };
        self.len += usize::from(new);
        new
    }

    pub fn contains(&self, id: &Id) -> bool {
        match self.index.find(id) {
            Some(i) => self.bits[i / 64] & (1 << (i % 64)) != 0,
            None => self.others.contains(id),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The blobs of each pack ([`Index::by_pack`]).
pub struct ByPack<'a> {
    index: &'a Index,
    overlay: Vec<(&'a Id, &'a Location)>,
    /// Blob numbers (a position in the sorted array, then in `overlay`) by pack.
    order: Vec<u32>,
    /// The blobs of the pack at position `p` are `order[starts[p]..starts[p + 1]]`.
    starts: Vec<u32>,
}

impl ByPack<'_> {
    /// The blobs of the pack at `pos` in [`Index::packs`] (none for a position past them).
    pub fn blobs(&self, pos: u32) -> impl Iterator<Item = (Id, Location)> + '_ {
        let p = pos as usize;
        let range = match self.starts.get(p..p + 2) {
            Some(&[a, b]) => a as usize..b as usize,
            _ => 0..0,
        };
        let (base, sorted) = (self.index.base_len(), &self.index.sorted);
        self.order[range].iter().filter_map(move |&i| {
            let i = i as usize;
            if i < base {
                return (self.index.base_entry(i)).map(|e| (e.id, e.loc));
            }
            Some(match (i - base).checked_sub(sorted.len()) {
                None => (sorted[i - base].id, sorted[i - base].loc),
                Some(k) => (*self.overlay[k].0, *self.overlay[k].1),
            })
        })
    }
}

/// Merges `new` into `sorted` (both in `key` order once `new` is sorted here): from the
/// back, into `sorted` grown by `new`'s length, so the array is never copied whole (a
/// large vector grows in place by `mremap`). For the index's and the saved ids' folds.
pub(crate) fn merge_sorted<T: Copy, K: Ord>(
    sorted: &mut Vec<T>,
    mut new: Vec<T>,
    key: impl Fn(&T) -> K,
) {
    new.sort_unstable_by_key(&key);
    let (mut i, mut j) = (sorted.len(), new.len());
    sorted.reserve_exact(j);
    sorted.extend_from_slice(&new);
    for k in (0..sorted.len()).rev() {
        if j == 0 {
            break;
        }
        if i > 0 && key(&sorted[i - 1]) > key(&new[j - 1]) {
            sorted[k] = sorted[i - 1];
            i -= 1;
        } else {
            sorted[k] = new[j - 1];
            j -= 1;
        }
    }
}

/// The first `bits` (at most 16) bits of `id`.
fn prefix(id: &Id, bits: u32) -> usize {
    (u32::from(u16::from_be_bytes([id.0[0], id.0[1]])) >> (16 - bits)) as usize
}

/// Builds an [`Index`] from index files without a second copy of their entries: every
/// file's entries are decoded straight into one array, which is sorted once at the end.
///
/// A blob listed more than once keeps its first location in load order, as
/// [`Index::add_pack`] would: while loading, an entry's `pack` field holds the number of
/// its listing (a pack's entries in one file; a new number where the offsets go down), so
/// sorting by (id, listing, offset) puts the first occurrence first, and `listings` maps
/// each listing to its pack's position afterwards.
#[derive(Default)]
pub struct Loader {
    index: Index,
    entries: Vec<Entry>,
    listings: Vec<u32>,
    /// Loading into a table ([`Loader::with_table`]).
    table: Option<TablePlan>,
}

/// Where a [`Loader`] makes a table.
struct TablePlan {
    /// The repository's cache directory (runs are spilled there) and the table's file.
    dir: PathBuf,
    target: PathBuf,
    /// A table file was found that does not hold the index files there now.
    stale: bool,
    /// Blobs from which the index goes to a table ([`table_at`]).
    at: usize,
    /// Entries held before they are spilled ([`RUN`]).
    run: usize,
    /// Entries spilled in sorted runs, once `entries` reached [`RUN`].
    builder: Option<table::Builder>,
}

/// Entries a loader making a table holds in memory before it sorts and spills them
/// (50 MB).
const RUN: usize = 1 << 20;

/// The file name of the index's table in the repository's cache directory, for a
/// repository of format `version` (a migrated repository's index is read anew).
pub fn table_name(version: Version) -> String {
    format!("index-v{}.table", version.number())
}

/// Blobs from which the index is kept in a table rather than in memory:
/// `MAILVAULT_INDEX_TABLE_AT` (docs/format.md, *The index's table*), else 2,097,152 (an
/// index of 100 MB in memory). Below it the array is faster: a restore of 1.5 million
/// messages took 33-34 s with a table and 25-26 s without (BENCHMARKS.md), its lookups
/// each reading a block.
pub fn table_at() -> usize {
    static AT: OnceLock<usize> = OnceLock::new();
    *AT.get_or_init(|| {
        (std::env::var("MAILVAULT_INDEX_TABLE_AT").ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(1 << 21)
    })
}

impl Loader {
    /// A loader for index files of `bytes` bytes in all (their listed sizes): room for as
    /// many entries as they can hold is reserved at once, so the array is not copied as
    /// it grows (pages never written cost no memory).
    pub fn with_size_hint(bytes: u64) -> Loader {
        let mut entries = Vec::new();
        let most = usize::try_from(bytes / ENTRY_LEN as u64).unwrap_or(usize::MAX);
        let _ = entries.try_reserve_exact(most);
        Loader {
            entries,
            ..Loader::default()
        }
    }

    /// A loader that keeps the index in a table at `target` in the cache directory `dir`
    /// once it is [`table_at`] blobs or more: `base`, the table an earlier open made, is
    /// kept (the caller loads only the index files it does not hold) and made again with
    /// the new blobs once they are an eighth of it. `stale`: a table was at `target` that
    /// does not hold the index files there now (it is replaced, or removed).
    pub fn with_table(
        base: Option<table::Table>,
        dir: &Path,
        target: &Path,
        stale: bool,
        bytes: u64,
    ) -> Loader {
        // Room for a run at most: more is spilled.
        let mut loader = Loader::with_size_hint(bytes.min((RUN * ENTRY_LEN) as u64));
        if let Some(t) = &base {
            for &(id, version) in &t.header().packs {
                loader.index.pack_position(id, version);
            }
        }
        loader.index.base = base;
        Loader {
            table: Some(TablePlan {
                dir: dir.to_path_buf(),
                target: target.to_path_buf(),
                stale,
                at: table_at(),
                run: RUN,
                builder: None,
            }),
            ..loader
        }
    }

    /// With a table: spills the entries gathered once they are a run's worth (1,048,576) or more (between
    /// files: a file that fails to decode takes its entries back out of `entries`).
    pub fn spill_if_full(&mut self) -> Result<()> {
        let Some(plan) = &mut self.table else {
            return Ok(());
        };
        if self.entries.len() < plan.run {
            return Ok(());
        }
        let b = match &mut plan.builder {
            Some(b) => b,
            None => plan.builder.insert(table::Builder::new(&plan.dir)?),
        };
        b.spill(&mut self.entries)
    }

    /// Adds the packs and entries of one index file's plaintext (as [`decode`] reads it);
    /// a file that does not decode, or lists a pack in a format not in `allowed`, adds
    /// nothing.
    pub fn add_file(
        &mut self,
        plain: Vec<u8>,
        version: Version,
        what: &str,
        allowed: &[Version],
    ) -> Result<()> {
        let mark = (
            self.entries.len(),
            self.listings.len(),
            self.index.packs.len(),
        );
        let r = self.decode_file(plain, version, what, allowed);
        if r.is_err() {
            self.entries.truncate(mark.0);
            self.listings.truncate(mark.1);
            for p in self.index.packs.drain(mark.2..) {
                self.index.pack_pos.remove(&p);
            }
            self.index.versions.truncate(mark.2);
        }
        r
    }

    /// Registers the file's packs in file order, then decodes their entries from the last
    /// pack to the first, cutting the plaintext behind each pack as it goes: the entries
    /// (50 bytes) replace the file's bytes (46 bytes an entry) instead of adding to them.
    fn decode_file(
        &mut self,
        mut b: Vec<u8>,
        v: Version,
        what: &str,
        ok: &[Version],
    ) -> Result<()> {
        let packs = scan(&b, v, what)?;
        if let Some(p) = packs.iter().find(|p| !ok.contains(&p.version)) {
            return Err(Error::corrupt(
                what,
                format!(
                    "lists pack {} as format {}, which this repository does not hold",
                    p.id.short(),
                    p.version
                ),
            ));
        }
        // A pack's listings: one, and a new one wherever its entries' offsets go down.
        let mut first = Vec::with_capacity(packs.len());
        for p in &packs {
            let pos = self.index.pack_position(p.id, p.version);
            first.push(self.listings.len());
            let runs = 1 + entries_of(&b, p)
                .zip(entries_of(&b, p).skip(1))
                .filter(|(a, b)| offset_of(b) < offset_of(a))
                .count();
            self.listings.extend(std::iter::repeat_n(pos, runs));
        }
        self.entries.reserve(packs.iter().map(|p| p.count).sum());
        let mut freed = 0;
        for (p, first) in packs.iter().zip(first).rev() {
            let (mut listing, mut last) = (first, 0);
            for raw in entries_of(&b, p) {
                let e = parse_entry(raw, what)?;
                listing += usize::from(e.offset < last);
                last = e.offset;
                self.entries.push(Entry {
                    id: e.id,
                    loc: Location::of(listing as u32, &e),
                });
            }
            freed += b.len() - p.start;
            b.truncate(p.start);
            if freed >= 1 << 20 {
                b.shrink_to_fit();
                freed = 0;
            }
        }
        Ok(())
    }

    /// The index: the entries sorted by id, each blob's first location kept.
    pub fn finish(self) -> Index {
        let Loader {
            mut index,
            entries,
            listings,
            ..
        } = self;
        index.sorted = first_locations(entries, &listings);
        index.index_buckets();
        index
    }

    /// [`Loader::finish`] of a loader [`Loader::with_table`]: the index, its blobs in a
    /// table (holding index `files`, every file loaded) when they are [`table_at`] or
    /// more.
    pub fn finish_table(self, files: Vec<Id>) -> Result<Index> {
        let Loader {
            mut index,
            mut entries,
            listings,
            table,
        } = self;
        let Some(plan) = table else {
            return Err(Error::InvalidInput("no table to finish".into()));
        };
        let base = index.base_len();
        let build =
            plan.builder.is_some() || (base + entries.len() >= plan.at && entries.len() > base / 8);
        if !build {
            if base == 0 && plan.stale {
                table::remove(&plan.target);
            }
            // The base's blobs keep the base's location: one blob, one number.
            entries.retain(|e| index.find_base(&e.id).is_none());
            index.sorted = first_locations(entries, &listings);
            index.index_buckets();
            return Ok(index);
        }
        let b = match plan.builder {
            Some(b) => b,
            None => table::Builder::new(&plan.dir)?,
        };
        let header = table::Header {
            packs: (index.packs.iter().copied())
                .zip(index.versions.iter().copied())
                .collect(),
            files,
        };
        let old = index.base.take();
        let made = b.finish(
            entries,
            header,
            old.as_ref(),
            |l| listings[l as usize],
            &plan.target,
        )?;
        index.base = Some(made);
        index.sorted = Vec::new();
        index.index_buckets();
        Ok(index)
    }
}

/// `entries` (their `pack` a listing number) sorted by id, each blob's first location
/// kept, their `pack` made the listing's pack position.
fn first_locations(mut entries: Vec<Entry>, listings: &[u32]) -> Vec<Entry> {
    entries.sort_unstable_by(|a, b| {
        let key = |e: &Entry| (e.loc.pack, e.loc.offset);
        a.id.0.cmp(&b.id.0).then_with(|| key(a).cmp(&key(b)))
    });
    entries.dedup_by(|later, first| later.id == first.id);
    for e in &mut entries {
        e.loc.pack = listings[e.loc.pack as usize];
    }
    entries.shrink_to_fit();
    entries
}

/// Index files hold at most this many blob entries (46 bytes each, about 4.6 MB): a
/// prune's, and a backup's, which writes one each time its packs hold this many.
pub const INDEX_FILE_ENTRIES: usize = 100_000;

/// The packs in groups of at most [`INDEX_FILE_ENTRIES`] entries (a pack with more alone),
/// one index file each.
pub fn index_chunks(packs: &[IndexedPack]) -> Vec<&[IndexedPack]> {
    index_chunks_of(packs, INDEX_FILE_ENTRIES)
}

/// [`index_chunks`] of at most `max` entries.
pub fn index_chunks_of(packs: &[IndexedPack], max: usize) -> Vec<&[IndexedPack]> {
    let mut out = Vec::new();
    let (mut start, mut n) = (0, 0);
    for (i, p) in packs.iter().enumerate() {
        if n > 0 && n + p.entries.len() > max {
            out.push(&packs[start..i]);
            (start, n) = (i, 0);
        }
        n += p.entries.len();
    }
    if start < packs.len() {
        out.push(&packs[start..]);
    }
    out
}

/// Encodes the plaintext of one index file of format `version`. A format-1 index file
/// can only list format-1 packs.
pub fn encode(packs: &[IndexedPack], version: Version) -> Result<Vec<u8>> {
    let n: usize = packs.iter().map(|p| 37 + p.entries.len() * ENTRY_LEN).sum();
    let mut out = Vec::with_capacity(9 + n);
    out.extend_from_slice(MAGIC);
    out.push(version.number() as u8);
    out.extend_from_slice(&(packs.len() as u32).to_le_bytes());
    for p in packs {
        out.extend_from_slice(&p.id.0);
        match version {
            Version::V1 if p.version != Version::V1 => {
                return Err(Error::InvalidInput(format!(
                    "pack {} is format {} and cannot be listed in a format-1 index",
                    p.id.short(),
                    p.version
                )))
            }
            Version::V1 => {}
            Version::V2 => out.push(p.version.number() as u8),
        }
        out.extend_from_slice(&(p.entries.len() as u32).to_le_bytes());
        for e in &p.entries {
            out.push(e.kind as u8);
            out.push(e.codec as u8);
            out.extend_from_slice(&e.offset.to_le_bytes());
            out.extend_from_slice(&e.stored_len.to_le_bytes());
            out.extend_from_slice(&e.raw_len.to_le_bytes());
            out.extend_from_slice(&e.id.0);
        }
    }
    Ok(out)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
    what: &'a str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        let end = end.ok_or_else(|| Error::corrupt(self.what, "index file truncated"))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn id(&mut self) -> Result<Id> {
        let mut id = [0u8; 32];
        id.copy_from_slice(self.take(32)?);
        Ok(Id(id))
    }
}

/// Decodes the plaintext of one index file of format `version` (the repository's: the
/// file's own version byte must agree).
pub fn decode(b: &[u8], version: Version, what: &str) -> Result<Vec<IndexedPack>> {
    let mut packs = Vec::new();
    for p in scan(b, version, what)? {
        packs.push(IndexedPack {
            id: p.id,
            version: p.version,
            entries: (entries_of(b, &p).map(|raw| parse_entry(raw, what)))
                .collect::<Result<_>>()?,
        });
    }
    Ok(packs)
}

/// One pack as an index file lists it.
struct Listed {
    id: Id,
    version: Version,
    /// Where its listing starts in the file (its id).
    start: usize,
    /// Where its entries start.
    entries: usize,
    count: usize,
}

/// The packs an index file lists, in file order: its whole layout checked, but not its
/// entries' bytes ([`parse_entry`]).
fn scan(b: &[u8], version: Version, what: &str) -> Result<Vec<Listed>> {
    let mut r = Reader { b, at: 0, what };
    if r.take(4)? != MAGIC {
        return Err(Error::corrupt(what, "not an index file"));
    }
    let v = r.take(1)?[0];
    if u32::from(v) != version.number() {
        return Err(Error::corrupt(
            what,
            format!("index version {v} in a format-{version} repository"),
        ));
    }
    let npacks = r.u32()? as usize;
    let mut packs = Vec::with_capacity(npacks.min(b.len() / 37));
    for _ in 0..npacks {
        let start = r.at;
        let id = r.id()?;
        let pack_version = match version {
            Version::V1 => Version::V1,
            Version::V2 => {
                let v = r.take(1)?[0];
                Version::from_number(v.into()).map_err(|_| {
                    Error::corrupt(what, format!("pack {} has unknown format {v}", id.short()))
                })?
            }
        };
        let count = r.u32()? as usize;
        let entries = r.at;
        let len = count.checked_mul(ENTRY_LEN);
        r.take(len.ok_or_else(|| Error::corrupt(what, "index file truncated"))?)?;
        packs.push(Listed {
            id,
            version: pack_version,
            start,
            entries,
            count,
        });
    }
    if r.at != b.len() {
        return Err(Error::corrupt(what, "trailing bytes after the index"));
    }
    Ok(packs)
}

/// The raw entries of the pack `p` in the file `b` that [`scan`] read.
fn entries_of<'a>(b: &'a [u8], p: &Listed) -> std::slice::ChunksExact<'a, u8> {
    b[p.entries..p.entries + p.count * ENTRY_LEN].chunks_exact(ENTRY_LEN)
}

/// The offset field of a raw entry.
fn offset_of(raw: &[u8]) -> u32 {
    u32::from_le_bytes([raw[2], raw[3], raw[4], raw[5]])
}

/// One raw entry (`ENTRY_LEN` bytes).
fn parse_entry(raw: &[u8], what: &str) -> Result<PackEntry> {
    let kind = BlobKind::from_u8(raw[0]).ok_or_else(|| Error::corrupt(what, "bad blob kind"))?;
    let codec = Codec::from_u8(raw[1]).ok_or_else(|| Error::corrupt(what, "bad codec"))?;
    let u32_at = |i: usize| u32::from_le_bytes([raw[i], raw[i + 1], raw[i + 2], raw[i + 3]]);
    let mut id = [0u8; 32];
    id.copy_from_slice(&raw[14..46]);
    Ok(PackEntry {
        id: Id(id),
        kind,
        codec,
        offset: u32_at(2),
        stored_len: u32_at(6),
        raw_len: u32_at(10),
    })
}

mod entry;
pub mod table;

use entry::Entry;
pub use entry::Location;

#[cfg(test)]
mod tests;
