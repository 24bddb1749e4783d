//! Server capabilities and what the client makes of them.

use super::command::LiteralMode;

/// The server's CAPABILITY list, upper-cased.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    caps: Vec<String>,
}

impl Capabilities {
    /// From the words of a CAPABILITY response or code.
    pub fn new<S: AsRef<str>>(words: &[S]) -> Self {
        Capabilities {
            caps: words
                .iter()
                .map(|w| w.as_ref().to_ascii_uppercase())
                .collect(),
        }
    }

    /// Whether `cap` is offered (case-insensitive).
    pub fn has(&self, cap: &str) -> bool {
        self.caps.iter().any(|c| c.eq_ignore_ascii_case(cap))
    }

    /// All capabilities, upper-cased.
    pub fn all(&self) -> &[String] {
        &self.caps
    }

    /// The literal form to use: LITERAL+ (RFC 7888) beats LITERAL-.
    pub fn literal_mode(&self) -> LiteralMode {
        if self.has("LITERAL+") {
            LiteralMode::NonSync
        } else if self.has("LITERAL-") {
            LiteralMode::NonSyncUpTo4096
        } else {
            LiteralMode::Sync
        }
    }

    /// `APPENDLIMIT=n` (RFC 7889): the largest message the server accepts.
    pub fn append_limit(&self) -> Option<u64> {
        self.caps
            .iter()
            .find_map(|c| c.strip_prefix("APPENDLIMIT="))
            .and_then(|n| n.parse().ok())
    }

    /// `AUTH=` mechanisms.
    pub fn auth_mechanisms(&self) -> impl Iterator<Item = &str> {
        self.caps.iter().filter_map(|c| c.strip_prefix("AUTH="))
    }
}

/// The SASL PLAIN initial response (RFC 4616), base64:
/// `authzid NUL authcid NUL password`. With a Dovecot master user the
/// authorization identity is the target user and the authentication identity
/// the master user.
pub fn sasl_plain(authzid: Option<&str>, authcid: &str, password: &str) -> String {
    let mut raw = Vec::new();
    raw.extend_from_slice(authzid.unwrap_or("").as_bytes());
    raw.push(0);
    raw.extend_from_slice(authcid.as_bytes());
    raw.push(0);
    raw.extend_from_slice(password.as_bytes());
    base64(&raw)
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(A[((n >> (18 - 6 * i)) & 0x3f) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dovecot_caps() {
        let c = Capabilities::new(&[
            "IMAP4rev1",
            "LITERAL+",
            "MULTIAPPEND",
            "AUTH=PLAIN",
            "AUTH=LOGIN",
            "APPENDLIMIT=1048576",
        ]);
        assert!(c.has("multiappend"));
        assert_eq!(c.literal_mode(), LiteralMode::NonSync);
        assert_eq!(c.append_limit(), Some(1_048_576));
        assert_eq!(c.auth_mechanisms().collect::<Vec<_>>(), ["PLAIN", "LOGIN"]);
        assert_eq!(
            Capabilities::new(&["LITERAL-"]).literal_mode(),
            LiteralMode::NonSyncUpTo4096
        );
        assert_eq!(Capabilities::default().literal_mode(), LiteralMode::Sync);
    }

    #[test]
    fn sasl_plain_vectors() {
        // RFC 4616 §4 example ("\0tim\0tanstaaftanstaaf").
        assert_eq!(
            sasl_plain(None, "tim", "tanstaaftanstaaf"),
            "AHRpbQB0YW5zdGFhZnRhbnN0YWFm"
        );
        assert_eq!(
            sasl_plain(Some("user@example.org"), "admin", "pw"),
            "dXNlckBleGFtcGxlLm9yZwBhZG1pbgBwdw=="
        );
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
    }
}
