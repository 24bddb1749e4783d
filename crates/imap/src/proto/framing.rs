//! Response framing: finds where one complete server response ends in a byte
//! buffer, literals included, so the parser always sees whole responses and a
//! FETCH body is never split. Bytes in, lengths out; no sockets.

use std::fmt;

/// Largest literal accepted from a server (a message body): 2 GiB.
pub const MAX_LITERAL: usize = 2 << 30;
/// Largest text line (outside literals) accepted from a server.
pub const MAX_LINE: usize = 64 << 20;

/// A response that cannot be framed (the connection is no longer usable).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameError(pub &'static str);

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for FrameError {}

/// Incremental framer: call [`Framer::frame`] with the unconsumed buffer each
/// time more bytes arrive. It remembers how far it scanned, so a large literal
/// arriving in many reads is not rescanned.
#[derive(Debug, Default, Clone)]
pub struct Framer {
    scanned: usize,
}

impl Framer {
    /// A framer at the start of a response.
    pub fn new() -> Self {
        Framer::default()
    }

    /// If `buf` starts with a complete response, returns its length (through
    /// the final LF) and resets for the next response. `Ok(None)` means more
    /// bytes are needed; the framer keeps its place, and `buf` must be passed
    /// again unchanged at the front with new bytes appended.
    pub fn frame(&mut self, buf: &[u8]) -> Result<Option<usize>, FrameError> {
        let mut pos = self.scanned;
        loop {
            if pos > buf.len() {
                // Inside a literal whose bytes have not all arrived.
                self.scanned = pos;
                return Ok(None);
            }
            let Some(nl) = buf[pos..].iter().position(|&b| b == b'\n') else {
                if buf.len() - pos > MAX_LINE {
                    return Err(FrameError("response line too long"));
                }
                self.scanned = pos;
                return Ok(None);
            };
            let line_end = pos + nl; // index of LF
            let mut line = &buf[pos..line_end];
            if let Some(l) = line.strip_suffix(b"\r") {
                line = l;
            }
            match literal_len(line)? {
                Some(n) => pos = line_end + 1 + n,
                None => {
                    self.scanned = 0;
                    return Ok(Some(line_end + 1));
                }
            }
        }
    }
}

/// If `line` ends with a literal header `{n}` (or `{n+}`, `~{n}`), its length.
fn literal_len(line: &[u8]) -> Result<Option<usize>, FrameError> {
    let Some(body) = line.strip_suffix(b"}") else {
        return Ok(None);
    };
    let Some(open) = body.iter().rposition(|&b| b == b'{') else {
        return Ok(None);
    };
    let mut digits = &body[open + 1..];
    if let Some(d) = digits.strip_suffix(b"+") {
        digits = d;
    }
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Ok(None);
    }
    if digits.len() > 10 {
        return Err(FrameError("literal larger than 2 GiB"));
    }
    let n = digits
        .iter()
        .fold(0usize, |acc, &d| acc * 10 + usize::from(d - b'0'));
    if n > MAX_LITERAL {
        return Err(FrameError("literal larger than 2 GiB"));
    }
    Ok(Some(n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_lines() {
        let mut f = Framer::new();
        assert_eq!(f.frame(b"* OK ready\r\nA1 OK"), Ok(Some(12)));
        assert_eq!(f.frame(b"A1 OK"), Ok(None));
        assert_eq!(f.frame(b"A1 OK done\r\n"), Ok(Some(12)));
    }

    #[test]
    fn literal_in_pieces() {
        let full = b"* 1 FETCH (UID 5 BODY[] {11}\r\nhello\r\nworld FLAGS ())\r\nA1 OK\r\n";
        let mut f = Framer::new();
        for cut in [10, 31, 40] {
            assert_eq!(f.frame(&full[..cut]), Ok(None), "cut {cut}");
        }
        let end = full.len() - 7;
        assert_eq!(f.frame(full), Ok(Some(end)));
        assert_eq!(&full[..end][end - 3..], b")\r\n");
    }

    #[test]
    fn literal_containing_brace_line() {
        // The literal itself holds a line ending in "{3}": it must be skipped,
        // not taken as another literal header.
        let r = b"* LIST () \"/\" {6}\r\na{3}\r\n\r\nX\r\n";
        assert_eq!(Framer::new().frame(r), Ok(Some(r.len() - 3)));
    }

    #[test]
    fn two_literals_and_lf_only() {
        let r = b"* 2 FETCH (BODY[1] {1}\nx BODY[2] {0}\n)\n";
        assert_eq!(Framer::new().frame(r), Ok(Some(r.len())));
    }

    #[test]
    fn not_a_literal() {
        let r = b"* OK [ALERT] see {x}\r\n";
        assert_eq!(Framer::new().frame(r), Ok(Some(r.len())));
    }

    #[test]
    fn absurd_literal() {
        assert!(Framer::new()
            .frame(b"* 1 FETCH (BODY[] {99999999999}\r\n")
            .is_err());
    }
}
