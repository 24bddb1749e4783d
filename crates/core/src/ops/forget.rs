//! `forget`: removing snapshots by a retention policy (restic's, rule for rule) or by id,
//! never those under legal hold, and the repository's record of snapshots removed on
//! purpose.
//!
//! [`apply`] is the policy, a pure function: snapshots newest first, each bucketed by
//! hour, day, ISO week, month and year in local time; the newest snapshot of each bucket
//! counts against that rule's number; `keep_within*` are relative to the newest snapshot
//! (not now); a snapshot is kept when any rule keeps it, and a snapshot tagged
//! [`HOLD_TAG`] always is. [`forget`] applies it per group (host and source by default)
//! and removes the rest.
//!
//! Removing a snapshot file would look like a rollback to every host that saw it
//! ([`crate::host::seen`]). So before any snapshot file is deleted, this host's record drops
//! its ids, and a sealed, content-named **forget record** `forgotten/<id>` listing them
//! is written durably into the repository ([`remove_snapshots`], also used by `tag`):
//! other hosts take the ids listed there as removed on purpose
//! ([`crate::repo::forgotten`]). Someone
//! without the key cannot write one.
//!
//! An append-only host deletes nothing: there [`remove_snapshots`] writes the record as a
//! **request** and leaves the snapshots (and this host's record) as they are. The
//! maintenance host's `prune --apply-requests` applies requests ([`apply_requests`]),
//! except for snapshots under legal hold and the newest snapshot of each host and source:
//! an intruder with a mail server's credentials can ask, but not empty a group.

use crate::error::{Error, Result};
use crate::host::seen::{Record, StateDir};
use crate::repo::forgotten::{ForgetRecord, FORGOTTEN_DIR};
use crate::repo::id::Id;
use crate::repo::named::Named;
use crate::repo::snapshot::Snapshot;
use crate::repo::Repository;
use crate::store::Store;
use jiff::civil::{Date, DateTime};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

/// The tag of a snapshot under legal hold: `forget` never removes it.
pub const HOLD_TAG: &str = "hold";

/// A count of a `keep_*` rule meaning "all of them" (`unlimited` on the command line).
pub const UNLIMITED: u32 = u32::MAX;

/// A calendar duration as restic writes it, `2y5m7d3h`: years, months, days, hours.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Within {
    pub years: u32,
    pub months: u32,
    pub days: u32,
    pub hours: u32,
}

impl Within {
    pub fn is_zero(&self) -> bool {
        *self == Within::default()
    }

    /// `t` minus this duration: years, months and days on the calendar of `tz` (with
    /// Go's `AddDate` normalization: 31 March minus one month is 3 March, as restic),
    /// then hours as elapsed time.
    fn before(&self, t: Timestamp, tz: &TimeZone) -> Timestamp {
        let z = t.to_zoned(tz.clone());
        let months = i64::from(z.year()) * 12 + i64::from(z.month())
            - 1
            - i64::from(self.years) * 12
            - i64::from(self.months);
        let (year, month) = (months.div_euclid(12), months.rem_euclid(12) + 1);
        let day = i64::from(z.day()) - 1 - i64::from(self.days);
        let civil = i16::try_from(year)
            .ok()
            .and_then(|y| Date::new(y, month as i8, 1).ok())
            .and_then(|d| d.checked_add(jiff::Span::new().days(day)).ok())
            .map(|d| DateTime::from_parts(d, z.time()))
            .and_then(|dt| dt.to_zoned(tz.clone()).ok());
        let Some(start) = civil else {
            // Before the calendar's start: everything is within.
            return Timestamp::MIN;
        };
        start
            .timestamp()
            .checked_sub(SignedDuration::from_hours(i64::from(self.hours)))
            .unwrap_or(Timestamp::MIN)
    }
}

