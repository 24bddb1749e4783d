//! The MIME structure of a message, for BODYSTRUCTURE and the sections of its parts
//! (`BODY[1.2]`, `BODY[2.MIME]`, `BODY[3.HEADER]` ...): each part's header and body as
//! byte ranges of the message, found by the boundaries of multipart bodies and into
//! `message/rfc822` bodies. Bounded on hostile structure: at most [`MAX_DEPTH`] levels
//! and [`MAX_PARTS`] parts; deeper or further parts are left as plain bodies.

use mailvault_core::mail::header::header_end;
use std::ops::Range;

/// Levels of nesting followed at most.
pub const MAX_DEPTH: usize = 20;
/// Parts read at most in one message.
pub const MAX_PARTS: usize = 1000;

/// One part: where its header and body are, its content type and the fields
/// BODYSTRUCTURE names.
#[derive(Debug, Clone)]
pub struct Part {
    pub header: Range<usize>,
    pub body: Range<usize>,
    /// Lower-case type and subtype (`text`, `plain`).
    pub kind: (String, String),
    /// Type and subtype as the message writes them (`TEXT`, `Plain`), as BODYSTRUCTURE
    /// gives them.
    pub written: (String, String),
    /// The Content-Type parameters in their order, names as written, RFC 2231
    /// continuations joined ([`mime_params`]).
    pub params: Vec<(String, String)>,
    pub children: Vec<Part>,
    /// A `message/rfc822` body, parsed.
    pub message: Option<Box<Part>>,
}

/// The structure of `raw`.
pub fn parse(raw: &[u8]) -> Part {
    let mut budget = MAX_PARTS;
    part(raw, 0..raw.len(), ("text", "plain"), 0, &mut budget)
}

fn part(
    raw: &[u8],
    r: Range<usize>,
    default: (&str, &str),
    depth: usize,
    budget: &mut usize,
) -> Part {
    let bytes = &raw[r.clone()];
    let h = header_end(bytes);
    let (header, body) = (r.start..r.start + h, r.start + h..r.end);
    let ct = field(&raw[header.clone()], b"Content-Type");
    let (written, params) = match ct.as_deref().and_then(content_type) {
        Some(x) => x,
        None => ((default.0.to_string(), default.1.to_string()), Vec::new()),
    };
    let kind = (
        written.0.to_ascii_lowercase(),
        written.1.to_ascii_lowercase(),
    );
    let mut p = Part {
        header,
        body: body.clone(),
        kind,
        written,
        params,
        children: Vec::new(),
        message: None,
    };
    *budget = budget.saturating_sub(1);
    if depth >= MAX_DEPTH || *budget == 0 {
        return p;
    }
    if p.kind.0 == "multipart" {
        let boundary = p
            .params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("boundary"))
            .map(|(_, v)| v.clone());
        if let Some(b) = boundary.filter(|b| !b.is_empty()) {
            let child_default = match p.kind.1.as_str() {
                "digest" => ("message", "rfc822"),
                _ => ("text", "plain"),
            };
            for cr in split(raw, body, b.as_bytes()) {
                if *budget == 0 {
                    break;
                }
                p.children
                    .push(part(raw, cr, child_default, depth + 1, budget));
            }
        }
    } else if p.kind == ("message".into(), "rfc822".into()) {
        p.message = Some(Box::new(part(
            raw,
            body,
            ("text", "plain"),
            depth + 1,
            budget,
        )));
    }
    p
}

