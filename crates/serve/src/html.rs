//! The pages' markup. maud checks templates at compile time and escapes every value
//! spliced into them (text and attribute values alike) unless wrapped in `PreEscaped`,
//! which nothing here does with data from the repository: a subject, an address or a
//! folder name can never become markup. No page has a script; every link and form works
//! without one.

use axum::http::StatusCode;
use maud::{html, Markup, DOCTYPE};

/// The stylesheet, embedded in the binary.
pub const STYLE: &str = include_str!("style.css");

/// The pages' icon (an envelope), served beside the style sheet.
pub const ICON: &str = include_str!("icon.svg");

/// The pages' one script: progressive enhancement through the JSON API (a running job's
/// progress), nothing a page needs.
pub const SCRIPT: &str = include_str!("app.js");

/// A page: its title, the session's CSRF token (none on the login page) for the logout
/// form, and its content.
pub fn layout(title: &str, csrf: Option<&str>, body: Markup) -> Markup {
    layout_with(title, csrf, html! {}, body)
}

/// [`layout`] with more in the page's head (a running job's page refreshes itself).
pub fn layout_with(title: &str, csrf: Option<&str>, head: Markup, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · mailvault" }
                link rel="stylesheet" href="/static/style.css";
                link rel="icon" type="image/svg+xml" href="/static/icon.svg";
                script src="/static/app.js" defer {}
                (head)
            }
            body {
                header {
                    nav {
                        a href="/" { "Snapshots" }
                        " "
                        a href="/search" { "Search" }
                        " "
                        a href="/jobs" { "Restores" }
                        @if let Some(csrf) = csrf {
                            form.logout method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(csrf);
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main { h1 { (title) } (body) }
            }
        }
    }
}

/// The login form with its CSRF token (`auth::LoginKey`), and what went wrong if
/// anything.
pub fn login_page(problem: Option<&str>, users: bool, token: &str) -> Markup {
    layout(
        "Log in",
        None,
        html! {
            @if let Some(text) = problem { p.problem role="alert" { (text) } }
            form method="post" action="/login" {
                input type="hidden" name="login_csrf" value=(token);
                @if users {
                    // A mail user gives their address and mail password; the admin
                    // `admin` (or nothing) and the token.
                    label for="user" { "Mail address (or admin)" }
                    input id="user" type="text" name="user" autocomplete="username" required autofocus;
                    label for="token" { "Password (or admin token)" }
                    input id="token" type="password" name="token" autocomplete="current-password" required;
                } @else {
                    // The account the token belongs to, for password managers (and
                    // browsers, which warn about a password form without one).
                    input type="text" name="user" value="admin" autocomplete="username" hidden;
                    label for="token" { "Admin token" }
                    input id="token" type="password" name="token" autocomplete="current-password" required autofocus;
                }
                button type="submit" { "Log in" }
            }
        },
    )
}

/// A failure's page.
pub fn error_page(status: StatusCode, message: &str) -> Markup {
    let title = status.canonical_reason().unwrap_or("Error");
    layout(
        title,
        None,
        html! {
            p.problem { (message) }
            p { a href="/" { "Back to the snapshots" } }
        },
    )
}

pub use mailvault_core::report::{human_bytes as bytes, utc_time as time};

/// `path?k=v&...`, each value percent-encoded.
pub fn link(path: &str, params: &[(&str, &str)]) -> String {
    match serde_urlencoded::to_string(params) {
        Ok(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_string(),
    }
}

/// The first 12 digits of an id, as lists show it.
pub fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_in_text_and_attributes() {
        let evil = "\"><script>alert(1)</script>";
        let page = layout(
            evil,
            Some(evil),
            html! { a href=(link("/x", &[("a", evil)])) { (evil) } },
        );
        let s = page.into_string();
        assert!(!s.contains("<script>"), "{s}");
        assert!(s.contains("&lt;script&gt;"), "{s}");
        assert!(
            s.contains("/x?a=%22%3E%3Cscript%3Ealert%281%29%3C%2Fscript%3E"),
            "{s}"
        );
    }

    #[test]
    fn sizes_and_times() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(time(0), "1970-01-01 00:00:00");
    }
}
