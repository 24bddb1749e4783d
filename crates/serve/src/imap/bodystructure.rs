//! FETCH BODYSTRUCTURE and BODY from a message's [`mime`](super::mime) structure: for each
//! part its type, parameters, Content-ID, Content-Description, transfer encoding and size
//! (and lines for text, the envelope and structure of an attached message); no extension
//! data (MD5, disposition, language, location) yet.

use super::envelope::envelope;
use super::mime::{field, Part};
use imap_codec::imap_types::body::{BasicFields, Body, BodyStructure, SpecificFields};
use imap_codec::imap_types::core::{IString, NString, Vec1};

/// The BODYSTRUCTURE of part `p` of `raw`.
pub fn structure(raw: &[u8], p: &Part) -> BodyStructure<'static> {
    if p.kind.0 == "multipart" {
        let bodies: Vec<BodyStructure<'static>> =
            p.children.iter().map(|c| structure(raw, c)).collect();
        if let Ok(bodies) = Vec1::try_from(bodies) {
            return BodyStructure::Multi {
                bodies,
                subtype: istring(&p.kind.1),
                extension_data: None,
            };
        }
    }
    let header = &raw[p.header.clone()];
    let body = &raw[p.body.clone()];
    let encoding = field(header, b"Content-Transfer-Encoding")
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| "7bit".into());
    let basic = BasicFields {
        parameter_list: (p.params.iter())
            .map(|(k, v)| (istring(k), istring(v)))
            .collect(),
        id: nstring(field(header, b"Content-ID")),
        description: nstring(field(header, b"Content-Description")),
        content_transfer_encoding: istring(&encoding),
        size: body.len().min(u32::MAX as usize) as u32,
    };
    let specific = match (p.kind.0.as_str(), &p.message) {
        ("text", _) => SpecificFields::Text {
            subtype: istring(&p.kind.1),
            number_of_lines: lines(body),
        },
        ("message", Some(m)) => SpecificFields::Message {
            envelope: Box::new(envelope(&raw[m.header.clone()])),
            body_structure: Box::new(structure(raw, m)),
            number_of_lines: lines(body),
        },
        _ => SpecificFields::Basic {
            r#type: istring(&p.kind.0),
            subtype: istring(&p.kind.1),
        },
    };
    BodyStructure::Single {
        body: Body { basic, specific },
        extension_data: None,
    }
}

/// Lines of `body`: its line feeds, and one more for a last line without one.
fn lines(body: &[u8]) -> u32 {
    let n = body.iter().filter(|&&b| b == b'\n').count();
    let last = !body.is_empty() && body.last() != Some(&b'\n');
    (n + last as usize).min(u32::MAX as usize) as u32
}

/// A string as the codec sends it (quoted, else a literal; a value with NUL is empty).
fn istring(s: &str) -> IString<'static> {
    IString::try_from(s.replace('\0', "")).unwrap_or_else(|_| {
        IString::Literal(imap_codec::imap_types::core::Literal::unvalidated(
            Vec::new(),
        ))
    })
}

fn nstring(s: Option<String>) -> NString<'static> {
    NString(s.map(|s| istring(&s)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use imap_codec::encode::Encoder;

    #[test]
    fn a_nested_message_is_described() {
        let raw: &[u8] = b"Content-Type: multipart/mixed; boundary=B\r\n\r\n--B\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
hello\r\nworld\r\n--B\r\nContent-Type: image/png; name=\"a b.png\"\r\nContent-ID: <i@x>\r\n\
Content-Transfer-Encoding: base64\r\n\r\niVBO\r\n--B--\r\n";
        let p = super::super::mime::parse(raw);
        let b = structure(raw, &p);
        let item = imap_codec::imap_types::fetch::MessageDataItem::BodyStructure(b);
        let data = imap_codec::imap_types::response::Data::Fetch {
            seq: std::num::NonZeroU32::MIN,
            items: Vec1::from(item),
        };
        let resp = imap_codec::imap_types::response::Response::Data(data);
        let out = imap_codec::ResponseCodec::default().encode(&resp).dump();
        let out = String::from_utf8(out).unwrap();
        assert_eq!(
            out,
            "* 1 FETCH (BODYSTRUCTURE ((\"TEXT\" \"plain\" (\"charset\" \"utf-8\") NIL NIL \
             \"quoted-printable\" 12 2)(\"image\" \"png\" (\"name\" \"a b.png\") \"<i@x>\" NIL \
             \"base64\" 4) \"mixed\"))\r\n"
        );
    }
}
