//! `mailvault run --profile NAME`: one night's work as a profile of the configuration file
//! ([`crate::config`]) describes it. A backup of every source, in order (one that fails is
//! reported and the others still run), then `forget` with the profile's policy, then
//! `prune` when it is due, then a quick `check`; one report at the end. Each step is the
//! command's own code (`backup::execute`, `check::execute`, the engine's forget and
//! prune), so a profile does exactly what the command lines would.
//!
//! When a prune is due: the profile's `prune-every`, against the time this host last
//! pruned the repository with `run`, kept in this host's state directory (the one of
//! `mailvault_core::host::seen`) as `<state>/prune/<repository id>`: one line, seconds since the
//! Unix epoch. No state directory, or no such file: the prune is due.

use super::{backup, check};
use crate::config::{self, Profile};
use crate::output::{bytes, safe};
use crate::{metrics, repo, GlobalOpts, Outcome};
use anyhow::{bail, Context, Result};
use clap::Parser;
use mailvault_core::host::seen::StateDir;
use mailvault_core::ops::backup::BackupReport;
use mailvault_core::ops::check::CheckReport;
use mailvault_core::ops::forget::Policy;
use mailvault_core::ops::forget::{forget, ForgetOptions, HOLD_TAG};
use mailvault_core::ops::prune::{prune, PruneOptions};
use mailvault_core::report::NoProgress;
use serde::Serialize;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The profile to run: `[profiles.NAME]` of the configuration file (--config).
    #[arg(long)]
    pub profile: String,
}

/// The report of a run (`--json` prints it).
#[derive(Serialize)]
struct RunReport {
    profile: String,
    config: PathBuf,
    backups: Vec<SourceResult>,
    index: Step,
    forget: Step,
    prune: Step,
    check: Step,
    /// Size of all files in the repository at the end.
    repository_bytes: Option<u64>,
    /// One line per source or step that failed.
    errors: Vec<String>,
    elapsed_secs: f64,
}

