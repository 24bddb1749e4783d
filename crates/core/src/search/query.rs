//! The query language of `mailvault search`: the QUERY string parsed into a [`Query`] tree.
//! Pure: no index, no repository; `docs/search.md` describes the language for users.
//!
//! Words separated by white space must all match (AND); `OR` (upper case) between two
//! terms matches either and binds tighter than AND, as in Gmail: `from:alice OR from:bob
//! invoice` is `(from:alice OR from:bob) AND invoice`. `AND` may be written out; `-term` and
//! `NOT term` negate; parentheses group. A term is a word of free text (`invoice`), a
//! quoted phrase (`"quarterly report"`), a prefix (`invoi*`), `field:value` or
//! `field:"quoted value"`, or the bare word `deleted`.
//!
//! | field | value | [`Term`] |
//! |---|---|---|
//! | `from:` `to:` `subject:` `filename:` | text, phrase or prefix | [`Term::Text`] |
//! | `folder:` `account:` `keyword:` | a name, quoted if it holds spaces | [`Term::Folder`], [`Term::Account`], [`Term::Keyword`] |
//! | `before:` `after:` `on:` | a date (below) | [`Term::Date`] |
//! | `larger:` `smaller:` | a size (below) | [`Term::Size`] |
//! | `has:` | `attachment` | [`Term::HasAttachment`] |
//! | `flag:` | `seen` `flagged` `answered` `deleted` `draft` | [`Term::Flag`] |
//!
//! Field names, `has:`'s and `flag:`'s values and the bare word `deleted` are read without
//! regard to case; `AND`, `OR` and `NOT` only in upper case (`or` is a word of text).
//! Text is kept as typed (no lower-casing, no splitting into tokens): the index does that.
//!
//! **Dates** are UTC. A date names a span of time: `2024-03-01` (or `2024/03/01`) that day,
//! `2024-03` that month, `2024` that year. `before:X` is a date before X's first second,
//! `after:X` one at or after X's first second (X included, like IMAP `SINCE`), `on:X` one
//! within X. So `after:2024-03-01 before:2024-04-01` and `on:2024-03` are both March 2024.
//! A relative date `30d`, `2w`, `6m`, `1y` (days, weeks, calendar months, years) is the
//! instant that long before `now`: `after:30d` is the last 30 days, `before:1y` anything
//! older than a year; `on:30d` is the UTC day holding that instant.
//!
//! **Sizes** are the message's size in bytes, with an optional suffix `k`, `M`, `G`
//! (1024-based, any case, a trailing `B` allowed: `10M` = `10mb` = 10,485,760 bytes).
//! `larger:N` is a size greater than N, `smaller:N` one less than N (strict, as in Gmail).
//!
//! A query is at most [`MAX_QUERY_LEN`] bytes and nests groups and negations at most
//! [`MAX_DEPTH`] deep; anything else the grammar does not allow is a [`QueryError`] naming
//! its column. An empty query is [`Query::All`].

use std::fmt;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp};

/// Longest query accepted, in bytes.
pub const MAX_QUERY_LEN: usize = 4096;
/// Deepest nesting of parentheses and negations accepted.
pub const MAX_DEPTH: usize = 32;

/// The fields a query may name, for error messages.
const KNOWN_FIELDS: &str = "from, to, subject, filename, folder, account, keyword, before, \
                            after, on, larger, smaller, has, flag";

/// A parsed query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Query {
    /// Every message (the empty query).
    All,
    /// Every one of these (at least two; none is itself an `And`).
    And(Vec<Query>),
    /// Any one of these (at least two; none is itself an `Or`).
    Or(Vec<Query>),
    /// Not this. A query may be only a negation (`-spam`): every message but those.
    Not(Box<Query>),
    Term(Term),
}

/// Where a text term looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TextField {
    /// Free text: the decoded body, subject, addresses and attachment file names.
    Any,
    /// From (and Sender): names and addresses.
    From,
    /// To, Cc, Bcc and Delivered-To: names and addresses (the index gathers them).
    To,
    Subject,
    /// Attachments' file names.
    Filename,
}

/// An IMAP system flag, as `flag:` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flag {
    Seen,
    Flagged,
    Answered,
    Deleted,
    Draft,
}

