//! Where the web UI may restore to (`--restore-imap`, `--restore-dir`) and what a restore
//! request becomes: the engine's own restore ([`mailvault_core::ops::restore`]), the same
//! as `mailvault restore` runs, checked against the session first.
//!
//! A browser never names a host to connect to or a path on the server: an IMAP restore
//! goes into the one server the admin configured (a mail user's into their own mailbox
//! there, logged in as themselves), a Maildir restore into a directory below the one the
//! admin configured, named by safe components only (and for the admin alone: it writes
//! on the server's disk).

use crate::read::Place;
use crate::reply::Failure;
use axum::http::StatusCode;
use mailvault_core::dest::imap::ImapRestoreOptions;
use mailvault_core::imap::client::{ClientOptions, Endpoint, Security};
use mailvault_core::imap::{Connection, Login, Password};
use mailvault_core::mail::maildir::safe_component;
use mailvault_core::ops::restore::RestoreOptions;
use mailvault_core::restore::Selection;
use std::net::IpAddr;
use std::path::PathBuf;
pub use zeroize::Zeroizing;

/// Where restores may go (`serve --restore-imap`, `--restore-dir`).
#[derive(Clone, Debug, Default)]
pub struct RestoreTo {
    /// The live IMAP server restores go into, and how to log in there.
    pub imap: Option<ImapTo>,
    /// The directory below which the admin may restore to Maildir trees.
    pub dir: Option<PathBuf>,
}

/// The live IMAP server of `--restore-imap`.
#[derive(Clone)]
pub struct ImapTo {
    pub client: ClientOptions,
    /// Dovecot's master user and its password (`--restore-master-user`,
    /// `--restore-password-file`): restores log in as it for the account. Without one,
    /// the form asks for the account's own password.
    pub master: Option<(String, Zeroizing<String>)>,
}

impl std::fmt::Debug for ImapTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let master = self.master.as_ref().map(|(m, _)| m);
        write!(f, "ImapTo({}, master {master:?})", self.url())
    }
}

impl ImapTo {
    /// `imap://HOST[:PORT]` (STARTTLS unless HOST is loopback: a password never crosses a
    /// network in clear) or `imaps://HOST[:PORT]`.
    pub fn parse(spec: &str) -> Result<ClientOptions, String> {
        let mut ep = Endpoint::parse(spec).map_err(|e| e.to_string())?;
        let loopback =
            (ep.host.parse::<IpAddr>()).is_ok_and(|ip| ip.is_loopback()) || ep.host == "localhost";
        if ep.security == Security::Plain && !loopback {
            ep.security = Security::StartTls;
        }
        let mut opts = ClientOptions::new(ep);
        opts.connect_timeout = std::time::Duration::from_secs(10);
        Ok(opts)
    }

    /// `imap://host:port` or `imaps://host:port`.
    pub fn url(&self) -> String {
        let scheme = match self.client.endpoint.security {
            Security::Tls => "imaps",
            _ => "imap",
        };
        format!("{scheme}://{}", self.client.endpoint.server())
    }
}

/// What a restore request asks (the form's fields, or the API's JSON object). No `Debug`:
/// it may hold a password.
#[derive(Clone, Default, serde::Deserialize, utoipa::ToSchema)]
pub struct Request {
    /// The snapshot (id or prefix, or `latest`); none with `picked`.
    #[serde(default)]
    pub snapshot: String,
    /// One account (none: the whole snapshot, the admin only).
    #[serde(default)]
    pub account: Option<String>,
    /// One folder and its subfolders (none: the whole account).
    #[serde(default)]
    pub folder: Option<String>,
    /// Messages by key (none: the whole folder, account or snapshot).
    #[serde(default)]
    pub messages: Vec<String>,
    /// `imap` (the live server of `--restore-imap`) or `maildir` (below `--restore-dir`).
    pub to: String,
    /// `maildir`: the directory below `--restore-dir` (safe components, `/`-separated).
    #[serde(default)]
    pub path: Option<String>,
    /// `imap` without a master user: the account's password on the server.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub password: Option<Zeroizing<String>>,
    /// Messages picked one by one, each at its place (a search's hits, across folders,
    /// accounts and snapshots), restored as `restore --message` restores one: into the
    /// folder it was in. With them, `snapshot`, `account`, `folder` and `messages` are
    /// not given.
    #[serde(default)]
    pub picked: Vec<Place>,
}

/// The label a restore of picked messages goes by in its report and in an IMAP server's
/// journal (re-runs into the same server share it: what is there is not sent again).
pub const PICKED: &str = "picked";

