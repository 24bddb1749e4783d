//! EML exports: one `.eml` file per message, its bytes untouched. Names sort by internal
//! date and stay unique in a folder (`20261124T070000Z-<first 8 hex of the message's
//! BLAKE3>.eml`, then `_2`, `_3`... before `.eml` on a collision, sorting after the first); the file's mtime is the
//! internal date (set by the target). Flags, keywords and the date are kept in a sidecar
//! file per folder, [`SIDECAR`], one line per message file:
//!
//! ```text
//! # mailvault flags 1: <file name> <internal date, Unix seconds, or -> <flags and keywords>
//! 20261124T070000Z-0123abcd.eml 1795503600 \Seen \Flagged $Label1
//! ```
//!
//! File names and keywords are written with every byte outside `!`..`~`, and `%` and `#`,
//! as `%XX`. A file the sidecar does not name has no flags and its mtime as the date.

use std::collections::HashSet;

use super::{MailError, Meta};

/// The flags sidecar's file name, in each folder directory of an EML tree.
pub const SIDECAR: &str = ".mailvault-flags";

/// The sidecar's first line.
pub const SIDECAR_HEADER: &str =
    "# mailvault flags 1: <file name> <internal date, Unix seconds, or -> <flags and keywords>\n";

/// Whether a file of an EML tree is a message (`*.eml`, any case).
pub fn is_eml(name: &[u8]) -> bool {
    name.len() > 4 && name[name.len() - 4..].eq_ignore_ascii_case(b".eml")
}

/// `secs` as the name's date stamp, `20261124T070000Z` (UTC).
pub fn stamp(secs: i64) -> String {
    jiff::Timestamp::from_second(secs)
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH)
        .to_zoned(jiff::tz::TimeZone::UTC)
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string()
}

/// The names given out in one folder of an export.
#[derive(Debug, Default)]
pub struct EmlNames {
    used: HashSet<Vec<u8>>,
}

impl EmlNames {
    /// No name used yet.
    pub fn new() -> Self {
        EmlNames::default()
    }

    /// Marks a name as used (a file already in the folder).
    pub fn insert_existing(&mut self, name: &[u8]) {
        self.used.insert(name.to_vec());
    }

    /// A new, unique name for a message with this internal date and bytes.
    pub fn name(&mut self, internal_date: i64, bytes: &[u8]) -> String {
        let hash = blake3::hash(bytes).to_hex();
        let base = format!("{}-{}", stamp(internal_date), &hash[..8]);
        let mut name = format!("{base}.eml");
        let mut n = 2u64;
        while self.used.contains(name.as_bytes()) {
            name = format!("{base}_{n}.eml");
            n += 1;
        }
        self.used.insert(name.as_bytes().to_vec());
        name
    }
}

/// One line of a sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarEntry {
    /// The message file's name (bytes, as the file system has it).
    pub name: Vec<u8>,
    /// Its flags, keywords and internal date.
    pub meta: Meta,
}

impl SidecarEntry {
    /// The entry's line, newline included (what a target appends as it writes files).
    pub fn line(&self) -> Vec<u8> {
        let mut out = escape(&self.name);
        out.push(b' ');
        match self.meta.internal_date {
            Some(d) => out.extend_from_slice(d.to_string().as_bytes()),
            None => out.push(b'-'),
        }
        for f in self.meta.flags.iter().chain(&self.meta.keywords) {
            out.push(b' ');
            out.extend_from_slice(&escape(f.as_bytes()));
        }
        out.push(b'\n');
        out
    }
}

/// A folder's sidecar: its entries in file order (a name given twice: the last counts).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sidecar {
    pub entries: Vec<SidecarEntry>,
}

