//! What one logged-in account sees: its mailboxes (the folders of the latest snapshot that
//! holds the account, `Deleted` (what older snapshots held that the latest no longer
//! holds, in any folder), then `Snapshots/<YYYY-MM-DD HH:MM>/<folder>` for every snapshot
//! that holds it, below another root when the account has a folder named `Snapshots`
//! (`snapshots_root`)) and, once one is opened, its messages with their UIDs.
//!
//! A client's mailbox name is only ever looked up in this enumerated list, never turned
//! into a path: a name that is not in it (`../bob/INBOX`, another account's folder) is
//! simply not found.
//!
//! UIDs (docs/imap-view.md): when the folder's backed-up `dovecot-uidlist` gives every
//! message a UID, those UIDs and its UIDVALIDITY (so a later backup's new messages have
//! higher UIDs under the same UIDVALIDITY, as Dovecot numbered them); else, when every
//! key is an IMAP backup's, the server's UIDs and UIDVALIDITY. Otherwise they are derived
//! from the snapshots that hold the account, oldest first, up to the one viewed
//! (`imap::uids`): the first that holds the folder numbers its messages 1..N in the
//! order a restore writes them in ([`mailvault_core::restore::arrival_order`]: an IMAP
//! backup's UIDs, else internal date and Maildir key), under a UIDVALIDITY that is the
//! first four bytes (big-endian, never 0) of the BLAKE3 hash of its keys in that order;
//! each later one keeps the UIDs of the keys the one before it held and numbers the
//! others after the highest so far. Either way it is the same in every session and after
//! a restart, a snapshot's numbering never changes after later backups, and a later
//! backup's new messages get higher UIDs under the same UIDVALIDITY.

use super::uids::{uidvalidity_of, Held};
use crate::read;
use mailvault_core::model::folder_name;
use mailvault_core::repo::tree::{AccountTree, FolderNode, MessageEntry, RootTree};
use mailvault_core::{Repository, Result};
use mailvault_imap::maildir_flags::{maildir_to_imap, KeywordTable};

/// The hierarchy delimiter of the view.
pub const DELIMITER: char = '/';
/// The root of the snapshots' tree, unless the account has a folder of that name
/// (`snapshots_root`).
pub const SNAPSHOTS: &str = "Snapshots";
/// The mailbox of deleted messages; `<root>/Deleted` below the snapshots' root when the
/// account has a folder of that name itself (never a snapshot's level, which is a date).
pub const DELETED: &str = "Deleted";

/// The root of the snapshots' tree for an account whose latest folders are `names`:
/// [`SNAPSHOTS`], or when a folder's first level is that name (in any case: the account's
/// own `Snapshots`, or `Snapshots/x`), the first of `Snapshots (backups)`,
/// `Snapshots (backups 2)`, `Snapshots (backups 3)` ... that none is; so the account's
/// own folders and the snapshots' levels never mix.
fn snapshots_root<'a>(names: impl Iterator<Item = &'a str> + Clone) -> String {
    let taken = |root: &str| {
        (names.clone()).any(|n| {
            n.split(DELIMITER)
                .next()
                .is_some_and(|first| first.eq_ignore_ascii_case(root))
        })
    };
    if !taken(SNAPSHOTS) {
        return SNAPSHOTS.to_string();
    }
    let mut n = 1u32;
    loop {
        let root = match n {
            1 => format!("{SNAPSHOTS} (backups)"),
            n => format!("{SNAPSHOTS} (backups {n})"),
        };
        if !taken(&root) {
            return root;
        }
        n += 1;
    }
}

/// One mailbox of the view.
#[derive(Clone, Debug)]
pub struct ViewBox {
    /// Its name, UTF-8, levels separated by [`DELIMITER`].
    pub name: String,
    /// Where its messages are; `None`: a level that only holds others (`\Noselect`).
    pub place: Option<Place>,
    /// Its special-use attribute (`\Sent` ...), for the latest view's folders.
    pub special: Option<&'static str>,
    pub has_children: bool,
    /// Listed by LSUB: a folder of the latest view its snapshot's `subscriptions` names
    /// (every one when it has none), and every mailbox of the backups (`Deleted`,
    /// `Snapshots/...`), so that a client showing subscribed folders alone shows them.
    pub subscribed: bool,
}

