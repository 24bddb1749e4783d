//! LIST and LSUB, plain or extended: LIST-EXTENDED (RFC 5258), LIST-STATUS (RFC 5819) and
//! RFC 6154's SPECIAL-USE options, and the one path every LIST and LSUB takes.
//!
//! imap-codec (2.0.0-alpha.10) parses no selection options, no patterns in parentheses
//! and no RETURN options: [`split`], pure bytes, takes them out of a LIST imap-codec
//! refused, and [`command`] has imap-codec parse the reference with each pattern as a
//! plain LIST and the STATUS items as a plain STATUS. [`select`] picks the mailboxes any
//! LIST or LSUB answers, plain or not, and [`line`] writes each (raw when it carries
//! CHILDINFO, which imap-codec does not encode).

use super::session::{mailbox_name, status, wire_mailbox, Kind, Out};
use super::view::{matches, View, ViewBox, DELIMITER};
use imap_codec::imap_types::command::CommandBody;
use imap_codec::imap_types::core::{QuotedChar, Tag};
use imap_codec::imap_types::flag::FlagNameAttribute;
use imap_codec::imap_types::mailbox::{ListMailbox, Mailbox};
use imap_codec::imap_types::response::{Data, Status};
use imap_codec::imap_types::status::StatusDataItemName;

/// What a LIST or LSUB asks for, besides its patterns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ask {
    /// LSUB: the subscribed mailboxes, and the `\Noselect` levels above them (docs).
    pub lsub: bool,
    /// Selection SUBSCRIBED: only subscribed mailboxes, each `\Subscribed`.
    pub subscribed: bool,
    /// Selection SPECIAL-USE (RFC 6154): only mailboxes with a special-use attribute.
    pub special_use: bool,
    /// Selection RECURSIVEMATCH (with SUBSCRIBED): a mailbox the patterns match with a
    /// subscribed descendant they do not match gets `("CHILDINFO" ("SUBSCRIBED"))`, and is
    /// listed for it even when it is not subscribed itself (as Dovecot does).
    pub recursive: bool,
    /// RETURN (SUBSCRIBED): `\Subscribed` on the subscribed mailboxes.
    pub return_subscribed: bool,
    /// A LIST-EXTENDED LIST ([`split`]): `LIST () "" ""` lists nothing (as Dovecot's),
    /// no delimiter.
    pub extended: bool,
}

/// A LIST or LSUB, plain or extended, as the session answers it.
pub struct ListCommand {
    pub tag: Tag<'static>,
    pub reference: Mailbox<'static>,
    /// At least one.
    pub patterns: Vec<ListMailbox<'static>>,
    pub ask: Ask,
    /// RETURN (STATUS (...)): a `* STATUS` line after each selectable mailbox's.
    pub status: Option<Vec<StatusDataItemName>>,
}

impl ListCommand {
    /// A LIST or LSUB imap-codec parsed itself.
    pub fn plain(
        tag: Tag<'static>,
        reference: Mailbox<'static>,
        pattern: ListMailbox<'static>,
        lsub: bool,
    ) -> ListCommand {
        let ask = Ask {
            lsub,
            ..Ask::default()
        };
        ListCommand {
            tag,
            reference,
            patterns: vec![pattern],
            ask,
            status: None,
        }
    }
}

