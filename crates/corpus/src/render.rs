//! Message bytes of a planned event: the part every recipient's copy shares (sender-side
//! `Received:` and DKIM lines, the header block, the MIME body) and the per-recipient
//! delivery trace (`Return-Path`, `X-Original-To`, `Delivered-To`, the receiving
//! `Received:` lines) that goes on top of it. Pure: bytes out of the plan, no files.

use std::io::Write as _;

use rand::{Rng as _, RngCore as _};

use crate::date::rfc5322;
use crate::encode::{base64, base64_lines, quoted_printable};
use crate::plan::{Attachment, Event, Kind, Odd, Party};
use crate::rng::{derive, rng_for, Rng};
use crate::words::{
    body_text, capitalize, subject, EIGHT_BIT_NAMES, EIGHT_BIT_SUBJECTS, MAILERS, TITLES,
};
use crate::world::World;

/// Appends formatted text to a byte buffer (writing to a `Vec` cannot fail).
macro_rules! put {
    ($out:expr, $($arg:tt)*) => {{
        let _ = write!($out, $($arg)*);
    }};
}

/// Reusable buffers of one rendering thread.
#[derive(Default)]
pub(crate) struct Scratch {
    text: Vec<u8>,
    parent: Vec<u8>,
    html: Vec<u8>,
    payload: Vec<u8>,
}

const QID_CHARS: &[u8] = b"0123456789BCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz";
const ID_CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn random_chars(rng: &mut Rng, alphabet: &[u8], n: usize) -> String {
    (0..n)
        .map(|_| char::from(alphabet[rng.gen_range(0..alphabet.len())]))
        .collect()
}

/// A Postfix long queue id.
fn queue_id(rng: &mut Rng) -> String {
    random_chars(rng, QID_CHARS, 15)
}

fn domain_of(address: &str) -> &str {
    address.rsplit_once('@').map_or(address, |(_, d)| d)
}

/// (display name, address) of a party.
fn party(w: &World, p: Party) -> (&str, &str) {
    match p {
        Party::Account(a) => (&w.accounts[a].display, &w.accounts[a].address),
        Party::External(e) => (&w.externals[e].name, &w.externals[e].address),
        Party::List(l) => (&w.lists[l].description, &w.lists[l].address),
    }
}

fn mailbox(name: &str, address: &str) -> String {
    if name.bytes().any(|b| b"()<>[]:;@\\,.\"".contains(&b)) {
        format!("\"{name}\" <{address}>")
    } else {
        format!("{name} <{address}>")
    }
}

fn from_display(w: &World, ev: &Event) -> String {
    let (name, address) = party(w, ev.from);
    if ev.odd == Odd::EightBit {
        let name = EIGHT_BIT_NAMES[(ev.seed % EIGHT_BIT_NAMES.len() as u64) as usize];
        return mailbox(name, address);
    }
    mailbox(name, address)
}

fn address_list(w: &World, parties: &[Party]) -> String {
    parties
        .iter()
        .map(|&p| {
            let (name, address) = party(w, p);
            mailbox(name, address)
        })
        .collect::<Vec<_>>()
        .join(",\n ")
}

/// The subject of event `idx`, with `Re:`/`Fwd:` and list tag.
pub(crate) fn subject_of(w: &World, evs: &[Event], idx: usize) -> String {
    let ev = &evs[idx];
    if ev.odd == Odd::EightBit {
        return EIGHT_BIT_SUBJECTS[(ev.seed % EIGHT_BIT_SUBJECTS.len() as u64) as usize]
            .to_string();
    }
    let base = subject(&mut rng_for(ev.subject_seed, 4));
    let tag = match ev.list {
        Some(l) if !w.lists[l].internal => format!("[{}] ", w.lists[l].name),
        _ => String::new(),
    };
    let prefix = match (ev.parent, ev.forward) {
        (Some(_), true) => "Fwd: ",
        (Some(_), false) => "Re: ",
        (None, _) => "",
    };
    format!("{prefix}{tag}{base}")
}

