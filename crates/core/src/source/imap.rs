//! IMAP accounts as a [`Source`], backed up through the one pipeline
//! ([`crate::ops::backup::run`]) into the same snapshot model as Maildir stores: per
//! account `<domain>/<user>/Maildir`, per folder its Maildir++ directory, per message the
//! flags, keywords and INTERNALDATE the pipeline turns into a synthesized Dovecot-style
//! name ([`names::synth_key`] plus `:2,` and the letters, with the folder's generated
//! `dovecot-keywords`); content stored CRLF -> LF. Each folder keeps its sync state in
//! [`names::STATE_FILE`]; the INBOX gets `subscriptions` from LSUB.
//!
//! Incremental: with a parent snapshot of the same source, a folder whose UIDVALIDITY is
//! unchanged only fetches UIDs the parent does not have; flags come from `CHANGEDSINCE`
//! the parent's HIGHESTMODSEQ when the server offers CONDSTORE (nothing at all when
//! HIGHESTMODSEQ did not move), else from a FLAGS sweep; messages no longer on the server
//! are dropped. With CONDSTORE, a folder whose STATUS shows it as the parent left it
//! (UIDVALIDITY, UIDNEXT, HIGHESTMODSEQ, as many messages) is not opened at all: its
//! messages are the parent's, unread (`kept_unmoved`); where the server offers
//! LIST-STATUS (RFC 5819) the statuses come with the account's folder listing, one round
//! trip for all its folders (`unmoved`). A changed UIDVALIDITY re-reads that
//! folder only. Accounts run in parallel, each over several connections (folders dealt
//! to them); messages stream one at a time (bounded memory).
//!
//! Beside the mail, in the forms a Maildir store keeps them, so that a snapshot has one
//! form whatever its source: a folder's access control list (GETACL, where the login may
//! read it) as its `dovecot-acl` file ([`crate::imap::acl`]), its METADATA (RFC 5464)
//! as [`names::METADATA_FILE`], its quotas as INBOX's [`names::QUOTA_FILE`], and the
//! account's sieve scripts (ManageSieve) as a home
//! ([`Home::Files`]: `sieve/<name>.sieve`, the `.dovecot.sieve` link to the active one).
//! The ACLs and METADATA of all an account's folders are asked with its listing,
//! pipelined (`ask_beside_mail`): a few round trips per account, not two per folder.

use super::RunOptions;
use super::{
    AccountListing, Failures, FileData, FolderFile, FolderWriter, Home, MessageId, MessageMeta,
    NewMessage, Parallelism, Source,
};
use crate::imap::acl::dovecot_acl_file;
use crate::imap::names::{self, STATE_FILE};
use crate::imap::{login_with_backoff, Connection};
use crate::mail::maildir::safe_component;
use crate::repo::tree::MessageEntry;
use crate::{Error, Result};
use mailvault_imap::{
    from_crlf, AclEntry, Client, FetchQuery, FetchedMessage, MailboxStatus, SearchKey, SeqSet,
    Session, SieveSession,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Mutex;

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
    /// UIDs per FETCH command.
    pub fetch_batch: usize,
    /// The server's ManageSieve port, where the accounts' sieve scripts are read from
    /// (4190); 0: none.
    pub sieve_port: u16,
    pub run: RunOptions,
}

/// A folder's sync state, kept in the folder file [`STATE_FILE`] (JSON).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct FolderState {
    pub version: u32,
    pub uidvalidity: u32,
    pub uidnext: Option<u32>,
    pub highestmodseq: Option<u64>,
}

/// `<domain>/<user>/Maildir` of an account (`<user>/Maildir` without a domain).
pub fn account_rel_path(account: &str) -> Vec<u8> {
    match account.rsplit_once('@') {
        Some((user, domain)) => format!("{domain}/{user}/Maildir"),
        None => format!("{account}/Maildir"),
    }
    .into_bytes()
}

/// IMAP accounts on one server as a [`Source`]: `parallel_accounts` accounts at a time,
/// each over up to `connections` sessions.
///
/// Incremental: a folder whose UIDVALIDITY is unchanged since the parent snapshot only
/// fetches UIDs the parent does not have; flags come from `CHANGEDSINCE` the parent's
/// HIGHESTMODSEQ when the server offers CONDSTORE (nothing at all when HIGHESTMODSEQ
/// did not move), else from a FLAGS sweep; messages no longer on the server are dropped.
/// A changed UIDVALIDITY re-reads that folder only. Messages stream one at a time.
pub struct ImapSource<'o> {
    opts: &'o ImapBackupOptions,
    client: Client,
    /// What each folder's account's listing gave of it, by (account, folder), until the
    /// folder's backup takes it ([`ImapSource::listed`]).
    listed: Mutex<HashMap<(String, String), Listed>>,
}

