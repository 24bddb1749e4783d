//! Command encoding: bytes out, no sockets.
//!
//! A [`Command`] is a list of [`Part`]s: bytes to send and the points where the
//! client must wait for the server's `+` continuation before going on (the
//! synchronizing literals of RFC 3501). With LITERAL+ (RFC 7888) literals are
//! written `{n+}` and need no wait, so a whole MULTIAPPEND batch is one write.
//! Large literal payloads are borrowed, never copied into the command.

use std::borrow::Cow;
use std::fmt;

/// How literals may be sent, from the server's capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LiteralMode {
    /// `{n}`: wait for `+` before each literal (RFC 3501).
    Sync,
    /// `{n+}` for every literal (LITERAL+).
    NonSync,
    /// `{n+}` for literals up to 4096 bytes, `{n}` above (LITERAL-).
    NonSyncUpTo4096,
}

impl LiteralMode {
    fn non_sync(self, len: usize) -> bool {
        match self {
            LiteralMode::Sync => false,
            LiteralMode::NonSync => true,
            LiteralMode::NonSyncUpTo4096 => len <= 4096,
        }
    }
}

/// A piece of an encoded command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part<'a> {
    /// Bytes to write as they are.
    Bytes(Cow<'a, [u8]>),
    /// Flush and wait for a `+` continuation (or the command's failure).
    AwaitContinuation,
}

/// A command ready for the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command<'a> {
    /// The tag, without the trailing space.
    pub tag: String,
    /// What to send, in order.
    pub parts: Vec<Part<'a>>,
}

impl Command<'_> {
    /// Total number of bytes written for this command.
    pub fn wire_len(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Bytes(b) => b.len(),
                Part::AwaitContinuation => 0,
            })
            .sum()
    }

    /// Number of synchronizing literals (round trips inside the command).
    pub fn sync_points(&self) -> usize {
        self.parts
            .iter()
            .filter(|p| matches!(p, Part::AwaitContinuation))
            .count()
    }

    /// The whole command as one byte string, with `<+>` marking the waits;
    /// for tests and debugging.
    pub fn transcript(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.wire_len());
        for p in &self.parts {
            match p {
                Part::Bytes(b) => out.extend_from_slice(b),
                Part::AwaitContinuation => out.extend_from_slice(b"<+>"),
            }
        }
        out
    }
}

/// A value that cannot be put on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodeError {
    /// The value, lossily decoded.
    pub value: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot encode {:?}: {}", self.value, self.reason)
    }
}

impl std::error::Error for EncodeError {}

/// `ATOM-CHAR`: any CHAR except atom-specials
/// (`(`, `)`, `{`, SP, CTL, `%`, `*`, `"`, `\`, `]`).
pub fn is_atom_char(b: u8) -> bool {
    (0x21..0x7f).contains(&b) && !b"(){%*\"\\]".contains(&b)
}

/// Whether `s` is a valid keyword (flag-keyword = atom) or system flag.
/// System flags are `\` followed by an atom; `\*` is not a message flag.
pub fn is_valid_flag(s: &str) -> bool {
    let b = s.as_bytes();
    let atom = |a: &[u8]| !a.is_empty() && a.iter().all(|&c| is_atom_char(c));
    match b.first() {
        Some(b'\\') => atom(&b[1..]),
        _ => atom(b),
    }
}

/// Builds a command. Text goes into a growing buffer; each literal closes the
/// buffer (with its `{n}` or `{n+}` header), then adds the borrowed payload.
#[derive(Debug)]
pub struct CommandBuilder<'a> {
    tag: String,
    mode: LiteralMode,
    parts: Vec<Part<'a>>,
    cur: Vec<u8>,
}

impl<'a> CommandBuilder<'a> {
    /// Starts `TAG ` + `name`.
    pub fn new(tag: &str, name: &str, mode: LiteralMode) -> Self {
        let mut cur = Vec::with_capacity(128);
        cur.extend_from_slice(tag.as_bytes());
        cur.push(b' ');
        cur.extend_from_slice(name.as_bytes());
        CommandBuilder {
            tag: tag.to_string(),
            mode,
            parts: Vec::new(),
            cur,
        }
    }

    /// Starts a command without a tag (ManageSieve's, RFC 5804): `name` first.
    pub fn untagged(name: &str, mode: LiteralMode) -> Self {
        CommandBuilder {
            tag: String::new(),
            mode,
            parts: Vec::new(),
            cur: name.as_bytes().to_vec(),
        }
    }

    /// Appends a string (never an atom): quoted when it can be one and is short, else a
    /// literal. METADATA values (RFC 5464's `nstring`), ManageSieve's arguments.
    pub fn string(&mut self, s: &'a [u8]) -> &mut Self {
        if s.len() <= 1024 && s.iter().all(|&b| quotable(b)) {
            self.push_quoted(s);
        } else {
            self.literal(s);
        }
        self
    }

