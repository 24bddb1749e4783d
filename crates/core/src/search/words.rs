//! The tokenizer of the search index: words of letters and digits, and Chinese, Japanese
//! and Korean text as overlapping pairs of characters.
//!
//! Written here because tantivy's tokenizers split on what is not a letter or digit, and
//! CJK text has no spaces: `会議の予定` would be one word, not found by `会議`. As in
//! Lucene's CJK bigram filter, a run of CJK characters is indexed as its overlapping
//! pairs (`会議`, `議の`, `の予`, `予定`), a lone character as itself, and a query's
//! pairs are matched as a phrase, so any two or more consecutive characters are found.

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

/// Whether `c` is written without spaces between words: Han, Hiragana, Katakana, Hangul.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x11FF
        | 0x3040..=0x30FF
        | 0x3130..=0x318F
        | 0x31F0..=0x31FF
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xAC00..=0xD7AF
        | 0xF900..=0xFAFF
        | 0xFF66..=0xFF9F
        | 0x20000..=0x2FA1F)
}

/// See the module documentation.
#[derive(Clone, Default)]
pub struct MailTokenizer {
    token: Token,
}

pub struct MailTokenStream<'a> {
    text: &'a str,
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    /// The last character of the CJK pair just given, which starts the next pair.
    pending: Option<usize>,
    token: &'a mut Token,
}

impl Tokenizer for MailTokenizer {
    type TokenStream<'a> = MailTokenStream<'a>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> MailTokenStream<'a> {
        self.token.reset();
        MailTokenStream {
            text,
            chars: text.char_indices().peekable(),
            pending: None,
            token: &mut self.token,
        }
    }
}

impl MailTokenStream<'_> {
    fn emit(&mut self, from: usize, to: usize) -> bool {
        self.token.offset_from = from;
        self.token.offset_to = to;
        self.token.text.push_str(&self.text[from..to]);
        true
    }

    /// The end of the CJK character after the one at `at`, if it is one (and takes it).
    fn next_cjk(&mut self) -> Option<usize> {
        let &(j, d) = self.chars.peek()?;
        if !is_cjk(d) {
            return None;
        }
        self.chars.next();
        Some(j + d.len_utf8())
    }
}

impl TokenStream for MailTokenStream<'_> {
    fn advance(&mut self) -> bool {
        self.token.text.clear();
        self.token.position = self.token.position.wrapping_add(1);
        if let Some(at) = self.pending.take() {
            let start = at;
            if let Some(end) = self.next_cjk() {
                self.pending = Some(
                    end - self.text[..end]
                        .chars()
                        .next_back()
                        .map_or(0, char::len_utf8),
                );
                return self.emit(start, end);
            }
        }
        while let Some((from, c)) = self.chars.next() {
            if is_cjk(c) {
                let first_end = from + c.len_utf8();
                return match self.next_cjk() {
                    Some(end) => {
                        self.pending = Some(first_end);
                        self.emit(from, end)
                    }
                    None => self.emit(from, first_end),
                };
            }
            if c.is_alphanumeric() {
                let mut to = from + c.len_utf8();
                while let Some(&(j, d)) = self.chars.peek() {
                    if !d.is_alphanumeric() || is_cjk(d) {
                        break;
                    }
                    to = j + d.len_utf8();
                    self.chars.next();
                }
                return self.emit(from, to);
            }
        }
        false
    }

    fn token(&self) -> &Token {
        self.token
    }

    fn token_mut(&mut self) -> &mut Token {
        self.token
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Vec<(String, usize)> {
        let mut t = MailTokenizer::default();
        let mut s = t.token_stream(text);
        let mut out = Vec::new();
        while s.advance() {
            out.push((s.token().text.clone(), s.token().position));
        }
        out
    }

    #[test]
    fn words_and_cjk_pairs() {
        let t = tokens("Re: 会議の予定 (kaigi) at 10:30, 東 x");
        let words: Vec<&str> = t.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(
            words,
            ["Re", "会議", "議の", "の予", "予定", "kaigi", "at", "10", "30", "東", "x"]
        );
        let positions: Vec<usize> = t.iter().map(|p| p.1).collect();
        assert_eq!(positions, (0..11).collect::<Vec<_>>());
        assert_eq!(
            tokens("naïve café"),
            [("naïve".into(), 0), ("café".into(), 1)]
        );
        assert_eq!(tokens("abc会議"), [("abc".into(), 0), ("会議".into(), 1)]);
        assert!(tokens(" .,;").is_empty());
    }
}
