//! The generated store is what the benchmark and the engine's tests rely on: the same
//! bytes for the same seed, a valid Dovecot Maildir++ layout, the asked share of
//! per-recipient copies, and a mutation that does what it says.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use mailvault_corpus::{
    generate, import_eml_dir, mutate, scan, CorpusSpec, ImportSpec, MutationSpec,
};

type Tree = BTreeMap<PathBuf, (bool, i64, Vec<u8>)>;

fn mtime(path: &Path) -> io::Result<i64> {
    let m = fs::symlink_metadata(path)?.modified()?;
    Ok(m.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64))
}

/// Every file and directory under `root`: (is_dir, mtime, contents).
fn read_tree(root: &Path) -> io::Result<Tree> {
    fn walk(root: &Path, dir: &Path, out: &mut Tree) -> io::Result<()> {
        for e in fs::read_dir(dir)? {
            let p = e?.path();
            let rel = p
                .strip_prefix(root)
                .map_err(io::Error::other)?
                .to_path_buf();
            if p.is_dir() {
                out.insert(rel, (true, mtime(&p)?, Vec::new()));
                walk(root, &p, out)?;
            } else {
                out.insert(rel, (false, mtime(&p)?, fs::read(&p)?));
            }
        }
        Ok(())
    }
    let mut out = Tree::new();
    walk(root, root, &mut out)?;
    Ok(out)
}

/// Message files of a tree: paths under `cur/` or `new/`.
fn messages(tree: &Tree) -> impl Iterator<Item = (&PathBuf, &Vec<u8>)> {
    tree.iter().filter_map(|(p, (is_dir, _, data))| {
        let parent = p.parent()?.file_name()?.to_str()?;
        (!is_dir && (parent == "cur" || parent == "new")).then_some((p, data))
    })
}

fn tiny() -> CorpusSpec {
    CorpusSpec::preset("tiny").expect("tiny preset")
}

/// The message without its leading delivery trace lines.
fn strip_trace(data: &[u8]) -> &[u8] {
    const TRACE: [&str; 4] = [
        "return-path:",
        "x-original-to:",
        "delivered-to:",
        "received:",
    ];
    let mut pos = 0;
    let mut in_trace = false;
    while pos < data.len() {
        let end = data[pos..]
            .iter()
            .position(|b| *b == b'\n')
            .map_or(data.len(), |i| pos + i + 1);
        let line = String::from_utf8_lossy(&data[pos..end]).to_ascii_lowercase();
        let continuation = line.starts_with(' ') || line.starts_with('\t');
        if TRACE.iter().any(|t| line.starts_with(t)) || (in_trace && continuation) {
            in_trace = true;
            pos = end;
        } else {
            break;
        }
    }
    &data[pos..]
}

#[test]
fn same_spec_gives_identical_trees() -> io::Result<()> {
    let a = tempfile::tempdir()?;
    let b = tempfile::tempdir()?;
    let sa = generate(&tiny(), a.path())?;
    let sb = generate(&tiny(), b.path())?;
    assert_eq!(sa, sb);
    let ta = read_tree(a.path())?;
    let tb = read_tree(b.path())?;
    assert_eq!(ta.len(), tb.len());
    for ((pa, va), (pb, vb)) in ta.iter().zip(&tb) {
        assert_eq!(pa, pb);
        assert_eq!(va, vb, "{} differs", pa.display());
    }
    assert_eq!(messages(&ta).count(), tiny().messages);

    let c = tempfile::tempdir()?;
    generate(&CorpusSpec { seed: 2, ..tiny() }, c.path())?;
    assert_ne!(read_tree(c.path())?, ta, "another seed, another store");
    Ok(())
}

#[test]
fn generate_refuses_a_non_empty_root() -> io::Result<()> {
    let d = tempfile::tempdir()?;
    fs::write(d.path().join("x"), b"x")?;
    let err = generate(&tiny(), d.path()).expect_err("non-empty root");
    assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
    Ok(())
}

