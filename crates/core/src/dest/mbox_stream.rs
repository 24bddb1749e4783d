//! One folder as an mbox stream (the web UI's "download as mbox"): the restore pipeline
//! into any [`Write`] instead of a file tree, with the mbox target's codec and metadata
//! ([`super::mbox`]: `Status:`, `X-Status:`, `X-Keywords:`, the folder's keywords in the
//! first message's `X-IMAPbase:`, the internal date in the `From ` line), its messages in
//! arrival order. [`MboxStream::new`] takes a single folder: a selection of exactly one
//! ([`crate::restore::Selection::exact_folders`]); [`MboxStream::many`] takes the
//! folders into one mbox (the messages a search found: one lane, so one folder's messages
//! after the other's), without the folder-wide `X-IMAPbase:` (each message still names
//! its keywords).
//!
//! A write that fails (the client went away) ends the restore. A message an mbox cannot
//! give back exactly ([`crate::mail::Written::lossy`]) is written whole and logged, as any
//! mbox exporter would write it; its exact bytes are one `.eml` download away.

use super::mbox::{folder_keywords, mail_meta, BATCH_BYTES, BATCH_MESSAGES};
use super::{AccountInfo, Caps, FolderInfo, Item, Message, Order, Outcome, Target};
use crate::error::{Error, Result};
use crate::mail::MboxWriter;
use std::io::Write;
use std::sync::Mutex;

/// An mbox written to `W` as the restore gives it messages.
pub struct MboxStream<W: Write + Send> {
    writer: Mutex<State<W>>,
    /// Folders one after the other ([`MboxStream::many`]), not one alone.
    many: bool,
}

enum State<W: Write> {
    /// No folder opened yet.
    Ready(W),
    Writing(MboxWriter<W>),
    /// Finished, or failed.
    Done,
}

impl<W: Write + Send> MboxStream<W> {
    /// A stream of one folder into `out`.
    pub fn new(out: W) -> MboxStream<W> {
        MboxStream {
            writer: Mutex::new(State::Ready(out)),
            many: false,
        }
    }

    /// A stream of any number of folders, one after the other, into `out`.
    pub fn many(out: W) -> MboxStream<W> {
        MboxStream {
            many: true,
            ..MboxStream::new(out)
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<W>> {
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a target writing one stream takes (this mbox, [`super::zip_stream`]'s zip): a
/// folder at a time, in arrival order, by one thread, in the mbox target's batches.
pub(crate) const STREAM_CAPS: Caps = Caps {
    order: Order::Folder,
    jobs: 1,
    open_folders: 1,
    accounts: 1,
    lanes: 1,
    batch_messages: BATCH_MESSAGES,
    batch_bytes: BATCH_BYTES,
    lane_messages: 0,
    folder_files: false,
    home: false,
    store: false,
    keywords: true,
    hard_links: false,
    parts: false,
};

/// The folder being streamed: its name, for the report.
pub struct StreamFolder(String);

impl<W: Write + Send> Target for MboxStream<W> {
    type Account = String;
    type Folder = StreamFolder;

    fn caps(&self) -> Caps {
        STREAM_CAPS
    }

    fn open_account(&self, info: &AccountInfo) -> Result<String> {
        Ok(info.account.name.clone())
    }

    fn open_folder(&self, account: &String, info: &FolderInfo) -> Result<StreamFolder> {
        let name = format!("{account}: {}", info.name);
        let mut state = self.state();
        if self.many && matches!(*state, State::Writing(_)) {
            // One stream for every folder.
            return Ok(StreamFolder(name));
        }
        let State::Ready(out) = std::mem::replace(&mut *state, State::Done) else {
            return Err(Error::not_restored(
                name,
                "an mbox download holds one folder, and another was opened first",
            ));
        };
        let writer = match self.many {
            true => MboxWriter::new(out),
            false => MboxWriter::new(out)
                .declare_keywords(1, &folder_keywords(info))
                .map_err(|e| Error::not_restored(name.clone(), e.to_string()))?,
        };
        *state = State::Writing(writer);
        Ok(StreamFolder(name))
    }

    fn write(&self, folder: &StreamFolder, msg: &Message) -> Result<Outcome> {
        let mut done = [None];
        self.write_batch(folder, std::slice::from_ref(msg), &mut done)?;
        let [d] = done;
        d.unwrap_or_else(|| Err(Error::Internal("no outcome".into())))
    }

    fn write_batch(
        &self,
        folder: &StreamFolder,
        msgs: &[Message],
        done: &mut [Option<Result<Outcome>>],
    ) -> Result<()> {
        let mut state = self.state();
        let State::Writing(w) = &mut *state else {
            return Err(Error::Internal(format!("{}: not open", folder.0)));
        };
        for (m, d) in msgs.iter().zip(done) {
            let key = String::from_utf8_lossy(&m.entry.key);
            match w.write(m.data, &mail_meta(m.meta), None) {
                Ok(written) => {
                    if written.lossy {
                        tracing::warn!(
                            "{}: message {key}: an mbox reader does not read it back exactly",
                            folder.0
                        );
                    }
                    *d = Some(Ok(Outcome::Written { bytes: written.len }));
                }
                // The stream is broken: nothing more can go into it.
                Err(crate::mail::MailError::Io { source, .. }) => {
                    *state = State::Done;
                    return Err(Error::not_restored(folder.0.clone(), source.to_string()));
                }
                Err(e) => {
                    let what = format!("{}: message {key}", folder.0);
                    *d = Some(Err(Error::not_restored(what, e.to_string())));
                }
            }
        }
        Ok(())
    }

    fn finish_folder(&self, folder: StreamFolder, failures: &super::RestoreFailures) {
        let mut state = self.state();
        if self.many {
            // The stream stays open for the other folders; what is written goes on.
            if let State::Writing(w) = &mut *state {
                if let Err(e) = w.flush() {
                    failures.add(folder.0, e.to_string());
                }
            }
            return;
        }
        if let State::Writing(w) = std::mem::replace(&mut *state, State::Done) {
            if let Err(e) = w.finish() {
                failures.add(folder.0, e.to_string());
            }
        }
    }

    fn item(&self, folder: &StreamFolder, item: Item) -> String {
        match item {
            Item::Message(e) => {
                format!("{}: message {}", folder.0, String::from_utf8_lossy(&e.key))
            }
            Item::File(name) => format!("{}: {}", folder.0, String::from_utf8_lossy(name)),
        }
    }
}
