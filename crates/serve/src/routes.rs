//! The router: which routes need a session (all but the login form and the stylesheet),
//! the session and CSRF check in front of them, login and logout, and how failures
//! answer (an HTML page or a JSON object).

use crate::auth;
use crate::reply::{Ctx, ErrorAnswer, Failure};
use crate::state::AppState;
use crate::{headers, html, pages, restore_pages};
use axum::body::Body;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Request, State};
use axum::http::header::{CONTENT_TYPE, COOKIE, LOCATION, RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{from_fn_with_state, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

/// Bodies larger than this are refused (forms and JSON here are small).
const BODY_LIMIT: usize = 64 * 1024;

pub fn router(state: AppState) -> Router {
    let protected = Router::new()
        .route("/", get(pages::snapshots))
        .route("/snapshot", get(pages::accounts))
        .route("/account", get(pages::folders))
        .route("/account/file", get(pages::home_file))
        .route("/account/file/raw", get(pages::home_file_raw))
        .route("/account/{format}", get(pages::account_download))
        .route("/folder", get(pages::messages))
        .route("/folder/{format}", get(pages::folder_download))
        .route("/message", get(pages::message))
        .route("/message/html", get(pages::message_html))
        .route("/message/raw", get(pages::message_raw))
        .route("/message/attachment", get(pages::message_attachment))
        .route("/search", get(pages::search))
        .route("/search/{format}", get(pages::search_download))
        .route("/repository", get(pages::repository))
        .route(
            "/restore",
            get(restore_pages::form).post(restore_pages::start_form),
        )
        .route("/jobs", get(restore_pages::jobs))
        .route("/audit", get(crate::audit::page))
        .route("/job", get(restore_pages::job))
        .route("/job/cancel", post(restore_pages::cancel_form))
        .route("/logout", post(logout))
        .merge(crate::openapi::session_routes())
        .fallback(not_found)
        .layer(from_fn_with_state(state.clone(), crate::audit::requests))
        .layer(from_fn_with_state(state.clone(), require_session));
    Router::new()
        .route("/login", get(login_page_get).post(login_form))
        .merge(crate::openapi::open_routes())
        .route("/static/style.css", get(pages::style))
        .route("/static/icon.svg", get(pages::icon))
        .route("/static/app.js", get(pages::script))
        .route("/metrics", get(metrics))
        .merge(protected)
        .layer(from_fn_with_state(state.clone(), crate::requests::count))
        .layer(from_fn_with_state(state.clone(), headers::security_headers))
        .layer(from_fn_with_state(state.clone(), forwarded))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// A request through a trusted reverse proxy (`--trusted-proxy`) is taken to come from
/// the client its `X-Forwarded-For` names: the address nearest to us there that is not a
/// trusted proxy itself (the ones further left are the client's to write, so never
/// believed). From anyone else the header is ignored.
async fn forwarded(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let trusted = &st.0.trusted_proxies;
    let peer = (req.extensions().get::<ConnectInfo<SocketAddr>>()).map(|c| c.0);
    if let Some(peer) = peer.filter(|p| trusted.contains(&p.ip())) {
        if let Some(ip) = client_of(req.headers(), trusted) {
            req.extensions_mut()
                .insert(ConnectInfo(SocketAddr::new(ip, peer.port())));
        }
    }
    next.run(req).await
}

/// The client `X-Forwarded-For` names behind the `trusted` proxies, if it names one.
fn client_of(h: &axum::http::HeaderMap, trusted: &[IpAddr]) -> Option<IpAddr> {
    let hops: Vec<&str> = (h.get_all("x-forwarded-for").iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    for hop in hops.iter().rev() {
        let ip: IpAddr = hop.parse().ok()?;
        if !trusted.contains(&ip) {
            return Some(ip);
        }
    }
    None
}

fn is_api(req: &Request) -> bool {
    req.uri().path().starts_with("/api/")
}

/// Lets a request through only with a live session, and a state-changing one only with
/// the session's CSRF token (the `X-CSRF-Token` header, or a form's `csrf` field).
async fn require_session(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let api = is_api(&req);
    let id = (req.headers().get_all(COOKIE).iter())
        .filter_map(|v| v.to_str().ok())
        .find_map(auth::session_id)
        .map(str::to_string);
    let session = id
        .as_deref()
        .and_then(|id| st.sessions().touch(id, Instant::now()));
    let (Some(id), Some(session)) = (id, session) else {
        return match api {
            true => Failure::new(StatusCode::UNAUTHORIZED, "log in first").json(),
            false => redirect(StatusCode::FOUND, "/login"),
        };
    };
    let (mut parts, body) = req.into_parts();
    let mut body = body;
    if !parts.method.is_safe() {
        let header = (parts.headers.get("x-csrf-token")).and_then(|v| v.to_str().ok());
        let ok = match header {
            Some(h) => session.csrf_ok(h),
            None if is_form(&parts.headers) => {
                let Ok(bytes) = axum::body::to_bytes(body, BODY_LIMIT).await else {
                    return Failure::new(StatusCode::PAYLOAD_TOO_LARGE, "too large").page();
                };
                let fields: Vec<(String, String)> =
                    serde_urlencoded::from_bytes(&bytes).unwrap_or_default();
                body = Body::from(bytes);
                (fields.iter()).any(|(k, v)| k == "csrf" && session.csrf_ok(v))
            }
            None => false,
        };
        if !ok {
            let f = Failure::new(StatusCode::FORBIDDEN, "missing or wrong CSRF token");
            return if api { f.json() } else { f.page() };
        }
    }
    parts.extensions.insert(Ctx { id, session });
    next.run(Request::from_parts(parts, body)).await
}

fn is_form(h: &axum::http::HeaderMap) -> bool {
    (h.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()))
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"))
}

pub fn redirect(status: StatusCode, to: &'static str) -> Response {
    (status, [(LOCATION, HeaderValue::from_static(to))]).into_response()
}

async fn not_found(req: Request) -> Response {
    let f = Failure::new(StatusCode::NOT_FOUND, "no such page");
    match is_api(&req) {
        true => f.json(),
        false => f.page(),
    }
}

/// What a login attempt came to.
enum Login {
    /// The new session's id and CSRF token.
    Ok(String, String),
    Wrong,
    Limited,
    /// The password could not be checked (the IMAP server is down): not counted.
    Unchecked,
}

/// A login: the admin's (its token, no user name, or the user name `admin` a password
/// manager fills in), or a mail user's (`--user-auth`: their name and mail password).
#[derive(serde::Deserialize, utoipa::ToSchema)]
pub struct LoginForm {
    #[serde(default)]
    user: Option<String>,
    /// The admin token, or the mail user's password.
    #[serde(default, alias = "password")]
    token: String,
}

impl LoginForm {
    /// The mail user this login is for; `None`: the admin.
    fn mail_user(&self) -> Option<&str> {
        self.user
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty() && *u != "admin")
    }
}

/// A login, recorded in the audit log (the name given when it failed, if it is an
/// address: `audit::given_name`).
async fn try_login(st: &AppState, ip: IpAddr, f: LoginForm) -> Login {
    let user = f.mail_user().map(str::to_string);
    let mut name = crate::audit::given_name(user.as_deref());
    let how = login(st, ip, f).await;
    let (action, status) = match &how {
        Login::Ok(..) => {
            name = crate::audit::who(user.as_deref()).to_string();
            ("login", 200)
        }
        Login::Wrong => ("login failed", 401),
        Login::Limited => ("login refused", 429),
        Login::Unchecked => ("login unchecked", 503),
    };
    st.0.audit
        .record(&name, &ip.to_string(), action, "web UI", status);
    how
}

async fn login(st: &AppState, ip: IpAddr, f: LoginForm) -> Login {
    let now = Instant::now();
    let Some(user) = f.mail_user().map(str::to_string) else {
        return admin_login(st, ip, &f.token, now);
    };
    {
        // Counted before the check, taken back if it works (`LoginLimiter::refund`).
        let mut limiter = st.limiter();
        if !limiter.allowed(ip, now) {
            return Login::Limited;
        }
        limiter.failed(ip, now);
    }
    let Some(auth) = st.0.users.clone() else {
        return Login::Wrong;
    };
    let password = zeroize::Zeroizing::new(f.token);
    let (name, also) = (user.clone(), st.0.user_accounts.clone());
    let checked = tokio::task::spawn_blocking(move || {
        let ok = auth.check(&name, password.as_bytes())?;
        match (ok, also) {
            (true, Some(path)) => crate::users::accounts_of(&path, &name).map(|a| (true, a)),
            (ok, _) => Ok((ok, Vec::new())),
        }
    })
    .await;
    match checked {
        Ok(Ok((true, also))) => {
            st.limiter().refund(ip);
            let (id, s) = st.sessions().create(Instant::now(), Some(user), also);
            tracing::info!("mail user login from {ip}");
            Login::Ok(id, s.csrf)
        }
        Ok(Ok((false, _))) => {
            tracing::warn!("failed mail user login from {ip}");
            Login::Wrong
        }
        Ok(Err(e)) => {
            st.limiter().refund(ip);
            tracing::error!("a mail user's password could not be checked: {e}");
            Login::Unchecked
        }
        Err(_) => Login::Unchecked,
    }
}

fn admin_login(st: &AppState, ip: IpAddr, token: &str, now: Instant) -> Login {
    // One guard for the check and the count: concurrent attempts cannot slip past the
    // limit between them.
    let mut limiter = st.limiter();
    if !limiter.allowed(ip, now) {
        return Login::Limited;
    }
    if !st.0.token.matches(token.as_bytes()) {
        limiter.failed(ip, now);
        drop(limiter);
        tracing::warn!("failed admin login from {ip}");
        return Login::Wrong;
    }
    limiter.succeeded(ip);
    drop(limiter);
    let (id, s) = st.sessions().create(now, None, Vec::new());
    tracing::info!("admin login from {ip}");
    Login::Ok(id, s.csrf)
}

fn unchecked() -> Failure {
    Failure::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "the password cannot be checked now: try again later",
    )
}

fn limited() -> Failure {
    Failure::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too many failed logins from this address: wait a minute",
    )
}