/// Where a mailbox's messages are.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Place {
    /// A folder of a snapshot: the snapshot's full id (hex), the folder's name in it
    /// ([`folder_name`]).
    Folder { snapshot: String, folder: String },
    /// The account's deleted messages ([`mailvault_core::ops::undelete::find_deleted`]
    /// over every snapshot that holds it), found when the mailbox is opened.
    Deleted,
}

/// The mailboxes of one account.
pub struct View {
    pub account: String,
    pub boxes: Vec<ViewBox>,
    /// The snapshots that hold the account, oldest first: what a folder's derived UIDs
    /// are worked out from (`imap::uids`).
    pub history: Vec<Held>,
}

/// The names of the snapshots' levels below the snapshots' root ([`snapshots_root`]), for
/// `(time, id)` oldest first: each one's time in UTC to the minute, and when an earlier
/// snapshot of the account falls in the same minute, the first 8 hex digits of its id
/// after it. Only later snapshots of a minute take a suffix, so that a name once shown
/// never changes when another backup lands in its minute.
fn snapshot_levels<'a>(held: impl IntoIterator<Item = (i64, &'a str)>) -> Vec<String> {
    let mut names = Vec::new();
    let mut last_minute = None;
    for (time, id) in held {
        let t = jiff::Timestamp::from_second(time).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let minute = t.strftime("%Y-%m-%d %H:%M").to_string();
        names.push(match last_minute.as_ref() == Some(&minute) {
            true => format!("{minute} {}", &id[..8.min(id.len())]),
            false => minute.clone(),
        });
        last_minute = Some(minute);
    }
    names
}

impl View {
    /// The view of `account`; `None` when no snapshot holds it.
    pub fn build(repo: &Repository, account: &str) -> Result<Option<View>> {
        let mut snaps = repo.snapshots()?.list;
        snaps.sort_by_key(|s| (s.time, s.time_nanos, s.id));
        let mut held = Vec::new();
        let mut history = Vec::new();
        for s in &snaps {
            let root: RootTree = repo.read_tree(&s.root)?;
            let Some(a) = root.accounts.iter().find(|a| a.name == account) else {
                continue;
            };
            let tree: AccountTree = repo.read_tree(&a.tree)?;
            held.push((s.id.to_hex(), s.time, tree.folders));
            history.push(Held {
                snapshot: s.id.to_hex(),
                time: s.time,
                tree: a.tree,
            });
        }
        let Some((latest, _, latest_folders)) = held.last() else {
            return Ok(None);
        };
        let subscribed = subscriptions(repo, latest_folders)?;
        let mut boxes: Vec<ViewBox> = Vec::new();
        for f in latest_folders {
            let name = folder_name(f).into_owned();
            let special =
                mailvault_core::imap::names::special_use_for(&name).map(|s| s.attribute());
            let mut b = folder_box(name, latest, f, special);
            b.subscribed = subscribed.as_ref().is_none_or(|s| s.contains(&b.name));
            boxes.push(b);
        }
        // The deleted messages, beside the folders (found when opened: listing costs
        // nothing).
        let root = snapshots_root(boxes.iter().map(|b| b.name.as_str()));
        let own_deleted = boxes.iter().any(|b| b.name.eq_ignore_ascii_case(DELETED));
        boxes.push(ViewBox {
            name: match own_deleted {
                true => format!("{root}{DELIMITER}{DELETED}"),
                false => DELETED.to_string(),
            },
            place: Some(Place::Deleted),
            special: None,
            has_children: false,
            subscribed: true,
        });
        let levels = snapshot_levels(held.iter().map(|(id, time, _)| (*time, id.as_str())));
        for ((id, _, folders), level) in held.iter().zip(levels) {
            for f in folders {
                let name = folder_name(f);
                let full = format!("{root}{DELIMITER}{level}{DELIMITER}{name}");
                boxes.push(folder_box(full, id, f, None));
            }
        }
        Ok(Some(View {
            account: account.to_string(),
            boxes: with_parents(boxes),
            history,
        }))
    }

