//! The IMAP restore's third phase, shares and filters: once an account's mail is in,
//! the access control lists of its folders (SETACL, RFC 4314) and its sieve scripts
//! (PUTSCRIPT and SETACTIVE over ManageSieve, RFC 5804).
//!
//! What a snapshot of a Maildir store keeps is Dovecot's: a folder's `dovecot-acl` file
//! (the `vfile` backend) and the account's home (`sieve/<name>.sieve`, the
//! `.dovecot.sieve` link to the active one). This module reads them as the folders are
//! opened and turns them into the IMAP commands that give the same rights and filters on
//! any server. The mapping of identifiers and rights is in `docs/imap.md`.

use crate::dest::{FolderInfo, RestoreFailures};
use crate::imap::acl::{parse_dovecot_acl, rename, AclRule};
use crate::imap::names::{
    parse_metadata_file, parse_quota_file, QuotaLimits, METADATA_FILE, QUOTA_FILE,
};
use crate::imap::{Phase, Span};
use crate::repo::lock;
use crate::{Error, Result};
use mailvault_imap::{ClientOptions, Credentials, Session, SieveSession};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// A folder's METADATA entries: (name, value).
type Metadata = Vec<(String, Vec<u8>)>;

/// How the third phase reaches the server: the account's IMAP session, ManageSieve
/// (`None`: off), the account's credentials, and a way to an admin session (quotas).
pub(super) type Ways<'a> = (
    Result<&'a mut Session>,
    Option<ClientOptions>,
    &'a Credentials,
    &'a dyn Fn() -> Result<Session>,
);

/// What the third phase has to do for one account, gathered as its folders are opened.
#[derive(Default)]
pub(super) struct Pending {
    /// (folder, its list).
    acls: Mutex<Vec<(String, Vec<AclRule>)>>,
    /// (folder, its METADATA entries).
    metadata: Mutex<Vec<(String, Metadata)>>,
    /// The account's quota roots, from its INBOX.
    quotas: Mutex<QuotaLimits>,
    /// (name, text) of the sieve scripts.
    scripts: Mutex<Vec<(String, Vec<u8>)>>,
    /// The active script's name, from the home's `.dovecot.sieve`.
    active: Mutex<Option<String>>,
}

/// What the third phase did, over all accounts.
#[derive(Default)]
pub(super) struct Done {
    pub acl_entries: AtomicU64,
    pub acl_folders: AtomicU64,
    pub scripts: AtomicU64,
    pub active: AtomicU64,
    pub metadata: AtomicU64,
    pub quotas: AtomicU64,
    /// Accounts whose quotas this server or login cannot set (no QUOTA; no admin).
    pub quotas_left: AtomicU64,
}

impl Done {
    /// ACL entries set, on how many folders, scripts put, active scripts set, METADATA
    /// entries set.
    pub(super) fn figures(&self) -> [u64; 5] {
        let all = [
            &self.acl_entries,
            &self.acl_folders,
            &self.scripts,
            &self.active,
        ];
        let [a, b, c, d] = all.map(|n| n.load(Relaxed));
        [a, b, c, d, self.metadata.load(Relaxed)]
    }

    /// Quota roots set.
    pub(super) fn quotas(&self) -> u64 {
        self.quotas.load(Relaxed)
    }

    /// What the phase could not do and is no failure, for the report's warnings.
    pub(super) fn warnings(&self) -> Vec<String> {
        match self.quotas_left.load(Relaxed) {
            0 => Vec::new(),
            n => vec![format!(
                "{n} account(s) have quotas in the snapshot this server or login cannot set \
                 (no QUOTA, or no admin: --imap-master-user); set them in the server's \
                 user database"
            )],
        }
    }

    /// The report's third phase, which took `span`.
    pub(super) fn phase(&self, span: &Span) -> Phase {
        let [entries, folders, scripts, active, metadata] = self.figures();
        let quotas = self.quotas();
        span.phase(
            "shares and filters",
            entries + scripts + metadata + quotas,
            format!(
                "{entries} ACL entries set on {folders} folders, {scripts} sieve scripts put, {active} active scripts set, {metadata} METADATA entries set, {quotas} quota roots set"
            ),
        )
    }
}