fn with_retry_after(mut r: Response) -> Response {
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("60"));
    r
}

fn session_cookie(st: &AppState, id: &str) -> HeaderValue {
    HeaderValue::from_str(&auth::set_cookie(id, st.0.secure))
        .unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The login form (`status`, with what went wrong if anything), with a new token in the
/// form and in its cookie (`auth::LoginKey`).
fn login_page(st: &AppState, status: StatusCode, problem: Option<&str>) -> Response {
    let token = st.0.login_key.token();
    let page = html::login_page(problem, st.0.users.is_some(), &token);
    let mut r = (status, page).into_response();
    if let Ok(v) = HeaderValue::from_str(&auth::login_cookie(&token, st.0.secure)) {
        r.headers_mut().insert(SET_COOKIE, v);
    }
    r
}

async fn login_page_get(State(st): State<AppState>) -> Response {
    login_page(&st, StatusCode::OK, None)
}

/// The login form's fields: the login, and the form's token.
#[derive(serde::Deserialize)]
struct LoginFields {
    #[serde(flatten)]
    login: LoginForm,
    #[serde(default)]
    login_csrf: String,
}

async fn login_form(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: axum::http::HeaderMap,
    axum::Form(f): axum::Form<LoginFields>,
) -> Response {
    let cookie = (headers.get_all(COOKIE).iter())
        .filter_map(|v| v.to_str().ok())
        .find_map(|h| auth::cookie(h, auth::LOGIN_COOKIE));
    if !st.0.login_key.valid(&f.login_csrf, cookie) {
        // Not counted as a failed login: no password was tried.
        let problem = "the login form had expired or came from elsewhere: log in again";
        return login_page(&st, StatusCode::FORBIDDEN, Some(problem));
    }
    match try_login(&st, peer.ip(), f.login).await {
        Login::Ok(id, _) => {
            let mut r = redirect(StatusCode::SEE_OTHER, "/");
            r.headers_mut().insert(SET_COOKIE, session_cookie(&st, &id));
            r
        }
        Login::Wrong => login_page(
            &st,
            StatusCode::UNAUTHORIZED,
            Some("wrong user name, password or token"),
        ),
        Login::Limited => with_retry_after(limited().page()),
        Login::Unchecked => unchecked().page(),
    }
}

/// A session: its cookie (`Set-Cookie`), and its CSRF token.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct LoginAnswer {
    /// What POSTs give in `X-CSRF-Token`.
    pub csrf_token: String,
}