impl FromStr for Within {
    type Err = Error;
    fn from_str(s: &str) -> Result<Within> {
        let bad = |why: &str| {
            Error::InvalidInput(format!(
                "duration {s:?}: {why} (write years, months, days and hours as in 2y5m7d3h)"
            ))
        };
        let mut w = Within::default();
        let mut rest = s.trim();
        if rest.is_empty() {
            return Err(bad("empty"));
        }
        while !rest.is_empty() {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return Err(bad("a number is missing"));
            }
            let n: u32 = rest[..digits]
                .parse()
                .map_err(|_| bad("number too large"))?;
            let field = match rest.as_bytes().get(digits) {
                Some(b'y') => &mut w.years,
                Some(b'm') => &mut w.months,
                Some(b'd') => &mut w.days,
                Some(b'h') => &mut w.hours,
                Some(_) => return Err(bad("unknown unit (y, m, d or h)")),
                None => return Err(bad("a unit is missing after the last number")),
            };
            *field = n;
            rest = &rest[digits + 1..];
        }
        Ok(w)
    }
}

impl TryFrom<String> for Within {
    type Error = Error;
    fn try_from(s: String) -> Result<Within> {
        s.parse()
    }
}

impl From<Within> for String {
    fn from(w: Within) -> String {
        w.to_string()
    }
}

impl fmt::Display for Within {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, unit) in [
            (self.years, 'y'),
            (self.months, 'm'),
            (self.days, 'd'),
            (self.hours, 'h'),
        ] {
            if n != 0 {
                write!(f, "{n}{unit}")?;
            }
        }
        Ok(())
    }
}

/// Which snapshots to keep: restic's `--keep-*` options. Counts are 0 when unused and
/// [`UNLIMITED`] for all; a snapshot is kept when any rule keeps it. Read from a profile
/// as TOML with the flags' names (`keep-daily = 7`, `keep-within = "1m"`,
/// `keep-tag = ["monthly"]`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Policy {
    pub keep_last: u32,
    pub keep_hourly: u32,
    pub keep_daily: u32,
    pub keep_weekly: u32,
    pub keep_monthly: u32,
    pub keep_yearly: u32,
    /// Every snapshot within this duration of the newest one.
    pub keep_within: Option<Within>,
    pub keep_within_hourly: Option<Within>,
    pub keep_within_daily: Option<Within>,
    pub keep_within_weekly: Option<Within>,
    pub keep_within_monthly: Option<Within>,
    pub keep_within_yearly: Option<Within>,
    /// Tag lists: a snapshot that has every tag of one list (comma-separated, `a,b`) is
    /// kept; the list `""` matches snapshots without tags.
    pub keep_tag: Vec<String>,
}

fn within(w: &Option<Within>) -> Option<Within> {
    w.filter(|w| !w.is_zero())
}

impl Policy {
    /// No rule at all: forget refuses it (as restic), since it would remove everything.
    pub fn is_empty(&self) -> bool {
        self.counts().iter().all(|(n, _)| *n == 0)
            && self.withins().iter().all(|(w, _)| w.is_none())
            && within(&self.keep_within).is_none()
            && self.keep_tag.is_empty()
    }

