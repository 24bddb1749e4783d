//! The IMAP restore's third phase, shares and filters: once an account's mail is in,
//! the access control lists of its folders (SETACL, RFC 4314) and its sieve scripts
//! (PUTSCRIPT and SETACTIVE over ManageSieve, RFC 5804).
//!
//! What a snapshot of a Maildir store keeps is Dovecot's: a folder's `dovecot-acl` file
//! (the `vfile` backend) and the account's home (`sieve/<name>.sieve`, the
//! `.dovecot.sieve` link to the active one). This module reads them as the folders are
//! opened and turns them into the IMAP commands that give the same rights and filters on
//! any server. The mapping of identifiers and rights is in `docs/imap.md`.

use super::{ImapTarget, Shared};
use crate::dest::{FolderInfo, RestoreFailures};
use crate::repo::lock;
use crate::Result;
use mailvault_imap::{ClientOptions, Security, Session, SieveSession};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Dovecot's rights letters, which are RFC 4314's (`docs/imap.md` has the table).
const RIGHTS: &str = "lrwstipekxa";

/// One entry of an access control list, in IMAP's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclRule {
    /// `anyone`, `authenticated`, `owner`, a user, `$group`; `-` before it for negative
    /// rights.
    pub identifier: String,
    pub rights: String,
}

/// The entries of a Dovecot `dovecot-acl` file as IMAP identifiers and rights, and the
/// lines IMAP cannot say whole, with what becomes of them (said in the report, never
/// dropped in silence).
///
/// A line is `[-]<identifier> <rights>`: `owner`, `user=<name>`, `group=<name>`,
/// `group-override=<name>`, `authenticated`, `anyone`; rights are letters of
/// `lrwstipekxa`, possibly followed by `:<flag names>` (Dovecot's private-flag rights,
/// which IMAP has no word for). `#` starts a comment.
pub fn parse_dovecot_acl(text: &[u8]) -> (Vec<AclRule>, Vec<(String, &'static str)>) {
    let mut rules = Vec::new();
    let mut odd = Vec::new();
    for line in String::from_utf8_lossy(text).lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        const NONE: &str = "no IMAP form; not restored";
        let Some((id, rights)) = line.rsplit_once(|c: char| c.is_ascii_whitespace()) else {
            odd.push((line.to_string(), NONE));
            continue;
        };
        let (neg, id) = match id.trim().strip_prefix('-') {
            Some(rest) => ("-", rest),
            None => ("", id.trim()),
        };
        let name = match id.split_once('=') {
            None if matches!(id, "owner" | "anyone" | "authenticated") => id.to_string(),
            Some(("user", u)) if !u.is_empty() => u.to_string(),
            Some(("group", g)) if !g.is_empty() => format!("${g}"),
            Some(("group-override", g)) if !g.is_empty() => format!("!${g}"),
            _ => {
                odd.push((line.to_string(), NONE));
                continue;
            }
        };
        let (letters, flags) = rights.split_once(':').unwrap_or((rights, ""));
        if !letters.chars().all(|c| RIGHTS.contains(c)) {
            odd.push((line.to_string(), NONE));
            continue;
        }
        if !flags.is_empty() {
            odd.push((
                line.to_string(),
                "rights on private flags have no IMAP form; its letters are restored",
            ));
        }
        rules.push(AclRule {
            identifier: format!("{neg}{name}"),
            rights: letters.to_string(),
        });
    }
    (rules, odd)
}

/// What the third phase has to do for one account, gathered as its folders are opened.
#[derive(Default)]
pub(super) struct Pending {
    /// (folder, its list).
    acls: Mutex<Vec<(String, Vec<AclRule>)>>,
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
        lock(&self.acls).is_empty() && lock(&self.scripts).is_empty()
    }
}