    /// The mailbox named `name` (INBOX in any case).
    pub fn find(&self, name: &str) -> Option<&ViewBox> {
        match name.eq_ignore_ascii_case("INBOX") {
            true => self.boxes.iter().find(|b| b.name == "INBOX"),
            false => self.boxes.iter().find(|b| b.name == name),
        }
    }
}

fn folder_box(
    name: String,
    snapshot: &str,
    f: &FolderNode,
    special: Option<&'static str>,
) -> ViewBox {
    ViewBox {
        place: Some(Place::Folder {
            snapshot: snapshot.to_string(),
            folder: folder_name(f).into_owned(),
        }),
        name,
        special,
        has_children: false,
        subscribed: true,
    }
}

/// The folders the latest snapshot's INBOX `subscriptions` file names (Dovecot's, or the
/// one an IMAP backup writes from LSUB); `None` when it has none.
fn subscriptions(
    repo: &Repository,
    folders: &[FolderNode],
) -> Result<Option<std::collections::HashSet<String>>> {
    let Some(inbox) = folders.iter().find(|f| f.dir.is_empty()) else {
        return Ok(None);
    };
    let file = mailvault_core::model::assemble::folder_file(repo, inbox, b"subscriptions")?;
    Ok(file.map(|d| {
        let mut names: std::collections::HashSet<String> =
            mailvault_core::imap::names::parse_subscriptions(&d)
                .into_iter()
                .collect();
        // INBOX is always there to a client, subscribed or not.
        names.insert("INBOX".into());
        names
    }))
}

/// `boxes` with every level above a mailbox that is not one itself added as `\Noselect`,
/// `has_children` set, sorted by name, each name once (the first kept).
fn with_parents(mut boxes: Vec<ViewBox>) -> Vec<ViewBox> {
    let names: std::collections::BTreeSet<String> = boxes.iter().map(|b| b.name.clone()).collect();
    let mut parents = std::collections::BTreeSet::new();
    for b in &boxes {
        let mut n = b.name.as_str();
        while let Some((up, _)) = n.rsplit_once(DELIMITER) {
            parents.insert(up.to_string());
            n = up;
        }
    }
    for p in &parents {
        if !names.contains(p) {
            boxes.push(ViewBox {
                name: p.clone(),
                place: None,
                special: None,
                has_children: true,
                // Listed by LSUB as `\Noselect` levels, so that `LSUB "" "%"` walks
                // down to what is below them.
                subscribed: true,
            });
        }
    }
    for b in &mut boxes {
        b.has_children = parents.contains(&b.name);
    }
    boxes.sort_by(|a, b| a.name.cmp(&b.name));
    boxes.dedup_by(|a, b| a.name == b.name);
    boxes
}

/// One message of an opened folder.
pub struct Message {
    pub entry: MessageEntry,
    /// Its flags and keywords, IMAP names (`\Seen`, `$Forwarded`).
    pub flags: Vec<String>,
    pub uid: u32,
}

/// An opened folder: its messages in UID order, each with a UID of its own.
pub struct Folder {
    pub uidvalidity: u32,
    pub messages: Vec<Message>,
    /// The keywords its `dovecot-keywords` names.
    pub keywords: Vec<String>,
    /// The mod-sequence of every message (CONDSTORE): the time of the snapshot it shows
    /// (`condstore::modseq_of`), the latest snapshot's for `Deleted`.
    pub modseq: std::num::NonZeroU64,
}

