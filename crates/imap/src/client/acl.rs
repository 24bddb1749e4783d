//! Access control lists (RFC 4314): GETACL, SETACL, DELETEACL and MYRIGHTS, on a
//! folder given as a mailvault path (`Team/Projects`), for servers that offer `ACL`.

use super::session::Session;
use crate::error::{Error, Result};
use crate::proto::response::{Status, Untagged};

/// One entry of a folder's access control list.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct AclEntry {
    /// Who: a user (`bob@example.org`), `anyone`, `authenticated`, a group (`$team`
    /// on Dovecot, `group:team` on Cyrus); a leading `-` holds negative rights.
    pub identifier: String,
    /// The rights' letters (RFC 4314: `lrswipkxtea`, in the server's order).
    pub rights: String,
}

impl Session {
    /// Whether the server offers ACL commands.
    pub fn has_acl(&self) -> bool {
        self.caps.has("ACL")
    }

    fn require_acl(&self) -> Result<()> {
        if self.has_acl() {
            Ok(())
        } else {
            Err(Error::Unsupported {
                server: self.server.clone(),
                what: "ACL (RFC 4314)".into(),
            })
        }
    }

    /// GETACL: the folder's access control list, in the server's order (the user
    /// needs the `a` right on it).
    pub fn get_acl(&mut self, folder: &str) -> Result<Vec<AclEntry>> {
        let mut got = self.get_acl_many(&[folder])?;
        got.pop().unwrap_or_else(|| Err(self.missing_answer()))
    }

    /// GETACL of every folder, pipelined (`Session::per_folder`): one round trip for up
    /// to 64 folders. The outer error means the server has no ACL or the connection
    /// failed; else one result per folder, in order, each as [`Session::get_acl`] gives
    /// it (a folder the login may not read the list of is refused on its own).
    pub fn get_acl_many(&mut self, folders: &[&str]) -> Result<Vec<Result<Vec<AclEntry>>>> {
        self.require_acl()?;
        self.per_folder(
            folders,
            &mut |s, name| {
                let mut b = s.command("GETACL");
                b.sp().mailbox(name);
                b.finish()
            },
            &mut |u| match u {
                Untagged::Acl { mailbox, entries } => Some((mailbox, entries)),
                _ => None,
            },
            &mut |s, folder, status, got| match status.status {
                Status::Ok => Ok((got.into_iter().flatten())
                    .map(|(id, rights)| AclEntry {
                        identifier: String::from_utf8_lossy(&id).into_owned(),
                        rights: String::from_utf8_lossy(&rights).into_owned(),
                    })
                    .collect()),
                _ => Err(s.command_error("GETACL", Some(folder), &status)),
            },
        )
    }

    /// SETACL: gives `identifier` exactly `rights` on the folder (replacing what it
    /// had; a leading `-` on the identifier sets negative rights).
    pub fn set_acl(&mut self, folder: &str, identifier: &str, rights: &str) -> Result<()> {
        self.require_acl()?;
        let name = self.server_name(folder)?;
        let mut b = self.command("SETACL");
        b.sp().mailbox(&name);
        b.sp().astring_owned(identifier.as_bytes().to_vec());
        b.sp().astring_owned(rights.as_bytes().to_vec());
        let cmd = b.finish();
        self.run_ok(cmd, "SETACL", Some(folder), &mut |_| Ok(()))?;
        Ok(())
    }

    /// DELETEACL: removes `identifier`'s entry from the folder's list.
    pub fn delete_acl(&mut self, folder: &str, identifier: &str) -> Result<()> {
        self.require_acl()?;
        let name = self.server_name(folder)?;
        let mut b = self.command("DELETEACL");
        b.sp().mailbox(&name);
        b.sp().astring_owned(identifier.as_bytes().to_vec());
        let cmd = b.finish();
        self.run_ok(cmd, "DELETEACL", Some(folder), &mut |_| Ok(()))?;
        Ok(())
    }

    /// MYRIGHTS: what the logged-in user may do in the folder.
    pub fn my_rights(&mut self, folder: &str) -> Result<String> {
        self.require_acl()?;
        let name = self.server_name(folder)?;
        let mut b = self.command("MYRIGHTS");
        b.sp().mailbox(&name);
        let cmd = b.finish();
        let mut out = String::new();
        self.run_ok(cmd, "MYRIGHTS", Some(folder), &mut |u| {
            if let Untagged::MyRights { rights, .. } = u {
                out = String::from_utf8_lossy(&rights).into_owned();
            }
            Ok(())
        })?;
        Ok(out)
    }
}
