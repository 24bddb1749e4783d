//! `mailvault check`

use crate::output::{bytes, safe};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::{bail, Result};
use mailvault_core::check::{check, CheckOptions};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Also decrypt, decompress and verify every blob.
    #[arg(long)]
    pub read_data: bool,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let r = repo::open(g)?;
    // Check holds a whole pack per worker: one worker per core, not the I/O-bound default.
    let jobs = if g.jobs > 0 { g.jobs } else { repo::cores() };
    let rep = check(
        &r,
        &CheckOptions {
            read_data: a.read_data,
            jobs,
        },
    )?;
    if g.json {
        crate::output::json(&rep)?;
    } else {
        println!(
            "checked {} files ({}), {} packs, {} blobs{}, {} snapshots, {} messages in {:.2} s",
            rep.files_checked,
            bytes(rep.bytes_checked),
            rep.packs,
            rep.blobs,
            if a.read_data {
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
            let mut place = Vec::new();
            if let Some(f) = &e.file {
                place.push(f.clone());
            }
            if let Some(b) = &e.blob {
                place.push(format!("blob {b}"));
            }
            println!("error: {}: {}", safe(&place.join(", ")), safe(&e.error));
            for m in &e.messages {
                println!("  affects {}", safe(m));
            }
        }
        if rep.ok() {
            println!("no errors found");
        }
    }
    if !rep.ok() {
        bail!("the repository is damaged: {} errors", rep.errors.len());
    }
    Ok(Outcome::Ok)
}
