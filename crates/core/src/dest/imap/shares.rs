//! The IMAP restore's third phase, shares and filters: once an account's mail is in, its
//! quotas (SETQUOTA, by the admin), its folders' METADATA (SETMETADATA) and access
//! control lists (SETACL, RFC 4314), and its sieve scripts (PUTSCRIPT and SETACTIVE over
//! ManageSieve, RFC 5804).
//!
//! What a snapshot keeps is a Maildir store's form, whatever its source: a folder's
//! `dovecot-acl` file (Dovecot's `vfile`), the account's home (`sieve/<name>.sieve`, the
//! `.dovecot.sieve` link to the active one), and from IMAP backups the folder files
//! [`METADATA_FILE`] and [`QUOTA_FILE`]. This module reads them as the folders are opened
//! and turns them into the IMAP commands that give the same on any server. The mapping
//! of identifiers and rights is in `docs/imap.md`.

use super::report::SharesFigures;
use crate::dest::{FolderInfo, RestoreFailures};
use crate::imap::acl::{parse_dovecot_acl, rename_in_file, AclRule};
use crate::imap::names::{
    parse_metadata_file, parse_quota_file, QuotaRoot, METADATA_FILE, QUOTA_FILE,
};
use crate::imap::{Phase, Span};
use crate::repo::lock;
use crate::{Error, Result};
use mailvault_imap::{ClientOptions, Credentials, Session, SieveSession};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// A folder's METADATA entries: (name, value).
type Metadata = Vec<(String, Vec<u8>)>;

/// How the third phase reaches the server.
pub(super) struct Reach<'a> {
    /// The account's IMAP session (quota roots, METADATA, ACLs).
    pub session: Result<&'a mut Session>,
    /// ManageSieve; `None`: off.
    pub sieve: Option<ClientOptions>,
    /// The account's credentials, for ManageSieve.
    pub creds: &'a Credentials,
    /// A session of the server's admin (SETQUOTA).
    pub admin: &'a dyn Fn() -> Result<Session>,
    /// Who the server's users are, and a session as one of them through the master
    /// user (`None`: no master user).
    pub users: (&'a Users, &'a SessionAs<'a>),
}

/// A session as a user through the master user; `None`: no master user.
pub(super) type SessionAs<'a> = dyn Fn(&str) -> Option<mailvault_imap::Result<Session>> + 'a;

/// Who the target's users are, for the ACL entries that name one: SETACL takes any
/// identifier on Dovecot and Cyrus alike, so an entry for a user the target does not
/// have would be set in silence. The accounts the restore writes are users (Cyrus has
/// them once they are provisioned, maybe after this one's shares); another is one if
/// the master user can open it and its INBOX is there (a Cyrus admin may act as any
/// name, an account or not). Asked once per user and restore.
pub(super) struct Users {
    restored: HashSet<String>,
    asked: Mutex<HashMap<String, Option<bool>>>,
}

impl Users {
    pub(super) fn new(accounts: &[String]) -> Users {
        Users {
            restored: accounts.iter().cloned().collect(),
            asked: Mutex::default(),
        }
    }

    /// Whether `user` is one of the target's; `None`: cannot tell (no master user, or
    /// the server did not answer), and the entry is set.
    fn exists(&self, user: &str, session_as: &SessionAs<'_>) -> Option<bool> {
        if self.restored.contains(user) {
            return Some(true);
        }
        if let Some(&known) = lock(&self.asked).get(user) {
            return known;
        }
        let known = match session_as(user)? {
            Ok(mut s) => {
                let inbox = s.status("INBOX");
                let _ = s.logout();
                match inbox {
                    Ok(_) => Some(true),
                    Err(e) if e.is_transient() => None,
                    Err(_) => Some(false),
                }
            }
            Err(mailvault_imap::Error::AuthFailed { .. }) => Some(false),
            Err(_) => None,
        };
        lock(&self.asked).insert(user.to_string(), known);
        known
    }
}

/// The user an ACL identifier names (`-bob`: bob); `None` for the identifiers that
/// name no user: `anyone`, `authenticated`, `anonymous` and groups (Dovecot's `$staff`,
/// `!$staff`; Cyrus' `group:staff`).
fn user_named(identifier: &str) -> Option<&str> {
    let id = identifier.strip_prefix('-').unwrap_or(identifier);
    let special = ["anyone", "authenticated", "anonymous"].contains(&id)
        || id.starts_with(['$', '!'])
        || id.starts_with("group:");
    (!special && !id.is_empty()).then_some(id)
}

