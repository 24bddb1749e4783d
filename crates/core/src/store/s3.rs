//! S3-compatible object storage (MinIO, Ceph RGW, AWS S3, …) through the `object_store`
//! crate, which signs requests (SigV4), pages listings and maps status codes; this file
//! only maps the [`Backend`] trait onto it and says what went wrong in words a user can act on.
//!
//! - A put is conditional (`If-None-Match: *`): an object that exists is never replaced
//!   (412 → [`Error::AlreadyExists`]). `init` checks that the server honours it
//!   ([`S3Store::check_conditional_puts`]): one that ignores it would silently overwrite.
//! - `replace` (only `config`, at migrate's commit) is a plain put: S3 puts are atomic.
//! - A ranged get that ends past the object returns fewer bytes on S3, not an error: the
//!   length is checked here.
//! - The crate's own retries are off: [`super::Retry`] retries transient failures above
//!   this store, where they are counted and reported.
//! - The trait is synchronous; requests run on one shared tokio runtime, each blocking the
//!   calling thread (a rayon worker or an uploader) until its answer. Parallelism comes from
//!   the callers' threads, bounded by [`super::Limit`].
//!
//! The calls the crate has no method for (CreateBucket, Object Lock's) are in `s3_calls.rs`.

use super::{Backend, ByteRange, Handle, Hint, Listing, ObjectInfo, Store, WriteMode};
use crate::error::{BackendKind, Error, Result};
use futures::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjPath;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use std::future::Future;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

/// Credentials for the S3 API. `Debug` never shows the secret.
#[derive(Clone)]
pub struct Credentials {
    pub key_id: String,
    pub secret: String,
    pub token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

/// Bucket addressing: `http://HOST/BUCKET/KEY` (path style: MinIO, Ceph, IP hosts) or
/// `http://BUCKET.HOST/KEY` (virtual-host style: AWS).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressing {
    /// Virtual-host style for `*.amazonaws.com`, path style for everything else.
    Auto,
    Path,
    VirtualHost,
}

/// Where an S3 repository is and how to reach it.
#[derive(Clone, Debug)]
pub struct S3Options {
    /// `http[s]://HOST[:PORT]`, no trailing slash.
    pub endpoint: String,
    pub bucket: String,
    /// Key prefix inside the bucket (no leading or trailing `/`), may be empty.
    pub prefix: String,
    pub region: String,
    pub credentials: Credentials,
    pub addressing: Addressing,
}

/// The region when none is configured.
pub const DEFAULT_REGION: &str = "us-east-1";

impl S3Options {
    /// Parses `s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]` (restic's syntax) and takes
    /// credentials and region from the environment: `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, or else the profile `AWS_PROFILE`
    /// (default `default`) of the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`,
    /// default `~/.aws/credentials`); region `AWS_DEFAULT_REGION` or `AWS_REGION`, default
    /// `us-east-1`.
    pub fn from_url_and_env(url: &str) -> Result<S3Options> {
        let (endpoint, bucket, prefix) = parse_url(url)?;
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let region = env("AWS_DEFAULT_REGION")
            .or_else(|| env("AWS_REGION"))
            .unwrap_or_else(|| DEFAULT_REGION.into());
        let credentials = credentials_from_env(url, &env)?;
        Ok(S3Options {
            endpoint,
            bucket,
            prefix,
            region,
            credentials,
            addressing: Addressing::Auto,
        })
    }

    /// The repository's location as shown to users (never credentials).
    pub fn location(&self) -> String {
        match self.prefix.is_empty() {
            true => format!("s3:{}/{}", self.endpoint, self.bucket),
            false => format!("s3:{}/{}/{}", self.endpoint, self.bucket, self.prefix),
        }
    }

    pub(super) fn virtual_host(&self) -> bool {
        match self.addressing {
            Addressing::Path => false,
            Addressing::VirtualHost => true,
            Addressing::Auto => host_of(&self.endpoint).ends_with(".amazonaws.com"),
        }
    }

    /// The endpoint object_store is given: with virtual-host addressing the bucket is part
    /// of the host name.
    pub(super) fn bucket_endpoint(&self) -> String {
        match self.virtual_host() {
            false => self.endpoint.clone(),
            true => {
                let (scheme, rest) = self.endpoint.split_once("://").unwrap_or(("https", ""));
                format!("{scheme}://{}.{rest}", self.bucket)
            }
        }
    }
}

