//! Opening the repository the flags and environment name, with its password.

use crate::commands::{Location, Role};
use crate::GlobalOpts;
use anyhow::{bail, Result};
use mailvault_core::host::seen::{StateDir, STATE_DIR_ENV};
use mailvault_core::repo::lock::LockOptions;
use mailvault_core::store::{
    default_cache_root, Addressing, LocalStore, S3Options, S3Store, Stack, StackOptions,
    StoreUsage, DEFAULT_CONNECTIONS,
};
use mailvault_core::store::{Backend, LockPolicy, ObjectLock};
use mailvault_core::{Id, Repository};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::OnceLock;

/// The store behind `--repo` / MAILVAULT_REPOSITORY, with its wrappers; the stack is
/// kept for the report of what the storage was asked ([`usage`]).
pub fn store(g: &GlobalOpts) -> Result<Arc<dyn Backend>> {
    Ok(stack(g)?.store.clone())
}

/// The storage stack of this run, once [`store`] built it.
static STACK: OnceLock<Stack> = OnceLock::new();

/// The cache root [`STACK`] was built with.
static STACK_CACHE: OnceLock<Option<std::path::PathBuf>> = OnceLock::new();

fn stack(g: &GlobalOpts) -> Result<&'static Stack> {
    let cache_root = cache_root(g);
    if let Some(s) = STACK.get() {
        if STACK_CACHE.get() == Some(&cache_root) {
            return Ok(s);
        }
        // A command run inside another (`run`'s check) that wants a cache of its own: a
        // stack of its own, kept to the end of the process (once or twice a run).
        return Ok(Box::leak(Box::new(build_stack(g, cache_root)?)));
    }
    let s = build_stack(g, cache_root.clone())?;
    let _ = STACK_CACHE.set(cache_root);
    Ok(STACK.get_or_init(|| s))
}

fn build_stack(g: &GlobalOpts, cache_root: Option<std::path::PathBuf>) -> Result<Stack> {
    let Some(loc) = &g.repo else {
        bail!("no repository given: use --repo PATH or set MAILVAULT_REPOSITORY");
    };
    let o = &g.storage;
    let opts = StackOptions {
        connections: o.store_connections.unwrap_or(DEFAULT_CONNECTIONS).max(1),
        upload_kib: o.limit_upload,
        download_kib: o.limit_download,
        cache_root,
        give_up_after: o.give_up_after,
    };
    let s = match crate::commands::location(loc, "repository", Role::Repository)? {
        Location::Dir(p) => {
            let store = LocalStore::new(p).with_cache_root(opts.cache_root.clone());
            // Leftovers of a killed writer are never part of the repository.
            let _ = store.clean_temporaries();
            Stack::local(Arc::new(store))
        }
        Location::S3(url) => {
            let mut s3 = S3Options::from_url_and_env(&url)?;
            s3.addressing = match o.s3_addressing.as_str() {
                "path" => Addressing::Path,
                "virtual" => Addressing::VirtualHost,
                _ => Addressing::Auto,
            };
            Stack::remote(Arc::new(S3Store::new(s3)?), &opts)?
        }
        Location::Imap(_)
        | Location::Mbox(_)
        | Location::Eml(_)
        | Location::Files(_)
        | Location::Plain(_) => {
            bail!("repository {loc:?}: give a directory or an s3: location")
        }
    };
    Ok(s)
}

/// Gets the storage ready for a new repository: on object storage, creates the bucket
/// when it is missing (with Object Lock and `lock` as its default retention, when given)
/// and checks that the server keeps objects write-once, which everything the repository
/// does depends on.
pub fn prepare_new(g: &GlobalOpts, lock: Option<LockPolicy>) -> Result<()> {
    let stack = stack(g)?;
    match (&stack.s3, lock) {
        (Some(s3), lock) => {
            s3.create_bucket_with(lock.is_some())?;
            if let Some(policy) = lock {
                s3.set_lock_policy(policy)?;
            }
            s3.check_conditional_puts(stack.store.as_ref())?;
        }
        (None, Some(_)) => bail!(
            "--lock-days: Object Lock is a feature of object storage (S3); a local directory has none"
        ),
        (None, None) => {}
    }
    Ok(())
}

/// What the storage was asked in this run, if a store was opened.
pub fn usage() -> Option<StoreUsage> {
    STACK.get().map(Stack::usage)
}

/// Why this run gave up on its storage, if it did (`--give-up-after`).
pub fn given_up() -> Option<String> {
    STACK.get().and_then(Stack::given_up)
}

/// The calls on versions and retentions of the S3 store under the stack (retried), when
/// the repository is on object storage.
pub fn object_lock(g: &GlobalOpts) -> Result<Option<Arc<dyn ObjectLock>>> {
    Ok(stack(g)?.object_lock())
}

/// Whether this run's repository is on object storage.
pub fn remote() -> bool {
    STACK.get().is_some_and(|s| s.s3.is_some())
}

/// The password from --password-file, MAILVAULT_PASSWORD or a prompt on a terminal.
pub fn password(g: &GlobalOpts, confirm: bool) -> Result<Vec<u8>> {
    if let Some(f) = &g.password_file {
        return crate::secret::read_file("password file", f);
    }
    if let Ok(p) = std::env::var("MAILVAULT_PASSWORD") {
        if !p.is_empty() {
            return Ok(p.into_bytes());
        }
    }
    if !std::io::stdin().is_terminal() {
        bail!(
            "no password: set MAILVAULT_PASSWORD_FILE or MAILVAULT_PASSWORD, or run on a terminal"
        );
    }
    let p = rpassword::prompt_password("repository password: ")?;
    if confirm && rpassword::prompt_password("again: ")? != p {
        bail!("the passwords do not match");
    }
    if p.is_empty() {
        bail!("empty password");
    }
    Ok(p.into_bytes())
}

