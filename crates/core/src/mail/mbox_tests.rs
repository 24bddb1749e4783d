//! Literal transcripts for every mbox variant and malformed case, the writer's output,
//! the incremental rule, and the reader-of-writer property.

use super::*;
use proptest::prelude::*;

fn read_all(input: &[u8]) -> Vec<MboxMessage> {
    MboxReader::new(input)
        .collect::<Result<Vec<_>, _>>()
        .expect("read")
}

fn texts(msgs: &[MboxMessage]) -> Vec<String> {
    msgs.iter()
        .map(|m| String::from_utf8_lossy(&m.bytes).into_owned())
        .collect()
}

const NOV24: i64 = 1795503600; // Tue Nov 24 07:00:00 2026 UTC

#[test]
fn mboxrd_two_messages_with_flags_and_quoting() {
    let input = b"From alice@example.org Tue Nov 24 07:00:00 2026\n\
Subject: one\n\
Status: RO\n\
X-Status: AF\n\
X-Keywords: $Label1 Junk\n\
\n\
>From the start\n\
>>From quoted\n\
From me, not a separator\n\
\n\
From MAILER-DAEMON Tue Nov 24 07:00:01 2026\n\
Subject: two\n\
\n\
body\n\
\n";
    let m = read_all(input);
    assert_eq!(m.len(), 2);
    assert_eq!(
        texts(&m),
        [
            "Subject: one\n\nFrom the start\n>From quoted\nFrom me, not a separator\n",
            "Subject: two\n\nbody\n"
        ]
    );
    assert_eq!(m[0].meta.flags, ["\\Seen", "\\Answered", "\\Flagged"]);
    assert_eq!(m[0].meta.keywords, ["$Label1", "Junk"]);
    assert_eq!(m[0].meta.internal_date, Some(NOV24));
    assert_eq!(m[0].sender.as_deref(), Some("alice@example.org"));
    assert_eq!(
        m[0].from_line.as_deref(),
        Some(&b"From alice@example.org Tue Nov 24 07:00:00 2026"[..])
    );
    assert_eq!(m[0].offset, 0);
    assert_eq!(m[1].offset, m[0].end);
    assert_eq!(&input[m[1].offset as usize..][..10], b"From MAILE");
    assert_eq!(m[1].end, input.len() as u64);
    assert!(m[1].meta.flags.is_empty());
    assert_eq!(m[1].meta.internal_date, Some(NOV24 + 1));
}

#[test]
fn mboxo_quoted_from_is_unquoted() {
    // An mboxo writer quotes `From ` only; reading as mboxrd undoes it.
    let input = b"From a Tue Nov 24 07:00:00 2026\nSubject: x\n\n>From here\n\n";
    assert_eq!(texts(&read_all(input)), ["Subject: x\n\nFrom here\n"]);
}

#[test]
fn mboxcl2_content_length_spans_from_lines() {
    let body = "From inside the body\n\nFrom x Tue Nov 24 07:00:00 2026\n";
    let input = format!(
        "From a Tue Nov 24 07:00:00 2026\nSubject: x\nContent-Length: {}\nStatus: R\n\n{body}\nFrom b Tue Nov 24 07:00:02 2026\nSubject: y\n\nz\n",
        body.len()
    );
    let m = read_all(input.as_bytes());
    assert_eq!(m.len(), 2);
    assert!(m[0].content_length);
    // Content-Length delimited the message: it is the file's, removed with Status.
    assert_eq!(m[0].bytes, format!("Subject: x\n\n{body}").as_bytes());
    assert_eq!(m[0].meta.flags, ["\\Seen"]);
    assert_eq!(texts(&m[1..]), ["Subject: y\n\nz\n"]);
    assert!(!m[1].content_length);
}

