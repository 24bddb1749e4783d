//! mbox files: a streaming reader (mboxo, mboxrd, mboxcl, mboxcl2, CRLF files), the mboxrd
//! writer, and the rule that tells an mbox that only grew from a rewritten one
//! ([`MboxState`]). Bytes in, bytes out: the caller opens the file. docs/mail-formats.md
//! gives the rules with their reasons.
//!
//! **Separators.** A message starts at a line beginning `From ` that is at the start of
//! the input, follows an empty line, or has a date that parses ([`parse_from_line`]); so a
//! body line `From the start...` after a text line does not split a message. The empty
//! line before a separator (and at the end of the file) belongs to the separator.
//! A message whose header block has `Content-Length: N` is delimited by it when the N
//! bytes after its header block end on an empty line followed by a `From ` line or the
//! end of input, or on the `From ` line or the end of input directly (mboxcl, mboxcl2);
//! else the line rule applies.
//!
//! **Quoting.** Every line-rule message is unquoted as mboxrd: a line `>From `, `>>From `
//! ... loses one `>`. For mboxo files this undoes the writer's quoting of `From ` lines
//! too; only a body line that was `>From ` before an mboxo writer kept it so comes back
//! as `From `. A `Content-Length` message is taken as it is (mboxcl2 does not quote).
//!
//! **Metadata headers** ([`METADATA_HEADERS`]) are the mbox writer's, not the message's:
//! those in the run of such headers that opens the header block (Thunderbird writes
//! `X-Mozilla-*` there) and in the run that closes it (mutt, Dovecot, Python and this
//! writer append there) are read for flags and keywords and removed from the message
//! bytes. The same names in the middle of the header block belong to the message and are
//! kept. `Content-Length` is removed only when it delimited the message. When a message's
//! own header block opens or closes with such a name, or its first line is a `From `
//! line, this writer puts a marker ([`ADDED`]) before the headers it adds and carries that
//! first line in [`FROM_LINE`]: the reader then removes only the marker and the metadata
//! headers after it, and puts the line back, so such messages come back exactly too.
//!
//! **Final newline.** The writer ends a message that lacks a final newline with one and
//! says so in an `X-Mailvault-No-Final-Newline: yes` metadata header, which the reader
//! honours by removing that newline again: the round trip is byte-exact.
//!
//! **Leading bytes.** Bytes before the first `From ` line (a file that does not start with
//! one) are kept as one message with no From line ([`MboxMessage::from_line`] `None`):
//! nothing is dropped; the caller may report it.
//!
//! Memory is one message (plus one line of at most the line cap, 1 MiB by default:
//! longer lines are read in pieces).

use std::io::{self, BufRead, Read, Write};

use serde::{Deserialize, Serialize};

use super::flags::{self, Found};
use super::{MailError, Meta};

/// Headers an mbox writer adds to a message (compared case-insensitively).
pub const METADATA_HEADERS: [&str; 13] = [
    "Status",
    "X-Status",
    "X-Keywords",
    "X-UID",
    "X-IMAP",
    "X-IMAPbase",
    "X-Mozilla-Status",
    "X-Mozilla-Status2",
    "X-Mozilla-Keys",
    "Content-Length",
    NO_FINAL_NEWLINE,
    ADDED,
    FROM_LINE,
];

/// The metadata header this writer adds to a message that did not end with a newline.
pub const NO_FINAL_NEWLINE: &str = "X-Mailvault-No-Final-Newline";

/// The marker this writer puts before the headers it adds, when the message's own
/// header block opens or closes with a header named like mbox metadata (its own
/// `Status:`, say) or its first line is a `From ` line: its value names the headers that
/// follow (`X-Mailvault-Added: Status X-Keywords`). A reader removes the marker and the
/// metadata headers after it, and keeps every header line before it as the message's.
pub const ADDED: &str = "X-Mailvault-Added";

/// The header that carries a message's own first line when that line matches `>*From `
/// (`X-Mailvault-From-Line: From someone Mon Jan  1 00:00:00 2024`): written in the
/// message's place, it would be a separator or, quoted, a first line that is not a
/// header, and other readers would see no headers. Reading puts the line back.
pub const FROM_LINE: &str = "X-Mailvault-From-Line";

/// Lines longer than this are read in pieces (a piece is never a separator).
pub const DEFAULT_LINE_CAP: usize = 1 << 20;

/// A `Content-Length` above this is not followed (it would be read into memory first).
pub const MAX_CONTENT_LENGTH: u64 = 1 << 30;

/// The sender written when none is known or the one given cannot be written.
pub const DEFAULT_SENDER: &str = "MAILER-DAEMON";

