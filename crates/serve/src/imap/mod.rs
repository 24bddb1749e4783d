//! `serve --imap`: a read-only IMAP view of the backups (issue 29, first increment).
//! An admin logs in as `ACCOUNT*admin` with the admin token and sees that account's
//! folders as in its latest snapshot, and every snapshot under
//! `Snapshots/<YYYY-MM-DD HH:MM>/` (docs/imap-view.md).
//!
//! The protocol side is imap-next (its `Server` state machine and `Stream`), over
//! imap-codec, which parses every IMAP4rev1 command and encodes every answer (fuzzed
//! upstream); this module only decides the answers. `session` keeps one connection's
//! state and answers commands (blocking: it reads the repository), `view` lists an
//! account's mailboxes and reads a folder with its UIDs, `fetch` answers FETCH
//! (`envelope` its ENVELOPE, `mime` the parts of a message and `bodystructure` their
//! BODYSTRUCTURE), `search` SEARCH, `login` checks logins. The connection loop is here.

mod bodystructure;
mod envelope;
mod fetch;
mod login;
mod mime;
mod search;
mod session;
mod view;

use crate::state::AppState;
use imap_codec::imap_types::auth::{AuthMechanism, AuthenticateData};
use imap_codec::imap_types::core::Tag;
use imap_codec::imap_types::response::{CommandContinuationRequest, Greeting, Status};
use imap_next::server::{Event, Options, Server};
use imap_next::stream::{self, Stream};
use session::{status, Answer, Kind, Out, Session};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;

/// A session that sends nothing for this long is logged out (RFC 3501: at least 30 min).
const AUTOLOGOUT: Duration = Duration::from_secs(30 * 60);
/// The longest command or literal taken: nothing the view answers needs more.
const MAX_LITERAL: u32 = 64 * 1024;

/// Accepts IMAP connections on `listener` until the runtime stops; with `tls`, each
/// over TLS from its first byte (`--imaps`), the handshake on the connection's own task
/// and within [`crate::tls::HANDSHAKE_TIME`].
pub async fn run(listener: TcpListener, st: AppState, tls: Option<tokio_rustls::TlsAcceptor>) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("imap: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (st, tls) = (st.clone(), tls.clone());
        tokio::spawn(async move {
            let stream = match tls {
                None => Stream::insecure(tcp),
                Some(acceptor) => {
                    let shake = acceptor.accept(tcp);
                    match tokio::time::timeout(crate::tls::HANDSHAKE_TIME, shake).await {
                        Ok(Ok(s)) => Stream::tls(tokio_rustls::TlsStream::Server(s)),
                        Ok(Err(e)) => return tracing::debug!("imaps: handshake with {peer}: {e}"),
                        Err(_) => return tracing::debug!("imaps: handshake with {peer} timed out"),
                    }
                }
            };
            connection(stream, peer, st).await
        });
    }
}

fn options() -> Options {
    let mut o = Options::default();
    o.crlf_relaxed = true;
    o.max_literal_size = MAX_LITERAL;
    o.max_command_size = 2 * MAX_LITERAL;
    // imap-next answers a literal it refuses with a tagged BAD of this text itself.
    let _ =
        o.set_literal_reject_text("literal too long: the IMAP view takes 64 KiB at most".into());
    o
}

fn greeting() -> Option<Greeting<'static>> {
    use imap_codec::imap_types::response::Code;
    Greeting::ok(
        Some(Code::Capability(session::capabilities())),
        "mailvault IMAP view of the backups (read-only) ready",
    )
    .ok()
}

/// What the loop does after an event.
enum Next {
    Go,
    /// Close once the response with this handle is sent.
    CloseAfter(imap_next::server::ResponseHandle),
    Stop,
}

/// One connection: the greeting, then commands until LOGOUT, a closed socket or
/// [`AUTOLOGOUT`].
async fn connection(mut stream: Stream, peer: SocketAddr, st: AppState) {
    let Some(greeting) = greeting() else { return };
    let mut server = Server::new(options(), greeting);
    let mut conn = Conn {
        session: Some(Session::new(st, peer.ip())),
        auth_tag: None,
        idle_tag: None,
        closing: None,
    };
    loop {
        let ev = match tokio::time::timeout(AUTOLOGOUT, stream.next(&mut server)).await {
            Err(_) => {
                // Autologout: the BYE is sent if the client still reads.
                let bye = server.enqueue_status(session::bye());
                let flush = async {
                    while let Ok(ev) = stream.next(&mut server).await {
                        if matches!(ev, Event::ResponseSent { handle, .. } if handle == bye) {
                            break;
                        }
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(5), flush).await;
                return;
            }
            Ok(Ok(ev)) => ev,
            Ok(Err(stream::Error::State(e))) => {
                if let Some(tag) = conn.auth_tag.take() {
                    // AUTHENTICATE's data did not parse (not base64): that ends it.
                    let text = "not a base64 SASL PLAIN message".to_string();
                    let _ = server.authenticate_finish(status(Kind::Bad, Some(tag), None, text));
                } else if !matches!(e, imap_next::server::Error::LiteralTooLong { .. }) {
                    // (imap-next has answered a literal it refused itself.)
                    server.enqueue_status(malformed(&e));
                }
                continue;
            }
            Ok(Err(_)) => return,
        };
        match conn.event(&mut server, ev).await {
            Next::Go => {}
            Next::CloseAfter(h) => conn.closing = Some(h),
            Next::Stop => return,
        }
    }
}

/// The `BAD` for a command that did not parse: tagged when its tag can be read.
fn malformed(e: &imap_next::server::Error) -> Status<'static> {
    use imap_next::server::Error as E;
    let (bytes, text) = match e {
        E::ExpectedCrlfGotLf { discarded_bytes } => (discarded_bytes, "expected CRLF"),
        E::MalformedMessage { discarded_bytes } => (discarded_bytes, "that command does not parse"),
        E::LiteralTooLong { discarded_bytes } => (discarded_bytes, "literal too long"),
        E::CommandTooLong { discarded_bytes } => (discarded_bytes, "command too long"),
    };
    let b = bytes.declassify();
    let first = b.split(|&c| c == b' ').next().unwrap_or_default();
    let tag = std::str::from_utf8(first)
        .ok()
        .and_then(|t| Tag::try_from(t.to_string()).ok());
    status(Kind::Bad, tag, None, text.into())
}

