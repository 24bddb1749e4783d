//! Backup of IMAP accounts into a repository, in the same snapshot model as Maildir
//! stores: per account an [`AccountRef`] (`<domain>/<user>/Maildir`), per folder a
//! [`FolderNode`] with its Maildir++ directory, per message a [`MessageEntry`] with a
//! synthesized Dovecot-style name ([`names::synth_key`] plus `:2,` and the flag and
//! keyword letters), content stored CRLF -> LF and mtime = INTERNALDATE. Each folder
//! gets a generated `dovecot-keywords` (when keywords are used) and the sync state file
//! ([`names::STATE_FILE`]); the INBOX gets `subscriptions` from LSUB.
//!
//! Incremental: with a parent snapshot of the same source, a folder whose UIDVALIDITY is
//! unchanged only fetches UIDs the parent does not have; flags come from `CHANGEDSINCE`
//! the parent's HIGHESTMODSEQ when the server offers CONDSTORE (nothing at all when
//! HIGHESTMODSEQ did not move), else from a FLAGS sweep; messages no longer on the server
//! are dropped. A changed UIDVALIDITY re-reads that folder only. Accounts run in
//! parallel, each over several connections (folders dealt to them); messages stream one
//! at a time (bounded memory).

use super::names::{self, STATE_FILE};
use super::restore::for_each_parallel;
use super::{login_with_backoff, Connection, Error, Result};
use crate::ops::backup::{
    end_run, finish_run, header_summary, save_entries, store_content, BackupReport, Counters,
    RunMeta,
};
use crate::repo::compress::Compression;
use crate::repo::pack::BlobKind;
use crate::repo::tree::{
    self, AccountRef, AccountTree, FileEntry, FolderNode, MessageEntry, RootTree, Timestamp,
};
use crate::repo::{lock, BlobSaver, Repository};
use crate::report::{Failure, Progress};
use mailvault_imap::maildir_flags::{imap_to_maildir, KeywordTable};
use mailvault_imap::{from_crlf, Client, FetchQuery, FetchedMessage, SearchKey, SeqSet, Session};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, VecDeque};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Mutex;
use std::time::Instant;

/// What to back up and how.
#[derive(Clone, Debug)]
pub struct ImapBackupOptions {
    pub connection: Connection,
    /// The accounts (`user@domain`).
    pub accounts: Vec<String>,
    /// The snapshot's source label; the parent is the latest snapshot with the same
    /// label and host (`imap://host:port`, `imap://user@host:port`).
    pub source: String,
    /// Connections per account.
    pub connections: usize,
    /// Accounts backed up at the same time.
    pub parallel_accounts: usize,
    pub compression: Option<Compression>,
    pub tags: Vec<String>,
    pub hostname: String,
    /// Fetch every message even if the parent snapshot has it.
    pub force: bool,
    /// UIDs per FETCH command.
    pub fetch_batch: usize,
}

/// A folder's sync state, kept in the folder file [`STATE_FILE`] (JSON).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FolderState {
    pub version: u32,
    pub uidvalidity: u32,
    pub uidnext: Option<u32>,
    pub highestmodseq: Option<u64>,
}

struct Ctx<'a> {
    saver: BlobSaver<'a>,
    opts: &'a ImapBackupOptions,
    client: Client,
    failures: Mutex<Vec<Failure>>,
    n: Counters,
    progress: &'a dyn Progress,
    time: i64,
    owner: (u32, u32),
}

impl Ctx<'_> {
    fn fail(&self, item: impl Into<String>, e: impl std::fmt::Display) {
        lock(&self.failures).push(Failure::new(item, e));
    }
}

/// `<domain>/<user>/Maildir` of an account (`<user>/Maildir` without a domain).
pub fn account_rel_path(account: &str) -> Vec<u8> {
    match account.rsplit_once('@') {
        Some((user, domain)) => format!("{domain}/{user}/Maildir"),
        None => format!("{account}/Maildir"),
    }
    .into_bytes()
}

/// Backs up IMAP accounts into `repo` and writes a snapshot, dated now.
pub fn backup(
    repo: &mut Repository,
    opts: &ImapBackupOptions,
    progress: &dyn Progress,
) -> Result<BackupReport> {
    backup_at(repo, opts, crate::now(), progress)
}

