//! Reading the blobs of many messages by pack span, as restic's restorer reads each pack
//! once: one ranged read fetches many blobs.
//!
//! Restores hand over their messages (jobs) in the order they are written, sorted by where
//! their first blob lies. [`plan`] cuts that list into groups of consecutive jobs whose
//! blobs take about [`SpanOptions::group_bytes`] of packs, and gives each group its spans:
//! per pack, the group's blobs sorted by offset, neighbours at most [`SpanOptions::gap`]
//! apart merged into one range (the bytes between them are read and dropped), up to
//! [`SpanOptions::max_span`]. [`read_by_spans`] fetches the spans with
//! [`SpanOptions::readers`] reads in flight, in order, at most [`SpanOptions::ahead`] groups
//! ahead of the one being written, and hands each group with its fetched spans
//! ([`Fetched`]) to the caller, which decodes and writes its messages in parallel from
//! memory. A blob that later groups need again (deduplicated: one message in many
//! mailboxes) is kept, sealed, from the group that read it to its last use, up to
//! [`SpanOptions::keep_bytes`], instead of being read again by every group that needs it.
//! Memory stays near `(ahead + 1) * group_bytes + keep_bytes`.
//!
//! On object storage every read is a request: a restore of 100k messages that read blob
//! by blob made 100k GETs; by span it makes about one per group and pack. Blobs are
//! opened by [`Repository::open_sealed`] exactly as a single read opens them, and the
//! caller checks each message's whole hash as before. A blob the plan does not cover (not
//! in the index) or whose span could not be read is read alone, so its error is the one a
//! single read gives and names the blob and its pack.

use crate::error::Result;
use crate::id::Id;
use crate::index::Index;
use crate::pack::{self, BlobKind};
use crate::repo::{lock, Repository};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Condvar, Mutex};

/// How spans are planned and fetched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpanOptions {
    /// Blobs of one pack at most this many bytes apart are read in one span.
    pub gap: u64,
    /// A span is at most this long (a blob longer than this is a span of its own).
    pub max_span: u64,
    /// About how many bytes of spans a group of jobs needs (a group ends with the job
    /// that reaches it).
    pub group_bytes: u64,
    /// Spans read at once.
    pub readers: usize,
    /// Groups fetched ahead of the one being written.
    pub ahead: usize,
    /// Sealed bytes of blobs that later groups need again (a message delivered to many
    /// mailboxes is one blob), kept from the group that read them to their last use
    /// rather than read again in every group.
    pub keep_bytes: u64,
}

impl Default for SpanOptions {
    fn default() -> Self {
        SpanOptions {
            gap: 256 << 10,
            max_span: 16 << 20,
            group_bytes: 16 << 20,
            readers: crate::store::DEFAULT_CONNECTIONS,
            ahead: 2,
            keep_bytes: 64 << 20,
        }
    }
}

impl SpanOptions {
    /// The defaults, with `reads` spans read at once; 0: [`crate::store::DEFAULT_CONNECTIONS`]
    /// on object storage (`s3:`), where a read waits on the network, and 2 on a local
    /// directory, where more readers only take the CPU from the writers (measured on the
    /// `medium` preset: 8 readers made a local restore 10% slower than 2).
    pub fn for_store(store: &dyn crate::store::Store, reads: usize) -> SpanOptions {
        let readers = match reads {
            0 if store.location().starts_with("s3:") => crate::store::DEFAULT_CONNECTIONS,
            0 => 2,
            n => n,
        };
        SpanOptions {
            readers,
            ..SpanOptions::default()
        }
    }
}

/// One ranged read of a pack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Span {
    /// The pack's position in the index.
    pub pack: u32,
    /// The kind of the pack's blobs (for the store's caches).
    pub kind: BlobKind,
    pub offset: u64,
    pub len: u64,
}

/// Where a blob is in its group's spans.
#[derive(Clone, Copy, Debug)]
struct BlobAt {
    span: usize,
    offset: usize,
    len: usize,
}

