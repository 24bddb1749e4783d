//! Folder names (`INBOX`, `Archive/2023`, `Entwürfe`: the engine's decoded names, `/`
//! between levels) as relative paths of mbox and EML trees, and back.
//!
//! - **mbox trees** ([`Tree::Mbox`], Thunderbird's layout): a folder is a file; its
//!   subfolders are in the directory `<name>.sbd/` beside it (`Archive/2023` is
//!   `Archive.sbd/2023`); INBOX is the file `Inbox`. Reading, directories without `.sbd`
//!   hold subfolders too (mutt's and Dovecot's trees), and [`is_index_file`] names the
//!   files that are not folders (`.msf` and the like).
//! - **EML trees** ([`Tree::Eml`]): a folder is a directory of `.eml` files
//!   (`Archive/2023/`); INBOX is `INBOX/`.
//! - **spools** (`/var/mail/<user>`): [`spool_user`] and [`spool_file`].
//!
//! A name never leaves the tree: each level is one path component, and a level that is
//! empty, starts with `.` (`.`, `..`, hidden files), or holds `%` or a control character
//! has those bytes written `%XX` (an empty level is `%`). In an mbox tree a level that
//! would look like an index file has the byte that makes it one escaped too (`not_index`),
//! and a level ending in `.sbd` has that `.` escaped (`Foo.sbd` is `Foo%2Esbd`, so it is
//! not the directory of `Foo`'s subfolders). A first level spelt like INBOX in another
//! case (`Inbox` beside `INBOX`) has its first letter escaped (`%49nbox`): reading takes
//! every unescaped spelling for INBOX. So each folder has a path of its own, and two
//! folders are never written into one. Reading undoes the escapes; bytes that are not
//! UTF-8 stay `%XX` in the folder name.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// The two folder trees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tree {
    /// Thunderbird's mbox folder tree: `Archive.sbd/2023`.
    Mbox,
    /// Directories of `.eml` files: `Archive/2023/`.
    Eml,
}

/// The relative path of `folder` in a tree.
pub fn folder_to_path(folder: &str, tree: Tree) -> PathBuf {
    let levels: Vec<&str> = folder.split('/').collect();
    let mut path = PathBuf::new();
    for (i, level) in levels.iter().enumerate() {
        let last = i + 1 == levels.len();
        let mut c = if i == 0 && levels.len() == 1 && *level == "INBOX" {
            match tree {
                Tree::Mbox => "Inbox".to_string(),
                Tree::Eml => "INBOX".to_string(),
            }
        } else if i == 0 && level.eq_ignore_ascii_case("INBOX") && *level != "INBOX" {
            // `Inbox` beside `INBOX` is a folder of its own: reading takes every
            // unescaped spelling of the first level for INBOX, so this one is escaped.
            format!("%{:02X}{}", level.as_bytes()[0], &level[1..])
        } else {
            escape(level.as_bytes())
        };
        if tree == Tree::Mbox {
            c = not_sbd(c);
            if last {
                c = not_index(c);
            }
            if !last {
                c.push_str(".sbd");
            }
        }
        path.push(c);
    }
    path
}

/// The folder at relative path `path` of a tree (the mbox file, or the EML directory);
/// `None` for a path that cannot be a folder (absolute, `..`, empty).
pub fn path_to_folder(path: &Path, tree: Tree) -> Option<String> {
    let mut levels: Vec<&[u8]> = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(s) => levels.push(s.as_bytes()),
            Component::CurDir => {}
            _ => return None,
        }
    }
    let n = levels.len();
    let mut names = Vec::with_capacity(n);
    for (i, level) in levels.into_iter().enumerate() {
        let level = match tree {
            Tree::Mbox if i + 1 < n => level.strip_suffix(b".sbd").unwrap_or(level),
            _ => level,
        };
        // Any spelling of INBOX as it stands is INBOX; an escaped one (`%49nbox`) is a
        // folder of its own.
        if i == 0 && level.eq_ignore_ascii_case(b"INBOX") {
            names.push("INBOX".to_string());
        } else {
            names.push(unescape(level));
        }
    }
    if names.is_empty() {
        return None;
    }
    Some(names.join("/"))
}

