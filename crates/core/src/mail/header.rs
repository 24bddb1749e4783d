//! A message's header block as IMAP reads it: where it ends, the fields of some names,
//! and the *compact header* a mail client's message list needs ([`compact`]), kept per
//! content in the search index's splits (`search::headers`) and in the IMAP view's cache.

/// The header fields a compact header keeps: every field of an IMAP ENVELOPE (RFC 3501
/// 7.4.2), and those mail clients ask for to list messages (Thunderbird: From To Cc Bcc
/// Subject Date Message-ID Priority X-Priority References Newsgroups In-Reply-To
/// Content-Type Reply-To).
pub const LISTED: &[&str] = &[
    "Date",
    "Subject",
    "From",
    "Sender",
    "Reply-To",
    "To",
    "Cc",
    "Bcc",
    "In-Reply-To",
    "Message-ID",
    "References",
    "Content-Type",
    "Priority",
    "X-Priority",
    "Importance",
    "Newsgroups",
    "List-Id",
    "List-Post",
    "MIME-Version",
    "Disposition-Notification-To",
    "Return-Receipt-To",
    "X-Mailer",
    "User-Agent",
];

/// Whether a field name is one of [`LISTED`] (in any case).
pub fn listed(name: &[u8]) -> bool {
    LISTED
        .iter()
        .any(|f| f.as_bytes().eq_ignore_ascii_case(name))
}

/// The compact header of message `raw`: its lines of the fields in [`LISTED`], with their
/// continuation lines, in order, then an empty line (CRLF). Every answer an IMAP server
/// makes from those fields (ENVELOPE, `HEADER.FIELDS` of some of them) is the same from it
/// as from the whole message, byte for byte.
pub fn compact(raw: &[u8]) -> Vec<u8> {
    fields_where(&raw[..header_end(raw)], listed)
}

/// Where the header of `raw` ends: after its first empty line (LF or CRLF), or at its end.
pub fn header_end(raw: &[u8]) -> usize {
    let mut pos = 0;
    while pos < raw.len() {
        let end = memchr::memchr(b'\n', &raw[pos..]).map_or(raw.len(), |e| pos + e + 1);
        let line = &raw[pos..end];
        if line == b"\n" || line == b"\r\n" {
            return end;
        }
        pos = end;
    }
    raw.len()
}

/// The header fields of `header` whose names `take` takes, each with its continuation
/// lines, in order, then an empty line (CRLF). A line without a colon is named by
/// itself; a continuation line before any field is left out.
pub fn fields_where(header: &[u8], take: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut taking = false;
    for line in header.split_inclusive(|&b| b == b'\n') {
        if line == b"\n" || line == b"\r\n" {
            break;
        }
        if !matches!(line.first(), Some(b' ' | b'\t')) {
            let name = line.split(|&b| b == b':').next().unwrap_or_default();
            taking = take(name.trim_ascii_end());
        }
        if taking {
            out.extend_from_slice(line);
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_end_after_the_first_empty_line() {
        assert_eq!(header_end(b"A: 1\r\nB: 2\r\n\r\nbody\r\n\r\n"), 14);
        assert_eq!(header_end(b"A: 1\nB: 2\n\nbody\n"), 11);
        assert_eq!(header_end(b"A: 1\n"), 5);
        assert_eq!(header_end(b"\nbody"), 1);
    }

    #[test]
    fn the_compact_header_keeps_the_listed_fields_with_their_continuations() {
        let raw = b"Received: from a\r\n\tby b\r\nSubject: one\r\n two\r\nX-Spam: y\r\n\
                    from: Alice <a@x>\r\n\r\nSubject: in the body\r\n";
        assert_eq!(
            compact(raw),
            b"Subject: one\r\n two\r\nfrom: Alice <a@x>\r\n\r\n".to_vec()
        );
        assert_eq!(compact(b"X: 1\n\nbody"), b"\r\n".to_vec(), "nothing kept");
        assert_eq!(
            compact(b" folded first\r\nTo: a\r\n\r\n"),
            b"To: a\r\n\r\n".to_vec()
        );
    }
}
