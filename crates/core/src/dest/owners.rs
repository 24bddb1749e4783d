//! Whose the files and directories a restore writes become ([`RestoreOwners`]), and the
//! map from recorded owners to this system's.

use crate::error::{Error, Result};
use crate::repo::tree::{OwnerNames, NO_OWNER};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Whose the restored files and directories become. Only root can give files away: run as
/// another user, a restore sets modes and leaves every owner its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RestoreOwners {
    /// The recorded owners, by name where the snapshot has the name and this system knows
    /// it (as tar does), else by number.
    #[default]
    ByName,
    /// The recorded uids and gids as they are (`--numeric-owner`).
    Numeric,
    /// Everything to one owner (`--chown USER:GROUP`).
    Fixed { uid: u32, gid: u32 },
}

impl RestoreOwners {
    /// `USER:GROUP` (names or numbers) for [`RestoreOwners::Fixed`].
    pub fn chown(spec: &str) -> Result<RestoreOwners> {
        use nix::unistd::{Group, User};
        let bad = |what: &str| Error::InvalidInput(format!("--chown {spec:?}: {what}"));
        let (user, group) = spec
            .split_once(':')
            .ok_or_else(|| bad("expected USER:GROUP"))?;
        let uid = match user.parse::<u32>() {
            Ok(n) => n,
            Err(_) => match User::from_name(user) {
                Ok(Some(u)) => u.uid.as_raw(),
                _ => return Err(bad(&format!("no user {user:?} on this system"))),
            },
        };
        let gid = match group.parse::<u32>() {
            Ok(n) => n,
            Err(_) => match Group::from_name(group) {
                Ok(Some(g)) => g.gid.as_raw(),
                _ => return Err(bad(&format!("no group {group:?} on this system"))),
            },
        };
        Ok(RestoreOwners::Fixed { uid, gid })
    }
}

/// Recorded owners to this system's, as [`RestoreOwners`] says.
pub(super) struct OwnerMap {
    /// Only root gives files away; otherwise no owner is set at all.
    pub(super) root: bool,
    /// Not root: our own uid and gid, and whether an owner other than them was left
    /// unset (said once, in the report's warnings).
    pub(super) me: (u32, u32),
    pub(super) not_given: AtomicBool,
    pub(super) policy: RestoreOwners,
    pub(super) uids: HashMap<u32, u32>,
    pub(super) gids: HashMap<u32, u32>,
}

impl OwnerMap {
    pub(super) fn new(policy: RestoreOwners, names: &OwnerNames) -> OwnerMap {
        use nix::unistd::{Group, User};
        let root = rustix::process::geteuid().is_root();
        let mut m = OwnerMap {
            root,
            me: (
                rustix::process::geteuid().as_raw(),
                rustix::process::getegid().as_raw(),
            ),
            not_given: AtomicBool::new(false),
            policy,
            uids: HashMap::new(),
            gids: HashMap::new(),
        };
        if root && policy == RestoreOwners::ByName {
            for (id, name) in &names.users {
                if let Ok(Some(u)) = User::from_name(name) {
                    m.uids.insert(*id, u.uid.as_raw());
                }
            }
            for (id, name) in &names.groups {
                if let Ok(Some(g)) = Group::from_name(name) {
                    m.gids.insert(*id, g.gid.as_raw());
                }
            }
        }
        m
    }

    /// `--chown`: everything gets one owner.
    pub(super) fn fixed(&self) -> bool {
        self.root && matches!(self.policy, RestoreOwners::Fixed { .. })
    }

    /// The owner to give a restored file recorded as `uid`, `gid`; `None`: leave it.
    pub(super) fn get(&self, uid: u32, gid: u32) -> Option<(u32, u32)> {
        let (uid, gid) = match self.policy {
            RestoreOwners::Fixed { uid, gid } => (uid, gid),
            _ if uid == NO_OWNER || gid == NO_OWNER => return None,
            _ => (uid, gid),
        };
        if !self.root {
            if (uid, gid) != self.me {
                self.not_given.store(true, Relaxed);
            }
            return None;
        }
        if matches!(self.policy, RestoreOwners::Fixed { .. }) {
            return Some((uid, gid));
        }
        Some((
            *self.uids.get(&uid).unwrap_or(&uid),
            *self.gids.get(&gid).unwrap_or(&gid),
        ))
    }
}
