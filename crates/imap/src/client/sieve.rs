//! ManageSieve (RFC 5804): an account's sieve scripts on the mail server, for restores
//! that put an account's filters back (PUTSCRIPT, SETACTIVE) and for reading them
//! (LISTSCRIPTS, GETSCRIPT). One blocking session per connection, on the TCP and TLS
//! layer of the IMAP client (its connection and stream, STARTTLS, SASL PLAIN, master users).
//!
//! Written here because no maintained Rust crate speaks ManageSieve as a client (the
//! Sieve crates parse and run scripts); the protocol is a handful of line commands with
//! IMAP-style strings, and its responses frame as IMAP's do.

use std::io;
use std::sync::Arc;

use super::conn::{Conn, ConnError};
use super::options::{ClientOptions, Credentials, Security};
use super::session::open_tcp;
use super::stream::{start_tls, tls_config, Stream};
use crate::error::{Error, Result};
use crate::proto::capability::sasl_plain;
use crate::proto::command::{CommandBuilder, LiteralMode};
use crate::proto::response::Status;

/// A script as LISTSCRIPTS shows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Script {
    /// Its name (UTF-8).
    pub name: String,
    /// Whether it is the active one (the one the server runs on delivery).
    pub active: bool,
}

/// One value of a response line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A quoted string or a literal.
    Str(Vec<u8>),
    /// An atom (`OK`, `ACTIVE`).
    Atom(String),
    /// A response code, parenthesized: `(QUOTA/MAXSCRIPTS)`.
    Code(String),
}

/// The end of a response: OK, NO or BYE, its code and its text.
#[derive(Debug, Clone)]
struct Done {
    status: Status,
    code: Option<String>,
    text: String,
}

impl Done {
    fn wire(&self) -> String {
        let s = match self.status {
            Status::Ok => "OK",
            Status::Bye => "BYE",
            _ => "NO",
        };
        match &self.code {
            Some(c) => format!("{s} ({c}) {}", self.text),
            None => format!("{s} {}", self.text),
        }
    }
}

/// One ManageSieve connection, logged in or not.
#[derive(Debug)]
pub struct SieveSession {
    conn: Conn,
    server: String,
    account: String,
    /// Capability lines: name (upper-cased) and value.
    caps: Vec<(String, Option<String>)>,
    tls: Option<Arc<rustls::ClientConfig>>,
    host: String,
}

impl SieveSession {
    /// Connects to the ManageSieve server `opts.endpoint` (usually port 4190), reads its
    /// capabilities, and upgrades with STARTTLS when the endpoint asks for TLS
    /// (ManageSieve has no implicit-TLS port: `Security::Tls` is taken as STARTTLS).
    pub fn connect(opts: &ClientOptions) -> Result<SieveSession> {
        let ep = &opts.endpoint;
        let server = ep.server();
        let tcp = open_tcp(opts)?;
        let tls = match ep.security {
            Security::Plain => None,
            _ => Some(tls_config(&opts.tls, &server)?),
        };
        let mut s = SieveSession {
            conn: Conn::new(Stream::Plain(tcp)),
            server,
            account: "-".into(),
            caps: Vec::new(),
            tls,
            host: ep.host.clone(),
        };
        s.read_capabilities()?;
        if s.tls.is_some() {
            s.starttls()?;
        }
        Ok(s)
    }

