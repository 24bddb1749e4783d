//! Buffered, framed I/O on one connection: whole responses in, command parts
//! out. One read buffer holds the current response (a FETCH body is one
//! response, so memory stays at the size of the largest message).

use std::io::{self, IoSlice, Read, Write};
use std::ops::Range;

use super::stream::Stream;
use crate::proto::command::{Command, Part};
use crate::proto::framing::{FrameError, Framer};

/// Writes at least this large skip the write buffer.
const DIRECT_WRITE: usize = 32 << 10;
/// The write buffer is flushed when it grows past this.
const WBUF_FLUSH: usize = 64 << 10;
/// Initial read buffer.
const RBUF_INITIAL: usize = 64 << 10;

/// A failure below the protocol: the connection is gone or unusable.
#[derive(Debug)]
pub(crate) enum ConnError {
    Io(io::Error),
    Frame(FrameError),
}

impl From<io::Error> for ConnError {
    fn from(e: io::Error) -> Self {
        ConnError::Io(e)
    }
}

#[derive(Debug)]
pub(crate) struct Conn {
    pub(crate) stream: Stream,
    rbuf: Vec<u8>,
    /// Start of unconsumed bytes.
    rstart: usize,
    /// End of valid bytes.
    rend: usize,
    /// Length of the response handed out last (consumed on the next call).
    last: usize,
    framer: Framer,
    wbuf: Vec<u8>,
}

impl Conn {
    pub(crate) fn new(stream: Stream) -> Self {
        Conn {
            stream,
            rbuf: vec![0; RBUF_INITIAL],
            rstart: 0,
            rend: 0,
            last: 0,
            framer: Framer::new(),
            wbuf: Vec::with_capacity(WBUF_FLUSH * 2),
        }
    }

    /// Whether bytes beyond the last response are already buffered.
    pub(crate) fn has_buffered_input(&self) -> bool {
        self.rend > self.rstart + self.last
    }

    /// Reads the next complete response; returns its range in [`Self::buf`].
    pub(crate) fn next_response(&mut self) -> Result<Range<usize>, ConnError> {
        self.rstart += self.last;
        self.last = 0;
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        }
        loop {
            if let Some(len) = self
                .framer
                .frame(&self.rbuf[self.rstart..self.rend])
                .map_err(ConnError::Frame)?
            {
                self.last = len;
                return Ok(self.rstart..self.rstart + len);
            }
            // Need more bytes: make room.
            if self.rend == self.rbuf.len() {
                if self.rstart > 0 {
                    self.rbuf.copy_within(self.rstart..self.rend, 0);
                    self.rend -= self.rstart;
                    self.rstart = 0;
                }
                if self.rend == self.rbuf.len() {
                    let new_len = self.rbuf.len() * 2;
                    self.rbuf.resize(new_len, 0);
                }
            }
            let n = loop {
                match self.stream.read(&mut self.rbuf[self.rend..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(ConnError::Io(e)),
                }
            };
            if n == 0 {
                return Err(ConnError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "server closed the connection",
                )));
            }
            self.rend += n;
        }
    }

    /// The read buffer (index it with a range from [`Self::next_response`]).
    pub(crate) fn buf(&self) -> &[u8] {
        &self.rbuf
    }

    /// Drops read buffers grown for a very large message.
    pub(crate) fn shrink(&mut self) {
        if self.rbuf.len() > 4 * RBUF_INITIAL && self.rstart + self.last == self.rend {
            self.rstart = 0;
            self.rend = 0;
            self.last = 0;
            self.rbuf = vec![0; RBUF_INITIAL];
        }
    }

    /// Queues bytes; large payloads are written straight through.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.len() >= DIRECT_WRITE {
            self.flush_buf()?;
            self.stream.write_all(bytes)?;
        } else {
            self.wbuf.extend_from_slice(bytes);
            if self.wbuf.len() >= WBUF_FLUSH {
                self.flush_buf()?;
            }
        }
        Ok(())
    }

    fn flush_buf(&mut self) -> io::Result<()> {
        if !self.wbuf.is_empty() {
            let r = self.stream.write_all(&self.wbuf);
            self.wbuf.clear();
            r?;
        }
        Ok(())
    }

    /// Sends everything queued.
    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.flush_buf()?;
        self.stream.flush()
    }

    /// Queues the parts of `cmd` from `from` up to the next continuation
    /// wait (exclusive); returns the index after it, or `None` at the end. Parts
    /// that make at least [`DIRECT_WRITE`] bytes together (a MULTIAPPEND's
    /// messages) are written at once with what was queued, by vectored writes
    /// (`writev`): a small literal is not copied into the write buffer, and a
    /// batch takes a few system calls, not one per large message.
    pub(crate) fn write_until_wait(
        &mut self,
        cmd: &Command<'_>,
        from: usize,
    ) -> io::Result<Option<usize>> {
        let rest = cmd.parts.get(from..).unwrap_or_default();
        let end = rest
            .iter()
            .position(|p| matches!(p, Part::AwaitContinuation))
            .unwrap_or(rest.len());
        let bytes = |p: &'_ Part<'_>| match p {
            Part::Bytes(b) => b.len(),
            Part::AwaitContinuation => 0,
        };
        if rest[..end].iter().map(bytes).sum::<usize>() >= DIRECT_WRITE {
            self.write_parts(&rest[..end])?;
        } else {
            for part in &rest[..end] {
                if let Part::Bytes(b) = part {
                    self.write(b)?;
                }
            }
        }
        Ok((end < rest.len()).then_some(from + end + 1))
    }

    /// Writes what is queued, then `parts`, by vectored writes.
    fn write_parts(&mut self, parts: &[Part<'_>]) -> io::Result<()> {
        let mut slices: Vec<IoSlice<'_>> = Vec::with_capacity(parts.len() + 1);
        if !self.wbuf.is_empty() {
            slices.push(IoSlice::new(&self.wbuf));
        }
        for p in parts {
            match p {
                Part::Bytes(b) if !b.is_empty() => slices.push(IoSlice::new(b)),
                _ => {}
            }
        }
        let r = write_all_vectored(&mut self.stream, &mut slices);
        self.wbuf.clear();
        r
    }
}

