//! Base64 line runs stored decoded (codec 4).
//!
//! Three quarters of a mail store's bytes are attachments in base64: lines of 76 (or 64,
//! 72…) characters of the base64 alphabet. zstd finds no matches in base64 of binary data
//! and codes it as Huffman literals, 0.75 of the size, and decoding those literals was the
//! largest single client cost of a restore into IMAP (23%, bench/IMAP.md). Storing such
//! lines decoded takes the same 0.75 and turns the restore's work into base64 encoding,
//! several times faster than Huffman decoding; the backup's work becomes base64 decoding,
//! faster than zstd's compression.
//!
//! No crate does this transform: it has to give back the exact bytes of any blob,
//! including the chunk boundaries that cut lines in half, odd line lengths, CRLF and LF,
//! and text between attachments, so the layout is kept explicitly. A blob is cut into
//! segments: **literals** (bytes kept as they are) and **runs** (at least [`MIN_LINES`]
//! consecutive lines of the same length `4k` characters from the standard base64 alphabet
//! without padding, each followed by the same line ending). A full line without padding
//! decodes to exactly `3k` bytes and encodes back to the same characters, so a run is
//! stored as its decoded bytes and nothing is lost. A padded last line, a cut line, or any
//! other text is a literal.
//!
//! Encoding, after the codec byte in the index:
//!
//! ```text
//! version u8 (1) · segments varint · per segment: kind u8 (0 literal, 1 run LF, 2 run CRLF)
//!   literal: length varint · run: characters per line / 4 u8 (1..=63), lines varint
//! · then every segment's bytes in order: a literal's as they are, a run's decoded
//! ```
//!
//! The SIMD base64 of `base64-simd` does the per-line work.

use base64_simd::{Out, STANDARD};

/// Fewest lines a run has (shorter ones are literals: not worth a segment).
pub const MIN_LINES: usize = 4;
/// Blobs smaller than this are not worth scanning.
pub const MIN_BLOB: usize = 1024;
/// A blob is encoded this way only when at most this fraction (1/N) of it is literal: the
/// literals are stored uncompressed, so a blob of mostly text is better off with zstd.
const MAX_LITERAL_SHARE: usize = 10;
/// Longest line of a run, in characters (the kind byte holds length / 4).
const MAX_LINE: usize = 63 * 4;

const VERSION: u8 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Segment {
    Literal(usize),
    Run {
        chars: usize,
        crlf: bool,
        lines: usize,
    },
}

/// The line that starts at `data[pos..]` if it can be part of a run: (characters,
/// CRLF?, length with its line ending).
fn run_line(data: &[u8], pos: usize) -> Option<(usize, bool, usize)> {
    let rest = &data[pos..];
    let nl = memchr::memchr(b'\n', &rest[..rest.len().min(MAX_LINE + 2)])?;
    let crlf = nl > 0 && rest[nl - 1] == b'\r';
    let chars = nl - usize::from(crlf);
    (chars >= 4 && chars % 4 == 0 && chars <= MAX_LINE).then_some((chars, crlf, nl + 1))
}

/// A run being read.
struct OpenRun {
    chars: usize,
    crlf: bool,
    lines: usize,
    /// Where its decoded bytes start in the body.
    body_start: usize,
    /// Where its text starts in the input.
    text_start: usize,
}

/// The state of [`encode`]: segments so far and the body they describe.
struct Encoder<'a> {
    data: &'a [u8],
    segs: Vec<Segment>,
    body: Vec<u8>,
    /// Bytes of the literal being read, already on the body.
    literal: usize,
    /// Bytes of all literals so far.
    literal_total: usize,
    run: Option<OpenRun>,
}

impl Encoder<'_> {
    /// Decodes the run line `data[pos..pos + chars]` onto the body; false (body unchanged)
    /// if it is not base64 of full groups (a padded line decodes to fewer bytes).
    fn decode_line(&mut self, pos: usize, chars: usize) -> bool {
        let mut line = [0u8; MAX_LINE / 4 * 3];
        let src = &self.data[pos..pos + chars];
        match STANDARD.decode(src, Out::from_slice(&mut line)) {
            Ok(d) if d.len() == chars / 4 * 3 => {
                // At the first run line the blob may well be an attachment: room for all
                // of it decoded, not before (text is given up on within its first tenth).
                let want = self.data.len() * 3 / 4 + 64;
                if self.body.capacity() < want {
                    self.body.reserve(want.saturating_sub(self.body.len()));
                }
                self.body.extend_from_slice(d);
                true
            }
            _ => false,
        }
    }

    /// Ends the open run at `pos`: a segment if it is long enough, else its text joins the
    /// literal.
    fn close_run(&mut self, pos: usize) {
        let Some(r) = self.run.take() else { return };
        if r.lines >= MIN_LINES {
            if self.literal > 0 {
                // The literal's bytes went onto the body before the run's.
                self.segs.push(Segment::Literal(self.literal));
                self.literal = 0;
            }
            self.segs.push(Segment::Run {
                chars: r.chars,
                crlf: r.crlf,
                lines: r.lines,
            });
        } else {
            self.body.truncate(r.body_start);
            self.add_literal(r.text_start, pos);
        }
    }

    fn add_literal(&mut self, from: usize, to: usize) {
        self.body.extend_from_slice(&self.data[from..to]);
        self.literal += to - from;
        self.literal_total += to - from;
    }
}

