//! The HTML pages: the snapshots, a snapshot's accounts, an account's folders (and whom
//! they are shared with) and its home's files (sieve filters, each shown as text and
//! downloaded), a folder's messages a page at a time, a message (its HTML part in a
//! sandboxed frame of its own route), its download, and search.

use crate::html::{bytes, layout, link, short, time};
use crate::read::{self, Place, SortBy};
use crate::reply::{
    self, blocking, AccountQ, Ctx, Failure, FileQ, FolderQ, PageError, Params, SearchQ, SnapQ,
};
use crate::restore_pages::restore_link;
use crate::state::AppState;
use axum::extract::State;
use axum::http::header::{CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use maud::{html, Markup};

type Page = Result<Markup, PageError>;

pub async fn style() -> Response {
    (
        [(CONTENT_TYPE, "text/css; charset=utf-8")],
        crate::html::STYLE,
    )
        .into_response()
}

pub async fn script() -> Response {
    (
        [(CONTENT_TYPE, "text/javascript; charset=utf-8")],
        crate::html::SCRIPT,
    )
        .into_response()
}

pub async fn icon() -> Response {
    ([(CONTENT_TYPE, "image/svg+xml")], crate::html::ICON).into_response()
}

pub async fn snapshots(State(st): State<AppState>, Extension(ctx): Extension<Ctx>) -> Page {
    let live = reply::live(&st).await?;
    let sees = ctx.session.sees().map(<[String]>::to_vec);
    let list = blocking(move || read::snapshots(live.repo(), sees.as_deref(), &st.0.held)).await?;
    let admin = ctx.session.user.is_none();
    let body = html! {
        @if admin { p { a href="/repository" { "Repository: the last backup of each source, and charts" }
            " · " a href="/audit" { "Audit log" } } }
        @if list.is_empty() { p { "No snapshots yet." } }
        // A timeline: a month per fold, the newest open (no script: `details`).
        @for (i, (month, group)) in by_month(&list).into_iter().enumerate() {
            details.month open[i == 0] {
                summary { strong { (month) } " · " (group.len()) " snapshot(s)" }
                table {
                    thead { tr {
                        th { "Time (UTC)" } th { "Host" } th.wide { "Source" }
                        th.num { "Accounts" } th.num { "Messages" } th.num.wide { "Size" }
                    } }
                    tbody { @for s in group { tr {
                        td { a href=(link("/snapshot", &[("snapshot", &s.id)])) { (time(s.time)) } }
                        td { (s.hostname) }
                        td.wide { (s.source) @for t in &s.tags { " " span.muted { "[" (t) "]" } } }
                        td.num { (s.accounts) } td.num { (s.messages) } td.num.wide { (bytes(s.bytes)) }
                    } } }
                }
            }
        }
    };
    Ok(layout("Snapshots", Some(&ctx.session.csrf), body))
}

/// The snapshots (newest first) by the month of their time in UTC (`2024-03`), newest
/// month first.
fn by_month(list: &[read::SnapRow]) -> Vec<(String, Vec<&read::SnapRow>)> {
    let mut out: Vec<(String, Vec<&read::SnapRow>)> = Vec::new();
    for s in list {
        let month: String = time(s.time).chars().take(7).collect();
        match out.last_mut() {
            Some((m, group)) if *m == month => group.push(s),
            _ => out.push((month, vec![s])),
        }
    }
    out
}

pub async fn accounts(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(q): Params<SnapQ>,
) -> Page {
    let live = reply::live(&st).await?;
    let (id, sees) = (
        q.snapshot.clone(),
        ctx.session.sees().map(<[String]>::to_vec),
    );
    let (snap, list) = blocking(move || {
        Ok((
            read::snapshot(live.repo(), &id, sees.as_deref(), &st.0.held)?,
            read::accounts(live.repo(), &id, sees.as_deref())?,
        ))
    })
    .await?;
    let body = html! {
        p.crumbs { a href="/" { "Snapshots" } " / " (short(&snap.id)) " · " (time(snap.time))
            " · " (snap.hostname) " · " (snap.source) " · " (restore_link(&[("snapshot", &snap.id)])) }
        table {
            thead { tr { th { "Account" } th.num { "Messages" } th.num { "Size" } } }
            tbody { @for a in &list { tr {
                td { a href=(link("/account", &[("snapshot", &snap.id), ("account", &a.name)])) { (a.name) } }
                td.num { (a.messages) } td.num { (bytes(a.bytes)) }
            } } }
        }
    };
    let title = format!("Snapshot {}", short(&snap.id));
    Ok(layout(&title, Some(&ctx.session.csrf), body))
}

pub async fn folders(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(q): Params<AccountQ>,
) -> Page {
    let live = reply::live(&st).await?;
    let (id, account) = (q.snapshot.clone(), q.account.clone());
    let sees = ctx.session.sees().map(<[String]>::to_vec);
    let (snap, view) = blocking(move || {
        Ok((
            read::snapshot(live.repo(), &id, sees.as_deref(), &st.0.held)?,
            crate::home::account(live.repo(), &id, &account)?,
        ))
    })
    .await?;
    let body = html! {
        p.crumbs { a href="/" { "Snapshots" } " / "
            a href=(link("/snapshot", &[("snapshot", &snap.id)])) { (short(&snap.id)) } " / " (q.account)
            " · " (restore_link(&[("snapshot", &snap.id), ("account", &q.account)])) }
        p { "Download the account: "
            a href=(link("/account/zip", &[("snapshot", &snap.id), ("account", &q.account)])) download { "zip of EML" }
            " · " a href=(link("/account/mbox.zip", &[("snapshot", &snap.id), ("account", &q.account)])) download { "zip of mbox" } }
        table {
            thead { tr { th { "Folder" } th.num { "Messages" } th.num { "Size" } th { "Shared with" } } }
            tbody { @for (depth, label, at) in tree(view.folders.iter().map(|f| f.name.as_str())) {
                @let class = format!("d{}", depth.min(8));
                @match at.map(|i| &view.folders[i]) {
                    Some(f) => { tr {
                        td class=(class) { a href=(link("/folder", &[("snapshot", &snap.id), ("account", &q.account), ("folder", &f.name)])) title=(f.name) { (label) } }
                        td.num { (f.messages) } td.num { (bytes(f.bytes)) }
                        td.acl { @for (i, r) in f.acl.iter().enumerate() {
                            @if i > 0 { ", " } span.rule { (r.identifier) ": " (r.rights) }
                        } }
                    } }
                    None => { tr { td class=(class) { span.muted { (label) } } td {} td {} td {} } }
                }
            } }
        }
        (filters(&snap.id, &q.account, view.home.as_deref().unwrap_or_default()))
    };
    Ok(layout(&q.account, Some(&ctx.session.csrf), body))
}

/// A search's facets as links, each narrowing the query by one more term.
fn facets(f: &mailvault_core::search::facets::Facets, text: &str, all: bool) -> Markup {
    let scope = if all { "all" } else { "latest" };
    let narrow = |term: &str| {
        link(
            "/search",
            &[("q", &format!("{text} {term}")), ("scope", scope)],
        )
    };
    // A value with a double quote cannot be put in a quoted term: not offered.
    let quoted = |field: &str, v: &str| (!v.contains('"')).then(|| format!("{field}:\"{v}\""));
    html! {
        dl.facets {
            dt { "Accounts" } dd { @for (a, n) in &f.accounts { @if let Some(t) = quoted("account", a) {
                a href=(narrow(&t)) { (a) } " (" (n) ") " } } }
            dt { "Folders" } dd { @for (d, n) in &f.folders { @if let Some(t) = quoted("folder", d) {
                a href=(narrow(&t)) { (d) } " (" (n) ") " } } }
            dt { "Years" } dd { @for (y, n) in &f.years {
                a href=(narrow(&format!("on:{y}"))) { (y) } " (" (n) ") " } }
            @if f.with_attachment > 0 {
                dt { "Attachments" } dd { a href=(narrow("has:attachment")) { "with an attachment" } " (" (f.with_attachment) ")" }
            }
        }
    }
}

/// Folder names (`/` between levels) as a tree: each row's depth, its last level's name,
/// and the index of the folder it is, or `None` for a level that is no folder itself
/// (`Archive` of `Archive/2023` alone). INBOX first, then level by level, so a folder's
/// subfolders come right below it.
fn tree<'a>(names: impl Iterator<Item = &'a str>) -> Vec<(usize, String, Option<usize>)> {
    let mut named: Vec<(Vec<&str>, usize)> = names
        .enumerate()
        .map(|(i, n)| (n.split('/').collect(), i))
        .collect();
    // INBOX first, as mail clients show it; the rest by name, level by level.
    named.sort_by(|(a, i), (b, j)| (a[0] != "INBOX", a, i).cmp(&(b[0] != "INBOX", b, j)));
    let mut out = Vec::new();
    let mut open: Vec<&str> = Vec::new();
    for (levels, i) in named {
        let shared = open.iter().zip(&levels).take_while(|(a, b)| a == b).count();
        open.truncate(shared);
        for (d, level) in levels.iter().enumerate().skip(shared) {
            let is_it = d + 1 == levels.len();
            out.push((d, level.to_string(), is_it.then_some(i)));
            open.push(level);
        }
        if open.len() == levels.len() && shared == levels.len() {
            // The same name twice: shown again.
            out.push((
                levels.len() - 1,
                levels[levels.len() - 1].to_string(),
                Some(i),
            ));
        }
    }
    out
}