/// `Write::write_all_vectored`, which is not stable yet.
fn write_all_vectored(w: &mut impl Write, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "failed to write the whole command",
                ))
            }
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::command::{CommandBuilder, LiteralMode};
    use std::net::{TcpListener, TcpStream};

    /// What a command's parts put on the wire, small ones through the write buffer and
    /// a large batch by vectored writes, is the command exactly, up to each wait for a
    /// continuation.
    #[test]
    fn commands_go_out_exactly() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let reader = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap_or_else(|e| panic!("{e}"));
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap_or_else(|e| panic!("{e}"));
            got
        });
        let tcp = TcpStream::connect(addr).unwrap_or_else(|e| panic!("{e}"));
        let mut conn = Conn::new(Stream::Plain(tcp));
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let mut want = Vec::new();
        // Queued text first, then a batch of literals large and small (vectored).
        conn.write(b"A0 NOOP\r\n").unwrap_or_else(|e| panic!("{e}"));
        want.extend_from_slice(b"A0 NOOP\r\n");
        for (tag, mode, sizes) in [
            (
                "A1",
                LiteralMode::NonSync,
                &[5usize, 100_000, 7, 40_000][..],
            ),
            ("A2", LiteralMode::NonSync, &[3, 9][..]),
            ("A3", LiteralMode::Sync, &[50_000, 4][..]),
        ] {
            let mut b = CommandBuilder::new(tag, "APPEND", mode);
            b.sp().raw(b"INBOX");
            for n in sizes {
                b.sp().literal(&big[..*n]);
            }
            let cmd = b.finish();
            let mut from = 0;
            while let Some(next) = conn
                .write_until_wait(&cmd, from)
                .unwrap_or_else(|e| panic!("{e}"))
            {
                from = next;
            }
            // The transcript marks waits with `<+>`; the wire has nothing there.
            want.extend(strip_waits(&cmd.transcript()));
        }
        conn.flush().unwrap_or_else(|e| panic!("{e}"));
        drop(conn);
        let got = reader.join().unwrap_or_else(|_| panic!("reader"));
        assert_eq!(got.len(), want.len());
        assert!(got == want, "the wire differs from the commands");
    }

    fn strip_waits(t: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(t.len());
        let mut i = 0;
        while i < t.len() {
            if t[i..].starts_with(b"<+>") {
                i += 3;
            } else {
                out.push(t[i]);
                i += 1;
            }
        }
        out
    }
}
