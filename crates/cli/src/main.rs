//! `mailvault`: the command line. Each command lives in `commands/<name>.rs`, turns its
//! flags into the engine's option struct and calls one engine function; printing and exit
//! codes are decided here. Exit codes: 0 success, 1 finished with some items failed,
//! 2 fatal error.

mod commands;
mod config;
mod metrics;
mod output;
mod progress;
mod repo;
mod secret;

use clap::{CommandFactory, FromArgMatches, Subcommand};
use std::io::IsTerminal;
use std::process::ExitCode;

/// Backup and restore for mail servers: deduplicated, compressed, encrypted.
#[derive(clap::Parser, Debug)]
#[command(name = "mailvault", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalOpts,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(clap::Args, Debug, Clone)]
pub struct GlobalOpts {
    /// Repository: a directory (or `local:DIR`; a directory whose name has a `:` before
    /// any `/` is written `./a:b`), or S3-compatible object storage,
    /// `s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]` (credentials from AWS_ACCESS_KEY_ID /
    /// AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN or AWS_PROFILE; region from
    /// AWS_DEFAULT_REGION, default us-east-1).
    #[arg(
        short = 'r',
        long = "repo",
        env = "MAILVAULT_REPOSITORY",
        global = true
    )]
    pub repo: Option<String>,
    /// File holding the repository password (else MAILVAULT_PASSWORD, else a prompt).
    #[arg(long, env = "MAILVAULT_PASSWORD_FILE", global = true)]
    pub password_file: Option<std::path::PathBuf>,
    /// Print the result as one JSON object.
    #[arg(long, global = true)]
    pub json: bool,
    /// Worker threads (default: two per core, at least 4; a backup of Maildir, EML or
    /// `file:` sources: 16 per core, at least 32).
    #[arg(short = 'j', long, global = true, default_value_t = 0)]
    pub jobs: usize,
    /// No progress bar.
    #[arg(short = 'q', long, global = true)]
    pub quiet: bool,
    /// How long to wait for a conflicting lock on the repository (a prune waits for
    /// running backups, restores and checks; they wait for a running prune), e.g. `30s`,
    /// `10m`, `1h`.
    #[arg(long, global = true, env = "MAILVAULT_RETRY_LOCK", value_name = "DURATION", default_value = "10m", value_parser = humantime::parse_duration)]
    pub retry_lock: std::time::Duration,
    /// Take no lock (restore and check, for read-only credentials): a prune running
    /// meanwhile may delete what they read.
    #[arg(long, global = true)]
    pub no_lock: bool,
    /// This host's credentials cannot delete or overwrite in the repository (a mail
    /// server's, docs/security.md): nothing this command does deletes or replaces an
    /// object (locks end by records, `forget` writes a request); prune, repair, migrate
    /// and `unlock --remove-all` are refused, for the maintenance host to run.
    #[arg(long, global = true, env = "MAILVAULT_APPEND_ONLY")]
    pub append_only: bool,
    /// Configuration file with the profiles `run` takes (default
    /// /etc/mailvault/mailvault.toml when it exists).
    #[arg(long, env = "MAILVAULT_CONFIG", global = true)]
    pub config: Option<std::path::PathBuf>,
    /// At the end of the command, success or failure, write its metrics into this file
    /// (Prometheus text format, for node_exporter's textfile collector); the series of
    /// other commands in it are kept.
    #[arg(long, env = "MAILVAULT_METRICS_FILE", global = true)]
    pub metrics_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub storage: StorageOpts,
}

