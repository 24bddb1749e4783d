//! Folders: LIST/LSUB, CREATE (with special-use), DELETE, SUBSCRIBE,
//! SELECT/EXAMINE (with CONDSTORE), STATUS; and the mapping between
//! mailvault folder paths (`Archive/2023`, Unicode, `/`-separated) and the
//! server's names (its own delimiter, modified UTF-7 on the wire).

use super::session::Session;
use crate::error::{Error, Result};
use crate::proto::capability::Capabilities;
use crate::proto::mutf7;
use crate::proto::response::{Code, ListItem, Untagged};
use std::collections::HashMap;

/// Special-use attributes (RFC 6154).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecialUse {
    /// `\All`
    All,
    /// `\Archive`
    Archive,
    /// `\Drafts`
    Drafts,
    /// `\Flagged`
    Flagged,
    /// `\Junk`
    Junk,
    /// `\Sent`
    Sent,
    /// `\Trash`
    Trash,
}

impl SpecialUse {
    const ALL: [SpecialUse; 7] = [
        SpecialUse::All,
        SpecialUse::Archive,
        SpecialUse::Drafts,
        SpecialUse::Flagged,
        SpecialUse::Junk,
        SpecialUse::Sent,
        SpecialUse::Trash,
    ];

    /// The attribute as on the wire (`\Sent`).
    pub fn attribute(self) -> &'static str {
        match self {
            SpecialUse::All => "\\All",
            SpecialUse::Archive => "\\Archive",
            SpecialUse::Drafts => "\\Drafts",
            SpecialUse::Flagged => "\\Flagged",
            SpecialUse::Junk => "\\Junk",
            SpecialUse::Sent => "\\Sent",
            SpecialUse::Trash => "\\Trash",
        }
    }

    /// Parses an attribute (case-insensitive, with the backslash).
    pub fn from_attribute(attr: &str) -> Option<SpecialUse> {
        SpecialUse::ALL
            .into_iter()
            .find(|s| s.attribute().eq_ignore_ascii_case(attr))
    }
}

/// A folder as listed by the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folder {
    /// mailvault path: decoded, levels joined with `/`.
    pub name: String,
    /// The name exactly as the server sent it (modified UTF-7).
    pub wire_name: Vec<u8>,
    /// The server's hierarchy delimiter.
    pub delimiter: Option<char>,
    /// All attributes as sent.
    pub attributes: Vec<String>,
    /// The special use, if any.
    pub special_use: Option<SpecialUse>,
    /// Whether the user is subscribed.
    pub subscribed: bool,
    /// Whether it can hold messages (not `\Noselect` / `\NonExistent`).
    pub selectable: bool,
    /// Its STATUS as the listing gave it ([`Session::list_with_status`], LIST-STATUS):
    /// `None` when not asked, or when the server sent none for it (a `\Noselect`
    /// folder, or one whose status the server could not tell, RFC 5819).
    pub status: Option<MailboxStatus>,
}

/// What SELECT or EXAMINE reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MailboxInfo {
    /// The folder (mailvault path).
    pub folder: String,
    /// UIDVALIDITY: if it changed, every UID known before is void.
    pub uidvalidity: u32,
    /// UIDNEXT: UIDs at or above it are new.
    pub uidnext: Option<u32>,
    /// HIGHESTMODSEQ (CONDSTORE); `None` without CONDSTORE or with NOMODSEQ.
    pub highestmodseq: Option<u64>,
    /// Number of messages.
    pub exists: u32,
    /// `\Recent` count.
    pub recent: u32,
    /// FLAGS: flags defined in the mailbox.
    pub flags: Vec<String>,
    /// PERMANENTFLAGS (`\*` means new keywords may be created).
    pub permanent_flags: Vec<String>,
    /// Opened read-only (EXAMINE, or the server said READ-ONLY).
    pub read_only: bool,
}

/// STATUS of a folder (without selecting it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MailboxStatus {
    /// MESSAGES
    pub messages: Option<u32>,
    /// UIDNEXT
    pub uidnext: Option<u32>,
    /// UIDVALIDITY
    pub uidvalidity: Option<u32>,
    /// UNSEEN
    pub unseen: Option<u32>,
    /// HIGHESTMODSEQ (CONDSTORE)
    pub highestmodseq: Option<u64>,
}

