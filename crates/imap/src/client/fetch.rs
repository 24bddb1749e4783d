//! Reading mail: UID FETCH streamed one message at a time (bounded memory),
//! in batches; flag changes since a MODSEQ (CONDSTORE / QRESYNC); UID SEARCH
//! (ESEARCH when offered) for new UIDs and skip-existing checks.

use super::session::Session;
use crate::error::{Error, Result};
use crate::proto::date::InternalDate;
use crate::proto::response::{Fetch, Untagged};
use crate::proto::seqset::SeqSet;

/// What to fetch for each message (the UID always comes along).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FetchQuery {
    /// FLAGS (system flags and keywords).
    pub flags: bool,
    /// INTERNALDATE.
    pub internal_date: bool,
    /// RFC822.SIZE.
    pub size: bool,
    /// MODSEQ (needs CONDSTORE).
    pub modseq: bool,
    /// The whole message, `BODY.PEEK[]` (does not set `\Seen`).
    pub body: bool,
    /// Header fields, `BODY.PEEK[HEADER.FIELDS (...)]`.
    pub header_fields: Vec<String>,
    /// Only messages whose MODSEQ is above this (CHANGEDSINCE, CONDSTORE).
    pub changed_since: Option<u64>,
}

impl FetchQuery {
    /// Everything a backup stores: flags, date, size, body.
    pub fn full() -> Self {
        FetchQuery {
            flags: true,
            internal_date: true,
            size: true,
            body: true,
            ..FetchQuery::default()
        }
    }

    /// FLAGS only (a flag sweep).
    pub fn flags() -> Self {
        FetchQuery {
            flags: true,
            ..FetchQuery::default()
        }
    }

    /// Size, date and Message-ID: enough to tell whether a message is
    /// already in a folder (skip-existing on restore).
    pub fn fingerprint() -> Self {
        FetchQuery {
            internal_date: true,
            size: true,
            header_fields: vec!["Message-ID".into()],
            ..FetchQuery::default()
        }
    }
}

/// One fetched message, borrowed from the read buffer: copy what you keep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedMessage<'a> {
    /// UID.
    pub uid: u32,
    /// FLAGS as sent (may include `\Recent`, which no one can restore).
    pub flags: Option<Vec<&'a str>>,
    /// INTERNALDATE.
    pub internal_date: Option<InternalDate>,
    /// RFC822.SIZE (of the CRLF form).
    pub size: Option<u64>,
    /// MODSEQ.
    pub modseq: Option<u64>,
    /// The message (CRLF line endings as the server sends them).
    pub body: Option<&'a [u8]>,
    /// The requested header fields.
    pub header: Option<&'a [u8]>,
}

impl<'a> FetchedMessage<'a> {
    fn from_fetch(f: &'a Fetch<'a>) -> Option<Self> {
        Some(FetchedMessage {
            uid: f.uid?,
            flags: f.flags.clone(),
            internal_date: f.internal_date,
            size: f.size,
            modseq: f.modseq,
            body: f.body(),
            header: f.section("BODY[HEADER.FIELDS"),
        })
    }

    /// The Message-ID from the fetched header fields (unfolded, trimmed,
    /// angle brackets kept).
    pub fn message_id(&self) -> Option<String> {
        header_value(self.header?, "Message-ID")
    }
}

/// The value of header `name` in a header block (unfolded and trimmed).
pub fn header_value(header: &[u8], name: &str) -> Option<String> {
    let text = String::from_utf8_lossy(header);
    let mut value: Option<String> = None;
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if let Some(v) = value.as_mut() {
            if line.starts_with(' ') || line.starts_with('\t') {
                if !v.is_empty() {
                    v.push(' ');
                }
                v.push_str(line.trim());
                continue;
            }
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.trim_end().eq_ignore_ascii_case(name) {
                value = Some(v.trim().to_string());
            }
        }
    }
    value.filter(|v| !v.is_empty())
}

