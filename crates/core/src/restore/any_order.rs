//! The executor for [`Order::Any`] targets (Maildir, EML, `dir:`): a batch's messages
//! read together by pack span, each written as soon as its blobs are in.

use super::ctx::Ctx;
use super::exec::{count, keyword_table, open_accounts, open_folder, OpenAccount};
use super::plan::{pieces, take_hard_links, AccountPlan, FolderPlan};
use super::window::windows;
use crate::dest::{meta, Item, Message, Meta, Outcome, Target};
use crate::mail::maildir::safe_component;
use crate::model::assemble::assemble_by;
use crate::model::reader::{read_by_packs, Blobs};
use crate::repo::id::Id;
use crate::repo::tree::{FileEntry, FolderNode, MessageEntry};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// What a job of an [`Order::Any`] batch writes.
pub(super) enum What {
    Message {
        entry: MessageEntry,
        meta: Meta,
    },
    /// A file of the folder (`dovecot-keywords`, `dovecot-uidlist`, ...).
    File(FileEntry),
    /// A piece of a large file (one with content lists): its blobs from `offset` on.
    Piece {
        file: Arc<LargeFile>,
        offset: u64,
        len: u64,
        ids: Vec<Id>,
    },
}

/// A large file being restored in pieces ([`Target::write_file_at`]), each written as
/// soon as its spans are in; the last one done ends it ([`Target::finish_file`]).
pub(super) struct LargeFile {
    pub(super) entry: FileEntry,
    /// Pieces not written yet.
    pub(super) left: AtomicUsize,
    /// A piece failed: the file is abandoned when the last one is done.
    pub(super) failed: AtomicBool,
}

pub(super) struct Job<'a, F> {
    pub(super) folder: &'a F,
    pub(super) what: What,
}

pub(super) fn job_content<'a, F>(j: &'a Job<F>) -> &'a [Id] {
    match &j.what {
        What::Message { entry, .. } => &entry.content,
        What::File(f) => &f.content,
        What::Piece { ids, .. } => ids,
    }
}

/// [`Order::Any`]: the batch's messages are read together, by pack span in pack order, so
/// a pack range that several accounts need is read once, not once per account.
pub(super) fn execute_any<T: Target>(ctx: &Ctx<T>, plans: Vec<AccountPlan>, picked: bool) {
    let mut rest: Vec<(usize, FolderPlan)> = Vec::new();
    let (accs, folders): (Vec<_>, Vec<_>) = open_accounts(ctx, plans).into_iter().unzip();
    // Each account's hard links, made once its folders are written.
    let mut links = Vec::new();
    for (a, mut fs) in folders.into_iter().enumerate() {
        links.push(if !picked && ctx.caps.folder_files && ctx.caps.hard_links {
            take_hard_links(&mut fs)
        } else {
            Vec::new()
        });
        rest.extend(fs.into_iter().map(|f| (a, f)));
    }
    // Folders in batches, each open in the target while its messages are written.
    while !rest.is_empty() {
        let batch: Vec<(usize, FolderPlan)> = rest
            .drain(..rest.len().min(ctx.caps.open_folders.max(1)))
            .collect();
        restore_folders(ctx, &accs, batch, picked);
    }
    for (a, links) in accs.into_iter().zip(links) {
        if !links.is_empty() {
            // Before the account is finished: it gives directories their mtimes.
            let done = ctx.target.link_files(&a.open, &links, &ctx.n.failures);
            ctx.n.files_linked.fetch_add(done.made, Relaxed);
            ctx.n.files_present.fetch_add(done.present, Relaxed);
        }
        ctx.target.finish_account(a.open, &ctx.n.failures);
    }
}