/// One message of an mbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MboxMessage {
    /// Byte offset of its `From ` line (of its first byte when it has none).
    pub offset: u64,
    /// Byte offset just after it and its separator's empty line: the next message's
    /// offset, or the end of input.
    pub end: u64,
    /// Its `From ` line without the line ending; `None` for bytes before the first one.
    pub from_line: Option<Vec<u8>>,
    /// The From line's sender (`MAILER-DAEMON`, an address), if any.
    pub sender: Option<String>,
    /// Flags and keywords from its metadata headers; the internal date from its From line.
    pub meta: Meta,
    /// The message, without From line, metadata headers, quoting or separator.
    pub bytes: Vec<u8>,
    /// Whether `Content-Length` delimited it.
    pub content_length: bool,
    /// Whether it is the "DON'T DELETE THIS MESSAGE -- FOLDER INTERNAL DATA" message that
    /// UW-IMAP, Pine and Dovecot keep first in an mbox (an `X-IMAP:` header and that
    /// subject): the folder's state, not mail; a source skips it.
    pub folder_internal: bool,
}

/// A line reader over a `BufRead` with a line cap and a push-back buffer.
struct Lines<R> {
    r: R,
    back: Vec<u8>,
    back_pos: usize,
    /// Offset of the next byte handed out.
    offset: u64,
    /// Whether the next byte handed out starts a line.
    line_start: bool,
    cap: usize,
}

impl<R: BufRead> Lines<R> {
    /// Appends the next line (through its `\n`, at most `cap` bytes) to `out`; 0 at the end.
    fn line(&mut self, out: &mut Vec<u8>) -> io::Result<usize> {
        let start = out.len();
        let mut need = self.cap;
        if self.back_pos < self.back.len() {
            let rest = &self.back[self.back_pos..];
            let take = rest.len().min(need);
            let n = memchr::memchr(b'\n', &rest[..take]).map_or(take, |i| i + 1);
            out.extend_from_slice(&rest[..n]);
            self.back_pos += n;
            if self.back_pos == self.back.len() {
                self.back.clear();
                self.back_pos = 0;
            }
            need -= n;
        }
        if (need > 0 && out.last() != Some(&b'\n')) || out.len() == start {
            Read::take(&mut self.r, need as u64).read_until(b'\n', out)?;
        }
        Ok(self.advanced(out, start))
    }

    /// At a line start with nothing put back: appends the complete lines that the input
    /// has buffered, up to the first one starting `From ` (or through the last newline);
    /// none when it cannot tell. [`line`](Self::line) would read each such line whole
    /// (none is looked for beyond the cap) and none is a separator, so the caller skips
    /// its per-line checks: the reader's fast path over message bodies, one `memmem`
    /// search per buffer instead of a call per line.
    fn plain_lines(&mut self, out: &mut Vec<u8>) -> io::Result<usize> {
        if !self.line_start || self.back_pos < self.back.len() {
            return Ok(0);
        }
        let buf = self.r.fill_buf()?;
        // Lines longer than the cap are read in pieces by `line`; looking no further than
        // the cap keeps every line taken here shorter than it.
        let buf = &buf[..buf.len().min(self.cap)];
        let n = if buf.starts_with(b"From ") {
            0
        } else {
            match memchr::memmem::find(buf, b"\nFrom ") {
                Some(i) => i + 1,
                None => memchr::memrchr(b'\n', buf).map_or(0, |i| i + 1),
            }
        };
        let start = out.len();
        out.extend_from_slice(&buf[..n]);
        self.r.consume(n);
        Ok(self.advanced(out, start))
    }

    /// Appends up to `n` bytes (fewer only at the end of input) to `out`.
    fn bytes(&mut self, n: u64, out: &mut Vec<u8>) -> io::Result<u64> {
        let start = out.len();
        let from_back = (self.back.len() - self.back_pos).min(n as usize);
        out.extend_from_slice(&self.back[self.back_pos..self.back_pos + from_back]);
        self.back_pos += from_back;
        let rest = n - from_back as u64;
        if rest > 0 {
            Read::take(&mut self.r, rest).read_to_end(out)?;
        }
        Ok(self.advanced(out, start) as u64)
    }

    fn advanced(&mut self, out: &[u8], start: usize) -> usize {
        let n = out.len() - start;
        if n > 0 {
            self.offset += n as u64;
            self.line_start = out.last() == Some(&b'\n');
        }
        n
    }

    /// Puts `bytes` back in front of the input; they start a line.
    fn unread(&mut self, bytes: &[u8]) {
        let mut back = Vec::with_capacity(bytes.len() + self.back.len() - self.back_pos);
        back.extend_from_slice(bytes);
        back.extend_from_slice(&self.back[self.back_pos..]);
        self.back = back;
        self.back_pos = 0;
        self.offset -= bytes.len() as u64;
        self.line_start = true;
    }
}

/// Reads an mbox one message at a time (an iterator of [`MboxMessage`]).
pub struct MboxReader<R> {
    lines: Lines<R>,
    /// Offset where reading began.
    start: u64,
    /// The next message's From line, already read, and its offset.
    next_from: Option<(u64, Vec<u8>)>,
    /// End of the last message handed out.
    position: u64,
    started: bool,
    failed: bool,
    max_content_length: u64,
}

