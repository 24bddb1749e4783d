//! IMAP flags in mbox headers. The flag names are `mailvault_imap::maildir_flags`'s (an mbox
//! letter is mapped to its Maildir letter, which that module names), so Maildir, IMAP and
//! mbox share one set.
//!
//! Read: `Status:` `R` (`\Seen`; `O`, "not recent", carries nothing), `X-Status:` `A`
//! (`\Answered`), `F` (`\Flagged`), `D` (`\Deleted`), `T` (`\Draft`), `X-Keywords:` (keywords
//! separated by white space or commas), `X-Mozilla-Status:` (four hex digits: 0x1 read,
//! 0x2 replied, 0x4 marked, 0x8 expunged, 0x1000 forwarded as `$Forwarded`),
//! `X-Mozilla-Keys:` (keywords separated by white space). Written: `Status:`, `X-Status:`
//! and `X-Keywords:` only.

use std::sync::OnceLock;

use mailvault_imap::maildir_flags::{imap_to_maildir, maildir_to_imap, KeywordTable};

use super::MailError;

/// Maildir letters of the system flags, in [`system`]'s order.
const MAILDIR_ORDER: &str = "SRFTD";

/// What a mail format keeps about a message besides its bytes: what a source hands the
/// pipeline per message and what a target gets back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meta {
    /// IMAP system flags (`\Seen`, `\Answered`, `\Flagged`, `\Deleted`, `\Draft`), named
    /// as `mailvault_imap::maildir_flags` names them, in that order ([`system`]).
    pub flags: Vec<String>,
    /// IMAP keywords (`$Forwarded`, `Junk`, ...), in the order found, without repeats.
    pub keywords: Vec<String>,
    /// The internal date, Unix seconds (`None`: the format gave none that parses).
    pub internal_date: Option<i64>,
}

impl Meta {
    /// A `Meta` from one IMAP flag list that mixes system flags and keywords (as
    /// `maildir_to_imap` and IMAP `FLAGS` give them): `\`-flags the engine knows become
    /// [`Meta::flags`], `\Recent` and unknown `\`-flags are dropped, the rest are keywords.
    pub fn from_imap<S: AsRef<str>>(list: &[S], internal_date: Option<i64>) -> Meta {
        let mut m = Meta {
            internal_date,
            ..Meta::default()
        };
        for f in list {
            let f = f.as_ref();
            if f.starts_with('\\') {
                if let Some(name) = canonical(f) {
                    m.flags.push(name.to_string());
                }
            } else if !m.keywords.iter().any(|k| k.eq_ignore_ascii_case(f)) {
                m.keywords.push(f.to_string());
            }
        }
        m.flags = sorted(&m.flags);
        m
    }

    /// The flags and keywords as one IMAP flag list (system flags first).
    pub fn imap_list(&self) -> Vec<String> {
        self.flags.iter().chain(&self.keywords).cloned().collect()
    }
}

/// `X-Status:` letters and their Maildir letters.
const X_STATUS: [(u8, char); 4] = [(b'A', 'R'), (b'F', 'F'), (b'D', 'T'), (b'T', 'D')];

/// The IMAP system flags an mbox keeps, in the order [`Meta::flags`] lists them:
/// `\Seen`, `\Answered`, `\Flagged`, `\Deleted`, `\Draft`.
pub fn system() -> &'static [String] {
    static NAMES: OnceLock<Vec<String>> = OnceLock::new();
    NAMES.get_or_init(|| maildir_to_imap(MAILDIR_ORDER, &KeywordTable::new()).flags)
}

/// The engine's spelling of system flag `f` (matched case-insensitively), if it is one of
/// [`system`].
pub fn canonical(f: &str) -> Option<&'static str> {
    system()
        .iter()
        .find(|n| n.eq_ignore_ascii_case(f))
        .map(String::as_str)
}

/// The system flags of `list` in [`system`]'s order, without repeats.
pub fn sorted<S: AsRef<str>>(list: &[S]) -> Vec<String> {
    system()
        .iter()
        .filter(|n| list.iter().any(|f| f.as_ref().eq_ignore_ascii_case(n)))
        .cloned()
        .collect()
}

fn name_of_maildir_letter(c: char) -> Option<usize> {
    MAILDIR_ORDER.chars().position(|l| l == c)
}

/// Flags and keywords gathered from an mbox message's metadata headers.
#[derive(Debug, Default)]
pub(crate) struct Found {
    /// Bit i: `system()[i]`.
    bits: u8,
    keywords: Vec<String>,
}

impl Found {
    fn set_maildir(&mut self, c: char) {
        if let Some(i) = name_of_maildir_letter(c) {
            self.bits |= 1 << i;
        }
    }

    fn keyword(&mut self, k: &str) {
        if !k.is_empty() && !self.keywords.iter().any(|x| x.eq_ignore_ascii_case(k)) {
            self.keywords.push(k.to_string());
        }
    }

