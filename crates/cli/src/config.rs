//! The configuration file: named profiles, each holding what `mailvault run --profile NAME`
//! needs for one night's work (repository, password file, sources, backup options, forget
//! policy, prune schedule, check, metrics file). TOML, read with serde; a key this code
//! does not know is an error naming it and the file, so that a typo never silently drops
//! a setting. Only the CLI reads this file: the engine gets option structs.
//!
//! ```toml
//! [profiles.nightly]
//! repository = "/srv/backup/mail"
//! password-file = "/etc/mailvault/password"
//! host = "mx1"
//! tags = ["nightly"]
//! prune-every = "7d"
//! metrics-file = "/var/lib/prometheus/node-exporter/mailvault.prom"
//!
//! [[profiles.nightly.sources]]
//! source = "maildir:/var/vmail"
//!
//! [profiles.nightly.forget]
//! keep-daily = 7
//! keep-weekly = 4
//! ```

use anyhow::{bail, Context, Result};
use mailvault_core::ops::forget::Policy;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the configuration is read from when neither `--config` nor MAILVAULT_CONFIG names
/// a file (only when it exists).
pub const DEFAULT_PATH: &str = "/etc/mailvault/mailvault.toml";

/// The whole file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Config {
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// One profile: `[profiles.NAME]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Profile {
    /// The repository, written as `--repo` takes it.
    pub repository: Option<String>,
    /// The file holding the repository password (the password itself never goes here).
    pub password_file: Option<PathBuf>,
    /// What to back up, in this order.
    #[serde(default)]
    pub sources: Vec<Source>,
    /// Worker threads (`--jobs`).
    pub jobs: Option<usize>,
    /// Host name recorded in the snapshots (`backup --host`); a source may override it.
    pub host: Option<String>,
    /// Tags of every snapshot (`backup --tag`); a source's tags are added.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The retention policy applied after the backups; none: nothing is forgotten.
    pub forget: Option<Policy>,
    /// Prune when the last prune of the repository on this host is at least this old
    /// (`"7d"`, `"12h"`, humantime syntax); none: never prune. The time of the last prune is
    /// kept in this host's state directory ([`crate::commands::run`]).
    #[serde(default, with = "humantime_serde_opt")]
    pub prune_every: Option<Duration>,
    /// Index what the backups added for `search` (`mailvault index`) after them; off by
    /// default.
    #[serde(default)]
    pub index: bool,
    /// A quick check (`mailvault check`, without --read-data) at the end; on by default.
    #[serde(default = "yes")]
    pub check: bool,
    /// Where to write the Prometheus metrics (`--metrics-file`, which wins).
    pub metrics_file: Option<PathBuf>,
    /// This host's credentials cannot delete (`--append-only`, docs/security.md): its
    /// forget writes requests; `prune-every` is refused (prune runs on the maintenance
    /// host).
    #[serde(default)]
    pub append_only: bool,
}

fn yes() -> bool {
    true
}

/// One source of a profile: `[[profiles.NAME.sources]]`, with the options `backup` takes.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Source {
    /// `maildir:/var/vmail`, `imap://host`, ... as `mailvault backup SOURCE` takes it.
    pub source: String,
    /// `backup --account` (several allowed).
    #[serde(default)]
    pub accounts: Vec<String>,
    /// `backup --host`: overrides the profile's.
    pub host: Option<String>,
    /// `backup --tag`: added to the profile's.
    #[serde(default)]
    pub tags: Vec<String>,
    /// `backup --compression`.
    pub compression: Option<String>,
    /// `backup --accounts-file` (IMAP).
    pub accounts_file: Option<PathBuf>,
    /// `backup --imap-password-file`.
    pub imap_password_file: Option<PathBuf>,
    /// `backup --imap-master-user`.
    pub imap_master_user: Option<String>,
    /// `backup --starttls`.
    #[serde(default)]
    pub starttls: bool,
    /// `backup --ca-file`.
    pub ca_file: Option<PathBuf>,
    /// `backup --snapshot` (`btrfs`, `lvm`, `zfs`): read from a filesystem snapshot.
    pub snapshot: Option<String>,
}

