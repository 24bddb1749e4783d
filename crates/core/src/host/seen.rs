//! This host's record of each repository it uses: the snapshots it has seen there, the ones
//! it removed itself, and the highest repository format version it has seen. Nothing inside
//! a repository shows that someone deleted snapshot files or put back an older copy of the
//! repository or of its config; a record kept on the host does. `check` reports snapshots
//! this host saw that are gone (a rollback: `check` reports it as damage),
//! `backup` and `snapshots` warn about them (except those a forget record in the
//! repository lists, [`Record::observe_in`]), and a repository whose config says a lower format
//! version than this host has seen is refused ([`StateDir::check_format`], called by the
//! CLI once the repository is open: the library reads no host state on its own).
//!
//! One small JSON file per repository, named by the config's `id`:
//! `<state>/repositories/<id>.json`, where `<state>` is `$MAILVAULT_STATE_DIR`, else
//! `$XDG_STATE_HOME/mailvault`, else `$HOME/.local/state/mailvault` (docs/format.md, *Local
//! state: the snapshot record*). The record never makes a command fail: one that cannot be
//! read is replaced and one that cannot be written is left as it is, each with a warning.

use crate::error::{Error, Result};
use crate::repo::id::Id;
use crate::repo::{file_id, Repository, Snapshots};
use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The version of the record's JSON this code writes and reads.
pub const RECORD_VERSION: u32 = 1;

/// The environment variable that overrides where records are kept (tests set it).
pub const STATE_DIR_ENV: &str = "MAILVAULT_STATE_DIR";

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// Where this host keeps its records: `<dir>/repositories/<id>.json`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateDir(PathBuf);

impl StateDir {
    pub fn new(dir: impl Into<PathBuf>) -> StateDir {
        StateDir(dir.into())
    }

    /// `$MAILVAULT_STATE_DIR`, else `$XDG_STATE_HOME/mailvault` (an absolute path, as the
    /// XDG spec wants), else `$HOME/.local/state/mailvault`; `None` when none is set.
    pub fn from_env() -> Option<StateDir> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        if let Some(d) = var(STATE_DIR_ENV) {
            return Some(StateDir(d));
        }
        var("XDG_STATE_HOME")
            .filter(|p| p.is_absolute())
            .or_else(|| var("HOME").map(|h| h.join(".local").join("state")))
            .map(|base| StateDir(base.join("mailvault")))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// The record of repository `repo_id`; `None` for an id that is not a plain hex string
    /// (it names a file).
    pub fn record_path(&self, repo_id: &str) -> Option<PathBuf> {
        let plain = !repo_id.is_empty()
            && repo_id.len() <= 64
            && repo_id.bytes().all(|b| b.is_ascii_hexdigit());
        plain.then(|| self.0.join("repositories").join(format!("{repo_id}.json")))
    }

    /// An error when this host has seen a higher format version for repository `repo_id`
    /// than `found`, the version its config says now: the config was replaced by an older
    /// one. A record that cannot be read says nothing (its warning comes from the commands
    /// that record).
    pub fn check_format(&self, repo_id: &str, found: u32) -> Result<()> {
        let Some(path) = self.record_path(repo_id) else {
            return Ok(());
        };
        match read(&path, repo_id) {
            Read::Ok(c) if c.format_version > found => Err(Error::FormatRollback {
                repository: repo_id.to_string(),
                seen: c.format_version,
                found,
            }),
            _ => Ok(()),
        }
    }
}

/// The snapshot ids named by paths in `snapshots/` (`snapshots/<id>`); other names are
/// skipped (they are no snapshot this host could have recorded).
pub fn ids_in<'a>(paths: impl IntoIterator<Item = &'a str>) -> Vec<Id> {
    paths.into_iter().filter_map(|p| file_id(p).ok()).collect()
}

