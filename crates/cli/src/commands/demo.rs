//! `mailvault demo`: the whole job on a generated store, end to end.

use crate::{GlobalOpts, Outcome};
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Working directory (default: a new directory under /tmp).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

pub fn run(_g: &GlobalOpts, _a: Args) -> Result<Outcome> {
    anyhow::bail!("demo is not available yet")
}
