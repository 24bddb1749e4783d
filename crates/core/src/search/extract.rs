//! What of a message the search index holds: its addresses, subject, date, the decoded text
//! of its text parts and its attachments' file names, read with mail-parser (the one message
//! parser of the engine). Pure: bytes in, a [`Document`] out.
//!
//! - Headers: From and Sender go to [`Document::from`]; To, Cc, Bcc and Delivered-To (every
//!   occurrence of each) to [`Document::to`], as display names and addresses separated by
//!   spaces. The Subject is decoded (RFC 2047, in any charset the WHATWG encoding standard
//!   lists). The Date header gives [`Document::date`] when it is a valid date.
//! - Body: every text part in MIME order, decoded (quoted-printable, base64, charset):
//!   `text/plain` and other `text/*` parts as they are, `text/html` reduced to its text (no
//!   tags, comments, nor anything of `<script>`, `<style>`, `<head>` or `<template>`;
//!   character references decoded; see `html.rs`).
//!   Both sides of a `multipart/alternative` are read, so a word only in the HTML is found.
//!   Text attachments (`text/*` with a file name) count as text; the content of any other
//!   attachment (images, PDFs, `application/*`) is skipped, even when mail-parser falls back
//!   to showing a broken one as text. A forwarded message (`message/rfc822`) adds its
//!   Subject, From, To and Cc to the body, then its own parts, down to [`MAX_NESTING`]
//!   levels; one sent base64 or quoted-printable encoded (which RFC 2046 forbids) is an
//!   attachment, not read (see `defuse_encoded_messages`).
//!   Parts are separated by a line break.
//! - Attachments: [`Document::filenames`] holds every part's file name (the
//!   Content-Disposition `filename`, else the Content-Type `name`; RFC 2231 and RFC 2047
//!   encodings decoded). [`Document::has_attachment`] is true when some part is not text (a
//!   binary part, inline images included, or a forwarded message), has a file name or is
//!   marked `Content-Disposition: attachment`.
//!
//! Hostile input is bounded: the body holds at most [`MAX_BODY`] bytes, the address fields
//! and the subject [`MAX_FIELD`] bytes each, the file names [`MAX_FILENAMES`] names of at
//! most [`MAX_FIELD`] bytes; at most [`MAX_PARTS`] MIME parts are visited, at most
//! [`MAX_HTML_PART`] bytes of one HTML part and [`MAX_HTML_TOTAL`] of all are reduced to
//! text. Text past a cap is dropped (cut at a character boundary) and
//! [`Document::truncated`] says so. The rest of the work (mail-parser's parse) is linear in
//! the message's size, and the parser reads the message only up to its
//! [`MAX_STRUCTURE_LINES`]th line starting with `--` or `Content-Type`, each of which may
//! cost it a part of about a kilobyte (see `parse_window`).

use std::sync::OnceLock;

use mail_parser::{Address, HeaderName, Message, MessageParser, MimeHeaders, PartType};

use crate::mail::summary::pad_base64_words;

/// HTML reduced to text; `show` may use it too (mail-parser's `body_text` keeps the contents
/// of a `<style>` or `<script>` tag that has attributes).
pub(crate) mod html;

/// Most bytes of body text gathered from one message.
pub const MAX_BODY: usize = 1 << 20;
/// Most bytes of each of `from`, `to` and `subject`, and of one file name.
pub const MAX_FIELD: usize = 64 << 10;
/// Most file names kept.
pub const MAX_FILENAMES: usize = 1000;
/// Most MIME parts visited, nested messages' parts included.
pub const MAX_PARTS: usize = 10_000;
/// Most lines starting with `--` or `Content-Type` given to the parser (see
/// `parse_window`); the rest of the message is not read.
pub const MAX_STRUCTURE_LINES: usize = 4 * MAX_PARTS;
/// Most levels of forwarded messages (`message/rfc822` in `message/rfc822`…) read.
pub const MAX_NESTING: usize = 8;
/// Most bytes of one HTML part reduced to text (the rest is dropped).
pub const MAX_HTML_PART: usize = 4 << 20;
/// Most bytes of HTML reduced to text over the whole message.
pub const MAX_HTML_TOTAL: usize = 16 << 20;
/// Header sizes up to which unpadded base64 encoded words are mended before parsing.
const MAX_PADDED_HEADER: usize = 256 << 10;