impl<R: BufRead> MboxReader<R> {
    /// A reader of a whole mbox.
    pub fn new(r: R) -> Self {
        MboxReader::at(r, 0)
    }

    /// A reader whose input starts at byte `offset` of the file (for an mbox that grew:
    /// [`Change::Grown`]); offsets in messages and errors are the file's.
    pub fn at(r: R, offset: u64) -> Self {
        MboxReader {
            lines: Lines {
                r,
                back: Vec::new(),
                back_pos: 0,
                offset,
                line_start: true,
                cap: DEFAULT_LINE_CAP,
            },
            start: offset,
            next_from: None,
            position: offset,
            started: false,
            failed: false,
            max_content_length: MAX_CONTENT_LENGTH,
        }
    }

    /// Sets the line cap (at least 64 bytes).
    pub fn with_line_cap(mut self, cap: usize) -> Self {
        self.lines.cap = cap.max(64);
        self
    }

    /// Bytes of input the messages handed out so far span (from the starting offset to
    /// the end of the last one): at the end, the bytes read.
    pub fn consumed(&self) -> u64 {
        self.position - self.start
    }

    /// The file offset just after the last message handed out.
    pub fn position(&self) -> u64 {
        self.position
    }

    fn read_message(&mut self) -> io::Result<Option<MboxMessage>> {
        let mut raw = Vec::new();
        let (offset, from_line) = match self.next_from.take() {
            Some((o, l)) => (o, Some(l)),
            None if !self.started => {
                self.started = true;
                let off = self.lines.offset;
                if self.lines.line(&mut raw)? == 0 {
                    return Ok(None);
                }
                if raw.starts_with(b"From ") {
                    (off, Some(std::mem::take(&mut raw)))
                } else {
                    self.lines.unread(&raw);
                    raw.clear();
                    (off, None)
                }
            }
            None => return Ok(None),
        };
        let mut cl = false;
        let mut prev_empty = false;
        let mut in_headers = true;
        loop {
            if !in_headers {
                // Whole body lines that are not `From ` lines: only whether the last one
                // was empty matters.
                let s = raw.len();
                if self.lines.plain_lines(&mut raw)? > 0 {
                    prev_empty = ends_with_empty_line(&raw[s..]);
                }
            }
            let at_start = self.lines.line_start;
            let off = self.lines.offset;
            let s = raw.len();
            if self.lines.line(&mut raw)? == 0 {
                break;
            }
            let line = &raw[s..];
            if at_start && is_separator(line, prev_empty) {
                self.next_from = Some((off, line.to_vec()));
                raw.truncate(s);
                break;
            }
            let empty = at_start && is_empty_line(line);
            prev_empty = empty;
            if in_headers && empty {
                in_headers = false;
                if let Some(n) = content_length(&raw[..s]) {
                    if n <= self.max_content_length && self.content_length(&mut raw, n)? {
                        cl = true;
                        break;
                    }
                }
            }
        }
        let end = self
            .next_from
            .as_ref()
            .map_or(self.lines.offset, |(o, _)| *o);
        self.position = end;
        let (sender, date) = match &from_line {
            Some(l) => parse_from_line(l),
            None => (None, None),
        };
        let folder_internal =
            offset == 0 && header_value(&raw[..header_end(&raw)], b"X-IMAP").is_some() && {
                let subject = header_value(&raw[..header_end(&raw)], b"Subject").unwrap_or(b"");
                memchr::memmem::find(subject, b"FOLDER INTERNAL DATA").is_some()
            };
        let (mut bytes, mut meta) = decode(raw, cl);
        // The buffer grew by doubling: give back what the message does not use (in place).
        bytes.shrink_to_fit();
        meta.internal_date = date;
        Ok(Some(MboxMessage {
            offset,
            end,
            from_line: from_line.map(|mut l| {
                trim_eol(&mut l);
                l
            }),
            sender,
            meta,
            bytes,
            content_length: cl,
            folder_internal,
        }))
    }

    /// After a header block that says `Content-Length: n`: reads the body and says whether
    /// the length lands on a separator or the end of input. If not, what was read is put
    /// back for the line rule.
    fn content_length(&mut self, raw: &mut Vec<u8>, n: u64) -> io::Result<bool> {
        let body = raw.len();
        let landed = self.lines.bytes(n, raw)? == n && {
            let at_start = self.lines.line_start;
            let off1 = self.lines.offset;
            let s1 = raw.len();
            if self.lines.line(raw)? == 0 {
                true
            } else if at_start && raw[s1..].starts_with(b"From ") {
                self.next_from = Some((off1, raw[s1..].to_vec()));
                raw.truncate(s1);
                true
            } else if at_start && is_empty_line(&raw[s1..]) {
                let off2 = self.lines.offset;
                let s2 = raw.len();
                if self.lines.line(raw)? == 0 {
                    raw.truncate(s1);
                    true
                } else if raw[s2..].starts_with(b"From ") {
                    self.next_from = Some((off2, raw[s2..].to_vec()));
                    raw.truncate(s1);
                    true
                } else {
                    false
                }
            } else {
                false
            }
        };
        if !landed {
            let rest = raw.split_off(body);
            self.lines.unread(&rest);
        }
        Ok(landed)
    }
}