impl MailboxStatus {
    /// The status a `* STATUS` reply's items tell (names upper-cased, as parsed); items
    /// it does not know are left out.
    fn from_items(items: Vec<(String, u64)>) -> MailboxStatus {
        let mut st = MailboxStatus::default();
        for (k, v) in items {
            let v32 = u32::try_from(v).ok();
            match k.as_str() {
                "MESSAGES" => st.messages = v32,
                "UIDNEXT" => st.uidnext = v32,
                "UIDVALIDITY" => st.uidvalidity = v32,
                "UNSEEN" => st.unseen = v32,
                "HIGHESTMODSEQ" => st.highestmodseq = Some(v),
                _ => {}
            }
        }
        st
    }
}

/// What CREATE did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateOutcome {
    /// The folder existed already (`[ALREADYEXISTS]`); not an error.
    pub existed: bool,
    /// The special use was set (CREATE-SPECIAL-USE offered and accepted).
    pub special_use_set: bool,
}

impl Session {
    /// The server's hierarchy delimiter (`LIST "" ""`), asked once.
    pub fn delimiter(&mut self) -> Result<Option<char>> {
        if let Some(d) = self.delimiter {
            return Ok(d);
        }
        let mut b = self.command("LIST");
        b.sp().astring(b"").sp().astring(b"");
        let cmd = b.finish();
        let mut delim = None;
        self.run_ok(cmd, "LIST", None, &mut |u| {
            if let Untagged::List(l) = u {
                delim = l.delimiter;
            }
            Ok(())
        })?;
        self.delimiter = Some(delim);
        Ok(delim)
    }

    /// The server-side name (Unicode, server delimiter) of a mailvault path.
    pub fn server_name(&mut self, folder: &str) -> Result<String> {
        let delim = self.delimiter()?;
        let bad = |reason: String| Error::InvalidFolderName {
            account: self.account.clone(),
            folder: folder.to_string(),
            reason,
        };
        let levels: Vec<&str> = folder.split('/').collect();
        if levels.iter().any(|l| l.is_empty()) {
            return Err(bad("empty folder name or level".into()));
        }
        match delim {
            None if levels.len() > 1 => Err(bad("the server has no folder hierarchy".into())),
            None => Ok(folder.to_string()),
            Some('/') => Ok(folder.to_string()),
            Some(d) => {
                if levels.iter().any(|l| l.contains(d)) {
                    return Err(bad(format!(
                        "a level contains {d:?}, the server's hierarchy delimiter"
                    )));
                }
                Ok(levels.join(&d.to_string()))
            }
        }
    }

    /// The hierarchy delimiter learnt elsewhere (another session of the same account on
    /// the same server, [`Session::known_delimiter`]): this session does not ask again.
    pub fn assume_delimiter(&mut self, delimiter: Option<char>) {
        self.delimiter = Some(delimiter);
    }

    /// The hierarchy delimiter, when this session knows it already.
    pub fn known_delimiter(&self) -> Option<Option<char>> {
        self.delimiter
    }

    /// LIST "" "*" with subscription and special-use information (RETURN
    /// (SUBSCRIBED SPECIAL-USE) when LIST-EXTENDED is offered, else LIST
    /// plus LSUB). A session that does not know the hierarchy delimiter yet takes
    /// INBOX's from the listing instead of asking (`LIST "" ""`): one round trip.
    pub fn list(&mut self) -> Result<Vec<Folder>> {
        self.list_returning(false)
    }

    /// [`Session::list`], and where the server offers LIST-STATUS (RFC 5819) each
    /// folder's STATUS in the same round trip ([`Folder::status`]: MESSAGES, UIDNEXT,
    /// UIDVALIDITY, and HIGHESTMODSEQ with CONDSTORE), instead of a STATUS command per
    /// folder. Without LIST-STATUS no folder has a status: ask [`Session::status`].
    pub fn list_with_status(&mut self) -> Result<Vec<Folder>> {
        self.list_returning(true)
    }