/// The snapshots present in a listing: the readable ones and the damaged files alike (a
/// damaged snapshot is still there, not gone).
pub fn present(snaps: &Snapshots) -> Vec<Id> {
    let mut ids: Vec<Id> = snaps.list.iter().map(|s| s.id).collect();
    ids.extend(ids_in(snaps.damaged.iter().map(|d| d.path.as_str())));
    ids
}

/// The JSON of a record.
#[derive(Serialize, Deserialize)]
struct Stored {
    version: u32,
    repository: String,
    #[serde(default)]
    location: String,
    #[serde(default)]
    format_version: u32,
    #[serde(default)]
    snapshots: Vec<String>,
    #[serde(default)]
    removed: Vec<String>,
    #[serde(default)]
    updated: i64,
}

/// Only the version, read first: a newer record may have any other shape.
#[derive(Deserialize)]
struct Head {
    version: u32,
}

/// What a record holds.
#[derive(Clone, Debug, Default, PartialEq)]
struct Content {
    format_version: u32,
    snapshots: BTreeSet<Id>,
    removed: BTreeSet<Id>,
}

/// What reading a record file gave.
enum Read {
    Absent,
    Ok(Content),
    /// Not a record of this repository that this code can read: to be replaced.
    Invalid(String),
    /// Written by a newer mailvault: left alone.
    Newer(u32),
    /// The file is there but cannot be read: left alone.
    Io(io::Error),
}

fn read(path: &Path, repo_id: &str) -> Read {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        // No record yet, or not even its directory (a file in its place shows at save).
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Read::Absent
        }
        Err(e) => return Read::Io(e),
    };
    match serde_json::from_slice::<Head>(&bytes) {
        Ok(h) if h.version > RECORD_VERSION => return Read::Newer(h.version),
        Ok(_) => {}
        Err(e) => return Read::Invalid(format!("not a record: {e}")),
    }
    let s: Stored = match serde_json::from_slice(&bytes) {
        Ok(s) => s,
        Err(e) => return Read::Invalid(format!("not a record: {e}")),
    };
    if s.repository != repo_id {
        return Read::Invalid(format!("a record of another repository ({})", s.repository));
    }
    let ids =
        |v: &[String]| -> Option<BTreeSet<Id>> { v.iter().map(|h| Id::from_hex(h)).collect() };
    match (ids(&s.snapshots), ids(&s.removed)) {
        (Some(snapshots), Some(removed)) => Read::Ok(Content {
            format_version: s.format_version,
            snapshots,
            removed,
        }),
        _ => Read::Invalid("a snapshot id is not 64 hex digits".into()),
    }
}

/// This host's record of one repository, loaded; changed by [`Record::observe`],
/// [`Record::forget`] and [`Record::note_format`], written by [`Record::save`].
pub struct Record {
    /// `None` when the repository id names no file (see [`StateDir::record_path`]).
    path: Option<PathBuf>,
    repository: String,
    location: String,
    content: Content,
    /// Changes since loading, applied again at save onto what the file holds then (another
    /// mailvault on this host may have saved in between).
    added: BTreeSet<Id>,
    forgotten: BTreeSet<Id>,
    /// The record is compared and written (not one that must be left alone).
    usable: bool,
    dirty: bool,
    warnings: Vec<String>,
}

