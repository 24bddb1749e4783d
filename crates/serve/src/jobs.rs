//! Restore jobs started from the web UI or the API: each runs the engine's restore
//! ([`crate::restore::Planned`]) on a thread of its own, with its progress counted as it
//! goes, a cancel flag the restore asks between pieces of work
//! ([`mailvault_core::report::Progress::cancelled`]), and its final report kept.
//!
//! Who sees what: a mail user their own jobs, the admin every job. At most
//! [`MAX_RUNNING`] jobs run at once, one per mail user; the last [`KEEP`] finished ones
//! are kept, and outlive a restart of `serve`: the list is written to [`JOBS_FILE`] in
//! the repository's cache directory (the owner's alone) when a job starts and when it
//! ends. A job a restart cut off shows as [`JobState::Interrupted`]; starting it again
//! resumes it (an IMAP restore's journal and a Maildir restore's "already there" checks
//! find what it did). It is not started again by itself: a restore may have needed the
//! account's password, which is kept nowhere.

use crate::read::{FolderCache, Place};
use crate::restore::Planned;
use crate::state::lock;
use crate::state::Live;
use mailvault_core::report::Progress;
use mailvault_core::restore::Request;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Restores running at once, at most.
pub const MAX_RUNNING: usize = 2;
/// Finished jobs kept.
const KEEP: usize = 50;
/// Failures kept in a job's summary (the full list is in its report).
const FAILURES_SHOWN: usize = 50;

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum JobState {
    Running,
    /// Asked to stop; stopping at the next piece of work.
    Cancelling,
    /// Ended: every message restored or already there.
    Done,
    /// Ended with messages not restored (listed).
    Partial,
    Cancelled,
    /// Could not run (the snapshot, the server's login, the directory).
    Failed,
    /// Cut off by a restart of `serve` (what it restored is kept).
    Interrupted,
}

/// A job's counts as it runs ([`Progress`]), and its cancel flag.
#[derive(Default)]
pub struct Counts {
    total_items: AtomicU64,
    total_bytes: AtomicU64,
    done_items: AtomicU64,
    done_bytes: AtomicU64,
    cancel: AtomicBool,
}

impl Progress for Counts {
    fn add_total(&self, items: u64, bytes: u64) {
        self.total_items.fetch_add(items, Relaxed);
        self.total_bytes.fetch_add(bytes, Relaxed);
    }
    fn advance(&self, items: u64, bytes: u64) {
        self.done_items.fetch_add(items, Relaxed);
        self.done_bytes.fetch_add(bytes, Relaxed);
    }
    fn cancelled(&self) -> bool {
        self.cancel.load(Relaxed)
    }
}

/// How a job ended, in the terms of either kind of restore.
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Summary {
    pub items_total: u64,
    /// Written (Maildir) or appended (IMAP).
    pub items_restored: u64,
    /// Already in the target: the same bytes (Maildir), or found by the journal or on
    /// the server (IMAP).
    pub items_present: u64,
    pub items_failed: u64,
    /// Of `items_failed`, not tried (cancelled, or the target took no more).
    pub items_not_tried: u64,
    pub elapsed_secs: f64,
    pub warnings: Vec<String>,
    /// The first failures, each `item: error`.
    pub failures: Vec<String>,
}

/// A restore job.
pub struct Job {
    pub id: String,
    /// Whose it is: a mail user, or `None` (the admin).
    pub owner: Option<String>,
    /// What it restores ("snapshot 1a2b3c4d, account …, folder …").
    pub what: String,
    /// Where to.
    pub target: String,
    pub started: jiff::Timestamp,
    pub counts: Counts,
    end: Mutex<Option<Ended>>,
}

struct Ended {
    state: JobState,
    summary: Option<Summary>,
    /// The engine's report, as the CLI's `--json` prints it.
    report: Option<serde_json::Value>,
    error: Option<String>,
    at: jiff::Timestamp,
}

