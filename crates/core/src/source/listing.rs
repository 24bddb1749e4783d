//! Listing a Maildir folder's message files ([`list_messages`]): `new/` and `cur/` read
//! with `readdir` alone, the names kept in key order in one buffer ([`MessageFiles`]).

use super::walk::{self, Dir, FileType};
use crate::error::Error;
use crate::mail::maildir::split_name;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One message file as listed: its name and place, no `stat(2)` (see [`list_messages`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageFile {
    pub name: Vec<u8>,
    pub new: bool,
}

impl MessageFile {
    pub fn path(&self, folder: &Path) -> PathBuf {
        folder
            .join(if self.new { "new" } else { "cur" })
            .join(OsStr::from_bytes(&self.name))
    }
    pub fn key(&self) -> &[u8] {
        split_name(&self.name).0
    }
}

/// A listed file, borrowed from [`MessageFiles`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileRef<'a> {
    pub name: &'a [u8],
    pub new: bool,
}

impl<'a> FileRef<'a> {
    pub fn key(&self) -> &'a [u8] {
        split_name(self.name).0
    }
    pub fn owned(&self) -> MessageFile {
        MessageFile {
            name: self.name.to_vec(),
            new: self.new,
        }
    }
}

/// A folder's message files in key order, one per key. The names sit in blocks of
/// `NAME_BLOCK` bytes and a file costs 8 bytes beside its name's: a folder of 600,000
/// messages lists in about 25 MB, where a `Vec<MessageFile>` (an allocation a name, and
/// the directory's entries copied twice on the way) took about 90 bytes a file, and more
/// while it was built. (Blocks rather than one buffer: a buffer grown by doubling holds up
/// to twice its bytes.)
#[derive(Default)]
pub struct MessageFiles {
    names: Vec<Vec<u8>>,
    /// Per file: its name's block (bits 37 and up) and start in it (bits 17 to 36), its
    /// length (bits 1 to 16) and whether it is in `new/` (bit 0).
    files: Vec<u64>,
}

/// Bytes of names a block of [`MessageFiles`] holds.
const NAME_BLOCK: usize = 1 << 20;

impl MessageFiles {
    fn push(&mut self, name: &[u8], new: bool) {
        // A directory entry's name is at most 255 bytes (NAME_MAX).
        let len = u16::try_from(name.len()).expect("a file name of at most 65,535 bytes");
        if (self.names.last()).is_none_or(|b| b.len() + name.len() > b.capacity()) {
            self.names
                .push(Vec::with_capacity(NAME_BLOCK.max(name.len())));
        }
        let block = self.names.len() - 1;
        let start = self.names[block].len();
        self.names[block].extend_from_slice(name);
        self.files.push(
            (block as u64) << 37 | (start as u64) << 17 | u64::from(len) << 1 | u64::from(new),
        );
    }

