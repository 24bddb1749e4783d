//! Maildir flag letters (the `:2,` suffix of a Maildir file name) to IMAP
//! flags and back. Pure functions; the folder's `dovecot-keywords` file gives
//! the keyword letters.
//!
//! System letters: `S` `\Seen`, `R` `\Answered`, `F` `\Flagged`, `T`
//! `\Deleted`, `D` `\Draft`, `P` (passed) the `$Forwarded` keyword.
//! Lower-case `a`..`z` are keywords numbered 0..25 in `dovecot-keywords`
//! (lines `0 $Label1`).
//!
//! `P` is read as `$Forwarded` (Courier and older mailvault snapshots write
//! it), but never written: Dovecot ignores `P` and keeps `$Forwarded` as a
//! keyword letter, so [`imap_to_maildir`] gives it one from the table.

/// System flags and their Maildir letters.
const SYSTEM: [(char, &str); 6] = [
    ('D', "\\Draft"),
    ('F', "\\Flagged"),
    ('P', "$Forwarded"),
    ('R', "\\Answered"),
    ('S', "\\Seen"),
    ('T', "\\Deleted"),
];

/// A folder's keyword table (`dovecot-keywords`): letter `a` + n is keyword n.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeywordTable {
    names: Vec<Option<String>>,
}

impl KeywordTable {
    /// An empty table.
    pub fn new() -> Self {
        KeywordTable::default()
    }

    /// Parses a `dovecot-keywords` file (`<index> <name>` per line); lines
    /// that do not parse, and indexes above 25, are ignored.
    pub fn parse(text: &str) -> Self {
        let mut t = KeywordTable::new();
        for line in text.lines() {
            let Some((idx, name)) = line.split_once(' ') else {
                continue;
            };
            let (Ok(idx), name) = (idx.parse::<usize>(), name.trim()) else {
                continue;
            };
            if idx < 26 && !name.is_empty() {
                if t.names.len() <= idx {
                    t.names.resize(idx + 1, None);
                }
                t.names[idx] = Some(name.to_string());
            }
        }
        t
    }

    /// The file's text, as Dovecot writes it.
    pub fn to_file_string(&self) -> String {
        let mut s = String::new();
        for (i, n) in self.names.iter().enumerate() {
            if let Some(n) = n {
                s.push_str(&format!("{i} {n}\n"));
            }
        }
        s
    }

    /// The keyword for letter `c` (`a`..=`z`).
    pub fn name_of(&self, c: char) -> Option<&str> {
        let idx = (c as usize)
            .checked_sub('a' as usize)
            .filter(|_| c.is_ascii_lowercase())?;
        self.names.get(idx)?.as_deref()
    }

    /// The letter of `keyword` (case-insensitive, as IMAP keywords are).
    pub fn letter_of(&self, keyword: &str) -> Option<char> {
        self.names
            .iter()
            .position(|n| {
                n.as_deref()
                    .is_some_and(|n| n.eq_ignore_ascii_case(keyword))
            })
            .map(index_letter)
    }

    /// The letter of `keyword`, adding it to the table if there is room (26).
    pub fn letter_or_assign(&mut self, keyword: &str) -> Option<char> {
        if let Some(c) = self.letter_of(keyword) {
            return Some(c);
        }
        let idx = match self.names.iter().position(Option::is_none) {
            Some(i) => i,
            None if self.names.len() < 26 => {
                self.names.push(None);
                self.names.len() - 1
            }
            None => return None,
        };
        self.names[idx] = Some(keyword.to_string());
        Some(index_letter(idx))
    }
}

fn index_letter(i: usize) -> char {
    char::from(b'a' + i as u8)
}

/// IMAP flags from Maildir info letters, and the letters that have no meaning
/// (unknown upper-case letters, keyword letters missing from the table).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImapFlags {
    /// System flags and keywords, in letter order.
    pub flags: Vec<String>,
    /// Letters that could not be mapped.
    pub unmapped: Vec<char>,
}

