//! Pure conversions between the Maildir and IMAP views of one mailbox: Maildir++
//! directories of IMAP folders, synthesized Maildir names of IMAP messages, Dovecot's
//! `subscriptions` file, Dovecot's `dovecot-uidlist` (the original UID order), special-use
//! by folder name, and the fingerprint that finds a message on a server (Message-ID, size
//! of the CRLF form, internal date).

use mailvault_imap::client::fetch::header_value;
use mailvault_imap::proto::mutf7;
use mailvault_imap::SpecialUse;
use std::collections::HashMap;

/// The file name under which an IMAP backup keeps a folder's sync state.
pub const STATE_FILE: &[u8] = b"mailvault-imap-state";
/// The folder file under which a snapshot keeps a folder's IMAP METADATA (RFC 5464):
/// its `/private` and `/shared` entries, for a restore into IMAP (SETMETADATA). Dovecot
/// keeps them in a dictionary outside the Maildir, so a Maildir store has no place for
/// them and a restore into one leaves this file out (and says so).
pub const METADATA_FILE: &[u8] = b"mailvault-metadata";

/// Entries a server keeps for itself, which no restore can or should set: Cyrus' own
/// (`/shared/vendor/cmu/cyrus-imapd/uniqueid`, `size`, `partition`...), and the special
/// use, which provisioning sets on CREATE.
fn server_own(entry: &str) -> bool {
    let e = entry.to_ascii_lowercase();
    [
        "/shared/vendor/cmu/cyrus-imapd/",
        "/private/vendor/cmu/cyrus-imapd/",
    ]
    .iter()
    .any(|p| e.starts_with(p))
        || e == "/private/specialuse"
        || e == "/shared/specialuse"
}

/// A folder's METADATA entries as its [`METADATA_FILE`] (JSON, `{"entry": "value"}`),
/// less those the server keeps for itself; `None` when there are none. And the entries
/// whose values are not text, left out, for the report.
pub fn metadata_file(entries: &[(String, Vec<u8>)]) -> (Option<Vec<u8>>, Vec<String>) {
    let mut map = std::collections::BTreeMap::new();
    let mut binary = Vec::new();
    for (k, v) in entries.iter().filter(|(k, _)| !server_own(k)) {
        match std::str::from_utf8(v) {
            Ok(text) => {
                map.insert(k.as_str(), text);
            }
            Err(_) => binary.push(format!("METADATA entry {k} is not text and is not kept")),
        }
    }
    let file = (!map.is_empty()).then(|| serde_json::to_vec_pretty(&map).unwrap_or_default());
    (file, binary)
}

/// The entries of a [`METADATA_FILE`].
pub fn parse_metadata_file(data: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    let map: std::collections::BTreeMap<String, String> =
        serde_json::from_slice(data).map_err(|e| format!("unreadable METADATA file: {e}"))?;
    Ok(map.into_iter().map(|(k, v)| (k, v.into_bytes())).collect())
}

/// The INBOX file under which a snapshot keeps an IMAP account's quotas (RFC 9208): its
/// roots' limits, for a restore into IMAP (SETQUOTA, by the admin). A Maildir store keeps
/// none (the limits live in the server's user database), so a restore into one leaves
/// this file out and says so.
pub const QUOTA_FILE: &[u8] = b"mailvault-quota";

/// One quota root of a [`QUOTA_FILE`] and its resources' limits (`STORAGE` in KiB).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QuotaRoot {
    pub root: String,
    pub limits: std::collections::BTreeMap<String, u64>,
}

/// An account's quota roots as its [`QUOTA_FILE`] (JSON, `[{"root": r, "limits":
/// {"STORAGE": n}}]`); `None` when it has none.
pub fn quota_file(quotas: &[mailvault_imap::Quota]) -> Option<Vec<u8>> {
    let roots: Vec<QuotaRoot> = (quotas.iter())
        .filter(|q| !q.resources.is_empty())
        .map(|q| QuotaRoot {
            root: q.root.clone(),
            limits: q
                .resources
                .iter()
                .map(|(n, _, l)| (n.clone(), *l))
                .collect(),
        })
        .collect();
    (!roots.is_empty()).then(|| serde_json::to_vec_pretty(&roots).unwrap_or_default())
}