impl Record {
    /// Loads this host's record of repository `repo_id` (at `location`, kept for the
    /// reader). A record that cannot be used gives an empty one and a warning.
    pub fn load(state: &StateDir, repo_id: &str, location: &str) -> Record {
        let mut r = Record {
            path: state.record_path(repo_id),
            repository: repo_id.to_string(),
            location: location.to_string(),
            content: Content::default(),
            added: BTreeSet::new(),
            forgotten: BTreeSet::new(),
            usable: true,
            dirty: false,
            warnings: Vec::new(),
        };
        let Some(path) = r.path.clone() else {
            r.usable = false;
            r.warnings.push(format!(
                "repository id {repo_id:?} is not a hex string: this host keeps no snapshot record of it"
            ));
            return r;
        };
        let shown = path.display();
        match read(&path, repo_id) {
            Read::Absent => {}
            Read::Ok(c) => r.content = c,
            Read::Invalid(why) => {
                r.warnings.push(format!(
                    "snapshot record {shown}: {why}: it is replaced by a new one (snapshots removed before now are not noticed)"
                ));
                // Written even when nothing else changes, so that it is replaced.
                r.dirty = true;
            }
            Read::Newer(v) => {
                r.usable = false;
                r.warnings.push(format!(
                    "snapshot record {shown}: written by a newer mailvault (record version {v}): left alone; removed snapshots are not checked"
                ));
            }
            Read::Io(e) => {
                r.usable = false;
                r.warnings.push(format!(
                    "snapshot record {shown}: cannot be read ({e}): removed snapshots are not checked"
                ));
            }
        }
        r
    }

    /// [`Record::load`] for an open repository, noting its format version.
    pub fn of(state: &StateDir, repo: &Repository) -> Record {
        let mut r = Record::load(state, &repo.config().id, &repo.store().location());
        r.note_format(repo.config().version);
        r
    }

    /// Notes that the repository has format version `v` (the record keeps the highest).
    pub fn note_format(&mut self, v: u32) {
        if v > self.content.format_version {
            self.content.format_version = v;
            self.dirty = true;
        }
    }

    /// Records the snapshots `present` (every file in `snapshots/` named by an id, the
    /// damaged ones too) and returns the ones recorded before that are not among them, in
    /// order: deleted, or the repository rolled back to an older copy. Those stay recorded
    /// (every later call returns them again) until [`Record::forget`]. Snapshots this host
    /// removed itself, also those another mailvault on this host has just forgotten, are
    /// never returned. Load the record before listing, so that a snapshot written
    /// meanwhile is not taken for a missing one.
    pub fn observe(&mut self, present: impl IntoIterator<Item = Id>) -> Vec<Id> {
        if !self.usable {
            return Vec::new();
        }
        let present: BTreeSet<Id> = present.into_iter().collect();
        // Forgotten since loading (a repair on this host removes the snapshot after).
        let removed_now = match self.path.as_deref().map(|p| read(p, &self.repository)) {
            Some(Read::Ok(c)) => c.removed,
            _ => BTreeSet::new(),
        };
        let missing = (self.content.snapshots.iter())
            .filter(|id| !present.contains(id) && !removed_now.contains(id))
            .copied()
            .collect();
        for id in present {
            if !self.content.removed.contains(&id) && self.content.snapshots.insert(id) {
                self.added.insert(id);
                self.dirty = true;
            }
        }
        missing
    }

    /// [`Record::observe`], then the snapshots it finds missing that a forget record in
    /// `repo` lists ([`crate::repo::forgotten::forgotten`]: `forget` or `tag` removed them on
    /// purpose, on this host or another) are forgotten instead of returned. Read after
    /// the listing: a forget writes its record before it deletes. A record that cannot
    /// be read is a warning, and its snapshots stay missing.
    pub fn observe_in(
        &mut self,
        repo: &Repository,
        present: impl IntoIterator<Item = Id>,
    ) -> Vec<Id> {
        let missing = self.observe(present);
        if missing.is_empty() {
            return missing;
        }
        let forgotten = match crate::repo::forgotten::forgotten(repo) {
            Ok((ids, warnings)) => {
                self.warnings.extend(warnings);
                ids
            }
            Err(e) => {
                self.warnings
                    .push(format!("cannot list the forget records: {e}"));
                return missing;
            }
        };
        let (gone, missing): (Vec<Id>, Vec<Id>) =
            missing.into_iter().partition(|id| forgotten.contains(id));
        self.forget(&gone);
        missing
    }

