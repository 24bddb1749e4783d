//! `mailvault index`

use crate::output::{bytes, count, print_failures};
use crate::{progress::Bar, repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::search::build::{index, IndexOptions, IndexReport};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Write a split of the index whenever this many messages were indexed (a killed run
    /// keeps every split it finished).
    #[arg(long, default_value_t = IndexOptions::default().split_docs, hide = true)]
    pub split_docs: usize,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let opts = IndexOptions {
        split_docs: a.split_docs,
        ..IndexOptions::default()
    };
    let rep = repo::with_fresh_index(g, |r| {
        let cache = repo::search_cache(g, r)?;
        Bar::run(g.quiet || g.json, "index", |bar| {
            index(r, cache.path(), &opts, bar)
        })
    })?;
    if g.json {
        crate::output::json(&rep)?;
    } else {
        print_report(&rep);
    }
    Ok(match rep.failures.is_empty() {
        true => Outcome::Ok,
        false => Outcome::Partial,
    })
}

/// What an `index` run did, in a few lines (also `backup --index`).
pub fn print_report(rep: &IndexReport) {
    let as_read = match rep.as_read {
        0 => String::new(),
        n => format!(", {n} as the backup read them"),
    };
    println!(
        "indexed {} ({}{as_read}) into {}; {} already indexed, of {} in {}",
        count(rep.indexed, "message", "messages"),
        bytes(rep.bytes),
        count(rep.splits.len() as u64, "split", "splits"),
        rep.already_indexed,
        count(rep.contents, "distinct message", "distinct messages"),
        count(rep.snapshots as u64, "snapshot", "snapshots"),
    );
    if rep.truncated > 0 {
        println!(
            "note: {} too large or too deep to index whole (docs/search.md, Limits): their text past the cap is not searched",
            count(rep.truncated, "message was", "messages were"),
        );
    }
    print_failures(&rep.failures);
}
