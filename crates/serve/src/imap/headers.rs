//! The header cache: what a mail client's message list asks for, kept per message content
//! so that a first sync of a large folder, and every later one, reads no message twice.
//!
//! A client that opens a folder fetches a few header fields of every message (Thunderbird:
//! `BODY.PEEK[HEADER.FIELDS (From To Cc Bcc Subject Date Message-ID Priority X-Priority
//! References Newsgroups In-Reply-To Content-Type Reply-To)]`; others ENVELOPE). The first
//! time a message's header is needed, its lines of the fields in
//! [`LISTED`](mailvault_core::mail::header::LISTED) (each with its
//! continuation lines, in the message's order, then an empty line: the *compact header*)
//! are kept here, keyed by the message's content hash, shared by every session. A later
//! FETCH of those fields or of ENVELOPE is answered from them without reading the message
//! from the repository: byte for byte what the whole message gives, because the compact
//! header holds every line those answers take, in order.
//!
//! Bounded by [`MAX_BYTES`] in all (least recently used first out): about 300 bytes a
//! message, so a folder of 100,000 messages stays cached whole. It lives in memory only, as
//! the opened repository does: it holds decrypted mail, and is never written anywhere.

use lru::LruCache;
use mailvault_core::mail::header::compact;
use mailvault_core::repo::id::Id;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

/// Bytes of compact headers kept at most, for all sessions.
pub const MAX_BYTES: usize = 96 << 20;

/// Compact headers by message content, shared by every session of the server.
pub struct HeaderCache {
    inner: Mutex<Inner>,
    /// Compact headers given, by where they came from ([`Origin`]): `/metrics` shows them.
    given: [AtomicU64; 3],
}

/// Where a compact header came from.
#[derive(Clone, Copy, Debug)]
pub enum Origin {
    /// The header file of a split of the search index.
    Index,
    /// This cache.
    Cache,
    /// The message, read from the repository (then kept here).
    Read,
}

struct Inner {
    map: LruCache<Id, Arc<[u8]>>,
    bytes: usize,
    limit: usize,
}

impl Default for HeaderCache {
    fn default() -> HeaderCache {
        HeaderCache::with_limit(MAX_BYTES)
    }
}

impl HeaderCache {
    pub fn with_limit(limit: usize) -> HeaderCache {
        HeaderCache {
            inner: Mutex::new(Inner {
                map: LruCache::unbounded(),
                bytes: 0,
                limit,
            }),
            given: Default::default(),
        }
    }

    /// Counts a compact header given from `from`.
    pub fn given(&self, from: Origin) {
        self.given[from as usize].fetch_add(1, Relaxed);
    }

    /// The counts of [`Self::given`] in Prometheus' text format.
    pub fn metrics(&self) -> String {
        let name = "mailvault_imap_compact_headers_total";
        let mut out = format!(
            "# HELP {name} Compact headers the IMAP view gave (message lists, ENVELOPE, header \
             searches), by where they came from.\n# TYPE {name} counter\n"
        );
        for (from, label) in [
            (Origin::Index, "index"),
            (Origin::Cache, "cache"),
            (Origin::Read, "read"),
        ] {
            let n = self.given[from as usize].load(Relaxed);
            out.push_str(&format!("{name}{{from=\"{label}\"}} {n}\n"));
        }
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::state::lock(&self.inner)
    }

    /// The compact header of content `hash`, if kept.
    pub fn get(&self, hash: &Id) -> Option<Arc<[u8]>> {
        self.lock().map.get(hash).cloned()
    }

    /// Keeps the compact header of content `hash` (made from its bytes `raw`); returns it.
    pub fn put(&self, hash: Id, raw: &[u8]) -> Arc<[u8]> {
        let c: Arc<[u8]> = compact(raw).into();
        let mut g = self.lock();
        let cost = c.len() + std::mem::size_of::<Id>() + 32;
        if let Some(old) = g.map.put(hash, c.clone()) {
            g.bytes -= old.len() + std::mem::size_of::<Id>() + 32;
        }
        g.bytes += cost;
        while g.bytes > g.limit {
            match g.map.pop_lru() {
                Some((_, v)) => g.bytes -= v.len() + std::mem::size_of::<Id>() + 32,
                None => break,
            }
        }
        c
    }

