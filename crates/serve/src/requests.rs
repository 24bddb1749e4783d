//! HTTP requests counted by route, method and status, for `/metrics`
//! (`mailvault_serve_http_requests_total`). The route is the router's pattern
//! (`/api/v1/folder/{format}`), never the path asked for, so the counters are as many as
//! the routes whatever clients send; a request no route matched counts as `unmatched`.

use crate::state::{lock, AppState};
use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// The counters: (method, route, status) → requests.
#[derive(Default)]
pub struct Requests(Mutex<BTreeMap<(&'static str, String, u16), u64>>);

impl Requests {
    fn count(&self, method: &'static str, route: String, status: u16) {
        *lock(&self.0).entry((method, route, status)).or_default() += 1;
    }

    /// The counters in Prometheus' text format.
    pub fn metrics(&self) -> String {
        use std::fmt::Write as _;
        let name = "mailvault_serve_http_requests_total";
        let mut out = format!(
            "# HELP {name} HTTP requests answered, by method, route and status.\n# TYPE {name} counter\n"
        );
        for ((method, route, status), n) in lock(&self.0).iter() {
            let route = mailvault_core::report::prometheus_label(route);
            let _ = writeln!(
                out,
                "{name}{{method=\"{method}\",route=\"{route}\",status=\"{status}\"}} {n}"
            );
        }
        out
    }
}

/// Counts each request once it is answered (a middleware on every route).
pub async fn count(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let method = match req.method().as_str() {
        "GET" => "GET",
        "POST" => "POST",
        "HEAD" => "HEAD",
        _ => "other",
    };
    let route = (req.extensions().get::<MatchedPath>())
        .map_or_else(|| "unmatched".to_string(), |m| m.as_str().to_string());
    let r = next.run(req).await;
    st.0.requests.count(method, route, r.status().as_u16());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_counters_come_out_by_method_route_and_status() {
        let r = Requests::default();
        r.count("GET", "/api/v1/folder/{format}".into(), 200);
        r.count("GET", "/api/v1/folder/{format}".into(), 200);
        r.count("POST", "unmatched".into(), 404);
        let text = r.metrics();
        assert!(text.contains(
            "mailvault_serve_http_requests_total{method=\"GET\",route=\"/api/v1/folder/{format}\",status=\"200\"} 2\n"
        ), "{text}");
        assert!(text.contains("{method=\"POST\",route=\"unmatched\",status=\"404\"} 1\n"));
    }
}
