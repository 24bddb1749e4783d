//! What the judge tests (judge_dovecot.rs, judge_cyrus.rs, judge_sieve.rs, judge_acl.rs)
//! share: a Dovecot as the mail user and a mail root of theirs, the messages they feed
//! the servers, the independent IMAP client that populates an account and records its
//! state (imap_judge.py, Python's imaplib: the judge is not our own code), the comparison
//! of two recorded states, and of owners and modes of two mail trees, with failure lines
//! that name the account, folder, message and field, before and after.
#![allow(dead_code, clippy::unwrap_used)]

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Write as _};
use std::net::TcpStream;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use crate::common::Env;
use mailvault_imap::testing::{DovecotOptions, DovecotServer};

/// Running as root: the judges then run the servers as a dedicated mail user and back
/// up and restore as root, as an administrator does.
pub fn is_root() -> bool {
    fs::metadata("/proc/self").unwrap().uid() == 0
}

/// The system user the judges run Dovecot's mail processes as, when root.
pub const MAIL_USER: &str = "vmail";

/// A Dovecot as the mail user (when root, as on a real server: it makes every folder
/// 0700), serving `mail_root` as it is (a new one when `None`), with `extra_config`
/// appended to its configuration.
pub fn dovecot(mail_root: Option<PathBuf>, extra_config: String) -> Option<DovecotServer> {
    dovecot_of(mail_root, extra_config, &[])
}

/// [`dovecot`] whose user database has `users` alone (none: every name is a user).
pub fn dovecot_of(
    mail_root: Option<PathBuf>,
    extra_config: String,
    users: &[&str],
) -> Option<DovecotServer> {
    let opts = DovecotOptions {
        mail_user: is_root().then(|| MAIL_USER.to_string()),
        mail_root,
        extra_config,
        users: users.iter().map(|u| u.to_string()).collect(),
        ..Default::default()
    };
    DovecotServer::start_or_skip_with(&opts).expect("dovecot")
}

/// (uid, gid) of the mail user (when root), else our own.
pub fn mail_owner() -> (u32, u32) {
    if !is_root() {
        let m = fs::metadata("/proc/self").unwrap();
        return (m.uid(), m.gid());
    }
    let passwd = fs::read_to_string("/etc/passwd").unwrap();
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f[0] == MAIL_USER).then(|| (f[2].parse().unwrap(), f[3].parse().unwrap()))
        })
        .expect("the vmail user (scripts/setup.sh creates it)")
}