/// `data` as segments, or `None` when runs cover too little of it to be worth it.
pub fn encode(data: &[u8]) -> Option<Vec<u8>> {
    if data.len() < MIN_BLOB {
        return None;
    }
    let max_literal = data.len() / MAX_LITERAL_SHARE;
    let mut e = Encoder {
        data,
        segs: Vec::new(),
        body: Vec::new(),
        literal: 0,
        literal_total: 0,
        run: None,
    };
    let mut pos = 0;
    while pos < data.len() {
        if e.literal_total > max_literal {
            return None;
        }
        let line = run_line(data, pos).filter(|&(chars, _, _)| e.decode_line(pos, chars));
        match (line, e.run.as_mut()) {
            (Some((chars, crlf, len)), Some(r)) if r.chars == chars && r.crlf == crlf => {
                r.lines += 1;
                pos += len;
            }
            (Some((chars, crlf, len)), _) => {
                // A new run starts here. Its first line's bytes are on the body already;
                // the run being closed may still put its text back before them.
                let first = e.body.split_off(e.body.len() - chars / 4 * 3);
                e.close_run(pos);
                e.run = Some(OpenRun {
                    chars,
                    crlf,
                    lines: 1,
                    body_start: e.body.len(),
                    text_start: pos,
                });
                e.body.extend_from_slice(&first);
                pos += len;
            }
            (None, _) => {
                e.close_run(pos);
                // One line (or the rest) as literal.
                let end = memchr::memchr(b'\n', &data[pos..]).map_or(data.len(), |n| pos + n + 1);
                e.add_literal(pos, end);
                pos = end;
            }
        }
    }
    e.close_run(pos);
    if e.literal > 0 {
        e.segs.push(Segment::Literal(e.literal));
    }
    let Encoder {
        segs,
        body,
        literal_total,
        ..
    } = e;
    if literal_total > max_literal || !segs.iter().any(|s| matches!(s, Segment::Run { .. })) {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() + 8 + segs.len() * 6);
    out.push(VERSION);
    put_varint(&mut out, segs.len() as u64);
    for s in &segs {
        match *s {
            Segment::Literal(n) => {
                out.push(0);
                put_varint(&mut out, n as u64);
            }
            Segment::Run { chars, crlf, lines } => {
                out.push(if crlf { 2 } else { 1 });
                out.push((chars / 4) as u8);
                put_varint(&mut out, lines as u64);
            }
        }
    }
    out.extend_from_slice(&body);
    // Nothing lost, ever: a blob is stored this way only if it comes back exactly (an
    // encode pass compared as it goes, several GB/s).
    let exact = gives_back(&out, data);
    debug_assert!(exact, "base64 runs did not round-trip");
    exact.then_some(out)
}

/// Reverses [`encode`]: the blob's bytes, which must be `raw_len` long. Each run's lines
/// are encoded straight onto the end of the output: a line encoded aside and copied in
/// (as `expand` hands lines out) was a call to `memcpy` per line, 5% of an IMAP
/// restore's client CPU.
pub fn decode(enc: &[u8], raw_len: usize) -> Result<Vec<u8>, String> {
    let (segs, body) = segments(enc, raw_len)?;
    let mut out = Vec::with_capacity(raw_len);
    let mut b = 0;
    for s in segs {
        match s {
            Segment::Literal(n) => {
                out.extend_from_slice(&body[b..b + n]);
                b += n;
            }
            Segment::Run { chars, crlf, lines } => {
                let bytes = chars / 4 * 3;
                let ending: &[u8] = if crlf { b"\r\n" } else { b"\n" };
                let len = chars + ending.len();
                out.reserve(lines * len);
                for src in body[b..b + lines * bytes].chunks_exact(bytes) {
                    STANDARD.encode_append(src, &mut out);
                    out.extend_from_slice(ending);
                }
                b += lines * bytes;
            }
        }
    }
    Ok(out)
}

/// Whether `enc` gives back exactly `data`, without building it: the writer's check.
fn gives_back(enc: &[u8], data: &[u8]) -> bool {
    let mut at = 0;
    expand(enc, data.len(), |piece| {
        let same = data.get(at..at + piece.len()) == Some(piece);
        at += piece.len();
        same
    })
    .unwrap_or(false)
}

