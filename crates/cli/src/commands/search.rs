//! `mailvault search`

use crate::output::{bytes, print_failures, safe, time};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::search::catalog::Scope;
use mailvault_core::search::exec::{search, Hit, SearchOptions, SearchResult};
use mailvault_core::search::query::parse;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Search this snapshot only (an id prefix or `latest`); default: the newest snapshot
    /// of each host and source.
    #[arg(long, conflicts_with = "all_snapshots")]
    pub snapshot: Option<String>,
    /// Search every snapshot: messages deleted since are found too, with the snapshots
    /// that held them.
    #[arg(long)]
    pub all_snapshots: bool,
    /// Only this account (repeatable).
    #[arg(long)]
    pub account: Vec<String>,
    /// Only this folder and its subfolders (repeatable).
    #[arg(long)]
    pub folder: Vec<String>,
    /// Hits per page.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Which page of hits (from 1).
    #[arg(long, default_value_t = 1)]
    pub page: usize,
    /// The query (docs/search.md): words, "phrases", prefix*, from: to: subject:
    /// filename: folder: account: before: after: on: larger: smaller: has:attachment
    /// flag: keyword: deleted, OR, -term, (groups). Several arguments are one query; a
    /// query that starts with `-` goes after `--` (`search -- -flag:seen`).
    #[arg(required = true, num_args = 1..)]
    pub query: Vec<String>,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let text = a.query.join(" ");
    let query = parse(&text, jiff::Timestamp::now())?;
    let scope = match (&a.snapshot, a.all_snapshots) {
        (Some(s), _) => Scope::One(s.clone()),
        (None, true) => Scope::All,
        (None, false) => Scope::Latest,
    };
    let opts = SearchOptions {
        scope,
        accounts: a.account,
        folders: a.folder,
        offset: a.page.saturating_sub(1).saturating_mul(a.limit),
        limit: a.limit,
    };
    let res = repo::with_fresh_index(g, |r| {
        let cache = repo::search_cache(g, r)?;
        search(r, cache.path(), &query, &opts)
    })?;
    if g.json {
        crate::output::json(&res)?;
    } else {
        print_result(&res, &opts);
    }
    Ok(match res.failures.is_empty() {
        true => Outcome::Ok,
        false => Outcome::Partial,
    })
}

fn print_result(res: &SearchResult, opts: &SearchOptions) {
    for h in &res.hits {
        print_hit(h);
    }
    let shown = res.hits.len();
    let from = (opts.offset + 1).min(res.total);
    println!(
        "{} found in {} snapshot(s); showing {}-{}",
        res.total,
        res.snapshots,
        from,
        opts.offset + shown
    );
    if res.not_indexed > 0 {
        println!(
            "note: {} message(s) of these snapshots are not indexed yet: their text is not searched (run `mailvault index`)",
            res.not_indexed
        );
    }
    print_failures(&res.failures);
}

fn print_hit(h: &Hit) {
    let date = time(h.date.unwrap_or(h.internal_date));
    let deleted = match h.deleted {
        true => " [deleted]",
        false => "",
    };
    println!(
        "{}  {}  {}/{}  {}  {}{}",
        &h.id[..16],
        date,
        safe(&h.account),
        safe(&h.folder),
        safe(&h.from),
        safe(&h.subject),
        deleted
    );
    println!(
        "    {}  key {}  seen {} .. {}",
        bytes(h.size),
        safe(&h.key),
        &h.first_snapshot[..8],
        &h.last_snapshot[..8],
    );
}