/// Consecutive jobs and the spans that hold their blobs.
#[derive(Debug, Default)]
pub struct Group {
    /// Positions in the job list.
    pub jobs: Range<usize>,
    /// Ordered by pack, then offset.
    pub spans: Vec<Span>,
    blobs: HashMap<Id, BlobAt>,
    /// Blobs of these spans kept for later groups, and kept blobs whose last use is in
    /// this group (dropped once it is written).
    keep: Vec<Id>,
    release: Vec<Id>,
}

impl Group {
    /// Bytes the group's spans read.
    pub fn bytes(&self) -> u64 {
        self.spans.iter().map(|s| s.len).sum()
    }

    /// Whether the group's spans read blob `id` (else it is kept from an earlier group,
    /// or read alone).
    pub fn reads(&self, id: &Id) -> bool {
        self.blobs.contains_key(id)
    }
}

/// Cuts `jobs` (in the order they are written) into groups and plans each group's spans.
/// `content` gives a job's blobs, of which only those `wanted` are planned (a caller that
/// keeps opened blobs leaves those out); blobs not in the index are left to single reads.
pub fn plan<J>(
    index: &Index,
    jobs: &[J],
    content: impl Fn(&J) -> &[Id],
    wanted: impl Fn(&Id) -> bool,
    opts: &SpanOptions,
) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    let mut start = 0;
    // The last job that needs each blob; the blobs kept (sealed length) and when they go.
    let mut last: HashMap<Id, usize> = HashMap::new();
    for (i, job) in jobs.iter().enumerate() {
        for id in content(job).iter().filter(|id| wanted(id)) {
            last.insert(*id, i);
        }
    }
    let mut kept: HashMap<Id, u64> = HashMap::new();
    let mut kept_bytes = 0u64;
    let mut goes: std::collections::BTreeMap<usize, Vec<Id>> = Default::default();
    // Per pack, the end of the last blob taken into the group, and the group's span bytes
    // as the merge rule will count them (exact when blobs come in pack order, which the
    // sort by first blob mostly gives; a blob before the end counts whole).
    let mut ends: HashMap<u32, u64> = HashMap::new();
    let mut bytes = 0u64;
    for (i, job) in jobs.iter().enumerate() {
        let blobs = content(job)
            .iter()
            .filter(|id| wanted(id) && !kept.contains_key(id));
        for loc in blobs.filter_map(|id| index.get(id)) {
            let (s, e) = (u64::from(loc.offset), end_of(loc));
            bytes += match ends.get(&loc.pack) {
                Some(&m) if s >= m && s - m <= opts.gap => e - m,
                Some(&m) if s < m => e.saturating_sub(m).max(e - s),
                _ => e - s,
            };
            let m = ends.entry(loc.pack).or_insert(e);
            *m = (*m).max(e);
        }
        if bytes >= opts.group_bytes || i + 1 == jobs.len() {
            let read = |id: &Id| wanted(id) && !kept.contains_key(id);
            let mut group = spans_of(index, jobs, &content, &read, start..i + 1, opts);
            // Keep what later groups need, soonest needed first, within the budget.
            let mut later: Vec<(usize, Id, u64)> = (group.blobs.iter())
                .filter_map(|(id, at)| {
                    let l = *last.get(id).filter(|&&l| l > i)?;
                    Some((l, *id, at.len as u64))
                })
                .collect();
            later.sort_unstable();
            for (l, id, len) in later {
                if kept_bytes + len > opts.keep_bytes {
                    break;
                }
                kept_bytes += len;
                kept.insert(id, len);
                goes.entry(l).or_default().push(id);
                group.keep.push(id);
            }
            // Kept blobs last used in this group go once it is written.
            while let Some(e) = goes.first_entry().filter(|e| *e.key() <= i) {
                for id in e.remove() {
                    kept_bytes -= kept.remove(&id).unwrap_or(0);
                    group.release.push(id);
                }
            }
            groups.push(group);
            start = i + 1;
            ends.clear();
            bytes = 0;
        }
    }
    groups
}

fn end_of(loc: &crate::index::Location) -> u64 {
    u64::from(loc.offset) + u64::from(loc.stored_len)
}

