//! `mailvault check`

use crate::output::{bytes, print_some, safe};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::{bail, Result};
use mailvault_core::ops::check::{check, CheckError, CheckOptions, CheckReport, DamageKind};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also decrypt, decompress and verify every blob.
    #[arg(long)]
    pub read_data: bool,
    /// Snapshots this host saw that are gone were removed on purpose (on another host):
    /// drop them from this host's record instead of reporting a rollback.
    #[arg(long)]
    pub accept_removed: bool,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let rep = execute(g, &a)?;
    if g.json {
        crate::output::json(&rep)?;
    } else {
        print_report(&rep, a.read_data);
    }
    if !rep.ok() {
        bail!("{}", damaged(&rep));
    }
    Ok(Outcome::Ok)
}

/// Checks the repository as `a` says; its report. `run --profile` calls it for its check.
pub fn execute(g: &GlobalOpts, a: &Args) -> Result<CheckReport> {
    // Check reads the repository itself, never this host's cache: a damaged object in the
    // storage must not pass because a good copy of it is here. It gets a cache of its own,
    // empty and removed at the end (as restic's check does), so that each tree pack of
    // object storage is fetched whole once rather than by one ranged GET per tree.
    let fresh = tempfile::Builder::new()
        .prefix("mailvault-check-")
        .tempdir()?;
    let mut g = g.clone();
    g.storage.cache_dir = Some(fresh.path().to_path_buf());
    g.storage.no_cache = false;
    let g = &g;
    let r = repo::open(g)?;
    // Check holds a whole pack per worker: one worker per core, not the I/O-bound default.
    let jobs = if g.jobs > 0 { g.jobs } else { repo::cores() };
    let rep = check(
        &r,
        &CheckOptions {
            read_data: a.read_data,
            jobs,
            state: repo::state(),
            accept_removed: a.accept_removed,
        },
    )?;
    Ok(rep)
}

/// The report in text.
pub fn print_report(rep: &CheckReport, read_data: bool) {
    println!(
        "checked {} files ({}), {} packs, {} blobs{}, {} snapshots, {} messages in {:.2} s",
        rep.files_checked,
        bytes(rep.bytes_checked),
        rep.packs,
        rep.blobs,
        if read_data {
            format!(" ({} verified)", rep.blobs_verified)
        } else {
            String::new()
        },
        rep.snapshots,
        rep.messages,
        rep.elapsed_secs
    );
    for w in &rep.warnings {
        println!("warning: {}", safe(w));
    }
    for e in &rep.errors {
        print_error(e);
    }
    if rep.ok() {
        println!("no errors found");
    }
}

/// What a damaged repository's check says: the errors and what to run.
pub fn damaged(rep: &CheckReport) -> String {
    let mut repairs: Vec<String> = rep
        .errors
        .iter()
        .filter_map(|e| Some(repair_hint(e, e.repair.as_deref()?)))
        .collect();
    repairs.sort();
    repairs.dedup();
    let hint = if repairs.is_empty() {
        String::new()
    } else {
        format!(": run {}", repairs.join("; "))
    };
    format!(
        "the repository is damaged: {} errors{hint}",
        rep.errors.len()
    )
}

/// One error, summarized: what is damaged, what it costs, a few examples, what to run.
fn print_error(e: &CheckError) {
    let mut place = Vec::new();
    if let Some(f) = &e.file {
        place.push(f.clone());
    }
    if let Some(b) = &e.blob {
        place.push(format!("blob {b}"));
    }
    if place.is_empty() {
        println!("error: {}", safe(&e.error));
    } else {
        println!("error: {}: {}", safe(&place.join(", ")), safe(&e.error));
    }
    print_some(&e.details, |d| safe(d).into_owned());
    if e.blobs > 0 || !e.snapshots.is_empty() {
        println!(
            "  {} blobs lost; {} messages in {} snapshots affected{}",
            e.blobs,
            e.messages,
            e.snapshots.len(),
            if e.snapshots.is_empty() {
                String::new()
            } else {
                format!(
                    " ({})",
                    safe(
                        &e.snapshots
                            .iter()
                            .take(10)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                )
            }
        );
    }
    print_some(&e.affected, |m| format!("affects {}", safe(m)));
    if let Some(r) = &e.repair {
        println!("  to repair: {}", repair_hint(e, r));
    }
}

/// What to run about `e`: a rollback is accepted only when it was no rollback at all.
fn repair_hint(e: &CheckError, repair: &str) -> String {
    if e.kind == DamageKind::Rollback {
        format!("`{repair}` if the missing snapshots were removed on purpose")
    } else {
        format!("`{repair}`")
    }
}
