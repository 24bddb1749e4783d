//! `mailvault demo`: the whole job on a generated mail store, end to end: generate a
//! store, back it up, change it as a day of mail would, back it up again, restore it,
//! verify the restore byte for byte, check the repository.

use crate::{progress::Bar, repo, GlobalOpts, Outcome};
use anyhow::{bail, Context, Result};
use mailvault_core::ops::backup::{self, BackupReport};
use mailvault_core::ops::check::{check, CheckOptions};
use mailvault_core::ops::restore::{restore, RestoreOptions};
use mailvault_core::restore::Selection;
use mailvault_core::source::maildir::{BackupOptions, MaildirSource};
use mailvault_core::source::RunOptions;
use mailvault_core::store::Backend;
use mailvault_core::store::{LocalStore, Metered};
use mailvault_core::{InitOptions, Repository};
use mailvault_corpus::{generate, mutate, CorpusSpec, MutationSpec};
use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Working directory for the store, the repository and the restore (must not exist;
    /// default: a new directory under /tmp).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Size of the generated store: tiny (300 messages), small (10k, ~0.4 GB), medium
    /// (30k), large (100k, ~4 GB).
    #[arg(long, default_value = "small")]
    pub preset: String,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let Some(spec) = CorpusSpec::preset(&a.preset) else {
        bail!(
            "unknown preset {:?}: use tiny, small, medium or large",
            a.preset
        );
    };
    let dir = match a.dir {
        Some(d) => {
            if d.exists() {
                bail!("{} exists: give a new directory", d.display());
            }
            std::fs::create_dir_all(&d)?;
            d
        }
        None => tempfile::Builder::new()
            .prefix("mailvault-demo-")
            .tempdir()?
            .keep(),
    };
    let (src, repo_dir, out) = (dir.join("vmail"), dir.join("repo"), dir.join("restore"));
    let jobs = repo::jobs(g);

    println!(
        "1. generating a mail store ({} preset) in {}",
        a.preset,
        src.display()
    );
    let s = generate(&spec, &src).context("generating the sample store")?;
    println!(
        "   {} accounts, {} folders, {} messages, {:.1} MB ({} per-recipient copies, {} with attachments)",
        s.accounts,
        s.folders,
        s.messages,
        s.bytes as f64 / 1e6,
        s.copies,
        s.attachments
    );

    let password = b"demo";
    std::fs::write(dir.join("password"), password)?;
    // The repository: `--repo` when given (a local directory or object storage), else
    // one in the working directory.
    let store: Arc<dyn Backend> = match g.repo {
        Some(_) => {
            repo::prepare_new(g, None)?;
            repo::store(g)?
        }
        None => Arc::new(Metered::new(Arc::new(LocalStore::new(&repo_dir)))),
    };
    println!(
        "2. creating an encrypted repository in {}",
        store.location()
    );
    let mut r = Repository::init(store, password, &InitOptions::default())?;

    let opts = BackupOptions {
        source: src.clone(),
        accounts: vec![],
        jobs,
        stat_unchanged: false,
        run: RunOptions {
            tags: vec!["demo".into()],
            ..RunOptions::new(mailvault_core::hostname())
        },
    };
    println!("3. full backup");
    let b1 = Bar::run(g.quiet, "backup ", |bar| backup(&mut r, &opts, bar))?;
    summary_backup(&b1);

    let m = mutate(&MutationSpec::default(), &src).context("changing the sample store")?;
    println!(
        "4. a day of mail: {} flag changes, {} new messages, {} deleted; incremental backup",
        m.flag_renames, m.new_messages, m.deleted
    );
    let b2 = Bar::run(g.quiet, "backup ", |bar| backup(&mut r, &opts, bar))?;
    summary_backup(&b2);

    println!("5. restoring the latest snapshot to {}", out.display());
    let opts = RestoreOptions {
        select: Selection {
            snapshot: "latest".into(),
            ..Default::default()
        },
        target: out.clone(),
        jobs,
        ..Default::default()
    };
    let rr = Bar::run(g.quiet, "restore", |bar| restore(&r, &opts, bar))?;
    println!(
        "   {} messages, {:.1} MB in {:.2} s: {:.0} messages/s, {:.0} MB/s",
        rr.items_restored,
        rr.bytes_written as f64 / 1e6,
        rr.elapsed_secs,
        rr.items_per_sec,
        rr.mb_per_sec
    );

    println!("6. comparing the restore with the store, byte for byte");
    let (n, diffs) = compare(&src, &out)?;
    if !diffs.is_empty() {
        for d in diffs.iter().take(20) {
            println!("   DIFFERS: {d}");
        }
        bail!("{} of {n} files differ after restore", diffs.len());
    }
    println!("   all {n} files identical: names, bytes, mtimes and modes");

    println!("7. indexing every message for search, then searching");
    let cache = dir.join("search-cache");
    let started = std::time::Instant::now();
    let ix = mailvault_core::search::build::index(
        &r,
        &cache,
        &mailvault_core::search::build::IndexOptions::default(),
        &mailvault_core::report::NoProgress,
    )?;
    println!(
        "   {} distinct messages indexed in {:.2} s",
        ix.indexed,
        started.elapsed().as_secs_f64()
    );
    let text = "has:attachment";
    let query = mailvault_core::search::query::parse(text, jiff::Timestamp::now())?;
    let started = std::time::Instant::now();
    let found = mailvault_core::search::exec::search(
        &r,
        &cache,
        &query,
        &mailvault_core::search::exec::SearchOptions {
            scope: mailvault_core::search::places::Scope::Latest,
            accounts: vec![],
            folders: vec![],
            offset: 0,
            limit: 1,
            facets: false,
        },
    )?;
    println!(
        "   `mailvault search {text}`: {} messages in {:.3} s",
        found.total,
        started.elapsed().as_secs_f64()
    );

    println!("8. checking the repository (every file, every blob, the search index)");
    let c = check(
        &r,
        &CheckOptions {
            read_data: true,
            jobs,
            ..Default::default()
        },
    )?;
    if !c.ok() {
        bail!("check found {} errors", c.errors.len());
    }
    println!(
        "   {} files, {} blobs verified, no errors ({:.2} s)",
        c.files_checked, c.blobs_verified, c.elapsed_secs
    );

    let failed = b1.items_failed + b2.items_failed + rr.items_failed;
    println!("\ndone. Try the commands yourself:");
    println!(
        "   export MAILVAULT_REPOSITORY={} MAILVAULT_PASSWORD_FILE={}",
        r.store().location(),
        dir.join("password").display()
    );
    println!("   mailvault snapshots; mailvault ls latest; mailvault stats");
    println!("   mailvault search 'has:attachment after:2020-01-01'; mailvault show ID");
    println!("remove {} when done", dir.display());
    Ok(if failed > 0 {
        Outcome::Partial
    } else {
        Outcome::Ok
    })
}

