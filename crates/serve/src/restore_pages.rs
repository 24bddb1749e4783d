//! The routes of restore jobs: the form that starts one (`/restore`), a job's page with
//! its progress bar, counts and final report (`/job`, refreshed by the page itself while
//! the job runs: no script needed), cancel (`/job/cancel`), the list (`/jobs`), and the
//! same as JSON under `/api/v1/`.

use crate::html::{bytes, layout, layout_with, link, short, time};
use crate::jobs::{Busy, Job, JobState, JobView};
use crate::reply::{self, blocking, ApiError, Ctx, ErrorAnswer, Failure, PageError};
use crate::restore::{self, Request};
use crate::state::AppState;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Json};
use maud::{html, Markup};
use std::net::SocketAddr;
use std::sync::Arc;

/// Seconds between two refreshes of a running job's page.
const REFRESH_SECS: u32 = 2;

/// Picked messages the restore form lists, at most.
const PICKS_SHOWN: usize = 20;

/// `?id=`
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct JobQ {
    pub id: String,
}

/// Checks `r` for the session and starts its job: the snapshot is found first (so that
/// `latest` is the one of now), then the job runs on a blocking thread of its own with
/// the repository as it is now (its read lock held until the job ends: a prune waits).
/// Recorded in the audit log, started or refused.
pub async fn start(
    st: &AppState,
    ctx: &Ctx,
    r: Request,
    peer: SocketAddr,
) -> Result<Arc<Job>, Failure> {
    let asked = format!(
        "snapshot {}{}, to {}",
        r.snapshot,
        selection(&r, r.account.as_deref()),
        r.to
    );
    let started = start_job(st, ctx, r).await;
    let (detail, status) = match &started {
        Ok(j) => (format!("job {}: {} → {}", j.id, j.what, j.target), 202),
        Err(f) => (format!("{asked}: {}", f.message), f.status.as_u16()),
    };
    let who = crate::audit::who(ctx.session.user.as_deref());
    st.0.audit
        .record(who, &peer.ip().to_string(), "restore", &detail, status);
    started
}

/// A mail user restores into their own mailbox alone: another account they may see
/// (`--user-accounts`) is refused, saying so (one they may not see is `404` in
/// `restore::plan`, as on every route).
fn own_mailbox_only(ctx: &Ctx, r: &Request) -> Result<(), Failure> {
    let Some(user) = ctx.session.user.as_deref() else {
        return Ok(());
    };
    let named = r.account.iter().chain(r.picked.iter().map(|p| &p.account));
    match named
        .filter(|a| *a != user)
        .find(|a| ctx.session.may_see(a))
    {
        Some(a) => Err(Failure::new(
            StatusCode::FORBIDDEN,
            format!(
                "you restore into your own mailbox alone: download the messages of {a} instead"
            ),
        )),
        None => Ok(()),
    }
}

async fn start_job(st: &AppState, ctx: &Ctx, r: Request) -> Result<Arc<Job>, Failure> {
    own_mailbox_only(ctx, &r)?;
    let user = ctx.session.user.clone();
    let live = reply::live(st).await?;
    let (plan, target, what) = match r.picked.is_empty() {
        true => {
            if r.snapshot != "latest" {
                crate::read::check_snapshot_id(&r.snapshot).map_err(Failure::from)?;
            }
            let (l, id) = (live.clone(), r.snapshot.to_ascii_lowercase());
            let snap = blocking(move || l.repo().find_snapshot(&id)).await?;
            let full = snap.id.to_hex();
            let (plan, target) = restore::plan(&st.0.restore, user.as_deref(), &r, &full)?;
            let account = user.as_deref().or(r.account.as_deref());
            let when = time(snap.time);
            let what = format!(
                "snapshot {} of {when}{}",
                short(&full),
                selection(&r, account)
            );
            (plan, target, what)
        }
        false => {
            for p in &r.picked {
                crate::read::check_snapshot_id(&p.snapshot).map_err(Failure::from)?;
            }
            let (plan, target) =
                restore::plan(&st.0.restore, user.as_deref(), &r, restore::PICKED)?;
            (
                plan,
                target,
                selection(&r, None).trim_start_matches(", ").to_string(),
            )
        }
    };
    let job = (st.0.jobs.add(user, what, target)).map_err(|b| match b {
        Busy::Yours => Failure::new(
            StatusCode::CONFLICT,
            "your last restore is still running: wait for it, or cancel it",
        ),
        Busy::Full => Failure::new(
            StatusCode::TOO_MANY_REQUESTS,
            "the server runs as many restores as it takes: try again when one has ended",
        ),
    })?;
    tracing::info!(job = %job.id, "restore job started");
    let running = job.clone();
    let (st, picked) = (st.clone(), r.picked);
    tokio::task::spawn_blocking(move || {
        // Written (and synced) off the async threads, as it starts and as it ends.
        st.0.jobs.save();
        crate::jobs::run(&running, &live, plan, (&picked, &st.0.folders));
        st.0.jobs.save();
    });
    Ok(job)
}