/// Maps the letters after `:2,` to IMAP flags.
pub fn maildir_to_imap(letters: &str, keywords: &KeywordTable) -> ImapFlags {
    let mut out = ImapFlags::default();
    for c in letters.chars() {
        if let Some((_, f)) = SYSTEM.iter().find(|(l, _)| *l == c) {
            out.flags.push((*f).to_string());
        } else if let Some(k) = keywords.name_of(c) {
            out.flags.push(k.to_string());
        } else {
            out.unmapped.push(c);
        }
    }
    out
}

/// Maildir letters from IMAP flags, and the flags that have no letter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MaildirFlags {
    /// The letters, sorted as Maildir wants them.
    pub letters: String,
    /// Flags with no letter (`\Recent`, unknown system flags, keywords beyond
    /// the table's 26 letters).
    pub unmapped: Vec<String>,
}

/// Maps IMAP flags to Maildir letters, adding new keywords to `keywords`.
pub fn imap_to_maildir<S: AsRef<str>>(flags: &[S], keywords: &mut KeywordTable) -> MaildirFlags {
    let mut letters: Vec<char> = Vec::new();
    let mut out = MaildirFlags::default();
    for f in flags {
        let f = f.as_ref();
        let system = SYSTEM
            .iter()
            .find(|(c, n)| *c != 'P' && n.eq_ignore_ascii_case(f));
        if let Some((c, _)) = system {
            letters.push(*c);
        } else if f.starts_with('\\') {
            if !f.eq_ignore_ascii_case("\\Recent") {
                out.unmapped.push(f.to_string());
            }
        } else {
            match keywords.letter_or_assign(f) {
                Some(c) => letters.push(c),
                None => out.unmapped.push(f.to_string()),
            }
        }
    }
    letters.sort_unstable();
    letters.dedup();
    out.letters = letters.into_iter().collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_letters() {
        let t = KeywordTable::new();
        let m = maildir_to_imap("DFPRST", &t);
        assert_eq!(
            m.flags,
            [
                "\\Draft",
                "\\Flagged",
                "$Forwarded",
                "\\Answered",
                "\\Seen",
                "\\Deleted"
            ]
        );
        assert!(m.unmapped.is_empty());
        // `$Forwarded` goes back as a keyword letter, which Dovecot reads (it ignores P).
        let mut t = KeywordTable::new();
        let back = imap_to_maildir(&m.flags, &mut t);
        assert_eq!(back.letters, "DFRSTa");
        assert_eq!(t.to_file_string(), "0 $Forwarded\n");
    }

    #[test]
    fn keywords_via_table() {
        let mut t = KeywordTable::parse("0 $Label1\n1 Junk\nbogus\n3 $MDNSent\n");
        assert_eq!(t.name_of('a'), Some("$Label1"));
        assert_eq!(t.name_of('b'), Some("Junk"));
        assert_eq!(t.name_of('c'), None);
        assert_eq!(t.name_of('d'), Some("$MDNSent"));
        let m = maildir_to_imap("Sabcx", &t);
        assert_eq!(m.flags, ["\\Seen", "$Label1", "Junk"]);
        assert_eq!(m.unmapped, ['c', 'x']);
        let back = imap_to_maildir(&["junk", "\\Seen", "NewOne", "\\Recent", "\\Weird"], &mut t);
        assert_eq!(back.letters, "Sbc");
        assert_eq!(back.unmapped, ["\\Weird"]);
        assert_eq!(
            t.to_file_string(),
            "0 $Label1\n1 Junk\n2 NewOne\n3 $MDNSent\n"
        );
    }

    #[test]
    fn table_full() {
        let mut t = KeywordTable::new();
        for i in 0..26 {
            assert!(t.letter_or_assign(&format!("k{i}")).is_some());
        }
        assert_eq!(t.letter_of("k25"), Some('z'));
        let m = imap_to_maildir(&["k0", "k26"], &mut t);
        assert_eq!(m.letters, "a");
        assert_eq!(m.unmapped, ["k26"]);
    }
}