/// What an account's listing ([`Source::folders`]) gave of one of its folders: its STATUS
/// (LIST-STATUS), and its ACL and METADATA, asked for all the account's folders at once
/// (pipelined: a few round trips, not one per folder). `None`: not asked.
#[derive(Default)]
struct Listed {
    status: Option<MailboxStatus>,
    acl: Asked<Vec<AclEntry>>,
    metadata: Asked<Metadata>,
}

impl<'o> ImapSource<'o> {
    pub fn new(opts: &'o ImapBackupOptions) -> Result<ImapSource<'o>> {
        Ok(ImapSource {
            opts,
            client: Client::new(opts.connection.client.clone())?,
            listed: Mutex::default(),
        })
    }

    /// What the account's listing gave of `folder`, taken out (a folder is backed up once
    /// a run).
    fn listed(&self, account: &str, folder: &str) -> Listed {
        let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
        (listed.remove(&(account.to_string(), folder.to_string()))).unwrap_or_default()
    }
}

impl Source for ImapSource<'_> {
    type Session = Session;

    fn label(&self) -> String {
        self.opts.source.clone()
    }

    fn parallelism(&self) -> Parallelism {
        Parallelism::Sessions {
            accounts: self.opts.parallel_accounts,
            sessions: self.opts.connections,
        }
    }

    fn accounts(&self) -> Result<Vec<super::Account>> {
        if self.opts.accounts.is_empty() {
            return Err(Error::InvalidInput(
                "no account to back up: name one in the URL (imap://user@host), with --account or --accounts-file".into(),
            ));
        }
        Ok((self.opts.accounts.iter())
            .map(|a| super::Account {
                name: a.clone(),
                rel_path: account_rel_path(a),
                path: Default::default(),
            })
            .collect())
    }

    fn open(&self, account: &super::Account) -> Result<Session> {
        let creds = self.opts.connection.login.credentials(&account.name)?;
        Ok(login_with_backoff(&self.client, &creds, 6)?)
    }

    fn usable(&self, session: &Session) -> bool {
        !session.is_broken()
    }

    fn close(&self, session: Session) {
        let _ = session.logout();
    }

    /// The account's own folders: those of other users' namespaces (shared with it) are
    /// their owners', backed up with them, and public ones no account's; both are left
    /// out, and the report says how many.
    fn folders(
        &self,
        account: &super::Account,
        s: &mut Session,
        failures: &Failures,
    ) -> Result<AccountListing> {
        let namespaces = s.namespaces()?;
        // Statuses serve only `unmoved`, which needs CONDSTORE: without it, none is asked.
        let listing = match s.capabilities().has("CONDSTORE") {
            true => s.list_with_status()?,
            false => s.list()?,
        };
        let (own, others): (Vec<_>, Vec<_>) = (listing.into_iter())
            .filter(|f| f.selectable)
            .partition(|f| namespaces.is_personal(&f.name));
        if let Some(f) = others.first() {
            failures.warn(
                format!("account {}", account.name),
                format!(
                    "{} folders of other users' or public namespaces (e.g. {:?}) are not its own and were left out",
                    others.len(),
                    f.name
                ),
            );
        }
        let folders = (own.iter())
            .map(|f| super::Folder::named(&f.name, Default::default()))
            .collect();
        let names: Vec<&str> = own.iter().map(|f| f.name.as_str()).collect();
        let mut beside = ask_beside_mail(s, &names)?.into_iter();
        // Kept for `unmoved` (there: why a status of this moment serves) and `beside_mail`.
        {
            let mut listed = self.listed.lock().unwrap_or_else(|p| p.into_inner());
            for f in own {
                let (acl, metadata) = beside.next().unwrap_or_default();
                let l = Listed {
                    status: f.status,
                    acl,
                    metadata,
                };
                listed.insert((account.name.clone(), f.name), l);
            }
        }
        let mut subscribed: Vec<String> = s.lsub()?.into_iter().map(|f| f.name).collect();
        subscribed.sort();
        Ok(AccountListing {
            folders,
            dirs: Vec::new(),
            subscriptions: Some(subscribed),
        })
    }