/// What `r` takes of its snapshot, for `account` (`None`: every account), as the job
/// list, the form and the audit log say it: `, account A, folder F, 2 messages`.
fn selection(r: &Request, account: Option<&str>) -> String {
    if !r.picked.is_empty() {
        let mut folders: Vec<(&str, &str)> = (r.picked.iter())
            .map(|p| (p.account.as_str(), p.folder.as_str()))
            .collect();
        folders.sort();
        folders.dedup();
        let mut accounts: Vec<&str> = folders.iter().map(|f| f.0).collect();
        accounts.dedup();
        return match accounts[..] {
            [one] => format!(
                ", {} picked message(s) of account {one}, in {} folder(s)",
                r.picked.len(),
                folders.len()
            ),
            _ => format!(
                ", {} picked message(s) of {} accounts, in {} folder(s)",
                r.picked.len(),
                accounts.len(),
                folders.len()
            ),
        };
    }
    let mut s = match account {
        Some(a) => format!(", account {a}"),
        None => ", every account".into(),
    };
    if let Some(f) = &r.folder {
        s.push_str(&format!(", folder {f}"));
    }
    match r.messages.len() {
        0 => {}
        1 => s.push_str(", 1 message"),
        n => s.push_str(&format!(", {n} messages")),
    }
    s
}

/// `GET /restore?snapshot=&account=&folder=&key=`: where to restore that to.
pub async fn form(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Query(fields): Query<Vec<(String, String)>>,
) -> Result<Markup, PageError> {
    let r = Request::from_fields(fields);
    own_mailbox_only(&ctx, &r)?;
    let user = ctx.session.user.as_deref();
    let accounts = (r.account.iter()).chain(r.picked.iter().map(|p| &p.account));
    if let Some(u) = user {
        if accounts.clone().any(|a| a != u) {
            return Err(Failure::new(StatusCode::NOT_FOUND, "no such account").into());
        }
    }
    let snapshots = std::iter::once(&r.snapshot).filter(|_| r.picked.is_empty());
    for s in snapshots.chain(r.picked.iter().map(|p| &p.snapshot)) {
        crate::read::check_snapshot_id(s).map_err(Failure::from)?;
    }
    let to = &st.0.restore;
    let imap = to.imap.as_ref();
    let dir = to.dir.as_ref().filter(|_| user.is_none());
    let mut named: Vec<&String> = accounts.collect();
    named.sort();
    named.dedup();
    let account = user.or(r.account.as_deref()).or(match named[..] {
        [one] => Some(one.as_str()),
        _ => None,
    });
    let what = match r.picked.is_empty() {
        true => format!("Snapshot {}{}", short(&r.snapshot), selection(&r, account)),
        false => format!("Restore {}", selection(&r, None).trim_start_matches(", ")),
    };
    let picks: Vec<String> = r.picked.iter().map(restore::pick_value).collect();
    let hidden = |name: &'static str, v: &str| html! { input type="hidden" name=(name) value=(v); };
    let body = html! {
        p { (what) }
        @if !r.picked.is_empty() { ul.picked { @for p in r.picked.iter().take(PICKS_SHOWN) {
            li { (p.account) " / " (p.folder) " / " code { (p.key) } }
        } @if r.picked.len() > PICKS_SHOWN { li.muted { "and " (r.picked.len() - PICKS_SHOWN) " more" } } } }
        @if imap.is_none() && dir.is_none() {
            p.problem { @if user.is_none() {
                "Restores from the web UI are not set up: start serve with --restore-imap (a live IMAP server) or --restore-dir (a directory for Maildir trees)."
            } @else { "Restores are not set up on this server: ask your mail administrator." } }
        }
        @if let Some(imap) = imap.filter(|i| i.master.is_none() && account.is_none()) {
            h2 { "Into the mail server" }
            p.muted { "Every account at once goes into " (imap.url()) " only through a master user (start serve with --restore-master-user); restore one account from its page." }
        }
        @if let Some(imap) = imap.filter(|i| i.master.is_some() || account.is_some()) {
            h2 { "Into the mail server" }
            form method="post" action="/restore" {
                input type="hidden" name="csrf" value=(ctx.session.csrf);
                (hidden("snapshot", &r.snapshot)) (hidden("to", "imap"))
                @if let Some(a) = &r.account { (hidden("account", a)) }
                @if let Some(f) = &r.folder { (hidden("folder", f)) }
                @for m in &r.messages { (hidden("message", m)) }
                @for p in &picks { (hidden("pick", p)) }
                p.muted { "Into " (imap.url()) ": the messages go back into the folders they were in; those already there are not sent again." }
                @if imap.master.is_none() {
                    @if let Some(a) = account {
                        input type="text" name="user" value=(a) autocomplete="username" hidden;
                        label for="password" { "The mail password of " (a) }
                        input id="password" type="password" name="password" autocomplete="current-password" required;
                    }
                }
                button type="submit" { "Restore into the mailbox" }
            }
        }
        @if let Some(dir) = dir {
            h2 { "Into a directory" }
            form method="post" action="/restore" {
                input type="hidden" name="csrf" value=(ctx.session.csrf);
                (hidden("snapshot", &r.snapshot)) (hidden("to", "maildir"))
                @if let Some(a) = &r.account { (hidden("account", a)) }
                @if let Some(f) = &r.folder { (hidden("folder", f)) }
                @for m in &r.messages { (hidden("message", m)) }
                @for p in &picks { (hidden("pick", p)) }
                label for="path" { "Directory below " code { (dir.display()) } " (accounts go to <domain>/<user>/Maildir in it)" }
                input id="path" type="text" name="path" required placeholder="restore-2024-03";
                button type="submit" { "Restore as Maildir" }
            }
        }
    };
    Ok(layout("Restore", Some(&ctx.session.csrf), body))
}

