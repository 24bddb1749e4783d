//! `mailvault migrate`

use crate::output::{bytes, print_some};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::ops::migrate::{migrate, MigrateOptions};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print what would be rewritten and kept; change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let mut r = repo::open(g)?;
    let opts = MigrateOptions {
        dry_run: a.dry_run,
        state: repo::state(),
    };
    let rep = migrate(&mut r, &opts)?;
    if g.json {
        crate::output::json(&rep)?;
        return Ok(Outcome::Ok);
    }
    let would = if a.dry_run { "would be " } else { "" };
    if rep.from_version == 2 {
        println!(
            "finished the migration an earlier run left: {} leftover files {would}removed",
            rep.leftovers_removed
        );
        return Ok(Outcome::Ok);
    }
    if rep.leftovers_removed > 0 {
        println!(
            "{} files an earlier, interrupted run staged {would}removed first",
            rep.leftovers_removed
        );
    }
    println!(
        "format 1 -> 2{}",
        if a.dry_run {
            " (dry run: nothing changed)"
        } else {
            ""
        }
    );
    println!(
        "rewritten: {} snapshots, {} dictionaries, {} index files (as one), {} tree blobs from {} packs ({} read{})",
        rep.snapshots,
        rep.dictionaries,
        rep.index_files_replaced,
        rep.tree_blobs,
        rep.tree_packs_replaced,
        bytes(rep.tree_pack_bytes_read),
        if a.dry_run {
            String::new()
        } else {
            format!(
                ", {} written in {} packs",
                bytes(rep.tree_pack_bytes_written),
                rep.tree_packs_written
            )
        }
    );
    println!(
        "kept as they are: {} data packs, {} (format 1; new backups write format 2)",
        rep.data_packs_kept,
        bytes(rep.data_pack_bytes_kept)
    );
    if !rep.renamed.is_empty() {
        println!("snapshot ids change (format 2 names a snapshot by its content):");
        print_some(&rep.renamed, |r| {
            format!("{} -> {}", &r.old[..8], &r.new[..8])
        });
    }
    if !a.dry_run {
        println!("done in {:.1}s", rep.elapsed_secs);
    }
    Ok(Outcome::Ok)
}