/// What [`split`] makes of an extended LIST: its options, one plain `tag LIST reference
/// pattern` per pattern and the STATUS items as `tag STATUS INBOX (items)`, for
/// imap-codec to parse; or the command's tag and why it is refused.
pub type Split = Result<Parts, (String, &'static str)>;

/// See [`Split`].
#[derive(Debug, PartialEq, Eq)]
pub struct Parts {
    pub ask: Ask,
    pub plain: Vec<Vec<u8>>,
    pub status: Option<Vec<u8>>,
}

const MALFORMED: &str = "that LIST does not parse: LIST [(options)] reference \
    pattern-or-(patterns) [RETURN (options)], no literal in the options";
const SELECT_UNKNOWN: &str =
    "LIST selection options are SUBSCRIBED, REMOTE, RECURSIVEMATCH and SPECIAL-USE";
const RETURN_UNKNOWN: &str =
    "LIST RETURN options are SUBSCRIBED, CHILDREN, SPECIAL-USE and STATUS (items)";
const RECURSIVE_ALONE: &str = "RECURSIVEMATCH needs SUBSCRIBED or SPECIAL-USE beside it";
const TOO_MANY: &str = "too many LIST patterns or options (100 at most)";
/// The most patterns, and options of a list, one LIST takes.
const MAX_ITEMS: usize = 100;

/// `command` (a whole command as the client sent it, literals included) when it is a
/// `LIST` imap-codec refused: its options and its plain parts (see [`Split`]); `Err`
/// (with the command's tag) when it does not parse or asks what the view does not
/// answer; `None` when it is not a LIST.
pub fn split(command: &[u8]) -> Option<Split> {
    let sp = command.iter().position(|&b| b == b' ')?;
    let (tag, rest) = (&command[..sp], &command[sp + 1..]);
    let args = super::esearch::strip_word(rest, b"LIST ")?;
    let parsed = parse(&mut Cursor { b: args, i: 0 });
    let tag_text = || String::from_utf8_lossy(tag).into_owned();
    let (ask, reference, patterns, items) = match parsed {
        Ok(x) => x,
        Err(text) => return Some(Err((tag_text(), text))),
    };
    let line = |parts: &[&[u8]]| {
        let mut v = tag.to_vec();
        parts.iter().for_each(|p| v.extend_from_slice(p));
        v.extend_from_slice(b"\r\n");
        v
    };
    let plain = (patterns.iter())
        .map(|p| line(&[b" LIST ", &reference, b" ", p]))
        .collect();
    let status = items.map(|i| line(&[b" STATUS INBOX (", &i, b")"]));
    Some(Ok(Parts { ask, plain, status }))
}

/// What [`parse`] reads: the options, the reference, the patterns (each as sent, a
/// literal as `{n}\r\n...`) and the STATUS items as sent.
type Parsed = (Ask, Vec<u8>, Vec<Vec<u8>>, Option<Vec<u8>>);

/// Reads `[(options)] reference pattern-or-(patterns) [RETURN (options)]`, to the end.
fn parse(c: &mut Cursor<'_>) -> Result<Parsed, &'static str> {
    let mut ask = Ask {
        extended: true,
        ..Ask::default()
    };
    if c.eat(b'(') {
        for o in c.words()? {
            let flag = match o.to_ascii_uppercase().as_slice() {
                b"SUBSCRIBED" => &mut ask.subscribed,
                b"RECURSIVEMATCH" => &mut ask.recursive,
                b"SPECIAL-USE" => &mut ask.special_use,
                b"REMOTE" => continue,
                _ => return Err(SELECT_UNKNOWN),
            };
            *flag = true;
        }
        c.need(b' ')?;
    }
    if ask.recursive && !ask.subscribed && !ask.special_use {
        return Err(RECURSIVE_ALONE);
    }
    let reference = c.astring()?;
    c.need(b' ')?;
    let mut patterns = Vec::new();
    match c.eat(b'(') {
        true => loop {
            patterns.push(c.astring()?);
            if patterns.len() > MAX_ITEMS {
                return Err(TOO_MANY);
            }
            if c.eat(b')') {
                break;
            }
            c.need(b' ')?;
        },
        false => patterns.push(c.astring()?),
    }
    let mut items = None;
    if c.eat(b' ') {
        if !c.word().eq_ignore_ascii_case(b"RETURN") {
            return Err(MALFORMED);
        }
        c.need(b' ')?;
        c.need(b'(')?;
        items = return_options(c, &mut ask)?;
    }
    c.eat(b'\r');
    c.eat(b'\n');
    match c.i == c.b.len() {
        true => Ok((ask, reference, patterns, items)),
        false => Err(MALFORMED),
    }
}

/// Reads the RETURN options after their `(`, to their `)`; the STATUS items as sent.
fn return_options(c: &mut Cursor<'_>, ask: &mut Ask) -> Result<Option<Vec<u8>>, &'static str> {
    let mut items = None;
    for n in 0.. {
        if n > MAX_ITEMS {
            return Err(TOO_MANY);
        }
        if c.eat(b')') {
            break;
        }
        if n > 0 {
            c.need(b' ')?;
        }
        match c.word().to_ascii_uppercase().as_slice() {
            b"SUBSCRIBED" => ask.return_subscribed = true,
            // Always given (docs/imap-view.md).
            b"CHILDREN" | b"SPECIAL-USE" => {}
            b"STATUS" => {
                c.need(b' ')?;
                c.need(b'(')?;
                // RFC 5819: at least one item.
                let words = c.words()?;
                if words.is_empty() {
                    return Err(MALFORMED);
                }
                items = Some(words.join(&b' '));
            }
            _ => return Err(RETURN_UNKNOWN),
        }
    }
    Ok(items)
}

/// A reading position in a command's bytes.
struct Cursor<'b> {
    b: &'b [u8],
    i: usize,
}

impl<'b> Cursor<'b> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Takes `c` if it comes next.
    fn eat(&mut self, c: u8) -> bool {
        let there = self.peek() == Some(c);
        self.i += usize::from(there);
        there
    }

    fn need(&mut self, c: u8) -> Result<(), &'static str> {
        self.eat(c).then_some(()).ok_or(MALFORMED)
    }

    /// The bytes up to a space, parenthesis, quote, brace or line end (maybe none).
    fn word(&mut self) -> &'b [u8] {
        let start = self.i;
        while self
            .peek()
            .is_some_and(|c| !b" ()\"{\r\n".contains(&c) && c != 0)
        {
            self.i += 1;
        }
        &self.b[start..self.i]
    }

    /// The words of a parenthesized list, its `(` taken, to its `)`: `()` is none.
    fn words(&mut self) -> Result<Vec<&'b [u8]>, &'static str> {
        let mut out = Vec::new();
        while !self.eat(b')') {
            if !out.is_empty() {
                self.need(b' ')?;
            }
            let w = self.word();
            if w.is_empty() {
                return Err(MALFORMED);
            }
            if out.len() == MAX_ITEMS {
                return Err(TOO_MANY);
            }
            out.push(w);
        }
        Ok(out)
    }

    /// An atom (list wildcards included), a quoted string (escapes kept) or a literal
    /// (as `{n}\r\n` and its bytes), as imap-codec is to read it.
    fn astring(&mut self) -> Result<Vec<u8>, &'static str> {
        let start = self.i;
        match self.peek() {
            Some(b'"') => {
                self.i += 1;
                loop {
                    match self.peek().ok_or(MALFORMED)? {
                        b'\\' => self.i += 2,
                        b'"' => break,
                        b'\r' | b'\n' => return Err(MALFORMED),
                        _ => self.i += 1,
                    }
                }
                self.i += 1;
                Ok(self.b[start..self.i].to_vec())
            }
            Some(b'{') => self.literal(),
            _ => match self.word() {
                [] => Err(MALFORMED),
                w => Ok(w.to_vec()),
            },
        }
    }

    /// A literal, `{n}` or `{n+}` and a line end (LF alone too) then n bytes, its `{` next.
    fn literal(&mut self) -> Result<Vec<u8>, &'static str> {
        self.i += 1;
        let start = self.i;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.i += 1;
        }
        let digits = std::str::from_utf8(&self.b[start..self.i]).map_err(|_| MALFORMED)?;
        let n: usize = digits.parse().map_err(|_| MALFORMED)?;
        self.eat(b'+');
        self.need(b'}')?;
        self.eat(b'\r');
        self.need(b'\n')?;
        let data = (self.b.get(self.i..))
            .and_then(|rest| rest.get(..n))
            .ok_or(MALFORMED)?;
        self.i += n;
        let mut out = format!("{{{n}}}\r\n").into_bytes();
        out.extend_from_slice(data);
        Ok(out)
    }
}

