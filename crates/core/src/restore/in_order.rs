//! The executor for [`Order::Folder`] targets (IMAP, mbox): each folder's messages in
//! arrival order, in batches, each batch read while the previous one is written.

use super::ctx::Ctx;
use super::exec::{count, fail_all, keyword_table, open_accounts, open_folder, OpenAccount};
use super::plan::{arrival_order, folder_file, AccountPlan, FolderPlan};
use crate::dest::{meta, Caps, Item, Message, Meta, Outcome, Target};
use crate::model::assemble::{assemble_by, checked_parts};
use crate::model::reader::{read_by_spans, Blobs};
use crate::parallel::{for_each_parallel, spawn_named};
use crate::repo::id::Id;
use crate::repo::lock;
use crate::repo::tree::MessageEntry;
use mailvault_imap::maildir_flags::KeywordTable;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;

/// A batch of one folder for an [`Order::Folder`] target: messages to write together,
/// each with its place in the folder's order.
pub(super) struct Batch<'p, F> {
    pub(super) folder: &'p F,
    /// The folder's `dovecot-keywords` (when the target wants keyword names).
    pub(super) keywords: &'p KeywordTable,
    pub(super) entries: Vec<(MessageEntry, usize)>,
}

/// A batch read and checked: each message's bytes (or why it could not be read), in the
/// folder's order.
pub(super) struct Prepared<'p, F> {
    pub(super) folder: &'p F,
    pub(super) msgs: Vec<Read>,
}

/// A message of a batch: its entry, its [`Meta`] and its checked bytes or why they could
/// not be read.
pub(super) type Read = (MessageEntry, Meta, crate::error::Result<Body>);

/// A message's checked bytes: whole, or in the pieces it was stored in for a target that
/// takes them so ([`Caps::parts`]).
pub(super) enum Body {
    Whole(Vec<u8>),
    Parts(Vec<Shared>),
}

/// Why an account cannot go on, once one lane found out; the other lanes then count
/// their messages as failed instead of writing them.
#[derive(Default)]
pub(super) struct Abort(Mutex<Option<String>>);

impl Abort {
    fn set(&self, reason: String) {
        lock(&self.0).get_or_insert(reason);
    }
    fn reason(&self) -> Option<String> {
        lock(&self.0).clone()
    }
}

