//! A throw-away Dovecot for integration tests (feature `testing`).
//!
//! [`DovecotServer::start`] writes a self-contained `dovecot.conf` into a
//! temporary directory (its own `base_dir`, `state_dir`, log file and mail
//! root, so several servers run side by side), listens on 127.0.0.1 on free
//! ports (plain/STARTTLS, and TLS with a generated certificate when the
//! `openssl` command exists), accepts any user with one password, has a
//! master user (`admin`, usable as `user*admin` or through SASL PLAIN with an
//! authorization identity), writes `ROOT/mail/<domain>/<user>/Maildir`, and
//! stops when dropped. Options run the mail processes as a given system user
//! ([`DovecotOptions::mail_user`], as a real installation does with `vmail`),
//! or serve an existing mail root ([`DovecotOptions::mail_root`], e.g. a
//! restore's target); [`DovecotServer::deliver`] delivers through the LDA
//! (`dovecot-lda`), which leaves the message in `new/`.
//!
//! [`cyrus`] is the same for Cyrus IMAP.
//!
//! Tests that need it should call [`DovecotServer::start_or_skip`]: it fails
//! when Dovecot is missing (so CI cannot pass by accident) unless
//! `MAILVAULT_SKIP_DOVECOT=1` is set. `MAILVAULT_DOVECOT` may name the binary.
//!
//! ```no_run
//! use mailvault_imap::testing::DovecotServer;
//! let Some(server) = DovecotServer::start_or_skip().expect("dovecot") else { return };
//! let mut session = server.client().login(&server.user("bob@example.org")).expect("login");
//! session.create("Archive/2024", None).expect("create");
//! ```

use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::client::options::{ClientOptions, Credentials, Endpoint, TlsOptions};
use crate::client::session::Client;

pub mod cyrus;

/// Password of every user.
pub const USER_PASSWORD: &str = "secret";
/// The master user.
pub const MASTER_USER: &str = "admin";
/// The master user's password.
pub const MASTER_PASSWORD: &str = "adminpass";