impl Flag {
    /// The flag as IMAP writes it (`\Seen`), as `mail::flags::Meta::flags` holds it.
    pub fn imap_name(self) -> &'static str {
        match self {
            Flag::Seen => "\\Seen",
            Flag::Flagged => "\\Flagged",
            Flag::Answered => "\\Answered",
            Flag::Deleted => "\\Deleted",
            Flag::Draft => "\\Draft",
        }
    }

    fn parse(value: &str) -> Option<Flag> {
        let all = [
            ("seen", Flag::Seen),
            ("flagged", Flag::Flagged),
            ("answered", Flag::Answered),
            ("deleted", Flag::Deleted),
            ("draft", Flag::Draft),
        ];
        all.iter()
            .find(|(name, _)| value.eq_ignore_ascii_case(name))
            .map(|&(_, f)| f)
    }
}

/// One condition on a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// Text in `field`, as typed (the index tokenizes and lower-cases it). `phrase`: it was
    /// quoted, its words must appear in this order (an unquoted word the tokenizer splits,
    /// such as `alice@example.com`, is best matched as a phrase too). `prefix`: it was an
    /// unquoted word ending with `*` (`invoi*`), which `text` holds without the `*`.
    Text {
        field: TextField,
        text: String,
        phrase: bool,
        prefix: bool,
    },
    /// The message's date (its Date header) within `[from, to)`, in seconds since the epoch;
    /// `None` is unbounded. A message without a date matches no date term.
    Date { from: Option<i64>, to: Option<i64> },
    /// The message's size in bytes is greater than `larger_than` and less than
    /// `smaller_than` (strict; `None` is unbounded).
    Size {
        larger_than: Option<u64>,
        smaller_than: Option<u64>,
    },
    /// The message has an attachment (as `extract::Document::has_attachment` says).
    HasAttachment,
    /// The account's name, as typed.
    Account(String),
    /// The folder's name, as typed.
    Folder(String),
    /// The message carries this system flag.
    Flag(Flag),
    /// The message carries this IMAP keyword, as typed.
    Keyword(String),
    /// The bare word `deleted`: the message is in an older snapshot but no longer in the
    /// latest (the undelete set). Not `flag:deleted`, the IMAP `\Deleted` flag.
    Deleted,
}

/// A query that does not parse: what is wrong and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("search query, column {column}: {kind}")]
pub struct QueryError {
    /// Byte offset in the query where the problem is.
    pub offset: usize,
    /// The same place in characters, counted from 1.
    pub column: usize,
    pub kind: QueryErrorKind,
}

/// What is wrong with a query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryErrorKind {
    #[error("the query is {len} bytes long, more than the {MAX_QUERY_LEN} allowed")]
    TooLong { len: usize },
    #[error("parentheses and negations nested more than {MAX_DEPTH} deep")]
    TooDeep,
    #[error(
        "unknown field `{field}:` (known: {KNOWN_FIELDS}); to search for text holding a \
         colon, put it in double quotes"
    )]
    UnknownField { field: String },
    #[error("`{field}:` needs a value right after the colon")]
    MissingValue { field: String },
    #[error("`{value}` is not a valid value for `{field}:`: {expected}")]
    InvalidValue {
        field: String,
        value: String,
        expected: &'static str,
    },
    #[error("a `*` (prefix) goes only at the end of a word of text, not with `{field}:`")]
    PrefixNotAllowed { field: String },
    #[error("`*` needs a word before it")]
    BarePrefix,
    #[error("this double quote is never closed")]
    UnclosedQuote,
    #[error("empty double quotes")]
    EmptyQuotes,
    #[error("this `(` is never closed")]
    UnclosedGroup,
    #[error("`)` without a `(` before it")]
    UnmatchedClose,
    #[error("empty parentheses")]
    EmptyGroup,
    #[error("`{op}` needs a term before it")]
    NothingBefore { op: &'static str },
    #[error("`{op}` needs a term after it")]
    NothingAfter { op: &'static str },
}

/// Parses `input`, the QUERY of `mailvault search`. Relative dates (`after:30d`) count back
/// from `now`. See the module's documentation for the language.
pub fn parse(input: &str, now: Timestamp) -> Result<Query, QueryError> {
    if input.len() > MAX_QUERY_LEN {
        return Err(error(
            input,
            MAX_QUERY_LEN,
            QueryErrorKind::TooLong { len: input.len() },
        ));
    }
    let tokens = lex(input).map_err(|(offset, kind)| error(input, offset, kind))?;
    let mut p = Parser {
        tokens,
        next: 0,
        now,
        end: input.len(),
    };
    let parsed = p.and_list(0).and_then(|q| match p.peek() {
        Some(t) if matches!(t.tok, Tok::Close) => Err((t.offset, QueryErrorKind::UnmatchedClose)),
        _ => Ok(q.unwrap_or(Query::All)),
    });
    parsed.map_err(|(offset, kind)| error(input, offset, kind))
}

fn error(input: &str, offset: usize, kind: QueryErrorKind) -> QueryError {
    let offset = offset.min(input.len());
    let column = input
        .char_indices()
        .take_while(|&(i, _)| i < offset)
        .count()
        + 1;
    QueryError {
        offset,
        column,
        kind,
    }
}

type Fail = (usize, QueryErrorKind);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok<'a> {
    Open,
    Close,
    /// `-` right before a term.
    Minus,
    And,
    Or,
    Not,
    /// Free text: a word, or a quoted phrase without its quotes.
    Word {
        text: &'a str,
        quoted: bool,
    },
    /// `name:value`; `at`: the value's offset.
    Field {
        name: &'a str,
        value: &'a str,
        quoted: bool,
        at: usize,
    },
}