/// The account's quota roots, set by the admin (`admin`): the root the target names for
/// the account's INBOX where it has one (roots are named differently on different
/// servers), else the snapshot's; a root the user sees as `INBOX` is the admin's
/// `user/<account>` (Cyrus). Set after the data, so that a restore is never refused for
/// a quota it sets itself.
fn set_quotas(
    s: &mut Session,
    account: &str,
    quotas: QuotaLimits,
    admin: &dyn Fn() -> Result<Session>,
    done: &Done,
    failures: &RestoreFailures,
) {
    if quotas.is_empty() {
        return;
    }
    let item = format!("{account}: quota");
    if !s.has_quota() {
        done.quotas_left.fetch_add(1, Relaxed);
        return;
    }
    let theirs: Vec<String> = (s
        .quota_roots("INBOX")
        .map(|q| q.into_iter().map(|q| q.root)))
    .map(Iterator::collect)
    .unwrap_or_default();
    let mut a = match admin() {
        Ok(a) => a,
        Err(Error::InvalidInput(_)) => {
            done.quotas_left.fetch_add(1, Relaxed);
            return;
        }
        Err(e) => return failures.add(item, e),
    };
    for (i, (root, limits)) in quotas.iter().enumerate() {
        let root = theirs.get(i).unwrap_or(root);
        // The user sees its own root as `INBOX`; the admin names it `user/<account>`.
        let root = match root.eq_ignore_ascii_case("INBOX") {
            true => a
                .server_name(&format!("user/{account}"))
                .unwrap_or_else(|_| root.clone()),
            false => root.clone(),
        };
        match a.set_quota(&root, limits) {
            Ok(()) => {
                done.quotas.fetch_add(1, Relaxed);
            }
            Err(e) => failures.add(format!("{item} root {root:?}"), crate::Error::from(e)),
        }
    }
    let _ = a.logout();
}

/// The ACLs and METADATA of an account's folders over `s`: METADATA first, while the
/// owner holds every right, then the ACL entries (the owner's own last: taking its `a`
/// away first would refuse the others), identifiers renamed as `users` says.
#[allow(clippy::type_complexity)]
fn over_imap(
    s: &mut Session,
    account: &str,
    (acls, metadata): (
        Vec<(String, Vec<AclRule>)>,
        Vec<(String, Vec<(String, Vec<u8>)>)>,
    ),
    users: &[(String, String)],
    done: &Done,
    failures: &RestoreFailures,
) {
    for (folder, entries) in metadata {
        match s.set_metadata(&folder, &entries) {
            Ok(()) => {
                done.metadata.fetch_add(entries.len() as u64, Relaxed);
            }
            Err(e) => failures.add(
                format!("{account}: {folder}: METADATA"),
                crate::Error::from(e),
            ),
        }
    }
    for (folder, mut rules) in acls {
        rules.sort_by_key(|r| r.identifier.trim_start_matches('-') == "owner");
        let mut set = 0;
        for r in &rules {
            let id = rename(&r.identifier, users);
            let item = format!("{account}: {folder}: ACL {id}");
            match s.set_acl(&folder, &id, &r.rights) {
                Ok(()) => set += 1,
                Err(e) => failures.add(item, crate::Error::from(e)),
            }
        }
        done.acl_entries.fetch_add(set, Relaxed);
        done.acl_folders.fetch_add(u64::from(set > 0), Relaxed);
    }
}

/// The name of a home file that is a sieve script (`sieve/<name>.sieve`).
fn script_name(dir: &[u8], file: &[u8]) -> Option<String> {
    let name = std::str::from_utf8(file).ok()?.strip_suffix(".sieve")?;
    (dir == b"sieve" && !name.is_empty()).then(|| name.to_string())
}

