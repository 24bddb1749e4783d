//! The JSON API under `/api/v1/` (docs/api.md): the same reads as the pages, with the
//! same session; POSTs need the session's CSRF token in `X-CSRF-Token`.

use crate::read::{self, Place};
use crate::reply::{
    self, blocking, AccountQ, ApiError, Ctx, Failure, FileQ, FolderQ, Params, SearchQ, SnapQ,
};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Json};
use serde_json::{json, Value};

type Answer = Result<Json<Value>, ApiError>;

fn to_json<T: serde::Serialize>(v: T) -> Answer {
    Ok(Json(serde_json::to_value(v).map_err(|e| {
        reply::Failure::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    })?))
}

/// The session's CSRF token, for clients that logged in with a cookie of the pages, and
/// who is logged in (`user`: the mail user, null for the admin).
pub async fn session(Extension(ctx): Extension<Ctx>) -> Json<Value> {
    Json(json!({ "csrf_token": ctx.session.csrf, "user": ctx.session.user }))
}

pub async fn snapshots(State(st): State<AppState>, Extension(ctx): Extension<Ctx>) -> Answer {
    let live = reply::live(&st).await?;
    let user = ctx.session.user;
    to_json(blocking(move || read::snapshots(live.repo(), user.as_deref())).await?)
}

pub async fn accounts(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(q): Params<SnapQ>,
) -> Answer {
    let live = reply::live(&st).await?;
    let user = ctx.session.user;
    let (snap, list) = blocking(move || {
        Ok((
            read::snapshot(live.repo(), &q.snapshot, user.as_deref())?,
            read::accounts(live.repo(), &q.snapshot, user.as_deref())?,
        ))
    })
    .await?;
    to_json(json!({ "snapshot": snap, "accounts": list }))
}

pub async fn folders(State(st): State<AppState>, Params(q): Params<AccountQ>) -> Answer {
    let live = reply::live(&st).await?;
    let list = blocking(move || read::folders(live.repo(), &q.snapshot, &q.account)).await?;
    to_json(json!({ "folders": list }))
}

/// The files of the account's home (sieve scripts, the link to the active one); `home`
/// false when the backup kept none.
pub async fn filters(State(st): State<AppState>, Params(q): Params<AccountQ>) -> Answer {
    let live = reply::live(&st).await?;
    let view = blocking(move || crate::home::account(live.repo(), &q.snapshot, &q.account)).await?;
    to_json(json!({ "home": view.home.is_some(), "files": view.home.unwrap_or_default() }))
}

/// A file of the account's home as stored.
pub async fn file_raw(State(st): State<AppState>, Params(q): Params<FileQ>) -> Response {
    match reply::home_file(&st, q, u64::MAX).await {
        Ok(c) => reply::file_download(c),
        Err(e) => e.json(),
    }
}

pub async fn messages(State(st): State<AppState>, Params(q): Params<FolderQ>) -> Answer {
    to_json(reply::folder_page(&st, &q).await?)
}

/// The folder as an `.mbox` download.
/// `/api/v1/folder/mbox` or `/api/v1/folder/zip`.
pub async fn folder_download(
    State(st): State<AppState>,
    Path(format): Path<String>,
    Params(q): Params<FolderQ>,
) -> Response {
    match crate::download::Format::parse(&format) {
        Some(f) => crate::download::folder_download(st, (q, f), Failure::json).await,
        None => Failure::new(StatusCode::NOT_FOUND, "no such download").json(),
    }
}

pub async fn message(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(p): Params<Place>,
) -> Answer {
    let f = reply::found(&st, p.clone()).await?;
    let holders = reply::holders(&st, f.entry.hash, &ctx).await?;
    let d = crate::mail::decode(&f.raw);
    to_json(json!({
        "id": f.entry.hash.to_hex(),
        "snapshot": f.snapshot.id,
        "account": p.account,
        "folder": p.folder,
        "key": p.key,
        "flags": String::from_utf8_lossy(f.entry.flags()),
        "size": f.entry.size,
        "internal_date": f.entry.mtime.secs,
        "headers": d,
        "held_by": holders,
    }))
}

pub async fn message_raw(
    State(st): State<AppState>,
    Params(p): Params<Place>,
) -> Result<axum::response::Response, ApiError> {
    Ok(reply::raw_download(reply::found(&st, p).await?))
}

pub async fn search_get(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(q): Params<SearchQ>,
) -> Answer {
    to_json(reply::search(&st, &q, &ctx).await?)
}

/// (A POST is not seen by the audit log's route layer: its query is in the body, so it is
/// recorded here.)
pub async fn search_post(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>,
    Json(q): Json<SearchQ>,
) -> Answer {
    let found = reply::search(&st, &q, &ctx).await;
    let status = found.as_ref().map_or_else(|f| f.status.as_u16(), |_| 200);
    let detail = format!(
        "POST /api/v1/search q={}",
        q.q.as_deref().unwrap_or_default()
    );
    let who = crate::audit::who(ctx.session.user.as_deref());
    st.0.audit
        .record(who, &peer.ip().to_string(), "search", &detail, status);
    to_json(found?)
}

/// The repository's overview (the admin's alone): each source's last backup, its age and
/// result, and what every backup recorded.
pub async fn repository(State(st): State<AppState>, Extension(ctx): Extension<Ctx>) -> Answer {
    let o = reply::overview(&st, &ctx).await?;
    to_json(o)
}

/// Attachment `n` of a message, decoded, as a download.
pub async fn message_attachment(
    State(st): State<AppState>,
    Params(q): Params<reply::AttachmentQ>,
) -> Result<Response, ApiError> {
    Ok(reply::attachment_download(&st, &q).await?)
}

/// Every message a search finds, as one `.mbox` or `.zip` download.
pub async fn search_download(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Path(format): Path<String>,
    Params(q): Params<SearchQ>,
) -> Response {
    match crate::download::Format::parse(&format) {
        Some(f) => crate::download::search_download(st, (q, f), ctx, Failure::json).await,
        None => Failure::new(StatusCode::NOT_FOUND, "no such download").json(),
    }
}
