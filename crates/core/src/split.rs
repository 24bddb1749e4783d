//! Splitting a message into blobs that deduplicate.
//!
//! Delivery prepends per-recipient lines (`Return-Path`, `Delivered-To`, `Received ... for
//! <bob@...>`): 50 copies of one list message differ only there. So a message is cut into
//! its **trace prefix** (the leading run of such header fields, with an mbox `From ` line if
//! there is one) and **the rest**, identical in every copy. A small rest is one blob; a large
//! one is cut into content-defined chunks (FastCDC) so an attachment forwarded inside
//! another message deduplicates too. Pure bytes-in, ranges-out code.

use serde::{Deserialize, Serialize};
use std::ops::Range;

/// How the rest of a message is cut. Stored in the repository config so that every
/// backup into one repository cuts the same way.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChunkerParams {
    /// A rest up to this size is one blob.
    pub single_max: u32,
    pub min: u32,
    pub avg: u32,
    pub max: u32,
}

impl Default for ChunkerParams {
    fn default() -> Self {
        ChunkerParams {
            single_max: 64 * 1024,
            min: 16 * 1024,
            avg: 32 * 1024,
            max: 128 * 1024,
        }
    }
}

/// Header fields that mail delivery adds on top of a message, per recipient.
fn is_trace_field(name: &[u8]) -> bool {
    const EXACT: &[&str] = &[
        "return-path",
        "delivered-to",
        "received",
        "x-original-to",
        "x-envelope-to",
        "envelope-to",
        "x-delivered-to",
        "x-rcpt-to",
        "x-envelope-from",
        "received-spf",
        "authentication-results",
        "arc-seal",
        "arc-message-signature",
        "arc-authentication-results",
        "x-greylist",
        "x-sieve",
        "x-uid",
        "status",
        "x-status",
        "x-keywords",
        "x-mozilla-status",
        "x-mozilla-status2",
        "content-length",
        "lines",
    ];
    const PREFIXES: &[&str] = &[
        "x-spam-",
        "x-virus-",
        "x-amavis-",
        "x-policyd-",
        "x-dspam-",
        "x-rspamd-",
    ];
    let Ok(name) = std::str::from_utf8(name) else {
        return false;
    };
    EXACT.iter().any(|t| name.eq_ignore_ascii_case(t))
        || PREFIXES
            .iter()
            .any(|p| name.len() > p.len() && name[..p.len()].eq_ignore_ascii_case(p))
}

/// Length of the next line including its line ending (LF, CRLF or none at the end).
fn line_len(b: &[u8]) -> usize {
    memchr_lf(b).map_or(b.len(), |i| i + 1)
}

fn memchr_lf(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == b'\n')
}

/// The length of the trace prefix of `msg`.
pub fn trace_prefix_len(msg: &[u8]) -> usize {
    let mut at = 0;
    if msg.starts_with(b"From ") {
        at = line_len(msg);
    }
    loop {
        let rest = &msg[at..];
        let Some(colon) = rest.iter().take(80).position(|&c| c == b':') else {
            return at;
        };
        let name = &rest[..colon];
        if name.is_empty() || name.iter().any(|c| !c.is_ascii_graphic()) || !is_trace_field(name) {
            return at;
        }
        // The field, with its folded continuation lines.
        let mut end = at + line_len(rest);
        while end < msg.len() && matches!(msg[end], b' ' | b'\t') {
            end += line_len(&msg[end..]);
        }
        if end == msg.len() && !msg.ends_with(b"\n") {
            // A message that is nothing but an unterminated trace line: keep it whole.
            return at;
        }
        at = end;
    }
}

