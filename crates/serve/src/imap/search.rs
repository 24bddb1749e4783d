//! SEARCH over an opened folder. Flags, sizes, sets and internal dates come from the
//! snapshot's entries; the sent dates from the Date header the entry keeps; header and
//! text keys read the message and match what a reader sees ([`Decoded`]): header fields
//! with their encoded words decoded (RFC 2047, by mail-parser), the body as the search
//! index reads it (`mailvault_core::search::extract`: quoted-printable and base64
//! undone, charsets converted, HTML reduced to its text), case-insensitively (Unicode
//! lower case) as RFC 3501 asks. BODY and TEXT keys are narrowed by the search index
//! first where it can (`super::indexed`).

use super::fetch::{in_set, Needs, Refusal};
use super::session::{status, Answer, Kind};
use super::view::Message;
use imap_codec::imap_types::core::{Charset, Tag};
use imap_codec::imap_types::datetime::NaiveDate;
use imap_codec::imap_types::response::Code;
use imap_codec::imap_types::search::SearchKey;
use mailvault_core::mail::header::header_end;
use std::cell::OnceCell;

/// Where a message is in its folder (its index, the messages in the folder, the folder's
/// last UID) and its text when the keys need it ([`needs`]).
#[derive(Clone, Copy)]
pub struct At<'r> {
    pub i: usize,
    pub n: u32,
    pub last_uid: u32,
    pub text: Option<&'r Decoded<'r>>,
    /// The mod-sequence of the folder's messages (CONDSTORE).
    pub modseq: u64,
}

/// A message's text as SEARCH matches it, each side decoded the first time a key asks.
pub struct Decoded<'r> {
    raw: &'r [u8],
    /// The header's fields: each name, and its value decoded, in lower case.
    fields: OnceCell<Vec<(String, String)>>,
    /// The body's text (the search index's), in lower case.
    body: OnceCell<String>,
}

