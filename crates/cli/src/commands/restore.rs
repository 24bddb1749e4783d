//! `mailvault restore`

use crate::output::{bytes, print_failures};
use crate::{progress::Bar, repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::restore::{restore, RestoreOptions, RestoreReport};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Snapshot id (a unique prefix is enough) or `latest`.
    pub snapshot: String,
    /// Where to restore: `maildir:/srv/restore`. Accounts are recreated below it as
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
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let target = super::maildir_location(&a.target, "target")?;
    let r = repo::open(g)?;
    let opts = RestoreOptions {
        snapshot: a.snapshot,
        target,
        accounts: a.account,
        folders: a.folder,
        messages: a.message,
        jobs: repo::jobs(g),
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
    Ok(if rep.items_failed > 0 {
        Outcome::Partial
    } else {
        Outcome::Ok
    })
}

fn print_report(r: &RestoreReport, o: &RestoreOptions) {
    println!(
        "restored snapshot {} to {}",
        &r.snapshot[..8],
        o.target.display()
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
    print_failures(&r.failures);
}
