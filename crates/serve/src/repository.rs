//! The repository's page (`/repository`, `/api/v1/repository`) and `/metrics`, for the
//! admin: per source (host and source label) its last backup, that backup's age and
//! result, marked stale when older than `--stale-after`; per snapshot, over time, what
//! each backup recorded (messages, new messages, bytes added, duration, failed items),
//! drawn as inline SVG bar charts (no script, nothing loaded). Everything comes from the
//! snapshot files (their summaries): no tree is read.

use mailvault_core::report::prometheus_label as label;
use mailvault_core::{Repository, Result};
use maud::{html, Markup};
use serde::Serialize;
use std::collections::BTreeMap;

/// The last backup of one source.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct SourceRow {
    pub hostname: String,
    pub source: String,
    /// Its snapshots in the repository.
    pub snapshots: usize,
    pub last_snapshot: String,
    /// Unix seconds.
    pub last_time: i64,
    /// Seconds since the last backup.
    pub age_secs: i64,
    /// Older than the server's threshold.
    pub stale: bool,
    /// Items the last backup could not take (0: it succeeded whole).
    pub failed: u64,
    pub messages: u64,
    pub bytes: u64,
    /// How long the last backup took, in seconds.
    pub elapsed_secs: f64,
}

/// What one backup recorded.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Point {
    pub id: String,
    pub time: i64,
    pub hostname: String,
    pub source: String,
    pub messages: u64,
    pub messages_new: u64,
    pub bytes: u64,
    pub bytes_added: u64,
    pub elapsed_secs: f64,
    pub failed: u64,
    /// Bytes read per new byte of content, and new content's bytes per byte stored
    /// (null for a backup that stored nothing new, or made before they were kept).
    pub dedup_ratio: Option<f64>,
    pub compression_ratio: Option<f64>,
}

/// The repository's page.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Overview {
    pub sources: Vec<SourceRow>,
    /// Every snapshot, oldest first.
    pub snapshots: Vec<Point>,
    pub stale_after_secs: u64,
}

/// The overview at `now` (Unix seconds), a source stale when its last backup is older
/// than `stale_after`.
pub fn overview(repo: &Repository, now: i64, stale_after: std::time::Duration) -> Result<Overview> {
    let mut list = repo.snapshots()?.list;
    list.sort_by_key(|s| (s.time, s.time_nanos));
    let snapshots: Vec<Point> = (list.iter())
        .map(|s| Point {
            id: s.id.to_hex(),
            time: s.time,
            hostname: s.hostname.clone(),
            source: s.source.clone(),
            messages: s.summary.messages,
            messages_new: s.summary.messages_new,
            bytes: s.summary.bytes,
            bytes_added: s.summary.bytes_added,
            elapsed_secs: s.summary.elapsed_secs,
            failed: s.summary.failed,
            dedup_ratio: s.summary.dedup_ratio,
            compression_ratio: s.summary.compression_ratio,
        })
        .collect();
    let mut by_source: BTreeMap<(String, String), (usize, &Point)> = BTreeMap::new();
    for p in &snapshots {
        let e = (by_source.entry((p.hostname.clone(), p.source.clone()))).or_insert((0, p));
        e.0 += 1;
        // Oldest first: the last one seen is the newest.
        e.1 = p;
    }
    let limit = i64::try_from(stale_after.as_secs()).unwrap_or(i64::MAX);
    let sources = (by_source.into_iter())
        .map(|((hostname, source), (n, p))| SourceRow {
            hostname,
            source,
            snapshots: n,
            last_snapshot: p.id.clone(),
            last_time: p.time,
            age_secs: now - p.time,
            stale: now - p.time >= limit,
            failed: p.failed,
            messages: p.messages,
            bytes: p.bytes,
            elapsed_secs: p.elapsed_secs,
        })
        .collect();
    Ok(Overview {
        sources,
        snapshots,
        stale_after_secs: stale_after.as_secs(),
    })
}

/// An age as people say it: `3 h`, `2 d 4 h`.
pub fn age(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86400 => format!("{} h", s / 3600),
        _ => format!("{} d {} h", s / 86400, s % 86400 / 3600),
    }
}

/// The snapshots charted at most (the newest).
pub const CHARTED: usize = 60;