/// The account page's "Filters": its home's files (sieve scripts, the link to the active
/// one), each script opening as text.
fn filters(snapshot: &str, account: &str, files: &[crate::home::HomeFile]) -> Markup {
    let at = |path: &str, f: &crate::home::HomeFile| {
        let params = [
            ("snapshot", snapshot),
            ("account", account),
            ("folder", &f.info.folder),
            ("name", &f.info.name),
        ];
        link(path, &params)
    };
    html! {
        h2 { "Filters" }
        @if files.is_empty() { p.muted { "No filters in this backup." } } @else {
            p.muted { "The account's home as the backup kept it: sieve scripts, the link to the active one." }
            table.files {
                thead { tr { th { "File" } th.num { "Size" } th.wide { "Modified (UTC)" } th { "State" } } }
                tbody { @for f in files { tr {
                    @match &f.info.link {
                        Some(t) => { td { code { (f.path) " → " (t) } } }
                        None => { td { a href=(at("/account/file", f)) { code { (f.path) } } } }
                    }
                    td.num { (bytes(f.info.size)) } td.wide { (time(f.info.mtime)) }
                    td { @if f.active { strong.active { "active" } } }
                } } }
            }
        }
    }
}

/// A file of an account's home, as text.
pub async fn home_file(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(q): Params<FileQ>,
) -> Page {
    let c = reply::home_file(&st, q.clone(), reply::READ_FOR_PAGE).await?;
    let params = [
        ("snapshot", &q.snapshot[..]),
        ("account", &q.account),
        ("folder", &q.folder),
        ("name", &q.name),
    ];
    let shown = (c.data.as_deref()).map(|d| &d[..d.len().min(reply::SHOWN_BYTES as usize)]);
    let body = html! {
        p.crumbs { a href="/" { "Snapshots" } " / "
            a href=(link("/snapshot", &[("snapshot", &q.snapshot)])) { (short(&q.snapshot)) } " / "
            a href=(link("/account", &[("snapshot", &q.snapshot), ("account", &q.account)])) { (q.account) }
            " / " (c.file.path) }
        p { (bytes(c.file.info.size)) " · modified " (time(c.file.info.mtime)) " UTC · "
            a href=(link("/account/file/raw", &params)) download { "Download" } }
        @match shown {
            None => { p.muted { "Too large to show here: download it." } }
            Some(d) => {
                @if (d.len() as u64) < c.file.info.size {
                    p.muted { "The first " (bytes(d.len() as u64)) " of " (bytes(c.file.info.size)) "; download it for the rest." }
                }
                pre.text { (String::from_utf8_lossy(d)) }
            }
        }
    };
    Ok(layout(&c.file.path, Some(&ctx.session.csrf), body))
}