    fn counts(&self) -> [(u32, &'static str); 6] {
        [
            (self.keep_last, "last snapshot"),
            (self.keep_hourly, "hourly snapshot"),
            (self.keep_daily, "daily snapshot"),
            (self.keep_weekly, "weekly snapshot"),
            (self.keep_monthly, "monthly snapshot"),
            (self.keep_yearly, "yearly snapshot"),
        ]
    }

    fn withins(&self) -> [(Option<Within>, &'static str); 5] {
        [
            (within(&self.keep_within_hourly), "hourly within"),
            (within(&self.keep_within_daily), "daily within"),
            (within(&self.keep_within_weekly), "weekly within"),
            (within(&self.keep_within_monthly), "monthly within"),
            (within(&self.keep_within_yearly), "yearly within"),
        ]
    }
}

impl fmt::Display for Policy {
    /// As restic says it: `keep 7 daily, 2 weekly snapshots`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = ["latest", "hourly", "daily", "weekly", "monthly", "yearly"];
        let keeps: Vec<String> = (self.counts().iter().zip(names))
            .filter(|((n, _), _)| *n > 0)
            .map(|((n, _), name)| match *n {
                UNLIMITED => format!("all {name}"),
                n => format!("{n} {name}"),
            })
            .collect();
        let mut parts = Vec::new();
        if !keeps.is_empty() {
            parts.push(format!("{} snapshots", keeps.join(", ")));
        }
        for (w, name) in self.withins() {
            if let Some(w) = w {
                let kind = name.trim_end_matches(" within");
                parts.push(format!("{kind} snapshots within {w}"));
            }
        }
        if !self.keep_tag.is_empty() {
            parts.push(format!("all snapshots with tags {:?}", self.keep_tag));
        }
        if let Some(w) = within(&self.keep_within) {
            parts.push(format!("all snapshots within {w} of the newest"));
        }
        match parts.is_empty() {
            true => write!(f, "remove"),
            false => write!(f, "keep {}", parts.join(", ")),
        }
    }
}

/// Whether a snapshot with `tags` has every tag of the comma-separated `list` (`""`:
/// has no tags), as restic's tag lists.
pub fn has_tag_list(tags: &[String], list: &str) -> bool {
    for t in list.split(',') {
        if t.is_empty() && tags.is_empty() {
            return true;
        }
        if !tags.iter().any(|x| x == t) {
            return false;
        }
    }
    true
}

/// What the policy decided for one snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub id: Id,
    pub keep: bool,
    /// The rules that keep it (`daily snapshot`, `within 7d`, `hold`), restic's words.
    pub reasons: Vec<String>,
}

/// [`apply_at`] in this machine's time zone, now.
pub fn apply(snaps: &[Snapshot], policy: &Policy) -> Vec<Decision> {
    apply_at(snaps, policy, &TimeZone::system(), Timestamp::now())
}

