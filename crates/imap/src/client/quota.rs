//! Quotas (RFC 9208, formerly RFC 2087): GETQUOTAROOT and SETQUOTA, for servers that
//! offer `QUOTA`.

use super::session::Session;
use crate::error::{Error, Result};
use crate::proto::response::Untagged;

/// A quota root and its resources' limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// The root (`user/alice@example.org` on Cyrus, `User quota` on Dovecot).
    pub root: String,
    /// (resource, usage, limit): `STORAGE` in KiB, `MESSAGE` in messages.
    pub resources: Vec<(String, u64, u64)>,
}

impl Session {
    /// Whether the server offers quotas.
    pub fn has_quota(&self) -> bool {
        self.caps.has("QUOTA")
    }

    /// GETQUOTAROOT: the quota roots of `folder` with their resources (none: no quota
    /// applies to it).
    pub fn quota_roots(&mut self, folder: &str) -> Result<Vec<Quota>> {
        if !self.has_quota() {
            return Err(Error::Unsupported {
                server: self.server.clone(),
                what: "QUOTA (RFC 9208)".into(),
            });
        }
        let name = self.server_name(folder)?;
        let mut b = self.command("GETQUOTAROOT");
        b.sp().mailbox(&name);
        let cmd = b.finish();
        let mut roots = Vec::new();
        let mut quotas = Vec::new();
        self.run_ok(cmd, "GETQUOTAROOT", Some(folder), &mut |u| {
            match u {
                Untagged::QuotaRoot { roots: r, .. } => roots.extend(r),
                Untagged::Quota { root, resources } => quotas.push(Quota {
                    root: String::from_utf8_lossy(&root).into_owned(),
                    resources,
                }),
                _ => {}
            }
            Ok(())
        })?;
        let listed = |q: &Quota| roots.iter().any(|r| r == q.root.as_bytes());
        quotas.retain(listed);
        Ok(quotas)
    }

    /// SETQUOTA: gives `root` these limits (resource, limit); only an administrator may.
    /// A resource that is no name (letters, digits, `-`, `_`) is refused before anything
    /// is sent: limits may come from an untrusted snapshot.
    pub fn set_quota<'n>(
        &mut self,
        root: &str,
        limits: impl IntoIterator<Item = (&'n str, u64)> + Clone,
    ) -> Result<()> {
        if let Some((name, _)) = limits
            .clone()
            .into_iter()
            .find(|(n, _)| !is_resource_name(n))
        {
            return Err(Error::InvalidArgument {
                account: self.account.clone(),
                what: "quota resource",
                value: name.to_string(),
                reason: "not a resource name (letters, digits, '-', '_')",
            });
        }
        let mut b = self.command("SETQUOTA");
        b.sp().astring_owned(root.as_bytes().to_vec()).raw(b" (");
        for (i, (name, limit)) in limits.into_iter().enumerate() {
            if i > 0 {
                b.sp();
            }
            b.raw(name.as_bytes()).sp().number(limit);
        }
        b.raw(b")");
        let cmd = b.finish();
        self.run_ok(cmd, "SETQUOTA", None, &mut |_| Ok(()))?;
        Ok(())
    }
}

/// Whether `name` can be a quota resource (an atom of letters, digits, `-` and `_`: RFC
/// 9208's `STORAGE`, `MESSAGE`, `MAILBOX`, `ANNOTATION-STORAGE`).
pub fn is_resource_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names() {
        for ok in ["STORAGE", "MESSAGE", "ANNOTATION-STORAGE", "x_1"] {
            assert!(is_resource_name(ok), "{ok}");
        }
        for bad in ["", "STORAGE 1)\r\nA1 DELETE INBOX", "a b", "(x)"] {
            assert!(!is_resource_name(bad), "{bad:?}");
        }
    }
}