impl Pending {
    /// Takes what a folder being opened brings: a mail folder its `dovecot-acl`, a
    /// home directory its sieve scripts and the active one's link. Picked messages
    /// bring nothing (they are not the folder).
    pub(super) fn take(&self, account: &str, info: &FolderInfo) {
        let item = |what: &str| format!("{account}: {}: {what}", info.name);
        let read = |name: &[u8]| match info.file(name)? {
            Ok(d) => Some(d),
            Err(e) => {
                info.failures.add(item(&String::from_utf8_lossy(name)), e);
                None
            }
        };
        if info.picked {
            return;
        }
        if !info.home {
            if let Some(data) = read(QUOTA_FILE) {
                match parse_quota_file(&data) {
                    Ok(q) => *lock(&self.quotas) = q,
                    Err(e) => info.failures.add(item("quota"), e),
                }
            }
            if let Some(data) = read(METADATA_FILE) {
                match parse_metadata_file(&data) {
                    Ok(e) => lock(&self.metadata).push((info.name.to_string(), e)),
                    Err(e) => info.failures.add(item("METADATA"), e),
                }
            }
            let Some(data) = read(b"dovecot-acl") else {
                return;
            };
            let (rules, odd) = parse_dovecot_acl(&data);
            for (line, what) in odd {
                (info.failures).add(item("dovecot-acl"), format!("the entry {line:?}: {what}"));
            }
            if !rules.is_empty() {
                lock(&self.acls).push((info.name.to_string(), rules));
            }
            return;
        }
        for f in &info.node.files {
            if let Some(name) = script_name(&info.node.dir, &f.name) {
                if let Some(text) = read(&f.name) {
                    lock(&self.scripts).push((name, text));
                }
            } else if info.node.dir.is_empty() && f.name == b".dovecot.sieve" {
                let active = match &f.link {
                    // The link's file name is the script's: `sieve/<name>.sieve`.
                    Some(target) => (target.rsplit(|&c| c == b'/').next())
                        .and_then(|n| script_name(b"sieve", n)),
                    // A script of its own, not a link: Pigeonhole's name for it.
                    None => read(&f.name).map(|text| {
                        lock(&self.scripts).push(("dovecot.orig".into(), text));
                        "dovecot.orig".to_string()
                    }),
                };
                *lock(&self.active) = active;
            }
        }
    }

    /// Nothing to do for the account.
    pub(super) fn is_empty(&self) -> bool {
        lock(&self.acls).is_empty()
            && lock(&self.scripts).is_empty()
            && lock(&self.metadata).is_empty()
            && lock(&self.quotas).is_empty()
    }
}

impl Pending {
    /// The third phase for `account`: its folders' ACLs over `session` (identifiers
    /// renamed as `users` says), then its scripts over ManageSieve (`sieve`; `None`:
    /// off), logging in with `creds`. Each
    /// refusal is a failure of its own, naming the account, folder and identifier or
    /// script; the rest goes on. What was done is added to `done`.
    pub(super) fn apply(
        &self,
        account: &str,
        (session, sieve, creds, admin): Ways<'_>,
        users: &[(String, String)],
        done: &Done,
        failures: &RestoreFailures,
    ) {
        let acls = std::mem::take(&mut *lock(&self.acls));
        let metadata = std::mem::take(&mut *lock(&self.metadata));
        let quotas = std::mem::take(&mut *lock(&self.quotas));
        if !acls.is_empty() || !metadata.is_empty() || !quotas.is_empty() {
            match session {
                Err(e) => failures.add(format!("{account}: ACLs, METADATA and quotas"), e),
                Ok(s) => {
                    set_quotas(s, account, quotas, admin, done, failures);
                    over_imap(s, account, (acls, metadata), users, done, failures);
                }
            }
        }
        let scripts = std::mem::take(&mut *lock(&self.scripts));
        if scripts.is_empty() {
            return;
        }
        let active = lock(&self.active).clone();
        let item = format!("{account}: sieve scripts");
        let Some(opts) = sieve else {
            let n = scripts.len();
            return failures.add(
                item,
                format!("{n} script(s) not restored: ManageSieve is off (--sieve-port 0)"),
            );
        };
        let mut s = match SieveSession::connect(&opts).and_then(|mut s| {
            s.login(creds)?;
            Ok(s)
        }) {
            Ok(s) => s,
            Err(e) => return failures.add(item, crate::Error::from(e)),
        };
        for (name, text) in &scripts {
            match s.put_script(name, text) {
                Ok(()) => {
                    done.scripts.fetch_add(1, Relaxed);
                }
                Err(e) => failures.add(
                    format!("{account}: sieve script {name:?}"),
                    crate::Error::from(e),
                ),
            }
        }
        if let Some(name) = active {
            if !scripts.iter().any(|(n, _)| *n == name) {
                failures.add(
                    format!("{account}: active sieve script"),
                    format!(
                        "the active script's link names {name:?}, which the home does not hold"
                    ),
                );
            } else {
                match s.set_active(&name) {
                    Ok(()) => {
                        done.active.fetch_add(1, Relaxed);
                    }
                    Err(e) => failures.add(
                        format!("{account}: active sieve script {name:?}"),
                        crate::Error::from(e),
                    ),
                }
            }
        }
        let _ = s.logout();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sieve_script_names() {
        assert_eq!(script_name(b"sieve", b"rules.sieve"), Some("rules".into()));
        assert_eq!(script_name(b"sieve", b"rules.svbin"), None);
        assert_eq!(script_name(b"", b"rules.sieve"), None);
        assert_eq!(script_name(b"sieve", b".sieve"), None);
    }
}
