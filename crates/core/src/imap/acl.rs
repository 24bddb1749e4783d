//! Access control lists between Dovecot's `dovecot-acl` files (its `vfile` backend) and
//! IMAP's ACL commands (RFC 4314). A snapshot keeps a folder's list in Dovecot's form
//! whatever its source: a Maildir store's file as it is, an IMAP account's GETACL written
//! as such a file ([`dovecot_acl_file`]); a restore into a Maildir writes the file, one
//! into IMAP sets each entry ([`parse_dovecot_acl`], SETACL). Dovecot's rights letters
//! are RFC 4314's; the identifiers differ in form only (`docs/imap.md` has the table).

/// The rights letters of RFC 4314, which Dovecot's files use too.
pub const RIGHTS: &str = "lrwstipekxa";

/// One entry of an access control list, in IMAP's terms.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct AclRule {
    /// `anyone`, `authenticated`, `owner`, a user, `$group`; `-` before it for negative
    /// rights.
    pub identifier: String,
    pub rights: String,
}

/// An identifier's sign and name: `-bob` is (`-`, `bob`), negative rights.
fn sign(id: &str) -> (&'static str, &str) {
    match id.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", id),
    }
}

/// The entries of a Dovecot `dovecot-acl` file as IMAP identifiers and rights, and the
/// lines IMAP cannot say whole, with what becomes of them (said in the report, never
/// dropped in silence).
///
/// A line is `[-]<identifier> <rights>`: `owner`, `user=<name>`, `group=<name>`,
/// `group-override=<name>`, `authenticated`, `anyone`; rights are letters of
/// `lrwstipekxa`, possibly followed by `:<flag names>` (Dovecot's private-flag rights,
/// which IMAP has no word for). `#` starts a comment.
pub fn parse_dovecot_acl(text: &[u8]) -> (Vec<AclRule>, Vec<(String, &'static str)>) {
    let mut rules = Vec::new();
    let mut odd = Vec::new();
    for line in String::from_utf8_lossy(text).lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        const NONE: &str = "no IMAP form; not restored";
        let Some((id, rights)) = line.rsplit_once(|c: char| c.is_ascii_whitespace()) else {
            odd.push((line.to_string(), NONE));
            continue;
        };
        let (neg, id) = sign(id.trim());
        let name = match id.split_once('=') {
            None if matches!(id, "owner" | "anyone" | "authenticated") => id.to_string(),
            Some(("user", u)) if !u.is_empty() => u.to_string(),
            Some(("group", g)) if !g.is_empty() => format!("${g}"),
            Some(("group-override", g)) if !g.is_empty() => format!("!${g}"),
            _ => {
                odd.push((line.to_string(), NONE));
                continue;
            }
        };
        let (letters, flags) = rights.split_once(':').unwrap_or((rights, ""));
        if !letters.chars().all(|c| RIGHTS.contains(c)) {
            odd.push((line.to_string(), NONE));
            continue;
        }
        if !flags.is_empty() {
            odd.push((
                line.to_string(),
                "rights on private flags have no IMAP form; its letters are restored",
            ));
        }
        rules.push(AclRule {
            identifier: format!("{neg}{name}"),
            rights: letters.to_string(),
        });
    }
    (rules, odd)
}