/// The ranges of the parts of a multipart body `r` with `boundary`: between a
/// `--boundary` line and the next (the line break before a delimiter belongs to it),
/// up to `--boundary--`.
fn split(raw: &[u8], r: Range<usize>, boundary: &[u8]) -> Vec<Range<usize>> {
    let mut delim = b"--".to_vec();
    delim.extend_from_slice(boundary);
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut pos = r.start;
    while pos < r.end {
        let end = raw[pos..r.end]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(r.end, |e| pos + e + 1);
        let line = &raw[pos..end];
        if line.starts_with(&delim) {
            let rest = line[delim.len()..].trim_ascii_end();
            let closing = rest.starts_with(b"--");
            if rest.is_empty() || closing {
                if let Some(s) = start {
                    // The CRLF (or LF) before the delimiter line is part of it.
                    let mut e = pos;
                    if e > s && raw[e - 1] == b'\n' {
                        e -= 1;
                        if e > s && raw[e - 1] == b'\r' {
                            e -= 1;
                        }
                    }
                    out.push(s..e.max(s));
                }
                if closing {
                    return out;
                }
                start = Some(end);
            }
        }
        pos = end;
    }
    if let Some(s) = start {
        out.push(s..r.end);
    }
    out
}

/// The value of the first field `name` of `header`, unfolded and trimmed, as text.
pub fn field(header: &[u8], name: &[u8]) -> Option<String> {
    let v = raw_field(header, name)?;
    Some(String::from_utf8_lossy(&v).into_owned())
}

/// The value of the first field `name` of `header` as Dovecot keeps Content-ID,
/// Content-Description, Content-MD5 and Content-Location: unfolded, the white space
/// after the colon left out, the rest as written (trailing blanks too).
pub fn field_as_written(header: &[u8], name: &[u8]) -> Option<String> {
    let v = unfolded(header, name)?;
    Some(String::from_utf8_lossy(v.trim_ascii_start()).into_owned())
}

/// The value of the first field `name` of `header`, unfolded (line breaks removed) and
/// trimmed, as bytes.
pub fn raw_field(header: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    Some(unfolded(header, name)?.trim_ascii().to_vec())
}

/// The value of the first field `name` of `header`, unfolded (line breaks removed).
fn unfolded(header: &[u8], name: &[u8]) -> Option<Vec<u8>> {
    let mut value: Option<Vec<u8>> = None;
    for line in header.split_inclusive(|&b| b == b'\n') {
        let folded = matches!(line.first(), Some(b' ' | b'\t'));
        match (&mut value, folded) {
            (Some(v), true) => v.extend_from_slice(line),
            (Some(_), false) => break,
            (None, false) => {
                if let Some(c) = line.iter().position(|&b| b == b':') {
                    if line[..c].trim_ascii_end().eq_ignore_ascii_case(name) {
                        value = Some(line[c + 1..].to_vec());
                    }
                }
            }
            (None, true) => {}
        }
    }
    let v = value?.into_iter().filter(|&b| b != b'\r' && b != b'\n');
    Some(v.collect())
}

/// A content type (type and subtype as written) and its parameters.
type ContentType = ((String, String), Vec<(String, String)>);

/// Type, subtype and parameters of a Content-Type value (`None`: no `type/subtype`).
fn content_type(v: &str) -> Option<ContentType> {
    let mut parts = split_params(v).into_iter();
    let t = parts.next()?;
    let (ty, sub) = t.split_once('/')?;
    let (ty, sub) = (ty.trim().to_string(), sub.trim().to_string());
    if ty.is_empty() || sub.is_empty() {
        return None;
    }
    Some(((ty, sub), mime_params(parts)))
}

/// The disposition (as written: `Attachment`) and its parameters of a
/// Content-Disposition value.
pub fn disposition(v: &str) -> (String, Vec<(String, String)>) {
    let mut parts = split_params(v).into_iter().peekable();
    let kind = match parts.peek() {
        Some(k) if !k.contains('=') => parts.next().unwrap_or_default(),
        _ => String::new(),
    };
    (kind, mime_params(parts))
}

/// The language tags of a Content-Language value (`en, de-AT`), comments left out, up
/// to the first that is not an atom.
pub fn languages(v: &str) -> Vec<String> {
    let (mut plain, mut depth) = (String::new(), 0usize);
    for c in v.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let special = |c: char| "()<>[]:;@\\,.\"".contains(c) || c.is_ascii_control() || c == ' ';
    let mut out = Vec::new();
    for tag in plain.split(',').map(str::trim) {
        if tag.is_empty() || tag.chars().any(special) {
            break;
        }
        out.push(tag.to_string());
    }
    out
}

