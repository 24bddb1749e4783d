//! `mailvault backup`

use crate::output::{bytes, count, print_failures, ratio};
use crate::{progress::Bar, repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::ops::backup::{self, BackupReport};
use mailvault_core::search::build::{index, IndexOptions, IndexReport};
use mailvault_core::search::inline::IndexAsRead;
use mailvault_core::source::imap::{ImapBackupOptions, ImapSource};
use mailvault_core::source::maildir::{BackupOptions, MaildirSource};
use mailvault_core::Compression;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// What to back up: `maildir:/var/vmail` (a store of <domain>/<user>/Maildir),
    /// `maildir:/home/bob/Maildir` (one Maildir; name it with --account), IMAP
    /// accounts: `imap://bob@example.org@host[:port]` (one account) or `imap://host`
    /// with --imap-master-user and --account/--accounts-file (`imaps://` for TLS),
    /// mbox files: `mbox:/var/mail` (a spool, one file per user; --domain), `mbox:DIR`
    /// of `<domain>/<user>/` folder trees (as `restore --target mbox:` writes a store),
    /// `mbox:FILE --account A [--folder F]` (one file), `mbox:DIR --account A` (a mail
    /// client's folder tree), `eml:DIR --account A` (.eml files, folders as
    /// directories), or files and directory trees as files: `file:PATH [file:PATH...]`
    /// (mail databases: NSF, PST, EDB, SQL dumps; one account per PATH).
    pub source: String,
    /// Further `file:PATH`s, backed up in the same snapshot.
    #[arg(value_name = "file:PATH")]
    pub more: Vec<String>,
    /// `file:` sources: back up only files matching this glob (on the whole path or the
    /// file name: `*.nsf`, `/srv/db/**`); repeatable.
    #[arg(long)]
    pub include: Vec<String>,
    /// `file:` sources: leave out files and directories matching this glob; repeatable.
    #[arg(long)]
    pub exclude: Vec<String>,
    /// The account name of a single Maildir, an mbox file or folder tree, or an EML
    /// tree; for a store, back up only these accounts.
    #[arg(long)]
    pub account: Vec<String>,
    /// mbox spool (`mbox:/var/mail`): the domain of its users' accounts (`user@domain`).
    #[arg(long)]
    pub domain: Option<String>,
    /// One mbox file (`mbox:FILE --account A`): the folder it is (default INBOX).
    #[arg(long)]
    pub folder: Option<String>,
    /// Compression for this run (default: the repository's).
    #[arg(long, value_parser = ["zstd", "lz4", "none"])]
    pub compression: Option<String>,
    /// Tag the snapshot.
    #[arg(long)]
    pub tag: Vec<String>,
    /// Host name recorded in the snapshot (default: this machine's).
    #[arg(long)]
    pub host: Option<String>,
    /// The snapshot's time instead of now: "YYYY-MM-DD HH:MM:SS" in this machine's time
    /// zone, or RFC 3339 with an offset ("2026-11-24T05:00:00+01:00"), for imports of old
    /// stores and tests of forget policies.
    #[arg(long, value_parser = mailvault_core::repo::snapshot::parse_time)]
    pub time: Option<(i64, u32)>,
    /// Read every message, even those the previous snapshot has.
    #[arg(long)]
    pub force: bool,
    /// List every folder, even one whose cur/ and new/ are proven unchanged since the
    /// previous snapshot (same inode, mtime and ctime, older than that backup's start);
    /// messages the previous snapshot has are still not read again.
    #[arg(long)]
    pub rescan: bool,
    /// Also stat the messages the previous snapshot has and read again those whose size or
    /// mtime changed. Maildir files never change once delivered, so by default they are
    /// recognized by name alone; use this for stores edited in place.
    #[arg(long)]
    pub stat_unchanged: bool,
    /// Index the messages the backup adds for `search` as it reads them, then whatever
    /// else no split of the index holds yet (as `mailvault index`). docs/search.md.
    #[arg(long)]
    pub index: bool,
    #[command(flatten)]
    pub imap: super::imap::ImapArgs,
    /// IMAP: a file with the accounts to back up, one per line (with --imap-master-user).
    #[arg(long)]
    pub accounts_file: Option<std::path::PathBuf>,
    /// `file:` and `maildir:` sources: back up from a read-only snapshot of the filesystem
    /// the source is on (`btrfs`, `lvm` or `zfs`), taken when the backup starts and
    /// removed when it ends (also after a failure; one left by a killed run is removed by
    /// the next), so that files written to meanwhile are stored as they were at one
    /// moment. The snapshot records the original paths. See docs/consistent-sources.md.
    #[arg(long, value_name = "KIND", value_parser = ["btrfs", "lvm", "zfs"])]
    pub snapshot: Option<String>,
}