impl Sidecar {
    /// Parses a sidecar; empty lines and `#` comments are skipped, unknown `\`-flags
    /// ignored.
    pub fn parse(text: &[u8]) -> Result<Sidecar, MailError> {
        let mut entries = Vec::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() || line[0] == b'#' {
                continue;
            }
            let err = |detail: String| MailError::Sidecar {
                line: i + 1,
                detail,
            };
            let mut tokens = line.split(|&b| b == b' ').filter(|t| !t.is_empty());
            let name = tokens
                .next()
                .map(unescape)
                .transpose()
                .map_err(err)?
                .ok_or_else(|| err("no file name".into()))?;
            let date = match tokens.next() {
                Some(b"-") => None,
                Some(d) => Some(
                    std::str::from_utf8(d)
                        .ok()
                        .and_then(|d| d.parse::<i64>().ok())
                        .ok_or_else(|| {
                            err(format!(
                                "date {:?} is not Unix seconds",
                                String::from_utf8_lossy(d)
                            ))
                        })?,
                ),
                None => return Err(err("no date (a number or -)".into())),
            };
            let mut list = Vec::new();
            for t in tokens {
                let t = unescape(t).map_err(err)?;
                list.push(String::from_utf8(t).map_err(|e| {
                    err(format!(
                        "flag {:?} is not UTF-8",
                        String::from_utf8_lossy(e.as_bytes())
                    ))
                })?);
            }
            entries.push(SidecarEntry {
                name,
                meta: Meta::from_imap(&list, date),
            });
        }
        Ok(Sidecar { entries })
    }

    /// The sidecar's text, header line first.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = SIDECAR_HEADER.as_bytes().to_vec();
        for e in &self.entries {
            out.extend(e.line());
        }
        out
    }

    /// The flags, keywords and date of file `name`.
    pub fn get(&self, name: &[u8]) -> Option<&Meta> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.name == name)
            .map(|e| &e.meta)
    }
}

fn escape(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    for &c in b {
        if (b'!'..=b'~').contains(&c) && c != b'%' && c != b'#' {
            out.push(c);
        } else {
            out.extend_from_slice(format!("%{c:02X}").as_bytes());
        }
    }
    out
}

fn unescape(b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad escape in {:?}", String::from_utf8_lossy(b)))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_by_date_and_stay_unique() {
        let mut n = EmlNames::new();
        let a = n.name(1795503600, b"one");
        assert_eq!(
            a,
            format!(
                "20261124T070000Z-{}.eml",
                &blake3::hash(b"one").to_hex()[..8]
            )
        );
        assert_eq!(n.name(1795503600, b"one"), a.replace(".eml", "_2.eml"));
        assert_eq!(n.name(1795503600, b"one"), a.replace(".eml", "_3.eml"));
        // A taken name's successors sort after it.
        assert!(a < a.replace(".eml", "_2.eml"));
        let earlier = n.name(1795503599, b"two");
        let later = n.name(1795503601, b"zero");
        assert!(earlier < a && a < later);
        n.insert_existing(b"19700101T000000Z-af1349b9.eml");
        assert_eq!(n.name(0, b""), "19700101T000000Z-af1349b9_2.eml");
        assert!(is_eml(b"x.EML") && !is_eml(b".eml") && !is_eml(b"x.emlx"));
    }

    #[test]
    fn sidecar_transcript() {
        let text = b"# mailvault flags 1: <file name> <internal date, Unix seconds, or -> <flags and keywords>\n\
20261124T070000Z-0123abcd.eml 1795503600 \\Seen \\Flagged $Label1\n\
\n\
odd%20name%0A%25%23.eml - \\Draft \\Recent \\Weird k%C3%A9\n\
plain.eml -5\n";
        let s = Sidecar::parse(text).unwrap();
        assert_eq!(s.entries.len(), 3);
        let m = s.get(b"20261124T070000Z-0123abcd.eml").unwrap();
        assert_eq!(m.flags, ["\\Seen", "\\Flagged"]);
        assert_eq!(m.keywords, ["$Label1"]);
        assert_eq!(m.internal_date, Some(1795503600));
        let m = s.get(b"odd name\n%#.eml").unwrap();
        assert_eq!(m.flags, ["\\Draft"]);
        assert_eq!(m.keywords, ["ké"]);
        assert_eq!(m.internal_date, None);
        assert_eq!(s.get(b"plain.eml").unwrap().internal_date, Some(-5));
        // Written back (unknown flags were dropped) and parsed again: the same.
        let again = Sidecar::parse(&s.to_bytes()).unwrap();
        assert_eq!(again, s);
        assert_eq!(
            s.entries[1].line(),
            b"odd%20name%0A%25%23.eml - \\Draft k%C3%A9\n"
        );
    }

    #[test]
    fn sidecar_errors_name_the_line() {
        for (text, line) in [
            (&b"a.eml x\n"[..], 1),
            (b"\n\na.eml\n", 3),
            (b"a%zz.eml 1\n", 1),
            (b"a.eml 1 %FF\n", 1),
        ] {
            match Sidecar::parse(text) {
                Err(MailError::Sidecar { line: l, .. }) => assert_eq!(l, line),
                other => panic!("{other:?}"),
            }
        }
    }
}