/// Why the test server could not start.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// No Dovecot binary.
    #[error("dovecot not found (looked in {searched}); install dovecot-imapd, point MAILVAULT_DOVECOT at the binary, or set MAILVAULT_SKIP_DOVECOT=1 to skip these tests")]
    NotInstalled {
        /// Where it was looked for.
        searched: String,
    },
    /// No Cyrus IMAP.
    #[error("Cyrus IMAP not found (looked in {searched}); run scripts/setup.sh (it unpacks Debian's cyrus-imapd into /opt/mailvault-cyrus), point MAILVAULT_CYRUS_DIR at such a directory, or set MAILVAULT_SKIP_CYRUS=1 to skip these tests")]
    CyrusNotInstalled {
        /// Where it was looked for.
        searched: String,
    },
    /// A file or process operation failed.
    #[error("test mail server: {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Dovecot did not come up.
    #[error("test mail server did not start: {detail}\n--- log ---\n{log}")]
    Start {
        /// What happened.
        detail: String,
        /// Its log.
        log: String,
    },
    /// A client could not be built for it.
    #[error("test Dovecot client: {0}")]
    Client(#[from] crate::Error),
    /// The LDA refused a message.
    #[error("dovecot-lda for {account} (folder {folder}) failed with {status}: {output}")]
    Deliver {
        /// The recipient.
        account: String,
        /// The folder asked for (`INBOX` when none).
        folder: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed.
        output: String,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> HarnessError {
    let what = what.into();
    move |source| HarnessError::Io { what, source }
}

/// Extra settings for the test server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DovecotOptions {
    /// Enable the quota plugin with this storage limit per user (bytes):
    /// APPENDs beyond it fail with `[OVERQUOTA]`.
    pub quota_storage_bytes: Option<u64>,
    /// Enable the quota plugin's `quota_max_mail_size`: larger messages are
    /// refused.
    pub quota_max_mail_size: Option<u64>,
    /// Raw lines appended to the configuration.
    pub extra_config: String,
    /// Where to create the server's temporary directory (default: the
    /// system temp dir). `/dev/shm` takes the file system out of a benchmark.
    pub temp_parent: Option<PathBuf>,
    /// When the harness runs as root: run the mail processes (and the LDA)
    /// as this system user (uid and gid from /etc/passwd) instead of
    /// `nobody`; a new mail root is made theirs. Dovecot then creates every
    /// folder 0700, as on a real server. Ignored when not root.
    pub mail_user: Option<String>,
    /// Serve this existing directory (`<domain>/<user>/Maildir` below it)
    /// instead of a new, empty mail root; it is used as it is (no chown).
    pub mail_root: Option<PathBuf>,
    /// The only users the server has (a `passwd-file` passdb, each with the test
    /// password); empty: every name is a user (a `static` passdb).
    pub users: Vec<String>,
}

/// A running Dovecot; stopped and deleted on drop.
#[derive(Debug)]
pub struct DovecotServer {
    dir: tempfile::TempDir,
    mail_root: PathBuf,
    child: Option<Child>,
    port: u16,
    tls_port: Option<u16>,
    version: String,
}

/// Finds the `dovecot` binary.
pub fn dovecot_binary() -> Result<PathBuf, HarnessError> {
    if let Some(p) = std::env::var_os("MAILVAULT_DOVECOT") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        return Err(HarnessError::NotInstalled {
            searched: format!("MAILVAULT_DOVECOT={}", p.display()),
        });
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin"].map(PathBuf::from));
    for d in &dirs {
        let p = d.join("dovecot");
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

/// Finds Dovecot's LDA, `dovecot-lda`.
fn lda_binary() -> Result<PathBuf, HarnessError> {
    if let Some(p) = std::env::var_os("MAILVAULT_DOVECOT_LDA") {
        return Ok(PathBuf::from(p));
    }
    let dirs = [
        "/usr/lib/dovecot",
        "/usr/libexec/dovecot",
        "/usr/local/libexec/dovecot",
    ];
    dirs.iter()
        .map(|d| Path::new(d).join("dovecot-lda"))
        .find(|p| p.is_file())
        .ok_or_else(|| HarnessError::NotInstalled {
            searched: format!("dovecot-lda in {}", dirs.join(":")),
        })
}

fn skip_requested() -> bool {
    std::env::var("MAILVAULT_SKIP_DOVECOT").is_ok_and(|v| v == "1")
}

fn free_port() -> Result<u16, HarnessError> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("bind a free port"))?;
    Ok(l.local_addr().map_err(io_err("local address"))?.port())
}

/// uid, gid and name of a passwd entry, by name or by uid.
fn passwd_entry(by_name: Option<&str>, by_uid: Option<u32>) -> Option<(u32, u32, String)> {
    let text = fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        let (name, uid, gid) = (f.first()?, f.get(2)?.parse().ok()?, f.get(3)?.parse().ok()?);
        let hit = by_name.is_some_and(|n| n == *name) || by_uid == Some(uid);
        hit.then(|| (uid, gid, name.to_string()))
    })
}

/// The name of group `gid`.
fn group_name(gid: u32) -> Option<String> {
    let text = fs::read_to_string("/etc/group").ok()?;
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.get(2)?.parse::<u32>().ok()? == gid).then(|| f[0].to_string())
    })
}

impl DovecotServer {
    /// Starts a server with default options. Fails if Dovecot is missing.
    pub fn start() -> Result<DovecotServer, HarnessError> {
        DovecotServer::start_with(&DovecotOptions::default())
    }

    /// Like [`start`](Self::start), but `Ok(None)` when Dovecot is missing
    /// and `MAILVAULT_SKIP_DOVECOT=1` is set (the test should return).
    pub fn start_or_skip() -> Result<Option<DovecotServer>, HarnessError> {
        DovecotServer::start_or_skip_with(&DovecotOptions::default())
    }

    /// [`start_or_skip`](Self::start_or_skip) with options.
    pub fn start_or_skip_with(
        opts: &DovecotOptions,
    ) -> Result<Option<DovecotServer>, HarnessError> {
        match dovecot_binary() {
            Err(e) if skip_requested() => {
                eprintln!("skipping Dovecot test: {e}");
                Ok(None)
            }
            Err(e) => Err(e),
            Ok(_) => DovecotServer::start_with(opts).map(Some),
        }
    }

