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
//! opened by `Repository::open_sealed` exactly as a single read opens them, and the
//! caller checks each message's whole hash as before. A blob the plan does not cover (not
//! in the index) or whose span could not be read is read alone, so its error is the one a
//! single read gives and names the blob and its pack.

use crate::error::Result;
use crate::repo::format::BlobKind;
use crate::repo::id::Id;
use crate::repo::index::Index;
use crate::repo::pack;
use crate::repo::{lock, Repository};
use crate::store::Store;
use std::borrow::Cow;
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
            // A blob that a later span's message needs too waits here, or past this in
            // the spool's file. 64 MiB made a restore's memory double (issue 26: 149 MB
            // on the `medium` preset, which keeps 70 MB of shared blobs); 16 MiB keeps
            // most of them and spills the rest (sealed) to the file, whose pages the
            // kernel keeps or writes back as memory allows.
            keep_bytes: 16 << 20,
        }
    }
}

impl SpanOptions {
    /// The defaults, with `reads` spans read at once; 0: [`crate::store::DEFAULT_CONNECTIONS`]
    /// on object storage (`s3:`), where a read waits on the network, and 2 on a local
    /// directory, where more readers only take the CPU from the writers (measured on the
    /// `medium` preset: 8 readers made a local restore 10% slower than 2).
    ///
    /// On a local directory a span is at most 4 MiB: [`read_by_packs`] holds up to
    /// `readers + ahead + 1` spans (80 MiB of 16 MiB spans, half a `medium` restore's
    /// memory), and a local read of 4 MiB costs no more per byte than one of 16 MiB. On
    /// object storage every span is a request: spans stay long.
    pub fn for_store(store: &dyn crate::store::Backend, reads: usize) -> SpanOptions {
        let network = crate::store::on_network(store);
        let readers = match reads {
            0 if network => crate::store::DEFAULT_CONNECTIONS,
            0 => 2,
            n => n,
        };
        let d = SpanOptions::default();
        SpanOptions {
            readers,
            max_span: if network { d.max_span } else { LOCAL_MAX_SPAN },
            ..d
        }
    }
}

/// [`SpanOptions::max_span`] on a local directory (see [`SpanOptions::for_store`]).
pub const LOCAL_MAX_SPAN: u64 = 4 << 20;

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
    // Every blob is looked up: a table's entries read ahead at once.
    index.will_need();
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
            let (s, e) = (u64::from(loc.offset), end_of(&loc));
            bytes += match ends.get(&{ loc.pack }) {
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

fn end_of(loc: &crate::repo::index::Location) -> u64 {
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
    let mut blobs: Vec<(Id, crate::repo::index::Location)> = Vec::new();
    let mut seen: HashMap<Id, ()> = HashMap::new();
    for job in &jobs[range.clone()] {
        for id in content(job).iter().filter(|id| wanted(id)) {
            if let Some(loc) = index.get(id) {
                if seen.insert(*id, ()).is_none() {
                    blobs.push((*id, loc));
                }
            }
        }
    }
    let (spans, blobs) = merge(blobs, opts);
    Group {
        jobs: range,
        spans,
        blobs,
        ..Default::default()
    }
}

/// Spans over `blobs` (each once): per pack, by offset, neighbours at most
/// [`SpanOptions::gap`] apart merged up to [`SpanOptions::max_span`]; and where each blob is.
fn merge(
    mut blobs: Vec<(Id, crate::repo::index::Location)>,
    opts: &SpanOptions,
) -> (Vec<Span>, HashMap<Id, BlobAt>) {
    blobs.sort_by_key(|(_, l)| (l.pack, l.offset));
    let mut spans: Vec<Span> = Vec::new();
    let mut at = HashMap::with_capacity(blobs.len());
    for (id, loc) in blobs {
        let (s, e) = (u64::from(loc.offset), end_of(&loc));
        let merged = match spans.last_mut() {
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
            spans.push(Span {
                pack: loc.pack,
                kind: loc.kind,
                offset: s,
                len: e - s,
            });
        }
        let span = spans.len() - 1;
        at.insert(
            id,
            BlobAt {
                span,
                offset: (s - spans[span].offset) as usize,
                len: loc.stored_len as usize,
            },
        );
    }
    (spans, at)
}

/// Where a caller gets the sealed blobs it opens: the spans read for it, blobs kept from
/// earlier reads, or (neither) a read of the blob alone, so that its error is the one a
/// single read gives, naming the blob and its pack.
pub trait Blobs {
    fn repo(&self) -> &Repository;

    /// The blob's sealed bytes, if already read.
    fn sealed(&self, id: &Id) -> Option<Cow<'_, [u8]>>;

    /// Opens blob `id` as [`Repository::read_blob`] does.
    fn blob(&self, id: &Id) -> Result<Vec<u8>> {
        match self.sealed(id) {
            Some(sealed) => self.repo().open_sealed(id, sealed.into_owned(), true),
            None => self.repo().read_blob(id),
        }
    }

    /// [`Self::blob`] without hashing a format-1 blob against its id, as
    /// [`Repository::read_blob_unverified`] (for callers that check a whole message).
    fn blob_unverified(&self, id: &Id) -> Result<Vec<u8>> {
        match self.sealed(id) {
            Some(sealed) => self.repo().open_sealed(id, sealed.into_owned(), false),
            None => self.repo().read_blob_unverified(id),
        }
    }
}

/// A group's spans as read, and the blobs kept from earlier groups, for opening its blobs.
pub struct Fetched<'a> {
    repo: &'a Repository,
    group: &'a Group,
    spans: Vec<Option<Result<Vec<u8>>>>,
    kept: &'a HashMap<Id, Vec<u8>>,
}