/// Parses and checks `enc`: its segments, which must make `raw_len` bytes out of its
/// body, and the body.
fn segments(enc: &[u8], raw_len: usize) -> Result<(Vec<Segment>, &[u8]), String> {
    let mut r = Reader { data: enc, pos: 0 };
    if r.byte()? != VERSION {
        return Err("unknown base64-runs version".into());
    }
    let n = r.varint()?;
    let mut segs = Vec::new();
    let (mut text_len, mut body_len) = (0u64, 0u64);
    for _ in 0..n {
        let s = match r.byte()? {
            0 => Segment::Literal(r.varint()? as usize),
            k @ (1 | 2) => {
                let quads = r.byte()? as usize;
                if quads == 0 || quads * 4 > MAX_LINE {
                    return Err(format!("bad line length {}", quads * 4));
                }
                Segment::Run {
                    chars: quads * 4,
                    crlf: k == 2,
                    lines: r.varint()? as usize,
                }
            }
            k => return Err(format!("bad segment kind {k}")),
        };
        let (text, body) = match s {
            Segment::Literal(n) => (n as u64, n as u64),
            // Saturating: a forged line count must fail the length check, not overflow.
            Segment::Run { chars, crlf, lines } => (
                (lines as u64).saturating_mul(chars as u64 + 1 + u64::from(crlf)),
                (lines as u64).saturating_mul(chars as u64 / 4 * 3),
            ),
        };
        text_len = text_len.saturating_add(text);
        body_len = body_len.saturating_add(body);
        if text_len > raw_len as u64 {
            return Err(format!("segments make more than {raw_len} bytes"));
        }
        segs.push(s);
    }
    let body = &enc[r.pos..];
    if text_len != raw_len as u64 || body_len != body.len() as u64 {
        return Err(format!(
            "segments make {text_len} bytes from {body_len}, expected {raw_len} from {}",
            body.len()
        ));
    }
    Ok((segs, body))
}

/// Parses and checks `enc` (its segments must make `raw_len` bytes out of its body) and
/// hands the blob's bytes to `emit` in order: literals as they are, run lines one by one.
/// `emit` returning false stops it (`Ok(false)`).
fn expand(enc: &[u8], raw_len: usize, mut emit: impl FnMut(&[u8]) -> bool) -> Result<bool, String> {
    let (segs, body) = segments(enc, raw_len)?;
    let mut line = [0u8; MAX_LINE + 2];
    let mut b = 0;
    for s in segs {
        match s {
            Segment::Literal(n) => {
                if !emit(&body[b..b + n]) {
                    return Ok(false);
                }
                b += n;
            }
            Segment::Run { chars, crlf, lines } => {
                let bytes = chars / 4 * 3;
                let ending: &[u8] = if crlf { b"\r\n" } else { b"\n" };
                let len = chars + ending.len();
                line[chars..len].copy_from_slice(ending);
                for _ in 0..lines {
                    let _ =
                        STANDARD.encode(&body[b..b + bytes], Out::from_slice(&mut line[..chars]));
                    if !emit(&line[..len]) {
                        return Ok(false);
                    }
                    b += bytes;
                }
            }
        }
    }
    Ok(true)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.data.get(self.pos).ok_or("truncated header")?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }
}