/// `POST /restore` (a form): starts the job and shows its page.
pub async fn start_form(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    body: axum::body::Bytes,
) -> Result<Response, PageError> {
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(&body).unwrap_or_default();
    let job = start(&st, &ctx, Request::from_fields(fields), peer).await?;
    Ok(Redirect::to(&link("/job", &[("id", &job.id)])).into_response())
}

/// Starts a restore job (JSON, [`Request`]): `202` and the job. A mail user restores
/// their own account only, into their own mailbox.
#[utoipa::path(post, path = "/api/v1/restore", tag = "restore", request_body = Request,
    security(("session" = [], "csrf" = [])),
    responses((status = 202, body = JobView), (status = 400, body = ErrorAnswer),
        (status = 404, body = ErrorAnswer)))]
pub async fn start_api(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Json(r): Json<Request>,
) -> Result<Response, ApiError> {
    let job = start(&st, &ctx, r, peer).await?;
    Ok((StatusCode::ACCEPTED, Json(job.view(false))).into_response())
}

/// Cancels job `id` (recorded in the audit log, found or not).
fn cancel(st: &AppState, ctx: &Ctx, id: &str, peer: SocketAddr) -> Result<Arc<Job>, Failure> {
    let found = find(st, ctx, id);
    let status = found.as_ref().map_or_else(|f| f.status.as_u16(), |_| 202);
    let who = crate::audit::who(ctx.session.user.as_deref());
    let detail = format!("job {}", id.chars().take(64).collect::<String>());
    st.0.audit
        .record(who, &peer.ip().to_string(), "cancel", &detail, status);
    let job = found?;
    job.cancel();
    Ok(job)
}

fn find(st: &AppState, ctx: &Ctx, id: &str) -> Result<Arc<Job>, Failure> {
    (st.0.jobs.get(id, ctx.session.user.as_deref()))
        .ok_or_else(|| Failure::new(StatusCode::NOT_FOUND, "no such restore job"))
}

/// `GET /job?id=`
pub async fn job(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Query(q): Query<JobQ>,
) -> Result<Markup, PageError> {
    let v = find(&st, &ctx, &q.id)?.view(false);
    let running = matches!(v.state, JobState::Running | JobState::Cancelling);
    // Without scripts the page reloads itself; with them, app.js follows the job through
    // the API.
    let head =
        html! { @if running { noscript { meta http-equiv="refresh" content=(REFRESH_SECS); } } };
    let body = html! {
        p.crumbs { a href="/jobs" { "Restores" } " / " (v.id) }
        @if running { div data-job=(v.id) { (job_body(&v)) } } @else { (job_body(&v)) }
        @if v.state == JobState::Running {
            form method="post" action="/job/cancel" {
                input type="hidden" name="csrf" value=(ctx.session.csrf);
                input type="hidden" name="id" value=(v.id);
                button type="submit" { "Cancel" }
            }
        }
    };
    Ok(layout_with("Restore", Some(&ctx.session.csrf), head, body))
}

