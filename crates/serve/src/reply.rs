//! What handlers answer with: the request's session, failures (as an HTML page or a JSON
//! object), the blocking work they hand to tokio, the query parameters pages and API
//! share, and the search and download both run.

use crate::auth::Session;
use crate::html;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// A request's session (put in its extensions by `routes::require_session`).
#[derive(Clone)]
pub struct Ctx {
    pub id: String,
    pub session: Session,
}

/// A request that failed: its status and what to tell.
/// What the API answers on a failure (every status but 2xx): `{"error": "..."}`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorAnswer {
    pub error: String,
}

#[derive(Debug)]
pub struct Failure {
    pub status: StatusCode,
    pub message: String,
}

impl Failure {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Failure {
        Failure {
            status,
            message: message.into(),
        }
    }
    pub fn json(self) -> Response {
        let body = ErrorAnswer {
            error: self.message,
        };
        (self.status, axum::Json(body)).into_response()
    }
    pub fn page(self) -> Response {
        (self.status, html::error_page(self.status, &self.message)).into_response()
    }
}

impl From<mailvault_core::Error> for Failure {
    fn from(e: mailvault_core::Error) -> Failure {
        use mailvault_core::Error as E;
        match e {
            E::NotFound(_) | E::SnapshotNotFound(_) | E::InvalidInput(_) => {
                Failure::new(StatusCode::NOT_FOUND, e.to_string())
            }
            E::IndexChanged { .. } | E::Locked { .. } => {
                tracing::warn!("{e}");
                Failure::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the repository is being changed (a prune runs): try again in a moment",
                )
            }
            e => {
                tracing::error!("{e}");
                Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "the repository could not be read: see the server's log",
                )
            }
        }
    }
}

/// Runs blocking repository work on tokio's blocking threads.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> mailvault_core::Result<T> + Send + 'static,
) -> Result<T, Failure> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(Failure::from),
        Err(e) => {
            tracing::error!("a request's work failed: {e}");
            Err(Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error",
            ))
        }
    }
}

/// The repository to read from, fresh (see `state`), on a blocking thread.
pub async fn live(
    st: &crate::state::AppState,
) -> Result<std::sync::Arc<crate::state::Live>, Failure> {
    let st = st.clone();
    blocking(move || st.live()).await
}

/// A failure shown as a page.
pub struct PageError(pub Failure);
/// A failure answered as JSON.
pub struct ApiError(pub Failure);

impl<E: Into<Failure>> From<E> for PageError {
    fn from(e: E) -> PageError {
        PageError(e.into())
    }
}
impl<E: Into<Failure>> From<E> for ApiError {
    fn from(e: E) -> ApiError {
        ApiError(e.into())
    }
}
impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        self.0.page()
    }
}
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.0.json()
    }
}

/// `?snapshot=`
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SnapQ {
    pub snapshot: String,
}

/// `?snapshot=&account=`
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AccountQ {
    pub snapshot: String,
    pub account: String,
}

/// `?snapshot=&account=&folder=&page=&sort=&order=` (`sort`: `date`, the default,
/// `from`, `subject` or `size`; `order`: `asc` or `desc`, by default newest and largest
/// first, names A to Z).
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FolderQ {
    pub snapshot: String,
    pub account: String,
    pub folder: String,
    pub page: Option<usize>,
    #[serde(default)]
    pub sort: crate::read::SortBy,
    pub order: Option<Order>,
}

/// `?order=`
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    Asc,
    Desc,
}

impl FolderQ {
    /// Whether the page is sorted from the largest key down.
    pub fn descending(&self) -> bool {
        match self.order {
            Some(o) => o == Order::Desc,
            None => self.sort.descending_by_default(),
        }
    }
}

/// `?snapshot=&account=&folder=&name=`: a file of an account's home (`folder`: `~`,
/// `~/sieve`).
#[derive(Clone, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FileQ {
    pub snapshot: String,
    pub account: String,
    pub folder: String,
    pub name: String,
}

/// `?q=&page=&scope=` (scope: `latest`, the default, or `all`).
#[derive(Clone, Default, serde::Deserialize, utoipa::IntoParams, utoipa::ToSchema)]
#[into_params(parameter_in = Query)]
pub struct SearchQ {
    pub q: Option<String>,
    pub page: Option<usize>,
    pub scope: Option<String>,
}

/// Hits per page of a search.
pub const SEARCH_PAGE: usize = 50;
/// Queries longer than this are refused.
const MAX_QUERY: usize = 2000;

/// Runs search `q` on the searcher held open, on a blocking thread; a mail user's
/// session searches their own account only (whatever `account:` the query names).
pub async fn search(
    st: &crate::state::AppState,
    q: &SearchQ,
    ctx: &Ctx,
) -> Result<mailvault_core::search::exec::SearchResult, Failure> {
    let offset = q.page.unwrap_or(1).clamp(1, 10_000).saturating_sub(1) * SEARCH_PAGE;
    run_search(st, q, ctx, (offset, SEARCH_PAGE, true)).await
}

