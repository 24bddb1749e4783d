//! `mailvault init`

use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::store::{LockMode, LockPolicy};
use mailvault_core::{Compression, InitOptions, Repository};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Default compression of the repository's blobs.
    #[arg(long, default_value = "zstd", value_parser = ["zstd", "lz4", "none"])]
    pub compression: String,
    /// Pad every stored blob to a size bucket (Padmé: at most 12% larger, about 3% for
    /// mail) so that the storage's object sizes tell less about the messages in them.
    #[arg(long)]
    pub pad: bool,
    /// Repository format: 2 (the default), or 1 for a repository that mailvault builds
    /// from before 2026-11-23 can read (no associated data, unkeyed chunking).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=2))]
    pub format: u32,
    /// On object storage: create the bucket with Object Lock, every object written to it
    /// locked for this many days from its creation (docs/security.md, *Object Lock*).
    /// Prune then extends the retention of what the snapshots keep.
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u32).range(1..=36500))]
    pub lock_days: Option<u32>,
    /// With --lock-days: compliance (nobody can shorten a retention or delete a locked
    /// object, not even the bucket's owner) or governance (credentials with the right to
    /// bypass it can).
    #[arg(long, value_name = "MODE", default_value = "compliance", value_parser = ["compliance", "governance"])]
    pub lock_mode: String,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let store = repo::store(g)?;
    let pw = repo::password(g, true)?;
    let lock = a.lock_days.map(|days| LockPolicy {
        mode: LockMode::parse(&a.lock_mode).unwrap_or(LockMode::Compliance),
        days,
    });
    repo::prepare_new(g, lock)?;
    let opts = InitOptions {
        compression: a.compression.parse::<Compression>()?,
        version: mailvault_core::repo::format::Version::from_number(a.format)?,
        pad: a.pad,
        ..Default::default()
    };
    let r = Repository::init(store.clone(), &pw, &opts)?;
    if g.json {
        crate::output::json(&serde_json::json!({
            "repository": store.location(),
            "id": r.config().id,
            "compression": r.config().compression,
            "format_version": r.version().number(),
            "pad": r.config().pad,
            "object_lock": lock,
        }))?;
    } else {
        println!(
            "created mailvault repository {} at {} (format {}, compression {}{})",
            r.config().id,
            store.location(),
            r.version(),
            r.config().compression,
            if r.config().pad { ", padded" } else { "" }
        );
        if let Some(l) = lock {
            println!(
                "object lock: every object is locked for {} days from its creation ({} mode); run prune at least every {} days to extend what the snapshots keep",
                l.days,
                l.mode.s3_name().to_ascii_lowercase(),
                (l.days / 2).max(1)
            );
        }
        println!("keep the password safe: without it the data cannot be read back");
    }
    Ok(Outcome::Ok)
}