impl<R: BufRead> Iterator for MboxReader<R> {
    type Item = Result<MboxMessage, MailError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.read_message() {
            Ok(m) => m.map(Ok),
            Err(source) => {
                self.failed = true;
                Some(Err(MailError::Io {
                    offset: self.lines.offset,
                    source,
                }))
            }
        }
    }
}

fn is_empty_line(line: &[u8]) -> bool {
    line == b"\n" || line == b"\r\n"
}

/// Whether the last line of `lines` (whole lines, the first at a line start) is empty.
fn ends_with_empty_line(lines: &[u8]) -> bool {
    is_empty_line(lines) || lines.ends_with(b"\n\n") || lines.ends_with(b"\n\r\n")
}

fn is_separator(line: &[u8], prev_empty: bool) -> bool {
    line.starts_with(b"From ") && (prev_empty || parse_from_line(line).1.is_some())
}

fn trim_eol(l: &mut Vec<u8>) {
    if l.last() == Some(&b'\n') {
        l.pop();
        if l.last() == Some(&b'\r') {
            l.pop();
        }
    }
}

/// A raw message (bytes between From line and the next, with the separator's empty line
/// unless `cl`) to its bytes and flags.
fn decode(mut raw: Vec<u8>, cl: bool) -> (Vec<u8>, Meta) {
    if !cl {
        if raw == b"\n" || raw.ends_with(b"\n\n") {
            raw.pop();
        } else if raw == b"\r\n" || raw.ends_with(b"\n\r\n") {
            raw.truncate(raw.len() - 2);
        }
        if memchr::memmem::find(&raw, b">From ").is_some() {
            raw = requote(&raw, false);
        }
    }
    strip_metadata(raw, cl)
}

/// mboxrd quoting: each line matching `>*From ` gains (`add`) or loses one `>`.
fn requote(m: &[u8], add: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(m.len() + if add { 64 } else { 0 });
    let mut p = 0;
    while p < m.len() {
        let e = memchr::memchr(b'\n', &m[p..]).map_or(m.len(), |i| p + i + 1);
        let line = &m[p..e];
        let gts = line.iter().take_while(|&&b| b == b'>').count();
        if line[gts..].starts_with(b"From ") {
            if add {
                out.push(b'>');
                out.extend_from_slice(line);
            } else if gts > 0 {
                out.extend_from_slice(&line[1..]);
            } else {
                out.extend_from_slice(line);
            }
        } else {
            out.extend_from_slice(line);
        }
        p = e;
    }
    out
}

/// Where a message's header block ends: the start of its first empty line, or its end.
fn header_end(m: &[u8]) -> usize {
    let mut p = 0;
    while p < m.len() {
        if m[p] == b'\n' || m[p..].starts_with(b"\r\n") {
            return p;
        }
        match memchr::memchr(b'\n', &m[p..]) {
            Some(i) => p += i + 1,
            None => return m.len(),
        }
    }
    m.len()
}

/// A header field of a header block: its byte range (continuation lines included) and
/// its name, if its first line has one.
struct Field<'a> {
    start: usize,
    end: usize,
    name: Option<&'a [u8]>,
}

fn is_continuation(line: &[u8]) -> bool {
    matches!(line.first(), Some(b' ' | b'\t'))
}

/// The field starting at `p` (a line start before the end of `block`).
fn field_at(block: &[u8], p: usize) -> Field<'_> {
    let line_end = |p: usize| memchr::memchr(b'\n', &block[p..]).map_or(block.len(), |i| p + i + 1);
    let first = line_end(p);
    let mut end = first;
    while end < block.len() && is_continuation(&block[end..]) {
        end = line_end(end);
    }
    Field {
        start: p,
        end,
        name: field_name(&block[p..first]),
    }
}

/// The field ending at `end` (a line start after `floor`, itself a field start): its
/// first line is the last line before `end` that is not a continuation, or `floor`.
fn field_before(block: &[u8], floor: usize, end: usize) -> Field<'_> {
    let mut start = end;
    loop {
        start = memchr::memrchr(b'\n', &block[floor..start - 1]).map_or(floor, |i| floor + i + 1);
        if start == floor || !is_continuation(&block[start..]) {
            break;
        }
    }
    let first = memchr::memchr(b'\n', &block[start..end]).map_or(end, |i| start + i + 1);
    Field {
        start,
        end,
        name: field_name(&block[start..first]),
    }
}

fn field_name(line: &[u8]) -> Option<&[u8]> {
    let colon = memchr::memchr(b':', line)?;
    let name = line[..colon].trim_ascii_end();
    (!name.is_empty() && name.iter().all(|b| b.is_ascii_graphic())).then_some(name)
}