impl Blobs for Fetched<'_> {
    fn repo(&self) -> &Repository {
        self.repo
    }

    fn sealed(&self, id: &Id) -> Option<Cow<'_, [u8]>> {
        self.slice(id).map(Cow::Borrowed)
    }
}

impl Fetched<'_> {
    fn slice(&self, id: &Id) -> Option<&[u8]> {
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
        let got = repo
            .store()
            .get_pack_range(&path, s.offset, s.len, s.kind.into());
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
                .filter_map(|id| Some((*id, fetched.slice(id)?.to_vec())))
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

/// The plan of a restore that reads each pack once, front to back: every blob the jobs
/// need, once, in spans over the packs (see [`read_by_packs`]).
pub struct PackPlan {
    /// Ordered by pack, then offset.
    pub spans: Vec<Span>,
    blobs: HashMap<Id, BlobAt>,
    /// Per span, the jobs that need a blob of it (each once).
    users: Vec<Vec<u32>>,
    /// Per job, how many spans hold its blobs.
    spans_of_job: Vec<u32>,
}

impl PackPlan {
    /// Plans the spans of `jobs`' blobs; blobs not in the index are left to single reads.
    pub fn new<J>(
        index: &Index,
        jobs: &[J],
        content: impl Fn(&J) -> &[Id],
        opts: &SpanOptions,
    ) -> PackPlan {
        let mut blobs: Vec<(Id, crate::repo::index::Location)> = Vec::new();
        let mut seen: std::collections::HashSet<Id> = Default::default();
        for job in jobs {
            for id in content(job) {
                if let Some(loc) = index.get(id) {
                    if seen.insert(*id) {
                        blobs.push((*id, loc));
                    }
                }
            }
        }
        drop(seen);
        let (spans, blobs) = merge(blobs, opts);
        let mut users = vec![Vec::new(); spans.len()];
        let mut spans_of_job = Vec::with_capacity(jobs.len());
        for (j, job) in jobs.iter().enumerate() {
            let mut mine: Vec<usize> = content(job)
                .iter()
                .filter_map(|id| Some(blobs.get(id)?.span))
                .collect();
            mine.sort_unstable();
            mine.dedup();
            for &s in &mine {
                users[s].push(j as u32);
            }
            spans_of_job.push(mine.len() as u32);
        }
        PackPlan {
            spans,
            blobs,
            users,
            spans_of_job,
        }
    }

    /// Bytes the spans read.
    pub fn bytes(&self) -> u64 {
        self.spans.iter().map(|s| s.len).sum()
    }
}

/// Reads the spans of `jobs`' blobs, each once, in pack order, and calls `deliver` for
/// each job once the last span holding its blobs is in (in parallel, on the current rayon
/// pool), so jobs complete in the order their packs are read, not in list order.
///
/// This is restic's restorer's way, for targets where jobs are independent files (a
/// Maildir restore): every pack range is fetched once, one request per span, whatever the
/// order of the messages. A job whose blobs lie in several spans (a message whose body is
/// deduplicated against a far earlier copy) gets the blobs of its earlier spans from a
/// spool: sealed bytes, kept from their span until the last job that needs them is
/// delivered, in memory up to [`SpanOptions::keep_bytes`] and past that in a temporary
/// file (sealed bytes are ciphertext: nothing readable reaches the disk). A blob the spool
/// could not keep (the disk full) is read alone when its job is delivered.
///
/// Memory: [`SpanOptions::readers`] reads in flight, [`SpanOptions::ahead`] spans read and
/// waiting, the span being delivered, and the spool's memory part. IMAP restores, which
/// append in order, read by [`read_by_spans`] instead.
pub fn read_by_packs<J: Sync>(
    repo: &Repository,
    jobs: &[J],
    content: impl Fn(&J) -> &[Id] + Sync,
    opts: &SpanOptions,
    deliver: impl Fn(&J, &dyn Blobs) + Sync,
) {
    use rayon::prelude::*;
    let index = repo.index();
    let plan = PackPlan::new(index, jobs, &content, opts);
    let spool = Spool::new(opts.keep_bytes);
    let distinct = |j: usize| {
        let mut ids = content(&jobs[j]).to_vec();
        ids.sort_unstable();
        ids.dedup();
        ids
    };
    deliver_unplanned(repo, &plan, &spool, jobs, &deliver);
    if plan.spans.is_empty() {
        return;
    }
    let mut remaining = plan.spans_of_job.clone();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = crossbeam_channel::bounded::<(usize, Result<Vec<u8>>)>(opts.ahead.max(1));
    std::thread::scope(|scope| {
        let readers = opts.readers.clamp(1, plan.spans.len());
        for _ in 0..readers {
            let tx = tx.clone();
            let (plan, next) = (&plan, &next);
            scope.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(s) = plan.spans.get(i) else {
                    return;
                };
                let path = pack::pack_path(&index.pack_id(s.pack));
                let got = repo
                    .store()
                    .get_pack_range(&path, s.offset, s.len, s.kind.into());
                // The receiver is gone when the writer stopped (or unwound): stop too.
                if tx.send((i, got)).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        for (s, got) in rx.iter() {
            let bytes = got.ok();
            let sealed = |id: &Id| {
                let at = plan.blobs.get(id)?;
                bytes.as_ref()?.get(at.offset..at.offset + at.len)
            };
            // Blobs of this span that jobs completing later need go to the spool.
            for &j in &plan.users[s] {
                if remaining[j as usize] > 1 {
                    for id in distinct(j as usize) {
                        if plan.blobs.get(&id).is_some_and(|at| at.span == s) {
                            spool.need(&id, sealed(&id));
                        }
                    }
                }
            }
            let done: Vec<usize> = plan.users[s]
                .iter()
                .map(|&j| j as usize)
                .filter(|&j| remaining[j] == 1)
                .collect();
            for &j in &plan.users[s] {
                remaining[j as usize] -= 1;
            }
            let here = InSpan {
                repo,
                plan: &plan,
                span: s,
                bytes: bytes.as_deref(),
                spool: &spool,
            };
            done.par_iter().for_each(|&j| {
                deliver(&jobs[j], &here);
                for id in distinct(j) {
                    if plan.blobs.get(&id).is_some_and(|at| at.span != s) {
                        spool.release(&id);
                    }
                }
            });
        }
    });
    tracing::debug!(
        jobs = jobs.len(),
        spans = plan.spans.len(),
        bytes = plan.bytes(),
        spilled = lock(&spool.inner).end,
        "read by packs"
    );
}

/// Delivers the jobs that need no span (no content, or blobs the index lacks: read
/// alone), in parallel.
fn deliver_unplanned<J: Sync>(
    repo: &Repository,
    plan: &PackPlan,
    spool: &Spool,
    jobs: &[J],
    deliver: &(impl Fn(&J, &dyn Blobs) + Sync),
) {
    use rayon::prelude::*;
    let none: Vec<usize> = (0..jobs.len())
        .filter(|&j| plan.spans_of_job[j] == 0)
        .collect();
    none.par_iter().for_each(|&j| {
        deliver(
            &jobs[j],
            &InSpan {
                repo,
                plan,
                span: usize::MAX,
                bytes: None,
                spool,
            },
        )
    });
}

/// Every blob read alone (a restore of single messages, whose few blobs are not worth a
/// plan).
pub struct Alone<'a>(pub &'a Repository);

impl Blobs for Alone<'_> {
    fn repo(&self) -> &Repository {
        self.0
    }

    fn sealed(&self, _: &Id) -> Option<Cow<'_, [u8]>> {
        None
    }
}