/// The quota roots of a [`QUOTA_FILE`]. (Its resource names are the snapshot's,
/// untrusted: `Session::set_quota` sends only names that are names.)
pub fn parse_quota_file(data: &[u8]) -> Result<Vec<QuotaRoot>, String> {
    serde_json::from_slice(data).map_err(|e| format!("unreadable quota file: {e}"))
}

/// The program part of synthesized Maildir keys (where Dovecot puts the host name).
pub const KEY_HOST: &str = "mailvault";

/// The escape character of Maildir++ directory names, as Dovecot's listescape plugin
/// writes them (its default `listescape_char`): `\` followed by two lower-case hex digits.
pub const ESCAPE: char = '\\';

/// The Maildir++ directory of an IMAP folder, as Dovecot names it: empty for INBOX,
/// else `.` followed by the levels in modified UTF-7 joined with `.` (`Archive/2023` ->
/// `.Archive.2023`, `Geschäft` -> `.Gesch&AOQ-ft`). Within a level, what Maildir++
/// cannot hold is escaped as Dovecot's listescape plugin does: `.` (the separator on
/// disk) as `\2e`, the escape character `\` as `\5c`, and a leading `~` as `\7e`; so
/// `a.b` and `a_b` are `.a\2eb` and `.a_b`, one directory per folder.
pub fn maildir_dir(folder: &str) -> Vec<u8> {
    if folder.eq_ignore_ascii_case("INBOX") {
        return Vec::new();
    }
    levels_dir(folder)
}

/// The Maildir++ directory of a folder of a file tree (mbox, EML): as [`maildir_dir`],
/// except that only `INBOX` itself is INBOX. In such a tree a folder spelt `Inbox` is
/// one of its own, beside INBOX (`crate::mail::layout` keeps them apart), so it gets a
/// directory of its own, `.Inbox`, as a Maildir source names it: never merged into INBOX.
pub fn tree_maildir_dir(folder: &str) -> Vec<u8> {
    if folder == "INBOX" {
        return Vec::new();
    }
    levels_dir(folder)
}

/// The Maildir++ directory of the levels of `folder` (see [`maildir_dir`]).
fn levels_dir(folder: &str) -> Vec<u8> {
    let mut out = String::new();
    for level in folder.split('/') {
        out.push('.');
        for (i, c) in mutf7::encode(level).chars().enumerate() {
            if c == '.' || c == ESCAPE || (i == 0 && c == '~') {
                out.push_str(&format!("{ESCAPE}{:02x}", c as u32));
            } else {
                out.push(c);
            }
        }
    }
    out.into_bytes()
}