/// Every hit of search `q` (as [`search`]), when there are at most `max`; more is a
/// `400` (narrow the search).
pub async fn search_all(
    st: &crate::state::AppState,
    q: &SearchQ,
    ctx: &Ctx,
    max: usize,
) -> Result<mailvault_core::search::exec::SearchResult, Failure> {
    if q.q.as_deref().unwrap_or_default().trim().is_empty() {
        return Err(Failure::new(StatusCode::BAD_REQUEST, "no query"));
    }
    let r = run_search(st, q, ctx, (0, max + 1, false)).await?;
    if r.hits.len() > max {
        let text = format!("more than {max} messages found: narrow the search to download them");
        return Err(Failure::new(StatusCode::BAD_REQUEST, text));
    }
    Ok(r)
}

/// Search `q` from hit `offset`, `limit` hits at most.
async fn run_search(
    st: &crate::state::AppState,
    q: &SearchQ,
    ctx: &Ctx,
    (offset, limit, facets): (usize, usize, bool),
) -> Result<mailvault_core::search::exec::SearchResult, Failure> {
    use mailvault_core::search::exec::SearchOptions;
    use mailvault_core::search::places::Scope;
    let text = q.q.clone().unwrap_or_default();
    if text.len() > MAX_QUERY {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "the query is too long",
        ));
    }
    let query = mailvault_core::search::query::parse(&text, jiff::Timestamp::now())
        .map_err(|e| Failure::new(StatusCode::BAD_REQUEST, e.to_string()))?;
    let opts = SearchOptions {
        scope: match q.scope.as_deref() {
            Some("all") => Scope::All,
            _ => Scope::Latest,
        },
        // A mail user's accounts (the admin: every one).
        accounts: ctx
            .session
            .sees()
            .map(<[String]>::to_vec)
            .unwrap_or_default(),
        folders: Vec::new(),
        offset,
        limit,
        facets,
    };
    let _turn = (st.0.searches.acquire().await)
        .map_err(|_| Failure::new(StatusCode::SERVICE_UNAVAILABLE, "the server is stopping"))?;
    let st = st.clone();
    blocking(move || st.live()?.searcher().search(&query, &opts)).await
}

/// The repository's overview, for the admin (a mail user's session: `404`, as for a page
/// that does not exist), read on a blocking thread.
pub async fn overview(
    st: &crate::state::AppState,
    ctx: &Ctx,
) -> Result<crate::repository::Overview, Failure> {
    if ctx.session.user.is_some() {
        return Err(Failure::new(StatusCode::NOT_FOUND, "no such page"));
    }
    let st = st.clone();
    let now = jiff::Timestamp::now().as_second();
    blocking(move || crate::repository::overview(st.live()?.repo(), now, st.0.stale_after)).await
}

/// The snapshots that hold content `hash` (`read::holders`: for a mail user's session, in
/// their own account alone), on a blocking thread.
pub async fn holders(
    st: &crate::state::AppState,
    hash: mailvault_core::Id,
    ctx: &Ctx,
) -> Result<Vec<crate::read::Holder>, Failure> {
    let (live, sees) = (live(st).await?, ctx.session.sees().map(<[String]>::to_vec));
    blocking(move || {
        let places = live.searcher().places();
        crate::read::holders(live.repo(), places, &hash, sees.as_deref())
    })
    .await
}

/// The message at `place`, read on a blocking thread.
pub async fn found(
    st: &crate::state::AppState,
    place: crate::read::Place,
) -> Result<crate::read::Found, Failure> {
    let st = st.clone();
    blocking(move || crate::read::message(st.live()?.repo(), &st.0.folders, &place)).await
}

/// A page of a folder's messages (`read::messages`, with the server's folder cache and the
/// searcher's places map for the rows' "deleted since"), read on a blocking thread.
pub async fn folder_page(
    st: &crate::state::AppState,
    q: &FolderQ,
) -> Result<crate::read::Page, Failure> {
    let st = st.clone();
    let (id, account, folder) = (q.snapshot.clone(), q.account.clone(), q.folder.clone());
    let (page, sort) = (q.page.unwrap_or(1), (q.sort, q.descending()));
    blocking(move || {
        let live = st.live()?;
        let place = (&id[..], &account[..], &folder[..]);
        let pages = (page, st.0.page_size);
        let with = (&st.0.folders, Some(live.searcher().places()));
        crate::read::messages(live.repo(), with, place, sort, pages)
    })
    .await
}

/// Attachment `q.n` of a message, decoded, as a download: always
/// `application/octet-stream` (never shown by the browser, whatever the mail says it is),
/// named by its file name made safe (`read::safe_name`).
pub async fn attachment_download(
    st: &crate::state::AppState,
    q: &AttachmentQ,
) -> Result<Response, Failure> {
    let f = found(st, q.place()).await?;
    let n = q.n;
    let (a, data) = blocking(move || {
        mailvault_core::search::show::attachment(&f.raw, n)
            .ok_or_else(|| mailvault_core::Error::NotFound(format!("no attachment {n}")))
    })
    .await?;
    let name = crate::read::safe_name(a.name.as_deref().unwrap_or(""), "attachment");
    Ok(attachment(data, &name, "application/octet-stream"))
}