/// A `dovecot-acl` file with its `user=` entries renamed as `users` says; every other
/// line (comments, groups, `owner`) as it is.
pub fn rename_in_file(text: &[u8], users: &[(String, String)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for line in text.split_inclusive(|&c| c == b'\n') {
        let s = String::from_utf8_lossy(line);
        let (neg, rest) = sign(&s);
        let renamed = rest.strip_prefix("user=").and_then(|r| {
            let end = r.find(|c: char| c.is_ascii_whitespace()).unwrap_or(r.len());
            let (_, new) = users.iter().find(|(old, _)| old == &r[..end])?;
            Some(format!("{neg}user={new}{}", &r[end..]))
        });
        match renamed {
            Some(r) => out.extend_from_slice(r.as_bytes()),
            None => out.extend_from_slice(line),
        }
    }
    out
}

/// An IMAP identifier as Dovecot's file writes it: `anyone`, `authenticated` and
/// `owner` as they are, `$g` as `group=g`, `!$g` as `group-override=g`, Cyrus' `group:g`
/// as `group=g`, anyone else as `user=<name>`; `-` stays in front.
fn file_identifier(id: &str) -> String {
    let (neg, id) = sign(id);
    let form = if matches!(id, "anyone" | "authenticated" | "owner") {
        id.to_string()
    } else if let Some(g) = id.strip_prefix("!$") {
        format!("group-override={g}")
    } else if let Some(g) = id.strip_prefix('$').or_else(|| id.strip_prefix("group:")) {
        format!("group={g}")
    } else {
        format!("user={id}")
    };
    format!("{neg}{form}")
}

/// RFC 4314 rights as Dovecot's letters: the obsolete `c` and `d` (RFC 2086) as the
/// rights they stand for (`c`: `k` and `x`; `d`: `e` and `t`), in [`RIGHTS`] order, and
/// the letters Dovecot's file cannot keep: a server's own, and RFC 5464's `n` (write
/// shared annotations, which Cyrus lists), though not beside `a`, whose holder may give
/// it to anyone.
fn file_rights(rights: &str) -> (String, String) {
    let mut have: Vec<char> = Vec::new();
    let mut unknown = String::new();
    let admin = rights.contains('a');
    for c in rights.chars() {
        match c {
            'c' => have.extend(['k', 'x']),
            'd' => have.extend(['e', 't']),
            'n' if admin => {}
            c if RIGHTS.contains(c) => have.push(c),
            c => unknown.push(c),
        }
    }
    let have = RIGHTS.chars().filter(|c| have.contains(c)).collect();
    (have, unknown)
}

/// A folder's ACL as read with GETACL, as a `dovecot-acl` file: the account's own entry
/// (servers list the owner by name) as `owner`, and left out when it has every right,
/// which Dovecot gives the owner by default; `None` when nothing else is left (the
/// default list needs no file). And what is not kept, for the report: letters that are
/// no right of RFC 4314, and identifiers that cannot be one word of a line (blanks or
/// control characters: a server's, untrusted, would otherwise add lines to the file).
pub fn dovecot_acl_file(
    entries: &[mailvault_imap::AclEntry],
    account: &str,
) -> (Option<Vec<u8>>, Vec<String>) {
    let mut out = String::new();
    let mut odd = Vec::new();
    for e in entries {
        let id = e.identifier.as_str();
        if id.is_empty() || id.chars().any(|c| c.is_whitespace() || c.is_control()) {
            odd.push(format!(
                "the ACL entry for {id:?} is not kept: no file can name it"
            ));
            continue;
        }
        let (rights, unknown) = file_rights(&e.rights);
        if !unknown.is_empty() {
            odd.push(format!(
                "ACL letters that are no right of RFC 4314 are not kept: {id} {}: {unknown:?}",
                e.rights
            ));
        }
        let id = if id == account { "owner" } else { id };
        if id == "owner" && rights == RIGHTS {
            continue;
        }
        out.push_str(&format!("{} {rights}\n", file_identifier(id)));
    }
    ((!out.is_empty()).then(|| out.into_bytes()), odd)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(identifier: &str, rights: &str) -> AclRule {
        AclRule {
            identifier: identifier.into(),
            rights: rights.into(),
        }
    }

    /// Every identifier form of Dovecot's vfile, negative rights, comments; lines with
    /// no IMAP form are returned, not dropped.
    #[test]
    fn dovecot_acl_files_become_imap_rules() {
        let file = b"# team folder\n\
            owner lrwstipekxa\n\
            user=bob@example.org lr\n\
            -user=carol@example.org x\n\
            group=staff lrs\n\
            group-override=interns l\n\
            authenticated l\n\
            anyone \n\
            user=dave lrw:$Label1\n\
            nobody=x lr\n\
            user=eve lrZ\n";
        let (rules, odd) = parse_dovecot_acl(file);
        assert_eq!(
            rules,
            vec![
                rule("owner", "lrwstipekxa"),
                rule("bob@example.org", "lr"),
                rule("-carol@example.org", "x"),
                rule("$staff", "lrs"),
                rule("!$interns", "l"),
                rule("authenticated", "l"),
                rule("dave", "lrw"),
            ]
        );
        let odd: Vec<&str> = odd.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            odd,
            vec![
                "anyone",
                "user=dave lrw:$Label1",
                "nobody=x lr",
                "user=eve lrZ"
            ]
        );
    }

    /// A migration's renamed accounts: the file's entries naming them, negative ones too,
    /// name the new names; nothing else changes, byte for byte.
    #[test]
    fn renamed_users() {
        let users = vec![("bob@old.example".to_string(), "bob@new.example".to_string())];
        let file = b"# team\nuser=bob@old.example lr\n-user=bob@old.example x\nuser=bob@old.example.net l\nowner lrwstipekxa";
        assert_eq!(
            String::from_utf8_lossy(&rename_in_file(file, &users)),
            "# team\nuser=bob@new.example lr\n-user=bob@new.example x\nuser=bob@old.example.net l\nowner lrwstipekxa"
        );
        assert!(rename_in_file(file, &[]) == file.to_vec());
    }

    fn entry(identifier: &str, rights: &str) -> mailvault_imap::AclEntry {
        mailvault_imap::AclEntry {
            identifier: identifier.into(),
            rights: rights.into(),
        }
    }

    /// GETACL as Dovecot and Cyrus answer it becomes a file that reads back as the same
    /// rules (obsolete letters expanded); the default list needs no file.
    #[test]
    fn getacl_becomes_a_dovecot_acl_file_and_back() {
        let me = "alice@example.org";
        for owner in ["lrwstipekxacd", "lrswipkxtecdan"] {
            let (file, odd) = dovecot_acl_file(&[entry(me, owner)], me);
            assert_eq!((file, odd.len()), (None, 0), "the default list, {owner}");
        }
        let (_, odd) = dovecot_acl_file(&[entry("bob", "lrn")], me);
        assert!(
            odd.len() == 1 && odd[0].ends_with("bob lrn: \"n\""),
            "n without a: {odd:?}"
        );
        // A server's identifier that would add a line to the file is not written.
        let (file, odd) = dovecot_acl_file(&[entry("x lr\nanyone", "lrwstipekxa")], me);
        assert_eq!((file, odd.len()), (None, 1), "{odd:?}");
        let got = [
            entry("bob@example.org", "lr"),
            entry("carol@example.org", "eilprwtsd"),
            entry("-dave", "x"),
            entry("$staff", "lrs"),
            entry("group:interns", "l"),
            entry("anyone", "p"),
            entry(me, "lrwstipekxacd"),
            entry("eve", "lrZ"),
        ];
        let (file, odd) = dovecot_acl_file(&got, me);
        let file = file.expect("a file");
        assert_eq!(
            String::from_utf8_lossy(&file),
            "user=bob@example.org lr\nuser=carol@example.org lrwstipe\n-user=dave x\n\
             group=staff lrs\ngroup=interns l\nanyone p\nuser=eve lr\n"
        );
        assert!(
            odd.len() == 1 && odd[0].ends_with("eve lrZ: \"Z\""),
            "{odd:?}"
        );
        let (rules, odd) = parse_dovecot_acl(&file);
        assert!(odd.is_empty(), "{odd:?}");
        assert_eq!(rules[1], rule("carol@example.org", "lrwstipe"));
        assert_eq!(rules[2], rule("-dave", "x"));
        assert_eq!(rules[4], rule("$interns", "l"));
        assert_eq!(rules.len(), 7);
        // The owner with fewer rights than all keeps them, as `owner`.
        let (file, _) = dovecot_acl_file(&[entry(me, "lr"), entry("owner", "lrs")], me);
        assert_eq!(file.as_deref(), Some(b"owner lr\nowner lrs\n".as_slice()));
    }
}
