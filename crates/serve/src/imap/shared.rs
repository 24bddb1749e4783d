//! What every IMAP session of the server shares: the header cache, and the mailboxes
//! opened last, so that a client's many connections (and many clients) opening one large
//! folder read its trees and number its messages once.

use super::headers::HeaderCache;
use super::view::{Folder, Place};
use mailvault_core::Result;
use std::sync::{Arc, Mutex};

/// Mailboxes kept at most.
const FOLDERS: usize = 8;
/// Messages kept at most, over all of them (the last one opened is kept whatever its size).
const MESSAGES: usize = 1_000_000;

#[derive(Default)]
pub struct Shared {
    pub headers: HeaderCache,
    /// The mailboxes opened last (account, place), most recently used last. A snapshot
    /// never changes, so an entry is never stale while the repository stays open; the
    /// list is emptied when it is opened again (a snapshot added or forgotten since, which
    /// `Deleted` and the UIDs of later snapshots may depend on).
    folders: Mutex<Vec<(String, Place, Arc<Folder>)>>,
}

impl Shared {
    fn folders(&self) -> std::sync::MutexGuard<'_, Vec<(String, Place, Arc<Folder>)>> {
        self.folders.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Mailbox `place` of `account`: kept, or opened by `open` (outside the lock: another
    /// session opening another mailbox does not wait) and kept.
    pub fn folder(
        &self,
        account: &str,
        place: &Place,
        open: impl FnOnce() -> Result<Folder>,
    ) -> Result<Arc<Folder>> {
        {
            let mut v = self.folders();
            if let Some(i) = v.iter().position(|(a, p, _)| a == account && p == place) {
                let e = v.remove(i);
                let f = e.2.clone();
                v.push(e);
                return Ok(f);
            }
        }
        let f = Arc::new(open()?);
        let mut v = self.folders();
        v.retain(|(a, p, _)| !(a == account && p == place));
        v.push((account.to_string(), place.clone(), f.clone()));
        let held = |v: &[(String, Place, Arc<Folder>)]| -> usize {
            v.iter().map(|(_, _, f)| f.messages.len()).sum()
        };
        while v.len() > 1 && (v.len() > FOLDERS || held(&v) > MESSAGES) {
            v.remove(0);
        }
        Ok(f)
    }

    /// Forgets the mailboxes kept (the repository was opened again).
    pub fn clear(&self) {
        self.folders().clear();
    }
}
