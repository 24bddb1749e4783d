//! The JSON API under `/api/v1/` (docs/api.md): the same reads as the pages, with the
//! same session; POSTs need the session's CSRF token in `X-CSRF-Token`. Each handler's
//! `#[utoipa::path]` is what registers its route (`openapi::api_routes`) and what the
//! OpenAPI document (`GET /api/v1/openapi.json`) says of it.

use crate::home::HomeFile;
use crate::read::{self, Holder, Place, SnapRow};
use crate::reply::{
    self, blocking, AccountQ, ApiError, AttachmentQ, Ctx, ErrorAnswer, Failure, FileQ, FolderQ,
    Params, SearchQ, SnapQ,
};
use crate::state::AppState;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::{Extension, Json};
use mailvault_core::ops::ls::{AccountInfo, FolderInfo};
use mailvault_core::search::exec::SearchResult;
use mailvault_core::search::show::Decoded;
use serde::Serialize;
use utoipa::ToSchema;

type Answer<T> = Result<Json<T>, ApiError>;

/// Who is logged in, and the session's CSRF token.
#[derive(Serialize, ToSchema)]
pub struct SessionAnswer {
    /// What POSTs give in `X-CSRF-Token`.
    pub csrf_token: String,
    /// The mail user; null for the admin.
    pub user: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct AccountsAnswer {
    pub snapshot: SnapRow,
    pub accounts: Vec<AccountInfo>,
}

#[derive(Serialize, ToSchema)]
pub struct FoldersAnswer {
    pub folders: Vec<FolderInfo>,
}

/// An account's home (sieve scripts, the link to the active one).
#[derive(Serialize, ToSchema)]
pub struct FiltersAnswer {
    /// False when the backup kept no home for the account.
    pub home: bool,
    pub files: Vec<HomeFile>,
}

/// A message at its place: its entry, its decoded headers and text, and the snapshots
/// that hold it.
#[derive(Serialize, ToSchema)]
pub struct MessageAnswer {
    /// The content id (what search prints and `restore --message` takes).
    pub id: String,
    /// The snapshot's full id.
    pub snapshot: String,
    pub account: String,
    pub folder: String,
    pub key: String,
    /// Maildir flags and keyword letters.
    pub flags: String,
    pub size: u64,
    /// Unix seconds.
    pub internal_date: i64,
    pub headers: Decoded,
    pub held_by: Vec<Holder>,
}

/// The session's CSRF token, for clients that logged in with a cookie of the pages, and
/// who is logged in.
#[utoipa::path(get, path = "/api/v1/session", tag = "session",
    responses((status = 200, body = SessionAnswer), (status = 401, body = ErrorAnswer)))]
pub async fn session(Extension(ctx): Extension<Ctx>) -> Json<SessionAnswer> {
    Json(SessionAnswer {
        csrf_token: ctx.session.csrf,
        user: ctx.session.user,
    })
}

/// The snapshots the session may see, oldest first (a mail user: those holding their
/// account).
#[utoipa::path(get, path = "/api/v1/snapshots", tag = "browse",
    responses((status = 200, body = Vec<SnapRow>), (status = 401, body = ErrorAnswer)))]
pub async fn snapshots(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
) -> Answer<Vec<SnapRow>> {
    let live = reply::live(&st).await?;
    let sees = ctx.session.sees().map(<[String]>::to_vec);
    Ok(Json(
        blocking(move || read::snapshots(live.repo(), sees.as_deref(), &st.0.held)).await?,
    ))
}

/// A snapshot and its accounts.
#[utoipa::path(get, path = "/api/v1/accounts", tag = "browse", params(SnapQ),
    responses((status = 200, body = AccountsAnswer), (status = 404, body = ErrorAnswer)))]
pub async fn accounts(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(q): Params<SnapQ>,
) -> Answer<AccountsAnswer> {
    let live = reply::live(&st).await?;
    let sees = ctx.session.sees().map(<[String]>::to_vec);
    let (snapshot, accounts) = blocking(move || {
        Ok((
            read::snapshot(live.repo(), &q.snapshot, sees.as_deref(), &st.0.held)?,
            read::accounts(live.repo(), &q.snapshot, sees.as_deref())?,
        ))
    })
    .await?;
    Ok(Json(AccountsAnswer { snapshot, accounts }))
}

