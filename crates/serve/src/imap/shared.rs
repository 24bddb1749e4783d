//! What every IMAP session of the server shares: the header cache, and the mailboxes
//! opened last, so that a client's many connections (and many clients) opening one large
//! folder read its trees and number its messages once.

use super::headers::HeaderCache;
use super::view::{Folder, Place};
use crate::state::lock;
use mailvault_core::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

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
    /// A gate per mailbox being opened: sessions that want one another session is opening
    /// wait for it rather than read it too (50 clients opening a folder of 100,000
    /// messages at once held 50 copies of it, 2.8 GB).
    opening: Mutex<Gates>,
}

/// A gate per mailbox (account, place) being opened.
type Gates = HashMap<(String, Place), Arc<Mutex<()>>>;

impl Shared {
    fn folders(&self) -> MutexGuard<'_, Vec<(String, Place, Arc<Folder>)>> {
        lock(&self.folders)
    }

    /// Mailbox `place` of `account`: kept, or opened by `open` (outside the lock: another
    /// session opening another mailbox does not wait) and kept.
    pub fn folder(
        &self,
        account: &str,
        place: &Place,
        open: impl FnOnce() -> Result<Folder>,
    ) -> Result<Arc<Folder>> {
        if let Some(f) = self.kept(account, place) {
            return Ok(f);
        }
        let key = (account.to_string(), place.clone());
        let gate = lock(&self.opening).entry(key.clone()).or_default().clone();
        let _one = lock(&gate);
        // Opened meanwhile by the session that held the gate?
        if let Some(f) = self.kept(account, place) {
            return Ok(f);
        }
        let opened = open().map(Arc::new);
        lock(&self.opening).remove(&key);
        let f = opened?;
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

    /// Mailbox `place` of `account` if kept (then the most recently used).
    fn kept(&self, account: &str, place: &Place) -> Option<Arc<Folder>> {
        let mut v = self.folders();
        let i = v.iter().position(|(a, p, _)| a == account && p == place)?;
        let e = v.remove(i);
        let f = e.2.clone();
        v.push(e);
        Some(f)
    }

    /// Forgets the mailboxes kept (the repository was opened again).
    pub fn clear(&self) {
        self.folders().clear();
    }
}