#[derive(Debug)]
struct Token<'a> {
    tok: Tok<'a>,
    offset: usize,
}

/// Ends a bare word.
fn is_break(c: char) -> bool {
    c.is_whitespace() || matches!(c, '(' | ')' | '"')
}

/// The query cut into tokens.
fn lex(input: &str) -> Result<Vec<Token<'_>>, Fail> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(c) = input[i..].chars().next() {
        let start = i;
        let tok = match c {
            c if c.is_whitespace() => {
                i += c.len_utf8();
                continue;
            }
            '(' => {
                i += 1;
                Tok::Open
            }
            ')' => {
                i += 1;
                Tok::Close
            }
            '"' => {
                let (text, end) = quoted(input, i)?;
                i = end;
                Tok::Word { text, quoted: true }
            }
            '-' => {
                i += 1;
                match input[i..].chars().next() {
                    Some(n) if !n.is_whitespace() && n != ')' => Tok::Minus,
                    _ => return Err((start, QueryErrorKind::NothingAfter { op: "-" })),
                }
            }
            _ => {
                let end = input[i..].find(is_break).map_or(input.len(), |n| i + n);
                let word = &input[i..end];
                i = end;
                match word {
                    "AND" => Tok::And,
                    "OR" => Tok::Or,
                    "NOT" => Tok::Not,
                    _ => match field_name(word) {
                        Some(name) => {
                            let at = start + name.len() + 1;
                            let mut value = &input[at..end];
                            let mut quoted_value = false;
                            if value.is_empty() && input[end..].starts_with('"') {
                                (value, i) = quoted(input, end)?;
                                quoted_value = true;
                            }
                            Tok::Field {
                                name,
                                value,
                                quoted: quoted_value,
                                at,
                            }
                        }
                        None => Tok::Word {
                            text: word,
                            quoted: false,
                        },
                    },
                }
            }
        };
        out.push(Token { tok, offset: start });
    }
    Ok(out)
}

/// The text of the double-quoted string opening at `at`, and the offset after its end.
fn quoted(input: &str, at: usize) -> Result<(&str, usize), Fail> {
    let body = at + 1;
    let close = input[body..]
        .find('"')
        .ok_or((at, QueryErrorKind::UnclosedQuote))?;
    if close == 0 {
        return Err((at, QueryErrorKind::EmptyQuotes));
    }
    Ok((&input[body..body + close], body + close + 1))
}

/// The field name of `word` if it is `name:…` with a name of ASCII letters only (so `10:30`
/// is a word of text, `http://x` an unknown field).
fn field_name(word: &str) -> Option<&str> {
    let (name, _) = word.split_once(':')?;
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_alphabetic())).then_some(name)
}

struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    next: usize,
    now: Timestamp,
    /// The input's length: where "nothing after" errors point.
    end: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Token<'a>> {
        self.tokens.get(self.next)
    }

    /// The offset of the next token, or the end of the input.
    fn here(&self) -> usize {
        self.peek().map_or(self.end, |t| t.offset)
    }

    /// Whether the next token can start a term.
    fn term_follows(&self) -> bool {
        self.peek()
            .is_some_and(|t| !matches!(t.tok, Tok::Close | Tok::And | Tok::Or))
    }

    /// Terms up to `)` or the end, ANDed; `None` if there are none.
    fn and_list(&mut self, depth: usize) -> Result<Option<Query>, Fail> {
        let mut items = Vec::new();
        while let Some(t) = self.peek() {
            match t.tok {
                Tok::Close => break,
                Tok::Or => return Err((t.offset, QueryErrorKind::NothingBefore { op: "OR" })),
                Tok::And => {
                    if items.is_empty() {
                        return Err((t.offset, QueryErrorKind::NothingBefore { op: "AND" }));
                    }
                    self.next += 1;
                    if !self.term_follows() {
                        return Err((self.here(), QueryErrorKind::NothingAfter { op: "AND" }));
                    }
                }
                _ => {}
            }
            items.push(self.or_list(depth)?);
        }
        Ok(combine(items, Query::And))
    }

    /// Terms joined by `OR`.
    fn or_list(&mut self, depth: usize) -> Result<Query, Fail> {
        let mut items = vec![self.unary(depth)?];
        while self.peek().is_some_and(|t| t.tok == Tok::Or) {
            self.next += 1;
            if !self.term_follows() {
                return Err((self.here(), QueryErrorKind::NothingAfter { op: "OR" }));
            }
            items.push(self.unary(depth)?);
        }
        Ok(combine(items, Query::Or).unwrap_or(Query::All))
    }

    /// A term, a group or a negation of one.
    fn unary(&mut self, depth: usize) -> Result<Query, Fail> {
        let Some(t) = self.peek() else {
            return Err((self.end, QueryErrorKind::NothingAfter { op: "AND" }));
        };
        let offset = t.offset;
        match t.tok.clone() {
            Tok::Minus | Tok::Not => {
                let op = if t.tok == Tok::Not { "NOT" } else { "-" };
                if depth >= MAX_DEPTH {
                    return Err((offset, QueryErrorKind::TooDeep));
                }
                self.next += 1;
                if !self.term_follows() {
                    return Err((self.here(), QueryErrorKind::NothingAfter { op }));
                }
                Ok(Query::Not(Box::new(self.unary(depth + 1)?)))
            }
            Tok::Open => {
                if depth >= MAX_DEPTH {
                    return Err((offset, QueryErrorKind::TooDeep));
                }
                self.next += 1;
                let inner = self.and_list(depth + 1)?;
                match self.peek() {
                    Some(t) if t.tok == Tok::Close => self.next += 1,
                    _ => return Err((offset, QueryErrorKind::UnclosedGroup)),
                }
                inner.ok_or((offset, QueryErrorKind::EmptyGroup))
            }
            Tok::Close => Err((offset, QueryErrorKind::UnmatchedClose)),
            Tok::And => Err((offset, QueryErrorKind::NothingBefore { op: "AND" })),
            Tok::Or => Err((offset, QueryErrorKind::NothingBefore { op: "OR" })),
            Tok::Word { text, quoted } => {
                self.next += 1;
                if !quoted && text.eq_ignore_ascii_case("deleted") {
                    return Ok(Query::Term(Term::Deleted));
                }
                text_term(TextField::Any, text, quoted, offset).map(Query::Term)
            }
            Tok::Field {
                name,
                value,
                quoted,
                at,
            } => {
                self.next += 1;
                self.field(name, value, quoted, at).map(Query::Term)
            }
        }
    }

    /// The term `name:value`, the value at offset `at`.
    fn field(&self, name: &str, value: &str, quoted: bool, at: usize) -> Result<Term, Fail> {
        let lower = name.to_ascii_lowercase();
        let text_field = match lower.as_str() {
            "from" => Some(TextField::From),
            "to" => Some(TextField::To),
            "subject" => Some(TextField::Subject),
            "filename" => Some(TextField::Filename),
            _ => None,
        };
        let known = text_field.is_some()
            || matches!(
                lower.as_str(),
                "folder"
                    | "account"
                    | "keyword"
                    | "before"
                    | "after"
                    | "on"
                    | "larger"
                    | "smaller"
                    | "has"
                    | "flag"
            );
        if !known {
            let field = name.to_string();
            return Err((at - name.len() - 1, QueryErrorKind::UnknownField { field }));
        }
        if value.is_empty() {
            let field = lower;
            return Err((at, QueryErrorKind::MissingValue { field }));
        }
        if let Some(field) = text_field {
            return text_term(field, value, quoted, at);
        }
        let invalid = |expected: &'static str| {
            let (field, value) = (lower.clone(), value.to_string());
            let kind = QueryErrorKind::InvalidValue {
                field,
                value,
                expected,
            };
            (at, kind)
        };
        match lower.as_str() {
            "folder" | "account" | "keyword" => {
                if !quoted && value.ends_with('*') {
                    let field = lower.clone();
                    return Err((at, QueryErrorKind::PrefixNotAllowed { field }));
                }
                let v = value.to_string();
                Ok(match lower.as_str() {
                    "folder" => Term::Folder(v),
                    "account" => Term::Account(v),
                    _ => Term::Keyword(v),
                })
            }
            "before" | "after" | "on" => {
                let date = date_value(value, self.now).map_err(invalid)?;
                Ok(match lower.as_str() {
                    "before" => Term::Date {
                        from: None,
                        to: Some(date.point),
                    },
                    "after" => Term::Date {
                        from: Some(date.point),
                        to: None,
                    },
                    _ => Term::Date {
                        from: Some(date.span.0),
                        to: date.span.1,
                    },
                })
            }
            "larger" | "smaller" => {
                let n = size(value).map_err(invalid)?;
                let larger = lower == "larger";
                Ok(Term::Size {
                    larger_than: larger.then_some(n),
                    smaller_than: (!larger).then_some(n),
                })
            }
            "has" if value.eq_ignore_ascii_case("attachment") => Ok(Term::HasAttachment),
            "has" => Err(invalid("the only value is `attachment`")),
            _ => Flag::parse(value)
                .map(Term::Flag)
                .ok_or_else(|| invalid("one of seen, flagged, answered, deleted, draft")),
        }
    }
}

