//! `mailvault snapshots`

use crate::output::{bytes, safe, time};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::host::seen;

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(g: &GlobalOpts, _a: Args) -> Result<Outcome> {
    let r = repo::open(g)?;
    // This host's record, loaded before the listing it is compared with.
    let mut record = repo::state().map(|s| seen::Record::of(&s, &r));
    let snaps = r.snapshots()?;
    // Snapshots an append-only host asked to forget: listed until the maintenance host's
    // prune applies the request, and marked so.
    let (requests, warnings) = mailvault_core::repo::forgotten::requests(&r)?;
    let requested: std::collections::HashSet<String> = (requests.iter())
        .flat_map(|(_, rec)| rec.snapshots.iter().cloned())
        .collect();
    for w in &warnings {
        eprintln!("warning: {}", safe(w));
    }
    if let Some(rec) = &mut record {
        let missing = rec.observe_in(&r, seen::present(&snaps));
        rec.save();
        repo::warn_seen(&missing, &rec.take_warnings());
    }
    if g.json {
        let v: Vec<_> = snaps
            .iter()
            .map(|s| {
                serde_json::json!({
                    "id": s.id.to_hex(), "time": s.time, "hostname": s.hostname, "source": s.source,
                    "tags": s.tags, "parent": s.parent.map(|p| p.to_hex()), "summary": s.summary,
                    "forget_requested": requested.contains(&s.id.to_hex()),
                })
            })
            .collect();
        crate::output::json(&v)?;
        return Ok(Outcome::Ok);
    }
    println!(
        "{:<10} {:<20} {:<14} {:>8} {:>9} {:>10}  source",
        "id", "time (UTC)", "host", "accounts", "messages", "size"
    );
    for s in &snaps {
        println!(
            "{:<10} {:<20} {:<14} {:>8} {:>9} {:>10}  {}{}{}",
            s.id.short(),
            time(s.time),
            safe(&s.hostname),
            s.summary.accounts,
            s.summary.messages,
            bytes(s.summary.bytes),
            safe(&s.source),
            if s.tags.is_empty() {
                String::new()
            } else {
                format!(" [{}]", safe(&s.tags.join(",")))
            },
            match requested.contains(&s.id.to_hex()) {
                true => " (forget requested: the maintenance host's prune applies it)",
                false => "",
            }
        );
    }
    println!("{} snapshots", snaps.len());
    Ok(Outcome::Ok)
}
