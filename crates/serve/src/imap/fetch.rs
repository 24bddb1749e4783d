//! FETCH over an opened [`Folder`]: which messages a sequence set names, and the data
//! items of one message (flags, dates, sizes, the whole message or its header, some header
//! fields, the text, partial ranges).
//!
//! Bodies are sent exactly as the backup stored them (bare LF line endings included),
//! except that a NUL byte, which an IMAP literal cannot carry (RFC 3501 `CHAR8`), is sent
//! as 0x80, as Dovecot does.

use super::headers::HeaderCache;
use super::view::{Folder, Message};
use crate::state::Live;
use chrono::{FixedOffset, Offset, TimeZone};
use imap_codec::imap_types::core::{AString, IString, Literal, NString, Vec1};
use imap_codec::imap_types::datetime::DateTime;
use imap_codec::imap_types::fetch::{MessageDataItem, MessageDataItemName, Section};
use imap_codec::imap_types::flag::{Flag, FlagFetch};
use imap_codec::imap_types::response::Data;
use imap_codec::imap_types::sequence::{SeqOrUid, Sequence, SequenceSet};
use mailvault_core::mail::header::{fields_where, header_end, listed};
use std::num::NonZeroU32;
use std::sync::Arc;

/// Why an item or key cannot be answered (the text of a `NO`).
pub type Refusal = String;

/// Whether `n` is in `set`, `*` being `largest`.
pub fn in_set(set: &SequenceSet, n: u32, largest: u32) -> bool {
    let v = |s: &SeqOrUid| match s {
        SeqOrUid::Value(x) => x.get(),
        SeqOrUid::Asterisk => largest.max(1),
    };
    set.0.as_ref().iter().any(|s| match s {
        Sequence::Single(a) => v(a) == n,
        Sequence::Range(a, b) => {
            let (lo, hi) = (v(a).min(v(b)), v(a).max(v(b)));
            (lo..=hi).contains(&n)
        }
    })
}

/// The indices of the messages `set` names, by UID (`uid`) or by sequence number, in
/// order: found range by range (a binary search among the UIDs, which ascend with the
/// sequence numbers), so that fetching one message of a folder of 100,000 costs no walk
/// over the folder (mbsync fetches each message with a command of its own).
pub fn selected(f: &Folder, set: &SequenceSet, uid: bool) -> Vec<usize> {
    let n = f.messages.len();
    let largest = match uid {
        true => f.last_uid(),
        false => n as u32,
    };
    let v = |s: &SeqOrUid| match s {
        SeqOrUid::Value(x) => x.get(),
        SeqOrUid::Asterisk => largest.max(1),
    };
    // The indices from the first whose number is >= lo to the last whose number is <= hi.
    let span = |lo: u32, hi: u32| -> std::ops::Range<usize> {
        match uid {
            true => {
                let start = f.messages.partition_point(|m| m.uid < lo);
                let end = f.messages.partition_point(|m| m.uid <= hi);
                start..end.max(start)
            }
            false => (lo as usize).saturating_sub(1).min(n)..(hi as usize).min(n),
        }
    };
    let mut out: Vec<usize> = Vec::new();
    for s in set.0.as_ref() {
        let (a, b) = match s {
            Sequence::Single(a) => (v(a), v(a)),
            Sequence::Range(a, b) => (v(a).min(v(b)), v(a).max(v(b))),
        };
        out.extend(span(a, b));
    }
    out.sort_unstable();
    out.dedup();
    out
}

/// Refuses, before anything is answered, the items the view does not answer yet.
pub fn check_items(items: &[MessageDataItemName<'_>]) -> Result<(), Refusal> {
    for it in items {
        let what = match it {
            MessageDataItemName::Binary { .. } | MessageDataItemName::BinarySize { .. } => "BINARY",
            _ => continue,
        };
        return Err(format!("{what} is not in the IMAP view of the backups yet"));
    }
    Ok(())
}

/// What of a message's bytes the items of a FETCH (or the keys of a SEARCH) need.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Needs {
    /// None (UID, FLAGS, INTERNALDATE, RFC822.SIZE).
    Nothing,
    /// Only header fields the header cache keeps (ENVELOPE, `BODY[HEADER.FIELDS (...)]`
    /// of those fields): answered from [`HeaderCache`].
    Listed,
    /// The whole message.
    Whole,
}