/// The spans of the jobs `range`.
fn spans_of<J>(
    index: &Index,
    jobs: &[J],
    content: &impl Fn(&J) -> &[Id],
    wanted: &impl Fn(&Id) -> bool,
    range: Range<usize>,
    opts: &SpanOptions,
) -> Group {
    let mut blobs: Vec<(Id, crate::index::Location)> = Vec::new();
    let mut seen: HashMap<Id, ()> = HashMap::new();
    for job in &jobs[range.clone()] {
        for id in content(job).iter().filter(|id| wanted(id)) {
            if let Some(loc) = index.get(id) {
                if seen.insert(*id, ()).is_none() {
                    blobs.push((*id, *loc));
                }
            }
        }
    }
    blobs.sort_by_key(|(_, l)| (l.pack, l.offset));
    let mut group = Group {
        jobs: range,
        ..Default::default()
    };
    for (id, loc) in blobs {
        let (s, e) = (u64::from(loc.offset), end_of(&loc));
        let merged = match group.spans.last_mut() {
            Some(sp)
                if sp.pack == loc.pack
                    && s <= sp.offset + sp.len + opts.gap
                    && e.max(sp.offset + sp.len) - sp.offset <= opts.max_span =>
            {
                sp.len = e.max(sp.offset + sp.len) - sp.offset;
                true
            }
            _ => false,
        };
        if !merged {
            group.spans.push(Span {
                pack: loc.pack,
                kind: loc.kind,
                offset: s,
                len: e - s,
            });
        }
        let span = group.spans.len() - 1;
        group.blobs.insert(
            id,
            BlobAt {
                span,
                offset: (s - group.spans[span].offset) as usize,
                len: loc.stored_len as usize,
            },
        );
    }
    group
}

/// A group's spans as read, and the blobs kept from earlier groups, for opening its blobs.
pub struct Fetched<'a> {
    repo: &'a Repository,
    group: &'a Group,
    spans: Vec<Option<Result<Vec<u8>>>>,
    kept: &'a HashMap<Id, Vec<u8>>,
}

impl Fetched<'_> {
    /// Opens blob `id` from the group's spans as [`Repository::read_blob`] does, or reads
    /// it alone when no span holds it or its span could not be read.
    pub fn blob(&self, id: &Id) -> Result<Vec<u8>> {
        match self.sealed(id) {
            Some(sealed) => self.repo.open_sealed(id, sealed.to_vec(), true),
            None => self.repo.read_blob(id),
        }
    }

    /// [`Self::blob`] without hashing a format-1 blob against its id, as
    /// [`Repository::read_blob_unverified`] (for callers that check a whole message).
    pub fn blob_unverified(&self, id: &Id) -> Result<Vec<u8>> {
        match self.sealed(id) {
            Some(sealed) => self.repo.open_sealed(id, sealed.to_vec(), false),
            None => self.repo.read_blob_unverified(id),
        }
    }

    fn sealed(&self, id: &Id) -> Option<&[u8]> {
        let Some(at) = self.group.blobs.get(id) else {
            return self.kept.get(id).map(Vec::as_slice);
        };
        match self.spans.get(at.span)? {
            Some(Ok(span)) => span.get(at.offset..at.offset + at.len),
            _ => None,
        }
    }
}

/// What the readers and the writer share.
struct State {
    /// The next span to read (over all groups, in order).
    next: usize,
    /// Groups handed to the writer and done with.
    done: usize,
    /// Read spans waiting for their group to be written.
    slots: Vec<Option<Result<Vec<u8>>>>,
    /// The writer has stopped (finished or panicked): readers stop too.
    stop: bool,
}

/// Stops the readers when the writer returns or unwinds.
struct StopOnDrop<'a>(&'a Mutex<State>, &'a Condvar);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        lock(self.0).stop = true;
        self.1.notify_all();
    }
}

