//! The admin token: read from a file only its owner can read (mode 0600 or 0400, else
//! refused), kept as its BLAKE3 hash, and compared in constant time. It is never logged:
//! [`AdminToken`]'s `Debug` prints nothing of it.

use std::path::{Path, PathBuf};
use subtle::ConstantTimeEq;

/// Tokens shorter than this are refused: guessing one must be out of reach even without
/// the login rate limit.
pub const MIN_TOKEN_LEN: usize = 16;

/// Why a token file was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read the {what} file {path}: {source}")]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "the {what} file {path} has mode {mode:04o}: others than its owner may read or \
         write it; run `chmod 600 {path}` (0600 or 0400 only)"
    )]
    Mode {
        what: &'static str,
        path: PathBuf,
        mode: u32,
    },
    #[error("the {what} file {path} is not a regular file")]
    NotFile { what: &'static str, path: PathBuf },
    #[error(
        "the admin token in {path} is too short: give at least {MIN_TOKEN_LEN} characters \
         (e.g. `openssl rand -hex 32 > {path}`)"
    )]
    TooShort { path: PathBuf },
}

/// The admin token, as its hash.
pub struct AdminToken {
    hash: [u8; 32],
}

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

impl AdminToken {
    /// The token `secret` (tests and callers that have it in memory).
    pub fn new(secret: &[u8]) -> AdminToken {
        AdminToken {
            hash: *blake3::hash(secret).as_bytes(),
        }
    }

    /// Whether `given` is the token. Both are hashed first, so the comparison takes the
    /// same time whatever the length or the first differing byte of `given`.
    pub fn matches(&self, given: &[u8]) -> bool {
        let h = blake3::hash(given);
        h.as_bytes().ct_eq(&self.hash).into()
    }
}

/// Whether `path` is a regular file of mode 0600 or 0400: a secret (`what`: the admin
/// token, a TLS key) readable by others is refused, with the `chmod` to run.
pub fn check_private(path: &Path, what: &'static str) -> Result<(), TokenError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|source| TokenError::Read {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(TokenError::NotFile {
            what,
            path: path.to_path_buf(),
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode != 0o600 && mode != 0o400 {
        return Err(TokenError::Mode {
            what,
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Reads the admin token from `path`: the file must be a regular file of mode 0600 or
/// 0400 (owner only); the token is its content less a trailing line break, at least
/// [`MIN_TOKEN_LEN`] bytes.
pub fn read_token_file(path: &Path) -> Result<AdminToken, TokenError> {
    let read = |source| TokenError::Read {
        what: "admin token",
        path: path.to_path_buf(),
        source,
    };
    check_private(path, "admin token")?;
    let mut bytes = zeroize::Zeroizing::new(std::fs::read(path).map_err(read)?);
    while bytes.last().is_some_and(|c| *c == b'\n' || *c == b'\r') {
        bytes.pop();
    }
    if bytes.len() < MIN_TOKEN_LEN {
        return Err(TokenError::TooShort {
            path: path.to_path_buf(),
        });
    }
    Ok(AdminToken::new(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(mode: u32, text: &str) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("token");
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        (d, p)
    }

    #[test]
    fn only_owner_only_modes_are_taken() {
        for mode in [0o644, 0o640, 0o604, 0o660, 0o700, 0o602] {
            let (_d, p) = file(mode, "0123456789abcdef0123\n");
            let e = read_token_file(&p).unwrap_err();
            assert!(matches!(e, TokenError::Mode { .. }), "{mode:o}: {e}");
            assert!(e.to_string().contains("chmod 600"), "{e}");
        }
        for mode in [0o600, 0o400] {
            let (_d, p) = file(mode, "0123456789abcdef0123\n");
            let t = read_token_file(&p).unwrap();
            assert!(t.matches(b"0123456789abcdef0123"));
            assert!(!t.matches(b"0123456789abcdef0123\n"));
            assert!(!t.matches(b"0123456789abcdef012"));
            assert!(!t.matches(b""));
        }
    }

    #[test]
    fn short_or_missing_tokens_are_refused_and_never_printed() {
        let (_d, p) = file(0o600, "short\n");
        assert!(matches!(
            read_token_file(&p),
            Err(TokenError::TooShort { .. })
        ));
        let missing = p.with_file_name("nope");
        assert!(matches!(
            read_token_file(&missing),
            Err(TokenError::Read { .. })
        ));
        let t = AdminToken::new(b"supersecretvalue1234");
        assert!(!format!("{t:?}").contains("supersecret"));
    }
}
