//! FETCH BODYSTRUCTURE and BODY from a message's [`mime`](super::mime) structure: for each
//! part its type, parameters, Content-ID, Content-Description, transfer encoding and size
//! (and lines for text, the envelope and structure of an attached message), and for
//! BODYSTRUCTURE the extension data of RFC 3501 (Content-MD5, disposition, language and
//! location; a multipart's parameters), written as Dovecot writes them: types,
//! subtypes and parameter names as the message has them, `charset` `us-ascii` added to
//! text parts without a charset, RFC 2231 parameters joined, lines counted as line feeds.

use super::envelope::envelope;
use super::mime::{disposition, field, field_as_written, languages, Part};
use imap_codec::imap_types::body::{
    BasicFields, Body, BodyStructure, Disposition, Language, Location, MultiPartExtensionData,
    SinglePartExtensionData, SpecificFields,
};
use imap_codec::imap_types::core::{IString, NString, Vec1};

/// The BODYSTRUCTURE (`extended`) or BODY of part `p` of `raw`.
pub fn structure(raw: &[u8], p: &Part, extended: bool) -> BodyStructure<'static> {
    let header = &raw[p.header.clone()];
    if p.kind.0 == "multipart" {
        let bodies: Vec<BodyStructure<'static>> = (p.children.iter())
            .map(|c| structure(raw, c, extended))
            .collect();
        if let Ok(bodies) = Vec1::try_from(bodies) {
            return BodyStructure::Multi {
                bodies,
                subtype: istring(&p.written.1),
                extension_data: extended.then(|| MultiPartExtensionData {
                    parameter_list: pairs(&p.params),
                    tail: Some(tail(header)),
                }),
            };
        }
    }
    let body = &raw[p.body.clone()];
    let encoding = field(header, b"Content-Transfer-Encoding")
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| "7bit".into());
    let mut params = p.params.clone();
    let has_charset = params
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("charset"));
    if p.kind.0 == "text" && !has_charset {
        params.push(("charset".into(), "us-ascii".into()));
    }
    let basic = BasicFields {
        parameter_list: pairs(&params),
        id: nstring(field_as_written(header, b"Content-ID")),
        description: nstring(field_as_written(header, b"Content-Description")),
        content_transfer_encoding: istring(&encoding),
        size: body.len().min(u32::MAX as usize) as u32,
    };
    let specific = match (p.kind.0.as_str(), &p.message) {
        ("text", _) => SpecificFields::Text {
            subtype: istring(&p.written.1),
            number_of_lines: lines(body),
        },
        ("message", Some(m)) => SpecificFields::Message {
            envelope: Box::new(envelope(&raw[m.header.clone()])),
            body_structure: Box::new(structure(raw, m, extended)),
            number_of_lines: lines(body),
        },
        _ => SpecificFields::Basic {
            r#type: istring(&p.written.0),
            subtype: istring(&p.written.1),
        },
    };
    BodyStructure::Single {
        body: Body { basic, specific },
        extension_data: extended.then(|| SinglePartExtensionData {
            md5: nstring(field_as_written(header, b"Content-MD5")),
            tail: Some(tail(header)),
        }),
    }
}

/// Disposition, language and location of a part's `header`.
fn tail(header: &[u8]) -> Disposition<'static> {
    let disposition = field(header, b"Content-Disposition").map(|v| {
        let (kind, params) = disposition(&v);
        (istring(&kind), pairs(&params))
    });
    let language = field(header, b"Content-Language").map_or_else(Vec::new, |v| languages(&v));
    Disposition {
        disposition,
        tail: Some(Language {
            language: language.iter().map(|l| istring(l)).collect(),
            tail: Some(Location {
                location: nstring(field_as_written(header, b"Content-Location")),
                extensions: Vec::new(),
            }),
        }),
    }
}

fn pairs(params: &[(String, String)]) -> Vec<(IString<'static>, IString<'static>)> {
    params
        .iter()
        .map(|(k, v)| (istring(k), istring(v)))
        .collect()
}

