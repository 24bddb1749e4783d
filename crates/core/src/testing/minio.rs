//! A throw-away MinIO for integration tests: one server per test process, a fresh bucket
//! per test.
//!
//! [`Minio::shared`] starts the server the first time it is called, on a free port of
//! 127.0.0.1 with its data in a temporary directory (browser off, fixed root credentials
//! [`ROOT_USER`] / [`ROOT_PASSWORD`], Prometheus metrics public), waits for
//! `/minio/health/live` and keeps it for the rest of the process. The server is started
//! under a small `sh` that holds a pipe from this process: when the test process ends, by
//! any means (SIGKILL included), the pipe closes and the shell stops MinIO and deletes its
//! directory, so no server outlives its tests. A [`Minio`] from [`Minio::start`] is
//! stopped when dropped.
//!
//! The binary: `MAILVAULT_MINIO`, else `minio` on `PATH`, in `$(go env GOPATH)/bin`,
//! `~/go/bin` or `/root/go/bin`. When there is none the tests fail (no silent skip) with a
//! message that says to run `scripts/setup.sh`, which builds it.
//!
//! ```no_run
//! use mailvault_core::testing::minio::Minio;
//! let minio = Minio::shared();
//! let bucket = minio.bucket("conformance");
//! let store = minio.store(&bucket, "").expect("store");
//! ```

use super::{io_err, HarnessError};
use crate::store::{Addressing, Credentials, S3Options, S3Store};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The server's root user (its access key id).
pub const ROOT_USER: &str = "mvtest";
/// The root user's password (its secret key).
pub const ROOT_PASSWORD: &str = "mvtest-secret";
/// The region the test stores use.
pub const REGION: &str = "us-east-1";

/// How long MinIO may take to answer its health check (it takes ~1.5 s on an idle machine;
/// tests share the machine with compilers).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running MinIO.
#[derive(Debug)]
pub struct Minio {
    port: u16,
    dir: PathBuf,
    /// Closing this pipe stops the server (see the module's doc).
    stop: Mutex<Option<ChildStdin>>,
    shell: Mutex<Child>,
    /// What the server's audit webhook posted ([`super::audit`]).
    audit: std::sync::Arc<super::audit::Audit>,
}

/// Finds the `minio` binary.
pub fn minio_binary() -> Result<PathBuf, HarnessError> {
    if let Some(p) = std::env::var_os("MAILVAULT_MINIO").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return match p.is_file() {
            true => Ok(p),
            false => Err(HarnessError::NotInstalled {
                searched: format!("MAILVAULT_MINIO={}", p.display()),
            }),
        };
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for go in ["go", "/usr/local/go/bin/go"] {
        let out = Command::new(go)
            .args(["env", "GOBIN", "GOPATH"])
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success());
        if let Some(out) = out {
            let text = String::from_utf8_lossy(&out.stdout);
            let mut lines = text.lines();
            if let Some(gobin) = lines.next().filter(|l| !l.is_empty()) {
                dirs.push(PathBuf::from(gobin));
            }
            // GOPATH may be a list; `go install` writes to the first entry's bin.
            if let Some(gopath) = lines.next().and_then(|l| l.split(':').next()) {
                dirs.push(Path::new(gopath).join("bin"));
            }
            break;
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(Path::new(&home).join("go/bin"));
    }
    dirs.push(PathBuf::from("/root/go/bin"));
    for d in &dirs {
        let p = d.join("minio");
        if p.is_file() {
            return Ok(p);
        }
    }
    Err(HarnessError::NotInstalled {
        searched: dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":"),
    })
}

fn free_port() -> Result<u16, HarnessError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("bind a free port"))?;
    Ok(l.local_addr().map_err(io_err("local address"))?.port())
}

/// `sh -c` program: starts MinIO in the background, waits for its stdin (this process's
/// pipe) to close, then stops MinIO and removes its directory. `$1` the binary, `$2` the
/// directory, `$3` the address.
const SUPERVISOR: &str = r#"
"$1" server "$2/data" --address "$3" --quiet >"$2/log" 2>&1 &
pid=$!
echo "$pid" >"$2/pid"
read -r _ || true
kill "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
rm -rf "$2"
"#;