/// A picked message as a form field (`pick`) carries it: its place as a query string.
pub fn pick_value(p: &Place) -> String {
    serde_urlencoded::to_string(p).unwrap_or_default()
}

impl Request {
    /// A request from a form's fields (`message` may repeat), as `serde_urlencoded` reads
    /// them.
    pub fn from_fields(fields: Vec<(String, String)>) -> Request {
        let mut r = Request::default();
        let some = |v: String| (!v.is_empty()).then_some(v);
        for (k, v) in fields {
            match k.as_str() {
                "snapshot" => r.snapshot = v,
                "account" => r.account = some(v),
                "folder" => r.folder = some(v),
                "message" | "key" if !v.is_empty() => r.messages.push(v),
                "to" => r.to = v,
                "path" => r.path = some(v),
                "password" if !v.is_empty() => r.password = Some(Zeroizing::new(v)),
                // One that does not read as a place is kept empty: its snapshot is
                // refused, never dropped in silence.
                "pick" => r
                    .picked
                    .push(serde_urlencoded::from_str(&v).unwrap_or_default()),
                _ => {}
            }
        }
        r
    }
}

/// A request checked against the session and the configuration: what runs.
pub enum Planned {
    Imap(Box<ImapRestoreOptions>),
    Maildir(RestoreOptions),
}

/// The most messages one request names.
const MAX_MESSAGES: usize = 10_000;

fn refuse(status: StatusCode, text: impl Into<String>) -> Failure {
    Failure::new(status, text)
}

/// Checks `r` for the session of `user` (`None`: the admin) against `to`, and gives the
/// restore it runs with `snapshot` (the full id `r.snapshot` was found as) and where it
/// goes (for the job's list). A mail user restores their own account alone, into their
/// own mailbox on the live server, never to a directory; another account is `404`, as
/// on every route.
pub fn plan(
    to: &RestoreTo,
    user: Option<&str>,
    r: &Request,
    snapshot: &str,
) -> Result<(Planned, String), Failure> {
    let picked_accounts = picked_accounts(r)?;
    if user.is_some_and(|u| picked_accounts.iter().any(|a| a != u)) {
        return Err(refuse(StatusCode::NOT_FOUND, "no such account"));
    }
    let account = match (user, &r.account) {
        (Some(u), Some(a)) if a != u => {
            return Err(refuse(StatusCode::NOT_FOUND, "no such account"))
        }
        (Some(u), _) => Some(u.to_string()),
        (None, None) if picked_accounts.len() == 1 => picked_accounts.first().cloned(),
        (None, a) => a.clone(),
    };
    if r.folder.is_some() && account.is_none() {
        return Err(refuse(
            StatusCode::BAD_REQUEST,
            "a folder needs its account",
        ));
    }
    if r.messages.len().max(r.picked.len()) > MAX_MESSAGES {
        let text = format!("at most {MAX_MESSAGES} messages in one restore");
        return Err(refuse(StatusCode::BAD_REQUEST, text));
    }
    let select = Selection {
        snapshot: snapshot.to_string(),
        accounts: account.iter().cloned().collect(),
        folders: r.folder.iter().cloned().collect(),
        messages: r.messages.clone(),
        cache_bytes: Selection::CACHE_BYTES,
        ..Selection::default()
    };
    match r.to.as_str() {
        "imap" => imap_plan(to, account.as_deref(), r, select),
        "maildir" if user.is_some() => Err(refuse(
            StatusCode::FORBIDDEN,
            "a mail user restores into their own mailbox only",
        )),
        "maildir" => maildir_plan(to, r, select),
        _ => Err(refuse(
            StatusCode::BAD_REQUEST,
            "`to` is `imap` or `maildir`",
        )),
    }
}

/// The accounts of `r`'s picked messages, each once; a request that picks messages and
/// also names a snapshot's part is refused.
fn picked_accounts(r: &Request) -> Result<Vec<String>, Failure> {
    if r.picked.is_empty() {
        return Ok(Vec::new());
    }
    let named = !r.snapshot.is_empty() || r.account.is_some() || r.folder.is_some();
    if named || !r.messages.is_empty() {
        let text = "picked messages carry their own places: give no snapshot, account, folder or messages with them";
        return Err(refuse(StatusCode::BAD_REQUEST, text));
    }
    let mut accounts: Vec<String> = r.picked.iter().map(|p| p.account.clone()).collect();
    accounts.sort();
    accounts.dedup();
    Ok(accounts)
}