fn message_id(w: &World, ev: &Event) -> String {
    let (_, from) = party(w, ev.from);
    format!(
        "<{}.{:016x}@{}>",
        ev.date,
        derive(ev.seed, 3),
        domain_of(from)
    )
}

/// Greeting, new text, closing and signature of an event (no quoted history).
fn own_text(w: &World, ev: &Event, out: &mut Vec<u8>) {
    let mut rng = rng_for(ev.seed, 2);
    let greeting_name = match ev.to.first() {
        Some(Party::Account(a)) => capitalize(w.accounts[*a].first_name()),
        Some(Party::External(e)) => w.externals[*e]
            .name
            .split(' ')
            .next()
            .unwrap_or("")
            .to_string(),
        _ => "all".to_string(),
    };
    match rng.gen_range(0..4) {
        0 => put!(out, "Hi {greeting_name},\n\n"),
        1 => put!(out, "Hello {greeting_name},\n\n"),
        2 => put!(out, "Dear {greeting_name},\n\n"),
        _ => {}
    }
    body_text(&mut rng, ev.text_len, out);
    let (name, address) = party(w, ev.from);
    let first = name.split(' ').next().unwrap_or(name);
    match rng.gen_range(0..3) {
        0 => put!(out, "\nBest regards,\n{first}\n"),
        1 => put!(out, "\nThanks,\n{first}\n"),
        _ => put!(out, "\nCheers,\n{first}\n"),
    }
    // The signature is a property of the sender: the same in all their mail.
    let h = derive(address.len() as u64, address.bytes().map(u64::from).sum());
    let title = TITLES[(h % TITLES.len() as u64) as usize];
    let company = domain_of(address).split('.').next().unwrap_or("");
    put!(
        out,
        "\n-- \n{name}\n{title}, {}\nPhone: +1 555 01{:02}\n",
        capitalize(company),
        h % 100
    );
}

/// Full plain text of event `idx`: own text, then the quoted or forwarded parent.
fn compose_text(w: &World, evs: &[Event], idx: usize, s: &mut Scratch) {
    let ev = &evs[idx];
    s.text.clear();
    own_text(w, ev, &mut s.text);
    let Some(pi) = ev.parent else { return };
    let parent = &evs[pi];
    s.parent.clear();
    own_text(w, parent, &mut s.parent);
    let (pname, paddr) = party(w, parent.from);
    if ev.forward {
        put!(
            s.text,
            "\n---------- Forwarded message ---------\nFrom: {}\nDate: {}\nSubject: {}\nTo: {}\n\n",
            mailbox(pname, paddr),
            rfc5322(parent.date, parent.tz),
            subject_of(w, evs, pi),
            address_list(w, &parent.to).replace("\n ", " ")
        );
        let cut = cut_at_line(&s.parent, 6000);
        s.text.extend_from_slice(&s.parent[..cut]);
    } else {
        put!(
            s.text,
            "\nOn {}, {} <{}> wrote:\n",
            rfc5322(parent.date, parent.tz),
            pname,
            paddr
        );
        let cut = cut_at_line(&s.parent, 3000);
        for line in s.parent[..cut].split_inclusive(|b| *b == b'\n') {
            s.text
                .extend_from_slice(if line == b"\n" { b">" } else { b"> " });
            s.text.extend_from_slice(line);
        }
    }
}

/// Length of the longest prefix of whole lines not over `max` bytes.
fn cut_at_line(text: &[u8], max: usize) -> usize {
    if text.len() <= max {
        return text.len();
    }
    text[..max]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(max, |p| p + 1)
}

