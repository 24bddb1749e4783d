//! Folders as a zip, streamed (the web UI's "download as zip"): the restore pipeline into
//! any [`Write`]. [`ZipStream::new`] writes each message as a file of its bytes untouched,
//! named and laid out as the EML target lays out a tree ([`super::eml`]:
//! `<account>/INBOX/`, `<account>/Archive/2023/`, names that sort by date and stay
//! unique), with each folder's flags, keywords and dates in its sidecar
//! ([`crate::mail::eml::SIDECAR`]), so that `restore --target eml:` and Python's `zipfile`
//! read the same thing. [`ZipStream::mboxes`] writes each folder as one mbox, with the
//! mbox target's codec and metadata ([`super::mbox_stream`]), at the same place with
//! `.mbox` added (`<account>/INBOX.mbox`, `<account>/Archive/2023.mbox`: the layout
//! Thunderbird's ImportExportTools NG imports as a folder tree). Entries are deflated; a
//! message file's time is the message's internal date (UTC, to the two seconds zip keeps).
//!
//! The `zip` crate writes the archive (its streaming writer, with data descriptors: no
//! seeking back). Entry names are made of safe components only: an archive never holds
//! `..`, an absolute path or a control character, whatever the folder names. Two accounts
//! or folders whose places would be the same, also when only their case differs (`Work`
//! and `work`: one directory once unpacked on macOS or Windows), never share one: the
//! later gets ` (2)`, ` (3)`… after its last component, so nothing is merged
//! or overwritten when the archive is unpacked. So does a folder met twice (a search's
//! hits in two snapshots of one account: two folders, each with its sidecar).

use super::mbox::{folder_keywords, folder_parts, mail_meta};
use super::{AccountInfo, Caps, FolderInfo, Item, Message, Outcome, Target};
use crate::error::{Error, Result};
use crate::mail::layout::Tree;
use crate::mail::{EmlNames, MboxWriter, Sidecar, SidecarEntry};
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Mutex, MutexGuard};
use zip::write::{SimpleFileOptions, StreamWriter};
use zip::ZipWriter;

type Zip<W> = ZipWriter<StreamWriter<W>>;

/// A zip of `.eml` files, or of mboxes, written to `W` as the restore gives it messages.
pub struct ZipStream<W: Write + Send> {
    zip: Mutex<State<W>>,
    /// An mbox per folder ([`ZipStream::mboxes`]), not a file per message.
    mboxes: bool,
    /// Folders opened so far.
    folders: std::sync::atomic::AtomicUsize,
    places: Places,
}

/// The accounts' and folders' places in the archive so far, lowercased; and where each
/// folder told apart went (`a/work` → `a/work (2)`), for its subfolders to follow it.
#[derive(Default)]
struct Places(Mutex<Claimed>);

#[derive(Default)]
struct Claimed {
    taken: std::collections::HashSet<String>,
    moved: HashMap<String, String>,
}

impl Places {
    /// `base` followed by `end` (`/` for a directory, `.mbox` for a file) when no place
    /// taken so far is it, whatever the case; else the first free `base (n)` + `end`.
    fn claim(&self, base: &str, end: &str) -> String {
        crate::repo::lock(&self.0).claim(base, end)
    }

    /// The place of folder `parts` below `account`, with `end`: below its parent's place
    /// (where the parent went when it was told apart), claimed.
    fn folder(&self, account: &str, parts: &[String], end: &str) -> String {
        let mut c = crate::repo::lock(&self.0);
        let Some((last, parents)) = parts.split_last() else {
            return c.claim(account, end);
        };
        let mut base = account.to_string();
        for p in parents {
            base = format!("{base}/{p}");
            if let Some(to) = c.moved.get(&base) {
                base = to.clone();
            }
        }
        let base = format!("{base}/{last}");
        let place = c.claim(&base, end);
        c.moved
            .insert(base, place[..place.len() - end.len()].to_string());
        place
    }
}