/// A MIME part body for tests and benches: `n` bytes of pseudo-random data in base64
/// lines of `width` characters, each ended by `eol`.
#[doc(hidden)]
pub fn test_attachment(n: usize, width: usize, eol: &str, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let bin: Vec<u8> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let text = STANDARD.encode_to_string(&bin);
    let mut out = Vec::new();
    for line in text.as_bytes().chunks(width) {
        out.extend_from_slice(line);
        out.extend_from_slice(eol.as_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn message(eol: &str) -> Vec<u8> {
        let mut m = format!(
            "From: a@example.org{eol}Subject: report{eol}Content-Type: multipart/mixed; boundary=\"b\"{eol}{eol}--b{eol}Content-Type: text/plain{eol}{eol}See attached.{eol}--b{eol}Content-Transfer-Encoding: base64{eol}{eol}"
        )
        .into_bytes();
        m.extend(test_attachment(40_000, 76, eol, 7));
        m.extend(format!("--b--{eol}").into_bytes());
        m
    }

    fn round_trip(data: &[u8]) -> Option<usize> {
        let enc = encode(data)?;
        assert_eq!(decode(&enc, data.len()).unwrap(), data);
        Some(enc.len())
    }

    /// Found by the `decompress` fuzz target: a run whose line count is near 2^64
    /// overflowed the length computation (a panic) instead of failing the length check.
    #[test]
    fn a_huge_line_count_is_an_error() {
        let mut enc = vec![1, 1, 1, 55];
        enc.extend([0xff; 9]);
        enc.push(0x01);
        assert!(decode(&enc, 49408).is_err());
    }

    #[test]
    fn attachments_store_decoded_and_come_back_exactly() {
        for eol in ["\n", "\r\n"] {
            let m = message(eol);
            let n = round_trip(&m).expect("a mostly-base64 message is encoded");
            assert!(n < m.len() * 77 / 100, "{n} of {}", m.len());
            // Cut anywhere (as content-defined chunks are): still exact.
            for cut in [1, 77, 100, 333, 5000, m.len() / 2] {
                round_trip(&m[cut..]);
                round_trip(&m[..m.len() - cut]);
            }
        }
    }

    #[test]
    fn other_line_lengths_padding_and_mixed_endings() {
        for width in [4, 64, 72, 76, 128, 252] {
            let a = test_attachment(10_000, width, "\n", width as u64);
            round_trip(&a).expect("encoded");
        }
        // Lines not a multiple of 4 long, or longer than 252: no runs, left to zstd.
        for width in [75, 256, 300] {
            assert!(encode(&test_attachment(10_000, width, "\n", 3)).is_none());
        }
        let mut mixed = test_attachment(6_000, 76, "\n", 1);
        mixed.extend(test_attachment(6_000, 76, "\r\n", 2));
        mixed.extend(test_attachment(6_000, 64, "\n", 3));
        let n = round_trip(&mixed).unwrap();
        assert!(n < mixed.len() * 77 / 100);
    }

    /// The stored form is a format: this pins it (header bytes and a hash of the whole).
    #[test]
    fn golden_encoding() {
        let mut m = b"Content-Type: application/pdf\r\n\r\n".to_vec();
        m.extend(test_attachment(2_000, 76, "\r\n", 5));
        m.extend_from_slice(b"--b--\r\n");
        let enc = encode(&m).unwrap();
        // version 1, 3 segments: literal 33, run CRLF of 19 x 4 chars x 35 lines, literal.
        assert_eq!(&enc[..8], &[1, 3, 0, 33, 2, 19, 35, 0]);
        assert_eq!(
            blake3::hash(&enc).to_hex().as_str(),
            "1c313c064d1fa18e79b4827ebb1d6f498194fcb06a8b818f290da65e90e9b381"
        );
    }

    #[test]
    fn text_is_left_to_zstd() {
        let text = b"Dear team,\nthe quarterly figures are attached below.\n".repeat(200);
        assert!(encode(&text).is_none());
        assert!(
            encode(b"QUJD\nQUJD\nQUJD\nQUJD\n").is_none(),
            "below MIN_BLOB"
        );
    }

    #[test]
    fn damage_is_an_error_not_a_panic() {
        let m = message("\n");
        let enc = encode(&m).unwrap();
        assert!(decode(&enc, m.len() + 1).is_err());
        assert!(decode(&enc[..enc.len() - 1], m.len()).is_err());
        assert!(decode(&enc[..3], m.len()).is_err());
        let mut bad = enc.clone();
        bad[0] = 9;
        assert!(decode(&bad, m.len()).is_err());
        // The writer's check: the same bytes pass, one changed byte or length does not.
        assert!(gives_back(&enc, &m));
        let mut other = m.clone();
        *other.last_mut().unwrap() ^= 1;
        assert!(!gives_back(&enc, &other));
        other[200] = b'!';
        assert!(!gives_back(&enc, &other[..m.len() - 1]));
    }

    proptest! {
        #[test]
        fn any_bytes_round_trip(data in proptest::collection::vec(any::<u8>(), 0..4000)) {
            if let Some(enc) = encode(&data) {
                prop_assert_eq!(decode(&enc, data.len()).unwrap(), data);
            }
        }

        #[test]
        fn base64_like_text_round_trips(
            parts in proptest::collection::vec((0usize..3000, 1usize..40, any::<bool>(), any::<u64>()), 1..6),
            junk in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'='), Just(b'A'), any::<u8>()], 0..200),
            cut in 0usize..500,
        ) {
            let mut data = Vec::new();
            for (n, quads, crlf, seed) in parts {
                data.extend(test_attachment(n, quads * 4, if crlf { "\r\n" } else { "\n" }, seed));
                data.extend_from_slice(&junk);
            }
            let data = &data[cut.min(data.len())..];
            if let Some(enc) = encode(data) {
                prop_assert_eq!(decode(&enc, data.len()).unwrap(), data);
            }
        }

        #[test]
        fn decode_never_panics(enc in proptest::collection::vec(any::<u8>(), 0..300), len in 0usize..5000) {
            let _ = decode(&enc, len);
        }
    }
}
