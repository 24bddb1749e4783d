//! What every IMAP session of the server shares: the header cache, the accounts' views
//! and the mailboxes opened last, so that a client's many connections (and many clients)
//! logging in to one account read its snapshots' trees once, and opening one large folder
//! read its trees and number its messages once.

use super::headers::HeaderCache;
use super::view::{Folder, Place, View};
use crate::state::lock;
use crate::state::Live;
use mailvault_core::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Mailboxes kept at most.
const FOLDERS: usize = 8;
/// Messages kept at most, over all of them (the last one opened is kept whatever its size).
const MESSAGES: usize = 1_000_000;
/// Accounts' views kept at most.
const VIEWS: usize = 256;

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
    /// The views of the accounts logged in to last, each with the repository as opened
    /// when it was built, most recently used last: a login reads every snapshot's root and
    /// account trees otherwise.
    views: Mutex<Vec<KeptView>>,
}

/// An account's view kept: the account, the repository as opened when it was built, the
/// view.
type KeptView = (String, Weak<Live>, Arc<View>);

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

    /// The view of `account` in the repository as `live` opened it: kept, or built and
    /// kept; `None` when no snapshot holds the account.
    pub fn view(&self, account: &str, live: &Arc<Live>) -> Result<Option<Arc<View>>> {
        let same = |(a, l, _): &KeptView| a == account && Weak::ptr_eq(l, &Arc::downgrade(live));
        {
            let mut v = lock(&self.views);
            if let Some(i) = v.iter().position(same) {
                let e = v.remove(i);
                let view = e.2.clone();
                v.push(e);
                return Ok(Some(view));
            }
        }
        let Some(view) = View::build(live.repo(), account)?.map(Arc::new) else {
            return Ok(None);
        };
        let mut v = lock(&self.views);
        v.retain(|(a, l, _)| a != account && l.strong_count() > 0);
        v.push((account.to_string(), Arc::downgrade(live), view.clone()));
        if v.len() > VIEWS {
            v.remove(0);
        }
        Ok(Some(view))
    }

    /// Forgets the views and mailboxes kept (the repository was opened again).
    pub fn clear(&self) {
        self.folders().clear();
        lock(&self.views).clear();
    }
}