fn is_metadata(name: Option<&[u8]>) -> bool {
    name.is_some_and(|n| {
        METADATA_HEADERS
            .iter()
            .any(|h| n.eq_ignore_ascii_case(h.as_bytes()))
    })
}

/// The fields of the runs of metadata headers that open and close the header block
/// `block`, in the order they stand (the opening run, then the closing run). Only the
/// runs are parsed: a huge block costs no memory.
fn metadata_runs(block: &[u8]) -> Vec<Field<'_>> {
    let mut out = Vec::new();
    let mut p = 0;
    while p < block.len() {
        let f = field_at(block, p);
        if !is_metadata(f.name) {
            break;
        }
        p = f.end;
        out.push(f);
    }
    let opening = out.len();
    let mut e = block.len();
    while e > p {
        let f = field_before(block, p, e);
        if !is_metadata(f.name) {
            break;
        }
        e = f.start;
        out.push(f);
    }
    out[opening..].reverse();
    out
}

/// Where the writer's own headers start among `runs` (of a block `h` bytes long): at
/// its last [`ADDED`] marker that the fields after it join, without a gap, to the end of
/// the header block. `None`: no marker of the writer's.
fn writer_run(runs: &[Field<'_>], h: usize) -> Option<usize> {
    let i = runs.iter().rposition(|f| {
        f.name
            .is_some_and(|n| n.eq_ignore_ascii_case(ADDED.as_bytes()))
    })?;
    let joined = runs[i..].windows(2).all(|w| w[0].end == w[1].start);
    (joined && runs.last().is_some_and(|f| f.end == h)).then_some(i)
}

fn field_value<'a>(block: &'a [u8], f: &Field<'_>) -> &'a [u8] {
    let text = &block[f.start..f.end];
    let colon = memchr::memchr(b':', text).map_or(0, |i| i + 1);
    &text[colon..]
}

/// The value of the first header `name` of a header block (anywhere in it).
fn header_value<'a>(block: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    let mut p = 0;
    while p < block.len() {
        let f = field_at(block, p);
        if f.name.is_some_and(|n| n.eq_ignore_ascii_case(name)) {
            return Some(field_value(block, &f));
        }
        p = f.end;
    }
    None
}