/// Checks one message file against Dovecot's naming and RFC 5322's shape.
fn check_message(path: &Path, data: &[u8], keywords: usize) {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("utf-8 name");
    let in_new = path
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == "new");
    let (base, flags) = match name.split_once(":2,") {
        Some((b, f)) => (b, Some(f)),
        None => (name, None),
    };
    assert_eq!(flags.is_none(), in_new, "{name}: :2, exactly in cur/");
    let mut parts = base.split(',');
    let key = parts.next().expect("key");
    let size: usize = parts
        .next()
        .and_then(|s| s.strip_prefix("S="))
        .and_then(|s| s.parse().ok())
        .expect("S=");
    let vsize: usize = parts
        .next()
        .and_then(|s| s.strip_prefix("W="))
        .and_then(|s| s.parse().ok())
        .expect("W=");
    assert_eq!(parts.next(), None, "{name}");
    assert_eq!(size, data.len(), "{name}: S= is the size");
    let bare_lf = data
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b == b'\n' && (i == 0 || data[i - 1] != b'\r'))
        .count();
    assert_eq!(vsize, size + bare_lf, "{name}: W= is the CRLF size");
    let fields: Vec<&str> = key.split('.').collect();
    assert_eq!(fields.len(), 3, "{name}");
    let secs: i64 = fields[0].parse().expect("seconds");
    assert!(
        fields[1].starts_with('M') && fields[1].contains('P'),
        "{name}"
    );
    assert_eq!(
        mtime(path).expect("mtime"),
        secs,
        "{name}: mtime is the delivery time"
    );
    if let Some(flags) = flags {
        let mut sorted: Vec<u8> = flags.bytes().collect();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, flags.as_bytes(), "{name}: flags sorted, once each");
        for f in flags.bytes() {
            let ok = b"DFPRST".contains(&f)
                || (f.is_ascii_lowercase() && usize::from(f - b'a') < keywords);
            assert!(ok, "{name}: flag {} without meaning", char::from(f));
        }
    }
    // Header block, blank line, body.
    let text = String::from_utf8_lossy(data).replace("\r\n", "\n");
    let (head, body) = text
        .split_once("\n\n")
        .expect("blank line after the headers");
    assert!(!body.is_empty(), "{name}: body");
    let mut names = Vec::new();
    for line in head.lines() {
        if line.starts_with(' ') || line.starts_with('\t') {
            assert!(!names.is_empty(), "{name}: continuation first");
            continue;
        }
        let (field, _) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("{name}: bad header line {line:?}"));
        assert!(
            !field.is_empty() && field.bytes().all(|b| b.is_ascii_graphic()),
            "{name}: {line:?}"
        );
        names.push(field.to_ascii_lowercase());
    }
    for required in ["message-id", "date", "from", "subject", "mime-version"] {
        assert!(names.iter().any(|n| n == required), "{name}: no {required}");
    }
}

#[test]
fn layout_is_dovecot_maildir() -> io::Result<()> {
    let d = tempfile::tempdir()?;
    let summary = generate(&tiny(), d.path())?;
    let tree = read_tree(d.path())?;
    assert_eq!(summary.per_account.len(), tiny().accounts);
    let mut checked = 0;
    for acct in &summary.per_account {
        let maildir = d.path().join(&acct.maildir);
        assert_eq!(acct.maildir.components().count(), 3, "domain/user/Maildir");
        for sub in ["cur", "new", "tmp"] {
            assert!(maildir.join(sub).is_dir());
        }
        let subs = fs::read_to_string(maildir.join("subscriptions"))?;
        let listed: Vec<String> = subs
            .strip_prefix("V\t2\n\n")
            .map(|s| s.lines().map(|l| l.replace('\t', ".")).collect())
            .unwrap_or_else(|| subs.lines().map(str::to_string).collect());
        let mut folders = vec![maildir.clone()];
        for e in fs::read_dir(&maildir)? {
            let p = e?.path();
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("")
                .to_string();
            if p.is_dir() && name.starts_with('.') {
                assert!(p.join("maildirfolder").is_file(), "{}", p.display());
                assert!(listed.contains(&name[1..].to_string()), "{name} subscribed");
                folders.push(p);
            }
        }
        for f in ["Sent", "Drafts", "Trash", "Archive.2023", "Archive.2024"] {
            assert!(maildir.join(format!(".{f}")).is_dir(), "{f}");
        }
        let mut count = 0;
        for folder in folders {
            let keywords = match fs::read_to_string(folder.join("dovecot-keywords")) {
                Ok(k) => {
                    for (i, line) in k.lines().enumerate() {
                        assert!(line.starts_with(&format!("{i} ")), "{line}");
                    }
                    k.lines().count()
                }
                Err(_) => 0,
            };
            for sub in ["cur", "new"] {
                for e in fs::read_dir(folder.join(sub))? {
                    let p = e?.path();
                    let rel = p.strip_prefix(d.path()).map_err(io::Error::other)?;
                    check_message(&p, &tree[rel].2, keywords);
                    count += 1;
                }
            }
        }
        assert_eq!(count, acct.messages, "{}", acct.address);
        checked += count;
    }
    assert_eq!(checked, summary.messages);
    assert!(summary.new_messages > 0, "some mail not yet seen");

    // Skewed sizes: the largest account holds several times the smallest.
    let sizes: Vec<usize> = summary.per_account.iter().map(|a| a.messages).collect();
    let (min, max) = (
        sizes.iter().min().copied().unwrap_or(0),
        sizes.iter().max().copied().unwrap_or(0),
    );
    assert!(max >= 3 * min.max(1), "{sizes:?}");
    Ok(())
}