/// Opens the repository and warns, one line per file, about the files it could not read
/// (index files, dictionaries, snapshots): each costs what it holds, never the command.
pub fn open(g: &GlobalOpts) -> Result<Repository> {
    let store = store(g)?;
    let pw = password(g, false)?;
    let mut repo = Repository::open(store, &pw)?;
    // A config older than one this host has seen is a rollback: refused before any use.
    if let Some(state) = StateDir::from_env() {
        state.check_format(&repo.config().id, repo.config().version)?;
    }
    repo.set_lock_options(LockOptions {
        wait: g.retry_lock,
        no_lock: g.no_lock,
        ..LockOptions::default()
    });
    if g.append_only {
        repo.set_append_only();
    }
    if let Some(calls) = stack(g)?.object_lock() {
        repo.set_object_lock(calls);
    }
    for (path, e) in repo.index_errors() {
        eprintln!(
            "warning: {}: its packs' blobs look absent (run `mailvault check`, then `mailvault repair index`)",
            crate::output::safe(&mailvault_core::error::at_place(path, &e.to_string()))
        );
    }
    for (path, e) in repo.dictionary_errors() {
        eprintln!(
            "warning: {}: blobs compressed with it cannot be read (run `mailvault check`)",
            crate::output::safe(&mailvault_core::error::at_place(path, &e.to_string()))
        );
    }
    if repo.unfinished_migration() {
        eprintln!("warning: a `mailvault migrate` is unfinished: run it again to finish it");
    }
    for d in &repo.snapshots()?.damaged {
        eprintln!(
            "warning: {}: this snapshot is skipped (run `mailvault check`, then `mailvault repair snapshots`)",
            crate::output::safe(&mailvault_core::error::at_place(&d.path, &d.error.to_string()))
        );
    }
    Ok(repo)
}

/// This host's state directory, where the commands that list snapshots keep their record
/// of the repository (`mailvault_core::host::seen`); a warning when the environment names none.
pub fn state() -> Option<StateDir> {
    let s = StateDir::from_env();
    if s.is_none() {
        eprintln!(
            "warning: no state directory (set {STATE_DIR_ENV}, XDG_STATE_HOME or HOME): snapshots removed from the repository are not noticed"
        );
    }
    s
}

/// Prints the warnings of this host's snapshot record, and one about snapshots it saw that
/// are gone: `check` tells more (and the command goes on).
pub fn warn_seen(missing: &[Id], warnings: &[String]) {
    for w in warnings {
        eprintln!("warning: {}", crate::output::safe(w));
    }
    if !missing.is_empty() {
        eprintln!(
            "warning: {} snapshots this host saw in the repository are gone (deleted, or an older copy of the repository put back): run `mailvault check`",
            missing.len()
        );
    }
}

/// Worker threads of a backup that reads many small files (Maildir, EML, `file:`): the
/// flag, or 16 per core (32 to 256). On a cold cache a message is a wait for the disk, and
/// the threads beyond the cores keep more reads in flight: a full backup of one account
/// of 1.5 million messages on 2 cores took 54-58 s with 4 threads, 41-46 s with 16, 38-45 s
/// with 32, 38-42 s with 64, and no longer with a warm cache (BENCHMARKS.md). Data packers
/// stay at one a core whatever the threads, and accounts and folders at once at two a
/// core (at least 4): memory does not grow with them.
pub fn readers(g: &GlobalOpts) -> usize {
    if g.jobs > 0 {
        g.jobs
    } else {
        (16 * cores()).clamp(32, 256)
    }
}

/// Worker threads: the flag, or two per core (at least 4). Workers block on reads and
/// writes of small files; with two per core one computes while the other waits for the
/// disk. Measured on the `small` corpus, 2 cores, cold cache: backup 3.4 s with 2 workers,
/// 2.1 s with 4, 2.2 s with 8; restore 1.7 s, 1.6 s, 2.1 s (BENCHMARKS.md).
pub fn jobs(g: &GlobalOpts) -> usize {
    if g.jobs > 0 {
        g.jobs
    } else {
        (2 * cores()).clamp(4, 64)
    }
}

/// The cores this process may use (2 when unknown).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

pub use mailvault_core::search::split::SearchCache;

/// The root of the local cache (none with `--no-cache`).
pub fn cache_root(g: &GlobalOpts) -> Option<std::path::PathBuf> {
    match g.storage.no_cache {
        true => None,
        false => g.storage.cache_dir.clone().or_else(default_cache_root),
    }
}

/// The search cache of repository `r` (see [`SearchCache`]).
pub fn search_cache(g: &GlobalOpts, r: &Repository) -> mailvault_core::Result<SearchCache> {
    SearchCache::of(cache_root(g).as_deref(), r)
}

/// Runs `f` on the repository, opened again (up to three times in all) when a prune
/// removed an index file between opening it and taking the lock
/// ([`mailvault_core::Error::IndexChanged`]): for read-mostly commands (`search`,
/// `index`, `show`) that a prune running at the same time must not fail.
pub fn with_fresh_index<T>(
    g: &GlobalOpts,
    f: impl Fn(&Repository) -> mailvault_core::Result<T>,
) -> Result<T> {
    let mut tries = 0;
    loop {
        let r = open(g)?;
        match f(&r) {
            Err(mailvault_core::Error::IndexChanged { .. }) if tries < 2 => tries += 1,
            other => return Ok(other?),
        }
    }
}