    /// Starts a server with `opts`. Retries with new ports if one was taken
    /// in the meantime.
    pub fn start_with(opts: &DovecotOptions) -> Result<DovecotServer, HarnessError> {
        let bin = dovecot_binary()?;
        three_tries(|| DovecotServer::try_start(&bin, opts))
    }

    fn try_start(bin: &Path, opts: &DovecotOptions) -> Result<DovecotServer, HarnessError> {
        let mut builder = tempfile::Builder::new();
        builder.prefix("mv-dovecot-");
        let dir = match &opts.temp_parent {
            Some(parent) => builder.tempdir_in(parent),
            None => builder.tempdir(),
        }
        .map_err(io_err("create temp dir"))?;
        let root = dir.path().to_path_buf();
        // Dovecot's mail processes run unprivileged and must reach the mail root.
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755))
            .map_err(io_err("chmod temp dir"))?;
        for d in ["run", "state"] {
            fs::create_dir(root.join(d)).map_err(io_err(format!("create {d}")))?;
        }
        let mail = match &opts.mail_root {
            Some(m) => m.clone(),
            None => {
                let m = root.join("mail");
                fs::create_dir(&m).map_err(io_err("create mail"))?;
                m
            }
        };
        let euid = fs::metadata("/proc/self")
            .map(|m| m.uid())
            .map_err(io_err("find own uid"))?;
        let is_root = euid == 0;
        let (mail_uid, mail_gid, internal_user, login_user) = if is_root {
            let (uid, gid, _) = match &opts.mail_user {
                Some(user) => {
                    passwd_entry(Some(user), None).ok_or_else(|| HarnessError::Start {
                        detail: format!(
                        "mail user {user:?} has no /etc/passwd entry (scripts/setup.sh creates it)"
                    ),
                        log: String::new(),
                    })?
                }
                None => {
                    passwd_entry(Some("nobody"), None).unwrap_or((65534, 65534, "nobody".into()))
                }
            };
            if opts.mail_root.is_none() {
                std::os::unix::fs::chown(&mail, Some(uid), Some(gid))
                    .map_err(io_err("chown mail root"))?;
            }
            let internal = if passwd_entry(Some("dovecot"), None).is_some() {
                "dovecot"
            } else {
                "nobody"
            };
            let login = if passwd_entry(Some("dovenull"), None).is_some() {
                "dovenull"
            } else {
                "nobody"
            };
            (uid, gid, internal.to_string(), login.to_string())
        } else {
            let (uid, gid, name) =
                passwd_entry(None, Some(euid)).ok_or_else(|| HarnessError::Start {
                    detail: format!("uid {euid} has no /etc/passwd entry"),
                    log: String::new(),
                })?;
            (uid, gid, name.clone(), name)
        };
        // Unprivileged: the internal group must be one this user is in.
        let internal_group = if is_root { None } else { group_name(mail_gid) };

        let tls = make_certs(&root);
        let port = free_port()?;
        let tls_port = if tls { Some(free_port()?) } else { None };
        fs::write(
            root.join("master-users"),
            format!("{MASTER_USER}:{{PLAIN}}{MASTER_PASSWORD}\n"),
        )
        .map_err(io_err("write master-users"))?;

        let users: String = (opts.users.iter())
            .map(|u| format!("{u}:{{PLAIN}}{USER_PASSWORD}\n"))
            .collect();
        fs::write(root.join("users"), users).map_err(io_err("write users"))?;
        let r = root.display();
        let m = mail.display();
        let user_passdb = match opts.users.is_empty() {
            true => format!("driver = static\n  args = password={USER_PASSWORD}"),
            false => format!("driver = passwd-file\n  args = {r}/users"),
        };
        let mut conf = String::new();
        let instance = format!("mvtest-{port}");
        let _ = write!(
            conf,
            "# Generated by mailvault_imap::testing\n\
             base_dir = {r}/run\n\
             state_dir = {r}/state\n\
             instance_name = {instance}\n\
             protocols = imap\n\
             listen = 127.0.0.1\n\
             log_path = {r}/dovecot.log\n\
             info_log_path = {r}/dovecot.log\n\
             disable_plaintext_auth = no\n\
             auth_mechanisms = plain login\n\
             auth_master_user_separator = *\n\
             mail_location = maildir:{m}/%d/%n/Maildir\n\
             mail_uid = {mail_uid}\n\
             mail_gid = {mail_gid}\n\
             first_valid_uid = 1\n\
             first_valid_gid = 1\n\
             mail_fsync = never\n\
             maildir_very_dirty_syncs = yes\n\
             imap_max_line_length = 64M\n\
             mail_max_userip_connections = 1000\n\
             default_internal_user = {internal_user}\n\
             default_login_user = {login_user}\n\
             default_vsz_limit = 1G\n",
        );
        if let Some(g) = &internal_group {
            let _ = writeln!(conf, "default_internal_group = {g}");
        }
        if tls {
            let _ = write!(
                conf,
                "ssl = yes\nssl_cert = <{r}/cert.pem\nssl_key = <{r}/key.pem\n"
            );
        } else {
            conf.push_str("ssl = no\n");
        }
        let quota = opts.quota_storage_bytes.is_some() || opts.quota_max_mail_size.is_some();
        if quota {
            conf.push_str("mail_plugins = quota\nprotocol imap {\n  mail_plugins = quota imap_quota\n}\nplugin {\n  quota = maildir:User quota\n");
            if let Some(b) = opts.quota_storage_bytes {
                let _ = writeln!(conf, "  quota_rule = *:storage={b}B");
            }
            if let Some(b) = opts.quota_max_mail_size {
                let _ = writeln!(conf, "  quota_max_mail_size = {b}B");
            }
            conf.push_str("}\n");
        } else {
            conf.push_str("mail_plugins =\n");
        }
        let _ = write!(
            conf,
            "passdb {{\n  driver = passwd-file\n  args = {r}/master-users\n  master = yes\n  pass = yes\n}}\n\
             passdb {{\n  {user_passdb}\n}}\n\
             userdb {{\n  driver = static\n  args = uid={mail_uid} gid={mail_gid} home={m}/%d/%n\n}}\n\
             namespace inbox {{\n  inbox = yes\n  separator = /\n\
             \x20 mailbox Drafts {{\n    special_use = \\Drafts\n  }}\n\
             \x20 mailbox Sent {{\n    special_use = \\Sent\n  }}\n\
             \x20 mailbox Trash {{\n    special_use = \\Trash\n  }}\n\
             \x20 mailbox Junk {{\n    special_use = \\Junk\n  }}\n\
             \x20 mailbox Archive {{\n    special_use = \\Archive\n  }}\n}}\n\
             service imap-login {{\n  inet_listener imap {{\n    address = 127.0.0.1\n    port = {port}\n  }}\n"
        );
        match tls_port {
            Some(p) => {
                let _ = write!(
                    conf,
                    "  inet_listener imaps {{\n    address = 127.0.0.1\n    port = {p}\n    ssl = yes\n  }}\n"
                );
            }
            None => conf.push_str("  inet_listener imaps {\n    port = 0\n  }\n"),
        }
        if !is_root {
            conf.push_str("  chroot =\n");
        }
        conf.push_str("}\n");
        if !is_root {
            conf.push_str("service imap-urlauth-login {\n  chroot =\n}\n");
        }
        conf.push_str(&opts.extra_config);
        conf.push('\n');
        let conf_path = root.join("dovecot.conf");
        fs::write(&conf_path, conf).map_err(io_err("write dovecot.conf"))?;

        let version = Command::new(bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let stdout =
            fs::File::create(root.join("stdout.log")).map_err(io_err("create stdout.log"))?;
        let stderr = stdout.try_clone().map_err(io_err("dup stdout.log"))?;
        // Its own process group, so that stop() also ends the imap
        // processes, which outlive the master when a client is connected.
        let child = Command::new(bin)
            .process_group(0)
            .arg("-F")
            .arg("-c")
            .arg(&conf_path)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .map_err(io_err(format!("run {}", bin.display())))?;
        let mut server = DovecotServer {
            dir,
            mail_root: mail,
            child: Some(child),
            port,
            tls_port,
            version,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), HarnessError> {
        let ports: Vec<u16> = std::iter::once(self.port).chain(self.tls_port).collect();
        let dir = self.dir.path();
        wait_ready(&mut self.child, "dovecot", &ports, 15, || dovecot_log(dir))
    }

    /// The plain/STARTTLS port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The TLS port, if a certificate could be made.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// `imap://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("imap://127.0.0.1:{}", self.port)
    }

    /// `imaps://127.0.0.1:PORT`, if TLS is on.
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port.map(|p| format!("imaps://127.0.0.1:{p}"))
    }

    /// The PEM file of the CA that signed the server certificate, if TLS is on.
    pub fn ca_file(&self) -> Option<PathBuf> {
        self.tls_port.map(|_| self.dir.path().join("ca.pem"))
    }

    /// The temporary directory (config, log, certificates, mail).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// Where Dovecot keeps mail: `mail_root()/<domain>/<user>/Maildir`.
    pub fn mail_root(&self) -> PathBuf {
        self.mail_root.clone()
    }

    /// Delivers `message` to `account` (into `folder`, default INBOX) through
    /// Dovecot's LDA, as an MTA would: the message lands in `new/`.
    /// `MAILVAULT_DOVECOT_LDA` may name the binary.
    pub fn deliver(
        &self,
        account: &str,
        folder: Option<&str>,
        message: &[u8],
    ) -> Result<(), HarnessError> {
        use std::io::Write as _;
        let lda = lda_binary()?;
        let mut cmd = Command::new(&lda);
        cmd.arg("-c")
            .arg(self.dir.path().join("dovecot.conf"))
            .args(["-d", account, "-f", "sender@example.net"]);
        if let Some(f) = folder {
            cmd.args(["-m", f]);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err(format!("run {}", lda.display())))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(message)
                .map_err(io_err("write to dovecot-lda"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(io_err("wait for dovecot-lda"))?;
        if out.status.success() {
            return Ok(());
        }
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        Err(HarnessError::Deliver {
            account: account.into(),
            folder: folder.unwrap_or("INBOX").into(),
            status: out.status,
            output,
        })
    }

    /// The Maildir of `user@domain` (or of a user without domain).
    pub fn maildir(&self, account: &str) -> PathBuf {
        let (user, domain) = account.split_once('@').unwrap_or((account, ""));
        self.mail_root().join(domain).join(user).join("Maildir")
    }

    /// The master user's name.
    pub fn master_user(&self) -> &'static str {
        MASTER_USER
    }

    /// The master user's password.
    pub fn master_password(&self) -> &'static str {
        MASTER_PASSWORD
    }

    /// The password every user has.
    pub fn password(&self) -> &'static str {
        USER_PASSWORD
    }

    /// `dovecot --version`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The server log so far.
    pub fn log(&self) -> String {
        dovecot_log(self.dir.path())
    }

    /// Client options for the plain port.
    pub fn client_options(&self) -> ClientOptions {
        plain_client_options(self.port)
    }

    /// Client options for TLS (`imaps`, trusting the generated CA), if on.
    pub fn tls_client_options(&self) -> Option<ClientOptions> {
        let port = self.tls_port?;
        let mut o = self.client_options();
        o.endpoint = Endpoint {
            host: "127.0.0.1".into(),
            port,
            security: crate::Security::Tls,
        };
        o.tls = TlsOptions {
            system_roots: false,
            ca_file: self.ca_file(),
            insecure: false,
        };
        Some(o)
    }

    /// A client for the plain port.
    pub fn client(&self) -> Client {
        plain_client(self.port)
    }

    /// Logs in as `account` itself.
    pub fn user(&self, account: &str) -> Credentials {
        Credentials::User {
            user: account.into(),
            password: USER_PASSWORD.into(),
        }
    }

    /// Logs in as the master user acting for `account` (SASL PLAIN).
    pub fn master(&self, account: &str) -> Credentials {
        Credentials::Master {
            user: account.into(),
            master: MASTER_USER.into(),
            password: MASTER_PASSWORD.into(),
        }
    }

    /// Stops the server now (also done on drop).
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            stop_group(child);
        }
    }
}

