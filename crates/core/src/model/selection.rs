//! Selecting accounts, folders and messages of a snapshot, with folders named as people
//! write them.
//!
//! A folder's stored name depends on where it was backed up from: a Maildir backup keeps
//! the Maildir++ directory's name (`Entw&APw-rfe`, `Reports &- Stats`: Dovecot writes
//! them in modified UTF-7), an IMAP backup the decoded IMAP name (`Entwürfe`). Both show
//! and match by the decoded name, [`folder_name`]; the stored form is accepted too.

use crate::error::{Error, Result};
use crate::imap::names::imap_folder_name;
use crate::mail::maildir;
use crate::repo::tree::{AccountRef, AccountTree, FolderNode, MessageEntry, RootTree};
use crate::repo::Repository;
use std::borrow::Cow;

/// The name people use for a folder: UTF-8, levels separated by `/` (`Entwürfe`,
/// `Archive/2023`). A folder of a Maildir backup (its name is its directory's) has each
/// level decoded from modified UTF-7; a level that is not valid modified UTF-7 stays as
/// it is. A folder of an IMAP backup already has its decoded name.
pub fn folder_name(node: &FolderNode) -> Cow<'_, str> {
    if node.name == maildir::folder_name(&node.dir) {
        let decoded = imap_folder_name(&node.name);
        if decoded != node.name {
            return Cow::Owned(decoded);
        }
    }
    Cow::Borrowed(&node.name)
}

/// How a `--folder` filter relates to a folder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FolderMatch {
    /// The filter names this folder.
    Itself,
    /// The filter names a folder above this one.
    Below,
    No,
}

/// How `filter` (`Entwürfe`, `Archive/2023`, or the stored form `Entw&APw-rfe`; `/` at
/// either end ignored; `INBOX` in any case) relates to `node`.
pub fn folder_matches(node: &FolderNode, filter: &str) -> FolderMatch {
    let f = filter.trim_matches('/');
    let human = folder_name(node);
    let mut best = FolderMatch::No;
    for name in [human.as_ref(), node.name.as_str()] {
        match relation(name, f) {
            FolderMatch::Itself => return FolderMatch::Itself,
            FolderMatch::Below => best = FolderMatch::Below,
            FolderMatch::No => {}
        }
    }
    best
}

fn relation(name: &str, filter: &str) -> FolderMatch {
    let (name, filter) = (inbox_upper(name), inbox_upper(filter));
    if name == filter {
        FolderMatch::Itself
    } else if name
        .strip_prefix(filter.as_ref())
        .is_some_and(|r| r.starts_with('/'))
    {
        FolderMatch::Below
    } else {
        FolderMatch::No
    }
}

/// `INBOX` as the first level in any case (IMAP's INBOX is case-insensitive) becomes `INBOX`.
fn inbox_upper(name: &str) -> Cow<'_, str> {
    let first = name.split('/').next().unwrap_or_default();
    if first != "INBOX" && first.eq_ignore_ascii_case("INBOX") {
        Cow::Owned(format!("INBOX{}", &name[first.len()..]))
    } else {
        Cow::Borrowed(name)
    }
}

/// Whether `--folder` filters select a folder: none given, or one names it or a folder
/// above it.
pub fn folder_selected(node: &FolderNode, filters: &[String]) -> bool {
    filters.is_empty()
        || filters
            .iter()
            .any(|f| folder_matches(node, f) != FolderMatch::No)
}

/// Whether `--folder` filters select a folder known only by its decoded name (a
/// subscription, which may name a folder the snapshot does not have).
pub fn folder_name_selected(name: &str, filters: &[String]) -> bool {
    filters.is_empty()
        || filters
            .iter()
            .any(|f| relation(name, f.trim_matches('/')) != FolderMatch::No)
}