/// Whether a file of an mbox tree is not a folder: an index or state file of a mail
/// client (`*.msf`, `*.dat`, `*.html`, `*.json`, `*.sqlite`, `*.lock`, `*.tmp`, `*.bak`,
/// `*~`, Dovecot's `dovecot.*` and `dovecot-*`), or a hidden one (`.imap`,
/// `.subscriptions`...).
pub fn is_index_file(name: &[u8]) -> bool {
    name.is_empty()
        || name[0] == b'.'
        || name.starts_with(b"dovecot.")
        || name.starts_with(b"dovecot-")
        || name.ends_with(b"~")
        || has_index_suffix(name)
}

/// Whether `name` ends with a mail client's index or state file suffix (`.msf`...).
fn has_index_suffix(name: &[u8]) -> bool {
    const SUFFIXES: [&[u8]; 8] = [
        b".msf", b".dat", b".html", b".json", b".sqlite", b".lock", b".tmp", b".bak",
    ];
    SUFFIXES
        .iter()
        .any(|s| name.len() >= s.len() && name[name.len() - s.len()..].eq_ignore_ascii_case(s))
}

/// The user a spool file (`/var/mail/<user>`) belongs to; `None` for lock, index and
/// hidden files beside the spools.
pub fn spool_user(file_name: &OsStr) -> Option<String> {
    let name = file_name.as_bytes();
    if is_index_file(name) || name.ends_with(b".pop") {
        return None;
    }
    Some(unescape(name))
}

/// The spool file name of an account (`bob@example.org` is `bob`), escaped as a path
/// component.
pub fn spool_file(account: &str) -> String {
    let user = account.rsplit_once('@').map_or(account, |(u, _)| u);
    not_index(escape(user.as_bytes()))
}

/// A path component `c` (escaped) changed, if it would be taken for an index file, so that
/// it is not, whatever the name: a final `~`, the `.` of an index suffix (`.msf`) and the
/// `d` of a `dovecot.`/`dovecot-` prefix are written `%XX` (reading undoes it). A folder
/// named `dovecot` or `list.json` is a folder, never skipped.
fn not_index(mut c: String) -> String {
    if !is_index_file(c.as_bytes()) {
        return c;
    }
    if let Some(stripped) = c.strip_suffix('~') {
        c = format!("{stripped}%7E");
    } else if has_index_suffix(c.as_bytes()) {
        if let Some(dot) = c.rfind('.') {
            c.replace_range(dot..=dot, "%2E");
        }
    }
    if c.starts_with("dovecot") {
        c.replace_range(0..1, "%64");
    }
    debug_assert!(!is_index_file(c.as_bytes()), "{c}");
    c
}

/// A component `c` (escaped) of an mbox tree that ends in `.sbd` (a folder named
/// `Foo.sbd`) with that `.` written `%2E`: `Foo.sbd` is the directory of `Foo`'s
/// subfolders, so the folder `Foo.sbd` is the file `Foo%2Esbd` (and its subfolders are in
/// `Foo%2Esbd.sbd/`), one path per folder.
fn not_sbd(mut c: String) -> String {
    let n = c.len();
    if n >= 4 && c.as_bytes()[n - 4..].eq_ignore_ascii_case(b".sbd") {
        c.replace_range(n - 4..n - 3, "%2E");
    }
    c
}

/// One level as a path component (see the module's documentation).
fn escape(level: &[u8]) -> String {
    if level.is_empty() {
        return "%".into();
    }
    let mut out = String::with_capacity(level.len());
    let text = String::from_utf8_lossy(level);
    for (i, ch) in text.char_indices() {
        if ch == '%' || ch == '/' || ch.is_control() || (i == 0 && ch == '.') {
            let mut buf = [0u8; 4];
            for b in ch.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(ch);
        }
    }
    out
}

