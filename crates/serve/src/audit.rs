//! The audit log: who logged in, searched, viewed, downloaded and restored what, and when
//! (issue 28). Events are gathered in memory and written to the repository in batches
//! ([`mailvault_core::repo::audit`]: sealed, content-named, never rewritten), every
//! `--audit-flush` (60 s) and when the server stops; the admin reads them on `/audit`.
//!
//! What is recorded: logins (and failed ones: the name given when it is an address or
//! `admin`, so a password typed into the name field is never kept), every page and API
//! route that shows or downloads mail (message, folder, attachment, filter file, the
//! folder, account and search downloads), searches with their query, restore jobs started
//! and cancelled, and the IMAP view's logins and opened folders. Passwords never.
//!
//! A batch that cannot be written (the repository is being pruned, the disk is full)
//! stays in memory and goes with the next; past [`MAX_PENDING`] events the oldest are
//! dropped and counted, and the next record says how many (`lost_before`).

use crate::html::{layout, link, time};
use crate::reply::{ApiError, Ctx, Failure, PageError};
use crate::state::lock;
use crate::state::AppState;
use axum::extract::{ConnectInfo, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use axum::{Extension, Json};
use mailvault_core::repo::audit::{AuditEvent, AuditRecord};
use maud::{html, Markup};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

/// Events held at most while the repository cannot be written.
const MAX_PENDING: usize = 100_000;
/// A route's detail is cut to this many characters.
const MAX_DETAIL: usize = 1000;

/// The events not written yet, and what is known of those written.
#[derive(Default)]
pub struct AuditLog {
    pending: Mutex<Pending>,
    written: Mutex<crate::audit_read::Written>,
}

#[derive(Default)]
struct Pending {
    events: VecDeque<AuditEvent>,
    lost: u64,
}

impl AuditLog {
    /// Records that `who` (from `address`) did `action` on `detail`, answered `status`.
    pub fn record(&self, who: &str, address: &str, action: &str, detail: &str, status: u16) {
        let mut detail: String = (detail.chars())
            .map(|c| if c.is_control() { '\u{fffd}' } else { c })
            .take(MAX_DETAIL)
            .collect();
        if detail.len() >= MAX_DETAIL {
            detail.push('…');
        }
        let event = AuditEvent {
            time: jiff::Timestamp::now().as_second(),
            who: who.to_string(),
            address: address.to_string(),
            action: action.to_string(),
            detail,
            status,
        };
        let mut p = lock(&self.pending);
        if p.events.len() >= MAX_PENDING {
            p.events.pop_front();
            p.lost += 1;
        }
        p.events.push_back(event);
    }

    /// The events not written yet, oldest first.
    pub fn pending(&self) -> Vec<AuditEvent> {
        lock(&self.pending).events.iter().cloned().collect()
    }

    /// Takes the pending events as a record to write, if there are any.
    fn take(&self) -> Option<AuditRecord> {
        let mut p = lock(&self.pending);
        if p.events.is_empty() {
            return None;
        }
        let events = std::mem::take(&mut p.events).into();
        let lost_before = std::mem::take(&mut p.lost);
        Some(AuditRecord {
            hostname: mailvault_core::hostname(),
            written: jiff::Timestamp::now().as_second(),
            events,
            lost_before,
        })
    }

    /// Puts back a record that could not be written, before what came since.
    fn put_back(&self, r: AuditRecord) {
        let mut p = lock(&self.pending);
        let mut events: VecDeque<AuditEvent> = r.events.into();
        events.append(&mut p.events);
        let over = events.len().saturating_sub(MAX_PENDING);
        events.drain(..over);
        p.events = events;
        p.lost += r.lost_before + over as u64;
    }
}

/// Who a session is in the log: the mail user's address, or `admin`.
pub fn who(user: Option<&str>) -> &str {
    user.unwrap_or("admin")
}

/// A name given at a failed login, as the log keeps it: an address or `admin`, else not
/// kept (it may be a password typed into the wrong field).
pub fn given_name(name: Option<&str>) -> String {
    match name.map(str::trim) {
        None | Some("") | Some("admin") => "admin".into(),
        Some(n) if n.contains('@') && n.len() <= 320 && !n.contains(char::is_whitespace) => {
            n.to_string()
        }
        Some(_) => "(a name that is not an address)".into(),
    }
}

/// Writes what is pending to the repository (blocking); kept for the next try when it
/// cannot be written.
pub fn flush(st: &AppState) {
    // Held from taking the events to knowing them written: a page shows each once.
    let mut known = lock(&st.0.audit.written);
    let Some(record) = st.0.audit.take() else {
        return;
    };
    let written = st
        .live()
        .and_then(|live| mailvault_core::repo::audit::write(live.repo(), &record));
    match written {
        Ok(path) => {
            tracing::debug!("{} audit events written to {path}", record.events.len());
            known.wrote(path, record);
        }
        Err(e) => {
            tracing::error!("the audit log could not be written (kept for the next try): {e}");
            st.0.audit.put_back(record);
        }
    }
}

/// Writes the pending events every `every`, for as long as the server runs.
pub async fn flush_every(st: AppState, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let st = st.clone();
        let _ = tokio::task::spawn_blocking(move || flush(&st)).await;
    }
}