    fn list_returning(&mut self, with_status: bool) -> Result<Vec<Folder>> {
        let extended = self.caps.has("LIST-EXTENDED");
        let mut b = self.command("LIST");
        b.sp().astring(b"").sp().astring(b"*");
        let returns = list_return(&self.caps, with_status);
        if let Some(r) = &returns {
            b.raw(r.as_bytes());
        }
        let cmd = b.finish();
        let mut items = Vec::new();
        // By wire name: a folder's STATUS may come before or after its LIST line.
        let mut statuses: HashMap<Vec<u8>, MailboxStatus> = HashMap::new();
        self.run_ok(cmd, "LIST", None, &mut |u| {
            match u {
                Untagged::List(l) => items.push(l),
                Untagged::MailboxStatus { mailbox, items } => {
                    statuses.insert(inbox_folded(mailbox), MailboxStatus::from_items(items));
                }
                _ => {}
            }
            Ok(())
        })?;
        if self.delimiter.is_none() {
            let inbox = items
                .iter()
                .find(|l| l.name.eq_ignore_ascii_case(b"INBOX") && l.delimiter.is_some());
            if let Some(l) = inbox {
                self.delimiter = Some(l.delimiter);
            }
        }
        let delim = self.delimiter()?;
        let mut folders: Vec<Folder> = items
            .into_iter()
            .map(|l| folder_from_list(l, delim))
            .collect();
        for f in &mut folders {
            f.status = statuses.remove(&inbox_folded(f.wire_name.clone()));
        }
        if !extended {
            let subscribed = self.lsub()?;
            for f in &mut folders {
                f.subscribed = subscribed.iter().any(|s| s.wire_name == f.wire_name);
            }
        }
        Ok(folders)
    }