impl Claimed {
    fn claim(&mut self, base: &str, end: &str) -> String {
        let taken = &mut self.taken;
        (1..)
            .map(|n| match n {
                1 => format!("{base}{end}"),
                n => format!("{base} ({n}){end}"),
            })
            .find(|place| taken.insert(place.to_lowercase()))
            .expect("a free place")
    }
}

enum State<W: Write> {
    /// Between entries: a message's file may start, or a folder's mbox.
    Ready(Zip<W>),
    /// The mbox of folder number `.1` being written into its entry.
    Mbox(MboxWriter<Zip<W>>, usize),
    /// Finished, or broken by a write that failed.
    Done,
}

/// A folder being written: where its files go in the archive, their names, and what its
/// sidecar will say.
pub struct ZipFolder {
    /// `<account>/<folder>/` (its mbox: `<account>/<folder>.mbox`), shown in failures.
    dir: String,
    names: Mutex<EmlNames>,
    entries: Mutex<Vec<SidecarEntry>>,
    /// The folder's number in the archive, and its keywords (an mbox's `X-IMAPbase:`).
    number: usize,
    keywords: Vec<String>,
    /// Whether its mbox's entry was started.
    started: std::sync::atomic::AtomicBool,
}

impl<W: Write + Send> ZipStream<W> {
    /// A zip of `.eml` files into `out`.
    pub fn new(out: W) -> ZipStream<W> {
        ZipStream {
            zip: Mutex::new(State::Ready(ZipWriter::new_stream(out))),
            mboxes: false,
            folders: Default::default(),
            places: Places::default(),
        }
    }

    /// A zip of one mbox per folder into `out`.
    pub fn mboxes(out: W) -> ZipStream<W> {
        ZipStream {
            mboxes: true,
            ..ZipStream::new(out)
        }
    }

    fn zip(&self) -> MutexGuard<'_, State<W>> {
        self.zip
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes the archive's central directory: the download is complete. A failure (the
    /// client went away) is the caller's to report.
    pub fn finish(&self) -> Result<()> {
        let mut guard = self.zip();
        Self::end_mbox(&mut guard).map_err(|e| Error::not_restored("the zip download", e))?;
        match std::mem::replace(&mut *guard, State::Done) {
            State::Ready(z) => z
                .finish()
                .map_err(std::io::Error::other)
                .and_then(|mut w| w.flush())
                .map_err(|e| Error::not_restored("the zip download", e.to_string())),
            _ => Err(Error::not_restored(
                "the zip download",
                "broken before its end",
            )),
        }
    }

    /// Starts entry `name`, dated `secs`, in `z`; `large`: it may pass 4 GiB (a folder's
    /// mbox), which only a zip64 entry holds.
    fn start(z: &mut Zip<W>, name: &str, secs: i64, large: bool) -> std::io::Result<()> {
        let opts = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .compression_level(Some(1))
            .last_modified_time(zip_time(secs))
            .unix_permissions(0o600)
            .large_file(large);
        z.start_file(name, opts).map_err(std::io::Error::other)
    }

    /// Adds file `name` of `bytes`, dated `secs`; a failure breaks the archive.
    fn add(&self, name: &str, bytes: &[u8], secs: i64) -> std::io::Result<()> {
        let mut guard = self.zip();
        let State::Ready(z) = &mut *guard else {
            return Err(std::io::Error::other("the archive is broken"));
        };
        let written = Self::start(z, name, secs, false).and_then(|()| z.write_all(bytes));
        if written.is_err() {
            *guard = State::Done;
        }
        written
    }

    /// Ends the mbox being written, if any; a failure breaks the archive.
    fn end_mbox(state: &mut State<W>) -> std::result::Result<(), String> {
        match std::mem::replace(state, State::Done) {
            State::Mbox(w, _) => *state = State::Ready(w.finish().map_err(|e| e.to_string())?),
            other => *state = other,
        }
        Ok(())
    }