/// Folder names for an error message: sorted, each once, the first 20 and how many more.
pub fn folder_list(mut names: Vec<String>) -> String {
    const SHOWN: usize = 20;
    names.sort();
    names.dedup();
    let more = names.len().saturating_sub(SHOWN);
    names.truncate(SHOWN);
    if more > 0 {
        names.push(format!("and {more} more"));
    }
    names.join(", ")
}

/// The error of a restore whose `--folder` filters match no folder of `accounts`: it
/// lists the folders they have (by the names `ls` shows, at most 20).
pub fn no_folder_matches(repo: &Repository, accounts: &[AccountRef], filters: &[String]) -> Error {
    let mut names = Vec::new();
    for a in accounts {
        match repo.read_tree::<AccountTree>(&a.tree) {
            Ok(t) => names.extend(t.folders.iter().map(|f| folder_name(f).into_owned())),
            Err(e) => return e,
        }
    }
    Error::InvalidInput(format!(
        "no folder matches {filters:?} in the selected accounts (they have: {})",
        folder_list(names)
    ))
}

/// The shortest content-id prefix taken (hex digits): shorter ones would match by chance.
pub const MIN_ID_PREFIX: usize = 12;

/// Whether `s` names content `id`: at least [`MIN_ID_PREFIX`] hex digits of its id, as
/// `search` prints it.
pub fn names_content(s: &str, id: &crate::repo::id::Id) -> bool {
    // Digit by digit against the id's bytes: called for every entry of a snapshot (`show`,
    // `restore --message`), where writing each id out in hex cost two allocations.
    let nibble = |i: usize| match i % 2 {
        0 => id.0[i / 2] >> 4,
        _ => id.0[i / 2] & 0x0f,
    };
    s.len() >= MIN_ID_PREFIX
        && s.len() <= 64
        && (s.bytes().enumerate())
            .all(|(i, c)| (c as char).to_digit(16) == Some(u32::from(nibble(i))))
}

/// Whether `--message` filters select a message: none given, or one is its Maildir key,
/// its whole file name, or its content id as `search` prints it (at least 12 hex digits of
/// it: [`names_content`]).
pub fn message_selected(e: &MessageEntry, filters: &[String]) -> bool {
    filters.is_empty()
        || filters
            .iter()
            .any(|m| m.as_bytes() == e.key || m.as_bytes() == e.name || names_content(m, &e.hash))
}

/// The accounts of a snapshot that `--account` filters select; an unknown account is an
/// error that lists the snapshot's accounts.
pub fn select_accounts(root: RootTree, filters: &[String]) -> Result<Vec<AccountRef>> {
    for f in filters {
        if !root.accounts.iter().any(|a| &a.name == f) {
            let names: Vec<&str> = root.accounts.iter().map(|a| a.name.as_str()).collect();
            return Err(Error::InvalidInput(format!(
                "the snapshot has no account {f:?} (it has: {})",
                names.join(", ")
            )));
        }
    }
    Ok(root
        .accounts
        .into_iter()
        .filter(|a| filters.is_empty() || filters.contains(&a.name))
        .collect())
}

/// Messages picked one by one (by `undelete`) rather than selected by filters: an account
/// and, per folder, the messages to restore there. Both restores take it in place of a
/// snapshot's selection ([`crate::restore::Request::Picked`]).
#[derive(Clone, Debug)]
pub struct PickedAccount {
    /// The account as a snapshot has it (its place below the target, its directories).
    pub account: AccountRef,
    pub folders: Vec<PickedFolder>,
    /// Home directories with the files picked in them (`undelete`: deleted sieve
    /// scripts), restored as a whole account's home is.
    pub home: Vec<FolderNode>,
}