/// A job as the API and the pages show it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobView {
    pub id: String,
    pub owner: Option<String>,
    pub what: String,
    pub target: String,
    /// Unix seconds, as every time of the API.
    pub started: i64,
    pub ended: Option<i64>,
    pub state: JobState,
    pub total_items: u64,
    pub done_items: u64,
    pub total_bytes: u64,
    pub done_bytes: u64,
    pub summary: Option<Summary>,
    pub error: Option<String>,
    pub report: Option<serde_json::Value>,
}

impl Job {
    pub fn view(&self, with_report: bool) -> JobView {
        let end = lock(&self.end);
        let c = &self.counts;
        let state = match &*end {
            Some(e) => e.state,
            None if c.cancel.load(Relaxed) => JobState::Cancelling,
            None => JobState::Running,
        };
        JobView {
            id: self.id.clone(),
            owner: self.owner.clone(),
            what: self.what.clone(),
            target: self.target.clone(),
            started: self.started.as_second(),
            ended: end.as_ref().map(|e| e.at.as_second()),
            state,
            total_items: c.total_items.load(Relaxed),
            done_items: c.done_items.load(Relaxed),
            total_bytes: c.total_bytes.load(Relaxed),
            done_bytes: c.done_bytes.load(Relaxed),
            summary: end.as_ref().and_then(|e| e.summary.clone()),
            error: end.as_ref().and_then(|e| e.error.clone()),
            report: match with_report {
                true => end.as_ref().and_then(|e| e.report.clone()),
                false => None,
            },
        }
    }

    pub fn is_running(&self) -> bool {
        lock(&self.end).is_none()
    }

    /// Whether the session of `user` may see this job: the admin any, a mail user theirs.
    pub fn visible_to(&self, user: Option<&str>) -> bool {
        user.is_none() || self.owner.as_deref() == user
    }

    /// Asks the job to stop (it stops at its next piece of work).
    pub fn cancel(&self) {
        self.counts.cancel.store(true, Relaxed);
    }
}

/// The file of the jobs in the cache directory.
pub const JOBS_FILE: &str = "serve-jobs.json";

/// What a job a restart cut off says.
const INTERRUPTED: &str = "serve stopped while this restore ran: what it restored is kept; \
    start it again to finish it (what is there is not written or sent twice)";

/// Every job of this server, oldest first, and the file they are kept in.
#[derive(Default)]
pub struct Jobs {
    list: Mutex<Vec<Arc<Job>>>,
    file: Option<PathBuf>,
    /// Held by a [`Jobs::save`].
    saving: Mutex<()>,
}

/// Why a job was not started.
#[derive(Debug, PartialEq, Eq)]
pub enum Busy {
    /// This user's job is still running.
    Yours,
    /// [`MAX_RUNNING`] jobs run.
    Full,
}