fn host_of(endpoint: &str) -> &str {
    let rest = endpoint.split_once("://").map_or(endpoint, |(_, r)| r);
    rest.rsplit_once(':').map_or(rest, |(h, port)| {
        match port.bytes().all(|c| c.is_ascii_digit()) {
            true => h,
            false => rest,
        }
    })
}

/// `s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]` → (endpoint, bucket, prefix).
pub fn parse_url(url: &str) -> Result<(String, String, String)> {
    const SYNTAX: &str = "s3:http[s]://HOST[:PORT]/BUCKET[/PREFIX]";
    let bad =
        |why: &str| Error::InvalidInput(format!("repository {url:?}: {why} (expected {SYNTAX})"));
    let rest = url
        .strip_prefix("s3:")
        .ok_or_else(|| bad("not an s3: location"))?;
    let (scheme, rest) = rest
        .split_once("://")
        .filter(|(s, _)| *s == "http" || *s == "https")
        .ok_or_else(|| bad("give http:// or https:// and the server"))?;
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if let Some((_, server)) = host.rsplit_once('@') {
        // The URL is not quoted: it holds a secret.
        return Err(Error::InvalidInput(format!(
            "repository s3:{scheme}://{server}/…: credentials in the URL are refused (they would show in process lists, logs and shell history): give them in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN), or a profile of the shared credentials file (AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE)"
        )));
    }
    if host.is_empty() || host.contains(['?', '#', ' ']) {
        return Err(bad("no server, or a query or spaces in it"));
    }
    let path = path.trim_matches('/');
    let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
    if bucket.is_empty() {
        return Err(bad("no bucket"));
    }
    // The S3 rules for bucket names (3-63 characters of a-z 0-9 . -), checked here so a
    // typo is one clear line rather than the server's XML.
    let valid = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
        && bucket.as_bytes()[0].is_ascii_alphanumeric()
        && bucket.as_bytes()[bucket.len() - 1].is_ascii_alphanumeric();
    if !valid {
        return Err(bad(&format!(
            "{bucket:?} is not a valid bucket name (3-63 characters: a-z, 0-9, '.', '-')"
        )));
    }
    let prefix = prefix.trim_matches('/');
    if prefix
        .split('/')
        .any(|p| p.is_empty() || p == "." || p == "..")
        && !prefix.is_empty()
    {
        return Err(bad("an empty, '.' or '..' part in the prefix"));
    }
    Ok((format!("{scheme}://{host}"), bucket.into(), prefix.into()))
}

/// Credentials from the environment, else from the shared credentials file.
fn credentials_from_env(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Credentials> {
    if let (Some(key_id), Some(secret)) = (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        return Ok(Credentials {
            key_id,
            secret,
            token: env("AWS_SESSION_TOKEN"),
        });
    }
    let profile = env("AWS_PROFILE").unwrap_or_else(|| "default".into());
    let file = env("AWS_SHARED_CREDENTIALS_FILE")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".aws/credentials")));
    let missing = || {
        Error::backend(
            url,
            BackendKind::Auth,
            format!(
                "no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE (now {profile:?}) with a profile in {}",
                file.as_ref()
                    .map_or("~/.aws/credentials".into(), |f| f.display().to_string())
            ),
        )
    };
    let Some(path) = file.as_ref() else {
        return Err(missing());
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
        Err(e) => return Err(Error::io(path, e)),
    };
    let section = ini_section(&text, &profile);
    let get = |k: &str| section.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    match (get("aws_access_key_id"), get("aws_secret_access_key")) {
        (Some(key_id), Some(secret)) => Ok(Credentials {
            key_id,
            secret,
            token: get("aws_session_token"),
        }),
        _ => Err(missing()),
    }
}

/// The `key = value` pairs of section `[name]` of an INI file (the AWS shared credentials
/// file: sections, `key = value`, `#` and `;` comments). Keys are lower-cased. Written
/// here: the format is a dozen lines, and the crates that read it pull in the AWS SDK.
fn ini_section(text: &str, name: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = s.trim() == name;
            continue;
        }
        if let (true, Some((k, v))) = (inside, line.split_once('=')) {
            out.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    out
}

