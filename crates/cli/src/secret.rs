//! Secrets on the command line's side: password files (read once, warned about when others
//! can read them, the same way for every flag, variable and profile that names one), and
//! the redaction every error and log line goes through before it is printed, so that a
//! credential written into a URL never reaches a terminal, a journal or a metrics file.

use crate::output::safe;
use anyhow::{bail, Context, Result};
use std::borrow::Cow;
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

/// `text` with the user information of every URL in it removed
/// (`s3:https://key:secret@host/b` gives `s3:https://host/b`, `imap://u:p@h` gives
/// `imap://h`): errors and log lines quote locations, and a location may carry
/// credentials the user typed into it.
pub fn redact(text: &str) -> Cow<'_, str> {
    if !text.contains("://") || !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the first '/', '?', '#' or anything that cannot be in a URL.
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace() || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        // A user name alone (`imap://bob@example.org@mx`, an IMAP source's label) is no
        // secret and stays; `user:password@` goes whole.
        match authority.rfind('@') {
            Some(at) if authority[..at].contains(':') => out.push_str(&authority[at + 1..]),
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_information_is_removed_from_every_url() {
        assert_eq!(
            redact("repository \"s3:http://AK:SECRET@minio:9000/b\": bad; also imap://u:p@h:143 and imaps://bob@mx/"),
            "repository \"s3:http://minio:9000/b\": bad; also imap://h:143 and imaps://bob@mx/"
        );
        assert_eq!(
            redact("imap://bob@example.org@mail.example.org:993"),
            "imap://bob@example.org@mail.example.org:993"
        );
        assert_eq!(
            redact("mail a@b.org at https://x/y"),
            "mail a@b.org at https://x/y"
        );
        assert_eq!(redact("no url, a@b"), "no url, a@b");
        assert_eq!(redact("s3:https://k:s@h"), "s3:https://h");
        assert!(!safe("x s3:http://k:sec\u{1b}ret@h/b").contains("sec"));
    }
}