/// Restores a batch of folders (their accounts open in `accs`): opens them, reads their
/// messages a window of [`Ctx::window`] at a time, and finishes them.
fn restore_folders<T: Target>(
    ctx: &Ctx<T>,
    accs: &[OpenAccount<T::Account>],
    batch: Vec<(usize, FolderPlan)>,
    picked: bool,
) {
    // Apart: the jobs of a window borrow the open folders while the plans give their
    // next messages.
    let (mut folders, mut plans) = (Vec::new(), Vec::new());
    for (a, mut fp) in batch {
        if let Some(f) = open_folder(ctx, &accs[a], &mut fp, picked) {
            folders.push(f);
            plans.push(fp);
        }
    }
    let mut files = Vec::new();
    let mut keywords = Vec::new();
    for (folder, fp) in folders.iter().zip(&mut plans) {
        if (!picked || fp.home) && ctx.caps.folder_files {
            file_jobs(ctx, folder, &mut fp.node, &mut files);
        }
        keywords.push(keyword_table(ctx, &fp.node));
    }
    // The folders' files go with the first window; the folders' messages follow in
    // windows, each a run of packs (see `window.rs`).
    let mut first = Some(files);
    windows(ctx, &mut plans, |window| {
        let mut jobs = first.take().unwrap_or_default();
        for (i, entry) in window {
            let folder = &folders[i];
            if ctx.target.already_restored(folder, &entry) {
                ctx.n.unchanged.fetch_add(1, Relaxed);
                continue;
            }
            let meta = meta(&entry, &keywords[i]);
            let what = What::Message { entry, meta };
            jobs.push(Job { folder, what });
        }
        read_window(ctx, jobs);
    });
    if let Some(files) = first {
        read_window(ctx, files);
    }
    for folder in folders {
        ctx.target.finish_folder(folder, &ctx.n.failures);
    }
}

/// Reads the blobs of a window of jobs, each pack span once, front to back, and writes
/// each job as soon as the last span holding its blobs is in.
fn read_window<T: Target>(ctx: &Ctx<T>, jobs: Vec<Job<T::Folder>>) {
    if jobs.is_empty() {
        return;
    }
    if ctx.stopped() {
        // The target takes no more: nothing is read.
        for j in &jobs {
            match &j.what {
                What::Message { .. } => ctx.n.not_tried(1),
                What::File(_) => {
                    ctx.n.files_not_tried.fetch_add(1, Relaxed);
                }
                What::Piece { file, .. } => {
                    // Counted once (unless it failed before, and is listed); not written
                    // whole, so the target drops what it has of it.
                    if !file.failed.swap(true, Relaxed) {
                        ctx.n.files_not_tried.fetch_add(1, Relaxed);
                    }
                    if file.left.fetch_sub(1, Relaxed) == 1 {
                        let _ = ctx.target.finish_file(j.folder, &file.entry, false);
                    }
                }
            }
        }
        return;
    }
    let (mut n, mut bytes) = (0, 0);
    for j in &jobs {
        match &j.what {
            What::Message { entry, .. } => (n, bytes) = (n + 1, bytes + entry.size),
            What::Piece { len, .. } => bytes += len,
            What::File(_) => {}
        }
    }
    ctx.progress.add_total(n, bytes);
    read_by_packs(
        ctx.repo,
        &jobs,
        job_content,
        &ctx.spans,
        |j, blobs| match &j.what {
            What::File(f) => write_file(ctx, j.folder, f, blobs),
            What::Piece {
                file,
                offset,
                len,
                ids,
            } => write_piece(ctx, j.folder, file, *offset, *len, ids, blobs),
            What::Message { entry, meta } => {
                write_message(ctx, j.folder, entry, meta, blobs);
                ctx.progress.advance(1, entry.size);
            }
        },
    );
}

/// Adds the jobs of a folder's files (`dovecot-uidlist` and the like, a `file:`
/// snapshot's files; a large one in pieces), read with the messages, from the same spans.
/// An IMAP backup's sync state is for the next IMAP backup, not for a restore; a
/// folder's METADATA and an account's quotas have no place in a Maildir (counted, for
/// the report's warnings).
fn file_jobs<'f, T: Target>(
    ctx: &Ctx<T>,
    folder: &'f T::Folder,
    node: &mut FolderNode,
    jobs: &mut Vec<Job<'f, T::Folder>>,
) {
    use crate::imap::names::{METADATA_FILE, QUOTA_FILE, STATE_FILE};
    for f in &node.files {
        if f.name == METADATA_FILE {
            ctx.n.metadata_left.fetch_add(1, Relaxed);
        } else if f.name == QUOTA_FILE {
            ctx.n.quota_left.fetch_add(1, Relaxed);
        }
    }
    let imap_only = [STATE_FILE, METADATA_FILE, QUOTA_FILE];
    for f in std::mem::take(&mut node.files)
        .into_iter()
        .filter(|f| !imap_only.contains(&f.name.as_slice()))
    {
        if !safe_component(&f.name) {
            let item = ctx.target.item(folder, Item::File(&f.name));
            ctx.n
                .failures
                .add(item, "unsafe file name in snapshot; skipped");
        } else if !f.lists.is_empty() && ctx.target.file_present(folder, &f) {
            ctx.n.files_present.fetch_add(1, Relaxed);
        } else if f.lists.is_empty() {
            jobs.push(Job {
                folder,
                what: What::File(f),
            });
        } else {
            // A large file: written piece by piece, at its offsets.
            match pieces(ctx.repo, &f) {
                Ok(p) if !p.is_empty() => {
                    let file = Arc::new(LargeFile {
                        left: AtomicUsize::new(p.len()),
                        failed: AtomicBool::new(false),
                        entry: f,
                    });
                    for (offset, len, ids) in p {
                        let file = file.clone();
                        let what = What::Piece {
                            file,
                            offset,
                            len,
                            ids,
                        };
                        jobs.push(Job { folder, what });
                    }
                }
                Ok(_) => jobs.push(Job {
                    folder,
                    what: What::File(f),
                }),
                Err(e) => {
                    let item = ctx.target.item(folder, Item::File(&f.name));
                    ctx.n.failures.add(item, e);
                }
            }
        }
    }
}

