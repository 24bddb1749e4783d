//! ESEARCH (RFC 4731): `SEARCH RETURN (MIN MAX COUNT ALL) ...` and its `UID` form,
//! answered by one `* ESEARCH (TAG "t") [UID] MIN .. MAX .. COUNT .. ALL set` line.
//! imap-codec (2.0.0-alpha.10) parses neither the RETURN options nor encodes ESEARCH, so
//! this module, pure bytes in and out, does both: [`split`] takes the options out of a
//! command imap-codec refused, so that imap-codec parses the rest as a plain SEARCH, and
//! [`line`] writes the answer.

/// What a `RETURN (...)` asks for (RFC 4731 3.1; `RETURN ()` is `ALL`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Return {
    pub min: bool,
    pub max: bool,
    pub count: bool,
    pub all: bool,
}

/// What [`split`] makes of a command: its RETURN options and the plain SEARCH, or the
/// command's tag and why it is refused.
pub type Split = Result<(Return, Vec<u8>), (String, &'static str)>;

/// The text of a RETURN option the view does not answer (SAVE is RFC 5182's SEARCHRES).
const UNKNOWN: &str = "SEARCH RETURN takes MIN, MAX, COUNT and ALL (no SAVE: no SEARCHRES)";

/// `command` (a whole command as the client sent it, literals included) when it is a
/// `[UID] SEARCH RETURN (...) ...`: its options, and the same command without them
/// (`tag [UID] SEARCH ...`) for imap-codec to parse; `Err` (with the command's tag) when
/// its options are not ours; `None` when it is not such a command.
pub fn split(command: &[u8]) -> Option<Split> {
    let sp = command.iter().position(|&b| b == b' ')?;
    let (tag, rest) = (&command[..sp], &command[sp + 1..]);
    let (uid, rest) = match strip_word(rest, b"UID ") {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let rest = strip_word(rest, b"SEARCH RETURN (")?;
    let close = rest.iter().position(|&b| b == b')')?;
    let (options, criteria) = (&rest[..close], rest[close + 1..].strip_prefix(b" ")?);
    let mut r = Return::default();
    for o in options.split(|&b| b == b' ').filter(|o| !o.is_empty()) {
        let flag = match o.to_ascii_uppercase().as_slice() {
            b"MIN" => &mut r.min,
            b"MAX" => &mut r.max,
            b"COUNT" => &mut r.count,
            b"ALL" => &mut r.all,
            _ => return Some(Err((String::from_utf8_lossy(tag).into_owned(), UNKNOWN))),
        };
        *flag = true;
    }
    if r == Return::default() {
        r.all = true;
    }
    let mut plain = Vec::with_capacity(command.len());
    plain.extend_from_slice(tag);
    plain.extend_from_slice(if uid { b" UID SEARCH " } else { b" SEARCH " });
    plain.extend_from_slice(criteria);
    Some(Ok((r, plain)))
}

/// `bytes` after `word` (ASCII letters in any case), if it starts with it.
pub fn strip_word<'b>(bytes: &'b [u8], word: &[u8]) -> Option<&'b [u8]> {
    let head = bytes.get(..word.len())?;
    head.eq_ignore_ascii_case(word)
        .then(|| &bytes[word.len()..])
}

/// The `* ESEARCH` line (CRLF included) answering the command tagged `tag` whose matches
/// are `hits` (sequence numbers, or UIDs when `uid`), as `r` asks: MIN, MAX and ALL are
/// left out when nothing matched (RFC 4731 3.1), COUNT never is.
pub fn line(tag: &str, uid: bool, r: Return, hits: &[u32]) -> Vec<u8> {
    let mut sorted = hits.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut s = format!("* ESEARCH (TAG \"{tag}\")");
    if uid {
        s += " UID";
    }
    if let (Some(first), Some(last)) = (sorted.first(), sorted.last()) {
        if r.min {
            s += &format!(" MIN {first}");
        }
        if r.max {
            s += &format!(" MAX {last}");
        }
    }
    if r.count {
        s += &format!(" COUNT {}", sorted.len());
    }
    if r.all && !sorted.is_empty() {
        s += &format!(" ALL {}", sequence_set(&sorted));
    }
    s += "\r\n";
    s.into_bytes()
}

/// `sorted` (ascending, no repeats, not empty) as a sequence set: `1:3,7,9:10`.
fn sequence_set(sorted: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        while i + 1 < sorted.len() && sorted[i + 1] == sorted[i] + 1 {
            i += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        match sorted[i] == start {
            true => out += &start.to_string(),
            false => out += &format!("{start}:{}", sorted[i]),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn return_options_are_taken_out_and_the_rest_is_a_plain_search() {
        let (r, plain) = split(b"a1 UID search return (min COUNT) SUBJECT {3}\r\nfoo\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            r,
            Return {
                min: true,
                count: true,
                ..Return::default()
            }
        );
        assert_eq!(plain, b"a1 UID SEARCH SUBJECT {3}\r\nfoo\r\n");
        let (r, plain) = split(b"t SEARCH RETURN () ALL\r\n").unwrap().unwrap();
        assert!(r.all && !r.min && !r.max && !r.count);
        assert_eq!(plain, b"t SEARCH ALL\r\n");
        assert_eq!(
            split(b"t SEARCH RETURN (SAVE) ALL\r\n")
                .unwrap()
                .unwrap_err(),
            ("t".to_string(), UNKNOWN)
        );
        assert!(split(b"t SEARCH ALL\r\n").is_none());
        assert!(split(b"t FETCH RETURN (MIN) 1\r\n").is_none());
        assert!(split(b"t SEARCH RETURN (MIN)\r\n").is_none(), "no criteria");
    }

    #[test]
    fn the_line_gives_what_was_asked_and_leaves_out_what_nothing_matched() {
        let all = Return {
            min: true,
            max: true,
            count: true,
            all: true,
        };
        assert_eq!(
            line("A285", true, all, &[9, 3, 4, 5, 12, 13, 20]),
            b"* ESEARCH (TAG \"A285\") UID MIN 3 MAX 20 COUNT 7 ALL 3:5,9,12:13,20\r\n"
        );
        assert_eq!(
            line("b", false, all, &[]),
            b"* ESEARCH (TAG \"b\") COUNT 0\r\n"
        );
        let count = Return {
            count: true,
            ..Return::default()
        };
        assert_eq!(
            line("c", false, count, &[1, 2]),
            b"* ESEARCH (TAG \"c\") COUNT 2\r\n"
        );
    }
}