/// Threads of the directory warm-up: they wait on the disk, not the CPU. On the 2-core
/// VM of BENCHMARKS.md a cold incremental of 100k messages took 0.76-0.86 s with 4 and
/// 0.77-0.81 s with 12 (within noise there; more requests in flight suit deeper queues).
const WARM_THREADS: usize = 12;

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let rep = execute(g, a)?;
    if g.json {
        crate::output::json(&rep)?;
    } else {
        print_report(&rep);
    }
    let index_failed = rep.index.as_ref().is_some_and(|i| !i.failures.is_empty());
    Ok(if rep.items_failed > 0 || index_failed {
        Outcome::Partial
    } else {
        Outcome::Ok
    })
}

/// Runs the backup `a` describes (under a progress bar) and notes its figures for the
/// metrics file; its report. `run --profile` calls it for each source.
pub fn execute(g: &GlobalOpts, a: Args) -> Result<BackupReport> {
    let source = a.source.clone();
    let rep = execute_source(g, a);
    crate::metrics::note_source(match &rep {
        Ok(r) => crate::metrics::SourceFigures::of(&source, r),
        Err(_) => crate::metrics::SourceFigures::failed(&source),
    });
    rep
}

fn execute_source(g: &GlobalOpts, a: Args) -> Result<BackupReport> {
    if super::imap::is_imap(&a.source) {
        return run_imap(g, a);
    }
    if a.snapshot.is_some() && super::imap::is_imap(&a.source) {
        anyhow::bail!("--snapshot applies to file: and maildir: sources (files on this machine)");
    }
    if a.imap.any_given() || a.accounts_file.is_some() {
        anyhow::bail!("the IMAP flags only apply to imap:// and imaps:// sources");
    }
    if let super::Location::Files(p) = super::location(&a.source, "source", super::Role::Mail)? {
        return run_files(g, a, p);
    }
    if !a.more.is_empty() || !a.include.is_empty() || !a.exclude.is_empty() {
        anyhow::bail!("several sources, --include and --exclude only apply to file: sources");
    }
    let location = super::location(&a.source, "source", super::Role::Mail)?;
    if a.snapshot.is_some()
        && matches!(location, super::Location::Mbox(_) | super::Location::Eml(_))
    {
        anyhow::bail!("--snapshot applies to file: and maildir: sources");
    }
    match location {
        super::Location::Mbox(p) => return run_mbox(g, a, p),
        super::Location::Eml(p) => return run_eml(g, a, p),
        _ => {}
    }
    if a.domain.is_some() || a.folder.is_some() {
        anyhow::bail!("--domain and --folder only apply to mbox: sources");
    }
    let source = super::maildir_location(&a.source, "source")?;
    // Walk the source's directories while the key is derived and the index loaded;
    // detached: it ends on its own, or with the process.
    {
        let (source, accounts) = (source.clone(), a.account.clone());
        let listings = a.rescan || a.force || a.stat_unchanged;
        std::thread::Builder::new()
            .name("warm".into())
            .spawn(move || {
                mailvault_core::source::maildir::warm_directories(
                    &source,
                    &accounts,
                    WARM_THREADS,
                    listings,
                )
            })
            .ok();
    }
    let snapshots = take_snapshots(a.snapshot.as_deref(), std::slice::from_ref(&source))?;
    let opts = BackupOptions {
        run: run_options(g, &a)?,
        source,
        accounts: a.account,
        jobs: repo::readers(g),
        stat_unchanged: a.stat_unchanged,
    };
    let rep = match snapshots.first().map(|s| s.read_from()) {
        Some(from) => run_backup(g, a.time, |r, time, bar| {
            let mut source = MaildirSource::new(&opts)?;
            source.read_from(&from)?;
            backup::run(r, &source, &opts.run, time, bar)
        }),
        None => run_backup(g, a.time, |r, time, bar| {
            MaildirSource::new(&opts).and_then(|s| backup::run(r, &s, &opts.run, time, bar))
        }),
    };
    remove_snapshots(snapshots, rep)
}