impl Folder {
    /// Reads the mailbox `place` of `view`'s account.
    pub fn open(repo: &Repository, view: &View, place: &Place) -> Result<Folder> {
        match place {
            Place::Folder { snapshot, folder } => Folder::of_snapshot(repo, view, snapshot, folder),
            Place::Deleted => Folder::deleted(repo, view),
        }
    }

    /// Folder `folder` of `view`'s account in snapshot `snapshot`.
    fn of_snapshot(repo: &Repository, view: &View, snapshot: &str, folder: &str) -> Result<Folder> {
        let snap = repo.find_snapshot(snapshot)?;
        let folders = read::account_folders(repo, &snap, &view.account)?.unwrap_or_default();
        let Some(node) = folders.iter().find(|f| folder_name(f) == folder) else {
            return Err(mailvault_core::Error::NotFound(format!(
                "no folder {folder:?} in snapshot {}",
                &snapshot[..8.min(snapshot.len())]
            )));
        };
        use mailvault_core::model::assemble::folder_file;
        let table = match folder_file(repo, node, b"dovecot-keywords")? {
            Some(d) => KeywordTable::parse(&String::from_utf8_lossy(&d)),
            None => KeywordTable::new(),
        };
        // The order a restore writes them in (the arrival order: `dovecot-uidlist`, else
        // an IMAP backup's UIDs, else internal date and key), numbered in that order.
        let uidlist = folder_file(repo, node, b"dovecot-uidlist")?;
        let map = (uidlist.as_deref()).map(mailvault_core::imap::names::parse_uidlist);
        let mut entries = read::folder_entries(repo, node)?;
        entries.sort_by_cached_key(|e| mailvault_core::restore::arrival_order(map.as_ref(), e));
        let found =
            (uidlist.and_then(|d| dovecot_uids(&d, &entries))).or_else(|| server_uids(&entries));
        let (entries, numbered) = match found {
            Some(n) => (entries, n),
            None => history_uids(repo, &view.history, (snapshot, folder), entries)?,
        };
        let modseq = super::condstore::modseq_of(snap.time, snap.time_nanos);
        Ok(Folder::of(entries, numbered, &table, modseq))
    }

    /// The messages older snapshots of `account` held that its latest no longer holds (as
    /// `undelete` finds them: by content, so a message moved to another folder is not
    /// deleted), each as the newest snapshot that held it has it, in the order a restore
    /// writes them, numbered as [`derived_uids`] does: a backup that changes the set
    /// changes UIDVALIDITY. Keywords are left out (each folder names its own). Its
    /// mod-sequence is the latest snapshot's.
    fn deleted(repo: &Repository, view: &View) -> Result<Folder> {
        use mailvault_core::ops::undelete::{find_deleted, DeletedOptions};
        let modseq = match view.history.last() {
            Some(h) => {
                let s = repo.find_snapshot(&h.snapshot)?;
                super::condstore::modseq_of(s.time, s.time_nanos)
            }
            None => std::num::NonZeroU64::MIN,
        };
        let opts = DeletedOptions {
            account: view.account.clone(),
            folders: Vec::new(),
            since: None,
        };
        let found = find_deleted(repo, &opts)?;
        let mut entries: Vec<MessageEntry> =
            found.messages.iter().map(|m| m.entry().clone()).collect();
        entries.sort_by_cached_key(|e| mailvault_core::restore::arrival_order(None, e));
        let uids = derived_uids(&entries);
        Ok(Folder::of(entries, uids, &KeywordTable::new(), modseq))
    }

    /// The folder of `entries` with their UIDs, flags and keywords (of `table`), and the
    /// mod-sequence of them all.
    fn of(
        entries: Vec<MessageEntry>,
        (uidvalidity, uids): Uids,
        table: &KeywordTable,
        modseq: std::num::NonZeroU64,
    ) -> Folder {
        let keywords = (b'a'..=b'z')
            .filter_map(|c| table.name_of(c as char).map(str::to_string))
            .collect();
        let messages = (entries.into_iter().zip(uids))
            .map(|(entry, uid)| {
                let letters = String::from_utf8_lossy(entry.flags()).into_owned();
                let flags = maildir_to_imap(&letters, table).flags;
                Message { entry, flags, uid }
            })
            .collect();
        Folder {
            uidvalidity,
            messages,
            keywords,
            modseq,
        }
    }

