//! The metrics file (`--metrics-file PATH`): at the end of every command, success or
//! failure, a file in Prometheus' text format for node_exporter's textfile collector.
//!
//! Every series is a gauge labelled `command`, `profile` (empty outside `run`), `source`
//! (empty for the command as a whole) and `repository` (the location, without user
//! information). The collector replaces a textfile whole, so the series of the previous
//! file are kept and only those this run writes again are replaced: backup, run and prune
//! series live side by side, and a failed run leaves `mailvault_last_success_timestamp_
//! seconds` of the last successful one in place (alert on its age). The file is written to
//! a temporary file in the same directory and renamed over the old one, under a lock
//! (`PATH.lock`) so that two commands ending together both keep their series.

use mailvault_core::ops::backup::BackupReport;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The gauges written, with their help text.
const HELP: &[(&str, &str)] = &[
    (
        "mailvault_added_bytes",
        "Bytes the last run added to the repository.",
    ),
    (
        "mailvault_duration_seconds",
        "Wall time of the last run, in seconds.",
    ),
    (
        "mailvault_errors",
        "Errors of the last run: failed items, failed sources and steps, a fatal error.",
    ),
    (
        "mailvault_items",
        "Messages in the snapshot of the last run (new, unchanged and failed).",
    ),
    (
        "mailvault_last_run_timestamp_seconds",
        "When the last run ended, in seconds since the Unix epoch.",
    ),
    (
        "mailvault_last_success_timestamp_seconds",
        "When the last successful run ended, in seconds since the Unix epoch.",
    ),
    (
        "mailvault_read_bytes",
        "Bytes the last run read from the mail store.",
    ),
    (
        "mailvault_repository_bytes",
        "Size of all files in the repository after the last run.",
    ),
    (
        "mailvault_success",
        "1 when the last run succeeded, else 0.",
    ),
];

/// What one source of a backup counted.
#[derive(Clone, Debug, Default)]
pub struct SourceFigures {
    pub source: String,
    pub ok: bool,
    pub items: u64,
    pub read_bytes: u64,
    pub added_bytes: u64,
    pub errors: u64,
    pub duration_secs: f64,
}

impl SourceFigures {
    /// The figures of a backup report (ok when no item failed).
    pub fn of(source: &str, r: &BackupReport) -> SourceFigures {
        SourceFigures {
            source: source.to_string(),
            ok: r.items_failed == 0,
            items: r.items_total,
            read_bytes: r.bytes_read,
            added_bytes: r.bytes_added,
            errors: r.items_failed,
            duration_secs: r.elapsed_secs,
        }
    }

    /// A source whose backup failed as a whole.
    pub fn failed(source: &str) -> SourceFigures {
        SourceFigures {
            source: source.to_string(),
            errors: 1,
            ..SourceFigures::default()
        }
    }
}

/// What the command noted for its metrics while it ran.
#[derive(Default)]
struct Noted {
    profile: String,
    repository: Option<String>,
    file: Option<PathBuf>,
    sources: Vec<SourceFigures>,
    repository_bytes: Option<u64>,
    step_errors: u64,
}

static NOTED: Mutex<Noted> = Mutex::new(Noted {
    profile: String::new(),
    repository: None,
    file: None,
    sources: Vec::new(),
    repository_bytes: None,
    step_errors: 0,
});

fn noted() -> std::sync::MutexGuard<'static, Noted> {
    NOTED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The profile this command runs (`run --profile`), and the metrics file it names.
pub fn note_profile(name: &str, file: Option<PathBuf>) {
    let mut n = noted();
    n.profile = name.to_string();
    n.file = file;
}

/// The repository the command used, when it is not the one of the flags (a profile's).
pub fn note_repository(location: &str) {
    noted().repository = Some(location.to_string());
}

/// The metrics file a profile named, if any.
pub fn profile_file() -> Option<PathBuf> {
    noted().file.clone()
}