/// The IMAP name of a snapshot folder. Dovecot's Maildir++ directories hold names in
/// modified UTF-7, which a Maildir backup keeps as they are (`Gesch&AOQ-ft`): such
/// levels are decoded, and the escapes of [`maildir_dir`] (`\2e` …) undone; anything
/// else is used as it is.
pub fn imap_folder_name(name: &str) -> String {
    if !name.contains('&') && !name.contains(ESCAPE) {
        return name.to_string();
    }
    name.split('/')
        .map(|l| {
            let l = unescape_level(l);
            match mutf7::decode(l.as_bytes()) {
                Ok(d) if l.contains('&') => d,
                _ => l,
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Undoes the `\NN` escapes of one level (anything else is kept as it is).
fn unescape_level(level: &str) -> String {
    let b = level.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == ESCAPE as u8 && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|_| level.to_string())
}

/// The special use a folder gets from its (top-level) name, as mail clients name them.
pub fn special_use_for(folder: &str) -> Option<SpecialUse> {
    if folder.contains('/') {
        return None;
    }
    let n = folder.to_ascii_lowercase();
    Some(match n.as_str() {
        "sent" | "sent items" | "sent messages" | "sent mail" => SpecialUse::Sent,
        "drafts" => SpecialUse::Drafts,
        "trash" | "deleted items" | "deleted messages" => SpecialUse::Trash,
        "junk" | "spam" | "junk e-mail" => SpecialUse::Junk,
        "archive" | "archives" => SpecialUse::Archive,
        _ => return None,
    })
}

/// The Maildir key of a message backed up over IMAP, Dovecot style:
/// `<internaldate>.M<uid>P<uidvalidity>V<folder>.mailvault,S=<size>` (`size` of the
/// stored, LF form; `<folder>` the first 8 hex digits of the BLAKE3 of the folder's
/// name, so that keys differ between folders even where every folder has the same
/// UIDVALIDITY, as on Cyrus). The key never changes while the message exists on the
/// server, so flag changes only rewrite the name.
pub fn synth_key(
    folder: &str,
    internal_date: i64,
    uid: u32,
    uidvalidity: u32,
    size: u64,
) -> String {
    let f = &blake3::hash(folder.as_bytes()).to_hex()[..8];
    format!("{internal_date}.M{uid}P{uidvalidity}V{f}.{KEY_HOST},S={size}")
}

/// The UID and UIDVALIDITY in a key made by [`synth_key`] (also of the form without
/// the folder part, written before 2026-11-23).
pub fn parse_key(key: &[u8]) -> Option<(u32, u32)> {
    let s = std::str::from_utf8(key).ok()?;
    let (_, rest) = s.split_once(".M")?;
    let (uid, rest) = rest.split_once('P')?;
    let (uidvalidity, rest) = rest.split_once('.')?;
    if !rest.starts_with(KEY_HOST) {
        return None;
    }
    let uidvalidity = match uidvalidity.split_once('V') {
        Some((v, f)) if f.len() == 8 && f.bytes().all(|b| b.is_ascii_hexdigit()) => v,
        Some(_) => return None,
        None => uidvalidity,
    };
    Some((uid.parse().ok()?, uidvalidity.parse().ok()?))
}

/// The UIDs of a Dovecot `dovecot-uidlist` file, by Maildir key: version 3 (a header
/// line `3 V<uidvalidity> N<uidnext> …`, then `<uid> [<field>…] :<file name>`) and
/// version 1 (`1 <uidvalidity> <uidnext>`, then `<uid> <file name>`). The key is the file
/// name up to its `:` (Dovecot keeps the name without flags). Lines that do not parse
/// are left out.
pub fn parse_uidlist(data: &[u8]) -> HashMap<Vec<u8>, u32> {
    let mut out = HashMap::new();
    let mut lines = data.split(|&b| b == b'\n');
    let v3 = match lines.next() {
        Some(h) if h.starts_with(b"3 ") => true,
        Some(h) if h.starts_with(b"1 ") => false,
        _ => return out,
    };
    for line in lines {
        let Some(sp) = line.iter().position(|&b| b == b' ') else {
            continue;
        };
        let Some(uid) = std::str::from_utf8(&line[..sp])
            .ok()
            .and_then(|u| u.parse::<u32>().ok())
        else {
            continue;
        };
        let rest = &line[sp + 1..];
        let name = if v3 {
            // Extension fields (`W1394 S1355`) come before ` :`; a line may also start
            // with `:` directly.
            match rest.iter().position(|&b| b == b':') {
                Some(i) if i == 0 || rest[i - 1] == b' ' => &rest[i + 1..],
                _ => continue,
            }
        } else {
            rest
        };
        let key = name.split(|&b| b == b':').next().unwrap_or(name);
        if !key.is_empty() {
            out.insert(key.to_vec(), uid);
        }
    }
    out
}

/// The folders in a Dovecot `subscriptions` file: version 2 (`V\t2` header, a blank
/// line, then one name per line with hierarchy levels separated by tabs) or the older
/// form (one Maildir++ name per line, levels separated by `.`).
pub fn parse_subscriptions(data: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.lines().peekable();
    let v2 = lines.peek().is_some_and(|l| l.starts_with("V\t"));
    if v2 {
        for l in lines.by_ref() {
            if l.is_empty() {
                break;
            }
        }
    }
    lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let name = if v2 {
                l.replace('\t', "/")
            } else {
                l.replace('.', "/")
            };
            imap_folder_name(&name)
        })
        .collect()
}

/// A Dovecot `subscriptions` file (version 2) for these folders.
pub fn subscriptions_file(folders: &[String]) -> Vec<u8> {
    let mut out = b"V\t2\n\n".to_vec();
    for f in folders {
        out.extend_from_slice(f.replace('/', "\t").as_bytes());
        out.push(b'\n');
    }
    out
}

/// What identifies a message on a server without its UID: Message-ID, size of the CRLF
/// form (RFC822.SIZE) and internal date (seconds).
///
/// Servers change some messages on APPEND (docs/imap.md, "What the servers change on
/// APPEND", has the table): Dovecot drops one CR of every run of CRs before an LF
/// (`\r\r\n` is stored as `\r\n`) and a lone CR at the very end, and turns NUL bytes into
/// 0x80; Cyrus turns every 8-bit byte of the header into `X`. So the Message-ID is taken
/// in a canonical form ([`message_id`], the same function for our bytes and for the
/// server's header), and the size of a message is matched against each size a server
/// stores it with ([`Fingerprint::candidates`]). The server's bytes are never fetched
/// (that would read every message of the folder); what it gives is its RFC822.SIZE.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    pub message_id: Option<String>,
    pub size: u64,
    pub date: i64,
}

