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
//! BODYSTRUCTURE), `search` SEARCH, `login` checks logins. The connection loop is here,
//! with STARTTLS's upgrade; `wire` is what it sends besides imap-next's own (no second
//! greeting after STARTTLS, lines imap-codec has no type for). `esearch`
//! takes SEARCH's RETURN options (ESEARCH) imap-codec does not parse, `listext` LIST's
//! (LIST-EXTENDED, LIST-STATUS) and answers every LIST and LSUB; `fuzzing` (feature
//! `fuzzing`) drives a session without sockets for the fuzz target.

mod bodystructure;
mod condstore;
mod envelope;
mod esearch;
mod fetch;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod headers;
mod indexed;
mod listext;
mod login;
mod mime;
mod search;
mod session;
mod shared;
mod uids;
mod view;
mod wire;

use crate::state::AppState;
use imap_codec::imap_types::auth::{AuthMechanism, AuthenticateData};
use imap_codec::imap_types::command::CommandBody;
use imap_codec::imap_types::core::{Tag, Vec1};
use imap_codec::imap_types::response::{CommandContinuationRequest, Greeting, Status};
use imap_codec::imap_types::search::SearchKey;
use imap_next::server::{Event, Options, Server};
use imap_next::stream::{self, Stream};
use session::{status, Answer, Kind, Out, Security, Session};
pub use shared::Shared;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use wire::Wire;

/// A session that sends nothing for this long is logged out (RFC 3501: at least 30 min).
const AUTOLOGOUT: Duration = Duration::from_secs(30 * 60);
/// The longest command or literal taken: nothing the view answers needs more.
const MAX_LITERAL: u32 = 64 * 1024;

/// How a listener's connections are protected.
#[derive(Clone)]
pub enum Protection {
    /// Plain IMAP (`--imap`): STARTTLS offered with this acceptor when a certificate was
    /// given; `plain_login`: logins taken before TLS (a loopback address, or
    /// `--insecure-listen`), else only after STARTTLS.
    Plain {
        starttls: Option<tokio_rustls::TlsAcceptor>,
        plain_login: bool,
    },
    /// TLS from the first byte (`--imaps`).
    Tls(tokio_rustls::TlsAcceptor),
}

/// Accepts IMAP connections on `listener` until the runtime stops, protected as `p`
/// says; each TLS handshake on the connection's own task and within
/// [`crate::tls::HANDSHAKE_TIME`].
pub async fn run(listener: TcpListener, st: AppState, p: Protection) {
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("imap: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // An answer goes out as several writes (untagged lines, then the tagged one):
        // with Nagle's algorithm the last waited for the client's delayed ACK, 40 ms on
        // every command that had an untagged answer.
        crate::no_delay(&tcp);
        let (st, p) = (st.clone(), p.clone());
        tokio::spawn(async move {
            let (stream, security, starttls) = match p {
                Protection::Plain {
                    starttls,
                    plain_login,
                } => {
                    let security = Security {
                        tls: false,
                        starttls: starttls.is_some(),
                        plain_login,
                    };
                    (Stream::insecure(tcp), security, starttls)
                }
                Protection::Tls(acceptor) => {
                    let Some(s) = handshake(&acceptor, tcp, peer).await else {
                        return;
                    };
                    let security = Security {
                        tls: true,
                        starttls: false,
                        plain_login: false,
                    };
                    (s, security, None)
                }
            };
            let session = Session::new(st, peer.ip(), security);
            connection(stream, peer, session, starttls).await
        });
    }
}

