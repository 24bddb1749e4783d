//! Pipelined folder commands: many CREATEs, SUBSCRIBEs, GETACLs or GETMETADATAs written
//! back to back and answered together, one round trip for all of them instead of one
//! each, as the APPENDs of a batch are ([`super::append`]). What provisioning an account
//! costs a restore, or asking an account's ACLs and METADATA costs a backup, is then a few
//! round trips, however many folders it has.
//!
//! The server answers each command on its own (RFC 3501 §5.5): one refused does not stop
//! the others, and each gets the same outcome as when sent alone. Commands that depend
//! on each other (a folder and its parent) must not be in one call: the server may run
//! pipelined commands in any order. A command's untagged data goes to the command whose
//! mailbox it names ([`Session::per_folder`]).

use super::mailbox::{CreateOutcome, SpecialUse};
use super::session::{Got, Session};
use crate::error::{Error, Result};
use crate::proto::command::Command;
use crate::proto::mutf7;
use crate::proto::response::{Code, Status, StatusText, Untagged};
use std::collections::HashMap;

/// What a pipelined call's `claim` makes of an untagged response: the data it takes, and
/// whose it is (`Some(i)`: the `i`-th command's; `None`: the oldest unanswered one's).
pub(crate) type Claim<'c, D> = &'c mut dyn FnMut(Untagged<'_>) -> Option<(Option<usize>, D)>;
/// What [`Session::per_folder`]'s `data` takes of an untagged response: the mailbox it
/// names (as on the wire) and what it says of it.
pub(crate) type FolderData<'c, D> = &'c mut dyn FnMut(Untagged<'_>) -> Option<(Vec<u8>, D)>;
/// A folder's result in [`Session::per_folder`], from its completion and its data.
pub(crate) type Outcome<'c, D, T> =
    &'c mut dyn FnMut(&Session, &str, StatusText<'static>, Vec<D>) -> Result<T>;

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
        self.per_folder(
            folders,
            &mut |s, name| {
                let mut b = s.command("SUBSCRIBE");
                b.sp().mailbox(name);
                b.finish()
            },
            &mut |_| None::<(Vec<u8>, ())>,
            &mut |s, folder, status, _| match status.status {
                Status::Ok => Ok(()),
                _ => Err(s.command_error("SUBSCRIBE", Some(folder), &status)),
            },
        )
    }

    /// One command per folder, pipelined ([`Session::run_pipelined_with`]): `command`
    /// makes a folder's from its server name; `data` takes from an untagged response the
    /// mailbox it names (as on the wire) and what it says of it; each folder's result is
    /// `outcome` of its completion and the data of its mailbox, in the order of
    /// `folders` (a folder whose name the server cannot have gets that error, unsent).
    /// Data naming a mailbox no command of the call named (another spelling of it) goes to
    /// the oldest command unanswered, as a server that answers in order means it.
    /// The outer error means the connection failed (the session is then broken).
    pub(crate) fn per_folder<D, T>(
        &mut self,
        folders: &[&str],
        command: &mut dyn FnMut(&mut Session, &str) -> Command<'static>,
        data: FolderData<'_, D>,
        outcome: Outcome<'_, D, T>,
    ) -> Result<Vec<Result<T>>> {
        let mut out: Vec<Option<Result<T>>> = Vec::with_capacity(folders.len());
        let mut cmds = Vec::new();
        // (index in `folders`) of each command, and each command by its mailbox.
        let mut sent = Vec::new();
        let mut by_mailbox: HashMap<Vec<u8>, usize> = HashMap::new();
        for (i, folder) in folders.iter().enumerate() {
            match self.server_name(folder) {
                Ok(name) => {
                    by_mailbox.insert(wire_key(mutf7::encode(&name).into_bytes()), cmds.len());
                    cmds.push(command(self, &name));
                    sent.push(i);
                    out.push(None);
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        let answers = self.run_pipelined_with(&cmds, &mut |u| {
            let (mailbox, d) = data(u)?;
            Some((by_mailbox.get(&wire_key(mailbox)).copied(), d))
        })?;
        for (i, (status, got)) in sent.into_iter().zip(answers) {
            out[i] = Some(outcome(self, folders[i], status, got));
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
        let answers = self.run_pipelined_with(cmds, &mut |_| None::<(Option<usize>, ())>)?;
        Ok(answers.into_iter().map(|(status, _)| status).collect())
    }

    /// [`Session::run_pipelined`], with each command's untagged data: `claim` takes what
    /// it wants of an untagged response and says whose it is, `Some(i)` for `cmds[i]`
    /// (told by the response, e.g. the mailbox it names), `None` for the oldest command
    /// not yet answered (the one a server that runs pipelined commands one after the
    /// other, as Dovecot and Cyrus do, is answering: a command's data comes before its
    /// completion). Untagged responses `claim`
    /// does not take are dropped.
    pub(crate) fn run_pipelined_with<D>(
        &mut self,
        cmds: &[Command<'_>],
        claim: Claim<'_, D>,
    ) -> Result<Vec<(StatusText<'static>, Vec<D>)>> {
        let mut answers: Vec<Option<StatusText<'static>>> = vec![None; cmds.len()];
        let mut data: Vec<Vec<D>> = cmds.iter().map(|_| Vec::new()).collect();
        // Oldest first.
        let mut in_flight: Vec<(usize, &str)> = Vec::new();
        for (i, cmd) in cmds.iter().enumerate() {
            if cmd.sync_points() > 0 {
                self.drain_pipelined(&mut in_flight, &mut answers, &mut data, claim)?;
                let mut keep = |u: Untagged<'_>| {
                    keep_data(&mut data, i, claim(u));
                    Ok(())
                };
                let status = match self.send(cmd, &mut keep)? {
                    Some(status) => status,
                    None => self.finish(&cmd.tag, &mut keep)?,
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
                self.drain_pipelined(&mut in_flight, &mut answers, &mut data, claim)?;
            }
        }
        self.drain_pipelined(&mut in_flight, &mut answers, &mut data, claim)?;
        (answers.into_iter().zip(data))
            .map(|(a, d)| Ok((a.ok_or_else(|| self.missing_answer())?, d)))
            .collect()
    }

    /// Flushes and reads the completions of every command in flight (oldest first), and
    /// the data `claim` takes meanwhile.
    fn drain_pipelined<D>(
        &mut self,
        in_flight: &mut Vec<(usize, &str)>,
        answers: &mut [Option<StatusText<'static>>],
        data: &mut [Vec<D>],
        claim: Claim<'_, D>,
    ) -> Result<()> {
        let Some(&(_, first)) = in_flight.first() else {
            return Ok(());
        };
        if let Err(e) = self.conn.flush() {
            return Err(self.write_failed(e, first));
        }
        while let Some(&(oldest, _)) = in_flight.first() {
            let got = self.read_one(&mut |u| {
                keep_data(data, oldest, claim(u));
                Ok(())
            })?;
            match got {
                Got::Tagged { tag, status } => {
                    let Some(pos) = in_flight.iter().position(|(_, t)| *t == tag) else {
                        return Err(self.protocol_error(format!("completion of unknown tag {tag}")));
                    };
                    let (i, _) = in_flight.remove(pos);
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

    pub(crate) fn missing_answer(&mut self) -> Error {
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

/// Files what `claim` took of an untagged response (`got`) under its command: the one it
/// named, else `oldest`.
fn keep_data<D>(data: &mut [Vec<D>], oldest: usize, got: Option<(Option<usize>, D)>) {
    if let Some((owner, d)) = got {
        let at = owner.filter(|&i| i < data.len()).unwrap_or(oldest);
        data[at].push(d);
    }
}

/// A mailbox's name as on the wire, `INBOX` in any case as `INBOX` (its one spelling).
fn wire_key(mut name: Vec<u8>) -> Vec<u8> {
    if name.eq_ignore_ascii_case(b"INBOX") {
        name = b"INBOX".to_vec();
    }
    name
}