/// The options every kind of source shares.
fn run_options(g: &GlobalOpts, a: &Args) -> Result<mailvault_core::source::RunOptions> {
    Ok(mailvault_core::source::RunOptions {
        compression: a
            .compression
            .as_deref()
            .map(str::parse::<Compression>)
            .transpose()?,
        tags: a.tag.clone(),
        hostname: a.host.clone().unwrap_or_else(mailvault_core::hostname),
        force: a.force,
        rescan: a.rescan,
        index: a.index.then(|| IndexAsRead {
            cache_root: repo::cache_root(g),
            opts: IndexOptions::default(),
        }),
    })
}

/// The one account an mbox file or tree, or an EML tree, is backed up as.
fn one_account(a: &Args, what: &str) -> Result<String> {
    match a.account.as_slice() {
        [one] => Ok(one.clone()),
        [] => anyhow::bail!("{what}: name the account with --account"),
        _ => anyhow::bail!("{what}: one --account only"),
    }
}

fn run_mbox(g: &GlobalOpts, a: Args, path: std::path::PathBuf) -> Result<BackupReport> {
    use mailvault_core::source::mbox::{MboxLayout, MboxOptions, MboxSource};
    let what = format!("mbox source {}", path.display());
    let layout = if path.is_dir() {
        if a.folder.is_some() {
            anyhow::bail!(
                "{what}: --folder names the folder of one mbox file, and this is a directory"
            );
        }
        if a.account.is_empty() {
            if mailvault_core::source::mbox::is_store(&path)? {
                if a.domain.is_some() {
                    anyhow::bail!("{what}: holds <domain>/<user>/ folder trees, not a spool: --domain does not apply");
                }
                MboxLayout::Store
            } else {
                MboxLayout::Spool {
                    domain: a.domain.clone(),
                }
            }
        } else {
            if a.domain.is_some() {
                anyhow::bail!("{what}: --domain is for a spool (no --account), --account for one account's folder tree");
            }
            MboxLayout::Tree {
                account: one_account(&a, &what)?,
            }
        }
    } else {
        if a.domain.is_some() {
            anyhow::bail!(
                "{what}: --domain is for a spool directory; name one file's account with --account"
            );
        }
        MboxLayout::File {
            account: one_account(&a, &what)?,
            folder: a.folder.clone().unwrap_or_else(|| "INBOX".into()),
        }
    };
    let opts = MboxOptions {
        path,
        layout,
        jobs: repo::jobs(g),
        run: run_options(g, &a)?,
    };
    run_backup(g, a.time, |r, time, bar| {
        MboxSource::new(&opts).and_then(|s| backup::run(r, &s, &opts.run, time, bar))
    })
}

fn run_eml(g: &GlobalOpts, a: Args, path: std::path::PathBuf) -> Result<BackupReport> {
    use mailvault_core::source::eml::{EmlOptions, EmlSource};
    let what = format!("EML source {}", path.display());
    if a.domain.is_some() || a.folder.is_some() {
        anyhow::bail!("{what}: --domain and --folder only apply to mbox: sources");
    }
    let opts = EmlOptions {
        path,
        account: one_account(&a, &what)?,
        jobs: repo::readers(g),
        run: run_options(g, &a)?,
    };
    run_backup(g, a.time, |r, time, bar| {
        EmlSource::new(&opts).and_then(|s| backup::run(r, &s, &opts.run, time, bar))
    })
}