/// The TLS handshake on `tcp` (`None`: it failed or took too long, logged).
async fn handshake(
    acceptor: &tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
) -> Option<Stream> {
    match tokio::time::timeout(crate::tls::HANDSHAKE_TIME, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => Some(Stream::tls(tokio_rustls::TlsStream::Server(s))),
        Ok(Err(e)) => {
            tracing::debug!("imap: TLS handshake with {peer}: {e}");
            None
        }
        Err(_) => {
            tracing::debug!("imap: TLS handshake with {peer} timed out");
            None
        }
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

fn greeting(sec: Security) -> Option<Greeting<'static>> {
    use imap_codec::imap_types::response::Code;
    Greeting::ok(
        Some(Code::Capability(session::capabilities(sec))),
        "mailvault IMAP view of the backups (read-only) ready",
    )
    .ok()
}

/// What the loop does after an event.
enum Next {
    Go,
    /// Close once the response with this handle is sent.
    CloseAfter(imap_next::server::ResponseHandle),
    /// Start TLS once the response with this handle (STARTTLS's OK) is sent.
    StartTls(imap_next::server::ResponseHandle),
    Stop,
}

/// One connection: the greeting, then commands until LOGOUT, a closed socket or
/// [`AUTOLOGOUT`]; STARTTLS upgrades it with `starttls` when given.
async fn connection(
    mut stream: Stream,
    peer: SocketAddr,
    session: Session,
    starttls: Option<tokio_rustls::TlsAcceptor>,
) {
    let Some(greeting) = greeting(session.security) else {
        return;
    };
    let mut wire = Wire::new(Server::new(options(), greeting), true);
    let mut conn = Conn {
        session: Some(session),
        auth_tag: None,
        idle_tag: None,
        closing: None,
        held: VecDeque::new(),
    };
    loop {
        let next = match conn.held.pop_front() {
            Some(ev) => Ok(ev),
            None => tokio::time::timeout(AUTOLOGOUT, stream.next(&mut wire)).await,
        };
        let ev = match next {
            Err(_) => return autologout(&mut stream, &mut wire).await,
            Ok(Ok(ev)) => ev,
            Ok(Err(stream::Error::State(e))) => {
                if let Next::Stop = conn.refused(&mut wire, &e).await {
                    return;
                }
                continue;
            }
            Ok(Err(_)) => return,
        };
        match conn.event(&mut stream, &mut wire, ev).await {
            Next::Go => {}
            Next::CloseAfter(h) => conn.closing = Some(h),
            Next::Stop => return,
            Next::StartTls(h) => {
                let Some(acceptor) = &starttls else { return };
                let Some(s) = upgrade(stream, &mut wire, h, acceptor, peer).await else {
                    return;
                };
                stream = s;
                // A new server: whatever the client sent after STARTTLS in plain text
                // (held in the old one's buffer) is dropped unread, and no greeting.
                wire = Wire::new(Server::new(options(), greeting_placeholder()), false);
                if let Some(s) = &mut conn.session {
                    s.security.tls = true;
                }
            }
        }
    }
}

/// A greeting for a server that sends none (after STARTTLS; see [`Wire::new`]).
fn greeting_placeholder() -> Greeting<'static> {
    #[allow(clippy::unwrap_used)] // A fixed, valid text.
    Greeting::ok(None, "TLS").unwrap()
}

/// Sends STARTTLS's OK (response `ok`) and starts TLS on the connection: every other
/// command the client sent meanwhile, in plain text, is dropped unanswered (RFC 3501
/// 6.2.1, CVE-2011-0411's command injection). `None`: the connection ends.
async fn upgrade(
    mut stream: Stream,
    wire: &mut Wire,
    ok: imap_next::server::ResponseHandle,
    acceptor: &tokio_rustls::TlsAcceptor,
    peer: SocketAddr,
) -> Option<Stream> {
    let sent = async {
        loop {
            match stream.next(&mut *wire).await {
                Ok(Event::ResponseSent { handle, .. }) if handle == ok => return true,
                Ok(_) | Err(stream::Error::State(_)) => {}
                Err(_) => return false,
            }
        }
    };
    if !tokio::time::timeout(crate::tls::HANDSHAKE_TIME, sent)
        .await
        .unwrap_or(false)
    {
        return None;
    }
    handshake(acceptor, tokio::net::TcpStream::from(stream), peer).await
}

