//! The S3 calls object_store has no method for: CreateBucket, and Object Lock's
//! (the bucket's lock configuration, an object's retention and legal hold, its versions).
//! Each is one request built here and signed by the crate's own SigV4 signer
//! ([`AwsAuthorizer`]: no hand-written signing), sent by the crate's HTTP client; the
//! few XML answers are read with quick-xml.
//!
//! These calls are beside the stack's wrappers: counted here ([`S3Store::call_counts`],
//! added to every report's storage line), retried by `retry::RetriedCalls` (the stack's
//! own retry loop), and not under the connection limit: they are the maintenance host's
//! (init, prune, check, `repair overwrites`), one or two per object.

use super::object_lock::{LockMode, LockPolicy, ObjectLock, Retention, Version};
use super::s3::{block_on, client_options, s3_code, S3Store, AUTH_HINT, DEFAULT_REGION};
use crate::error::{BackendKind, Error, Result};
use jiff::Timestamp;
use object_store::aws::{AwsAuthorizer, AwsCredential};
use object_store::client::{HttpClient, HttpConnector, HttpRequest, ReqwestConnector};
use serde::Deserialize;

/// An answer: its status, headers and body.
struct Reply {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

impl Reply {
    /// The body as text (XML answers and errors).
    fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.body)
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Percent-encodes a key for a URI path (RFC 3986 unreserved characters and `/` stay).
fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The base64 MD5 of a body: S3 wants `Content-MD5` on its configuration calls.
fn content_md5(body: &[u8]) -> String {
    use md5::Digest;
    base64_simd::STANDARD.encode_to_string(md5::Md5::digest(body))
}

impl S3Store {
    fn client(&self) -> Result<HttpClient> {
        if let Some(c) = self.raw.get() {
            return Ok(c.clone());
        }
        let c = ReqwestConnector::default()
            .connect(&client_options())
            .map_err(|e| self.err("", e))?;
        Ok(self.raw.get_or_init(|| c).clone())
    }