/// `items` as one query: none is `None`, one is itself, more are joined by `join` with
/// children of the same kind flattened into it.
fn combine(items: Vec<Query>, join: fn(Vec<Query>) -> Query) -> Option<Query> {
    if items.len() <= 1 {
        return items.into_iter().next();
    }
    let mut flat = Vec::with_capacity(items.len());
    for q in items {
        match (join(Vec::new()), q) {
            (Query::And(_), Query::And(inner)) | (Query::Or(_), Query::Or(inner)) => {
                flat.extend(inner)
            }
            (_, q) => flat.push(q),
        }
    }
    Some(join(flat))
}

/// A text term: quoted is a phrase; unquoted may end with the prefix `*`.
fn text_term(field: TextField, text: &str, quoted: bool, at: usize) -> Result<Term, Fail> {
    let (text, prefix) = match text.strip_suffix('*') {
        Some(stem) if !quoted => (stem, true),
        _ => (text, false),
    };
    if prefix && (text.is_empty() || text.ends_with('*')) {
        return Err((at, QueryErrorKind::BarePrefix));
    }
    Ok(Term::Text {
        field,
        text: text.to_string(),
        phrase: quoted,
        prefix,
    })
}

/// What a date value names: `point`, the instant `before:` and `after:` compare with (an
/// absolute date's first second, or the relative instant), and `span`, the `[start, end)`
/// `on:` matches (the date itself, or the UTC day holding the relative instant; `end`
/// `None`: past the last date jiff knows). Seconds since the epoch.
struct DateValue {
    point: i64,
    span: (i64, Option<i64>),
}

const DATE_EXPECTED: &str = "expected YYYY-MM-DD, YYYY-MM, YYYY, or a number of days, weeks, \
                             months or years back (30d, 2w, 6m, 1y)";

fn utc_second(d: Date) -> Option<i64> {
    d.to_zoned(TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp().as_second())
}

/// `value` as a date, per the module's rules on absolute and relative dates.
fn date_value(value: &str, now: Timestamp) -> Result<DateValue, &'static str> {
    match value.chars().last() {
        Some(unit @ ('d' | 'w' | 'm' | 'y')) => relative_date(&value[..value.len() - 1], unit, now),
        _ => absolute_date(value),
    }
}

/// `digits` `unit`s before `now`.
fn relative_date(digits: &str, unit: char, now: Timestamp) -> Result<DateValue, &'static str> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(DATE_EXPECTED);
    }
    const TOO_FAR: &str = "that reaches too far back";
    let n: i64 = digits.parse().map_err(|_| TOO_FAR)?;
    let span = match unit {
        'd' => Span::new().try_days(n),
        'w' => Span::new().try_weeks(n),
        'm' => Span::new().try_months(n),
        _ => Span::new().try_years(n),
    }
    .map_err(|_| TOO_FAR)?;
    let instant = now
        .to_zoned(TimeZone::UTC)
        .checked_sub(span)
        .map_err(|_| TOO_FAR)?;
    let day = instant.date();
    let start = utc_second(day).ok_or(TOO_FAR)?;
    let end = day.tomorrow().ok().and_then(utc_second);
    Ok(DateValue {
        point: instant.timestamp().as_second(),
        span: (start, end),
    })
}