/// Counts messages whose bytes after the trace were already seen: the copies.
fn count_copies(tree: &Tree) -> usize {
    let mut seen: HashMap<&[u8], usize> = HashMap::new();
    for (_, data) in messages(tree) {
        *seen.entry(strip_trace(data)).or_default() += 1;
    }
    seen.values().map(|n| n - 1).sum()
}

#[test]
fn shared_ratio_is_as_asked() -> io::Result<()> {
    for ratio in [0.5, 0.2, 0.0] {
        let d = tempfile::tempdir()?;
        let spec = CorpusSpec {
            shared_ratio: ratio,
            ..tiny()
        };
        let summary = generate(&spec, d.path())?;
        let tree = read_tree(d.path())?;
        let copies = count_copies(&tree);
        assert_eq!(
            copies, summary.copies,
            "ratio {ratio}: the summary tells the truth"
        );
        let actual = copies as f64 / summary.messages as f64;
        assert!((actual - ratio).abs() < 0.03, "asked {ratio}, got {actual}");
    }
    Ok(())
}

#[test]
fn attachments_are_base64_and_some_are_forwarded() -> io::Result<()> {
    let d = tempfile::tempdir()?;
    let summary = generate(&tiny(), d.path())?;
    let ratio = summary.attachments as f64 / summary.messages as f64;
    assert!((0.07..=0.2).contains(&ratio), "attachment ratio {ratio}");
    assert!(summary.forwarded > 0);
    let tree = read_tree(d.path())?;
    // A forwarded payload: the same base64 block in messages with different bodies.
    let mut blocks: HashMap<Vec<u8>, Vec<Vec<u8>>> = HashMap::new();
    for (_, data) in messages(&tree) {
        let text = String::from_utf8_lossy(data);
        for part in text.split("Content-Transfer-Encoding: base64\n\n").skip(1) {
            let b64: String = part.lines().take_while(|l| l.len() == 76).collect();
            assert!(part.lines().next().is_some_and(|l| l.len() <= 76));
            if b64.len() > 76 * 4 {
                blocks
                    .entry(b64.into_bytes())
                    .or_default()
                    .push(strip_trace(data).to_vec());
            }
        }
    }
    let reused = blocks
        .values()
        .any(|msgs| msgs.iter().any(|m| m != &msgs[0]));
    assert!(reused, "an attachment forwarded inside another message");
    Ok(())
}

#[test]
fn odd_messages_are_still_valid() -> io::Result<()> {
    let d = tempfile::tempdir()?;
    let spec = CorpusSpec {
        odd_ratio: 0.3,
        ..tiny()
    };
    let summary = generate(&spec, d.path())?;
    assert!(summary.odd > 20, "{}", summary.odd);
    let tree = read_tree(d.path())?;
    let crlf = messages(&tree)
        .filter(|(_, m)| m.windows(2).any(|w| w == b"\r\n"))
        .count();
    let no_eol = messages(&tree).filter(|(_, m)| !m.ends_with(b"\n")).count();
    let eight_bit = messages(&tree).filter(|(_, m)| !m.is_ascii()).count();
    assert!(
        crlf > 0 && no_eol > 0 && eight_bit > 0,
        "{crlf} {no_eol} {eight_bit}"
    );
    for (p, m) in messages(&tree) {
        check_message(&d.path().join(p), m, 26);
    }
    Ok(())
}