impl Job {
    /// A job as it was written to the file: ended as it ended, or interrupted.
    fn from_view(v: JobView) -> Job {
        let counts = Counts::default();
        for (n, a) in [
            (v.total_items, &counts.total_items),
            (v.done_items, &counts.done_items),
            (v.total_bytes, &counts.total_bytes),
            (v.done_bytes, &counts.done_bytes),
        ] {
            a.store(n, Relaxed);
        }
        let cut_off = matches!(v.state, JobState::Running | JobState::Cancelling);
        let at = |t: i64| jiff::Timestamp::from_second(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
        let started = at(v.started);
        Job {
            id: v.id,
            owner: v.owner,
            what: v.what,
            target: v.target,
            started,
            counts,
            end: Mutex::new(Some(Ended {
                state: match cut_off {
                    true => JobState::Interrupted,
                    false => v.state,
                },
                summary: v.summary,
                report: v.report,
                error: (cut_off.then(|| INTERRUPTED.to_string())).or(v.error),
                at: v.ended.map_or(started, at),
            })),
        }
    }
}

impl Jobs {
    /// The jobs kept in `file` (none when it is missing; one that does not read is set
    /// aside as `.bad` and said in the log), to be written there again.
    pub fn open(file: PathBuf) -> Jobs {
        let list = match std::fs::read(&file) {
            Ok(bytes) => match serde_json::from_slice::<Vec<JobView>>(&bytes) {
                Ok(views) => views
                    .into_iter()
                    .map(|v| Arc::new(Job::from_view(v)))
                    .collect(),
                Err(e) => {
                    let aside = file.with_extension("json.bad");
                    tracing::warn!("{}: {e}: set aside as {}", file.display(), aside.display());
                    let _ = std::fs::rename(&file, &aside);
                    Vec::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                tracing::warn!(
                    "{}: {e}: the jobs before this start are not shown",
                    file.display()
                );
                Vec::new()
            }
        };
        Jobs {
            list: Mutex::new(list),
            file: Some(file),
            saving: Mutex::new(()),
        }
    }

    /// Writes every job to the file (atomically, readable by its owner alone); a failure
    /// is logged: the jobs go on, only their history would not outlive a restart.
    pub fn save(&self) {
        let Some(file) = &self.file else {
            return;
        };
        // One save at a time, the list taken under the same lock: two jobs ending at once
        // would write one temporary file together, or an older list over a newer one.
        let _one = lock(&self.saving);
        let views: Vec<JobView> = lock(&self.list).iter().map(|j| j.view(true)).collect();
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let tmp = file.with_extension("json.tmp");
            let mut f = (std::fs::OpenOptions::new())
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&serde_json::to_vec(&views).map_err(std::io::Error::other)?)?;
            f.sync_all()?;
            std::fs::rename(&tmp, file)
        };
        if let Err(e) = write() {
            tracing::warn!(
                "{}: {e}: the jobs would not outlive a restart",
                file.display()
            );
        }
    }

    /// A new job of `owner`, unless it has one running or [`MAX_RUNNING`] run.
    pub fn add(
        &self,
        owner: Option<String>,
        what: String,
        target: String,
    ) -> Result<Arc<Job>, Busy> {
        let mut list = lock(&self.list);
        let running: Vec<&Arc<Job>> = list.iter().filter(|j| j.is_running()).collect();
        if owner.is_some() && running.iter().any(|j| j.owner == owner) {
            return Err(Busy::Yours);
        }
        if running.len() >= MAX_RUNNING {
            return Err(Busy::Full);
        }
        let job = Arc::new(Job {
            id: crate::auth::random_hex()[..16].to_string(),
            owner,
            what,
            target,
            started: jiff::Timestamp::now(),
            counts: Counts::default(),
            end: Mutex::new(None),
        });
        list.push(job.clone());
        let finished = list.iter().filter(|j| !j.is_running()).count();
        if finished > KEEP {
            let mut drop = finished - KEEP;
            list.retain(|j| {
                let gone = drop > 0 && !j.is_running();
                drop -= usize::from(gone);
                !gone
            });
        }
        Ok(job)
    }

    /// The job `id`, if the session of `user` may see it.
    pub fn get(&self, id: &str, user: Option<&str>) -> Option<Arc<Job>> {
        (lock(&self.list).iter())
            .find(|j| j.id == id && j.visible_to(user))
            .cloned()
    }

    /// The jobs the session of `user` may see, newest first.
    pub fn visible(&self, user: Option<&str>) -> Vec<Arc<Job>> {
        let list = lock(&self.list);
        list.iter()
            .rev()
            .filter(|j| j.visible_to(user))
            .cloned()
            .collect()
    }

    /// How many jobs are in each state (every state named, for `/metrics`).
    pub fn by_state(&self) -> Vec<(&'static str, usize)> {
        use JobState as S;
        let states = [
            (S::Running, "running"),
            (S::Cancelling, "cancelling"),
            (S::Done, "done"),
            (S::Partial, "partial"),
            (S::Cancelled, "cancelled"),
            (S::Failed, "failed"),
            (S::Interrupted, "interrupted"),
        ];
        let now: Vec<JobState> = lock(&self.list)
            .iter()
            .map(|j| j.view(false).state)
            .collect();
        (states.iter())
            .map(|(s, name)| (*name, now.iter().filter(|n| *n == s).count()))
            .collect()
    }
}