/// An empty directory for a mail root, owned by the mail user like the original one
/// (what an administrator prepares; everything below it is the restore's or the
/// server's). The test's temp dir is made reachable by the mail user.
pub fn empty_mail_root(e: &Env, name: &str) -> PathBuf {
    let p = e.path(name);
    fs::create_dir(&p).unwrap();
    let (uid, gid) = mail_owner();
    std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
    fs::set_permissions(
        e.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    p
}

/// As root, a new repository in `e`, a Maildir backup of the store `mail_root`, and its
/// restore into an empty mail root `e/name` (the mail user's): that root.
pub fn maildir_round_trip(e: &Env, mail_root: &Path, name: &str) -> PathBuf {
    e.ok(&["init"]);
    e.ok(&["backup", &format!("maildir:{}", mail_root.display())]);
    let target = empty_mail_root(e, name);
    let to = format!("maildir:{}", target.display());
    e.ok(&["restore", "latest", "--target", &to]);
    target
}

/// The flags that log in to `server` as its master user (its password in a file of
/// `e`, mode 0600).
pub fn master_args(e: &Env, server: &DovecotServer) -> Vec<String> {
    let pass = e.path("imap-pass");
    fs::write(&pass, format!("{}\n", server.master_password())).unwrap();
    fs::set_permissions(&pass, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    vec![
        "--imap-master-user".into(),
        server.master_user().into(),
        "--imap-password-file".into(),
        pass.display().to_string(),
    ]
}

/// `mailvault restore latest` of `e`'s repository into `server` over IMAP, as its
/// master user, with `extra` flags: exit code, stdout, stderr.
pub fn imap_restore(
    e: &Env,
    server: &DovecotServer,
    extra: &[&str],
) -> (Option<i32>, String, String) {
    let mut args = vec![
        "restore".to_string(),
        "latest".into(),
        "--target".into(),
        format!("imap://127.0.0.1:{}", server.port()),
    ];
    args.extend(master_args(e, server));
    args.extend(extra.iter().map(|a| a.to_string()));
    e.run_text(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// `mailvault backup` of `accounts` of `server` over IMAP into `e`'s repository, as its
/// master user, with `extra` flags; it must succeed. Its output.
pub fn imap_backup(e: &Env, server: &DovecotServer, accounts: &[&str], extra: &[&str]) -> String {
    let mut args = vec![
        "backup".to_string(),
        format!("imap://127.0.0.1:{}", server.port()),
    ];
    args.extend(master_args(e, server));
    for a in accounts {
        args.extend(["--account".to_string(), a.to_string()]);
    }
    args.extend(extra.iter().map(|a| a.to_string()));
    e.ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Runs judge/acl_judge.py (Python's imaplib) `args[0]` against 127.0.0.1:`port` with
/// the test users' password and the rest of `args`: its output.
pub fn acl_judge(port: u16, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/judge/acl_judge.py");
    let port = port.to_string();
    let o = Command::new("python3")
        .arg(script)
        .args(&args[..1])
        .args([
            "--port",
            &port,
            "--password",
            mailvault_imap::testing::USER_PASSWORD,
        ])
        .args(&args[1..])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "acl_judge.py {args:?}: {}{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Standard base64 (for SASL PLAIN; the test has no base64 crate).
fn base64(data: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The scripts ManageSieve lists for `user` (RFC 5804 LISTSCRIPTS): (name, active).
pub fn list_scripts(port: u16, user: &str, password: &str) -> Vec<(String, bool)> {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    let reply = |r: &mut BufReader<TcpStream>| -> Vec<String> {
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            assert!(
                r.read_line(&mut l).unwrap() > 0,
                "ManageSieve closed: {lines:?}"
            );
            let l = l.trim_end().to_string();
            let end = l.starts_with("OK") || l.starts_with("NO") || l.starts_with("BYE");
            lines.push(l);
            if end {
                return lines;
            }
        }
    };
    reply(&mut r);
    let auth = base64(format!("\0{user}\0{password}").as_bytes());
    write!(w, "AUTHENTICATE \"PLAIN\" \"{auth}\"\r\n").unwrap();
    let a = reply(&mut r);
    assert!(a.last().unwrap().starts_with("OK"), "{a:?}");
    write!(w, "LISTSCRIPTS\r\n").unwrap();
    let lines = reply(&mut r);
    assert!(lines.last().unwrap().starts_with("OK"), "{lines:?}");
    let _ = write!(w, "LOGOUT\r\n");
    let mut out: Vec<(String, bool)> = (lines[..lines.len() - 1].iter())
        .map(|l| {
            let name = l.split('"').nth(1).unwrap().to_string();
            (name, l.ends_with("ACTIVE"))
        })
        .collect();
    out.sort();
    out
}

/// A Maildir store as Dovecot keeps shares and filters, written by hand: alice's
/// `Team/Plans` with a `dovecot-acl` giving bob `lr`, carol `lrwstipe` and its owner every
/// right, bob's home
/// with two sieve scripts, `rules` active. The store's root.
pub fn store_with_shares_and_filters(e: &Env) -> PathBuf {
    let root = e.path("vmail");
    let msg = |n: u32| {
        format!("From: x@example.net\nSubject: m{n}\nMessage-ID: <m{n}@example.net>\n\nbody {n}\n")
    };
    for (user, folders) in [
        ("alice", vec!["", ".Team", ".Team.Plans"]),
        ("bob", vec![""]),
        ("carol", vec![""]),
    ] {
        for (i, f) in folders.iter().enumerate() {
            let dir = root.join(format!("example.org/{user}/Maildir/{f}"));
            for sub in ["cur", "new", "tmp"] {
                fs::create_dir_all(dir.join(sub)).unwrap();
            }
            if !f.is_empty() {
                fs::write(dir.join("maildirfolder"), "").unwrap();
            }
            let name = format!("17000000{i:02}.M{i}P1.host,S=60:2,S");
            fs::write(dir.join("cur").join(name), msg(i as u32)).unwrap();
        }
    }
    let plans = root.join("example.org/alice/Maildir/.Team.Plans");
    fs::write(
        plans.join("dovecot-acl"),
        "user=bob@example.org lr\nuser=carol@example.org lrwstipe\nowner lrwstipekxa\n",
    )
    .unwrap();
    let home = root.join("example.org/bob");
    fs::create_dir(home.join("sieve")).unwrap();
    fs::write(home.join("sieve/rules.sieve"), "require \"fileinto\";\nif header :contains \"subject\" \"[list]\" { fileinto \"INBOX\"; }\n").unwrap();
    fs::write(
        home.join("sieve/vacation.sieve"),
        "require \"vacation\";\nvacation :days 7 \"Away.\";\n",
    )
    .unwrap();
    std::os::unix::fs::symlink("sieve/rules.sieve", home.join(".dovecot.sieve")).unwrap();
    root
}

/// `chown -R` of `p` to `owner`, links themselves (never followed).
pub fn chown_tree(p: &Path, owner: (u32, u32)) {
    std::os::unix::fs::lchown(p, Some(owner.0), Some(owner.1)).unwrap();
    if fs::symlink_metadata(p).unwrap().is_dir() {
        for e in fs::read_dir(p).unwrap() {
            chown_tree(&e.unwrap().path(), owner);
        }
    }
}

/// A directory of distinct, non-empty messages (`0001.eml`…): `n` from the corpus
/// generator, plus up to `real` real ones from the SpamAssassin corpus when it is on this
/// machine (`MAILVAULT_JUDGE_REAL_MAIL` may name another directory of message files).
pub fn messages(n: usize, real: usize) -> tempfile::TempDir {
    let gen = tempfile::tempdir().unwrap();
    let spec = mailvault_corpus::CorpusSpec {
        messages: n * 2,
        accounts: 2,
        domains: 1,
        ..mailvault_corpus::CorpusSpec::preset("tiny").unwrap()
    };
    mailvault_corpus::generate(&spec, gen.path()).unwrap();
    let mut files = Vec::new();
    walk_files(gen.path(), &mut files);
    files.sort();
    let mut seen = HashSet::new();
    let mut bodies: Vec<Vec<u8>> = Vec::new();
    for f in files {
        let data = fs::read(&f).unwrap();
        if bodies.len() < n && !data.is_empty() && seen.insert(data.clone()) {
            bodies.push(data);
        }
    }
    let real_dir = std::env::var_os("MAILVAULT_JUDGE_REAL_MAIL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // The SpamAssassin messages shipped with the tests (testdata/spamassassin).
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/spamassassin/easy-ham-1")
        });
    assert!(
        real == 0 || real_dir.is_dir(),
        "{} is missing",
        real_dir.display()
    );
    if real > 0 {
        let mut files = Vec::new();
        walk_files(&real_dir, &mut files);
        files.sort();
        let mut added = 0;
        for f in files {
            let data = fs::read(&f).unwrap();
            if added < real && !data.is_empty() && seen.insert(data.clone()) {
                bodies.push(data);
                added += 1;
            }
        }
    }
    let out = tempfile::tempdir().unwrap();
    for (i, b) in bodies.iter().enumerate() {
        fs::write(out.path().join(format!("{i:04}.eml")), b).unwrap();
    }
    out
}

fn walk_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk_files(&p, out);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

/// How the judge reaches an account: port, account, and the admin (Dovecot's master
/// user, Cyrus' proxy admin) with its password.
#[derive(Clone, Debug)]
pub struct Login {
    pub port: u16,
    pub admin: String,
    pub password: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/judge/imap_judge.py")
}

fn python(args: &[&str]) -> Result<String, String> {
    let py = std::env::var("MAILVAULT_PYTHON").unwrap_or_else(|_| "python3".into());
    let o = Command::new(&py)
        .arg(script())
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {py} (scripts/setup.sh installs python3): {e}"))?;
    if o.status.success() {
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    } else {
        Err(format!(
            "imap_judge.py {} failed ({}): {}{}",
            args.first().unwrap_or(&""),
            o.status,
            String::from_utf8_lossy(&o.stderr),
            String::from_utf8_lossy(&o.stdout)
        ))
    }
}

fn login_args<'a>(l: &'a Login, port: &'a str, account: &'a str) -> Vec<&'a str> {
    vec![
        "--port",
        port,
        "--account",
        account,
        "--admin",
        &l.admin,
        "--password",
        &l.password,
    ]
}

/// Fills `account` through IMAP (see imap_judge.py): `rich` is the full plan (nested and
/// non-ASCII folders, special use, subscriptions, copies, moves, expunges), else INBOX and
/// Sent. `server` is `dovecot` or `cyrus` (special use is set on CREATE on Cyrus).
pub fn populate(l: &Login, account: &str, messages: &Path, rich: bool, server: &str) {
    let port = l.port.to_string();
    let mut args = vec!["populate"];
    args.extend(login_args(l, &port, account));
    let m = messages.display().to_string();
    args.extend([
        "--messages",
        &m,
        "--plan",
        if rich { "rich" } else { "plain" },
        "--server",
        server,
    ]);
    if let Err(e) = python(&args) {
        panic!("populating {account}: {e}");
    }
}

/// The account's state over IMAP, or why it could not be read.
pub fn record(l: &Login, account: &str) -> Result<State, String> {
    let port = l.port.to_string();
    let mut args = vec!["record"];
    args.extend(login_args(l, &port, account));
    let out = python(&args)?;
    let v: Value = serde_json::from_str(&out).map_err(|e| format!("{e}: {out}"))?;
    Ok(State::from_json(&v))
}

/// One account as IMAP shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub account: String,
    pub folders: BTreeMap<String, Folder>,
    pub subscriptions: BTreeSet<String>,
    /// Commands the server refused while recording (LSUB; EXAMINE in `Folder::error`).
    pub errors: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folder {
    pub special_use: Vec<String>,
    pub uidvalidity: u64,
    pub uidnext: u64,
    /// In UID order.
    pub messages: Vec<Message>,
    /// Why the server would not open it (then nothing else is known).
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    pub uid: u64,
    pub flags: Vec<String>,
    pub keywords: Vec<String>,
    pub internaldate: i64,
    pub size: u64,
    pub sha256: String,
}

impl Message {
    fn describe(&self) -> String {
        format!(
            "UID {} (size {}, date {}, sha256 {})",
            self.uid,
            self.size,
            self.internaldate,
            &self.sha256[..12]
        )
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

impl State {
    fn from_json(v: &Value) -> State {
        let folders = v["folders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let messages = f["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| Message {
                        uid: m["uid"].as_u64().unwrap(),
                        flags: strings(&m["flags"]),
                        keywords: strings(&m["keywords"]),
                        internaldate: m["internaldate"].as_i64().unwrap(),
                        size: m["size"].as_u64().unwrap(),
                        sha256: m["sha256"].as_str().unwrap().to_string(),
                    })
                    .collect();
                (
                    f["name"].as_str().unwrap().to_string(),
                    Folder {
                        special_use: strings(&f["special_use"]),
                        uidvalidity: f["uidvalidity"].as_u64().unwrap(),
                        uidnext: f["uidnext"].as_u64().unwrap(),
                        messages,
                        error: f["error"].as_str().map(str::to_string),
                    },
                )
            })
            .collect();
        State {
            account: v["account"].as_str().unwrap().to_string(),
            folders,
            subscriptions: strings(&v["subscriptions"]).into_iter().collect(),
            errors: strings(&v["errors"]),
        }
    }

    /// One line for the test's log: what the judge recorded.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} folders, {} messages ({} with $Forwarded), subscriptions {:?}",
            self.account,
            self.folders.len(),
            self.messages(),
            self.with_keyword("$Forwarded"),
            self.subscriptions
        )
    }

    /// Whether the server refused something while recording.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty() || self.folders.values().any(|f| f.error.is_some())
    }

    pub fn messages(&self) -> usize {
        self.folders.values().map(|f| f.messages.len()).sum()
    }

    /// Messages that have `keyword`.
    pub fn with_keyword(&self, keyword: &str) -> usize {
        self.folders
            .values()
            .flat_map(|f| &f.messages)
            .filter(|m| m.keywords.iter().any(|k| k == keyword))
            .count()
    }
}

/// What must survive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fidelity {
    /// Everything, UIDVALIDITY, UIDNEXT and UIDs included.
    Exact,
    /// Everything but UIDVALIDITY, UIDNEXT and UIDs; the UID order of each folder must
    /// be the original's (what clients show as the order of arrival).
    SameOrder,
    /// Everything but UIDVALIDITY, UIDNEXT, UIDs and their order.
    AnyOrder,
}