/// A file of an account's home as stored, as a download.
pub async fn home_file_raw(State(st): State<AppState>, Params(q): Params<FileQ>) -> Response {
    match reply::home_file(&st, q, u64::MAX).await {
        Ok(c) => reply::file_download(c),
        Err(e) => e.page(),
    }
}

pub async fn messages(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(q): Params<FolderQ>,
) -> Page {
    let p = reply::folder_page(&st, &q).await?;
    let (sort, desc) = (q.sort, q.descending());
    let order = |d: bool| if d { "desc" } else { "asc" };
    let sort_name = |s: SortBy| match s {
        SortBy::Date => "date",
        SortBy::From => "from",
        SortBy::Subject => "subject",
        SortBy::Size => "size",
    };
    // A page of this folder, sorted by `by` (descending or not).
    let at = |n: usize, by: SortBy, d: bool| {
        let n = n.to_string();
        let params = [
            ("snapshot", &q.snapshot[..]),
            ("account", &q.account),
            ("folder", &q.folder),
            ("page", &n),
            ("sort", sort_name(by)),
            ("order", order(d)),
        ];
        link("/folder", &params)
    };
    let here = |n: usize| at(n, sort, desc);
    // A column's header: a link sorting by it (the other way round when it is the sort).
    let header = |by: SortBy, label: &str| {
        let d = match by == sort {
            true => !desc,
            false => by.descending_by_default(),
        };
        let mark = match (by == sort, desc) {
            (false, _) => "",
            (true, true) => " ↓",
            (true, false) => " ↑",
        };
        html! { a href=(at(1, by, d)) { (label) (mark) } }
    };
    let how = match (sort, desc) {
        (SortBy::Date, true) => "newest first",
        (SortBy::Date, false) => "oldest first",
        (SortBy::From, false) => "by sender, A to Z",
        (SortBy::From, true) => "by sender, Z to A",
        (SortBy::Subject, false) => "by subject, A to Z",
        (SortBy::Subject, true) => "by subject, Z to A",
        (SortBy::Size, true) => "largest first",
        (SortBy::Size, false) => "smallest first",
    };
    let body = html! {
        p.crumbs { a href="/" { "Snapshots" } " / "
            a href=(link("/snapshot", &[("snapshot", &q.snapshot)])) { (short(&q.snapshot)) } " / "
            a href=(link("/account", &[("snapshot", &q.snapshot), ("account", &q.account)])) { (q.account) }
            " / " (q.folder) }
        p { (p.total) " messages, " (how) " · "
            a href=(link("/folder/mbox", &[("snapshot", &q.snapshot[..]), ("account", &q.account), ("folder", &q.folder)])) download { "Download as mbox" }
            " · " a href=(link("/folder/zip", &[("snapshot", &q.snapshot[..]), ("account", &q.account), ("folder", &q.folder)])) download { "as zip of EML" }
            " · " (restore_link(&[("snapshot", &q.snapshot), ("account", &q.account), ("folder", &q.folder)])) }
        table.list {
            thead { tr {
                th { (header(SortBy::Date, "Date (UTC)")) } th { (header(SortBy::From, "From")) }
                th { (header(SortBy::Subject, "Subject")) } th.num.wide { (header(SortBy::Size, "Size")) }
                th.wide { "Flags" }
            } }
            tbody { @for r in &p.items { @let m = &r.info; tr {
                td.date { (time(m.date.unwrap_or(m.internal_date))) }
                td { (m.from) }
                td.subject { a href=(link("/message", &[("snapshot", &q.snapshot[..]), ("account", &q.account), ("folder", &q.folder), ("key", &m.key)])) {
                    @if m.subject.is_empty() { "(no subject)" } @else { (m.subject) } }
                    @if let (Some(g), Some(t)) = (&r.gone_snapshot, r.gone_time) { " " (gone_mark(g, t)) } }
                td.num.wide { (bytes(m.size)) } td.wide { (m.flags) }
            } } }
        }
        nav.pager aria-label="pages" {
            @if p.page > 1 { a href=(here(p.page - 1)) rel="prev" { "← Previous" } }
            span { "Page " (p.page) " of " (p.pages) }
            @if p.page < p.pages { a href=(here(p.page + 1)) rel="next" { "Next →" } }
        }
    };
    Ok(layout(&q.folder, Some(&ctx.session.csrf), body))
}