/// A message's bytes as they were stored, as an `.eml` download.
pub fn raw_download(f: crate::read::Found) -> Response {
    let name = crate::read::download_name(&String::from_utf8_lossy(&f.entry.key), "eml");
    attachment(f.raw, &name, "message/rfc822")
}

/// `data` as a download (`Content-Disposition: attachment`) named `name` (made safe by
/// `read::safe_name` or `read::download_name`), of type `mime`; `nosniff`, as every
/// answer, is added by `headers`.
pub fn attachment(data: Vec<u8>, name: &str, mime: &'static str) -> Response {
    use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
    let disposition = format!("attachment; filename=\"{name}\"");
    (
        [
            (CONTENT_TYPE, mime.to_string()),
            (CONTENT_DISPOSITION, disposition),
        ],
        data,
    )
        .into_response()
}

/// The home files a page shows at most of one file; more is left to the download.
pub const SHOWN_BYTES: u64 = 1 << 20;
/// A home file larger than this is not read for its page (the download reads any size).
pub const READ_FOR_PAGE: u64 = 64 << 20;

/// File `q` of an account's home, read on a blocking thread when it has at most `limit`
/// bytes; a name that is a path is refused (`400`) before anything is read.
pub async fn home_file(
    st: &crate::state::AppState,
    q: FileQ,
    limit: u64,
) -> Result<crate::home::Content, Failure> {
    if !crate::home::plain_name(&q.name) {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "a file's name, not a path, is wanted",
        ));
    }
    let st = st.clone();
    blocking(move || {
        let place = (&q.snapshot[..], &q.account[..], &q.folder[..]);
        crate::home::file(st.live()?.repo(), place, &q.name, limit)
    })
    .await
}

/// A home file's bytes as they were stored, as a download of plain text (never shown by
/// the browser as a page).
pub fn file_download(c: crate::home::Content) -> Response {
    let name = crate::read::safe_name(&c.file.info.name, "file");
    attachment(
        c.data.unwrap_or_default(),
        &name,
        "text/plain; charset=utf-8",
    )
}

/// Parameters that may name an account: every query type says which (or none), so that
/// [`Params`] refuses a mail user's request for another's account before any handler
/// runs; one without an account is filtered by its handler (snapshots, search).
pub trait Scoped {
    /// The account these parameters name, if any.
    fn account(&self) -> Option<&str>;
}

impl Scoped for SnapQ {
    fn account(&self) -> Option<&str> {
        None
    }
}
impl Scoped for SearchQ {
    fn account(&self) -> Option<&str> {
        None
    }
}
impl Scoped for AccountQ {
    fn account(&self) -> Option<&str> {
        Some(&self.account)
    }
}
impl Scoped for FolderQ {
    fn account(&self) -> Option<&str> {
        Some(&self.account)
    }
}
impl Scoped for FileQ {
    fn account(&self) -> Option<&str> {
        Some(&self.account)
    }
}
/// `?snapshot=&account=&folder=&key=&n=`: attachment `n` (from 0, in the order the
/// message's page lists them) of the message at that place.
#[derive(Clone, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AttachmentQ {
    pub snapshot: String,
    pub account: String,
    pub folder: String,
    pub key: String,
    pub n: usize,
}

impl AttachmentQ {
    pub fn place(&self) -> crate::read::Place {
        crate::read::Place {
            snapshot: self.snapshot.clone(),
            account: self.account.clone(),
            folder: self.folder.clone(),
            key: self.key.clone(),
        }
    }
}

impl Scoped for AttachmentQ {
    fn account(&self) -> Option<&str> {
        Some(&self.account)
    }
}

impl Scoped for crate::read::Place {
    fn account(&self) -> Option<&str> {
        Some(&self.account)
    }
}

/// A query string's parameters, as `axum::extract::Query` reads them, but refused with
/// this server's failures: `400` as a page, or as JSON under `/api/`; and `404` when they
/// name an account the session may not see (a mail user asking for another's: answered
/// as an account that does not exist, so that its existence is not told either).
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Scoped> axum::extract::FromRequestParts<S>
    for Params<T>
{
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        let api = parts.uri.path().starts_with("/api/");
        let answer = |f: Failure| match api {
            true => f.json(),
            false => f.page(),
        };
        let query = parts.uri.query().unwrap_or_default();
        let p: T = serde_urlencoded::from_str(query).map_err(|e| {
            answer(Failure::new(
                StatusCode::BAD_REQUEST,
                format!("bad parameters: {e}"),
            ))
        })?;
        let session = parts.extensions.get::<Ctx>().map(|c| &c.session);
        if let Some(account) = p.account() {
            if !session.is_some_and(|s| s.may_see(account)) {
                let text = format!("no account {account:?}");
                return Err(answer(Failure::new(StatusCode::NOT_FOUND, text)));
            }
        }
        Ok(Params(p))
    }
}
