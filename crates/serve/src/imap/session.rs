//! One IMAP session's state and its answers to commands, blocking (the connection runs
//! it on tokio's blocking threads): not logged in, logged in to one account's
//! [`View`], or with one of its mailboxes selected (always read-only).

use super::condstore;
use super::fetch;
use super::listext::{self, ListCommand};
use super::login::{self, Login};
use super::search;
use super::view::{Folder, View, ViewBox, DELIMITER};
use crate::state::AppState;
use imap_codec::imap_types::command::{Command, CommandBody, FetchModifier, SelectParameter};
use imap_codec::imap_types::core::{IString, NString, QuotedChar, Tag, Vec1};
use imap_codec::imap_types::extensions::namespace::Namespace;
use imap_codec::imap_types::fetch::{MacroOrMessageDataItemNames, MessageDataItemName};
use imap_codec::imap_types::flag::{Flag, FlagPerm};
use imap_codec::imap_types::mailbox::Mailbox;
use imap_codec::imap_types::response::{Capability, Code, Data, Status};
use imap_codec::imap_types::search::SearchKey;
use imap_codec::imap_types::status::{StatusDataItem, StatusDataItemName};
use mailvault_imap::proto::mutf7;
use std::net::IpAddr;
use std::sync::Arc;

/// The mailboxes one LIST-STATUS command opens at most (RFC 5819): each is opened as a
/// STATUS command opens it, and `LIST "" "*"` lists every folder of every snapshot (a
/// year of nightly snapshots of 30 folders: 11,000 folders read for one command). Those
/// outside `Snapshots/` get their STATUS first (the latest view's folders, `Deleted`),
/// then the snapshots' in the listing's order ([`status_given`]); a client asks STATUS
/// for any other.
pub const LIST_STATUS_MAX: usize = 256;

/// Which of `listed` get the STATUS they ask for: at most [`LIST_STATUS_MAX`], those
/// outside `Snapshots/` first.
fn status_given(listed: &[listext::Listed]) -> Vec<bool> {
    let snapshot = |l: &listext::Listed| {
        (l.b.name.strip_prefix(super::view::SNAPSHOTS)).is_some_and(|r| r.starts_with('/'))
    };
    let mut given = vec![false; listed.len()];
    let wanted = |later: bool| {
        (listed.iter().enumerate()).filter(move |(_, l)| l.status && snapshot(l) == later)
    };
    for (i, _) in wanted(false).chain(wanted(true)).take(LIST_STATUS_MAX) {
        given[i] = true;
    }
    given
}

/// An untagged answer.
pub enum Out {
    Data(Data<'static>),
    Status(Status<'static>),
    /// A whole response line imap-codec has no type for (`* ESEARCH`).
    Raw(Vec<u8>),
}

/// What a command got: untagged answers, then the tagged one.
pub struct Answer {
    pub untagged: Vec<Out>,
    pub done: Status<'static>,
    /// The session ends after it (LOGOUT).
    pub logout: bool,
    /// A login failed: answered after a delay.
    pub failed_login: bool,
    /// A FETCH answered in parts: the untagged answers go out, then
    /// [`Session::fetch_part`] makes the next part; `done` is sent after the last.
    pub more: Option<Box<fetch::Pending>>,
}

/// A status line; a text that is not valid IMAP text (it never is: all are ours) becomes
/// a plain one rather than a panic.
pub fn status(
    kind: Kind,
    tag: Option<Tag<'static>>,
    code: Option<Code<'static>>,
    text: String,
) -> Status<'static> {
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let made = match kind {
        Kind::Ok => Status::ok(tag.clone(), code, clean),
        Kind::No => Status::no(tag.clone(), code, clean),
        Kind::Bad => Status::bad(tag.clone(), code, clean),
    };
    made.or_else(|_| Status::no(tag, None, "failed"))
        .unwrap_or_else(|_| bye())
}

/// `* BYE`.
pub fn bye() -> Status<'static> {
    #[allow(clippy::unwrap_used)] // A fixed, valid text.
    Status::bye(None, "logging out").unwrap()
}