/// A path component back to a level: `%XX` decoded; bytes that are not UTF-8 written
/// `%XX`.
fn unescape(c: &[u8]) -> String {
    if c == b"%" {
        return String::new();
    }
    let mut bytes = Vec::with_capacity(c.len());
    let mut i = 0;
    while i < c.len() {
        let hex = (c[i] == b'%')
            .then(|| c.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                bytes.push(b);
                i += 3;
            }
            None => {
                bytes.push(c[i]);
                i += 1;
            }
        }
    }
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(folder: &str, mbox: &str, eml: &str) {
        assert_eq!(
            folder_to_path(folder, Tree::Mbox),
            Path::new(mbox),
            "{folder}"
        );
        assert_eq!(
            folder_to_path(folder, Tree::Eml),
            Path::new(eml),
            "{folder}"
        );
        let back = |p: &str, t| path_to_folder(Path::new(p), t);
        let want = if folder.eq_ignore_ascii_case("inbox") {
            "INBOX"
        } else {
            folder
        };
        assert_eq!(back(mbox, Tree::Mbox).as_deref(), Some(want), "{mbox}");
        assert_eq!(back(eml, Tree::Eml).as_deref(), Some(want), "{eml}");
    }

    #[test]
    fn folders_and_paths() {
        both("INBOX", "Inbox", "INBOX");
        both("INBOX/Sub", "INBOX.sbd/Sub", "INBOX/Sub");
        both("Archive", "Archive", "Archive");
        both("Archive/2023", "Archive.sbd/2023", "Archive/2023");
        both("Entwürfe/日本", "Entwürfe.sbd/日本", "Entwürfe/日本");
        both("a.sbd/b", "a%2Esbd.sbd/b", "a.sbd/b");
    }

    /// Issue 24, item 12: two folders never share a path.
    #[test]
    fn folder_paths_are_one_to_one() {
        both("Foo.sbd", "Foo%2Esbd", "Foo.sbd");
        both("Foo/Bar", "Foo.sbd/Bar", "Foo/Bar");
        both("Foo.SBD/x.sbd", "Foo%2ESBD.sbd/x%2Esbd", "Foo.SBD/x.sbd");
        for (name, mbox, eml) in [
            ("Inbox", "%49nbox", "%49nbox"),
            ("inbox/Sub", "%69nbox.sbd/Sub", "%69nbox/Sub"),
            ("INBOX/Sub", "INBOX.sbd/Sub", "INBOX/Sub"),
        ] {
            assert_eq!(folder_to_path(name, Tree::Mbox), Path::new(mbox));
            assert_eq!(folder_to_path(name, Tree::Eml), Path::new(eml));
            for (p, t) in [(mbox, Tree::Mbox), (eml, Tree::Eml)] {
                assert_eq!(path_to_folder(Path::new(p), t).as_deref(), Some(name));
            }
        }
        // Any unescaped spelling read is INBOX (a mail client's `inbox`).
        assert_eq!(
            path_to_folder(Path::new("inbox"), Tree::Mbox).as_deref(),
            Some("INBOX")
        );
        let names = [
            "INBOX",
            "Inbox",
            "inbox",
            "INBOX/a",
            "Inbox/a",
            "Foo",
            "Foo.sbd",
            "Foo/Bar",
            "Foo.sbd/Bar",
            "Foo/sbd",
            "a.b",
            "a%2Eb",
            "x.msf",
            "x%2Emsf",
            "%",
            "",
            ".x",
        ];
        for tree in [Tree::Mbox, Tree::Eml] {
            let mut seen = std::collections::HashMap::new();
            for n in names {
                let p = folder_to_path(n, tree);
                if let Some(other) = seen.insert(p.clone(), n) {
                    panic!("{other:?} and {n:?} both at {p:?}");
                }
                // A file of an mbox tree is never the directory of another's subfolders.
                if tree == Tree::Mbox {
                    let f = p.to_string_lossy().into_owned();
                    assert!(!f.ends_with(".sbd"), "{n:?} at {f}");
                }
            }
        }
    }

    #[test]
    fn names_that_would_leave_the_tree_are_escaped() {
        both("..", "%2E.", "%2E.");
        both(
            "../../etc/passwd",
            "%2E..sbd/%2E..sbd/etc.sbd/passwd",
            "%2E./%2E./etc/passwd",
        );
        both("/abs", "%.sbd/abs", "%/abs");
        both("a//b", "a.sbd/%.sbd/b", "a/%/b");
        both(".", "%2E", "%2E");
        both(".hidden", "%2Ehidden", "%2Ehidden");
        both(
            "nul\0and\nnewline",
            "nul%00and%0Anewline",
            "nul%00and%0Anewline",
        );
        both("100%", "100%25", "100%25");
        both("foo.msf", "foo%2Emsf", "foo.msf");
        // Regression: a folder named like an index file (the corpus has a mailing list
        // folder `Lists/dovecot`) was exported under that name and skipped on import.
        for name in [
            "dovecot",
            "Lists/dovecot",
            "dovecot.index",
            "dovecot-uidlist",
            "Drafts~",
            "list.json",
            "x.msf~",
        ] {
            let p = folder_to_path(name, Tree::Mbox);
            let file = p.file_name().map(|f| f.as_bytes()).unwrap_or_default();
            assert!(!is_index_file(file), "{name} -> {p:?}");
            assert_eq!(path_to_folder(&p, Tree::Mbox).as_deref(), Some(name));
        }
        for folder in ["..", "/abs", "a/../../b", ".", "x/."] {
            for tree in [Tree::Mbox, Tree::Eml] {
                let p = folder_to_path(folder, tree);
                assert!(
                    p.components().all(|c| matches!(c, Component::Normal(_))),
                    "{folder} -> {p:?}"
                );
            }
        }
        assert_eq!(path_to_folder(Path::new("../x"), Tree::Eml), None);
        assert_eq!(path_to_folder(Path::new("/x"), Tree::Eml), None);
        assert_eq!(path_to_folder(Path::new(""), Tree::Eml), None);
        // Non-UTF-8 bytes stay visible.
        let p = Path::new(OsStr::from_bytes(b"caf\xe9"));
        assert_eq!(path_to_folder(p, Tree::Eml).as_deref(), Some("caf%E9"));
        // mutt-style trees: plain directories hold subfolders.
        assert_eq!(
            path_to_folder(Path::new("Archive/2023"), Tree::Mbox).as_deref(),
            Some("Archive/2023")
        );
    }

    #[test]
    fn index_files_and_spools() {
        for skip in [
            &b"Inbox.msf"[..],
            b"msgFilterRules.dat",
            b"filterlog.html",
            b".imap",
            b"folderTree.json",
            b"global-messages-db.sqlite",
            b"bob.lock",
            b"dovecot.index.log",
            b"Drafts~",
        ] {
            assert!(is_index_file(skip), "{}", String::from_utf8_lossy(skip));
        }
        for keep in [
            &b"Inbox"[..],
            b"Archive",
            b"Sent Messages",
            b"msf",
            b"dovecot",
        ] {
            assert!(!is_index_file(keep));
        }
        assert_eq!(spool_user(OsStr::new("bob")).as_deref(), Some("bob"));
        assert_eq!(spool_user(OsStr::new("bob.lock")), None);
        assert_eq!(spool_user(OsStr::new(".bob.pop")), None);
        assert_eq!(spool_user(OsStr::new("bob.pop")), None);
        assert_eq!(spool_file("bob@example.org"), "bob");
        assert_eq!(spool_file("bob"), "bob");
        assert_eq!(spool_file("dovecot.x@example.org"), "%64ovecot.x");
        assert_eq!(spool_file("../x@example.org"), "%2E.%2Fx");
        assert_eq!(spool_file("x.lock@example.org"), "x%2Elock");
        assert_eq!(
            spool_user(OsStr::new(&spool_file("x.lock@e"))).as_deref(),
            Some("x.lock")
        );
    }
}