/// A row's "deleted <date>": the message was gone from its folder in snapshot `id` (the
/// first later one of the same host and source without it), taken at `t`. Text, not a
/// colour alone; the full time and the snapshot in its title.
fn gone_mark(id: &str, t: i64) -> Markup {
    let at = time(t);
    let title = format!(
        "Not in this folder since snapshot {} of {at} UTC",
        short(id)
    );
    html! { small.gone title=(title) { "deleted " (at.get(..10).unwrap_or(&at)) } }
}

fn place_params(p: &Place) -> [(&'static str, &str); 4] {
    [
        ("snapshot", &p.snapshot),
        ("account", &p.account),
        ("folder", &p.folder),
        ("key", &p.key),
    ]
}

pub async fn message(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(p): Params<Place>,
) -> Page {
    let f = reply::found(&st, p.clone()).await?;
    let holders = reply::holders(&st, f.entry.hash, &ctx).await?;
    let d = crate::mail::decode(&f.raw);
    let params = place_params(&p);
    let body = html! {
        p.crumbs { a href="/" { "Snapshots" } " / "
            a href=(link("/snapshot", &[("snapshot", &f.snapshot.id)])) { (short(&f.snapshot.id)) } " / "
            a href=(link("/account", &[("snapshot", &f.snapshot.id), ("account", &p.account)])) { (p.account) } " / "
            a href=(link("/folder", &[("snapshot", &f.snapshot.id), ("account", &p.account), ("folder", &p.folder)])) { (p.folder) }
            " · " (restore_link(&[("snapshot", &f.snapshot.id), ("account", &p.account), ("folder", &p.folder), ("message", &p.key)])) }
        dl.headers {
            dt { "From" } dd { (d.from) }
            dt { "To" } dd { (d.to) }
            @if !d.cc.is_empty() { dt { "Cc" } dd { (d.cc) } }
            dt { "Date" } dd { (d.date.map(time).unwrap_or_default()) " UTC" }
            dt { "Size" } dd { (bytes(f.entry.size)) }
            dt { "Flags" } dd { (String::from_utf8_lossy(f.entry.flags())) }
            dt { "Id" } dd { code { (f.entry.hash.to_hex()) } }
        }
        p { a href=(link("/message/raw", &params)) download { "Download as .eml" } }
        @if !d.attachments.is_empty() {
            h2 { "Attachments" }
            ul { @for (i, a) in d.attachments.iter().enumerate() {
                @let n = i.to_string();
                @let at = [params[0], params[1], params[2], params[3], ("n", &n[..])];
                li { a href=(link("/message/attachment", &at)) download {
                        (a.name.as_deref().unwrap_or("(no name)")) }
                    " · " (a.content_type) " · " (bytes(a.size as u64)) }
            } }
        }
        h2 { "Text" }
        @if d.text.is_empty() { p.muted { "No plain-text part." } } @else { pre.text { (d.text) } }
        @if d.has_html {
            h2 { "HTML (sanitized, nothing loaded from elsewhere)" }
            iframe.html sandbox="" src=(link("/message/html", &params)) title="The message's HTML part" {}
        }
        h2 { "Held by" }
        table {
            thead { tr { th { "Account" } th { "Folder" } th { "From snapshot" } th { "To snapshot" } th { "Since" } } }
            tbody { @for h in &holders { tr {
                td { (h.account) } td { (h.folder) }
                td { a href=(link("/snapshot", &[("snapshot", &h.first_snapshot)])) { (time(h.first_time)) } }
                td { a href=(link("/snapshot", &[("snapshot", &h.last_snapshot)])) { (time(h.last_time)) } }
                td { @match (&h.gone_snapshot, h.gone_time) {
                    (Some(g), Some(t)) => { strong.gone { "deleted since " }
                        a href=(link("/snapshot", &[("snapshot", g)])) { (time(t)) } }
                    _ => { "still there" }
                } }
            } } }
        }
    };
    let title = match d.subject.is_empty() {
        true => "(no subject)",
        false => &d.subject,
    };
    Ok(layout(title, Some(&ctx.session.csrf), body))
}

/// The message's HTML part, sanitized, under the frame's own CSP.
pub async fn message_html(State(st): State<AppState>, Params(p): Params<Place>) -> Response {
    let f = match reply::found(&st, p).await {
        Ok(f) => f,
        Err(e) => return e.page(),
    };
    let Some(body) = crate::mail::html(&f.raw) else {
        return reply::Failure::new(StatusCode::NOT_FOUND, "this message has no HTML part").page();
    };
    let doc = format!("<!DOCTYPE html><html><head></head><body>{body}</body></html>");
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CONTENT_SECURITY_POLICY, crate::headers::FRAME_CSP),
        ],
        doc,
    )
        .into_response()
}