impl Fingerprint {
    /// The fingerprint of a message on the server, from `FetchQuery::fingerprint`:
    /// its Message-ID header field (`header`), RFC822.SIZE and INTERNALDATE.
    pub fn on_server(header: Option<&[u8]>, size: u64, date: i64) -> Fingerprint {
        Fingerprint {
            message_id: header.and_then(message_id),
            size,
            date,
        }
    }

    /// The fingerprints a server may hold for a message whose CRLF form (as sent) is
    /// `data`: its own size, and the size Dovecot stores it with when that differs
    /// ([`dovecot_size`]; Cyrus keeps the size). Exact sizes, not a range: a message
    /// matches only a server copy of one of these sizes.
    pub fn candidates(data: &[u8], date: i64) -> impl Iterator<Item = Fingerprint> {
        let message_id = message_id(data);
        let size = data.len() as u64;
        let dovecot = dovecot_size(data);
        let sizes = if dovecot == size {
            vec![size]
        } else {
            vec![size, dovecot]
        };
        sizes.into_iter().map(move |size| Fingerprint {
            message_id: message_id.clone(),
            size,
            date,
        })
    }
}

/// The size Dovecot (2.3) stores a message with whose CRLF form is `data`: one byte less
/// for every run of two or more CRs before an LF (`\r\r\n` becomes `\r\n`, `\r\r\r\n`
/// becomes `\r\r\n`) and one less when it ends in a CR (`\r\r` at the end becomes
/// `\r`). NUL bytes become 0x80 (same size); nothing else changes.
pub fn dovecot_size(data: &[u8]) -> u64 {
    let runs = data.windows(3).filter(|w| w == b"\r\r\n").count() as u64;
    data.len() as u64 - runs - u64::from(data.last() == Some(&b'\r'))
}