/// A bar chart of `values` (oldest first), each bar titled with its label: inline SVG,
/// coloured by the stylesheet (`svg.chart rect`), nothing scripted.
pub fn bar_chart(title: &str, values: &[(String, f64)]) -> Markup {
    let (w, h) = (600.0, 120.0);
    let max = values.iter().map(|v| v.1).fold(0.0_f64, f64::max);
    let n = values.len().max(1) as f64;
    let bar = w / n;
    html! {
        figure.chart {
            figcaption { (title) }
            svg.chart viewBox=(format!("0 0 {w} {h}")) role="img" aria-label=(title) preserveAspectRatio="none" {
                @for (i, (label, v)) in values.iter().enumerate() {
                    @let height = if max > 0.0 { v / max * (h - 2.0) } else { 0.0 };
                    rect x=(format!("{:.2}", i as f64 * bar + bar * 0.1)) y=(format!("{:.2}", h - height))
                        width=(format!("{:.2}", bar * 0.8)) height=(format!("{height:.2}")) {
                        title { (label) }
                    }
                }
            }
        }
    }
}

/// A gauge per source: its name, help text and value.
type Gauge = (&'static str, &'static str, fn(&SourceRow) -> f64);

/// The bytes the repository's packs hold, by kind of blob (message contents, trees), as
/// its index lists them: no object is listed or read.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stored {
    pub data: u64,
    pub trees: u64,
}

/// What `repo`'s index says its packs hold.
pub fn stored(repo: &Repository) -> Stored {
    let (data, trees) = repo.index().stored();
    Stored { data, trees }
}

/// Prometheus' text format of the overview: the repository's snapshots and stored bytes,
/// then per source, gauges labelled `hostname` and `source`.
/// (`jobs`: the restore jobs kept, by state.)
pub fn metrics(o: &Overview, stored: Stored, sessions: usize, jobs: &[(&str, usize)]) -> String {
    use std::fmt::Write as _;
    let name = "mailvault_repository_snapshots";
    let mut out = format!(
        "# HELP {name} Snapshots in the repository.\n# TYPE {name} gauge\n{name} {}\n",
        o.snapshots.len()
    );
    let name = "mailvault_repository_stored_bytes";
    let _ = writeln!(
        out,
        "# HELP {name} Bytes the repository's packs hold, by kind of blob (its index's count).\n\
         # TYPE {name} gauge\n{name}{{kind=\"data\"}} {}\n{name}{{kind=\"tree\"}} {}",
        stored.data, stored.trees
    );
    let gauges: [Gauge; 7] = [
        (
            "mailvault_source_snapshots",
            "Snapshots of the source in the repository.",
            |r| r.snapshots as f64,
        ),
        (
            "mailvault_source_last_backup_timestamp_seconds",
            "When the source's last backup was taken, in seconds since the Unix epoch.",
            |r| r.last_time as f64,
        ),
        (
            "mailvault_source_last_backup_failed_items",
            "Items the source's last backup could not take.",
            |r| r.failed as f64,
        ),
        (
            "mailvault_source_last_backup_messages",
            "Messages in the source's last snapshot.",
            |r| r.messages as f64,
        ),
        (
            "mailvault_source_last_backup_bytes",
            "Bytes of the messages in the source's last snapshot.",
            |r| r.bytes as f64,
        ),
        (
            "mailvault_source_last_backup_duration_seconds",
            "How long the source's last backup took.",
            |r| r.elapsed_secs,
        ),
        (
            "mailvault_source_stale",
            "1 when the source's last backup is older than serve's --stale-after.",
            |r| f64::from(u8::from(r.stale)),
        ),
    ];
    for (name, help, value) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for r in &o.sources {
            let _ = writeln!(
                out,
                "{name}{{hostname=\"{}\",source=\"{}\"}} {}",
                label(&r.hostname),
                label(&r.source),
                value(r)
            );
        }
    }
    let name = "mailvault_serve_sessions";
    let _ = writeln!(
        out,
        "# HELP {name} Sessions open in the web UI.\n# TYPE {name} gauge\n{name} {sessions}"
    );
    let name = "mailvault_serve_restore_jobs";
    let _ = writeln!(
        out,
        "# HELP {name} Restore jobs started from the web UI or the API and kept, by state.\n# TYPE {name} gauge"
    );
    for (state, n) in jobs {
        let _ = writeln!(out, "{name}{{state=\"{state}\"}} {n}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_labels() {
        assert_eq!(age(59), "59 s");
        assert_eq!(age(3_600 * 5 + 10), "5 h");
        assert_eq!(age(86_400 * 2 + 3_600 * 4), "2 d 4 h");
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