fn imap_plan(
    to: &RestoreTo,
    account: Option<&str>,
    r: &Request,
    select: Selection,
) -> Result<(Planned, String), Failure> {
    let Some(imap) = &to.imap else {
        let text = "no IMAP server to restore into: start serve with --restore-imap";
        return Err(refuse(StatusCode::BAD_REQUEST, text));
    };
    let login = match (&imap.master, account, &r.password) {
        (Some((master, pw)), _, _) => Login::Master {
            master: master.clone(),
            password: Password::One(pw.to_string()),
        },
        (None, Some(_), Some(pw)) => Login::User {
            template: "%u".into(),
            password: Password::One(pw.to_string()),
        },
        (None, Some(_), None) => {
            let text = "give the account's password on the mail server";
            return Err(refuse(StatusCode::BAD_REQUEST, text));
        }
        (None, None, _) => {
            let text = "restoring every account into IMAP needs a master user: start serve with --restore-master-user";
            return Err(refuse(StatusCode::BAD_REQUEST, text));
        }
    };
    let connection = Connection {
        client: imap.client.clone(),
        login,
    };
    let mut opts = ImapRestoreOptions::new(&select.snapshot, connection);
    opts.select = select;
    let target = match account {
        Some(a) => format!("{} as {a}", imap.url()),
        None => imap.url(),
    };
    Ok((Planned::Imap(Box::new(opts)), target))
}

