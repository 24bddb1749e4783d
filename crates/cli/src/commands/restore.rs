//! `mailvault restore`

use crate::output::{bytes, print_failures, safe};
use crate::{progress::Bar, repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::imap::restore::{
    restore as imap_restore, ImapRestoreOptions, ImapRestoreReport,
};
use mailvault_core::restore::{restore, Owners, RestoreOptions, RestoreReport};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Snapshot id (a unique prefix is enough) or `latest`.
    pub snapshot: String,
    /// Where to restore: `maildir:/srv/restore`, or a live server `imap://host[:port]`
    /// (`--starttls`) or `imaps://host[:port]`. Accounts are recreated below it as
    /// `<domain>/<user>/Maildir`; a single-Maildir snapshot restores into it directly.
    #[arg(long)]
    pub target: String,
    /// Only this account (repeatable).
    #[arg(long)]
    pub account: Vec<String>,
    /// Only this folder and its subfolders, e.g. `Sent` or `Archive/2023` (repeatable).
    #[arg(long)]
    pub folder: Vec<String>,
    /// Only this message, by Maildir key as `ls` shows it (repeatable).
    #[arg(long)]
    pub message: Vec<String>,
    #[command(flatten)]
    pub imap: super::imap::ImapArgs,
    /// IMAP: at most this many messages per second over all connections.
    #[arg(long)]
    pub max_rate: Option<f64>,
    /// IMAP: look for every message in the target folder (Message-ID, size, date) and
    /// send only those it lacks.
    #[arg(long)]
    pub skip_existing: bool,
    /// IMAP: the journal directory (default: $XDG_CACHE_HOME/mailvault/imap-journal).
    #[arg(long)]
    pub journal: Option<std::path::PathBuf>,
    /// IMAP: create the accounts the server does not have yet (Cyrus: the admin, given
    /// with --imap-master-user, CREATEs `user/<account>`). Dovecot needs nothing.
    #[arg(long)]
    pub create_accounts: bool,
    /// IMAP: most messages per APPEND batch.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Maildir, as root: give files and directories their recorded uid and gid as numbers
    /// (by default owners are mapped by their recorded user and group names).
    #[arg(long, conflicts_with = "chown")]
    pub numeric_owner: bool,
    /// Maildir, as root: give every restored file and directory this owner
    /// (`USER:GROUP`, names or numbers), e.g. `vmail:vmail` on another server.
    #[arg(long, value_name = "USER:GROUP")]
    pub chown: Option<String>,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    if super::imap::is_imap(&a.target) {
        return run_imap(g, a);
    }
    if a.imap.any_given()
        || a.skip_existing
        || a.create_accounts
        || a.max_rate.is_some()
        || a.journal.is_some()
    {
        anyhow::bail!("the IMAP flags only apply to imap:// and imaps:// targets");
    }
    let target = super::maildir_location(&a.target, "target")?;
    let owners = match (&a.chown, a.numeric_owner) {
        (Some(spec), _) => Owners::chown(spec)?,
        (None, true) => Owners::Numeric,
        (None, false) => Owners::ByName,
    };
    let r = repo::open(g)?;
    let opts = RestoreOptions {
        snapshot: a.snapshot,
        target,
        accounts: a.account,
        folders: a.folder,
        messages: a.message,
        jobs: repo::jobs(g),
        owners,
        reads: g.storage.store_connections.unwrap_or(0),
    };
    let bar = Bar::new(g.quiet || g.json, "restore");
    let rep = restore(&r, &opts, &bar);
    bar.finish();
    let rep = rep?;
    if g.json {
        crate::output::json(&rep)?;
    } else {
        print_report(&rep, &opts);
    }
    Ok(outcome(rep.items_failed, &rep.failures))
}

fn print_report(r: &RestoreReport, o: &RestoreOptions) {
    println!(
        "restored snapshot {} to {}",
        &r.snapshot[..8],
        safe(&o.target.display().to_string())
    );
    println!("  accounts   {}, folders {}", r.accounts, r.folders);
    println!(
        "  messages   {} total: {} restored, {} already there, {} failed",
        r.items_total, r.items_restored, r.items_unchanged, r.items_failed
    );
    println!(
        "  written    {} in {:.2} s: {:.0} messages/s, {:.1} MB/s",
        bytes(r.bytes_written),
        r.elapsed_secs,
        r.items_per_sec,
        r.mb_per_sec
    );
    for w in &r.warnings {
        println!("warning: {}", safe(w));
    }
    print_failures(&r.failures);
}

fn run_imap(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    if a.numeric_owner || a.chown.is_some() {
        anyhow::bail!("--numeric-owner and --chown only apply to Maildir targets");
    }
    let connection = a.imap.connection(&a.target)?;
    let r = repo::open(g)?;
    let mut opts = ImapRestoreOptions::new(&a.snapshot, connection);
    opts.accounts = a.account;
    opts.folders = a.folder;
    opts.messages = a.message;
    opts.connections = a.imap.connections.max(1);
    opts.parallel_accounts = a.imap.accounts.max(1);
    opts.max_rate = a.max_rate;
    opts.skip_existing = a.skip_existing;
    opts.create_accounts = a.create_accounts;
    opts.batch_messages = a.batch.max(1);
    if let Some(j) = a.journal {
        opts.journal_dir = j;
    }
    let bar = Bar::new(g.quiet || g.json, "restore");
    let rep = imap_restore(&r, &opts, &bar);
    bar.finish();
    let rep = rep?;
    if g.json {
        crate::output::json(&rep)?;
    } else {
        print_imap_report(&rep);
    }
    Ok(outcome(rep.items_failed, &rep.failures))
}

/// Exit code 1 whenever the report lists a failure, even one that is not a message.
fn outcome(items_failed: u64, failures: &[mailvault_core::report::Failure]) -> Outcome {
    if items_failed > 0 || !failures.is_empty() {
        Outcome::Partial
    } else {
        Outcome::Ok
    }
}

fn print_imap_report(r: &ImapRestoreReport) {
    println!(
        "restored snapshot {} to {}",
        &r.snapshot[..8],
        safe(&r.target)
    );
    if r.accounts_created > 0 {
        println!(
            "  accounts   {} ({} created), folders {}",
            r.accounts, r.accounts_created, r.folders
        );
    } else {
        println!("  accounts   {}, folders {}", r.accounts, r.folders);
    }
    println!(
        "  messages   {} total: {} appended, {} done by an earlier run, {} found on the server, {} failed",
        r.items_total, r.items_appended, r.items_journaled, r.items_existing, r.items_failed
    );
    for p in &r.phases {
        println!(
            "  {:<12} {} items in {:.2} s ({:.0}/s): {}",
            p.name,
            p.items,
            p.secs,
            p.items_per_sec,
            safe(&p.note)
        );
    }
    if r.per_account.len() <= 20 {
        for a in &r.per_account {
            println!(
                "  account {}: {} messages, {} appended, {} skipped, {} failed, {:.2} s",
                safe(&a.account),
                a.messages,
                a.appended,
                a.skipped,
                a.failed,
                a.secs
            );
        }
    }
    if r.items_appended == 0 {
        println!("  written    nothing, in {:.2} s", r.elapsed_secs);
    } else {
        println!(
            "  written    {} in {:.2} s: {:.0} messages/s, {:.1} MB/s",
            bytes(r.bytes_appended),
            r.elapsed_secs,
            r.items_per_sec,
            r.mb_per_sec
        );
    }
    println!("  journal    {}", safe(&r.journal));
    print_failures(&r.failures);
}