/// The tokio runtime every S3 request runs on (object_store is async; the store is not).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("mailvault-s3")
            .enable_all()
            .build()
            .expect("cannot start the tokio runtime")
    })
}

/// Runs `f` to completion on the shared runtime, blocking this thread.
pub(super) fn block_on<F: Future>(f: F) -> F::Output {
    runtime().block_on(f)
}

/// A repository in a bucket of an S3-compatible object store.
pub struct S3Store {
    pub(super) opts: S3Options,
    s3: AmazonS3,
    pub(super) location: String,
    /// The HTTP client of the calls object_store has no method for, made at the first.
    pub(super) raw: OnceLock<object_store::client::HttpClient>,
    /// Those calls, counted (the stack's counter does not see them).
    pub(super) calls: super::metered::Counters,
}

/// Per-request timeouts: connecting, and a whole request (a pack of 16 MiB on a slow link).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

pub(super) fn client_options() -> ClientOptions {
    ClientOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT)
        .with_allow_http(true)
}

impl S3Store {
    pub fn new(opts: S3Options) -> Result<S3Store> {
        let location = opts.location();
        let c = &opts.credentials;
        let mut b = AmazonS3Builder::new()
            .with_endpoint(opts.bucket_endpoint())
            .with_bucket_name(&opts.bucket)
            .with_region(&opts.region)
            .with_access_key_id(&c.key_id)
            .with_secret_access_key(&c.secret)
            .with_virtual_hosted_style_request(opts.virtual_host())
            // Retries are counted and reported by the Retry wrapper above this store.
            .with_retry(object_store::RetryConfig {
                max_retries: 0,
                ..Default::default()
            })
            // Plain DELETE per object: the bulk delete is a POST some servers lack.
            .with_config(
                object_store::aws::AmazonS3ConfigKey::DisableBulkDelete,
                "true",
            )
            // After the endpoint: allow_http is part of the client options.
            .with_client_options(client_options());
        if let Some(t) = &c.token {
            b = b.with_token(t);
        }
        let s3 = b
            .build()
            .map_err(|e| Error::backend(&location, BackendKind::Other, e.to_string()))?;
        Ok(S3Store {
            opts,
            s3,
            location,
            raw: OnceLock::new(),
            calls: Default::default(),
        })
    }

    pub(super) fn key(&self, path: &str) -> ObjPath {
        match self.opts.prefix.is_empty() {
            true => ObjPath::from(path),
            false => ObjPath::from(format!("{}/{path}", self.opts.prefix)),
        }
    }

    /// The repository path of a key in the bucket.
    pub(super) fn rel<'a>(&self, key: &'a str) -> Option<&'a str> {
        match self.opts.prefix.is_empty() {
            true => Some(key),
            false => key
                .strip_prefix(self.opts.prefix.as_str())
                .and_then(|k| k.strip_prefix('/')),
        }
    }

    /// Maps an object_store error for `path` to ours.
    pub(super) fn err(&self, path: &str, e: object_store::Error) -> Error {
        classify(&self.location, &self.opts, path, e)
    }

    /// Checks that the server refuses a conditional put over an existing object
    /// (`If-None-Match: *`): the write-once objects of a repository depend on it. A server
    /// that ignores the header would replace objects silently; it is refused with
    /// [`BackendKind::NoConditionalPut`].
    /// `store` is this store, or a stack over it (so that the probe's requests are
    /// counted and retried like any other).
    pub fn check_conditional_puts(&self, store: &dyn Backend) -> Result<()> {
        let path = format!("probe/{}", hex::encode(rand::random::<[u8; 8]>()));
        store.put(&path, b"1")?;
        let second = store.put(&path, b"2");
        let _ = store.delete(&path);
        match second {
            Err(Error::AlreadyExists(_)) => Ok(()),
            Err(e) => Err(e),
            Ok(()) => Err(Error::backend(
                &self.location,
                BackendKind::NoConditionalPut,
                "the server ignores conditional puts (If-None-Match: *) and would overwrite objects that must be written once: use a server that supports them (such as MinIO or AWS S3)",
            )),
        }
    }
}