const MAX_LINES_PER_KIND: usize = 4;

/// Differences of `after` from `before` (empty: identical at this fidelity), one line
/// each, naming account, folder, message and field with both values. Many alike are
/// summarized.
pub fn compare(before: &State, after: &State, fidelity: Fidelity) -> Vec<String> {
    let acc = &before.account;
    let mut out = Vec::new();
    for e in &after.errors {
        out.push(format!("{acc}: the server refused: {e}"));
    }
    let refused: Vec<_> = after
        .folders
        .iter()
        .filter_map(|(name, f)| f.error.as_ref().map(|e| (name, e)))
        .collect();
    if let Some((name, e)) = refused.first() {
        out.push(format!(
            "{acc}: the server cannot open {} of {} folders, e.g. {name:?}: {e}",
            refused.len(),
            after.folders.len()
        ));
    }
    let missing: Vec<_> = before
        .subscriptions
        .difference(&after.subscriptions)
        .collect();
    let extra: Vec<_> = after
        .subscriptions
        .difference(&before.subscriptions)
        .collect();
    if after.errors.is_empty() && (!missing.is_empty() || !extra.is_empty()) {
        out.push(format!(
            "{acc}: subscriptions differ: lost {missing:?}, added {extra:?}"
        ));
    }
    for name in before.folders.keys() {
        if !after.folders.contains_key(name) {
            let n = before.folders[name].messages.len();
            out.push(format!("{acc}: folder {name:?} ({n} messages) missing"));
        }
    }
    for name in after.folders.keys() {
        if !before.folders.contains_key(name) {
            out.push(format!("{acc}: folder {name:?} was not there before"));
        }
    }
    for (name, b) in &before.folders {
        let Some(a) = after.folders.get(name).filter(|a| a.error.is_none()) else {
            continue;
        };
        let at = format!("{acc}/{name}");
        if b.special_use != a.special_use {
            out.push(format!(
                "{at}: special use before {:?}, after {:?}",
                b.special_use, a.special_use
            ));
        }
        if fidelity == Fidelity::Exact {
            for (what, x, y) in [
                ("UIDVALIDITY", b.uidvalidity, a.uidvalidity),
                ("UIDNEXT", b.uidnext, a.uidnext),
            ] {
                if x != y {
                    out.push(format!("{at}: {what} before {x}, after {y}"));
                }
            }
        }
        out.extend(compare_messages(&at, &b.messages, &a.messages, fidelity));
    }
    out
}