#[derive(Clone, Copy)]
pub enum Kind {
    Ok,
    No,
    Bad,
}

/// How a connection is protected: what it announces and whether it takes logins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Security {
    /// The connection is over TLS (`--imaps`, or after STARTTLS).
    pub tls: bool,
    /// STARTTLS is offered (the plain listener, with a certificate).
    pub starttls: bool,
    /// Logins are taken in plain text (a loopback listener, or `--insecure-listen`).
    pub plain_login: bool,
}

impl Security {
    /// Whether LOGIN and AUTHENTICATE are taken now (else `LOGINDISABLED`).
    pub fn login_allowed(self) -> bool {
        self.tls || self.plain_login
    }

    /// Whether STARTTLS is taken now.
    pub fn starttls_now(self) -> bool {
        self.starttls && !self.tls
    }
}

/// The capabilities announced on a connection protected as `sec` is: STARTTLS before
/// TLS when offered, and LOGINDISABLED instead of AUTH=PLAIN while logins are not
/// taken (RFC 3501 6.2.3, 7.2.1).
pub fn capabilities(sec: Security) -> Vec1<Capability<'static>> {
    use imap_codec::imap_types::auth::AuthMechanism;
    // RFC 7888's LITERAL-: a client may send a literal of up to 4096 bytes without
    // waiting for the server's go-ahead (`{12+}`); the view takes up to 64 KiB so, and a
    // longer one is read, dropped and answered BAD.
    let mut caps = vec![Capability::Imap4Rev1, Capability::LiteralMinus];
    if sec.starttls_now() {
        caps.push(Capability::StartTls);
    }
    match sec.login_allowed() {
        true => caps.extend([Capability::Auth(AuthMechanism::Plain), Capability::SaslIr]),
        false => caps.push(Capability::LoginDisabled),
    }
    caps.extend([
        Capability::Id,
        Capability::Namespace,
        Capability::Unselect,
        Capability::Idle,
        Capability::Enable,
        // RFC 6154 and RFC 3348: LIST gives special-use and \HasChildren attributes (always,
        // as Dovecot's plain LIST does); LIST takes the SPECIAL-USE options.
        other_capability("SPECIAL-USE"),
        other_capability("CHILDREN"),
        // RFC 5258 and RFC 5819: LIST's selection and RETURN options, STATUS included
        // (`listext.rs`).
        other_capability("LIST-EXTENDED"),
        other_capability("LIST-STATUS"),
        // RFC 4731: SEARCH RETURN (MIN MAX COUNT ALL), answered by `* ESEARCH`.
        other_capability("ESEARCH"),
        // RFC 7162, as `condstore.rs` says.
        Capability::CondStore,
    ]);
    Vec1::unvalidated(caps)
}

