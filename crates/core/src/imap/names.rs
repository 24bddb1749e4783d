//! Pure conversions between the Maildir and IMAP views of one mailbox: Maildir++
//! directories of IMAP folders, synthesized Maildir names of IMAP messages, Dovecot's
//! `subscriptions` file, special-use by folder name, and the fingerprint that finds a
//! message on a server (Message-ID, size of the CRLF form, internal date).

use mailvault_imap::client::fetch::header_value;
use mailvault_imap::proto::mutf7;
use mailvault_imap::SpecialUse;

/// The file name under which an IMAP backup keeps a folder's sync state.
pub const STATE_FILE: &[u8] = b"mailvault-imap-state";
/// The program part of synthesized Maildir keys (where Dovecot puts the host name).
pub const KEY_HOST: &str = "mailvault";

/// The Maildir++ directory of an IMAP folder, as Dovecot names it: empty for INBOX,
/// else `.` followed by the levels in modified UTF-7 joined with `.` (`Archive/2023` ->
/// `.Archive.2023`, `Geschäft` -> `.Gesch&AOQ-ft`). A `.` inside a level cannot be
/// represented in Maildir++ and becomes `_`.
pub fn maildir_dir(folder: &str) -> Vec<u8> {
    if folder.eq_ignore_ascii_case("INBOX") {
        return Vec::new();
    }
    let levels: Vec<String> = folder
        .split('/')
        .map(|l| mutf7::encode(l).replace('.', "_"))
        .collect();
    format!(".{}", levels.join(".")).into_bytes()
}

/// The IMAP name of a snapshot folder. Dovecot's Maildir++ directories hold names in
/// modified UTF-7, which a Maildir backup keeps as they are (`Gesch&AOQ-ft`): such
/// levels are decoded; anything else is used as it is.
pub fn imap_folder_name(name: &str) -> String {
    if !name.contains('&') {
        return name.to_string();
    }
    name.split('/')
        .map(|l| match mutf7::decode(l.as_bytes()) {
            Ok(d) => d,
            Err(_) => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
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
/// `<internaldate>.M<uid>P<uidvalidity>.mailvault,S=<size>` (`size` of the stored, LF
/// form). The key never changes while the message exists on the server, so flag changes
/// only rewrite the name.
pub fn synth_key(internal_date: i64, uid: u32, uidvalidity: u32, size: u64) -> String {
    format!("{internal_date}.M{uid}P{uidvalidity}.{KEY_HOST},S={size}")
}

/// The UID and UIDVALIDITY in a key made by [`synth_key`].
pub fn parse_key(key: &[u8]) -> Option<(u32, u32)> {
    let s = std::str::from_utf8(key).ok()?;
    let (_, rest) = s.split_once(".M")?;
    let (uid, rest) = rest.split_once('P')?;
    let (uidvalidity, rest) = rest.split_once('.')?;
    if !rest.starts_with(KEY_HOST) {
        return None;
    }
    Some((uid.parse().ok()?, uidvalidity.parse().ok()?))
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
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    pub message_id: Option<String>,
    pub size: u64,
    pub date: i64,
}

/// The Message-ID of a message (unfolded, trimmed), from its header block.
pub fn message_id(data: &[u8]) -> Option<String> {
    let end = data
        .windows(2)
        .position(|w| w == b"\n\n")
        .or_else(|| data.windows(4).position(|w| w == b"\r\n\r\n"))
        .unwrap_or(data.len());
    header_value(&data[..end.min(data.len())], "Message-ID")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dirs_and_names() {
        assert_eq!(maildir_dir("INBOX"), b"");
        assert_eq!(maildir_dir("Archive/2023"), b".Archive.2023");
        assert_eq!(maildir_dir("Gesch\u{e4}ft"), b".Gesch&AOQ-ft");
        assert_eq!(maildir_dir("v1.2"), b".v1_2");
        assert_eq!(imap_folder_name("Gesch&AOQ-ft/x"), "Gesch\u{e4}ft/x");
        assert_eq!(imap_folder_name("A&B"), "A&B");
        assert_eq!(special_use_for("Sent"), Some(SpecialUse::Sent));
        assert_eq!(special_use_for("Archive/2023"), None);
    }

    #[test]
    fn keys() {
        let k = synth_key(1_700_000_000, 42, 1234, 99);
        assert_eq!(k, "1700000000.M42P1234.mailvault,S=99");
        assert_eq!(parse_key(k.as_bytes()), Some((42, 1234)));
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
    fn message_ids() {
        assert_eq!(
            message_id(b"Subject: x\nMessage-ID:\n <a@b>\n\nMessage-ID: <no>\n").as_deref(),
            Some("<a@b>")
        );
        assert_eq!(message_id(b"Subject: x\n\nbody"), None);
    }
}
