//! An HTTP proxy between a client and an S3 server that injects the failures object
//! storage has, and counts requests by verb (std only).
//!
//! Every connection carries one request: the proxy reads the request head and its
//! `Content-Length` body, then, for every `every`-th request (see [`FaultProxy::set_faults`]),
//! answers in turn with one of the [`Fault`]s given; otherwise it forwards the request to
//! the server with `Connection: close` (the `Host` header is kept: SigV4 signs it) and
//! copies the answer back. No connection is reused, so each request is seen, counted and
//! possibly failed on its own. Without faults it is a request counter that sees every
//! request on the wire, retries included.

use super::{io_err, HarnessError};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A failure the proxy injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// `503 Slow Down` with S3's `SlowDown` error body; the server never sees the request.
    SlowDown,
    /// The connection is closed without an answer; the server never sees the request.
    Drop,
    /// The request is forwarded and done by the server, then the connection is closed
    /// without its answer: the client cannot know that a put was stored.
    LoseAnswer,
}

/// What the proxy has seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Requests received (whole heads and bodies), faulted or not.
    pub requests: u64,
    /// Requests by verb (S3's: a GET with `list-type=` is a LIST, a POST a PUT).
    pub get: u64,
    pub put: u64,
    pub list: u64,
    pub head: u64,
    pub delete: u64,
    /// Requests answered with `503 SlowDown`.
    pub slow_downs: u64,
    /// Connections dropped before forwarding.
    pub drops: u64,
    /// Requests forwarded whose answer was dropped.
    pub lost_answers: u64,
}

impl ProxyStats {
    /// Every injected failure.
    pub fn faults(&self) -> u64 {
        self.slow_downs + self.drops + self.lost_answers
    }
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    get: AtomicU64,
    put: AtomicU64,
    list: AtomicU64,
    head: AtomicU64,
    delete: AtomicU64,
    slow_downs: AtomicU64,
    drops: AtomicU64,
    lost_answers: AtomicU64,
}

struct Shared {
    upstream: String,
    every: AtomicU64,
    kinds: Mutex<Vec<Fault>>,
    /// Requests since the fault plan was last set.
    seen: AtomicU64,
    faulted: AtomicU64,
    counts: Counters,
    /// The request lines seen, in order.
    log: Mutex<Vec<String>>,
    stopped: AtomicBool,
    /// [`FaultProxy::die_at`]'s trigger.
    die_at: Mutex<Option<String>>,
}

/// A running proxy; stopped when dropped.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
}

/// The body MinIO and AWS send with `503 Slow Down`.
const SLOW_DOWN: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";

/// How long a connection may stall before the proxy gives up on it.
const IO_TIMEOUT: Duration = Duration::from_secs(120);

