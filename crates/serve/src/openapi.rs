//! The JSON API's routes and its OpenAPI document (`GET /api/v1/openapi.json`,
//! docs/openapi.json), made from one list: each handler's `#[utoipa::path]` names its
//! method, path, parameters and answers, and utoipa-axum's `routes!` registers the
//! handler on the router from that same attribute. A route cannot be served without
//! being described, nor described at another path or method than it is served at.

use crate::state::AppState;
use crate::{api, audit, restore_pages, routes};
use axum::response::IntoResponse;
use axum::Router;
use std::sync::LazyLock;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, SecurityRequirement, SecurityScheme};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "mailvault",
        description = "Browse, search, download and restore the backups of one mailvault \
            repository (docs/api.md). Every route but login and this document needs a \
            session's cookie; every POST also its CSRF token. Times are Unix seconds; \
            sizes are bytes.",
        license(name = "see the repository"),
    ),
    // The schemas only parameters name (utoipa-axum gathers those of bodies and answers).
    components(schemas(crate::read::SortBy, crate::reply::Order)),
    modifiers(&Sessions),
    tags(
        (name = "session", description = "Log in and out"),
        (name = "browse", description = "Snapshots, accounts, folders, a folder's messages"),
        (name = "messages", description = "One message"),
        (name = "search", description = "The query language of `mailvault search`"),
        (name = "downloads", description = "Messages, folders, search results, files"),
        (name = "restore", description = "Restore jobs"),
        (name = "admin", description = "The repository's overview and the audit log"),
    )
)]
struct Doc;

/// The session cookie every route needs (unless it says otherwise), and the CSRF token
/// POSTs add.
struct Sessions;

impl utoipa::Modify for Sessions {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                crate::auth::COOKIE,
                "Set by a login",
            ))),
        );
        components.add_security_scheme(
            "csrf",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "X-CSRF-Token",
                "The session's token (the login's answer, or GET /api/v1/session)",
            ))),
        );
        doc.security = Some(vec![SecurityRequirement::new(
            "session",
            Vec::<String>::new(),
        )]);
    }
}

/// The routes without a session.
fn open() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(routes::login_api))
        .routes(routes!(openapi_json))
}

/// The routes that need a session (`routes::require_session` in front of them).
fn with_session() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(api::session))
        .routes(routes!(routes::logout))
        .routes(routes!(api::snapshots))
        .routes(routes!(api::accounts))
        .routes(routes!(api::folders))
        .routes(routes!(api::filters))
        .routes(routes!(api::messages))
        .routes(routes!(api::message))
        .routes(routes!(api::message_raw))
        .routes(routes!(api::message_attachment))
        .routes(routes!(api::search_get, api::search_post))
        .routes(routes!(api::folder_download))
        .routes(routes!(api::account_download))
        .routes(routes!(api::search_download))
        .routes(routes!(api::file_raw))
        .routes(routes!(restore_pages::start_api))
        .routes(routes!(restore_pages::jobs_api))
        .routes(routes!(restore_pages::job_api))
        .routes(routes!(restore_pages::cancel_api))
        .routes(routes!(api::repository))
        .routes(routes!(audit::api))
}

pub fn open_routes() -> Router<AppState> {
    open().split_for_parts().0
}

pub fn session_routes() -> Router<AppState> {
    with_session().split_for_parts().0
}

/// The OpenAPI document of every route of both lists.
pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = Doc::openapi();
    doc.merge(open().into_openapi());
    doc.merge(with_session().into_openapi());
    doc
}

/// The document as JSON, made once.
pub fn document_json() -> &'static str {
    static JSON: LazyLock<String> = LazyLock::new(|| {
        let mut text = document().to_pretty_json().expect("the document is JSON");
        text.push('\n');
        text
    });
    &JSON
}

/// This API's OpenAPI 3.1 document (no session needed).
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "session", security(()),
    responses((status = 200, description = "The OpenAPI document", content_type = "application/json")))]
pub async fn openapi_json() -> impl IntoResponse {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        document_json(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/openapi.json is the document the code makes (`MAILVAULT_WRITE_OPENAPI=1 cargo
    /// test -p mailvault-serve openapi` writes it again after a change of the API).
    #[test]
    fn the_committed_document_is_the_generated_one() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/openapi.json");
        if std::env::var_os("MAILVAULT_WRITE_OPENAPI").is_some() {
            std::fs::write(path, document_json()).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == document_json(),
            "docs/openapi.json is not what the code describes: run \
             MAILVAULT_WRITE_OPENAPI=1 cargo test -p mailvault-serve openapi"
        );
    }

    /// Another reader (oas3) takes the document as OpenAPI 3.1, and finds every route with
    /// its method, every reference resolved, and the session's security where it belongs.
    #[test]
    fn another_reader_takes_the_document() {
        let spec = oas3::from_json(document_json()).unwrap();
        let paths = spec.paths.as_ref().unwrap();
        let ops: Vec<(String, String)> = (spec.operations())
            .map(|(path, method, _)| (method.to_string(), path))
            .collect();
        assert!(
            ops.contains(&("POST".into(), "/api/v1/login".into())),
            "{ops:?}"
        );
        assert!(ops.contains(&("GET".into(), "/api/v1/search".into())));
        assert!(ops.contains(&("POST".into(), "/api/v1/search".into())));
        assert!(ops.contains(&("POST".into(), "/api/v1/restore".into())));
        assert!(ops.contains(&("GET".into(), "/api/v1/account/{format}".into())));
        assert_eq!(ops.len(), 24, "{ops:?}");
        assert_eq!(paths.len(), 23);
        for (path, method, op) in spec.operations() {
            assert!(path.starts_with("/api/v1/"), "{path}");
            let open = path == "/api/v1/login" || path == "/api/v1/openapi.json";
            // `[{}]`: no security; none given: the document's, the session.
            let none = !op.security.is_empty() && op.security.iter().all(|r| r.0.is_empty());
            assert_eq!(open, none, "{method} {path}");
            if method.as_str() == "POST" && !open {
                let needs: Vec<&String> = op.security.iter().flat_map(|r| r.0.keys()).collect();
                assert!(
                    needs.contains(&&"csrf".to_string()),
                    "{method} {path}: {needs:?}"
                );
            }
            for p in &op.parameters {
                let p = p.resolve(&spec).unwrap();
                if let Some(schema) = &p.schema {
                    schema
                        .resolve(&spec)
                        .unwrap_or_else(|e| panic!("{path} {}: {e}", p.name));
                }
            }
            if let Some(body) = &op.request_body {
                for media in body.resolve(&spec).unwrap().content.values() {
                    let schema = media.schema.as_ref().unwrap();
                    schema
                        .resolve(&spec)
                        .unwrap_or_else(|e| panic!("{path} body: {e}"));
                }
            }
            for (status, r) in op.responses.iter().flatten() {
                r.resolve(&spec)
                    .unwrap_or_else(|e| panic!("{path} {status}: {e}"));
                let r = r.resolve(&spec).unwrap();
                for media in r.content.values() {
                    if let Some(schema) = &media.schema {
                        schema
                            .resolve(&spec)
                            .unwrap_or_else(|e| panic!("{path} {status}: {e}"));
                    }
                }
            }
        }
        let schemes = spec
            .components
            .as_ref()
            .unwrap()
            .security_schemes
            .keys()
            .cloned();
        assert_eq!(schemes.collect::<Vec<_>>(), ["csrf", "session"]);
    }
}
