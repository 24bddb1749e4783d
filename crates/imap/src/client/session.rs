//! [`Client`] (connection settings shared by many sessions) and [`Session`]
//! (one blocking IMAP connection): connect, greeting, STARTTLS, login, and
//! the command/response loop the other client modules build on.
//!
//! A `Session` is `Send`: open one per thread (the engine's worker threads
//! each own theirs). A `Client` is cheap to clone and shares the TLS setup.

use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use rustls::ClientConfig;

use super::conn::{Conn, ConnError};
use super::options::{ClientOptions, Credentials, Security};
use super::stream::{start_tls, tls_config, Stream};
use crate::error::{Error, Result};
use crate::proto::capability::{sasl_plain, Capabilities};
use crate::proto::command::{Command, CommandBuilder, LiteralMode};
use crate::proto::response::{parse_response, Code, Response, Status, StatusText, Untagged};

/// Opens sessions to one server. Clone it freely (it is an `Arc`) and share
/// it between threads.
#[derive(Debug, Clone)]
pub struct Client {
    inner: Arc<ClientInner>,
}

#[derive(Debug)]
pub(crate) struct ClientInner {
    pub(crate) opts: ClientOptions,
    pub(crate) tls: Option<Arc<ClientConfig>>,
}

impl Client {
    /// Checks the options and prepares TLS (loading root certificates once).
    pub fn new(opts: ClientOptions) -> Result<Client> {
        let tls = match opts.endpoint.security {
            Security::Plain => None,
            Security::StartTls | Security::Tls => {
                Some(tls_config(&opts.tls, &opts.endpoint.server())?)
            }
        };
        Ok(Client {
            inner: Arc::new(ClientInner { opts, tls }),
        })
    }

    /// The options this client was built with.
    pub fn options(&self) -> &ClientOptions {
        &self.inner.opts
    }

    /// Connects, reads the greeting, upgrades with STARTTLS when configured,
    /// and learns the capabilities. The session is not logged in yet.
    pub fn connect(&self) -> Result<Session> {
        let opts = &self.inner.opts;
        let server = opts.endpoint.server();
        let tcp = open_tcp(opts)?;
        let stream = match (&opts.endpoint.security, &self.inner.tls) {
            (Security::Tls, Some(cfg)) => {
                start_tls(cfg.clone(), &opts.endpoint.host, &server, tcp)?
            }
            _ => Stream::Plain(tcp),
        };
        let mut s = Session {
            conn: Conn::new(stream),
            server,
            account: "-".to_string(),
            caps: Capabilities::default(),
            opts: self.inner.clone(),
            tag_seq: 0,
            delimiter: None,
            selected: None,
            broken: false,
            logged_in: false,
            closing: false,
            qresync_enabled: false,
            appended: false,
        };
        s.greeting()?;
        if opts.endpoint.security == Security::StartTls {
            s.starttls()?;
        }
        if s.caps.all().is_empty() {
            s.capability()?;
        }
        Ok(s)
    }

    /// Connects and logs in.
    pub fn login(&self, credentials: &Credentials) -> Result<Session> {
        let mut s = self.connect()?;
        s.login(credentials)?;
        Ok(s)
    }
}

/// A TCP connection to `opts.endpoint`, with its I/O timeouts and no Nagle delay (IMAP
/// and ManageSieve alike).
pub(crate) fn open_tcp(opts: &ClientOptions) -> Result<TcpStream> {
    let ep = &opts.endpoint;
    let server = ep.server();
    let tcp = connect_tcp(&ep.host, ep.port, opts.connect_timeout, &server)?;
    let io_err = |e: io::Error| Error::Connect {
        server: server.clone(),
        source: e,
    };
    tcp.set_read_timeout(Some(opts.io_timeout))
        .map_err(io_err)?;
    tcp.set_write_timeout(Some(opts.io_timeout))
        .map_err(io_err)?;
    tcp.set_nodelay(true).map_err(io_err)?;
    Ok(tcp)
}

