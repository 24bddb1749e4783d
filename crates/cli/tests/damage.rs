//! One damaged file never takes the repository down (issue 10, items 9–12, 20, 23): the
//! `mailvault` binary against repositories with a file deleted, truncated, tampered with
//! or swapped, and the repairs.
#![allow(clippy::unwrap_used)]

mod common;

use common::Env;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The files below `dir` of the repository, sorted.
fn repo_files(e: &Env, dir: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    walk(&e.repo().join(dir), &mut out);
    out.retain(|p| p.is_file());
    out.sort();
    out
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        out.push(p.clone());
        if p.is_dir() {
            walk(&p, out);
        }
    }
}

/// A Maildir of `n` mail-like messages (enough, with `n` ≥ 300, for a dictionary).
/// Damages blob `id` where it lies in its pack (one byte in its middle flipped), `repo`
/// closed first.
fn flip_a_byte_of(e: &Env, repo: mailvault_core::Repository, id: &mailvault_core::Id) {
    use mailvault_core::repo::pack::pack_path;
    use std::os::unix::fs::FileExt;
    let loc = repo.index().get(id).unwrap();
    let pack = e.repo().join(pack_path(&repo.index().pack_id(loc.pack)));
    drop(repo);
    let f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&pack)
        .unwrap();
    let at = u64::from(loc.offset + loc.stored_len / 2);
    let mut b = [0u8];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x55], at).unwrap();
}

fn maildir(md: &Path, n: usize, tag: &str) {
    for sub in ["cur", "new", "tmp"] {
        fs::create_dir_all(md.join(sub)).unwrap();
    }
    for i in 0..n {
        let body = format!(
            "Return-Path: <news@example.org>\nDelivered-To: bob@example.org\nFrom: News <news@example.org>\nTo: bob@example.org\nSubject: {tag} issue {i}\nDate: Mon, 1 Jan 2024 10:00:00 +0000\nMessage-ID: <{tag}{i}@example.org>\n\nHello Bob,\n\nthis is issue {i} of our newsletter about {tag}. It reads much like the\nother issues, as newsletters do, with a few words changed: {}.\n\nRegards,\nthe team\n",
            (0..(i % 17 + 350)).map(|k| format!("item{}", k * i % 997)).collect::<Vec<_>>().join(" ")
        );
        fs::write(md.join("cur").join(format!("{tag}{i}.M1P1.mx:2,S")), body).unwrap();
    }
}

fn messages_in(dir: &Path) -> usize {
    let mut out = Vec::new();
    walk(dir, &mut out);
    out.iter()
        .filter(|p| p.is_file() && p.parent().is_some_and(|d| d.ends_with("cur")))
        .count()
}

