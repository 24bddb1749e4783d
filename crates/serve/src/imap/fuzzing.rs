//! The IMAP view driven without sockets, for the fuzz target `imap_view`
//! (`fuzz/fuzz_targets/imap_view.rs`; feature `fuzzing`): a client's bytes go through
//! imap-next and imap-codec as on a connection, a session logged in to one account of a
//! real repository answers them (every command, ESEARCH's and LIST-EXTENDED's splits
//! included), and the answers are encoded. What differs from `mod.rs`'s connection: no
//! TLS handshake (STARTTLS is answered and the input ends there), no delays,
//! AUTHENTICATE refused (the session is logged in already).

use super::session::{status, Kind, Security, Session};
use super::wire::Wire;
use super::{enqueue, esearch, esearch_command, greeting, listext, malformed, options, Next};
use crate::state::{AppState, Freshness, Live};
use crate::token::AdminToken;
use imap_codec::imap_types::command::CommandBody;
use imap_codec::imap_types::core::Tag;
use imap_next::server::{Error, Event, Server};
use imap_next::{Interrupt, Io, State};
use mailvault_core::Repository;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

/// The admin token of the harness's server.
const TOKEN: &[u8] = b"fuzzing-admin-token-0123456789";
/// Events one input may cause at most (each command is at least a few bytes).
const MAX_EVENTS: usize = 100_000;

/// A server over one repository, and the account each session logs in to.
pub struct Harness {
    st: AppState,
    user: Vec<u8>,
}

impl Harness {
    /// Serves `repo` (its search cache in `cache`); sessions log in as the admin of
    /// `account`.
    pub fn new(repo: Repository, cache: &Path, account: &str) -> mailvault_core::Result<Harness> {
        let live = Live::open(repo, cache)?;
        let fresh = Freshness {
            reopen: Box::new(|| Err("the fuzzing harness opens its repository once".into())),
            recheck: Duration::from_secs(86_400),
            idle_close: Duration::from_secs(86_400),
        };
        let token = (AdminToken::new(TOKEN), (None, None), Default::default());
        let (page, stale) = (50, Duration::from_secs(86_400));
        let tls = (true, Vec::new());
        let st = AppState::new(live, fresh, token, (page, stale), cache.into(), tls);
        let user = format!("{account}*admin").into_bytes();
        Ok(Harness { st, user })
    }

    /// Feeds `input` to a new session logged in to the account, as a client's bytes on
    /// one connection; what the server sent. `None`: the harness's own login failed.
    pub fn run(&self, input: &[u8]) -> Option<Vec<u8>> {
        let security = Security {
            tls: true,
            starttls: false,
            plain_login: false,
        };
        let mut session = Session::new(self.st.clone(), IpAddr::V4(Ipv4Addr::LOCALHOST), security);
        let tag = Tag::try_from("login").ok()?;
        let _ = session.login(tag, &self.user, TOKEN);
        session.logged_in().then_some(())?;
        let mut wire = Wire::new(Server::new(options(), greeting(security)?), true);
        wire.enqueue_input(input);
        let (mut out, mut idle) = (Vec::new(), None);
        for _ in 0..MAX_EVENTS {
            let next = match wire.next() {
                Ok(ev) => event(&mut session, &mut wire, &mut idle, ev),
                Err(Interrupt::Io(Io::Output(b))) => {
                    out.extend(b);
                    Next::Go
                }
                Err(Interrupt::Io(Io::NeedMoreInput)) => break,
                Err(Interrupt::Error(e)) => refused(&mut session, &mut wire, &e),
            };
            if matches!(next, Next::Stop | Next::StartTls(_)) {
                break;
            }
        }
        Some(out)
    }
}

/// What the connection does with `ev` (see `Conn::event`), on `session` directly.
fn event(
    session: &mut Session,
    wire: &mut Wire,
    idle: &mut Option<Tag<'static>>,
    ev: Event,
) -> Next {
    let server = &mut wire.server;
    match ev {
        Event::GreetingSent { .. } | Event::ResponseSent { .. } => Next::Go,
        Event::CommandReceived { command } => {
            if matches!(command.body, CommandBody::StartTLS) {
                let ok = status(Kind::Ok, Some(command.tag), None, "TLS".into());
                return Next::StartTls(server.enqueue_status(ok));
            }
            let a = session.handle(command);
            match enqueue(wire, session.whole(a)) {
                Next::CloseAfter(_) => Next::Stop,
                n => n,
            }
        }
        Event::CommandAuthenticateReceived {
            command_authenticate: c,
        } => {
            let no = status(Kind::No, Some(c.tag), None, "already logged in".into());
            let _ = server.authenticate_finish(no);
            Next::Go
        }
        Event::AuthenticateDataReceived { .. } => Next::Go,
        Event::IdleCommandReceived { tag } => {
            let ccr =
                imap_codec::imap_types::response::CommandContinuationRequest::basic(None, "idling");
            if let Ok(ccr) = ccr {
                let _ = server.idle_accept(ccr);
                *idle = Some(tag);
            }
            Next::Go
        }
        Event::IdleDoneReceived => {
            if let Some(tag) = idle.take() {
                server.enqueue_status(status(Kind::Ok, Some(tag), None, "IDLE done".into()));
            }
            Next::Go
        }
    }
}

/// What the connection does with a command that did not parse (see `Conn::refused`).
fn refused(session: &mut Session, wire: &mut Wire, e: &Error) -> Next {
    if let Error::MalformedMessage { discarded_bytes } = e {
        if let Some(split) = esearch::split(discarded_bytes.declassify()) {
            return match esearch_command(split) {
                Ok((cmd, r)) => enqueue(wire, session.esearch(cmd, r)),
                Err(bad) => {
                    wire.server.enqueue_status(bad);
                    Next::Go
                }
            };
        }
        if let Some(split) = listext::split(discarded_bytes.declassify()) {
            return match listext::command(split) {
                Ok(cmd) => enqueue(wire, session.list(cmd)),
                Err(bad) => {
                    wire.server.enqueue_status(bad);
                    Next::Go
                }
            };
        }
    }
    if !matches!(e, Error::LiteralTooLong { .. }) {
        wire.server.enqueue_status(malformed(e));
    }
    Next::Go
}
