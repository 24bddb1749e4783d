//! Maildir names: a message file's key and info (`<key>:2,<flags>`), the display name of a
//! Maildir++ folder directory, and the checks every name read back from a repository
//! passes before it becomes a path.

/// Splits a Maildir file name into its key and its info (flags and keywords after `:2,`).
pub fn split_name(name: &[u8]) -> (&[u8], &[u8]) {
    if let Some(pos) = name.windows(3).rposition(|w| w == b":2," || w == b":1,") {
        (&name[..pos], &name[pos + 3..])
    } else {
        (name, b"")
    }
}

/// The display name of a Maildir++ folder directory (`.Archive.2023` -> `Archive/2023`).
pub fn folder_name(dir: &[u8]) -> String {
    if dir.is_empty() {
        return "INBOX".into();
    }
    let inner = dir.strip_prefix(b".").unwrap_or(dir);
    String::from_utf8_lossy(inner).replace('.', "/")
}

/// Checks that a name from a repository is a single, safe path component.
pub fn safe_component(name: &[u8]) -> bool {
    !name.is_empty() && name != b"." && name != b".." && !name.contains(&b'/') && !name.contains(&0)
}

/// Checks a relative path from a repository: no absolute path, no `..`.
pub fn safe_relative(path: &[u8]) -> bool {
    path.is_empty() || (path[0] != b'/' && path.split(|&c| c == b'/').all(safe_component))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(
            split_name(b"123.M1P2.host,S=99:2,RS"),
            (&b"123.M1P2.host,S=99"[..], &b"RS"[..])
        );
        assert_eq!(
            split_name(b"123.M1P2.host"),
            (&b"123.M1P2.host"[..], &b""[..])
        );
        assert_eq!(split_name(b"a:2,b:2,S"), (&b"a:2,b"[..], &b"S"[..]));
        assert_eq!(folder_name(b""), "INBOX");
        assert_eq!(folder_name(b".Archive.2023"), "Archive/2023");
        assert!(safe_relative(b"example.org/bob/Maildir"));
        assert!(!safe_relative(b"../etc"));
        assert!(!safe_relative(b"/etc"));
        assert!(!safe_component(b"a/b"));
    }
}
