//! `mailvault init`

use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::{Compression, InitOptions, Repository};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Default compression of the repository's blobs.
    #[arg(long, default_value = "zstd", value_parser = ["zstd", "lz4", "none"])]
    pub compression: String,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let store = repo::store(g)?;
    let pw = repo::password(g, true)?;
    let opts = InitOptions {
        compression: a.compression.parse::<Compression>()?,
        ..Default::default()
    };
    let r = Repository::init(store.clone(), &pw, &opts)?;
    if g.json {
        crate::output::json(&serde_json::json!({
            "repository": store.location(),
            "id": r.config().id,
            "compression": r.config().compression,
        }))?;
    } else {
        println!(
            "created mailvault repository {} at {} (compression {})",
            r.config().id,
            store.location(),
            r.config().compression
        );
        println!("keep the password safe: without it the data cannot be read back");
    }
    Ok(Outcome::Ok)
}