/// The Message-ID of a message (unfolded, trimmed), from its header block, in the
/// canonical form both sides of a fingerprint use: every NUL and 8-bit byte is `X`
/// (Cyrus stores 8-bit header bytes as `X`, Dovecot NUL bytes as 0x80). The header ends
/// at the first empty line, a line of nothing but CRs counting as empty (`\r\r\n`
/// line ends), so a Message-ID in the body is never taken for the message's.
pub fn message_id(data: &[u8]) -> Option<String> {
    let mut end = data.len();
    let mut start = 0;
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' {
            if data[start..i].iter().all(|&c| c == b'\r') {
                end = start;
                break;
            }
            start = i + 1;
        }
    }
    let header: Vec<u8> = data[..end]
        .iter()
        .map(|&b| if b == 0 || b >= 0x80 { b'X' } else { b })
        .collect();
    header_value(&header, "Message-ID")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An account's quota file reads back as written.
    #[test]
    fn quota_files() {
        let q = mailvault_imap::Quota {
            root: "user/alice@example.org".into(),
            resources: vec![("STORAGE".into(), 10, 512), ("MESSAGE".into(), 1, 100)],
        };
        let file = quota_file(&[q]).expect("a file");
        let limits = [("MESSAGE".to_string(), 100), ("STORAGE".to_string(), 512)];
        let want = QuotaRoot {
            root: "user/alice@example.org".into(),
            limits: limits.into(),
        };
        assert_eq!(parse_quota_file(&file), Ok(vec![want]));
        assert_eq!(quota_file(&[]), None);
        assert!(parse_quota_file(b"{}").is_err());
    }

    /// A folder's METADATA file keeps the user's entries, not the server's own, nor the
    /// special use; it reads back as it was written; non-text values are named apart.
    #[test]
    fn metadata_files() {
        let e = |k: &str, v: &[u8]| (k.to_string(), v.to_vec());
        let got = [
            e("/private/comment", b"mine"),
            e("/shared/comment", b"the team's \"plans\"\n"),
            e("/shared/vendor/cmu/cyrus-imapd/uniqueid", b"az3r"),
            e("/private/specialuse", b"\\Sent"),
            e("/shared/vendor/acme/colour", b"blue"),
            e("/private/blob", b"\xff\x00"),
        ];
        let (file, binary) = metadata_file(&got);
        assert!(
            binary.len() == 1 && binary[0].contains("/private/blob"),
            "{binary:?}"
        );
        let back = parse_metadata_file(&file.expect("a file")).expect("parses");
        assert_eq!(back, vec![got[0].clone(), got[1].clone(), got[4].clone()]);
        assert_eq!(metadata_file(&got[2..4]).0, None, "nothing of the user's");
        assert!(parse_metadata_file(b"[1,2]").is_err());
    }

    #[test]
    fn dirs_and_names() {
        assert_eq!(maildir_dir("INBOX"), b"");
        assert_eq!(maildir_dir("Archive/2023"), b".Archive.2023");
        assert_eq!(maildir_dir("Inbox"), b"");
        assert_eq!(tree_maildir_dir("Inbox"), b".Inbox");
        assert_eq!(tree_maildir_dir("INBOX"), b"");
        assert_eq!(tree_maildir_dir("a.b/c"), maildir_dir("a.b/c"));
        assert_eq!(maildir_dir("Gesch\u{e4}ft"), b".Gesch&AOQ-ft");
        // One directory per folder: the separator inside a level is escaped as
        // Dovecot's listescape does.
        assert_eq!(maildir_dir("v1.2"), b".v1\\2e2");
        assert_eq!(maildir_dir("a_b"), b".a_b");
        assert_eq!(maildir_dir("~x/a\\b"), b".\\7ex.a\\5cb");
        assert_eq!(imap_folder_name("v1\\2e2/a\\5cb"), "v1.2/a\\b");
        assert_eq!(imap_folder_name("Gesch&AOQ-ft\\2e1"), "Gesch\u{e4}ft.1");
        assert_eq!(imap_folder_name("a\\zz"), "a\\zz");
        assert_eq!(imap_folder_name("Gesch&AOQ-ft/x"), "Gesch\u{e4}ft/x");
        assert_eq!(imap_folder_name("A&B"), "A&B");
        assert_eq!(special_use_for("Sent"), Some(SpecialUse::Sent));
        assert_eq!(special_use_for("Archive/2023"), None);
    }

    #[test]
    fn keys() {
        let k = synth_key("INBOX", 1_700_000_000, 42, 1234, 99);
        let f = &blake3::hash(b"INBOX").to_hex()[..8];
        assert_eq!(k, format!("1700000000.M42P1234V{f}.mailvault,S=99"));
        assert_eq!(parse_key(k.as_bytes()), Some((42, 1234)));
        // Cyrus: every folder of an account has the same UIDVALIDITY; keys still differ.
        assert_ne!(k, synth_key("Sent", 1_700_000_000, 42, 1234, 99));
        // Keys of older IMAP backups.
        assert_eq!(
            parse_key(b"1700000000.M42P1234.mailvault,S=99"),
            Some((42, 1234))
        );
        assert_eq!(parse_key(b"1700000000.M1P2.mail01,S=10"), None);
    }

    #[test]
    fn subscriptions() {
        let f = subscriptions_file(&["Sent".into(), "Archive/2023".into()]);
        assert_eq!(f, b"V\t2\n\nSent\nArchive\t2023\n");
        assert_eq!(parse_subscriptions(&f), ["Sent", "Archive/2023"]);
        assert_eq!(
            parse_subscriptions(b"Sent\nArchive.2023\n"),
            ["Sent", "Archive/2023"]
        );
    }

    #[test]
    fn uidlists() {
        let v3 = b"3 V1700000000 N5 G0123\n1 :1.M1P1.h\n3 W120 S118 :3.M3P3.h:2,S\n2 :2.M2P2.h,S=5\nbad\n";
        let m = parse_uidlist(v3);
        assert_eq!(m.len(), 3);
        assert_eq!(m[&b"1.M1P1.h"[..]], 1);
        assert_eq!(m[&b"3.M3P3.h"[..]], 3);
        assert_eq!(m[&b"2.M2P2.h,S=5"[..]], 2);
        let v1 = parse_uidlist(b"1 1700000000 3\n1 1.M1P1.h:2,S\n2 2.M2P2.h\n");
        assert_eq!((v1[&b"1.M1P1.h"[..]], v1[&b"2.M2P2.h"[..]]), (1, 2));
        assert!(parse_uidlist(b"garbage\n1 :x\n").is_empty());
    }

    #[test]
    fn fingerprints_tolerate_what_dovecot_drops() {
        let sizes =
            |d: &[u8]| -> Vec<u64> { Fingerprint::candidates(d, 1).map(|f| f.size).collect() };
        assert_eq!(sizes(b"Subject: x\r\n\r\nbody\r\n"), [20]);
        assert_eq!(sizes(b"Subject: x\r\n\r\nbody\r"), [19, 18]);
        // What the probe against Dovecot 2.3 found (docs/imap.md).
        assert_eq!(sizes(b"a\r\r"), [3, 2]);
        assert_eq!(sizes(b"a\r\r\nb\r\r\r\nc\r\n"), [12, 10]);
        assert_eq!(sizes(b"a\rb\r\n\rc\0"), [8]);
        assert_eq!(sizes(b"a\r\r\n\r\r"), [6, 4]);
    }

    #[test]
    fn message_ids() {
        assert_eq!(
            message_id(b"Subject: x\nMessage-ID:\n <a@b>\n\nMessage-ID: <no>\n").as_deref(),
            Some("<a@b>")
        );
        assert_eq!(message_id(b"Subject: x\n\nbody"), None);
        // Line ends of `\r\r\n`: the header still ends at its empty line.
        assert_eq!(
            message_id(b"Subject: x\r\r\n\r\r\nMessage-ID: <in-body@x>\r\r\n"),
            None
        );
        assert_eq!(
            message_id(b"Message-ID: <a@x>\r\r\n\r\r\nb").as_deref(),
            Some("<a@x>")
        );
        // 8-bit and NUL bytes as `X`: what Cyrus stores, and Dovecot's 0x80 for NUL.
        let utf8 = "Message-ID: <gr\u{fc}\u{df}e@x>\r\n\r\n";
        assert_eq!(message_id(utf8.as_bytes()).as_deref(), Some("<grXXXXe@x>"));
        assert_eq!(
            message_id(b"Message-ID: <grXXXXe@x>\r\n\r\n").as_deref(),
            Some("<grXXXXe@x>")
        );
        assert_eq!(
            message_id(b"Message-ID: <a\0b\x80@x>\r\n").as_deref(),
            Some("<aXbX@x>")
        );
    }
}