struct Conn {
    /// Taken while a command runs on a blocking thread.
    session: Option<Session>,
    /// The tag of an AUTHENTICATE waiting for the client's data.
    auth_tag: Option<Tag<'static>>,
    idle_tag: Option<Tag<'static>>,
    closing: Option<imap_next::server::ResponseHandle>,
}

impl Conn {
    async fn event(&mut self, server: &mut Server, ev: Event) -> Next {
        match ev {
            Event::GreetingSent { .. } => Next::Go,
            Event::ResponseSent { handle, .. } => match self.closing == Some(handle) {
                true => Next::Stop,
                false => Next::Go,
            },
            Event::CommandReceived { command } => {
                let Some(a) = self.run(move |s| s.handle(command)).await else {
                    return Next::Stop;
                };
                send(server, a).await
            }
            Event::CommandAuthenticateReceived {
                command_authenticate: c,
            } => {
                let logged_in = self.session.as_ref().is_some_and(Session::logged_in);
                if logged_in || c.mechanism != AuthMechanism::Plain {
                    let text = match logged_in {
                        true => "already logged in",
                        false => "only AUTHENTICATE PLAIN is offered",
                    };
                    let _ = server.authenticate_finish(status(
                        Kind::No,
                        Some(c.tag),
                        None,
                        text.into(),
                    ));
                    return Next::Go;
                }
                match c.initial_response {
                    Some(r) => {
                        let msg = zeroize::Zeroizing::new(r.declassify().to_vec());
                        self.authenticate(server, c.tag, &msg).await
                    }
                    None => {
                        self.auth_tag = Some(c.tag);
                        let _ = server
                            .authenticate_continue(CommandContinuationRequest::base64(Vec::new()));
                        Next::Go
                    }
                }
            }
            Event::AuthenticateDataReceived { authenticate_data } => {
                let Some(tag) = self.auth_tag.take() else {
                    return Next::Go;
                };
                match authenticate_data {
                    AuthenticateData::Continue(d) => {
                        let msg = zeroize::Zeroizing::new(d.declassify().to_vec());
                        self.authenticate(server, tag, &msg).await
                    }
                    AuthenticateData::Cancel => {
                        let _ = server.authenticate_finish(status(
                            Kind::Bad,
                            Some(tag),
                            None,
                            "authentication cancelled".into(),
                        ));
                        Next::Go
                    }
                }
            }
            Event::IdleCommandReceived { tag } => {
                if self.session.as_ref().is_some_and(Session::logged_in) {
                    if let Ok(ccr) = CommandContinuationRequest::basic(
                        None,
                        "idling (a backup view never changes while you watch)",
                    ) {
                        let _ = server.idle_accept(ccr);
                        self.idle_tag = Some(tag);
                        return Next::Go;
                    }
                }
                let _ =
                    server.idle_reject(status(Kind::Bad, Some(tag), None, "log in first".into()));
                Next::Go
            }
            Event::IdleDoneReceived => {
                if let Some(tag) = self.idle_tag.take() {
                    server.enqueue_status(status(Kind::Ok, Some(tag), None, "IDLE done".into()));
                }
                Next::Go
            }
        }
    }

    /// Runs `f` on the session on a blocking thread; `None` when it panicked.
    async fn run(
        &mut self,
        f: impl FnOnce(&mut Session) -> Answer + Send + 'static,
    ) -> Option<Answer> {
        let mut s = self.session.take()?;
        let done = tokio::task::spawn_blocking(move || {
            let a = f(&mut s);
            (s, a)
        })
        .await;
        match done {
            Ok((s, a)) => {
                self.session = Some(s);
                Some(a)
            }
            Err(e) => {
                tracing::error!("imap: a command failed: {e}");
                None
            }
        }
    }

    /// Finishes an AUTHENTICATE PLAIN with the client's message `msg`.
    async fn authenticate(&mut self, server: &mut Server, tag: Tag<'static>, msg: &[u8]) -> Next {
        let Some((user, pass)) = login::plain(msg) else {
            let _ = server.authenticate_finish(status(
                Kind::Bad,
                Some(tag),
                None,
                "not a SASL PLAIN message".into(),
            ));
            return Next::Go;
        };
        let Some(a) = self.run(move |s| s.login(tag, &user, &pass)).await else {
            return Next::Stop;
        };
        if a.failed_login {
            tokio::time::sleep(login::FAIL_DELAY).await;
        }
        let _ = server.authenticate_finish(a.done);
        Next::Go
    }
}

/// Sends an answer (a failed login's after [`login::FAIL_DELAY`]).
async fn send(server: &mut Server, a: Answer) -> Next {
    if a.failed_login {
        tokio::time::sleep(login::FAIL_DELAY).await;
    }
    for o in a.untagged {
        match o {
            Out::Data(d) => server.enqueue_data(d),
            Out::Status(s) => server.enqueue_status(s),
        };
    }
    let h = server.enqueue_status(a.done);
    match a.logout {
        true => Next::CloseAfter(h),
        false => Next::Go,
    }
}