/// Item 20: repository files are 0600 and directories 0700 under the usual 022 umask.
#[test]
fn repository_files_are_private_whatever_the_umask() {
    let e = Env::new();
    let md = e.path("md");
    maildir(&md, 5, "a");
    for args in [vec!["init"], vec!["backup", md.to_str().unwrap()]] {
        let o = Command::new("sh")
            .arg("-c")
            .arg("umask 022 && exec \"$0\" \"$@\"")
            .arg(env!("CARGO_BIN_EXE_mailvault"))
            .args(&args)
            .env("MAILVAULT_REPOSITORY", e.repo())
            .env("MAILVAULT_PASSWORD_FILE", e.path("pass"))
            .env("MAILVAULT_STATE_DIR", e.state_dir())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let mut all = vec![e.repo()];
    walk(&e.repo(), &mut all);
    assert!(all.len() > 8);
    for p in all {
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        let want = if p.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(mode, want, "{} has mode {mode:o}", p.display());
    }
}

/// Item 9: a truncated snapshot, a tampered one and a stray README in snapshots/ cost
/// those files only: the others list, restore, back up; check names each one.
#[test]
fn a_damaged_snapshot_file_costs_that_snapshot_only() {
    let e = Env::new();
    let md = e.path("md");
    maildir(&md, 10, "a");
    e.expect(0, &["init"]);
    let src = md.to_str().unwrap();
    e.expect(0, &["backup", src]);
    let first = e.json(0, &["snapshots"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    maildir(&md, 12, "b");
    e.expect(0, &["backup", src]);
    maildir(&md, 14, "c");
    e.expect(0, &["backup", src]);
    let snaps = repo_files(&e, "snapshots");
    assert_eq!(snaps.len(), 3);
    let damaged: Vec<PathBuf> = snaps
        .iter()
        .filter(|p| !p.ends_with(&first))
        .cloned()
        .collect();
    let b = fs::read(&damaged[0]).unwrap();
    fs::write(&damaged[0], &b[..b.len() / 2]).unwrap();
    let mut b = fs::read(&damaged[1]).unwrap();
    b[40] ^= 1;
    fs::write(&damaged[1], &b).unwrap();
    fs::write(e.repo().join("snapshots/README"), "notes").unwrap();
    let names: Vec<String> = damaged
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
        .chain(["README".to_string()])
        .collect();

    let out = e.expect(0, &["snapshots"]);
    assert!(out.contains(&first[..8]), "{out}");
    for n in &names {
        let line = out
            .lines()
            .find(|l| l.contains(n.as_str()))
            .unwrap_or_else(|| panic!("no warning names {n}:\n{out}"));
        assert!(
            line.contains("warning") && line.contains("repair snapshots"),
            "{line}"
        );
    }
    e.expect(0, &["ls", "latest"]);
    e.expect(0, &["stats"]);
    e.expect(
        0,
        &[
            "restore",
            &first[..8],
            "--target",
            e.path("out").to_str().unwrap(),
        ],
    );
    assert_eq!(messages_in(&e.path("out")), 10);
    e.expect(0, &["backup", src]);
    assert_eq!(e.json(0, &["snapshots"]).as_array().unwrap().len(), 2);
    let out = e.expect(2, &["check"]);
    for n in &names {
        assert!(
            out.lines()
                .any(|l| l.starts_with("error: snapshots/") && l.contains(n.as_str())),
            "check does not name {n}:\n{out}"
        );
    }
    assert!(out.contains("mailvault repair snapshots"), "{out}");

    // The repair moves the unreadable files away; check passes again.
    e.expect(0, &["repair", "snapshots", "--dry-run"]);
    assert_eq!(repo_files(&e, "snapshots").len(), 5);
    e.expect(0, &["repair", "snapshots"]);
    assert_eq!(repo_files(&e, "snapshots").len(), 2);
    assert_eq!(repo_files(&e, "damaged/snapshots").len(), 3);
    e.expect(0, &["check"]);
}

/// Item 10: a repository that lost its config is not taken for an empty location.
#[test]
fn init_refuses_a_repository_that_lost_its_config() {
    let e = Env::new();
    let md = e.path("md");
    maildir(&md, 5, "a");
    e.expect(0, &["init"]);
    e.expect(0, &["backup", md.to_str().unwrap()]);
    fs::remove_file(e.repo().join("config")).unwrap();
    let out = e.expect(2, &["snapshots"]);
    assert!(out.contains("config is missing"), "{out}");
    assert!(!out.contains("run `mailvault init`"), "{out}");
    let out = e.expect(2, &["init"]);
    assert!(out.contains("config is missing"), "{out}");
    assert_eq!(repo_files(&e, "keys").len(), 1, "init added a key");
    assert!(!e.repo().join("config").exists());
}

/// Item 11: a deleted dictionary is found by plain check, summarized in a few lines
/// (all of it in --json), and the repair drops only what needed it.
#[test]
fn check_finds_a_deleted_dictionary_and_summarizes_it() {
    let e = Env::new();
    let md = e.path("md");
    maildir(&md, 400, "a");
    // Messages that are one base64-runs blob each, which no dictionary compresses: they
    // survive the loss of the dictionary.
    let line = "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0\n";
    for i in 0..5 {
        let body = format!("Subject: b64 {i}\n\n{}", line.repeat(40 + i));
        fs::write(md.join(format!("cur/b64{i}.M1P1.mx:2,S")), body).unwrap();
    }
    e.expect(0, &["init"]);
    e.expect(0, &["backup", md.to_str().unwrap()]);
    let dicts = repo_files(&e, "dicts");
    assert_eq!(
        dicts.len(),
        1,
        "no dictionary was trained: make the store bigger"
    );
    e.expect(0, &["check"]);
    fs::remove_file(&dicts[0]).unwrap();
    let out = e.expect(2, &["check"]);
    assert!(
        out.contains("dictionary") && out.contains("missing"),
        "{out}"
    );
    assert!(out.lines().count() < 30, "not summarized:\n{out}");
    assert!(out.contains("messages in 1 snapshots"), "{out}");
    assert!(out.contains("mailvault repair snapshots"), "{out}");
    let rep = e.json(2, &["check"]);
    let errs = rep["errors"].as_array().unwrap();
    assert_eq!(errs.len(), 1, "{rep}");
    let lost = errs[0]["messages"].as_u64().unwrap();
    assert!(lost > 300, "{rep}");
    assert_eq!(errs[0]["affected"].as_array().unwrap().len() as u64, lost);

    // `repair index` leaves out the blobs that need the lost dictionary (and the packs
    // that hold nothing else), which must not keep `repair snapshots` from running.
    e.expect(0, &["repair", "index"]);
    let damaged = repo_files(&e, "snapshots").remove(0);
    let damaged_bytes = fs::read(&damaged).unwrap();
    e.expect(0, &["repair", "snapshots"]);
    e.expect(0, &["check", "--read-data"]);
    let snaps = e.json(0, &["snapshots"]);
    assert_eq!(snaps.as_array().unwrap().len(), 1);
    assert!(snaps[0]["tags"].to_string().contains("repaired"), "{snaps}");
    // A repair killed after writing the replacement, before removing the damaged one:
    // check points at the repair again, which then only removes it.
    fs::write(&damaged, &damaged_bytes).unwrap();
    let out = e.expect(2, &["check"]);
    assert!(out.contains("mailvault repair snapshots"), "{out}");
    e.expect(0, &["repair", "snapshots"]);
    assert_eq!(e.json(0, &["snapshots"]), snaps);
    e.expect(0, &["check"]);
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            e.path("out").to_str().unwrap(),
        ],
    );
    assert_eq!(messages_in(&e.path("out")) as u64, 405 - lost);
    assert!(405 - lost >= 5);
}

/// Item 12: a deleted index file: check points at `repair index`, which rebuilds it from
/// the packs; everything restores again.
#[test]
fn repair_index_rebuilds_a_deleted_index() {
    let e = Env::new();
    let md = e.path("md");
    maildir(&md, 30, "a");
    e.expect(0, &["init"]);
    e.expect(0, &["backup", md.to_str().unwrap()]);
    maildir(&md, 40, "b");
    e.expect(0, &["backup", md.to_str().unwrap()]);
    let index = repo_files(&e, "index");
    assert_eq!(index.len(), 2);
    fs::remove_file(&index[0]).unwrap();
    let out = e.expect(2, &["check"]);
    assert!(out.contains("mailvault repair index"), "{out}");
    // One error for all the blobs missing from the index, not one per blob.
    let rep = e.json(2, &["check"]);
    let errs = rep["errors"].as_array().unwrap();
    assert_eq!(errs.len(), 1, "{rep}");
    assert_eq!(errs[0]["kind"], "unindexed");
    assert!(errs[0]["messages"].as_u64().unwrap() >= 30, "{rep}");
    // repair snapshots refuses while packs are in no index: it would drop their content.
    let out = e.expect(2, &["repair", "snapshots"]);
    assert!(out.contains("repair index"), "{out}");
    e.expect(0, &["repair", "index", "--dry-run"]);
    assert_eq!(repo_files(&e, "index").len(), 1);
    let old_bytes = fs::read(&index[1]).unwrap();
    e.expect(0, &["repair", "index"]);
    assert_eq!(repo_files(&e, "index").len(), 1);
    assert!(
        !repo_files(&e, "index").contains(&index[1]),
        "the old index was kept"
    );
    e.expect(0, &["check", "--read-data"]);
    // A repair killed before removing the old index file leaves a good repository.
    fs::write(&index[1], old_bytes).unwrap();
    e.expect(0, &["check"]);
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            e.path("out").to_str().unwrap(),
        ],
    );
    assert_eq!(messages_in(&e.path("out")), 70);
}