    /// The highest UID (0 for an empty folder).
    pub fn last_uid(&self) -> u32 {
        self.messages.last().map_or(0, |m| m.uid)
    }

    /// The next UID.
    pub fn uidnext(&self) -> u32 {
        self.last_uid().saturating_add(1)
    }

    pub fn unseen(&self) -> usize {
        (self.messages.iter())
            .filter(|m| !m.flags.iter().any(|f| f.eq_ignore_ascii_case("\\Seen")))
            .count()
    }
}

/// A folder's UIDVALIDITY and the UIDs of its messages, in their order.
type Uids = (u32, Vec<u32>);

/// UIDs 1..N for `entries` in their order, and the UIDVALIDITY of that numbering
/// ([`uidvalidity_of`]): the `Deleted` mailbox's numbering.
fn derived_uids(entries: &[MessageEntry]) -> Uids {
    let uidvalidity = uidvalidity_of(entries.iter().map(|e| e.key.as_slice()));
    (uidvalidity, (1..=entries.len() as u32).collect())
}

/// `entries`, the messages of folder `folder` in snapshot `snapshot`, in the order of the
/// UIDs [`super::uids::numbering`] derives from `history`, with those UIDs and their
/// UIDVALIDITY. Should that numbering miss a message or give two the same UID (a folder
/// listing a key twice), the folder is numbered as [`derived_uids`] does instead.
fn history_uids(
    repo: &Repository,
    history: &[Held],
    (snapshot, folder): (&str, &str),
    entries: Vec<MessageEntry>,
) -> Result<(Vec<MessageEntry>, Uids)> {
    let numbering = super::uids::numbering(repo, history, snapshot, folder)?;
    let uids: Option<Vec<u32>> = (entries.iter())
        .map(|e| numbering.uids.get(&e.key).copied())
        .collect();
    let mut uids = match uids {
        Some(u) => u,
        None => {
            let derived = derived_uids(&entries);
            return Ok((entries, derived));
        }
    };
    let mut numbered: Vec<(u32, MessageEntry)> = uids.drain(..).zip(entries).collect();
    numbered.sort_by_key(|(uid, _)| *uid);
    let (uids, entries): (Vec<u32>, Vec<MessageEntry>) = numbered.into_iter().unzip();
    if !uids.windows(2).all(|w| w[0] < w[1]) {
        let derived = derived_uids(&entries);
        return Ok((entries, derived));
    }
    Ok((entries, (numbering.uidvalidity, uids)))
}

/// Dovecot's UIDs and UIDVALIDITY from the folder's backed-up `dovecot-uidlist`, for
/// `entries` in UID order, when the list gives every message a UID of its own and names
/// its UIDVALIDITY; else `None`.
fn dovecot_uids(data: &[u8], entries: &[MessageEntry]) -> Option<(u32, Vec<u32>)> {
    let first = data.split(|&b| b == b'\n').next()?;
    let first = std::str::from_utf8(first).ok()?;
    let mut words = first.split_ascii_whitespace();
    let uidvalidity: u32 = match words.next()? {
        "3" => words.find_map(|w| w.strip_prefix('V'))?.parse().ok()?,
        "1" => words.next()?.parse().ok()?,
        _ => return None,
    };
    let map = mailvault_core::imap::names::parse_uidlist(data);
    let mut uids = Vec::with_capacity(entries.len());
    for e in entries {
        uids.push(*map.get(&e.key).filter(|&&u| u > 0)?);
    }
    // In arrival order, a complete list's UIDs rise strictly: each its own.
    if uidvalidity == 0 || !uids.windows(2).all(|w| w[0] < w[1]) {
        return None;
    }
    Some((uidvalidity, uids))
}