/// Sends `* BYE` if the client still reads (for 5 seconds at most).
async fn autologout(stream: &mut Stream, wire: &mut Wire) {
    let bye = wire.server.enqueue_status(session::bye());
    let flush = async {
        while let Ok(ev) = stream.next(&mut *wire).await {
            if matches!(ev, Event::ResponseSent { handle, .. } if handle == bye) {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), flush).await;
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
    bad_command(bytes.declassify(), text)
}

/// The plain SEARCH (parsed by imap-codec) and the RETURN options of a command
/// [`esearch::split`] split; `Err`: the `BAD` it gets.
fn esearch_command(
    split: esearch::Split,
) -> Result<
    (
        imap_codec::imap_types::command::Command<'static>,
        esearch::Return,
    ),
    Status<'static>,
> {
    use imap_codec::decode::Decoder;
    let (r, plain) = split
        .map_err(|(tag, text)| status(Kind::Bad, Tag::try_from(tag).ok(), None, text.into()))?;
    match imap_codec::CommandCodec::default().decode(&plain) {
        Ok(([], cmd)) => Ok((bounded_static::IntoBoundedStatic::into_static(cmd), r)),
        _ => Err(bad_command(&plain, "that command does not parse")),
    }
}

/// A `BAD` of `text` for the command `b`, tagged when its tag can be read.
fn bad_command(b: &[u8], text: &str) -> Status<'static> {
    let first = b.split(|&c| c == b' ').next().unwrap_or_default();
    let tag = std::str::from_utf8(first)
        .ok()
        .and_then(|t| Tag::try_from(t.to_string()).ok());
    status(Kind::Bad, tag, None, text.into())
}

/// A turn for a SEARCH that reads messages (header fields, bodies): such searches run at
/// most one per core at once, taking turns with the web UI's. 50 sessions searching a
/// folder of 100,000 messages' subjects at once otherwise kept every core busy, and
/// every other session's NOOP waited 40 ms for one.
async fn search_turn<'s>(
    st: &'s Option<AppState>,
    criteria: &Vec1<SearchKey<'_>>,
) -> Option<tokio::sync::SemaphorePermit<'s>> {
    if search::needs(criteria.as_ref()) == fetch::Needs::Nothing {
        return None;
    }
    st.as_ref()?.0.searches.acquire().await.ok()
}

/// How long an answer's bytes wait to go to the socket before the next command is taken
/// anyway ([`Conn::send_part`]).
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Commands a client may send while a FETCH's part is going out, held to be answered
/// after it ([`Conn::send_part`]).
const MAX_HELD: usize = 10_000;

struct Conn {
    /// Taken while a command runs on a blocking thread.
    session: Option<Session>,
    /// The tag of an AUTHENTICATE waiting for the client's data.
    auth_tag: Option<Tag<'static>>,
    idle_tag: Option<Tag<'static>>,
    closing: Option<imap_next::server::ResponseHandle>,
    /// What the client sent while a FETCH's parts were going out, taken in order after it.
    held: VecDeque<Result<Event, stream::Error<imap_next::server::Error>>>,
}