/// Item 12: a deleted pack: repair index then repair snapshots keep everything else, and
/// check passes.
#[test]
fn repair_snapshots_drops_only_what_a_lost_pack_held() {
    let e = Env::new();
    let md = e.path("md");
    maildir(&md, 30, "a");
    e.expect(0, &["init", "--compression", "none"]);
    e.expect(0, &["backup", md.to_str().unwrap()]);
    let first_packs = repo_files(&e, "data");
    maildir(&md, 40, "b");
    e.expect(0, &["backup", md.to_str().unwrap()]);
    let rep = e.json(0, &["check"]);
    assert_eq!(rep["errors"].as_array().unwrap().len(), 0);
    // The largest pack of the second backup: a data pack of new messages only.
    let victim = repo_files(&e, "data")
        .into_iter()
        .filter(|p| !first_packs.contains(p))
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap();
    fs::remove_file(&victim).unwrap();
    let out = e.expect(2, &["check"]);
    assert!(out.contains("pack is missing"), "{out}");
    assert!(
        out.contains("repair index, then mailvault repair snapshots"),
        "{out}"
    );
    let plan = e.expect(0, &["repair", "snapshots", "--dry-run"]);
    assert!(plan.contains("cannot be restored"), "{plan}");
    e.expect(0, &["repair", "index"]);
    e.expect(0, &["repair", "snapshots"]);
    e.expect(0, &["check", "--read-data"]);
    let snaps = e.json(0, &["snapshots"]);
    let snaps = snaps.as_array().unwrap();
    assert_eq!(snaps.len(), 2);
    // The first snapshot's messages are all there.
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            e.path("out").to_str().unwrap(),
        ],
    );
    assert!(messages_in(&e.path("out")) >= 30);
}

