//! `mailvault unlock`

use crate::output::safe;
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Remove every lock, also those of commands that look alive (only when you know that
    /// none is running).
    #[arg(long)]
    pub remove_all: bool,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let r = repo::open(g)?;
    let rep = r.unlock(a.remove_all)?;
    if g.json {
        crate::output::json(&rep)?;
        return Ok(Outcome::Ok);
    }
    for p in &rep.removed {
        println!("removed {p}");
    }
    for k in &rep.kept {
        println!("kept {}", safe(k));
    }
    println!(
        "{} locks removed, {} left",
        rep.removed.len(),
        rep.kept.len()
    );
    Ok(Outcome::Ok)
}