#[test]
fn dovecot_mbox_with_uids_keywords_and_content_length() {
    let input = b"From MAILER-DAEMON Tue Nov 24 07:00:00 2026\n\
Return-Path: <a@example.org>\n\
Subject: x\n\
X-IMAPbase: 1795503600 0000000003 $Label1 Junk\n\
Status: RO\n\
X-UID: 1\n\
Content-Length: 28\n\
X-Keywords: Junk\n\
\n\
body\n\
\n\
From an unquoted line\n\
\n\
From a@example.org Tue Nov 24 07:00:01 2026\n\
Subject: y\n\
X-UID: 2\n\
Status: O\n\
X-Status: F\n\
Content-Length: 2\n\
X-Keywords: $Label1 Junk\n\
\n\
z\n\
\n";
    let m = read_all(input);
    assert_eq!(
        texts(&m),
        [
            "Return-Path: <a@example.org>\nSubject: x\n\nbody\n\nFrom an unquoted line\n",
            "Subject: y\n\nz\n"
        ]
    );
    assert!(m[0].content_length && m[1].content_length);
    assert!(!m[0].folder_internal);
    assert_eq!(m[0].meta.flags, ["\\Seen"]);
    assert_eq!(m[0].meta.keywords, ["Junk"]);
    assert_eq!(m[1].meta.flags, ["\\Flagged"]);
    assert_eq!(m[1].meta.keywords, ["$Label1", "Junk"]);
}

#[test]
fn content_length_landing_on_from_line_or_end() {
    // No empty line between: the length lands on the From line.
    let input = b"From a Tue Nov 24 07:00:00 2026\nContent-Length: 2\n\nx\nFrom b Tue Nov 24 07:00:00 2026\n\ny\n";
    let m = read_all(input);
    assert_eq!(texts(&m), ["\nx\n", "\ny\n"]);
    assert!(m[0].content_length);
    // Lands on the end of input.
    let input = b"From a Tue Nov 24 07:00:00 2026\nContent-Length: 3\n\nab\n";
    let m = read_all(input);
    assert_eq!(texts(&m), ["\nab\n"]);
}

#[test]
fn content_length_that_misses_falls_back_to_lines() {
    // Too long (runs past the end), too short (lands mid-line), or pointing at a body line.
    for n in ["500", "3", "2", "bogus"] {
        let input = format!(
            "From a Tue Nov 24 07:00:00 2026\nContent-Length: {n}\n\nbody\nmore\n\nFrom b Tue Nov 24 07:00:00 2026\n\ny\n"
        );
        let m = read_all(input.as_bytes());
        assert_eq!(m.len(), 2, "{n}");
        assert!(!m[0].content_length);
        // Not the file's: kept.
        assert_eq!(
            texts(&m)[0],
            format!("Content-Length: {n}\n\nbody\nmore\n"),
            "{n}"
        );
        assert_eq!(texts(&m)[1], "\ny\n");
    }
}

#[test]
fn crlf_file_keeps_crlf() {
    let input = b"From a Tue Nov 24 07:00:00 2026\r\nSubject: x\r\nStatus: RO\r\nX-Status: D\r\n\r\n>From y\r\nbody\r\n\r\nFrom b Tue Nov 24 07:00:00 2026\r\nSubject: y\r\n\r\nz\r\n\r\n";
    let m = read_all(input);
    assert_eq!(
        texts(&m),
        [
            "Subject: x\r\n\r\nFrom y\r\nbody\r\n",
            "Subject: y\r\n\r\nz\r\n"
        ]
    );
    assert_eq!(m[0].meta.flags, ["\\Seen", "\\Deleted"]);
    assert_eq!(
        m[0].from_line.as_deref(),
        Some(&b"From a Tue Nov 24 07:00:00 2026"[..])
    );
}

#[test]
fn thunderbird_headers_open_the_block() {
    let input = b"From - Tue Nov 24 07:00:00 2026\n\
X-Mozilla-Status: 0003\n\
X-Mozilla-Status2: 00000000\n\
X-Mozilla-Keys: $label1                                                       \n\
Subject: x\n\
\n\
b\n\n";
    let m = read_all(input);
    assert_eq!(texts(&m), ["Subject: x\n\nb\n"]);
    assert_eq!(m[0].meta.flags, ["\\Seen", "\\Answered"]);
    assert_eq!(m[0].meta.keywords, ["$label1"]);
    assert_eq!(m[0].sender.as_deref(), Some("-"));
}

#[test]
fn metadata_names_inside_the_block_are_the_messages() {
    let input = b"From a Tue Nov 24 07:00:00 2026\nStatus: RO\nSubject: x\nStatus: mine\nX-UID: 7\nFrom: b\nX-Keywords: k\n  folded\nStatus: O\n\nb\n";
    let m = read_all(input);
    assert_eq!(
        texts(&m),
        ["Subject: x\nStatus: mine\nX-UID: 7\nFrom: b\n\nb\n"]
    );
    assert_eq!(m[0].meta.flags, ["\\Seen"]);
    assert_eq!(m[0].meta.keywords, ["k", "folded"]);
}