impl FaultProxy {
    /// A proxy on a free port of 127.0.0.1 in front of `upstream` (`HOST:PORT`), with no
    /// faults until [`FaultProxy::set_faults`].
    pub fn start(upstream: &str) -> Result<FaultProxy, HarnessError> {
        let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("bind the proxy"))?;
        let port = l
            .local_addr()
            .map_err(io_err("the proxy's address"))?
            .port();
        let shared = Arc::new(Shared {
            upstream: upstream.into(),
            every: AtomicU64::new(0),
            kinds: Mutex::new(vec![Fault::SlowDown, Fault::Drop, Fault::LoseAnswer]),
            seen: AtomicU64::new(0),
            faulted: AtomicU64::new(0),
            counts: Counters::default(),
            log: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            die_at: Mutex::new(None),
        });
        let s = shared.clone();
        std::thread::Builder::new()
            .name(format!("fault-proxy-{port}"))
            .spawn(move || {
                for c in l.incoming() {
                    if s.stopped.load(Relaxed) {
                        break;
                    }
                    let Ok(c) = c else { continue };
                    let s = s.clone();
                    std::thread::spawn(move || {
                        let _ = serve(c, &s);
                    });
                }
            })
            .map_err(io_err("start the proxy thread"))?;
        Ok(FaultProxy { port, shared })
    }

    /// From now on every `every`-th request fails, with the `kinds` in turn (0: none).
    pub fn set_faults(&self, every: u64, kinds: &[Fault]) {
        if let Ok(mut k) = self.shared.kinds.lock() {
            *k = kinds.to_vec();
        }
        self.shared.seen.store(0, Relaxed);
        self.shared.faulted.store(0, Relaxed);
        self.shared.every.store(every, Relaxed);
    }

    /// From the first request whose request line contains `trigger` on, that one
    /// included, every request is dropped without an answer, as by a server killed at
    /// that moment (until [`FaultProxy::set_faults`] sets another plan).
    pub fn die_at(&self, trigger: &str) {
        if let Ok(mut d) = self.shared.die_at.lock() {
            *d = Some(trigger.to_string());
        }
    }

    /// `http://127.0.0.1:PORT`: the endpoint clients use instead of the server's.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// What the proxy has seen so far.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counts;
        ProxyStats {
            requests: c.requests.load(Relaxed),
            get: c.get.load(Relaxed),
            put: c.put.load(Relaxed),
            list: c.list.load(Relaxed),
            head: c.head.load(Relaxed),
            delete: c.delete.load(Relaxed),
            slow_downs: c.slow_downs.load(Relaxed),
            drops: c.drops.load(Relaxed),
            lost_answers: c.lost_answers.load(Relaxed),
        }
    }

    /// The request lines seen so far (`GET /bucket/key?query HTTP/1.1`), in order.
    pub fn requests_seen(&self) -> Vec<String> {
        self.shared
            .log
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Relaxed);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Serves one connection: one request.
fn serve(mut c: TcpStream, s: &Shared) -> std::io::Result<()> {
    c.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    let head_end = loop {
        let n = c.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let header = |name: &str| {
        head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    };
    if header("transfer-encoding").is_some() {
        // Not sent by object_store (its bodies have a known length); not supported here.
        return Err(std::io::Error::other(
            "chunked request bodies are not proxied",
        ));
    }
    let body_len: usize = header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + body_len {
        let n = c.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let request_line = head.lines().next().unwrap_or("");
    count(s, request_line);

    let fault = next_fault(s, request_line);
    let counts = &s.counts;
    match fault {
        Some(Fault::SlowDown) => {
            counts.slow_downs.fetch_add(1, Relaxed);
            write!(
                c,
                "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{SLOW_DOWN}",
                SLOW_DOWN.len()
            )?;
            return Ok(());
        }
        Some(Fault::Drop) => {
            counts.drops.fetch_add(1, Relaxed);
            return c.shutdown(Shutdown::Both);
        }
        Some(Fault::LoseAnswer) | None => {}
    }

    let mut u = TcpStream::connect(&s.upstream)?;
    u.set_read_timeout(Some(IO_TIMEOUT))?;
    let mut lines = head[..head_end - 4].split("\r\n");
    let first = lines.next().unwrap_or("");
    let rest: Vec<&str> = lines
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    let mut out = format!("{first}\r\n");
    for l in rest {
        out.push_str(l);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    u.write_all(out.as_bytes())?;
    u.write_all(&buf[head_end..head_end + body_len])?;
    if fault == Some(Fault::LoseAnswer) {
        // Let the server finish the request, then hang up on the client.
        std::io::copy(&mut u, &mut std::io::sink())?;
        counts.lost_answers.fetch_add(1, Relaxed);
        return c.shutdown(Shutdown::Both);
    }
    std::io::copy(&mut u, &mut c)?;
    Ok(())
}

/// The fault to inject into this request, if any: every `every`-th request gets the next
/// of the kinds set, and a request naming the `die_at` text starts dropping them all.
fn next_fault(s: &Shared, request_line: &str) -> Option<Fault> {
    if let Ok(mut d) = s.die_at.lock() {
        if d.as_deref().is_some_and(|t| request_line.contains(t)) {
            *d = None;
            if let Ok(mut k) = s.kinds.lock() {
                *k = vec![Fault::Drop];
            }
            s.seen.store(0, Relaxed);
            s.every.store(1, Relaxed);
        }
    }
    let i = s.seen.fetch_add(1, Relaxed) + 1;
    let every = s.every.load(Relaxed);
    match every > 0 && i.is_multiple_of(every) {
        false => None,
        true => s.kinds.lock().ok().and_then(|k| {
            let n = s.faulted.fetch_add(1, Relaxed) as usize;
            k.get(n % k.len().max(1)).copied()
        }),
    }
}

fn count(s: &Shared, request_line: &str) {
    let c = &s.counts;
    c.requests.fetch_add(1, Relaxed);
    if let Ok(mut log) = s.log.lock() {
        log.push(request_line.to_string());
    }
    let mut parts = request_line.split(' ');
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let is_list = target
        .split_once('?')
        .is_some_and(|(_, q)| q.split('&').any(|p| p.starts_with("list-type=")));
    let verb = match method {
        "GET" if is_list => &c.list,
        "GET" => &c.get,
        "PUT" | "POST" => &c.put,
        "HEAD" => &c.head,
        "DELETE" => &c.delete,
        _ => return,
    };
    verb.fetch_add(1, Relaxed);
}