/// An RFC 2231 piece of a parameter: name, index, whether encoded, value.
type Piece = (String, u32, bool, String);

/// `key=value` parameters as Dovecot reads them: names as written, quotes and their
/// escapes removed; RFC 2231 parameters (`name*0`, `name*1*` ..., `name*`) come after
/// the others, sorted by name, each joined into one (`name`, or `name*` when a piece is
/// encoded, its value then starting with charset and language, `''` put first when the
/// first piece has none); a set with a piece missing is kept as it came. (Dovecot 2.3
/// gives a `name*` that follows a piece `other*1` the index 1, so keeps it as `name*1*`;
/// not copied.)
pub fn mime_params(parts: impl Iterator<Item = String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pieces: Vec<Piece> = Vec::new();
    for p in parts {
        let Some((k, v)) = p.split_once('=') else {
            continue;
        };
        let (k, v) = (k.trim().to_string(), unquote(v.trim()));
        match k
            .split_once('*')
            .and_then(|(n, rest)| Some((n, piece(rest)?)))
        {
            Some((name, (idx, enc))) => pieces.push((name.to_string(), idx, enc, v)),
            None => out.push((k, v)),
        }
    }
    pieces.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut rest = pieces.as_slice();
    while let Some(first) = rest.first() {
        let n = rest
            .iter()
            .take_while(|p| p.0.eq_ignore_ascii_case(&first.0))
            .count();
        let (group, tail) = rest.split_at(n);
        rest = tail;
        out.extend(joined(group));
    }
    out
}

/// One parameter of the RFC 2231 pieces of one name (sorted by index), or the pieces
/// as they came when one is missing.
fn joined(group: &[Piece]) -> Vec<(String, String)> {
    let complete = group.iter().enumerate().all(|(j, p)| p.1 as usize == j);
    if !complete {
        let name = |p: &Piece| format!("{}*{}{}", p.0, p.1, if p.2 { "*" } else { "" });
        return group.iter().map(|p| (name(p), p.3.clone())).collect();
    }
    let encoded = group.iter().any(|p| p.2);
    let mut value = String::new();
    if encoded && !group[0].2 {
        value.push_str("''");
    }
    group.iter().for_each(|p| value.push_str(&p.3));
    let star = if encoded { "*" } else { "" };
    vec![(format!("{}{star}", group[0].0), value)]
}

/// The index and whether it is encoded, of what follows the first `*` of an RFC 2231
/// name: `0*` is (0, true), `1` is (1, false), nothing (`name*`) is (0, true).
fn piece(rest: &str) -> Option<(u32, bool)> {
    let (digits, enc) = match rest.strip_suffix('*') {
        Some(d) => (d, true),
        None => (rest, rest.is_empty()),
    };
    if digits.is_empty() {
        return enc.then_some((0, true));
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((digits.parse().ok()?, enc))
}

/// A parameter value with its quotes and their backslash escapes removed.
fn unquote(v: &str) -> String {
    let Some(inner) = v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return v.to_string();
    };
    let (mut out, mut esc) = (String::new(), false);
    for c in inner.chars() {
        if c == '\\' && !esc {
            esc = true;
        } else {
            out.push(c);
            esc = false;
        }
    }
    out
}