/// `Content-Length` of a header block (anywhere in it), if one parses.
fn content_length(block: &[u8]) -> Option<u64> {
    std::str::from_utf8(header_value(block, b"Content-Length")?)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Reads and removes the metadata headers (see the module's documentation): with the
/// writer's [`ADDED`] marker, only the marker and the metadata headers after it; else
/// the runs that open and close the header block.
fn strip_metadata(m: Vec<u8>, cl: bool) -> (Vec<u8>, Meta) {
    let h = header_end(&m);
    let mut runs = metadata_runs(&m[..h]);
    if let Some(i) = writer_run(&runs, h) {
        runs.drain(..i);
    }
    let mut found = Found::default();
    let mut drop: Vec<(usize, usize)> = Vec::new();
    let mut no_final_newline = false;
    let mut first_line: Option<(usize, usize)> = None;
    for f in &runs {
        let Some(name) = f.name else { continue };
        if name.eq_ignore_ascii_case(b"Content-Length") && !cl {
            continue;
        }
        if name.eq_ignore_ascii_case(NO_FINAL_NEWLINE.as_bytes()) {
            no_final_newline = true;
        }
        if name.eq_ignore_ascii_case(FROM_LINE.as_bytes()) && first_line.is_none() {
            // `Name: ` and the line, through its line ending.
            let colon = memchr::memchr(b':', &m[f.start..f.end]).map_or(f.end, |c| f.start + c);
            let start = if m.get(colon + 1) == Some(&b' ') {
                colon + 2
            } else {
                colon + 1
            };
            first_line = Some((start.min(f.end), f.end));
        }
        found.header(name, field_value(&m, f));
        drop.push((f.start, f.end));
    }
    let meta = found.into_meta(None);
    if drop.is_empty() {
        return (m, meta);
    }
    let line = first_line.map(|(s, e)| m[s..e].to_vec());
    drop.sort_unstable();
    // In place: what follows each dropped field moves down (no second message buffer).
    let mut out = m;
    let (mut w, mut p) = (0, 0);
    for (s, e) in drop.into_iter().chain([(out.len(), out.len())]) {
        out.copy_within(p..s, w);
        w += s - p;
        p = e;
    }
    out.truncate(w);
    if let Some(line) = line {
        out.splice(0..0, line);
    }
    if no_final_newline && out.last() == Some(&b'\n') {
        out.pop();
    }
    (out, meta)
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// A From line's sender and date (Unix seconds). The date is asctime
/// (`Tue Nov 24 07:00:00 2026`, UTC), also with the day space-padded or two digits, no
/// seconds, a zone name (ignored: UTC) before or after the year, a numeric offset
/// (`+0100`, applied), a trailing `remote from host`, or in RFC 2822 order. Anything else
/// gives `None`, never an error.
pub fn parse_from_line(line: &[u8]) -> (Option<String>, Option<i64>) {
    let Some(rest) = line.strip_prefix(b"From ") else {
        return (None, None);
    };
    let text = String::from_utf8_lossy(rest);
    let text = text.trim_end_matches(['\r', '\n']);
    let (sender, date) = if text.starts_with([' ', '\t']) {
        (None, text)
    } else {
        match text.split_once([' ', '\t']) {
            Some((s, d)) => (Some(s.to_string()), d),
            None => (Some(text.to_string()), ""),
        }
    };
    (sender.filter(|s| !s.is_empty()), parse_date(date))
}

fn parse_date(s: &str) -> Option<i64> {
    let (mut month, mut day, mut time, mut year) = (None, None, None, None);
    let mut offset = 0i64;
    for t in s.split_whitespace() {
        let t = t.trim_end_matches(',');
        if t.eq_ignore_ascii_case("remote") {
            break;
        }
        if month.is_none() {
            if let Some(m) = MONTHS.iter().position(|m| m.eq_ignore_ascii_case(t)) {
                month = Some(m as i8 + 1);
                continue;
            }
        }
        if time.is_none() && t.contains(':') {
            let mut parts = t.split(':').map(|p| p.parse::<i8>().ok());
            let (h, m, s) = (
                parts.next()??,
                parts.next()??,
                parts.next().unwrap_or(Some(0))?,
            );
            if parts.next().is_some() {
                return None;
            }
            time = Some((h, m, s));
        } else if t.bytes().all(|b| b.is_ascii_digit()) {
            match t.len() {
                1 | 2 if day.is_none() => day = t.parse::<i8>().ok(),
                4 if year.is_none() => year = t.parse::<i16>().ok(),
                _ => return None,
            }
        } else if t.len() == 5 && (t.starts_with('+') || t.starts_with('-')) {
            let n: i64 = t[1..].parse().ok()?;
            let secs = (n / 100) * 3600 + (n % 100) * 60;
            offset = if t.starts_with('-') { -secs } else { secs };
        }
    }
    let (h, mi, sec) = time?;
    let dt = jiff::civil::DateTime::new(year?, month?, day?, h, mi, sec, 0).ok()?;
    let ts = dt.to_zoned(jiff::tz::TimeZone::UTC).ok()?.timestamp();
    Some(ts.as_second() - offset)
}

/// `secs` as asctime in UTC (`Tue Nov 24 07:00:00 2026`), if it is a date jiff can show.
pub fn asctime(secs: i64) -> Option<String> {
    let ts = jiff::Timestamp::from_second(secs).ok()?;
    Some(
        ts.to_zoned(jiff::tz::TimeZone::UTC)
            .strftime("%a %b %e %H:%M:%S %Y")
            .to_string(),
    )
}

/// What [`MboxWriter::write`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// Offset of the message's From line in the output.
    pub offset: u64,
    /// Bytes written for it (From line to separator, included).
    pub len: u64,
    /// Reading it back does not give the same bytes, flags, keywords or date: its own
    /// `Content-Length:` delimits it where the quoted body ends (every mbox reader then
    /// takes the body as it stands, quoting included), or its date cannot be written.
    /// The caller reports it; the message is written all the same.
    pub lossy: bool,
}

/// Writes mboxrd: per message a From line (`From <sender> <asctime of the internal date,
/// UTC>`), the message with `Status:`, `X-Status:`, `X-Keywords:` (and
/// [`NO_FINAL_NEWLINE`]) appended to its header block in the message's own line endings,
/// every line matching `>*From ` given one more `>`, a final newline when missing, and an
/// empty line.
pub struct MboxWriter<W> {
    w: W,
    offset: u64,
    /// The `X-IMAPbase:` value still to write into the first message.
    imap_base: Option<String>,
}

impl<W: Write> MboxWriter<W> {
    /// A writer at the start of an empty file.
    pub fn new(w: W) -> Self {
        MboxWriter::at(w, 0)
    }

    /// A writer appending to an mbox of `offset` bytes (which ends with its separator).
    pub fn at(w: W, offset: u64) -> Self {
        MboxWriter {
            w,
            offset,
            imap_base: None,
        }
    }

    /// Declares the folder's keywords up front: the first message (when the writer starts
    /// a new file) gets `X-IMAPbase: <uid_validity> 0 <keywords>`. Dovecot reads a
    /// message's `X-Keywords:` only for keywords its folder's `X-IMAPbase:` lists (and
    /// drops the others when it rewrites the file); other readers ignore the header, and
    /// ours removes it as metadata. Keywords that an mbox cannot carry are refused.
    pub fn declare_keywords<S: AsRef<str>>(
        mut self,
        uid_validity: u32,
        keywords: &[S],
    ) -> Result<Self, MailError> {
        let mut line = format!("{}", uid_validity.max(1));
        let mut seen: Vec<&str> = Vec::new();
        for k in keywords {
            let k = k.as_ref();
            flags::check_keyword(k)?;
            if !seen.iter().any(|x| x.eq_ignore_ascii_case(k)) {
                seen.push(k);
            }
        }
        line.push_str(" 0");
        for k in seen {
            line.push(' ');
            line.push_str(k);
        }
        if self.offset == 0 {
            self.imap_base = Some(line);
        }
        Ok(self)
    }

    /// Writes one message; `sender` goes into the From line when it is a single word
    /// (else `MAILER-DAEMON`); no date is written as the epoch.
    pub fn write(
        &mut self,
        bytes: &[u8],
        meta: &Meta,
        sender: Option<&str>,
    ) -> Result<Written, MailError> {
        let imap_base = self.imap_base.take();
        let (from_line, quoted, date_ok) = encode(bytes, meta, sender, imap_base.as_deref())?;
        let offset = self.offset;
        let len = (from_line.len() + quoted.len() + 1) as u64;
        for part in [from_line.as_bytes(), &quoted, b"\n"] {
            self.w
                .write_all(part)
                .map_err(|source| MailError::Io { offset, source })?;
        }
        self.offset += len;
        let lossy = !date_ok || !reads_back(quoted, bytes, meta);
        Ok(Written { offset, len, lossy })
    }

    /// Flushes and gives back the output.
    /// Hands what is written on (the writer stays open for more).
    pub fn flush(&mut self) -> Result<(), MailError> {
        let offset = self.offset;
        (self.w.flush()).map_err(|source| MailError::Io { offset, source })
    }

    pub fn finish(mut self) -> Result<W, MailError> {
        let offset = self.offset;
        self.w
            .flush()
            .map_err(|source| MailError::Io { offset, source })?;
        Ok(self.w)
    }
}

/// One message as the writer writes it: its From line, the message with metadata headers
/// and quoting (the separator's empty line follows), and whether the date could be written.
fn encode(
    bytes: &[u8],
    meta: &Meta,
    sender: Option<&str>,
    imap_base: Option<&str>,
) -> Result<(String, Vec<u8>, bool), MailError> {
    let sender = sender
        .filter(|s| !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c.is_control()))
        .unwrap_or(DEFAULT_SENDER);
    let date = asctime(meta.internal_date.unwrap_or(0));
    let date_ok = date.is_some();
    let date = date.or_else(|| asctime(0)).unwrap_or_default();

    let added_newline = bytes.last() != Some(&b'\n');
    let eol: &[u8] = match memchr::memchr(b'\n', bytes) {
        Some(i) if i > 0 && bytes[i - 1] == b'\r' => b"\r\n",
        _ => b"\n",
    };
    let mut m = Vec::with_capacity(bytes.len() + 256);
    m.extend_from_slice(bytes);
    if added_newline {
        m.push(b'\n');
    }
    // The message's own first line, when it matches `>*From `: carried in a header.
    let first_line = {
        let gts = m.iter().take_while(|&&b| b == b'>').count();
        m[gts..].starts_with(b"From ").then(|| {
            let end = memchr::memchr(b'\n', &m).map_or(m.len(), |i| i + 1);
            m.drain(..end).collect::<Vec<u8>>()
        })
    };
    let h = header_end(&m);
    let marked = first_line.is_some() || !metadata_runs(&m[..h]).is_empty();
    let mut headers = Vec::new();
    if let Some(base) = imap_base {
        headers.extend_from_slice(b"X-IMAPbase: ");
        headers.extend_from_slice(base.as_bytes());
        headers.extend_from_slice(eol);
    }
    flags::header_lines(meta, eol, &mut headers)?;
    if let Some(line) = &first_line {
        headers.extend_from_slice(FROM_LINE.as_bytes());
        headers.extend_from_slice(b": ");
        headers.extend_from_slice(line);
        if line.last() != Some(&b'\n') {
            headers.extend_from_slice(eol);
        }
    }
    if added_newline {
        headers.extend_from_slice(NO_FINAL_NEWLINE.as_bytes());
        headers.extend_from_slice(b": yes");
        headers.extend_from_slice(eol);
    }
    if marked {
        // The marker first, naming what follows.
        let mut names = Vec::new();
        let mut p = 0;
        while p < headers.len() {
            let f = field_at(&headers, p);
            if let Some(n) = f.name {
                names.push(String::from_utf8_lossy(n).into_owned());
            }
            p = f.end;
        }
        let mut marker = format!("{ADDED}: {}", names.join(" ")).into_bytes();
        marker.extend_from_slice(eol);
        headers.splice(0..0, marker);
    }
    m.splice(h..h, headers);
    if memchr::memmem::find(&m, b"From ").is_some() {
        m = requote(&m, true);
    }
    Ok((format!("From {sender} {date}\n"), m, date_ok))
}

/// Whether reading `quoted` (as [`encode`] made it, followed by the separator) gives back
/// `bytes` with `meta`'s flags and keywords. `Content-Length` delimits it when it lands
/// just before or just after the separator's empty line.
fn reads_back(quoted: Vec<u8>, bytes: &[u8], meta: &Meta) -> bool {
    let h = header_end(&quoted);
    let landing = content_length(&quoted[..h])
        .filter(|_| h < quoted.len())
        .and_then(|n| {
            let body = if quoted[h..].starts_with(b"\r\n") {
                h + 2
            } else {
                h + 1
            };
            let end = (body as u64).checked_add(n)?;
            let len = quoted.len() as u64;
            (end == len || end == len + 1).then_some(end == len + 1)
        });
    let mut raw = quoted;
    if landing != Some(false) {
        raw.push(b'\n');
    }
    let (back, back_meta) = decode(raw, landing.is_some());
    let want = Meta::from_imap(&meta.imap_list(), meta.internal_date);
    back == bytes && back_meta.flags == want.flags && back_meta.keywords == want.keywords
}

/// What is kept of an mbox between two backups, to tell one that only grew
/// ([`MboxState::compare`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MboxState {
    /// The file's size.
    pub size: u64,
    /// BLAKE3 (hex) of its first [`WINDOW`] bytes (all of it when smaller).
    pub head: String,
    /// BLAKE3 (hex) of the [`WINDOW`] bytes before its end (all of it when smaller).
    pub tail: String,
    /// How many messages it held.
    pub messages: u64,
}