/// The LIST command [`split`] split, its parts parsed by imap-codec; `Err`: the `BAD` it
/// gets.
pub fn command(split: Split) -> Result<ListCommand, Status<'static>> {
    let parts = split
        .map_err(|(tag, text)| status(Kind::Bad, Tag::try_from(tag).ok(), None, text.into()))?;
    let mut listed = None;
    let mut patterns = Vec::new();
    for plain in &parts.plain {
        let cmd = decode(plain)?;
        let CommandBody::List {
            reference,
            mailbox_wildcard,
        } = cmd.body
        else {
            return Err(super::bad_command(plain, MALFORMED));
        };
        patterns.push(mailbox_wildcard);
        listed = Some((cmd.tag, reference));
    }
    let Some((tag, reference)) = listed else {
        return Err(super::bad_command(b"", MALFORMED));
    };
    let status = match &parts.status {
        Some(s) => match decode(s)?.body {
            CommandBody::Status { item_names, .. } => Some(item_names.into_owned()),
            _ => return Err(super::bad_command(s, MALFORMED)),
        },
        None => None,
    };
    Ok(ListCommand {
        tag,
        reference,
        patterns,
        ask: parts.ask,
        status,
    })
}

/// `plain` parsed by imap-codec, whole.
fn decode(
    plain: &[u8],
) -> Result<imap_codec::imap_types::command::Command<'static>, Status<'static>> {
    use imap_codec::decode::Decoder;
    match imap_codec::CommandCodec::default().decode(plain) {
        Ok(([], cmd)) => Ok(bounded_static::IntoBoundedStatic::into_static(cmd)),
        _ => Err(super::bad_command(plain, "that command does not parse")),
    }
}