    /// Appends raw text (the caller guarantees it is valid here).
    pub fn raw(&mut self, text: &[u8]) -> &mut Self {
        self.cur.extend_from_slice(text);
        self
    }

    /// Appends a space.
    pub fn sp(&mut self) -> &mut Self {
        self.cur.push(b' ');
        self
    }

    /// Appends a number.
    pub fn number(&mut self, n: u64) -> &mut Self {
        self.cur.extend_from_slice(n.to_string().as_bytes());
        self
    }

    /// Appends a quoted string; fails on CR, LF, NUL or 8-bit bytes, which a
    /// quoted string cannot carry.
    pub fn quoted(&mut self, s: &[u8]) -> Result<&mut Self, EncodeError> {
        if !s.iter().all(|&b| quotable(b)) {
            return Err(EncodeError {
                value: String::from_utf8_lossy(s).into_owned(),
                reason: "CR, LF, NUL or 8-bit byte in a quoted string",
            });
        }
        self.push_quoted(s);
        Ok(self)
    }

    fn push_quoted(&mut self, s: &[u8]) {
        self.cur.push(b'"');
        for &b in s {
            if b == b'"' || b == b'\\' {
                self.cur.push(b'\\');
            }
            self.cur.push(b);
        }
        self.cur.push(b'"');
    }

    /// Appends a literal; its payload is borrowed, not copied.
    pub fn literal(&mut self, data: &'a [u8]) -> &mut Self {
        self.literal_cow(Cow::Borrowed(data))
    }

    fn literal_cow(&mut self, data: Cow<'a, [u8]>) -> &mut Self {
        let non_sync = self.mode.non_sync(data.len());
        self.cur.push(b'{');
        self.cur
            .extend_from_slice(data.len().to_string().as_bytes());
        if non_sync {
            self.cur.push(b'+');
        }
        self.cur.extend_from_slice(b"}\r\n");
        let text = std::mem::take(&mut self.cur);
        self.parts.push(Part::Bytes(Cow::Owned(text)));
        if !non_sync {
            self.parts.push(Part::AwaitContinuation);
        }
        if !data.is_empty() {
            self.parts.push(Part::Bytes(data));
        }
        self
    }

    /// Appends a string in the cheapest form that carries it: an atom when
    /// every byte is an ATOM-CHAR (or `]`, which `astring` allows), a quoted
    /// string when it has no CR, LF, NUL or 8-bit byte and is short, else a
    /// literal.
    pub fn astring(&mut self, s: &'a [u8]) -> &mut Self {
        if !s.is_empty() && s.iter().all(|&b| is_atom_char(b) || b == b']') {
            self.cur.extend_from_slice(s);
        } else if s.len() <= 1024 && s.iter().all(|&b| quotable(b)) {
            self.push_quoted(s);
        } else {
            self.literal(s);
        }
        self
    }

    /// Like [`astring`](Self::astring) for an owned value (copied in).
    pub fn astring_owned(&mut self, s: Vec<u8>) -> &mut Self {
        if !s.is_empty() && s.iter().all(|&b| is_atom_char(b) || b == b']') {
            self.cur.extend_from_slice(&s);
        } else if s.len() <= 1024 && s.iter().all(|&b| quotable(b)) {
            self.push_quoted(&s);
        } else {
            self.literal_cow(Cow::Owned(s));
        }
        self
    }

    /// Appends a mailbox name: a Unicode name is encoded to modified UTF-7
    /// first; `INBOX` in any case is sent as `INBOX`.
    pub fn mailbox(&mut self, wire_name: &str) -> &mut Self {
        if wire_name.eq_ignore_ascii_case("INBOX") {
            self.cur.extend_from_slice(b"INBOX");
            self
        } else {
            self.astring_owned(super::mutf7::encode(wire_name).into_bytes())
        }
    }

    /// Appends a parenthesized flag list; fails on a flag that is not an atom.
    pub fn flag_list<S: AsRef<str>>(&mut self, flags: &[S]) -> Result<&mut Self, EncodeError> {
        self.cur.push(b'(');
        for (i, f) in flags.iter().enumerate() {
            let f = f.as_ref();
            if !is_valid_flag(f) {
                return Err(EncodeError {
                    value: f.to_string(),
                    reason: "not a valid flag or keyword (must be an IMAP atom)",
                });
            }
            if i > 0 {
                self.cur.push(b' ');
            }
            self.cur.extend_from_slice(f.as_bytes());
        }
        self.cur.push(b')');
        Ok(self)
    }

    /// Ends the command with CRLF.
    pub fn finish(mut self) -> Command<'a> {
        self.cur.extend_from_slice(b"\r\n");
        let text = std::mem::take(&mut self.cur);
        self.parts.push(Part::Bytes(Cow::Owned(text)));
        Command {
            tag: self.tag,
            parts: self.parts,
        }
    }
}

