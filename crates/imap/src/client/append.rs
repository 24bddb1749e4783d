//! Fast APPEND for restores into a live server.
//!
//! Paths, fastest first (chosen from the capabilities, or forced through
//! [`AppendStrategy`]):
//! 1. MULTIAPPEND (RFC 3502) with LITERAL+ (RFC 7888): a whole batch is one
//!    command written without waiting, answered by one tagged OK carrying
//!    `[APPENDUID uidvalidity uid-set]`. MULTIAPPEND is atomic: if the server
//!    refuses one message it refuses the command, so the batch is then sent
//!    again one APPEND per message to find the culprit(s).
//! 2. One APPEND per message, pipelined (up to `pipeline_depth` in flight)
//!    when literals need no `+`.
//! 3. One APPEND at a time with synchronizing literals.
//!
//! Messages larger than the server's APPENDLIMIT (or the client's own
//! limit), or with flags that are not IMAP atoms, are refused locally and
//! never sent.
//!
//! Until the server has stored one message of a session, its APPENDs go one
//! at a time with synchronizing literals. Cyrus stages a message before it
//! reads the literal, and when staging fails it answers `NO System I/O error`
//! without reading a LITERAL+ literal: the message's lines then run as
//! commands of the session. Staging fails when two sessions race to make the
//! partition's staging directory at the first APPENDs a server gets (a
//! restore into a new server), and when the spool cannot be written. A
//! synchronizing literal is only sent after the server's `+`, so a refusal
//! costs nothing; once a message is stored the directory exists.

use super::options::AppendStrategy;
use super::session::{Got, Session};
use crate::error::{Error, Result};
use crate::proto::command::{Command, CommandBuilder, LiteralMode};
use crate::proto::date::InternalDate;
use crate::proto::response::{Code, Status, StatusText};

/// The system flags APPEND may set (RFC 3501 §2.3.2, without `\Recent`).
const SYSTEM_FLAGS: [&str; 5] = ["\\Seen", "\\Answered", "\\Flagged", "\\Deleted", "\\Draft"];

/// One message to append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendMsg<'a> {
    /// System flags (`\Seen`, `\Answered`, `\Flagged`, `\Deleted`,
    /// `\Draft`) and keywords (`$Forwarded`, `Junk`...). `\Recent` is
    /// dropped: no client can set it.
    pub flags: Vec<String>,
    /// INTERNALDATE to give the message; `None` lets the server use "now".
    pub internal_date: Option<InternalDate>,
    /// The message, with CRLF line endings (see [`crate::to_crlf`]).
    pub data: &'a [u8],
}

/// What happened to one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendOutcome {
    /// Stored.
    Appended {
        /// Its UID, when the server offers UIDPLUS.
        uid: Option<u32>,
        /// The folder's UIDVALIDITY, when the server offers UIDPLUS.
        uidvalidity: Option<u32>,
    },
    /// Not stored.
    Refused(Refusal),
}

impl AppendOutcome {
    /// Whether the message was stored.
    pub fn is_appended(&self) -> bool {
        matches!(self, AppendOutcome::Appended { .. })
    }
}

/// Why a message was not stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The server's response as it sent it (`NO [LIMIT] Mail too large`), or
    /// the client's reason when `by_server` is false.
    pub response: String,
    /// The response code, if any.
    pub code: Option<Code>,
    /// Whether the server refused it (else the client did not send it).
    pub by_server: bool,
}

impl Refusal {
    /// Whether trying again later may succeed (`[THROTTLED]`...).
    pub fn is_transient(&self) -> bool {
        self.code.as_ref().is_some_and(Code::is_transient)
    }

    /// Whether the server refused without a response code, so without saying whether
    /// it is the message (`NO Message contains invalid header`) or a passing fault of
    /// its own (Cyrus: `NO System I/O error`): one more try may tell.
    pub fn is_unexplained(&self) -> bool {
        self.by_server && self.code.is_none()
    }