/// How a route is recorded: its action, or `None` for routes that show no mail (lists of
/// snapshots and accounts, the style sheet, the audit log itself).
fn action_of(path: &str) -> Option<&'static str> {
    let p = path.strip_prefix("/api/v1").unwrap_or(path);
    Some(match p {
        "/message" | "/folder" | "/messages" | "/account/file" | "/filters" => "view",
        "/message/raw" | "/message/attachment" | "/account/file/raw" | "/file/raw" => "download",
        "/search" => "search",
        // A folder, an account or a search result in any format (`/folder/mbox`,
        // `/account/zip`, ...), one that does not exist too.
        _ if ["/folder/", "/account/", "/search/"]
            .iter()
            .any(|d| p.starts_with(d)) =>
        {
            "download"
        }
        _ => return None,
    })
}

/// Records each request to a route that shows, searches or downloads mail, with its
/// parameters and the answer's status (after the session check: the session says who).
pub async fn requests(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let action = match req.method().is_safe() {
        true => action_of(req.uri().path()),
        false => None,
    };
    let Some(action) = action else {
        return next.run(req).await;
    };
    let user = (req.extensions().get::<crate::reply::Ctx>()).map(|c| c.session.user.clone());
    let address = (req.extensions().get::<ConnectInfo<SocketAddr>>())
        .map(|c| c.0.ip().to_string())
        .unwrap_or_default();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or_default().replace('+', " ");
    let query = percent_encoding::percent_decode_str(&query).decode_utf8_lossy();
    let detail = match query.is_empty() {
        true => path,
        false => format!("{path}?{query}"),
    };
    let r = next.run(req).await;
    if let Some(user) = user {
        let who = who(user.as_deref());
        st.0.audit
            .record(who, &address, action, &detail, r.status().as_u16());
    }
    r
}

/// Events per page of the log.
const PAGE: usize = 100;

/// `?page=`
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQ {
    pub page: Option<usize>,
}

/// A page of the log, newest first: the events written to the repository and those not
/// written yet (`written: false`), and a warning for each record that does not open.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct LogPage {
    pub events: Vec<Shown>,
    pub total: usize,
    pub page: usize,
    pub pages: usize,
    pub warnings: Vec<String>,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Shown {
    #[serde(flatten)]
    pub event: AuditEvent,
    pub written: bool,
}

/// Page `page` of the log, for the admin (a mail user: `404`, as a page that does not
/// exist); read on a blocking thread.
async fn log_page(st: &AppState, ctx: &Ctx, page: usize) -> Result<LogPage, Failure> {
    if ctx.session.user.is_some() {
        return Err(Failure::new(StatusCode::NOT_FOUND, "no such page"));
    }
    let st = st.clone();
    crate::reply::blocking(move || {
        let live = st.live()?;
        // Under the lock a write holds from taking pending events to knowing them written.
        let mut known = lock(&st.0.audit.written);
        let pending = st.0.audit.pending();
        let found = known.page(live.repo(), pending, page, PAGE, crate::audit_read::RELIST)?;
        let events = (found.events.into_iter())
            .map(|(event, written)| Shown { event, written })
            .collect();
        Ok(LogPage {
            events,
            total: found.total,
            page: found.page,
            pages: found.pages,
            warnings: found.warnings,
        })
    })
    .await
}

