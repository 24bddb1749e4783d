//! What the append-only tests need of MinIO beyond a bucket: credentials limited by a
//! policy, and the server's own record of every request (its audit log).
//!
//! - [`Minio::assume_role`]: temporary credentials of the root user narrowed by an IAM
//!   policy (STS `AssumeRole` with a session policy: what MinIO's `mc admin user add` and
//!   `mc admin policy attach` give, without `mc`, which the test machine does not have).
//!   The request is signed here with AWS Signature V4 (the `object_store` crate signs its
//!   own requests but does not export its signer; this is the one request it does not make).
//! - [`Minio::audit_settled`]: MinIO's audit log ([`super::audit`]) once it has caught up.

use super::audit::AuditEntry;
use super::minio::{Minio, REGION, ROOT_PASSWORD, ROOT_USER};
use super::{io_err, HarnessError};
use crate::store::Credentials;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

impl Minio {
    /// The entries so far once MinIO has posted everything up to now: waits until an
    /// entry of a marker call made now (a bucket of its own created by the root user)
    /// arrives, so the calls before it were posted too (MinIO posts them in order).
    pub fn audit_settled(&self) -> Vec<AuditEntry> {
        let marker = self.bucket("audit-marker");
        let _ = self.store(&marker, "");
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            let entries = self.audit().entries();
            if entries.iter().any(|e| e.bucket == marker) {
                return entries;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.audit().entries()
    }

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
