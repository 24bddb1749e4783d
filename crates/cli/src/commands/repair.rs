//! `mailvault repair index | snapshots | overwrites`

use crate::output::{print_some, safe};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::ops::repair::{
    repair_index, repair_overwrites, repair_snapshots, RepairOptions,
};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub what: What,
}

#[derive(clap::Subcommand, Debug)]
pub enum What {
    /// Rebuild the index from the packs (each pack read whole and every blob verified),
    /// then remove the old index files.
    Index(Opts),
    /// Replace snapshots that need lost blobs by ones without the messages that cannot be
    /// restored (tagged `repaired`); move unreadable snapshot files to damaged/.
    Snapshots(Opts),
    /// On object storage with versions (S3 versioning, Object Lock): put back the original
    /// of every object someone overwrote (mailvault writes each object once).
    Overwrites(Opts),
}

#[derive(clap::Args, Debug)]
pub struct Opts {
    /// Print what would be done; change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let would = |dry: bool| if dry { "would be " } else { "" };
    let what = match a.what {
        What::Overwrites(o) => return overwrites(g, &o),
        w => w,
    };
    let mut r = repo::open(g)?;
    match what {
        What::Overwrites(_) => {}
        What::Index(o) => {
            let rep = repair_index(
                &r,
                &RepairOptions {
                    dry_run: o.dry_run,
                    ..Default::default()
                },
            )?;
            if g.json {
                crate::output::json(&rep)?;
                return Ok(Outcome::Ok);
            }
            println!(
                "{} packs with {} blobs {}indexed ({} not in the old index; {} in the old index are missing)",
                rep.packs,
                rep.blobs,
                would(o.dry_run),
                rep.packs_added,
                rep.packs_missing
            );
            for p in &rep.packs_damaged {
                println!("damaged pack (its good blobs are indexed): {}", safe(p));
            }
            for p in &rep.search_damaged {
                println!(
                    "damaged search index split {} {}moved to damaged/: run `mailvault index` to index its messages again",
                    safe(p),
                    would(o.dry_run)
                );
            }
            for f in rep.packs_skipped.iter().chain(&rep.blobs_skipped) {
                println!("left out: {}: {}", safe(&f.item), safe(&f.error));
            }
            if let Some(w) = &rep.index_written {
                println!(
                    "wrote {w}; removed {} old index files",
                    rep.index_removed.len()
                );
            }
            if o.dry_run {
                println!("dry run: nothing written");
            }
        }
        What::Snapshots(o) => {
            let rep = repair_snapshots(
                &mut r,
                &RepairOptions {
                    dry_run: o.dry_run,
                    state: repo::state(),
                },
            )?;
            if g.json {
                crate::output::json(&rep)?;
                return Ok(Outcome::Ok);
            }
            for m in &rep.moved {
                println!(
                    "{}: unreadable ({}): {}moved to damaged/{}",
                    safe(&m.item),
                    safe(&m.error),
                    would(o.dry_run),
                    safe(&m.item)
                );
            }
            for s in &rep.repaired {
                println!(
                    "snapshot {}: {} messages, {} folder files and {} message lists or trees cannot be restored",
                    &s.snapshot[..8],
                    s.messages_dropped,
                    s.files_dropped,
                    s.trees_dropped
                );
                print_some(&s.dropped, |d| format!("drops {}", safe(d)));
                match &s.replaced_by {
                    Some(n) => println!("  replaced by snapshot {} (tagged repaired)", &n[..8]),
                    None if o.dry_run => {
                        println!("  would be replaced by a snapshot without them (tagged repaired)")
                    }
                    None => println!("  nothing of it could be kept: moved to damaged/"),
                }
            }
            println!(
                "{} snapshots checked, {} {}repaired, {} unreadable files {}moved",
                rep.snapshots_checked,
                rep.repaired.len(),
                would(o.dry_run),
                rep.moved.len(),
                would(o.dry_run)
            );
            if o.dry_run {
                println!("dry run: nothing written");
            }
        }
    }
    Ok(Outcome::Ok)
}

/// `repair overwrites`, on the storage alone: an overwritten key file may be why the
/// repository does not open.
fn overwrites(g: &GlobalOpts, o: &Opts) -> Result<Outcome> {
    let would = if o.dry_run { "would be " } else { "" };
    if g.append_only && !o.dry_run {
        return Err(mailvault_core::Error::AppendOnly {
            what: "repair overwrites".into(),
        }
        .into());
    }
    let store = repo::store(g)?;
    let Some(calls) = repo::object_lock(g)? else {
        anyhow::bail!("repair overwrites: the repository is not on object storage (S3 with versioning or Object Lock); a local directory keeps no older versions");
    };
    let rep = repair_overwrites(store.as_ref(), calls.as_ref(), o.dry_run)?;
    if g.json {
        crate::output::json(&rep)?;
        return Ok(Outcome::Ok);
    }
    for p in &rep.restored {
        println!("{}: overwritten; its original {would}put back", safe(p));
    }
    println!(
        "{} objects' versions looked at, {} overwritten",
        rep.objects,
        rep.restored.len()
    );
    Ok(Outcome::Ok)
}
