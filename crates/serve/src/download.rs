//! A folder, a whole account, or the messages a search found, downloaded as an mbox, as a
//! zip of `.eml` files or as a zip of an mbox per folder: core's restore pipeline into an
//! mbox stream ([`mailvault_core::dest::mbox_stream`]) or a zip stream
//! ([`mailvault_core::dest::zip_stream`]) on a blocking thread, its bytes handed to the
//! HTTP body through a bounded channel as they are written (a folder or an account of any
//! size in bounded memory).
//!
//! What fails before the first bytes leave (no such snapshot or folder, every message of a
//! small folder unreadable) is an ordinary error answer. What fails once the body has
//! started (a damaged message further on) ends the body with an error, so the client sees
//! a broken transfer, never a shorter mbox that looks complete.

use crate::reply::{Failure, FolderQ};
use crate::state::AppState;
use axum::body::{Body, Bytes};
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use mailvault_core::dest::mbox_stream::MboxStream;
use mailvault_core::dest::zip_stream::ZipStream;
use mailvault_core::restore::{Request, Selection};
use std::io::Write;
use tokio::sync::mpsc;

/// Bytes gathered before they are handed to the body.
const CHUNK: usize = 256 << 10;
/// Chunks waiting for the client at most (the memory a slow client can hold up).
const QUEUE: usize = 8;

type Item = Result<Bytes, Failure>;

/// A [`Write`] into the channel, in chunks of [`CHUNK`]; fails once the body is dropped
/// (the client went away), which ends the restore.
struct ChannelWriter {
    tx: mpsc::Sender<Item>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::take(&mut self.buf));
        self.tx.blocking_send(Ok(chunk)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// What a download is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One mbox (a search's hits: their folders one after the other).
    Mbox,
    /// A zip of `.eml` files, a directory per account and folder.
    Zip,
    /// A zip of an mbox per folder (`<account>/Archive/2023.mbox`): an account's folder
    /// tree for a mail client that imports mbox files.
    MboxZip,
}

impl Format {
    /// `mbox`, `zip` or `mbox.zip`, as a route names it.
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "mbox" => Some(Format::Mbox),
            "zip" => Some(Format::Zip),
            "mbox.zip" => Some(Format::MboxZip),
            _ => None,
        }
    }
    fn ext(self) -> &'static str {
        match self {
            Format::Mbox => "mbox",
            Format::Zip => "zip",
            Format::MboxZip => "mbox.zip",
        }
    }
    fn mime(self) -> &'static str {
        match self {
            Format::Mbox => "application/mbox",
            Format::Zip | Format::MboxZip => "application/zip",
        }
    }
}

/// Restores what `request` gives (on the repository as open now) into the channel as an
/// mbox (`many`: folders one after the other) or a zip; a failure, the request's, the
/// restore's own or a message that could not be written (`what` names the download in
/// the log), goes into the channel last.
fn run_into(
    st: &AppState,
    request: impl FnOnce(&mailvault_core::Repository) -> mailvault_core::Result<Request>,
    (what, format, many): (&str, Format, bool),
    tx: mpsc::Sender<Item>,
) {
    let fail = |f: Failure| {
        let _ = tx.blocking_send(Err(f));
    };
    let live = match st.live() {
        Ok(l) => l,
        Err(e) => return fail(e.into()),
    };
    let request = match request(live.repo()) {
        Ok(r) => r,
        Err(e) => return fail(e.into()),
    };
    let writer = ChannelWriter {
        tx: tx.clone(),
        buf: Vec::with_capacity(CHUNK),
    };
    let nothing = &mailvault_core::report::NoProgress;
    let repo = live.repo();
    use mailvault_core::ops::restore::run;
    let ran = match format {
        Format::Mbox => {
            let open = |_: mailvault_core::ops::restore::Opening<'_>| {
                Ok(match many {
                    true => MboxStream::many(writer),
                    false => MboxStream::new(writer),
                })
            };
            run(repo, request, nothing, open).map(|(r, _)| r)
        }
        Format::Zip | Format::MboxZip => {
            let open = |_: mailvault_core::ops::restore::Opening<'_>| {
                Ok(match format {
                    Format::MboxZip => ZipStream::mboxes(writer),
                    _ => ZipStream::new(writer),
                })
            };
            // The archive's end is written only after the last message: a download
            // broken before it is no zip a reader takes as complete.
            (run(repo, request, nothing, open)).and_then(|(r, z)| z.finish().map(|()| r))
        }
    };
    match ran {
        Err(e) => fail(e.into()),
        Ok(report) => {
            if let Some(f) = report.failures.first() {
                tracing::warn!(
                    "{} download of {what}: {} failure(s), the first: {}: {}",
                    format.ext(),
                    report.failures.len(),
                    f.item,
                    f.error
                );
                let text = format!(
                    "{} message(s) or file(s) failed ({}: {}); \
                     `mailvault check` tells whether the repository is damaged",
                    report.failures.len(),
                    f.item,
                    f.error
                );
                fail(Failure::new(StatusCode::INTERNAL_SERVER_ERROR, &text));
            }
        }
    }
}