/// An account's folders.
#[utoipa::path(get, path = "/api/v1/folders", tag = "browse", params(AccountQ),
    responses((status = 200, body = FoldersAnswer), (status = 404, body = ErrorAnswer)))]
pub async fn folders(
    State(st): State<AppState>,
    Params(q): Params<AccountQ>,
) -> Answer<FoldersAnswer> {
    let live = reply::live(&st).await?;
    let folders = blocking(move || read::folders(live.repo(), &q.snapshot, &q.account)).await?;
    Ok(Json(FoldersAnswer { folders }))
}

/// The files of the account's home (sieve scripts, the link to the active one).
#[utoipa::path(get, path = "/api/v1/filters", tag = "browse", params(AccountQ),
    responses((status = 200, body = FiltersAnswer), (status = 404, body = ErrorAnswer)))]
pub async fn filters(
    State(st): State<AppState>,
    Params(q): Params<AccountQ>,
) -> Answer<FiltersAnswer> {
    let live = reply::live(&st).await?;
    let view = blocking(move || crate::home::account(live.repo(), &q.snapshot, &q.account)).await?;
    Ok(Json(FiltersAnswer {
        home: view.home.is_some(),
        files: view.home.unwrap_or_default(),
    }))
}

/// A file of the account's home as stored, as a download.
#[utoipa::path(get, path = "/api/v1/file/raw", tag = "downloads", params(FileQ),
    responses((status = 200, description = "The file's bytes", content_type = "application/octet-stream"),
        (status = 404, body = ErrorAnswer)))]
pub async fn file_raw(State(st): State<AppState>, Params(q): Params<FileQ>) -> Response {
    match reply::home_file(&st, q, u64::MAX).await {
        Ok(c) => reply::file_download(c),
        Err(e) => e.json(),
    }
}

/// A page of a folder's messages, sorted.
#[utoipa::path(get, path = "/api/v1/messages", tag = "browse", params(FolderQ),
    responses((status = 200, body = read::Page), (status = 404, body = ErrorAnswer)))]
pub async fn messages(
    State(st): State<AppState>,
    Params(q): Params<FolderQ>,
) -> Answer<read::Page> {
    Ok(Json(reply::folder_page(&st, &q).await?))
}

/// The folder as one `.mbox`, `.zip` (of `.eml` files) or `.mbox.zip` (of its mbox)
/// download.
#[utoipa::path(get, path = "/api/v1/folder/{format}", tag = "downloads",
    params(("format" = String, Path, description = "`mbox`, `zip` or `mbox.zip`"), FolderQ),
    responses((status = 200, description = "The folder's messages: `application/mbox`, or `application/zip` (of `.eml` files)"),
        (status = 404, body = ErrorAnswer)))]
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

/// Every folder of the account, its mail, as one `.zip` download: of `.eml` files, a
/// directory per folder, or of an mbox per folder. Never one mbox, which would lose the
/// folders.
#[utoipa::path(get, path = "/api/v1/account/{format}", tag = "downloads",
    params(("format" = String, Path, description = "`zip` (of `.eml` files) or `mbox.zip` (an mbox per folder)"), AccountQ),
    responses((status = 200, description = "The account's messages: `application/zip`, of `.eml` files (`<account>/Archive/2023/…`) or of an mbox per folder (`<account>/Archive/2023.mbox`)"),
        (status = 404, body = ErrorAnswer)))]
pub async fn account_download(
    State(st): State<AppState>,
    Path(format): Path<String>,
    Params(q): Params<AccountQ>,
) -> Response {
    match crate::download::Format::parse(&format) {
        Some(f) => crate::download::account_download(st, (q, f), Failure::json).await,
        None => Failure::new(StatusCode::NOT_FOUND, "no such download").json(),
    }
}

/// A message: its entry, decoded headers, text and attachments, and the snapshots that
/// hold it.
#[utoipa::path(get, path = "/api/v1/message", tag = "messages", params(Place),
    responses((status = 200, body = MessageAnswer), (status = 404, body = ErrorAnswer)))]
