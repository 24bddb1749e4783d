//! What the CLI tests share: the `mailvault` binary run in a directory of its own, with its
//! own repository (`repo`, or a bucket on the test MinIO: [`Env::s3`]), password file
//! (`pass`), cache, state directory and working directory; and comparing restored trees.
#![allow(dead_code, clippy::unwrap_used)]

pub mod relay;
pub mod serve;

use mailvault_core::testing::minio::Minio;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary directory holding the repository, its password and whatever a test puts
/// there, and the way to run `mailvault` on it.
pub struct Env {
    pub dir: tempfile::TempDir,
    /// The repository when it is not the directory `repo` (an `s3:` location).
    pub location: Option<String>,
    /// Variables set (or, for `None`, removed) in every run: the S3 credentials.
    pub vars: Vec<(&'static str, Option<String>)>,
}

impl Env {
    pub fn new() -> Env {
        let e = Env {
            dir: tempfile::tempdir().unwrap(),
            location: None,
            vars: Vec::new(),
        };
        fs::write(e.path("pass"), "s3cret\n").unwrap();
        // As an admin keeps it: mailvault warns about a password file others can read.
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(e.path("pass"), fs::Permissions::from_mode(0o600)).unwrap();
        e
    }
    /// A repository in a fresh bucket of the test MinIO (one per test process, started on
    /// first use), reached with its credentials. `hint` (the test's name) is part of the
    /// bucket's name. The bucket is created by `mailvault init`.
    pub fn s3(hint: &str) -> Env {
        let m = Minio::shared();
        let mut e = Env::new();
        e.location = Some(m.url(&m.bucket(hint), ""));
        e.vars = m.env();
        e
    }
    /// The repository location given to `mailvault`.
    pub fn location(&self) -> OsString {
        match &self.location {
            Some(l) => l.into(),
            None => self.repo().into(),
        }
    }
    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    pub fn repo(&self) -> PathBuf {
        self.path("repo")
    }
    /// This test's state directory (MAILVAULT_STATE_DIR): the snapshot records, so that
    /// tests never share the host's.
    pub fn state_dir(&self) -> PathBuf {
        self.path("state")
    }
    /// `mailvault ARGS` on this repository, with the environment cleared of what would
    /// change its behaviour, run in this directory.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_mailvault"));
        c.env("MAILVAULT_REPOSITORY", self.location())
            .env("MAILVAULT_PASSWORD_FILE", self.path("pass"))
            .env("XDG_CACHE_HOME", self.path("cache"))
            .env("MAILVAULT_STATE_DIR", self.state_dir())
            .env_remove("MAILVAULT_PASSWORD")
            .env_remove("MAILVAULT_LOG")
            .current_dir(self.dir.path())
            .args(args);
        for (k, v) in &self.vars {
            match v {
                Some(v) => c.env(k, v),
                None => c.env_remove(k),
            };
        }
        c
    }
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }
    /// Runs `mailvault ARGS`; its exit code, stdout and stderr.
    pub fn run_text(&self, args: &[&str]) -> (Option<i32>, String, String) {
        let o = self.run(args);
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
    /// Runs and expects exit code `code`; returns the output.
    #[track_caller]
    pub fn expect_output(&self, code: i32, args: &[&str]) -> Output {
        let o = self.run(args);
        assert_eq!(
            o.status.code(),
            Some(code),
            "mailvault {args:?}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        o
    }
    /// Runs and expects exit code `code`; returns stdout followed by stderr.
    #[track_caller]
    pub fn expect(&self, code: i32, args: &[&str]) -> String {
        let o = self.expect_output(code, args);
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr)
    }
    /// Stdout of a run that must succeed.
    #[track_caller]
    pub fn ok(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.expect_output(0, args).stdout).into_owned()
    }
    /// The `--json` report of a run that must exit with `code`.
    #[track_caller]
    pub fn json(&self, code: i32, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        serde_json::from_slice(&self.expect_output(code, &a).stdout).unwrap()
    }
    /// Whether `mailvault SUBCOMMAND --help` lists `flag`.
    pub fn has_flag(&self, subcommand: &str, flag: &str) -> bool {
        let (_, out, _) = self.run_text(&[subcommand, "--help"]);
        out.contains(flag)
    }
}

/// `cp -a from to`, replacing `to` if it is there.
/// Waits until what the test just wrote is older than the margin by which a backup proves
/// a directory or a file unchanged (docs/format.md, *Folders taken unchanged*: 1 s, 3 s
/// for whole-second timestamps), as a store at rest is when a nightly backup comes: else
/// the next backup lists or reads again what was written in the second before the last
/// one started (correctly: a change in the same clock tick may not show).
pub fn at_rest() {
    let coarse = mailvault_core::source::unchanged::COARSE_MARGIN_SECS as u64;
    std::thread::sleep(std::time::Duration::from_millis(coarse * 1000 + 100));
}

/// The size in MiB the environment variable `var` asks a test for, else `default`.
pub fn env_mib(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn copy_tree(from: &Path, to: &Path) {
    let _ = fs::remove_dir_all(to);
    let st = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Relative path -> (bytes, mtime) of every file below `root` except tmp/.
pub fn files(root: &Path) -> std::collections::BTreeMap<String, (Vec<u8>, i64)> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                if p.file_name().unwrap() != "tmp" {
                    stack.push(p);
                }
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
                out.insert(
                    rel,
                    (fs::read(&p).unwrap(), fs::metadata(&p).unwrap().mtime()),
                );
            }
        }
    }
    out
}