fn maildir_plan(
    to: &RestoreTo,
    r: &Request,
    select: Selection,
) -> Result<(Planned, String), Failure> {
    let Some(dir) = &to.dir else {
        let text = "no directory to restore into: start serve with --restore-dir";
        return Err(refuse(StatusCode::BAD_REQUEST, text));
    };
    let path = r.path.as_deref().unwrap_or_default();
    let safe = !path.is_empty()
        && path.len() <= 1024
        && !path.chars().any(char::is_control)
        && path.split('/').all(|c| safe_component(c.as_bytes()));
    if !safe {
        let text = "give a directory below the restore directory: names separated by `/`, no `..`";
        return Err(refuse(StatusCode::BAD_REQUEST, text));
    }
    let target = dir.join(path);
    let opts = RestoreOptions {
        select,
        target: target.clone(),
        ..RestoreOptions::default()
    };
    Ok((Planned::Maildir(opts), target.display().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to() -> RestoreTo {
        RestoreTo {
            imap: Some(ImapTo {
                client: ImapTo::parse("imap://127.0.0.1:143").unwrap(),
                master: None,
            }),
            dir: Some(PathBuf::from("/srv/restore")),
        }
    }

    fn request(to: &str) -> Request {
        Request {
            snapshot: "abcdef12".into(),
            account: Some("bob@example.org".into()),
            to: to.into(),
            password: Some(Zeroizing::new("pw".into())),
            ..Request::default()
        }
    }

    fn status(r: Result<(Planned, String), Failure>) -> StatusCode {
        r.err().map_or(StatusCode::OK, |f| f.status)
    }

    #[test]
    fn a_mail_user_restores_their_own_account_into_their_own_mailbox_only() {
        let to = to();
        let bob = Some("bob@example.org");
        let (p, target) = plan(&to, bob, &request("imap"), "ff").unwrap();
        assert_eq!(target, "imap://127.0.0.1:143 as bob@example.org");
        let Planned::Imap(o) = p else { panic!() };
        assert_eq!(o.select.accounts, ["bob@example.org"]);
        let creds = o.connection.login.credentials("bob@example.org").unwrap();
        assert!(format!("{creds:?}").contains("bob@example.org"));
        // No account named: still his own alone.
        let r = Request {
            account: None,
            ..request("imap")
        };
        let Planned::Imap(o) = plan(&to, bob, &r, "ff").unwrap().0 else {
            panic!()
        };
        assert_eq!(o.select.accounts, ["bob@example.org"]);
        let other = Request {
            account: Some("alice@example.org".into()),
            ..request("imap")
        };
        assert_eq!(status(plan(&to, bob, &other, "ff")), StatusCode::NOT_FOUND);
        let dir = Request {
            path: Some("x".into()),
            ..request("maildir")
        };
        assert_eq!(status(plan(&to, bob, &dir, "ff")), StatusCode::FORBIDDEN);
    }

    /// Picked messages carry their own places: a mail user picks from their own account
    /// alone, a request that also names a snapshot's part is refused, one account's picks
    /// go in as that account, several accounts' only through a master user.
    #[test]
    fn picked_messages_are_checked_as_their_accounts() {
        let to = to();
        let pick = |account: &str| Place {
            snapshot: "abcdef12".into(),
            account: account.into(),
            folder: "INBOX".into(),
            key: "k".into(),
        };
        let picked = |accounts: &[&str]| Request {
            snapshot: String::new(),
            account: None,
            picked: accounts.iter().map(|a| pick(a)).collect(),
            ..request("imap")
        };
        let bob = Some("bob@example.org");
        let mine = picked(&["bob@example.org", "bob@example.org"]);
        let Planned::Imap(o) = plan(&to, bob, &mine, PICKED).unwrap().0 else {
            panic!()
        };
        assert_eq!(o.select.accounts, ["bob@example.org"]);
        let theirs = picked(&["bob@example.org", "alice@example.org"]);
        assert_eq!(
            status(plan(&to, bob, &theirs, PICKED)),
            StatusCode::NOT_FOUND
        );
        let (_, target) = plan(&to, None, &mine, PICKED).unwrap();
        assert_eq!(target, "imap://127.0.0.1:143 as bob@example.org");
        assert_eq!(
            status(plan(&to, None, &theirs, PICKED)),
            StatusCode::BAD_REQUEST
        );
        for named in [
            Request {
                snapshot: "abcdef12".into(),
                ..mine.clone()
            },
            Request {
                folder: Some("INBOX".into()),
                ..mine.clone()
            },
            Request {
                messages: vec!["k".into()],
                ..mine.clone()
            },
        ] {
            assert_eq!(
                status(plan(&to, None, &named, PICKED)),
                StatusCode::BAD_REQUEST
            );
        }
        let form = Request::from_fields(vec![
            ("pick".into(), pick_value(&pick("bob@example.org"))),
            ("pick".into(), "not a place".into()),
        ]);
        assert_eq!(form.picked[0].account, "bob@example.org");
        assert_eq!(form.picked[1].snapshot, "", "kept, to be refused");
    }

    #[test]
    fn a_directory_stays_below_the_restore_directory() {
        let to = to();
        for bad in ["", "..", "a/../b", "/etc", "a//b", "a/./b", "a\nb", "a/"] {
            let r = Request {
                path: Some(bad.into()),
                ..request("maildir")
            };
            assert_eq!(
                status(plan(&to, None, &r, "ff")),
                StatusCode::BAD_REQUEST,
                "{bad:?}"
            );
        }
        let r = Request {
            path: Some("case-42/alice".into()),
            ..request("maildir")
        };
        let (Planned::Maildir(o), target) = plan(&to, None, &r, "ff").unwrap() else {
            panic!()
        };
        assert_eq!(o.target, PathBuf::from("/srv/restore/case-42/alice"));
        assert_eq!(target, "/srv/restore/case-42/alice");
        let none = RestoreTo::default();
        assert_eq!(status(plan(&none, None, &r, "ff")), StatusCode::BAD_REQUEST);
        assert_eq!(
            status(plan(&none, None, &request("imap"), "ff")),
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn every_account_into_imap_needs_the_master_user() {
        let mut to = to();
        let all = Request {
            account: None,
            ..request("imap")
        };
        assert_eq!(status(plan(&to, None, &all, "ff")), StatusCode::BAD_REQUEST);
        let nopw = Request {
            password: None,
            ..request("imap")
        };
        assert_eq!(
            status(plan(&to, None, &nopw, "ff")),
            StatusCode::BAD_REQUEST
        );
        to.imap.as_mut().unwrap().master = Some(("admin".into(), Zeroizing::new("m".into())));
        assert_eq!(status(plan(&to, None, &all, "ff")), StatusCode::OK);
        assert_eq!(status(plan(&to, None, &nopw, "ff")), StatusCode::OK);
        let text = format!("{:?}", to.imap.unwrap());
        assert!(!text.contains("\"m\""), "{text}");
    }

    #[test]
    fn form_fields_repeat_messages_and_drop_empty_values() {
        let f = |k: &str, v: &str| (k.to_string(), v.to_string());
        let r = Request::from_fields(vec![
            f("snapshot", "ab"),
            f("account", ""),
            f("message", "k1"),
            f("message", "k2"),
            f("to", "imap"),
            f("password", ""),
            f("csrf", "x"),
        ]);
        assert_eq!(
            (r.account, r.messages),
            (None, vec!["k1".into(), "k2".into()])
        );
        assert!(r.password.is_none());
    }
}