/// What the search index holds of one message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Document {
    /// From and Sender: display names and addresses, separated by spaces.
    pub from: String,
    /// To, Cc, Bcc and Delivered-To: display names and addresses, separated by spaces.
    pub to: String,
    /// The Subject, decoded.
    pub subject: String,
    /// The decoded text of the text parts, HTML reduced to text (see the module's rules).
    pub body: String,
    /// Attachments' file names, decoded, in MIME order.
    pub filenames: Vec<String>,
    /// Some part is an attachment (see the module's rules).
    pub has_attachment: bool,
    /// The Date header, in seconds since the epoch; `None` when missing or invalid.
    pub date: Option<i64>,
    /// Some text was dropped at one of the caps.
    pub truncated: bool,
}

/// The parser: the headers the index reads and the MIME headers, every other header skipped
/// (Received chains and signatures cost time and are not indexed).
pub(crate) fn parser() -> &'static MessageParser {
    static PARSER: OnceLock<MessageParser> = OnceLock::new();
    PARSER.get_or_init(|| {
        MessageParser::new()
            .with_mime_headers()
            .header_date(HeaderName::Date)
            .header_text(HeaderName::Subject)
            .header_address(HeaderName::From)
            .header_address(HeaderName::Sender)
            .header_address(HeaderName::To)
            .header_address(HeaderName::Cc)
            .header_address(HeaderName::Bcc)
            .header_address(HeaderName::DeliveredTo)
            .default_header_ignore()
    })
}

/// What the index holds of the message `raw`. Never fails: what does not parse is left
/// empty (a message with no header at all gives an empty document).
pub fn extract(raw: &[u8]) -> Document {
    let (mut input, cut_short) = parser_input(raw);
    if let Some(lighter) = without_binary_bodies(&input) {
        input = std::borrow::Cow::Owned(lighter);
    }
    let Some(msg) = parser().parse(&input[..]) else {
        return Document::default();
    };
    let mut x = Extractor {
        doc: Document::default(),
        parts_left: MAX_PARTS,
        html_left: MAX_HTML_TOTAL,
    };
    x.doc.date = msg
        .date()
        .filter(|d| d.is_valid())
        .map(|d| d.to_timestamp());
    let (mut from, mut to) = (String::new(), String::new());
    let mut cut = false;
    for name in [HeaderName::From, HeaderName::Sender] {
        cut |= add_addresses(&mut from, msg.header_values(name));
    }
    for name in [
        HeaderName::To,
        HeaderName::Cc,
        HeaderName::Bcc,
        HeaderName::DeliveredTo,
    ] {
        cut |= add_addresses(&mut to, msg.header_values(name));
    }
    x.doc.from = from;
    x.doc.to = to;
    x.doc.truncated = cut || cut_short;
    x.doc.subject = x
        .capped(msg.subject().unwrap_or_default(), MAX_FIELD)
        .to_string();
    x.walk(&msg, 0);
    drop_flat(msg);
    x.doc
}

/// What of `raw` the parser is given (unpadded encoded words in the header mended, encoded
/// forwarded messages made attachments, cut after [`MAX_STRUCTURE_LINES`]), and whether
/// it was cut. Whatever parses a message whole (`show` too) goes through it: mail-parser
/// given the message as it is may take the stack or memory of the process.
pub(crate) fn parser_input(raw: &[u8]) -> (std::borrow::Cow<'_, [u8]>, bool) {
    use std::borrow::Cow;
    let mut input = Cow::Borrowed(raw);
    if let Some(mended) = mend_header(&input) {
        input = Cow::Owned(mended);
    }
    if let Some(defused) = defuse_encoded_messages(&input) {
        input = Cow::Owned(defused);
    }
    let len = parse_window(&input).len();
    let cut = len < input.len();
    match &mut input {
        Cow::Borrowed(b) => *b = &b[..len],
        Cow::Owned(v) => v.truncate(len),
    }
    (input, cut)
}

/// The start of `raw` given to the parser: all of it, or up to the line beyond the
/// [`MAX_STRUCTURE_LINES`]th that starts with `--` (the form of a MIME boundary) or
/// `Content-Type` (in any case; how a forwarded message is declared). mail-parser builds a
/// part of about a kilobyte for each boundary and each forwarded message, however short its
/// line: forwarded messages nested 400,000 deep, 12 MB, took it 500 MB.
pub(crate) fn parse_window(raw: &[u8]) -> &[u8] {
    let mut seen = 0;
    let mut at = 0;
    while let Some(rest) = raw.get(at..).filter(|r| !r.is_empty()) {
        let structure = rest.starts_with(b"--")
            || rest
                .get(..12)
                .is_some_and(|p| p.eq_ignore_ascii_case(b"content-type"));
        if structure {
            seen += 1;
            if seen > MAX_STRUCTURE_LINES {
                return &raw[..at];
            }
        }
        match memchr::memchr(b'\n', rest) {
            Some(end) => at += end + 1,
            None => break,
        }
    }
    raw
}

