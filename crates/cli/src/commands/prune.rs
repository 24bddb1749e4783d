//! `mailvault prune`

use crate::output::bytes;
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::ops::prune::{prune, PruneOptions};
use mailvault_core::report::NoProgress;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Repack a pack when more than this percentage of its blob bytes is unused.
    #[arg(long, value_name = "PERCENT", default_value_t = 5.0)]
    pub max_unused: f64,
    /// Show what would be deleted and repacked; change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Apply the forget requests of append-only hosts (`forget` there writes a request),
    /// but never to a snapshot under legal hold or the newest of its host and source;
    /// without it they are listed.
    #[arg(long)]
    pub apply_requests: bool,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let mut r = repo::open(g)?;
    let rep = prune(
        &mut r,
        &PruneOptions {
            max_unused: a.max_unused,
            dry_run: a.dry_run,
            as_if_gone: Vec::new(),
            apply_requests: a.apply_requests,
        },
        &NoProgress,
    )?;
    if g.json {
        crate::output::json(&rep)?;
        return Ok(Outcome::Ok);
    }
    print_report(&rep);
    Ok(Outcome::Ok)
}

/// The text report of a prune (also `forget --prune`'s).
pub fn print_report(rep: &mailvault_core::ops::prune::PruneReport) {
    let would = if rep.dry_run { "would be " } else { "" };
    println!(
        "{} snapshots use {} blobs; of {} packs: {} {would}deleted, {} {would}repacked, {} kept; {} packs no index lists {would}deleted",
        rep.snapshots,
        rep.blobs_used,
        rep.packs_before,
        rep.packs_deleted,
        rep.packs_repacked,
        rep.packs_kept,
        rep.packs_unindexed
    );
    println!(
        "{} blobs {would}removed, {} {would}repacked into {} new packs",
        rep.blobs_removed, rep.blobs_repacked, rep.packs_written
    );
    println!(
        "repository {} -> {} ({} {would}freed) in {:.2} s",
        bytes(rep.size_before),
        bytes(rep.size_after),
        bytes(rep.bytes_freed),
        rep.elapsed_secs
    );
    let f = &rep.forget_requests;
    if !f.applied.is_empty() {
        println!(
            "forget requests of append-only hosts: {} snapshots removed: {}",
            f.applied.len(),
            f.applied.join(", ")
        );
    }
    for w in &f.waiting {
        println!("forget request waiting: {}", crate::output::safe(w));
    }
    for w in &f.warnings {
        eprintln!("warning: {}", crate::output::safe(w));
    }
    if rep.lock_records_removed > 0 {
        println!(
            "{} records of locks that are over removed",
            rep.lock_records_removed
        );
    }
    if let Some(l) = &rep.object_lock {
        print_object_lock(l, rep.dry_run);
    }
    let s = &rep.search;
    if s.merged + s.deleted > 0 {
        let merged = match s.merged {
            0 => String::new(),
            n => format!("{n} splits merged without what no snapshot holds; "),
        };
        println!(
            "search index: {merged}{} superseded splits {would}deleted",
            s.deleted
        );
    }
}

/// The Object Lock lines of a prune's report.
fn print_object_lock(l: &mailvault_core::ops::object_lock::LockReport, dry_run: bool) {
    let mode = l.mode.map_or("", |m| m.s3_name());
    match dry_run {
        true => println!(
            "object lock ({mode}, {} days): {} objects' retention would be extended",
            l.days, l.extended
        ),
        false => println!(
            "object lock ({mode}, {} days): {} objects' retention extended to {} days from now",
            l.days, l.extended, l.days
        ),
    }
    if l.legal_holds + l.legal_holds_lifted > 0 {
        println!(
            "object lock: {} objects under legal hold for held snapshots ({} put on, {} lifted)",
            l.legal_holds, l.legal_holds_set, l.legal_holds_lifted
        );
    }
    if l.versions_removed > 0 {
        println!(
            "object lock: {} versions of deleted objects removed for good ({}), their retention over",
            l.versions_removed,
            bytes(l.bytes_removed)
        );
    }
    if l.versions_locked > 0 {
        println!(
            "object lock: {} versions of deleted objects ({}) kept until their retention ends (the first {}): a prune after that removes them",
            l.versions_locked,
            bytes(l.bytes_locked),
            l.locked_until.as_deref().unwrap_or("?")
        );
    }
    for p in &l.unprotected {
        println!(
            "object lock: {} has no retention left",
            crate::output::safe(p)
        );
    }
}
