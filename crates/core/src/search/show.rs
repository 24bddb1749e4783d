//! `mailvault show`: one message, found by the content id `search` prints, read and
//! presented: its main headers decoded, its text, its attachments.

use super::places::{Places, Scope};
use crate::error::{Error, Result};
use crate::model::assemble::assemble;
use crate::model::{names_content, MIN_ID_PREFIX};
use crate::repo::Repository;
use mail_parser::MimeHeaders;
use serde::Serialize;

/// A message found by its content id, where the newest snapshot holding it has it.
#[derive(Clone, Debug, Serialize)]
pub struct Shown {
    pub id: String,
    pub snapshot: String,
    pub account: String,
    pub folder: String,
    pub key: String,
    pub size: u64,
    pub from: String,
    pub to: String,
    pub cc: String,
    pub date: Option<i64>,
    pub subject: String,
    /// The text a reader sees first: the text/plain body, else the HTML body reduced to
    /// text (never markup).
    pub text: String,
    pub attachments: Vec<Attachment>,
    #[serde(skip)]
    pub raw: Vec<u8>,
}

/// An attachment: its file name (if any), MIME type and decoded size.
#[derive(Clone, Debug, Serialize)]
pub struct Attachment {
    pub name: Option<String>,
    pub content_type: String,
    pub size: usize,
}

/// Finds message `id` (a content id or its prefix) in the newest snapshot that holds it
/// and reads it; `cache` holds the places map (see [`super::places`]).
pub fn show(repo: &Repository, cache: Option<&std::path::Path>, id: &str) -> Result<Shown> {
    if !(id.len() >= MIN_ID_PREFIX && id.bytes().all(|c| c.is_ascii_hexdigit())) {
        return Err(Error::InvalidInput(format!(
            "{id:?} is not a message id: give the id `search` prints (at least {MIN_ID_PREFIX} hex digits)"
        )));
    }
    let _lock = repo.lock_for_reading("show")?;
    let places = Places::open(repo, cache, None)?;
    let view = places.view(repo, &Scope::All)?;
    // The newest snapshot holding it.
    let newest = (0..places.len())
        .filter(|&r| names_content(id, places.content(r)))
        .filter_map(|r| Some((places.span(&view, r)?.1, r)))
        .max();
    let Some((last, r)) = newest else {
        return Err(Error::InvalidInput(format!(
            "no snapshot holds a message with id {id}"
        )));
    };
    let e = places.entry(r)?;
    let fk = &places.folders[places.folder(r) as usize];
    let raw = assemble(repo, &e.content, e.size, Some(&e.hash))?;
    let mut s = present(&raw);
    s.id = e.hash.to_hex();
    s.snapshot = view.snapshots[last as usize].id.to_hex();
    s.account = fk.account.clone();
    s.folder = fk.folder.clone();
    s.key = String::from_utf8_lossy(&e.key).into();
    s.size = e.size;
    s.raw = raw;
    Ok(s)
}

/// The headers, text and attachments of `raw`.
fn present(raw: &[u8]) -> Shown {
    // What the index is given: an encoded forwarded message is not parsed (its copies
    // nested would overflow the stack), and a message is cut after its structure cap.
    let (input, _) = super::extract::parser_input(raw);
    let m = super::extract::parser()
        .parse(&input[..])
        .unwrap_or_default();
    let addresses = |a: Option<&mail_parser::Address>| {
        a.map(|a| {
            a.iter()
                .map(|a| match (&a.name, &a.address) {
                    (Some(n), Some(ad)) => format!("{n} <{ad}>"),
                    (None, Some(ad)) => ad.to_string(),
                    (Some(n), None) => n.to_string(),
                    (None, None) => String::new(),
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
    };
    // The first text body; HTML reduced by the index's reducer (mail-parser's own keeps
    // the text of `<style>` and `<script>` elements that have attributes).
    let first = (m.text_body.first()).and_then(|&i| m.parts.get(i as usize));
    let text = match first.map(|p| &p.body) {
        Some(mail_parser::PartType::Text(t)) => t.to_string(),
        Some(mail_parser::PartType::Html(h)) => super::extract::html::html_to_text(h),
        _ => String::new(),
    };
    let attachments = m
        .attachments()
        .map(|p| Attachment {
            name: p.attachment_name().map(str::to_string),
            content_type: p
                .content_type()
                .map(|c| match &c.c_subtype {
                    Some(sub) => format!("{}/{}", c.c_type, sub),
                    None => c.c_type.to_string(),
                })
                .unwrap_or_else(|| "application/octet-stream".into()),
            size: p.len(),
        })
        .collect();
    let shown = Shown {
        id: String::new(),
        snapshot: String::new(),
        account: String::new(),
        folder: String::new(),
        key: String::new(),
        size: 0,
        from: addresses(m.from()),
        to: addresses(m.to()),
        cc: addresses(m.cc()),
        date: m.date().map(|d| d.to_timestamp()),
        subject: m.subject().unwrap_or_default().to_string(),
        text,
        attachments,
        raw: Vec::new(),
    };
    super::extract::drop_flat(m);
    shown
}
