//! `mailvault init`

use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
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
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let store = repo::store(g)?;
    let pw = repo::password(g, true)?;
    repo::prepare_new(g)?;
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
        println!("keep the password safe: without it the data cannot be read back");
    }
    Ok(Outcome::Ok)
}