fn job_body(v: &JobView) -> Markup {
    let pct = |d: u64, t: u64| (d.min(t) * 100).checked_div(t).unwrap_or(0);
    html! {
        p { strong.state { (state_text(v.state)) } " · " (v.what) " → " code { (v.target) } }
        p.muted { "Started " (time(v.started)) " UTC" @if let Some(e) = v.ended { ", ended " (time(e)) } }
        @if v.summary.is_none() && v.error.is_none() {
            label for="progress" { (v.done_items) " of " (v.total_items) " messages · "
                (bytes(v.done_bytes)) " of " (bytes(v.total_bytes)) }
            progress id="progress" max=(v.total_items.max(1)) value=(v.done_items.min(v.total_items)) {
                (pct(v.done_items, v.total_items)) "%"
            }
        }
        @if let Some(e) = &v.error { p.problem role="alert" { (e) } }
        @if let Some(s) = &v.summary {
            table { tbody {
                tr { th { "Messages selected" } td.num { (s.items_total) } }
                tr { th { "Restored" } td.num { (s.items_restored) } }
                tr { th { "Already there" } td.num { (s.items_present) } }
                tr { th { "Not restored" } td.num { (s.items_failed) } }
                @if s.items_not_tried > 0 { tr { th { "Of these, not tried" } td.num { (s.items_not_tried) } } }
                tr { th { "Time" } td.num { (format!("{:.1} s", s.elapsed_secs)) } }
            } }
            @if !s.failures.is_empty() {
                h2 { "Not restored" }
                ul.failures { @for f in &s.failures { li { code { (f) } } } }
            }
            @if !s.warnings.is_empty() {
                h2 { "Warnings" }
                ul { @for w in &s.warnings { li { (w) } } }
            }
        }
    }
}

fn state_text(s: JobState) -> &'static str {
    match s {
        JobState::Running => "Running",
        JobState::Cancelling => "Cancelling",
        JobState::Done => "Done",
        JobState::Partial => "Done, with messages not restored",
        JobState::Cancelled => "Cancelled",
        JobState::Failed => "Failed",
        JobState::Interrupted => "Interrupted by a restart",
    }
}

/// `GET /jobs`: the session's jobs (the admin's: every job), newest first.
pub async fn jobs(State(st): State<AppState>, Extension(ctx): Extension<Ctx>) -> Markup {
    let list = st.0.jobs.visible(ctx.session.user.as_deref());
    let body = html! {
        @if list.is_empty() { p { "No restores yet. Start one from a snapshot, an account, a folder or a message." } }
        table {
            thead { tr { th { "Started" } th { "State" } th { "What" } th.wide { "To" } th.num { "Messages" } } }
            tbody { @for j in &list { @let v = j.view(false); tr {
                td { a href=(link("/job", &[("id", &v.id)])) { (time(v.started)) } }
                td { (state_text(v.state)) } td { (v.what) } td.wide { code { (v.target) } }
                td.num { (v.done_items) " / " (v.total_items) }
            } } }
        }
    };
    layout("Restores", Some(&ctx.session.csrf), body)
}

/// `POST /job/cancel` (a form with `id`).
pub async fn cancel_form(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    axum::Form(q): axum::Form<JobQ>,
) -> Result<Response, PageError> {
    cancel(&st, &ctx, &q.id, peer)?;
    Ok(Redirect::to(&link("/job", &[("id", &q.id)])).into_response())
}

/// The restore jobs the session may see, newest first.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct JobsAnswer {
    pub jobs: Vec<JobView>,
}

/// The restore jobs the session may see (a mail user: their own).
#[utoipa::path(get, path = "/api/v1/jobs", tag = "restore",
    responses((status = 200, body = JobsAnswer), (status = 401, body = ErrorAnswer)))]
pub async fn jobs_api(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
) -> Json<JobsAnswer> {
    let list = st.0.jobs.visible(ctx.session.user.as_deref());
    Json(JobsAnswer {
        jobs: list.iter().map(|j| j.view(false)).collect(),
    })
}

/// A job, with the engine's report once it ended.
#[utoipa::path(get, path = "/api/v1/job", tag = "restore", params(JobQ),
    responses((status = 200, body = JobView), (status = 404, body = ErrorAnswer)))]
pub async fn job_api(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Query(q): Query<JobQ>,
) -> Result<Json<JobView>, ApiError> {
    Ok(Json(find(&st, &ctx, &q.id)?.view(true)))
}

/// Cancels a job: `202` and the job (stopping).
#[utoipa::path(post, path = "/api/v1/job/cancel", tag = "restore", params(JobQ),
    security(("session" = [], "csrf" = [])),
    responses((status = 202, body = JobView), (status = 404, body = ErrorAnswer)))]
pub async fn cancel_api(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(q): Query<JobQ>,
) -> Result<Response, ApiError> {
    let job = cancel(&st, &ctx, &q.id, peer)?;
    Ok((StatusCode::ACCEPTED, Json(job.view(false))).into_response())
}

/// The "Restore…" link of a snapshot, an account, a folder or a message.
pub fn restore_link(params: &[(&str, &str)]) -> Markup {
    html! { a.restore href=(link("/restore", params)) { "Restore…" } }
}
