//! MIME transfer encodings the generator writes: base64 in 76-character lines (as MUAs
//! write attachments) and quoted-printable (as they write HTML parts).

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Bytes of input per 76-character base64 line.
const LINE_INPUT: usize = 57;

fn encode_chunk(chunk: &[u8], out: &mut Vec<u8>) {
    let mut groups = chunk.chunks_exact(3);
    for g in groups.by_ref() {
        let n = u32::from(g[0]) << 16 | u32::from(g[1]) << 8 | u32::from(g[2]);
        out.extend_from_slice(&[
            ALPHABET[(n >> 18) as usize & 63],
            ALPHABET[(n >> 12) as usize & 63],
            ALPHABET[(n >> 6) as usize & 63],
            ALPHABET[n as usize & 63],
        ]);
    }
    match *groups.remainder() {
        [a] => {
            let n = u32::from(a) << 16;
            out.extend_from_slice(&[
                ALPHABET[(n >> 18) as usize & 63],
                ALPHABET[(n >> 12) as usize & 63],
                b'=',
                b'=',
            ]);
        }
        [a, b] => {
            let n = u32::from(a) << 16 | u32::from(b) << 8;
            out.extend_from_slice(&[
                ALPHABET[(n >> 18) as usize & 63],
                ALPHABET[(n >> 12) as usize & 63],
                ALPHABET[(n >> 6) as usize & 63],
                b'=',
            ]);
        }
        _ => {}
    }
}

/// Appends `input` base64-encoded in lines of 76 characters, each ended by `\n`.
pub(crate) fn base64_lines(input: &[u8], out: &mut Vec<u8>) {
    out.reserve(input.len() / LINE_INPUT * 77 + 80);
    for line in input.chunks(LINE_INPUT) {
        encode_chunk(line, out);
        out.push(b'\n');
    }
}

/// Appends `input` base64-encoded on one line, without a line end.
pub(crate) fn base64(input: &[u8], out: &mut Vec<u8>) {
    encode_chunk(input, out);
}

/// Appends `input` (text with `\n` line ends) quoted-printable encoded, lines at most
/// 76 characters with soft breaks, `\n` line ends.
pub(crate) fn quoted_printable(input: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for line in input.split_inclusive(|b| *b == b'\n') {
        let (text, eol) = match line.strip_suffix(b"\n") {
            Some(t) => (t, true),
            None => (line, false),
        };
        let mut col = 0;
        for (i, &b) in text.iter().enumerate() {
            let last = i + 1 == text.len();
            let literal =
                (b == b' ' || b == b'\t') && !last || (33..=126).contains(&b) && b != b'=';
            let width = if literal { 1 } else { 3 };
            if col + width > 75 {
                out.extend_from_slice(b"=\n");
                col = 0;
            }
            if literal {
                out.push(b);
            } else {
                out.extend_from_slice(&[b'=', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            }
            col += width;
        }
        if eol {
            out.push(b'\n');
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &[u8]) -> String {
        let mut out = Vec::new();
        base64(s, &mut out);
        String::from_utf8(out).expect("ascii")
    }

    #[test]
    fn base64_vectors() {
        // RFC 4648 section 10.
        assert_eq!(b64(b""), "");
        assert_eq!(b64(b"f"), "Zg==");
        assert_eq!(b64(b"fo"), "Zm8=");
        assert_eq!(b64(b"foo"), "Zm9v");
        assert_eq!(b64(b"foob"), "Zm9vYg==");
        assert_eq!(b64(b"fooba"), "Zm9vYmE=");
        assert_eq!(b64(b"foobar"), "Zm9vYmFy");
    }

    #[test]
    fn base64_lines_are_76() {
        let input: Vec<u8> = (0..200u8).collect();
        let mut out = Vec::new();
        base64_lines(&input, &mut out);
        let text = String::from_utf8(out).expect("ascii");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[..3].iter().all(|l| l.len() == 76));
        assert!(text.ends_with('\n'));
        assert_eq!(lines.concat(), b64(&input));
    }

    #[test]
    fn quoted_printable_escapes_and_wraps() {
        let mut out = Vec::new();
        quoted_printable(b"<p style=\"a\">caf\xc3\xa9 </p> \n", &mut out);
        assert_eq!(out, b"<p style=3D\"a\">caf=C3=A9 </p>=20\n".to_vec());
        let long = vec![b'x'; 200];
        let mut out = Vec::new();
        quoted_printable(&long, &mut out);
        let text = String::from_utf8(out).expect("ascii");
        assert!(text.lines().all(|l| l.len() <= 76), "{text}");
        assert_eq!(text.replace("=\n", ""), "x".repeat(200));
    }
}