fn compare_messages(at: &str, b: &[Message], a: &[Message], fidelity: Fidelity) -> Vec<String> {
    // (before, after) pairs: by UID when exact, else by content.
    let mut pairs = Vec::new();
    let mut lost = Vec::new();
    let mut used = vec![false; a.len()];
    for m in b {
        let hit = match fidelity {
            Fidelity::Exact => a.iter().position(|x| x.uid == m.uid),
            _ => a
                .iter()
                .enumerate()
                .position(|(i, x)| {
                    !used[i] && x.sha256 == m.sha256 && x.internaldate == m.internaldate
                })
                .or_else(|| {
                    a.iter()
                        .enumerate()
                        .position(|(i, x)| !used[i] && x.sha256 == m.sha256)
                }),
        };
        match hit {
            Some(i) => {
                used[i] = true;
                pairs.push((m, &a[i]));
            }
            None => lost.push(m),
        }
    }
    // Lines grouped by kind, so that one cause on 40 messages is one line and a count.
    let mut kinds: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in &lost {
        kinds
            .entry("message missing after restore".into())
            .or_default()
            .push(m.describe());
    }
    for (i, m) in a.iter().enumerate() {
        if !used[i] {
            kinds
                .entry("message not there before".into())
                .or_default()
                .push(m.describe());
        }
    }
    for (x, y) in &pairs {
        let id = if x.uid == y.uid {
            format!("UID {}", x.uid)
        } else {
            format!("UID {} (now {})", x.uid, y.uid)
        };
        if x.flags != y.flags {
            kinds
                .entry("flags differ".into())
                .or_default()
                .push(format!("{id}: before {:?}, after {:?}", x.flags, y.flags));
        }
        if x.keywords != y.keywords {
            let gone: Vec<_> = x
                .keywords
                .iter()
                .filter(|k| !y.keywords.contains(k))
                .collect();
            let new: Vec<_> = y
                .keywords
                .iter()
                .filter(|k| !x.keywords.contains(k))
                .collect();
            kinds
                .entry(format!("keywords lost {gone:?}, added {new:?}"))
                .or_default()
                .push(format!(
                    "{id}: before {:?}, after {:?}",
                    x.keywords, y.keywords
                ));
        }
        if x.internaldate != y.internaldate {
            kinds
                .entry("INTERNALDATE differs".into())
                .or_default()
                .push(format!(
                    "{id}: before {}, after {}",
                    x.internaldate, y.internaldate
                ));
        }
        if x.size != y.size || x.sha256 != y.sha256 {
            kinds
                .entry("content differs".into())
                .or_default()
                .push(format!(
                    "{id}: before size {} sha256 {}, after size {} sha256 {}",
                    x.size, x.sha256, y.size, y.sha256
                ));
        }
    }
    let mut out = Vec::new();
    for (kind, items) in kinds {
        let mut line = format!("{at}: {kind} on {} message(s): ", items.len());
        line.push_str(&items[..items.len().min(MAX_LINES_PER_KIND)].join("; "));
        if items.len() > MAX_LINES_PER_KIND {
            let _ = write!(line, "; and {} more", items.len() - MAX_LINES_PER_KIND);
        }
        out.push(line);
    }
    if fidelity == Fidelity::SameOrder {
        if let Some(line) = order_difference(at, &pairs) {
            out.push(line);
        }
    }
    out
}