/// Item 23: two sealed blobs of the same size swapped inside a pack (nothing else fixed
/// up): check --read-data and restore name the blobs that do not match their ids. In
/// format 2 the blob's tag binds its id, so the blob does not even open in the other's
/// place; in format 1 its hash gives it away.
#[test]
fn swapped_blobs_are_named_by_their_ids() {
    swapped_blobs("1", "content does not match its id");
    swapped_blobs("2", "does not open as data blob");
}

fn swapped_blobs(format: &str, error: &str) {
    let e = Env::new();
    let md = e.path("md");
    for sub in ["cur", "new", "tmp"] {
        fs::create_dir_all(md.join(sub)).unwrap();
    }
    // Two messages of the same length, stored raw: equal sealed sizes, one pack.
    fs::write(md.join("cur/1.M1P1.mx:2,S"), "Subject: one\n\nfirst body\n").unwrap();
    fs::write(md.join("cur/2.M1P1.mx:2,S"), "Subject: two\n\nother body\n").unwrap();
    e.expect(0, &["init", "--compression", "none", "--format", format]);
    // One worker: one data pack (each worker fills its own).
    e.expect(0, &["backup", md.to_str().unwrap(), "-j", "1"]);
    let packs = repo_files(&e, "data");
    let mut swapped = false;
    for p in &packs {
        let b = fs::read(p).unwrap();
        // Data blobs: sealed = 24-byte nonce + body + 16-byte tag; the bodies are 25 bytes.
        let len = 24 + 25 + 16;
        // The header: sealed magic, version and count, and two 42-byte entries; then the
        // header's length in plaintext (format 1) or sealed (format 2, 44 bytes).
        let header = 24 + 9 + 2 * 42 + 16;
        let tail = if format == "1" { 4 } else { 44 };
        if b.len() == 2 * len + header + tail {
            let mut s = b[len..2 * len].to_vec();
            s.extend_from_slice(&b[..len]);
            s.extend_from_slice(&b[2 * len..]);
            fs::write(p, s).unwrap();
            swapped = true;
        }
    }
    assert!(swapped, "no pack with two blobs of equal size");
    let out = e.expect(2, &["check", "--read-data"]);
    assert!(out.matches(error).count() == 2, "{out}");
    let rep = e.json(2, &["check", "--read-data"]);
    let blob_ids: Vec<String> = rep["errors"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|e| e["blob_ids"].as_array().unwrap().clone())
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(blob_ids.len(), 2, "{rep}");
    let out = e.expect(
        1,
        &[
            "restore",
            "latest",
            "--target",
            e.path("out").to_str().unwrap(),
        ],
    );
    assert!(out.contains(error), "{out}");
    assert!(
        blob_ids.iter().any(|id| out.contains(&id[..8])),
        "restore does not name the blob:\n{out}"
    );
    // The repairs: the pack's good blobs (none here but the header's) move to a new pack,
    // the damaged pack is set aside, the messages that cannot be restored are dropped.
    e.expect(0, &["repair", "index"]);
    assert_eq!(repo_files(&e, "damaged/data").len(), 1);
    e.expect(0, &["repair", "snapshots"]);
    e.expect(0, &["check", "--read-data"]);
}

