//! Maildir++ on disk as Dovecot writes it: folder directories with `cur/ new/ tmp/` and
//! `maildirfolder`, `subscriptions`, `dovecot-keywords`, and message file names
//! `<secs>.M<usec>P<pid>.<host>,S=<size>,W=<vsize>[:2,<flags>]`.

use std::fs::{self, File, FileTimes, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};

use crate::world::{Account, World};

/// Adds the path to an I/O error, keeping its kind.
pub(crate) fn at(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

pub(crate) fn system_time(t: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(t.max(0) as u64)
}

/// The file name of a message.
pub(crate) fn file_name(key: &str, size: usize, vsize: usize, new: bool, flags: &str) -> String {
    if new {
        format!("{key},S={size},W={vsize}")
    } else {
        format!("{key},S={size},W={vsize}:2,{flags}")
    }
}

/// Splits a file name into its base (before `:2,`) and flags (`None` in `new/` style).
pub(crate) fn split_name(name: &str) -> (&str, Option<&str>) {
    match name.rfind(":2,") {
        Some(i) => (&name[..i], Some(&name[i + 3..])),
        None => (name, None),
    }
}

/// Creates a directory and its parents, `0700` as Dovecot does.
pub(crate) fn mkdir(path: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    b.mode(0o700);
    b.create(path).map_err(at(path))
}

/// Writes a new message file from its parts (fails if it exists) and sets its times.
pub(crate) fn write_message(path: &Path, parts: &[&[u8]], time: i64) -> io::Result<()> {
    let mut o = OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    o.mode(0o600);
    let mut f = o.open(path).map_err(at(path))?;
    for p in parts {
        f.write_all(p).map_err(at(path))?;
    }
    let t = system_time(time);
    f.set_times(FileTimes::new().set_accessed(t).set_modified(t))
        .map_err(at(path))
}

/// Writes a small control file (keywords, subscriptions) with the given time.
pub(crate) fn write_small(path: &Path, content: &[u8], time: i64) -> io::Result<()> {
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    o.mode(0o600);
    let mut f = o.open(path).map_err(at(path))?;
    f.write_all(content).map_err(at(path))?;
    let t = system_time(time);
    f.set_times(FileTimes::new().set_accessed(t).set_modified(t))
        .map_err(at(path))
}

/// Sets the times of a file or directory.
pub(crate) fn set_time(path: &Path, time: i64) -> io::Result<()> {
    let t = system_time(time);
    File::open(path)
        .and_then(|f| f.set_times(FileTimes::new().set_accessed(t).set_modified(t)))
        .map_err(at(path))
}

/// Dovecot's `subscriptions` file: version 2 (`V\t2\n\n`, hierarchy levels separated by
/// tabs) or the older format (one name per line, `.` separated as Maildir++ names).
pub(crate) fn subscriptions(acct: &Account) -> Vec<u8> {
    let mut out = Vec::new();
    if acct.subscriptions_v2 {
        out.extend_from_slice(b"V\t2\n\n");
    }
    for f in acct.folders.iter().filter(|f| !f.name.is_empty()) {
        let name = if acct.subscriptions_v2 {
            f.name.replace('.', "\t")
        } else {
            f.name.clone()
        };
        out.extend_from_slice(name.as_bytes());
        out.push(b'\n');
    }
    out
}

/// `dovecot-keywords`: `<index> <name>` per line; index 0 is flag letter `a`.
pub(crate) fn keywords_file(names: &[&str]) -> Vec<u8> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| format!("{i} {n}\n"))
        .collect::<String>()
        .into_bytes()
}

/// The directories of the store, parents first.
pub(crate) fn store_dirs(root: &Path, w: &World) -> Vec<PathBuf> {
    let mut dirs = vec![root.to_path_buf()];
    let mut seen = std::collections::HashSet::new();
    for acct in &w.accounts {
        let mut p = root.to_path_buf();
        for c in acct.maildir.components() {
            p.push(c);
            if seen.insert(p.clone()) {
                dirs.push(p.clone());
            }
        }
        for f in &acct.folders {
            let fdir = root.join(&acct.maildir).join(f.dir());
            for sub in ["cur", "new", "tmp"] {
                dirs.push(fdir.join(sub));
            }
            if !f.name.is_empty() {
                dirs.push(fdir);
            }
        }
    }
    dirs
}

/// Creates every account's folders and control files.
pub(crate) fn create_layout(root: &Path, w: &World, time: i64) -> io::Result<()> {
    for acct in &w.accounts {
        let maildir = root.join(&acct.maildir);
        for f in &acct.folders {
            let dir = maildir.join(f.dir());
            for sub in ["cur", "new", "tmp"] {
                mkdir(&dir.join(sub))?;
            }
            if !f.name.is_empty() {
                write_small(&dir.join("maildirfolder"), b"", time)?;
            }
            if f.keywords && !acct.keywords.is_empty() {
                write_small(
                    &dir.join("dovecot-keywords"),
                    &keywords_file(&acct.keywords),
                    time,
                )?;
            }
        }
        write_small(&maildir.join("subscriptions"), &subscriptions(acct), time)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let n = file_name("1700000000.M1P2.mail01", 10, 12, false, "RS");
        assert_eq!(n, "1700000000.M1P2.mail01,S=10,W=12:2,RS");
        assert_eq!(
            split_name(&n),
            ("1700000000.M1P2.mail01,S=10,W=12", Some("RS"))
        );
        let n = file_name("1700000000.M1P2.mail01", 10, 12, true, "");
        assert_eq!(split_name(&n), ("1700000000.M1P2.mail01,S=10,W=12", None));
        assert_eq!(
            keywords_file(&["$Junk", "NonJunk"]),
            b"0 $Junk\n1 NonJunk\n".to_vec()
        );
    }
}
