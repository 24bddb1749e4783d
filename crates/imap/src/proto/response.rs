//! Server responses: types and a parser for one framed response (see
//! [`framing`](super::framing)). Bytes in, borrowed values out; no sockets.
//!
//! Why a hand-written parser rather than `imap-codec`: the client needs a
//! small subset of the grammar, must tolerate whatever a real server adds
//! (unknown response codes, extension data in LIST and FETCH are skipped, not
//! rejected) and must hand FETCH bodies to the caller as slices of the read
//! buffer without copying, one response at a time, to keep memory bounded.
//! The parser is tested with wire transcripts below and fuzzed by proptest.

use std::borrow::Cow;
use std::fmt;

use super::date::InternalDate;
use super::seqset::SeqSet;

/// Result status of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// `OK`
    Ok,
    /// `NO`: the command failed.
    No,
    /// `BAD`: the command was not understood.
    Bad,
    /// `PREAUTH` greeting.
    PreAuth,
    /// `BYE`: the server is closing the connection.
    Bye,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "OK",
            Status::No => "NO",
            Status::Bad => "BAD",
            Status::PreAuth => "PREAUTH",
            Status::Bye => "BYE",
        })
    }
}

/// A response code (`[...]` after the status), RFC 3501, 4315, 5530, 7162.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Code {
    /// `[ALERT]`
    Alert,
    /// `[ALREADYEXISTS]`
    AlreadyExists,
    /// `[APPENDUID uidvalidity uid-set]` (UIDPLUS; a set after MULTIAPPEND).
    AppendUid {
        /// UIDVALIDITY of the target mailbox.
        uidvalidity: u32,
        /// UIDs of the appended messages, in append order.
        uids: SeqSet,
    },
    /// `[AUTHENTICATIONFAILED]`
    AuthenticationFailed,
    /// `[AUTHORIZATIONFAILED]`
    AuthorizationFailed,
    /// `[CANNOT]`
    Cannot,
    /// `[CAPABILITY ...]`
    Capability(Vec<String>),
    /// `[CONTACTADMIN]`
    ContactAdmin,
    /// `[EXPIRED]`
    Expired,
    /// `[HIGHESTMODSEQ n]` (CONDSTORE)
    HighestModSeq(u64),
    /// `[INUSE]`
    InUse,
    /// `[LIMIT]`
    Limit,
    /// `[NONEXISTENT]`
    Nonexistent,
    /// `[NOMODSEQ]`
    NoModSeq,
    /// `[NOPERM]`
    NoPerm,
    /// `[OVERQUOTA]`
    OverQuota,
    /// `[PERMANENTFLAGS (...)]`
    PermanentFlags(Vec<String>),
    /// `[READ-ONLY]`
    ReadOnly,
    /// `[READ-WRITE]`
    ReadWrite,
    /// `[SERVERBUG]`
    ServerBug,
    /// `[THROTTLED]`
    Throttled,
    /// `[TRYCREATE]`
    TryCreate,
    /// `[UIDNEXT n]`
    UidNext(u32),
    /// `[UIDVALIDITY n]`
    UidValidity(u32),
    /// `[UNAVAILABLE]`
    Unavailable,
    /// Any other code, kept as text.
    Other {
        /// Code name, upper-cased.
        name: String,
        /// Raw argument text, if any.
        arg: Option<String>,
    },
}

impl Code {
    /// Whether a failure with this code may go away by itself (retry later,
    /// slow down): THROTTLED, UNAVAILABLE, INUSE, SERVERBUG.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Code::Throttled | Code::Unavailable | Code::InUse | Code::ServerBug
        )
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Code::AppendUid { uidvalidity, uids } => write!(f, "APPENDUID {uidvalidity} {uids}"),
            Code::Capability(c) => write!(f, "CAPABILITY {}", c.join(" ")),
            Code::HighestModSeq(n) => write!(f, "HIGHESTMODSEQ {n}"),
            Code::PermanentFlags(c) => write!(f, "PERMANENTFLAGS ({})", c.join(" ")),
            Code::UidNext(n) => write!(f, "UIDNEXT {n}"),
            Code::UidValidity(n) => write!(f, "UIDVALIDITY {n}"),
            Code::Other { name, arg: Some(a) } => write!(f, "{name} {a}"),
            Code::Other { name, arg: None } => f.write_str(name),
            other => f.write_str(match other {
                Code::Alert => "ALERT",
                Code::AlreadyExists => "ALREADYEXISTS",
                Code::AuthenticationFailed => "AUTHENTICATIONFAILED",
                Code::AuthorizationFailed => "AUTHORIZATIONFAILED",
                Code::Cannot => "CANNOT",
                Code::ContactAdmin => "CONTACTADMIN",
                Code::Expired => "EXPIRED",
                Code::InUse => "INUSE",
                Code::Limit => "LIMIT",
                Code::Nonexistent => "NONEXISTENT",
                Code::NoModSeq => "NOMODSEQ",
                Code::NoPerm => "NOPERM",
                Code::OverQuota => "OVERQUOTA",
                Code::ReadOnly => "READ-ONLY",
                Code::ReadWrite => "READ-WRITE",
                Code::ServerBug => "SERVERBUG",
                Code::Throttled => "THROTTLED",
                Code::TryCreate => "TRYCREATE",
                _ => "UNAVAILABLE",
            }),
        }
    }
}

/// Status, optional code and human text of a status response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusText<'a> {
    /// OK, NO, BAD, PREAUTH or BYE.
    pub status: Status,
    /// The `[...]` code, if any.
    pub code: Option<Code>,
    /// The human-readable rest of the line.
    pub text: Cow<'a, str>,
}

impl StatusText<'_> {
    /// The response as the server said it (`NO [OVERQUOTA] Quota exceeded`),
    /// for reports.
    pub fn to_wire_string(&self) -> String {
        match &self.code {
            Some(c) => format!("{} [{}] {}", self.status, c, self.text),
            None => format!("{} {}", self.status, self.text),
        }
    }
}

/// One LIST or LSUB line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListItem {
    /// Attributes as sent (`\HasNoChildren`, `\Sent`, `\Subscribed`...).
    pub attributes: Vec<String>,
    /// Hierarchy delimiter, `None` for a flat namespace.
    pub delimiter: Option<char>,
    /// Mailbox name as on the wire (modified UTF-7 not yet decoded).
    pub name: Vec<u8>,
}

impl ListItem {
    /// Whether the item has `attr` (case-insensitive, with the backslash).
    pub fn has(&self, attr: &str) -> bool {
        self.attributes.iter().any(|a| a.eq_ignore_ascii_case(attr))
    }
}

/// A body section of a FETCH response (`BODY[]`, `BODY[HEADER.FIELDS (X)]`,
/// `BINARY[]`, `RFC822`...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section<'a> {
    /// The item name through the closing `]`, upper-cased as the server sent
    /// it (`BODY[]`, `BODY[HEADER.FIELDS (MESSAGE-ID)]`).
    pub key: &'a str,
    /// `<origin>` of a partial fetch.
    pub origin: Option<u32>,
    /// The data (NIL is `None`); borrowed from the read buffer when it was a
    /// literal.
    pub data: Option<Cow<'a, [u8]>>,
}