pub(super) const AUTH_HINT: &str = "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) and the key's permissions on the bucket";

/// The `<Code>` of an S3 XML error body.
pub(super) fn s3_code(body: &str) -> Option<String> {
    let start = body.find("<Code>")? + "<Code>".len();
    let len = body[start..].find("</Code>")?;
    Some(body[start..start + len].to_string())
}

/// Maps an object_store error to ours: not-found and already-exists to the trait's
/// variants, everything else to [`Error::Backend`] of a kind that says whether to retry
/// and a text that says what to do. The crate's retry error is not nameable, so the HTTP
/// status is read from its text; transport errors are found along the error's sources.
fn classify(location: &str, opts: &S3Options, path: &str, e: object_store::Error) -> Error {
    use object_store::client::HttpErrorKind as H;
    use object_store::Error as E;
    let text = e.to_string();
    let backend = |kind, detail: String| Error::backend(location, kind, detail);
    let what = match path {
        "" => String::new(),
        p => format!("{p}: "),
    };
    if text.contains("<Code>NoSuchBucket</Code>") {
        return backend(
            BackendKind::NoSuchBucket,
            format!(
                "bucket {} does not exist: check the name, or create the repository with `mailvault init`",
                opts.bucket
            ),
        );
    }
    match e {
        E::NotFound { .. } => return Error::NotFound(path.into()),
        E::AlreadyExists { .. } | E::Precondition { .. } => {
            return Error::AlreadyExists(path.into())
        }
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => {
            let code = s3_code(&text).unwrap_or_else(|| "access denied".into());
            return backend(BackendKind::Auth, format!("{what}{code}: {AUTH_HINT}"));
        }
        _ => {}
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    let mut chain = String::new();
    let mut kind = None;
    while let Some(s) = source {
        chain = s.to_string();
        if let (None, Some(h)) = (kind, s.downcast_ref::<object_store::client::HttpError>()) {
            kind = Some(h.kind());
        }
        source = s.source();
    }
    let lower = format!("{text} {chain}").to_ascii_lowercase();
    // rustls says "invalid peer certificate: …", or "received corrupt message" when the
    // server does not speak TLS at all.
    let tls = ["certificate", "tls", "ssl", "handshake", "corrupt message"]
        .iter()
        .any(|w| lower.contains(w));
    match kind {
        Some(H::Connect) if tls => return backend(
            BackendKind::Tls,
            format!(
                "TLS with {} failed: {chain} (check the server's certificate, or whether it speaks https at all)",
                opts.endpoint
            ),
        ),
        Some(H::Connect) => {
            return backend(
                BackendKind::Unreachable,
                format!(
                    "cannot reach {}: {chain} (check the host, the port and http/https)",
                    opts.endpoint
                ),
            )
        }
        Some(_) => return backend(BackendKind::Transient, format!("{what}{chain}")),
        None => {}
    }
    let status = text
        .split("status code: ")
        .nth(1)
        .and_then(|t| t.get(..3))
        .and_then(|c| c.parse::<u16>().ok());
    let code = s3_code(&text);
    let shown = match (status, &code) {
        (Some(s), Some(c)) => format!("{what}HTTP {s} {c}"),
        (Some(s), None) => format!("{what}HTTP {s}"),
        _ => format!("{what}{text}"),
    };
    match status {
        Some(s) if s >= 500 || s == 429 || s == 408 => backend(BackendKind::Transient, shown),
        _ if code.as_deref() == Some("SlowDown") => backend(BackendKind::Transient, shown),
        Some(403) | Some(401) => backend(BackendKind::Auth, format!("{shown}: {AUTH_HINT}")),
        _ => backend(BackendKind::Other, shown),
    }
}

impl S3Store {
    /// A put-if-absent.
    fn create(&self, path: &str, data: &[u8]) -> Result<()> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        block_on(
            self.s3
                .put_opts(&self.key(path), PutPayload::from(data.to_vec()), opts),
        )
        .map(|_| ())
        .map_err(|e| self.err(path, e))
    }

    /// A plain put, which overwrites.
    fn overwrite(&self, path: &str, data: &[u8]) -> Result<()> {
        block_on(
            self.s3
                .put(&self.key(path), PutPayload::from(data.to_vec())),
        )
        .map(|_| ())
        .map_err(|e| self.err(path, e))
    }

    fn get_whole(&self, path: &str) -> Result<Vec<u8>> {
        block_on(async {
            let r = self.s3.get(&self.key(path)).await?;
            r.bytes().await
        })
        .map(|b| b.to_vec())
        .map_err(|e| self.err(path, e))
    }

    fn read_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        if len == 0 {
            self.head(path)?;
            return Ok(Vec::new());
        }
        let bytes = block_on(self.s3.get_range(&self.key(path), offset..offset + len))
            .map_err(|e| self.err(path, e))?;
        // S3 answers a range past the end with what there is.
        if bytes.len() as u64 != len {
            return Err(Error::corrupt(
                path,
                format!(
                    "range {offset}+{len} is past the end ({} bytes read)",
                    bytes.len()
                ),
            ));
        }
        Ok(bytes.to_vec())
    }

    fn list_prefix(&self, prefix: &str) -> Result<Vec<ObjectInfo>> {
        // object_store lists by directory: list the directory of the prefix, then keep
        // what starts with the prefix itself.
        let dir = prefix.rsplit_once('/').map_or("", |(d, _)| d);
        let base = match (self.opts.prefix.is_empty(), dir.is_empty()) {
            (true, true) => None,
            (true, false) => Some(ObjPath::from(dir)),
            (false, true) => Some(ObjPath::from(self.opts.prefix.as_str())),
            (false, false) => Some(self.key(dir)),
        };
        let metas: Vec<object_store::ObjectMeta> =
            block_on(self.s3.list(base.as_ref()).try_collect()).map_err(|e| self.err(prefix, e))?;
        Ok(metas
            .into_iter()
            .filter_map(|m| {
                let path = self.rel(m.location.as_ref())?;
                path.starts_with(prefix).then(|| ObjectInfo {
                    path: path.to_string(),
                    size: m.size,
                })
            })
            .collect())
    }

    fn delete_key(&self, path: &str) -> Result<()> {
        match block_on(self.s3.delete(&self.key(path))) {
            Ok(()) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(match self.err(path, e) {
                // Credentials that may write but not delete are a mail server's: say so.
                Error::Backend {
                    location,
                    kind: BackendKind::Auth,
                    detail,
                } => Error::Backend {
                    location,
                    kind: BackendKind::Auth,
                    detail: format!("{detail}; credentials that may not delete are a mail server's: give it --append-only, and run prune, repair and migrate on the maintenance host (docs/security.md)"),
                },
                e => e,
            }),
        }
    }

    fn head(&self, path: &str) -> Result<u64> {
        block_on(self.s3.head(&self.key(path)))
            .map(|m| m.size)
            .map_err(|e| self.err(path, e))
    }
}

