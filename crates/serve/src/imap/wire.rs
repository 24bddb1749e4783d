//! What goes on the wire besides imap-next's own work: [`Wire`] drives its `Server` and
//! can leave the greeting out (a connection upgraded by STARTTLS gets none, RFC 3501
//! 6.2.1) and send a line imap-codec has no type for (RFC 4731's `ESEARCH`, which
//! imap-codec 2.0.0-alpha.10 neither parses nor encodes) where a placeholder response
//! was queued, in order with the other responses.

use imap_codec::encode::Encoder;
use imap_codec::imap_types::core::{IString, NString};
use imap_codec::imap_types::response::{Data, Response};
use imap_next::server::{Error, Event, Server};
use imap_next::{Interrupt, Io, State};
use std::collections::VecDeque;

/// imap-next's server, with greeting left out or lines of our own.
pub struct Wire {
    pub server: Server,
    /// The greeting is still to be dropped.
    skip_greeting: bool,
    /// The encoded placeholders queued, each with the line sent in its place, in order.
    raw: VecDeque<(Vec<u8>, Vec<u8>)>,
    /// Placeholders made so far (each one's text differs).
    made: u64,
}

impl Wire {
    /// `server`, its greeting sent or (`greeting: false`) dropped unsent.
    pub fn new(server: Server, greeting: bool) -> Wire {
        Wire {
            server,
            skip_greeting: !greeting,
            raw: VecDeque::new(),
            made: 0,
        }
    }

    /// Queues `line` (a whole response, CRLF included) after what is queued: a
    /// placeholder `* ID` response goes into imap-next's queue and `line` is sent
    /// instead of its bytes.
    pub fn enqueue_raw(&mut self, line: Vec<u8>) -> imap_next::server::ResponseHandle {
        self.made += 1;
        let value = IString::try_from(format!("x-mailvault-raw-{}", self.made)).ok();
        let d = Data::Id {
            parameters: value.map(|v| vec![(v, NString(None))]),
        };
        let bytes = imap_codec::ResponseCodec::default()
            .encode(&Response::Data(d.clone()))
            .dump();
        self.raw.push_back((bytes, line));
        self.server.enqueue_data(d)
    }

    /// What is put on the wire for `bytes` imap-next wants sent (`None`: nothing).
    fn output(&mut self, bytes: Vec<u8>) -> Option<Vec<u8>> {
        if std::mem::take(&mut self.skip_greeting) {
            return None;
        }
        match self.raw.front() {
            Some((placeholder, _)) if *placeholder == bytes => self.raw.pop_front().map(|r| r.1),
            _ => Some(bytes),
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
    fn a_raw_line_goes_in_order_and_a_greeting_can_be_left_out() {
        let mut w = Wire::new(server(), true);
        w.server
            .enqueue_status(Status::ok(None, None, "one").unwrap());
        w.enqueue_raw(b"* ESEARCH (TAG \"a\") COUNT 0\r\n".to_vec());
        w.server
            .enqueue_status(Status::ok(Some("a".try_into().unwrap()), None, "two").unwrap());
        assert_eq!(
            String::from_utf8(sent(&mut w)).unwrap(),
            "* OK hi\r\n* OK one\r\n* ESEARCH (TAG \"a\") COUNT 0\r\na OK two\r\n"
        );
        let mut quiet = Wire::new(server(), false);
        quiet
            .server
            .enqueue_status(Status::ok(None, None, "after TLS").unwrap());
        assert_eq!(sent(&mut quiet), b"* OK after TLS\r\n");
    }
}
