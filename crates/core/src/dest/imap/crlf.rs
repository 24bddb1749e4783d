//! LF -> CRLF for the wire: [`crlf_into`] is the conversion of
//! [`mailvault_imap::to_crlf`] (same rules: every LF not preceded by CR becomes CRLF,
//! nothing else changes), but it appends to a buffer (a batch's messages go into one),
//! takes the byte before its input (a message may be converted piece by piece, and a CR
//! may end one piece while the LF starts the next), and finds line feeds with `memchr`
//! (SIMD), which makes it several times faster: it was the IMAP restore's largest
//! client-side cost.

/// Appends `data` to `out`, every LF not preceded by CR turned into CRLF. `prev` is the
/// byte just before `data` in the message (0 at its start).
pub fn crlf_into(out: &mut Vec<u8>, data: &[u8], prev: u8) {
    // Mail lines are short: about one byte in 40 becomes two.
    out.reserve(data.len() + data.len() / 32 + 16);
    let mut copied = 0;
    for i in memchr::memchr_iter(b'\n', data) {
        let before = if i == 0 { prev } else { data[i - 1] };
        if before != b'\r' {
            out.extend_from_slice(&data[copied..i]);
            out.extend_from_slice(b"\r\n");
            copied = i + 1;
        }
    }
    out.extend_from_slice(&data[copied..]);
}

/// Appends a message given in pieces (`parts`, in order) to `out`, converted as
/// [`crlf_into`] converts the whole: a CR ending one piece and the LF starting the next
/// are one line end.
pub fn crlf_parts_into(out: &mut Vec<u8>, parts: &[&[u8]]) {
    let mut prev = 0;
    for p in parts {
        crlf_into(out, p, prev);
        prev = p.last().copied().unwrap_or(prev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailvault_imap::to_crlf;
    use proptest::prelude::*;

    fn conv(data: &[u8]) -> Vec<u8> {
        let mut out = b"x".to_vec();
        crlf_into(&mut out, data, 0);
        out.split_off(1)
    }

    #[test]
    fn examples() {
        assert_eq!(conv(b"a\nb\r\nc\rd\n\ne"), b"a\r\nb\r\nc\rd\r\n\r\ne");
        assert_eq!(conv(b"\n"), b"\r\n");
        assert_eq!(conv(b"\r\n"), b"\r\n");
        assert_eq!(conv(b""), b"");
        let long = b"0123456\n89abcdef\r\n\n\n\n\n\n\n\n\nxyz\n".repeat(5);
        assert_eq!(conv(&long), to_crlf(&long).as_ref());
        // A CR at the end of one piece and the LF at the start of the next: already CRLF.
        let mut out = Vec::new();
        crlf_into(&mut out, b"a\r", 0);
        crlf_into(&mut out, b"\nb\n", b'\r');
        assert_eq!(out, b"a\r\nb\r\n");
    }

    proptest! {
        #[test]
        fn same_as_to_crlf(data in proptest::collection::vec(
            prop_oneof![Just(b'\n'), Just(b'\r'), Just(b'a'), Just(0x8a_u8), any::<u8>()], 0..300),
            cut in 0usize..300,
        ) {
            let want = to_crlf(&data).into_owned();
            prop_assert_eq!(conv(&data), want.clone());
            // Converted in two pieces, the byte before the second given.
            let cut = cut.min(data.len());
            let mut out = Vec::new();
            crlf_into(&mut out, &data[..cut], 0);
            crlf_into(&mut out, &data[cut..], if cut == 0 { 0 } else { data[cut - 1] });
            prop_assert_eq!(out, want.clone());
            // In pieces cut at `cut`, with an empty one between.
            let mut out = Vec::new();
            crlf_parts_into(&mut out, &[&data[..cut], &[], &data[cut..]]);
            prop_assert_eq!(out, want);
        }
    }
}