    fn state_file(&self) -> Option<&'static [u8]> {
        Some(STATE_FILE)
    }

    /// The account's sieve scripts, over ManageSieve. A server with nothing on the port
    /// (connection refused) has no ManageSieve: a warning, once per account; any other
    /// problem is a failure.
    fn home(&self, account: &super::Account, failures: &Failures) -> Option<Home> {
        let opts = self.opts.connection.sieve(self.opts.sieve_port)?;
        let item = format!("account {} (its sieve scripts)", account.name);
        let creds = match self.opts.connection.login.credentials(&account.name) {
            Ok(c) => c,
            Err(e) => {
                failures.fail(item, e);
                return None;
            }
        };
        match sieve_home(&opts, &creds, &account.name, failures) {
            Ok(files) if files.is_empty() => None,
            Ok(files) => Some(Home::Files(files)),
            Err(mailvault_imap::Error::Connect { server, source })
                if source.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                failures.warn(
                    item,
                    format!("no ManageSieve at {server} (connection refused): not kept (--sieve-port 0: do not look)"),
                );
                None
            }
            Err(e) => {
                failures.fail(item, Error::from(e));
                None
            }
        }
    }

    fn backup_folder(
        &self,
        s: &mut Session,
        account: &super::Account,
        f: &super::Folder,
        out: &mut FolderWriter<'_>,
    ) -> Result<()> {
        let folder = f.name.as_str();
        let listed = self.listed(&account.name, folder);
        beside_mail(s, &account.name, folder, (listed.acl, listed.metadata), out)?;
        let parent_raw = out.parent_state();
        let parent_state: Option<FolderState> =
            (parent_raw.as_deref()).and_then(|d| serde_json::from_slice(d).ok());
        let listed = listed.status;
        if kept_unmoved(s, folder, listed, (parent_state.as_ref(), parent_raw), out)? {
            return Ok(());
        }
        let info = s.examine(folder)?;
        let state = parent_state.filter(|st| st.uidvalidity == info.uidvalidity);
        let uids = s.uid_search(&SearchKey::All)?;
        // Entries the parent has, by UID (only when UIDVALIDITY did not change).
        let mut known: HashMap<u32, MessageEntry> = HashMap::new();
        if let Some(state) = &state {
            out.resume_keywords();
            let current: std::collections::HashSet<u32> = uids.iter().copied().collect();
            for e in out.parent_entries()? {
                if let Some((uid, v)) = names::parse_key(&e.key) {
                    if v == info.uidvalidity && current.contains(&uid) {
                        known.insert(uid, e);
                    }
                }
            }
            // Flags changed since the parent.
            let w: &FolderWriter = out;
            let set_flags = |m: FetchedMessage<'_>, known: &mut HashMap<u32, MessageEntry>| {
                if let (Some(e), Some(flags)) = (known.get_mut(&m.uid), m.flags.as_ref()) {
                    e.name = w.maildir_name(&e.key, flags);
                }
            };
            let condstore = s.capabilities().has("CONDSTORE");
            match (state.highestmodseq, info.highestmodseq) {
                // HIGHESTMODSEQ did not move: no flag changed.
                (Some(old), Some(now)) if condstore && now == old => {}
                (Some(old), Some(_)) if condstore => {
                    s.fetch_changes::<mailvault_imap::Error, _>(old, |m| {
                        set_flags(m, &mut known);
                        Ok(())
                    })?;
                }
                _ if !known.is_empty() => {
                    s.fetch::<mailvault_imap::Error, _>(
                        &SeqSet::all(),
                        &FetchQuery::flags(),
                        |m| {
                            set_flags(m, &mut known);
                            Ok(())
                        },
                    )?;
                }
                _ => {}
            }
        }
        let new_uids: Vec<u32> = uids
            .iter()
            .copied()
            .filter(|u| !known.contains_key(u))
            .collect();
        for e in known.into_values() {
            out.unchanged(e);
        }
        out.expect(new_uids.len() as u64);
        let mut failed_here: Vec<(u32, String)> = Vec::new();
        s.fetch_batched::<Error, _>(
            &new_uids,
            self.opts.fetch_batch.max(1),
            &FetchQuery::full(),
            |m| {
                if let Err(e) = store_message(out, &m, info.uidvalidity) {
                    failed_here.push((m.uid, e.to_string()));
                }
                Ok(())
            },
        )?;
        for (uid, e) in failed_here {
            out.fail(format!("{}: {folder}: UID {uid}", account.name), e);
        }
        let st = FolderState {
            version: 1,
            uidvalidity: info.uidvalidity,
            uidnext: info.uidnext,
            highestmodseq: info.highestmodseq,
        };
        let st = serde_json::to_vec(&st).map_err(|e| Error::Internal(e.to_string()))?;
        out.set_state(st)?;
        let _ = s.unselect();
        Ok(())
    }
}