/// One source's figures (a backup).
pub fn note_source(f: SourceFigures) {
    noted().sources.push(f);
}

/// The repository's size, when the command learnt it.
pub fn note_repository_bytes(n: u64) {
    noted().repository_bytes = Some(n);
}

/// Errors of the command outside its sources (a step of `run` that failed).
pub fn note_errors(n: u64) {
    noted().step_errors += n;
}

/// How a command ended.
pub struct Ending<'a> {
    pub command: &'a str,
    /// The repository location of the flags (user information is removed here); one a
    /// profile named wins.
    pub repository: Option<&'a str>,
    /// Finished with nothing failed.
    pub ok: bool,
    /// Ended with an error (exit code 2).
    pub fatal: bool,
    pub duration_secs: f64,
    /// Seconds since the Unix epoch.
    pub now: f64,
}

/// Writes the metrics of this command into `path`, keeping the series of other commands,
/// profiles, sources and repositories that the file held.
pub fn write(path: &Path, end: &Ending) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut lock_name = path.as_os_str().to_owned();
    lock_name.push(".lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_name)?;
    lock.lock()?;
    let old = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let text = render(&old, &series(end, &noted()));
    let mut tmp = tempfile::Builder::new()
        .prefix(".mailvault-metrics-")
        .tempfile_in(&dir)?;
    tmp.write_all(text.as_bytes())?;
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// One sample: metric name, rendered labels, value.
type Sample = (&'static str, String, String);

/// This command's samples.
fn series(end: &Ending, n: &Noted) -> Vec<Sample> {
    let repository = n
        .repository
        .as_deref()
        .or(end.repository)
        .map(|r| crate::output::redact(r).into_owned())
        .unwrap_or_default();
    let labels = |source: &str| {
        let mut s = String::new();
        for (i, (k, v)) in [
            ("command", end.command),
            ("profile", n.profile.as_str()),
            ("source", source),
            ("repository", repository.as_str()),
        ]
        .into_iter()
        .enumerate()
        {
            let _ = write!(
                s,
                "{}{k}=\"{}\"",
                if i > 0 { "," } else { "" },
                mailvault_core::report::prometheus_label(v)
            );
        }
        s
    };
    let mut out: Vec<Sample> = Vec::new();
    let now = end.now.to_string();
    for f in &n.sources {
        let l = labels(&f.source);
        if f.ok {
            out.push((
                "mailvault_last_success_timestamp_seconds",
                l.clone(),
                now.clone(),
            ));
        }
        out.push(("mailvault_success", l.clone(), u64::from(f.ok).to_string()));
        out.push(("mailvault_items", l.clone(), f.items.to_string()));
        out.push(("mailvault_read_bytes", l.clone(), f.read_bytes.to_string()));
        out.push((
            "mailvault_added_bytes",
            l.clone(),
            f.added_bytes.to_string(),
        ));
        out.push(("mailvault_errors", l.clone(), f.errors.to_string()));
        out.push(("mailvault_duration_seconds", l, f.duration_secs.to_string()));
    }
    let l = labels("");
    let errors =
        n.sources.iter().map(|f| f.errors).sum::<u64>() + n.step_errors + u64::from(end.fatal);
    let ok = end.ok && !end.fatal && errors == 0;
    if ok {
        out.push((
            "mailvault_last_success_timestamp_seconds",
            l.clone(),
            now.clone(),
        ));
    }
    out.push(("mailvault_last_run_timestamp_seconds", l.clone(), now));
    out.push(("mailvault_success", l.clone(), u64::from(ok).to_string()));
    out.push(("mailvault_errors", l.clone(), errors.to_string()));
    out.push((
        "mailvault_duration_seconds",
        l.clone(),
        end.duration_secs.to_string(),
    ));
    if let Some(b) = n.repository_bytes {
        out.push(("mailvault_repository_bytes", l, b.to_string()));
    }
    out
}

/// The file: the old file's samples that this run does not write again, and this run's,
/// grouped by metric (each under its HELP and TYPE lines), sorted.
fn render(old: &str, new: &[Sample]) -> String {
    let mut by_name: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for line in old.lines() {
        if let Some((name, labels, value)) = parse_sample(line) {
            by_name
                .entry(name.to_string())
                .or_default()
                .insert(labels.to_string(), value.to_string());
        }
    }
    for (name, labels, value) in new {
        by_name
            .entry(name.to_string())
            .or_default()
            .insert(labels.clone(), value.clone());
    }
    let mut out = String::new();
    for (name, samples) in &by_name {
        let help = HELP
            .iter()
            .find(|(n, _)| n == name)
            .map_or("mailvault metric.", |(_, h)| h);
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
    out
}

/// A sample line of a file this module wrote: `name{labels} value`; `None` for comments
/// and anything else. Label values may hold `}` and escaped quotes: the closing brace is
/// the first one outside a quoted value.
fn parse_sample(line: &str) -> Option<(&str, &str, &str)> {
    let line = line.trim();
    if line.starts_with('#') || line.is_empty() {
        return None;
    }
    let open = line.find('{')?;
    let name = &line[..open];
    if name.is_empty()
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
    {
        return None;
    }
    let (mut quoted, mut escaped) = (false, false);
    for (i, c) in line[open + 1..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '}' if !quoted => {
                let close = open + 1 + i;
                let value = line[close + 1..].trim();
                return (!value.is_empty()).then(|| (name, &line[open + 1..close], value));
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_information_is_removed() {
        assert_eq!(
            crate::output::redact("s3:https://AK:SECRET@s3.example.org/b/p"),
            "s3:https://s3.example.org/b/p"
        );
        assert_eq!(crate::output::redact("/srv/a@b/repo"), "/srv/a@b/repo");
        assert_eq!(
            crate::output::redact("s3:http://h:9000/b@x"),
            "s3:http://h:9000/b@x"
        );
    }

    #[test]
    fn samples_with_braces_and_quotes_parse_back() {
        let line =
            r#"mailvault_items{command="backup",profile="",source="/m/a}\"b",repository="r"} 12"#;
        let (name, labels, value) = parse_sample(line).unwrap();
        assert_eq!(name, "mailvault_items");
        assert_eq!(
            labels,
            r#"command="backup",profile="",source="/m/a}\"b",repository="r""#
        );
        assert_eq!(value, "12");
        assert_eq!(parse_sample("# TYPE x gauge"), None);
    }

    #[test]
    fn other_series_are_kept_and_this_runs_replaced() {
        let end = |command, ok| Ending {
            command,
            repository: Some("/r"),
            ok,
            fatal: !ok,
            duration_secs: 1.5,
            now: 100.0,
        };
        let n = Noted::default();
        let first = render("", &series(&end("prune", true), &n));
        let second = render(&first, &series(&end("backup", true), &n));
        assert!(
            second.contains(
                r#"mailvault_success{command="prune",profile="",source="",repository="/r"} 1"#
            ),
            "{second}"
        );
        assert!(
            second.contains(
                r#"mailvault_success{command="backup",profile="",source="",repository="/r"} 1"#
            ),
            "{second}"
        );
        // A failure keeps the last success time and says it failed.
        let later = Ending {
            now: 200.0,
            ..end("backup", false)
        };
        let third = render(&second, &series(&later, &n));
        assert!(third.contains(r#"mailvault_last_success_timestamp_seconds{command="backup",profile="",source="",repository="/r"} 100"#), "{third}");
        assert!(third.contains(r#"mailvault_last_run_timestamp_seconds{command="backup",profile="",source="",repository="/r"} 200"#), "{third}");
        assert!(
            third.contains(
                r#"mailvault_success{command="backup",profile="",source="",repository="/r"} 0"#
            ),
            "{third}"
        );
        assert_eq!(third.matches("# TYPE mailvault_success gauge").count(), 1);
    }
}