    /// NAMESPACE (RFC 2342), when the server offers it; else every folder is personal.
    pub fn namespaces(&mut self) -> Result<Namespaces> {
        if !self.caps.has("NAMESPACE") {
            return Ok(Namespaces::default());
        }
        let cmd = self.command("NAMESPACE").finish();
        let mut out = Namespaces::default();
        self.run_ok(cmd, "NAMESPACE", None, &mut |u| {
            if let Untagged::Namespace {
                personal,
                other,
                shared,
            } = u
            {
                let paths = |v: Vec<(Vec<u8>, Option<char>)>| -> Vec<String> {
                    (v.into_iter())
                        .map(|(p, d)| folder_path(&p, d).trim_end_matches('/').to_string())
                        .collect()
                };
                out = Namespaces {
                    personal: paths(personal),
                    other: paths(other),
                    shared: paths(shared),
                };
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// LSUB "" "*": the subscribed folders.
    pub fn lsub(&mut self) -> Result<Vec<Folder>> {
        let delim = self.delimiter()?;
        let mut b = self.command("LSUB");
        b.sp().astring(b"").sp().astring(b"*");
        let cmd = b.finish();
        let mut items = Vec::new();
        self.run_ok(cmd, "LSUB", None, &mut |u| {
            if let Untagged::Lsub(l) = u {
                items.push(l);
            }
            Ok(())
        })?;
        Ok(items
            .into_iter()
            .map(|l| {
                let mut f = folder_from_list(l, delim);
                f.subscribed = true;
                f
            })
            .collect())
    }

    /// CREATE, with `(USE (\Sent))` when the server offers
    /// CREATE-SPECIAL-USE. An existing folder is not an error. (Many at once, in one
    /// round trip: [`Session::create_many`].)
    pub fn create(
        &mut self,
        folder: &str,
        special_use: Option<SpecialUse>,
    ) -> Result<CreateOutcome> {
        let (cmd, with_use) = self.create_command(folder, special_use)?;
        let status = self.run(cmd, &mut |_| Ok(()))?;
        self.create_outcome(folder, with_use, &status)
    }

    /// DELETE.
    pub fn delete(&mut self, folder: &str) -> Result<()> {
        let name = self.server_name(folder)?;
        let mut b = self.command("DELETE");
        b.sp().mailbox(&name);
        let cmd = b.finish();
        self.run_ok(cmd, "DELETE", Some(folder), &mut |_| Ok(()))?;
        if self.selected.as_deref() == Some(name.as_str()) {
            self.selected = None;
        }
        Ok(())
    }

    /// SUBSCRIBE.
    pub fn subscribe(&mut self, folder: &str) -> Result<()> {
        self.simple_folder_command("SUBSCRIBE", folder)
    }

    /// UNSUBSCRIBE.
    pub fn unsubscribe(&mut self, folder: &str) -> Result<()> {
        self.simple_folder_command("UNSUBSCRIBE", folder)
    }

    fn simple_folder_command(&mut self, command: &'static str, folder: &str) -> Result<()> {
        let name = self.server_name(folder)?;
        let mut b = self.command(command);
        b.sp().mailbox(&name);
        let cmd = b.finish();
        self.run_ok(cmd, command, Some(folder), &mut |_| Ok(()))?;
        Ok(())
    }

    /// SELECT (read-write), with CONDSTORE when offered so that
    /// HIGHESTMODSEQ is reported.
    pub fn select(&mut self, folder: &str) -> Result<MailboxInfo> {
        self.open(folder, false)
    }

    /// EXAMINE (read-only: fetching does not set `\Seen`, nothing changes).
    pub fn examine(&mut self, folder: &str) -> Result<MailboxInfo> {
        self.open(folder, true)
    }

    fn open(&mut self, folder: &str, read_only: bool) -> Result<MailboxInfo> {
        let name = self.server_name(folder)?;
        // ENABLE is only valid before a folder is selected; with QRESYNC on,
        // fetch_changes also learns about expunged UIDs.
        if self.caps.has("QRESYNC") && !self.qresync_enabled && self.selected.is_none() {
            let enabled = self.enable(&["QRESYNC"])?;
            self.qresync_enabled = enabled.iter().any(|e| e.eq_ignore_ascii_case("QRESYNC"));
        }
        let command = if read_only { "EXAMINE" } else { "SELECT" };
        let mut b = self.command(command);
        b.sp().mailbox(&name);
        if self.caps.has("CONDSTORE") {
            b.raw(b" (CONDSTORE)");
        }
        let cmd = b.finish();
        let mut info = MailboxInfo {
            folder: folder.to_string(),
            read_only,
            ..MailboxInfo::default()
        };
        let mut uidvalidity = None;
        self.selected = None;
        let status = self.run_ok(cmd, command, Some(folder), &mut |u| {
            match u {
                Untagged::Flags(f) => info.flags = f,
                Untagged::Exists(n) => info.exists = n,
                Untagged::Recent(n) => info.recent = n,
                Untagged::Status(s) => match s.code {
                    Some(Code::UidValidity(v)) => uidvalidity = Some(v),
                    Some(Code::UidNext(v)) => info.uidnext = Some(v),
                    Some(Code::HighestModSeq(v)) => info.highestmodseq = Some(v),
                    Some(Code::NoModSeq) => info.highestmodseq = None,
                    Some(Code::PermanentFlags(f)) => info.permanent_flags = f,
                    _ => {}
                },
                _ => {}
            }
            Ok(())
        })?;
        if status.code == Some(Code::ReadOnly) {
            info.read_only = true;
        }
        let Some(v) = uidvalidity else {
            return Err(self.protocol_error(format!("{command} {folder:?} without UIDVALIDITY")));
        };
        info.uidvalidity = v;
        self.selected = Some(name);
        Ok(info)
    }

    /// UNSELECT (or CLOSE when UNSELECT is missing, which on a read-only
    /// mailbox expunges nothing).
    pub fn unselect(&mut self) -> Result<()> {
        if self.selected.is_none() {
            return Ok(());
        }
        let name = if self.caps.has("UNSELECT") {
            "UNSELECT"
        } else {
            "CLOSE"
        };
        let cmd = self.command(name).finish();
        self.run_ok(cmd, "UNSELECT", None, &mut |_| Ok(()))?;
        self.selected = None;
        Ok(())
    }

    /// STATUS (MESSAGES UIDNEXT UIDVALIDITY UNSEEN, and HIGHESTMODSEQ with CONDSTORE): cheap
    /// change detection without selecting.
    pub fn status(&mut self, folder: &str) -> Result<MailboxStatus> {
        let name = self.server_name(folder)?;
        let mut b = self.command("STATUS");
        b.sp()
            .mailbox(&name)
            .raw(b" (MESSAGES UIDNEXT UIDVALIDITY UNSEEN");
        if self.caps.has("CONDSTORE") {
            b.raw(b" HIGHESTMODSEQ");
        }
        b.raw(b")");
        let cmd = b.finish();
        let mut st = MailboxStatus::default();
        self.run_ok(cmd, "STATUS", Some(folder), &mut |u| {
            if let Untagged::MailboxStatus { items, .. } = u {
                st = MailboxStatus::from_items(items);
            }
            Ok(())
        })?;
        Ok(st)
    }
}

/// The server's namespaces (RFC 2342) as mailvault paths (decoded, `/`-separated, no
/// trailing delimiter): whose folders are whose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Namespaces {
    /// The user's own folders (`""` on Dovecot, `INBOX` on Cyrus).
    pub personal: Vec<String>,
    /// Other users' folders shared with the user (`shared`, `user`).
    pub other: Vec<String>,
    /// Public folders.
    pub shared: Vec<String>,
}

impl Namespaces {
    /// Whether `folder` (a mailvault path) is the user's own: the namespace with the
    /// longest prefix that holds it is a personal one (Cyrus' public namespace has the
    /// empty prefix, its personal one `INBOX`). A server without NAMESPACE has only
    /// personal folders; so has a folder in no namespace.
    pub fn is_personal(&self, folder: &str) -> bool {
        let holds = |p: &String| {
            p.is_empty()
                || folder == p
                || (folder.len() > p.len()
                    && folder.starts_with(p.as_str())
                    && folder.as_bytes()[p.len()] == b'/')
        };
        let longest = |v: &[String]| v.iter().filter(|p| holds(p)).map(|p| p.len() as i64).max();
        let mine = longest(&self.personal).unwrap_or(-1);
        let theirs = longest(&self.other)
            .max(longest(&self.shared))
            .unwrap_or(-1);
        mine >= theirs
    }
}

/// mailvault path of a server name.
pub fn folder_path(wire_name: &[u8], delimiter: Option<char>) -> String {
    let decoded = mutf7::decode(wire_name)
        .unwrap_or_else(|_| String::from_utf8_lossy(wire_name).into_owned());
    match delimiter {
        Some(d) if d != '/' => decoded.split(d).collect::<Vec<_>>().join("/"),
        _ => decoded,
    }
}

/// The RETURN options of `LIST "" "*"` on a server with `caps` (none without
/// LIST-EXTENDED): SUBSCRIBED, SPECIAL-USE where offered, and with `with_status` and
/// LIST-STATUS offered the STATUS items [`Session::list_with_status`] asks
/// (HIGHESTMODSEQ only with CONDSTORE).
fn list_return(caps: &Capabilities, with_status: bool) -> Option<String> {
    if !caps.has("LIST-EXTENDED") {
        return None;
    }
    let mut r = String::from(" RETURN (SUBSCRIBED");
    if caps.has("SPECIAL-USE") {
        r.push_str(" SPECIAL-USE");
    }
    if with_status && caps.has("LIST-STATUS") {
        r.push_str(" STATUS (MESSAGES UIDNEXT UIDVALIDITY");
        if caps.has("CONDSTORE") {
            r.push_str(" HIGHESTMODSEQ");
        }
        r.push(')');
    }
    r.push(')');
    Some(r)
}

/// A wire name with INBOX (case-insensitive: RFC 3501 5.1) spelled `INBOX`, so that a
/// STATUS reply finds its LIST line however either spells it.
fn inbox_folded(wire_name: Vec<u8>) -> Vec<u8> {
    match wire_name.eq_ignore_ascii_case(b"INBOX") {
        true => b"INBOX".to_vec(),
        false => wire_name,
    }
}

fn folder_from_list(l: ListItem, delim: Option<char>) -> Folder {
    let special_use = l
        .attributes
        .iter()
        .find_map(|a| SpecialUse::from_attribute(a));
    let subscribed = l.has("\\Subscribed");
    let selectable = !l.has("\\Noselect") && !l.has("\\NonExistent");
    let delimiter = l.delimiter.or(delim);
    Folder {
        name: folder_path(&l.name, delimiter),
        wire_name: l.name,
        delimiter,
        attributes: l.attributes,
        special_use,
        subscribed,
        selectable,
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dovecot's namespaces (personal `""`, others' `shared/`) and Cyrus' (personal
    /// `INBOX.`, others' `user.`, public `""`).
    #[test]
    fn whose_folders() {
        let dovecot = Namespaces {
            personal: vec!["".into()],
            other: vec!["shared".into()],
            shared: vec![],
        };
        assert!(dovecot.is_personal("INBOX") && dovecot.is_personal("Team/Plans"));
        assert!(dovecot.is_personal("sharedfolder"));
        assert!(!dovecot.is_personal("shared/alice@example.org/Team"));
        assert!(!dovecot.is_personal("shared"));
        let cyrus = Namespaces {
            personal: vec!["INBOX".into()],
            other: vec!["user".into()],
            shared: vec!["".into()],
        };
        assert!(cyrus.is_personal("INBOX") && cyrus.is_personal("INBOX/Sent"));
        assert!(!cyrus.is_personal("user/alice/Team") && !cyrus.is_personal("Public/News"));
        assert!(Namespaces::default().is_personal("anything"));
    }

    #[test]
    fn list_return_options() {
        let caps = |c: &[&str]| Capabilities::new(c);
        let full = caps(&[
            "IMAP4rev1",
            "LIST-EXTENDED",
            "LIST-STATUS",
            "SPECIAL-USE",
            "CONDSTORE",
        ]);
        assert_eq!(
            list_return(&full, true).as_deref(),
            Some(" RETURN (SUBSCRIBED SPECIAL-USE STATUS (MESSAGES UIDNEXT UIDVALIDITY HIGHESTMODSEQ))")
        );
        assert_eq!(
            list_return(&full, false).as_deref(),
            Some(" RETURN (SUBSCRIBED SPECIAL-USE)")
        );
        let no_condstore = caps(&["LIST-EXTENDED", "LIST-STATUS"]);
        assert_eq!(
            list_return(&no_condstore, true).as_deref(),
            Some(" RETURN (SUBSCRIBED STATUS (MESSAGES UIDNEXT UIDVALIDITY))")
        );
        let no_list_status = caps(&["LIST-EXTENDED", "CONDSTORE"]);
        assert_eq!(
            list_return(&no_list_status, true).as_deref(),
            Some(" RETURN (SUBSCRIBED)")
        );
        // LIST-STATUS is an extension of LIST-EXTENDED's RETURN: nothing without it.
        assert_eq!(
            list_return(&caps(&["LIST-STATUS", "CONDSTORE"]), true),
            None
        );
    }

    #[test]
    fn status_items() {
        let st = MailboxStatus::from_items(vec![
            ("MESSAGES".into(), 231),
            ("UIDNEXT".into(), 44292),
            ("X-SIZE".into(), 9),
            ("HIGHESTMODSEQ".into(), 7_011_231_777),
            ("UIDVALIDITY".into(), u64::from(u32::MAX) + 1),
        ]);
        let want = MailboxStatus {
            messages: Some(231),
            uidnext: Some(44292),
            uidvalidity: None,
            unseen: None,
            highestmodseq: Some(7_011_231_777),
        };
        assert_eq!(st, want);
        assert_eq!(inbox_folded(b"inbox".to_vec()), b"INBOX");
        assert_eq!(inbox_folded(b"INBOX/x".to_vec()), b"INBOX/x");
    }

    #[test]
    fn paths() {
        assert_eq!(
            folder_path(b"Archiv.Gesch&AOQ-ft", Some('.')),
            "Archiv/Gesch\u{e4}ft"
        );
        assert_eq!(folder_path(b"INBOX/Sub", Some('/')), "INBOX/Sub");
        assert_eq!(folder_path(b"flat", None), "flat");
        assert_eq!(SpecialUse::from_attribute("\\sent"), Some(SpecialUse::Sent));
        assert_eq!(SpecialUse::from_attribute("\\HasChildren"), None);
    }
}
