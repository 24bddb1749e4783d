//! MinIO's audit log, received: MinIO posts one JSON document per API call, allowed or
//! denied, to an audit webhook; every server the harness starts ([`super::minio`]) posts
//! to a listener of the test process, which keeps who asked for what and the answer.

use super::{io_err, HarnessError};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One API call as MinIO's audit log records it.
#[derive(Clone, Debug)]
pub struct AuditEntry {
    /// `PutObject`, `DeleteObject`, `DeleteMultipleObjects`, `GetObject`, ...
    pub api: String,
    /// The HTTP status of the answer (403 for a denied call).
    pub status: u16,
    /// The access key that signed it (empty for anonymous calls).
    pub access_key: String,
    /// The bucket and the object, if any.
    pub bucket: String,
    pub object: String,
}

/// The entries MinIO's audit webhook has posted so far.
#[derive(Debug, Default)]
pub struct Audit {
    entries: Mutex<Vec<AuditEntry>>,
}

impl Audit {
    /// Listens on a free port of 127.0.0.1; returns the log and the webhook's URL.
    pub(crate) fn listen() -> Result<(Arc<Audit>, String), HarnessError> {
        let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("bind the audit listener"))?;
        let url = format!(
            "http://{}/",
            l.local_addr().map_err(io_err("audit listener address"))?
        );
        let audit = Arc::new(Audit::default());
        let a = audit.clone();
        std::thread::Builder::new()
            .name("minio audit".into())
            .spawn(move || {
                for c in l.incoming().flatten() {
                    let a = a.clone();
                    std::thread::spawn(move || {
                        let _ = a.serve(c);
                    });
                }
            })
            .map_err(io_err("start the audit listener"))?;
        Ok((audit, url))
    }

    /// Reads posts from one connection (kept alive) and answers each 200.
    fn serve(&self, c: TcpStream) -> std::io::Result<()> {
        let mut w = c.try_clone()?;
        let mut r = BufReader::new(c);
        loop {
            let mut len = 0usize;
            let mut line = String::new();
            if r.read_line(&mut line)? == 0 {
                return Ok(());
            }
            loop {
                line.clear();
                r.read_line(&mut line)?;
                let l = line.trim_end();
                if l.is_empty() {
                    break;
                }
                if let Some((k, v)) = l.split_once(':') {
                    if k.eq_ignore_ascii_case("content-length") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                }
            }
            let mut body = vec![0; len];
            r.read_exact(&mut body)?;
            self.add(&body);
            w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")?;
        }
    }

    /// One post: a JSON entry (or, batched, several, one a line).
    fn add(&self, body: &[u8]) {
        let text = String::from_utf8_lossy(body);
        let docs: Vec<serde_json::Value> = match serde_json::from_str(&text) {
            Ok(serde_json::Value::Array(a)) => a,
            Ok(v) => vec![v],
            Err(_) => (text.lines())
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect(),
        };
        let s = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        for d in docs {
            entries.push(AuditEntry {
                api: s(&d["api"]["name"]),
                status: d["api"]["statusCode"].as_u64().unwrap_or(0) as u16,
                access_key: s(&d["accessKey"]),
                bucket: s(&d["api"]["bucket"]),
                object: s(&d["api"]["object"]),
            });
        }
    }

    /// Every entry so far.
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}
