//! SEARCH over an opened folder. Flags, sizes, sets and internal dates come from the
//! snapshot's entries; the sent dates from the Date header the entry keeps; header and
//! text keys read the message and match its raw bytes, case-insensitively for ASCII
//! (encoded words and transfer encodings are not decoded yet, and the search index is not
//! used yet).

use super::fetch::{header_end, in_set, Refusal};
use super::view::Message;
use imap_codec::imap_types::datetime::NaiveDate;
use imap_codec::imap_types::search::SearchKey;

/// Where a message is in its folder (its index, the messages in the folder, the folder's
/// last UID) and its bytes when the keys need them ([`needs_bytes`]).
#[derive(Clone, Copy)]
pub struct At<'r> {
    pub i: usize,
    pub n: u32,
    pub last_uid: u32,
    pub raw: Option<&'r [u8]>,
}

/// Whether any of `keys` needs the messages' bytes.
pub fn needs_bytes(keys: &[SearchKey<'_>]) -> bool {
    keys.iter().any(|k| match k {
        SearchKey::And(v) => needs_bytes(v.as_ref()),
        SearchKey::Or(a, b) => {
            needs_bytes(std::slice::from_ref(a)) || needs_bytes(std::slice::from_ref(b))
        }
        SearchKey::Not(a) => needs_bytes(std::slice::from_ref(a)),
        SearchKey::Bcc(_)
        | SearchKey::Body(_)
        | SearchKey::Cc(_)
        | SearchKey::From(_)
        | SearchKey::Header(..)
        | SearchKey::Subject(_)
        | SearchKey::Text(_)
        | SearchKey::To(_) => true,
        _ => false,
    })
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
    let raw = at.raw.unwrap_or_default();
    let field = |name: &[u8], value: &[u8]| header_has(&raw[..header_end(raw)], name, value);
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
        SearchKey::Body(v) => contains(&raw[header_end(raw)..], v.as_ref()),
        SearchKey::Text(v) => contains(raw, v.as_ref()),
        // Keys of extensions imap-codec parses only when built with them (WITHIN,
        // CONDSTORE): none is here now, but a build that enables them must still answer.
        #[allow(unreachable_patterns)]
        _ => {
            return Err(
                "that SEARCH key (OLDER, YOUNGER, MODSEQ) is not in the IMAP view of \
                        the backups yet"
                    .into(),
            )
        }
    })
}

/// Whether `hay` holds `needle`, ASCII letters in any case (an empty needle: always).
fn contains(hay: &[u8], needle: &[u8]) -> bool {
    needle.is_empty()
        || hay
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle))
}

/// Whether a field `name` of `header` holds `value` (unfolded; an empty value: the field
/// is there).
fn header_has(header: &[u8], name: &[u8], value: &[u8]) -> bool {
    let mut current: Option<Vec<u8>> = None;
    let mut found = false;
    let mut check = |v: &Option<Vec<u8>>| {
        if let Some(v) = v {
            found |= contains(v, value);
        }
    };
    for line in header.split_inclusive(|&b| b == b'\n') {
        let body: Vec<u8> = line
            .iter()
            .copied()
            .filter(|&b| b != b'\r' && b != b'\n')
            .collect();
        if matches!(line.first(), Some(b' ' | b'\t')) {
            if let Some(v) = &mut current {
                v.extend_from_slice(&body);
            }
            continue;
        }
        check(&current);
        current = None;
        if let Some(colon) = body.iter().position(|&b| b == b':') {
            if body[..colon].trim_ascii_end().eq_ignore_ascii_case(name) {
                current = Some(body[colon + 1..].to_vec());
            }
        }
    }
    check(&current);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_text_matching() {
        let h = b"From: Bob <bob@example.org>\r\nSubject: Quarterly\r\n  Report\r\nX-A: 1\r\n\r\n";
        assert!(header_has(h, b"from", b"BOB@"));
        assert!(header_has(h, b"Subject", b"quarterly  report"));
        assert!(header_has(h, b"X-A", b""));
        assert!(!header_has(h, b"X-B", b""));
        assert!(!header_has(h, b"Subject", b"bob"));
        assert!(contains(b"Hello World", b"o w"));
        assert!(!contains(b"Hello", b"hello!"));
    }
}