impl Backend for S3Store {
    fn write(&self, h: Handle<'_>, data: &[u8], mode: WriteMode) -> Result<()> {
        match mode {
            WriteMode::Create => self.create(h.path(), data),
            WriteMode::Replace => self.overwrite(h.path(), data),
        }
    }

    fn read(&self, h: Handle<'_>, range: Option<ByteRange>) -> Result<Vec<u8>> {
        match range {
            None => self.get_whole(h.path()),
            Some(r) => self.read_range(h.path(), r.offset, r.len),
        }
    }

    fn listing(&self, prefix: &str, _from: Listing) -> Result<Vec<ObjectInfo>> {
        self.list_prefix(prefix)
    }

    fn remove(&self, h: Handle<'_>) -> Result<()> {
        self.delete_key(h.path())
    }

    fn size(&self, h: Handle<'_>) -> Result<u64> {
        self.head(h.path())
    }

    fn location(&self) -> String {
        self.location.clone()
    }

    /// Durable on a put's success.
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn local_dir(&self) -> Option<std::path::PathBuf> {
        None
    }

    fn hint(&self, _hint: Hint<'_>) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let p = |u: &str| parse_url(u).map_err(|e| e.to_string());
        assert_eq!(
            p("s3:http://127.0.0.1:9000/bucket").unwrap(),
            ("http://127.0.0.1:9000".into(), "bucket".into(), "".into())
        );
        assert_eq!(
            p("s3:https://s3.amazonaws.com/my-bucket/hosts/a/").unwrap(),
            (
                "https://s3.amazonaws.com".into(),
                "my-bucket".into(),
                "hosts/a".into()
            )
        );
        for bad in [
            "s3:bucket/x",
            "s3:ftp://h/b",
            "s3:http:///b",
            "s3:http://h",
            "s3:http://h/",
            "s3:http://h/ab",
            "s3:http://h/Bucket",
            "s3:http://user:pw@h/bucket",
            "s3:http://h/bucket/a/../b",
            "s3:http://h/bucket/a//b",
        ] {
            assert!(p(bad).is_err(), "{bad} accepted");
        }
        let e = p("s3:http://user:pw@h/bucket").unwrap_err();
        assert!(
            e.contains("credentials") && e.contains("AWS_SECRET_ACCESS_KEY"),
            "{e}"
        );
        assert!(!e.contains("pw") && !e.contains("user"), "{e}");
    }

