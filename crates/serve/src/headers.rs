//! The security headers every answer carries: a strict Content-Security-Policy (the
//! sanitized mail frame has its own, stricter still, and a `sandbox`), `nosniff`, no
//! referrer, no framing by other sites, no caching (pages hold private mail), and over
//! TLS, Strict-Transport-Security.

use crate::state::AppState;
use axum::extract::{Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, REFERRER_POLICY, STRICT_TRANSPORT_SECURITY,
    X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;

/// The pages' policy: nothing but this origin's stylesheet, images and script (the one
/// file, `app.js`: no inline script, no `eval`), requests of the API only here, forms
/// posting only here, frames only of this origin (the mail frame), never framed.
pub const CSP: &str = "default-src 'none'; style-src 'self'; img-src 'self'; \
    script-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
    base-uri 'none'; frame-src 'self'";

/// The mail frame's policy: no script, no fetch, no form, only inline styles and `data:`
/// images; framed only by this origin's pages; sandboxed even when opened on its own.
pub const FRAME_CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
    frame-ancestors 'self'; base-uri 'none'; form-action 'none'; sandbox";

/// Adds the headers to every response (a handler that set its own CSP keeps it).
pub async fn security_headers(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    if st.0.secure {
        // A year; browsers then refuse plain HTTP to this host and name.
        h.insert(
            STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    let framed = h.contains_key(CONTENT_SECURITY_POLICY);
    if !framed {
        h.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    }
    let frame = match framed {
        true => "SAMEORIGIN",
        false => "DENY",
    };
    h.insert(X_FRAME_OPTIONS, HeaderValue::from_static(frame));
    h.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if !h.contains_key(CACHE_CONTROL) {
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    res
}