impl Source {
    /// The `mailvault backup` arguments this source stands for, with the profile's host and
    /// tags: the profile runs exactly what the command line would.
    pub fn backup_args(&self, profile: &Profile) -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = vec!["backup".into(), self.source.clone().into()];
        let mut flag = |name: &str, v: std::ffi::OsString| {
            a.push(format!("--{name}").into());
            a.push(v);
        };
        for acc in &self.accounts {
            flag("account", acc.into());
        }
        if let Some(h) = self.host.as_ref().or(profile.host.as_ref()) {
            flag("host", h.into());
        }
        for t in profile.tags.iter().chain(&self.tags) {
            flag("tag", t.into());
        }
        if let Some(c) = &self.compression {
            flag("compression", c.into());
        }
        if let Some(f) = &self.accounts_file {
            flag("accounts-file", f.into());
        }
        if let Some(f) = &self.imap_password_file {
            flag("imap-password-file", f.into());
        }
        if let Some(u) = &self.imap_master_user {
            flag("imap-master-user", u.into());
        }
        if let Some(f) = &self.ca_file {
            flag("ca-file", f.into());
        }
        if let Some(k) = &self.snapshot {
            flag("snapshot", k.into());
        }
        if self.starttls {
            a.push("--starttls".into());
        }
        a
    }
}

/// Durations written as humantime strings (`"7d"`, `"1w 2d"`).
mod humantime_serde_opt {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s = String::deserialize(d)?;
        humantime::parse_duration(&s).map(Some).map_err(|e| {
            serde::de::Error::custom(format!("{s:?}: {e} (write e.g. \"7d\", \"12h\")"))
        })
    }
}

/// Which file to read: `--config` / MAILVAULT_CONFIG, else [`DEFAULT_PATH`] when it exists.
pub fn path(given: Option<&Path>) -> Option<PathBuf> {
    match given {
        Some(p) => Some(p.to_path_buf()),
        None => Some(PathBuf::from(DEFAULT_PATH)).filter(|p| p.exists()),
    }
}

/// Reads and parses a configuration file.
pub fn load(path: &Path) -> Result<Config> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading configuration file {}", path.display()))?;
    parse(&text).with_context(|| format!("configuration file {}", path.display()))
}

/// Parses a configuration; errors name the key and its line.
pub fn parse(text: &str) -> Result<Config> {
    let c: Config = toml::from_str(text).map_err(|e| toml_error(text, &e))?;
    for (name, p) in &c.profiles {
        if p.forget.as_ref().is_some_and(Policy::is_empty) {
            bail!("profile {name:?}: [forget] keeps nothing: give at least one keep-* rule");
        }
    }
    Ok(c)
}

/// A TOML error as one line: where it is and what is wrong, never the offending line
/// itself (toml quotes it, and it may be `password = "..."` written where a file name
/// belongs, which then went to the journal). A string value of a key that looks like a
/// secret is left out of the message too.
fn toml_error(text: &str, e: &toml::de::Error) -> anyhow::Error {
    let (line, column) = e.span().map_or((0, 0), |span| {
        let before = &text[..span.start.min(text.len())];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (
            before.matches('\n').count() + 1,
            before[line_start..].chars().count() + 1,
        )
    });
    let line_text = text.lines().nth(line.saturating_sub(1)).unwrap_or_default();
    let key = line_text
        .split('=')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let secret = ["pass", "secret", "token", "credential"]
        .iter()
        .any(|w| key.contains(w));
    let mut message = e.message().trim().replace('\n', " ");
    if secret {
        // `invalid type: string "hunter2", expected ...`: the value goes.
        message = redact_quoted(&message);
    }
    if secret && !key.ends_with("-file") && !key.ends_with("_file") {
        message.push_str(
            " (a password never goes in the configuration file: write `password-file = \"/etc/mailvault/password\"`, a file only root can read)",
        );
    }
    match line {
        0 => anyhow::anyhow!("{message}"),
        _ => anyhow::anyhow!("line {line}, column {column}: {message}"),
    }
}

/// `s` with the text between every pair of double quotes replaced by `…`.
fn redact_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, part) in s.split('"').enumerate() {
        if i > 0 {
            out.push('"');
        }
        out.push_str(if i % 2 == 1 { "…" } else { part });
    }
    out
}