    fn at(&self, f: u64) -> FileRef<'_> {
        let block = (f >> 37) as usize;
        let start = ((f >> 17) & 0xf_ffff) as usize;
        let len = ((f >> 1) & 0xffff) as usize;
        FileRef {
            name: &self.names[block][start..start + len],
            new: f & 1 == 1,
        }
    }

    /// Where a listing that failed started (see [`Self::truncate`]).
    fn mark(&self) -> (usize, usize, usize) {
        let last = self.names.last().map_or(0, Vec::len);
        (self.names.len(), last, self.files.len())
    }

    /// Back to `mark`.
    fn truncate(&mut self, (blocks, last, files): (usize, usize, usize)) {
        self.names.truncate(blocks);
        if let Some(b) = self.names.last_mut() {
            b.truncate(last);
        }
        self.files.truncate(files);
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
    /// The `i`th file in key order.
    pub fn get(&self, i: usize) -> Option<FileRef<'_>> {
        self.files.get(i).map(|&f| self.at(f))
    }
    pub fn iter(&self) -> impl ExactSizeIterator<Item = FileRef<'_>> + '_ {
        self.files.iter().map(|&f| self.at(f))
    }
    /// The file of `key`, if listed.
    pub fn find(&self, key: &[u8]) -> Option<FileRef<'_>> {
        let i = (self.files)
            .binary_search_by(|&f| self.at(f).key().cmp(key))
            .ok()?;
        Some(self.at(self.files[i]))
    }

    /// Into key order, one file per key: the last pushed (a stable sort keeps the order
    /// seen, and the later listing of a key is the newer name).
    fn sort_dedup(&mut self) {
        let mut files = std::mem::take(&mut self.files);
        files.sort_by(|&a, &b| self.at(a).key().cmp(self.at(b).key()));
        files.dedup_by(|later, kept| {
            let same = self.at(*later).key() == self.at(*kept).key();
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        files.shrink_to_fit();
        self.files = files;
    }
}

impl std::fmt::Debug for MessageFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// Lists the message files of a folder (`cur/` and `new/`; `tmp/` is skipped) from the
/// directories alone: no `stat(2)` per file (the file type comes from `readdir`), so an
/// incremental backup touches nothing but the directories for messages it already has.
/// Entries that cannot be listed or are not regular files come back as errors naming
/// their path.
///
/// The mail server renames files while we list (flag changes, `new/` to `cur/`), and
/// `readdir` promises nothing for an entry renamed during it: it may be missed under both
/// names. So `new/` is listed before `cur/` (a message moved between the two listings is
/// seen in `new/`), and a directory that changed during its listing (its ctime is not
/// older than the listing's start, within the clock's granularity) is listed again, up
/// to [`LIST_ATTEMPTS`] times; every name seen is kept, one per key (the last seen), so a
/// message present throughout is never left out. A stale name is resolved by key when the
/// file is read.
pub fn list_messages(folder: &Path) -> (MessageFiles, Vec<Error>) {
    list_messages_with(folder, &mut |_, _| {})
}

/// Listings of a directory that changed during them before the names seen are taken.
pub const LIST_ATTEMPTS: u32 = 5;

/// [`list_messages`] with a hook called after each listing of `new` or `cur` (with the
/// attempt number), for tests that rename files at the worst moment.
pub fn list_messages_with(
    folder: &Path,
    after_listing: &mut dyn FnMut(&str, u32),
) -> (MessageFiles, Vec<Error>) {
    match Dir::open(folder) {
        Ok(dir) => {
            let l = list_in(&dir, after_listing);
            (l.files, l.errors)
        }
        Err(e) => (MessageFiles::default(), vec![Error::io(folder, e)]),
    }
}

/// A folder's message files, and its `new/` and `cur/` as opened to list them (relative
/// to the folder's directory, never through a link), to read the files from.
pub(super) struct Listing {
    pub(super) files: MessageFiles,
    pub(super) errors: Vec<Error>,
    new: Option<Dir>,
    cur: Option<Dir>,
}

impl Listing {
    /// `new/` or `cur/`, as listed.
    pub(super) fn dir(&self, new: bool) -> Option<&Dir> {
        if new {
            self.new.as_ref()
        } else {
            self.cur.as_ref()
        }
    }
}

/// [`list_messages_with`] of an open folder directory: `new/` and `cur/` are opened
/// relative to it; one that is a symbolic link is reported ([`walk::LINK_REFUSED`]),
/// never listed.
pub(super) fn list_in(folder: &Dir, after_listing: &mut dyn FnMut(&str, u32)) -> Listing {
    // Modifications up to this long before a listing starts may not show in the
    // directory's ctime yet (the kernel's coarse clock).
    const GRANULARITY: std::time::Duration = std::time::Duration::from_millis(50);
    let mut out = Listing {
        files: MessageFiles::default(),
        errors: Vec::new(),
        new: None,
        cur: None,
    };
    for (sub, new) in [("new", true), ("cur", false)] {
        let dir = match folder.sub(sub.as_bytes()) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => {
                out.errors.push(Error::io(folder.join(sub.as_bytes()), e));
                continue;
            }
        };
        for attempt in 1..=LIST_ATTEMPTS {
            let start = std::time::SystemTime::now();
            if !list_dir(&dir, new, &mut out.files, &mut out.errors) {
                break;
            }
            after_listing(sub, attempt);
            let changed = match dir.fstat() {
                Ok(st) => {
                    let ctime = std::time::UNIX_EPOCH
                        + std::time::Duration::new(
                            st.st_ctime.max(0) as u64,
                            (st.st_ctime_nsec as i64).clamp(0, 999_999_999) as u32,
                        );
                    ctime + GRANULARITY >= start
                }
                Err(_) => false,
            };
            if !changed {
                break;
            }
        }
        *(if new { &mut out.new } else { &mut out.cur }) = Some(dir);
    }
    out.files.sort_dedup();
    out
}