/// When the new UIDs of the matched messages are not in the original UID order: how many
/// are out of place and the first one.
pub fn order_difference(at: &str, pairs: &[(&Message, &Message)]) -> Option<String> {
    let mut sorted: Vec<_> = pairs.to_vec();
    sorted.sort_by_key(|(x, _)| x.uid);
    let mut first = None;
    let mut out_of_place = 0;
    for w in sorted.windows(2) {
        if w[1].1.uid < w[0].1.uid {
            out_of_place += 1;
            first.get_or_insert((w[0], w[1]));
        }
    }
    let ((p, pn), (q, qn)) = first?;
    Some(format!(
        "{at}: UID order differs from the original on {out_of_place} of {} messages: original UID {} \
         (sha256 {}) came before original UID {} (sha256 {}), but they now have UIDs {} and {}; \
         original order (old UIDs by new UID): {:?}",
        sorted.len(),
        p.uid,
        &p.sha256[..12],
        q.uid,
        &q.sha256[..12],
        pn.uid,
        qn.uid,
        {
            let mut by_new: Vec<_> = sorted.iter().map(|(x, y)| (y.uid, x.uid)).collect();
            by_new.sort();
            by_new.into_iter().map(|(_, old)| old).take(40).collect::<Vec<_>>()
        }
    ))
}

