//! Mailbox metadata (RFC 5464): GETMETADATA and SETMETADATA on a folder given as a
//! mailvault path, for servers that offer `METADATA`.

use super::session::Session;
use crate::error::{Error, Result};
use crate::proto::response::{Status, Untagged};

impl Session {
    /// Whether the server offers mailbox metadata.
    pub fn has_metadata(&self) -> bool {
        self.caps.has("METADATA")
    }

    /// Every entry of the folder under `/private` and `/shared` with a value (GETMETADATA
    /// with DEPTH infinity), sorted by name.
    pub fn get_metadata(&mut self, folder: &str) -> Result<Vec<(String, Vec<u8>)>> {
        let mut got = self.get_metadata_many(&[folder])?;
        got.pop().unwrap_or_else(|| Err(self.missing_answer()))
    }

    /// [`Session::get_metadata`] of every folder, pipelined (`Session::per_folder`): one
    /// round trip for up to 64 folders. The outer error means the server has no METADATA
    /// or the connection failed; else one result per folder, in order.
    #[allow(clippy::type_complexity)]
    pub fn get_metadata_many(
        &mut self,
        folders: &[&str],
    ) -> Result<Vec<Result<Vec<(String, Vec<u8>)>>>> {
        self.require_metadata()?;
        self.per_folder(
            folders,
            &mut |s, name| {
                let mut b = s.command("GETMETADATA");
                b.raw(b" (DEPTH infinity) ").mailbox(name);
                b.raw(b" (/private /shared)");
                b.finish()
            },
            &mut |u| match u {
                Untagged::Metadata { mailbox, entries } => Some((mailbox, entries)),
                _ => None,
            },
            &mut |s, folder, status, got| {
                if status.status != Status::Ok {
                    return Err(s.command_error("GETMETADATA", Some(folder), &status));
                }
                let mut out: Vec<(String, Vec<u8>)> = (got.into_iter().flatten())
                    .filter_map(|(k, v)| Some((k, v?)))
                    .collect();
                out.sort();
                Ok(out)
            },
        )
    }

    /// SETMETADATA: gives each entry its value (a quoted string, or a literal when it
    /// cannot be one: never an atom, which the grammar does not allow there).
    pub fn set_metadata(&mut self, folder: &str, entries: &[(String, Vec<u8>)]) -> Result<()> {
        self.require_metadata()?;
        if entries.is_empty() {
            return Ok(());
        }
        let name = self.server_name(folder)?;
        let mut b = self.command("SETMETADATA");
        b.sp().mailbox(&name).raw(b" (");
        for (i, (k, v)) in entries.iter().enumerate() {
            if i > 0 {
                b.sp();
            }
            b.astring(k.as_bytes()).sp().string(v);
        }
        b.raw(b")");
        let cmd = b.finish();
        self.run_ok(cmd, "SETMETADATA", Some(folder), &mut |_| Ok(()))?;
        Ok(())
    }

    fn require_metadata(&self) -> Result<()> {
        if self.has_metadata() {
            return Ok(());
        }
        Err(Error::Unsupported {
            server: self.server.clone(),
            what: "METADATA (RFC 5464)".into(),
        })
    }
}