/// Logs in: the admin with its token, a mail user with their mail password
/// (`--user-auth`). Failures count against the client's address (`429` after 5 a minute).
#[utoipa::path(post, path = "/api/v1/login", tag = "session", request_body = LoginForm,
    security(()),
    responses(
        (status = 200, body = LoginAnswer,
            headers(("set-cookie" = String, description = "The session cookie (HttpOnly, SameSite=Strict)"))),
        (status = 401, body = ErrorAnswer), (status = 429, body = ErrorAnswer)))]
pub async fn login_api(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    axum::Json(f): axum::Json<LoginForm>,
) -> Response {
    match try_login(&st, peer.ip(), f).await {
        Login::Ok(id, csrf) => {
            let mut r = axum::Json(LoginAnswer { csrf_token: csrf }).into_response();
            r.headers_mut().insert(SET_COOKIE, session_cookie(&st, &id));
            r
        }
        Login::Wrong => Failure::new(
            StatusCode::UNAUTHORIZED,
            "wrong user name, password or token",
        )
        .json(),
        Login::Limited => with_retry_after(limited().json()),
        Login::Unchecked => unchecked().json(),
    }
}

/// `GET /metrics` (Prometheus' text format), for a scraper holding the admin token as a
/// bearer token (`authorization: credentials_file` in Prometheus): no session. Failures
/// count in the login limit.
async fn metrics(
    State(st): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
) -> Response {
    let given = (req.headers().get(axum::http::header::AUTHORIZATION))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let now = Instant::now();
    {
        let mut limiter = st.limiter();
        if !limiter.allowed(peer.ip(), now) {
            return with_retry_after(limited().json());
        }
        if !st.0.token.matches(given.as_bytes()) {
            limiter.failed(peer.ip(), now);
            return Failure::new(
                StatusCode::UNAUTHORIZED,
                "give the admin token as a bearer token",
            )
            .json();
        }
    }
    let sessions = st.sessions().len();
    let jobs = st.0.jobs.by_state();
    let st2 = st.clone();
    let o = crate::reply::blocking(move || {
        let live = st2.live()?;
        let now = jiff::Timestamp::now().as_second();
        let o = crate::repository::overview(live.repo(), now, st2.0.stale_after)?;
        Ok((o, crate::repository::stored(live.repo())))
    })
    .await;
    match o {
        Ok((o, stored)) => (
            [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
            crate::repository::metrics(&o, stored, sessions, &jobs)
                + &st.0.imap.headers.metrics()
                + &st.0.requests.metrics(),
        )
            .into_response(),
        Err(f) => f.json(),
    }
}

/// Ends the session (the page `/logout` too, which then goes to the login form).
#[utoipa::path(post, path = "/api/v1/logout", tag = "session",
    security(("session" = [], "csrf" = [])),
    responses((status = 204, description = "Logged out"), (status = 401, body = ErrorAnswer)))]