/// The folder as an `.mbox` download.
/// `/folder/mbox` or `/folder/zip`.
pub async fn folder_download(
    State(st): State<AppState>,
    axum::extract::Path(format): axum::extract::Path<String>,
    Params(q): Params<FolderQ>,
) -> Response {
    match crate::download::Format::parse(&format) {
        Some(f) => crate::download::folder_download(st, (q, f), Failure::page).await,
        None => Failure::new(StatusCode::NOT_FOUND, "no such page").page(),
    }
}

/// Every folder of the account as a zip: `/account/zip` (of `.eml` files) or
/// `/account/mbox.zip` (of an mbox per folder).
pub async fn account_download(
    State(st): State<AppState>,
    axum::extract::Path(format): axum::extract::Path<String>,
    Params(q): Params<AccountQ>,
) -> Response {
    match crate::download::Format::parse(&format) {
        Some(f) => crate::download::account_download(st, (q, f), Failure::page).await,
        None => Failure::new(StatusCode::NOT_FOUND, "no such page").page(),
    }
}

/// The message as stored, as a `.eml` download.
pub async fn message_raw(State(st): State<AppState>, Params(p): Params<Place>) -> Response {
    match reply::found(&st, p).await {
        Ok(f) => reply::raw_download(f),
        Err(e) => e.page(),
    }
}