    /// The archive with `folder`'s mbox as its open entry: the one being written, or a new
    /// one started after the mbox before it is ended (the restore writes a folder at a
    /// time, after opening them all). A failure breaks the archive.
    fn mbox_of<'g>(
        &self,
        guard: &'g mut MutexGuard<'_, State<W>>,
        folder: &ZipFolder,
    ) -> Result<&'g mut MboxWriter<Zip<W>>> {
        let broken = |e: String| Error::not_restored(&folder.dir, e);
        if !matches!(**guard, State::Mbox(_, n) if n == folder.number) {
            Self::end_mbox(guard).map_err(broken)?;
            let State::Ready(mut z) = std::mem::replace(&mut **guard, State::Done) else {
                return Err(broken("the archive is broken".into()));
            };
            Self::start(&mut z, &folder.dir, crate::now_unix(), true)
                .map_err(|e| broken(e.to_string()))?;
            let w = (MboxWriter::new(z).declare_keywords(1, &folder.keywords))
                .map_err(|e| broken(e.to_string()))?;
            folder
                .started
                .store(true, std::sync::atomic::Ordering::Relaxed);
            **guard = State::Mbox(w, folder.number);
        }
        match &mut **guard {
            State::Mbox(w, _) => Ok(w),
            _ => Err(broken("the archive is broken".into())),
        }
    }

    /// Writes `msg` into the folder's mbox; a failed write breaks the archive.
    fn write_mbox(&self, folder: &ZipFolder, msg: &Message) -> Result<Outcome> {
        let mut guard = self.zip();
        let w = self.mbox_of(&mut guard, folder)?;
        let key = String::from_utf8_lossy(&msg.entry.key);
        match w.write(msg.data, &mail_meta(msg.meta), None) {
            Ok(written) => {
                if written.lossy {
                    tracing::warn!(
                        "{}: message {key}: an mbox reader does not read it back exactly",
                        folder.dir
                    );
                }
                Ok(Outcome::Written { bytes: written.len })
            }
            Err(crate::mail::MailError::Io { source, .. }) => {
                *guard = State::Done;
                Err(Error::not_restored(folder.dir.clone(), source.to_string()))
            }
            Err(e) => Err(Error::not_restored(
                format!("{}: message {key}", folder.dir),
                e.to_string(),
            )),
        }
    }
}

/// `secs` (Unix, UTC) as zip keeps a time; out of zip's range (before 1980): 1980-01-01.
fn zip_time(secs: i64) -> zip::DateTime {
    let t = jiff::Timestamp::from_second(secs)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .datetime();
    zip::DateTime::try_from(t).unwrap_or_default()
}

/// A component of an entry name: itself when safe, else with what is not replaced by
/// `_` (an account name is the server's, not ours).
fn component(s: &str) -> String {
    let c: String = (s.chars())
        .map(|c| match c {
            '/' | '\\' => '_',
            c if c.is_control() => '_',
            c => c,
        })
        .collect();
    match c.as_str() {
        "" | "." | ".." => "_".into(),
        _ => c,
    }
}

impl<W: Write + Send> Target for ZipStream<W> {
    type Account = String;
    type Folder = ZipFolder;

    fn caps(&self) -> Caps {
        super::mbox_stream::STREAM_CAPS
    }

    fn open_account(&self, info: &AccountInfo) -> Result<String> {
        let dir = self.places.claim(&component(&info.account.name), "/");
        Ok(dir.trim_end_matches('/').to_string())
    }

    fn open_folder(&self, account: &String, info: &FolderInfo) -> Result<ZipFolder> {
        let parts: Vec<String> = (folder_parts(info.name, Tree::Eml).iter())
            .map(|p| component(&String::from_utf8_lossy(p)))
            .collect();
        // `<account>/Archive/2023/`, or as an mbox the entry `<account>/Archive/2023.mbox`.
        let (end, keywords) = match self.mboxes {
            true => (".mbox", folder_keywords(info)),
            false => ("/", Vec::new()),
        };
        let dir = self.places.folder(account, &parts, end);
        Ok(ZipFolder {
            dir,
            names: Mutex::new(EmlNames::new()),
            entries: Mutex::new(Vec::new()),
            number: (self.folders).fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            keywords,
            started: Default::default(),
        })
    }

