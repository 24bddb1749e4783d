//! The restore journal: what an IMAP server accepted, so that a re-run after a crash,
//! a kill or Ctrl-C continues where it stopped and never appends a message twice.
//!
//! One append-only file per account, below a directory named after the hash of
//! (repository id, snapshot id, target URL): `<dir>/<hash>/<account>.journal`. Records
//! are lines, fields separated by tabs, folder names and Maildir keys in hex:
//!
//! ```text
//! # mailvault imap journal 1 repo=<id> snapshot=<id> target=<url> account=<name>
//! P <folder> <key>                      sent; the server's answer is not known yet
//! A <folder> <key> <uidvalidity> <uid>  accepted (uid 0: the server has no UIDPLUS)
//! ```
//!
//! A `P` without a later `A` is *in doubt*: the message may be on the server. The next
//! run looks for it there (Message-ID, size and date) before sending it again. An `A`
//! is trusted only while the server still has that UID under that UIDVALIDITY (the
//! restore asks it first): a message deleted since is restored again by a later run. A last
//! line cut short by a kill is ignored. Records are written with one `write(2)` per
//! batch, before the batch is sent (`P`) and after the server answered (`A`); they
//! survive a killed process. A power loss may lose the last records: run the next
//! restore with `--skip-existing`.

use crate::repo::lock;
use crate::{Error, Result};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What the journal knows of one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Sent, answer unknown: check the server before sending again.
    Pending,
    /// Accepted by the server.
    Accepted { uidvalidity: u32, uid: u32 },
}

/// The journal of one account for one (repository, snapshot, target).
pub struct AccountJournal {
    path: PathBuf,
    known: HashMap<(String, Vec<u8>), State>,
    file: Mutex<File>,
}

/// The directory of the journal files of one (repository, snapshot, target).
pub fn run_dir(dir: &Path, repo_id: &str, snapshot: &str, target: &str) -> PathBuf {
    let h = blake3::hash(format!("{repo_id}\0{snapshot}\0{target}").as_bytes());
    dir.join(&h.to_hex()[..32])
}

fn file_name(account: &str) -> String {
    // Account names are user@domain; anything else is hex-encoded to stay one component.
    let safe = !account.is_empty()
        && account.len() < 200
        && !account.starts_with('.')
        && account
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"@.-_+".contains(&b));
    if safe {
        format!("{account}.journal")
    } else {
        format!("x{}.journal", hex::encode(account))
    }
}