fn timestamp(s: &Snapshot) -> Timestamp {
    Timestamp::new(s.time, s.time_nanos as i32).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The policy on one group of snapshots, in time zone `tz` at time `now` (snapshots
/// after `now` do not count as the newest for the `keep_within*` rules): one decision
/// per snapshot, newest first (equal times in the order given).
pub fn apply_at(
    snaps: &[Snapshot],
    policy: &Policy,
    tz: &TimeZone,
    now: Timestamp,
) -> Vec<Decision> {
    let mut list: Vec<&Snapshot> = snaps.iter().collect();
    list.sort_by_key(|s| std::cmp::Reverse((s.time, s.time_nanos)));
    let times: Vec<Timestamp> = list.iter().map(|s| timestamp(s)).collect();
    let latest = times.iter().copied().filter(|t| *t < now).max();
    // With no snapshot before now restic measures from the year 1: all are within.
    let cutoff = |w: &Within| latest.map_or(Timestamp::MIN, |l| w.before(l, tz));
    let bucket = |t: Timestamp, rule: usize, nr: usize| -> i64 {
        let z = t.to_zoned(tz.clone());
        let (y, m, d, h) = (
            i64::from(z.year()),
            i64::from(z.month()),
            i64::from(z.day()),
            i64::from(z.hour()),
        );
        match rule {
            0 => nr as i64,
            1 => y * 1_000_000 + m * 10_000 + d * 100 + h,
            2 => y * 10_000 + m * 100 + d,
            3 => {
                let w = z.date().iso_week_date();
                i64::from(w.year()) * 100 + i64::from(w.week())
            }
            4 => y * 100 + m,
            _ => y,
        }
    };
    let mut counts = policy.counts();
    let mut last: [Option<i64>; 6] = [None; 6];
    let withins = policy.withins();
    let mut last_within: [Option<i64>; 5] = [None; 5];
    let oldest = list.len().saturating_sub(1);
    let mut out = Vec::with_capacity(list.len());
    for (nr, (s, &t)) in list.iter().zip(&times).enumerate() {
        let mut reasons = Vec::new();
        if s.tags.iter().any(|t| t == HOLD_TAG) {
            reasons.push(HOLD_TAG.to_string());
        }
        for l in &policy.keep_tag {
            if has_tag_list(&s.tags, l) {
                reasons.push(format!("has tags [{}]", l.replace(',', ", ")));
            }
        }
        if let Some(w) = within(&policy.keep_within) {
            if t > cutoff(&w) {
                reasons.push(format!("within {w}"));
            }
        }
        for (i, (count, reason)) in counts.iter_mut().enumerate() {
            if *count == 0 {
                continue;
            }
            let val = bucket(t, i, nr);
            // The oldest snapshot is kept too while the rule has counts left.
            if Some(val) != last[i] || nr == oldest {
                let reason = match Some(val) == last[i] {
                    true => format!("oldest {reason}"),
                    false => reason.to_string(),
                };
                last[i] = Some(val);
                if *count != UNLIMITED {
                    *count -= 1;
                }
                reasons.push(reason);
            }
        }
        for (i, (w, reason)) in withins.iter().enumerate() {
            let Some(w) = w else { continue };
            if t <= cutoff(w) {
                continue;
            }
            let val = bucket(t, i + 1, nr);
            if Some(val) != last_within[i] || nr == oldest {
                let reason = match Some(val) == last_within[i] {
                    true => format!("oldest {reason}"),
                    false => reason.to_string(),
                };
                last_within[i] = Some(val);
                reasons.push(format!("{reason} {w}"));
            }
        }
        out.push(Decision {
            id: s.id,
            keep: !reasons.is_empty(),
            reasons,
        });
    }
    out
}

/// How snapshots are grouped before the policy is applied to each group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupBy {
    pub host: bool,
    pub source: bool,
    pub tags: bool,
}

impl Default for GroupBy {
    /// Host and source, as restic's host and paths.
    fn default() -> GroupBy {
        GroupBy {
            host: true,
            source: true,
            tags: false,
        }
    }
}

impl FromStr for GroupBy {
    type Err = Error;
    /// `host,source` (the default), any of `host`, `source`, `tags` joined by commas, or
    /// `""`: one group of all snapshots.
    fn from_str(s: &str) -> Result<GroupBy> {
        let mut g = GroupBy {
            host: false,
            source: false,
            tags: false,
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part {
                "host" => g.host = true,
                "source" | "paths" => g.source = true,
                "tags" => g.tags = true,
                other => {
                    return Err(Error::InvalidInput(format!(
                        "group by {other:?}: give host, source or tags, joined by commas"
                    )))
                }
            }
        }
        Ok(g)
    }
}

/// What to forget.
#[derive(Clone, Debug, Default)]
pub struct ForgetOptions {
    /// Snapshots to remove by id (prefixes, or `latest`); the policy is then not used.
    pub snapshots: Vec<String>,
    pub policy: Policy,
    /// Only snapshots of these hosts (all when empty).
    pub hosts: Vec<String>,
    /// Only snapshots that have every tag of one of these comma-separated lists.
    pub tags: Vec<String>,
    pub group_by: GroupBy,
    /// Decide and report, change nothing.
    pub dry_run: bool,
    /// This host's state directory: the removed snapshots leave its record first.
    pub state: Option<StateDir>,
}

/// One snapshot in a forget report.
#[derive(Clone, Debug, Serialize)]
pub struct ForgetItem {
    pub id: String,
    /// Unix seconds.
    pub time: i64,
    /// The time in this machine's time zone, in which the policy buckets it.
    pub local_time: String,
    pub hostname: String,
    pub source: String,
    pub tags: Vec<String>,
    pub keep: bool,
    /// Why it is kept: the rules, or `hold`.
    pub reasons: Vec<String>,
}

/// The snapshots of one group, newest first.
#[derive(Clone, Debug, Serialize)]
pub struct ForgetGroup {
    pub host: Option<String>,
    pub source: Option<String>,
    pub tags: Option<Vec<String>>,
    pub snapshots: Vec<ForgetItem>,
}

/// What [`forget`] did (or, dry, would do).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ForgetReport {
    pub dry_run: bool,
    /// The policy in words (`keep 7 daily snapshots`); empty for ids.
    pub policy: String,
    pub groups: Vec<ForgetGroup>,
    /// Ids of the snapshots removed (to be removed, dry).
    pub removed: Vec<String>,
    /// Ids named for removal that are under legal hold and stay.
    pub held: Vec<String>,
    /// The forget record written, `forgotten/<id>`.
    pub record: Option<String>,
    /// The record is a request: this host is append-only, and the snapshots stay until
    /// the maintenance host's `prune --apply-requests`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub requested: bool,
    pub warnings: Vec<String>,
}

