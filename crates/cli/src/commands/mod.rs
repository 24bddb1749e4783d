//! One module per command.

pub mod backup;
pub mod check;
pub mod demo;
pub mod forget;
pub mod generate;
pub mod imap;
pub mod index;
pub mod init;
pub mod ls;
pub mod migrate;
pub mod prune;
pub mod repair;
pub mod restore;
pub mod run;
pub mod search;
pub mod serve;
pub mod show;
pub mod snapshots;
pub mod stats;
pub mod tag;
pub mod undelete;
pub mod unlock;

use anyhow::{bail, Result};
use std::path::PathBuf;

/// Where a backup source, a restore `--target` or `--repo` points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A directory: a plain path, `maildir:PATH` or `local:PATH`.
    Dir(PathBuf),
    /// An IMAP server, `imap://...` or `imaps://...`, as given.
    Imap(String),
    /// mbox files: `mbox:PATH` (a spool directory, one file, or a folder tree).
    Mbox(PathBuf),
    /// `.eml` files in a folder tree: `eml:PATH`.
    Eml(PathBuf),
    /// Files and directory trees backed up as files: `file:PATH` (a backup source).
    Files(PathBuf),
    /// A plain directory tree a `file:` snapshot is restored into: `dir:PATH`.
    Plain(PathBuf),
    /// An S3-compatible object store, `s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]`, as given.
    S3(String),
}

/// What a location names, and so which schemes it takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Mail: a backup source or a restore target.
    Mail,
    /// A repository.
    Repository,
}

impl Role {
    fn schemes(self) -> &'static str {
        match self {
            Role::Mail => "maildir:, mbox:, eml:, file:, dir:, imap://, imaps://",
            Role::Repository => "local:, s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]",
        }
    }
}

/// Parses a location. A prefix `word:` before any `/` is a scheme (`maildir:`, `imap://`,
/// `local:`); a scheme the role does not know is an error that lists those it knows, so
/// that `mbx:/srv/x` or a typo never becomes a directory `mbox:` in the current one.
/// Anything else is a path; a directory whose name has a `:` before any `/` is written
/// `./a:b`.
pub fn location(s: &str, what: &str, role: Role) -> Result<Location> {
    let Some((scheme, rest)) = scheme(s) else {
        return Ok(Location::Dir(PathBuf::from(s)));
    };
    let path = |rest: &str| {
        if rest.is_empty() {
            bail!("{what} {s:?}: no path after `{scheme}:`");
        }
        Ok(PathBuf::from(rest))
    };
    let dir = |rest: &str| path(rest).map(Location::Dir);
    match (role, scheme.to_ascii_lowercase().as_str()) {
        (Role::Mail, "maildir") => dir(rest),
        (Role::Mail, "mbox") => path(rest).map(Location::Mbox),
        (Role::Mail, "eml") => path(rest).map(Location::Eml),
        (Role::Mail, "file") => path(rest).map(Location::Files),
        (Role::Mail, "dir") => path(rest).map(Location::Plain),
        (Role::Repository, "local") => dir(rest),
        (Role::Repository, "s3") => {
            mailvault_core::store::parse_s3_url(s)?;
            Ok(Location::S3(s.into()))
        }
        (Role::Mail, "imap" | "imaps") if rest.starts_with("//") => Ok(Location::Imap(s.into())),
        (Role::Mail, "imap" | "imaps") => {
            bail!("{what} {s:?}: an IMAP server is written {scheme}://host[:port]")
        }
        _ => bail!(
            "{what} {s:?}: unknown scheme `{scheme}:` (known: {}); a path whose first \
             component has a `:` is written ./{s}",
            role.schemes()
        ),
    }
}

/// The scheme of a location and what follows its `:`, if it starts with one: a letter,
/// then letters, digits, `+`, `-` or `.` (RFC 3986), then `:`, so before any `/`.
fn scheme(s: &str) -> Option<(&str, &str)> {
    let (word, rest) = s.split_once(':')?;
    let mut chars = word.chars();
    let first = chars.next()?;
    let ok = first.is_ascii_alphabetic()
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    ok.then_some((word, rest))
}

/// Parses `maildir:/path` (or a bare path) into the Maildir path.
pub fn maildir_location(s: &str, what: &str) -> Result<PathBuf> {
    match location(s, what, Role::Mail)? {
        Location::Dir(p) => Ok(p),
        Location::Imap(_) => bail!("{what} {s:?}: an IMAP server, where a directory is needed"),
        Location::Mbox(_) | Location::Eml(_) => {
            bail!("{what} {s:?}: mbox or EML files, where a Maildir is needed")
        }
        Location::Files(_) | Location::Plain(_) => {
            bail!("{what} {s:?}: plain files, where a Maildir is needed")
        }
        Location::S3(_) => bail!("{what} {s:?}: an object store, where a directory is needed"),
    }
}

#[cfg(test)]
mod tests {
    use super::{location, Location, Role};
    use std::path::PathBuf;

    fn dir(p: &str) -> Option<Location> {
        Some(Location::Dir(PathBuf::from(p)))
    }

    #[test]
    fn locations() {
        let mail = |s: &str| location(s, "target", Role::Mail).ok();
        let repo = |s: &str| location(s, "repository", Role::Repository).ok();
        assert_eq!(mail("maildir:/srv/x"), dir("/srv/x"));
        assert_eq!(mail("MAILDIR:rel"), dir("rel"));
        assert_eq!(mail("/srv/x"), dir("/srv/x"));
        assert_eq!(mail("rel/dir"), dir("rel/dir"));
        assert_eq!(mail("./a:b"), dir("./a:b"));
        assert_eq!(mail("/srv/a:b"), dir("/srv/a:b"));
        assert_eq!(mail("my dir: x"), dir("my dir: x"));
        assert_eq!(
            mail("imaps://mail:993"),
            Some(Location::Imap("imaps://mail:993".into()))
        );
        assert_eq!(
            mail("mbox:/var/mail"),
            Some(Location::Mbox("/var/mail".into()))
        );
        assert_eq!(mail("EML:out"), Some(Location::Eml("out".into())));
        for bad in [
            "mbx:/srv/x",
            "maildr:/srv/x",
            "a:b",
            "local:/r",
            "imap:/x",
            "maildir:",
        ] {
            assert_eq!(mail(bad), None, "{bad}");
        }
        assert_eq!(repo("local:/r"), dir("/r"));
        assert_eq!(repo("/r"), dir("/r"));
        assert_eq!(repo("./s3:x"), dir("./s3:x"));
        assert_eq!(
            repo("s3:http://127.0.0.1:9000/bucket/pfx"),
            Some(Location::S3("s3:http://127.0.0.1:9000/bucket/pfx".into()))
        );
        for bad in [
            "s3:bucket/x",
            "s3:http://h",
            "maildir:/r",
            "imap://host",
            "sftp://h/r",
        ] {
            assert_eq!(repo(bad), None, "{bad}");
        }
        let e = location("mbx:/srv/x", "target", Role::Mail).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("mbx:")
                && e.contains("maildir:, mbox:, eml:, file:, dir:, imap://, imaps://"),
            "{e}"
        );
    }
}
