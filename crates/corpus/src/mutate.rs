//! `mutate`: a day of activity on an existing store, for incremental backups: flag
//! changes (file renames, `new/` to `cur/`), new deliveries (per-recipient copies
//! included) and deletions. Deterministic from the spec's seed and the store's contents.

use std::collections::{BTreeSet, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;

use crate::generate::write_events;
use crate::maildir::{at, set_time, split_name};
use crate::plan::{plan, Event, PlanParams};
use crate::rng::{chance, rng_for, Rng};
use crate::scan::{find_files, find_maildirs, folder_dir};
use crate::spec::{MutationSpec, MutationSummary};
use crate::world::World;

/// The Maildir unique part of a file name.
fn key_of(name: &str) -> &str {
    name.split([',', ':']).next().unwrap_or(name)
}

/// A client's flag change: mark seen, then answered, then toggle flagged.
fn changed_flags(flags: &str, rng: &mut Rng) -> String {
    let mut f: Vec<u8> = flags.bytes().collect();
    if !f.contains(&b'S') {
        f.push(b'S');
    } else if !f.contains(&b'R') && chance(rng, 0.6) {
        f.push(b'R');
    } else if let Some(p) = f.iter().position(|&c| c == b'F') {
        f.remove(p);
    } else {
        f.push(b'F');
    }
    f.sort_unstable();
    f.dedup();
    String::from_utf8_lossy(&f).into_owned()
}

fn count(n: usize, ratio: f64) -> usize {
    ((n as f64 * ratio).round() as usize).min(n)
}

/// Applies `spec` to the store under `root` (`ROOT/<domain>/<user>/Maildir`, or a single
/// Maildir). New messages are dated after the newest file of the store.
pub fn mutate(spec: &MutationSpec, root: &Path) -> io::Result<MutationSummary> {
    for r in [spec.flag_rename_ratio, spec.new_ratio, spec.delete_ratio] {
        if !(0.0..=1.0).contains(&r) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "mutation ratios must be between 0 and 1",
            ));
        }
    }
    let mut maildirs = find_maildirs(root)?;
    if maildirs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "{}: no Maildir (ROOT/<domain>/<user>/Maildir or ROOT/cur) found",
                root.display()
            ),
        ));
    }
    let files = find_files(root, &mut maildirs)?;
    let path_of = |i: usize| -> PathBuf {
        let f = &files[i];
        folder_dir(root, &maildirs[f.maildir], f.folder)
            .join(if f.new { "new" } else { "cur" })
            .join(&f.name)
    };
    let mut keys: HashSet<String> = files.iter().map(|f| key_of(&f.name).to_string()).collect();
    let mut latest = 0i64;
    for i in 0..files.len() {
        let p = path_of(i);
        let modified = fs::symlink_metadata(&p)
            .and_then(|m| m.modified())
            .map_err(at(&p))?;
        let secs = modified
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        latest = latest.max(secs);
    }

    let n = files.len();
    let mut rng = rng_for(spec.seed, 21);
    let n_delete = count(n, spec.delete_ratio);
    let n_rename = count(n, spec.flag_rename_ratio).min(n - n_delete);
    let n_new = count(n, spec.new_ratio);
    let mut order: Vec<usize> = (0..n).collect();
    order.shuffle(&mut rng);
    let mut deletes = order[..n_delete].to_vec();
    let mut renames = order[n_delete..n_delete + n_rename].to_vec();
    deletes.sort_unstable();
    renames.sort_unstable();

    let mut touched: BTreeSet<PathBuf> = BTreeSet::new();
    let mut summary = MutationSummary {
        messages_before: n,
        flag_renames: 0,
        new_to_cur: 0,
        new_messages: 0,
        new_copies: 0,
        new_bytes: 0,
        deleted: 0,
        deleted_bytes: 0,
        messages_after: 0,
    };
    for i in deletes {
        let p = path_of(i);
        summary.deleted_bytes += fs::symlink_metadata(&p).map_err(at(&p))?.len();
        fs::remove_file(&p).map_err(at(&p))?;
        summary.deleted += 1;
        if let Some(dir) = p.parent() {
            touched.insert(dir.to_path_buf());
        }
    }
    for i in renames {
        let f = &files[i];
        let from = path_of(i);
        let dir = folder_dir(root, &maildirs[f.maildir], f.folder);
        let (base, flags) = split_name(&f.name);
        let to = match flags {
            None => {
                summary.new_to_cur += 1;
                dir.join("cur").join(format!("{base}:2,S"))
            }
            Some(flags) => dir
                .join("cur")
                .join(format!("{base}:2,{}", changed_flags(flags, &mut rng))),
        };
        fs::rename(&from, &to).map_err(at(&from))?;
        summary.flag_renames += 1;
        touched.insert(dir.join("cur"));
        touched.insert(dir.join(if f.new { "new" } else { "cur" }));
    }

    let world = World::scanned(&maildirs, spec.seed);
    let start = latest + 60;
    let end = start + 86_400;
    let params = PlanParams {
        messages: n_new,
        shared_ratio: 0.5,
        attachment_ratio: 0.12,
        median_attachment: 80 << 10,
        max_attachment: 4 << 20,
        forward_ratio: 0.15,
        html_ratio: 0.3,
        odd_ratio: 0.0,
        start,
        end,
        mutation: true,
    };
    let events = plan(&world, &params, &mut rng_for(spec.seed, 22), &mut keys);
    let tally = write_events(root, &world, &events)?;
    for d in events.iter().flat_map(|e| &e.deliveries) {
        touched.insert(world.accounts[d.account].sub_dir(root, d.folder, d.new));
    }
    summary.new_messages = tally.messages();
    summary.new_bytes = tally.bytes();
    summary.new_copies = events.iter().map(Event::copies).sum();
    summary.messages_after = n - summary.deleted + summary.new_messages;
    for dir in touched {
        set_time(&dir, end)?;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_changes_stay_sorted() {
        let mut rng = rng_for(1, 1);
        assert_eq!(changed_flags("", &mut rng), "S");
        assert_eq!(changed_flags("Sa", &mut rng).len(), 3);
        assert_eq!(changed_flags("FRS", &mut rng), "RS");
        assert_eq!(changed_flags("RS", &mut rng), "FRS");
        for f in ["", "S", "RS", "FS", "DS", "Sab", "ST"] {
            let c = changed_flags(f, &mut rng);
            let mut sorted: Vec<u8> = c.bytes().collect();
            sorted.sort_unstable();
            assert_eq!(sorted, c.as_bytes(), "{f} -> {c}");
            assert_ne!(c, f);
        }
        assert_eq!(key_of("1.M2P3.h,S=1,W=2:2,S"), "1.M2P3.h");
    }
}