#[test]
fn folder_internal_data_message_is_marked() {
    let input = b"From MAILER-DAEMON Tue Nov 24 07:00:00 2026\n\
Date: Tue, 24 Nov 2026 07:00:00 +0000\n\
From: Mail System Internal Data <MAILER-DAEMON@mail.example.org>\n\
Subject: DON'T DELETE THIS MESSAGE -- FOLDER INTERNAL DATA\n\
X-IMAP: 1795503600 0000000002 $Label1\n\
Status: RO\n\
\n\
This text is part of the internal format of your mail folder.\n\
\n\
From a Tue Nov 24 07:00:00 2026\n\
Subject: DON'T DELETE THIS MESSAGE -- FOLDER INTERNAL DATA\n\
X-IMAP: 1\n\
\n\
x\n";
    let m = read_all(input);
    assert!(m[0].folder_internal);
    // Only the first message of a file can be.
    assert!(!m[1].folder_internal);
    assert!(!read_all(b"From a Tue Nov 24 07:00:00 2026\nX-IMAP: 1\n\nx\n")[0].folder_internal);
}

#[test]
fn leading_bytes_before_the_first_from_line_are_a_message() {
    let input = b"garbage\nmore\n\nFrom a Tue Nov 24 07:00:00 2026\n\nx\n";
    let m = read_all(input);
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].from_line, None);
    assert_eq!(m[0].bytes, b"garbage\nmore\n");
    assert_eq!(m[0].meta.internal_date, None);
    assert_eq!((m[0].offset, m[0].end), (0, 14));
    assert_eq!(m[1].offset, 14);
    assert!(read_all(b"").is_empty());
}

#[test]
fn truncated_and_unterminated_messages_are_kept_exactly() {
    let input = b"From a Tue Nov 24 07:00:00 2026\nSubject: x\n\nbo\0dy\0 without newline";
    let m = read_all(input);
    assert_eq!(m[0].bytes, b"Subject: x\n\nbo\0dy\0 without newline");
    // A header block cut short.
    let input = b"From a Tue Nov 24 07:00:00 2026\nSubject: x\nStatus: R";
    let m = read_all(input);
    assert_eq!(m[0].bytes, b"Subject: x\n");
    assert_eq!(m[0].meta.flags, ["\\Seen"]);
    // A From line and nothing else.
    let m = read_all(b"From a Tue Nov 24 07:00:00 2026");
    assert_eq!(m.len(), 1);
    assert!(m[0].bytes.is_empty());
}

#[test]
fn from_line_after_text_is_a_separator_only_with_a_date() {
    let input = b"From a Tue Nov 24 07:00:00 2026\n\nline\nFrom here on\nFrom b Wed Nov 25 07:00:00 2026\n\ny\n";
    let m = read_all(input);
    assert_eq!(texts(&m), ["\nline\nFrom here on\n", "\ny\n"]);
    assert_eq!(m[1].sender.as_deref(), Some("b"));
}

#[test]
fn from_line_dates_in_the_wild() {
    let d = |l: &str| parse_from_line(l.as_bytes()).1;
    assert_eq!(d("From a Tue Nov 24 07:00:00 2026"), Some(NOV24));
    assert_eq!(d("From a Tue Nov 24 07:00 2026"), Some(NOV24));
    assert_eq!(d("From a Tue Nov 24 07:00:00 PST 2026"), Some(NOV24));
    assert_eq!(
        d("From a Tue Nov 24 07:00:00 2026 +0100"),
        Some(NOV24 - 3600)
    );
    assert_eq!(
        d("From a Tue Nov 24 07:00:00 2026 -0130"),
        Some(NOV24 + 5400)
    );
    assert_eq!(
        d("From a Thu Nov  5 07:00:00 2026"),
        Some(NOV24 - 19 * 86400)
    );
    assert_eq!(
        d("From a Thu Nov 05 07:00:00 2026"),
        Some(NOV24 - 19 * 86400)
    );
    assert_eq!(
        d("From a Tue Nov 24 07:00:00 2026 remote from uucphost"),
        Some(NOV24)
    );
    assert_eq!(d("From a Tue, 24 Nov 2026 07:00:00 +0000"), Some(NOV24));
    assert_eq!(d("From  Tue Nov 24 07:00:00 2026"), Some(NOV24));
    assert_eq!(parse_from_line(b"From  Tue Nov 24 07:00:00 2026").0, None);
    for bad in [
        "From a",
        "From a yesterday",
        "From a Tue Nov 31 07:00:00 2026",
        "From a Tue Nov 24 25:00:00 2026",
        "From a Tue Nov 24 07:00:00 26",
        "From a Tue Nov 24 2026",
        "From the start of the story",
    ] {
        assert_eq!(d(bad), None, "{bad}");
    }
    assert_eq!(asctime(NOV24).as_deref(), Some("Tue Nov 24 07:00:00 2026"));
    assert_eq!(asctime(0).as_deref(), Some("Thu Jan  1 00:00:00 1970"));
}