/// `raw` with every part that is a forwarded message sent base64 or quoted-printable
/// encoded made an attachment, or `None` when there is none: in the header blocks that give
/// such an encoding, the `/` of a Content-Type naming a `message` type becomes a `-`, and
/// when the message holds a `multipart/digest` (whose parts are forwarded messages unless
/// they say otherwise), a block with no Content-Type gets `application/octet-stream`.
/// RFC 2046 forbids encoding a forwarded message; mail-parser decodes one and parses it,
/// then copies the decoded bytes once for each message nested in it, recursing through
/// them: 5,000 levels in 160 KB overflow a 2 MiB stack, and would cost 800 MB.
fn defuse_encoded_messages(raw: &[u8]) -> Option<Vec<u8>> {
    let mut slashes: Vec<(usize, usize)> = Vec::new();
    let mut untyped: Vec<usize> = Vec::new();
    let mut digest = false;
    let mut at = 0;
    while at < raw.len() {
        // A block of non-blank lines, each header with its continuation lines.
        let mut fields: Vec<(usize, usize)> = Vec::new();
        while at < raw.len() {
            let end = memchr::memchr(b'\n', &raw[at..]).map_or(raw.len(), |e| at + e + 1);
            let line = &raw[at..end];
            if line.iter().all(u8::is_ascii_whitespace) {
                at = end;
                break;
            }
            match fields.last_mut() {
                Some(f) if matches!(line[0], b' ' | b'\t') => f.1 = end,
                _ => fields.push((at, end)),
            }
            at = end;
        }
        let types: Vec<&[u8]> = (fields.iter())
            .map(|&(a, b)| &raw[a..b])
            .filter(|f| starts_with_ci(f, "content-type"))
            .collect();
        digest |= types
            .iter()
            .any(|f| field_has(f, "content-type", &["digest"]));
        let encoded = fields.iter().any(|&(a, b)| {
            field_has(
                &raw[a..b],
                "content-transfer-encoding",
                &["base64", "quoted-printable"],
            )
        });
        if !encoded {
            continue;
        }
        if types.is_empty() {
            // Before the encoding's field (after a boundary line the block may start with).
            untyped.extend(
                fields
                    .iter()
                    .map(|f| f.0)
                    .find(|&a| starts_with_ci(&raw[a..], "content-transfer-encoding")),
            );
        }
        for &(a, b) in &fields {
            if names_message(&raw[a..b]) {
                slashes.push((a, b));
            }
        }
    }
    if !digest {
        untyped.clear();
    }
    if slashes.is_empty() && untyped.is_empty() {
        return None;
    }
    let mut typed = raw.to_vec();
    for (a, b) in slashes {
        for c in &mut typed[a..b] {
            if *c == b'/' {
                *c = b'-';
            }
        }
    }
    if untyped.is_empty() {
        return Some(typed);
    }
    let line = b"Content-Type: application/octet-stream\r\n";
    let mut out = Vec::with_capacity(raw.len() + untyped.len() * line.len());
    let mut from = 0;
    for i in untyped {
        out.extend_from_slice(&typed[from..i]);
        out.extend_from_slice(line);
        from = i;
    }
    out.extend_from_slice(&typed[from..]);
    Some(out)
}

/// `raw` without the bodies of its binary parts sent base64 (a Content-Type that is not
/// `text`, `multipart` or `message`), or `None` when it has none. The index keeps only
/// their names ([`is_text_type`]), and mail-parser decoding them was 17% of `index` on
/// the `large` preset. A body ends at the next line starting with `--` (a boundary:
/// base64 has no `-`).
fn without_binary_bodies(raw: &[u8]) -> Option<Vec<u8>> {
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    let mut at = 0;
    while at < raw.len() {
        let (mut base64, mut binary) = (false, false);
        // A block of non-blank lines (continuation lines are part of their field).
        while at < raw.len() {
            let end = memchr::memchr(b'\n', &raw[at..]).map_or(raw.len(), |e| at + e + 1);
            let line = &raw[at..end];
            at = end;
            if line.iter().all(u8::is_ascii_whitespace) {
                break;
            }
            base64 |= field_has(line, "content-transfer-encoding", &["base64"]);
            binary |= names_binary(line);
        }
        if base64 && binary && at < raw.len() {
            let end = memchr::memmem::find(&raw[at..], b"\n--").map_or(raw.len(), |e| at + e + 1);
            cuts.push((at, end));
            at = end;
        }
    }
    if cuts.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut from = 0;
    for (a, b) in cuts {
        out.extend_from_slice(&raw[from..a]);
        from = b;
    }
    out.extend_from_slice(&raw[from..]);
    Some(out)
}

