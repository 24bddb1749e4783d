//! What the append-only tests need of MinIO beyond a bucket: credentials limited by a
//! policy, and the server's own record of every request (its audit log).
//!
//! - [`Minio::assume_role`]: temporary credentials of the root user narrowed by an IAM
//!   policy (STS `AssumeRole` with a session policy: what MinIO's `mc admin user add` and
//!   `mc admin policy attach` give, without `mc`, which the test machine does not have).
//!   The request is signed here with AWS Signature V4 (the `object_store` crate signs its
//!   own requests but does not export its signer; this is the one request it does not make).
//! - [`Audit`]: MinIO posts one JSON document per API call, allowed or denied, to an audit
//!   webhook; every server the harness starts posts to a listener of the test process,
//!   which keeps who asked for what and what the answer was.

use super::minio::{Minio, REGION, ROOT_PASSWORD, ROOT_USER};
use super::{io_err, HarnessError};
use crate::store::Credentials;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

    /// The entries so far once MinIO has posted everything up to now: waits until an
    /// entry of a marker call made now (a bucket of its own created by the root user)
    /// arrives, so the calls before it were posted too (MinIO posts them in order).
    pub fn settled(&self, minio: &Minio) -> Vec<AuditEntry> {
        let marker = minio.bucket("audit-marker");
        let _ = minio.store(&marker, "");
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            let entries = self.entries();
            if entries.iter().any(|e| e.bucket == marker) {
                return entries;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.entries()
    }
}

impl Minio {
    /// Temporary credentials (an hour) of the root user, allowed only what `policy` (an
    /// IAM policy document, JSON) allows.
    pub fn assume_role(&self, policy: &str) -> Result<Credentials, HarnessError> {
        let body = format!(
            "Action=AssumeRole&DurationSeconds=3600&Policy={}&Version=2011-06-15",
            uri_encode(policy)
        );
        let host = self.address();
        let (date, auth, payload_hash) = sign_v4(&host, "sts", body.as_bytes());
        let mut s = TcpStream::connect(&host).map_err(io_err("connect to MinIO for STS"))?;
        write!(
            s,
            "POST / HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-www-form-urlencoded\r\nX-Amz-Date: {date}\r\nX-Amz-Content-Sha256: {payload_hash}\r\nAuthorization: {auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .map_err(io_err("send AssumeRole"))?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)
            .map_err(io_err("read AssumeRole's answer"))?;
        let field = |name: &str| {
            let open = format!("<{name}>");
            let start = answer.find(&open)? + open.len();
            let end = answer[start..].find(&format!("</{name}>"))? + start;
            Some(answer[start..end].to_string())
        };
        match (
            field("AccessKeyId"),
            field("SecretAccessKey"),
            field("SessionToken"),
        ) {
            (Some(key_id), Some(secret), Some(token)) => Ok(Credentials {
                key_id,
                secret,
                token: Some(token),
            }),
            _ => Err(HarnessError::Start {
                detail: "AssumeRole gave no credentials".into(),
                log: answer,
            }),
        }
    }

    /// The environment a `mailvault` process needs to reach this server with `c`.
    pub fn env_with(&self, c: &Credentials) -> Vec<(&'static str, Option<String>)> {
        let mut env = self.env();
        for (k, v) in env.iter_mut() {
            match *k {
                "AWS_ACCESS_KEY_ID" => *v = Some(c.key_id.clone()),
                "AWS_SECRET_ACCESS_KEY" => *v = Some(c.secret.clone()),
                "AWS_SESSION_TOKEN" => *v = c.token.clone(),
                _ => {}
            }
        }
        env
    }
}

/// Percent-encodes all but RFC 3986's unreserved characters (SigV4's rule).
fn uri_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Signs a `POST /` of a form `body` to `host` for `service` with the root user's
/// credentials: (the X-Amz-Date, the Authorization header, the payload's hash).
fn sign_v4(host: &str, service: &str, body: &[u8]) -> (String, String, String) {
    use ring::{digest, hmac};
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let now = jiff::Timestamp::now();
    let date = now.strftime("%Y%m%dT%H%M%SZ").to_string();
    let day = &date[..8];
    let payload_hash = hex(digest::digest(&digest::SHA256, body).as_ref());
    let signed = "content-type;host;x-amz-content-sha256;x-amz-date";
    let canonical = format!(
        "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\nhost:{host}\nx-amz-content-sha256:{payload_hash}\nx-amz-date:{date}\n\n{signed}\n{payload_hash}"
    );
    let scope = format!("{day}/{REGION}/{service}/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{date}\n{scope}\n{}",
        hex(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    );
    let mac = |key: &[u8], data: &str| {
        hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data.as_bytes())
            .as_ref()
            .to_vec()
    };
    let k = mac(format!("AWS4{ROOT_PASSWORD}").as_bytes(), day);
    let k = mac(&k, REGION);
    let k = mac(&k, service);
    let k = mac(&k, "aws4_request");
    let signature = hex(&mac(&k, &to_sign));
    let auth = format!(
        "AWS4-HMAC-SHA256 Credential={ROOT_USER}/{scope}, SignedHeaders={signed}, Signature={signature}"
    );
    (date, auth, payload_hash)
}