/// The UIDs and UIDVALIDITY an IMAP backup kept in its keys
/// ([`mailvault_core::imap::names::parse_key`]), for `entries` in UID order, when every
/// message has one under one UIDVALIDITY, each its own: the view then numbers the folder
/// as the server did, so a client that knew the server's folder keeps its cache. Else
/// `None`.
fn server_uids(entries: &[MessageEntry]) -> Option<(u32, Vec<u32>)> {
    let mut uidvalidity = None;
    let mut uids = Vec::with_capacity(entries.len());
    for e in entries {
        let (uid, v) = mailvault_core::imap::names::parse_key(&e.key)?;
        if uid == 0 || v == 0 || *uidvalidity.get_or_insert(v) != v {
            return None;
        }
        uids.push(uid);
    }
    // In arrival order (the backup's UIDs), each its own: they rise strictly.
    if !uids.windows(2).all(|w| w[0] < w[1]) {
        return None;
    }
    Some((uidvalidity?, uids))
}

/// Whether `name` matches LIST pattern `pat`: `*` matches anything, `%` anything but the
/// delimiter.
pub fn matches(pat: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pat.chars().collect(), name.chars().collect());
    // Positions of the pattern reachable after each name character (a small NFA walk:
    // linear in both, whatever the number of wildcards).
    let mut states = vec![false; p.len() + 1];
    states[0] = true;
    close(&p, &mut states);
    for &c in &n {
        let mut next = vec![false; p.len() + 1];
        for i in 0..p.len() {
            if !states[i] {
                continue;
            }
            match p[i] {
                '*' => next[i] = true,
                '%' if c != DELIMITER => next[i] = true,
                '%' => {}
                x if x == c => next[i + 1] = true,
                _ => {}
            }
        }
        close(&p, &mut next);
        states = next;
    }
    states[p.len()]
}