/// What the third phase has to do for one account, gathered as its folders are opened.
#[derive(Default)]
pub(super) struct Pending(Mutex<Gathered>);

#[derive(Default)]
struct Gathered {
    acls: FolderAcls,
    metadata: FolderMetadata,
    /// The account's quota roots, from its INBOX.
    quotas: Vec<QuotaRoot>,
    /// (name, text) of the sieve scripts.
    scripts: Vec<(String, Vec<u8>)>,
    /// The active script's name, from the home's `.dovecot.sieve`.
    active: Option<String>,
}

/// (folder, its ACL list).
type FolderAcls = Vec<(String, Vec<AclRule>)>;
/// (folder, its METADATA entries).
type FolderMetadata = Vec<(String, Metadata)>;

/// What the third phase did, over all accounts.
#[derive(Default)]
pub(super) struct Done {
    acl_entries: AtomicU64,
    acl_folders: AtomicU64,
    scripts: AtomicU64,
    /// Scripts the server already had, with the same text.
    scripts_unchanged: AtomicU64,
    active: AtomicU64,
    metadata: AtomicU64,
    quotas: AtomicU64,
    /// Accounts whose quotas this server or login cannot set (no QUOTA; no admin; the
    /// server refused SETQUOTA).
    quotas_left: AtomicU64,
    /// Why the first of them could not be set, when the server said so: it refused
    /// SETQUOTA, or the admin's own login (Dovecot's limits come from its user
    /// database, and its master user logs in only as others).
    quota_refused: Mutex<Option<String>>,
    /// Folders with METADATA the server does not keep (no METADATA capability).
    metadata_left: AtomicU64,
}

impl Done {
    pub(super) fn figures(&self) -> SharesFigures {
        let n = |a: &AtomicU64| a.load(Relaxed);
        SharesFigures {
            acl_entries: n(&self.acl_entries),
            acl_folders: n(&self.acl_folders),
            sieve_scripts: n(&self.scripts),
            sieve_unchanged: n(&self.scripts_unchanged),
            sieve_active: n(&self.active),
            metadata_entries: n(&self.metadata),
            quota_roots: n(&self.quotas),
        }
    }

    /// What the phase could not do and is no failure, for the report's warnings.
    pub(super) fn warnings(&self) -> Vec<String> {
        let refused = match &*lock(&self.quota_refused) {
            Some(r) => format!(", or the server refused: {r}"),
            None => String::new(),
        };
        let mut out = Vec::new();
        match self.quotas_left.load(Relaxed) {
            0 => {}
            n => out.push(format!(
                "{n} account(s) have quotas in the snapshot this server or login cannot set \
                 (no QUOTA, or no admin: --imap-master-user{refused}); set them in the \
                 server's user database"
            )),
        }
        match self.metadata_left.load(Relaxed) {
            0 => {}
            n => out.push(format!(
                "{n} folder(s) have IMAP METADATA (RFC 5464) this server does not keep (it \
                 offers no METADATA; Dovecot: the imap_metadata setting); they are not set"
            )),
        }
        out
    }

    /// The report's third phase, which took `span`.
    pub(super) fn phase(&self, span: &Span) -> Phase {
        let f = self.figures();
        span.phase(
            "shares and filters",
            f.acl_entries + f.sieve_scripts + f.metadata_entries + f.quota_roots,
            format!(
                "{} ACL entries set on {} folders, {} sieve scripts put ({} already there), {} active scripts set, {} METADATA entries set, {} quota roots set",
                f.acl_entries, f.acl_folders, f.sieve_scripts, f.sieve_unchanged, f.sieve_active, f.metadata_entries, f.quota_roots
            ),
        )
    }
}

/// The name of a home file that is a sieve script (`sieve/<name>.sieve`).
fn script_name(dir: &[u8], file: &[u8]) -> Option<String> {
    let name = std::str::from_utf8(file).ok()?.strip_suffix(".sieve")?;
    (dir == b"sieve" && !name.is_empty()).then(|| name.to_string())
}