pub async fn search(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    Params(q): Params<SearchQ>,
) -> Page {
    let text = q.q.clone().unwrap_or_default();
    let all = q.scope.as_deref() == Some("all");
    let res = match text.trim().is_empty() {
        true => None,
        false => Some(reply::search(&st, &q, &ctx).await),
    };
    let page = q.page.unwrap_or(1).max(1);
    let here = |n: usize| {
        let n = n.to_string();
        link(
            "/search",
            &[
                ("q", &text[..]),
                ("scope", q.scope.as_deref().unwrap_or("latest")),
                ("page", &n),
            ],
        )
    };
    let body = html! {
        form.search method="get" action="/search" role="search" {
            input type="search" name="q" value=(text) aria-label="Query" placeholder="from:alice subject:invoice after:2024-01-01";
            select name="scope" aria-label="Snapshots" {
                option value="latest" selected[!all] { "Latest snapshots" }
                option value="all" selected[all] { "All snapshots" }
            }
            button type="submit" { "Search" }
        }
        @match &res {
            None => { p.muted { "The query language of `mailvault search`: words, \"phrases\", from: to: subject: folder: account: before: after: has:attachment, OR, -term." } }
            Some(Err(e)) => { p.problem { (e.message) } }
            Some(Ok(r)) => {
                p { (r.total) " found in " (r.snapshots) " snapshot(s)"
                    @if r.not_indexed > 0 { " · " (r.not_indexed) " message(s) not indexed yet (run `mailvault index`)" }
                    @if r.total > 0 && r.total <= crate::download::MAX_SEARCH_DOWNLOAD {
                        " · " a href=(link("/search/mbox", &[("q", &text[..]), ("scope", if all { "all" } else { "latest" })])) download { "Download all as mbox" }
                        " · " a href=(link("/search/zip", &[("q", &text[..]), ("scope", if all { "all" } else { "latest" })])) download { "as zip of EML" }
                    } }
                @if let Some(f) = r.facets.as_ref().filter(|_| r.total > 0) { (facets(f, &text, all)) }
                // A form of its own around the hits: the ones ticked go to the restore
                // form (no script needed).
                form method="get" action="/restore" {
                table.list {
                    thead { tr { th { "Pick" } th { "Date (UTC)" } th { "From" } th { "Subject" } th.wide { "Where" } } }
                    tbody { @for h in &r.hits { tr {
                        td { input type="checkbox" name="pick" aria-label=(format!("Pick {}", h.subject))
                            value=(crate::restore::pick_value(&crate::read::Place { snapshot: h.last_snapshot.clone(), account: h.account.clone(), folder: h.folder.clone(), key: h.key.clone() })); }
                        td.date { (time(h.date.unwrap_or(h.internal_date))) }
                        td { (h.from) }
                        td.subject { a href=(link("/message", &[("snapshot", &h.last_snapshot[..]), ("account", &h.account), ("folder", &h.folder), ("key", &h.key)])) {
                            @if h.subject.is_empty() { "(no subject)" } @else { (h.subject) } }
                            @if h.deleted { " " span.muted { "[deleted]" } } }
                        td.wide { (h.account) " / " (h.folder) }
                    } } }
                }
                @if !r.hits.is_empty() { button type="submit" { "Restore the picked messages…" } }
                }
                nav.pager aria-label="pages" {
                    @if page > 1 { a href=(here(page - 1)) rel="prev" { "← Previous" } }
                    @if page * reply::SEARCH_PAGE < r.total { a href=(here(page + 1)) rel="next" { "Next →" } }
                }
            }
        }
    };
    Ok(layout("Search", Some(&ctx.session.csrf), body))
}