/// How the repository's storage is reached (object storage mostly).
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Storage")]
pub struct StorageOpts {
    /// Requests to the storage in flight at most (object storage; default 8).
    #[arg(long, global = true, env = "MAILVAULT_STORE_CONNECTIONS")]
    pub store_connections: Option<usize>,
    /// Upload at most this many KiB/s.
    #[arg(long, global = true, value_name = "KIB_S")]
    pub limit_upload: Option<u64>,
    /// Download at most this many KiB/s.
    #[arg(long, global = true, value_name = "KIB_S")]
    pub limit_download: Option<u64>,
    /// Where object-storage repositories keep their local cache (default
    /// $XDG_CACHE_HOME/mailvault, else ~/.cache/mailvault).
    #[arg(long, global = true, env = "MAILVAULT_CACHE_DIR")]
    pub cache_dir: Option<std::path::PathBuf>,
    /// No local cache: every run reads the index, snapshots and trees from the storage.
    #[arg(long, global = true)]
    pub no_cache: bool,
    /// S3 bucket addressing: `auto` (virtual-host style for *.amazonaws.com, path style
    /// for everything else), `path` or `virtual`.
    #[arg(long, global = true, default_value = "auto", value_parser = ["auto", "path", "virtual"])]
    pub s3_addressing: String,
    /// Object storage that fails every request (no answer, 5xx) for this long stops the
    /// command with exit code 2, instead of each request retrying on its own; what was
    /// done is kept and the command can be run again.
    #[arg(long, global = true, env = "MAILVAULT_GIVE_UP_AFTER", value_name = "DURATION", default_value = "2m", value_parser = humantime::parse_duration)]
    pub give_up_after: std::time::Duration,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Create a new repository.
    Init(commands::init::Args),
    /// Back up a Maildir mail store, one Maildir, or IMAP accounts.
    Backup(commands::backup::Args),
    /// List snapshots.
    Snapshots(commands::snapshots::Args),
    /// List the accounts, folders or messages of a snapshot.
    Ls(commands::ls::Args),
    /// Restore a snapshot, or part of one, to a Maildir tree or into an IMAP server.
    Restore(commands::restore::Args),
    /// Verify the repository.
    Check(commands::check::Args),
    /// Show repository statistics.
    Stats(commands::stats::Args),
    /// Repair the index or the snapshots after damage `check` found.
    Repair(commands::repair::Args),
    /// Rewrite a format-1 repository's metadata as format 2 (data packs are kept), or
    /// finish a migration that was interrupted.
    Migrate(commands::migrate::Args),
    /// Generate a sample mail store, back it up, restore it and verify the result.
    Demo(commands::demo::Args),
    /// Index the messages of every snapshot for `search` (only those no earlier run
    /// indexed).
    Index(commands::index::Args),
    /// Find messages in the backups by their text, addresses, dates, folders and flags.
    Search(commands::search::Args),
    /// Show a message `search` found: headers, text, attachments.
    Show(commands::show::Args),
    /// Serve a web UI and a JSON API over the repository (read-only; admin login with a
    /// token file).
    Serve(commands::serve::Args),
    /// Put back the messages deleted from an account (those a snapshot held that the
    /// latest one holds nowhere in the account), and its deleted sieve scripts.
    Undelete(commands::undelete::Args),
    /// Remove the packs and blobs no snapshot uses; repack packs that are mostly unused.
    Prune(commands::prune::Args),
    /// Remove stale locks (of commands that were killed), or all of them.
    Unlock(commands::unlock::Args),
    /// Remove snapshots by a retention policy (restic's --keep-* rules) or by id; never
    /// those tagged `hold`.
    Forget(commands::forget::Args),
    /// Add, remove or set the tags of snapshots (each changed snapshot gets a new id).
    Tag(commands::tag::Args),
    /// Run a profile of the configuration file: back up its sources, forget by its policy,
    /// prune when due, check.
    Run(commands::run::Args),
    /// Write the man pages or the shell completions (for packagers: scripts/deb.sh).
    #[command(hide = true)]
    Generate(commands::generate::Args),
}

/// What a command ended with.
pub enum Outcome {
    Ok,
    /// Finished, but some items failed (they were listed).
    Partial,
}

/// Restores the default SIGPIPE action so `mailvault ls | head` ends quietly, as Unix
/// tools do, instead of panicking on a failed print.
#[allow(unsafe_code)]
fn default_sigpipe() {
    // SAFETY: signal(2) with SIG_DFL installs no Rust handler and touches no Rust state; it
    // runs first thing in main, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Pins glibc's mmap threshold at 1 MiB. By default glibc raises it (up to 32 MiB) each
/// time a large mmapped block is freed, after which pack buffers, messages and
/// decompression buffers of several MiB are carved from the per-thread heaps and stay
/// resident once freed, fragmenting them: a 100k-message backup peaked at 160 MB RSS,
/// 93 MB with the threshold fixed, at the same speed (BENCHMARKS.md). mimalloc was tried
/// and kept even more (270 MB). A non-empty `MALLOC_MMAP_THRESHOLD_` in the environment
/// overrides it; an empty one does not (glibc reads it as 0, every allocation a mapping
/// of its own: an IMAP restore of 100k messages took 34 s instead of 13 s).
#[allow(unsafe_code)]
fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none_or(|v| v.is_empty()) {
        // SAFETY: mallopt only sets an allocator tunable; called before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
        }
    }
}

