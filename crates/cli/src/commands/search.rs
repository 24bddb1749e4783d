//! `mailvault search`

use crate::output::{bytes, print_failures, safe, time};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::search::exec::{search, Hit, SearchOptions, SearchResult, Searcher};
use mailvault_core::search::places::Scope;
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
    #[arg(required_unless_present = "queries", num_args = 1..)]
    pub query: Vec<String>,
    /// Run each line of FILE as a query (`-`: standard input), the repository and the
    /// index opened once; blank lines and lines starting with `#` are skipped. With
    /// --json, one JSON object per line: the query, its time in milliseconds, and its
    /// result (or its error).
    #[arg(long, value_name = "FILE", conflicts_with = "query")]
    pub queries: Option<std::path::PathBuf>,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
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
        facets: false,
    };
    if let Some(file) = &a.queries {
        return batch(g, file, &opts);
    }
    let text = a.query.join(" ");
    let query = parse(&text, jiff::Timestamp::now())?;
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

/// `--queries FILE`: every query of the file through one [`Searcher`].
fn batch(g: &GlobalOpts, file: &std::path::Path, opts: &SearchOptions) -> Result<Outcome> {
    let text = match file.to_str() {
        Some("-") => std::io::read_to_string(std::io::stdin())?,
        _ => std::fs::read_to_string(file)
            .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", file.display()))?,
    };
    let lines: Vec<&str> = (text.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let now = jiff::Timestamp::now();
    let failed = repo::with_fresh_index(g, |r| {
        let cache = repo::search_cache(g, r)?;
        let searcher = Searcher::open(r, cache.path())?;
        let mut failed = false;
        for line in &lines {
            let t = std::time::Instant::now();
            let res = (parse(line, now).map_err(|e| e.to_string()))
                .and_then(|q| searcher.search(&q, opts).map_err(|e| e.to_string()));
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            failed |= res.as_ref().map_or(true, |r| !r.failures.is_empty());
            print_one(g, (line, ms), &res, opts);
        }
        Ok(failed)
    })?;
    Ok(match failed {
        false => Outcome::Ok,
        true => Outcome::Partial,
    })
}

/// One query of a batch, its time and its result.
fn print_one(
    g: &GlobalOpts,
    (query, ms): (&str, f64),
    res: &Result<SearchResult, String>,
    opts: &SearchOptions,
) {
    if g.json {
        let v = match res {
            Ok(r) => serde_json::json!({"query": query, "elapsed_ms": ms, "result": r}),
            Err(e) => serde_json::json!({"query": query, "elapsed_ms": ms, "error": e}),
        };
        println!("{v}");
        return;
    }
    println!("== {} ({ms:.1} ms)", safe(query));
    match res {
        Ok(r) => print_result(r, opts),
        Err(e) => println!("error: {}", safe(e)),
    }
}

fn print_result(res: &SearchResult, opts: &SearchOptions) {
    for h in &res.hits {
        print_hit(h);
    }
    let shown = res.hits.len();
    let from = (opts.offset + 1).min(res.total);
    let about = match res.total_unsure {
        true => "at most ",
        false => "",
    };
    println!(
        "{about}{} found in {} snapshot(s); showing {}-{}",
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