/// [`backup`] with the snapshot dated `time` (Unix seconds and nanoseconds) instead of
/// now (`backup --time`).
pub fn backup_at(
    repo: &mut Repository,
    opts: &ImapBackupOptions,
    time: (i64, u32),
    progress: &dyn Progress,
) -> Result<BackupReport> {
    let started = Instant::now();
    if opts.accounts.is_empty() {
        return Err(Error::InvalidInput(
            "no account to back up: name one in the URL (imap://user@host), with --account or --accounts-file".into(),
        ));
    }
    let (resumed, mark) = repo.begin_backup()?;
    let parent = if opts.force {
        None
    } else {
        repo.snapshots()?
            .into_iter()
            .rev()
            .find(|s| s.source == opts.source && s.hostname == opts.hostname)
    };
    let parent_accounts: HashMap<String, AccountRef> = match &parent {
        Some(p) => repo
            .read_tree::<RootTree>(&p.root)?
            .accounts
            .into_iter()
            .map(|a| (a.name.clone(), a))
            .collect(),
        None => HashMap::new(),
    };
    let (report, written) = {
        let repo: &Repository = repo;
        let packs_resumed = resumed.len() as u64;
        let owner = std::fs::metadata("/proc/self")
            .map(|m| (m.uid(), m.gid()))
            .unwrap_or((0, 0));
        let ctx = Ctx {
            saver: BlobSaver::new(repo, opts.compression.unwrap_or(repo.config().compression)),
            opts,
            client: Client::new(opts.connection.client.clone())?,
            failures: Mutex::new(Vec::new()),
            n: Counters::default(),
            progress,
            time: time.0,
            owner,
        };
        ctx.saver.adopt(resumed);
        let refs: Vec<Mutex<Option<AccountRef>>> =
            opts.accounts.iter().map(|_| Mutex::new(None)).collect();
        for_each_parallel(opts.accounts.len(), opts.parallel_accounts, |i| {
            let name = &opts.accounts[i];
            match backup_account(&ctx, name, parent_accounts.get(name)) {
                Ok(r) => *lock(&refs[i]) = Some(r),
                Err(e) => ctx.fail(format!("account {name}"), e),
            }
        });
        let root = RootTree {
            accounts: refs
                .into_iter()
                .filter_map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
                .collect(),
            owners: {
                let mut o = crate::ops::backup::Owners::default();
                o.add(ctx.owner.0, ctx.owner.1);
                o.names()
            },
        };
        let failures = std::mem::take(&mut *lock(&ctx.failures));
        let meta = RunMeta {
            started,
            time,
            hostname: opts.hostname.clone(),
            source: opts.source.clone(),
            tags: opts.tags.clone(),
            parent,
            packs_resumed,
            lock: mark.watch(),
        };
        finish_run(&ctx.saver, &ctx.n, failures, root, meta)?
    };
    end_run(repo, &written, mark);
    Ok(report)
}

fn backup_account(ctx: &Ctx, account: &str, parent: Option<&AccountRef>) -> Result<AccountRef> {
    let repo = ctx.saver.repo();
    let creds = ctx.opts.connection.login.credentials(account)?;
    let mut s = login_with_backoff(&ctx.client, &creds, 6)?;
    let folders: Vec<String> = s
        .list()?
        .into_iter()
        .filter(|f| f.selectable)
        .map(|f| f.name)
        .collect();
    let mut subscribed: Vec<String> = s.lsub()?.into_iter().map(|f| f.name).collect();
    subscribed.sort();
    let parent_folders: HashMap<String, FolderNode> = match parent {
        Some(r) => match repo.read_tree::<AccountTree>(&r.tree) {
            Ok(t) => t.folders.into_iter().map(|f| (f.name.clone(), f)).collect(),
            Err(e) => {
                ctx.fail(format!("account {account} (parent snapshot)"), &e);
                HashMap::new()
            }
        },
        None => HashMap::new(),
    };
    let queue: Mutex<VecDeque<String>> = Mutex::new(folders.iter().cloned().collect());
    let nodes: Mutex<Vec<FolderNode>> = Mutex::new(Vec::new());
    let conns = ctx.opts.connections.clamp(1, folders.len().max(1));
    let first = Mutex::new(Some(s));
    std::thread::scope(|sc| {
        for _ in 0..conns {
            sc.spawn(|| {
                let mut session: Option<Session> = lock(&first).take();
                loop {
                    let Some(folder) = lock(&queue).pop_front() else {
                        break;
                    };
                    if session.as_ref().is_none_or(|s| s.is_broken()) {
                        match login_with_backoff(&ctx.client, &creds, 6) {
                            Ok(s) => session = Some(s),
                            Err(e) => {
                                ctx.fail(format!("{account}: {folder}"), e);
                                continue;
                            }
                        }
                    }
                    let Some(s) = session.as_mut() else { continue };
                    let sub = if folder.eq_ignore_ascii_case("INBOX") {
                        Some(&subscribed[..])
                    } else {
                        None
                    };
                    match backup_folder(ctx, s, account, &folder, parent_folders.get(&folder), sub)
                    {
                        Ok(n) => lock(&nodes).push(n),
                        Err(e) => ctx.fail(format!("{account}: {folder}"), e),
                    }
                }
                if let Some(s) = session {
                    let _ = s.logout();
                }
            });
        }
    });
    let mut folders = nodes.into_inner().unwrap_or_else(|p| p.into_inner());
    folders.sort_by(|a, b| (!a.dir.is_empty(), &a.dir).cmp(&(!b.dir.is_empty(), &b.dir)));
    let t = AccountTree { folders };
    let messages = t.folders.iter().map(|f| f.messages).sum();
    let bytes = t.folders.iter().map(|f| f.bytes).sum();
    let tree = ctx.saver.save(BlobKind::Tree, &tree::encode(&t))?;
    Ok(AccountRef {
        name: account.to_string(),
        rel_path: account_rel_path(account),
        tree,
        messages,
        bytes,
        dirs: Vec::new(),
    })
}

