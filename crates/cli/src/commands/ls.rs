//! `mailvault ls`

use crate::output::{bytes, print_failures, safe, time};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::ops::ls::{ls, store_files, Listing, MessageInfo};
use mailvault_core::ops::undelete::{find_deleted, window_start, Deleted, DeletedOptions};
use std::io::Write;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Snapshot id (a unique prefix is enough) or `latest`; none with --deleted.
    #[arg(required_unless_present = "deleted", conflicts_with = "deleted")]
    pub snapshot: Option<String>,
    /// List this account's folders.
    #[arg(long)]
    pub account: Option<String>,
    /// List this folder's messages: its name as `ls --account` shows it (`Entwürfe`,
    /// `Archive/2023`). With --deleted: only those last held in it or its subfolders.
    #[arg(long)]
    pub folder: Option<String>,
    /// List the messages deleted from --account: held by a snapshot of the window and
    /// nowhere in the account by the latest snapshot (matched by content: a message moved
    /// to another folder is not deleted), then the deleted files of its home (sieve
    /// scripts, matched by path).
    #[arg(long, requires = "account")]
    pub deleted: bool,
    /// List the store's own files the snapshot keeps, beside its accounts (a Maildir
    /// store's shared-mailbox dictionary): restored with the whole snapshot only.
    #[arg(long, conflicts_with_all = ["account", "folder"])]
    pub store: bool,
    /// With --deleted: compare only the snapshots of this last period (`7d`, `2w`, `36h`);
    /// default: all.
    #[arg(long, value_name = "DURATION", requires = "deleted")]
    pub within: Option<String>,
    /// With --deleted: compare only the snapshots taken at or after this time
    /// (`2025-03-01`, `2025-03-01 14:30:00` local time, or RFC 3339).
    #[arg(
        long,
        value_name = "DATE",
        requires = "deleted",
        conflicts_with = "within"
    )]
    pub since: Option<String>,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let r = repo::open(g)?;
    if a.deleted {
        let opts = DeletedOptions {
            account: a.account.unwrap_or_default(),
            folders: a.folder.into_iter().collect(),
            since: window_start(a.within.as_deref(), a.since.as_deref())?,
        };
        let d = find_deleted(&r, &opts)?;
        if g.json {
            crate::output::json(&d)?;
        } else {
            print_deleted(&d);
            println!("{}", deleted_summary(&d));
            print_failures(&d.failures);
        }
        return Ok(match d.failures.is_empty() {
            true => Outcome::Ok,
            false => Outcome::Partial,
        });
    }
    let snapshot = a.snapshot.unwrap_or_default();
    // A folder's messages are printed as they are read, never held: as lines, or as the
    // items of the JSON object, one a line.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut shown = 0u64;
    let mut message = |m: MessageInfo| -> mailvault_core::Result<()> {
        let written = match g.json {
            true => {
                let open = if shown == 0 { JSON_MESSAGES } else { ",\n" };
                out.write_all(open.as_bytes()).and_then(|()| {
                    serde_json::to_writer(&mut out, &m).map_err(std::io::Error::from)
                })
            }
            false => writeln!(out, "{}", message_line(&m)),
        };
        shown += 1;
        written.map_err(|e| mailvault_core::Error::Io {
            path: "standard output".into(),
            source: e,
        })
    };
    let listing = match a.store {
        true => Listing::Files(store_files(&r, &snapshot)?),
        false => ls(
            &r,
            &snapshot,
            a.account.as_deref(),
            a.folder.as_deref(),
            &mut message,
        )?,
    };
    if let (Listing::Messages(_), true) = (&listing, g.json) {
        if shown == 0 {
            out.write_all(JSON_MESSAGES.as_bytes())?;
        }
        let storage = (crate::repo::usage().as_ref())
            .map(serde_json::to_string)
            .transpose()?;
        let storage = storage.map(|u| format!(",\n\"storage\": {u}"));
        writeln!(out, "\n]{}}}", storage.unwrap_or_default())?;
        out.flush()?;
        return Ok(Outcome::Ok);
    }
    out.flush()?;
    drop(out);
    if g.json {
        crate::output::json(&listing)?;
        return Ok(Outcome::Ok);
    }
    match listing {
        Listing::Accounts(v) => {
            for x in &v {
                let (n, what, b) = counted(x.messages, x.bytes, x.files, x.file_bytes);
                println!(
                    "{:<40} {n:>8} {what} {:>10}  {}",
                    safe(&x.name),
                    bytes(b),
                    safe(&x.path)
                );
            }
            let store = store_files(&r, &snapshot)?;
            if !store.is_empty() {
                let b: u64 = store.iter().map(|f| f.size).sum();
                println!(
                    "{:<40} {:>8} files    {:>10}  (ls --store)",
                    "the store's own files",
                    store.len(),
                    bytes(b)
                );
            }
        }
        Listing::Folders(v) => {
            for x in &v {
                let (n, what, b) = counted(x.messages, x.bytes, x.files, x.file_bytes);
                println!(
                    "{:<30} {:<30} {n:>8} {what} {:>10}",
                    safe(&x.account),
                    safe(&x.name),
                    bytes(b)
                );
                if !x.acl.is_empty() {
                    let acl: Vec<String> = (x.acl.iter())
                        .map(|r| format!("{} {}", safe(&r.identifier), safe(&r.rights)))
                        .collect();
                    println!("{:<30}   shared: {}", "", acl.join(", "));
                }
            }
        }
        // Printed as they came.
        Listing::Messages(_) => {}
        Listing::Files(v) => {
            for f in &v {
                let link = (f.link.as_ref()).map_or(String::new(), |l| format!(" -> {}", safe(l)));
                // The store's files are named with their directory (`example.org/x`).
                let dir = match (f.account.is_empty(), f.folder.as_str()) {
                    (true, d) if d != "." => format!("{}/", safe(d)),
                    _ => String::new(),
                };
                println!(
                    "{}  {:04o} {:>10}  {dir}{}{link}",
                    time(f.mtime),
                    f.mode,
                    bytes(f.size),
                    safe(&f.name)
                );
            }
        }
    }
    Ok(Outcome::Ok)
}