/// The bytes [`MboxState`] hashes at each end.
pub const WINDOW: u64 = 64 * 1024;

/// How an mbox changed since an [`MboxState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Same size, same head and tail.
    Unchanged,
    /// Only grew: read it from `from` (the old size) with [`MboxReader::at`].
    Grown { from: u64 },
    /// Anything else: read it all again (messages already stored dedup by content).
    Rewritten,
}

fn hash_range<F>(read_at: &mut F, start: u64, len: u64) -> io::Result<String>
where
    F: FnMut(u64, &mut [u8]) -> io::Result<()>,
{
    let mut buf = vec![0u8; len as usize];
    read_at(start, &mut buf)?;
    Ok(blake3::hash(&buf).to_hex().to_string())
}

impl MboxState {
    /// The state of a file of `size` bytes holding `messages` messages; `read_at(offset,
    /// buf)` fills `buf` with the file's bytes at `offset`.
    pub fn of<F>(size: u64, messages: u64, mut read_at: F) -> io::Result<MboxState>
    where
        F: FnMut(u64, &mut [u8]) -> io::Result<()>,
    {
        let w = size.min(WINDOW);
        Ok(MboxState {
            size,
            head: hash_range(&mut read_at, 0, w)?,
            tail: hash_range(&mut read_at, size - w, w)?,
            messages,
        })
    }

