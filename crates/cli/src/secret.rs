//! Secrets on the command line's side: password files (read once, warned about when others
//! can read them, the same way for every flag, variable and profile that names one), and
//! the redaction every error and log line goes through before it is printed, so that a
//! credential written into a URL never reaches a terminal, a journal or a metrics file.

use crate::output::{redact, safe};
use anyhow::{bail, Context, Result};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The secret in file `path` (`what` names it in messages: "password file", "IMAP
/// password file"), without its trailing line break. Warns, once per file and run, when
/// others than its owner may read it.
pub fn read_file(what: &str, path: &Path) -> Result<Vec<u8>> {
    warn_if_readable_by_others(what, path);
    let mut p =
        std::fs::read(path).with_context(|| format!("reading {what} {}", path.display()))?;
    while p.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
        p.pop();
    }
    if p.is_empty() {
        bail!("{what} {} is empty", path.display());
    }
    Ok(p)
}

/// A warning (the run goes on: the file is what the admin chose) when a secret file, or a
/// directory of them, can be read by others than its owner; once per path and run.
pub fn warn_if_readable_by_others(what: &str, path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    static WARNED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);
    let Ok(m) = std::fs::metadata(path) else {
        return;
    };
    let mode = m.permissions().mode();
    if mode & 0o077 == 0 {
        return;
    }
    let mut warned = WARNED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !warned
        .get_or_insert_with(HashSet::new)
        .insert(path.to_path_buf())
    {
        return;
    }
    eprintln!(
        "warning: {what} {} can be read by others than its owner (mode {:o}): chmod {} it",
        safe(&path.display().to_string()),
        mode & 0o777,
        if m.is_dir() { "700" } else { "600" }
    );
}

/// The log writer: each event's line redacted before it reaches stderr.
pub struct RedactingStderr;

impl std::io::Write for RedactingStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(redact(&text).as_bytes())?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for RedactingStderr {
    type Writer = RedactingStderr;
    fn make_writer(&'a self) -> Self::Writer {
        RedactingStderr
    }
}