/// Adds the regular files of one directory to `files`; false (and nothing added) if it
/// cannot be listed (reported).
fn list_dir(dir: &Dir, new: bool, files: &mut MessageFiles, errors: &mut Vec<Error>) -> bool {
    let (mark, errors_before) = (files.mark(), errors.len());
    let listed = dir.for_each_entry(|name, t| match entry_type(dir, name, t) {
        Some(FileType::RegularFile) => files.push(name, new),
        // Renamed or deleted by the mail server since the listing: not an error.
        None => {}
        Some(_) => errors.push(Error::io(
            dir.join(name),
            io::Error::new(io::ErrorKind::InvalidInput, "not a regular file; skipped"),
        )),
    });
    if let Err(e) = listed {
        files.truncate(mark);
        errors.truncate(errors_before);
        errors.push(Error::io(dir.path(), e));
        return false;
    }
    true
}

/// An entry's type, not following a link (the type `readdir` gave, else its `stat`);
/// `None` if it is gone.
pub(super) fn entry_type(dir: &Dir, name: &[u8], listed: FileType) -> Option<FileType> {
    match listed {
        FileType::Unknown => dir.stat(name).ok().map(|st| walk::file_type(&st)),
        t => Some(t),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_files_keep_one_name_a_key_the_last_listed_in_key_order() {
        let mut files = MessageFiles::default();
        for (name, new) in [
            (&b"2.M1P1.h:2,"[..], false),
            (b"1.M1P1.h", true),
            (b"3.M1P1.h:2,T", false),
            (b"2.M1P1.h:2,S", false),
            (b"10.M1P1.h:2,", false),
        ] {
            files.push(name, new);
        }
        files.sort_dedup();
        let listed: Vec<(&[u8], bool)> = files.iter().map(|f| (f.name, f.new)).collect();
        assert_eq!(
            listed,
            [
                (&b"1.M1P1.h"[..], true),
                (b"10.M1P1.h:2,", false),
                (b"2.M1P1.h:2,S", false),
                (b"3.M1P1.h:2,T", false),
            ]
        );
        assert_eq!(files.find(b"2.M1P1.h").unwrap().name, b"2.M1P1.h:2,S");
        assert_eq!(
            files
                .find(b"1.M1P1.h")
                .unwrap()
                .owned()
                .path(Path::new("f")),
            Path::new("f/new/1.M1P1.h")
        );
        assert!(files.find(b"4.M1P1.h").is_none());
        assert!(
            files.find(b"2.M1P1.h:2,S").is_none(),
            "found by key, not by name"
        );
        assert_eq!(files.get(3).unwrap().key(), b"3.M1P1.h");
        assert!(files.get(4).is_none());
    }

    /// Names over several blocks, pushed out of order, a failed listing taken back.
    #[test]
    fn message_files_span_name_blocks() {
        let mut files = MessageFiles::default();
        let name = |i: u32| {
            format!(
                "{:010}.M{i}P1.host.example.org,S=1234:2,S",
                i.wrapping_mul(2_654_435_761)
            )
        };
        for i in 0..60_000 {
            files.push(name(i).as_bytes(), i % 7 == 0);
        }
        assert!(files.names.len() > 2, "{} blocks", files.names.len());
        let mark = files.mark();
        files.push(b"0.M0P0.gone", false);
        files.truncate(mark);
        files.sort_dedup();
        assert_eq!(files.len(), 60_000);
        assert!(files.find(b"0.M0P0.gone").is_none());
        assert!(files
            .iter()
            .zip(files.iter().skip(1))
            .all(|(a, b)| a.key() < b.key()));
        for i in (0..60_000).step_by(997) {
            let n = name(i);
            let f = files.find(split_name(n.as_bytes()).0).unwrap();
            assert_eq!((f.name, f.new), (n.as_bytes(), i % 7 == 0));
        }
    }
}