#[derive(Serialize)]
struct SourceResult {
    source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    report: Option<BackupReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// What became of a step after the backups.
#[derive(Serialize)]
#[serde(tag = "status", rename_all = "lowercase")]
enum Step {
    /// Not run, and why.
    Skipped {
        reason: String,
    },
    /// Run: a one-line summary and the step's own report.
    Done {
        summary: String,
        report: serde_json::Value,
    },
    Failed {
        error: String,
    },
}

impl Step {
    fn line(&self) -> String {
        match self {
            Step::Skipped { reason } => format!("skipped ({reason})"),
            Step::Done { summary, .. } => summary.clone(),
            Step::Failed { error } => format!("FAILED: {error}"),
        }
    }
}

/// The `backup` command line, parsed as the command line would be.
#[derive(Parser)]
struct BackupLine {
    #[command(flatten)]
    args: backup::Args,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let started = Instant::now();
    let Some(path) = config::path(g.config.as_deref()) else {
        bail!(
            "no configuration file: give --config FILE or MAILVAULT_CONFIG, or write {}",
            config::DEFAULT_PATH
        );
    };
    let cfg = config::load(&path)?;
    let p = cfg.profile(&a.profile, &path)?;
    metrics::note_profile(&a.profile, p.metrics_file.clone());
    let g = &with_profile(g, p, &a.profile)?;
    if let Some(r) = &g.repo {
        metrics::note_repository(r);
    }
    if p.sources.is_empty() && p.forget.is_none() && p.prune_every.is_none() && !p.check && !p.index
    {
        bail!("profile {:?} has nothing to do: give it sources, a [forget] policy, prune-every, index or check", a.profile);
    }
    let mut errors = Vec::new();
    let mut backups = Vec::new();
    for s in &p.sources {
        let result = BackupLine::try_parse_from(s.backup_args(p))
            .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
            .and_then(|mut l| {
                // Indexed as read; the index step then finds only what was not.
                l.args.index |= p.index;
                backup::execute(g, l.args)
            });
        match result {
            Ok(r) => {
                if r.items_failed > 0 {
                    errors.push(format!(
                        "backup {}: {} items failed",
                        s.source, r.items_failed
                    ));
                }
                backups.push(SourceResult {
                    source: s.source.clone(),
                    report: Some(r),
                    error: None,
                });
            }
            Err(e) => {
                let e = format!("{e:#}");
                errors.push(format!("backup {}: {e}", s.source));
                backups.push(SourceResult {
                    source: s.source.clone(),
                    report: None,
                    error: Some(e),
                });
            }
        }
    }
    let mut step_errors = 0;
    let mut step = |name: &str, r: Result<Step>| match r {
        Ok(s) => s,
        Err(e) => {
            let error = format!("{e:#}");
            errors.push(format!("{name}: {error}"));
            step_errors += 1;
            Step::Failed { error }
        }
    };
    let index = step(
        "index",
        match p.index {
            false => Ok(Step::Skipped {
                reason: "index = false".into(),
            }),
            true => index_step(g),
        },
    );
    let forget = step(
        "forget",
        match &p.forget {
            None => Ok(Step::Skipped {
                reason: "no [forget] policy".into(),
            }),
            Some(policy) => forget_step(g, policy),
        },
    );
    let prune = step(
        "prune",
        match p.prune_every {
            None => Ok(Step::Skipped {
                reason: "no prune-every".into(),
            }),
            Some(every) => prune_when_due(g, every),
        },
    );
    let mut damage = None;
    let check = step(
        "check",
        match p.check {
            false => Ok(Step::Skipped {
                reason: "check = false".into(),
            }),
            true => check_step(g).map(|(s, rep)| {
                if !rep.ok() {
                    damage = Some(check::damaged(&rep));
                }
                s
            }),
        },
    );
    if let Some(d) = &damage {
        errors.push(format!("check: {d}"));
        step_errors += 1;
    }
    metrics::note_errors(step_errors);
    let repository_bytes =
        match repo::open(g).and_then(|r| Ok(mailvault_core::ops::stats::stats(&r)?)) {
            Ok(s) => {
                metrics::note_repository_bytes(s.repository_bytes);
                Some(s.repository_bytes)
            }
            Err(e) => {
                eprintln!("warning: {}", safe(&format!("repository size: {e:#}")));
                None
            }
        };
    let report = RunReport {
        profile: a.profile,
        config: path,
        backups,
        index,
        forget,
        prune,
        check,
        repository_bytes,
        errors,
        elapsed_secs: started.elapsed().as_secs_f64(),
    };
    if g.json {
        crate::output::json(&report)?;
    } else {
        print_report(&report);
    }
    if let Some(d) = damage {
        bail!("{d}");
    }
    Ok(match report.errors.is_empty() {
        true => Outcome::Ok,
        false => Outcome::Partial,
    })
}

fn print_report(r: &RunReport) {
    for b in &r.backups {
        println!("backup {}", safe(&b.source));
        match (&b.report, &b.error) {
            (Some(rep), _) => backup::print_report(rep),
            (None, Some(e)) => println!("  FAILED: {}", safe(e)),
            (None, None) => {}
        }
    }
    println!("index      {}", safe(&r.index.line()));
    println!("forget     {}", safe(&r.forget.line()));
    println!("prune      {}", safe(&r.prune.line()));
    println!("check      {}", safe(&r.check.line()));
    if let Some(b) = r.repository_bytes {
        println!("repository {}", bytes(b));
    }
    if r.errors.is_empty() {
        println!(
            "profile {} done in {:.2} s",
            safe(&r.profile),
            r.elapsed_secs
        );
    } else {
        println!(
            "profile {} done in {:.2} s with {} errors:",
            safe(&r.profile),
            r.elapsed_secs,
            r.errors.len()
        );
        for e in &r.errors {
            println!("  {}", safe(e));
        }
    }
}

/// `g` with what the profile sets: the repository, the password file and the jobs. A
/// repository or password file given on the command line (or in the environment) that
/// differs from the profile's is an error: which one was meant is not guessed.
fn with_profile(g: &GlobalOpts, p: &Profile, name: &str) -> Result<GlobalOpts> {
    let mut g = g.clone();
    if let Some(r) = &p.repository {
        match &g.repo {
            Some(given) if given != r => bail!(
                "profile {name:?} names repository {r:?}, and --repo / MAILVAULT_REPOSITORY names {given:?}: give only one"
            ),
            _ => g.repo = Some(r.clone()),
        }
    }
    if let Some(f) = &p.password_file {
        match &g.password_file {
            Some(given) if given != f => bail!(
                "profile {name:?} names password file {}, and --password-file / MAILVAULT_PASSWORD_FILE names {}: give only one",
                f.display(),
                given.display()
            ),
            _ => g.password_file = Some(f.clone()),
        }
        // Said when the profile is read (once a run), whether or not the password is.
        crate::secret::warn_if_readable_by_others("password file", f);
    }
    if g.jobs == 0 {
        g.jobs = p.jobs.unwrap_or(0);
    }
    g.append_only |= p.append_only;
    if g.append_only && p.prune_every.is_some() {
        bail!("profile {name:?} is append-only (append-only = true, or --append-only) and has prune-every: prune deletes, and runs on the maintenance host; remove prune-every from this host's profile");
    }
    Ok(g)
}

/// The forget step: the profile's policy applied to the repository, per group of host and
/// source (`mailvault forget`'s defaults), snapshots tagged `hold` kept whatever the
/// policy; the removed snapshots leave this host's record first.
/// `mailvault index`: what the backups added, indexed for `search`.
fn index_step(g: &GlobalOpts) -> Result<Step> {
    let rep = repo::with_fresh_index(g, |r| {
        let cache = repo::search_cache(g, r)?;
        let opts = mailvault_core::search::build::IndexOptions::default();
        mailvault_core::search::build::index(
            r,
            cache.path(),
            &opts,
            &mailvault_core::report::NoProgress,
        )
    })?;
    if !rep.failures.is_empty() {
        anyhow::bail!(
            "{} messages could not be indexed (the next run tries them again)",
            rep.failures.len()
        );
    }
    Ok(Step::Done {
        summary: format!(
            "{} messages indexed ({}), {} already",
            rep.indexed,
            bytes(rep.bytes),
            rep.already_indexed
        ),
        report: serde_json::to_value(&rep)?,
    })
}

fn forget_step(g: &GlobalOpts, policy: &Policy) -> Result<Step> {
    let r = repo::open(g)?;
    let rep = forget(
        &r,
        &ForgetOptions {
            policy: policy.clone(),
            state: repo::state(),
            ..ForgetOptions::default()
        },
    )?;
    for w in &rep.warnings {
        eprintln!("warning: {}", safe(w));
    }
    let kept = rep
        .groups
        .iter()
        .flat_map(|g| &g.snapshots)
        .filter(|s| s.keep);
    let (kept, held) = kept.fold((0, 0), |(k, h), s| {
        (
            k + 1,
            h + usize::from(s.reasons.iter().any(|r| r == HOLD_TAG)),
        )
    });
    Ok(Step::Done {
        summary: format!(
            "{}: {} snapshots removed, {kept} kept ({held} under legal hold)",
            rep.policy,
            rep.removed.len()
        ),
        report: serde_json::to_value(&rep)?,
    })
}

/// The prune step, run when the last prune of this host is at least `every` old.
fn prune_when_due(g: &GlobalOpts, every: Duration) -> Result<Step> {
    let r = repo::open(g)?;
    let id = r.config().id.clone();
    drop(r);
    let state = StateDir::from_env();
    let now = unix_now();
    if let Some(last) = state.as_ref().and_then(|s| last_prune(s, &id)) {
        let next = last.saturating_add(every.as_secs());
        if now < next {
            return Ok(Step::Skipped {
                reason: format!(
                    "last prune {}, next due {}",
                    crate::output::time(last as i64),
                    crate::output::time(next as i64)
                ),
            });
        }
    }
    let step = prune_step(g)?;
    match &state {
        Some(s) => {
            if let Err(e) = note_prune(s, &id, now) {
                eprintln!(
                    "warning: {}",
                    safe(&format!("recording the time of this prune: {e:#}"))
                );
            }
        }
        None => eprintln!(
            "warning: no state directory: the time of this prune is not kept, and the next run prunes again"
        ),
    }
    Ok(step)
}

/// The prune step itself: `mailvault prune` with its defaults.
fn prune_step(g: &GlobalOpts) -> Result<Step> {
    let mut r = repo::open(g)?;
    let rep = prune(&mut r, &PruneOptions::default(), &NoProgress)?;
    Ok(Step::Done {
        summary: format!(
            "{} packs deleted, {} repacked, {} freed; repository {} -> {}",
            rep.packs_deleted,
            rep.packs_repacked,
            bytes(rep.bytes_freed),
            bytes(rep.size_before),
            bytes(rep.size_after)
        ),
        report: serde_json::to_value(&rep)?,
    })
}

/// A quick check: `mailvault check` without --read-data.
fn check_step(g: &GlobalOpts) -> Result<(Step, CheckReport)> {
    let rep = check::execute(
        g,
        &check::Args {
            read_data: false,
            accept_removed: false,
        },
    )?;
    let summary = match rep.ok() {
        true => format!(
            "no errors found ({} snapshots, {} packs, {} messages)",
            rep.snapshots, rep.packs, rep.messages
        ),
        false => format!("{} errors (run `mailvault check`)", rep.errors.len()),
    };
    let step = Step::Done {
        summary,
        report: serde_json::to_value(&rep)?,
    };
    Ok((step, rep))
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `<state>/prune/<id>`, for an id that can name a file.
fn prune_path(state: &StateDir, repo_id: &str) -> Option<PathBuf> {
    state
        .record_path(repo_id)
        .map(|_| state.path().join("prune").join(repo_id))
}

/// When this host last pruned repository `repo_id` with `run`; `None` when unknown.
fn last_prune(state: &StateDir, repo_id: &str) -> Option<u64> {
    let text = std::fs::read_to_string(prune_path(state, repo_id)?).ok()?;
    text.trim().parse().ok()
}

/// Records that this host pruned repository `repo_id` at `now`.
fn note_prune(state: &StateDir, repo_id: &str, now: u64) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let path = prune_path(state, repo_id).context("the repository id cannot name a file")?;
    let dir = path.parent().context("no parent directory")?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, format!("{now}\n").as_bytes())?;
    tmp.persist(&path)
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_prune_is_kept_per_repository() {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path());
        let id = "0123456789abcdef";
        assert_eq!(last_prune(&s, id), None);
        note_prune(&s, id, 1_700_000_000).unwrap();
        assert_eq!(last_prune(&s, id), Some(1_700_000_000));
        assert_eq!(last_prune(&s, "fedcba9876543210"), None);
        assert!(prune_path(&s, "../x").is_none());
    }
}