/// What `items` need of each message's bytes.
pub fn needs(items: &[MessageDataItemName<'_>]) -> Needs {
    let mut n = Needs::Nothing;
    for i in items {
        match i {
            MessageDataItemName::Envelope => n = Needs::Listed,
            MessageDataItemName::BodyExt {
                section: Some(Section::HeaderFields(None, names)),
                ..
            } if names.as_ref().iter().all(|f| listed(f.as_ref())) => n = Needs::Listed,
            MessageDataItemName::BodyExt { .. }
            | MessageDataItemName::Rfc822
            | MessageDataItemName::Rfc822Header
            | MessageDataItemName::Rfc822Text
            | MessageDataItemName::Body
            | MessageDataItemName::BodyStructure => return Needs::Whole,
            _ => {}
        }
    }
    n
}

/// What `needs` asks of message `m`: nothing, its compact header, or its bytes. The
/// compact header comes from the header file of the search index's split that holds the
/// message (sealed in the repository, built when it was indexed); for a message no split
/// holds, from the header cache, or read and kept there.
pub fn bytes(
    live: &Live,
    headers: &HeaderCache,
    m: &Message,
    needs: Needs,
) -> mailvault_core::Result<Option<Arc<[u8]>>> {
    use super::headers::Origin;
    let read = || crate::read::entry_bytes(live.repo(), &m.entry);
    let given = |from, h| {
        headers.given(from);
        Some(h)
    };
    Ok(match needs {
        Needs::Nothing => None,
        Needs::Listed => match live.searcher().compact_header(&m.entry.hash) {
            Some(h) => given(Origin::Index, h.into()),
            None => match headers.get(&m.entry.hash) {
                Some(h) => given(Origin::Cache, h),
                None => given(Origin::Read, headers.put(m.entry.hash, &read()?)),
            },
        },
        Needs::Whole => Some(read()?.into()),
    })
}

/// Answer bytes one part of a FETCH holds before it is sent.
const PART_BYTES: usize = 2 << 20;
/// Messages one part answers at most: each answer costs more in imap-next's queue than
/// its bytes (a part of 32,000 `FETCH (UID)` answers took `serve` 50 MB higher).
const PART_MESSAGES: usize = 1000;

/// A FETCH answered in parts ([`Pending::part`]), each sent before the next is made, so
/// that a client's `FETCH 1:*` of a folder of 100,000 messages holds one part of its
/// answers in memory, not all of them.
pub struct Pending {
    /// The FETCH command's tag.
    pub tag: imap_codec::imap_types::core::Tag<'static>,
    folder: Arc<Folder>,
    /// The messages still to answer, as indices in the folder, in order.
    todo: std::vec::IntoIter<usize>,
    items: Vec<MessageDataItemName<'static>>,
    needs: Needs,
}

impl Pending {
    /// A FETCH of `items` of the messages of `folder` that `set` names (by UID when `uid`).
    pub fn new(
        tag: imap_codec::imap_types::core::Tag<'static>,
        folder: Arc<Folder>,
        set: &SequenceSet,
        uid: bool,
        items: Vec<MessageDataItemName<'static>>,
    ) -> Pending {
        let todo = selected(&folder, set, uid).into_iter();
        Pending {
            tag,
            needs: needs(&items),
            folder,
            todo,
            items,
        }
    }

    /// The answers of the next part (about [`PART_BYTES`], at most [`PART_MESSAGES`]), and
    /// whether messages are left
    /// (`Ok(true)`); `Err`: a message could not be read (the answers before it are given).
    pub fn part(
        &mut self,
        live: &Live,
        headers: &HeaderCache,
    ) -> (Vec<Data<'static>>, Result<bool, Refusal>) {
        let mut out = Vec::new();
        let mut held = 0;
        while held < PART_BYTES && out.len() < PART_MESSAGES {
            let Some(i) = self.todo.next() else {
                return (out, Ok(false));
            };
            let m = &self.folder.messages[i];
            let raw = match bytes(live, headers, m, self.needs) {
                Ok(r) => r,
                Err(e) => return (out, Err(format!("cannot read message {}: {e}", i + 1))),
            };
            held += raw.as_ref().map_or(0, |r| r.len());
            let mut data = items(m, &self.items, raw.as_deref());
            data.extend(super::condstore::modseq_item(
                &self.items,
                self.folder.modseq,
            ));
            if let Ok(items) = Vec1::try_from(data) {
                out.push(Data::Fetch {
                    seq: seq_of(i),
                    items,
                });
            }
        }
        (out, Ok(self.todo.len() > 0))
    }
}

/// The IMAP flag of a name as [`Message::flags`] holds it (`None`: not an atom).
pub fn flag(name: &str) -> Option<Flag<'static>> {
    Flag::try_from(name)
        .ok()
        .map(bounded_static::IntoBoundedStatic::into_static)
}

