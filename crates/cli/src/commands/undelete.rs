//! `mailvault undelete`

use super::ls::{deleted_summary, print_deleted};
use super::restore::{outcome, print_counts, print_imap_counts, TargetArgs};
use crate::output::{print_failures, safe};
use crate::{progress::Bar, repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::dest::imap::ImapRestoreReport;
use mailvault_core::ops::undelete::{
    undelete, undelete_imap, window_start, Deleted, DeletedOptions, UndeleteOptions,
};
use mailvault_core::report::Failure;
use mailvault_core::restore::RestoreReport;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The account whose deleted messages and sieve scripts are put back.
    #[arg(long)]
    pub account: String,
    /// Only messages last held in this folder or its subfolders (repeatable).
    #[arg(long)]
    pub folder: Vec<String>,
    /// Compare only the snapshots of this last period (`7d`, `2w`, `36h`); default: all.
    #[arg(long, value_name = "DURATION")]
    pub within: Option<String>,
    /// Compare only the snapshots taken at or after this time (`2025-03-01`,
    /// `2025-03-01 14:30:00` local time, or RFC 3339).
    #[arg(long, value_name = "DATE", conflicts_with = "within")]
    pub since: Option<String>,
    /// Put every message into this folder (created if need be) instead of its own.
    #[arg(long, value_name = "NAME")]
    pub into_folder: Option<String>,
    /// List what would be restored; restore nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub to: TargetArgs,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let opts = UndeleteOptions {
        find: DeletedOptions {
            account: a.account.clone(),
            folders: a.folder.clone(),
            since: window_start(a.within.as_deref(), a.since.as_deref())?,
        },
        into_folder: a.into_folder.clone(),
        dry_run: a.dry_run,
    };
    let quiet = g.quiet || g.json;
    if a.to.is_imap() {
        let imap = a.to.imap_options(Default::default())?;
        let r = repo::open(g)?;
        let rep = Bar::run(quiet, "undelete", |bar| {
            undelete_imap(&r, &opts, &imap, bar)
        })?;
        let shown = |r: &ImapRestoreReport| {
            println!("undeleted into {}", safe(&r.target));
            print_imap_counts(r);
        };
        let restored = (rep.restore.as_ref()).map(|r| (r, r.items_failed, r.failures.clone()));
        return report(g, &opts, &a.to.target, &rep, &rep.deleted, restored, shown);
    }
    let restore = a.to.maildir_options(g, Default::default())?;
    let r = repo::open(g)?;
    let rep = Bar::run(quiet, "undelete", |bar| undelete(&r, &opts, &restore, bar))?;
    let shown = |r: &RestoreReport| {
        println!(
            "undeleted to {}",
            safe(&restore.target.display().to_string())
        );
        print_counts(r);
    };
    let restored = (rep.restore.as_ref()).map(|r| (r, r.items_failed, r.failures.clone()));
    report(g, &opts, &a.to.target, &rep, &rep.deleted, restored, shown)
}

/// Prints an undelete's report (or its JSON): the deleted messages, then what the
/// restore did (`shown`), or what restoring nothing means; and gives the exit code.
fn report<R>(
    g: &GlobalOpts,
    opts: &UndeleteOptions,
    target: &str,
    rep: &impl serde::Serialize,
    deleted: &Deleted,
    restored: Option<(&R, u64, Vec<Failure>)>,
    shown: impl Fn(&R),
) -> Result<Outcome> {
    if g.json {
        crate::output::json(rep)?;
    } else {
        print_deleted(deleted);
        println!("{}", deleted_summary(deleted));
        print_failures(&deleted.failures);
        match &restored {
            Some((r, _, _)) => shown(r),
            None => nothing(opts, deleted, target),
        }
    }
    let r = restored.as_ref().map(|(_, n, f)| (*n, &f[..]));
    Ok(result(deleted, r))
}

/// Exit code 1 when something could not be read or restored.
fn result(d: &Deleted, restore: Option<(u64, &[Failure])>) -> Outcome {
    match restore {
        _ if !d.failures.is_empty() => Outcome::Partial,
        Some((failed, failures)) => outcome(failed, failures),
        None => Outcome::Ok,
    }
}

/// What a run that restored nothing says.
fn nothing(opts: &UndeleteOptions, d: &Deleted, target: &str) {
    if opts.dry_run {
        println!(
            "dry run: {} messages and {} home files would be restored to {}",
            d.messages.len(),
            d.files.len(),
            safe(target)
        );
    } else {
        println!("nothing to restore");
    }
}