    /// Whether the server announced `name` (`STARTTLS`, `SASL`...).
    pub fn has(&self, name: &str) -> bool {
        self.caps.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// The value of the capability `name` (`IMPLEMENTATION`, `SIEVE`...).
    pub fn capability(&self, name: &str) -> Option<&str> {
        let (_, v) = self
            .caps
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))?;
        v.as_deref()
    }

    /// `host:port`.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn read_capabilities(&mut self) -> Result<()> {
        let mut caps = Vec::new();
        let done = self.response(&mut |line| {
            let mut words = line.iter().filter_map(|t| match t {
                Token::Str(s) => Some(String::from_utf8_lossy(s).into_owned()),
                _ => None,
            });
            if let Some(name) = words.next() {
                caps.push((name.to_ascii_uppercase(), words.next()));
            }
        })?;
        if done.status != Status::Ok {
            return Err(self.protocol_error(format!("unexpected greeting: {}", done.wire())));
        }
        self.caps = caps;
        Ok(())
    }

    fn starttls(&mut self) -> Result<()> {
        if !self.has("STARTTLS") {
            return Err(Error::Unsupported {
                server: self.server.clone(),
                what: "STARTTLS on ManageSieve".into(),
            });
        }
        let done = self.command("STARTTLS", &[])?;
        if done.status != Status::Ok {
            return Err(self.refused("STARTTLS", &done));
        }
        if self.conn.has_buffered_input() {
            return Err(self.protocol_error("data after STARTTLS response".into()));
        }
        let (Some(cfg), Stream::Plain(tcp)) = (self.tls.clone(), &self.conn.stream) else {
            return Err(self.protocol_error("TLS already active".into()));
        };
        let tcp = tcp.try_clone().map_err(|e| self.io_error(e))?;
        self.conn = Conn::new(start_tls(cfg, &self.host, &self.server, tcp)?);
        // The server sends its capabilities again over TLS.
        self.read_capabilities()
    }

    /// Logs in with SASL PLAIN: as the user, or as a master user acting for it
    /// (authorization identity; Dovecot master users, Cyrus admins).
    pub fn login(&mut self, credentials: &Credentials) -> Result<()> {
        let ir = match credentials {
            Credentials::User { user, password } => sasl_plain(None, user, password),
            Credentials::Master {
                user,
                master,
                password,
            } => sasl_plain(Some(user), master, password),
            Credentials::MasterSeparator {
                user,
                master,
                separator,
                password,
            } => sasl_plain(None, &format!("{user}{separator}{master}"), password),
        };
        let sasl = self.capability("SASL").unwrap_or("");
        if !sasl
            .split_ascii_whitespace()
            .any(|m| m.eq_ignore_ascii_case("PLAIN"))
        {
            return Err(Error::Unsupported {
                server: self.server.clone(),
                what: format!("SASL PLAIN on ManageSieve (it offers {sasl:?})"),
            });
        }
        let done = self.command("AUTHENTICATE", &[b"PLAIN", ir.as_bytes()])?;
        if done.status != Status::Ok {
            return Err(Error::AuthFailed {
                server: self.server.clone(),
                account: credentials.describe(),
                response: done.wire(),
            });
        }
        self.account = credentials.account().to_string();
        Ok(())
    }

    /// LISTSCRIPTS: the account's scripts, sorted by name.
    pub fn list_scripts(&mut self) -> Result<Vec<Script>> {
        let mut out = Vec::new();
        let done = self.command_with("LISTSCRIPTS", &[], &mut |line| {
            if let Some(Token::Str(name)) = line.first() {
                out.push(Script {
                    name: String::from_utf8_lossy(name).into_owned(),
                    active: matches!(line.get(1), Some(Token::Atom(a)) if a.eq_ignore_ascii_case("ACTIVE")),
                });
            }
        })?;
        self.ok("LISTSCRIPTS", &done)?;
        out.sort();
        Ok(out)
    }

    /// GETSCRIPT: a script's text.
    pub fn get_script(&mut self, name: &str) -> Result<Vec<u8>> {
        let mut out = None;
        let done = self.command_with("GETSCRIPT", &[name.as_bytes()], &mut |line| {
            if let (None, Some(Token::Str(s))) = (&out, line.first()) {
                out = Some(s.clone());
            }
        })?;
        self.ok("GETSCRIPT", &done)?;
        out.ok_or_else(|| self.protocol_error(format!("GETSCRIPT {name:?} sent no script")))
    }

    /// PUTSCRIPT: stores a script under `name`, replacing one of that name (the server
    /// checks it compiles: a script it refuses fails with the server's words).
    pub fn put_script(&mut self, name: &str, script: &[u8]) -> Result<()> {
        let done = self.command("PUTSCRIPT", &[name.as_bytes(), script])?;
        self.ok("PUTSCRIPT", &done)
    }

    /// SETACTIVE: makes `name` the active script (`""`: none active).
    pub fn set_active(&mut self, name: &str) -> Result<()> {
        let done = self.command("SETACTIVE", &[name.as_bytes()])?;
        self.ok("SETACTIVE", &done)
    }

    /// LOGOUT, and closes the connection.
    pub fn logout(mut self) -> Result<()> {
        let _ = self.command("LOGOUT", &[])?;
        Ok(())
    }

    fn ok(&self, command: &'static str, done: &Done) -> Result<()> {
        if done.status == Status::Ok {
            Ok(())
        } else {
            Err(self.refused(command, done))
        }
    }

    fn refused(&self, command: &'static str, done: &Done) -> Error {
        Error::Command {
            account: self.account.clone(),
            folder: None,
            command,
            status: done.status,
            code: None,
            response: done.wire(),
        }
    }

    fn command(&mut self, name: &str, args: &[&[u8]]) -> Result<Done> {
        self.command_with(name, args, &mut |_| {})
    }

    /// Sends `name` with its arguments (each a string: quoted when it can be, else a
    /// non-synchronizing literal, which every ManageSieve server takes: the IMAP client's
    /// encoder, untagged) and reads the response, data lines to `on_line`.
    fn command_with(
        &mut self,
        name: &str,
        args: &[&[u8]],
        on_line: &mut dyn FnMut(&[Token]),
    ) -> Result<Done> {
        let mut b = CommandBuilder::untagged(name, LiteralMode::NonSync);
        for a in args {
            b.sp().string(a);
        }
        let cmd = b.finish();
        let sent = self
            .conn
            .write_until_wait(&cmd, 0)
            .and_then(|_| self.conn.flush());
        if let Err(e) = sent {
            return Err(self.io_error(e));
        }
        self.response(on_line)
    }

    /// Reads lines up to the one that ends the response (OK, NO, BYE).
    fn response(&mut self, on_line: &mut dyn FnMut(&[Token])) -> Result<Done> {
        loop {
            let range = match self.conn.next_response() {
                Ok(r) => r,
                Err(ConnError::Io(e)) => return Err(self.io_error(e)),
                Err(ConnError::Frame(f)) => return Err(self.protocol_error(f.to_string())),
            };
            let tokens = match tokens(&self.conn.buf()[range]) {
                Ok(t) => t,
                Err(what) => return Err(self.protocol_error(what.into())),
            };
            let status = match tokens.first() {
                Some(Token::Atom(a)) if a.eq_ignore_ascii_case("OK") => Some(Status::Ok),
                Some(Token::Atom(a)) if a.eq_ignore_ascii_case("NO") => Some(Status::No),
                Some(Token::Atom(a)) if a.eq_ignore_ascii_case("BYE") => Some(Status::Bye),
                _ => None,
            };
            let Some(status) = status else {
                on_line(&tokens);
                continue;
            };
            let mut code = None;
            let mut text = String::new();
            for t in &tokens[1..] {
                match t {
                    Token::Code(c) => code = Some(c.clone()),
                    Token::Str(s) => text = String::from_utf8_lossy(s).into_owned(),
                    Token::Atom(a) => text = a.clone(),
                }
            }
            return Ok(Done { status, code, text });
        }
    }

    fn io_error(&self, source: io::Error) -> Error {
        Error::Io {
            server: self.server.clone(),
            account: self.account.clone(),
            source,
        }
    }

    fn protocol_error(&self, detail: String) -> Error {
        Error::Protocol {
            server: self.server.clone(),
            account: self.account.clone(),
            detail: format!("ManageSieve: {detail}"),
        }
    }
}

