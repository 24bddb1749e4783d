//! What the CLI tests share: the `mailvault` binary run in a directory of its own, with its
//! own repository (`repo`), password file (`pass`), cache, state directory and working
//! directory.
#![allow(dead_code, clippy::unwrap_used)]

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temporary directory holding the repository, its password and whatever a test puts
/// there, and the way to run `mailvault` on it.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        let e = Env {
            dir: tempfile::tempdir().unwrap(),
        };
        fs::write(e.path("pass"), "s3cret\n").unwrap();
        e
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
        c.env("MAILVAULT_REPOSITORY", self.repo())
            .env("MAILVAULT_PASSWORD_FILE", self.path("pass"))
            .env("XDG_CACHE_HOME", self.path("cache"))
            .env("MAILVAULT_STATE_DIR", self.state_dir())
            .env_remove("MAILVAULT_PASSWORD")
            .env_remove("MAILVAULT_LOG")
            .current_dir(self.dir.path())
            .args(args);
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