/// Reads a folder file of a parent snapshot's folder.
fn parent_file(repo: &Repository, node: &FolderNode, name: &[u8]) -> Option<Vec<u8>> {
    let f = node.files.iter().find(|f| f.name == name)?;
    crate::ops::restore::assemble(repo, &f.content, f.size, None).ok()
}

fn backup_folder(
    ctx: &Ctx,
    s: &mut Session,
    account: &str,
    folder: &str,
    parent: Option<&FolderNode>,
    subscriptions: Option<&[String]>,
) -> Result<FolderNode> {
    let repo = ctx.saver.repo();
    let info = s.examine(folder)?;
    let state: Option<FolderState> = parent
        .and_then(|p| parent_file(repo, p, STATE_FILE))
        .and_then(|d| serde_json::from_slice(&d).ok())
        .filter(|st: &FolderState| st.uidvalidity == info.uidvalidity && !ctx.opts.force);
    let mut keywords = match (&state, parent) {
        (Some(_), Some(p)) => parent_file(repo, p, b"dovecot-keywords")
            .map(|d| KeywordTable::parse(&String::from_utf8_lossy(&d)))
            .unwrap_or_default(),
        _ => KeywordTable::new(),
    };
    let uids = s.uid_search(&SearchKey::All)?;
    // Entries the parent has, by UID (only when UIDVALIDITY did not change).
    let mut known: HashMap<u32, MessageEntry> = HashMap::new();
    if let (Some(_), Some(p)) = (&state, parent) {
        let current: std::collections::HashSet<u32> = uids.iter().copied().collect();
        for c in &p.chunks {
            for e in repo.read_chunk(c)? {
                if let Some((uid, v)) = names::parse_key(&e.key) {
                    if v == info.uidvalidity && current.contains(&uid) {
                        known.insert(uid, e);
                    }
                }
            }
        }
        // Flags changed since the parent.
        let mut set_flags = |m: FetchedMessage<'_>, known: &mut HashMap<u32, MessageEntry>| {
            if let (Some(e), Some(flags)) = (known.get_mut(&m.uid), m.flags.as_ref()) {
                let letters = imap_to_maildir(flags, &mut keywords).letters;
                e.name = format!("{}:2,{letters}", String::from_utf8_lossy(&e.key)).into_bytes();
            }
        };
        let condstore = s.capabilities().has("CONDSTORE");
        match (
            state.as_ref().and_then(|s| s.highestmodseq),
            info.highestmodseq,
        ) {
            // HIGHESTMODSEQ did not move: no flag changed.
            (Some(old), Some(now)) if condstore && now == old => {}
            (Some(old), Some(_)) if condstore => {
                s.fetch_changes::<mailvault_imap::Error, _>(old, |m| {
                    set_flags(m, &mut known);
                    Ok(())
                })?;
            }
            _ if !known.is_empty() => {
                s.fetch::<mailvault_imap::Error, _>(&SeqSet::all(), &FetchQuery::flags(), |m| {
                    set_flags(m, &mut known);
                    Ok(())
                })?;
            }
            _ => {}
        }
    }
    let new_uids: Vec<u32> = uids
        .iter()
        .copied()
        .filter(|u| !known.contains_key(u))
        .collect();
    let mut entries: Vec<MessageEntry> = Vec::with_capacity(uids.len());
    for e in known.into_values() {
        ctx.n.unchanged.fetch_add(1, Relaxed);
        ctx.progress.advance(1, e.size);
        entries.push(e);
    }
    ctx.progress.add_total(new_uids.len() as u64, 0);
    let mut failed_here: Vec<(u32, String)> = Vec::new();
    s.fetch_batched::<Error, _>(
        &new_uids,
        ctx.opts.fetch_batch.max(1),
        &FetchQuery::full(),
        |m| {
            match message_entry(ctx, folder, &m, info.uidvalidity, &mut keywords) {
                Ok(e) => {
                    ctx.progress.advance(1, e.size);
                    entries.push(e);
                }
                Err(e) => failed_here.push((m.uid, e.to_string())),
            }
            Ok(())
        },
    )?;
    for (uid, e) in failed_here {
        ctx.fail(format!("{account}: {folder}: UID {uid}"), e);
    }
    let messages = entries.len() as u64;
    let bytes: u64 = entries.iter().map(|e| e.size).sum();
    ctx.n.bytes_total.fetch_add(bytes, Relaxed);
    let chunks = save_entries(&ctx.saver, entries)?;
    let mut files = Vec::new();
    let kw = keywords.to_file_string();
    if !kw.is_empty() {
        files.push(file_entry(ctx, b"dovecot-keywords", kw.as_bytes())?);
    }
    if let Some(subs) = subscriptions {
        files.push(file_entry(
            ctx,
            b"subscriptions",
            &names::subscriptions_file(subs),
        )?);
    }
    let st = FolderState {
        version: 1,
        uidvalidity: info.uidvalidity,
        uidnext: info.uidnext,
        highestmodseq: info.highestmodseq,
    };
    let st = serde_json::to_vec(&st).map_err(|e| Error::InvalidInput(e.to_string()))?;
    files.push(file_entry(ctx, STATE_FILE, &st)?);
    files.sort_by(|a, b| a.name.cmp(&b.name));
    let _ = s.unselect();
    ctx.n.folders.fetch_add(1, Relaxed);
    Ok(FolderNode {
        name: folder.to_string(),
        dir: names::maildir_dir(folder),
        files,
        chunks,
        messages,
        bytes,
        dirs: Vec::new(),
    })
}