/// Issue 24 item 13: a restore that needs blobs no index lists says what happened and
/// what to run, not only which blob it missed.
#[test]
fn a_restore_missing_blobs_points_to_repair_index() {
    let e = Env::new();
    let md = e.path("md");
    maildir(&md, 5, "a");
    e.expect(0, &["init"]);
    e.expect(0, &["backup", md.to_str().unwrap()]);
    let index = repo_files(&e, "index");
    // The snapshot's trees are cached locally; with the index gone the data blobs are
    // what the restore cannot find.
    for f in &index {
        fs::remove_file(f).unwrap();
    }
    let out = e.run_text(&[
        "restore",
        "latest",
        "--target",
        e.path("out").to_str().unwrap(),
    ]);
    let text = format!("{}{}", out.1, out.2);
    assert_ne!(out.0, Some(0), "{text}");
    assert!(text.contains("mailvault repair index"), "{text}");
}

/// Issue 24 item 13: a file in data/ named like a pack that is not one is not called
/// "left by an interrupted backup": check says what it is and what to do.
#[test]
fn check_tells_a_foreign_file_in_data_from_an_unindexed_pack() {
    let e = Env::new();
    let md = e.path("md");
    maildir(&md, 5, "a");
    e.expect(0, &["init"]);
    e.expect(0, &["backup", md.to_str().unwrap()]);
    let pack = repo_files(&e, "data")[0].clone();
    let name = "ab".repeat(32);
    let foreign = pack
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("ab")
        .join(&name);
    fs::create_dir_all(foreign.parent().unwrap()).unwrap();
    fs::write(&foreign, b"not a pack at all, but named like one\n").unwrap();
    let out = e.expect(0, &["check"]);
    let line = out
        .lines()
        .find(|l| l.contains(&name))
        .unwrap_or_else(|| panic!("{name} not named: {out}"));
    assert!(line.contains("not a pack of this repository"), "{line}");
    assert!(!line.contains("interrupted backup"), "{line}");
}

