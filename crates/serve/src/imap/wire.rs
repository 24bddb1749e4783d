//! What goes on the wire besides imap-next's own work: [`Wire`] drives its `Server` and
//! can leave the greeting out (a connection upgraded by STARTTLS gets none, RFC 3501
//! 6.2.1).

use imap_next::server::{Error, Event, Server};
use imap_next::{Interrupt, Io, State};

/// imap-next's server, its greeting maybe left out.
pub struct Wire {
    pub server: Server,
    /// The greeting is still to be dropped.
    skip_greeting: bool,
}

impl Wire {
    /// `server`, its greeting sent or (`greeting: false`) dropped unsent.
    pub fn new(server: Server, greeting: bool) -> Wire {
        Wire {
            server,
            skip_greeting: !greeting,
        }
    }

    /// What is put on the wire for `bytes` imap-next wants sent (`None`: nothing).
    fn output(&mut self, bytes: Vec<u8>) -> Option<Vec<u8>> {
        match std::mem::take(&mut self.skip_greeting) {
            true => None,
            false => Some(bytes),
        }
    }
}

impl State for Wire {
    type Event = Event;
    type Error = Error;

    fn enqueue_input(&mut self, bytes: &[u8]) {
        self.server.enqueue_input(bytes);
    }

    fn next(&mut self) -> Result<Event, Interrupt<Error>> {
        loop {
            match self.server.next() {
                Err(Interrupt::Io(Io::Output(bytes))) => match self.output(bytes) {
                    Some(b) => return Err(Interrupt::Io(Io::Output(b))),
                    // Dropped: as if sent (the server goes on to its next event).
                    None => continue,
                },
                other => return other,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use imap_codec::imap_types::response::{Greeting, Status};
    use imap_next::server::Options;

    /// Everything `w` sends until it needs input.
    fn sent(w: &mut Wire) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            match w.next() {
                Err(Interrupt::Io(Io::Output(b))) => out.extend(b),
                Err(Interrupt::Io(Io::NeedMoreInput)) => return out,
                Err(Interrupt::Error(e)) => panic!("{e}"),
                Ok(_) => {}
            }
        }
    }

    fn server() -> Server {
        Server::new(Options::default(), Greeting::ok(None, "hi").unwrap())
    }

    #[test]
    fn a_greeting_can_be_left_out() {
        let mut w = Wire::new(server(), true);
        w.server
            .enqueue_status(Status::ok(None, None, "one").unwrap());
        assert_eq!(sent(&mut w), b"* OK hi\r\n* OK one\r\n");
        let mut quiet = Wire::new(server(), false);
        quiet
            .server
            .enqueue_status(Status::ok(None, None, "after TLS").unwrap());
        assert_eq!(sent(&mut quiet), b"* OK after TLS\r\n");
    }
}