/// What a job restores: its plan's selection of a snapshot, or the messages `picked` one
/// by one (their folders listed through `folders`, the server's folder cache).
fn request(
    repo: &mailvault_core::Repository,
    select: &mailvault_core::restore::Selection,
    (picked, folders): (&[Place], &Mutex<FolderCache>),
) -> mailvault_core::Result<Request> {
    if picked.is_empty() {
        return Ok(Request::Selection(select.clone()));
    }
    let how = (crate::restore::PICKED, select.reads, select.cache_bytes);
    crate::read::picked_request(repo, folders, picked, how)
}

/// Runs `plan` for `job` on the repository `live` holds (blocking: the caller's thread
/// is the job's), then records how it ended.
pub fn run(job: &Job, live: &Live, plan: Planned, picked: (&[Place], &Mutex<FolderCache>)) {
    use mailvault_core::ops::restore::{imap_server, maildir, run as restore};
    let repo = live.repo();
    let result = match plan {
        Planned::Imap(opts) => (request(repo, &opts.select, picked))
            .and_then(|req| restore(repo, req, &job.counts, imap_server(repo, &opts)))
            .map(|(r, target)| target.report(r))
            .map(|r| {
                let summary = Summary {
                    items_total: r.items_total,
                    items_restored: r.items_appended,
                    items_present: r.items_journaled + r.items_existing,
                    items_failed: r.items_failed,
                    items_not_tried: r.items_not_tried,
                    elapsed_secs: r.elapsed_secs,
                    warnings: r.warnings.clone(),
                    failures: failures(&r.failures),
                };
                (summary, r.cancelled, serde_json::to_value(&r))
            }),
        Planned::Maildir(opts) => (request(repo, &opts.select, picked))
            .and_then(|req| restore(repo, req, &job.counts, maildir(&opts)))
            .map(|(r, _)| r)
            .map(|r| {
                let summary = Summary {
                    items_total: r.items_total,
                    items_restored: r.items_restored,
                    items_present: r.items_unchanged,
                    items_failed: r.items_failed,
                    items_not_tried: r.items_not_tried,
                    elapsed_secs: r.elapsed_secs,
                    warnings: r.warnings.clone(),
                    failures: failures(&r.failures),
                };
                (summary, r.cancelled, serde_json::to_value(&r))
            }),
    };
    let ended = match result {
        Ok((summary, cancelled, report)) => Ended {
            state: match (cancelled, summary.items_failed, summary.failures.len()) {
                (true, _, _) => JobState::Cancelled,
                (false, 0, 0) => JobState::Done,
                _ => JobState::Partial,
            },
            summary: Some(summary),
            report: report.ok(),
            error: None,
            at: jiff::Timestamp::now(),
        },
        Err(e) => Ended {
            state: JobState::Failed,
            summary: None,
            report: None,
            error: Some(e.to_string()),
            at: jiff::Timestamp::now(),
        },
    };
    tracing::info!(job = %job.id, state = ?ended.state, "restore job ended");
    *lock(&job.end) = Some(ended);
}

