//! Modified UTF-7 mailbox names (RFC 3501 §5.1.3): the only place where
//! mailbox names change form. Everything above the wire uses Rust strings.
//!
//! Encoding: printable US-ASCII (0x20..=0x7e) stands for itself except `&`,
//! which becomes `&-`; every other run of characters becomes `&` + modified
//! BASE64 (RFC 2045 alphabet with `,` instead of `/`, no padding) of its
//! UTF-16BE form + `-`.
//!
//! Decoding is strict about what would make the name ambiguous (unterminated
//! shifts, bad BASE64, dangling bits, broken surrogate pairs, raw 8-bit bytes)
//! but accepts a shifted run that encodes printable ASCII, which RFC 3501
//! forbids senders to produce but which is unambiguous.

use std::fmt;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+,";

/// Why a wire mailbox name is not valid modified UTF-7.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutf7Error {
    /// The offending name, lossily decoded for display.
    pub name: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for Mutf7Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "mailbox name {:?} is not modified UTF-7: {}",
            self.name, self.reason
        )
    }
}

impl std::error::Error for Mutf7Error {}

/// Encodes a Unicode mailbox name into modified UTF-7.
pub fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    let mut pending: Vec<u16> = Vec::new();
    for c in name.chars() {
        if (' '..='~').contains(&c) {
            flush_shifted(&mut out, &mut pending);
            if c == '&' {
                out.push_str("&-");
            } else {
                out.push(c);
            }
        } else {
            let mut units = [0u16; 2];
            pending.extend_from_slice(c.encode_utf16(&mut units));
        }
    }
    flush_shifted(&mut out, &mut pending);
    out
}

fn flush_shifted(out: &mut String, pending: &mut Vec<u16>) {
    if pending.is_empty() {
        return;
    }
    out.push('&');
    let bytes: Vec<u8> = pending.iter().flat_map(|u| u.to_be_bytes()).collect();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1; // 1 byte -> 2 chars, 2 -> 3, 3 -> 4
        for i in 0..chars {
            let idx = (n >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(ALPHABET[idx as usize]));
        }
    }
    out.push('-');
    pending.clear();
}

fn b64_value(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b',' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

/// Decodes a modified UTF-7 mailbox name as sent on the wire.
pub fn decode(wire: &[u8]) -> Result<String, Mutf7Error> {
    let err = |reason| Mutf7Error {
        name: String::from_utf8_lossy(wire).into_owned(),
        reason,
    };
    let mut out = String::with_capacity(wire.len());
    let mut i = 0;
    while i < wire.len() {
        let c = wire[i];
        if c != b'&' {
            if !(0x20..=0x7e).contains(&c) {
                return Err(err("byte outside printable US-ASCII"));
            }
            out.push(char::from(c));
            i += 1;
            continue;
        }
        let start = i + 1;
        let end = wire[start..]
            .iter()
            .position(|&b| b == b'-')
            .map(|p| start + p)
            .ok_or_else(|| err("'&' shift without closing '-'"))?;
        i = end + 1;
        if end == start {
            out.push('&');
            continue;
        }
        // BASE64 -> bytes -> UTF-16BE units.
        let mut bits: u32 = 0;
        let mut nbits = 0u32;
        let mut units: Vec<u16> = Vec::new();
        let mut byte_pair: Option<u8> = None;
        for &b in &wire[start..end] {
            let v = b64_value(b).ok_or_else(|| err("invalid modified BASE64 character"))?;
            bits = (bits << 6) | v;
            nbits += 6;
            if nbits >= 8 {
                nbits -= 8;
                let byte = ((bits >> nbits) & 0xff) as u8;
                bits &= (1 << nbits) - 1;
                match byte_pair.take() {
                    None => byte_pair = Some(byte),
                    Some(hi) => units.push(u16::from_be_bytes([hi, byte])),
                }
            }
        }
        if byte_pair.is_some() || nbits >= 6 || bits != 0 {
            return Err(err("shifted run does not end on a UTF-16 boundary"));
        }
        for r in char::decode_utf16(units.iter().copied()) {
            out.push(r.map_err(|_| err("unpaired UTF-16 surrogate"))?);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rfc3501_examples() {
        // RFC 3501 §5.1.3 example.
        let name = "~peter/mail/\u{53f0}\u{5317}/\u{65e5}\u{672c}\u{8a9e}";
        assert_eq!(encode(name), "~peter/mail/&U,BTFw-/&ZeVnLIqe-");
        assert_eq!(
            decode(b"~peter/mail/&U,BTFw-/&ZeVnLIqe-").as_deref(),
            Ok(name)
        );
        assert_eq!(encode("Tom & Jerry"), "Tom &- Jerry");
        assert_eq!(decode(b"Tom &- Jerry").as_deref(), Ok("Tom & Jerry"));
    }

    #[test]
    fn german_and_emoji() {
        assert_eq!(encode("Entw\u{fc}rfe"), "Entw&APw-rfe");
        assert_eq!(encode("Gesch\u{e4}ft"), "Gesch&AOQ-ft");
        // Astral plane: surrogate pair.
        let s = "Mail \u{1f4e7}";
        assert_eq!(encode(s), "Mail &2D3c5w-");
        assert_eq!(decode(encode(s).as_bytes()).as_deref(), Ok(s));
    }

    #[test]
    fn rejects_malformed() {
        assert!(decode(b"&U,BTFw").is_err()); // unterminated
        assert!(decode(b"&U,B*-").is_err()); // bad char
        assert!(decode(b"&AA-").is_err()); // 12 bits: not a whole unit
        assert!(decode(b"&2D0-").is_err()); // lone high surrogate (truncated)
        assert!(decode("caf\u{e9}".as_bytes()).is_err()); // raw 8-bit
    }

    #[test]
    fn accepts_shifted_ascii() {
        // "A" encoded in BASE64 (forbidden to send, harmless to accept).
        assert_eq!(decode(b"&AEE-").as_deref(), Ok("A"));
    }

    proptest! {
        #[test]
        fn round_trip(s in "\\PC*") {
            let enc = encode(&s);
            prop_assert!(enc.bytes().all(|b| (0x20..=0x7e).contains(&b)));
            prop_assert_eq!(decode(enc.as_bytes()), Ok(s));
        }

        #[test]
        fn round_trip_any_chars(v in proptest::collection::vec(any::<char>(), 0..40)) {
            let s: String = v.into_iter().collect();
            prop_assert_eq!(decode(encode(&s).as_bytes()), Ok(s));
        }

        #[test]
        fn decode_never_panics(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = decode(&b);
        }
    }
}