    /// How the file, now `size` bytes, changed since this state. The rule: it **grew**
    /// when it is longer, its first `min(WINDOW, old size)` bytes and the
    /// `min(WINDOW, old size)` bytes before the old end hash as before, and the bytes at
    /// the old end start a message the reader would split there: a `From ` line right
    /// after a newline, after an empty line or with a date that parses (an old size of 0
    /// grew into anything). It is **unchanged** when the size and both hashes are the
    /// same; else **rewritten** (an expunge, a rewrite, a truncation). A change between
    /// the two windows of an unchanged-size file goes unseen: mbox writers append or
    /// rewrite, they do not change bytes in place without changing the size.
    pub fn compare<F>(&self, size: u64, mut read_at: F) -> io::Result<Change>
    where
        F: FnMut(u64, &mut [u8]) -> io::Result<()>,
    {
        if size < self.size {
            return Ok(Change::Rewritten);
        }
        let w = self.size.min(WINDOW);
        if hash_range(&mut read_at, 0, w)? != self.head
            || hash_range(&mut read_at, self.size - w, w)? != self.tail
        {
            return Ok(Change::Rewritten);
        }
        if size == self.size {
            return Ok(Change::Unchanged);
        }
        if self.size == 0 {
            return Ok(Change::Grown { from: 0 });
        }
        let before = self.size.min(3);
        let mut tail = vec![0u8; before as usize];
        read_at(self.size - before, &mut tail)?;
        let mut line = vec![0u8; (size - self.size).min(1024) as usize];
        read_at(self.size, &mut line)?;
        let line = memchr::memchr(b'\n', &line).map_or(&line[..], |i| &line[..=i]);
        let prev_empty = self.size == 1 || tail.ends_with(b"\n\n") || tail.ends_with(b"\n\r\n");
        Ok(if tail.ends_with(b"\n") && is_separator(line, prev_empty) {
            Change::Grown { from: self.size }
        } else {
            Change::Rewritten
        })
    }
}

#[cfg(test)]
#[path = "mbox_tests.rs"]
mod tests;