/// [`Order::Folder`]: accounts run at once ([`Caps::accounts`]), each over up to
/// [`Caps::lanes`] lanes taking one folder at a time; each lane has a thread that reads
/// and checks its next batch (in pack order, by groups of spans) while the current one
/// is being written. Each account thread opens its next account ([`Target::open_account`]:
/// for IMAP a login and the folders made) while the lanes of the one before write, so
/// that opening accounts overlaps the data instead of stopping it, except for the last
/// accounts (no account waits opened while a thread has nothing to do).
pub(super) fn execute_ordered<T: Target>(ctx: &Ctx<T>, plans: Vec<AccountPlan>, picked: bool) {
    let total: u64 = (plans.iter().flat_map(|p| &p.folders))
        .map(|f| f.entries.len() as u64)
        .sum();
    let bytes: u64 = (plans.iter().flat_map(|p| &p.folders))
        .flat_map(|f| &f.entries)
        .map(|e| e.size)
        .sum();
    ctx.progress.add_total(total, bytes);
    let size = |p: &AccountPlan| -> u64 { p.folders.iter().map(|f| f.entries.len() as u64).sum() };
    // Domains in snapshot order (their accounts share the most blobs, mail to several
    // colleagues: together, they make the most of the blob cache), and within a domain
    // the largest accounts first, so that a run does not end with one big account on
    // one lane while the others are done.
    let domain = |i: usize| {
        plans[i]
            .acc
            .name
            .rsplit_once('@')
            .map(|(_, d)| d.to_string())
    };
    let mut first_seen: HashMap<Option<String>, usize> = HashMap::new();
    for i in 0..plans.len() {
        first_seen.entry(domain(i)).or_insert(i);
    }
    let mut order: Vec<usize> = (0..plans.len()).collect();
    order.sort_by_key(|&i| {
        (
            first_seen.get(&domain(i)).copied().unwrap_or(i),
            std::cmp::Reverse(size(&plans[i])),
        )
    });
    let n_plans = order.len();
    let slots: Vec<Mutex<Option<AccountPlan>>> =
        plans.into_iter().map(|p| Mutex::new(Some(p))).collect();
    let lanes = ctx.caps.accounts.max(1);
    let next = AtomicUsize::new(0);
    // Takes the next account and opens it in the target, with its lanes. `ahead`: only
    // while more accounts than `lanes` are left, so that no account waits opened behind
    // another while a lane of the run has nothing to do.
    let take = |ahead: bool| -> Option<(OpenAccount<T::Account>, Vec<FolderPlan>, usize)> {
        loop {
            let k = next.load(Relaxed);
            if k >= n_plans || (ahead && n_plans - k <= lanes) {
                return None;
            }
            if next.compare_exchange(k, k + 1, Relaxed, Relaxed).is_err() {
                continue;
            }
            let Some(plan) = lock(&slots[order[k]]).take() else {
                continue;
            };
            // An account gets more than one lane only when fewer accounts than `lanes`
            // are left to run beside it.
            let share = (lanes / lanes.min(n_plans - k)).max(1);
            let n_acc = size(&plan);
            match open_accounts(ctx, vec![plan]).pop() {
                Some((acc, folders)) => return Some((acc, folders, share)),
                None => ctx.progress.advance(n_acc, 0),
            }
        }
    };
    for_each_parallel(lanes, lanes, "restore-account", |_| {
        let mut ready = take(false);
        while let Some((acc, folders, share)) = ready.take() {
            // The next account is opened (an IMAP login, its folders made) on this
            // thread while this one's lanes write: opening overlaps the data.
            restore_account_ordered(ctx, &acc, folders, share, picked, || {
                ready = take(true);
            });
            ctx.target.finish_account(acc.open, &ctx.n.failures);
            if ready.is_none() {
                ready = take(false);
            }
        }
    });
}

/// Restores one account's folders in order (see [`execute_ordered`]).
pub(super) fn restore_account_ordered<T: Target>(
    ctx: &Ctx<T>,
    acc: &OpenAccount<T::Account>,
    folders: Vec<FolderPlan>,
    share: usize,
    picked: bool,
    meanwhile: impl FnOnce(),
) {
    let caps = &ctx.caps;
    let mut open = Vec::new();
    for mut fp in folders {
        match open_folder(ctx, acc, &mut fp, picked) {
            Some(f) => open.push((f, fp)),
            None => {
                let bytes = fp.entries.iter().map(|e| e.size).sum();
                ctx.progress.advance(fp.entries.len() as u64, bytes);
            }
        }
    }
    let lists = arrival_lists(ctx, &mut open);
    let open = open;
    let keywords: Vec<KeywordTable> = (open.iter())
        .map(|(_, fp)| keyword_table(ctx, &fp.node))
        .collect();
    // Per folder, its batches in order; folders largest first, so lanes end together.
    let mut jobs: Vec<(usize, Vec<Batch<T::Folder>>)> = Vec::new();
    for (((folder, _), list), keywords) in open.iter().zip(lists).zip(&keywords) {
        let batches = batches_of(caps, folder, keywords, list);
        if !batches.is_empty() {
            let count = batches.iter().map(|b| b.entries.len()).sum();
            jobs.push((count, batches));
        }
    }
    jobs.sort_by_key(|(count, _)| std::cmp::Reverse(*count));
    let to_send: usize = jobs.iter().map(|(c, _)| c).sum();
    // Lanes: at most the target's, at most `share`, one per folder at most, and one per
    // `lane_messages` messages to write.
    let per_lane = if caps.lane_messages == 0 {
        usize::MAX
    } else {
        caps.lane_messages
    };
    let lanes = (caps.lanes)
        .min(share)
        .min(jobs.len())
        .min(to_send.div_ceil(per_lane))
        .max(1);
    let queue: Mutex<VecDeque<Vec<Batch<T::Folder>>>> =
        Mutex::new(jobs.into_iter().map(|(_, b)| b).collect());
    let abort = Abort::default();
    std::thread::scope(|s| {
        for _ in 0..lanes {
            // The handover is a rendezvous: at most one batch prepared ahead per lane,
            // so memory stays at two batches per lane.
            let (tx, rx) = std::sync::mpsc::sync_channel::<Prepared<T::Folder>>(0);
            let (queue, abort) = (&queue, &abort);
            spawn_named(s, "restore-read", move || {
                // One folder at a time, its batches in order, all over this lane.
                while let Some(batches) = lock(queue).pop_front() {
                    for batch in batches {
                        if let Some(reason) = abort.reason() {
                            let entries = batch.entries.iter().map(|(e, _)| e);
                            fail_all(ctx, batch.folder, entries, &reason);
                            continue;
                        }
                        let p = prepare(ctx, batch);
                        if let Err(back) = tx.send(p) {
                            // The writer is gone: its batch is not written.
                            let p = back.0;
                            let why = "not restored: the lane ended";
                            fail_all(ctx, p.folder, p.msgs.iter().map(|(e, _, _)| e), why);
                        }
                    }
                }
            });
            spawn_named(s, "restore-write", move || {
                for p in rx {
                    write_prepared(ctx, p, abort);
                }
            });
        }
        meanwhile();
    });
    for (folder, _) in open {
        ctx.target.finish_folder(folder, &ctx.n.failures);
    }
}