/// Applies `opts` to the snapshots of `repo` and removes those it does not keep (see
/// the module's documentation for the order of writes).
pub fn forget(repo: &Repository, opts: &ForgetOptions) -> Result<ForgetReport> {
    let has_policy = !opts.policy.is_empty();
    if opts.snapshots.is_empty() && !has_policy {
        return Err(Error::InvalidInput(
            "no policy given: nothing is removed (give --keep-* rules, or snapshot ids)".into(),
        ));
    }
    if !opts.snapshots.is_empty() && has_policy {
        return Err(Error::InvalidInput(
            "give snapshot ids or a policy, not both".into(),
        ));
    }
    let tz = TimeZone::system();
    let mut rep = ForgetReport {
        dry_run: opts.dry_run,
        ..Default::default()
    };
    let remove = if !opts.snapshots.is_empty() {
        forget_named(repo, opts, &tz, &mut rep)?
    } else {
        forget_by_policy(repo, opts, &tz, &mut rep)?
    };
    rep.removed = remove.iter().map(Id::to_hex).collect();
    if opts.dry_run {
        return Ok(rep);
    }
    let (record, warnings) = remove_snapshots(repo, &remove, opts.state.as_ref())?;
    rep.requested = repo.append_only() && !remove.is_empty();
    rep.record = record;
    rep.warnings.extend(warnings);
    Ok(rep)
}

/// A snapshot as the report lists it.
fn report_item(s: &Snapshot, keep: bool, reasons: Vec<String>, tz: &TimeZone) -> ForgetItem {
    ForgetItem {
        id: s.id.to_hex(),
        time: s.time,
        local_time: timestamp(s)
            .to_zoned(tz.clone())
            .strftime("%Y-%m-%d %H:%M:%S")
            .to_string(),
        hostname: s.hostname.clone(),
        source: s.source.clone(),
        tags: s.tags.clone(),
        keep,
        reasons,
    }
}

/// The snapshots named by id, in one group: those to remove (all but the held ones).
fn forget_named(
    repo: &Repository,
    opts: &ForgetOptions,
    tz: &TimeZone,
    rep: &mut ForgetReport,
) -> Result<Vec<Id>> {
    let mut remove = Vec::new();
    let mut items = Vec::new();
    let mut seen = BTreeSet::new();
    for which in &opts.snapshots {
        let s = repo.find_snapshot(which)?;
        if !seen.insert(s.id) {
            continue;
        }
        let held = s.tags.iter().any(|t| t == HOLD_TAG);
        if held {
            rep.held.push(s.id.to_hex());
            items.push(report_item(&s, true, vec![HOLD_TAG.into()], tz));
        } else {
            remove.push(s.id);
            items.push(report_item(&s, false, Vec::new(), tz));
        }
    }
    rep.groups.push(ForgetGroup {
        host: None,
        source: None,
        tags: None,
        snapshots: items,
    });
    Ok(remove)
}

/// A group's key: host, source and tags, each when the snapshots are grouped by it.
type GroupKey = (Option<String>, Option<String>, Option<Vec<String>>);