fn quotable(b: u8) -> bool {
    (0x01..0x80).contains(&b) && b != b'\r' && b != b'\n'
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(c: &Command<'_>) -> String {
        String::from_utf8(c.transcript()).expect("utf8")
    }

    /// ManageSieve's form: no tag, strings quoted or as `{n+}` literals, never atoms.
    #[test]
    fn untagged_strings() {
        let script = b"require \"fileinto\";\r\nkeep;\r\n";
        let mut b = CommandBuilder::untagged("PUTSCRIPT", LiteralMode::NonSync);
        b.sp().string(b"rules").sp().string(script);
        let c = b.finish();
        assert_eq!(
            text(&c),
            "PUTSCRIPT \"rules\" {28+}\r\nrequire \"fileinto\";\r\nkeep;\r\n\r\n"
        );
        let mut b = CommandBuilder::untagged("SETACTIVE", LiteralMode::NonSync);
        b.sp().string(b"a \"b\" \\c");
        assert_eq!(text(&b.finish()), "SETACTIVE \"a \\\"b\\\" \\\\c\"\r\n");
    }

    #[test]
    fn login_quoting() {
        let mut b = CommandBuilder::new("A1", "LOGIN", LiteralMode::Sync);
        b.sp()
            .astring(b"alice@example.org")
            .sp()
            .astring(b"pa ss\"w\\d");
        assert_eq!(
            text(&b.finish()),
            "A1 LOGIN alice@example.org \"pa ss\\\"w\\\\d\"\r\n"
        );
    }

    #[test]
    fn empty_and_8bit_strings() {
        let mut b = CommandBuilder::new("A2", "LOGIN", LiteralMode::NonSync);
        b.sp().astring(b"").sp().astring("p\u{e4}ss".as_bytes());
        assert_eq!(text(&b.finish()), "A2 LOGIN \"\" {5+}\r\np\u{e4}ss\r\n");
    }

    #[test]
    fn sync_literal_waits() {
        let mut b = CommandBuilder::new("A3", "LOGIN", LiteralMode::Sync);
        b.sp().astring(b"u").sp().astring(b"line\r\nbreak");
        let c = b.finish();
        assert_eq!(c.sync_points(), 1);
        assert_eq!(text(&c), "A3 LOGIN u {11}\r\n<+>line\r\nbreak\r\n");
    }

    #[test]
    fn literal_minus_threshold() {
        let big = vec![b'x'; 4097];
        let mut b = CommandBuilder::new("A4", "APPEND", LiteralMode::NonSyncUpTo4096);
        b.sp()
            .mailbox("INBOX")
            .sp()
            .literal(b"abc")
            .sp()
            .literal(&big);
        let c = b.finish();
        assert_eq!(c.sync_points(), 1);
        let t = c.transcript();
        assert!(t.starts_with(b"A4 APPEND INBOX {3+}\r\nabc {4097}\r\n<+>xxx"));
    }

    #[test]
    fn multiappend_shape() {
        let mut b = CommandBuilder::new("A5", "APPEND", LiteralMode::NonSync);
        b.sp().mailbox("Entw\u{fc}rfe");
        b.sp().flag_list(&["\\Seen", "$Forwarded"]).expect("flags");
        b.sp().quoted(b"17-Jul-1996 02:44:25 -0700").expect("date");
        b.sp().literal(b"Subject: a\r\n\r\nA\r\n");
        b.sp().flag_list::<&str>(&[]).expect("flags");
        b.sp().literal(b"B");
        let c = b.finish();
        assert_eq!(c.sync_points(), 0);
        assert_eq!(
            text(&c),
            "A5 APPEND Entw&APw-rfe (\\Seen $Forwarded) \"17-Jul-1996 02:44:25 -0700\" {17+}\r\n\
             Subject: a\r\n\r\nA\r\n () {1+}\r\nB\r\n"
        );
        // The payload is borrowed, not copied.
        assert!(c
            .parts
            .iter()
            .any(|p| matches!(p, Part::Bytes(Cow::Borrowed(b"B")))));
    }

    #[test]
    fn mailbox_forms() {
        let mut b = CommandBuilder::new("A6", "SELECT", LiteralMode::Sync);
        b.sp().mailbox("inbox");
        assert_eq!(text(&b.finish()), "A6 SELECT INBOX\r\n");
        let mut b = CommandBuilder::new("A7", "CREATE", LiteralMode::Sync);
        b.sp().mailbox("Tom & Jerry/Caf\u{e9}");
        assert_eq!(text(&b.finish()), "A7 CREATE \"Tom &- Jerry/Caf&AOk-\"\r\n");
    }

    #[test]
    fn bad_flags_and_quoted() {
        let mut b = CommandBuilder::new("A8", "APPEND", LiteralMode::Sync);
        assert!(b.flag_list(&["has space"]).is_err());
        assert!(b.flag_list(&["\\"]).is_err());
        assert!(b.flag_list(&["a]"]).is_err());
        assert!(b.quoted(b"a\r\nb").is_err());
        assert!(is_valid_flag("\\Seen"));
        assert!(is_valid_flag("$Label1"));
        assert!(!is_valid_flag(""));
    }
}