impl<'r> Decoded<'r> {
    pub fn new(raw: &'r [u8]) -> Decoded<'r> {
        Decoded {
            raw,
            fields: OnceCell::new(),
            body: OnceCell::new(),
        }
    }

    fn fields(&self) -> &[(String, String)] {
        self.fields
            .get_or_init(|| header_fields(&self.raw[..header_end(self.raw)]))
    }

    fn body(&self) -> &str {
        self.body.get_or_init(|| {
            let doc = mailvault_core::search::extract::extract(self.raw);
            doc.body.to_lowercase()
        })
    }

    /// Whether a field `name` holds `needle` (lower case; empty: the field is there).
    /// Only the fields of that name are decoded (each on its own), unless every field
    /// was already: a SUBJECT search over a folder of 100,000 messages decodes 100,000
    /// subjects, not every field of every header.
    fn field_has(&self, name: &str, needle: &str) -> bool {
        match self.fields.get() {
            Some(all) => {
                (all.iter()).any(|(n, v)| n.eq_ignore_ascii_case(name) && v.contains(needle))
            }
            None => named_fields(&self.raw[..header_end(self.raw)], name)
                .any(|f| header_fields(&f).iter().any(|(_, v)| v.contains(needle))),
        }
    }

    /// Whether a field (`name: value`) or the body holds `needle` (lower case).
    fn text_has(&self, needle: &str) -> bool {
        let field =
            |(n, v): &(String, String)| format!("{}: {v}", n.to_lowercase()).contains(needle);
        self.fields().iter().any(field) || self.body().contains(needle)
    }
}

/// The fields of `header` named `name` (in any case), each with its continuation lines and
/// an empty line after it: a header of that field alone.
fn named_fields<'h>(header: &'h [u8], name: &'h str) -> impl Iterator<Item = Vec<u8>> + 'h {
    let mut lines = header.split_inclusive(|&b| b == b'\n').peekable();
    std::iter::from_fn(move || loop {
        let line = lines.next()?;
        let n = line.split(|&b| b == b':').next().unwrap_or_default();
        if matches!(line.first(), Some(b' ' | b'\t'))
            || !line.contains(&b':')
            || !n.trim_ascii_end().eq_ignore_ascii_case(name.as_bytes())
        {
            continue;
        }
        let mut f = line.to_vec();
        while let Some(c) = lines.next_if(|l| matches!(l.first(), Some(b' ' | b'\t'))) {
            f.extend_from_slice(c);
        }
        f.extend_from_slice(b"\r\n");
        return Some(f);
    })
}

/// Every field of `header`: its name, and its value unfolded with encoded words decoded
/// (mail-parser's unstructured text, for every field), in lower case.
fn header_fields(header: &[u8]) -> Vec<(String, String)> {
    use mail_parser::{HeaderName, HeaderValue, MessageParser};
    // A map that is not empty makes every other field go through the default parser.
    let parser = MessageParser::new()
        .header_text(HeaderName::Subject)
        .default_header_text();
    let Some(msg) = parser.parse_headers(header) else {
        return Vec::new();
    };
    (msg.headers().iter())
        .map(|h| {
            let value = match &h.value {
                HeaderValue::Text(t) => t.to_lowercase(),
                HeaderValue::TextList(l) => l.join(" ").to_lowercase(),
                _ => String::new(),
            };
            (h.name.as_str().to_string(), value)
        })
        .collect()
}

/// A search string as text, in lower case (bytes that are not UTF-8 replaced).
fn needle(v: &[u8]) -> String {
    String::from_utf8_lossy(v).to_lowercase()
}

/// What `keys` need of the messages' bytes: nothing, the fields the header cache keeps
/// (FROM, TO, CC, BCC, SUBJECT, and HEADER of one of [`LISTED`](mailvault_core::mail::header::LISTED): matched
/// on the compact header, whose fields are the whole header's), or the whole message.
pub fn needs(keys: &[SearchKey<'_>]) -> Needs {
    keys.iter().map(need).max().unwrap_or(Needs::Nothing)
}

fn need(k: &SearchKey<'_>) -> Needs {
    match k {
        SearchKey::And(v) => needs(v.as_ref()),
        SearchKey::Or(a, b) => need(a).max(need(b)),
        SearchKey::Not(a) => need(a),
        SearchKey::Header(name, _) if mailvault_core::mail::header::listed(name.as_ref()) => {
            Needs::Listed
        }
        SearchKey::Bcc(_)
        | SearchKey::Cc(_)
        | SearchKey::From(_)
        | SearchKey::Subject(_)
        | SearchKey::To(_) => Needs::Listed,
        SearchKey::Body(_) | SearchKey::Header(..) | SearchKey::Text(_) => Needs::Whole,
        _ => Needs::Nothing,
    }
}

/// Unix seconds at the start of day `d` (UTC).
fn day(d: &NaiveDate) -> i64 {
    let d: &chrono::NaiveDate = d.as_ref();
    d.and_hms_opt(0, 0, 0)
        .map_or(0, |t| t.and_utc().timestamp())
}

/// Whether message `m` (at `at`) matches `key`; a key the view does not answer yet is a
/// [`Refusal`].
pub fn matches(m: &Message, at: At<'_>, key: &SearchKey<'_>) -> Result<bool, Refusal> {
    let has = |f: &str| m.flags.iter().any(|x| x.eq_ignore_ascii_case(f));
    let secs = m.entry.mtime.secs;
    let sent = m.entry.date;
    let empty = Decoded::new(b"");
    let text = at.text.unwrap_or(&empty);
    let field = |name: &[u8], v: &[u8]| text.field_has(&String::from_utf8_lossy(name), &needle(v));
    Ok(match key {
        SearchKey::All => true,
        SearchKey::And(keys) => {
            for k in keys.as_ref() {
                if !matches(m, at, k)? {
                    return Ok(false);
                }
            }
            true
        }
        SearchKey::Or(a, b) => matches(m, at, a)? || matches(m, at, b)?,
        SearchKey::Not(k) => !matches(m, at, k)?,
        SearchKey::SequenceSet(s) => in_set(s, at.i as u32 + 1, at.n),
        SearchKey::Uid(s) => in_set(s, m.uid, at.last_uid),
        SearchKey::Seen => has("\\Seen"),
        SearchKey::Unseen => !has("\\Seen"),
        SearchKey::Answered => has("\\Answered"),
        SearchKey::Unanswered => !has("\\Answered"),
        SearchKey::Flagged => has("\\Flagged"),
        SearchKey::Unflagged => !has("\\Flagged"),
        SearchKey::Deleted => has("\\Deleted"),
        SearchKey::Undeleted => !has("\\Deleted"),
        SearchKey::Draft => has("\\Draft"),
        SearchKey::Undraft => !has("\\Draft"),
        SearchKey::Keyword(k) => has(k.as_ref()),
        SearchKey::Unkeyword(k) => !has(k.as_ref()),
        SearchKey::Larger(s) => m.entry.size > *s as u64,
        SearchKey::Smaller(s) => m.entry.size < *s as u64,
        SearchKey::Before(d) => secs < day(d),
        SearchKey::On(d) => (day(d)..day(d) + 86400).contains(&secs),
        SearchKey::Since(d) => secs >= day(d),
        SearchKey::SentBefore(d) => sent.is_some_and(|t| t < day(d)),
        SearchKey::SentOn(d) => sent.is_some_and(|t| (day(d)..day(d) + 86400).contains(&t)),
        SearchKey::SentSince(d) => sent.is_some_and(|t| t >= day(d)),
        SearchKey::Old => true,
        SearchKey::New | SearchKey::Recent => false,
        SearchKey::From(v) => field(b"From", v.as_ref()),
        SearchKey::To(v) => field(b"To", v.as_ref()),
        SearchKey::Cc(v) => field(b"Cc", v.as_ref()),
        SearchKey::Bcc(v) => field(b"Bcc", v.as_ref()),
        SearchKey::Subject(v) => field(b"Subject", v.as_ref()),
        SearchKey::Header(name, v) => field(name.as_ref(), v.as_ref()),
        SearchKey::Body(v) => text.body().contains(&needle(v.as_ref())),
        SearchKey::Text(v) => text.text_has(&needle(v.as_ref())),
        // RFC 7162 3.1.5: a mod-sequence equal to or above; the entry (a flag's) is that
        // of every message's one mod-sequence.
        SearchKey::ModSequence { modseq, .. } => at.modseq >= *modseq,
        // Keys of extensions imap-codec parses only when built with them (WITHIN): none
        // is here now, but a build that enables them must still answer.
        #[allow(unreachable_patterns)]
        _ => {
            return Err(
                "that SEARCH key (OLDER, YOUNGER) is not in the IMAP view of the backups yet"
                    .into(),
            )
        }
    })
}

/// `NO [BADCHARSET (UTF-8 US-ASCII)]` for a SEARCH whose charset is another: search
/// strings are read as UTF-8 (US-ASCII is a part of it), the default when none is given.
pub fn charset_refused(tag: &Tag<'static>, charset: Option<&Charset<'_>>) -> Option<Answer> {
    let name = charset?.as_ref().to_ascii_uppercase();
    if ["UTF-8", "US-ASCII", "UTF8"].contains(&name.as_str()) {
        return None;
    }
    let allowed = ["UTF-8", "US-ASCII"]
        .into_iter()
        .filter_map(|c| Charset::try_from(c).ok());
    let code = Code::BadCharset {
        allowed: allowed.collect(),
    };
    let text = "search strings are taken in UTF-8 (or US-ASCII)".to_string();
    Some(status(Kind::No, Some(tag.clone()), Some(code), text).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Header keys matched on the compact header, each field decoded on its own, see the
    /// fields the whole header has, decoded with every other.
    #[test]
    fn the_compact_header_has_the_kept_fields_of_the_whole() {
        for raw in super::super::headers::corpus() {
            let start = String::from_utf8_lossy(&raw[..200.min(raw.len())]).into_owned();
            let whole = header_fields(&raw[..header_end(&raw)]);
            let compact = mailvault_core::mail::header::compact(&raw);
            for name in mailvault_core::mail::header::LISTED {
                let want: Vec<_> = (whole.iter())
                    .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                    .cloned()
                    .collect();
                let got: Vec<_> = named_fields(&compact, name)
                    .flat_map(|f| header_fields(&f))
                    .collect();
                assert_eq!(got, want, "{name} of {start}");
            }
        }
    }

    #[test]
    fn header_and_text_keys_match_decoded_text_in_any_case() {
        let m = b"From: =?utf-8?q?J=C3=B6rg?= <bob@example.org>\r\n\
Subject: =?iso-8859-1?b?U2No9m5lcw==?= Quarterly\r\n  Report\r\nX-A: 1\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: base64\r\n\r\n\
w5xiZXJyYXNjaHVuZyBpbiBCYXNlNjQ=\r\n";
        let d = Decoded::new(m);
        assert!(d.field_has("from", &needle("JÖRG".as_bytes())));
        assert!(d.field_has("FROM", "bob@"));
        assert!(d.field_has("Subject", &needle("SCHÖNES".as_bytes())));
        assert!(d.field_has("Subject", "quarterly"));
        assert!(d.field_has("X-A", ""));
        assert!(!d.field_has("X-B", ""));
        assert!(!d.field_has("Subject", "bob"));
        assert!(!d.field_has("Subject", "u2no"), "not the encoded form");
        assert!(d.body().contains(&needle("ÜBERRASCHUNG".as_bytes())));
        assert!(!d.body().contains("w5xi"), "not the base64");
        assert!(d.text_has("überraschung") && d.text_has("schönes"));
        assert!(d.text_has("x-a: 1"));
        assert!(!d.text_has("nowhere"));
    }

    #[test]
    fn search_strings_are_taken_in_utf8_or_us_ascii_only() {
        let tag = Tag::try_from("t").unwrap();
        let refused = |c: &str| charset_refused(&tag, Some(&Charset::try_from(c).unwrap()));
        assert!(charset_refused(&tag, None).is_none());
        assert!(refused("utf-8").is_none() && refused("US-ASCII").is_none());
        let no = refused("ISO-8859-1").expect("refused");
        assert!(matches!(no.done.code(), Some(Code::BadCharset { allowed }) if allowed.len() == 2));
    }
}
