//! Folders as a zip of `.eml` files, streamed (the web UI's "download as zip"): the
//! restore pipeline into any [`Write`], each message a file of its bytes untouched, named
//! and laid out as the EML target lays out a tree ([`super::eml`]: `<account>/INBOX/`,
//! `<account>/Archive/2023/`, names that sort by date and stay unique), with each
//! folder's flags, keywords and dates in its sidecar ([`crate::mail::eml::SIDECAR`]), so
//! that `restore --target eml:` and Python's `zipfile` read the same thing. Entries are
//! deflated; their time is the message's internal date (UTC, to the two seconds zip
//! keeps).
//!
//! The `zip` crate writes the archive (its streaming writer, with data descriptors: no
//! seeking back). Entry names are made of safe components only: an archive never holds
//! `..`, an absolute path or a control character, whatever the folder names.

use super::mbox::{folder_parts, mail_meta};
use super::{AccountInfo, Caps, FolderInfo, Item, Message, Outcome, Target};
use crate::error::{Error, Result};
use crate::mail::layout::Tree;
use crate::mail::{EmlNames, Sidecar, SidecarEntry};
use std::io::Write;
use std::sync::{Mutex, MutexGuard};
use zip::write::{SimpleFileOptions, StreamWriter};
use zip::ZipWriter;

/// A zip of `.eml` files written to `W` as the restore gives it messages.
pub struct ZipStream<W: Write + Send> {
    zip: Mutex<Option<ZipWriter<StreamWriter<W>>>>,
}

/// A folder being written: where its files go in the archive, their names, and what its
/// sidecar will say.
pub struct ZipFolder {
    /// `<account>/<folder>/`, shown in failures.
    dir: String,
    names: Mutex<EmlNames>,
    entries: Mutex<Vec<SidecarEntry>>,
}

impl<W: Write + Send> ZipStream<W> {
    pub fn new(out: W) -> ZipStream<W> {
        ZipStream {
            zip: Mutex::new(Some(ZipWriter::new_stream(out))),
        }
    }

    fn zip(&self) -> MutexGuard<'_, Option<ZipWriter<StreamWriter<W>>>> {
        self.zip
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Writes the archive's central directory: the download is complete. A failure (the
    /// client went away) is the caller's to report.
    pub fn finish(&self) -> Result<()> {
        match self.zip().take() {
            Some(z) => z
                .finish()
                .map_err(std::io::Error::other)
                .and_then(|mut w| w.flush())
                .map_err(|e| Error::not_restored("the zip download", e.to_string())),
            None => Err(Error::not_restored(
                "the zip download",
                "broken before its end",
            )),
        }
    }

    /// Adds file `name` of `bytes`, dated `secs`; a failure breaks the archive.
    fn add(&self, name: &str, bytes: &[u8], secs: i64) -> std::io::Result<()> {
        let mut guard = self.zip();
        let Some(z) = guard.as_mut() else {
            return Err(std::io::Error::other("the archive is broken"));
        };
        let opts = SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated)
            .compression_level(Some(1))
            .last_modified_time(zip_time(secs))
            .unix_permissions(0o600);
        let written = z
            .start_file(name, opts)
            .map_err(std::io::Error::other)
            .and_then(|()| z.write_all(bytes));
        if written.is_err() {
            *guard = None;
        }
        written
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
        Ok(component(&info.account.name))
    }

    fn open_folder(&self, account: &String, info: &FolderInfo) -> Result<ZipFolder> {
        let mut dir = format!("{account}/");
        for p in folder_parts(info.name, Tree::Eml) {
            dir.push_str(&component(&String::from_utf8_lossy(&p)));
            dir.push('/');
        }
        Ok(ZipFolder {
            dir,
            names: Mutex::new(EmlNames::new()),
            entries: Mutex::new(Vec::new()),
        })
    }

    fn write(&self, folder: &ZipFolder, msg: &Message) -> Result<Outcome> {
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
        match item {
            Item::Message(e) => format!("{}{}", folder.dir, String::from_utf8_lossy(&e.key)),
            Item::File(name) => format!("{}{}", folder.dir, String::from_utf8_lossy(name)),
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
    fn times_before_1980_are_zips_first_day() {
        let t = zip_time(0);
        assert_eq!((t.year(), t.month(), t.day()), (1980, 1, 1));
        let t = zip_time(1_704_103_200); // 2024-01-01 10:00:00 UTC
        assert_eq!((t.year(), t.month(), t.hour()), (2024, 1, 10));
    }
}