impl Pending {
    /// Takes what a folder being opened brings: a mail folder its ACL (entries naming
    /// renamed accounts renamed as `users` says, the owner's entry as `account`'s: servers
    /// other than Dovecot know no `owner`), its METADATA and, INBOX, the account's quotas;
    /// a home directory its sieve scripts and the active one's link. Picked messages
    /// bring nothing (they are not the folder).
    pub(super) fn take(&self, account: &str, users: &[(String, String)], info: &FolderInfo) {
        if info.picked {
            return;
        }
        let item = |what: &str| format!("{account}: {}: {what}", info.name);
        let read = |name: &[u8]| match info.file(name)? {
            Ok(d) => Some(d),
            Err(e) => {
                info.failures.add(item(&String::from_utf8_lossy(name)), e);
                None
            }
        };
        let mut g = lock(&self.0);
        if info.home {
            return g.take_home(info, read);
        }
        match read(QUOTA_FILE).map(|d| parse_quota_file(&d)) {
            Some(Ok(q)) => g.quotas = q,
            Some(Err(e)) => info.failures.add(item("quota"), e),
            None => {}
        }
        match read(METADATA_FILE).map(|d| parse_metadata_file(&d)) {
            Some(Ok(e)) => g.metadata.push((info.name.to_string(), e)),
            Some(Err(e)) => info.failures.add(item("METADATA"), e),
            None => {}
        }
        let Some(data) = read(b"dovecot-acl") else {
            return;
        };
        let (mut rules, odd) = parse_dovecot_acl(&rename_in_file(&data, users));
        for (line, what) in odd {
            (info.failures).add(item("dovecot-acl"), format!("the entry {line:?}: {what}"));
        }
        for r in &mut rules {
            if let Some(neg) = r
                .identifier
                .strip_suffix("owner")
                .filter(|n| matches!(*n, "" | "-"))
            {
                r.identifier = format!("{neg}{account}");
            }
        }
        if !rules.is_empty() {
            g.acls.push((info.name.to_string(), rules));
        }
    }

    /// Nothing to do for the account.
    pub(super) fn is_empty(&self) -> bool {
        let g = lock(&self.0);
        g.acls.is_empty() && g.scripts.is_empty() && g.metadata.is_empty() && g.quotas.is_empty()
    }

    /// The third phase for `account`: quotas, METADATA and ACLs over its IMAP session,
    /// then its scripts over ManageSieve. Each refusal is a failure of its own, naming
    /// the account, folder and identifier or script; the rest goes on. What was done is
    /// added to `done`.
    pub(super) fn apply(
        &self,
        account: &str,
        reach: Reach<'_>,
        done: &Done,
        failures: &RestoreFailures,
    ) {
        let g = std::mem::take(&mut *lock(&self.0));
        if !g.acls.is_empty() || !g.metadata.is_empty() || !g.quotas.is_empty() {
            match reach.session {
                Err(e) => failures.add(format!("{account}: ACLs, METADATA and quotas"), e),
                Ok(s) => {
                    set_quotas(s, account, &g.quotas, reach.admin, done, failures);
                    let (users, session_as) = reach.users;
                    let known = |user: &str| users.exists(user, session_as);
                    over_imap(s, account, &known, (g.acls, g.metadata), done, failures);
                }
            }
        }
        if !g.scripts.is_empty() {
            let sieve = (reach.sieve, reach.creds);
            put_scripts(account, sieve, (&g.scripts, g.active), done, failures);
        }
    }
}