impl Conn {
    async fn event(&mut self, stream: &mut Stream, wire: &mut Wire, ev: Event) -> Next {
        let server = &mut wire.server;
        match ev {
            Event::GreetingSent { .. } => Next::Go,
            Event::ResponseSent { handle, .. } => match self.closing == Some(handle) {
                true => Next::Stop,
                false => Next::Go,
            },
            Event::CommandReceived { command } => {
                if matches!(command.body, CommandBody::StartTLS) && self.starttls_now() {
                    let text = "begin TLS negotiation now".to_string();
                    let ok = status(Kind::Ok, Some(command.tag), None, text);
                    return Next::StartTls(server.enqueue_status(ok));
                }
                let st = self.state();
                let turn = match &command.body {
                    CommandBody::Search { criteria, .. } => search_turn(&st, criteria).await,
                    _ => None,
                };
                let Some(mut a) = self.run(move |s| s.handle(command)).await else {
                    return Next::Stop;
                };
                // Given back before the answer is sent: a slow reader holds no turn.
                drop(turn);
                while let Some(p) = a.more.take() {
                    if !self
                        .send_part(stream, wire, std::mem::take(&mut a.untagged))
                        .await
                    {
                        return Next::Stop;
                    }
                    a = match self.run(move |s| s.fetch_part(p)).await {
                        Some(a) => a,
                        None => return Next::Stop,
                    };
                }
                if a.failed_login || a.logout {
                    return send(wire, a).await;
                }
                // Sent before the next command is taken: a client that sends commands
                // faster than it reads the answers (mbsync asks for each message with a
                // FETCH of its own, all at once) does not pile them up in memory (273 MB
                // of unsent answers in one pull of 100,000 messages).
                let mut all = std::mem::take(&mut a.untagged);
                all.push(Out::Status(a.done));
                match self.send_part(stream, wire, all).await {
                    true => Next::Go,
                    false => Next::Stop,
                }
            }
            Event::CommandAuthenticateReceived {
                command_authenticate: c,
            } => self.authenticate_start(server, c).await,
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

    /// Sends `part` (one part of a FETCH's answers, [`session::Answer::more`], or a whole
    /// answer) and waits until it is sent; what the client sends meanwhile is held for
    /// later. `false`: the connection ended, or the client read nothing for [`AUTOLOGOUT`].
    async fn send_part(&mut self, stream: &mut Stream, wire: &mut Wire, part: Vec<Out>) -> bool {
        let Some(last) = part.into_iter().map(|o| enqueue_one(wire, o)).last() else {
            return true;
        };
        let sent = async {
            loop {
                match stream.next(&mut *wire).await {
                    // imap-next says "sent" once an answer is in its write buffer, not on
                    // the socket: a client that reads slower than it asks (mbsync writing
                    // each message to disk while its FETCHes for the next ones wait) had
                    // 189 MB of answers piled up there (heaptrack). So the buffer goes to
                    // the socket before the next command is taken, waiting at most
                    // FLUSH_WAIT: a client that sends without reading (its commands
                    // filling the socket while this waits) is read from again after it.
                    Ok(Event::ResponseSent { handle, .. }) if handle == last => {
                        return match tokio::time::timeout(FLUSH_WAIT, stream.flush()).await {
                            Ok(Err(_)) => false,
                            Ok(Ok(())) | Err(_) => true,
                        };
                    }
                    // The part's own answers, sent (each event carries its answer: held,
                    // a FETCH of 100,000 messages kept every one until its end).
                    Ok(Event::ResponseSent { .. }) => {}
                    // Bounded: imap-next gives no command while an answer is pending (so
                    // none is held in practice), but a client must not grow this queue
                    // without end if that changes.
                    _ if self.held.len() >= MAX_HELD => {
                        tracing::warn!(
                            "imap: a client sent {MAX_HELD} commands without reading; closed"
                        );
                        return false;
                    }
                    Ok(ev) => self.held.push_back(Ok(ev)),
                    Err(stream::Error::State(e)) => {
                        self.held.push_back(Err(stream::Error::State(e)))
                    }
                    Err(_) => return false,
                }
            }
        };
        tokio::time::timeout(AUTOLOGOUT, sent)
            .await
            .unwrap_or(false)
    }

    /// Whether a STARTTLS now upgrades the connection (offered, not over TLS yet, not
    /// logged in).
    fn starttls_now(&self) -> bool {
        (self.session.as_ref()).is_some_and(|s| s.security.starttls_now() && !s.logged_in())
    }

    /// Answers a command that did not parse: a SEARCH with RETURN options (ESEARCH) and a
    /// LIST with LIST-EXTENDED's options or patterns, which imap-codec does not parse, are
    /// answered; AUTHENTICATE's data that does not
    /// parse (not base64) ends it; imap-next has answered a literal it refused itself.
    async fn refused(&mut self, wire: &mut Wire, e: &imap_next::server::Error) -> Next {
        if let Some(tag) = self.auth_tag.take() {
            let text = "not a base64 SASL PLAIN message".to_string();
            let _ = (wire.server).authenticate_finish(status(Kind::Bad, Some(tag), None, text));
            return Next::Go;
        }
        if let imap_next::server::Error::MalformedMessage { discarded_bytes } = e {
            if let Some(split) = esearch::split(discarded_bytes.declassify()) {
                return self.esearch(wire, split).await;
            }
            if let Some(split) = listext::split(discarded_bytes.declassify()) {
                return self.listext(wire, split).await;
            }
        }
        if !matches!(e, imap_next::server::Error::LiteralTooLong { .. }) {
            wire.server.enqueue_status(malformed(e));
        }
        Next::Go
    }

    /// Answers a SEARCH with RETURN options, [`esearch::split`].
    async fn esearch(&mut self, wire: &mut Wire, split: esearch::Split) -> Next {
        let (cmd, r) = match esearch_command(split) {
            Ok(x) => x,
            Err(bad) => {
                wire.server.enqueue_status(bad);
                return Next::Go;
            }
        };
        let st = self.state();
        let turn = match &cmd.body {
            CommandBody::Search { criteria, .. } => search_turn(&st, criteria).await,
            _ => None,
        };
        let Some(a) = self.run(move |s| s.esearch(cmd, r)).await else {
            return Next::Stop;
        };
        drop(turn);
        send(wire, a).await
    }

    /// Answers a LIST with LIST-EXTENDED's options or patterns, [`listext::split`].
    async fn listext(&mut self, wire: &mut Wire, split: listext::Split) -> Next {
        let cmd = match listext::command(split) {
            Ok(c) => c,
            Err(bad) => {
                wire.server.enqueue_status(bad);
                return Next::Go;
            }
        };
        let Some(a) = self.run(move |s| s.list(cmd)).await else {
            return Next::Stop;
        };
        send(wire, a).await
    }

    /// The start of an AUTHENTICATE: refused, finished with its initial response, or
    /// waiting for the client's data.
    async fn authenticate_start(
        &mut self,
        server: &mut Server,
        c: imap_next::types::CommandAuthenticate,
    ) -> Next {
        let (logged_in, allowed) = (self.session.as_ref()).map_or((false, false), |s| {
            (s.logged_in(), s.security.login_allowed())
        });
        if !allowed {
            let _ = server.authenticate_finish(session::login_needs_tls(c.tag));
            return Next::Go;
        }
        if logged_in || c.mechanism != AuthMechanism::Plain {
            let text = match logged_in {
                true => "already logged in",
                false => "only AUTHENTICATE PLAIN is offered",
            };
            let _ = server.authenticate_finish(status(Kind::No, Some(c.tag), None, text.into()));
            return Next::Go;
        }
        match c.initial_response {
            Some(r) => {
                let msg = zeroize::Zeroizing::new(r.declassify().to_vec());
                self.authenticate(server, c.tag, &msg).await
            }
            None => {
                self.auth_tag = Some(c.tag);
                let _ =
                    server.authenticate_continue(CommandContinuationRequest::base64(Vec::new()));
                Next::Go
            }
        }
    }

    /// The server's state (`None` while a command runs).
    fn state(&self) -> Option<AppState> {
        self.session.as_ref().map(|s| s.state().clone())
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
async fn send(wire: &mut Wire, a: Answer) -> Next {
    if a.failed_login {
        tokio::time::sleep(login::FAIL_DELAY).await;
    }
    enqueue(wire, a)
}

/// Queues one untagged answer.
fn enqueue_one(wire: &mut Wire, o: Out) -> imap_next::server::ResponseHandle {
    match o {
        Out::Data(d) => wire.server.enqueue_data(d),
        Out::Status(s) => wire.server.enqueue_status(s),
        Out::Raw(line) => wire.enqueue_raw(line),
    }
}

/// Queues an answer.
fn enqueue(wire: &mut Wire, a: Answer) -> Next {
    for o in a.untagged {
        enqueue_one(wire, o);
    }
    let h = wire.server.enqueue_status(a.done);
    match a.logout {
        true => Next::CloseAfter(h),
        false => Next::Go,
    }
}