/// A mailbox a LIST or LSUB answers with.
pub struct Listed {
    pub b: ViewBox,
    pub items: Vec<FlagNameAttribute<'static>>,
    /// RECURSIVEMATCH's `("CHILDINFO" ("SUBSCRIBED"))`.
    pub childinfo: bool,
    /// Gets RETURN (STATUS ...)'s line: selectable, and chosen by the selection options
    /// (not listed for CHILDINFO alone: Dovecot gives those none either).
    pub status: bool,
}

/// The mailboxes of `view` that `c` lists, in the view's order, each once; `None`: a
/// name or pattern is not modified UTF-7.
pub fn select(view: &View, c: &ListCommand) -> Option<Vec<Listed>> {
    let reference = mailbox_name(&c.reference)?;
    let raw: Vec<String> = c.patterns.iter().map(list_pattern).collect::<Option<_>>()?;
    let patterns: Vec<String> = raw.iter().map(|p| format!("{reference}{p}")).collect();
    let ask = c.ask;
    if !ask.lsub && !ask.extended && raw[..] == [""] {
        // `LIST "" ""`: the delimiter (RFC 3501 6.3.8).
        let root = ViewBox {
            name: String::new(),
            place: None,
            special: None,
            has_children: false,
            subscribed: false,
        };
        let items = vec![FlagNameAttribute::Noselect];
        return Some(vec![Listed {
            b: root,
            items,
            childinfo: false,
            status: false,
        }]);
    }
    let hit = |name: &str| {
        (patterns.iter()).any(|p| {
            matches(p, name) || (name == "INBOX" && matches(&p.to_ascii_uppercase(), "INBOX"))
        })
    };
    // A folder's subscription: the levels and mailboxes of the backups LSUB gives are
    // not (see docs/imap-view.md, Subscriptions).
    let subscribed = |b: &ViewBox| b.subscribed && b.place.is_some();
    let chosen = |b: &ViewBox| match ask.lsub {
        true => b.subscribed,
        false => (!ask.subscribed || subscribed(b)) && (!ask.special_use || b.special.is_some()),
    };
    let mut out = Vec::new();
    for b in view.boxes.iter().filter(|b| hit(&b.name)) {
        let childinfo = ask.recursive
            && ask.subscribed
            && below(view, &b.name).any(|d| subscribed(d) && !hit(&d.name));
        if !chosen(b) && !childinfo {
            continue;
        }
        let mut items = attributes(b);
        if !ask.lsub && (ask.subscribed || ask.return_subscribed) && subscribed(b) {
            items.extend(atom("Subscribed"));
        }
        out.push(Listed {
            status: chosen(b) && b.place.is_some(),
            b: b.clone(),
            items,
            childinfo,
        });
    }
    Some(out)
}