/// How the JSON object of a folder's messages starts, before its first item.
const JSON_MESSAGES: &str = "{\"kind\": \"messages\", \"items\": [\n";

/// The line of `ls` of one message.
fn message_line(m: &MessageInfo) -> String {
    format!(
        "{}  {:<6} {:>9}  {:<40}  {:<30.30}  {}",
        time(m.internal_date),
        safe(&m.flags),
        bytes(m.size),
        safe(&m.key),
        safe(&m.from),
        safe(&m.subject)
    )
}

/// What a line of `ls` counts: messages, or for what has none but files (a `file:`
/// backup), its files.
fn counted(messages: u64, bytes: u64, files: u64, file_bytes: u64) -> (u64, &'static str, u64) {
    if messages == 0 && files > 0 {
        (files, "files   ", file_bytes)
    } else {
        (messages, "messages", bytes)
    }
}

/// One line per deleted message: internal date, From, Subject, folder, and the first and
/// last snapshot that held it.
pub fn print_deleted(d: &Deleted) {
    for m in &d.messages {
        println!(
            "{}  {:<30.30}  {:<40.40}  {:<20}  {} {}",
            time(m.message.internal_date),
            safe(&m.message.from),
            safe(&m.message.subject),
            safe(&m.message.folder),
            &m.first_snapshot[..8],
            &m.last_snapshot[..8],
        );
    }
    for f in &d.files {
        println!(
            "{}  {:>10}  {:<72.72}  {} {}",
            time(f.mtime),
            f.size,
            safe(&f.path),
            &f.first_snapshot[..8],
            &f.last_snapshot[..8],
        );
    }
}

/// What the list was found against.
pub fn deleted_summary(d: &Deleted) -> String {
    format!(
        "deleted from {}: {} messages, {} files of the home (sieve scripts); compared: {} snapshots of {} on {} with the latest, {} ({})",
        safe(&d.account),
        d.messages.len(),
        d.files.len(),
        d.compared.len(),
        safe(&d.source),
        safe(&d.hostname),
        &d.latest[..8],
        time(d.latest_time)
    )
}