    /// Sends one request on the bucket (`key` `None`) or on the object at repository path
    /// `key`, with `query` (`"retention"`, `"versionId=…"`: already encoded) and `headers`.
    fn call(
        &self,
        method: &str,
        key: Option<&str>,
        query: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<Reply> {
        let o = &self.opts;
        let base = match o.virtual_host() {
            true => format!("{}/", o.bucket_endpoint()),
            false => format!("{}/{}/", o.endpoint, o.bucket),
        };
        let path = key.map(|k| encode_key(self.key(k).as_ref()));
        let uri = match (path, query) {
            (None, "") => base.trim_end_matches('/').to_string(),
            (None, q) => format!("{base}?{q}"),
            (Some(p), "") => format!("{base}{p}"),
            (Some(p), q) => format!("{base}{p}?{q}"),
        };
        let what = key.unwrap_or("");
        let other = |d: String| Error::backend(&self.location, BackendKind::Other, d);
        let mut b = http::Request::builder().method(method).uri(&uri);
        for (name, value) in headers {
            b = b.header(*name, value);
        }
        let mut req: HttpRequest = b
            .body(body.into())
            .map_err(|e| other(format!("{what}: {method} request: {e}")))?;
        let cred = AwsCredential {
            key_id: o.credentials.key_id.clone(),
            secret_key: o.credentials.secret.clone(),
            token: o.credentials.token.clone(),
        };
        AwsAuthorizer::new(&cred, "s3", &o.region)
            .try_authorize(&mut req, None)
            .map_err(|e| self.err(what, e))?;
        let client = self.client()?;
        let up = req.body().content_length() as u64;
        let verb = match (method, key) {
            ("GET", None) if query.starts_with("prefix=") => "LIST",
            _ => method,
        };
        let reply = block_on(async {
            let resp = client.execute(req).await?;
            let status = resp.status().as_u16();
            let headers = resp.headers().clone();
            let body = resp.into_body().bytes().await.unwrap_or_default();
            Ok::<_, object_store::client::HttpError>(Reply {
                status,
                headers,
                body: body.to_vec(),
            })
        })
        .map_err(|e| {
            self.err(
                what,
                object_store::Error::Generic {
                    store: "S3",
                    source: Box::new(e),
                },
            )
        });
        let down = reply.as_ref().map_or(0, |r| r.body.len() as u64);
        self.calls.count(verb, up, down);
        reply
    }

    /// The calls made beside the stack so far (CreateBucket, Object Lock's), by verb.
    pub fn call_counts(&self) -> super::RequestCounts {
        self.calls.read()
    }

    /// The error for an answer that is not a success: `doing` says what was asked.
    fn failed(&self, doing: &str, r: &Reply) -> Error {
        let text = r.text();
        let code = s3_code(&text);
        let message = (text.split_once("<Message>"))
            .and_then(|(_, m)| m.split_once("</Message>"))
            .map(|(m, _)| m.chars().take(200).collect::<String>());
        let shown = format!(
            "{doing}: HTTP {}{}{}",
            r.status,
            code.as_deref().map(|c| format!(" {c}")).unwrap_or_default(),
            message.map(|m| format!(" ({m})")).unwrap_or_default()
        );
        let kind = match r.status {
            401 | 403 => {
                return Error::backend(
                    &self.location,
                    BackendKind::Auth,
                    format!("{shown}: {AUTH_HINT}"),
                )
            }
            404 if code.as_deref() == Some("NoSuchBucket") => BackendKind::NoSuchBucket,
            s if s >= 500 || s == 429 => BackendKind::Transient,
            _ => BackendKind::Other,
        };
        Error::backend(&self.location, kind, shown)
    }

    /// Creates the bucket, with Object Lock on when `locked` (S3 turns it on only at
    /// creation). One that exists and is ours is fine; one owned by someone else is an
    /// error that says so.
    pub fn create_bucket_with(&self, locked: bool) -> Result<()> {
        let o = &self.opts;
        let body = match o.region.as_str() {
            DEFAULT_REGION => String::new(),
            r => format!(
                "<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><LocationConstraint>{r}</LocationConstraint></CreateBucketConfiguration>"
            ),
        };
        let headers = match locked {
            true => vec![("x-amz-bucket-object-lock-enabled", "true".to_string())],
            false => vec![],
        };
        let r = self.call("PUT", None, "", &headers, body.into_bytes())?;
        let code = s3_code(&r.text());
        match (r.status, code.as_deref()) {
            (200, _) | (409, Some("BucketAlreadyOwnedByYou")) => Ok(()),
            (409, Some("BucketAlreadyExists")) => Err(Error::backend(
                &self.location,
                BackendKind::Other,
                format!(
                    "bucket {} exists and belongs to someone else: choose another name",
                    o.bucket
                ),
            )),
            _ => Err(self.failed(&format!("creating bucket {}", o.bucket), &r)),
        }
    }

    /// Creates the bucket when it is missing ([`Self::create_bucket_with`], no lock).
    pub fn create_bucket(&self) -> Result<()> {
        self.create_bucket_with(false)
    }

    /// Sets the bucket's default retention: every object written from now on is locked
    /// for `policy.days` from its creation. The bucket must have Object Lock on.
    pub fn set_lock_policy(&self, policy: LockPolicy) -> Result<()> {
        let body = format!(
            "<ObjectLockConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention><Mode>{}</Mode><Days>{}</Days></DefaultRetention></Rule></ObjectLockConfiguration>",
            policy.mode.s3_name(),
            policy.days
        );
        let md5 = content_md5(body.as_bytes());
        let r = self.call(
            "PUT",
            None,
            "object-lock",
            &[("content-md5", md5)],
            body.into_bytes(),
        )?;
        match r.status {
            200 => Ok(()),
            _ if s3_code(&r.text()).as_deref() == Some("InvalidBucketState") => Err(Error::backend(
                &self.location,
                BackendKind::Other,
                format!("bucket {} has no Object Lock, and S3 turns it on only when a bucket is created: give `mailvault init --lock-days` a new bucket", self.opts.bucket),
            )),
            _ => Err(self.failed("setting the bucket's default retention", &r)),
        }
    }

    /// Changes an object's retention. A shorter one needs `bypass` (governance mode, and
    /// the right to bypass it): only the tests ever shorten one.
    fn put_retention(
        &self,
        path: &str,
        version: Option<&str>,
        mode: LockMode,
        until: Timestamp,
        bypass: bool,
    ) -> Result<()> {
        let until = until.round(jiff::Unit::Second).unwrap_or(until);
        let body = format!(
            "<Retention xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Mode>{}</Mode><RetainUntilDate>{until}</RetainUntilDate></Retention>",
            mode.s3_name()
        );
        let mut headers = vec![("content-md5", content_md5(body.as_bytes()))];
        if bypass {
            headers.push(("x-amz-bypass-governance-retention", "true".into()));
        }
        let query = match version {
            Some(v) => format!("retention&versionId={}", q(v)),
            None => "retention".into(),
        };
        let r = self.call("PUT", Some(path), &query, &headers, body.into_bytes())?;
        match r.status {
            200 | 204 => Ok(()),
            404 => Err(Error::NotFound(path.into())),
            _ => Err(self.failed(&format!("{path}: setting its retention"), &r)),
        }
    }

    /// Sets the retention of an object's current version, or of `version`, to end at
    /// `until`, shorter than it was if need be (governance mode): for the tests, which
    /// cannot wait a day for a retention to end.
    #[cfg(any(test, feature = "testing"))]
    pub fn shorten_retention(
        &self,
        path: &str,
        version: Option<&str>,
        until: Timestamp,
    ) -> Result<()> {
        self.put_retention(path, version, LockMode::Governance, until, true)
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct LockConfiguration {
    object_lock_enabled: Option<String>,
    rule: Option<LockRule>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct LockRule {
    default_retention: Option<DefaultRetention>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DefaultRetention {
    mode: String,
    days: Option<u32>,
    years: Option<u32>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ListVersions {
    is_truncated: Option<bool>,
    next_key_marker: Option<String>,
    next_version_id_marker: Option<String>,
    #[serde(default)]
    version: Vec<VersionEntry>,
    #[serde(default)]
    delete_marker: Vec<VersionEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct VersionEntry {
    key: String,
    version_id: String,
    #[serde(default)]
    is_latest: bool,
    #[serde(default)]
    size: u64,
    last_modified: Option<String>,
    e_tag: Option<String>,
}

fn xml<T: serde::de::DeserializeOwned>(store: &S3Store, what: &str, body: &str) -> Result<T> {
    quick_xml::de::from_str(body).map_err(|e| {
        Error::backend(
            &store.location,
            BackendKind::Other,
            format!("{what}: the server's answer is not what S3 sends ({e})"),
        )
    })
}

/// A query parameter's value, encoded.
fn q(v: &str) -> String {
    encode_key(v).replace('/', "%2F")
}

impl ObjectLock for S3Store {
    fn policy(&self) -> Result<Option<LockPolicy>> {
        let r = self.call("GET", None, "object-lock", &[], Vec::new())?;
        match (r.status, s3_code(&r.text()).as_deref()) {
            (200, _) => {}
            // No configuration; or a server without Object Lock at all.
            (404, _) | (405, _) | (501, _) => return Ok(None),
            _ => return Err(self.failed("reading the bucket's Object Lock configuration", &r)),
        }
        let c: LockConfiguration = xml(self, "the bucket's Object Lock configuration", &r.text())?;
        if c.object_lock_enabled.as_deref() != Some("Enabled") {
            return Ok(None);
        }
        let Some(d) = c.rule.and_then(|r| r.default_retention) else {
            return Ok(None);
        };
        let days = d.days.or(d.years.map(|y| y.saturating_mul(365)));
        Ok(match (LockMode::parse(&d.mode), days) {
            (Some(mode), Some(days)) => Some(LockPolicy { mode, days }),
            _ => None,
        })
    }

    fn versions(&self, prefix: &str) -> Result<Vec<Version>> {
        let key = self.key(prefix).to_string();
        let mut markers = String::new();
        let mut out = Vec::new();
        loop {
            let query = format!("prefix={}&versions={markers}", q(&key));
            let r = self.call("GET", None, &query, &[], Vec::new())?;
            if r.status != 200 {
                return Err(self.failed(&format!("{prefix}: listing versions"), &r));
            }
            let l: ListVersions = xml(self, "a listing of versions", &r.text())?;
            let entries = (l.version.into_iter().map(|v| (v, false)))
                .chain(l.delete_marker.into_iter().map(|v| (v, true)));
            for (v, marker) in entries {
                let Some(path) = self.rel(&v.key) else {
                    continue;
                };
                out.push(Version {
                    path: path.to_string(),
                    id: v.version_id,
                    latest: v.is_latest,
                    marker,
                    size: v.size,
                    modified: v.last_modified.and_then(|m| m.parse().ok()),
                    etag: v.e_tag,
                });
            }
            match (l.is_truncated, l.next_key_marker, l.next_version_id_marker) {
                (Some(true), Some(k), v) => {
                    markers = format!(
                        "&key-marker={}&version-id-marker={}",
                        q(&k),
                        q(&v.unwrap_or_default())
                    );
                }
                _ => return Ok(out),
            }
        }
    }

    fn retention(&self, path: &str, version: Option<&str>) -> Result<Retention> {
        let query = version
            .map(|v| format!("versionId={}", q(v)))
            .unwrap_or_default();
        let r = self.call("HEAD", Some(path), &query, &[], Vec::new())?;
        match r.status {
            200 => {}
            404 => return Err(Error::NotFound(path.into())),
            _ => return Err(self.failed(&format!("{path}: reading its retention"), &r)),
        }
        Ok(Retention {
            mode: r.header("x-amz-object-lock-mode").and_then(LockMode::parse),
            until: r
                .header("x-amz-object-lock-retain-until-date")
                .and_then(|d| d.parse().ok()),
            legal_hold: r.header("x-amz-object-lock-legal-hold") == Some("ON"),
        })
    }

    fn extend(&self, path: &str, mode: LockMode, until: Timestamp) -> Result<()> {
        self.put_retention(path, None, mode, until, false)
    }

    fn legal_hold(&self, path: &str, on: bool) -> Result<()> {
        let body = format!(
            "<LegalHold xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Status>{}</Status></LegalHold>",
            if on { "ON" } else { "OFF" }
        );
        let md5 = content_md5(body.as_bytes());
        let r = self.call(
            "PUT",
            Some(path),
            "legal-hold",
            &[("content-md5", md5)],
            body.into_bytes(),
        )?;
        match r.status {
            200 | 204 => Ok(()),
            404 => Err(Error::NotFound(path.into())),
            _ => Err(self.failed(&format!("{path}: setting its legal hold"), &r)),
        }
    }

    fn read_version(&self, path: &str, version: &str) -> Result<Vec<u8>> {
        let query = format!("versionId={}", q(version));
        let r = self.call("GET", Some(path), &query, &[], Vec::new())?;
        match r.status {
            200 => Ok(r.body),
            404 => Err(Error::NotFound(path.into())),
            _ => Err(self.failed(&format!("{path}: reading version {version}"), &r)),
        }
    }

    fn remove_version(&self, path: &str, version: &str) -> Result<()> {
        let query = format!("versionId={}", q(version));
        let r = self.call("DELETE", Some(path), &query, &[], Vec::new())?;
        match r.status {
            200 | 204 | 404 => Ok(()),
            _ => Err(self.failed(&format!("{path}: deleting version {version}"), &r)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_query_values_are_encoded() {
        assert_eq!(encode_key("pre fix/data/ab/ab01"), "pre%20fix/data/ab/ab01");
        assert_eq!(q("a/b+c"), "a%2Fb%2Bc");
    }

    #[test]
    fn the_answers_parse() {
        let c: LockConfiguration = quick_xml::de::from_str("<ObjectLockConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><ObjectLockEnabled>Enabled</ObjectLockEnabled><Rule><DefaultRetention><Mode>GOVERNANCE</Mode><Days>3</Days></DefaultRetention></Rule></ObjectLockConfiguration>").unwrap();
        let d = c.rule.unwrap().default_retention.unwrap();
        assert_eq!((d.mode.as_str(), d.days), ("GOVERNANCE", Some(3)));
        let l: ListVersions = quick_xml::de::from_str("<ListVersionsResult><IsTruncated>false</IsTruncated><Version><Key>a</Key><VersionId>1</VersionId><IsLatest>false</IsLatest></Version><DeleteMarker><Key>a</Key><VersionId>2</VersionId></DeleteMarker><Version><Key>a</Key><VersionId>3</VersionId></Version></ListVersionsResult>").unwrap();
        assert_eq!(l.version.len() + l.delete_marker.len(), 3);
    }
}