fn summary_backup(b: &mailvault_core::ops::backup::BackupReport) {
    println!(
        "   {} messages ({} read, {} unchanged), {:.1} MB read, {:.1} MB added, dedup {}, compression {}, {:.2} s: {:.0} messages/s, {:.0} MB/s",
        b.items_total,
        b.items_new,
        b.items_unchanged,
        b.bytes_read as f64 / 1e6,
        b.bytes_added as f64 / 1e6,
        crate::output::ratio(b.dedup_ratio),
        crate::output::ratio(b.compression_ratio),
        b.elapsed_secs,
        b.items_per_sec,
        b.mb_per_sec
    );
}

type Files = BTreeMap<Vec<u8>, (u64, i64, u32)>;

/// Lists the files a restore must give back (tmp/ and Dovecot caches left out).
fn walk(root: &Path) -> Result<Files> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).with_context(|| d.display().to_string())? {
            let e = e?;
            let meta = e.metadata()?;
            let name = e.file_name();
            if meta.is_dir() {
                if name != "tmp" {
                    stack.push(e.path());
                }
            } else if !name.as_bytes().starts_with(b"dovecot.index") {
                let rel = e.path().strip_prefix(root)?.as_os_str().as_bytes().to_vec();
                out.insert(rel, (meta.len(), meta.mtime(), meta.mode() & 0o7777));
            }
        }
    }
    Ok(out)
}

fn compare(a: &Path, b: &Path) -> Result<(usize, Vec<String>)> {
    let (fa, fb) = (walk(a)?, walk(b)?);
    let mut diffs = Vec::new();
    for (k, va) in &fa {
        let name = String::from_utf8_lossy(k).to_string();
        match fb.get(k) {
            None => diffs.push(format!("{name}: missing")),
            Some(vb) if vb != va => diffs.push(format!("{name}: size, mtime or mode")),
            Some(_) => {
                let p = |root: &Path| root.join(std::ffi::OsStr::from_bytes(k));
                if std::fs::read(p(a))? != std::fs::read(p(b))? {
                    diffs.push(format!("{name}: bytes"));
                }
            }
        }
    }
    for k in fb.keys().filter(|k| !fa.contains_key(*k)) {
        diffs.push(format!("{}: extra", String::from_utf8_lossy(k)));
    }
    Ok((fa.len(), diffs))
}

/// A backup of the sample store, dated now.
fn backup(
    r: &mut Repository,
    opts: &BackupOptions,
    bar: &Bar,
) -> mailvault_core::Result<BackupReport> {
    let source = MaildirSource::new(opts)?;
    backup::run(r, &source, &opts.run, mailvault_core::now(), bar)
}
