//! A throw-away Cyrus IMAP for integration tests (feature `testing`).
//!
//! [`CyrusServer::start`] writes its own `imapd.conf` and `cyrus.conf` into a
//! temporary directory (configuration directory, one partition, a sasldb),
//! configured as a typical multi-domain installation: `altnamespace`,
//! `unixhierarchysep` (`/` separates levels, so `user/bob@example.org`),
//! `virtdomains: userid`, an admin (`admin`) that is also in `proxyservers`
//! (so it can act for any user with SASL PLAIN and an authorization
//! identity), and sasldb users. It listens on 127.0.0.1 on a free port and
//! stops when dropped. As root it runs as the `cyrus` user (scripts/setup.sh
//! creates it), else as the calling user.
//!
//! Cyrus comes from Debian's `cyrus-imapd` 3.6 packages unpacked into
//! `/opt/mailvault-cyrus` by scripts/setup.sh (Debian's `cyrus-imapd` and
//! `dovecot-imapd` conflict, so it is not installed as a package);
//! `MAILVAULT_CYRUS_DIR` may name another such directory, and an installed
//! package (`/usr/lib/cyrus/bin/master`) is used when there is none. Tests
//! should call [`CyrusServer::start_or_skip`]: it fails when Cyrus is
//! missing unless `MAILVAULT_SKIP_CYRUS=1` is set.
//!
//! Accounts do not exist until the admin creates their INBOX
//! ([`CyrusServer::create_account`]).
//!
//! Cyrus logs only to syslog; the harness has no log to show when it fails.

use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::{free_port, io_err, passwd_entry, HarnessError, MASTER_USER, USER_PASSWORD};
use crate::client::options::{ClientOptions, Credentials};
use crate::client::session::Client;

/// The password of the admin (the same as Dovecot's master user's).
pub const ADMIN_PASSWORD: &str = super::MASTER_PASSWORD;

/// The `servername` (also the SASL realm of users without a domain).
const SERVER_NAME: &str = "mvtest";

/// Where a Cyrus installation is: its `master` and its own libraries.
#[derive(Debug, Clone)]
struct Install {
    bin: PathBuf,
    lib: Option<PathBuf>,
}

fn find_install() -> Result<Install, HarnessError> {
    let explicit = std::env::var_os("MAILVAULT_CYRUS_DIR").map(PathBuf::from);
    let mut tried = Vec::new();
    let candidates: Vec<PathBuf> = match &explicit {
        Some(d) => vec![d.clone()],
        None => vec![PathBuf::from("/opt/mailvault-cyrus"), PathBuf::from("/")],
    };
    for root in candidates {
        let bin = root.join("usr/lib/cyrus/bin");
        tried.push(bin.display().to_string());
        if bin.join("master").is_file() && bin.join("imapd").is_file() {
            let lib = root.join("usr/lib/x86_64-linux-gnu");
            let own_libs = root != Path::new("/") && lib.join("libcyrus_imap.so.0").exists();
            return Ok(Install {
                bin,
                lib: own_libs.then_some(lib),
            });
        }
    }
    Err(HarnessError::CyrusNotInstalled {
        searched: tried.join(", "),
    })
}

fn saslpasswd2() -> Result<PathBuf, HarnessError> {
    [
        "/usr/sbin/saslpasswd2",
        "/usr/bin/saslpasswd2",
        "/sbin/saslpasswd2",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.is_file())
    .ok_or_else(|| HarnessError::CyrusNotInstalled {
        searched: "saslpasswd2 (package sasl2-bin)".into(),
    })
}

fn skip_requested() -> bool {
    std::env::var("MAILVAULT_SKIP_CYRUS").is_ok_and(|v| v == "1")
}

/// A running Cyrus IMAP; stopped and deleted on drop.
#[derive(Debug)]
pub struct CyrusServer {
    dir: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
    sieve_port: u16,
    owner: Option<(u32, u32)>,
}

impl CyrusServer {
    /// `Ok(None)` when Cyrus is missing and `MAILVAULT_SKIP_CYRUS=1` is set
    /// (the test should return); else [`start`](Self::start).
    pub fn start_or_skip() -> Result<Option<CyrusServer>, HarnessError> {
        match find_install().and_then(|i| saslpasswd2().map(|_| i)) {
            Err(e) if skip_requested() => {
                eprintln!("skipping Cyrus test: {e}");
                Ok(None)
            }
            Err(e) => Err(e),
            Ok(_) => CyrusServer::start().map(Some),
        }
    }

    /// Starts a server (retrying with another port if one was taken).
    pub fn start() -> Result<CyrusServer, HarnessError> {
        let install = find_install()?;
        super::three_tries(|| CyrusServer::try_start(&install))
    }