    fn local(response: String) -> Self {
        Refusal {
            response,
            code: None,
            by_server: false,
        }
    }

    fn from_status(s: &StatusText<'_>) -> Self {
        Refusal {
            response: s.to_wire_string(),
            code: s.code.clone(),
            by_server: true,
        }
    }
}

/// Refused MULTIAPPEND commands of at most this many messages are retried
/// one APPEND per message instead of being halved again.
const BISECT_MIN: usize = 8;

/// Why a batch stopped early, and which sent messages are in doubt.
type Stopped = Box<(Error, Vec<usize>)>;

/// A message checked and ready to encode.
struct Prepared<'m> {
    idx: usize,
    flags: Vec<&'m str>,
    date: Option<String>,
    data: &'m [u8],
}

/// State of one `append_batch` call.
struct Batch<'f> {
    folder: &'f str,
    server_name: String,
    outcomes: Vec<Option<AppendOutcome>>,
}

impl Session {
    /// Appends `msgs` to `folder` as fast as the server allows and returns
    /// one outcome per message, in order. A message the server refuses is a
    /// [`AppendOutcome::Refused`] with the server's own words; the others
    /// still land. The batch stops early with [`Error::AppendInterrupted`]
    /// (carrying what is known per message) when the connection breaks or
    /// the server refuses for the whole account or folder (`[OVERQUOTA]`,
    /// `[TRYCREATE]`, `[THROTTLED]`, `[UNAVAILABLE]`).
    pub fn append_batch(
        &mut self,
        folder: &str,
        msgs: &[AppendMsg<'_>],
    ) -> Result<Vec<AppendOutcome>> {
        if msgs.is_empty() {
            return Ok(Vec::new());
        }
        let server_name = self.server_name(folder)?;
        let mut batch = Batch {
            folder,
            server_name,
            outcomes: vec![None; msgs.len()],
        };
        let limit = match (
            self.caps.append_limit(),
            self.options().append.max_message_bytes,
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut ready: Vec<Prepared<'_>> = Vec::with_capacity(msgs.len());
        for (idx, m) in msgs.iter().enumerate() {
            match prepare(idx, m, limit) {
                Ok(p) => ready.push(p),
                Err(reason) => {
                    batch.outcomes[idx] = Some(AppendOutcome::Refused(Refusal::local(reason)))
                }
            }
        }
        let opts = self.options().append.clone();
        let multi = self.caps.has("MULTIAPPEND");
        let mode = self.literal_mode();
        // One at a time, waiting for `+`, until the server stores one (see the
        // module's notes).
        let mut first = 0;
        while !self.appended && first < ready.len() && mode != LiteralMode::Sync {
            let one = &ready[first..first + 1];
            if let Err(stopped) = self.append_each(&mut batch, one, LiteralMode::Sync, 1) {
                return Err(self.interrupted(batch, *stopped));
            }
            self.appended = matches!(
                batch.outcomes[one[0].idx],
                Some(AppendOutcome::Appended { .. })
            );
            first += 1;
        }
        let ready = &ready[first..];
        let result = match opts.strategy {
            AppendStrategy::Auto | AppendStrategy::MultiAppend if multi => {
                self.append_multi(&mut batch, ready, mode)
            }
            AppendStrategy::Synchronous => {
                self.append_each(&mut batch, ready, LiteralMode::Sync, 1)
            }
            _ => {
                let depth = if mode == LiteralMode::Sync {
                    1
                } else {
                    opts.pipeline_depth.max(1)
                };
                self.append_each(&mut batch, ready, mode, depth)
            }
        };
        match result {
            Ok(()) => {
                let mut out = Vec::with_capacity(msgs.len());
                for o in batch.outcomes {
                    match o {
                        Some(o) => out.push(o),
                        None => {
                            return Err(self.protocol_error(
                                "APPEND batch ended without an answer for every message".into(),
                            ))
                        }
                    }
                }
                Ok(out)
            }
            Err(stopped) => Err(self.interrupted(batch, *stopped)),
        }
    }

    /// The error of a batch that stopped early: what is known per message.
    fn interrupted(&self, batch: Batch<'_>, (source, in_doubt): (Error, Vec<usize>)) -> Error {
        Error::AppendInterrupted {
            account: self.account.clone(),
            folder: batch.folder.to_string(),
            outcomes: batch.outcomes,
            in_doubt,
            source: Box::new(source),
        }
    }

    /// Convenience: one message.
    pub fn append(&mut self, folder: &str, msg: &AppendMsg<'_>) -> Result<AppendOutcome> {
        let mut v = self.append_batch(folder, std::slice::from_ref(msg))?;
        v.pop()
            .ok_or_else(|| self.protocol_error("APPEND without outcome".into()))
    }

    /// Starts `APPEND mailbox` with the given literal mode.
    fn append_command<'m>(&mut self, batch: &Batch<'_>, mode: LiteralMode) -> CommandBuilder<'m> {
        let tag = self.next_tag();
        let mut b = CommandBuilder::new(&tag, "APPEND", mode);
        b.sp().mailbox(&batch.server_name);
        b
    }