#[test]
fn mutate_does_what_it_says() -> io::Result<()> {
    let a = tempfile::tempdir()?;
    let b = tempfile::tempdir()?;
    let summary = generate(&tiny(), a.path())?;
    generate(&tiny(), b.path())?;
    let before = read_tree(a.path())?;
    let spec = MutationSpec {
        seed: 9,
        flag_rename_ratio: 0.05,
        new_ratio: 0.02,
        delete_ratio: 0.01,
    };
    let m = mutate(&spec, a.path())?;
    let n = summary.messages;
    assert_eq!(m.messages_before, n);
    assert_eq!(m.flag_renames, 15);
    assert_eq!(m.deleted, 3);
    assert_eq!(m.new_messages, 6);
    assert!(m.new_copies > 0 && m.new_copies < m.new_messages);
    assert_eq!(m.messages_after, n - 3 + 6);
    let stats = scan(a.path())?;
    assert_eq!(stats.messages, m.messages_after);

    let after = read_tree(a.path())?;
    let key = |p: &PathBuf| {
        p.file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.split(',').next())
            .unwrap_or("")
            .to_string()
    };
    let old: HashMap<String, (&PathBuf, &Vec<u8>)> =
        messages(&before).map(|(p, d)| (key(p), (p, d))).collect();
    let mut renamed = 0;
    let mut added: HashMap<&[u8], usize> = HashMap::new();
    for (p, data) in messages(&after) {
        match old.get(&key(p)) {
            Some((op, od)) => {
                assert_eq!(od, &data, "a rename keeps the bytes");
                if op != &p {
                    renamed += 1;
                }
            }
            None => {
                *added.entry(strip_trace(data)).or_default() += 1;
                check_message(&a.path().join(p), data, 0);
            }
        }
    }
    assert_eq!(renamed, m.flag_renames);
    assert_eq!(added.values().sum::<usize>(), m.new_messages);
    assert_eq!(added.values().map(|n| n - 1).sum::<usize>(), m.new_copies);

    // Deterministic: the same mutation of the same store gives the same tree.
    let m2 = mutate(&spec, b.path())?;
    assert_eq!(m, m2);
    assert_eq!(read_tree(b.path())?, after);
    Ok(())
}

#[test]
fn import_keeps_bytes() -> io::Result<()> {
    let src = tempfile::tempdir()?;
    fs::create_dir_all(src.path().join("ham"))?;
    fs::create_dir_all(src.path().join("spam-1"))?;
    let ham = b"From alice@example.org  Thu Aug 22 12:36:23 2002\nFrom: alice@example.org\nSubject: hi\n\nhello\n".to_vec();
    let spam =
        b"From x@spam.example  Fri Aug 23 01:00:00 2002\r\nSubject: buy\r\n\r\nnow\r\n".to_vec();
    fs::write(src.path().join("ham/00001.abc.eml"), &ham)?;
    fs::write(src.path().join("spam-1/00001.def.eml"), &spam)?;
    let no_from_line =
        b"Return-Path: <b@example.org>\nDate: Sat, 24 Aug 2002 10:00:00 +0200\nSubject: x\n\ny\n"
            .to_vec();
    fs::write(src.path().join("ham/00002.xyz.eml"), &no_from_line)?;
    fs::write(src.path().join("LICENSE"), b"not mail")?;
    let dst = tempfile::tempdir()?;
    let maildir = dst.path().join("Maildir");
    let s = import_eml_dir(src.path(), &maildir, &ImportSpec::default())?;
    assert_eq!(s.messages, 3);
    assert_eq!(
        s.bytes,
        (ham.len() + spam.len() + no_from_line.len()) as u64
    );
    let junk: Vec<_> = fs::read_dir(maildir.join(".Junk/cur"))?.collect::<Result<_, _>>()?;
    assert_eq!(junk.len(), 1);
    assert_eq!(fs::read(junk[0].path())?, spam);
    assert_eq!(mtime(&junk[0].path())?, 1_030_064_400);
    let stats = scan(&maildir)?;
    assert_eq!(stats.messages, 3);
    assert_eq!(stats.accounts, 1);
    let tree = read_tree(&maildir)?;
    let dated = messages(&tree)
        .find(|(_, data)| **data == no_from_line)
        .map(|(p, _)| p.clone())
        .expect("imported");
    assert_eq!(
        mtime(&maildir.join(dated))?,
        1_030_176_000,
        "from the Date: header"
    );

    // Deterministic, control files and directory times included.
    let again = dst.path().join("Again");
    import_eml_dir(src.path(), &again, &ImportSpec::default())?;
    assert_eq!(read_tree(&again)?, tree);
    Ok(())
}

#[test]
fn presets_scale() {
    let sizes: Vec<usize> = mailvault_corpus::PRESETS
        .iter()
        .map(|p| CorpusSpec::preset(p).map_or(0, |s| s.messages))
        .collect();
    assert_eq!(sizes, vec![300, 10_000, 30_000, 100_000, 300_000]);
}