/// `YYYY-MM-DD`, `YYYY-MM` or `YYYY` (`/` also separates).
fn absolute_date(value: &str) -> Result<DateValue, &'static str> {
    let parts: Vec<&str> = value.split(['-', '/']).collect();
    if parts.len() > 3 {
        return Err(DATE_EXPECTED);
    }
    let number = |s: &str, len: usize| {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse::<i16>().ok())
            .flatten()
            .ok_or(DATE_EXPECTED)
    };
    let year = number(parts[0], 4)?;
    let month = parts.get(1).map(|m| number(m, 2)).transpose()?;
    let day = parts.get(2).map(|d| number(d, 2)).transpose()?;
    const NO_SUCH: &str = "no such date";
    let small = |n: i16| i8::try_from(n).map_err(|_| NO_SUCH);
    let first = Date::new(year, small(month.unwrap_or(1))?, small(day.unwrap_or(1))?)
        .map_err(|_| NO_SUCH)?;
    let next = match (month, day) {
        (_, Some(_)) => first.checked_add(Span::new().days(1)),
        (Some(_), None) => first.checked_add(Span::new().months(1)),
        (None, _) => first.checked_add(Span::new().years(1)),
    };
    let start = utc_second(first).ok_or(NO_SUCH)?;
    Ok(DateValue {
        point: start,
        span: (start, next.ok().and_then(utc_second)),
    })
}

/// `value` (`1234`, `10k`, `10M`, `2GB`, 1024-based) in bytes.
fn size(value: &str) -> Result<u64, &'static str> {
    const EXPECTED: &str = "expected a number of bytes, optionally followed by k, M or G";
    let lower = value.to_ascii_lowercase();
    let unit_part = lower.strip_suffix('b').unwrap_or(&lower);
    let (digits, shift) = match unit_part.as_bytes().last() {
        Some(b'k') => (&unit_part[..unit_part.len() - 1], 10),
        Some(b'm') => (&unit_part[..unit_part.len() - 1], 20),
        Some(b'g') => (&unit_part[..unit_part.len() - 1], 30),
        _ => (unit_part, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(EXPECTED);
    }
    const TOO_BIG: &str = "too large";
    let n: u64 = digits.parse().map_err(|_| TOO_BIG)?;
    n.checked_mul(1 << shift).ok_or(TOO_BIG)
}

/// A readable form for logs and tests (`(a AND (b OR -c))`, dates as UTC instants); not
/// meant to be parsed again.
impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |f: &mut fmt::Formatter<'_>, items: &[Query], op: &str| {
            write!(f, "(")?;
            for (i, q) in items.iter().enumerate() {
                if i > 0 {
                    write!(f, " {op} ")?;
                }
                write!(f, "{q}")?;
            }
            write!(f, ")")
        };
        match self {
            Query::All => write!(f, "ALL"),
            Query::And(items) => list(f, items, "AND"),
            Query::Or(items) => list(f, items, "OR"),
            Query::Not(q) => write!(f, "-{q}"),
            Query::Term(t) => write!(f, "{t}"),
        }
    }
}

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let instant = |s: &Option<i64>| {
            s.and_then(|s| Timestamp::from_second(s).ok())
                .map_or("..".to_string(), |t| t.to_string())
        };
        let bound = |n: &Option<u64>| n.map_or("..".to_string(), |n| n.to_string());
        match self {
            Term::Text {
                field,
                text,
                phrase,
                prefix,
            } => {
                let name = match field {
                    TextField::Any => "",
                    TextField::From => "from:",
                    TextField::To => "to:",
                    TextField::Subject => "subject:",
                    TextField::Filename => "filename:",
                };
                let q = if *phrase { "\"" } else { "" };
                let star = if *prefix { "*" } else { "" };
                write!(f, "{name}{q}{text}{q}{star}")
            }
            Term::Date { from, to } => write!(f, "date:[{},{})", instant(from), instant(to)),
            Term::Size {
                larger_than,
                smaller_than,
            } => write!(f, "size:({},{})", bound(larger_than), bound(smaller_than)),
            Term::HasAttachment => write!(f, "has:attachment"),
            Term::Account(a) => write!(f, "account:\"{a}\""),
            Term::Folder(a) => write!(f, "folder:\"{a}\""),
            Term::Keyword(k) => write!(f, "keyword:\"{k}\""),
            Term::Flag(fl) => write!(f, "flag:{}", fl.imap_name()),
            Term::Deleted => write!(f, "deleted"),
        }
    }
}

#[cfg(test)]
mod tests;
