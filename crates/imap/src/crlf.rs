//! Line endings between Maildir files (usually LF) and IMAP (CRLF).
//!
//! Exactly what is normalized:
//! - [`to_crlf`] turns every LF that is not already preceded by CR into CRLF.
//!   An existing CRLF is left alone, a lone CR (not followed by LF) is left
//!   alone, and a last line without a newline stays without one. It is
//!   idempotent, and returns the input borrowed when there is nothing to do,
//!   so CRLF files cost nothing.
//! - [`from_crlf`] turns every CRLF into LF. A lone CR, a bare LF and a last
//!   line without a newline are left alone.
//!
//! Round trips:
//! - A file with no CRLF in it (an LF file, lone CRs and a missing final
//!   newline allowed) survives `from_crlf(to_crlf(x)) == x`.
//! - A file in which every LF is preceded by CR (a CRLF file) is sent as it
//!   is (`to_crlf(x) == x`) and must be stored back as fetched.
//!
//! [`LineEndings::detect`] tells which of the two a file is, so the engine
//! can record it and give back the same bytes after Maildir → IMAP → Maildir.
//! A mixed file (some CRLF, some bare LF) cannot round-trip through IMAP.

use std::borrow::Cow;

/// The line-ending convention of a message file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEndings {
    /// No CRLF at all (Maildir's usual form); restore with [`from_crlf`].
    Lf,
    /// Every LF preceded by CR (and at least one line break); keep as fetched.
    Crlf,
    /// Both CRLF and bare LF: IMAP cannot carry this byte-exactly.
    Mixed,
}

impl LineEndings {
    /// Classifies `data`. A message without any LF counts as [`LineEndings::Lf`].
    pub fn detect(data: &[u8]) -> LineEndings {
        let mut crlf = false;
        let mut bare = false;
        for i in memchr_iter(data) {
            if i > 0 && data[i - 1] == b'\r' {
                crlf = true;
            } else {
                bare = true;
            }
            if crlf && bare {
                return LineEndings::Mixed;
            }
        }
        if crlf {
            LineEndings::Crlf
        } else {
            LineEndings::Lf
        }
    }

    /// Turns a message as fetched from IMAP (CRLF) back into this convention.
    pub fn restore<'a>(&self, fetched: &'a [u8]) -> Cow<'a, [u8]> {
        match self {
            LineEndings::Lf => from_crlf(fetched),
            LineEndings::Crlf | LineEndings::Mixed => Cow::Borrowed(fetched),
        }
    }
}

fn memchr_iter(data: &[u8]) -> impl Iterator<Item = usize> + '_ {
    data.iter()
        .enumerate()
        .filter(|(_, &b)| b == b'\n')
        .map(|(i, _)| i)
}

/// LF → CRLF for every LF not already preceded by CR (see the module docs).
pub fn to_crlf(data: &[u8]) -> Cow<'_, [u8]> {
    let bare = memchr_iter(data)
        .filter(|&i| i == 0 || data[i - 1] != b'\r')
        .count();
    if bare == 0 {
        return Cow::Borrowed(data);
    }
    let mut out = Vec::with_capacity(data.len() + bare);
    let mut start = 0;
    for i in memchr_iter(data) {
        if i == 0 || data[i - 1] != b'\r' {
            out.extend_from_slice(&data[start..i]);
            out.extend_from_slice(b"\r\n");
            start = i + 1;
        }
    }
    out.extend_from_slice(&data[start..]);
    Cow::Owned(out)
}

/// CRLF → LF (see the module docs).
pub fn from_crlf(data: &[u8]) -> Cow<'_, [u8]> {
    if !data.windows(2).any(|w| w == b"\r\n") {
        return Cow::Borrowed(data);
    }
    let mut out = Vec::with_capacity(data.len());
    let mut start = 0;
    for i in memchr_iter(data) {
        if i > 0 && data[i - 1] == b'\r' {
            out.extend_from_slice(&data[start..i - 1]);
            out.push(b'\n');
            start = i + 1;
        }
    }
    out.extend_from_slice(&data[start..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn examples() {
        assert_eq!(
            to_crlf(b"a\nb\r\nc\rd\n\ne").as_ref(),
            b"a\r\nb\r\nc\rd\r\n\r\ne"
        );
        assert_eq!(
            from_crlf(b"a\r\nb\nc\rd\r\n\r\ne").as_ref(),
            b"a\nb\nc\rd\n\ne"
        );
        assert!(matches!(to_crlf(b"x\r\ny"), Cow::Borrowed(_)));
        assert!(matches!(from_crlf(b"x\ny"), Cow::Borrowed(_)));
        assert_eq!(to_crlf(b"\n").as_ref(), b"\r\n");
        assert_eq!(from_crlf(b"\r\r\n").as_ref(), b"\r\n");
        assert_eq!(LineEndings::detect(b"a\nb"), LineEndings::Lf);
        assert_eq!(LineEndings::detect(b"no newline"), LineEndings::Lf);
        assert_eq!(LineEndings::detect(b"a\r\nb\r\n"), LineEndings::Crlf);
        assert_eq!(LineEndings::detect(b"a\r\nb\n"), LineEndings::Mixed);
    }

    fn text_with_line_breaks() -> impl Strategy<Value = Vec<u8>> {
        proptest::collection::vec(
            prop_oneof![
                Just(b'\n'),
                Just(b'\r'),
                Just(b'a'),
                Just(b' '),
                any::<u8>()
            ],
            0..64,
        )
    }

    proptest! {
        #[test]
        fn lf_files_round_trip(x in text_with_line_breaks()) {
            prop_assume!(!x.windows(2).any(|w| w == b"\r\n"));
            let wire = to_crlf(&x);
            prop_assert!(LineEndings::detect(&wire) != LineEndings::Mixed);
            prop_assert_eq!(from_crlf(&wire).into_owned(), x.clone());
            prop_assert_eq!(LineEndings::Lf.restore(&wire).into_owned(), x);
        }

        #[test]
        fn crlf_files_unchanged(x in text_with_line_breaks()) {
            let y = to_crlf(&x).into_owned();
            prop_assert!(matches!(to_crlf(&y), Cow::Borrowed(_)));
            if y.contains(&b'\n') {
                prop_assert_eq!(LineEndings::detect(&y), LineEndings::Crlf);
                prop_assert_eq!(LineEndings::Crlf.restore(&y).into_owned(), y.clone());
            }
        }

        #[test]
        fn to_crlf_leaves_no_bare_lf(x in text_with_line_breaks()) {
            let y = to_crlf(&x);
            for (i, &b) in y.iter().enumerate() {
                if b == b'\n' {
                    prop_assert!(i > 0 && y[i - 1] == b'\r');
                }
            }
            prop_assert_eq!(to_crlf(&y).into_owned(), y.into_owned());
        }
    }
}