#[test]
fn long_lines_are_read_in_pieces() {
    // A piece starting `From ` inside a long line is not a separator.
    let mut body = vec![b'x'; 100];
    body.extend_from_slice(b"From a Tue Nov 24 07:00:00 2026\n");
    let mut input = b"From a Tue Nov 24 07:00:00 2026\n\n".to_vec();
    input.extend_from_slice(&body);
    let m: Vec<_> = MboxReader::new(&input[..])
        .with_line_cap(100)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].bytes[1..], body[..]);
}

#[test]
fn offsets_and_consumed_from_a_later_start() {
    let input = b"From a Tue Nov 24 07:00:00 2026\n\nx\n\nFrom b Tue Nov 24 07:00:00 2026\n\ny\n\n";
    let all = read_all(input);
    let from = all[1].offset;
    let mut r = MboxReader::at(&input[from as usize..], from);
    let m = r.next().unwrap().unwrap();
    assert_eq!(m.offset, from);
    assert_eq!(m.bytes, b"\ny\n");
    assert!(r.next().is_none());
    assert_eq!(r.consumed(), input.len() as u64 - from);
    assert_eq!(r.position(), input.len() as u64);
}

#[test]
fn io_errors_carry_the_offset() {
    struct Broken(usize);
    impl io::Read for Broken {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0 == 0 {
                return Err(io::Error::other("disk gone"));
            }
            let s = b"From a Tue Nov 24 07:00:00 2026\nSubject: x\n";
            let n = s.len().min(buf.len());
            buf[..n].copy_from_slice(&s[..n]);
            self.0 -= 1;
            Ok(n)
        }
    }
    let mut r = MboxReader::new(io::BufReader::new(Broken(1)));
    match r.next() {
        Some(Err(MailError::Io { offset, .. })) => assert_eq!(offset, 43),
        other => panic!("{other:?}"),
    }
    assert!(r.next().is_none());
}

/// A 64 MiB mbox generated on the fly: read with memory for one message.
#[test]
fn a_large_mbox_streams() {
    struct Gen {
        left: u64,
        pending: Vec<u8>,
    }
    impl io::Read for Gen {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.pending.is_empty() && self.left > 0 {
                self.pending = b"From a Tue Nov 24 07:00:00 2026\nSubject: s\nStatus: RO\n\n"
                    .iter()
                    .chain([b'z'; 4000].iter())
                    .chain(b"\nFrom body\n\n".iter())
                    .copied()
                    .collect();
                self.left -= 1;
            }
            let n = self.pending.len().min(buf.len());
            buf[..n].copy_from_slice(&self.pending[..n]);
            self.pending.drain(..n);
            Ok(n)
        }
    }
    let count = 16 * 1024;
    let mut r = MboxReader::new(io::BufReader::new(Gen {
        left: count,
        pending: Vec::new(),
    }));
    let mut n = 0;
    for m in r.by_ref() {
        let m = m.unwrap();
        assert_eq!(m.bytes.len(), 12 + 4000 + 11);
        n += 1;
    }
    assert_eq!(n, count);
    assert_eq!(r.consumed(), count * (55 + 4000 + 12));
}

fn write_one(bytes: &[u8], meta: &Meta) -> (Vec<u8>, Written) {
    let mut w = MboxWriter::new(Vec::new());
    let written = w.write(bytes, meta, None).unwrap();
    (w.finish().unwrap(), written)
}