/// The repository's page (the admin's): each source's last backup, its age and result
/// (stale ones marked), and charts of what the last backups recorded.
pub async fn repository(State(st): State<AppState>, Extension(ctx): Extension<Ctx>) -> Page {
    use crate::repository::{age, bar_chart, CHARTED};
    let o = reply::overview(&st, &ctx).await?;
    let last = &o.snapshots[o.snapshots.len().saturating_sub(CHARTED)..];
    let series = |f: fn(&crate::repository::Point) -> f64, unit: &str| -> Vec<(String, f64)> {
        (last.iter())
            .map(|p| {
                let v = f(p);
                // Counts whole, ratios and durations to two places.
                let shown = match v.fract() == 0.0 {
                    true => format!("{v:.0}"),
                    false => format!("{v:.2}"),
                };
                (format!("{} {}: {shown} {unit}", time(p.time), p.source), v)
            })
            .collect()
    };
    let body = html! {
        h2 { "Last backup per source" }
        p.muted { "A source is stale when its last backup is older than " (age(o.stale_after_secs as i64)) "." }
        table {
            thead { tr {
                th { "Host" } th.wide { "Source" } th { "Last backup (UTC)" } th.num { "Age" }
                th { "Result" } th.num { "Messages" } th.num.wide { "Size" } th.num.wide { "Snapshots" }
            } }
            tbody { @for r in &o.sources { tr.stale[r.stale] {
                td { (r.hostname) } td.wide { (r.source) }
                td { a href=(link("/snapshot", &[("snapshot", &r.last_snapshot)])) { (time(r.last_time)) } }
                td.num { @if r.stale { strong.problem { (age(r.age_secs)) " (stale)" } } @else { (age(r.age_secs)) } }
                td { @if r.failed == 0 { "ok" } @else { strong.problem { (r.failed) " failed" } } }
                td.num { (r.messages) } td.num.wide { (bytes(r.bytes)) } td.num.wide { (r.snapshots) }
            } } }
        }
        h2 { "The last " (last.len()) " backups" }
        (bar_chart("Messages in the snapshot", &series(|p| p.messages as f64, "messages")))
        (bar_chart("New messages", &series(|p| p.messages_new as f64, "new")))
        (bar_chart("Bytes added to the repository", &series(|p| p.bytes_added as f64, "bytes")))
        (bar_chart("Deduplication: bytes read per new byte", &series(|p| p.dedup_ratio.unwrap_or(0.0), "×")))
        (bar_chart("Compression: new bytes per byte stored", &series(|p| p.compression_ratio.unwrap_or(0.0), "×")))
        (bar_chart("Duration", &series(|p| p.elapsed_secs, "s")))
        (bar_chart("Failed items", &series(|p| p.failed as f64, "failed")))
    };
    Ok(layout("Repository", Some(&ctx.session.csrf), body))
}