/// One FETCH response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fetch<'a> {
    /// Message sequence number.
    pub seq: u32,
    /// `UID`
    pub uid: Option<u32>,
    /// `FLAGS`, as sent.
    pub flags: Option<Vec<&'a str>>,
    /// `INTERNALDATE`
    pub internal_date: Option<InternalDate>,
    /// `RFC822.SIZE`
    pub size: Option<u64>,
    /// `MODSEQ` (CONDSTORE)
    pub modseq: Option<u64>,
    /// Body sections, in the order sent.
    pub sections: Vec<Section<'a>>,
}

impl<'a> Fetch<'a> {
    /// The whole message (`BODY[]`, `BINARY[]` or `RFC822`), if fetched.
    pub fn body(&self) -> Option<&[u8]> {
        self.sections
            .iter()
            .find(|s| s.origin.is_none() && matches!(s.key, "BODY[]" | "BINARY[]" | "RFC822"))
            .and_then(|s| s.data.as_deref())
    }

    /// The first section whose key starts with `prefix` (case-insensitive).
    pub fn section(&self, prefix: &str) -> Option<&[u8]> {
        self.sections
            .iter()
            .find(|s| {
                s.key.len() >= prefix.len()
                    && s.key.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
            })
            .and_then(|s| s.data.as_deref())
    }
}

/// An ESEARCH response (RFC 4731).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ESearch {
    /// The `(TAG "...")` correlator.
    pub tag: Option<String>,
    /// Whether the results are UIDs.
    pub uid: bool,
    /// `ALL`
    pub all: Option<SeqSet>,
    /// `MIN`
    pub min: Option<u32>,
    /// `MAX`
    pub max: Option<u32>,
    /// `COUNT`
    pub count: Option<u32>,
    /// `MODSEQ`
    pub modseq: Option<u64>,
}

/// An untagged (`* ...`) response.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Untagged<'a> {
    /// `* OK|NO|BAD|PREAUTH|BYE [code] text`
    Status(StatusText<'a>),
    /// `* CAPABILITY ...`
    Capability(Vec<String>),
    /// `* ENABLED ...`
    Enabled(Vec<String>),
    /// `* LIST ...`
    List(ListItem),
    /// `* LSUB ...`
    Lsub(ListItem),
    /// `* FLAGS (...)`
    Flags(Vec<String>),
    /// `* n EXISTS`
    Exists(u32),
    /// `* n RECENT`
    Recent(u32),
    /// `* n EXPUNGE`
    Expunge(u32),
    /// `* SEARCH n... [(MODSEQ m)]`
    Search {
        /// Matching numbers.
        ids: Vec<u32>,
        /// Highest MODSEQ of the matches (CONDSTORE).
        modseq: Option<u64>,
    },
    /// `* ESEARCH ...`
    ESearch(ESearch),
    /// `* STATUS mailbox (...)`
    MailboxStatus {
        /// Mailbox name as on the wire.
        mailbox: Vec<u8>,
        /// Items, names upper-cased (`MESSAGES`, `UIDNEXT`...).
        items: Vec<(String, u64)>,
    },
    /// `* n FETCH (...)`
    Fetch(Fetch<'a>),
    /// `* VANISHED [(EARLIER)] uids` (QRESYNC)
    Vanished {
        /// Whether `(EARLIER)` was given.
        earlier: bool,
        /// The expunged UIDs.
        uids: SeqSet,
    },
    /// `* ACL mailbox (identifier rights)*` (RFC 4314): who may do what.
    Acl {
        /// Mailbox name as on the wire.
        mailbox: Vec<u8>,
        /// (identifier, rights), as sent (an identifier with a leading `-` holds
        /// negative rights).
        entries: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// `* MYRIGHTS mailbox rights` (RFC 4314): what the logged-in user may do.
    MyRights {
        /// Mailbox name as on the wire.
        mailbox: Vec<u8>,
        /// The rights' letters.
        rights: Vec<u8>,
    },
    /// `* NAMESPACE personal other-users shared` (RFC 2342): each a list of (prefix,
    /// delimiter), empty for NIL.
    Namespace {
        /// The user's own folders (`""` on Dovecot, `INBOX.` on Cyrus).
        personal: Vec<(Vec<u8>, Option<char>)>,
        /// Other users' folders shared with the user (`shared/`, `user.`).
        other: Vec<(Vec<u8>, Option<char>)>,
        /// Public folders.
        shared: Vec<(Vec<u8>, Option<char>)>,
    },
    /// `* METADATA mailbox (entry value ...)` (RFC 5464): entries and their values
    /// (`None`: NIL); the unsolicited form, entries without values, has `None` for each.
    Metadata {
        /// Mailbox name as on the wire (empty for the server's own entries).
        mailbox: Vec<u8>,
        /// (entry name, value).
        entries: Vec<(String, Option<Vec<u8>>)>,
    },
    /// `* QUOTAROOT mailbox root...` (RFC 9208): the quota roots of a mailbox.
    QuotaRoot {
        /// Mailbox name as on the wire.
        mailbox: Vec<u8>,
        /// Its roots (none: no quota applies).
        roots: Vec<Vec<u8>>,
    },
    /// `* QUOTA root (resource usage limit ...)` (RFC 9208).
    Quota {
        /// The quota root.
        root: Vec<u8>,
        /// (resource name upper-cased, usage, limit): `STORAGE` in KiB, `MESSAGE`...
        resources: Vec<(String, u64, u64)>,
    },
    /// Anything else (ID...), unparsed.
    Other {
        /// Response name, upper-cased.
        name: String,
        /// The rest of the response.
        rest: &'a [u8],
    },
}

/// One server response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    /// `+ text`: go on with the literal or the SASL exchange.
    Continuation(&'a [u8]),
    /// `* ...`
    Untagged(Untagged<'a>),
    /// `tag OK|NO|BAD ...`: completion of the command with that tag.
    Tagged {
        /// The command's tag.
        tag: &'a str,
        /// Its outcome.
        status: StatusText<'a>,
    },
}

/// A response that does not follow the grammar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// What was expected.
    pub expected: &'static str,
    /// Byte offset in the response.
    pub at: usize,
    /// The start of the response, lossily decoded (for the error message).
    pub excerpt: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed server response (expected {} at byte {}): {:?}",
            self.expected, self.at, self.excerpt
        )
    }
}

impl std::error::Error for ParseError {}

type PResult<T> = Result<T, ParseError>;

/// Parses one complete response (as framed, including its final CRLF).
pub fn parse_response(buf: &[u8]) -> PResult<Response<'_>> {
    let mut p = Parser { b: buf, i: 0 };
    let r = p.response()?;
    Ok(r)
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
}

fn upper_eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

impl<'a> Parser<'a> {
    fn err<T>(&self, expected: &'static str) -> PResult<T> {
        let end = self.b.len().min(200);
        Err(ParseError {
            expected,
            at: self.i,
            excerpt: String::from_utf8_lossy(&self.b[..end]).into_owned(),
        })
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8, what: &'static str) -> PResult<()> {
        if self.eat(c) {
            Ok(())
        } else {
            self.err(what)
        }
    }

    fn at_eol(&self) -> bool {
        matches!(self.peek(), None | Some(b'\r') | Some(b'\n'))
    }