/// The most messages a search result downloads as one mbox; more is refused (narrow the
/// search), never cut short in silence.
pub const MAX_SEARCH_DOWNLOAD: usize = 10_000;

/// The messages search `q` finds (for `ctx`'s session: a mail user's own), every one of
/// them, as one `.mbox` or `.zip` download, each in the newest snapshot that holds it
/// there; more than [`MAX_SEARCH_DOWNLOAD`] is refused. A failure before it starts is
/// answered by `err`.
pub async fn search_download(
    st: AppState,
    (q, format): (crate::reply::SearchQ, Format),
    ctx: crate::reply::Ctx,
    err: fn(Failure) -> Response,
) -> Response {
    let found = match crate::reply::search_all(&st, &q, &ctx, MAX_SEARCH_DOWNLOAD).await {
        Ok(r) => r,
        Err(f) => return err(f),
    };
    let places: Vec<crate::read::Place> = (found.hits.iter())
        .map(|h| crate::read::Place {
            snapshot: h.last_snapshot.clone(),
            account: h.account.clone(),
            folder: h.folder.clone(),
            key: h.key.clone(),
        })
        .collect();
    let cache = st.clone();
    let request = move |repo: &mailvault_core::Repository| {
        let how = ("search", 0, Selection::CACHE_BYTES);
        crate::read::picked_request(repo, &cache.0.folders, &places, how)
    };
    let name = format!("search.{}", format.ext());
    let what = ("a search result".to_string(), format, true);
    download(st, request, what, &name, err).await
}

/// `folder` as an `.mbox` or `.zip` download; a failure before it starts is answered by
/// `err`.
pub async fn folder_download(
    st: AppState,
    (q, format): (FolderQ, Format),
    err: fn(Failure) -> Response,
) -> Response {
    if let Err(e) = crate::read::check_snapshot_id(&q.snapshot) {
        return err(e.into());
    }
    let sel = Selection {
        snapshot: q.snapshot.to_ascii_lowercase(),
        accounts: vec![q.account.clone()],
        folders: vec![q.folder.clone()],
        exact_folders: true,
        cache_bytes: Selection::CACHE_BYTES,
        ..Selection::default()
    };
    let name = crate::read::download_name(&q.folder, format.ext());
    let what = (q.folder, format, false);
    download(st, move |_| Ok(Request::Selection(sel)), what, &name, err).await
}

