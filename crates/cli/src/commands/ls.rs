//! `mailvault ls`

use crate::output::{bytes, safe, time};
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
    /// List this folder's messages: its name as `ls --account` shows it (`Entwürfe`,
    /// `Archive/2023`).
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
                    safe(&x.name),
                    x.messages,
                    bytes(x.bytes),
                    safe(&x.path)
                );
            }
        }
        Listing::Folders(v) => {
            for x in &v {
                println!(
                    "{:<30} {:<30} {:>8} messages {:>10}",
                    safe(&x.account),
                    safe(&x.name),
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
                    safe(&m.flags),
                    bytes(m.size),
                    safe(&m.key),
                    safe(&m.from),
                    safe(&m.subject)
                );
            }
        }
    }
    Ok(Outcome::Ok)
}