/// Whether a folder is as the parent left it, told by its STATUS alone (no EXAMINE, no
/// search, the parent's entries not read): with CONDSTORE, the same UIDVALIDITY, UIDNEXT
/// and HIGHESTMODSEQ (no message added, no flag or keyword changed) and as many messages
/// as the parent holds (none expunged, none the parent failed to fetch). Without
/// CONDSTORE a flag change shows in no STATUS item: `false`.
///
/// The status is `listed`, the one the account's folder listing gave (LIST-STATUS), when
/// it has every item compared; else a STATUS command asks it (one round trip). A listed
/// status serves as well as one asked now: it was taken when the account's folders were
/// listed, after the run started and before any of them was backed up, so the snapshot
/// holds the folder as it was then, a moment of the run as any other. What changes after
/// it is never lost: an unmoved folder keeps the parent's state as stored, which tells
/// exactly the UIDNEXT, HIGHESTMODSEQ and UIDVALIDITY that status showed, and the next
/// run compares the server's with those; a folder that moved is opened and read as it
/// is then, its new state taken from that EXAMINE.
fn unmoved(
    s: &mut Session,
    folder: &str,
    listed: Option<MailboxStatus>,
    st: &FolderState,
    parent: Option<&crate::repo::tree::FolderNode>,
) -> Result<bool> {
    let (Some(parent), Some(modseq), Some(uidnext)) = (parent, st.highestmodseq, st.uidnext) else {
        return Ok(false);
    };
    if !s.capabilities().has("CONDSTORE") {
        return Ok(false);
    }
    let whole = |l: &MailboxStatus| {
        l.messages.is_some()
            && l.uidnext.is_some()
            && l.uidvalidity.is_some()
            && l.highestmodseq.is_some()
    };
    let now = match listed.filter(whole) {
        Some(l) => l,
        None => s.status(folder)?,
    };
    Ok(now.uidvalidity == Some(st.uidvalidity)
        && now.uidnext == Some(uidnext)
        && now.highestmodseq == Some(modseq)
        && now.messages.map(u64::from) == Some(parent.messages))
}

/// When the folder is [`unmoved`] since the parent (its state `st`, stored as `raw`;
/// `listed`: its status from the listing), keeps the parent's messages as they are (their
/// chunks unread) and its state as stored, and says so. Without a parent state: `false`.
fn kept_unmoved(
    s: &mut Session,
    folder: &str,
    listed: Option<MailboxStatus>,
    (st, raw): (Option<&FolderState>, Option<Vec<u8>>),
    out: &mut FolderWriter,
) -> Result<bool> {
    let (Some(st), Some(raw)) = (st, raw) else {
        return Ok(false);
    };
    if !unmoved(s, folder, listed, st, out.parent())? {
        return Ok(false);
    }
    out.resume_keywords();
    out.keep_parent_messages();
    out.set_state(raw)?;
    Ok(true)
}

/// What was asked of the server (`None`: not asked).
type Asked<T> = Option<mailvault_imap::Result<T>>;
/// A folder's METADATA entries and their values.
type Metadata = Vec<(String, Vec<u8>)>;
/// A folder's ACL and METADATA, as asked.
type AskedBeside = (Asked<Vec<AclEntry>>, Asked<Metadata>);

/// Every folder's ACL and METADATA (in the order of `folders`), where the server offers
/// them: GETACL and GETMETADATA pipelined, a round trip for 64 folders
/// ([`Session::get_acl_many`]), where one per folder would wait for each answer in turn.
/// Asked with the account's listing, as its statuses are: a moment of the run as any
/// other, before any of its folders is backed up. A folder refused (no right to read its
/// ACL) has its error, kept by [`beside_mail`]; the outer error is the connection's.
fn ask_beside_mail(s: &mut Session, folders: &[&str]) -> Result<Vec<AskedBeside>> {
    let acl: Vec<_> = match s.has_acl() {
        true => s.get_acl_many(folders)?.into_iter().map(Some).collect(),
        false => folders.iter().map(|_| None).collect(),
    };
    let metadata: Vec<_> = match s.has_metadata() {
        true => s
            .get_metadata_many(folders)?
            .into_iter()
            .map(Some)
            .collect(),
        false => folders.iter().map(|_| None).collect(),
    };
    Ok(acl.into_iter().zip(metadata).collect())
}