/// The mailboxes below `name` in `view` (sorted by name: one run of them).
fn below<'v>(view: &'v View, name: &str) -> impl Iterator<Item = &'v ViewBox> {
    let prefix = format!("{name}{DELIMITER}");
    let start = view.boxes.partition_point(|b| b.name < prefix);
    (view.boxes[start..].iter()).take_while(move |b| b.name.starts_with(&prefix))
}

/// The answer line of `l` (LSUB's when `lsub`).
pub fn line(l: Listed, lsub: bool) -> Out {
    let delimiter = QuotedChar::try_from(DELIMITER).ok();
    let (items, mailbox) = (l.items, wire_mailbox(&l.b.name));
    let d = match lsub {
        true => Data::Lsub {
            items,
            delimiter,
            mailbox,
        },
        false => Data::List {
            items,
            delimiter,
            mailbox,
        },
    };
    if !l.childinfo {
        return Out::Data(d);
    }
    use imap_codec::encode::Encoder;
    let response = imap_codec::imap_types::response::Response::Data(d);
    let mut bytes = imap_codec::ResponseCodec::default()
        .encode(&response)
        .dump();
    if bytes.ends_with(b"\r\n") {
        bytes.truncate(bytes.len() - 2);
    }
    bytes.extend_from_slice(b" (\"CHILDINFO\" (\"SUBSCRIBED\"))\r\n");
    Out::Raw(bytes)
}

/// The LIST attributes of a mailbox (`\Subscribed` aside).
fn attributes(b: &ViewBox) -> Vec<FlagNameAttribute<'static>> {
    let mut items = Vec::new();
    if b.place.is_none() {
        items.push(FlagNameAttribute::Noselect);
    }
    items.extend(atom(match b.has_children {
        true => "HasChildren",
        false => "HasNoChildren",
    }));
    if let Some(s) = b.special {
        items.extend(atom(s.trim_start_matches('\\')));
    }
    items
}

/// The attribute `\name`.
fn atom(name: &str) -> Option<FlagNameAttribute<'static>> {
    imap_codec::imap_types::core::Atom::try_from(name.to_string())
        .ok()
        .map(FlagNameAttribute::from)
}