/// Per folder, its messages in arrival order ([`arrival_order`]), less those already in
/// the target (counted as unchanged).
fn arrival_lists<T: Target>(
    ctx: &Ctx<T>,
    open: &mut [(T::Folder, FolderPlan)],
) -> Vec<Vec<MessageEntry>> {
    let mut lists = Vec::with_capacity(open.len());
    for (folder, fp) in open.iter_mut() {
        let uidlist = folder_file(ctx.repo, &fp.node, b"dovecot-uidlist")
            .map(|d| crate::imap::names::parse_uidlist(&d));
        let mut list = Vec::with_capacity(fp.entries.len());
        for mut e in std::mem::take(&mut fp.entries) {
            if ctx.target.already_restored(folder, &e) {
                ctx.n.unchanged.fetch_add(1, Relaxed);
                ctx.progress.advance(1, e.size);
                continue;
            }
            (e.from, e.subject) = (String::new(), String::new());
            list.push(e);
        }
        list.sort_by_cached_key(|e| arrival_order(uidlist.as_ref(), e));
        lists.push(list);
    }
    lists
}

/// A folder's messages cut into batches of at most [`Caps::batch_messages`] messages and
/// about [`Caps::batch_bytes`] bytes, each message with its place in the folder's order.
fn batches_of<'p, F>(
    caps: &Caps,
    folder: &'p F,
    keywords: &'p KeywordTable,
    list: Vec<MessageEntry>,
) -> Vec<Batch<'p, F>> {
    let mut batches = Vec::new();
    let mut cur: Vec<(MessageEntry, usize)> = Vec::new();
    let mut bytes = 0usize;
    for (pos, e) in list.into_iter().enumerate() {
        let size = e.size as usize + e.size as usize / 32;
        if !cur.is_empty()
            && (cur.len() >= caps.batch_messages.max(1) || bytes + size > caps.batch_bytes)
        {
            batches.push(Batch {
                folder,
                keywords,
                entries: std::mem::take(&mut cur),
            });
            bytes = 0;
        }
        bytes += size;
        cur.push((e, pos));
    }
    if !cur.is_empty() {
        batches.push(Batch {
            folder,
            keywords,
            entries: cur,
        });
    }
    batches
}