/// Colours in log lines only on a terminal, and not when NO_COLOR is set
/// (<https://no-color.org>): in a file or a pipe they are noise.
fn log_colours() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The log: with `MAILVAULT_LOG` (`debug`, `mailvault_core=trace`…) tracing's own lines,
/// timestamped, with level and module; without it, only warnings and errors, written as
/// the commands write theirs (`warning: …`). Every line passes through
/// [`secret::RedactingStderr`].
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    match EnvFilter::try_from_env("MAILVAULT_LOG") {
        Ok(filter) => tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(secret::RedactingStderr)
            .with_ansi(log_colours())
            .init(),
        Err(_) => tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new("warn"))
            .with_writer(secret::RedactingStderr)
            .event_format(output::PlainEvents)
            .init(),
    }
}

fn main() -> ExitCode {
    default_sigpipe();
    fixed_mmap_threshold();
    init_logging();
    let started = std::time::Instant::now();
    let matches = Cli::command().get_matches();
    let name = matches.subcommand_name().unwrap_or("").to_string();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    tracing::debug!("mailvault {}", env!("CARGO_PKG_VERSION"));
    let g = &cli.global;
    let result = match cli.command {
        Command::Init(a) => commands::init::run(g, a),
        Command::Backup(a) => commands::backup::run(g, a),
        Command::Snapshots(a) => commands::snapshots::run(g, a),
        Command::Ls(a) => commands::ls::run(g, a),
        Command::Restore(a) => commands::restore::run(g, a),
        Command::Check(a) => commands::check::run(g, a),
        Command::Stats(a) => commands::stats::run(g, a),
        Command::Repair(a) => commands::repair::run(g, a),
        Command::Migrate(a) => commands::migrate::run(g, a),
        Command::Demo(a) => commands::demo::run(g, a),
        Command::Undelete(a) => commands::undelete::run(g, a),
        Command::Index(a) => commands::index::run(g, a),
        Command::Search(a) => commands::search::run(g, a),
        Command::Show(a) => commands::show::run(g, a),
        Command::Serve(a) => commands::serve::run(g, a),
        Command::Prune(a) => commands::prune::run(g, a),
        Command::Unlock(a) => commands::unlock::run(g, a),
        Command::Forget(a) => commands::forget::run(g, a),
        Command::Tag(a) => commands::tag::run(g, a),
        Command::Run(a) => commands::run::run(g, a),
        Command::Generate(a) => commands::generate::run(a),
    };
    // Storage given up on (`--give-up-after`): the command's items failed with it, its
    // report said so per item; the run failed as a whole, and is said to once.
    let result = match (result, repo::given_up()) {
        (r, Some(why)) => {
            if let Err(e) = r {
                tracing::debug!("{e:#}");
            }
            Err(anyhow::anyhow!("{why}"))
        }
        (r, None) => r,
    };
    write_metrics(g, &name, &result, started);
    let code = match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Partial) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {}", output::safe(&format!("{e:#}")));
            ExitCode::from(2)
        }
    };
    // What the storage was asked, after the command's own output (in --json it is part
    // of the object): on object storage, where requests cost, every command says it.
    if let Some(u) = repo::usage().filter(|_| repo::remote() && !g.json && !g.quiet) {
        eprintln!("{}", output::usage_line(&u));
    }
    code
}

/// Writes the metrics file of `--metrics-file` (or of the profile `run` ran), if any; a
/// failure to write it is a warning, never the command's result.
fn write_metrics(
    g: &GlobalOpts,
    command: &str,
    result: &anyhow::Result<Outcome>,
    started: std::time::Instant,
) {
    let Some(path) = g.metrics_file.clone().or_else(metrics::profile_file) else {
        return;
    };
    let end = metrics::Ending {
        command,
        repository: g.repo.as_deref(),
        ok: matches!(result, Ok(Outcome::Ok)),
        fatal: result.is_err(),
        duration_secs: started.elapsed().as_secs_f64(),
        now: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
    };
    if let Err(e) = metrics::write(&path, &end) {
        eprintln!(
            "warning: {}",
            output::safe(&format!("writing metrics file {}: {e}", path.display()))
        );
    }
}