/// Lines of `body`, as Dovecot counts them: its line feeds (a last line without one,
/// as a part's last before its boundary, is not counted).
fn lines(body: &[u8]) -> u32 {
    let n = body.iter().filter(|&&b| b == b'\n').count();
    n.min(u32::MAX as usize) as u32
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

    /// The FETCH line of part `raw`'s BODYSTRUCTURE (`extended`) or BODY.
    fn encoded(raw: &[u8], extended: bool) -> String {
        let b = structure(raw, &super::super::mime::parse(raw), extended);
        let item = match extended {
            true => imap_codec::imap_types::fetch::MessageDataItem::BodyStructure(b),
            false => imap_codec::imap_types::fetch::MessageDataItem::Body(b),
        };
        let data = imap_codec::imap_types::response::Data::Fetch {
            seq: std::num::NonZeroU32::MIN,
            items: Vec1::from(item),
        };
        let resp = imap_codec::imap_types::response::Response::Data(data);
        let out = imap_codec::ResponseCodec::default().encode(&resp).dump();
        String::from_utf8(out).unwrap()
    }

    /// As Dovecot 2.3 answers for the same message: extension data of every part,
    /// names and types as written, RFC 2231 parameters joined after the others.
    #[test]
    fn extension_data_as_dovecot_writes_it() {
        let raw: &[u8] = b"Content-Type: Multipart/Mixed; boundary=\"XX\"; charset=UTF-8\r\n\
Content-Language: en (English), de-AT\r\n\r\n--XX\r\n\
Content-Type: text/plain; Format=flowed\r\nContent-Disposition: inline\r\n\
Content-Location: http://example.org/\r\n a\r\nContent-MD5: Q2hlY2s=\r\nContent-ID:  <i@x> \r\n\r\n\
one\r\n--XX\r\nContent-Type: application/pdf; name*0=\"a \\\"b\\\"\"; name*1*=%41; x=y\r\n\
Content-Disposition: Attachment; filename*=utf-8''%C3%A4.pdf; size=3\r\n\r\nAAEC\r\n--XX--\r\n";
        assert_eq!(
            encoded(raw, true),
            "* 1 FETCH (BODYSTRUCTURE ((\"TEXT\" \"plain\" (\"Format\" \"flowed\" \"charset\" \
             \"us-ascii\") \"<i@x> \" NIL \"7bit\" 3 0 \"Q2hlY2s=\" (\"inline\" NIL) NIL \
             \"http://example.org/ a\")(\"application\" \"pdf\" (\"x\" \"y\" \"name*\" \
             \"''a \\\"b\\\"%41\") NIL NIL \"7bit\" 4 NIL (\"Attachment\" (\"size\" \"3\" \
             \"filename*\" \"utf-8''%C3%A4.pdf\")) NIL NIL) \"Mixed\" (\"boundary\" \"XX\" \
             \"charset\" \"UTF-8\") NIL (\"en\" \"de-AT\") NIL))\r\n"
        );
        assert_eq!(
            encoded(raw, false),
            "* 1 FETCH (BODY ((\"TEXT\" \"plain\" (\"Format\" \"flowed\" \"charset\" \
             \"us-ascii\") \"<i@x> \" NIL \"7bit\" 3 0)(\"application\" \"pdf\" (\"x\" \"y\" \
             \"name*\" \"''a \\\"b\\\"%41\") NIL NIL \"7bit\" 4) \"Mixed\"))\r\n"
        );
    }

    #[test]
    fn a_nested_message_is_described() {
        let raw: &[u8] = b"Content-Type: multipart/mixed; boundary=B\r\n\r\n--B\r\n\
Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n\
hello\r\nworld\r\n--B\r\nContent-Type: image/png; name=\"a b.png\"\r\nContent-ID: <i@x>\r\n\
Content-Transfer-Encoding: base64\r\n\r\niVBO\r\n--B--\r\n";
        let out = encoded(raw, false);
        assert_eq!(
            out,
            "* 1 FETCH (BODY ((\"TEXT\" \"plain\" (\"charset\" \"utf-8\") NIL NIL \
             \"quoted-printable\" 12 1)(\"image\" \"png\" (\"name\" \"a b.png\") \"<i@x>\" NIL \
             \"base64\" 4) \"mixed\"))\r\n"
        );
    }
}