/// `GET /audit?page=N`: the admin's page of the log.
pub async fn page(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Query(q): Query<AuditQ>,
) -> Result<Markup, PageError> {
    let p = log_page(&st, &ctx, q.page.unwrap_or(1)).await?;
    let body = html! {
        p { (p.total) " events, newest first. Written to the repository in batches, sealed; "
            "those marked * are not written yet." }
        @for w in &p.warnings { p.problem { (w) } }
        table.list {
            thead { tr { th { "Time (UTC)" } th { "Who" } th.wide { "From" } th { "Did" } th { "What" } th.num { "Answer" } } }
            tbody { @for s in &p.events { @let e = &s.event; tr {
                td { (time(e.time)) @if !s.written { " *" } }
                td { (e.who) } td.wide { (e.address) } td { (e.action) }
                td { code { (e.detail) } } td.num { (e.status) }
            } } }
        }
        p.pages {
            @if p.page > 1 { a href=(link("/audit", &[("page", &(p.page - 1).to_string())])) { "Newer" } " " }
            "Page " (p.page) " of " (p.pages)
            @if p.page < p.pages { " " a href=(link("/audit", &[("page", &(p.page + 1).to_string())])) { "Older" } }
        }
    };
    Ok(layout("Audit log", Some(&ctx.session.csrf), body))
}

/// A page of the audit log, newest first (the admin's alone).
#[utoipa::path(get, path = "/api/v1/audit", tag = "admin", params(AuditQ),
    responses((status = 200, body = LogPage), (status = 404, body = crate::reply::ErrorAnswer)))]
pub async fn api(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Query(q): Query<AuditQ>,
) -> Result<Json<LogPage>, ApiError> {
    Ok(Json(log_page(&st, &ctx, q.page.unwrap_or(1)).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mail_routes_are_recorded_and_lists_are_not() {
        assert_eq!(action_of("/message"), Some("view"));
        assert_eq!(action_of("/api/v1/message/raw"), Some("download"));
        assert_eq!(action_of("/search/mbox"), Some("download"));
        assert_eq!(action_of("/folder/mbox.zip"), Some("download"));
        assert_eq!(action_of("/account/zip"), Some("download"));
        assert_eq!(action_of("/api/v1/account/mbox.zip"), Some("download"));
        assert_eq!(action_of("/account/file"), Some("view"));
        assert_eq!(action_of("/account"), None);
        assert_eq!(action_of("/api/v1/accounts"), None);
        assert_eq!(action_of("/api/v1/search"), Some("search"));
        assert_eq!(action_of("/"), None);
        assert_eq!(action_of("/api/v1/snapshots"), None);
        assert_eq!(action_of("/audit"), None);
    }

    #[test]
    fn a_failed_logins_name_is_kept_only_when_it_is_an_address() {
        assert_eq!(given_name(Some("bob@example.org")), "bob@example.org");
        assert_eq!(given_name(None), "admin");
        assert_eq!(
            given_name(Some("hunter2")),
            "(a name that is not an address)"
        );
        assert_eq!(
            given_name(Some("my pass@word")),
            "(a name that is not an address)"
        );
    }

    #[test]
    fn a_batch_not_written_goes_back_first_and_losses_are_counted() {
        let log = AuditLog::default();
        log.record("admin", "127.0.0.1", "view", "/message?\u{1b}[2J", 200);
        let r = log.take().unwrap();
        assert_eq!(r.events[0].detail, "/message?\u{fffd}[2J");
        assert!(log.take().is_none());
        log.record("bob@x", "::1", "search", "/search?q=x", 200);
        log.put_back(r);
        let again = log.take().unwrap();
        assert_eq!(again.events.len(), 2);
        assert_eq!(
            (again.events[0].action.as_str(), again.lost_before),
            ("view", 0)
        );
        for _ in 0..MAX_PENDING + 3 {
            log.record("admin", "", "view", "/message", 200);
        }
        let full = log.take().unwrap();
        assert_eq!((full.events.len(), full.lost_before), (MAX_PENDING, 3));
    }
}