#[test]
fn writer_transcript() {
    let meta = Meta {
        flags: vec!["\\Seen".into(), "\\Answered".into(), "\\Draft".into()],
        keywords: vec!["$Label1".into(), "Junk".into()],
        internal_date: Some(NOV24),
    };
    let (out, w) = write_one(b"Subject: x\n\nFrom here\n>From there\nend", &meta);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "From MAILER-DAEMON Tue Nov 24 07:00:00 2026\n\
Subject: x\n\
Status: RO\n\
X-Status: AT\n\
X-Keywords: $Label1 Junk\n\
X-Mailvault-No-Final-Newline: yes\n\
\n\
>From here\n\
>>From there\n\
end\n\
\n"
    );
    assert_eq!((w.offset, w.len, w.lossy), (0, 168, false));
}

#[test]
fn declared_keywords_go_into_the_first_message() {
    let meta = Meta::from_imap(&["Junk"], Some(NOV24));
    let mut w = MboxWriter::new(Vec::new())
        .declare_keywords(7, &["$Label1", "Junk", "junk"])
        .unwrap();
    assert!(!w.write(b"A: 1\n\nx\n", &meta, None).unwrap().lossy);
    w.write(b"A: 2\n\ny\n", &Meta::default(), None).unwrap();
    let out = String::from_utf8(w.finish().unwrap()).unwrap();
    assert_eq!(
        out,
        "From MAILER-DAEMON Tue Nov 24 07:00:00 2026\n\
A: 1\nX-IMAPbase: 7 0 $Label1 Junk\nStatus: O\nX-Keywords: Junk\n\nx\n\n\
From MAILER-DAEMON Thu Jan  1 00:00:00 1970\nA: 2\nStatus: O\n\ny\n\n"
    );
    let m = read_all(out.as_bytes());
    assert_eq!(texts(&m), ["A: 1\n\nx\n", "A: 2\n\ny\n"]);
    assert_eq!(m[0].meta.keywords, ["Junk"]);
    // Appending to a file: its first message has the header already.
    let mut w = MboxWriter::at(Vec::new(), 100)
        .declare_keywords(7, &["Junk"])
        .unwrap();
    w.write(b"A: 3\n\nz\n", &meta, None).unwrap();
    assert!(!String::from_utf8(w.finish().unwrap())
        .unwrap()
        .contains("X-IMAPbase"));
    assert!(matches!(
        MboxWriter::new(Vec::new()).declare_keywords(1, &["a b"]),
        Err(MailError::Keyword { .. })
    ));
}

#[test]
fn writer_sender_crlf_and_offsets() {
    let mut w = MboxWriter::at(Vec::new(), 1000);
    let meta = Meta {
        internal_date: Some(NOV24),
        ..Meta::default()
    };
    let a = w
        .write(b"A: b\r\n\r\nc\r\n", &meta, Some("bob@example.org"))
        .unwrap();
    let b = w.write(b"", &meta, Some("two words")).unwrap();
    let out = String::from_utf8(w.finish().unwrap()).unwrap();
    assert_eq!(
        out,
        "From bob@example.org Tue Nov 24 07:00:00 2026\nA: b\r\nStatus: O\r\n\r\nc\r\n\n\
From MAILER-DAEMON Tue Nov 24 07:00:00 2026\nStatus: O\nX-Mailvault-No-Final-Newline: yes\n\n\n"
    );
    assert_eq!(a.offset, 1000);
    assert_eq!(b.offset, 1000 + a.len);
    let m = read_all(out.as_bytes());
    assert_eq!(texts(&m), ["A: b\r\n\r\nc\r\n", ""]);
    assert_eq!(m[0].sender.as_deref(), Some("bob@example.org"));
}

#[test]
fn a_maildir_message_exported_and_imported_is_byte_identical() {
    // A message as Dovecot delivers it into a Maildir.
    let msg = b"Return-Path: <alice@example.org>\n\
Delivered-To: bob@example.org\n\
Received: from mx.example.org\n\
\tby mail.example.org with LMTP; Tue, 24 Nov 2026 07:00:00 +0000\n\
From: Alice <alice@example.org>\n\
To: bob@example.org\n\
Subject: mbox\n\
Content-Type: text/plain\n\
\n\
From the desk of Alice:\n\
>From a quoted reply\n\
\n\
From Tue Nov 24 07:00:00 2026 a line like a separator\n";
    let meta = Meta::from_imap(&["\\Seen", "\\Flagged", "$Forwarded", "Junk"], Some(NOV24));
    let (out, w) = write_one(msg, &meta);
    assert!(!w.lossy);
    let m = read_all(&out);
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].bytes, msg);
    assert_eq!(m[0].meta, meta);
}