/// A leaf of a large folder's chunk tree damaged in its pack: `check --read-data` names it
/// as a list of message lists of that folder, and a restore gives back every message the
/// other leaves hold (the ones below it reported).
#[test]
fn a_damaged_chunk_tree_leaf_costs_only_the_messages_below_it() {
    use mailvault_core::repo::tree::{AccountTree, ChunkTree, RootTree};
    use mailvault_core::store::LocalStore;
    use mailvault_core::Repository;
    let e = Env::new();
    let md = e.path("md");
    for sub in ["cur", "new", "tmp"] {
        fs::create_dir_all(md.join(sub)).unwrap();
    }
    let n = 20_000;
    for i in 0..n {
        let msg = format!("From: a{i}@example.org\nSubject: m{i}\n\nbody {i}\n");
        fs::write(md.join("cur").join(format!("{i}.M1P1.mx:2,S")), msg).unwrap();
    }
    e.expect(0, &["init", "--compression", "none"]);
    e.expect(0, &["backup", md.to_str().unwrap()]);

    // The second leaf below the folder's root, where it lies, and its messages.
    let repo = Repository::open(std::sync::Arc::new(LocalStore::new(e.repo())), b"s3cret").unwrap();
    let snap = repo.find_snapshot("latest").unwrap();
    let root: RootTree = repo.read_tree(&snap.root).unwrap();
    let acc: AccountTree = repo.read_tree(&root.accounts[0].tree).unwrap();
    let top: ChunkTree = repo.read_tree(&acc.folders[0].chunk_tree.unwrap()).unwrap();
    assert!(
        top.children.len() > 1,
        "more than one leaf for 20,000 messages"
    );
    // Down the second child to a leaf: 20,000 messages make two levels, or three when
    // the leaves' ids happen to be cut into more than one inner node.
    let mut leaf_id = top.children[1];
    let leaf: ChunkTree = loop {
        let node: ChunkTree = repo.read_tree(&leaf_id).unwrap();
        if !node.chunks.is_empty() {
            break node;
        }
        leaf_id = node.children[0];
    };
    let lost: usize = (leaf.chunks.iter())
        .map(|c| repo.read_chunk(c).unwrap().len())
        .sum();
    flip_a_byte_of(&e, repo, &leaf_id);

    // As another host sees it: no local copy of the trees.
    let _ = fs::remove_dir_all(e.path("cache"));
    let out = e.expect(2, &["check", "--read-data"]);
    assert!(
        out.contains("folder INBOX (a list of message lists, of its 20000 messages)"),
        "{out}"
    );
    // A restore takes every message the other leaves hold, and reports the rest.
    let dest = e.path("out");
    let out = e.expect(
        1,
        &["restore", "latest", "--target", dest.to_str().unwrap()],
    );
    assert!(out.contains("does not open as tree blob"), "{out}");
    assert_eq!(messages_in(&dest), n - lost);
    assert!(lost > 0 && lost < n, "{lost} messages below one leaf");
}

/// Issue 31: a damaged blob of the store's own files (a shared-mailbox dictionary) is
/// found by `check --read-data`, named as the store's, and `repair snapshots` drops that
/// file alone: the accounts' mail stays restorable.
#[test]
fn a_damaged_store_file_is_named_and_repair_drops_it_alone() {
    use mailvault_core::repo::tree::{AccountTree, RootTree};
    use mailvault_core::store::LocalStore;
    use mailvault_core::Repository;
    let e = Env::new();
    let src = e.path("vmail");
    maildir(&src.join("example.org/bob/Maildir"), 5, "a");
    fs::write(
        src.join("shared-mailboxes"),
        "shared/shared-boxes/user/bob\n1\n".repeat(50),
    )
    .unwrap();
    e.expect(0, &["init", "--compression", "none"]);
    e.expect(0, &["backup", &format!("maildir:{}", src.display())]);
    let repo = Repository::open(std::sync::Arc::new(LocalStore::new(e.repo())), b"s3cret").unwrap();
    let snap = repo.find_snapshot("latest").unwrap();
    let root: RootTree = repo.read_tree(&snap.root).unwrap();
    let store: AccountTree = repo.read_tree(&root.store.unwrap()).unwrap();
    let file = &store.home[0].files[0];
    assert_eq!(file.name, b"shared-mailboxes");
    let id = repo.file_content(file).unwrap()[0];
    flip_a_byte_of(&e, repo, &id);

    let out = e.expect(2, &["check", "--read-data"]);
    assert!(
        out.contains("the store's own files folder . file shared-mailboxes"),
        "{out}"
    );
    e.expect(0, &["repair", "index"]);
    e.expect(0, &["repair", "snapshots"]);
    e.expect(0, &["check", "--read-data"]);
    let listed = e.json(0, &["ls", "latest", "--store"]);
    assert_eq!(listed["items"].as_array().unwrap().len(), 0, "{listed}");
    let dest = e.path("out");
    e.expect(
        0,
        &["restore", "latest", "--target", dest.to_str().unwrap()],
    );
    assert_eq!(messages_in(&dest.join("example.org/bob/Maildir")), 5);
}
