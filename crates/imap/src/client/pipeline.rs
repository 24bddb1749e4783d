//! Pipelined folder commands: many CREATEs or SUBSCRIBEs written back to back and
//! answered together, one round trip for all of them instead of one each, as the
//! APPENDs of a batch are ([`super::append`]). What provisioning an account costs a
//! restore is then a few round trips, however many folders it has.
//!
//! The server answers each command on its own (RFC 3501 §5.5): one refused does not stop
//! the others, and each gets the same outcome as when sent alone. Commands that depend
//! on each other (a folder and its parent) must not be in one call: the server may run
//! pipelined commands in any order.

use super::mailbox::{CreateOutcome, SpecialUse};
use super::session::{Got, Session};
use crate::error::{Error, Result};
use crate::proto::command::Command;
use crate::proto::response::{Code, Status, StatusText};

/// Most commands written before their answers are read: the answers then fit in the
/// socket buffers whatever the server does, so neither side blocks writing.
const DEPTH: usize = 64;

impl Session {
    /// CREATE every folder (with its special use, as [`Session::create`]) in one round
    /// trip. The outer error means the connection failed (the session is then broken);
    /// else one outcome per folder, in order, each as `create` would have returned it.
    /// No folder may be the parent of another in the same call (see the module's notes).
    pub fn create_many(
        &mut self,
        folders: &[(&str, Option<SpecialUse>)],
    ) -> Result<Vec<Result<CreateOutcome>>> {
        let mut out: Vec<Option<Result<CreateOutcome>>> = Vec::with_capacity(folders.len());
        let mut cmds = Vec::new();
        // (index in `folders`, special use asked for on the wire)
        let mut sent = Vec::new();
        for (i, (folder, special)) in folders.iter().enumerate() {
            match self.create_command(folder, *special) {
                Ok((cmd, with_use)) => {
                    cmds.push(cmd);
                    sent.push((i, with_use));
                    out.push(None);
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        let answers = self.run_pipelined(&cmds)?;
        for ((i, with_use), status) in sent.into_iter().zip(answers) {
            out[i] = Some(self.create_outcome(folders[i].0, with_use, &status));
        }
        Ok(out
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(self.missing_answer())))
            .collect())
    }

    /// SUBSCRIBE to every folder in one round trip; like [`Session::create_many`], the
    /// outer error is the connection's, else one result per folder, in order.
    pub fn subscribe_many(&mut self, folders: &[&str]) -> Result<Vec<Result<()>>> {
        let mut out: Vec<Option<Result<()>>> = Vec::with_capacity(folders.len());
        let mut cmds = Vec::new();
        let mut sent = Vec::new();
        for (i, folder) in folders.iter().enumerate() {
            match self.server_name(folder) {
                Ok(name) => {
                    let mut b = self.command("SUBSCRIBE");
                    b.sp().mailbox(&name);
                    cmds.push(b.finish());
                    sent.push(i);
                    out.push(None);
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        let answers = self.run_pipelined(&cmds)?;
        for (i, status) in sent.into_iter().zip(answers) {
            out[i] = Some(if status.status == Status::Ok {
                Ok(())
            } else {
                Err(self.command_error("SUBSCRIBE", Some(folders[i]), &status))
            });
        }
        Ok(out
            .into_iter()
            .map(|o| o.unwrap_or_else(|| Err(self.missing_answer())))
            .collect())
    }

    /// Sends `cmds` without waiting for each answer (at most [`DEPTH`] unanswered) and
    /// returns their completions in the order of `cmds`. A command with a synchronizing
    /// literal is sent alone, once everything before it is answered.
    pub(crate) fn run_pipelined(
        &mut self,
        cmds: &[Command<'_>],
    ) -> Result<Vec<StatusText<'static>>> {
        let mut answers: Vec<Option<StatusText<'static>>> = vec![None; cmds.len()];
        let mut in_flight: Vec<(usize, &str)> = Vec::new();
        for (i, cmd) in cmds.iter().enumerate() {
            if cmd.sync_points() > 0 {
                self.drain_pipelined(&mut in_flight, &mut answers)?;
                let status = match self.send(cmd, &mut |_| Ok(()))? {
                    Some(status) => status,
                    None => self.finish(&cmd.tag, &mut |_| Ok(()))?,
                };
                answers[i] = Some(status);
                continue;
            }
            self.check_usable()?;
            match self.conn.write_until_wait(cmd, 0) {
                Ok(None) => {}
                Ok(Some(_)) => {
                    return Err(self.protocol_error("pipelined command needs a continuation".into()))
                }
                Err(e) => return Err(self.write_failed(e, &cmd.tag)),
            }
            in_flight.push((i, cmd.tag.as_str()));
            if in_flight.len() >= DEPTH {
                self.drain_pipelined(&mut in_flight, &mut answers)?;
            }
        }
        self.drain_pipelined(&mut in_flight, &mut answers)?;
        answers
            .into_iter()
            .map(|a| a.ok_or_else(|| self.missing_answer()))
            .collect()
    }

    /// Flushes and reads the completions of every command in flight.
    fn drain_pipelined(
        &mut self,
        in_flight: &mut Vec<(usize, &str)>,
        answers: &mut [Option<StatusText<'static>>],
    ) -> Result<()> {
        let Some(&(_, first)) = in_flight.first() else {
            return Ok(());
        };
        if let Err(e) = self.conn.flush() {
            return Err(self.write_failed(e, first));
        }
        while !in_flight.is_empty() {
            match self.read_one(&mut |_| Ok(()))? {
                Got::Tagged { tag, status } => {
                    let Some(pos) = in_flight.iter().position(|(_, t)| *t == tag) else {
                        return Err(self.protocol_error(format!("completion of unknown tag {tag}")));
                    };
                    let (i, _) = in_flight.swap_remove(pos);
                    answers[i] = Some(status);
                }
                Got::Untagged => {}
                Got::Continuation => {
                    return Err(self.protocol_error("unexpected '+' while pipelining".into()));
                }
            }
        }
        Ok(())
    }

    fn missing_answer(&mut self) -> Error {
        self.protocol_error("a pipelined command ended without an answer".into())
    }

    /// The CREATE command for `folder`, and the special use it asks for on the wire
    /// (only when the server offers CREATE-SPECIAL-USE).
    pub(crate) fn create_command(
        &mut self,
        folder: &str,
        special_use: Option<SpecialUse>,
    ) -> Result<(Command<'static>, Option<SpecialUse>)> {
        let name = self.server_name(folder)?;
        let with_use = special_use.filter(|_| self.caps.has("CREATE-SPECIAL-USE"));
        let mut b = self.command("CREATE");
        b.sp().mailbox(&name);
        if let Some(u) = with_use {
            b.raw(b" (USE (").raw(u.attribute().as_bytes()).raw(b"))");
        }
        Ok((b.finish(), with_use))
    }

    /// What a CREATE's completion means: created, already there (`[ALREADYEXISTS]`, not
    /// an error), or refused.
    pub(crate) fn create_outcome(
        &self,
        folder: &str,
        with_use: Option<SpecialUse>,
        status: &StatusText<'_>,
    ) -> Result<CreateOutcome> {
        match status.status {
            Status::Ok => Ok(CreateOutcome {
                existed: false,
                special_use_set: with_use.is_some(),
            }),
            _ if status.code == Some(Code::AlreadyExists) => Ok(CreateOutcome {
                existed: true,
                special_use_set: false,
            }),
            _ => Err(self.command_error("CREATE", Some(folder), status)),
        }
    }
}