    fn write(&self, folder: &ZipFolder, msg: &Message) -> Result<Outcome> {
        if self.mboxes {
            return self.write_mbox(folder, msg);
        }
        let name = crate::repo::lock(&folder.names).name(msg.meta.internal_date.secs, msg.data);
        let path = format!("{}{name}", folder.dir);
        self.add(&path, msg.data, msg.meta.internal_date.secs)
            .map_err(|e| Error::not_restored(path, e.to_string()))?;
        crate::repo::lock(&folder.entries).push(SidecarEntry {
            name: name.into_bytes(),
            meta: mail_meta(msg.meta),
        });
        Ok(Outcome::Written {
            bytes: msg.data.len() as u64,
        })
    }

    fn finish_folder(&self, folder: ZipFolder, failures: &super::RestoreFailures) {
        if self.mboxes {
            // A folder without messages is an empty mbox: the tree keeps it.
            if !folder.started.load(std::sync::atomic::Ordering::Relaxed) {
                if let Err(e) = self.mbox_of(&mut self.zip(), &folder) {
                    failures.add(folder.dir, e.to_string());
                }
            }
            return;
        }
        let entries = (folder.entries.into_inner()).unwrap_or_else(|p| p.into_inner());
        if entries.is_empty() {
            return;
        }
        let sidecar = Sidecar { entries };
        let path = format!("{}{}", folder.dir, crate::mail::eml::SIDECAR);
        if let Err(e) = self.add(&path, &sidecar.to_bytes(), crate::now_unix()) {
            failures.add(path, e.to_string());
        }
    }

    fn item(&self, folder: &ZipFolder, item: Item) -> String {
        let sep = if self.mboxes { ": " } else { "" };
        match item {
            Item::Message(e) => format!("{}{sep}{}", folder.dir, String::from_utf8_lossy(&e.key)),
            Item::File(name) => format!("{}{sep}{}", folder.dir, String::from_utf8_lossy(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_are_safe_components() {
        assert_eq!(component("alice@example.org"), "alice@example.org");
        assert_eq!(component(".."), "_");
        assert_eq!(component("a/../b"), "a_.._b");
        assert_eq!(component("x\u{1b}y"), "x_y");
        assert_eq!(component(""), "_");
    }

    #[test]
    fn places_that_differ_only_in_case_are_told_apart() {
        let p = Places::default();
        assert_eq!(p.claim("a/Work", "/"), "a/Work/");
        assert_eq!(p.claim("a/work", "/"), "a/work (2)/");
        assert_eq!(p.claim("a/WORK", "/"), "a/WORK (3)/");
        assert_eq!(p.claim("a/work", ".mbox"), "a/work.mbox");
        assert_eq!(p.claim("a/Work", ".mbox"), "a/Work (2).mbox");
        assert_eq!(p.claim("b/work", "/"), "b/work/");
    }

    #[test]
    fn a_subfolder_follows_its_folder_told_apart() {
        let p = Places::default();
        let f = |parts: &[&str], end| {
            let parts: Vec<String> = parts.iter().map(|s| s.to_string()).collect();
            p.folder("a", &parts, end)
        };
        assert_eq!(f(&["Work"], "/"), "a/Work/");
        assert_eq!(f(&["work"], "/"), "a/work (2)/");
        assert_eq!(f(&["work", "2023"], "/"), "a/work (2)/2023/");
        assert_eq!(f(&["work", "2023", "Q1"], "/"), "a/work (2)/2023/Q1/");
        assert_eq!(f(&["Work", "2023"], "/"), "a/Work/2023/");
        // A level that is no folder itself, below one told apart, as an mbox.
        assert_eq!(f(&["WORK"], ".mbox"), "a/WORK.mbox");
        assert_eq!(f(&["work", "x", "y"], ".mbox"), "a/work (2)/x/y.mbox");
    }

    #[test]
    fn times_before_1980_are_zips_first_day() {
        let t = zip_time(0);
        assert_eq!((t.year(), t.month(), t.day()), (1980, 1, 1));
        let t = zip_time(1_704_103_200); // 2024-01-01 10:00:00 UTC
        assert_eq!((t.year(), t.month(), t.hour()), (2024, 1, 10));
    }
}