/// One folder's picked messages. A folder may appear more than once (messages from
/// different snapshots or source folders): each with the node whose files give its
/// messages' keyword letters their meaning (`dovecot-keywords`).
#[derive(Clone, Debug)]
pub struct PickedFolder {
    /// Where the messages go (name, directory, owner and mode) and the folder files their
    /// flags need; its `chunks` are not read.
    pub node: FolderNode,
    pub entries: Vec<MessageEntry>,
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_content_id_is_named_by_a_prefix_of_its_hex_in_either_case() {
        let id = crate::repo::id::Id([0xab; 32]);
        let hex = id.to_hex();
        assert!(super::names_content(&hex, &id));
        assert!(super::names_content(&hex[..13], &id), "an odd length");
        assert!(super::names_content(&hex[..12].to_ascii_uppercase(), &id));
        assert!(!super::names_content(&hex[..11], &id), "too short");
        assert!(!super::names_content("abababababac", &id));
        assert!(!super::names_content("abababababaz", &id));
        assert!(!super::names_content(&format!("{hex}a"), &id), "too long");
    }

    use super::*;

    /// A folder as a Maildir backup records it.
    fn maildir_node(dir: &[u8]) -> FolderNode {
        node(&maildir::folder_name(dir), dir)
    }

    /// A folder as an IMAP backup records it.
    fn imap_node(name: &str) -> FolderNode {
        node(name, &crate::imap::names::maildir_dir(name))
    }

    fn node(name: &str, dir: &[u8]) -> FolderNode {
        FolderNode {
            mtime: None,
            scan: None,
            name: name.into(),
            dir: dir.to_vec(),
            files: Vec::new(),
            chunks: Vec::new(),
            chunk_tree: None,
            messages: 0,
            bytes: 0,
            dirs: Vec::new(),
        }
    }

    #[test]
    fn maildir_folders_have_their_decoded_names() {
        assert_eq!(
            folder_name(&maildir_node(b".Entw&APw-rfe")),
            "Entw\u{fc}rfe"
        );
        assert_eq!(
            folder_name(&maildir_node(b".Reports &- Stats")),
            "Reports & Stats"
        );
        assert_eq!(
            folder_name(&maildir_node(b".Archiv.Gesch&AOQ-ft")),
            "Archiv/Gesch\u{e4}ft"
        );
        assert_eq!(folder_name(&maildir_node(b"")), "INBOX");
        // Not modified UTF-7: as it is, level by level.
        assert_eq!(folder_name(&maildir_node(b".A&B.&AOQ-")), "A&B/\u{e4}");
        assert_eq!(folder_name(&maildir_node(b".caf\xc3\xa9")), "caf\u{e9}");
    }

    #[test]
    fn imap_folders_keep_their_names() {
        for name in [
            "Entw\u{fc}rfe",
            "Tom &- Jerry",
            "A&B",
            "v1.2",
            "Sent",
            "a/b",
        ] {
            assert_eq!(folder_name(&imap_node(name)), name);
        }
    }

    #[test]
    fn filters_take_human_and_stored_names() {
        let f = maildir_node(b".Entw&APw-rfe");
        let sub = maildir_node(b".Entw&APw-rfe.Alt");
        let sel = |n: &FolderNode, f: &str| folder_selected(n, &[f.to_string()]);
        for filter in ["Entw\u{fc}rfe", "Entw&APw-rfe", "/Entw\u{fc}rfe/"] {
            assert_eq!(folder_matches(&f, filter), FolderMatch::Itself, "{filter}");
            assert_eq!(folder_matches(&sub, filter), FolderMatch::Below, "{filter}");
        }
        assert_eq!(
            folder_matches(&sub, "Entw\u{fc}rfe/Alt"),
            FolderMatch::Itself
        );
        assert!(!sel(&f, "Entw"));
        assert!(!sel(&maildir_node(b".Entw&APw-rfe2"), "Entw\u{fc}rfe"));
        let amp = maildir_node(b".Reports &- Stats");
        assert!(sel(&amp, "Reports & Stats") && sel(&amp, "Reports &- Stats"));
        assert!(sel(&imap_node("Reports & Stats"), "Reports & Stats"));
        assert!(sel(&maildir_node(b""), "inbox"));
        assert!(folder_selected(&f, &[]));
        assert!(!sel(&f, "x"));
    }
}