/// The policy applied to each group of snapshots: those to remove.
fn forget_by_policy(
    repo: &Repository,
    opts: &ForgetOptions,
    tz: &TimeZone,
    rep: &mut ForgetReport,
) -> Result<Vec<Id>> {
    rep.policy = opts.policy.to_string();
    let snaps = repo.snapshots()?;
    for d in &snaps.damaged {
        rep.warnings.push(format!(
            "{}: {} (left alone: run `mailvault check`)",
            d.path, d.error
        ));
    }
    let mut remove = Vec::new();
    let now = Timestamp::now();
    for ((host, source, tags), list) in group_snapshots(snaps.list, opts) {
        let decisions = apply_at(&list, &opts.policy, tz, now);
        if decisions.iter().all(|d| !d.keep) {
            return Err(Error::InvalidInput(format!(
                "refusing to remove every snapshot of the group host {}, source {}: the policy keeps none of them",
                host.as_deref().unwrap_or("(any)"),
                source.as_deref().unwrap_or("(any)")
            )));
        }
        let by_id: BTreeMap<Id, &Snapshot> = list.iter().map(|s| (s.id, s)).collect();
        let mut items = Vec::new();
        for d in decisions {
            let Some(s) = by_id.get(&d.id) else { continue };
            if !d.keep {
                remove.push(d.id);
            }
            items.push(report_item(s, d.keep, d.reasons, tz));
        }
        rep.groups.push(ForgetGroup {
            host,
            source,
            tags,
            snapshots: items,
        });
    }
    Ok(remove)
}

/// The snapshots the options select (hosts, tags), grouped as they ask.
fn group_snapshots(list: Vec<Snapshot>, opts: &ForgetOptions) -> BTreeMap<GroupKey, Vec<Snapshot>> {
    let mut groups: BTreeMap<GroupKey, Vec<Snapshot>> = BTreeMap::new();
    for s in list {
        if !opts.hosts.is_empty() && !opts.hosts.contains(&s.hostname) {
            continue;
        }
        if !opts.tags.is_empty() && !opts.tags.iter().any(|l| has_tag_list(&s.tags, l)) {
            continue;
        }
        let g = opts.group_by;
        let mut tags = s.tags.clone();
        tags.sort();
        let key = (
            g.host.then(|| s.hostname.clone()),
            g.source.then(|| s.source.clone()),
            g.tags.then_some(tags),
        );
        groups.entry(key).or_default().push(s);
    }
    groups
}