/// Adds the states reachable by letting a wildcard match nothing.
fn close(p: &[char], states: &mut [bool]) {
    for i in 0..p.len() {
        if states[i] && (p[i] == '*' || p[i] == '%') {
            states[i + 1] = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_patterns() {
        assert!(matches("*", "Snapshots/2024-01-01 10:00/INBOX"));
        assert!(matches("%", "INBOX"));
        assert!(!matches("%", "Archive/2023"));
        assert!(matches("Archive/%", "Archive/2023"));
        assert!(matches("Snap*INBOX", "Snapshots/x/INBOX"));
        assert!(!matches("Snap*INBOX", "Snapshots/x/INBOX2"));
        assert!(matches("", ""));
        assert!(!matches("", "INBOX"));
        assert!(!matches("INBOX", "INBOX/x"));
    }

    fn entry(key: &str, secs: i64) -> MessageEntry {
        MessageEntry {
            key: key.as_bytes().to_vec(),
            name: key.as_bytes().to_vec(),
            new: false,
            size: 0,
            mtime: mailvault_core::repo::tree::Timestamp { secs, nanos: 0 },
            mode: 0,
            uid: 0,
            gid: 0,
            hash: mailvault_core::Id([0; 32]),
            content: Vec::new(),
            from: String::new(),
            subject: String::new(),
            date: None,
        }
    }

    #[test]
    fn dovecot_uids_only_when_they_cover_the_folder() {
        let list = b"3 V42 N9 G0\n8 :b:2,S\n3 W12 :a\n";
        // Put in arrival order (the list's UIDs) first, as `Folder::open` does.
        let map = mailvault_core::imap::names::parse_uidlist(list);
        let mut e = vec![entry("b", 1), entry("a", 2)];
        e.sort_by_cached_key(|e| mailvault_core::restore::arrival_order(Some(&map), e));
        assert_eq!(e[0].key, b"a", "in UID order");
        assert_eq!(dovecot_uids(list, &e).unwrap(), (42, vec![3, 8]));
        let v1 = b"1 77 9\n4 a:2,S\n";
        assert_eq!(dovecot_uids(v1, &[entry("a", 1)]).unwrap(), (77, vec![4]));
        assert!(
            dovecot_uids(list, &[entry("a", 1), entry("c", 2)]).is_none(),
            "c has none"
        );
        let twice = b"3 V42 N9\n3 :a\n3 :b\n";
        assert!(dovecot_uids(twice, &[entry("a", 1), entry("b", 2)]).is_none());
        assert!(dovecot_uids(b"3 N9\n3 :a\n", &[entry("a", 1)]).is_none());
        let (uv, uids) = derived_uids(&[entry("x", 1), entry("y", 2)]);
        assert_eq!(uids, [1, 2]);
        assert_ne!(uv, derived_uids(&[entry("y", 1), entry("x", 2)]).0);
    }

    /// An IMAP backup's keys give the server's UIDs and UIDVALIDITY; keys of two
    /// UIDVALIDITYs, or one that is not an IMAP backup's, give none.
    #[test]
    fn an_imap_backups_uids_are_the_servers() {
        use mailvault_core::imap::names::synth_key;
        let k = |uid, v| entry(&synth_key("INBOX", 1_700_000_000, uid, v, 10), 1);
        let mut e = vec![k(12, 77), k(3, 77), k(40, 77)];
        e.sort_by_cached_key(|e| mailvault_core::restore::arrival_order(None, e));
        assert_eq!(server_uids(&e), Some((77, vec![3, 12, 40])));
        assert!(server_uids(&[k(3, 77), k(4, 78)]).is_none());
        assert!(server_uids(&[k(3, 77), entry("1.M1P1.host", 1)]).is_none());
        assert_eq!(server_uids(&[]), None);
    }

    /// A folder of the account named `Snapshots` (in any case, or a level of one) moves
    /// the snapshots' root aside, as far as it takes.
    #[test]
    fn the_snapshots_root_is_moved_aside_by_a_folder_of_its_name() {
        let root = |names: &[&str]| snapshots_root(names.iter().copied());
        assert_eq!(root(&["INBOX", "Archive"]), "Snapshots");
        assert_eq!(root(&["INBOX", "Snapshots2"]), "Snapshots");
        assert_eq!(root(&["INBOX", "snapshots"]), "Snapshots (backups)");
        assert_eq!(root(&["Snapshots/x"]), "Snapshots (backups)");
        assert_eq!(
            root(&[
                "Snapshots",
                "SNAPSHOTS (Backups)/y",
                "Snapshots (backups 2)"
            ]),
            "Snapshots (backups 3)"
        );
    }

    /// The first snapshot of a minute keeps the bare minute, later ones of that minute
    /// take their ids' first digits, and a later backup does not rename an earlier one.
    #[test]
    fn snapshot_levels_keep_their_names() {
        let two = [(1704103200, "abcdef0123"), (1704103260, "1234567890")];
        assert_eq!(
            snapshot_levels(two),
            ["2024-01-01 10:00", "2024-01-01 10:01"]
        );
        let three = [two[0], two[1], (1704103319, "fedcba9876")];
        assert_eq!(
            snapshot_levels(three),
            [
                "2024-01-01 10:00",
                "2024-01-01 10:01",
                "2024-01-01 10:01 fedcba98"
            ]
        );
    }

    #[test]
    fn parents_are_added_once() {
        let b = |n: &str| ViewBox {
            name: n.into(),
            place: None,
            special: None,
            has_children: false,
            subscribed: true,
        };
        let out = with_parents(vec![b("A/B/C"), b("A"), b("INBOX")]);
        let names: Vec<_> = out
            .iter()
            .map(|b| (b.name.as_str(), b.has_children))
            .collect();
        assert_eq!(
            names,
            [
                ("A", true),
                ("A/B", true),
                ("A/B/C", false),
                ("INBOX", false)
            ]
        );
    }
}