    /// Takes bytes while `f` holds (at least one).
    fn take_while(&mut self, what: &'static str, f: impl Fn(u8) -> bool) -> PResult<&'a [u8]> {
        let start = self.i;
        while self.peek().is_some_and(&f) {
            self.i += 1;
        }
        if self.i == start {
            return self.err(what);
        }
        Ok(&self.b[start..self.i])
    }

    fn str_of(&self, b: &'a [u8]) -> PResult<&'a str> {
        match std::str::from_utf8(b) {
            Ok(s) => Ok(s),
            Err(_) => self.err("UTF-8 text"),
        }
    }

    /// An atom (ATOM-CHARs); also accepts `]`-free tag and keyword text.
    fn atom(&mut self) -> PResult<&'a str> {
        let b = self.take_while("atom", is_atom_char)?;
        self.str_of(b)
    }

    /// A flag: `\Atom`, `\*` or a keyword atom.
    fn flag(&mut self) -> PResult<&'a str> {
        let start = self.i;
        let system = self.eat(b'\\');
        if !(system && self.eat(b'*')) {
            self.take_while("flag", is_atom_char)?;
        }
        self.str_of(&self.b[start..self.i])
    }

    fn number64(&mut self) -> PResult<u64> {
        let d = self.take_while("number", |b| b.is_ascii_digit())?;
        if d.len() > 19 {
            return self.err("number below 2^63");
        }
        Ok(d.iter().fold(0u64, |a, &c| a * 10 + u64::from(c - b'0')))
    }

    fn number(&mut self) -> PResult<u32> {
        let n = self.number64()?;
        match u32::try_from(n) {
            Ok(n) => Ok(n),
            Err(_) => self.err("32-bit number"),
        }
    }

    fn sp(&mut self) -> PResult<()> {
        self.expect(b' ', "space")
    }