/// The internal date of a message.
pub fn internal_date(m: &Message) -> DateTime {
    let utc: FixedOffset = chrono::Utc.fix();
    let t = (utc.timestamp_opt(m.entry.mtime.secs, 0).single())
        .and_then(|t| DateTime::try_from(t).ok());
    t.unwrap_or_else(|| DateTime::unvalidated(chrono::DateTime::UNIX_EPOCH.with_timezone(&utc)))
}

/// The data items `items` of message `m`; `raw` its bytes (its compact header for
/// [`Needs::Listed`]) when [`needs`] says they are needed.
pub fn items(
    m: &Message,
    items: &[MessageDataItemName<'static>],
    raw: Option<&[u8]>,
) -> Vec<MessageDataItem<'static>> {
    let raw = raw.unwrap_or_default();
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        out.push(match it {
            MessageDataItemName::Uid => MessageDataItem::Uid(nonzero(m.uid)),
            MessageDataItemName::Flags => MessageDataItem::Flags(
                (m.flags.iter())
                    .filter_map(|f| flag(f))
                    .map(FlagFetch::Flag)
                    .collect(),
            ),
            MessageDataItemName::InternalDate => MessageDataItem::InternalDate(internal_date(m)),
            MessageDataItemName::Rfc822Size => {
                MessageDataItem::Rfc822Size(m.entry.size.min(u32::MAX as u64) as u32)
            }
            MessageDataItemName::Rfc822 => MessageDataItem::Rfc822(nstring(raw)),
            MessageDataItemName::Body => MessageDataItem::Body(super::bodystructure::structure(
                raw,
                &super::mime::parse(raw),
                false,
            )),
            MessageDataItemName::BodyStructure => MessageDataItem::BodyStructure(
                super::bodystructure::structure(raw, &super::mime::parse(raw), true),
            ),
            MessageDataItemName::Envelope => {
                MessageDataItem::Envelope(super::envelope::envelope(&raw[..header_end(raw)]))
            }
            MessageDataItemName::Rfc822Header => {
                MessageDataItem::Rfc822Header(nstring(&raw[..header_end(raw)]))
            }
            MessageDataItemName::Rfc822Text => {
                MessageDataItem::Rfc822Text(nstring(&raw[header_end(raw)..]))
            }
            MessageDataItemName::BodyExt {
                section, partial, ..
            } => {
                let whole = section_bytes(raw, section.as_ref());
                let (origin, data) = match partial {
                    Some((a, b)) => {
                        let a = *a as usize;
                        let end = a.saturating_add(b.get() as usize).min(whole.len());
                        let part = whole.get(a.min(whole.len())..end).unwrap_or_default();
                        (Some(a as u32), part.to_vec())
                    }
                    None => (None, whole),
                };
                MessageDataItem::BodyExt {
                    section: section.clone(),
                    origin,
                    data: nstring(&data),
                }
            }
            // Refused by `check_items` before.
            _ => continue,
        });
    }
    out
}

/// The sequence number of the message at index `i`.
pub fn seq_of(i: usize) -> NonZeroU32 {
    nonzero((i as u32).saturating_add(1))
}

/// `n` (UIDs and sequence numbers are never 0; 0 would be 1).
pub fn nonzero(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN)
}

/// `data` as a literal (NUL bytes as 0x80: see the module's doc).
fn nstring(data: &[u8]) -> NString<'static> {
    let mut d = data.to_vec();
    for b in d.iter_mut().filter(|b| **b == 0) {
        *b = 0x80;
    }
    let lit = Literal::try_from(d).unwrap_or_else(|_| Literal::unvalidated(Vec::new()));
    NString(Some(IString::Literal(lit)))
}