/// The UID-order difference of two states, for reporting where order is not asserted.
pub fn order_differences(before: &State, after: &State) -> Vec<String> {
    let mut out = Vec::new();
    for (name, b) in &before.folders {
        if let Some(a) = after.folders.get(name) {
            let lines = compare_messages(
                &format!("{}/{name}", before.account),
                &b.messages,
                &a.messages,
                Fidelity::SameOrder,
            );
            out.extend(lines.into_iter().filter(|l| l.contains("UID order")));
        }
    }
    out
}

/// Kind, owner, group and permission bits of every file and directory below `root`,
/// by path relative to it, without what Dovecot rebuilds by itself (its index and cache
/// files, locks) and without `tmp/` contents.
pub fn tree_meta(root: &Path) -> BTreeMap<String, (char, u32, u32, u32)> {
    let mut out = BTreeMap::new();
    walk_meta(root, root, &mut out);
    out
}

fn walk_meta(root: &Path, dir: &Path, out: &mut BTreeMap<String, (char, u32, u32, u32)>) {
    for e in fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("dovecot.index")
            || name.starts_with("dovecot.list.index")
            || name.starts_with("dovecot.mailbox.log")
            || name.ends_with(".lock")
            || name == "maildirsize"
        {
            continue;
        }
        let p = e.path();
        let md = fs::symlink_metadata(&p).unwrap();
        let kind = if md.is_dir() {
            'd'
        } else if md.file_type().is_symlink() {
            'l'
        } else {
            'f'
        };
        let rel = p.strip_prefix(root).unwrap().display().to_string();
        out.insert(rel, (kind, md.uid(), md.gid(), md.mode() & 0o7777));
        if md.is_dir() && name != "tmp" {
            walk_meta(root, &p, out);
        }
    }
}

