//! `import_eml_dir`: files a directory of one-message files (the SpamAssassin public
//! corpus: `*.eml`, each starting with an mbox `From ` line) into a Maildir, bytes kept
//! exactly as they are. Spam goes to `Junk`, some ham to `Archive`, the rest to INBOX;
//! flags and file names are drawn from the spec's seed, mtimes from the `From ` line.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use rand::Rng as _;

use crate::date::{parse_from_line, parse_rfc5322};
use crate::maildir::{at, file_name, keywords_file, mkdir, set_time, write_message, write_small};
use crate::render::bare_lfs;
use crate::rng::{chance, rng_for};
use crate::spec::{ImportSpec, ImportSummary, DEFAULT_START};

const FOLDERS: [&str; 3] = ["", "Archive", "Junk"];

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    let mut entries: Vec<(PathBuf, bool)> = Vec::new();
    for e in fs::read_dir(dir).map_err(at(dir))? {
        let e = e.map_err(at(dir))?;
        let is_dir = e.file_type().map_err(at(dir))?.is_dir();
        entries.push((e.path(), is_dir));
    }
    entries.sort();
    for (path, is_dir) in entries {
        if is_dir {
            collect(&path, out)?;
        } else if path
            .extension()
            .is_some_and(|x| x.eq_ignore_ascii_case("eml"))
        {
            out.push(path);
        }
    }
    Ok(())
}

/// When a message was received: the date of its mbox `From ` line, else of its `Date:`.
fn message_time(data: &[u8]) -> Option<i64> {
    let head = String::from_utf8_lossy(&data[..data.len().min(64 << 10)]);
    let mut lines = head.lines().map(str::trim_end);
    if let Some(t) = lines.next().and_then(parse_from_line) {
        return Some(t);
    }
    head.lines()
        .take_while(|l| !l.trim_end().is_empty())
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("date").then_some(value)
        })
        .and_then(parse_rfc5322)
}

/// Imports every `*.eml` under `src` (recursively, in name order) into the Maildir
/// `maildir` (created if missing). A file whose path contains `spam` goes to `Junk`.
pub fn import_eml_dir(src: &Path, maildir: &Path, spec: &ImportSpec) -> io::Result<ImportSummary> {
    let mut paths = Vec::new();
    collect(src, &mut paths)?;
    if paths.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{}: no .eml files", src.display()),
        ));
    }
    let folder_dir = |f: &str| {
        if f.is_empty() {
            maildir.to_path_buf()
        } else {
            maildir.join(format!(".{f}"))
        }
    };
    for f in FOLDERS {
        for sub in ["cur", "new", "tmp"] {
            mkdir(&folder_dir(f).join(sub))?;
        }
    }

    let mut rng = rng_for(spec.seed, 31);
    let mut counts = [0usize; 3];
    let mut bytes = 0u64;
    let mut latest = i64::MIN;
    let mut previous = DEFAULT_START;
    let mut keys = std::collections::HashSet::new();
    for path in &paths {
        let data = fs::read(path).map_err(at(path))?;
        // The mbox `From ` line's date, else the `Date:` header, else just after the
        // previous message.
        let time = message_time(&data).unwrap_or(previous + 60);
        previous = time;
        latest = latest.max(time);
        let spam = path
            .strip_prefix(src)
            .unwrap_or(path)
            .to_string_lossy()
            .to_ascii_lowercase()
            .contains("spam");
        let folder = if spam {
            2
        } else if chance(&mut rng, spec.archive_ratio) {
            1
        } else {
            0
        };
        let mut flags: Vec<u8> = Vec::new();
        if chance(&mut rng, if spam { 0.4 } else { 0.92 }) {
            flags.push(b'S');
            if !spam && chance(&mut rng, 0.1) {
                flags.push(b'R');
            }
        }
        if !spam && chance(&mut rng, 0.03) {
            flags.push(b'F');
        }
        if spam && chance(&mut rng, 0.8) {
            flags.push(b'a'); // $Junk
        }
        flags.sort_unstable();
        let key = loop {
            let key = format!(
                "{time}.M{}P{}.import",
                rng.gen_range(0..1_000_000u32),
                rng.gen_range(1000..65_000u32)
            );
            if keys.insert(key.clone()) {
                break key;
            }
        };
        let size = data.len();
        let name = file_name(
            &key,
            size,
            size + bare_lfs(&data),
            false,
            &String::from_utf8_lossy(&flags),
        );
        let dir = match FOLDERS[folder] {
            "" => maildir.to_path_buf(),
            f => maildir.join(format!(".{f}")),
        };
        write_message(&dir.join("cur").join(name), &[&data], time)?;
        counts[folder] += 1;
        bytes += size as u64;
    }
    // Control files and directories dated like the newest message: the same input gives
    // the same tree.
    let latest = if latest == i64::MIN {
        DEFAULT_START
    } else {
        latest
    };
    for f in FOLDERS {
        let dir = folder_dir(f);
        if !f.is_empty() {
            write_small(&dir.join("maildirfolder"), b"", latest)?;
        }
        for sub in ["cur", "new", "tmp"] {
            set_time(&dir.join(sub), latest)?;
        }
    }
    write_small(
        &folder_dir("Junk").join("dovecot-keywords"),
        &keywords_file(&["$Junk", "NonJunk"]),
        latest,
    )?;
    write_small(
        &maildir.join("subscriptions"),
        b"V\t2\n\nArchive\nJunk\n",
        latest,
    )?;
    for f in FOLDERS.iter().filter(|f| !f.is_empty()) {
        set_time(&folder_dir(f), latest)?;
    }
    set_time(maildir, latest)?;
    Ok(ImportSummary {
        messages: paths.len(),
        bytes,
        folders: FOLDERS
            .iter()
            .zip(counts)
            .map(|(f, c)| (if f.is_empty() { "INBOX" } else { f }.to_string(), c))
            .collect(),
    })
}