/// Cuts `msg` into the byte ranges stored as blobs, in order; the ranges cover the
/// message exactly. An empty message has no ranges.
pub fn split(msg: &[u8], p: &ChunkerParams) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let prefix = trace_prefix_len(msg);
    if prefix > 0 {
        out.push(0..prefix);
    }
    let rest = &msg[prefix..];
    if rest.is_empty() {
        return out;
    }
    if rest.len() <= p.single_max as usize {
        out.push(prefix..msg.len());
        return out;
    }
    for c in fastcdc::v2020::FastCDC::new(rest, p.min, p.avg, p.max) {
        out.push(prefix + c.offset..prefix + c.offset + c.length);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BODY: &[u8] = b"From: alice@example.org\nTo: list@example.org\nSubject: hi\n\nhello\n";

    fn copy_for(rcpt: &str) -> Vec<u8> {
        let mut m = format!(
            "Return-Path: <alice@example.org>\nDelivered-To: {rcpt}\nReceived: from mx by mail\n\tfor <{rcpt}>; Mon, 1 Jan 2024 00:00:00 +0000\nX-Spam-Score: 0.1\n"
        )
        .into_bytes();
        m.extend_from_slice(BODY);
        m
    }

    #[test]
    fn per_recipient_copies_share_the_rest() {
        let a = copy_for("bob@example.org");
        let b = copy_for("carol@example.org");
        let ra = split(&a, &ChunkerParams::default());
        let rb = split(&b, &ChunkerParams::default());
        assert_eq!(ra.len(), 2);
        assert_eq!(&a[ra[1].clone()], BODY);
        assert_eq!(&b[rb[1].clone()], BODY);
        assert_ne!(&a[ra[0].clone()], &b[rb[0].clone()]);
    }

    #[test]
    fn mbox_from_line_and_crlf() {
        let m = b"From bob Mon Jan  1 00:00:00 2024\r\nReceived: x\r\n  y\r\nFrom: a\r\n\r\nbody";
        assert_eq!(trace_prefix_len(m), m.len() - b"From: a\r\n\r\nbody".len());
        assert_eq!(trace_prefix_len(b"Subject: x\n\nReceived: y\n"), 0);
        assert_eq!(trace_prefix_len(b"Received: unterminated"), 0);
        assert_eq!(trace_prefix_len(b""), 0);
        assert_eq!(trace_prefix_len(b"\x00\xffReceived: x\n"), 0);
    }

    #[test]
    fn large_rest_is_chunked_and_forwarded_attachment_dedups() {
        let p = ChunkerParams::default();
        let mut rng = 12345u64;
        let payload: Vec<u8> = (0..400_000)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                b'A' + (rng % 26) as u8
            })
            .collect();
        let mut m1 = b"Subject: original\n\n".to_vec();
        m1.extend_from_slice(&payload);
        let mut m2 =
            b"Subject: Fwd: original\n\nsee below, forwarded with some words first\n".to_vec();
        m2.extend_from_slice(&payload);
        let c1: std::collections::HashSet<&[u8]> =
            split(&m1, &p).into_iter().map(|r| &m1[r]).collect();
        let c2: Vec<&[u8]> = split(&m2, &p).into_iter().map(|r| &m2[r]).collect();
        let shared: usize = c2.iter().filter(|c| c1.contains(*c)).map(|c| c.len()).sum();
        assert!(
            shared > payload.len() * 8 / 10,
            "shared {shared} of {}",
            payload.len()
        );
    }

    proptest! {
        #[test]
        fn ranges_cover_the_message(msg in proptest::collection::vec(prop_oneof![Just(b'\n'), Just(b':'), Just(b' '), Just(b'R'), any::<u8>()], 0..3000), big in 0usize..3) {
            let mut msg = msg;
            if big > 0 { msg = msg.repeat(100 * big); }
            let p = ChunkerParams { single_max: 4096, min: 256, avg: 1024, max: 4096 };
            let ranges = split(&msg, &p);
            let mut at = 0;
            for r in &ranges {
                prop_assert_eq!(r.start, at);
                prop_assert!(r.end > r.start);
                at = r.end;
            }
            prop_assert_eq!(at, msg.len());
        }
    }
}