/// Differences of owners and modes: paths missing or added, and each change of
/// (owner, group, mode) as one line with a count and examples.
pub fn compare_meta(
    before: &BTreeMap<String, (char, u32, u32, u32)>,
    after: &BTreeMap<String, (char, u32, u32, u32)>,
) -> Vec<String> {
    let show = |m: &(char, u32, u32, u32)| {
        format!(
            "{} {}:{} {:04o}",
            if m.0 == 'd' { "dir" } else { "file" },
            id_name("/etc/passwd", m.1),
            id_name("/etc/group", m.2),
            m.3
        )
    };
    let mut kinds: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for (p, m) in before {
        match after.get(p) {
            None => kinds
                .entry("missing after restore".into())
                .or_default()
                .push(p),
            Some(n) if n != m => kinds
                .entry(format!("before {}, after {}", show(m), show(n)))
                .or_default()
                .push(p),
            Some(_) => {}
        }
    }
    for p in after.keys() {
        if !before.contains_key(p) {
            kinds.entry("not there before".into()).or_default().push(p);
        }
    }
    kinds
        .into_iter()
        .map(|(k, paths)| {
            let n = paths.len();
            let shown: Vec<_> = paths.into_iter().take(MAX_LINES_PER_KIND).collect();
            format!("owner/mode: {k}: {n} path(s), e.g. {shown:?}")
        })
        .collect()
}

