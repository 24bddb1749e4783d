//! `mailvault stats`

use crate::output::{bytes, ratio};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(g: &GlobalOpts, _a: Args) -> Result<Outcome> {
    let r = repo::open(g)?;
    let s = mailvault_core::ops::stats::stats(&r)?;
    if g.json {
        crate::output::json(&s)?;
        return Ok(Outcome::Ok);
    }
    println!(
        "format             {}{}",
        s.format_version,
        if s.padded { " (blobs padded)" } else { "" }
    );
    println!("snapshots          {}", s.snapshots);
    println!(
        "latest snapshot    {} messages, {}",
        s.latest_messages,
        bytes(s.latest_bytes)
    );
    println!("all snapshots      {}", bytes(s.all_snapshots_bytes));
    println!(
        "unique content     {} in {} blobs",
        bytes(s.data_raw_bytes),
        s.data_blobs
    );
    println!(
        "stored content     {} ({} compression)",
        bytes(s.data_stored_bytes),
        ratio(s.compression_ratio)
    );
    println!(
        "metadata           {} in {} blobs",
        bytes(s.tree_stored_bytes),
        s.tree_blobs
    );
    println!(
        "repository         {} in {} packs, {} index files",
        bytes(s.repository_bytes),
        s.packs,
        s.index_files
    );
    println!("dedup (latest)     {}", ratio(s.dedup_ratio));
    println!(
        "all snapshots / repository size: {}",
        ratio(s.space_saving_ratio)
    );
    Ok(Outcome::Ok)
}