/// Every folder of account `q` in the snapshot, its mail without its home, as one zip:
/// of `.eml` files ([`Format::Zip`]), entries named as a folder's zip names them
/// (`<account>/INBOX/…`, `<account>/Archive/2023/…`), or of an mbox per folder
/// ([`Format::MboxZip`]: `<account>/Archive/2023.mbox`, for a mail client's import). Never
/// one mbox ([`Format::Mbox`], answered `404`): it would lose which message was in which
/// folder. A failure before it starts is answered by `err`.
pub async fn account_download(
    st: AppState,
    (q, format): (crate::reply::AccountQ, Format),
    err: fn(Failure) -> Response,
) -> Response {
    if format == Format::Mbox {
        let text = "an account downloads as a zip of its folders (`zip` of .eml files, \
                    `mbox.zip` of an mbox per folder), never as one mbox that would lose them";
        return err(Failure::new(StatusCode::NOT_FOUND, text));
    }
    if let Err(e) = crate::read::check_snapshot_id(&q.snapshot) {
        return err(e.into());
    }
    let name = crate::read::download_name(&q.account, format.ext());
    let account = q.account.clone();
    let request = move |repo: &mailvault_core::Repository| {
        // Named alone, never with the snapshot's other accounts (which the restore's
        // own failure lists).
        let snap = repo.find_snapshot(&q.snapshot.to_ascii_lowercase())?;
        if crate::read::account_tree(repo, &snap, &q.account)?.is_none() {
            let text = format!("no account {:?}", q.account);
            return Err(mailvault_core::Error::NotFound(text));
        }
        Ok(Request::Selection(Selection {
            snapshot: snap.id.to_hex(),
            accounts: vec![q.account],
            part: mailvault_core::restore::Part::Mail,
            cache_bytes: Selection::CACHE_BYTES,
            ..Selection::default()
        }))
    };
    download(st, request, (account, format, false), &name, err).await
}

/// Restores what `request` gives (see [`run_into`]) on a blocking thread, as download
/// `name`; a failure before the first bytes is answered by `err`.
async fn download(
    st: AppState,
    request: impl FnOnce(&mailvault_core::Repository) -> mailvault_core::Result<Request>
        + Send
        + 'static,
    (what, format, many): (String, Format, bool),
    name: &str,
    err: fn(Failure) -> Response,
) -> Response {
    let (tx, rx) = mpsc::channel::<Item>(QUEUE);
    tokio::task::spawn_blocking(move || run_into(&st, request, (&what, format, many), tx));
    respond(rx, name, format.mime(), err).await
}

/// The download of what comes through `rx`, as file `name` of type `mime`: a failure
/// before the first bytes is answered by `err`; one after them breaks the body.
async fn respond(
    mut rx: mpsc::Receiver<Item>,
    name: &str,
    mime: &str,
    err: fn(Failure) -> Response,
) -> Response {
    let first = match rx.recv().await {
        Some(Err(f)) => return err(f),
        first => first,
    };
    let rest = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let body = (futures_util::stream::iter(first).chain(rest))
        .map(|item| item.map_err(|f| std::io::Error::other(f.message)));
    (
        [
            (CONTENT_TYPE, mime.to_string()),
            (
                CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(items: Vec<Item>) -> (StatusCode, Result<Bytes, axum::Error>) {
        let (tx, rx) = mpsc::channel(QUEUE);
        for i in items {
            tx.send(i).await.unwrap();
        }
        drop(tx);
        let r = respond(rx, "x.mbox", "application/mbox", Failure::json).await;
        let status = r.status();
        (
            status,
            axum::body::to_bytes(r.into_body(), usize::MAX).await,
        )
    }

    fn failed() -> Item {
        Err(Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "damaged"))
    }

    #[tokio::test]
    async fn a_failure_before_the_bytes_is_an_error_answer_and_after_them_breaks_the_body() {
        let (status, body) = answer(vec![failed()]).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(String::from_utf8_lossy(&body.unwrap()).contains("damaged"));
        let (status, body) = answer(vec![Ok(Bytes::from_static(b"From a\n")), failed()]).await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.is_err(), "a broken download read as complete");
        let (status, body) = answer(vec![
            Ok(Bytes::from_static(b"a")),
            Ok(Bytes::from_static(b"b")),
        ])
        .await;
        assert_eq!((status, &body.unwrap()[..]), (StatusCode::OK, &b"ab"[..]));
        let (status, body) = answer(vec![]).await;
        assert_eq!((status, body.unwrap().len()), (StatusCode::OK, 0));
    }
}