fn html_of(text: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(
        b"<html>\n<head>\n<meta http-equiv=\"Content-Type\" content=\"text/html; charset=utf-8\">\n</head>\n<body>\n<div dir=\"ltr\">\n",
    );
    for para in text
        .split(|b| *b == b'\n')
        .collect::<Vec<_>>()
        .split(|l| l.is_empty())
    {
        if para.is_empty() {
            continue;
        }
        out.extend_from_slice(b"<p style=\"margin:0 0 1em 0\">");
        for (i, line) in para.iter().enumerate() {
            if i > 0 {
                out.extend_from_slice(b"<br>\n");
            }
            for &b in *line {
                match b {
                    b'<' => out.extend_from_slice(b"&lt;"),
                    b'>' => out.extend_from_slice(b"&gt;"),
                    b'&' => out.extend_from_slice(b"&amp;"),
                    _ => out.push(b),
                }
            }
        }
        out.extend_from_slice(b"</p>\n");
    }
    out.extend_from_slice(b"</div>\n</body>\n</html>\n");
}

fn text_part(text: &[u8], out: &mut Vec<u8>) {
    let cte = if text.is_ascii() { "7bit" } else { "8bit" };
    put!(
        out,
        "Content-Type: text/plain; charset=\"utf-8\"\nContent-Transfer-Encoding: {cte}\n\n"
    );
    out.extend_from_slice(text);
}

fn alternative(boundary: &str, s: &mut Scratch, out: &mut Vec<u8>) {
    put!(
        out,
        "Content-Type: multipart/alternative; boundary=\"{boundary}\"\n\n--{boundary}\n"
    );
    text_part(&s.text, out);
    put!(
        out,
        "--{boundary}\nContent-Type: text/html; charset=\"utf-8\"\nContent-Transfer-Encoding: quoted-printable\n\n"
    );
    html_of(&s.text, &mut s.html);
    quoted_printable(&s.html, out);
    put!(out, "--{boundary}--\n");
}

fn attachment(a: &Attachment, s: &mut Scratch, out: &mut Vec<u8>) {
    let name = a.file_name();
    put!(
        out,
        "Content-Type: {}; name=\"{name}\"\nContent-Disposition: attachment; filename=\"{name}\"\nContent-Transfer-Encoding: base64\n\n",
        a.mime()
    );
    s.payload.resize(a.len, 0);
    rng_for(a.seed, 7).fill_bytes(&mut s.payload);
    base64_lines(&s.payload, out);
}

fn boundary(rng: &mut Rng) -> String {
    match rng.gen_range(0..3) {
        0 => format!("000000000000{:012x}", rng.gen::<u64>() & 0xffff_ffff_ffff),
        1 => format!(
            "----=_Part_{}_{}.{}",
            rng.gen_range(100..99_999),
            rng.gen_range(1..9_999_999),
            rng.gen::<u32>()
        ),
        _ => format!(
            "=-{}",
            random_chars(rng, ID_CHARS, 22).replace(['+', '/'], "x")
        ),
    }
}

/// Does the message travel from outside (sender-side trace and DKIM in the shared part)?
fn from_outside(ev: &Event) -> bool {
    matches!(ev.from, Party::External(_))
}