pub async fn logout(
    State(st): State<AppState>,
    axum::Extension(ctx): axum::Extension<Ctx>,
    req: Request,
) -> Response {
    st.sessions().remove(&ctx.id);
    let mut r = match is_api(&req) {
        true => StatusCode::NO_CONTENT.into_response(),
        false => redirect(StatusCode::SEE_OTHER, "/login"),
    };
    if let Ok(v) = HeaderValue::from_str(&auth::clear_cookie()) {
        r.headers_mut().insert(SET_COOKIE, v);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> axum::http::HeaderMap {
        let mut h = axum::http::HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", v.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_client_is_the_nearest_address_that_is_not_a_trusted_proxy() {
        let proxy: IpAddr = "10.0.0.1".parse().unwrap();
        let trusted = [proxy];
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        // What the client wrote itself (the left part) is never believed.
        let h = headers(&["1.2.3.4, 203.0.113.7"]);
        assert_eq!(client_of(&h, &trusted), ip("203.0.113.7"));
        let h = headers(&["1.2.3.4", "203.0.113.7, 10.0.0.1"]);
        assert_eq!(client_of(&h, &trusted), ip("203.0.113.7"));
        assert_eq!(client_of(&headers(&["10.0.0.1"]), &trusted), None);
        assert_eq!(client_of(&headers(&["not-an-ip"]), &trusted), None);
        assert_eq!(client_of(&headers(&[]), &trusted), None);
        assert_eq!(
            client_of(&headers(&["2001:db8::1"]), &trusted),
            ip("2001:db8::1")
        );
    }
}