pub async fn message(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(p): Params<Place>,
) -> Answer<MessageAnswer> {
    let f = reply::found(&st, p.clone()).await?;
    let held_by = reply::holders(&st, f.entry.hash, &ctx).await?;
    Ok(Json(MessageAnswer {
        id: f.entry.hash.to_hex(),
        snapshot: f.snapshot.id,
        account: p.account,
        folder: p.folder,
        key: p.key,
        flags: String::from_utf8_lossy(f.entry.flags()).into_owned(),
        size: f.entry.size,
        internal_date: f.entry.mtime.secs,
        headers: crate::mail::decode(&f.raw),
        held_by,
    }))
}

/// The message as stored, as an `.eml` download.
#[utoipa::path(get, path = "/api/v1/message/raw", tag = "downloads", params(Place),
    responses((status = 200, description = "The message's bytes", content_type = "message/rfc822"),
        (status = 404, body = ErrorAnswer)))]
pub async fn message_raw(
    State(st): State<AppState>,
    Params(p): Params<Place>,
) -> Result<axum::response::Response, ApiError> {
    Ok(reply::raw_download(reply::found(&st, p).await?))
}

/// A search in the query language of `mailvault search` (docs/search.md), a page of hits
/// with facets. A mail user's search sees their own account only.
#[utoipa::path(get, path = "/api/v1/search", tag = "search", params(SearchQ),
    responses((status = 200, body = SearchResult), (status = 400, body = ErrorAnswer)))]
pub async fn search_get(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(q): Params<SearchQ>,
) -> Answer<SearchResult> {
    Ok(Json(reply::search(&st, &q, &ctx).await?))
}

/// The same search, its query in a JSON body (kept out of URLs and proxies' logs).
///
/// (A POST is not seen by the audit log's route layer: its query is in the body, so it is
/// recorded here.)
#[utoipa::path(post, path = "/api/v1/search", tag = "search", request_body = SearchQ,
    security(("session" = [], "csrf" = [])),
    responses((status = 200, body = SearchResult), (status = 400, body = ErrorAnswer)))]
pub async fn search_post(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>,
    Json(q): Json<SearchQ>,
) -> Answer<SearchResult> {
    let found = reply::search(&st, &q, &ctx).await;
    let status = found.as_ref().map_or_else(|f| f.status.as_u16(), |_| 200);
    let detail = format!(
        "POST /api/v1/search q={}",
        q.q.as_deref().unwrap_or_default()
    );
    let who = crate::audit::who(ctx.session.user.as_deref());
    st.0.audit
        .record(who, &peer.ip().to_string(), "search", &detail, status);
    Ok(Json(found?))
}

/// The repository's overview (the admin's alone): each source's last backup, its age and
/// result, and what every backup recorded.
#[utoipa::path(get, path = "/api/v1/repository", tag = "admin",
    responses((status = 200, body = crate::repository::Overview), (status = 404, body = ErrorAnswer)))]
pub async fn repository(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
) -> Answer<crate::repository::Overview> {
    Ok(Json(reply::overview(&st, &ctx).await?))
}

/// Attachment `n` of a message, decoded, as a download.
#[utoipa::path(get, path = "/api/v1/message/attachment", tag = "downloads", params(AttachmentQ),
    responses((status = 200, description = "The attachment, decoded", content_type = "application/octet-stream"),
        (status = 404, body = ErrorAnswer)))]
pub async fn message_attachment(
    State(st): State<AppState>,
    Params(q): Params<AttachmentQ>,
) -> Result<Response, ApiError> {
    Ok(reply::attachment_download(&st, &q).await?)
}

/// Every message a search finds, as one `.mbox`, `.zip` (of `.eml` files) or `.mbox.zip`
/// (an mbox per folder) download.
#[utoipa::path(get, path = "/api/v1/search/{format}", tag = "downloads",
    params(("format" = String, Path, description = "`mbox`, `zip` or `mbox.zip`"), SearchQ),
    responses((status = 200, description = "The messages found: `application/mbox`, or `application/zip` (of `.eml` files)"),
        (status = 400, body = ErrorAnswer)))]
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