/// Issue 24, item 10: a message's own header lines named like mbox metadata, at either
/// end of its header block, and its own first line when it is a `From ` line, come back
/// exactly: the writer marks the headers it adds (`X-Mailvault-Added:`), and carries
/// the first line in `X-Mailvault-From-Line:`, so that other readers see the headers.
#[test]
fn own_metadata_headers_and_from_lines_come_back() {
    let meta = Meta::from_imap(&["\\Seen", "Work"], Some(NOV24));
    for msg in [
        &b"Subject: x\nStatus: RO\n\nb\n"[..],
        b"X-Mozilla-Status: 0001\nSubject: x\n\nb\n",
        b"Status: O\n",
        b"Status: O",
        b"Subject: x\r\nX-Keywords: mine\r\n\r\nb\r\n",
        b"Subject: x\nX-Mailvault-Added: Status\n\nb\n",
        b"From someone Mon Jan  1 00:00:00 2024\nSubject: x\n\nFrom b\n",
        b"From someone Mon Jan  1 00:00:00 2024\r\nStatus: RO\r\n\r\nb\r\n",
        b">From quoted\nSubject: x\n\nb\n",
        b"From x",
        b"From x\n\nbody",
    ] {
        let (out, w) = write_one(msg, &meta);
        let shown = String::from_utf8_lossy(msg);
        assert!(!w.lossy, "{shown}");
        let m = read_all(&out);
        assert_eq!(m.len(), 1, "{shown}: {}", String::from_utf8_lossy(&out));
        assert_eq!(
            m[0].bytes,
            msg,
            "{shown}: {}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(m[0].meta, meta, "{shown}");
        // What the writer added is marked, and the message's first header is a header.
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("X-Mailvault-Added: Status"), "{text}");
        let second = text.lines().nth(1).unwrap_or("");
        assert!(!second.starts_with('>') && second.contains(':'), "{text}");
    }
    // A message that needs no marker gets none: other readers see what they saw before.
    let (out, _) = write_one(b"Subject: x\n\nb\n", &meta);
    assert!(!String::from_utf8_lossy(&out).contains("X-Mailvault-Added"));
    // In the middle of the block they are the message's, and come back.
    let msg = b"Subject: x\nStatus: RO\nTo: y\n\nb\n";
    let (out, w) = write_one(msg, &meta);
    assert!(!w.lossy);
    assert_eq!(read_all(&out)[0].bytes, msg);
    // Its own Content-Length that happens to delimit it exactly is not lossy.
    let msg = b"Subject: x\nContent-Length: 2\nTo: y\n\nb\n";
    let (out, w) = write_one(msg, &meta);
    assert!(!w.lossy);
    let m = read_all(&out);
    assert!(m[0].content_length);
    assert_eq!(m[0].bytes, msg);
    // One that delimits it where its quoted body ends cannot come back: lossy.
    let msg = b"Subject: x\nContent-Length: 11\n\nFrom a\nxx\n";
    let (out, w) = write_one(msg, &meta);
    assert!(w.lossy);
    assert_ne!(read_all(&out)[0].bytes, msg);
}

fn state_of(file: &[u8], messages: u64) -> MboxState {
    MboxState::of(file.len() as u64, messages, reader_of(file)).unwrap()
}

fn reader_of(file: &[u8]) -> impl FnMut(u64, &mut [u8]) -> io::Result<()> + '_ {
    move |off, buf| {
        let s = off as usize;
        buf.copy_from_slice(&file[s..s + buf.len()]);
        Ok(())
    }
}