    #[test]
    fn addressing_follows_the_host() {
        let o = |ep: &str, a| S3Options {
            endpoint: ep.into(),
            bucket: "b1x".into(),
            prefix: String::new(),
            region: DEFAULT_REGION.into(),
            credentials: Credentials {
                key_id: "k".into(),
                secret: "s".into(),
                token: None,
            },
            addressing: a,
        };
        assert!(o("https://s3.eu-west-1.amazonaws.com", Addressing::Auto).virtual_host());
        assert_eq!(
            o("https://s3.amazonaws.com", Addressing::Auto).bucket_endpoint(),
            "https://b1x.s3.amazonaws.com"
        );
        assert!(!o("http://127.0.0.1:9000", Addressing::Auto).virtual_host());
        assert!(!o("http://minio.lan:9000", Addressing::Auto).virtual_host());
        assert!(o("http://minio.lan:9000", Addressing::VirtualHost).virtual_host());
        assert!(!o("https://s3.amazonaws.com", Addressing::Path).virtual_host());
        // The secret never shows.
        let shown = format!("{:?}", o("http://h:1", Addressing::Auto));
        assert!(!shown.contains("\"s\""), "{shown}");
    }

    #[test]
    fn credentials_come_from_env_or_profile() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = AKDEF\naws_secret_access_key = sdef\n\n# c\n[work]\naws_access_key_id=AKWORK\n aws_secret_access_key = swork \naws_session_token = tok\n",
        )
        .unwrap();
        let f = file.display().to_string();
        let with = |vars: &[(&str, &str)]| {
            let vars: Vec<(String, String)> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            credentials_from_env("s3:x", &move |k: &str| {
                vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
            })
        };
        let c = with(&[("AWS_ACCESS_KEY_ID", "AK"), ("AWS_SECRET_ACCESS_KEY", "S")]).unwrap();
        assert_eq!(
            (c.key_id.as_str(), c.secret.as_str(), c.token),
            ("AK", "S", None)
        );
        let c = with(&[("AWS_SHARED_CREDENTIALS_FILE", &f)]).unwrap();
        assert_eq!((c.key_id.as_str(), c.secret.as_str()), ("AKDEF", "sdef"));
        let c = with(&[("AWS_SHARED_CREDENTIALS_FILE", &f), ("AWS_PROFILE", "work")]).unwrap();
        assert_eq!(
            (c.key_id.as_str(), c.secret.as_str(), c.token.as_deref()),
            ("AKWORK", "swork", Some("tok"))
        );
        let e = with(&[("AWS_SHARED_CREDENTIALS_FILE", &f), ("AWS_PROFILE", "nope")]).unwrap_err();
        assert!(e.to_string().contains("no credentials"), "{e}");
        assert!(matches!(
            e,
            Error::Backend {
                kind: BackendKind::Auth,
                ..
            }
        ));
        let e = with(&[]).unwrap_err();
        assert!(e.to_string().contains("AWS_ACCESS_KEY_ID"), "{e}");
    }

    #[test]
    fn s3_error_codes() {
        assert_eq!(
            s3_code("<Error><Code>SlowDown</Code><Message>x</Message></Error>").as_deref(),
            Some("SlowDown")
        );
        assert_eq!(s3_code("nothing"), None);
    }
}