/// A span being delivered, and the spool, as [`Blobs`].
struct InSpan<'a> {
    repo: &'a Repository,
    plan: &'a PackPlan,
    span: usize,
    /// The span's bytes (`None`: it could not be read, or there is none).
    bytes: Option<&'a [u8]>,
    spool: &'a Spool,
}

impl Blobs for InSpan<'_> {
    fn repo(&self) -> &Repository {
        self.repo
    }

    fn sealed(&self, id: &Id) -> Option<Cow<'_, [u8]>> {
        let at = self.plan.blobs.get(id)?;
        if at.span == self.span {
            return self
                .bytes?
                .get(at.offset..at.offset + at.len)
                .map(Cow::Borrowed);
        }
        self.spool.get(id).map(Cow::Owned)
    }
}

/// Sealed blobs kept between the span that read them and the last job that needs them:
/// counted per job, in memory up to a budget, then appended to one unnamed temporary file
/// (one inode, however many blobs: a file per blob made the file system's inode
/// allocation the restore's bottleneck; unnamed, it is gone with the process, killed or
/// not). Its space is not reused: it grows to what was spilled, at most the restore's size.
struct Spool {
    budget: u64,
    inner: Mutex<SpoolInner>,
    /// Created on the first spill; `None` inside: it could not be (blobs are read again).
    file: std::sync::OnceLock<Option<std::fs::File>>,
}

