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
    #[serde(flatten)]
    pub message: Decoded,
    #[serde(skip)]
    pub raw: Vec<u8>,
}

/// What a reader sees of a message ([`decode`]): its main headers decoded, its text, its
/// attachments. `show` prints it; the web UI shows it.
#[derive(Clone, Debug, Default, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Decoded {
    pub from: String,
    pub to: String,
    pub cc: String,
    pub date: Option<i64>,
    pub subject: String,
    pub message_id: String,
    /// The text a reader sees first: the text/plain body, else the HTML body reduced to
    /// text (never markup).
    pub text: String,
    /// Whether it has an HTML body ([`html_body`]).
    pub has_html: bool,
    pub attachments: Vec<Attachment>,
}

/// An attachment: its file name (if any), MIME type and decoded size.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    Ok(Shown {
        id: e.hash.to_hex(),
        snapshot: view.snapshots[last as usize].id.to_hex(),
        account: fk.account.clone(),
        folder: fk.folder.clone(),
        key: String::from_utf8_lossy(&e.key).into(),
        size: e.size,
        message: decode(&raw),
        raw,
    })
}

/// Parses `raw` as the index does (see [`super::extract`]): an encoded forwarded message
/// is not parsed (its copies nested would overflow the stack), a message is cut after
/// its structure cap, and what the parser built is dropped one nested message at a time.
/// The one way a message is parsed for reading.
/// `None` when it does not parse (mail-parser's accessors of headers need a part).
fn with_parsed<T>(raw: &[u8], f: impl FnOnce(&mail_parser::Message<'_>) -> T) -> Option<T> {
    let (input, _) = super::extract::parser_input(raw);
    let m = super::extract::parser().parse(&input[..])?;
    let out = (!m.parts.is_empty()).then(|| f(&m));
    super::extract::drop_flat(m);
    out
}

/// The first HTML body of `m`.
fn first_html<'m>(m: &'m mail_parser::Message<'_>) -> Option<&'m str> {
    (m.html_body.iter())
        .filter_map(|&i| m.parts.get(i as usize))
        .find_map(|p| match &p.body {
            mail_parser::PartType::Html(h) => Some(h.as_ref()),
            _ => None,
        })
}

/// The first HTML body of `raw`, as the message has it: markup from the sender, for a
/// sanitizer to clean before anything shows it.
pub fn html_body(raw: &[u8]) -> Option<String> {
    with_parsed(raw, |m| first_html(m).map(str::to_string)).flatten()
}

/// The headers, text and attachments of `raw` (a message that does not parse decodes to
/// empty headers and no text).
pub fn decode(raw: &[u8]) -> Decoded {
    with_parsed(raw, |m| {
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
        // The first text body; HTML reduced by the index's reducer (mail-parser's own
        // keeps the text of `<style>` and `<script>` elements that have attributes).
        let first = (m.text_body.first()).and_then(|&i| m.parts.get(i as usize));
        let text = match first.map(|p| &p.body) {
            Some(mail_parser::PartType::Text(t)) => t.to_string(),
            Some(mail_parser::PartType::Html(h)) => super::extract::html::html_to_text(h),
            _ => String::new(),
        };
        let attachments = m.attachments().map(attachment_of).collect();
        Decoded {
            from: addresses(m.from()),
            to: addresses(m.to()),
            cc: addresses(m.cc()),
            date: m.date().map(|d| d.to_timestamp()),
            subject: m.subject().unwrap_or_default().to_string(),
            message_id: m.message_id().unwrap_or_default().to_string(),
            text,
            has_html: first_html(m).is_some(),
            attachments,
        }
    })
    .unwrap_or_default()
}

/// What an attachment part is: its file name, MIME type and decoded size.
fn attachment_of(p: &mail_parser::MessagePart<'_>) -> Attachment {
    Attachment {
        name: p.attachment_name().map(str::to_string),
        content_type: p
            .content_type()
            .map(|c| match &c.c_subtype {
                Some(sub) => format!("{}/{}", c.c_type, sub),
                None => c.c_type.to_string(),
            })
            .unwrap_or_else(|| "application/octet-stream".into()),
        size: p.len(),
    }
}

/// Attachment `n` of `raw` (in [`Decoded::attachments`]' order), decoded (base64 and
/// quoted-printable undone; an attached message as its bytes): what it is, and its bytes.
/// `None` when `raw` has fewer.
pub fn attachment(raw: &[u8], n: usize) -> Option<(Attachment, Vec<u8>)> {
    with_parsed(raw, |m| {
        let p = m.attachments().nth(n)?;
        Some((attachment_of(p), p.contents().to_vec()))
    })
    .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachments_come_out_decoded_in_the_listed_order() {
        let raw = b"Subject: s\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=B\r\n\r\n\
--B\r\nContent-Type: text/plain\r\n\r\nbody\r\n\
--B\r\nContent-Type: application/octet-stream; name=\"a.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\nAAEC/w==\r\n\
--B\r\nContent-Type: text/plain; name=\"b.txt\"\r\nContent-Disposition: attachment; filename=\"b.txt\"\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nx=3Dy\r\n--B--\r\n";
        let listed = decode(raw).attachments;
        let (a, data) = attachment(raw, 0).unwrap();
        assert_eq!(
            (a.name.as_deref(), data.as_slice()),
            (Some("a.bin"), &[0u8, 1, 2, 255][..])
        );
        assert_eq!(a.name, listed[0].name);
        let (b, data) = attachment(raw, 1).unwrap();
        assert_eq!(
            (b.name.as_deref(), data.as_slice()),
            (Some("b.txt"), &b"x=y"[..])
        );
        assert!(attachment(raw, 2).is_none());
        assert!(attachment(b"", 0).is_none());
    }

    #[test]
    fn a_message_that_does_not_parse_decodes_to_nothing() {
        // mail-parser's header accessors index its first part: an empty message has none.
        for raw in [&b""[..], b"\r\n", b"\xff\xfe"] {
            let d = decode(raw);
            assert!(d.from.is_empty() && d.subject.is_empty() && !d.has_html);
            assert!(html_body(raw).is_none());
        }
        let html = b"Subject: s\r\nContent-Type: text/html\r\n\r\n<p>hi <b>there</b></p>\r\n";
        let d = decode(html);
        assert_eq!(d.subject, "s");
        assert!(d.has_html);
        assert_eq!(d.text.trim(), "hi there");
        assert!(html_body(html).unwrap().contains("<b>there</b>"));
    }
}