    fn quoted(&mut self) -> PResult<Cow<'a, [u8]>> {
        self.expect(b'"', "quoted string")?;
        let start = self.i;
        let mut owned: Option<Vec<u8>> = None;
        loop {
            match self.peek() {
                None | Some(b'\r') | Some(b'\n') => return self.err("closing quote"),
                Some(b'"') => {
                    let s = &self.b[start..self.i];
                    self.i += 1;
                    return Ok(match owned {
                        Some(v) => Cow::Owned(v),
                        None => Cow::Borrowed(s),
                    });
                }
                Some(b'\\') => {
                    let v = owned.get_or_insert_with(|| self.b[start..self.i].to_vec());
                    self.i += 1;
                    match self.peek() {
                        Some(c) if c != b'\r' && c != b'\n' => {
                            v.push(c);
                            self.i += 1;
                        }
                        _ => return self.err("escaped character"),
                    }
                }
                Some(c) => {
                    if let Some(v) = owned.as_mut() {
                        v.push(c);
                    }
                    self.i += 1;
                }
            }
        }
    }

    fn literal(&mut self) -> PResult<&'a [u8]> {
        self.eat(b'~'); // literal8
        self.expect(b'{', "literal")?;
        let n = self.number64()?;
        self.eat(b'+');
        self.expect(b'}', "literal '}'")?;
        self.eat(b'\r');
        self.expect(b'\n', "LF after literal header")?;
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        if self.b.len() - self.i < n {
            return self.err("literal data");
        }
        let s = &self.b[self.i..self.i + n];
        self.i += n;
        Ok(s)
    }

    /// Whether a literal starts here: `{`, or `~{` (RFC 3516's literal8). A `~` alone is
    /// an atom's character (a mailbox named `~`).
    fn at_literal(&self) -> bool {
        match self.peek() {
            Some(b'{') => true,
            Some(b'~') => self.b.get(self.i + 1) == Some(&b'{'),
            _ => false,
        }
    }

    fn string(&mut self) -> PResult<Cow<'a, [u8]>> {
        match self.peek() {
            Some(b'"') => self.quoted(),
            _ if self.at_literal() => Ok(Cow::Borrowed(self.literal()?)),
            _ => self.err("string"),
        }
    }

    fn is_nil(&self) -> bool {
        self.b.len() >= self.i + 3
            && self.b[self.i..self.i + 3].eq_ignore_ascii_case(b"NIL")
            && !self.b.get(self.i + 3).copied().is_some_and(is_atom_char)
    }

    fn nstring(&mut self) -> PResult<Option<Cow<'a, [u8]>>> {
        if self.is_nil() {
            self.i += 3;
            Ok(None)
        } else {
            Ok(Some(self.string()?))
        }
    }

    fn astring(&mut self) -> PResult<Cow<'a, [u8]>> {
        match self.peek() {
            Some(b'"') => self.string(),
            _ if self.at_literal() => self.string(),
            _ => Ok(Cow::Borrowed(
                self.take_while("astring", |b| is_atom_char(b) || b == b']')?,
            )),
        }
    }

    /// Skips any value: NIL, number, atom, string, literal, or a
    /// parenthesized/bracketed list of them.
    fn skip_value(&mut self) -> PResult<()> {
        match self.peek() {
            Some(b'(') => {
                self.i += 1;
                loop {
                    while self.eat(b' ') {}
                    if self.eat(b')') {
                        return Ok(());
                    }
                    if self.at_eol() {
                        return self.err("')'");
                    }
                    self.skip_value()?;
                }
            }
            Some(b'"') => self.quoted().map(drop),
            _ if self.at_literal() => self.literal().map(drop),
            Some(_) => {
                // atom, possibly with [section]<partial> or \flag
                self.take_while("value", |b| {
                    b.is_ascii_graphic() && !matches!(b, b'(' | b')' | b'"' | b'[')
                })?;
                if self.peek() == Some(b'[') {
                    self.bracketed()?;
                    if self.peek() == Some(b'<') {
                        self.take_while("partial", |b| b != b'>')?;
                        self.expect(b'>', "'>'")?;
                    }
                }
                Ok(())
            }
            None => self.err("value"),
        }
    }

    /// `[` ... `]` (no nesting of brackets in the grammar).
    fn bracketed(&mut self) -> PResult<&'a [u8]> {
        let start = self.i;
        self.expect(b'[', "'['")?;
        while let Some(c) = self.peek() {
            if c == b']' {
                self.i += 1;
                return Ok(&self.b[start..self.i]);
            }
            if c == b'\r' || c == b'\n' {
                break;
            }
            self.i += 1;
        }
        self.err("']'")
    }

    fn flag_list(&mut self) -> PResult<Vec<&'a str>> {
        self.expect(b'(', "'(' of flag list")?;
        let mut v = Vec::new();
        loop {
            while self.eat(b' ') {}
            if self.eat(b')') {
                return Ok(v);
            }
            v.push(self.flag()?);
        }
    }

    fn rest_of_line(&mut self) -> &'a [u8] {
        let start = self.i;
        while !self.at_eol() {
            self.i += 1;
        }
        &self.b[start..self.i]
    }

    fn end(&mut self) -> PResult<()> {
        while self.eat(b' ') {}
        self.eat(b'\r');
        if self.eat(b'\n') || self.peek().is_none() {
            Ok(())
        } else {
            self.err("end of response")
        }
    }

    fn response(&mut self) -> PResult<Response<'a>> {
        if self.eat(b'+') {
            self.eat(b' ');
            return Ok(Response::Continuation(self.rest_of_line()));
        }
        if self.eat(b'*') {
            self.sp()?;
            let u = self.untagged()?;
            return Ok(Response::Untagged(u));
        }
        let tag = self.take_while("tag", |b| is_atom_char(b) && b != b'+')?;
        let tag = self.str_of(tag)?;
        self.sp()?;
        let status = match self.atom()? {
            s if upper_eq(s, "OK") => Status::Ok,
            s if upper_eq(s, "NO") => Status::No,
            s if upper_eq(s, "BAD") => Status::Bad,
            _ => return self.err("OK, NO or BAD"),
        };
        let status = self.resp_text(status)?;
        Ok(Response::Tagged { tag, status })
    }

    fn resp_text(&mut self, status: Status) -> PResult<StatusText<'a>> {
        self.eat(b' ');
        let code = if self.peek() == Some(b'[') {
            let c = self.code()?;
            self.eat(b' ');
            Some(c)
        } else {
            None
        };
        let text = String::from_utf8_lossy(self.rest_of_line());
        self.end()?;
        Ok(StatusText { status, code, text })
    }

    fn code(&mut self) -> PResult<Code> {
        let inner = self.bracketed()?;
        let inner = &inner[1..inner.len() - 1];
        let (name, arg) = match inner.iter().position(|&b| b == b' ') {
            Some(p) => (&inner[..p], Some(&inner[p + 1..])),
            None => (inner, None),
        };
        let name = String::from_utf8_lossy(name).to_ascii_uppercase();
        let arg_str = arg.map(|a| String::from_utf8_lossy(a).into_owned());
        let mut sub = Parser {
            b: arg.unwrap_or(b""),
            i: 0,
        };
        let num = |sub: &mut Parser<'_>| -> Option<u64> { sub.number64().ok() };
        let words = |a: &Option<String>| -> Vec<String> {
            a.as_deref()
                .unwrap_or("")
                .trim_matches(|c| c == '(' || c == ')')
                .split_ascii_whitespace()
                .map(str::to_string)
                .collect()
        };
        let code = match name.as_str() {
            "ALERT" => Code::Alert,
            "ALREADYEXISTS" => Code::AlreadyExists,
            "APPENDUID" => {
                let uv = num(&mut sub).and_then(|n| u32::try_from(n).ok());
                let set = arg_str
                    .as_deref()
                    .and_then(|a| a.split_once(' '))
                    .and_then(|(_, s)| SeqSet::parse(s.trim()));
                match (uv, set) {
                    (Some(uidvalidity), Some(uids)) => Code::AppendUid { uidvalidity, uids },
                    _ => return self.err("APPENDUID uidvalidity uid-set"),
                }
            }
            "AUTHENTICATIONFAILED" => Code::AuthenticationFailed,
            "AUTHORIZATIONFAILED" => Code::AuthorizationFailed,
            "CANNOT" => Code::Cannot,
            "CAPABILITY" => Code::Capability(words(&arg_str)),
            "CONTACTADMIN" => Code::ContactAdmin,
            "EXPIRED" => Code::Expired,
            "HIGHESTMODSEQ" => match num(&mut sub) {
                Some(n) => Code::HighestModSeq(n),
                None => return self.err("HIGHESTMODSEQ number"),
            },
            "INUSE" => Code::InUse,
            "LIMIT" => Code::Limit,
            "NONEXISTENT" => Code::Nonexistent,
            "NOMODSEQ" => Code::NoModSeq,
            "NOPERM" => Code::NoPerm,
            "OVERQUOTA" => Code::OverQuota,
            "PERMANENTFLAGS" => Code::PermanentFlags(words(&arg_str)),
            "READ-ONLY" => Code::ReadOnly,
            "READ-WRITE" => Code::ReadWrite,
            "SERVERBUG" => Code::ServerBug,
            "THROTTLED" => Code::Throttled,
            "TRYCREATE" => Code::TryCreate,
            "UIDNEXT" => match num(&mut sub).and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Code::UidNext(n),
                None => return self.err("UIDNEXT number"),
            },
            "UIDVALIDITY" => match num(&mut sub).and_then(|n| u32::try_from(n).ok()) {
                Some(n) => Code::UidValidity(n),
                None => return self.err("UIDVALIDITY number"),
            },
            "UNAVAILABLE" => Code::Unavailable,
            _ => Code::Other { name, arg: arg_str },
        };
        Ok(code)
    }

    fn words_to_eol(&mut self) -> Vec<String> {
        String::from_utf8_lossy(self.rest_of_line())
            .split_ascii_whitespace()
            .map(str::to_string)
            .collect()
    }

    fn untagged(&mut self) -> PResult<Untagged<'a>> {
        if self.peek().is_some_and(|b| b.is_ascii_digit()) {
            let n = self.number()?;
            self.sp()?;
            let what = self.atom()?;
            let u = if upper_eq(what, "EXISTS") {
                Untagged::Exists(n)
            } else if upper_eq(what, "RECENT") {
                Untagged::Recent(n)
            } else if upper_eq(what, "EXPUNGE") {
                Untagged::Expunge(n)
            } else if upper_eq(what, "FETCH") {
                self.sp()?;
                Untagged::Fetch(self.fetch(n)?)
            } else {
                let rest = self.rest_of_line();
                self.end()?;
                return Ok(Untagged::Other {
                    name: what.to_ascii_uppercase(),
                    rest,
                });
            };
            self.end()?;
            return Ok(u);
        }
        let name = self.atom()?.to_ascii_uppercase();
        let u = match name.as_str() {
            "OK" => return Ok(Untagged::Status(self.resp_text(Status::Ok)?)),
            "NO" => return Ok(Untagged::Status(self.resp_text(Status::No)?)),
            "BAD" => return Ok(Untagged::Status(self.resp_text(Status::Bad)?)),
            "PREAUTH" => return Ok(Untagged::Status(self.resp_text(Status::PreAuth)?)),
            "BYE" => return Ok(Untagged::Status(self.resp_text(Status::Bye)?)),
            "CAPABILITY" => Untagged::Capability(self.words_to_eol()),
            "ENABLED" => Untagged::Enabled(self.words_to_eol()),
            "LIST" => Untagged::List(self.list_item()?),
            "LSUB" => Untagged::Lsub(self.list_item()?),
            "FLAGS" => {
                self.sp()?;
                Untagged::Flags(self.flag_list()?.into_iter().map(str::to_string).collect())
            }
            "SEARCH" => {
                let mut ids = Vec::new();
                let mut modseq = None;
                while self.eat(b' ') {
                    if self.eat(b'(') {
                        let w = self.atom()?;
                        if !upper_eq(w, "MODSEQ") {
                            return self.err("MODSEQ");
                        }
                        self.sp()?;
                        modseq = Some(self.number64()?);
                        self.expect(b')', "')'")?;
                    } else if self.at_eol() {
                        break;
                    } else {
                        ids.push(self.number()?);
                    }
                }
                Untagged::Search { ids, modseq }
            }
            "ESEARCH" => Untagged::ESearch(self.esearch()?),
            "STATUS" => {
                self.sp()?;
                let mailbox = self.astring()?.into_owned();
                self.sp()?;
                let items = (self.named_numbers::<1>("STATUS items")?.into_iter())
                    .map(|(k, [n])| (k, n))
                    .collect();
                Untagged::MailboxStatus { mailbox, items }
            }
            "ACL" => {
                self.sp()?;
                let mailbox = self.astring()?.into_owned();
                let words = self.astrings_to_eol()?;
                if words.len() % 2 == 1 {
                    return self.err("ACL identifier with its rights");
                }
                let mut words = words.into_iter();
                let mut entries = Vec::new();
                while let (Some(id), Some(rights)) = (words.next(), words.next()) {
                    entries.push((id, rights));
                }
                Untagged::Acl { mailbox, entries }
            }
            "NAMESPACE" => {
                let mut groups = [Vec::new(), Vec::new(), Vec::new()];
                for g in &mut groups {
                    self.sp()?;
                    *g = self.namespace_group()?;
                }
                let [personal, other, shared] = groups;
                Untagged::Namespace {
                    personal,
                    other,
                    shared,
                }
            }
            "QUOTAROOT" => {
                self.sp()?;
                let mailbox = self.astring()?.into_owned();
                let roots = self.astrings_to_eol()?;
                Untagged::QuotaRoot { mailbox, roots }
            }
            "QUOTA" => {
                self.sp()?;
                let root = self.astring()?.into_owned();
                self.sp()?;
                let resources = (self.named_numbers::<2>("quota resources")?.into_iter())
                    .map(|(k, [usage, limit])| (k, usage, limit))
                    .collect();
                Untagged::Quota { root, resources }
            }
            "METADATA" => {
                self.sp()?;
                let mailbox = self.astring()?.into_owned();
                self.sp()?;
                let mut entries = Vec::new();
                if self.eat(b'(') {
                    loop {
                        while self.eat(b' ') {}
                        if self.eat(b')') {
                            break;
                        }
                        let name = String::from_utf8_lossy(&self.astring()?).into_owned();
                        self.sp()?;
                        entries.push((name, self.nstring()?.map(|v| v.into_owned())));
                    }
                } else {
                    loop {
                        let name = String::from_utf8_lossy(&self.astring()?).into_owned();
                        entries.push((name, None));
                        if !self.eat(b' ') || self.at_eol() {
                            break;
                        }
                    }
                }
                Untagged::Metadata { mailbox, entries }
            }
            "MYRIGHTS" => {
                self.sp()?;
                let mailbox = self.astring()?.into_owned();
                self.sp()?;
                let rights = self.astring()?.into_owned();
                Untagged::MyRights { mailbox, rights }
            }
            "VANISHED" => {
                self.sp()?;
                let mut earlier = false;
                if self.eat(b'(') {
                    let w = self.atom()?;
                    earlier = upper_eq(w, "EARLIER");
                    self.expect(b')', "')'")?;
                    self.sp()?;
                }
                let set = self.take_while("uid set", |b| {
                    b.is_ascii_digit() || b == b':' || b == b',' || b == b'*'
                })?;
                let set = SeqSet::parse(self.str_of(set)?);
                match set {
                    Some(uids) => Untagged::Vanished { earlier, uids },
                    None => return self.err("uid set"),
                }
            }
            _ => {
                self.eat(b' ');
                let start = self.i;
                // The rest may hold literals: skip values to the end.
                while !self.at_eol() {
                    if self.eat(b' ') {
                        continue;
                    }
                    self.skip_value()?;
                }
                let rest = &self.b[start..self.i];
                Untagged::Other { name, rest }
            }
        };
        self.end()?;
        Ok(u)
    }

    /// Space-separated astrings up to the end of the line (ACL's, QUOTAROOT's).
    fn astrings_to_eol(&mut self) -> PResult<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        while self.eat(b' ') {
            if self.at_eol() {
                break;
            }
            out.push(self.astring()?.into_owned());
        }
        Ok(out)
    }

    /// `(NAME n... NAME n...)`, `N` numbers after each name (upper-cased): STATUS items,
    /// quota resources.
    fn named_numbers<const N: usize>(
        &mut self,
        what: &'static str,
    ) -> PResult<Vec<(String, [u64; N])>> {
        self.expect(b'(', what)?;
        let mut out = Vec::new();
        loop {
            while self.eat(b' ') {}
            if self.eat(b')') {
                return Ok(out);
            }
            let name = self.atom()?.to_ascii_uppercase();
            let mut n = [0; N];
            for v in &mut n {
                self.sp()?;
                *v = self.number64()?;
            }
            out.push((name, n));
        }
    }

    /// One group of a NAMESPACE response: NIL, or `((prefix delimiter ext*)...)`.
    fn namespace_group(&mut self) -> PResult<Vec<(Vec<u8>, Option<char>)>> {
        if self.is_nil() {
            self.i += 3;
            return Ok(Vec::new());
        }
        self.expect(b'(', "'(' of a namespace")?;
        let mut out = Vec::new();
        while self.eat(b'(') {
            let prefix = self.string()?.into_owned();
            self.sp()?;
            let delimiter = if self.is_nil() {
                self.i += 3;
                None
            } else {
                let d = self.quoted()?;
                std::str::from_utf8(&d).ok().and_then(|s| s.chars().next())
            };
            // Extensions (RFC 2342's namespace-response-extensions): skipped.
            while self.eat(b' ') {
                self.skip_value()?;
            }
            self.expect(b')', "')' of a namespace")?;
            out.push((prefix, delimiter));
        }
        self.expect(b')', "')' of namespaces")?;
        Ok(out)
    }

    fn list_item(&mut self) -> PResult<ListItem> {
        self.sp()?;
        let attributes = self.flag_list()?.into_iter().map(str::to_string).collect();
        self.sp()?;
        let delimiter = if self.is_nil() {
            self.i += 3;
            None
        } else {
            let d = self.quoted()?;
            match std::str::from_utf8(&d).ok().and_then(|s| s.chars().next()) {
                Some(c) if d.len() == c.len_utf8() => Some(c),
                _ => return self.err("one-character delimiter"),
            }
        };
        self.sp()?;
        let name = self.astring()?.into_owned();
        // LIST-EXTENDED data, e.g. ("CHILDINFO" ("SUBSCRIBED")): skipped.
        while self.eat(b' ') {
            if self.at_eol() {
                break;
            }
            self.skip_value()?;
        }
        Ok(ListItem {
            attributes,
            delimiter,
            name,
        })
    }

    fn esearch(&mut self) -> PResult<ESearch> {
        let mut e = ESearch::default();
        while self.eat(b' ') {
            if self.at_eol() {
                break;
            }
            if self.eat(b'(') {
                let w = self.atom()?;
                if !upper_eq(w, "TAG") {
                    return self.err("TAG");
                }
                self.sp()?;
                let t = self.string()?;
                e.tag = Some(String::from_utf8_lossy(&t).into_owned());
                self.expect(b')', "')'")?;
                continue;
            }
            let name = self.atom()?.to_ascii_uppercase();
            if name == "UID" {
                e.uid = true;
                continue;
            }
            self.sp()?;
            match name.as_str() {
                "ALL" => {
                    let s = self.atom()?;
                    e.all = SeqSet::parse(s);
                    if e.all.is_none() {
                        return self.err("sequence set");
                    }
                }
                "MIN" => e.min = Some(self.number()?),
                "MAX" => e.max = Some(self.number()?),
                "COUNT" => e.count = Some(self.number()?),
                "MODSEQ" => e.modseq = Some(self.number64()?),
                _ => self.skip_value()?,
            }
        }
        Ok(e)
    }

    fn fetch(&mut self, seq: u32) -> PResult<Fetch<'a>> {
        let mut f = Fetch {
            seq,
            ..Fetch::default()
        };
        self.expect(b'(', "'(' of FETCH data")?;
        loop {
            while self.eat(b' ') {}
            if self.eat(b')') {
                return Ok(f);
            }
            let start = self.i;
            self.take_while("FETCH item name", |b| {
                is_atom_char(b) && b != b'[' && b != b'<'
            })?;
            let mut has_section = false;
            if self.peek() == Some(b'[') {
                self.bracketed()?;
                has_section = true;
            }
            let key = self.str_of(&self.b[start..self.i])?;
            let mut origin = None;
            if self.eat(b'<') {
                origin = Some(self.number()?);
                self.expect(b'>', "'>'")?;
            }
            self.sp()?;
            let name = key.to_ascii_uppercase();
            match name.as_str() {
                "UID" => f.uid = Some(self.number()?),
                "FLAGS" => f.flags = Some(self.flag_list()?),
                "RFC822.SIZE" => f.size = Some(self.number64()?),
                "INTERNALDATE" => {
                    let q = self.quoted()?;
                    let s = String::from_utf8_lossy(&q);
                    match InternalDate::parse_imap(&s) {
                        Ok(d) => f.internal_date = Some(d),
                        Err(_) => return self.err("INTERNALDATE date-time"),
                    }
                }
                "MODSEQ" => {
                    self.expect(b'(', "'(' of MODSEQ")?;
                    f.modseq = Some(self.number64()?);
                    self.expect(b')', "')' of MODSEQ")?;
                }
                "RFC822" | "RFC822.HEADER" | "RFC822.TEXT" => {
                    let data = self.nstring()?;
                    f.sections.push(Section { key, origin, data });
                }
                _ if has_section && (name.starts_with("BODY[") || name.starts_with("BINARY[")) => {
                    let data = self.nstring()?;
                    f.sections.push(Section { key, origin, data });
                }
                _ => self.skip_value()?,
            }
        }
    }
}