#[derive(Default)]
struct SpoolInner {
    blobs: HashMap<Id, Spooled>,
    memory: u64,
    /// The end of the file.
    end: u64,
}

struct Spooled {
    /// Jobs still to be delivered that need it.
    refs: u32,
    held: Held,
}

enum Held {
    Memory(Vec<u8>),
    /// Offset and length in the file.
    Disk(u64, usize),
    /// Not kept (the span was not read, or the disk refused it): read alone.
    Nowhere,
}

impl Spool {
    fn new(budget: u64) -> Spool {
        Spool {
            budget,
            inner: Mutex::new(SpoolInner::default()),
            file: std::sync::OnceLock::new(),
        }
    }

    fn file(&self) -> Option<&std::fs::File> {
        self.file
            .get_or_init(|| match tempfile::tempfile() {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::warn!("restore spool: cannot create a temporary file: {e}");
                    None
                }
            })
            .as_ref()
    }

    /// One more job needs blob `id` later; `sealed`: its bytes from the span just read.
    fn need(&self, id: &Id, sealed: Option<&[u8]>) {
        use std::os::unix::fs::FileExt;
        let mut st = lock(&self.inner);
        if let Some(b) = st.blobs.get_mut(id) {
            b.refs += 1;
            return;
        }
        let held = match sealed {
            None => Held::Nowhere,
            Some(b) if st.memory + b.len() as u64 <= self.budget => {
                st.memory += b.len() as u64;
                Held::Memory(b.to_vec())
            }
            Some(b) => match self.file().map(|f| f.write_all_at(b, st.end)) {
                Some(Ok(())) => {
                    st.end += b.len() as u64;
                    Held::Disk(st.end - b.len() as u64, b.len())
                }
                Some(Err(e)) => {
                    tracing::warn!("restore spool: cannot write: {e}");
                    Held::Nowhere
                }
                None => Held::Nowhere,
            },
        };
        st.blobs.insert(*id, Spooled { refs: 1, held });
    }

    fn get(&self, id: &Id) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let (offset, len) = match &lock(&self.inner).blobs.get(id)?.held {
            Held::Memory(b) => return Some(b.clone()),
            Held::Disk(offset, len) => (*offset, *len),
            Held::Nowhere => return None,
        };
        // Outside the lock: written before it was listed, and never overwritten.
        let mut buf = vec![0; len];
        self.file()?.read_exact_at(&mut buf, offset).ok()?;
        Some(buf)
    }

    fn release(&self, id: &Id) {
        let mut st = lock(&self.inner);
        let Some(b) = st.blobs.get_mut(id) else {
            return;
        };
        b.refs -= 1;
        if b.refs == 0 {
            if let Some(Spooled {
                held: Held::Memory(m),
                ..
            }) = st.blobs.remove(id)
            {
                st.memory -= m.len() as u64;
            }
        }
    }
}