/// The shared part of event `idx`: what every copy has after its own trace lines.
pub(crate) fn render_shared(
    w: &World,
    evs: &[Event],
    idx: usize,
    out: &mut Vec<u8>,
    s: &mut Scratch,
) {
    let ev = &evs[idx];
    out.clear();
    let mut rng = rng_for(ev.seed, 1);
    let date = rfc5322(ev.date, ev.tz);
    let (_, from_addr) = party(w, ev.from);
    let from_domain = domain_of(from_addr).to_string();
    let out_host = format!("mail-out{}.{from_domain}", rng.gen_range(1..5));
    let list = ev.list.map(|l| &w.lists[l]).filter(|l| !l.internal);

    if from_outside(ev) {
        if let Some(list) = list {
            put!(
                out,
                "Received: from {out_host} ({out_host} [203.0.113.{}])\n\tby {} (Postfix) with ESMTPS id {};\n\t{}\n",
                rng.gen_range(2..250),
                list.host,
                queue_id(&mut rng),
                rfc5322(ev.date + 2, 0)
            );
        }
        put!(
            out,
            "Received: from [192.168.{}.{}] (unknown [198.51.100.{}])\n\tby {out_host} (Postfix) with ESMTPSA id {};\n\t{date}\n",
            rng.gen_range(0..255),
            rng.gen_range(2..255),
            rng.gen_range(2..255),
            queue_id(&mut rng)
        );
        if rng.gen_range(0..10) < 8 {
            let mut sig = [0u8; 256];
            rng.fill_bytes(&mut sig);
            let mut b = Vec::with_capacity(344);
            base64(&sig, &mut b);
            let mut bh = [0u8; 32];
            rng.fill_bytes(&mut bh);
            let mut bhv = Vec::with_capacity(44);
            base64(&bh, &mut bhv);
            put!(
                out,
                "DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d={from_domain};\n\ts=mail{}; t={}; bh={};\n\th=From:To:Cc:Subject:Date:Message-ID:MIME-Version:Content-Type;\n\tb=",
                2020 + ev.seed % 5,
                ev.date,
                String::from_utf8_lossy(&bhv)
            );
            for (i, chunk) in b.chunks(70).enumerate() {
                if i > 0 {
                    out.extend_from_slice(b"\n\t ");
                }
                out.extend_from_slice(chunk);
            }
            out.push(b'\n');
        }
    }

    put!(
        out,
        "Message-ID: {}\nDate: {date}\nFrom: {}\n",
        message_id(w, ev),
        from_display(w, ev)
    );
    if let Some(list) = list {
        put!(
            out,
            "Sender: \"{}\" <{}-bounces@{}>\n",
            list.name,
            list.name,
            list.host
        );
    }
    put!(out, "To: {}\n", address_list(w, &ev.to));
    if !ev.cc.is_empty() {
        put!(out, "Cc: {}\n", address_list(w, &ev.cc));
    }
    put!(out, "Subject: {}\n", subject_of(w, evs, idx));
    if let Some(p) = ev.parent {
        let pid = message_id(w, &evs[p]);
        if !ev.forward {
            put!(out, "In-Reply-To: {pid}\n");
        }
        put!(out, "References: {pid}\n");
    }
    if let Some(list) = list {
        put!(
            out,
            "List-Id: {} <{}.{}>\nList-Unsubscribe: <mailto:{}-leave@{}>,\n <https://{}/mailman/options/{}>\nList-Archive: <https://{}/archives/{}>\nList-Post: <mailto:{}>\nPrecedence: list\n",
            list.description, list.name, list.host, list.name, list.host, list.host, list.name, list.host, list.name, list.address
        );
    }
    if ev.kind == Kind::Draft {
        out.extend_from_slice(
            b"X-Mozilla-Draft-Info: internal/draft; vcard=0; receipt=0; DSN=0; uuencode=0\n",
        );
    }
    out.extend_from_slice(b"MIME-Version: 1.0\n");
    let mailer = MAILERS[(derive(ev.seed, 5) % MAILERS.len() as u64) as usize];

    compose_text(w, evs, idx, s);
    match (ev.attachments.is_empty(), ev.html) {
        (true, false) => {
            put!(out, "{mailer}\n");
            text_part(&s.text, out);
        }
        (true, true) => {
            put!(out, "{mailer}\n");
            let b = boundary(&mut rng);
            alternative(&b, s, out);
        }
        (false, html) => {
            let b = boundary(&mut rng);
            put!(
                out,
                "{mailer}\nContent-Type: multipart/mixed; boundary=\"{b}\"\n\n"
            );
            if rng.gen_range(0..2) == 0 {
                out.extend_from_slice(b"This is a multi-part message in MIME format.\n");
            }
            put!(out, "--{b}\n");
            if html {
                let inner = boundary(&mut rng);
                alternative(&inner, s, out);
            } else {
                text_part(&s.text, out);
            }
            for a in &ev.attachments {
                put!(out, "\n--{b}\n");
                attachment(a, s, out);
            }
            put!(out, "--{b}--\n");
        }
    }
    match ev.odd {
        Odd::Crlf => to_crlf(out),
        Odd::NoFinalNewline => {
            out.pop();
        }
        Odd::None | Odd::EightBit => {}
    }
}