/// The name of uid/gid `id` in `file` (/etc/passwd, /etc/group), else the number.
fn id_name(file: &str, id: u32) -> String {
    fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.get(2)?.parse::<u32>().ok()? == id).then(|| f[0].to_string())
        })
        .unwrap_or_else(|| id.to_string())
}

/// Fails the test with every line of `diffs` (grouped under `what`) if there are any.
pub fn assert_none(what: &str, diffs: &[String]) {
    if !diffs.is_empty() {
        panic!(
            "{what}: {} difference(s):\n  {}",
            diffs.len(),
            diffs.join("\n  ")
        );
    }
}

/// Message files below `root` in `new/` directories.
pub fn in_new(root: &Path) -> usize {
    tree_meta(root)
        .keys()
        .filter(|p| p.rsplit('/').nth(1) == Some("new"))
        .count()
}

/// The comparison itself: identical states pass at every fidelity; a lost keyword, a
/// changed date, a missing message, a lost subscription and a new UID order are each
/// named, and UIDs count only where asked.
#[test]
fn judge_compare_names_each_difference() {
    let msg = |uid, sha: &str, date| Message {
        uid,
        flags: vec!["\\Seen".into()],
        keywords: vec!["$Forwarded".into()],
        internaldate: date,
        size: 10,
        sha256: format!("{sha:0<64}"),
    };
    let folder = |messages| Folder {
        special_use: vec![],
        uidvalidity: 7,
        uidnext: 4,
        messages,
        error: None,
    };
    let before = State {
        account: "a@example.org".into(),
        folders: [(
            "INBOX".to_string(),
            folder(vec![msg(1, "a", 1), msg(2, "b", 2), msg(3, "c", 3)]),
        )]
        .into(),
        subscriptions: ["INBOX".to_string(), "Gone".to_string()].into(),
        errors: vec![],
    };
    for f in [Fidelity::Exact, Fidelity::SameOrder, Fidelity::AnyOrder] {
        assert!(compare(&before, &before, f).is_empty());
    }
    // New UIDs in another order: only Exact and SameOrder see it.
    let mut reordered = before.clone();
    let inbox = reordered.folders.get_mut("INBOX").unwrap();
    inbox.messages = vec![msg(1, "b", 2), msg(2, "a", 1), msg(3, "c", 3)];
    assert!(compare(&before, &reordered, Fidelity::AnyOrder).is_empty());
    let d = compare(&before, &reordered, Fidelity::SameOrder);
    assert!(d.len() == 1 && d[0].contains("UID order differs"), "{d:?}");
    assert!(!compare(&before, &reordered, Fidelity::Exact).is_empty());
    // Lost keyword, changed date, missing message, lost subscription.
    let mut damaged = before.clone();
    let inbox = damaged.folders.get_mut("INBOX").unwrap();
    inbox.messages[0].keywords.clear();
    inbox.messages[1].internaldate = 99;
    inbox.messages.pop();
    damaged.subscriptions.remove("Gone");
    let d = compare(&before, &damaged, Fidelity::AnyOrder).join("\n");
    for want in [
        "keywords lost [\"$Forwarded\"]",
        "INTERNALDATE differs on 1 message(s): UID 2: before 2, after 99",
        "message missing after restore on 1 message(s): UID 3",
        "subscriptions differ: lost [\"Gone\"]",
    ] {
        assert!(d.contains(want), "{want} in\n{d}");
    }
}