fn is_atom_char(b: u8) -> bool {
    super::command::is_atom_char(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(b: &[u8]) -> Response<'_> {
        match parse_response(b) {
            Ok(r) => r,
            Err(e) => panic!("{e}"),
        }
    }

    fn untagged(b: &[u8]) -> Untagged<'_> {
        match parse(b) {
            Response::Untagged(u) => u,
            other => panic!("not untagged: {other:?}"),
        }
    }

    /// RFC 9208's examples, and Cyrus' (a quoted root; a mailbox without a root).
    #[test]
    fn quota() {
        assert_eq!(
            untagged(b"* QUOTAROOT INBOX \"\"\r\n"),
            Untagged::QuotaRoot {
                mailbox: b"INBOX".to_vec(),
                roots: vec![b"".to_vec()],
            }
        );
        assert_eq!(
            untagged(b"* QUOTAROOT INBOX\r\n"),
            Untagged::QuotaRoot {
                mailbox: b"INBOX".to_vec(),
                roots: vec![],
            }
        );
        assert_eq!(
            untagged(b"* QUOTA \"user/alice@example.org\" (STORAGE 10 512 MESSAGE 1 100)\r\n"),
            Untagged::Quota {
                root: b"user/alice@example.org".to_vec(),
                resources: vec![("STORAGE".into(), 10, 512), ("MESSAGE".into(), 1, 100)],
            }
        );
    }

    /// RFC 5464's forms: values quoted, as a literal and NIL; the unsolicited list.
    #[test]
    fn metadata() {
        assert_eq!(
            untagged(b"* METADATA \"INBOX\" (/private/comment \"My own\" /shared/comment {11}\r\nline1\r\nlin2 /shared/x NIL)\r\n"),
            Untagged::Metadata {
                mailbox: b"INBOX".to_vec(),
                entries: vec![
                    ("/private/comment".into(), Some(b"My own".to_vec())),
                    ("/shared/comment".into(), Some(b"line1\r\nlin2".to_vec())),
                    ("/shared/x".into(), None),
                ],
            }
        );
        assert_eq!(
            untagged(b"* METADATA \"\" /shared/comment /shared/admin\r\n"),
            Untagged::Metadata {
                mailbox: b"".to_vec(),
                entries: vec![
                    ("/shared/comment".into(), None),
                    ("/shared/admin".into(), None)
                ],
            }
        );
    }

    /// RFC 4314's examples, and Dovecot's: quoted and atom identifiers, a negative
    /// right, a literal, an empty ACL.
    #[test]
    fn acl_and_myrights() {
        assert_eq!(
            untagged(b"* ACL INBOX Fred rwipsldexta -Fred c\r\n"),
            Untagged::Acl {
                mailbox: b"INBOX".to_vec(),
                entries: vec![
                    (b"Fred".to_vec(), b"rwipsldexta".to_vec()),
                    (b"-Fred".to_vec(), b"c".to_vec()),
                ],
            }
        );
        assert_eq!(
            untagged(b"* ACL \"Team &APw-\" \"bob@example.org\" lrs {6}\r\n$staff lr\r\n"),
            Untagged::Acl {
                mailbox: b"Team &APw-".to_vec(),
                entries: vec![
                    (b"bob@example.org".to_vec(), b"lrs".to_vec()),
                    (b"$staff".to_vec(), b"lr".to_vec()),
                ],
            }
        );
        assert_eq!(
            untagged(b"* ACL Empty\r\n"),
            Untagged::Acl {
                mailbox: b"Empty".to_vec(),
                entries: vec![],
            }
        );
        assert_eq!(
            untagged(b"* MYRIGHTS INBOX rwiptsldaex\r\n"),
            Untagged::MyRights {
                mailbox: b"INBOX".to_vec(),
                rights: b"rwiptsldaex".to_vec(),
            }
        );
        assert!(parse_response(b"* ACL INBOX Fred\r\n").is_err());
    }

    #[test]
    fn greeting_with_capability_code() {
        let u = untagged(b"* OK [CAPABILITY IMAP4rev1 SASL-IR LOGIN-REFERRALS ID ENABLE IDLE LITERAL+ STARTTLS AUTH=PLAIN] Dovecot (Debian) ready.\r\n");
        let Untagged::Status(s) = u else { panic!() };
        assert_eq!(s.status, Status::Ok);
        assert_eq!(s.text, "Dovecot (Debian) ready.");
        let Some(Code::Capability(c)) = s.code else {
            panic!()
        };
        assert!(c.iter().any(|c| c == "LITERAL+"));
        assert_eq!(c.len(), 9);
    }

    #[test]
    fn tagged_forms() {
        assert_eq!(
            parse(b"A1 OK [APPENDUID 1700000000 3955:3957] Append completed (0.001 + 0.000 secs).\r\n"),
            Response::Tagged {
                tag: "A1",
                status: StatusText {
                    status: Status::Ok,
                    code: Some(Code::AppendUid {
                        uidvalidity: 1_700_000_000,
                        uids: SeqSet::range(3955, 3957)
                    }),
                    text: "Append completed (0.001 + 0.000 secs).".into(),
                }
            }
        );
        let Response::Tagged { status, .. } =
            parse(b"a.2 NO [OVERQUOTA] Quota exceeded (mailbox for user is full)\r\n")
        else {
            panic!()
        };
        assert_eq!(status.code, Some(Code::OverQuota));
        assert_eq!(
            status.to_wire_string(),
            "NO [OVERQUOTA] Quota exceeded (mailbox for user is full)"
        );
        let Response::Tagged { status, .. } = parse(b"A3 OK\r\n") else {
            panic!()
        };
        assert_eq!((status.status, status.text.as_ref()), (Status::Ok, ""));
        let Response::Tagged { status, .. } = parse(b"A4 no [THROTTLED] slow down\r\n") else {
            panic!()
        };
        assert!(status.code.as_ref().is_some_and(Code::is_transient));
        let Response::Tagged { status, .. } =
            parse(b"A5 NO [TRYCREATE] Mailbox doesn't exist: Foo\r\n")
        else {
            panic!()
        };
        assert_eq!(status.code, Some(Code::TryCreate));
        let Response::Tagged { status, .. } = parse(b"A6 NO [X-WEIRD some arg] hm\r\n") else {
            panic!()
        };
        assert_eq!(
            status.code,
            Some(Code::Other {
                name: "X-WEIRD".into(),
                arg: Some("some arg".into())
            })
        );
    }

    #[test]
    fn continuation() {
        assert_eq!(parse(b"+ OK\r\n"), Response::Continuation(b"OK"));
        assert_eq!(parse(b"+\r\n"), Response::Continuation(b""));
    }

    #[test]
    fn select_transcript() {
        let lines: &[&[u8]] = &[
            b"* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $Forwarded)\r\n",
            b"* OK [PERMANENTFLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft $Forwarded \\*)] Flags permitted.\r\n",
            b"* 172 EXISTS\r\n",
            b"* 0 RECENT\r\n",
            b"* OK [UIDVALIDITY 3857529045] UIDs valid\r\n",
            b"* OK [UIDNEXT 4392] Predicted next UID\r\n",
            b"* OK [HIGHESTMODSEQ 715194045007] Highest\r\n",
            b"A142 OK [READ-WRITE] Select completed (0.001 + 0.000 secs).\r\n",
        ];
        let got: Vec<Response<'_>> = lines.iter().map(|l| parse(l)).collect();
        assert!(matches!(&got[0], Response::Untagged(Untagged::Flags(f)) if f.len() == 6));
        assert!(
            matches!(&got[1], Response::Untagged(Untagged::Status(StatusText { code: Some(Code::PermanentFlags(f)), .. })) if f.last().map(String::as_str) == Some("\\*"))
        );
        assert_eq!(got[2], Response::Untagged(Untagged::Exists(172)));
        assert_eq!(got[3], Response::Untagged(Untagged::Recent(0)));
        assert!(matches!(
            &got[4],
            Response::Untagged(Untagged::Status(StatusText {
                code: Some(Code::UidValidity(3_857_529_045)),
                ..
            }))
        ));
        assert!(matches!(
            &got[5],
            Response::Untagged(Untagged::Status(StatusText {
                code: Some(Code::UidNext(4392)),
                ..
            }))
        ));
        assert!(matches!(
            &got[6],
            Response::Untagged(Untagged::Status(StatusText {
                code: Some(Code::HighestModSeq(715_194_045_007)),
                ..
            }))
        ));
        assert!(matches!(
            &got[7],
            Response::Tagged {
                tag: "A142",
                status: StatusText {
                    code: Some(Code::ReadWrite),
                    ..
                }
            }
        ));
    }

    #[test]
    fn list_transcripts() {
        let Untagged::List(l) = untagged(b"* LIST (\\HasNoChildren \\Sent) \".\" Sent\r\n") else {
            panic!()
        };
        assert_eq!(l.delimiter, Some('.'));
        assert_eq!(l.name, b"Sent");
        assert!(l.has("\\sent"));
        let Untagged::List(l) = untagged(
            b"* LIST (\\Subscribed \\HasChildren) \"/\" \"Archiv/Gesch&AOQ-ft \\\"x\\\"\"\r\n",
        ) else {
            panic!()
        };
        assert_eq!(l.name, b"Archiv/Gesch&AOQ-ft \"x\"");
        let Untagged::List(l) =
            untagged(b"* LIST () NIL {5}\r\na b c ( \"CHILDINFO\" (\"SUBSCRIBED\"))\r\n")
        else {
            panic!()
        };
        assert_eq!((l.delimiter, l.name.as_slice()), (None, &b"a b c"[..]));
        let Untagged::Lsub(l) = untagged(b"* LSUB (\\Noselect) \"\\\\\" INBOX\r\n") else {
            panic!()
        };
        assert_eq!(l.delimiter, Some('\\'));
    }

    fn lit(data: &[u8]) -> Vec<u8> {
        let mut v = format!("{{{}}}\r\n", data.len()).into_bytes();
        v.extend_from_slice(data);
        v
    }

    #[test]
    fn fetch_full_message() {
        let msg = b"From: a@b\r\nSubject: hi ) \"{3}\r\n\r\nbody\r\n";
        let mut r = b"* 12 FETCH (UID 4827313 FLAGS (\\Seen $Forwarded) INTERNALDATE \"17-Jul-1996 02:44:25 -0700\" RFC822.SIZE 39 MODSEQ (12121231000) BODY[] ".to_vec();
        r.extend_from_slice(&lit(msg));
        r.extend_from_slice(b")\r\n");
        let Untagged::Fetch(f) = untagged(&r) else {
            panic!()
        };
        assert_eq!(f.seq, 12);
        assert_eq!(f.uid, Some(4_827_313));
        assert_eq!(f.flags, Some(vec!["\\Seen", "$Forwarded"]));
        assert_eq!(f.internal_date.map(|d| d.tz_minutes), Some(-420));
        assert_eq!(f.size, Some(39));
        assert_eq!(f.modseq, Some(12_121_231_000));
        assert_eq!(f.body(), Some(&msg[..]));
        // Borrowed straight from the buffer.
        assert!(matches!(f.sections[0].data, Some(Cow::Borrowed(_))));
    }

    #[test]
    fn fetch_header_fields_and_unknown_items() {
        let mut r = b"* 3 FETCH (UID 9 BODYSTRUCTURE (\"text\" \"plain\" (\"charset\" \"us-ascii\") NIL NIL \"7bit\" 5 1 NIL NIL NIL NIL) BODY[HEADER.FIELDS (MESSAGE-ID)] ".to_vec();
        r.extend_from_slice(&lit(b"Message-ID: <x@y>\r\n\r\n"));
        r.extend_from_slice(b" X-UNKNOWN NIL BODY[]<0> \"ab\\\"c\")\r\n");
        let Untagged::Fetch(f) = untagged(&r) else {
            panic!()
        };
        assert_eq!(f.uid, Some(9));
        let h = f.section("BODY[HEADER.FIELDS").expect("header");
        assert_eq!(h, b"Message-ID: <x@y>\r\n\r\n");
        assert_eq!(f.sections[1].origin, Some(0));
        assert_eq!(f.sections[1].data.as_deref(), Some(&b"ab\"c"[..]));
        assert_eq!(f.body(), None, "a partial is not the body");
    }

    #[test]
    fn fetch_flags_only_and_nil_body() {
        let Untagged::Fetch(f) = untagged(b"* 1 FETCH (FLAGS () UID 1 BODY[] NIL)\r\n") else {
            panic!()
        };
        assert_eq!(f.flags, Some(vec![]));
        assert_eq!(f.body(), None);
    }

    #[test]
    fn search_esearch_status_vanished_enabled() {
        assert_eq!(
            untagged(b"* SEARCH 2 5 9 (MODSEQ 917162500)\r\n"),
            Untagged::Search {
                ids: vec![2, 5, 9],
                modseq: Some(917_162_500)
            }
        );
        assert_eq!(
            untagged(b"* SEARCH\r\n"),
            Untagged::Search {
                ids: vec![],
                modseq: None
            }
        );
        let Untagged::ESearch(e) =
            untagged(b"* ESEARCH (TAG \"A282\") UID MIN 2 COUNT 3 ALL 2,10:11\r\n")
        else {
            panic!()
        };
        assert_eq!(e.tag.as_deref(), Some("A282"));
        assert!(e.uid);
        assert_eq!((e.min, e.count), (Some(2), Some(3)));
        assert_eq!(e.all.and_then(|a| a.expand(10)), Some(vec![2, 10, 11]));
        assert_eq!(
            untagged(b"* STATUS \"Entw&APw-rfe\" (MESSAGES 231 UIDNEXT 44292 HIGHESTMODSEQ 7011231777)\r\n"),
            Untagged::MailboxStatus {
                mailbox: b"Entw&APw-rfe".to_vec(),
                items: vec![
                    ("MESSAGES".into(), 231),
                    ("UIDNEXT".into(), 44292),
                    ("HIGHESTMODSEQ".into(), 7_011_231_777)
                ]
            }
        );
        assert_eq!(
            untagged(b"* VANISHED (EARLIER) 41,43:116\r\n"),
            Untagged::Vanished {
                earlier: true,
                uids: SeqSet::parse("41,43:116").expect("set")
            }
        );
        assert_eq!(
            untagged(b"* ENABLED CONDSTORE QRESYNC\r\n"),
            Untagged::Enabled(vec!["CONDSTORE".into(), "QRESYNC".into()])
        );
        assert_eq!(
            untagged(b"* NAMESPACE ((\"\" \".\")) NIL NIL\r\n"),
            Untagged::Namespace {
                personal: vec![(b"".to_vec(), Some('.'))],
                other: vec![],
                shared: vec![],
            }
        );
        // Dovecot's with a shared namespace; Cyrus' with an extension and NIL delimiter.
        assert_eq!(
            untagged(b"* NAMESPACE ((\"\" \"/\")) ((\"shared/\" \"/\")) ((\"Public\" NIL \"X-PARAM\" (\"a\"))(\"#news.\" \".\"))\r\n"),
            Untagged::Namespace {
                personal: vec![(b"".to_vec(), Some('/'))],
                other: vec![(b"shared/".to_vec(), Some('/'))],
                shared: vec![(b"Public".to_vec(), None), (b"#news.".to_vec(), Some('.'))],
            }
        );
        assert!(matches!(
            untagged(b"* BYE Server shutting down.\r\n"),
            Untagged::Status(StatusText {
                status: Status::Bye,
                ..
            })
        ));
    }

    /// A `~` that does not open a literal8 (`~{n}`) is an atom's character: a mailbox
    /// named `~` (found by the astring round trip).
    #[test]
    fn a_tilde_alone_is_an_atom() {
        for (wire, name) in [
            (&b"* LIST () \"/\" ~\r\n"[..], &b"~"[..]),
            (b"* LIST () \"/\" ~x~\r\n", b"~x~"),
            (b"* LIST () \"/\" ~{2}\r\nab\r\n", b"ab"),
        ] {
            match parse_response(wire) {
                Ok(Response::Untagged(Untagged::List(l))) => assert_eq!(l.name, name),
                other => panic!("{}: {other:?}", String::from_utf8_lossy(wire)),
            }
        }
    }

    #[test]
    fn malformed() {
        for r in [
            &b"A1 MAYBE x\r\n"[..],
            b"* 1 FETCH (UID x)\r\n",
            b"* 1 FETCH (BODY[] {10}\r\nshort)\r\n",
            b"* LIST (\\X) \"ab\" foo\r\n",
            b"A1 OK [APPENDUID x y] z\r\n",
            b"* 1 FETCH (INTERNALDATE \"yesterday\")\r\n",
        ] {
            assert!(parse_response(r).is_err(), "{}", String::from_utf8_lossy(r));
        }
    }

    proptest! {
        /// Whatever the encoder writes as an astring, the parser reads back.
        #[test]
        fn astring_round_trip(name in proptest::collection::vec(any::<u8>(), 0..300)) {
            use crate::proto::command::{CommandBuilder, LiteralMode};
            let mut b = CommandBuilder::new("*", "LIST () \"/\"", LiteralMode::NonSync);
            b.sp().astring(&name);
            let wire = b.finish().transcript();
            match parse_response(&wire) {
                Ok(Response::Untagged(Untagged::List(l))) => prop_assert_eq!(l.name, name),
                other => prop_assert!(false, "{:?}", other),
            }
        }

        /// Framing does not depend on how the bytes arrive.
        #[test]
        fn framing_independent_of_chunking(cuts in proptest::collection::vec(0usize..400, 0..12)) {
            use crate::proto::framing::Framer;
            let mut stream = Vec::new();
            stream.extend_from_slice(b"* 1 FETCH (UID 7 BODY[] {20}\r\nline one\r\nline {3}\r\n)\r\n");
            stream.extend_from_slice(b"* LIST () \"/\" {5}\r\na\r\nb\r\n");
            stream.extend_from_slice(b"A1 OK done\r\n");
            let whole = {
                let mut f = Framer::new();
                let mut v = Vec::new();
                let mut at = 0;
                while let Ok(Some(n)) = f.frame(&stream[at..]) {
                    v.push(n);
                    at += n;
                }
                v
            };
            prop_assert_eq!(whole.len(), 3);
            let mut cuts = cuts;
            cuts.push(stream.len());
            cuts.sort_unstable();
            let mut f = Framer::new();
            let (mut got, mut start) = (Vec::new(), 0);
            for cut in cuts {
                let end = cut.min(stream.len()).max(start);
                while let Ok(Some(n)) = f.frame(&stream[start..end]) {
                    got.push(n);
                    start += n;
                }
            }
            prop_assert_eq!(got, whole);
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_response(&b);
        }

        #[test]
        fn never_panics_on_mutated_fetch(pos in 0usize..120, byte in any::<u8>()) {
            let mut r = b"* 12 FETCH (UID 48 FLAGS (\\Seen) INTERNALDATE \"17-Jul-1996 02:44:25 -0700\" BODY[] {5}\r\nhello)\r\n".to_vec();
            if pos < r.len() { r[pos] = byte; }
            let _ = parse_response(&r);
        }
    }
}