impl Minio {
    /// The server shared by every test of this process, started on first use. Panics
    /// (failing the test) with what to do when MinIO is missing or does not start.
    pub fn shared() -> &'static Minio {
        static SHARED: OnceLock<Result<Minio, String>> = OnceLock::new();
        match SHARED.get_or_init(|| Minio::start().map_err(|e| e.to_string())) {
            Ok(m) => m,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts a server of its own, stopped when dropped.
    pub fn start() -> Result<Minio, HarnessError> {
        let bin = minio_binary()?;
        let mut last = None;
        // A free port can be taken between the probe and MinIO's bind: try a few.
        for _ in 0..3 {
            match Minio::start_on(&bin, free_port()?) {
                Ok(m) => return Ok(m),
                Err(e @ HarnessError::Start { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| HarnessError::Start {
            detail: "no attempt made".into(),
            log: String::new(),
        }))
    }

    fn start_on(bin: &Path, port: u16) -> Result<Minio, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("mailvault-minio-")
            .tempdir()
            .map_err(io_err("create MinIO's temporary directory"))?
            .keep();
        let address = format!("127.0.0.1:{port}");
        let (audit, webhook) = super::audit::Audit::listen()?;
        let mut shell = Command::new("sh")
            .arg("-c")
            .arg(SUPERVISOR)
            .arg("sh")
            .arg(bin)
            .arg(&dir)
            .arg(&address)
            .env("MINIO_ROOT_USER", ROOT_USER)
            .env("MINIO_ROOT_PASSWORD", ROOT_PASSWORD)
            .env("MINIO_BROWSER", "off")
            .env("MINIO_PROMETHEUS_AUTH_TYPE", "public")
            .env("MINIO_UPDATE", "off")
            .env("MINIO_CI_CD", "on")
            .env("MINIO_AUDIT_WEBHOOK_ENABLE_mailvault", "on")
            .env("MINIO_AUDIT_WEBHOOK_ENDPOINT_mailvault", webhook)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(io_err(format!("start sh for {}", bin.display())))?;
        let stop = shell.stdin.take();
        let m = Minio {
            port,
            dir,
            stop: Mutex::new(stop),
            shell: Mutex::new(shell),
            audit,
        };
        let started = Instant::now();
        loop {
            // Live is not ready: for a moment after /minio/health/live answers, S3 requests
            // get `503 XMinioServerNotInitialized`. Ready is when a bucket can be made.
            if m.live() && m.store("ready", "").is_ok() {
                return Ok(m);
            }
            let log = std::fs::read_to_string(m.dir.join("log")).unwrap_or_default();
            let detail = if !m.server_running() && m.dir.join("pid").exists() {
                Some(format!("{} exited", bin.display()))
            } else if started.elapsed() > START_TIMEOUT {
                Some(format!(
                    "no answer from http://{address}/minio/health/live after {} s",
                    START_TIMEOUT.as_secs()
                ))
            } else {
                None
            };
            if let Some(detail) = detail {
                return Err(HarnessError::Start { detail, log });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Whether MinIO answers its liveness check.
    fn live(&self) -> bool {
        let ask = || -> std::io::Result<bool> {
            let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            write!(
                s,
                "GET /minio/health/live HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
                self.port
            )?;
            let mut head = [0u8; 12];
            s.read_exact(&mut head)?;
            Ok(&head == b"HTTP/1.1 200")
        };
        ask().unwrap_or(false)
    }

    /// Whether the MinIO process is still there (not exited, not a zombie).
    fn server_running(&self) -> bool {
        let Some(pid) = std::fs::read_to_string(self.dir.join("pid"))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
        else {
            return true; // not started yet
        };
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                let state = s.rsplit_once(')')?.1.split_whitespace().next()?.to_string();
                Some(state != "Z" && state != "X")
            })
            .unwrap_or(false)
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`, for a proxy in front of it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Every API call the server has made so far, as its audit log records it.
    pub fn audit(&self) -> &super::audit::Audit {
        &self.audit
    }

    /// What the server has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// The root user's credentials.
    pub fn credentials(&self) -> Credentials {
        Credentials {
            key_id: ROOT_USER.into(),
            secret: ROOT_PASSWORD.into(),
            token: None,
        }
    }

    /// The environment a `mailvault` process needs to reach this server with the root
    /// user's credentials (and nothing of the caller's AWS settings).
    pub fn env(&self) -> Vec<(&'static str, Option<String>)> {
        vec![
            ("AWS_ACCESS_KEY_ID", Some(ROOT_USER.into())),
            ("AWS_SECRET_ACCESS_KEY", Some(ROOT_PASSWORD.into())),
            ("AWS_DEFAULT_REGION", Some(REGION.into())),
            ("AWS_SESSION_TOKEN", None),
            ("AWS_REGION", None),
            ("AWS_PROFILE", None),
            ("AWS_SHARED_CREDENTIALS_FILE", None),
        ]
    }

    /// A bucket name no other test of this process uses (the bucket is not created):
    /// `hint` (e.g. the test's name) makes it recognisable in the server's directory.
    pub fn bucket(&self, hint: &str) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        let n = N.fetch_add(1, Relaxed);
        let hint: String = hint
            .chars()
            .map(|c| match c.to_ascii_lowercase() {
                c @ ('a'..='z' | '0'..='9') => c,
                _ => '-',
            })
            .take(40)
            .collect();
        format!("t{n}-{}", hint.trim_matches('-'))
            .trim_end_matches('-')
            .to_string()
    }

    /// `s3:http://127.0.0.1:PORT/BUCKET[/PREFIX]`, the repository location of a bucket.
    pub fn url(&self, bucket: &str, prefix: &str) -> String {
        url_at(&self.endpoint(), bucket, prefix)
    }

    /// Options for a store on `bucket` under `prefix`, reached through `endpoint` (this
    /// server's, or a proxy's in front of it).
    pub fn options_at(&self, endpoint: &str, bucket: &str, prefix: &str) -> S3Options {
        S3Options {
            endpoint: endpoint.into(),
            bucket: bucket.into(),
            prefix: prefix.into(),
            region: REGION.into(),
            credentials: self.credentials(),
            addressing: Addressing::Path,
        }
    }

    /// A store on `bucket` under `prefix`; the bucket is created when it is missing.
    pub fn store(&self, bucket: &str, prefix: &str) -> Result<S3Store, HarnessError> {
        let s = S3Store::new(self.options_at(&self.endpoint(), bucket, prefix))?;
        s.create_bucket()?;
        Ok(s)
    }

    /// A store on a new `bucket` with Object Lock on and `policy` as its default retention.
    pub fn locked_store(
        &self,
        bucket: &str,
        policy: crate::store::LockPolicy,
    ) -> Result<S3Store, HarnessError> {
        let s = S3Store::new(self.options_at(&self.endpoint(), bucket, ""))?;
        s.create_bucket_with(true)?;
        s.set_lock_policy(policy)?;
        Ok(s)
    }

    /// Stops the server and deletes its data.
    pub fn stop(&self) {
        if let Ok(mut stop) = self.stop.lock() {
            stop.take();
        }
        if let Ok(mut shell) = self.shell.lock() {
            let _ = shell.wait();
        }
    }
}

/// `s3:ENDPOINT/BUCKET[/PREFIX]`.
pub fn url_at(endpoint: &str, bucket: &str, prefix: &str) -> String {
    match prefix.is_empty() {
        true => format!("s3:{endpoint}/{bucket}"),
        false => format!("s3:{endpoint}/{bucket}/{prefix}"),
    }
}

impl Drop for Minio {
    fn drop(&mut self) {
        self.stop();
    }
}