impl AccountJournal {
    /// Opens (creating it if needed) and reads the journal of `account` in `run_dir`.
    pub fn open(run_dir: &Path, header: &str, account: &str) -> Result<AccountJournal> {
        let path = run_dir.join(file_name(account));
        let err = |source| Error::Journal {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(run_dir).map_err(err)?;
        let mut known = HashMap::new();
        match fs::read(&path) {
            Ok(data) => parse(&data, &mut known),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(err(e)),
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(err)?;
        if file.metadata().map_err(err)?.len() == 0 {
            file.write_all(
                format!("# mailvault imap journal 1 {header} account={account}\n").as_bytes(),
            )
            .map_err(err)?;
        } else {
            // A line cut short by a kill: end it, so the next record starts on its own line.
            file.write_all(b"\n").map_err(err)?;
        }
        Ok(AccountJournal {
            path,
            known,
            file: Mutex::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What the journal knew of a message when it was opened.
    pub fn state(&self, folder: &str, key: &[u8]) -> Option<State> {
        self.known.get(&(folder.to_string(), key.to_vec())).copied()
    }

    /// Records that these messages are about to be sent.
    pub fn pending<'k>(
        &self,
        folder: &str,
        keys: impl IntoIterator<Item = &'k [u8]>,
    ) -> Result<()> {
        let f = hex::encode(folder);
        let mut buf = String::new();
        for k in keys {
            buf.push_str(&format!("P\t{f}\t{}\n", hex::encode(k)));
        }
        self.write(buf.as_bytes())
    }

    /// Records that the server accepted these messages: (key, uidvalidity, uid).
    pub fn accepted(&self, folder: &str, recs: &[(&[u8], u32, u32)]) -> Result<()> {
        if recs.is_empty() {
            return Ok(());
        }
        let f = hex::encode(folder);
        let mut buf = String::new();
        for (k, v, u) in recs {
            buf.push_str(&format!("A\t{f}\t{}\t{v}\t{u}\n", hex::encode(k)));
        }
        self.write(buf.as_bytes())
    }

    fn write(&self, data: &[u8]) -> Result<()> {
        lock(&self.file)
            .write_all(data)
            .map_err(|source| Error::Journal {
                path: self.path.clone(),
                source,
            })
    }

    /// Flushes the journal to disk (end of a run).
    pub fn sync(&self) -> Result<()> {
        lock(&self.file)
            .sync_data()
            .map_err(|source| Error::Journal {
                path: self.path.clone(),
                source,
            })
    }
}

fn parse(data: &[u8], known: &mut HashMap<(String, Vec<u8>), State>) {
    // Only complete lines count: the last one may have been cut by a kill.
    let complete = match data.iter().rposition(|&b| b == b'\n') {
        Some(i) => &data[..=i],
        None => return,
    };
    for line in complete.split(|&b| b == b'\n') {
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        let f: Vec<&str> = line.split('\t').collect();
        let folder_key = |i: usize| -> Option<(String, Vec<u8>)> {
            let folder = String::from_utf8(hex::decode(f.get(i)?).ok()?).ok()?;
            Some((folder, hex::decode(f.get(i + 1)?).ok()?))
        };
        match f.first().copied() {
            Some("P") if f.len() == 3 => {
                if let Some(k) = folder_key(1) {
                    known.entry(k).or_insert(State::Pending);
                }
            }
            Some("A") if f.len() == 5 => {
                let (Some(k), Ok(v), Ok(u)) = (folder_key(1), f[3].parse(), f[4].parse()) else {
                    continue;
                };
                known.insert(
                    k,
                    State::Accepted {
                        uidvalidity: v,
                        uid: u,
                    },
                );
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopen_and_torn_lines() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let run = run_dir(d.path(), "r", "s", "imap://h:143");
        let j =
            AccountJournal::open(&run, "t", "bob@example.org").unwrap_or_else(|e| panic!("{e}"));
        j.pending("INBOX", [&b"k1"[..], b"k2", b"k3"])
            .unwrap_or_else(|e| panic!("{e}"));
        j.accepted("INBOX", &[(b"k1", 7, 1), (b"k2", 7, 2)])
            .unwrap_or_else(|e| panic!("{e}"));
        let path = j.path().to_path_buf();
        drop(j);
        // A torn record at the end.
        let mut f = OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{e}"));
        f.write_all(b"A\t494e424f58\t6b33\t7")
            .unwrap_or_else(|e| panic!("{e}"));
        drop(f);
        let j =
            AccountJournal::open(&run, "t", "bob@example.org").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            j.state("INBOX", b"k1"),
            Some(State::Accepted {
                uidvalidity: 7,
                uid: 1
            })
        );
        assert_eq!(j.state("INBOX", b"k3"), Some(State::Pending));
        assert_eq!(j.state("Sent", b"k1"), None);
        j.accepted("INBOX", &[(b"k3", 7, 3)])
            .unwrap_or_else(|e| panic!("{e}"));
        drop(j);
        let j =
            AccountJournal::open(&run, "t", "bob@example.org").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            j.state("INBOX", b"k3"),
            Some(State::Accepted {
                uidvalidity: 7,
                uid: 3
            })
        );
        assert_eq!(file_name("a/b"), format!("x{}.journal", hex::encode("a/b")));
    }
}