/// Whether the header field `f` is a Content-Type of a type the index reads no text of
/// (not `text`, `multipart` or `message`; comments before it skipped).
fn names_binary(f: &[u8]) -> bool {
    // A value on a continuation line is not read: such a part is taken as text.
    match content_type_value(f) {
        Some(v) if v.first().is_some_and(u8::is_ascii_alphabetic) => {
            !["text", "multipart", "message"]
                .iter()
                .any(|t| starts_with_ci(v, t))
        }
        _ => false,
    }
}

/// The value of the header field `f` when it is a Content-Type, comments before it
/// skipped.
fn content_type_value(f: &[u8]) -> Option<&[u8]> {
    if !starts_with_ci(f, "content-type") {
        return None;
    }
    let colon = memchr::memchr(b':', f)?;
    let mut v = &f[colon + 1..];
    loop {
        v = v.trim_ascii_start();
        match v.first() {
            Some(b'(') => v = &v[memchr::memchr(b')', v).map_or(v.len(), |e| e + 1)..],
            _ => return Some(v),
        }
    }
}

fn starts_with_ci(b: &[u8], s: &str) -> bool {
    b.get(..s.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(s.as_bytes()))
}

/// Whether the header field `f` is named `name` and holds one of `words` (in any case).
fn field_has(f: &[u8], name: &str, words: &[&str]) -> bool {
    starts_with_ci(f, name)
        && words.iter().any(|w| {
            f.windows(w.len())
                .any(|x| x.eq_ignore_ascii_case(w.as_bytes()))
        })
}

/// Whether the header field `f` is a Content-Type of a `message/…` type (comments before
/// it skipped).
fn names_message(f: &[u8]) -> bool {
    content_type_value(f).is_some_and(|v| starts_with_ci(v, "message"))
}

/// Drops `msg` one nested message at a time: mail-parser builds forwarded messages of any
/// depth (without recursion), and dropping 100,000 of them the usual, recursive way
/// overflows the stack.
pub(crate) fn drop_flat(msg: Message<'_>) {
    let mut stack = vec![msg];
    while let Some(mut m) = stack.pop() {
        for part in &mut m.parts {
            if matches!(part.body, PartType::Message(_)) {
                let body = std::mem::replace(&mut part.body, PartType::Multipart(Vec::new()));
                if let PartType::Message(inner) = body {
                    stack.push(inner);
                }
            }
        }
    }
}

/// `raw` with its header's unpadded base64 encoded words padded (mail-parser drops their
/// last bytes otherwise), or `None` when nothing needs it or the header is too large.
fn mend_header(raw: &[u8]) -> Option<Vec<u8>> {
    // The blank line ending the header, looked for only as far as a header may reach.
    let window = &raw[..raw.len().min(MAX_PADDED_HEADER + 3)];
    let blank = memchr::memmem::find(window, b"\n\n")
        .into_iter()
        .chain(memchr::memmem::find(window, b"\n\r\n"))
        .min();
    let end = match blank {
        Some(i) => i + 1,
        None if raw.len() == window.len() => raw.len(),
        None => return None,
    };
    let head = &raw[..end];
    if head.len() > MAX_PADDED_HEADER || memchr::memmem::find(head, b"=?").is_none() {
        return None;
    }
    let padded = pad_base64_words(head);
    (padded != head).then(|| [&padded[..], &raw[end..]].concat())
}

/// Appends the names and addresses of `values` (address headers) to `out`, up to
/// [`MAX_FIELD`] bytes; whether some were dropped.
fn add_addresses<'a, 'x: 'a>(
    out: &mut String,
    values: impl Iterator<Item = &'a mail_parser::HeaderValue<'x>>,
) -> bool {
    let mut words: Vec<&str> = Vec::new();
    for value in values {
        match value.as_address() {
            Some(Address::List(list)) => {
                for a in list {
                    words.extend(a.name());
                    words.extend(a.address());
                }
            }
            Some(Address::Group(groups)) => {
                for g in groups {
                    words.extend(g.name.as_deref());
                    for a in &g.addresses {
                        words.extend(a.name());
                        words.extend(a.address());
                    }
                }
            }
            None => {}
        }
    }
    for w in words.into_iter().filter(|w| !w.trim().is_empty()) {
        if !push_capped(out, w, MAX_FIELD) {
            return true;
        }
    }
    false
}

