//! A message's From, Subject and Date, decoded, for listings (`ls`, the snapshot's
//! entries): only the header is parsed, and only those fields.

/// From, Subject and Date of a message, decoded, for listings. Parses only the header.
pub fn header_summary(data: &[u8]) -> (String, String, Option<i64>) {
    let head = summary_fields(data);
    let Some(msg) = mail_parser::MessageParser::new().parse_headers(&head[..]) else {
        return (String::new(), String::new(), None);
    };
    let from = msg
        .from()
        .and_then(|a| a.first())
        .map(|a| match (&a.name, &a.address) {
            (Some(n), Some(ad)) => format!("{n} <{ad}>"),
            (None, Some(ad)) => ad.to_string(),
            (Some(n), None) => n.to_string(),
            (None, None) => String::new(),
        })
        .unwrap_or_default();
    let subject = msg.subject().unwrap_or_default();
    (
        shorten(&from),
        shorten(subject),
        msg.date().map(|d| d.to_timestamp()),
    )
}

/// The From, Subject and Date fields of the header (with their continuation lines), so the
/// parser does not spend its time on `Received` chains and DKIM signatures.
fn summary_fields(data: &[u8]) -> Vec<u8> {
    const MAX_HEADER: usize = 256 * 1024;
    let head = &data[..data.len().min(MAX_HEADER)];
    let mut out = Vec::with_capacity(512);
    let mut keep = false;
    for line in head.split_inclusive(|&c| c == b'\n') {
        if line == b"\n" || line == b"\r\n" {
            break;
        }
        if matches!(line.first(), Some(b' ' | b'\t')) {
            if keep {
                out.extend_from_slice(line);
            }
            continue;
        }
        let name = line.split(|&c| c == b':').next().unwrap_or_default();
        keep = [&b"from"[..], b"subject", b"date"]
            .iter()
            .any(|f| name.eq_ignore_ascii_case(f));
        if keep {
            out.extend_from_slice(line);
        }
    }
    out.extend_from_slice(b"\n");
    pad_base64_words(&out)
}

/// `head` with every base64 encoded word (`=?cs?B?...?=`) padded with `=` to a multiple of
/// four characters. Written by hand because mail-parser 0.11 drops the last one or two
/// bytes of an unpadded word (`=?utf-8?B?eHB0bw?=` gives `xpt`), which RFC 2047 writers
/// such as Python's `email` and many MUAs produce; everything else is left as it is.
/// A word's end (`?=`) is looked for within 1024 bytes of its start, so a header of
/// many unterminated `=?` takes linear time. The search index's extraction uses it too.
pub(crate) fn pad_base64_words(head: &[u8]) -> Vec<u8> {
    // Longer than RFC 2047's 75 characters: some writers ignore that limit.
    const MAX_WORD: usize = 1024;
    let mut out = Vec::with_capacity(head.len() + 8);
    let mut rest = head;
    while let Some(start) = find(rest, b"=?") {
        out.extend_from_slice(&rest[..start]);
        let word = &rest[start..];
        // =?charset?B?payload?=
        let parsed = (|| {
            let cs_end = 2 + find(&word[2..], b"?")?;
            let enc = word.get(cs_end + 1..cs_end + 3)?;
            if !enc.eq_ignore_ascii_case(b"B?") {
                return None;
            }
            let payload = cs_end + 3;
            let end = payload + find(word.get(payload..word.len().min(MAX_WORD))?, b"?=")?;
            Some((payload, end))
        })();
        let Some((payload, end)) = parsed else {
            out.extend_from_slice(b"=?");
            rest = &word[2..];
            continue;
        };
        let body = &word[payload..end];
        out.extend_from_slice(&word[..end]);
        let significant = body.iter().filter(|c| !c.is_ascii_whitespace()).count();
        if !body.contains(&b'=') && significant % 4 != 0 {
            out.extend(std::iter::repeat_n(b'=', 4 - significant % 4));
        }
        out.extend_from_slice(b"?=");
        rest = &word[end + 2..];
    }
    out.extend_from_slice(rest);
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn shorten(s: &str) -> String {
    const MAX: usize = 160;
    let s = s.trim();
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