/// The bytes of `section` (none: the whole message). A section of a part that is not
/// there, or HEADER/TEXT of a part that is not a `message/rfc822`, is empty.
fn section_bytes(raw: &[u8], section: Option<&Section<'_>>) -> Vec<u8> {
    let Some(s) = section else {
        return raw.to_vec();
    };
    let path = match s {
        Section::Part(p) | Section::Mime(p) => Some(p),
        Section::Header(p)
        | Section::Text(p)
        | Section::HeaderFields(p, _)
        | Section::HeaderFieldsNot(p, _) => p.as_ref(),
    };
    // The message whose HEADER and TEXT are meant: the whole, or a part's attached one.
    let (header, text) = match path {
        None => {
            let h = header_end(raw);
            (0..h, h..raw.len())
        }
        Some(path) => {
            let top = super::mime::parse(raw);
            let numbers: Vec<u32> = path.0.as_ref().iter().map(|n| n.get()).collect();
            let Some(p) = super::mime::find(&top, &numbers) else {
                return Vec::new();
            };
            match (s, &p.message) {
                (Section::Part(_), _) => return raw[p.body.clone()].to_vec(),
                (Section::Mime(_), _) => return raw[p.header.clone()].to_vec(),
                (_, Some(m)) => (m.header.clone(), m.body.clone()),
                (_, None) => return Vec::new(),
            }
        }
    };
    match s {
        Section::Header(_) => raw[header].to_vec(),
        Section::Text(_) => raw[text].to_vec(),
        Section::HeaderFields(_, names) => fields(&raw[header], names, true),
        Section::HeaderFieldsNot(_, names) => fields(&raw[header], names, false),
        Section::Part(_) | Section::Mime(_) => Vec::new(),
    }
}

/// The header fields of `header` whose names are (`keep`) or are not in `names`, each
/// with its continuation lines, then an empty line.
fn fields(header: &[u8], names: &Vec1<AString<'_>>, keep: bool) -> Vec<u8> {
    fields_where(header, |name| {
        let listed = (names.as_ref().iter()).any(|n| n.as_ref().eq_ignore_ascii_case(name));
        listed == keep
    })
}

/// A message of `size` bytes with UID `uid`, for tests.
#[cfg(test)]
pub fn test_message(uid: u32, size: u64) -> Message {
    let entry = mailvault_core::repo::tree::MessageEntry {
        key: b"k".to_vec(),
        name: b"k".to_vec(),
        new: false,
        size,
        mtime: Default::default(),
        mode: 0o600,
        uid: 0,
        gid: 0,
        hash: Default::default(),
        content: Vec::new(),
        from: String::new(),
        subject: String::new(),
        date: None,
    };
    Message {
        entry,
        flags: Vec::new(),
        uid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_keep_their_continuations() {
        let h = b"Subject: a\r\n b\r\nFrom: x\r\nX-Other: y\r\n\r\n";
        let names = Vec1::try_from(vec![AString::try_from("subject").unwrap()]).unwrap();
        assert_eq!(fields(h, &names, true), b"Subject: a\r\n b\r\n\r\n");
        assert_eq!(fields(h, &names, false), b"From: x\r\nX-Other: y\r\n\r\n");
    }

    #[test]
    fn a_set_selects_by_sequence_number_or_by_uid() {
        let mut f = Folder {
            uidvalidity: 1,
            messages: [2, 3, 7, 9].map(|u| test_message(u, 1)).into(),
            keywords: Vec::new(),
            modseq: std::num::NonZeroU64::MIN,
        };
        let s = |t: &str| SequenceSet::try_from(t).unwrap();
        assert_eq!(selected(&f, &s("1:*"), false), [0, 1, 2, 3]);
        assert_eq!(selected(&f, &s("4,2:3,3"), false), [1, 2, 3]);
        assert_eq!(selected(&f, &s("9:5"), false), Vec::<usize>::new());
        assert_eq!(selected(&f, &s("3:8"), true), [1, 2]);
        assert_eq!(selected(&f, &s("*"), true), [3]);
        assert_eq!(
            selected(&f, &s("10:*"), true),
            [3],
            "* is the largest even below the start"
        );
        assert_eq!(selected(&f, &s("1,4:6,100"), true), Vec::<usize>::new());
        assert_eq!(selected(&f, &s("7,2"), true), [0, 2]);
        f.messages.clear();
        assert_eq!(selected(&f, &s("1:*"), true), Vec::<usize>::new());
        assert_eq!(selected(&f, &s("1:*"), false), Vec::<usize>::new());
    }

    #[test]
    fn sets() {
        let s = |t: &str| SequenceSet::try_from(t).unwrap();
        assert!(in_set(&s("1:*"), 3, 3));
        assert!(
            in_set(&s("5:*"), 3, 3),
            "* is the largest even below the start"
        );
        assert!(!in_set(&s("5:*"), 2, 3));
        assert!(in_set(&s("2,4:5"), 4, 9) && !in_set(&s("2,4:5"), 3, 9));
    }
}
