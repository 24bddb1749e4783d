//! `mailvault tag`

use crate::output::safe;
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::ops::tag::{tag, TagOptions};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The snapshots (id prefixes or `latest`).
    #[arg(required = true)]
    pub snapshots: Vec<String>,
    /// Add this tag (repeatable).
    #[arg(long, value_name = "TAG")]
    pub add: Vec<String>,
    /// Remove this tag (repeatable).
    #[arg(long, value_name = "TAG")]
    pub remove: Vec<String>,
    /// Replace the tags by these, comma-separated (repeatable; `''`: no tags).
    #[arg(long, value_name = "TAGS")]
    pub set: Vec<String>,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let set = (!a.set.is_empty()).then(|| {
        a.set
            .iter()
            .flat_map(|s| s.split(','))
            .filter(|t| !t.is_empty())
            .map(String::from)
            .collect()
    });
    let opts = TagOptions {
        snapshots: a.snapshots,
        add: a.add,
        remove: a.remove,
        set,
        state: repo::state(),
    };
    let r = repo::open(g)?;
    let rep = tag(&r, &opts)?;
    if g.json {
        crate::output::json(&rep)?;
        return Ok(Outcome::Ok);
    }
    for w in &rep.warnings {
        eprintln!("warning: {}", safe(w));
    }
    for c in &rep.changed {
        println!(
            "{} -> {}  [{}]",
            &c.old[..8],
            &c.new[..8],
            safe(&c.tags.join(","))
        );
    }
    for u in &rep.unchanged {
        println!("{}  unchanged", &u[..8]);
    }
    Ok(Outcome::Ok)
}