/// The server log of a Dovecot in `dir`: its own log, then what it printed.
fn dovecot_log(dir: &Path) -> String {
    let mut s = fs::read_to_string(dir.join("dovecot.log")).unwrap_or_default();
    s.push_str(&fs::read_to_string(dir.join("stdout.log")).unwrap_or_default());
    s
}

/// Runs `start` up to three times while it fails to start (a port taken in the
/// meantime); other errors end it at once.
fn three_tries<T>(mut start: impl FnMut() -> Result<T, HarnessError>) -> Result<T, HarnessError> {
    let mut last = None;
    for _ in 0..3 {
        match start() {
            Ok(s) => return Ok(s),
            Err(e @ HarnessError::Start { .. }) => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| HarnessError::Start {
        detail: "no attempt made".into(),
        log: String::new(),
    }))
}

/// Waits up to `secs` seconds until every port of a server (`what`, for the errors)
/// takes connections and the first one greets with `* OK`; fails, with the server's
/// `log`, if its process `child` exits first.
fn wait_ready(
    child: &mut Option<Child>,
    what: &str,
    ports: &[u16],
    secs: u64,
    log: impl Fn() -> String,
) -> Result<(), HarnessError> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(c) = child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                *child = None;
                return Err(HarnessError::Start {
                    detail: format!("{what} exited with {status}"),
                    log: log(),
                });
            }
        }
        let ready = ports.iter().enumerate().all(|(i, &p)| {
            // A greeting proves the login process is serving.
            TcpStream::connect(("127.0.0.1", p)).is_ok_and(|mut s| {
                let _ = s.set_read_timeout(Some(Duration::from_millis(1000)));
                i > 0 || {
                    let mut buf = [0u8; 64];
                    s.read(&mut buf)
                        .is_ok_and(|n| buf[..n].starts_with(b"* OK"))
                }
            })
        });
        if ready {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(HarnessError::Start {
                detail: format!("{what}: ports {ports:?} not ready after {secs} s"),
                log: log(),
            });
        }
        sleep(Duration::from_millis(50));
    }
}