    /// MULTIAPPEND in commands bounded by size and count.
    fn append_multi(
        &mut self,
        batch: &mut Batch<'_>,
        ready: &[Prepared<'_>],
        mode: LiteralMode,
    ) -> Result<(), Stopped> {
        let opts = self.options().append.clone();
        let mut start = 0;
        while start < ready.len() {
            let mut end = start;
            let mut bytes = 0usize;
            while end < ready.len()
                && end - start < opts.max_command_messages.max(1)
                && (end == start || bytes + ready[end].data.len() <= opts.max_command_bytes)
            {
                bytes += ready[end].data.len() + 64;
                end += 1;
            }
            self.multi_chunk(batch, &ready[start..end], mode)?;
            start = end;
        }
        Ok(())
    }

    /// One MULTIAPPEND command. If the server refuses it for one message's
    /// sake, halves are tried again (a bad message among 500 costs about 18
    /// commands, not 500), down to small groups sent one APPEND each.
    fn multi_chunk(
        &mut self,
        batch: &mut Batch<'_>,
        chunk: &[Prepared<'_>],
        mode: LiteralMode,
    ) -> Result<(), Stopped> {
        let mut b = self.append_command(batch, mode);
        for p in chunk {
            add_message(&mut b, p);
        }
        let cmd = b.finish();
        let status = self
            .send_and_finish(&cmd)
            .map_err(|e| Box::new((e, chunk.iter().map(|p| p.idx).collect())))?;
        if status.status == Status::Ok {
            let uids = match &status.code {
                Some(Code::AppendUid { uidvalidity, uids }) => uids
                    .expand(chunk.len())
                    .filter(|v| v.len() == chunk.len())
                    .map(|v| (*uidvalidity, v)),
                _ => None,
            };
            for (i, p) in chunk.iter().enumerate() {
                batch.outcomes[p.idx] = Some(AppendOutcome::Appended {
                    uid: uids.as_ref().map(|(_, v)| v[i]),
                    uidvalidity: uids.as_ref().map(|(uv, _)| *uv),
                });
            }
            return Ok(());
        }
        if status.status == Status::Bad {
            let e = self.bad_append(&status);
            return Err(Box::new((e, chunk.iter().map(|p| p.idx).collect())));
        }
        // MULTIAPPEND is atomic: nothing of this command was stored.
        if let Some(e) = self.batch_wide_failure(batch, &status) {
            return Err(Box::new((e, Vec::new())));
        }
        match chunk.len() {
            1 => {
                batch.outcomes[chunk[0].idx] =
                    Some(AppendOutcome::Refused(Refusal::from_status(&status)));
                Ok(())
            }
            2..=BISECT_MIN => {
                let depth = if mode == LiteralMode::Sync {
                    1
                } else {
                    self.options().append.pipeline_depth.max(1)
                };
                self.append_each(batch, chunk, mode, depth)
            }
            n => {
                let (a, b) = chunk.split_at(n / 2);
                self.multi_chunk(batch, a, mode)?;
                self.multi_chunk(batch, b, mode)
            }
        }
    }

    /// One APPEND per message, up to `depth` in flight.
    fn append_each(
        &mut self,
        batch: &mut Batch<'_>,
        ready: &[Prepared<'_>],
        mode: LiteralMode,
        depth: usize,
    ) -> Result<(), Stopped> {
        let max_bytes = self.options().append.max_command_bytes;
        let mut in_flight: Vec<(String, usize)> = Vec::new();
        let mut flight_bytes = 0usize;
        let mut stop: Option<Error> = None;
        for p in ready {
            let mut b = self.append_command(batch, mode);
            add_message(&mut b, p);
            let cmd = b.finish();
            if cmd.sync_points() > 0 || depth == 1 {
                // Must wait for '+': drain what is in flight first.
                self.drain(batch, &mut in_flight, &mut stop)?;
                flight_bytes = 0;
                if stop.is_some() {
                    break;
                }
                let status = self
                    .send_and_finish(&cmd)
                    .map_err(|e| Box::new((e, vec![p.idx])))?;
                self.record(batch, p.idx, &status, &mut stop);
                if stop.is_some() {
                    break;
                }
                continue;
            }
            if let Err(e) = self.write_command(&cmd) {
                let mut doubt: Vec<usize> = in_flight.iter().map(|(_, i)| *i).collect();
                doubt.push(p.idx);
                return Err(Box::new((e, doubt)));
            }
            in_flight.push((cmd.tag.clone(), p.idx));
            flight_bytes += cmd.wire_len();
            if in_flight.len() >= depth || flight_bytes >= max_bytes {
                self.drain(batch, &mut in_flight, &mut stop)?;
                flight_bytes = 0;
                if stop.is_some() {
                    break;
                }
            }
        }
        self.drain(batch, &mut in_flight, &mut stop)?;
        match stop {
            Some(e) => Err(Box::new((e, Vec::new()))),
            None => Ok(()),
        }
    }

    /// Writes a command that has no synchronizing literal.
    fn write_command(&mut self, cmd: &Command<'_>) -> Result<()> {
        match self.conn.write_until_wait(cmd, 0) {
            Ok(None) => Ok(()),
            Ok(Some(_)) => {
                Err(self.protocol_error("pipelined command needs a continuation".into()))
            }
            Err(e) => Err(self.write_failed(e, &cmd.tag)),
        }
    }

    /// Sends a command (waiting at synchronizing literals) and reads its
    /// completion.
    fn send_and_finish(&mut self, cmd: &Command<'_>) -> Result<StatusText<'static>> {
        if let Some(status) = self.send(cmd, &mut |_| Ok(()))? {
            return Ok(status);
        }
        self.finish(&cmd.tag, &mut |_| Ok(()))
    }

    /// Reads the completions of everything in flight.
    fn drain(
        &mut self,
        batch: &mut Batch<'_>,
        in_flight: &mut Vec<(String, usize)>,
        stop: &mut Option<Error>,
    ) -> Result<(), Stopped> {
        if in_flight.is_empty() {
            return Ok(());
        }
        if let Err(e) = self.conn.flush() {
            let doubt = in_flight.iter().map(|(_, i)| *i).collect();
            let tag = in_flight[0].0.clone();
            return Err(Box::new((self.write_failed(e, &tag), doubt)));
        }
        while !in_flight.is_empty() {
            let got = self.read_one(&mut |_| Ok(()));
            match got {
                Ok(Got::Tagged { tag, status }) => {
                    let Some(pos) = in_flight.iter().position(|(t, _)| *t == tag) else {
                        let e = self.protocol_error(format!("completion of unknown tag {tag}"));
                        return Err(Box::new((e, in_flight.iter().map(|(_, i)| *i).collect())));
                    };
                    let (_, idx) = in_flight.remove(pos);
                    self.record(batch, idx, &status, stop);
                    if self.broken {
                        let doubt = in_flight.iter().map(|(_, i)| *i).collect();
                        let e = stop.take().unwrap_or_else(|| Error::Protocol {
                            server: self.server.clone(),
                            account: self.account.clone(),
                            detail: "connection out of step".into(),
                        });
                        return Err(Box::new((e, doubt)));
                    }
                }
                Ok(Got::Untagged) => {}
                Ok(Got::Continuation) => {
                    let e = self.protocol_error("unexpected '+' while pipelining".into());
                    return Err(Box::new((e, in_flight.iter().map(|(_, i)| *i).collect())));
                }
                Err(e) => return Err(Box::new((e, in_flight.iter().map(|(_, i)| *i).collect()))),
            }
        }
        Ok(())
    }

    /// Records the completion of a single-message APPEND.
    fn record(
        &mut self,
        batch: &mut Batch<'_>,
        idx: usize,
        status: &StatusText<'_>,
        stop: &mut Option<Error>,
    ) {
        if status.status == Status::Ok {
            let (uid, uidvalidity) = match &status.code {
                Some(Code::AppendUid { uidvalidity, uids }) => match uids.ranges() {
                    [(a, b)] if a == b => (Some(*a), Some(*uidvalidity)),
                    _ => (None, Some(*uidvalidity)),
                },
                _ => (None, None),
            };
            batch.outcomes[idx] = Some(AppendOutcome::Appended { uid, uidvalidity });
            return;
        }
        if status.status == Status::Bad {
            batch.outcomes[idx] = Some(AppendOutcome::Refused(Refusal::from_status(status)));
            let e = self.bad_append(status);
            if stop.is_none() {
                *stop = Some(e);
            }
            return;
        }
        if let Some(e) = self.batch_wide_failure(batch, status) {
            if stop.is_none() {
                *stop = Some(e);
            }
            return;
        }
        batch.outcomes[idx] = Some(AppendOutcome::Refused(Refusal::from_status(status)));
    }

    /// A BAD to an APPEND: the server may not have read the literals that
    /// followed (Dovecot does not), so the connection is out of step.
    fn bad_append(&mut self, status: &StatusText<'_>) -> Error {
        self.protocol_error(format!(
            "server answered {} to APPEND; the connection is no longer in step, open a new session",
            status.to_wire_string()
        ))
    }

    /// The error to stop with if a refusal concerns the whole folder or
    /// account rather than one message.
    fn batch_wide_failure(&self, batch: &Batch<'_>, status: &StatusText<'_>) -> Option<Error> {
        match &status.code {
            Some(Code::OverQuota)
            | Some(Code::TryCreate)
            | Some(Code::Nonexistent)
            | Some(Code::Throttled)
            | Some(Code::Unavailable)
            | Some(Code::InUse)
            | Some(Code::ServerBug)
            | Some(Code::AuthorizationFailed)
            | Some(Code::NoPerm) => Some(self.command_error("APPEND", Some(batch.folder), status)),
            _ => None,
        }
    }
}

/// Checks one message and formats its parts.
fn prepare<'m>(
    idx: usize,
    m: &'m AppendMsg<'_>,
    limit: Option<u64>,
) -> std::result::Result<Prepared<'m>, String> {
    if let Some(limit) = limit {
        if m.data.len() as u64 > limit {
            return Err(format!(
                "not sent: message is {} bytes, over the server's APPENDLIMIT of {limit} bytes",
                m.data.len()
            ));
        }
    }
    let mut flags: Vec<&str> = Vec::with_capacity(m.flags.len());
    for f in &m.flags {
        if f.eq_ignore_ascii_case("\\Recent") {
            continue;
        }
        if !crate::proto::command::is_valid_flag(f) {
            return Err(format!(
                "not sent: flag {f:?} is not a valid IMAP flag or keyword"
            ));
        }
        // An unknown system flag makes Dovecot answer BAD without reading the
        // rest of a LITERAL+ command, which would then run message text as
        // commands: never send one.
        if f.starts_with('\\') && !SYSTEM_FLAGS.iter().any(|s| s.eq_ignore_ascii_case(f)) {
            return Err(format!("not sent: {f:?} is not an IMAP system flag"));
        }
        if !flags.iter().any(|g| g.eq_ignore_ascii_case(f)) {
            flags.push(f);
        }
    }
    let date = match m.internal_date {
        Some(d) => Some(d.to_imap().map_err(|e| format!("not sent: {e}"))?),
        None => None,
    };
    Ok(Prepared {
        idx,
        flags,
        date,
        data: m.data,
    })
}

/// ` (flags) "date" {n+}\r\n<data>` for one message.
fn add_message<'m>(b: &mut CommandBuilder<'m>, p: &Prepared<'m>) {
    if !p.flags.is_empty() {
        // Flags were validated in `prepare`.
        b.sp();
        let _ = b.flag_list(&p.flags);
    }
    if let Some(d) = &p.date {
        b.sp();
        // INTERNALDATE text is plain ASCII.
        let _ = b.quoted(d.as_bytes());
    }
    b.sp().literal(p.data);
}

/// For tests: the exact wire form of a MULTIAPPEND of `msgs`.
#[doc(hidden)]
pub fn multiappend_transcript(
    tag: &str,
    mailbox: &str,
    msgs: &[AppendMsg<'_>],
    mode: LiteralMode,
) -> Vec<u8> {
    let mut b = CommandBuilder::new(tag, "APPEND", mode);
    b.sp().mailbox(mailbox);
    let prepared: Vec<Prepared<'_>> = msgs
        .iter()
        .enumerate()
        .filter_map(|(i, m)| prepare(i, m, None).ok())
        .collect();
    for p in &prepared {
        add_message(&mut b, p);
    }
    b.finish().transcript()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiappend_wire_form() {
        let msgs = [
            AppendMsg {
                flags: vec![
                    "\\Seen".into(),
                    "\\Recent".into(),
                    "$Forwarded".into(),
                    "\\seen".into(),
                ],
                internal_date: Some(InternalDate {
                    secs: 837_596_665,
                    tz_minutes: -420,
                }),
                data: b"Subject: 1\r\n\r\nA\r\n",
            },
            AppendMsg {
                flags: vec![],
                internal_date: None,
                data: b"B",
            },
        ];
        let t = multiappend_transcript("A9", "Entw\u{fc}rfe", &msgs, LiteralMode::NonSync);
        assert_eq!(
            String::from_utf8_lossy(&t),
            "A9 APPEND Entw&APw-rfe (\\Seen $Forwarded) \"17-Jul-1996 02:44:25 -0700\" {17+}\r\n\
             Subject: 1\r\n\r\nA\r\n {1+}\r\nB\r\n"
        );
        let t = multiappend_transcript("A9", "INBOX", &msgs[1..], LiteralMode::Sync);
        assert_eq!(t, b"A9 APPEND INBOX {1}\r\n<+>B\r\n");
    }

    #[test]
    fn local_refusals() {
        let big = vec![b'x'; 11];
        let m = AppendMsg {
            flags: vec![],
            internal_date: None,
            data: &big,
        };
        assert!(prepare(0, &m, Some(10)).is_err());
        assert!(prepare(0, &m, Some(11)).is_ok());
        let m = AppendMsg {
            flags: vec!["bad flag".into()],
            internal_date: None,
            data: b"x",
        };
        let e = prepare(0, &m, None).err().unwrap_or_default();
        assert!(e.contains("bad flag"), "{e}");
    }
}
