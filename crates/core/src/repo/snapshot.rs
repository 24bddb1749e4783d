//! Snapshots: one sealed JSON object per backup. Format 1 names it by the BLAKE3 of its
//! file, format 2 by the keyed BLAKE3 of its JSON, bound into its seal (`crate::repo`).

use crate::error::{Error, Result};
use crate::repo::format::Version;
use crate::repo::id::Id;
use serde::{Deserialize, Serialize};

/// A finished backup.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// Set from the file name when loaded; not stored.
    #[serde(skip)]
    pub id: Id,
    /// The repository's format number (set when saved).
    pub version: u32,
    /// Unix seconds when the backup started.
    pub time: i64,
    /// Nanoseconds within that second, so two backups in one second keep their order.
    #[serde(default)]
    pub time_nanos: u32,
    pub hostname: String,
    /// The source as the user gave it: `maildir:/var/vmail`.
    pub source: String,
    #[serde(default)]
    pub tags: Vec<String>,
    /// The snapshot used to skip unchanged messages, if any.
    pub parent: Option<Id>,
    pub root: Id,
    pub summary: SnapshotSummary,
    /// Set on a snapshot written by `repair snapshots`: the id of the damaged snapshot it
    /// replaces (whose unrestorable messages it leaves out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<Id>,
    /// This host's clock when the backup started, before any folder was looked at (not
    /// `time`, which `backup --time` sets): the next backup's proof that a folder or file
    /// did not change compares the times it recorded with it
    /// ([`crate::source::unchanged`]). Absent in older snapshots (nothing is proven then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<crate::repo::tree::Timestamp>,
}

/// Totals kept in the snapshot for `snapshots` and `stats`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SnapshotSummary {
    pub accounts: u64,
    pub folders: u64,
    pub messages: u64,
    pub bytes: u64,
    pub messages_new: u64,
    pub bytes_added: u64,
    pub failed: u64,
    pub elapsed_secs: f64,
    /// Bytes read from the store per new byte of content (the backup report's
    /// `dedup_ratio`); absent in older snapshots and when nothing new was stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_ratio: Option<f64>,
    /// New content's bytes per byte stored for them (the report's `compression_ratio`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_ratio: Option<f64>,
}

impl Snapshot {
    pub fn path(id: &Id) -> String {
        format!("snapshots/{}", id.to_hex())
    }

    /// Reads a snapshot's JSON (the opened content of `path`) in a repository of format
    /// `format`, whose number the snapshot's `version` must be; the id is left unset.
    pub fn from_json(json: &[u8], format: Version, path: &str) -> Result<Snapshot> {
        let s: Snapshot =
            serde_json::from_slice(json).map_err(|e| Error::corrupt(path, e.to_string()))?;
        if s.version != format.number() {
            return Err(Error::corrupt(
                path,
                format!(
                    "snapshot version {} in a format-{format} repository",
                    s.version
                ),
            ));
        }
        Ok(s)
    }
}

/// Parses a snapshot time given by the user (`backup --time`): `YYYY-MM-DD HH:MM:SS` in
/// this machine's time zone (as restic), or RFC 3339 with an offset
/// (`2026-11-24T05:00:00+01:00`, `...Z`). Returns Unix seconds and nanoseconds.
pub fn parse_time(s: &str) -> Result<(i64, u32)> {
    parse_time_in(s, &jiff::tz::TimeZone::system())
}

/// [`parse_time`] with local times in `tz`.
pub fn parse_time_in(s: &str, tz: &jiff::tz::TimeZone) -> Result<(i64, u32)> {
    let t = s.trim();
    let ts = match t.parse::<jiff::Timestamp>() {
        Ok(ts) => Ok(ts),
        Err(_) => jiff::civil::DateTime::strptime("%Y-%m-%d %H:%M:%S", t)
            .and_then(|dt| dt.to_zoned(tz.clone()))
            .map(|z| z.timestamp()),
    }
    .map_err(|e| {
        Error::InvalidInput(format!(
            "time {s:?} is not a time: write \"YYYY-MM-DD HH:MM:SS\" (local time) or RFC 3339 with an offset, \"2026-11-24T05:00:00+01:00\" ({e})"
        ))
    })?;
    let (secs, nanos) = (ts.as_second(), ts.subsec_nanosecond());
    Ok(match nanos < 0 {
        true => (secs - 1, (nanos + 1_000_000_000) as u32),
        false => (secs, nanos as u32),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_in_local_time_or_with_an_offset() {
        let berlin = jiff::tz::TimeZone::get("Europe/Berlin").unwrap();
        // 2025-04-25 11:00 in Berlin (summer time) is 09:00 UTC.
        assert_eq!(
            parse_time_in("2025-04-25 11:00:00", &berlin).unwrap(),
            (1_745_571_600, 0)
        );
        assert_eq!(
            parse_time_in("2025-04-25 09:00:00", &jiff::tz::TimeZone::UTC).unwrap(),
            (1_745_571_600, 0)
        );
        for rfc in [
            "2025-04-25T09:00:00Z",
            "2025-04-25T11:00:00+02:00",
            "2025-04-25 11:00:00+02:00",
        ] {
            assert_eq!(
                parse_time_in(rfc, &berlin).unwrap(),
                (1_745_571_600, 0),
                "{rfc}"
            );
        }
        assert_eq!(
            parse_time_in("2025-04-25T09:00:00.25Z", &berlin).unwrap(),
            (1_745_571_600, 250_000_000)
        );
        for bad in [
            "",
            "yesterday",
            "2025-04-25",
            "2025-13-01 00:00:00",
            "2025-04-25 25:00:00",
            "25.04.2025 11:00:00",
            "2025-04-25T11:00:00",
        ] {
            match parse_time_in(bad, &berlin) {
                Err(Error::InvalidInput(m)) => assert!(m.contains("YYYY-MM-DD HH:MM:SS"), "{m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