/// The delivery trace of copy `di` of `ev`: empty for Sent and Drafts copies.
pub(crate) fn render_trace(w: &World, ev: &Event, di: usize, out: &mut Vec<u8>) {
    out.clear();
    let d = &ev.deliveries[di];
    if !d.trace {
        return;
    }
    let mut rng = rng_for(ev.seed, 100 + di as u64);
    let acct = &w.accounts[d.account];
    let addr = &acct.address;
    let dom = &w.domains[acct.domain];
    let host = &w.hosts[acct.host % w.hosts.len()];
    let date = rfc5322(d.time, 0);
    let (_, from_addr) = party(w, ev.from);
    let list = ev.list.map(|l| &w.lists[l]);
    let envelope = match list {
        Some(l) if !l.internal => {
            let (user, udom) = addr.split_once('@').unwrap_or((addr, ""));
            format!("{}-bounces+{user}={udom}@{}", l.name, l.host)
        }
        _ if from_outside(ev) && derive(ev.seed, 6).is_multiple_of(3) => {
            format!(
                "bounce-{:x}@{}",
                derive(ev.seed, 8) & 0xffff_ffff,
                domain_of(from_addr)
            )
        }
        _ => from_addr.to_string(),
    };
    put!(out, "Return-Path: <{envelope}>\n");
    match list {
        Some(l) if l.internal => put!(out, "X-Original-To: {}\n", l.address),
        _ if acct.x_original_to => put!(out, "X-Original-To: {addr}\n"),
        _ => {}
    }
    put!(
        out,
        "Delivered-To: {addr}\nReceived: from mx.{dom}\n\tby {host}.{dom} with LMTP\n\tid {}\n\t(envelope-from <{envelope}>)\n\tfor <{addr}>; {date}\n",
        random_chars(&mut rng, ID_CHARS, 22)
    );
    if from_outside(ev) {
        let relay = match list {
            Some(l) if !l.internal => l.host.clone(),
            _ => format!(
                "mail-out{}.{}",
                derive(ev.seed, 9) % 4 + 1,
                domain_of(from_addr)
            ),
        };
        put!(
            out,
            "Received: from {relay} ({relay} [203.0.113.{}])\n\t(using TLSv1.3 with cipher TLS_AES_256_GCM_SHA384 (256/256 bits)\n\t key-exchange X25519 server-signature RSA-PSS (2048 bits) server-digest SHA256)\n\t(No client certificate requested)\n\tby mx.{dom} (Postfix) with ESMTPS id {}\n\tfor <{addr}>; {date}\n",
            derive(ev.seed, 10) % 250 + 2,
            queue_id(&mut rng)
        );
    } else {
        put!(
            out,
            "Received: from [192.168.{}.{}] (unknown [198.51.100.{}])\n\t(Authenticated sender: {from_addr})\n\tby smtp.{dom} (Postfix) with ESMTPSA id {}\n\tfor <{addr}>; {date}\n",
            derive(ev.seed, 11) % 255,
            derive(ev.seed, 12) % 253 + 2,
            derive(ev.seed, 13) % 253 + 2,
            queue_id(&mut rng)
        );
    }
    if ev.odd == Odd::Crlf {
        to_crlf(out);
    }
}

fn to_crlf(buf: &mut Vec<u8>) {
    let lf = buf.iter().filter(|b| **b == b'\n').count();
    let mut out = Vec::with_capacity(buf.len() + lf);
    for &b in buf.iter() {
        if b == b'\n' {
            out.push(b'\r');
        }
        out.push(b);
    }
    *buf = out;
}

/// Bytes a message grows by with CRLF line ends: its bare LFs (for Dovecot's `W=`).
pub(crate) fn bare_lfs(buf: &[u8]) -> usize {
    let mut n = 0;
    let mut prev = 0u8;
    for &b in buf {
        if b == b'\n' && prev != b'\r' {
            n += 1;
        }
        prev = b;
    }
    n
}
