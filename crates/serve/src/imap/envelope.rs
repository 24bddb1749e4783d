//! FETCH ENVELOPE: the Date, Subject, In-Reply-To and Message-ID fields as the message has
//! them (unfolded, encoded words left as they are, as Dovecot sends them), and the address
//! fields parsed by mail-parser, each field on its own (the first of its name; the body is
//! never parsed here). On its own: what a field gives never depends on the fields around
//! it (mail-parser reading a date that ends in `UT` takes the next line with it), so the
//! header cache's compact header (`super::headers`) gives the ENVELOPE the whole header
//! gives. Sender and Reply-To default to From (RFC 3501, 7.4.2). A group is listed as
//! RFC 3501 has it: `(NIL NIL "name" NIL)`, its addresses, `(NIL NIL NIL NIL)`.

use super::mime::raw_field;
use imap_codec::imap_types::core::{IString, NString};
use imap_codec::imap_types::envelope::{Address, Envelope};

/// The ENVELOPE of a message whose header is `header`.
pub fn envelope(header: &[u8]) -> Envelope<'static> {
    let addrs = |name: &str| -> Vec<Address<'static>> {
        let Some(value) = raw_field(header, name.as_bytes()) else {
            return Vec::new();
        };
        let field = [name.as_bytes(), b": ", &value, b"\r\n\r\n"].concat();
        let parsed = mail_parser::MessageParser::new().parse_headers(&field);
        match parsed.as_ref().and_then(|m| m.header(name)?.as_address()) {
            Some(mail_parser::Address::Group(groups)) => groups.iter().flat_map(group).collect(),
            Some(a) => a.iter().filter_map(address).collect(),
            None => Vec::new(),
        }
    };
    let from = addrs("From");
    let or_from = |v: Vec<Address<'static>>| if v.is_empty() { from.clone() } else { v };
    Envelope {
        date: nstring(raw_field(header, b"Date")),
        subject: nstring(raw_field(header, b"Subject")),
        sender: or_from(addrs("Sender")),
        reply_to: or_from(addrs("Reply-To")),
        to: addrs("To"),
        cc: addrs("Cc"),
        bcc: addrs("Bcc"),
        in_reply_to: nstring(raw_field(header, b"In-Reply-To")),
        message_id: nstring(raw_field(header, b"Message-ID")),
        from,
    }
}

/// A group's addresses between its markers (a group without a name, as mail-parser
/// gives the addresses around groups, without them).
fn group(g: &mail_parser::Group<'_>) -> Vec<Address<'static>> {
    let marker = |mailbox: Option<&str>| Address {
        name: NString(None),
        adl: NString(None),
        mailbox: nstring(mailbox.map(|m| m.as_bytes().to_vec())),
        host: NString(None),
    };
    let inner = g.addresses.iter().filter_map(address);
    match g.name.as_deref() {
        Some(name) => std::iter::once(marker(Some(name)))
            .chain(inner)
            .chain(std::iter::once(marker(None)))
            .collect(),
        None => inner.collect(),
    }
}

fn address(a: &mail_parser::Addr<'_>) -> Option<Address<'static>> {
    let full = a.address.as_deref()?;
    let (mailbox, host) = full.rsplit_once('@').unwrap_or((full, ""));
    let name = a.name.as_deref().map(|n| n.as_bytes().to_vec());
    Some(Address {
        name: nstring(name),
        adl: NString(None),
        mailbox: nstring(Some(mailbox.as_bytes().to_vec())),
        host: nstring(Some(host.as_bytes().to_vec())),
    })
}

/// NIL for nothing, else a quoted string or a literal as the codec chooses (a value with
/// a NUL byte, which neither can carry, is NIL).
fn nstring(v: Option<Vec<u8>>) -> NString<'static> {
    NString(v.and_then(|v| IString::try_from(v).ok()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: &NString<'_>) -> Option<String> {
        n.0.as_ref()
            .map(|i| String::from_utf8_lossy(i.as_ref()).into_owned())
    }

    #[test]
    fn fields_and_addresses() {
        let h = b"From: Bob <bob@example.org>\r\nTo: a@example.org, \"C, D\" <c@example.net>\r\n\
            Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\n two\r\nDate: Mon, 01 Jan 2024 10:00:00 +0000\r\n\
            Message-ID: <x@y>\r\n\r\n";
        let e = envelope(h);
        assert_eq!(
            s(&e.subject).as_deref(),
            Some("=?utf-8?q?Gr=C3=BC=C3=9Fe?= two")
        );
        assert_eq!(
            s(&e.date).as_deref(),
            Some("Mon, 01 Jan 2024 10:00:00 +0000")
        );
        assert_eq!(s(&e.message_id).as_deref(), Some("<x@y>"));
        assert_eq!(e.in_reply_to.0, None);
        assert_eq!(e.from.len(), 1);
        assert_eq!(s(&e.from[0].name).as_deref(), Some("Bob"));
        assert_eq!(s(&e.from[0].mailbox).as_deref(), Some("bob"));
        assert_eq!(s(&e.from[0].host).as_deref(), Some("example.org"));
        assert_eq!(e.sender, e.from);
        assert_eq!(e.reply_to, e.from);
        assert_eq!(e.to.len(), 2);
        assert_eq!(s(&e.to[1].name).as_deref(), Some("C, D"));
        assert!(e.cc.is_empty() && e.bcc.is_empty());
        let g = envelope(b"To: undisclosed-recipients:;\r\nCc: Team: a@x, B <b@y>;, c@z\r\n\r\n");
        let names = |v: &[Address<'_>]| -> Vec<(Option<String>, Option<String>)> {
            v.iter().map(|a| (s(&a.mailbox), s(&a.host))).collect()
        };
        let some = |x: &str| Some(x.to_string());
        assert_eq!(
            names(&g.to),
            [(some("undisclosed-recipients"), None), (None, None)]
        );
        assert_eq!(
            names(&g.cc),
            [
                (some("Team"), None),
                (some("a"), some("x")),
                (some("b"), some("y")),
                (None, None),
                (some("c"), some("z")),
            ]
        );
        let empty = envelope(b"");
        assert!(empty.from.is_empty() && empty.subject.0.is_none());
    }
}