/// Compares two trees from [`files`], naming what differs instead of dumping bytes.
#[track_caller]
pub fn assert_same_files(got: &Path, want: &Path) {
    let (g, w) = (files(got), files(want));
    let mut diffs = Vec::new();
    for (k, (bytes, mtime)) in &w {
        match g.get(k) {
            None => diffs.push(format!("missing {k}")),
            Some((b, m)) if b != bytes => diffs.push(format!(
                "{k}: bytes differ ({} vs {})",
                b.len(),
                bytes.len()
            )),
            Some((_, m)) if m != mtime => diffs.push(format!("{k}: mtime {m} vs {mtime}")),
            Some(_) => {}
        }
    }
    diffs.extend(
        g.keys()
            .filter(|k| !w.contains_key(*k))
            .map(|k| format!("extra {k}")),
    );
    assert!(
        diffs.is_empty(),
        "{} vs {}:\n{}",
        got.display(),
        want.display(),
        diffs.join("\n")
    );
}

/// (account Maildir, folder dir) -> sorted message contents (LF).
pub fn contents(root: &Path) -> BTreeMap<(String, String), Vec<Vec<u8>>> {
    let mut out = BTreeMap::new();
    for d in fs::read_dir(root).unwrap() {
        for u in fs::read_dir(d.unwrap().path()).unwrap() {
            let md = u.unwrap().path().join("Maildir");
            if !md.is_dir() {
                continue;
            }
            let acc = md.strip_prefix(root).unwrap().display().to_string();
            let mut dirs = vec![(String::new(), md.clone())];
            for f in fs::read_dir(&md).unwrap() {
                let f = f.unwrap();
                let n = f.file_name().to_string_lossy().into_owned();
                if n.starts_with('.') && f.path().is_dir() {
                    dirs.push((n, f.path()));
                }
            }
            for (name, dir) in dirs {
                let mut msgs = Vec::new();
                for sub in ["cur", "new"] {
                    if let Ok(rd) = fs::read_dir(dir.join(sub)) {
                        for m in rd {
                            let data = fs::read(m.unwrap().path()).unwrap();
                            msgs.push(mailvault_imap::from_crlf(&data).into_owned());
                        }
                    }
                }
                msgs.sort();
                if !msgs.is_empty() {
                    out.insert((acc.clone(), name), msgs);
                }
            }
        }
    }
    out
}

/// Writes message `data` as `cur/NAME` of folder `dir` (`""` INBOX, `.Archive`) of
/// `account` (`user@domain`) in the store at `root` (`<domain>/<user>/Maildir`).
pub fn maildir_message(root: &Path, account: &str, dir: &str, name: &str, data: &[u8]) {
    let (user, domain) = account.split_once('@').unwrap();
    let maildir = root.join(domain).join(user).join("Maildir");
    write_msg(&maildir.join(dir), "cur", name, data);
}

/// Runs `python3` with `args` (an independent reader: `mailbox`, `zipfile`, `imaplib`),
/// which must succeed (its standard error shown when it does not); its standard output.
pub fn python<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Vec<u8> {
    let out = std::process::Command::new("python3")
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python3 failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Writes message file `name` into `sub` (`cur`, `new`) of the Maildir folder directory
/// `folder` (made with its `cur`, `new` and `tmp`); its path.
pub fn write_msg(folder: &Path, sub: &str, name: &str, data: &[u8]) -> PathBuf {
    for s in ["cur", "new", "tmp"] {
        fs::create_dir_all(folder.join(s)).unwrap();
    }
    let p = folder.join(sub).join(name);
    fs::write(&p, data).unwrap();
    p
}

/// [`write_msg`] into folder `folder` (`""`: INBOX) of `maildir`, with mtime `mtime`.
pub fn put_msg(maildir: &Path, folder: &str, sub: &str, name: &str, body: &[u8], mtime: i64) {
    let p = write_msg(&maildir.join(folder), sub, name, body);
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(mtime as u64);
    let f = fs::File::options().write(true).open(&p).unwrap();
    f.set_modified(t).unwrap();
}

/// Directories and files anywhere under `root` whose names start with `prefix`.
pub fn named(root: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_name().to_string_lossy().starts_with(prefix) {
                out.push(e.path());
            }
            if e.path().is_dir() {
                dirs.push(e.path());
            }
        }
    }
    out
}

/// The `tiny` corpus preset with `seed` and `messages` messages, written to `root`.
pub fn tiny_corpus(root: &Path, seed: u64, messages: usize) {
    let spec = mailvault_corpus::CorpusSpec {
        seed,
        messages,
        ..mailvault_corpus::CorpusSpec::preset("tiny").unwrap()
    };
    mailvault_corpus::generate(&spec, root).unwrap();
}

/// `maildir:PATH`, the location `mailvault` is given for a Maildir store.
pub fn maildir_at(p: &Path) -> String {
    format!("maildir:{}", p.display())
}

/// The test's bucket with the root user's rights, straight (no `mailvault`): to look at
/// objects, or damage them, behind its back.
pub fn bucket_root(e: &Env) -> mailvault_core::store::S3Store {
    let (_, bucket, prefix) =
        mailvault_core::store::parse_s3_url(e.location.as_ref().unwrap()).unwrap();
    Minio::shared().store(&bucket, &prefix).unwrap()
}