/// Plans `jobs` (see [`plan`]), reads the spans and calls `write` for each group in order
/// with its jobs and their fetched spans.
pub fn read_by_spans<J>(
    repo: &Repository,
    jobs: &[J],
    content: impl Fn(&J) -> &[Id],
    wanted: impl Fn(&Id) -> bool,
    opts: &SpanOptions,
    mut write: impl FnMut(&[J], &Fetched),
) {
    let index = repo.index();
    let groups = plan(index, jobs, content, wanted, opts);
    // Span (over all groups) -> its group, and each group's first span.
    let mut group_of = Vec::new();
    let mut first = Vec::with_capacity(groups.len() + 1);
    for (g, group) in groups.iter().enumerate() {
        first.push(group_of.len());
        group_of.extend(std::iter::repeat_n(g, group.spans.len()));
    }
    first.push(group_of.len());
    let all: Vec<&Span> = groups.iter().flat_map(|g| &g.spans).collect();
    let state = Mutex::new(State {
        next: 0,
        done: 0,
        slots: (0..all.len()).map(|_| None).collect(),
        stop: false,
    });
    let ready = Condvar::new();
    let ahead = opts.ahead;
    let reader = || loop {
        let i = {
            let mut st = lock(&state);
            loop {
                if st.stop || st.next >= all.len() {
                    return;
                }
                if group_of[st.next] <= st.done + ahead {
                    break;
                }
                st = ready.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.next += 1;
            st.next - 1
        };
        let s = all[i];
        let path = pack::pack_path(&index.pack_id(s.pack));
        let got = repo.store().get_pack_range(&path, s.offset, s.len, s.kind);
        lock(&state).slots[i] = Some(got);
        ready.notify_all();
    };
    std::thread::scope(|scope| {
        let readers = opts.readers.clamp(1, all.len().max(1));
        for _ in 0..readers {
            scope.spawn(reader);
        }
        let _stop = StopOnDrop(&state, &ready);
        let mut kept = HashMap::new();
        for (g, group) in groups.iter().enumerate() {
            let spans = {
                let mut st = lock(&state);
                while st.slots[first[g]..first[g + 1]].iter().any(Option::is_none) {
                    st = ready.wait(st).unwrap_or_else(|e| e.into_inner());
                }
                st.slots[first[g]..first[g + 1]]
                    .iter_mut()
                    .map(Option::take)
                    .collect()
            };
            let fetched = Fetched {
                repo,
                group,
                spans,
                kept: &kept,
            };
            write(&jobs[group.jobs.clone()], &fetched);
            let keep: Vec<(Id, Vec<u8>)> = (group.keep.iter())
                .filter_map(|id| Some((*id, fetched.sealed(id)?.to_vec())))
                .collect();
            drop(fetched);
            kept.extend(keep);
            for id in &group.release {
                kept.remove(id);
            }
            lock(&state).done = g + 1;
            ready.notify_all();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::Codec;
    use crate::format::Version;
    use crate::pack::PackEntry;

    fn id(n: u8) -> Id {
        Id([n; 32])
    }

    /// Two packs: blobs 1..=4 in pack A at 0, 100, 1000 (gap 800) and 5000 (gap 3000);
    /// blob 5 in pack B.
    fn index() -> Index {
        let e = |n: u8, offset: u32, stored_len: u32| PackEntry {
            id: id(n),
            kind: BlobKind::Data,
            codec: Codec::Raw,
            offset,
            stored_len,
            raw_len: stored_len,
        };
        let mut index = Index::default();
        let a = [
            e(1, 0, 100),
            e(2, 100, 100),
            e(3, 1000, 200),
            e(4, 5000, 100),
        ];
        index.add_pack(id(0xa0), Version::V2, &a);
        index.add_pack(id(0xb0), Version::V2, &[e(5, 0, 50)]);
        index
    }

    fn opts(gap: u64, max_span: u64, group_bytes: u64) -> SpanOptions {
        SpanOptions {
            gap,
            max_span,
            group_bytes,
            ..Default::default()
        }
    }

    fn ranges(g: &Group) -> Vec<(u32, u64, u64)> {
        g.spans.iter().map(|s| (s.pack, s.offset, s.len)).collect()
    }

    /// Nearby blobs of a pack merge into one span (gap and span size permitting), far
    /// ones and other packs' do not; a blob two messages share is read once; a blob the
    /// index lacks is left out (it is read alone).
    #[test]
    fn nearby_blobs_merge_into_spans() {
        let index = index();
        let jobs = vec![
            vec![id(5), id(1)],
            vec![id(2), id(3)],
            vec![id(4), id(1)],
            vec![id(9)],
        ];
        let all = |o| plan(&index, &jobs, |j| j, |_| true, &o);
        let g = all(opts(1000, 1 << 20, 1 << 20));
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].jobs, 0..4);
        assert_eq!(
            ranges(&g[0]),
            vec![(0, 0, 1200), (0, 5000, 100), (1, 0, 50)]
        );
        assert_eq!(g[0].bytes(), 1350);
        assert!(!g[0].blobs.contains_key(&id(9)));
        let at = g[0].blobs[&id(3)];
        assert_eq!((at.span, at.offset, at.len), (0, 1000, 200));
        // Touching blobs always merge; a gap over the limit splits.
        let g = all(opts(0, 1 << 20, 1 << 20));
        assert_eq!(
            ranges(&g[0]),
            vec![(0, 0, 200), (0, 1000, 200), (0, 5000, 100), (1, 0, 50)]
        );
        // No span longer than the cap.
        let g = all(opts(10_000, 1000, 1 << 20));
        assert_eq!(
            ranges(&g[0]),
            vec![(0, 0, 200), (0, 1000, 200), (0, 5000, 100), (1, 0, 50)]
        );
        let g = all(opts(10_000, 5100, 1 << 20));
        assert_eq!(ranges(&g[0]), vec![(0, 0, 5100), (1, 0, 50)]);
    }

    /// Groups end with the job that reaches the byte budget, so a window of groups bounds
    /// the memory; each group plans only its own jobs' blobs.
    #[test]
    fn groups_are_bounded() {
        let index = index();
        let jobs = vec![
            vec![id(1)],
            vec![id(2)],
            vec![id(3)],
            vec![id(4)],
            vec![id(5)],
        ];
        let g = plan(&index, &jobs, |j| j, |_| true, &opts(1000, 1 << 20, 250));
        let cut: Vec<_> = g.iter().map(|g| g.jobs.clone()).collect();
        // 100 + 100 (touching): 200; + 800 gap + 200: over 250 with job 2.
        assert_eq!(cut, vec![0..3, 3..5]);
        assert_eq!(ranges(&g[0]), vec![(0, 0, 1200)]);
        assert_eq!(ranges(&g[1]), vec![(0, 5000, 100), (1, 0, 50)]);
        assert!(g.iter().all(|g| g.bytes() <= 1200));
        assert!(plan(&index, &jobs[..0], |j| j, |_| true, &opts(0, 0, 0)).is_empty());
    }

    /// Two readers on a local store unless told otherwise.
    #[test]
    fn readers_suit_the_store() {
        let local = crate::store::MemoryStore::new();
        assert_eq!(SpanOptions::for_store(&local, 0).readers, 2);
        assert_eq!(SpanOptions::for_store(&local, 5).readers, 5);
    }

    /// A blob a later group needs again is kept from the group that read it until its
    /// last use, within the budget; past the budget it is read again.
    #[test]
    fn blobs_needed_again_are_kept_within_the_budget() {
        let index = index();
        let jobs = vec![
            vec![id(1)],
            vec![id(4), id(3)],
            vec![id(1), id(5)],
            vec![id(3)],
        ];
        let with = |keep_bytes| {
            let o = SpanOptions {
                keep_bytes,
                ..opts(0, 1 << 20, 1)
            };
            plan(&index, &jobs, |j| j, |_| true, &o)
        };
        let g = with(300);
        assert_eq!(g.len(), 4, "one job per group");
        assert_eq!(
            (g[0].keep.clone(), g[1].keep.clone()),
            (vec![id(1)], vec![id(3)])
        );
        assert!(!g[2].reads(&id(1)) && g[2].reads(&id(5)) && !g[3].reads(&id(3)));
        assert_eq!(g[3].spans.len(), 0);
        assert_eq!(
            (g[2].release.clone(), g[3].release.clone()),
            (vec![id(1)], vec![id(3)])
        );
        // Room for blob 1 (100 bytes) only: blob 3 (200) is read again.
        let g = with(150);
        assert_eq!(
            (g[0].keep.clone(), g[1].keep.clone()),
            (vec![id(1)], vec![])
        );
        assert!(!g[2].reads(&id(1)) && g[3].reads(&id(3)));
        let g = with(0);
        assert!(g.iter().all(|g| g.keep.is_empty() && g.release.is_empty()));
        assert!(g[2].reads(&id(1)) && g[3].reads(&id(3)));
    }
}