fn failures(f: &[mailvault_core::report::Failure]) -> Vec<String> {
    (f.iter().take(FAILURES_SHOWN))
        .map(|f| format!("{}: {}", f.item, f.error))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finish(j: &Job) {
        *lock(&j.end) = Some(Ended {
            state: JobState::Done,
            summary: None,
            report: None,
            error: None,
            at: jiff::Timestamp::now(),
        });
    }

    #[test]
    fn one_running_job_per_user_and_a_few_in_all() {
        let jobs = Jobs::default();
        let bob = Some("bob".to_string());
        let b = jobs.add(bob.clone(), "w".into(), "t".into()).unwrap();
        assert_eq!(
            jobs.add(bob.clone(), "w".into(), "t".into()).err(),
            Some(Busy::Yours)
        );
        let a = jobs.add(None, "w".into(), "t".into()).unwrap();
        assert_eq!(
            jobs.add(None, "w".into(), "t".into()).err(),
            Some(Busy::Full)
        );
        assert_eq!(jobs.by_state()[0], ("running", MAX_RUNNING));
        // Bob sees his own job alone; the admin every job.
        assert!(jobs.get(&b.id, Some("bob")).is_some());
        assert!(jobs.get(&a.id, Some("bob")).is_none());
        assert!(jobs.get(&b.id, Some("alice")).is_none());
        assert_eq!(jobs.visible(Some("bob")).len(), 1);
        assert_eq!(jobs.visible(None).len(), 2);
        finish(&b);
        assert!(jobs.add(bob, "w".into(), "t".into()).is_ok());
    }

    #[test]
    fn finished_jobs_are_kept_up_to_a_limit_and_running_ones_always() {
        let jobs = Jobs::default();
        let first = jobs.add(None, "w".into(), "t".into()).unwrap();
        for _ in 0..KEEP + 10 {
            let j = jobs.add(Some("u".into()), "w".into(), "t".into()).unwrap();
            finish(&j);
        }
        let all = jobs.visible(None);
        assert!(
            all.iter().any(|j| j.id == first.id),
            "a running job was dropped"
        );
        assert!(all.len() <= KEEP + 2, "{}", all.len());
    }

    /// The jobs outlive a restart: a finished one as it ended, with its report; one that
    /// ran shows as interrupted, saying what to do; the file is its owner's alone; one that
    /// does not read is set aside, not lost.
    #[test]
    fn jobs_outlive_a_restart_and_a_cut_off_one_says_so() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(JOBS_FILE);
        let jobs = Jobs::open(file.clone());
        let done = jobs.add(None, "snapshot a".into(), "dir".into()).unwrap();
        *lock(&done.end) = Some(Ended {
            state: JobState::Partial,
            summary: Some(Summary {
                items_total: 3,
                ..Summary::default()
            }),
            report: Some(serde_json::json!({"items_total": 3})),
            error: None,
            at: jiff::Timestamp::now(),
        });
        let running = jobs
            .add(Some("bob".into()), "snapshot b".into(), "imap".into())
            .unwrap();
        running.counts.add_total(5, 50);
        jobs.save();
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        let again = Jobs::open(file.clone());
        let v = again.get(&done.id, None).unwrap().view(true);
        assert_eq!(
            (v.state, v.what.as_str()),
            (JobState::Partial, "snapshot a")
        );
        assert_eq!(v.report.unwrap()["items_total"], 3);
        assert_eq!(v.summary.unwrap().items_total, 3);
        let cut = again.get(&running.id, Some("bob")).unwrap().view(false);
        assert_eq!(cut.state, JobState::Interrupted);
        assert!(cut.error.unwrap().contains("start it again"));
        assert_eq!((cut.total_items, cut.total_bytes), (5, 50));
        assert!(again.get(&running.id, Some("carol")).is_none());
        assert!(!again.visible(None).iter().any(|j| j.is_running()));

        std::fs::write(&file, b"not json").unwrap();
        assert!(Jobs::open(file.clone()).visible(None).is_empty());
        assert_eq!(
            std::fs::read(file.with_extension("json.bad")).unwrap(),
            b"not json"
        );
    }

    #[test]
    fn a_cancelled_job_says_so_while_it_stops() {
        let jobs = Jobs::default();
        let j = jobs.add(None, "w".into(), "t".into()).unwrap();
        assert_eq!(j.view(false).state, JobState::Running);
        j.cancel();
        assert!(j.counts.cancelled());
        assert_eq!(j.view(false).state, JobState::Cancelling);
    }
}