/// Client options for a plain port on 127.0.0.1 (60 s I/O timeout).
fn plain_client_options(port: u16) -> ClientOptions {
    let mut o = ClientOptions::new(Endpoint {
        host: "127.0.0.1".into(),
        port,
        security: crate::Security::Plain,
    });
    o.io_timeout = Duration::from_secs(60);
    o
}

/// A client for a plain port on 127.0.0.1.
fn plain_client(port: u16) -> Client {
    match Client::new(plain_client_options(port)) {
        Ok(c) => c,
        // Plain targets need no TLS setup, so this cannot fail.
        Err(e) => unreachable!("plain client: {e}"),
    }
}

/// Stops a server started in its own process group: SIGTERM to the whole
/// group (the master stops cleanly, logging out clients), then SIGKILL to
/// whatever is left of it.
fn stop_group(mut child: Child) {
    let group = format!("-{}", child.id());
    let signal = |sig: &str| {
        let _ = Command::new("kill")
            .args([sig, "--", &group])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    };
    signal("-TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut exited = false;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            exited = true;
            break;
        }
        sleep(Duration::from_millis(20));
    }
    signal("-KILL");
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for DovecotServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A CA and a server certificate for 127.0.0.1/localhost, with the openssl
/// command. Returns false (no TLS) if that fails.
fn make_certs(root: &Path) -> bool {
    let run = |args: &[&str]| {
        Command::new("openssl")
            .args(args)
            .current_dir(root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ext = "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n";
    if fs::write(root.join("ext.cnf"), ext).is_err() {
        return false;
    }
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "7",
        "-subj",
        "/CN=mailvault test CA",
    ]);
    let mut req = vec!["req"];
    req.extend(ec);
    req.extend([
        "-keyout",
        "key.pem",
        "-out",
        "req.csr",
        "-subj",
        "/CN=localhost",
    ]);
    run(&ca)
        && run(&req)
        && run(&[
            "x509",
            "-req",
            "-in",
            "req.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "cert.pem",
            "-days",
            "7",
            "-extfile",
            "ext.cnf",
        ])
}