fn list_pattern(p: &ListMailbox<'_>) -> Option<String> {
    let bytes: &[u8] = match p {
        ListMailbox::Token(t) => t.as_ref(),
        ListMailbox::String(s) => s.as_ref(),
    };
    mailvault_imap::proto::mutf7::decode(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(command: &[u8]) -> Parts {
        split(command).expect("a LIST").expect("taken")
    }

    fn refused(command: &[u8]) -> &'static str {
        let (tag, text) = split(command).expect("a LIST").expect_err("refused");
        assert_eq!(
            tag.as_bytes(),
            command.split(|&b| b == b' ').next().unwrap()
        );
        text
    }

    #[test]
    fn options_are_taken_out_and_each_pattern_is_a_plain_list() {
        let p = parts(b"a1 list (subscribed RecursiveMatch remote) \"\" (\"INBOX\" Sent* %) return (children STATUS (MESSAGES uidnext) subscribed special-use)\r\n");
        let ask = Ask {
            subscribed: true,
            recursive: true,
            return_subscribed: true,
            extended: true,
            ..Ask::default()
        };
        assert_eq!(p.ask, ask);
        assert_eq!(
            p.plain,
            [
                &b"a1 LIST \"\" \"INBOX\"\r\n"[..],
                b"a1 LIST \"\" Sent*\r\n",
                b"a1 LIST \"\" %\r\n"
            ]
        );
        assert_eq!(
            p.status.as_deref(),
            Some(&b"a1 STATUS INBOX (MESSAGES uidnext)\r\n"[..])
        );
        // Empty lists; SPECIAL-USE as a selection option; LF alone.
        let p = parts(b"t LIST (SPECIAL-USE) \"\" * RETURN ()\n");
        assert!(p.ask.special_use && !p.ask.subscribed && p.status.is_none());
        assert_eq!(p.plain, [b"t LIST \"\" *\r\n"]);
        let p = parts(b"t LIST () \"\" \"*\"");
        let extended = Ask {
            extended: true,
            ..Ask::default()
        };
        assert_eq!(p.ask, extended);
    }

    #[test]
    fn quoted_strings_keep_their_escapes_and_literals_are_read_whole() {
        let p = parts(
            b"t LIST (SUBSCRIBED) \"a \\\"(\\\\\" (\"x) (y\" {3+}\r\n(%)) RETURN (SUBSCRIBED)\r\n",
        );
        assert_eq!(
            p.plain,
            [
                &b"t LIST \"a \\\"(\\\\\" \"x) (y\"\r\n"[..],
                b"t LIST \"a \\\"(\\\\\" {3}\r\n(%)\r\n"
            ]
        );
        assert!(p.ask.return_subscribed);
        // A literal that promises more than there is, or no number.
        assert_eq!(
            refused(b"t LIST (SUBSCRIBED) \"\" {30}\r\nab\r\n"),
            MALFORMED
        );
        assert_eq!(refused(b"t LIST (SUBSCRIBED) \"\" {}\r\nab\r\n"), MALFORMED);
        assert_eq!(
            refused(b"t LIST (SUBSCRIBED) \"\" {99999999999999999999}\r\n"),
            MALFORMED
        );
        // A literal among the options.
        assert_eq!(
            refused(b"t LIST ({10}\r\nSUBSCRIBED) \"\" *\r\n"),
            MALFORMED
        );
    }

    #[test]
    fn unknown_options_and_a_lone_recursivematch_are_refused() {
        assert_eq!(refused(b"t LIST (FOO) \"\" *\r\n"), SELECT_UNKNOWN);
        assert_eq!(refused(b"t LIST \"\" * RETURN (FOO)\r\n"), RETURN_UNKNOWN);
        assert_eq!(
            refused(b"t LIST \"\" * RETURN (MYRIGHTS)\r\n"),
            RETURN_UNKNOWN
        );
        assert_eq!(
            refused(b"t LIST (RECURSIVEMATCH) \"\" *\r\n"),
            RECURSIVE_ALONE
        );
        assert_eq!(
            refused(b"t LIST (REMOTE RECURSIVEMATCH) \"\" *\r\n"),
            RECURSIVE_ALONE
        );
        assert!(split(b"t LIST (SPECIAL-USE RECURSIVEMATCH) \"\" *\r\n")
            .unwrap()
            .is_ok());
        assert!(split(b"t LSUB (SUBSCRIBED) \"\" *\r\n").is_none());
        assert!(split(b"t SEARCH RETURN () ALL\r\n").is_none());
        assert!(split(b"LIST").is_none());
    }

    #[test]
    fn hostile_input_is_refused_without_a_panic() {
        for bad in [
            &b"t LIST (SUBSCRIBED \"\" *\r\n"[..],
            b"t LIST SUBSCRIBED) \"\" *\r\n",
            b"t LIST (SUBSCRIBED) \"\" (\"a\" \"b\"\r\n",
            b"t LIST (SUBSCRIBED) \"\" ()\r\n",
            b"t LIST (SUBSCRIBED) \"\" (\"a\"  \"b\")\r\n",
            b"t LIST (SUBSCRIBED) \"\" \"unterminated\r\n",
            b"t LIST (SUBSCRIBED) \"\" \"ends in an escape\\",
            b"t LIST \"\" * RETURN (STATUS (MESSAGES)\r\n",
            b"t LIST \"\" * RETURN (STATUS MESSAGES)\r\n",
            b"t LIST \"\" * RETURN STATUS\r\n",
            b"t LIST \"\" * SOMETHING (x)\r\n",
            b"t LIST \"\" * RETURN ()) \r\n",
            b"t LIST (SUBSCRIBED)\r\n",
            b"t LIST ((SUBSCRIBED)) \"\" *\r\n",
            b"t LIST \xff\xfe (\xc3\x28) RETURN (\xff)\r\n",
            b"t LIST ",
        ] {
            let (_, text) = split(bad).expect("a LIST").expect_err("refused");
            assert!(!text.is_empty());
        }
        // Non-UTF-8 names pass the split: imap-codec refuses them.
        let p = parts(b"t LIST (SUBSCRIBED) \xff \xfe\r\n");
        assert!(command(Ok(p)).is_err());
        // Huge lists of patterns or options.
        let many = |open: &str, item: &str, close: &str| {
            let items = vec![item; 100_000].join(" ");
            format!("{open}{items}{close}").into_bytes()
        };
        for c in [
            many("t LIST \"\" (", "\"a\"", ")\r\n"),
            many("t LIST (", "REMOTE", ") \"\" *\r\n"),
            many("t LIST \"\" * RETURN (", "CHILDREN", ")\r\n"),
            many("t LIST \"\" * RETURN (STATUS (", "MESSAGES", "))\r\n"),
        ] {
            assert_eq!(refused(&c), TOO_MANY);
        }
        let deep = format!("t LIST \"\" * RETURN ({}\r\n", "(".repeat(100_000));
        assert_eq!(refused(deep.as_bytes()), RETURN_UNKNOWN);
        // Every prefix of a command, and every byte of it replaced by one that means
        // something to the split: refused or taken, never a panic.
        let full = b"t LIST (SUBSCRIBED RECURSIVEMATCH) \"a\\\"b\" (\"x\" {2+}\r\nyz %) RETURN (STATUS (MESSAGES) CHILDREN)\r\n";
        for n in 0..=full.len() {
            if let Some(Ok(p)) = split(&full[..n]) {
                let _ = command(Ok(p));
            }
            for b in *b"(){}\"\\ \r\n+0\xff" {
                let mut c = full.to_vec();
                if let Some(x) = c.get_mut(n) {
                    *x = b;
                }
                if let Some(Ok(p)) = split(&c) {
                    let _ = command(Ok(p));
                }
            }
        }
        assert!(split(full).unwrap().is_ok());
    }

    #[test]
    fn command_has_imap_codec_parse_each_part() {
        let c = command(
            split(
                b"t LIST (SUBSCRIBED) \"\" (INBOX \"Sent\") RETURN (STATUS (MESSAGES UNSEEN))\r\n",
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(c.tag.inner(), "t");
        assert_eq!(c.patterns.len(), 2);
        assert_eq!(
            c.status.as_deref(),
            Some(&[StatusDataItemName::Messages, StatusDataItemName::Unseen][..])
        );
        // STATUS items imap-codec does not know, or none.
        let c = command(split(b"t LIST \"\" * RETURN (STATUS (NOPE))\r\n").unwrap());
        assert!(c.is_err());
        assert_eq!(refused(b"t LIST \"\" * RETURN (STATUS ())\r\n"), MALFORMED);
    }

    fn folder(name: &str, subscribed: bool, special: Option<&'static str>) -> ViewBox {
        ViewBox {
            name: name.into(),
            place: Some(super::super::view::Place::Deleted),
            special,
            has_children: false,
            subscribed,
        }
    }

    /// INBOX, Archive (\Archive) and Archive/2023, Sent (\Sent), Work/Projects below a
    /// level that is no folder; INBOX, Archive/2023, Sent and Work/Projects subscribed.
    fn view() -> View {
        let mut boxes = vec![
            folder("Archive", false, Some("\\Archive")),
            folder("Archive/2023", true, None),
            folder("INBOX", true, None),
            folder("Sent", true, Some("\\Sent")),
            ViewBox {
                place: None,
                ..folder("Work", true, None)
            },
            folder("Work/Projects", true, None),
        ];
        boxes[0].has_children = true;
        boxes[4].has_children = true;
        View {
            account: "a".into(),
            boxes,
            history: Vec::new(),
        }
    }

    /// What `cmd` lists: each mailbox with its attributes, ` CHILDINFO` after them.
    fn listed(cmd: &[u8]) -> Vec<String> {
        let c = match split(cmd) {
            Some(s) => command(s).unwrap(),
            None => panic!("not extended"),
        };
        (select(&view(), &c).unwrap().into_iter())
            .map(|l| {
                let items: Vec<String> = l.items.iter().map(|i| i.to_string()).collect();
                let info = if l.childinfo { " CHILDINFO" } else { "" };
                format!("{} ({}){info}", l.b.name, items.join(" "))
            })
            .collect()
    }

    #[test]
    fn selection_and_return_options_choose_and_mark_the_mailboxes() {
        assert_eq!(
            listed(b"t LIST (SUBSCRIBED) \"\" *\r\n"),
            [
                "Archive/2023 (\\HasNoChildren \\Subscribed)",
                "INBOX (\\HasNoChildren \\Subscribed)",
                "Sent (\\HasNoChildren \\Sent \\Subscribed)",
                "Work/Projects (\\HasNoChildren \\Subscribed)",
            ]
        );
        assert_eq!(
            listed(b"t LIST (SUBSCRIBED RECURSIVEMATCH) \"\" %\r\n"),
            [
                "Archive (\\HasChildren \\Archive) CHILDINFO",
                "INBOX (\\HasNoChildren \\Subscribed)",
                "Sent (\\HasNoChildren \\Sent \\Subscribed)",
                "Work (\\Noselect \\HasChildren) CHILDINFO",
            ]
        );
        // Children the patterns match themselves give no CHILDINFO.
        assert_eq!(
            listed(b"t LIST (SUBSCRIBED RECURSIVEMATCH) \"\" (Archive*)\r\n"),
            ["Archive/2023 (\\HasNoChildren \\Subscribed)"]
        );
        assert_eq!(
            listed(b"t LIST (SPECIAL-USE) \"\" *\r\n"),
            [
                "Archive (\\HasChildren \\Archive)",
                "Sent (\\HasNoChildren \\Sent)"
            ]
        );
        assert_eq!(
            listed(b"t LIST \"\" (INBOX Arch* INBOX) RETURN (SUBSCRIBED)\r\n"),
            [
                "Archive (\\HasChildren \\Archive)",
                "Archive/2023 (\\HasNoChildren \\Subscribed)",
                "INBOX (\\HasNoChildren \\Subscribed)",
            ]
        );
        assert!(listed(b"t LIST () \"\" (\"\")\r\n").is_empty());
        let plain = |pattern: &str, lsub: bool| {
            let c = ListCommand::plain(
                Tag::try_from("t").unwrap(),
                Mailbox::try_from("").unwrap(),
                ListMailbox::try_from(pattern.to_string()).unwrap(),
                lsub,
            );
            let listed = select(&view(), &c).unwrap();
            (listed.iter())
                .map(|l| format!("{} {}", l.b.name, l.items.len()))
                .collect::<Vec<_>>()
        };
        // A plain LIST "" "": the delimiter, on a mailbox of no name.
        assert_eq!(plain("", false), [" 1"]);
        // A plain LSUB: the level above a subscribed folder too, no \Subscribed.
        assert_eq!(plain("W%", true), ["Work 2"]);
        assert!(plain("", true).is_empty());
    }

    #[test]
    fn childinfo_goes_after_the_mailbox_name() {
        let l = Listed {
            b: folder("Archive", false, None),
            items: vec![],
            childinfo: true,
            status: false,
        };
        match line(l, false) {
            Out::Raw(b) => assert_eq!(
                b,
                b"* LIST () \"/\" Archive (\"CHILDINFO\" (\"SUBSCRIBED\"))\r\n"
            ),
            _ => panic!("not raw"),
        }
    }
}