    /// Takes `ids` out of the record on purpose (a repair or a forget removed them, or the
    /// user accepted that they were removed elsewhere): they are never reported missing.
    pub fn forget(&mut self, ids: &[Id]) {
        for id in ids {
            self.content.snapshots.remove(id);
            if self.content.removed.insert(*id) {
                self.forgotten.insert(*id);
                self.dirty = true;
            }
        }
    }

    /// Writes the record if it changed: atomically (a temporary file in the same
    /// directory, fsynced, renamed over the record, the directory fsynced), the directory
    /// `0700` and the file `0600`, under a lock of the directory, merged with what the
    /// file holds by then. A failure is a warning.
    pub fn save(&mut self) {
        if !self.usable || !self.dirty {
            return;
        }
        let Some(path) = self.path.clone() else {
            return;
        };
        match self.write(&path) {
            Ok(()) => self.dirty = false,
            Err(e) => {
                // Once: a record that cannot be written is not tried again.
                self.usable = false;
                self.warnings.push(format!(
                    "cannot write the snapshot record {}: {e}: snapshots removed from the repository are not noticed on this host (set {STATE_DIR_ENV} to a writable directory)",
                    path.display()
                ));
            }
        }
    }

    fn write(&self, path: &Path) -> io::Result<()> {
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir)?;
        if fs::metadata(dir)?.permissions().mode() & 0o777 != DIR_MODE {
            fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))?;
        }
        // Held until the end: two mailvaults on this host do not lose each other's ids.
        let lock = fs::File::open(dir)?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)?;
        let mut c = match read(path, &self.repository) {
            Read::Ok(c) => c,
            // Another mailvault, newer, wrote it meanwhile: its record now.
            Read::Newer(_) => return Ok(()),
            _ => self.content.clone(),
        };
        c.format_version = c.format_version.max(self.content.format_version);
        c.removed.extend(&self.forgotten);
        c.snapshots.extend(&self.added);
        let removed = c.removed.clone();
        c.snapshots.retain(|id| !removed.contains(id));
        let stored = Stored {
            version: RECORD_VERSION,
            repository: self.repository.clone(),
            location: self.location.clone(),
            format_version: c.format_version,
            snapshots: c.snapshots.iter().map(Id::to_hex).collect(),
            removed: c.removed.iter().map(Id::to_hex).collect(),
            updated: crate::now_unix(),
        };
        let mut json = serde_json::to_vec_pretty(&stored).map_err(io::Error::other)?;
        json.push(b'\n');
        let mut tmp = tempfile::Builder::new()
            .prefix(".record-")
            .tempfile_in(dir)?;
        tmp.as_file()
            .set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
        tmp.write_all(&json)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        lock.sync_all()
    }

    /// The warnings gathered so far (loading, saving), taken.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }
}

/// What [`record_listing`] found.
#[derive(Debug, Default)]
pub struct Observed {
    /// Snapshots this host saw before that are gone.
    pub missing: Vec<Id>,
    pub warnings: Vec<String>,
}