impl ImapTarget {
    /// The third phase for one account: its folders' ACLs over `session`, then its
    /// scripts over ManageSieve. Each refusal is a failure of its own, naming the
    /// account, folder and identifier or script; the rest goes on.
    pub(super) fn shares_and_filters(
        &self,
        acc: &Shared,
        session: Result<&mut Session>,
        failures: &RestoreFailures,
    ) {
        let (account, pending) = (&acc.name, &acc.pending);
        let acls = std::mem::take(&mut *lock(&pending.acls));
        match (acls.is_empty(), session) {
            (true, _) => {}
            (false, Err(e)) => failures.add(format!("{account}: ACLs"), e),
            (false, Ok(s)) => {
                for (folder, mut rules) in acls {
                    // The owner's own entry last: taking its `a` away first would refuse
                    // the others.
                    rules.sort_by_key(|r| r.identifier.trim_start_matches('-') == "owner");
                    let mut set = 0;
                    for r in &rules {
                        let item = format!("{account}: {folder}: ACL {}", r.identifier);
                        match s.set_acl(&folder, &r.identifier, &r.rights) {
                            Ok(()) => set += 1,
                            Err(e) => failures.add(item, crate::Error::from(e)),
                        }
                    }
                    self.shares.acl_entries.fetch_add(set, Relaxed);
                    self.shares
                        .acl_folders
                        .fetch_add(u64::from(set > 0), Relaxed);
                }
            }
        }
        let scripts = std::mem::take(&mut *lock(&pending.scripts));
        if scripts.is_empty() {
            return;
        }
        let active = lock(&pending.active).clone();
        let item = format!("{account}: sieve scripts");
        let Some(opts) = self.sieve_options() else {
            let n = scripts.len();
            return failures.add(
                item,
                format!("{n} script(s) not restored: ManageSieve is off (--sieve-port 0)"),
            );
        };
        let mut s = match SieveSession::connect(&opts).and_then(|mut s| {
            s.login(&acc.creds)?;
            Ok(s)
        }) {
            Ok(s) => s,
            Err(e) => return failures.add(item, crate::Error::from(e)),
        };
        for (name, text) in &scripts {
            match s.put_script(name, text) {
                Ok(()) => {
                    self.shares.scripts.fetch_add(1, Relaxed);
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
                        self.shares.active.fetch_add(1, Relaxed);
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

    /// Where ManageSieve is: the IMAP server's host on `sieve_port`, with STARTTLS when
    /// the IMAP connection has TLS (ManageSieve has no implicit-TLS port); `None` when
    /// the port is 0.
    fn sieve_options(&self) -> Option<ClientOptions> {
        let port = self.opts.sieve_port;
        if port == 0 {
            return None;
        }
        let mut o = self.opts.connection.client.clone();
        o.endpoint.port = port;
        if o.endpoint.security == Security::Tls {
            o.endpoint.security = Security::StartTls;
        }
        Some(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(identifier: &str, rights: &str) -> AclRule {
        AclRule {
            identifier: identifier.into(),
            rights: rights.into(),
        }
    }

    /// Every identifier form of Dovecot's vfile, negative rights, comments; lines with
    /// no IMAP form are returned, not dropped.
    #[test]
    fn dovecot_acl_files_become_imap_rules() {
        let file = b"# team folder\n\
            owner lrwstipekxa\n\
            user=bob@example.org lr\n\
            -user=carol@example.org x\n\
            group=staff lrs\n\
            group-override=interns l\n\
            authenticated l\n\
            anyone \n\
            user=dave lrw:$Label1\n\
            nobody=x lr\n\
            user=eve lrZ\n";
        let (rules, odd) = parse_dovecot_acl(file);
        assert_eq!(
            rules,
            vec![
                rule("owner", "lrwstipekxa"),
                rule("bob@example.org", "lr"),
                rule("-carol@example.org", "x"),
                rule("$staff", "lrs"),
                rule("!$interns", "l"),
                rule("authenticated", "l"),
                rule("dave", "lrw"),
            ]
        );
        let odd: Vec<&str> = odd.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            odd,
            vec![
                "anyone",
                "user=dave lrw:$Label1",
                "nobody=x lr",
                "user=eve lrZ"
            ]
        );
    }

    #[test]
    fn sieve_script_names() {
        assert_eq!(script_name(b"sieve", b"rules.sieve"), Some("rules".into()));
        assert_eq!(script_name(b"sieve", b"rules.svbin"), None);
        assert_eq!(script_name(b"", b"rules.sieve"), None);
        assert_eq!(script_name(b"sieve", b".sieve"), None);
    }
}
