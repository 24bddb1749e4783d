//! HTML reduced to its text, for the index: tags dropped, the contents of `<script>`,
//! `<style>`, `<template>` and `<head>` dropped whatever their attributes, comments dropped,
//! character references decoded, white space collapsed. Written here because
//! mail-parser's `html_to_text` keeps a `<style>` or `<script>` element's contents when its
//! tag has attributes (`<style type="text/css">`), the usual form in mail.
//!
//! One pass over the input, each byte looked at a bounded number of times: linear in the
//! input's size whatever its nesting or its unclosed tags, quotes and comments.

use mail_parser::decoders::html::add_html_token;

/// Elements whose contents are not text, and that end only at their closing tag.
const HIDDEN: [&str; 4] = ["script", "style", "template", "head"];

/// Elements that do not separate words (`zan<b>zi</b>bar` is one word); every other tag
/// does.
const INLINE: [&str; 28] = [
    "a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "del", "dfn", "em", "font", "i", "ins",
    "kbd", "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup", "time",
    "u", "var",
];

/// Elements after which the text goes on a new line.
const BLOCK: [&str; 12] = [
    "br",
    "p",
    "div",
    "tr",
    "li",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "blockquote",
];

/// The text of `html`.
pub(crate) fn html_to_text(html: &str) -> String {
    let b = html.as_bytes();
    let mut out = Text {
        s: String::with_capacity(html.len() / 2),
        space: None,
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' => match tag_at(b, i) {
                Some(tag) => {
                    if !tag.closing && !tag.self_closing {
                        if let Some(name) = HIDDEN.iter().find(|h| tag.name_is(b, h)) {
                            i = hidden_end(b, tag.end, name);
                            out.separate(' ');
                            continue;
                        }
                    }
                    if BLOCK.iter().any(|n| tag.name_is(b, n)) {
                        out.separate('\n');
                    } else if !INLINE.iter().any(|n| tag.name_is(b, n)) {
                        out.separate(' ');
                    }
                    i = tag.end;
                }
                None if b[i..].starts_with(b"<!--") => {
                    i = find(b, i + 4, b"-->").map_or(b.len(), |e| e + 3);
                }
                None if matches!(b.get(i + 1), Some(b'!' | b'?')) => {
                    i = memchr::memchr(b'>', &b[i..]).map_or(b.len(), |e| i + e + 1);
                }
                None => {
                    out.push_str("<");
                    i += 1;
                }
            },
            b'&' => {
                let end = entity_end(b, i);
                match end {
                    Some(end) => {
                        let mut decoded = String::new();
                        add_html_token(&mut decoded, &b[i..end], false);
                        out.push_str(&decoded);
                        i = end;
                    }
                    None => {
                        out.push_str("&");
                        i += 1;
                    }
                }
            }
            _ => {
                // A run of text up to the next `<` or `&`: both are ASCII, so the cut is at a
                // character boundary.
                let end = memchr::memchr2(b'<', b'&', &b[i..]).map_or(b.len(), |e| i + e);
                out.push_str(&html[i..end]);
                i = end;
            }
        }
    }
    out.s.truncate(out.s.trim_end().len());
    out.s
}

/// The text gathered, white space collapsed.
struct Text {
    s: String,
    /// A separator owed before the next text (`\n` wins over a space).
    space: Option<char>,
}

impl Text {
    fn separate(&mut self, c: char) {
        if self.space != Some('\n') {
            self.space = Some(c);
        }
    }

    fn push_str(&mut self, text: &str) {
        for (n, piece) in text.split(char::is_whitespace).enumerate() {
            if n > 0 {
                self.separate(' ');
            }
            if piece.is_empty() {
                continue;
            }
            if let Some(c) = self.space.take() {
                if !self.s.is_empty() {
                    self.s.push(c);
                }
            }
            self.s.push_str(piece);
        }
    }
}

/// A tag: `<name …>` or `</name …>`.
struct Tag {
    name: (usize, usize),
    closing: bool,
    self_closing: bool,
    /// The offset after its `>` (or the end of the input).
    end: usize,
}

impl Tag {
    fn name_is(&self, b: &[u8], name: &str) -> bool {
        b[self.name.0..self.name.1].eq_ignore_ascii_case(name.as_bytes())
    }
}

/// The tag opening at `b[at] == '<'`, if a letter (after an optional `/`) follows, as HTML
/// has it; `<` before anything else is text. Quoted attribute values may hold `>`.
fn tag_at(b: &[u8], at: usize) -> Option<Tag> {
    let mut i = at + 1;
    let closing = b.get(i) == Some(&b'/');
    if closing {
        i += 1;
    }
    if !b.get(i).is_some_and(u8::is_ascii_alphabetic) {
        return None;
    }
    let start = i;
    while b
        .get(i)
        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'-' || *c == b':')
    {
        i += 1;
    }
    let name = (start, i);
    let mut quote = None;
    let mut after_equals = false;
    while i < b.len() {
        let c = b[i];
        i += 1;
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == b'>' => {
                let self_closing = b[i - 2] == b'/';
                return Some(Tag {
                    name,
                    closing,
                    self_closing,
                    end: i,
                });
            }
            None if (c == b'"' || c == b'\'') && after_equals => quote = Some(c),
            None => {}
        }
        if !c.is_ascii_whitespace() {
            after_equals = c == b'=';
        }
    }
    Some(Tag {
        name,
        closing,
        self_closing: false,
        end: b.len(),
    })
}

/// Where the contents of the hidden element `name` opened before `from` end: after its
/// closing tag (`</script …>`), or for `head` also at a `<body` tag; the input's end if none.
fn hidden_end(b: &[u8], from: usize, name: &str) -> usize {
    let mut i = from;
    while let Some(lt) = memchr::memchr(b'<', &b[i..]).map(|e| i + e) {
        let rest = &b[lt + 1..];
        let closes = rest.first() == Some(&b'/') && starts_with_ci(&rest[1..], name);
        let body = name == "head" && starts_with_ci(rest, "body");
        if closes {
            return tag_at(b, lt).map_or(b.len(), |t| t.end);
        }
        if body {
            return lt;
        }
        i = lt + 1;
    }
    b.len()
}

fn starts_with_ci(b: &[u8], s: &str) -> bool {
    b.get(..s.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(s.as_bytes()))
        && !b.get(s.len()).is_some_and(|c| c.is_ascii_alphanumeric())
}

/// The end of the character reference at `b[at] == '&'` (`&amp;`, `&#233;`, `&#xE9;`), if
/// one is there (at most 32 name characters, then `;`).
fn entity_end(b: &[u8], at: usize) -> Option<usize> {
    let body = b.get(at + 1..(at + 34).min(b.len()))?;
    let semi = body.iter().position(|&c| c == b';')?;
    let name = &body[..semi];
    (!name.is_empty()
        && name
            .iter()
            .enumerate()
            .all(|(n, c)| c.is_ascii_alphanumeric() || (n == 0 && *c == b'#')))
    .then_some(at + 1 + semi + 1)
}

fn find(b: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(b.get(from..)?, needle).map(|e| from + e)
}
