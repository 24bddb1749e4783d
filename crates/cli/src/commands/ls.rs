//! `mailvault ls`

use crate::output::{bytes, time};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::ls::{ls, Listing};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Snapshot id (a unique prefix is enough) or `latest`.
    pub snapshot: String,
    /// List this account's folders.
    #[arg(long)]
    pub account: Option<String>,
    /// List this folder's messages.
    #[arg(long)]
    pub folder: Option<String>,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let r = repo::open(g)?;
    let listing = ls(&r, &a.snapshot, a.account.as_deref(), a.folder.as_deref())?;
    if g.json {
        crate::output::json(&listing)?;
        return Ok(Outcome::Ok);
    }
    match listing {
        Listing::Accounts(v) => {
            for x in &v {
                println!(
                    "{:<40} {:>8} messages {:>10}  {}",
                    x.name,
                    x.messages,
                    bytes(x.bytes),
                    x.path
                );
            }
        }
        Listing::Folders(v) => {
            for x in &v {
                println!(
                    "{:<30} {:<30} {:>8} messages {:>10}",
                    x.account,
                    x.name,
                    x.messages,
                    bytes(x.bytes)
                );
            }
        }
        Listing::Messages(v) => {
            for m in &v {
                println!(
                    "{}  {:<6} {:>9}  {:<40}  {:<30.30}  {}",
                    time(m.internal_date),
                    m.flags,
                    bytes(m.size),
                    m.key,
                    m.from,
                    m.subject
                );
            }
        }
    }
    Ok(Outcome::Ok)
}