fn connect_tcp(host: &str, port: u16, timeout: Duration, server: &str) -> Result<TcpStream> {
    let err = |source: io::Error| Error::Connect {
        server: server.to_string(),
        source,
    };
    let addrs = (host, port).to_socket_addrs().map_err(err)?;
    let mut last = io::Error::new(io::ErrorKind::NotFound, "host name resolved to no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(err(last))
}

/// What one read produced, after the session handled the untagged part.
pub(crate) enum Got {
    Continuation,
    Tagged {
        tag: String,
        status: StatusText<'static>,
    },
    Untagged,
}

/// One IMAP connection. Blocking; not shared between threads (it is `Send`,
/// so move it to the thread that uses it).
#[derive(Debug)]
pub struct Session {
    pub(crate) conn: Conn,
    pub(crate) server: String,
    pub(crate) account: String,
    pub(crate) caps: Capabilities,
    pub(crate) opts: Arc<ClientInner>,
    tag_seq: u32,
    /// `None` until asked; then the server's hierarchy delimiter.
    pub(crate) delimiter: Option<Option<char>>,
    /// The selected mailbox (server form).
    pub(crate) selected: Option<String>,
    /// Set after a connection or protocol failure: every call fails fast.
    pub(crate) broken: bool,
    logged_in: bool,
    closing: bool,
    /// QRESYNC was enabled (VANISHED replaces EXPUNGE).
    pub(crate) qresync_enabled: bool,
    /// The server has stored a message this session sent (see `append_batch`).
    pub(crate) appended: bool,
}

impl Session {
    /// The server's capabilities (refreshed after STARTTLS and login).
    pub fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    /// The account logged in as (`-` before login).
    pub fn account(&self) -> &str {
        &self.account
    }

    /// `host:port`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// Whether the connection failed and the session must be replaced.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    pub(crate) fn options(&self) -> &ClientOptions {
        &self.opts.opts
    }

    pub(crate) fn literal_mode(&self) -> LiteralMode {
        self.caps.literal_mode()
    }

    pub(crate) fn next_tag(&mut self) -> String {
        self.tag_seq = self.tag_seq.wrapping_add(1);
        format!("A{}", self.tag_seq)
    }

    /// Starts a command with a fresh tag and the server's literal mode.
    pub(crate) fn command<'a>(&mut self, name: &str) -> CommandBuilder<'a> {
        let tag = self.next_tag();
        CommandBuilder::new(&tag, name, self.literal_mode())
    }

    pub(crate) fn io_error(&mut self, source: io::Error) -> Error {
        self.broken = true;
        Error::Io {
            server: self.server.clone(),
            account: self.account.clone(),
            source,
        }
    }

    pub(crate) fn protocol_error(&mut self, detail: String) -> Error {
        self.broken = true;
        Error::Protocol {
            server: self.server.clone(),
            account: self.account.clone(),
            detail,
        }
    }

    fn conn_error(&mut self, e: ConnError) -> Error {
        match e {
            ConnError::Io(e) => self.io_error(e),
            ConnError::Frame(f) => self.protocol_error(f.to_string()),
        }
    }

    pub(crate) fn check_usable(&self) -> Result<()> {
        if self.broken {
            return Err(Error::Io {
                server: self.server.clone(),
                account: self.account.clone(),
                source: io::Error::new(
                    io::ErrorKind::NotConnected,
                    "session failed earlier; open a new one",
                ),
            });
        }
        Ok(())
    }

    /// Reads one response. Untagged responses update the session (CAPABILITY,
    /// BYE) and then go to `on_untagged`.
    pub(crate) fn read_one(
        &mut self,
        on_untagged: &mut dyn FnMut(Untagged<'_>) -> Result<()>,
    ) -> Result<Got> {
        let range = match self.conn.next_response() {
            Ok(r) => r,
            Err(e) => return Err(self.conn_error(e)),
        };
        let parsed = parse_response(&self.conn.buf()[range]);
        let resp = match parsed {
            Ok(r) => r,
            Err(e) => {
                let detail = e.to_string();
                return Err(self.protocol_error(detail));
            }
        };
        match resp {
            Response::Continuation(_) => Ok(Got::Continuation),
            Response::Tagged { tag, status } => {
                if let Some(Code::Capability(c)) = &status.code {
                    self.caps = Capabilities::new(c);
                }
                Ok(Got::Tagged {
                    tag: tag.to_string(),
                    status: into_owned(status),
                })
            }
            Response::Untagged(u) => {
                match &u {
                    Untagged::Capability(c) => self.caps = Capabilities::new(c),
                    Untagged::Status(s) => {
                        if let Some(Code::Capability(c)) = &s.code {
                            self.caps = Capabilities::new(c);
                        }
                        if s.status == Status::Bye && !self.closing {
                            let response = s.to_wire_string();
                            self.broken = true;
                            return Err(Error::Bye {
                                server: self.server.clone(),
                                account: self.account.clone(),
                                response,
                            });
                        }
                    }
                    _ => {}
                }
                on_untagged(u)?;
                Ok(Got::Untagged)
            }
        }
    }

    /// Writes `cmd`, waiting for `+` at each synchronizing literal. Returns
    /// `Some(status)` if the server completed (rejected) the command instead
    /// of sending `+`.
    pub(crate) fn send(
        &mut self,
        cmd: &Command<'_>,
        on_untagged: &mut dyn FnMut(Untagged<'_>) -> Result<()>,
    ) -> Result<Option<StatusText<'static>>> {
        self.check_usable()?;
        let mut at = 0;
        loop {
            let next = match self.conn.write_until_wait(cmd, at) {
                Ok(n) => n,
                Err(e) => return Err(self.write_failed(e, &cmd.tag)),
            };
            let Some(next) = next else { return Ok(None) };
            if let Err(e) = self.conn.flush() {
                return Err(self.write_failed(e, &cmd.tag));
            }
            loop {
                match self.read_one(on_untagged)? {
                    Got::Continuation => break,
                    Got::Untagged => {}
                    Got::Tagged { tag, status } if tag == cmd.tag => return Ok(Some(status)),
                    Got::Tagged { tag, .. } => {
                        return Err(self.protocol_error(format!(
                            "unexpected completion of {tag} while waiting for '+'"
                        )))
                    }
                }
            }
            at = next;
        }
    }

    /// A write failed: the server may have said why (BYE, or a tagged
    /// BAD for a too-large literal) before closing. Look for it briefly.
    pub(crate) fn write_failed(&mut self, e: io::Error, tag: &str) -> Error {
        let _ = self
            .conn
            .stream
            .tcp()
            .set_read_timeout(Some(Duration::from_secs(2)));
        let mut found = None;
        for _ in 0..16 {
            match self.read_one(&mut |_| Ok(())) {
                Err(bye @ Error::Bye { .. }) => {
                    found = Some(bye);
                    break;
                }
                Ok(Got::Tagged { tag: t, status }) if t == tag => {
                    found = Some(Error::Bye {
                        server: self.server.clone(),
                        account: self.account.clone(),
                        response: status.to_wire_string(),
                    });
                    break;
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        self.broken = true;
        found.unwrap_or_else(|| self.io_error(e))
    }

    /// Flushes and reads until the completion of `tag`.
    pub(crate) fn finish(
        &mut self,
        tag: &str,
        on_untagged: &mut dyn FnMut(Untagged<'_>) -> Result<()>,
    ) -> Result<StatusText<'static>> {
        if let Err(e) = self.conn.flush() {
            return Err(self.write_failed(e, tag));
        }
        loop {
            match self.read_one(on_untagged)? {
                Got::Tagged { tag: t, status } if t == tag => return Ok(status),
                Got::Tagged { tag: t, .. } => {
                    return Err(self.protocol_error(format!("completion of unknown tag {t}")))
                }
                Got::Continuation => {
                    return Err(self.protocol_error("unexpected '+' continuation".to_string()))
                }
                Got::Untagged => {}
            }
        }
    }

    /// Sends `cmd` and reads up to its completion.
    pub(crate) fn run(
        &mut self,
        cmd: Command<'_>,
        on_untagged: &mut dyn FnMut(Untagged<'_>) -> Result<()>,
    ) -> Result<StatusText<'static>> {
        if let Some(status) = self.send(&cmd, on_untagged)? {
            return Ok(status);
        }
        self.finish(&cmd.tag, on_untagged)
    }

    /// Like [`run`](Self::run), turning NO/BAD into an error.
    pub(crate) fn run_ok(
        &mut self,
        cmd: Command<'_>,
        command: &'static str,
        folder: Option<&str>,
        on_untagged: &mut dyn FnMut(Untagged<'_>) -> Result<()>,
    ) -> Result<StatusText<'static>> {
        let status = self.run(cmd, on_untagged)?;
        if status.status == Status::Ok {
            Ok(status)
        } else {
            Err(self.command_error(command, folder, &status))
        }
    }

    /// The error for a NO/BAD completion.
    pub(crate) fn command_error(
        &self,
        command: &'static str,
        folder: Option<&str>,
        status: &StatusText<'_>,
    ) -> Error {
        let response = status.to_wire_string();
        match (&status.code, folder) {
            (Some(Code::OverQuota), _) => Error::OverQuota {
                account: self.account.clone(),
                folder: folder.unwrap_or("").to_string(),
                response,
            },
            (Some(Code::TryCreate) | Some(Code::Nonexistent), Some(f)) => Error::NoSuchFolder {
                account: self.account.clone(),
                folder: f.to_string(),
                response,
            },
            _ => Error::Command {
                account: self.account.clone(),
                folder: folder.map(str::to_string),
                command,
                status: status.status,
                code: status.code.clone().map(Box::new),
                response,
            },
        }
    }

    fn greeting(&mut self) -> Result<()> {
        let mut greeting: Option<(Status, String)> = None;
        let got = self.read_one(&mut |u| {
            if let Untagged::Status(s) = &u {
                greeting = Some((s.status, s.to_wire_string()));
            }
            Ok(())
        });
        match (got, greeting) {
            (Ok(Got::Untagged), Some((Status::Ok, _))) => Ok(()),
            (Ok(Got::Untagged), Some((Status::PreAuth, _))) => {
                self.logged_in = true;
                Ok(())
            }
            (Err(e), _) => Err(e),
            (_, other) => {
                Err(self.protocol_error(format!("unexpected greeting {:?}", other.map(|(_, s)| s))))
            }
        }
    }

    /// Asks for CAPABILITY.
    pub fn capability(&mut self) -> Result<&Capabilities> {
        let cmd = self.command("CAPABILITY").finish();
        self.run_ok(cmd, "CAPABILITY", None, &mut |_| Ok(()))?;
        Ok(&self.caps)
    }

    fn starttls(&mut self) -> Result<()> {
        if !self.caps.has("STARTTLS") {
            self.capability()?;
        }
        if !self.caps.has("STARTTLS") {
            return Err(Error::Unsupported {
                server: self.server.clone(),
                what: "STARTTLS".into(),
            });
        }
        let cmd = self.command("STARTTLS").finish();
        self.run_ok(cmd, "STARTTLS", None, &mut |_| Ok(()))?;
        if self.conn.has_buffered_input() {
            // Bytes sent before the handshake would be trusted as if they
            // came over TLS (CVE-2011-0411 style injection).
            return Err(self.protocol_error("data after STARTTLS response".into()));
        }
        let Some(cfg) = self.opts.tls.clone() else {
            return Err(self.protocol_error("STARTTLS without TLS configuration".into()));
        };
        let tcp = match &self.conn.stream {
            Stream::Plain(t) => t.try_clone(),
            Stream::Tls(_) => return Err(self.protocol_error("TLS already active".into())),
        };
        let tcp = tcp.map_err(|e| self.io_error(e))?;
        let host = self.opts.opts.endpoint.host.clone();
        let stream = start_tls(cfg, &host, &self.server, tcp)?;
        self.conn = Conn::new(stream);
        self.caps = Capabilities::default();
        self.capability()?;
        Ok(())
    }

    /// Logs in. Fails with [`Error::AuthFailed`] naming the account when the
    /// server refuses the credentials.
    pub fn login(&mut self, credentials: &Credentials) -> Result<()> {
        let who = credentials.describe();
        let caps_before = self.caps.clone();
        let status = match credentials {
            Credentials::User { user, password } => {
                if self.caps.has("LOGINDISABLED") {
                    self.authenticate_plain(None, user, password)?
                } else {
                    self.plain_login(user.as_bytes(), password.as_bytes())?
                }
            }
            Credentials::Master {
                user,
                master,
                password,
            } => self.authenticate_plain(Some(user), master, password)?,
            Credentials::MasterSeparator {
                user,
                master,
                separator,
                password,
            } => {
                let login = format!("{user}{separator}{master}");
                self.plain_login(login.as_bytes(), password.as_bytes())?
            }
        };
        if status.status != Status::Ok {
            return Err(Error::AuthFailed {
                server: self.server.clone(),
                account: who,
                response: status.to_wire_string(),
            });
        }
        self.account = credentials.account().to_string();
        self.logged_in = true;
        // Capabilities usually grow after login; the server may have sent
        // them with the OK. If not, ask.
        if self.caps == caps_before {
            self.capability()?;
        }
        Ok(())
    }

    fn plain_login(&mut self, user: &[u8], password: &[u8]) -> Result<StatusText<'static>> {
        let user = user.to_vec();
        let password = password.to_vec();
        let mut b = self.command("LOGIN");
        b.sp().astring_owned(user).sp().astring_owned(password);
        let cmd = b.finish();
        self.run(cmd, &mut |_| Ok(()))
    }

    fn authenticate_plain(
        &mut self,
        authzid: Option<&str>,
        authcid: &str,
        password: &str,
    ) -> Result<StatusText<'static>> {
        if !self.caps.auth_mechanisms().any(|m| m == "PLAIN") {
            return Err(Error::Unsupported {
                server: self.server.clone(),
                what: "AUTH=PLAIN (needed for a master user or when LOGIN is disabled)".into(),
            });
        }
        let ir = sasl_plain(authzid, authcid, password);
        let mut b = self.command("AUTHENTICATE PLAIN");
        if self.caps.has("SASL-IR") {
            b.sp().raw(ir.as_bytes());
            let cmd = b.finish();
            return self.run(cmd, &mut |_| Ok(()));
        }
        let cmd = b.finish();
        if let Some(done) = self.send(&cmd, &mut |_| Ok(()))? {
            return Ok(done);
        }
        if let Err(e) = self.conn.flush() {
            return Err(self.write_failed(e, &cmd.tag));
        }
        loop {
            match self.read_one(&mut |_| Ok(()))? {
                Got::Continuation => break,
                Got::Tagged { tag, status } if tag == cmd.tag => return Ok(status),
                _ => {}
            }
        }
        let mut line = ir.into_bytes();
        line.extend_from_slice(b"\r\n");
        if let Err(e) = self.conn.write(&line) {
            return Err(self.write_failed(e, &cmd.tag));
        }
        self.finish(&cmd.tag, &mut |_| Ok(()))
    }

    /// NOOP: keeps the connection alive and collects pending updates.
    pub fn noop(&mut self) -> Result<()> {
        let cmd = self.command("NOOP").finish();
        self.run_ok(cmd, "NOOP", None, &mut |_| Ok(()))?;
        Ok(())
    }

    /// ENABLE (RFC 5161), e.g. `QRESYNC`; returns what the server enabled.
    pub fn enable(&mut self, extensions: &[&str]) -> Result<Vec<String>> {
        let mut b = self.command("ENABLE");
        for e in extensions {
            b.sp().raw(e.as_bytes());
        }
        let cmd = b.finish();
        let mut enabled = Vec::new();
        self.run_ok(cmd, "ENABLE", None, &mut |u| {
            if let Untagged::Enabled(e) = u {
                enabled.extend(e);
            }
            Ok(())
        })?;
        Ok(enabled)
    }

    /// LOGOUT and close the connection.
    pub fn logout(mut self) -> Result<()> {
        if self.broken {
            return Ok(());
        }
        self.closing = true;
        let cmd = self.command("LOGOUT").finish();
        match self.run(cmd, &mut |_| Ok(())) {
            Ok(_) => Ok(()),
            // Some servers close right after BYE.
            Err(Error::Io { source, .. }) if source.kind() == io::ErrorKind::UnexpectedEof => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

fn into_owned(s: StatusText<'_>) -> StatusText<'static> {
    StatusText {
        status: s.status,
        code: s.code,
        text: s.text.into_owned().into(),
    }
}