/// A UID SEARCH criterion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SearchKey {
    /// ALL
    All,
    /// UID set.
    Uid(SeqSet),
    /// HEADER name value (substring match; the server decides case).
    Header {
        /// Header field name.
        name: String,
        /// Substring to look for.
        value: String,
    },
    /// MODSEQ n: changed at or after n (CONDSTORE).
    ModSeq(u64),
    /// NOT key.
    Not(Box<SearchKey>),
    /// All keys must match.
    And(Vec<SearchKey>),
}

impl SearchKey {
    fn non_ascii(&self) -> bool {
        match self {
            SearchKey::Header { name, value } => !name.is_ascii() || !value.is_ascii(),
            SearchKey::Not(k) => k.non_ascii(),
            SearchKey::And(ks) => ks.iter().any(SearchKey::non_ascii),
            _ => false,
        }
    }

    fn encode(&self, b: &mut crate::proto::command::CommandBuilder<'_>) {
        match self {
            SearchKey::All => {
                b.raw(b"ALL");
            }
            SearchKey::Uid(s) => {
                b.raw(b"UID ").raw(s.to_string().as_bytes());
            }
            SearchKey::Header { name, value } => {
                b.raw(b"HEADER ")
                    .astring_owned(name.as_bytes().to_vec())
                    .sp()
                    .astring_owned(value.as_bytes().to_vec());
            }
            SearchKey::ModSeq(n) => {
                b.raw(b"MODSEQ ").number(*n);
            }
            SearchKey::Not(k) => {
                b.raw(b"NOT ");
                k.encode(b);
            }
            SearchKey::And(ks) => {
                b.raw(b"(");
                for (i, k) in ks.iter().enumerate() {
                    if i > 0 {
                        b.sp();
                    }
                    k.encode(b);
                }
                b.raw(b")");
            }
        }
    }
}

/// Flag changes reported by [`Session::fetch_changes`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// UIDs expunged since the MODSEQ (QRESYNC `VANISHED (EARLIER)`);
    /// `None` when the server cannot tell (CONDSTORE only): compare a
    /// `UID SEARCH ALL` with the known UIDs instead.
    pub vanished: Option<SeqSet>,
}

/// How [`Session::uid_store`] changes flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    /// `+FLAGS.SILENT`
    Add,
    /// `-FLAGS.SILENT`
    Remove,
    /// `FLAGS.SILENT`
    Replace,
}

/// Largest UID set expanded from a search result.
const MAX_SEARCH_RESULTS: usize = 100_000_000;