impl Config {
    /// Profile `name`, or an error listing those there are.
    pub fn profile(&self, name: &str, path: &Path) -> Result<&Profile> {
        self.profiles.get(name).with_context(|| {
            let known: Vec<&str> = self.profiles.keys().map(String::as_str).collect();
            format!(
                "no profile {name:?} in {} (profiles there: {})",
                path.display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = r#"
[profiles.nightly]
repository = "/srv/backup/mail"
password-file = "/etc/mailvault/password"
host = "mx1"
tags = ["nightly"]
jobs = 4
prune-every = "7d"
check = false
metrics-file = "/var/lib/node_exporter/mailvault.prom"

[[profiles.nightly.sources]]
source = "maildir:/var/vmail"
accounts = ["bob@example.org"]
tags = ["vmail"]

[[profiles.nightly.sources]]
source = "imaps://mail.example.org"
imap-master-user = "backup"
imap-password-file = "/etc/mailvault/imap"
accounts-file = "/etc/mailvault/accounts"
host = "mail"

[profiles.nightly.forget]
keep-daily = 7
keep-weekly = 4
keep-within = "2d"
keep-within-daily = "1m"
keep-tag = ["keep"]
"#;

    #[test]
    fn a_full_profile_parses() {
        let c = parse(EXAMPLE).unwrap();
        let p = c.profile("nightly", Path::new("x")).unwrap();
        assert_eq!(p.repository.as_deref(), Some("/srv/backup/mail"));
        assert_eq!(p.prune_every, Some(Duration::from_secs(7 * 86_400)));
        assert!(!p.check);
        assert_eq!(p.sources.len(), 2);
        let f = p.forget.clone().unwrap();
        assert_eq!(f.keep_daily, 7);
        assert_eq!(f.keep_within, Some("2d".parse().unwrap()));
        assert_eq!(f.keep_within_daily, Some("1m".parse().unwrap()));
        assert_eq!(f.keep_weekly, 4);
        assert_eq!(f.keep_last, 0);
        let args: Vec<String> = p.sources[0]
            .backup_args(p)
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "backup",
                "maildir:/var/vmail",
                "--account",
                "bob@example.org",
                "--host",
                "mx1",
                "--tag",
                "nightly",
                "--tag",
                "vmail"
            ]
        );
        let args = p.sources[1].backup_args(p);
        assert!(args.iter().any(|a| a == "mail"), "{args:?}");
        assert!(!args.iter().any(|a| a == "mx1"), "{args:?}");
    }

    #[test]
    fn check_is_on_by_default() {
        let c = parse("[profiles.a]\nrepository = \"/r\"\n").unwrap();
        assert!(c.profiles["a"].check);
        assert_eq!(c.profiles["a"].prune_every, None);
    }

    #[test]
    fn unknown_keys_are_errors_naming_them() {
        for (text, key) in [
            ("[profiles.a]\nrepo = \"/r\"\n", "repo"),
            ("[profiles.a.forget]\nkeep-dayly = 3\n", "keep-dayly"),
            (
                "[profiles.a]\n[[profiles.a.sources]]\nsource = \"/m\"\naccount = \"x\"\n",
                "account",
            ),
            ("[profile.a]\n", "profile"),
        ] {
            let e = format!("{:#}", parse(text).unwrap_err());
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn bad_values_are_errors() {
        let e = format!(
            "{:#}",
            parse("[profiles.a]\nprune-every = \"weekly\"\n").unwrap_err()
        );
        assert!(e.contains("weekly"), "{e}");
        let e = format!("{:#}", parse("[profiles.a.forget]\n").unwrap_err());
        assert!(e.contains("keeps nothing"), "{e}");
        let e = format!(
            "{:#}",
            parse("[profiles.a.forget]\nkeep-within = \"2 weeks\"\n").unwrap_err()
        );
        assert!(e.contains("2 weeks"), "{e}");
    }

    /// The sample configuration the Debian package installs parses, with its profile.
    #[test]
    fn the_shipped_sample_parses() {
        let c = parse(include_str!("../../../contrib/mailvault.toml")).unwrap();
        let p = c.profile("nightly", Path::new("x")).unwrap();
        assert_eq!(p.repository.as_deref(), Some("/srv/mailvault"));
        assert_eq!(p.sources.len(), 1);
        assert!(p.forget.is_some());
    }

    /// Issue 24 items 5 and 14: a TOML error is one line with its place, and quotes
    /// neither a password written into the file nor the line it is on.
    #[test]
    fn errors_quote_no_secret_and_fit_on_one_line() {
        for text in [
            "[profiles.a]\npassword = \"hunter2-secret\"\n",
            "[profiles.a]\npassword-file = 17\nx = \"hunter2-secret\"\n",
            "[profiles.a]\npassword-file = [\"hunter2-secret\"]\n",
            "[profiles.a]\npassword-file = \"hunter2-secret\n",
        ] {
            let e = format!("{:#}", parse(text).unwrap_err());
            assert!(!e.contains("hunter2"), "{text:?}: {e}");
            assert!(!e.contains('\n'), "{text:?}: {e}");
            assert!(e.starts_with("line "), "{text:?}: {e}");
        }
        let e = format!(
            "{:#}",
            parse("[profiles.a]\npassword = \"x\"\n").unwrap_err()
        );
        assert!(e.contains("line 2") && e.contains("password-file"), "{e}");
    }

    #[test]
    fn a_missing_profile_names_those_there_are() {
        let c = parse(EXAMPLE).unwrap();
        let e = c.profile("weekly", Path::new("/etc/m.toml")).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("\"weekly\"") && e.contains("/etc/m.toml") && e.contains("nightly"),
            "{e}"
        );
    }
}