/// Loads the record of `repo`, lists `snapshots/`, records what is there and saves: for
/// `backup`, after its snapshot is written.
pub fn record_listing(state: &StateDir, repo: &Repository) -> Result<Observed> {
    let mut rec = Record::of(state, repo);
    let files = repo.store().list("snapshots/")?;
    let missing = rec.observe_in(repo, ids_in(files.iter().map(|f| f.path.as_str())));
    rec.save();
    Ok(Observed {
        missing,
        warnings: rec.take_warnings(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    const REPO: &str = "0123456789abcdef0123456789abcdef";

    fn id(n: u8) -> Id {
        Id([n; 32])
    }

    fn state() -> (tempfile::TempDir, StateDir) {
        let d = tempfile::tempdir().unwrap();
        let s = StateDir::new(d.path().join("state"));
        (d, s)
    }

    fn load(s: &StateDir) -> Record {
        Record::load(s, REPO, "/srv/repo")
    }

    fn file(s: &StateDir) -> serde_json::Value {
        serde_json::from_slice(&fs::read(s.record_path(REPO).unwrap()).unwrap()).unwrap()
    }

    #[test]
    fn written_atomically_private_and_sorted() {
        let (_d, s) = state();
        let mut r = load(&s);
        r.note_format(1);
        assert!(r.observe([id(3), id(1), id(2)]).is_empty());
        r.save();
        assert!(r.take_warnings().is_empty());
        let path = s.record_path(REPO).unwrap();
        assert_eq!(
            path,
            s.path().join("repositories").join(format!("{REPO}.json"))
        );
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        for d in [s.path().to_path_buf(), s.path().join("repositories")] {
            assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o700, "{d:?}");
        }
        // Nothing but the record is left in the directory (the temporary was renamed).
        let names: Vec<_> = fs::read_dir(s.path().join("repositories"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, [format!("{REPO}.json")]);
        let v = file(&s);
        assert_eq!(v["version"], 1);
        assert_eq!(v["repository"], REPO);
        assert_eq!(v["location"], "/srv/repo");
        assert_eq!(v["format_version"], 1);
        let want: Vec<String> = [1, 2, 3].map(|n| id(n).to_hex()).into();
        assert_eq!(v["snapshots"], serde_json::json!(want));
        assert_eq!(v["removed"], serde_json::json!([]));
        assert!(v["updated"].as_i64().unwrap() > 1_700_000_000);
    }

    #[test]
    fn missing_ones_are_reported_until_forgotten() {
        let (_d, s) = state();
        let mut r = load(&s);
        r.observe([id(1), id(2)]);
        r.save();
        // Union: a later listing adds to what was seen.
        let mut r = load(&s);
        assert!(r.observe([id(1), id(2), id(3)]).is_empty());
        r.save();
        // id 2 deleted: reported, and still recorded, so reported again.
        for _ in 0..2 {
            let mut r = load(&s);
            assert_eq!(r.observe([id(1), id(3)]), [id(2)]);
            r.save();
            assert_eq!(file(&s)["snapshots"].as_array().unwrap().len(), 3);
        }
        // Accepted: never reported again, kept in `removed`.
        let mut r = load(&s);
        let missing = r.observe([id(1), id(3)]);
        r.forget(&missing);
        r.save();
        let mut r = load(&s);
        assert!(r.observe([id(1), id(3)]).is_empty());
        assert_eq!(file(&s)["removed"], serde_json::json!([id(2).to_hex()]));
        // A forgotten id listed again is not taken back.
        assert!(r.observe([id(1), id(2), id(3)]).is_empty());
        r.save();
        assert_eq!(file(&s)["snapshots"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn a_damaged_snapshot_still_there_is_present() {
        let (_d, s) = state();
        let mut r = load(&s);
        r.observe([id(1), id(2)]);
        r.save();
        let snaps = Snapshots {
            list: Vec::new(),
            damaged: vec![
                crate::repo::DamagedSnapshot {
                    path: format!("snapshots/{}", id(1).to_hex()),
                    error: Error::corrupt("x", "truncated"),
                },
                crate::repo::DamagedSnapshot {
                    path: "snapshots/README".into(),
                    error: Error::corrupt("x", "not a hex id"),
                },
            ],
        };
        assert_eq!(present(&snaps), [id(1)]);
        let mut r = load(&s);
        assert_eq!(r.observe(present(&snaps)), [id(2)]);
    }

    #[test]
    fn forgotten_meanwhile_is_not_missing() {
        // A check loaded the record, then a repair on this host forgot a snapshot and
        // removed it, then the check listed: the snapshot is not missing.
        let (_d, s) = state();
        let mut r = load(&s);
        r.observe([id(1), id(2)]);
        r.save();
        let mut check = load(&s);
        let mut repair = load(&s);
        repair.forget(&[id(2)]);
        repair.save();
        assert!(check.observe([id(1)]).is_empty());
        check.save();
        assert_eq!(file(&s)["snapshots"], serde_json::json!([id(1).to_hex()]));
    }

    #[test]
    fn concurrent_saves_keep_both() {
        let (_d, s) = state();
        let mut a = load(&s);
        let mut b = load(&s);
        a.observe([id(1)]);
        b.observe([id(2)]);
        a.save();
        b.save();
        let want: Vec<String> = [1, 2].map(|n| id(n).to_hex()).into();
        assert_eq!(file(&s)["snapshots"], serde_json::json!(want));
    }

    #[test]
    fn an_unreadable_record_is_replaced() {
        let (_d, s) = state();
        let path = s.record_path(REPO).unwrap();
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        for bad in [
            "{not json".to_string(),
            format!(
                r#"{{"version":1,"repository":"{}","snapshots":[]}}"#,
                "ff".repeat(16)
            ),
            format!(r#"{{"version":1,"repository":"{REPO}","snapshots":["xyz"]}}"#),
        ] {
            fs::write(&path, &bad).unwrap();
            let mut r = load(&s);
            let w = r.take_warnings();
            assert!(w.len() == 1 && w[0].contains("replaced"), "{bad}: {w:?}");
            assert!(r.observe([id(1)]).is_empty());
            r.save();
            assert!(r.take_warnings().is_empty());
            assert_eq!(file(&s)["snapshots"], serde_json::json!([id(1).to_hex()]));
            // Replaced even when nothing else changes.
            fs::write(&path, &bad).unwrap();
            let mut r = load(&s);
            r.save();
            assert_eq!(file(&s)["repository"], REPO, "{bad}");
        }
    }

    #[test]
    fn a_newer_record_is_left_alone() {
        let (_d, s) = state();
        let path = s.record_path(REPO).unwrap();
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        let newer = r#"{"version":2,"whatever":true}"#;
        fs::write(&path, newer).unwrap();
        let mut r = load(&s);
        assert!(r.take_warnings()[0].contains("newer"));
        assert!(r.observe([id(1)]).is_empty());
        r.forget(&[id(2)]);
        r.save();
        assert_eq!(fs::read_to_string(&path).unwrap(), newer);
        s.check_format(REPO, 1).unwrap();
    }

    #[test]
    fn an_unwritable_state_dir_is_a_warning() {
        let (d, _) = state();
        // A file where the directory should be: no one, root included, can write below.
        fs::write(d.path().join("file"), "").unwrap();
        let s = StateDir::new(d.path().join("file"));
        let mut r = load(&s);
        assert!(r.observe([id(1)]).is_empty());
        r.save();
        r.observe([id(2)]);
        r.save();
        let w = r.take_warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("cannot write"), "{w:?}");
    }

    #[test]
    fn a_lower_format_version_is_a_rollback() {
        let (_d, s) = state();
        s.check_format(REPO, 1).unwrap();
        let mut r = load(&s);
        r.note_format(2);
        r.save();
        s.check_format(REPO, 2).unwrap();
        s.check_format(REPO, 3).unwrap();
        match s.check_format(REPO, 1) {
            Err(Error::FormatRollback {
                repository,
                seen: 2,
                found: 1,
            }) => assert_eq!(repository, REPO),
            other => panic!("{other:?}"),
        }
        // The highest stays.
        let mut r = load(&s);
        r.note_format(1);
        r.save();
        assert_eq!(file(&s)["format_version"], 2);
    }

    #[test]
    fn record_paths() {
        let s = StateDir::new("/st");
        assert_eq!(
            s.record_path(REPO),
            Some(PathBuf::from(format!("/st/repositories/{REPO}.json")))
        );
        for bad in ["", "../x", "a/b", "ab.json"] {
            assert_eq!(s.record_path(bad), None, "{bad}");
        }
    }
}