impl Session {
    /// `UID FETCH uids (items)` in the selected folder. Each message goes to
    /// `on_message` as soon as it is read; only one is in memory at a time.
    /// Messages outside `uids` (a server's `*` quirk, unsolicited updates)
    /// are not passed on. If `on_message` fails, the rest of the answer is
    /// read and dropped (the session stays usable) and its error returned.
    pub fn fetch<E, F>(
        &mut self,
        uids: &SeqSet,
        query: &FetchQuery,
        mut on_message: F,
    ) -> Result<(), E>
    where
        E: From<Error>,
        F: FnMut(FetchedMessage<'_>) -> Result<(), E>,
    {
        if uids.is_empty() {
            return Ok(());
        }
        let folder = self.selected.clone();
        let mut b = self.command("UID FETCH");
        b.sp().raw(uids.to_string().as_bytes()).raw(b" (UID");
        if query.flags {
            b.raw(b" FLAGS");
        }
        if query.internal_date {
            b.raw(b" INTERNALDATE");
        }
        if query.size {
            b.raw(b" RFC822.SIZE");
        }
        if query.modseq {
            b.raw(b" MODSEQ");
        }
        if !query.header_fields.is_empty() {
            b.raw(b" BODY.PEEK[HEADER.FIELDS (");
            for (i, h) in query.header_fields.iter().enumerate() {
                if i > 0 {
                    b.sp();
                }
                b.astring_owned(h.as_bytes().to_vec());
            }
            b.raw(b")]");
        }
        if query.body {
            b.raw(b" BODY.PEEK[]");
        }
        b.raw(b")");
        if let Some(m) = query.changed_since {
            b.raw(b" (CHANGEDSINCE ").number(m).raw(b")");
        }
        let cmd = b.finish();
        let mut user_err: Option<E> = None;
        let result = self.run_ok(cmd, "UID FETCH", folder.as_deref(), &mut |u| {
            if let Untagged::Fetch(f) = u {
                if user_err.is_none() {
                    if let Some(m) = FetchedMessage::from_fetch(&f) {
                        if uids.contains(m.uid) {
                            if let Err(e) = on_message(m) {
                                user_err = Some(e);
                            }
                        }
                    }
                }
            }
            Ok(())
        });
        self.conn.shrink();
        result?;
        match user_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// [`fetch`](Self::fetch) over `uids` in commands of at most `batch`
    /// UIDs, so the server never builds one huge answer and a failure loses
    /// at most one batch.
    pub fn fetch_batched<E, F>(
        &mut self,
        uids: &[u32],
        batch: usize,
        query: &FetchQuery,
        mut on_message: F,
    ) -> Result<(), E>
    where
        E: From<Error>,
        F: FnMut(FetchedMessage<'_>) -> Result<(), E>,
    {
        for chunk in uids.chunks(batch.max(1)) {
            self.fetch(&SeqSet::from_ids(chunk), query, &mut on_message)?;
        }
        Ok(())
    }

    /// Flags of messages changed since `modseq` (CONDSTORE), and with
    /// QRESYNC the UIDs expunged since then. Needs a folder selected with
    /// CONDSTORE (which [`select`](Self::select) does when offered).
    pub fn fetch_changes<E, F>(&mut self, modseq: u64, mut on_message: F) -> Result<Changes, E>
    where
        E: From<Error>,
        F: FnMut(FetchedMessage<'_>) -> Result<(), E>,
    {
        if !self.caps.has("CONDSTORE") {
            return Err(E::from(Error::Unsupported {
                server: self.server.clone(),
                what: "CONDSTORE (needed for CHANGEDSINCE; sweep FLAGS instead)".into(),
            }));
        }
        let qresync = self.qresync_enabled;
        let folder = self.selected.clone();
        let mut b = self.command("UID FETCH");
        b.raw(b" 1:* (UID FLAGS MODSEQ) (CHANGEDSINCE ")
            .number(modseq);
        if qresync {
            b.raw(b" VANISHED");
        }
        b.raw(b")");
        let cmd = b.finish();
        let mut vanished = SeqSet::new();
        let mut user_err: Option<E> = None;
        self.run_ok(cmd, "UID FETCH", folder.as_deref(), &mut |u| {
            match u {
                Untagged::Fetch(f) if user_err.is_none() => {
                    if let Some(m) = FetchedMessage::from_fetch(&f) {
                        if let Err(e) = on_message(m) {
                            user_err = Some(e);
                        }
                    }
                }
                Untagged::Vanished { uids, .. } => {
                    for &(a, b) in uids.ranges() {
                        vanished.push_range(a, b);
                    }
                }
                _ => {}
            }
            Ok(())
        })?;
        if let Some(e) = user_err {
            return Err(e);
        }
        Ok(Changes {
            vanished: qresync.then_some(vanished),
        })
    }

    /// UID SEARCH in the selected folder; UIDs ascending. Uses ESEARCH
    /// (`RETURN (ALL)`, a compact answer) when offered.
    pub fn uid_search(&mut self, key: &SearchKey) -> Result<Vec<u32>> {
        let folder = self.selected.clone();
        let esearch = self.caps.has("ESEARCH");
        let mut b = self.command("UID SEARCH");
        if esearch {
            b.raw(b" RETURN (ALL)");
        }
        if key.non_ascii() {
            b.raw(b" CHARSET UTF-8");
        }
        b.sp();
        key.encode(&mut b);
        let cmd = b.finish();
        let tag = cmd.tag.clone();
        let mut ids: Vec<u32> = Vec::new();
        let mut too_many = false;
        self.run_ok(cmd, "UID SEARCH", folder.as_deref(), &mut |u| {
            match u {
                Untagged::Search { ids: found, .. } => ids.extend(found),
                Untagged::ESearch(e)
                    if e.tag.is_none() || e.tag.as_deref() == Some(tag.as_str()) =>
                {
                    if let Some(all) = e.all {
                        match all.expand(MAX_SEARCH_RESULTS) {
                            Some(v) => ids.extend(v),
                            None => too_many = true,
                        }
                    }
                }
                _ => {}
            }
            Ok(())
        })?;
        if too_many {
            return Err(self.protocol_error("search result too large".into()));
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// UID STORE: changes flags of `uids` in the selected folder (silently).
    pub fn uid_store<S: AsRef<str>>(
        &mut self,
        uids: &SeqSet,
        mode: StoreMode,
        flags: &[S],
    ) -> Result<()> {
        let folder = self.selected.clone();
        let mut b = self.command("UID STORE");
        b.sp().raw(uids.to_string().as_bytes()).raw(match mode {
            StoreMode::Add => b" +FLAGS.SILENT ",
            StoreMode::Remove => b" -FLAGS.SILENT ",
            StoreMode::Replace => b" FLAGS.SILENT ",
        });
        if let Err(e) = b.flag_list(flags) {
            return Err(Error::InvalidFlag {
                account: self.account.clone(),
                flag: e.value,
                reason: e.reason,
            });
        }
        let cmd = b.finish();
        self.run_ok(cmd, "UID STORE", folder.as_deref(), &mut |_| Ok(()))?;
        Ok(())
    }

    /// EXPUNGE: removes the messages flagged `\Deleted` from the selected folder.
    pub fn expunge(&mut self) -> Result<()> {
        let folder = self.selected.clone();
        let cmd = self.command("EXPUNGE").finish();
        self.run_ok(cmd, "EXPUNGE", folder.as_deref(), &mut |_| Ok(()))?;
        Ok(())
    }

    /// UIDs at or above `uidnext` (the messages new since a backup that saw
    /// `uidnext`), ascending.
    pub fn new_uids(&mut self, uidnext: u32) -> Result<Vec<u32>> {
        let mut v = self.uid_search(&SearchKey::Uid(SeqSet::starting_at(uidnext.max(1))))?;
        v.retain(|&u| u >= uidnext);
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values() {
        let h = b"Message-ID:\r\n <abc@example.org>\r\nX: y\r\n\r\n";
        assert_eq!(
            header_value(h, "message-id").as_deref(),
            Some("<abc@example.org>")
        );
        assert_eq!(header_value(b"\r\n", "Message-ID"), None);
        assert_eq!(
            header_value(b"message-id: <a@b>\n", "Message-ID").as_deref(),
            Some("<a@b>")
        );
    }

    #[test]
    fn search_encoding() {
        use crate::proto::command::{CommandBuilder, LiteralMode};
        let key = SearchKey::And(vec![
            SearchKey::Uid(SeqSet::starting_at(10)),
            SearchKey::Not(Box::new(SearchKey::Header {
                name: "Message-ID".into(),
                value: "<a b@c>".into(),
            })),
        ]);
        let mut b = CommandBuilder::new("A1", "UID SEARCH", LiteralMode::NonSync);
        b.sp();
        key.encode(&mut b);
        assert_eq!(
            b.finish().transcript(),
            b"A1 UID SEARCH (UID 10:* NOT HEADER Message-ID \"<a b@c>\")\r\n"
        );
    }
}