/// `v` split at the `;` outside quotes.
pub fn split_params(v: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut esc) = (Vec::new(), String::new(), false, false);
    for c in v.chars() {
        match c {
            _ if esc => esc = false,
            '\\' if quoted => esc = true,
            '"' => quoted = !quoted,
            ';' if !quoted => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The part a section's part number names (`[1, 2]`: the second part of the first); a
/// non-multipart message's only part is `1`; below a `message/rfc822` part, the numbers
/// go on in its message (RFC 3501, 6.4.5).
pub fn find<'p>(top: &'p Part, path: &[u32]) -> Option<&'p Part> {
    let mut cur = top;
    let mut at_top = true;
    for &n in path {
        let container = match (&cur.message, at_top) {
            (Some(m), false) => m.as_ref(),
            _ => cur,
        };
        cur = match container.children.is_empty() {
            true if n == 1 => container,
            true => return None,
            false => container.children.get((n as usize).checked_sub(1)?)?,
        };
        at_top = false;
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NESTED: &[u8] = b"Content-Type: multipart/mixed; boundary=\"B\"\r\n\r\npreamble\r\n--B\r\n\
Content-Type: text/plain; charset=utf-8\r\n\r\nhello\r\n--B\r\nContent-Type: message/rfc822\r\n\r\n\
Subject: inner\r\nContent-Type: multipart/alternative; boundary=C\r\n\r\n--C\r\n\r\nplain\r\n--C\r\n\
Content-Type: text/html\r\n\r\n<p>x</p>\r\n--C--\r\n\r\n--B--\r\nepilogue\r\n";

    #[test]
    fn parts_and_their_ranges() {
        let p = parse(NESTED);
        assert_eq!(p.kind, ("multipart".into(), "mixed".into()));
        assert_eq!(p.children.len(), 2);
        let text = &p.children[0];
        assert_eq!(&NESTED[text.body.clone()], b"hello");
        assert_eq!(text.params, [("charset".to_string(), "utf-8".to_string())]);
        let msg = p.children[1].message.as_ref().unwrap();
        assert_eq!(msg.kind, ("multipart".into(), "alternative".into()));
        assert_eq!(msg.children.len(), 2);
        assert_eq!(&NESTED[msg.children[0].body.clone()], b"plain");
        assert_eq!(msg.children[0].kind, ("text".into(), "plain".into()));
        assert_eq!(
            &NESTED[find(&p, &[2, 2]).unwrap().body.clone()],
            b"<p>x</p>"
        );
        assert_eq!(&NESTED[find(&p, &[1]).unwrap().body.clone()], b"hello");
        assert!(find(&p, &[3]).is_none());
        let single = parse(b"Subject: x\n\nbody\n");
        assert_eq!(find(&single, &[1]).unwrap().body, single.body);
        assert!(find(&single, &[2]).is_none());
    }

    /// As Dovecot 2.3 reads them: RFC 2231 pieces sorted by name (bytes), grouped by name
    /// in any case, a group with a missing index kept piece by piece.
    #[test]
    fn parameters_as_dovecot_reads_them() {
        let v = "application/x; b*0=a; b*2*=c; Name*0=x; name*1=y; t=\"q \\\"r\\\"\"; u*=q";
        let ((ty, sub), params) = content_type(v).unwrap();
        assert_eq!((ty.as_str(), sub.as_str()), ("application", "x"));
        let got: Vec<(&str, &str)> = params
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("t", "q \"r\""),
                ("Name", "x"),
                ("b*0", "a"),
                ("b*2*", "c"),
                ("name*1", "y"),
                ("u*", "q"),
            ]
        );
        assert_eq!(
            disposition("Attachment; filename*0=\"a b\"; filename*1*=%41"),
            (
                "Attachment".to_string(),
                vec![("filename*".to_string(), "''a b%41".to_string())]
            )
        );
        assert_eq!(disposition("").0, "");
        assert_eq!(languages("en (English), de-AT, x y, fr"), ["en", "de-AT"]);
    }

    #[test]
    fn hostile_nesting_is_bounded() {
        let mut m = Vec::new();
        for i in 0..5000 {
            m.extend(
                format!("Content-Type: multipart/mixed; boundary=b{i}\r\n\r\n--b{i}\r\n").bytes(),
            );
        }
        let p = parse(&m);
        let mut depth = 0;
        let mut cur = &p;
        while let Some(c) = cur.children.first() {
            cur = c;
            depth += 1;
        }
        assert!(depth <= MAX_DEPTH);
    }
}