#[test]
fn incremental_grown_unchanged_rewritten() {
    let mut w = MboxWriter::new(Vec::new());
    let meta = Meta {
        internal_date: Some(NOV24),
        ..Meta::default()
    };
    for i in 0..3 {
        w.write(format!("Subject: {i}\n\nbody\n").as_bytes(), &meta, None)
            .unwrap();
    }
    let old = w.finish().unwrap();
    let state = state_of(&old, 3);
    let json = serde_json::to_string(&state).unwrap();
    assert_eq!(serde_json::from_str::<MboxState>(&json).unwrap(), state);
    let cmp = |file: &[u8]| state.compare(file.len() as u64, reader_of(file)).unwrap();
    assert_eq!(cmp(&old), Change::Unchanged);

    let mut w = MboxWriter::at(old.clone(), old.len() as u64);
    w.write(b"Subject: new\n\nbody\n", &meta, None).unwrap();
    let grown = w.finish().unwrap();
    assert_eq!(
        cmp(&grown),
        Change::Grown {
            from: old.len() as u64
        }
    );
    let mut r = MboxReader::at(&grown[old.len()..], old.len() as u64);
    let m: Vec<_> = r.by_ref().collect::<Result<_, _>>().unwrap();
    assert_eq!(texts(&m), ["Subject: new\n\nbody\n"]);
    assert_eq!(r.consumed(), (grown.len() - old.len()) as u64);

    // An expunge: a message gone from the middle.
    let all = read_all(&old);
    let mut expunged = old[..all[1].offset as usize].to_vec();
    expunged.extend_from_slice(&old[all[2].offset as usize..]);
    assert_eq!(cmp(&expunged), Change::Rewritten);
    // Same size, a flag changed at the end (Status R -> O would shrink: here in place).
    let mut flipped = old.clone();
    let at = flipped.len() - 8;
    flipped[at] ^= 1;
    assert_eq!(cmp(&flipped), Change::Rewritten);
    // Appended bytes that continue the last message rather than start one.
    let mut cont = old.clone();
    cont.extend_from_slice(b"more of the body\n");
    assert_eq!(cmp(&cont), Change::Rewritten);
    // A changed first byte, far from the end, in a large file.
    let mut big = old.clone();
    for i in 0..2000 {
        let mut w = MboxWriter::at(Vec::new(), 0);
        w.write(
            format!("Subject: {i}\n\n{}\n", "x".repeat(60)).as_bytes(),
            &meta,
            None,
        )
        .unwrap();
        big.extend(w.finish().unwrap());
    }
    let state = state_of(&big, 2003);
    let mut grown = big.clone();
    grown.extend_from_slice(b"From a Tue Nov 24 07:00:00 2026\n\nx\n");
    assert_eq!(
        state
            .compare(grown.len() as u64, reader_of(&grown))
            .unwrap(),
        Change::Grown {
            from: big.len() as u64
        }
    );
    grown[5] = b'X';
    assert_eq!(
        state
            .compare(grown.len() as u64, reader_of(&grown))
            .unwrap(),
        Change::Rewritten
    );
    // A file that was empty grew into anything.
    let empty = state_of(b"", 0);
    assert_eq!(
        empty.compare(3, reader_of(b"abc")).unwrap(),
        Change::Grown { from: 0 }
    );
}

fn keyword() -> impl Strategy<Value = String> {
    "[A-Za-z$][A-Za-z0-9_$.-]{0,8}"
}