/// Reads and checks a batch, in pack order (packs front to back) and by pack span
/// (nearby blobs in one read), while the messages keep the folder's order. Blobs the
/// cache holds are not read again.
pub(super) fn prepare<'p, T: Target>(
    ctx: &Ctx<T>,
    batch: Batch<'p, T::Folder>,
) -> Prepared<'p, T::Folder> {
    let index = ctx.repo.index();
    let mut entries = batch.entries;
    entries.sort_by_cached_key(|(e, _)| {
        e.content
            .first()
            .and_then(|id: &Id| index.get(id))
            .map(|l| (l.pack, l.offset))
            .unwrap_or((u32::MAX, 0))
    });
    let keywords = batch.keywords;
    let mut read = Vec::with_capacity(entries.len());
    read_by_spans(
        ctx.repo,
        &entries,
        |(e, _)| &e.content,
        |id| !ctx.cache.contains(id),
        &ctx.spans,
        |group, fetched| {
            for (e, _) in group {
                let blob =
                    |id: &Id| (ctx.cache.get_with(id, || fetched.blob_unverified(id))).map(Shared);
                let data = if ctx.caps.parts {
                    checked_parts(ctx.repo, &e.content, e.size, &e.hash, blob).map(Body::Parts)
                } else {
                    assemble_by(ctx.repo, &e.content, e.size, Some(&e.hash), blob).map(Body::Whole)
                };
                read.push(data);
            }
        },
    );
    let mut msgs: Vec<(usize, Read)> = entries
        .into_iter()
        .zip(read)
        .map(|((e, pos), data)| {
            let m = meta(&e, keywords);
            (pos, (e, m, data))
        })
        .collect();
    msgs.sort_by_key(|(pos, _)| *pos);
    Prepared {
        folder: batch.folder,
        msgs: msgs.into_iter().map(|(_, m)| m).collect(),
    }
}

/// Writes a prepared batch and counts what became of each message.
pub(super) fn write_prepared<T: Target>(ctx: &Ctx<T>, p: Prepared<T::Folder>, abort: &Abort) {
    let folder = p.folder;
    if ctx.stopped() {
        // The target takes no more (`Tally::write_failed`): each counted as not tried.
        return fail_all(ctx, folder, p.msgs.iter().map(|(e, _, _)| e), "");
    }
    if let Some(reason) = abort.reason() {
        return fail_all(ctx, folder, p.msgs.iter().map(|(e, _, _)| e), &reason);
    }
    // The pieces of each message, as slices (a message given whole has none).
    let parts: Vec<Vec<&[u8]>> = (p.msgs.iter())
        .map(|(_, _, data)| match data {
            Ok(Body::Parts(parts)) => parts.iter().map(|b| b.as_ref()).collect(),
            _ => Vec::new(),
        })
        .collect();
    let mut ready = Vec::with_capacity(p.msgs.len());
    for ((e, m, data), parts) in p.msgs.iter().zip(&parts) {
        match data {
            Ok(body) => ready.push(Message {
                entry: e,
                meta: m,
                data: match body {
                    Body::Whole(data) => data,
                    Body::Parts(_) => &[],
                },
                parts,
            }),
            Err(why) => {
                let item = ctx.target.item(folder, Item::Message(e));
                ctx.n.fail_items(item, why, 1);
                ctx.progress.advance(1, e.size);
            }
        }
    }
    if ready.is_empty() {
        return;
    }
    let mut done: Vec<Option<crate::Result<Outcome>>> = ready.iter().map(|_| None).collect();
    let why = match ctx.target.write_batch(folder, &ready, &mut done) {
        Ok(()) => "not restored".to_string(),
        Err(e) => {
            // The whole account is unusable (login refused, over quota, server gone...).
            let why = format!("not restored: {e}");
            abort.set(why.clone());
            why
        }
    };
    for (m, d) in ready.iter().zip(done) {
        match d {
            Some(o) => {
                count(ctx, folder, m.entry, o);
                ctx.progress.advance(1, m.entry.size);
            }
            None => fail_all(ctx, folder, std::iter::once(m.entry), &why),
        }
    }
}

/// A blob shared with the cache.
pub(super) struct Shared(std::sync::Arc<Vec<u8>>);

impl AsRef<[u8]> for Shared {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}