    fn try_start(install: &Install) -> Result<CyrusServer, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("mv-cyrus-")
            .tempdir()
            .map_err(io_err("create temp dir"))?;
        let root = dir.path().to_path_buf();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755))
            .map_err(io_err("chmod temp dir"))?;
        let config = root.join("config");
        for d in [
            "db", "proc", "socket", "lock", "log", "msg", "ptclient", "sync", "quota", "user",
            "sieve",
        ] {
            fs::create_dir_all(config.join(d)).map_err(io_err(format!("create config/{d}")))?;
        }
        fs::create_dir(root.join("spool")).map_err(io_err("create spool"))?;
        let euid = fs::metadata("/proc/self")
            .map(|m| m.uid())
            .map_err(io_err("find own uid"))?;
        let (cyrus_user, owner) = if euid == 0 {
            let (uid, gid, name) =
                passwd_entry(Some("cyrus"), None).ok_or_else(|| HarnessError::Start {
                    detail: "no user \"cyrus\" (scripts/setup.sh creates it)".into(),
                    log: String::new(),
                })?;
            (name, Some((uid, gid)))
        } else {
            let (_, _, name) =
                passwd_entry(None, Some(euid)).ok_or_else(|| HarnessError::Start {
                    detail: format!("uid {euid} has no /etc/passwd entry"),
                    log: String::new(),
                })?;
            (name, None)
        };
        let port = free_port()?;
        let sieve_port = free_port()?;
        let r = root.display();
        let b = install.bin.display();
        let mut imapd = String::new();
        let _ = write!(
            imapd,
            "# Generated by mailvault_imap::testing::cyrus\n\
             configdirectory: {r}/config\n\
             partition-default: {r}/spool\n\
             defaultpartition: default\n\
             servername: {SERVER_NAME}\n\
             admins: {MASTER_USER}\n\
             proxyservers: {MASTER_USER}\n\
             altnamespace: yes\n\
             unixhierarchysep: yes\n\
             virtdomains: userid\n\
             sasl_pwcheck_method: auxprop\n\
             sasl_auxprop_plugin: sasldb\n\
             sasl_sasldb_path: {r}/sasldb2\n\
             sasl_mech_list: PLAIN LOGIN\n\
             allowplaintext: yes\n\
             cyrus_user: {cyrus_user}\n\
             sievedir: {r}/config/sieve\n\
             lmtpsocket: {r}/config/socket/lmtp\n\
             idlesocket: {r}/config/socket/idle\n\
             notifysocket: {r}/config/socket/notify\n\
             specialusealways: yes\n\
             maxlogins_per_user: 0\n"
        );
        if owner.is_none() {
            // Its group must be one the calling user is in.
            let gid = fs::metadata("/proc/self")
                .map(|m| m.gid())
                .map_err(io_err("find own gid"))?;
            if let Some(g) = super::group_name(gid) {
                let _ = writeln!(imapd, "cyrus_group: {g}");
            }
        } else {
            imapd.push_str("cyrus_group: mail\n");
        }
        let conf = root.join("imapd.conf");
        fs::write(&conf, imapd).map_err(io_err("write imapd.conf"))?;
        let c = conf.display();
        let master_conf = format!(
            "START {{\n  recover cmd=\"{b}/ctl_cyrusdb -C {c} -r\"\n}}\n\
             SERVICES {{\n  imap cmd=\"{b}/imapd -C {c}\" listen=\"127.0.0.1:{port}\" prefork=0\n\
             \x20 sieve cmd=\"{b}/timsieved -C {c}\" listen=\"127.0.0.1:{sieve_port}\" prefork=0\n}}\n\
             EVENTS {{\n}}\n"
        );
        fs::write(root.join("cyrus.conf"), master_conf).map_err(io_err("write cyrus.conf"))?;
        let mut server = CyrusServer {
            dir,
            child: None,
            port,
            sieve_port,
            owner,
        };
        server.add_user(MASTER_USER, ADMIN_PASSWORD)?;
        if let Some((uid, gid)) = owner {
            chown_tree(&root, uid, gid)?;
        }
        let out = fs::File::create(root.join("stdout.log")).map_err(io_err("create stdout.log"))?;
        let err = out.try_clone().map_err(io_err("dup stdout.log"))?;
        let mut cmd = Command::new(install.bin.join("master"));
        if let Some(lib) = &install.lib {
            cmd.env("LD_LIBRARY_PATH", lib);
        }
        // Its own process group, so that stop() ends the services too.
        let child = cmd
            .process_group(0)
            .arg("-C")
            .arg(&conf)
            .arg("-M")
            .arg(root.join("cyrus.conf"))
            .arg("-p")
            .arg(root.join("master.pid"))
            .arg("-D")
            .current_dir(&root)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(io_err(format!("run {}/master", install.bin.display())))?;
        server.child = Some(child);
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&mut self) -> Result<(), HarnessError> {
        let dir = self.dir.path();
        let ports = [self.port, self.sieve_port];
        super::wait_ready(&mut self.child, "Cyrus master", &ports, 20, || {
            cyrus_log(dir)
        })
    }

    /// Adds (or replaces) a sasldb user: `bob@example.org` is user `bob` in
    /// realm `example.org`, as `virtdomains: userid` looks it up.
    pub fn add_user(&self, account: &str, password: &str) -> Result<(), HarnessError> {
        let (user, realm) = account.split_once('@').unwrap_or((account, SERVER_NAME));
        let db = self.dir.path().join("sasldb2");
        let bin = saslpasswd2()?;
        let mut child = Command::new(&bin)
            .arg("-f")
            .arg(&db)
            .args(["-p", "-c", "-u", realm, user])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err(format!("run {}", bin.display())))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(password.as_bytes())
                .map_err(io_err("write to saslpasswd2"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(io_err("wait for saslpasswd2"))?;
        if !out.status.success() {
            return Err(HarnessError::Start {
                detail: format!(
                    "saslpasswd2 for {account} failed with {}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                ),
                log: String::new(),
            });
        }
        if let Some((uid, gid)) = self.owner {
            std::os::unix::fs::chown(&db, Some(uid), Some(gid)).map_err(io_err("chown sasldb"))?;
        }
        Ok(())
    }

    /// Makes `account` a user (password [`USER_PASSWORD`]) and has the admin
    /// create its INBOX (`user/<account>`).
    pub fn create_account(&self, account: &str) -> Result<(), HarnessError> {
        self.add_user(account, USER_PASSWORD)?;
        let mut s = self.client().login(&Credentials::User {
            user: MASTER_USER.into(),
            password: ADMIN_PASSWORD.into(),
        })?;
        s.create(&format!("user/{account}"), None)?;
        s.logout()?;
        Ok(())
    }

    /// The port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// ManageSieve's port (`timsieved`).
    pub fn sieve_port(&self) -> u16 {
        self.sieve_port
    }

    /// `imap://127.0.0.1:port`.
    pub fn url(&self) -> String {
        format!("imap://127.0.0.1:{}", self.port)
    }

    /// The temporary directory (configuration, partition `spool/`, sasldb).
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The admin's name (in `admins` and `proxyservers`).
    pub fn admin_user(&self) -> &'static str {
        MASTER_USER
    }

    /// The admin's password.
    pub fn admin_password(&self) -> &'static str {
        ADMIN_PASSWORD
    }

    /// The password of users made by [`create_account`](Self::create_account).
    pub fn password(&self) -> &'static str {
        USER_PASSWORD
    }

    /// What the master printed (Cyrus itself logs to syslog only).
    pub fn log(&self) -> String {
        cyrus_log(self.dir.path())
    }

    /// Client options for the port.
    pub fn client_options(&self) -> ClientOptions {
        super::plain_client_options(self.port)
    }

    /// A client for the port.
    pub fn client(&self) -> Client {
        super::plain_client(self.port)
    }

    /// Logs in as `account` itself.
    pub fn user(&self, account: &str) -> Credentials {
        Credentials::User {
            user: account.into(),
            password: USER_PASSWORD.into(),
        }
    }

    /// Logs in as the admin acting for `account` (SASL PLAIN, `proxyservers`).
    pub fn admin(&self, account: &str) -> Credentials {
        Credentials::Master {
            user: account.into(),
            master: MASTER_USER.into(),
            password: ADMIN_PASSWORD.into(),
        }
    }

    /// Stops the server now (also done on drop).
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            super::stop_group(child);
        }
    }
}

impl Drop for CyrusServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the master of a Cyrus in `dir` printed.
fn cyrus_log(dir: &Path) -> String {
    fs::read_to_string(dir.join("stdout.log")).unwrap_or_default()
}

fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), HarnessError> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))
        .map_err(io_err(format!("chown {}", path.display())))?;
    if fs::symlink_metadata(path)
        .map_err(io_err(format!("stat {}", path.display())))?
        .is_dir()
    {
        for e in fs::read_dir(path).map_err(io_err(format!("list {}", path.display())))? {
            let e = e.map_err(io_err(format!("list {}", path.display())))?;
            chown_tree(&e.path(), uid, gid)?;
        }
    }
    Ok(())
}