impl Gathered {
    /// A home directory's sieve scripts, and the active one's name from `.dovecot.sieve`.
    fn take_home(&mut self, info: &FolderInfo, read: impl Fn(&[u8]) -> Option<Vec<u8>>) {
        for f in &info.node.files {
            if let Some(name) = script_name(&info.node.dir, &f.name) {
                if let Some(text) = read(&f.name) {
                    self.scripts.push((name, text));
                }
            } else if info.node.dir.is_empty() && f.name == b".dovecot.sieve" {
                self.active = match &f.link {
                    // The link's file name is the script's: `sieve/<name>.sieve`.
                    Some(target) => (target.rsplit(|&c| c == b'/').next())
                        .and_then(|n| script_name(b"sieve", n)),
                    // A script of its own, not a link: Pigeonhole's name for it.
                    None => read(&f.name).map(|text| {
                        self.scripts.push(("dovecot.orig".into(), text));
                        "dovecot.orig".to_string()
                    }),
                };
            }
        }
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
    quotas: &[QuotaRoot],
    admin: &dyn Fn() -> Result<Session>,
    done: &Done,
    failures: &RestoreFailures,
) {
    if quotas.is_empty() {
        return;
    }
    if !s.has_quota() {
        done.quotas_left.fetch_add(1, Relaxed);
        return;
    }
    let item = format!("{account}: quota");
    let theirs: Vec<String> = (s.quota_roots("INBOX").ok().into_iter().flatten())
        .map(|q| q.root)
        .collect();
    let mut a = match admin() {
        Ok(a) => a,
        Err(Error::InvalidInput(_)) => {
            done.quotas_left.fetch_add(1, Relaxed);
            return;
        }
        Err(Error::Imap(e)) if matches!(*e, mailvault_imap::Error::AuthFailed { .. }) => {
            done.quotas_left.fetch_add(1, Relaxed);
            lock(&done.quota_refused).get_or_insert(format!("the admin's own login: {e}"));
            return;
        }
        Err(e) => return failures.add(item, e),
    };
    let mut refused = false;
    for (i, q) in quotas.iter().enumerate() {
        let root = theirs.get(i).unwrap_or(&q.root);
        // The user sees its own root as `INBOX`; the admin names it `user/<account>`.
        let root = match root.eq_ignore_ascii_case("INBOX") {
            true => (a.server_name(&format!("user/{account}"))).unwrap_or_else(|_| root.clone()),
            false => root.clone(),
        };
        let limits = q.limits.iter().map(|(n, l)| (n.as_str(), *l));
        match a.set_quota(&root, limits) {
            Ok(()) => {
                done.quotas.fetch_add(1, Relaxed);
            }
            // The server will not set it (NO or BAD): where its limits come from is its
            // own matter, a warning, not a failure of the restore.
            Err(mailvault_imap::Error::Command { response, .. }) => {
                refused = true;
                lock(&done.quota_refused).get_or_insert(format!("SETQUOTA: {response}"));
            }
            Err(e) => failures.add(format!("{item} root {root:?}"), Error::from(e)),
        }
    }
    if refused {
        done.quotas_left.fetch_add(1, Relaxed);
    }
    let _ = a.logout();
}

/// The METADATA and ACLs of an account's folders over `s`: METADATA first, while the
/// owner holds every right, then the ACL entries (the owner's own last: taking its `a`
/// away first would refuse the others). An entry naming a user the target does not
/// have (`known` says no) is a failure of its own, not set.
fn over_imap(
    s: &mut Session,
    account: &str,
    known: &dyn Fn(&str) -> Option<bool>,
    (acls, metadata): (FolderAcls, FolderMetadata),
    done: &Done,
    failures: &RestoreFailures,
) {
    let mut metadata = metadata;
    if !metadata.is_empty() && !s.has_metadata() {
        done.metadata_left.fetch_add(metadata.len() as u64, Relaxed);
        metadata.clear();
    }
    for (folder, entries) in metadata {
        match s.set_metadata(&folder, &entries) {
            Ok(()) => {
                done.metadata.fetch_add(entries.len() as u64, Relaxed);
            }
            Err(e) => failures.add(format!("{account}: {folder}: METADATA"), Error::from(e)),
        }
    }
    for (folder, mut rules) in acls {
        rules.sort_by_key(|r| r.identifier.trim_start_matches('-') == account);
        let mut set = 0;
        for r in &rules {
            let item = format!("{account}: {folder}: ACL {}", r.identifier);
            let user = user_named(&r.identifier).filter(|u| *u != account);
            if let Some(u) = user.filter(|u| known(u) == Some(false)) {
                failures.add(
                    item,
                    format!("the target server has no user {u:?}; the entry is not set"),
                );
                continue;
            }
            match s.set_acl(&folder, &r.identifier, &r.rights) {
                Ok(()) => set += 1,
                Err(e) => failures.add(item, Error::from(e)),
            }
        }
        done.acl_entries.fetch_add(set, Relaxed);
        done.acl_folders.fetch_add(u64::from(set > 0), Relaxed);
    }
}

/// The account's sieve scripts over ManageSieve (`opts`; `None`: off, and they are
/// reported as left), logging in with `creds`; then the active one. A script the server
/// has under the same name is left as it is: counted unchanged when its text is the
/// same, else reported as a conflict (the user's newer script is never overwritten).
fn put_scripts(
    account: &str,
    (opts, creds): (Option<ClientOptions>, &Credentials),
    (scripts, active): (&[(String, Vec<u8>)], Option<String>),
    done: &Done,
    failures: &RestoreFailures,
) {
    let item = format!("{account}: sieve scripts");
    let Some(opts) = opts else {
        let n = scripts.len();
        return failures.add(
            item,
            format!("{n} script(s) not restored: ManageSieve is off (--sieve-port 0)"),
        );
    };
    let session = SieveSession::connect(&opts).and_then(|mut s| s.login(creds).map(|()| s));
    let mut s = match session {
        Ok(s) => s,
        Err(e) => return failures.add(item, Error::from(e)),
    };
    let there: Vec<String> = match s.list_scripts() {
        Ok(l) => l.into_iter().map(|s| s.name).collect(),
        Err(e) => return failures.add(item, Error::from(e)),
    };
    for (name, text) in scripts {
        if there.contains(name) {
            match s.get_script(name) {
                Ok(have) if have == *text => {
                    done.scripts_unchanged.fetch_add(1, Relaxed);
                }
                Ok(_) => failures.add(
                    format!("{account}: sieve script {name:?}"),
                    Error::conflict(
                        format!("the server's script {name:?}"),
                        "differs from the snapshot's: not overwritten",
                    ),
                ),
                Err(e) => failures.add(format!("{account}: sieve script {name:?}"), Error::from(e)),
            }
            continue;
        }
        match s.put_script(name, text) {
            Ok(()) => {
                done.scripts.fetch_add(1, Relaxed);
            }
            Err(e) => failures.add(format!("{account}: sieve script {name:?}"), Error::from(e)),
        }
    }
    match active {
        Some(name) if !scripts.iter().any(|(n, _)| *n == name) => failures.add(
            format!("{account}: active sieve script"),
            format!("the active script's link names {name:?}, which the home does not hold"),
        ),
        Some(name) => match s.set_active(&name) {
            Ok(()) => {
                done.active.fetch_add(1, Relaxed);
            }
            Err(e) => failures.add(
                format!("{account}: active sieve script {name:?}"),
                Error::from(e),
            ),
        },
        None => {}
    }
    let _ = s.logout();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Users are named by their entries, negative ones too; the identifiers that name
    /// everyone or a group name no user.
    #[test]
    fn identifiers_naming_users() {
        for (id, user) in [
            ("bob@example.org", Some("bob@example.org")),
            ("-bob", Some("bob")),
            ("anyone", None),
            ("-anyone", None),
            ("authenticated", None),
            ("anonymous", None),
            ("$staff", None),
            ("!$staff", None),
            ("group:staff", None),
            ("", None),
            ("-", None),
        ] {
            assert_eq!(user_named(id), user, "{id:?}");
        }
    }

    /// The restore's accounts are users without asking; another is asked once, and
    /// without a master user nothing can be told.
    #[test]
    fn users_are_asked_once() {
        let users = Users::new(&["alice".to_string()]);
        let asked = std::cell::Cell::new(0);
        let refused = |_: &str| {
            asked.set(asked.get() + 1);
            Some(Err(mailvault_imap::Error::AuthFailed {
                server: "127.0.0.1:143".into(),
                account: "ghost".into(),
                response: "NO [AUTHENTICATIONFAILED]".into(),
            }))
        };
        assert_eq!(users.exists("alice", &refused), Some(true));
        assert_eq!(users.exists("ghost", &refused), Some(false));
        assert_eq!(users.exists("ghost", &refused), Some(false));
        assert_eq!(asked.get(), 1);
        assert_eq!(Users::new(&[]).exists("bob", &|_: &str| None), None);
    }

    #[test]
    fn sieve_script_names() {
        assert_eq!(script_name(b"sieve", b"rules.sieve"), Some("rules".into()));
        assert_eq!(script_name(b"sieve", b"rules.svbin"), None);
        assert_eq!(script_name(b"", b"rules.sieve"), None);
        assert_eq!(script_name(b"sieve", b".sieve"), None);
    }
}