/// What the server holds beside a folder's mail, kept as its files: its ACL, its
/// METADATA (as `asked` with the listing, [`ask_beside_mail`]; else asked now), and with
/// INBOX the account's quotas, where the server offers them.
fn beside_mail(
    s: &mut Session,
    account: &str,
    folder: &str,
    asked: AskedBeside,
    out: &mut FolderWriter,
) -> Result<()> {
    let item = format!("{account}: {folder}");
    let (acl, metadata) = asked;
    if s.has_acl() {
        let acl = acl.unwrap_or_else(|| s.get_acl(folder));
        let file = |e: Vec<_>| dovecot_acl_file(&e, account);
        keep_beside(out, &item, ("its ACL", b"dovecot-acl"), acl, file)?;
    }
    if s.has_metadata() {
        let metadata = metadata.unwrap_or_else(|| s.get_metadata(folder));
        let file = |e: Vec<_>| names::metadata_file(&e);
        keep_beside(
            out,
            &item,
            ("its METADATA", names::METADATA_FILE),
            metadata,
            file,
        )?;
    }
    if folder.eq_ignore_ascii_case("INBOX") && s.has_quota() {
        let quota = s.quota_roots("INBOX");
        let file = |q: Vec<_>| (names::quota_file(&q), Vec::new());
        keep_beside(out, &item, ("its quota", names::QUOTA_FILE), quota, file)?;
    }
    Ok(())
}

/// Keeps what the server holds beside a folder's mail (`asked`: its ACL, METADATA or
/// quota) as the folder file `name`, in the form `make` gives it (with what of it is not
/// kept, as warnings). A refusal (the login may not read it) is a warning: the folder's
/// mail is backed up all the same; a lost connection is the folder's error.
fn keep_beside<T>(
    out: &mut FolderWriter,
    item: &str,
    (what, name): (&str, &[u8]),
    asked: mailvault_imap::Result<T>,
    make: impl FnOnce(T) -> (Option<Vec<u8>>, Vec<String>),
) -> Result<()> {
    let got = match asked {
        Ok(g) => g,
        Err(e) if !e.is_connection_lost() => {
            out.warn(item, format!("{what} is not kept: {e}"));
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let (file, warnings) = make(got);
    for w in warnings {
        out.warn(item, w);
    }
    if let Some(data) = file {
        out.file(FolderFile {
            name: name.to_vec(),
            data: FileData::Bytes(data),
            meta: None,
        })?;
    }
    Ok(())
}

/// The account's sieve scripts over ManageSieve, laid out as a Dovecot home:
/// `sieve/<name>.sieve`, and `.dovecot.sieve` a link to the active one. A script whose
/// name cannot be a file name is a failure of its own.
fn sieve_home(
    opts: &mailvault_imap::ClientOptions,
    creds: &mailvault_imap::Credentials,
    account: &str,
    failures: &Failures,
) -> mailvault_imap::Result<Vec<(Vec<u8>, FolderFile)>> {
    let mut s = SieveSession::connect(opts)?;
    s.login(creds)?;
    let mut files = Vec::new();
    for script in s.list_scripts()? {
        let name = &script.name;
        let file = format!("{name}.sieve").into_bytes();
        // A file of the home's `sieve/`: one component, and no hidden file (which
        // Pigeonhole does not list).
        if name.starts_with('.') || !safe_component(&file) {
            failures.fail(
                format!("{account}: sieve script {name:?}"),
                "its name cannot be a file name; not kept",
            );
            continue;
        }
        let text = s.get_script(name)?;
        if script.active {
            let link = [b"sieve/".as_slice(), &file].concat();
            files.push((
                Vec::new(),
                FolderFile {
                    name: b".dovecot.sieve".to_vec(),
                    data: FileData::Link(link),
                    meta: None,
                },
            ));
        }
        files.push((
            b"sieve".to_vec(),
            FolderFile {
                name: file,
                data: FileData::Bytes(text),
                meta: None,
            },
        ));
    }
    let _ = s.logout();
    Ok(files)
}

/// Hands one fetched message to the pipeline.
fn store_message(out: &mut FolderWriter, m: &FetchedMessage<'_>, uidvalidity: u32) -> Result<()> {
    let body = m.body.ok_or_else(|| Error::Unreadable {
        what: format!("UID {}", m.uid),
        detail: "the server sent no body".into(),
    })?;
    let data = from_crlf(body);
    let flags: Vec<&str> = m.flags.clone().unwrap_or_default();
    out.message(NewMessage {
        data: &data,
        read: body.len() as u64,
        meta: MessageMeta::Flags {
            flags: &flags,
            internal_date: m.internal_date.map(|d| d.secs).unwrap_or(0),
            id: MessageId::Uid {
                uid: m.uid,
                validity: uidvalidity,
            },
        },
    })?;
    Ok(())
}