/// Removes the snapshot files `ids` on purpose: takes them out of this host's record
/// (`state`), writes a forget record listing them and makes it durable, then deletes the
/// files (one already gone is fine: a forget running at the same time) and makes that
/// durable. Returns the forget record's path and the warnings of this host's record.
/// Killed after the record, the snapshots are still there, listed as forgotten: running
/// the command again removes them. On an append-only host the record is a request and
/// nothing else changes (see the module's docs).
pub fn remove_snapshots(
    repo: &Repository,
    ids: &[Id],
    state: Option<&StateDir>,
) -> Result<(Option<String>, Vec<String>)> {
    if ids.is_empty() {
        return Ok((None, Vec::new()));
    }
    repo.refuse_if_migrating()?;
    let requested = repo.append_only();
    let mut warnings = Vec::new();
    // Asked for already (a nightly policy asks for the same snapshots until the
    // maintenance host applies it): asked for once.
    let pending: BTreeSet<String> = match requested {
        true => (crate::repo::forgotten::requests(repo)?.0.into_iter())
            .flat_map(|(_, r)| r.snapshots)
            .collect(),
        false => BTreeSet::new(),
    };
    let ids: Vec<Id> = (ids.iter())
        .filter(|id| !pending.contains(&id.to_hex()))
        .copied()
        .collect();
    if ids.is_empty() {
        return Ok((None, warnings));
    }
    let ids = &ids[..];
    if let Some(state) = state.filter(|_| !requested) {
        let mut record = Record::of(state, repo);
        record.forget(ids);
        record.save();
        warnings.extend(record.take_warnings());
    }
    let rec = ForgetRecord {
        hostname: crate::hostname(),
        time: crate::now_unix(),
        snapshots: ids.iter().map(Id::to_hex).collect(),
        requested,
    };
    let json =
        serde_json::to_vec(&rec).map_err(|e| Error::corrupt("forget record", e.to_string()))?;
    let (id, sealed) = repo.seal_named(Named::Forgotten, &json);
    let path = format!("{FORGOTTEN_DIR}{id}");
    let store = repo.store();
    crate::store::put_content_named(store, &path, &sealed)?;
    store.flush()?;
    if requested {
        return Ok((Some(path), warnings));
    }
    // With Object Lock, a snapshot file under S3 legal hold (a held snapshot's, replaced by
    // `tag`) loses the hold as it goes: a hidden version under hold would stay for ever.
    let lock = repo.object_lock().ok().flatten();
    for id in ids {
        if let Some((l, _)) = lock {
            match l.legal_hold(&Snapshot::path(id), false) {
                Ok(()) | Err(Error::NotFound(_)) => {}
                Err(e) => {
                    warnings.push(format!("{}: its legal hold stays: {e}", Snapshot::path(id)))
                }
            }
        }
        match store.delete(&Snapshot::path(id)) {
            Ok(()) | Err(Error::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    store.flush()?;
    Ok((Some(path), warnings))
}

/// What a prune did with the forget requests of append-only hosts.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RequestsApplied {
    /// Snapshots removed as requested.
    pub applied: Vec<String>,
    /// Snapshots requested and still there, each with why (`id: reason`).
    pub waiting: Vec<String>,
    /// Request records done with (every snapshot they name gone), deleted.
    pub records_removed: u64,
    pub warnings: Vec<String>,
}

/// Applies the forget requests in the repository (with `apply`; else only says what
/// waits): removes each requested snapshot but those under legal hold and the newest of
/// its host and source, which wait (a later prune applies a request once a newer
/// snapshot exists). A request whose snapshots are all gone is deleted. Called by prune
/// under its exclusive lock; never on an append-only host.
pub fn apply_requests(repo: &Repository, apply: bool) -> Result<RequestsApplied> {
    repo.refuse_if_append_only("applying forget requests")?;
    let mut out = RequestsApplied::default();
    let (requests, warnings) = crate::repo::forgotten::requests(repo)?;
    out.warnings = warnings;
    if requests.is_empty() {
        return Ok(out);
    }
    let snaps = repo.snapshots()?.list;
    let mut newest: BTreeMap<(&str, &str), &Snapshot> = BTreeMap::new();
    for s in &snaps {
        let n = newest.entry((&s.hostname, &s.source)).or_insert(s);
        if (s.time, s.id) > (n.time, n.id) {
            *n = s;
        }
    }
    let by_id: BTreeMap<Id, &Snapshot> = snaps.iter().map(|s| (s.id, s)).collect();
    let mut remove = BTreeSet::new();
    let mut done = Vec::new();
    for (path, r) in &requests {
        let mut all_gone = true;
        for h in &r.snapshots {
            let Some(s) = Id::from_hex(h).and_then(|id| by_id.get(&id)) else {
                continue;
            };
            let why = if s.tags.iter().any(|t| t == HOLD_TAG) {
                Some("under legal hold")
            } else if newest[&(s.hostname.as_str(), s.source.as_str())].id == s.id {
                Some("the newest snapshot of its host and source")
            } else if !apply {
                Some("not applied without --apply-requests")
            } else {
                None
            };
            match why {
                Some(why) => {
                    all_gone = false;
                    let line = format!("{}: {why} (asked by {})", s.id.to_hex(), r.hostname);
                    if !out.waiting.contains(&line) {
                        out.waiting.push(line);
                    }
                }
                None => {
                    remove.insert(s.id);
                }
            }
        }
        if all_gone {
            done.push(path.clone());
        }
    }
    let remove: Vec<Id> = remove.into_iter().collect();
    let (_, warnings) = remove_snapshots(repo, &remove, None)?;
    out.warnings.extend(warnings);
    out.applied = remove.iter().map(Id::to_hex).collect();
    if apply {
        for path in done {
            match repo.store().delete(&path) {
                Ok(()) | Err(Error::NotFound(_)) => out.records_removed += 1,
                Err(e) => return Err(e),
            }
        }
        repo.store().flush()?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