/// Opened (decrypted, decompressed) blobs, least recently used out first, up to a byte
/// budget, shared by every thread of a restore that writes in order (IMAP): the same
/// message delivered to several mailboxes is one blob in the repository, and decrypting
/// and decompressing it again for every mailbox was a third of the IMAP restore's client
/// CPU.
pub struct BlobCache {
    budget: usize,
    inner: Mutex<CacheInner>,
}

#[derive(Default)]
struct CacheInner {
    map: HashMap<Id, (std::sync::Arc<Vec<u8>>, u64)>,
    /// Use tick -> blob, oldest first.
    order: std::collections::BTreeMap<u64, Id>,
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
    pub fn get(&self, repo: &Repository, id: &Id) -> crate::Result<std::sync::Arc<Vec<u8>>> {
        self.get_with(id, || repo.read_blob(id))
    }

    /// [`Self::get`] with the blob, when it is not in the cache, from `read` (which
    /// checks it against its id as [`Repository::read_blob`] does).
    pub fn get_with(
        &self,
        id: &Id,
        read: impl FnOnce() -> crate::Result<Vec<u8>>,
    ) -> crate::Result<std::sync::Arc<Vec<u8>>> {
        if self.budget == 0 {
            return Ok(std::sync::Arc::new(read()?));
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
                return Ok(std::sync::Arc::clone(data));
            }
            c.misses += 1;
        }
        let data = std::sync::Arc::new(read()?);
        // A blob bigger than a sixteenth of the budget would push out too much.
        if data.len() <= self.budget / 16 {
            let mut g = lock(&self.inner);
            let c = &mut *g;
            c.tick += 1;
            if !c.map.contains_key(id) {
                c.map.insert(*id, (std::sync::Arc::clone(&data), c.tick));
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::repo::compress::Codec;
    use crate::repo::format::Version;
    use crate::repo::pack::PackEntry;

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

    /// A repository in memory holding `blobs` (uncompressed), and their ids.
    pub(crate) fn repo_with(blobs: &[&[u8]]) -> (Repository, Vec<Id>) {
        use crate::repo::format::BlobKind;
        use crate::repo::writer::BlobSaver;
        let mut repo = crate::repo::memory_repository();
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
}