    /// Bytes held now.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }
}

/// The messages of testdata's corpus, and a few made to trip a parser.
#[cfg(test)]
pub fn corpus() -> Vec<Vec<u8>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/spamassassin");
    let mut msgs: Vec<Vec<u8>> = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            match p.is_dir() {
                true => dirs.push(p),
                false if d != root => msgs.push(std::fs::read(&p).unwrap()),
                false => {}
            }
        }
    }
    assert!(msgs.len() > 100, "the corpus is there: {}", msgs.len());
    msgs.push(b"From: a\n (comment)\n  <a@x>\nSubject:\tx\nsubject: second\nX: y\n\nb".to_vec());
    msgs.push(
        b" folded first\r\nTo: undisclosed-recipients:;\r\nCc: g: a@x, b@y;\r\n\r\n".to_vec(),
    );
    msgs.push(
        b"Date: Mon, 1 Jan 2024 00:00:00 UT\r\nFrom: =?utf-8?q?J=C3=BCrgen?= <j@x>\r\n".to_vec(),
    );
    msgs
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message of testdata's corpus, and a few made to trip a parser: ENVELOPE and
    /// the fields clients list, taken from the compact header, are what the whole message
    /// gives.
    #[test]
    fn answers_from_the_compact_header_are_those_of_the_whole_message() {
        use imap_codec::encode::Encoder;
        use imap_codec::imap_types::core::{AString, Vec1};
        use imap_codec::imap_types::fetch::{MessageDataItemName, Section};
        let msgs = corpus();
        let names: Vec<AString> = mailvault_core::mail::header::LISTED
            .iter()
            .map(|f| AString::try_from(*f).unwrap())
            .collect();
        let list = MessageDataItemName::BodyExt {
            section: Some(Section::HeaderFields(None, Vec1::try_from(names).unwrap())),
            partial: None,
            peek: true,
        };
        let items = vec![MessageDataItemName::Envelope, list];
        assert_eq!(
            super::super::fetch::needs(&items),
            super::super::fetch::Needs::Listed
        );
        let encode = |raw: &[u8]| {
            let m = super::super::fetch::test_message(1, raw.len() as u64);
            let data = super::super::fetch::items(&m, &items, Some(raw));
            let d = imap_codec::imap_types::response::Data::Fetch {
                seq: std::num::NonZeroU32::MIN,
                items: Vec1::try_from(data).unwrap(),
            };
            imap_codec::ResponseCodec::default()
                .encode(&imap_codec::imap_types::response::Response::Data(d))
                .dump()
        };
        for raw in &msgs {
            let whole = encode(raw);
            assert_eq!(
                String::from_utf8_lossy(&encode(&compact(raw))),
                String::from_utf8_lossy(&whole),
            );
        }
    }

    #[test]
    fn the_cache_is_bounded_and_drops_the_least_recently_used() {
        let c = HeaderCache::with_limit(3 * (64 + 32 + 32));
        let id = |n: u8| Id([n; 32]);
        let raw = |n: u8| format!("Subject: {}\r\n\r\n", "x".repeat(40 + n as usize));
        for n in 0..3 {
            c.put(id(n), raw(n).as_bytes());
        }
        assert!(c.get(&id(0)).is_some(), "0 used again: 1 is the oldest");
        c.put(id(3), raw(3).as_bytes());
        assert!(c.get(&id(1)).is_none() && c.get(&id(0)).is_some() && c.get(&id(3)).is_some());
        assert!(c.bytes() <= 3 * (64 + 32 + 32));
    }
}