/// Attachment `n` of a message, decoded, as a download.
pub async fn message_attachment(
    State(st): State<AppState>,
    Params(q): Params<reply::AttachmentQ>,
) -> Response {
    match reply::attachment_download(&st, &q).await {
        Ok(r) => r,
        Err(f) => f.page(),
    }
}

/// Every message a search finds, as one `.mbox` or `.zip` download.
pub async fn search_download(
    State(st): State<AppState>,
    Extension(ctx): Extension<Ctx>,
    axum::extract::Path(format): axum::extract::Path<String>,
    Params(q): Params<SearchQ>,
) -> Response {
    match crate::download::Format::parse(&format) {
        Some(f) => crate::download::search_download(st, (q, f), ctx, Failure::page).await,
        None => Failure::new(StatusCode::NOT_FOUND, "no such page").page(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_are_shown_as_a_tree_with_levels_that_are_no_folder() {
        let names = [
            "INBOX",
            "Archive/2023",
            "Archive-old",
            "Archive/2022/Q1",
            "Archive",
        ];
        let rows: Vec<(usize, String, Option<usize>)> = tree(names.into_iter());
        let want = [
            (0, "INBOX", Some(0)),
            (0, "Archive", Some(4)),
            (1, "2022", None),
            (2, "Q1", Some(3)),
            (1, "2023", Some(1)),
            (0, "Archive-old", Some(2)),
        ];
        let want: Vec<(usize, String, Option<usize>)> = want
            .iter()
            .map(|(d, l, i)| (*d, l.to_string(), *i))
            .collect();
        assert_eq!(rows, want);
    }

    #[test]
    fn snapshots_fall_into_their_months_newest_first() {
        let row = |id: &str, time: i64| read::SnapRow {
            id: id.into(),
            time,
            hostname: "h".into(),
            source: "s".into(),
            tags: Vec::new(),
            accounts: 1,
            messages: 1,
            bytes: 1,
        };
        // 2024-03-02, 2024-03-01, 2024-02-29 23:59:59 UTC.
        let list = [
            row("c", 1709337600),
            row("b", 1709251200),
            row("a", 1709251199),
        ];
        let months: Vec<(String, Vec<&str>)> = (by_month(&list).into_iter())
            .map(|(m, g)| (m, g.iter().map(|s| s.id.as_str()).collect()))
            .collect();
        assert_eq!(
            months,
            [
                ("2024-03".to_string(), vec!["c", "b"]),
                ("2024-02".to_string(), vec!["a"])
            ]
        );
    }
}