/// `backup file:PATH [file:PATH...]`: files and directory trees as files.
fn run_files(g: &GlobalOpts, a: Args, first: std::path::PathBuf) -> Result<BackupReport> {
    use mailvault_core::source::file::{FileOptions, FileSource};
    if !a.account.is_empty() || a.domain.is_some() || a.folder.is_some() || a.stat_unchanged {
        anyhow::bail!(
            "file: sources: --account, --domain, --folder and --stat-unchanged do not apply \
             (each PATH is an account, named by its path)"
        );
    }
    let mut paths = vec![first];
    for s in &a.more {
        match super::location(s, "source", super::Role::Mail)? {
            super::Location::Files(p) => paths.push(p),
            _ => anyhow::bail!("source {s:?}: only file:PATH sources can be given together"),
        }
    }
    let snapshots = take_snapshots(a.snapshot.as_deref(), &paths)?;
    let opts = FileOptions {
        paths,
        include: a.include.clone(),
        exclude: a.exclude.clone(),
        jobs: repo::readers(g),
        depth: None,
        read_from: snapshots.iter().map(|s| s.read_from()).collect(),
        run: run_options(g, &a)?,
    };
    let rep = run_backup(g, a.time, |r, time, bar| {
        FileSource::new(&opts).and_then(|s| backup::run(r, &s, &opts.run, time, bar))
    });
    remove_snapshots(snapshots, rep)
}

/// `--snapshot KIND`: removes the snapshots killed runs left, then takes one of each
/// filesystem holding `paths` (none without `--snapshot`).
fn take_snapshots(
    kind: Option<&str>,
    paths: &[std::path::PathBuf],
) -> Result<Vec<mailvault_core::source::fs_snapshot::FsSnapshot>> {
    use mailvault_core::source::fs_snapshot::{origin, remove_stale, FsSnapshot, Kind};
    let Some(kind) = kind else {
        return Ok(Vec::new());
    };
    let kind: Kind = kind.parse()?;
    let Some(state) = mailvault_core::host::seen::StateDir::from_env() else {
        anyhow::bail!(
            "--snapshot: no state directory to record snapshots in (set MAILVAULT_STATE_DIR, XDG_STATE_HOME or HOME)"
        );
    };
    for id in remove_stale(state.path())? {
        eprintln!(
            "{}",
            crate::output::safe(&format!(
                "removed the filesystem snapshot {id}, left by a backup that did not end"
            ))
        );
    }
    let mut taken: Vec<FsSnapshot> = Vec::new();
    for p in paths {
        let p = std::path::absolute(p)?;
        // One snapshot per filesystem (a nested subvolume is one of its own).
        let fs = origin(kind, &p)?;
        if taken.iter().any(|s| s.origin() == fs) {
            continue;
        }
        taken.push(FsSnapshot::take(kind, &p, state.path())?);
    }
    Ok(taken)
}

/// Removes the snapshots a backup read from; one that cannot be removed fails the run
/// (the next run tries again).
fn remove_snapshots(
    snapshots: Vec<mailvault_core::source::fs_snapshot::FsSnapshot>,
    rep: Result<BackupReport>,
) -> Result<BackupReport> {
    let mut failed = None;
    for s in snapshots {
        let id = s.id().to_string();
        if let Err(e) = s.remove() {
            failed = Some(anyhow::anyhow!(
                "the filesystem snapshot {id} could not be removed: {e}; the next backup with --snapshot tries again"
            ));
        }
    }
    let rep = rep?;
    match failed {
        Some(e) => Err(e),
        None => Ok(rep),
    }
}

/// Opens the repository, runs one backup dated `time` (default now) under a progress
/// bar, and records the snapshots seen: every kind of source.
fn run_backup<E: std::error::Error + Send + Sync + 'static>(
    g: &GlobalOpts,
    time: Option<(i64, u32)>,
    backup: impl FnOnce(
        &mut mailvault_core::Repository,
        (i64, u32),
        &Bar,
    ) -> std::result::Result<BackupReport, E>,
) -> Result<BackupReport> {
    let mut r = repo::open(g)?;
    let time = time.unwrap_or_else(mailvault_core::now);
    let mut out = Bar::run(g.quiet || g.json, "backup ", |bar| {
        backup(&mut r, time, bar)
    })?;
    record_seen(&r);
    if let Some(during) = out.index.take() {
        out.index = Some(index_rest(g, &r, during, &mut out.warnings));
    }
    Ok(out)
}