/// Reassembles, checks and writes one message.
pub(super) fn write_message<T: Target>(
    ctx: &Ctx<T>,
    folder: &T::Folder,
    entry: &MessageEntry,
    meta: &Meta,
    blobs: &dyn Blobs,
) {
    if ctx.stopped() {
        return ctx.n.not_tried(1);
    }
    let written = assemble_by(
        ctx.repo,
        &entry.content,
        entry.size,
        Some(&entry.hash),
        |id| blobs.blob_unverified(id),
    )
    .and_then(|data| {
        let msg = Message {
            entry,
            meta,
            data: &data,
            parts: &[],
        };
        ctx.target.write(folder, &msg)
    });
    count(ctx, folder, entry, written);
}

/// Reassembles and writes a folder file.
pub(super) fn write_file<T: Target>(
    ctx: &Ctx<T>,
    folder: &T::Folder,
    f: &FileEntry,
    blobs: &dyn Blobs,
) {
    let item = || ctx.target.item(folder, Item::File(&f.name));
    let data = assemble_by(ctx.repo, &f.content, f.size, None, |id| blobs.blob(id));
    // Renamed accounts: the entries naming them name the new names.
    let data = match data {
        Ok(d) if !ctx.users.is_empty() && f.name == b"dovecot-acl" => {
            Ok(crate::imap::acl::rename_in_file(&d, ctx.users))
        }
        other => other,
    };
    match data {
        Ok(data) => match ctx.target.write_file(folder, f, &data) {
            Ok(Outcome::Written { .. }) => ctx.n.wrote_file(f.size),
            Ok(Outcome::AlreadyThere) => {
                ctx.n.files_present.fetch_add(1, Relaxed);
            }
            Err(e) => ctx.n.file_failed(item, e),
        },
        Err(e) => ctx.n.failures.add(item(), e),
    }
}

/// Reassembles and writes a piece of a large file; the last piece done ends the file.
pub(super) fn write_piece<T: Target>(
    ctx: &Ctx<T>,
    folder: &T::Folder,
    file: &LargeFile,
    offset: u64,
    len: u64,
    ids: &[Id],
    blobs: &dyn Blobs,
) {
    let f = &file.entry;
    let item = || ctx.target.item(folder, Item::File(&f.name));
    if ctx.stopped() && !file.failed.swap(true, Relaxed) {
        ctx.n.files_not_tried.fetch_add(1, Relaxed);
    }
    if !file.failed.load(Relaxed) {
        let written = assemble_by(ctx.repo, ids, len, None, |id| blobs.blob(id))
            .and_then(|data| ctx.target.write_file_at(folder, f, offset, &data));
        if let Err(e) = written {
            // The first failure is the one reported.
            if !file.failed.swap(true, Relaxed) {
                ctx.n.file_failed(item, e);
            }
        }
    }
    if file.left.fetch_sub(1, Relaxed) == 1 {
        let ok = !file.failed.load(Relaxed);
        match ctx.target.finish_file(folder, f, ok) {
            Ok(()) if ok => ctx.n.wrote_file(f.size),
            Ok(()) => {}
            Err(e) if ok => ctx.n.failures.add(item(), e),
            Err(_) => {}
        }
    }
    ctx.progress.advance(0, len);
}