    /// Takes in one metadata header (`name` without the colon; `value` unfolded or not).
    /// Headers that carry no flags (`X-UID`, `Content-Length`...) are ignored.
    pub(crate) fn header(&mut self, name: &[u8], value: &[u8]) {
        let value = String::from_utf8_lossy(value);
        let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
        if is("Status") {
            if value.contains('R') {
                self.set_maildir('S');
            }
        } else if is("X-Status") {
            for b in value.bytes() {
                if let Some((_, c)) = X_STATUS.iter().find(|(l, _)| *l == b) {
                    self.set_maildir(*c);
                }
            }
        } else if is("X-Keywords") {
            for k in value.split(|c: char| c.is_whitespace() || c == ',') {
                self.keyword(k);
            }
        } else if is("X-Mozilla-Keys") {
            for k in value.split_whitespace() {
                self.keyword(k);
            }
        } else if is("X-Mozilla-Status") {
            if let Ok(bits) = u32::from_str_radix(value.trim(), 16) {
                for (bit, c) in [(0x1, 'S'), (0x2, 'R'), (0x4, 'F'), (0x8, 'T')] {
                    if bits & bit != 0 {
                        self.set_maildir(c);
                    }
                }
                if bits & 0x1000 != 0 {
                    self.keyword("$Forwarded");
                }
            }
        }
    }

    pub(crate) fn into_meta(self, internal_date: Option<i64>) -> Meta {
        let flags = system()
            .iter()
            .enumerate()
            .filter(|(i, _)| self.bits & (1 << i) != 0)
            .map(|(_, n)| n.clone())
            .collect();
        Meta {
            flags,
            keywords: self.keywords,
            internal_date,
        }
    }
}

/// The metadata header lines the writer puts at the end of a message's header block:
/// `Status:` always (`RO` or `O`), `X-Status:` when a flag needs it, `X-Keywords:` when
/// there are keywords; each ended by `eol`. Unknown system flags are left out.
pub(crate) fn header_lines(meta: &Meta, eol: &[u8], out: &mut Vec<u8>) -> Result<(), MailError> {
    let system: Vec<&String> = meta.flags.iter().filter(|f| f.starts_with('\\')).collect();
    let letters = imap_to_maildir(&system, &mut KeywordTable::new()).letters;
    out.extend_from_slice(if letters.contains('S') {
        b"Status: RO"
    } else {
        b"Status: O"
    });
    out.extend_from_slice(eol);
    let x: Vec<u8> = X_STATUS
        .iter()
        .filter(|(_, c)| letters.contains(*c))
        .map(|(l, _)| *l)
        .collect();
    if !x.is_empty() {
        out.extend_from_slice(b"X-Status: ");
        out.extend_from_slice(&x);
        out.extend_from_slice(eol);
    }
    // Keywords given among `flags` (a mixed IMAP list) are keywords too.
    let mut keywords: Vec<&str> = Vec::new();
    for k in meta
        .flags
        .iter()
        .filter(|f| !f.starts_with('\\'))
        .chain(&meta.keywords)
    {
        check_keyword(k)?;
        if !keywords.iter().any(|x| x.eq_ignore_ascii_case(k)) {
            keywords.push(k);
        }
    }
    if !keywords.is_empty() {
        out.extend_from_slice(b"X-Keywords: ");
        out.extend_from_slice(keywords.join(" ").as_bytes());
        out.extend_from_slice(eol);
    }
    Ok(())
}

/// Refuses a keyword an mbox header cannot carry (empty, white space, comma, control).
pub(crate) fn check_keyword(k: &str) -> Result<(), MailError> {
    if k.is_empty()
        || k.chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == ',')
    {
        return Err(MailError::Keyword {
            keyword: k.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_maildir_flags_names() {
        assert_eq!(
            system(),
            ["\\Seen", "\\Answered", "\\Flagged", "\\Deleted", "\\Draft"]
        );
        assert_eq!(canonical("\\SEEN"), Some("\\Seen"));
        assert_eq!(canonical("\\Recent"), None);
    }

    #[test]
    fn headers_to_flags() {
        let mut f = Found::default();
        f.header(b"Status", b" RO");
        f.header(b"x-status", b" ADFT");
        f.header(b"X-Keywords", b" $Label1, Junk  work");
        f.header(b"X-Mozilla-Keys", b" junk                 ");
        let m = f.into_meta(Some(5));
        assert_eq!(m.flags, system());
        assert_eq!(m.keywords, ["$Label1", "Junk", "work"]);
        assert_eq!(m.internal_date, Some(5));

        let mut f = Found::default();
        f.header(b"X-Mozilla-Status", b" 1005");
        f.header(b"X-Mozilla-Status2", b" 00000000");
        let m = f.into_meta(None);
        assert_eq!(m.flags, ["\\Seen", "\\Flagged"]);
        assert_eq!(m.keywords, ["$Forwarded"]);

        let mut f = Found::default();
        f.header(b"X-Mozilla-Status", b" zz");
        f.header(b"Status", b" O");
        assert_eq!(f.into_meta(None), Meta::default());
    }

    #[test]
    fn flags_to_headers() {
        let mut out = Vec::new();
        let meta = Meta::from_imap(&["\\Draft", "\\Seen", "$Forwarded", "\\Recent"], None);
        assert_eq!(meta.flags, ["\\Seen", "\\Draft"]);
        header_lines(&meta, b"\n", &mut out).unwrap();
        assert_eq!(out, b"Status: RO\nX-Status: T\nX-Keywords: $Forwarded\n");
        out.clear();
        header_lines(&Meta::default(), b"\r\n", &mut out).unwrap();
        assert_eq!(out, b"Status: O\r\n");
        let bad = Meta {
            keywords: vec!["a b".into()],
            ..Meta::default()
        };
        assert!(matches!(
            header_lines(&bad, b"\n", &mut out),
            Err(MailError::Keyword { .. })
        ));
    }
}