/// The values of one response line (literals inline, as framed).
fn tokens(line: &[u8]) -> std::result::Result<Vec<Token>, &'static str> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b' ' | b'\r' | b'\n' => i += 1,
            b'"' => {
                let mut s = Vec::new();
                i += 1;
                loop {
                    match line.get(i) {
                        None | Some(b'\r') | Some(b'\n') => return Err("unclosed quoted string"),
                        Some(b'"') => break,
                        Some(b'\\') => {
                            s.push(*line.get(i + 1).ok_or("escape at the end")?);
                            i += 2;
                        }
                        Some(&c) => {
                            s.push(c);
                            i += 1;
                        }
                    }
                }
                i += 1;
                out.push(Token::Str(s));
            }
            b'{' => {
                let close = (line[i..].iter().position(|&b| b == b'}')).ok_or("bad literal")?;
                let n = std::str::from_utf8(&line[i + 1..i + close])
                    .ok()
                    .and_then(|d| d.trim_end_matches('+').parse::<usize>().ok())
                    .ok_or("bad literal length")?;
                i += close + 1;
                if line.get(i) == Some(&b'\r') {
                    i += 1;
                }
                if line.get(i) != Some(&b'\n') {
                    return Err("no line end after a literal's length");
                }
                i += 1;
                let data = line.get(i..i + n).ok_or("short literal")?;
                out.push(Token::Str(data.to_vec()));
                i += n;
            }
            b'(' => {
                let close = (line[i..].iter().position(|&b| b == b')')).ok_or("unclosed code")?;
                out.push(Token::Code(
                    String::from_utf8_lossy(&line[i + 1..i + close]).into_owned(),
                ));
                i += close + 1;
            }
            _ => {
                let end = (line[i..]
                    .iter()
                    .position(|&b| matches!(b, b' ' | b'\r' | b'\n')))
                .map_or(line.len(), |p| i + p);
                out.push(Token::Atom(
                    String::from_utf8_lossy(&line[i..end]).into_owned(),
                ));
                i = end;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5804's forms: a capability line, a listing with the active script, a
    /// script as a literal, a refusal with a code and a quoted text.
    #[test]
    fn response_lines() {
        assert_eq!(
            tokens(b"\"SASL\" \"PLAIN LOGIN\"\r\n"),
            Ok(vec![
                Token::Str(b"SASL".to_vec()),
                Token::Str(b"PLAIN LOGIN".to_vec())
            ])
        );
        assert_eq!(
            tokens(b"\"rules \\\"2\\\"\" ACTIVE\r\n"),
            Ok(vec![
                Token::Str(b"rules \"2\"".to_vec()),
                Token::Atom("ACTIVE".into())
            ])
        );
        assert_eq!(
            tokens(b"{12}\r\nkeep;\r\nstop;\r\n"),
            Ok(vec![Token::Str(b"keep;\r\nstop;".to_vec())])
        );
        assert_eq!(
            tokens(b"NO (QUOTA/MAXSCRIPTS) \"Too many scripts\"\r\n"),
            Ok(vec![
                Token::Atom("NO".into()),
                Token::Code("QUOTA/MAXSCRIPTS".into()),
                Token::Str(b"Too many scripts".to_vec())
            ])
        );
        assert!(tokens(b"\"open\r\n").is_err());
        assert!(tokens(b"{99}\r\nshort\r\n").is_err());
    }
}