/// The answer to a login tried before TLS where logins need it (RFC 5530's
/// PRIVACYREQUIRED).
pub fn login_needs_tls(tag: Tag<'static>) -> Status<'static> {
    let code = Code::Other(imap_codec::imap_types::response::CodeOther::unvalidated(
        &b"PRIVACYREQUIRED"[..],
    ));
    let text = "log in after STARTTLS: this connection is not encrypted";
    status(Kind::No, Some(tag), Some(code), text.into())
}

fn other_capability(name: &'static str) -> Capability<'static> {
    match imap_codec::imap_types::core::Atom::try_from(name) {
        Ok(a) => Capability::from(a),
        Err(_) => Capability::Imap4Rev1,
    }
}

/// A selected mailbox.
struct Selected {
    folder: Arc<Folder>,
    /// Where its messages are (`None`: never, a selected mailbox has a place).
    place: Option<super::view::Place>,
}

pub struct Session {
    st: AppState,
    ip: IpAddr,
    /// How the connection is protected (changes once, at STARTTLS).
    pub security: Security,
    view: Option<Arc<View>>,
    /// The repository the view was built on: rebuilt when it is opened again.
    /// Weak: a session must not keep the repository open (and its read lock held) while
    /// it idles; the server closes it when no request comes (see `state`).
    built_on: std::sync::Weak<crate::state::Live>,
    selected: Option<Selected>,
    /// Logged in as an admin (`ACCOUNT*admin`), not as the mail user: what the audit log
    /// names.
    user_is_admin: bool,
}

/// The text of every refused write.
const READ_ONLY: &str = "the IMAP view of the backups is read-only: nothing can be stored, \
    appended, expunged, copied, moved, created, deleted, renamed or subscribed";

impl Session {
    pub fn state(&self) -> &AppState {
        &self.st
    }

    pub fn new(st: AppState, ip: IpAddr, security: Security) -> Session {
        Session {
            st,
            ip,
            security,
            view: None,
            built_on: std::sync::Weak::new(),
            selected: None,
            user_is_admin: false,
        }
    }

    pub fn logged_in(&self) -> bool {
        self.view.is_some()
    }

    /// Checks a login (LOGIN or AUTHENTICATE PLAIN); on success the account's view.
    pub fn login(&mut self, tag: Tag<'static>, user: &[u8], pass: &[u8]) -> Answer {
        if !self.security.login_allowed() {
            return answer(login_needs_tls(tag));
        }
        match login::check(&self.st, self.ip, user, pass) {
            Login::Ok(view, live) => {
                self.view = Some(view);
                self.user_is_admin = login::admin_account(user).is_some();
                self.built_on = Arc::downgrade(&live);
                answer(status(
                    Kind::Ok,
                    Some(tag),
                    Some(Code::Capability(capabilities(self.security))),
                    "logged in".into(),
                ))
            }
            Login::Failed(text) => {
                let code = Code::Other(imap_codec::imap_types::response::CodeOther::unvalidated(
                    &b"AUTHENTICATIONFAILED"[..],
                ));
                let mut a = answer(status(Kind::No, Some(tag), Some(code), text));
                a.failed_login = true;
                a
            }
        }
    }

    /// The answer to `cmd`.
    pub fn handle(&mut self, cmd: Command<'static>) -> Answer {
        let tag = cmd.tag;
        let ok = |t: &str| answer(status(Kind::Ok, Some(tag.clone()), None, t.into()));
        match cmd.body {
            CommandBody::Capability => with(
                vec![Out::Data(Data::Capability(capabilities(self.security)))],
                ok("CAPABILITY done"),
            ),
            CommandBody::Noop | CommandBody::Check => ok("done"),
            CommandBody::Logout => {
                let mut a = with(vec![Out::Status(bye())], ok("LOGOUT done"));
                a.logout = true;
                a
            }
            CommandBody::Id { .. } => {
                let name = (IString::try_from("name"), IString::try_from("mailvault"));
                let params = match name {
                    (Ok(k), Ok(v)) => Some(vec![(k, NString(Some(v)))]),
                    _ => None,
                };
                with(
                    vec![Out::Data(Data::Id { parameters: params })],
                    ok("ID done"),
                )
            }
            // Taken by the connection when it is offered (see `mod.rs`); not here.
            CommandBody::StartTLS => {
                let text = match (self.security.starttls_now(), self.logged_in()) {
                    (true, true) => "STARTTLS comes before logging in",
                    (false, _) if self.security.tls => "this connection is over TLS already",
                    _ => "STARTTLS is not offered here: give serve --tls-cert and --tls-key",
                };
                self.bad(tag, text)
            }
            CommandBody::Login { username, password } => {
                if self.logged_in() {
                    return self.bad(tag, "already logged in");
                }
                let user = username.as_ref().to_vec();
                let pass = zeroize::Zeroizing::new(password.declassify().as_ref().to_vec());
                self.login(tag, &user, &pass)
            }
            CommandBody::Store { .. }
            | CommandBody::Append { .. }
            | CommandBody::Expunge
            | CommandBody::ExpungeUid { .. }
            | CommandBody::Copy { .. }
            | CommandBody::Move { .. }
            | CommandBody::Create { .. }
            | CommandBody::Delete { .. }
            | CommandBody::Rename { .. }
            | CommandBody::Subscribe { .. }
            | CommandBody::Unsubscribe { .. } => {
                answer(status(Kind::No, Some(tag), None, READ_ONLY.into()))
            }
            body if !self.logged_in() => {
                let _ = body;
                self.bad(tag, "log in first (LOGIN or AUTHENTICATE PLAIN)")
            }
            body => self.logged_in_command(tag, body),
        }
    }

    fn logged_in_command(&mut self, tag: Tag<'static>, body: CommandBody<'static>) -> Answer {
        let ok = |t: &str| answer(status(Kind::Ok, Some(tag.clone()), None, t.into()));
        match body {
            CommandBody::Namespace => {
                let ns = match IString::try_from("") {
                    Ok(p) => vec![Namespace::new(p, QuotedChar::try_from(DELIMITER).ok())],
                    Err(_) => Vec::new(),
                };
                let d = Data::Namespace {
                    personal: ns,
                    other: Vec::new(),
                    shared: Vec::new(),
                };
                with(vec![Out::Data(d)], ok("NAMESPACE done"))
            }
            CommandBody::Enable { capabilities } => with(
                vec![Out::Data(Data::Enabled {
                    capabilities: condstore::enabled(capabilities.as_ref()),
                })],
                ok("ENABLE done"),
            ),
            CommandBody::List {
                reference,
                mailbox_wildcard,
            } => self.list(ListCommand::plain(tag, reference, mailbox_wildcard, false)),
            CommandBody::Lsub {
                reference,
                mailbox_wildcard,
            } => self.list(ListCommand::plain(tag, reference, mailbox_wildcard, true)),
            CommandBody::Status {
                mailbox,
                item_names,
            } => self.status_cmd(tag, &mailbox, &item_names),
            CommandBody::Select {
                mailbox,
                parameters,
            } => self.select(tag, &mailbox, &parameters, "SELECT"),
            CommandBody::Examine {
                mailbox,
                parameters,
            } => self.select(tag, &mailbox, &parameters, "EXAMINE"),
            CommandBody::Unselect | CommandBody::Close => match self.selected.take() {
                Some(_) => ok("done"),
                None => self.bad(tag, "no mailbox selected"),
            },
            CommandBody::Fetch {
                sequence_set,
                macro_or_item_names,
                uid,
                modifiers,
            } => self.fetch(tag, &sequence_set, macro_or_item_names, (uid, &modifiers)),
            CommandBody::Search {
                charset,
                criteria,
                uid,
            } => match search::charset_refused(&tag, charset.as_ref()) {
                Some(no) => no,
                None => self.search(tag, &criteria, uid),
            },
            _ => answer(status(
                Kind::Bad,
                Some(tag),
                None,
                "this command is not in the IMAP view of the backups".into(),
            )),
        }
    }

    fn bad(&self, tag: Tag<'static>, text: &str) -> Answer {
        answer(status(Kind::Bad, Some(tag), None, text.into()))
    }

    fn no(&self, tag: Tag<'static>, text: String) -> Answer {
        answer(status(Kind::No, Some(tag), None, text))
    }

    /// The view, rebuilt when the repository was opened again since (a new snapshot).
    fn view(&mut self) -> mailvault_core::Result<&View> {
        let live = self.st.live()?;
        let stale = !std::sync::Weak::ptr_eq(&self.built_on, &Arc::downgrade(&live));
        if stale {
            let account = (self.view.as_ref())
                .map(|v| v.account.clone())
                .unwrap_or_default();
            let fresh = self.st.0.imap.view(&account, &live)?;
            // An account no snapshot holds any more shows nothing.
            self.view = Some(fresh.unwrap_or_else(|| {
                Arc::new(View {
                    account,
                    boxes: Vec::new(),
                    history: Vec::new(),
                })
            }));
            self.built_on = Arc::downgrade(&live);
        }
        self.view
            .as_deref()
            .ok_or_else(|| mailvault_core::Error::Internal("no view".into()))
    }

    /// The mailbox a client names, if the view has it.
    fn find(&mut self, mailbox: &Mailbox<'_>) -> Result<ViewBox, String> {
        let name = mailbox_name(mailbox).ok_or("not a valid mailbox name (modified UTF-7)")?;
        let view = self
            .view()
            .map_err(|e| format!("cannot read the repository: {e}"))?;
        view.find(&name)
            .cloned()
            .ok_or_else(|| "no such mailbox".to_string())
    }

    /// A LIST or LSUB, plain or extended ([`listext`]): every one takes this path. With
    /// `RETURN (STATUS ...)`, at most [`LIST_STATUS_MAX`] mailboxes get their STATUS.
    pub fn list(&mut self, c: ListCommand) -> Answer {
        if !self.logged_in() {
            return self.bad(c.tag, "log in first (LOGIN or AUTHENTICATE PLAIN)");
        }
        let listed = match self.view() {
            Ok(v) => listext::select(v, &c),
            Err(e) => return self.no(c.tag, format!("cannot read the repository: {e}")),
        };
        let Some(listed) = listed else {
            return self.no(c.tag, "not a valid mailbox name (modified UTF-7)".into());
        };
        let given = status_given(&listed);
        let mut out = Vec::new();
        for (l, given) in listed.into_iter().zip(given) {
            let (b, wanted) = (l.b.clone(), l.status);
            out.push(listext::line(l, c.ask.lsub));
            // RFC 5819 (`Listed::status`); a folder that cannot be read gets none, nor
            // one past the LIST_STATUS_MAX given.
            let Some(names) = c.status.as_deref().filter(|_| wanted && given) else {
                continue;
            };
            if let Ok(f) = self.open(b.clone()) {
                let items = status_items(&f, names).into();
                let mailbox = wire_mailbox(&b.name);
                out.push(Out::Data(Data::Status { mailbox, items }));
            }
        }
        let what = if c.ask.lsub { "LSUB done" } else { "LIST done" };
        with(out, ok_text(c.tag, what))
    }

    /// Opens the mailbox a client names.
    fn open(&mut self, b: ViewBox) -> Result<Arc<Folder>, String> {
        let Some(place) = b.place else {
            return Err("that mailbox only holds others (\\Noselect)".into());
        };
        let view = self.view.as_ref().ok_or("log in first")?;
        let live = self
            .st
            .live()
            .map_err(|e| format!("cannot read the repository: {e}"))?;
        (self.st.0.imap)
            .folder(&view.account, &place, || {
                Folder::open(live.repo(), view, &place)
            })
            .map_err(|e| format!("cannot read the folder: {e}"))
    }

    /// Records in the audit log that the session opened (or tried to open) mailbox `name`
    /// (`None`: none of that name).
    fn audit_open(&self, name: Option<&str>, ok: bool) {
        let name = name.unwrap_or("(no such mailbox)");
        let Some(v) = &self.view else {
            return;
        };
        let who = match self.user_is_admin {
            true => "admin",
            false => &v.account,
        };
        let detail = format!("{}: {name}", v.account);
        let status = if ok { 200 } else { 404 };
        (self.st.0.audit).record(who, &self.ip.to_string(), "imap open", &detail, status);
    }

    fn select(
        &mut self,
        tag: Tag<'static>,
        mailbox: &Mailbox<'_>,
        parameters: &[SelectParameter],
        what: &str,
    ) -> Answer {
        self.selected = None;
        if let Err(e) = condstore::select_parameters(parameters) {
            return self.bad(tag, &e);
        }
        let found = self.find(mailbox);
        let name = found.as_ref().ok().map(|b| b.name.clone());
        let place = found.as_ref().ok().and_then(|b| b.place.clone());
        let opened = found.and_then(|b| self.open(b));
        self.audit_open(name.as_deref(), opened.is_ok());
        let f = match opened {
            Ok(f) => f,
            Err(e) => return self.no(tag, e),
        };
        let mut flags: Vec<Flag<'static>> =
            ["\\Answered", "\\Flagged", "\\Deleted", "\\Seen", "\\Draft"]
                .iter()
                .filter_map(|n| fetch::flag(n))
                .collect();
        flags.extend(f.keywords.iter().filter_map(|k| fetch::flag(k)));
        let mut out = vec![
            Out::Data(Data::Flags(flags)),
            Out::Data(Data::Exists(f.messages.len() as u32)),
            Out::Data(Data::Recent(0)),
            Out::Status(status(
                Kind::Ok,
                None,
                Some(Code::PermanentFlags(Vec::<FlagPerm>::new())),
                "read-only".into(),
            )),
        ];
        if let Some(v) = std::num::NonZeroU32::new(f.uidvalidity) {
            out.push(Out::Status(status(
                Kind::Ok,
                None,
                Some(Code::UidValidity(v)),
                "UIDs valid".into(),
            )));
        }
        if let Some(n) = std::num::NonZeroU32::new(f.uidnext()) {
            out.push(Out::Status(status(
                Kind::Ok,
                None,
                Some(Code::UidNext(n)),
                "next UID".into(),
            )));
        }
        let highest = Code::HighestModSeq(f.modseq);
        out.push(Out::Status(status(
            Kind::Ok,
            None,
            Some(highest),
            "CONDSTORE".into(),
        )));
        self.selected = Some(Selected { folder: f, place });
        with(
            out,
            answer(status(
                Kind::Ok,
                Some(tag),
                Some(Code::ReadOnly),
                format!("{what} done"),
            ))
            .done,
        )
    }

    fn status_cmd(
        &mut self,
        tag: Tag<'static>,
        mailbox: &Mailbox<'static>,
        names: &[StatusDataItemName],
    ) -> Answer {
        let f = match self.find(mailbox).and_then(|b| self.open(b)) {
            Ok(f) => f,
            Err(e) => return self.no(tag, e),
        };
        let d = Data::Status {
            mailbox: mailbox.clone(),
            items: status_items(&f, names).into(),
        };
        with(vec![Out::Data(d)], ok_text(tag, "STATUS done"))
    }

    fn fetch(
        &mut self,
        tag: Tag<'static>,
        set: &imap_codec::imap_types::sequence::SequenceSet,
        names: MacroOrMessageDataItemNames<'static>,
        (uid, modifiers): (bool, &[FetchModifier]),
    ) -> Answer {
        let Some(sel) = &self.selected else {
            return self.bad(tag, "no mailbox selected");
        };
        let folder = sel.folder.clone();
        let mut items = match names {
            MacroOrMessageDataItemNames::Macro(m) => m
                .expand()
                .into_iter()
                .map(bounded_static::IntoBoundedStatic::into_static)
                .collect(),
            MacroOrMessageDataItemNames::MessageDataItemNames(v) => v,
        };
        if uid && !items.contains(&MessageDataItemName::Uid) {
            items.insert(0, MessageDataItemName::Uid);
        }
        if let Err(e) = fetch::check_items(&items) {
            return self.no(tag, e);
        }
        let ask = match condstore::fetch_ask(&mut items, modifiers) {
            Ok(a) => a,
            Err(e) => return self.bad(tag, &e),
        };
        // One mod-sequence for every message: CHANGEDSINCE takes all of them or none.
        if !ask.wants(folder.modseq) {
            return ok_text(tag, "FETCH done: nothing changed since");
        }
        self.fetch_part(Box::new(fetch::Pending::new(tag, folder, set, uid, items)))
    }

    /// The next part of FETCH `tag` ([`fetch::Pending`]).
    pub fn fetch_part(&mut self, mut p: Box<fetch::Pending>) -> Answer {
        let tag = p.tag.clone();
        let live = match self.st.live() {
            Ok(l) => l,
            Err(e) => return self.no(tag, format!("cannot read the repository: {e}")),
        };
        let (data, left) = p.part(&live, &self.st.0.imap.headers);
        let out = data.into_iter().map(Out::Data).collect();
        match left {
            Ok(left) => {
                let mut a = with(out, ok_text(tag, "FETCH done"));
                a.more = left.then_some(p);
                a
            }
            Err(e) => with(out, self.no(tag, e)),
        }
    }

    /// `a` with every part of a FETCH made at once (for the fuzz target, which has no
    /// connection to send parts on).
    #[cfg(feature = "fuzzing")]
    pub fn whole(&mut self, mut a: Answer) -> Answer {
        while let Some(p) = a.more.take() {
            let mut next = self.fetch_part(p);
            a.untagged.append(&mut next.untagged);
            a.done = next.done;
            a.more = next.more;
        }
        a
    }

    fn search(
        &mut self,
        tag: Tag<'static>,
        criteria: &Vec1<SearchKey<'static>>,
        uid: bool,
    ) -> Answer {
        if self.selected.is_none() {
            return self.bad(tag, "no mailbox selected");
        }
        match self.search_hits(criteria, uid) {
            Ok(hits) => {
                let modseq = (self.selected.as_ref())
                    .filter(|_| !hits.is_empty() && condstore::searches_modseq(criteria.as_ref()))
                    .map(|s| s.folder.modseq);
                let d = Data::Search(hits.into_iter().map(fetch::nonzero).collect(), modseq);
                with(vec![Out::Data(d)], ok_text(tag, "SEARCH done"))
            }
            Err(e) => self.no(tag, e),
        }
    }

    /// The answer to a `[UID] SEARCH RETURN (...)` (RFC 4731): `cmd` is the command
    /// without its RETURN options `r` (see [`super::esearch::split`]).
    pub fn esearch(&mut self, cmd: Command<'static>, r: super::esearch::Return) -> Answer {
        let tag = cmd.tag;
        let CommandBody::Search {
            charset,
            criteria,
            uid,
        } = cmd.body
        else {
            return self.bad(tag, "not a SEARCH");
        };
        if let Some(no) = search::charset_refused(&tag, charset.as_ref()) {
            return no;
        }
        if !self.logged_in() {
            return self.bad(tag, "log in first (LOGIN or AUTHENTICATE PLAIN)");
        }
        if self.selected.is_none() {
            return self.bad(tag, "no mailbox selected");
        }
        match self.search_hits(&criteria, uid) {
            Ok(hits) => {
                let line = super::esearch::line(tag.inner(), uid, r, &hits);
                with(vec![Out::Raw(line)], ok_text(tag, "SEARCH done"))
            }
            Err(e) => self.no(tag, e),
        }
    }

    /// The sequence numbers (UIDs when `uid`) of the selected mailbox's messages that
    /// match every key of `criteria`, in order; `Err`: the refusal's text.
    fn search_hits(
        &mut self,
        criteria: &Vec1<SearchKey<'static>>,
        uid: bool,
    ) -> Result<Vec<u32>, String> {
        let Some(sel) = &self.selected else {
            return Err("no mailbox selected".into());
        };
        let account = self.view.as_ref().map_or("", |v| v.account.as_str());
        let at = (account, sel.place.as_ref());
        super::indexed::hits(&self.st, at, &sel.folder, criteria.as_ref(), uid)
    }
}

fn answer(done: Status<'static>) -> Answer {
    Answer {
        untagged: Vec::new(),
        done,
        logout: false,
        failed_login: false,
        more: None,
    }
}

fn with(untagged: Vec<Out>, a: impl Into<Answer>) -> Answer {
    let mut a = a.into();
    a.untagged = untagged;
    a
}

impl From<Status<'static>> for Answer {
    fn from(s: Status<'static>) -> Answer {
        answer(s)
    }
}

fn ok_text(tag: Tag<'static>, text: &str) -> Answer {
    answer(status(Kind::Ok, Some(tag), None, text.into()))
}

/// The STATUS items `names` of folder `f` (those the view has).
fn status_items(f: &Folder, names: &[StatusDataItemName]) -> Vec<StatusDataItem> {
    let n = f.messages.len() as u32;
    (names.iter())
        .filter_map(|i| match i {
            StatusDataItemName::Messages => Some(StatusDataItem::Messages(n)),
            StatusDataItemName::Recent => Some(StatusDataItem::Recent(0)),
            StatusDataItemName::UidNext => {
                std::num::NonZeroU32::new(f.uidnext()).map(StatusDataItem::UidNext)
            }
            StatusDataItemName::UidValidity => {
                std::num::NonZeroU32::new(f.uidvalidity).map(StatusDataItem::UidValidity)
            }
            StatusDataItemName::Unseen => Some(StatusDataItem::Unseen(f.unseen() as u32)),
            StatusDataItemName::HighestModSeq => {
                Some(StatusDataItem::HighestModSeq(f.modseq.get()))
            }
            _ => None,
        })
        .collect()
}

/// The name a client gives, decoded from modified UTF-7 (`None`: it is not).
pub fn mailbox_name(m: &Mailbox<'_>) -> Option<String> {
    match m {
        Mailbox::Inbox => Some("INBOX".into()),
        Mailbox::Other(o) => mutf7::decode(o.inner().as_ref()).ok(),
    }
}

/// A name of the view as sent: modified UTF-7 (control characters included: they are
/// encoded too), quoted or a literal as the codec chooses.
pub fn wire_mailbox(name: &str) -> Mailbox<'static> {
    if name == "INBOX" {
        return Mailbox::Inbox;
    }
    Mailbox::try_from(mutf7::encode(name)).unwrap_or(Mailbox::Inbox)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starttls_and_logindisabled_are_announced_as_the_connection_is_protected() {
        let names = |tls, starttls, plain_login| -> Vec<String> {
            let sec = Security {
                tls,
                starttls,
                plain_login,
            };
            (capabilities(sec).as_ref().iter())
                .map(|c| c.to_string())
                .collect()
        };
        let has = |v: &[String], c: &str| v.iter().any(|x| x == c);
        // A public address with a certificate, before TLS: no login offered.
        let before = names(false, true, false);
        assert!(has(&before, "STARTTLS") && has(&before, "LOGINDISABLED"));
        assert!(!has(&before, "AUTH=PLAIN"), "{before:?}");
        // After STARTTLS, and on IMAPS.
        let after = names(true, true, false);
        assert!(has(&after, "AUTH=PLAIN") && has(&after, "ESEARCH"));
        assert!(has(&after, "LIST-EXTENDED") && has(&after, "LIST-STATUS"));
        assert!(has(&after, "SPECIAL-USE"));
        assert!(!has(&after, "STARTTLS") && !has(&after, "LOGINDISABLED"));
        assert_eq!(names(true, false, false), after);
        // Loopback with a certificate: both; without one: plain logins alone.
        let local = names(false, true, true);
        assert!(has(&local, "STARTTLS") && has(&local, "AUTH=PLAIN"));
        let plain = names(false, false, true);
        assert!(!has(&plain, "STARTTLS") && has(&plain, "AUTH=PLAIN"));
    }

    #[test]
    fn names_go_out_in_modified_utf7_without_control_characters() {
        for name in [
            "Entwürfe",
            "a\r\nb",
            "tab\there",
            "x\u{1}y",
            "Reports & Stats",
            "INBOX",
        ] {
            let m = wire_mailbox(name);
            if let Mailbox::Other(o) = &m {
                let b: &[u8] = o.inner().as_ref();
                assert!(
                    b.iter().all(|c| (0x20..0x7f).contains(c)),
                    "{name:?}: {b:?}"
                );
            }
            assert_eq!(mailbox_name(&m).as_deref(), Some(name), "round trip");
        }
        let bad = Mailbox::try_from("&Jjo-!&").unwrap();
        assert_eq!(mailbox_name(&bad), None, "not modified UTF-7");
    }
}