fn file_entry(ctx: &Ctx, name: &[u8], data: &[u8]) -> Result<FileEntry> {
    Ok(FileEntry {
        name: name.to_vec(),
        size: data.len() as u64,
        mtime: Timestamp {
            secs: ctx.time,
            nanos: 0,
        },
        mode: 0o600,
        uid: ctx.owner.0,
        gid: ctx.owner.1,
        content: store_content(&ctx.saver, data)?,
    })
}

/// Stores one fetched message and makes its entry.
fn message_entry(
    ctx: &Ctx,
    folder: &str,
    m: &FetchedMessage<'_>,
    uidvalidity: u32,
    keywords: &mut KeywordTable,
) -> Result<MessageEntry> {
    let body = m
        .body
        .ok_or_else(|| Error::InvalidInput("the server sent no body".into()))?;
    let data = from_crlf(body);
    ctx.n.bytes_read.fetch_add(body.len() as u64, Relaxed);
    let content = store_content(&ctx.saver, &data)?;
    let hash = ctx.saver.repo().key().blob_id(&data);
    let date = m.internal_date.map(|d| d.secs).unwrap_or(0);
    let flags: Vec<&str> = m.flags.clone().unwrap_or_default();
    let mapped = imap_to_maildir(&flags, keywords);
    if !mapped.unmapped.is_empty() {
        tracing::warn!(
            "UID {}: flags without a Maildir letter dropped: {:?}",
            m.uid,
            mapped.unmapped
        );
    }
    let key = names::synth_key(folder, date, m.uid, uidvalidity, data.len() as u64);
    let name = format!("{key}:2,{}", mapped.letters);
    let (from, subject, hdate) = header_summary(&data);
    ctx.n.new.fetch_add(1, Relaxed);
    Ok(MessageEntry {
        key: key.into_bytes(),
        name: name.into_bytes(),
        new: false,
        size: data.len() as u64,
        mtime: Timestamp {
            secs: date,
            nanos: 0,
        },
        mode: 0o600,
        uid: ctx.owner.0,
        gid: ctx.owner.1,
        hash,
        content,
        from,
        subject,
        date: hdate,
    })
}