/// Message bodies made of lines that stress the codec.
fn message() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        Just(b"From here\n".to_vec()),
        Just(b">From there\n".to_vec()),
        Just(b">>From x Tue Nov 24 07:00:00 2026\n".to_vec()),
        Just(b"From x Tue Nov 24 07:00:00 2026\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"Subject: s\r\n".to_vec()),
        Just(b"Subject: s\n".to_vec()),
        Just(b" folded\n".to_vec()),
        Just(b"\0nul\0\n".to_vec()),
        Just(b"X-Other: 1\n".to_vec()),
        Just(b"Status: RO\n".to_vec()),
        Just(b"X-Keywords: k\r\n".to_vec()),
        Just(b"X-Mailvault-Added: Status\n".to_vec()),
        Just(b"X-Mailvault-From-Line: From y\n".to_vec()),
        Just(b"Content-Length: 5\n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..20),
    ];
    proptest::collection::vec(line, 0..12).prop_map(|ls| ls.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn reader_of_writer_is_identity(
        msgs in proptest::collection::vec(
            (
                message(),
                proptest::collection::vec(proptest::sample::select(flags::system().to_vec()), 0..5),
                proptest::collection::vec(keyword(), 0..4),
                0i64..253_402_300_799,
            ),
            1..5,
        )
    ) {
        let mut w = MboxWriter::new(Vec::new());
        let mut want = Vec::new();
        for (bytes, f, k, date) in &msgs {
            let meta = Meta::from_imap(&f.iter().chain(k).collect::<Vec<_>>(), Some(*date));
            let written = w.write(bytes, &meta, None).unwrap();
            // Only a Content-Length of its own can make a message lossy (issue 24, item
            // 10: its own metadata headers and From lines come back).
            prop_assert!(!written.lossy || bytes.windows(15).any(|w| w == b"Content-Length:"));
            want.push((bytes.clone(), meta, written));
        }
        let out = w.finish().unwrap();
        let got = read_all(&out);
        prop_assert_eq!(got.len(), want.len());
        for (g, (bytes, meta, written)) in got.iter().zip(&want) {
            prop_assert_eq!(g.offset, written.offset);
            prop_assert_eq!(g.end, written.offset + written.len);
            // `lossy` says exactly whether the message reads back differently.
            prop_assert_eq!(written.lossy, &g.bytes != bytes || &g.meta != meta);
        }
    }
}

/// Lines an mbox may hold, well-formed or not.
fn mbox_bytes() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        Just(b"From a Tue Nov 24 07:00:00 2026\n".to_vec()),
        Just(b"From a Tue Nov 24 07:00:00 2026\r\n".to_vec()),
        Just(b"From nobody\n".to_vec()),
        Just(b"Content-Length: 3\n".to_vec()),
        Just(b"Content-Length: 0\n".to_vec()),
        Just(b"Content-Length: 99999999999999999999\n".to_vec()),
        Just(b"Status: RO\n".to_vec()),
        Just(b"X-Keywords: k\r\n".to_vec()),
        Just(b"X-Mailvault-Added: Status\n".to_vec()),
        Just(b"X-Mailvault-From-Line: From y\n".to_vec()),
        Just(b"X-Keywords: a, b\n".to_vec()),
        Just(b"X-Mozilla-Status: ffff\n".to_vec()),
        Just(b"X-Mailvault-No-Final-Newline: yes\n".to_vec()),
        Just(b"X-IMAP: 1\n".to_vec()),
        Just(b">From x\n".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b" \n".to_vec()),
        proptest::collection::vec(any::<u8>(), 0..40),
    ];
    proptest::collection::vec(line, 0..30).prop_map(|ls| ls.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    /// Whatever the input: no panic, no error, and the messages tile it, each from its
    /// offset to its end, in order, up to the end of the input.
    #[test]
    fn any_input_is_tiled_by_messages(input in mbox_bytes(), cap in 64usize..200) {
        for cap in [cap, DEFAULT_LINE_CAP] {
            let mut r = MboxReader::new(&input[..]).with_line_cap(cap);
            let mut at = 0;
            for m in r.by_ref() {
                let m = m.unwrap();
                prop_assert_eq!(m.offset, at);
                prop_assert!(m.end > m.offset);
                prop_assert!(m.bytes.len() as u64 <= m.end - m.offset);
                if let Some(l) = &m.from_line {
                    prop_assert!(input[m.offset as usize..].starts_with(l));
                }
                at = m.end;
            }
            prop_assert_eq!(at, input.len() as u64);
            prop_assert_eq!(r.consumed(), input.len() as u64);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// The fast path over body lines (whole lines the input has buffered) reads the same
    /// messages as line by line: whatever the buffer size, the same messages come out.
    #[test]
    fn buffer_size_does_not_change_the_messages(
        input in mbox_bytes(),
        cap in 64usize..200,
        buffer in 1usize..100,
    ) {
        for cap in [cap, DEFAULT_LINE_CAP] {
            let whole: Vec<MboxMessage> = MboxReader::new(&input[..])
                .with_line_cap(cap)
                .collect::<Result<_, _>>()
                .unwrap();
            let small: Vec<MboxMessage> =
                MboxReader::new(io::BufReader::with_capacity(buffer, &input[..]))
                    .with_line_cap(cap)
                    .collect::<Result<_, _>>()
                    .unwrap();
            prop_assert_eq!(whole, small);
        }
    }
}