/// `backup --index`, after the backup: what it did not index as it read (contents the
/// repository had, which earlier runs may not have indexed), as `mailvault index` does;
/// the two runs' figures in one report. A failure is a warning: the backup is saved.
fn index_rest(
    g: &GlobalOpts,
    r: &mailvault_core::Repository,
    during: IndexReport,
    warnings: &mut Vec<String>,
) -> IndexReport {
    let rest = repo::search_cache(g, r).and_then(|cache| {
        Bar::run(g.quiet || g.json, "index  ", |bar| {
            index(r, cache.path(), &IndexOptions::default(), bar)
        })
    });
    match rest {
        Ok(mut rest) => {
            rest.already_indexed = rest.already_indexed.saturating_sub(during.indexed);
            rest.indexed += during.indexed;
            rest.as_read = during.indexed;
            rest.bytes += during.bytes;
            rest.truncated += during.truncated;
            let mut splits = during.splits;
            splits.append(&mut rest.splits);
            rest.splits = splits;
            rest
        }
        Err(e) => {
            warnings.push(format!(
                "indexing after the backup: {e} (`mailvault index` indexes what is left)"
            ));
            during
        }
    }
}

/// Records the snapshots now in the repository, the new one among them, in this host's
/// record; warns about those it saw that are gone. Never fails the backup.
fn record_seen(r: &mailvault_core::Repository) {
    let Some(state) = repo::state() else {
        return;
    };
    match mailvault_core::host::seen::record_listing(&state, r) {
        Ok(o) => repo::warn_seen(&o.missing, &o.warnings),
        Err(e) => eprintln!(
            "warning: {}",
            crate::output::safe(&format!("listing snapshots for this host's record: {e}"))
        ),
    }
}

pub fn print_report(r: &BackupReport) {
    let parent = r
        .parent
        .as_deref()
        .map(|p| format!(" (parent {})", &p[..8]))
        .unwrap_or_default();
    println!("snapshot {} saved{parent}", &r.snapshot[..8]);
    println!("  accounts   {}, folders {}", r.accounts, r.folders);
    // A `file:` backup's items are files.
    let (what, per) = if r.source.starts_with("file:") {
        ("files   ", "files")
    } else {
        ("messages", "messages")
    };
    // Other names of a hard-linked file, read once under its first.
    let linked = match r.files_linked {
        0 => String::new(),
        n => format!(", {} (read once)", count(n, "hard link", "hard links")),
    };
    println!(
        "  {what}   {} total: {} new, {} unchanged{linked}, {} failed",
        r.items_total, r.items_new, r.items_unchanged, r.items_failed
    );
    if r.home_files > 0 {
        println!(
            "  home       {} of the accounts' homes (sieve scripts): {} new",
            count(r.home_files, "file", "files"),
            r.home_files_new
        );
    }
    println!(
        "  size       {} in the snapshot, {} read",
        bytes(r.bytes_total),
        bytes(r.bytes_read)
    );
    println!(
        "  added      {} to the repository (dedup {}, compression {}; {} packs written, {} resumed)",
        bytes(r.bytes_added),
        ratio(r.dedup_ratio),
        ratio(r.compression_ratio),
        r.packs_written,
        r.packs_resumed
    );
    println!(
        "  time       {:.2} s: {:.0} {per}/s, {:.1} MB/s",
        r.elapsed_secs, r.items_per_sec, r.mb_per_sec
    );
    if let Some(ix) = &r.index {
        super::index::print_report(ix);
    }
    for w in &r.warnings {
        println!("warning: {}", crate::output::safe(w));
    }
    print_failures(&r.failures);
}

fn run_imap(g: &GlobalOpts, a: Args) -> Result<BackupReport> {
    let (url, user) = super::imap::split_user(&a.source);
    let connection = a.imap.connection(&url)?;
    let mut accounts: Vec<String> = user.iter().cloned().collect();
    accounts.extend(a.account.iter().cloned());
    if let Some(f) = &a.accounts_file {
        let text = std::fs::read_to_string(f)
            .map_err(|e| anyhow::anyhow!("reading accounts file {}: {e}", f.display()))?;
        accounts.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(String::from),
        );
    }
    accounts.dedup();
    let source = match &user {
        Some(u) => url.replacen("://", &format!("://{u}@"), 1),
        None => connection.url(),
    };
    let opts = ImapBackupOptions {
        run: run_options(g, &a)?,
        source,
        accounts,
        connection,
        connections: a.imap.connections.max(1),
        parallel_accounts: a.imap.accounts.max(1),
        fetch_batch: 200,
        sieve_port: a.imap.sieve_port,
    };
    run_backup(g, a.time, |r, time, bar| {
        ImapSource::new(&opts).and_then(|s| backup::run(r, &s, &opts.run, time, bar))
    })
}