/// Appends `text` to `out` after a separator, as much as fits in `cap` bytes in all; whether
/// all of it fitted.
fn push_capped(out: &mut String, text: &str, cap: usize) -> bool {
    if !out.is_empty() {
        if out.len() >= cap {
            return false;
        }
        out.push(' ');
    }
    let room = cap.saturating_sub(out.len());
    let part = floor_str(text, room);
    out.push_str(part);
    part.len() == text.len()
}

/// The longest start of `s` of at most `max` bytes ending at a character boundary.
fn floor_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

struct Extractor {
    doc: Document,
    parts_left: usize,
    html_left: usize,
}

impl Extractor {
    /// `s` cut to `max` bytes, noting the cut.
    fn capped<'s>(&mut self, s: &'s str, max: usize) -> &'s str {
        let cut = floor_str(s, max);
        self.doc.truncated |= cut.len() < s.len();
        cut
    }

    /// Appends `text` to the body, on a line of its own, within [`MAX_BODY`].
    fn add_body(&mut self, text: &str) {
        let text = text.trim();
        if text.is_empty() {
            return;
        }
        let sep = usize::from(!self.doc.body.is_empty());
        let room = MAX_BODY.saturating_sub(self.doc.body.len() + sep);
        let part = self.capped(text, room);
        if part.is_empty() {
            return;
        }
        if sep == 1 {
            self.doc.body.push('\n');
        }
        self.doc.body.push_str(part);
    }

    fn body_full(&self) -> bool {
        self.doc.body.len() >= MAX_BODY
    }

    fn add_filename(&mut self, name: &str) {
        let name = name.trim();
        if name.is_empty() {
            return;
        }
        if self.doc.filenames.len() >= MAX_FILENAMES {
            self.doc.truncated = true;
            return;
        }
        let name = self.capped(name, MAX_FIELD).to_string();
        self.doc.filenames.push(name);
    }

    /// Reads the parts of `msg`, a message `depth` levels of forwarding deep.
    fn walk(&mut self, msg: &Message<'_>, depth: usize) {
        for part in &msg.parts {
            if self.parts_left == 0 {
                self.doc.truncated = true;
                return;
            }
            self.parts_left -= 1;
            if let Some(name) = part.attachment_name() {
                self.doc.has_attachment = true;
                self.add_filename(name);
            }
            if part
                .content_disposition()
                .is_some_and(|d| d.is_attachment())
            {
                self.doc.has_attachment = true;
            }
            match &part.body {
                PartType::Text(text) if is_text_type(part) => {
                    if !self.body_full() {
                        self.add_body(text);
                    } else if !text.trim().is_empty() {
                        self.doc.truncated = true;
                    }
                }
                PartType::Html(html) if is_text_type(part) => self.add_html(html),
                PartType::Text(_) | PartType::Html(_) => {}
                PartType::Binary(_) | PartType::InlineBinary(_) => {
                    self.doc.has_attachment = true;
                }
                PartType::Message(inner) => {
                    self.doc.has_attachment = true;
                    if depth >= MAX_NESTING {
                        self.doc.truncated = true;
                        continue;
                    }
                    self.add_forwarded_header(inner);
                    self.walk(inner, depth + 1);
                }
                PartType::Multipart(_) => {}
            }
        }
    }

    /// The text of an HTML part, within the HTML caps.
    fn add_html(&mut self, html: &str) {
        if self.body_full() || self.html_left == 0 {
            self.doc.truncated |= !html.trim().is_empty();
            return;
        }
        let max = MAX_HTML_PART.min(self.html_left);
        let html = self.capped(html, max);
        self.html_left -= html.len();
        self.add_body(&html::html_to_text(html));
    }

    /// A forwarded message's Subject, From, To and Cc, as body text.
    fn add_forwarded_header(&mut self, inner: &Message<'_>) {
        let mut line = String::new();
        line.push_str(inner.subject().unwrap_or_default());
        for name in [HeaderName::From, HeaderName::To, HeaderName::Cc] {
            add_addresses(&mut line, inner.header_values(name));
        }
        let line = floor_str(&line, MAX_FIELD).to_string();
        self.add_body(&line);
    }
}

/// Whether a part mail-parser gives as text was declared text: `text/*`, no Content-Type
/// (text by default), or a multipart or message whose structure did not parse. A binary
/// attachment with a broken encoding is shown as text by mail-parser; it is skipped here.
fn is_text_type(part: &mail_parser::MessagePart<'_>) -> bool {
    part.content_type().is_none_or(|ct| {
        ["text", "multipart", "message"]
            .iter()
            .any(|t| ct.ctype().eq_ignore_ascii_case(t))
    })
}

#[cfg(test)]
mod tests;
