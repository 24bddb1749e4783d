//! `mailvault migrate` (issue 11) through the binary: a format-1 repository made with
//! `init --format 1` migrates; a migrate killed with SIGKILL at several points leaves a
//! repository that `check` passes and that migrate finishes; the refusals.
#![allow(clippy::unwrap_used)]

mod common;

use common::{copy_tree, Env};
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

/// `accounts` Maildirs of `n` mail-like messages each, every tenth with a large
/// attachment-like body (cut into several chunks).
fn mail_store(root: &Path, accounts: usize, n: usize, round: usize) {
    for a in 0..accounts {
        let md = root
            .join("example.org")
            .join(format!("u{a}"))
            .join("Maildir");
        for sub in ["cur", "new", "tmp"] {
            fs::create_dir_all(md.join(sub)).unwrap();
        }
        for i in 0..n {
            let words: Vec<String> = (0..(i % 23 + 40))
                .map(|k| format!("w{}", (k * 31 + i * 7 + a) % 1009))
                .collect();
            let mut body = format!(
                "From: x@example.org\nTo: u{a}@example.org\nSubject: round {round} message {i}\nMessage-ID: <{round}.{a}.{i}@example.org>\n\n{}\n",
                words.join(" ")
            );
            if i % 10 == 0 {
                for k in 0..3000 {
                    body.push_str(&format!("{:x}", (k * 2654435761usize + i + a) % 1_000_003));
                }
            }
            fs::write(
                md.join("cur").join(format!("{round}{i}.M{a}P1.mx:2,S")),
                body,
            )
            .unwrap();
        }
    }
}

/// A format-1 repository with three snapshots (each the next one's parent), in `repo`.
fn v1_repository(e: &Env) {
    e.expect(0, &["init", "--format", "1"]);
    let src = e.path("vmail");
    for round in 0..3 {
        mail_store(&src, 4, 150, round);
        e.expect(0, &["backup", &format!("maildir:{}", src.display())]);
    }
    assert_eq!(e.json(0, &["stats"])["format_version"], 1);
}

fn format_version(e: &Env) -> u64 {
    e.json(0, &["stats"])["format_version"].as_u64().unwrap()
}

#[test]
fn migrate_through_the_cli_and_its_refusals() {
    let e = Env::new();
    v1_repository(&e);
    // A running (or killed) backup's record: refused, nothing changed.
    fs::create_dir_all(e.repo().join("writers")).unwrap();
    fs::write(e.repo().join("writers/0badc0de"), b"x").unwrap();
    let out = e.expect(2, &["migrate"]);
    assert!(out.contains("a backup is running or was killed"), "{out}");
    assert!(!e.repo().join("migrate").join("state").exists());
    fs::remove_file(e.repo().join("writers/0badc0de")).unwrap();
    // The dry run says what it would do and does nothing.
    let plan = e.json(0, &["migrate", "--dry-run"]);
    assert_eq!(plan["dry_run"], true);
    assert_eq!(plan["snapshots"], 3);
    assert!(plan["data_packs_kept"].as_u64().unwrap() > 0);
    assert_eq!(format_version(&e), 1);
    let text = e.ok(&["migrate"]);
    assert!(
        text.contains("kept as they are") && text.contains("3 snapshots"),
        "{text}"
    );
    assert_eq!(format_version(&e), 2);
    e.expect(0, &["check", "--read-data"]);
    // Again: already format 2, an error (exit 2) that says so.
    let out = e.expect(2, &["migrate"]);
    assert!(out.contains("already format 2"), "{out}");
    // Every message of the latest snapshot restores byte-exact.
    e.expect(
        0,
        &[
            "restore",
            "latest",
            "--target",
            &e.path("out").display().to_string(),
        ],
    );
    let st = Command::new("diff")
        .arg("-r")
        .arg(e.path("vmail"))
        .arg(e.path("out"))
        .status()
        .unwrap();
    assert!(st.success(), "restore differs from the source");
}

/// Issue 11: SIGKILL during migrate leaves a repository that opens as format 1 or 2 and
/// checks clean; migrate run again finishes it.
#[test]
fn migrate_killed_at_any_time_checks_clean_and_finishes() {
    let e = Env::new();
    v1_repository(&e);
    let template = e.path("template");
    copy_tree(&e.repo(), &template);
    // How long the migration itself takes here (from its record appearing to the end;
    // opening the repository, the key derivation, comes before), to spread the kills
    // over it.
    let state = e.repo().join("migrate/state");
    let wait_for_state = |child: &mut std::process::Child| {
        while !state.exists() {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        Instant::now()
    };
    let mut child = e.cmd(&["migrate", "-q"]).spawn().unwrap();
    let began = wait_for_state(&mut child);
    assert!(child.wait().unwrap().success());
    let whole = began.elapsed();
    let mut seen = std::collections::BTreeSet::new();
    for tenth in 0..=9u32 {
        // The same repository put back at format 1 is, to this host's record, a rollback
        // of its config: each round starts as a host that has not seen it.
        let _ = fs::remove_dir_all(e.state_dir());
        copy_tree(&template, &e.repo());
        let mut child = e.cmd(&["migrate", "-q"]).spawn().unwrap();
        let began = wait_for_state(&mut child);
        std::thread::sleep((whole * tenth / 10).saturating_sub(began.elapsed()));
        // SIGKILL: the process gets no chance to clean up.
        let _ = child.kill();
        let status = child.wait().unwrap();
        let v = format_version(&e);
        seen.insert((v, e.repo().join("migrate/state").exists(), status.success()));
        let out = e.expect(0, &["check"]);
        assert!(
            out.contains("no errors found"),
            "killed at {tenth}/10: {out}"
        );
        if v == 2 && !e.repo().join("migrate/state").exists() {
            continue; // it had finished
        }
        e.expect(0, &["migrate"]);
        assert_eq!(format_version(&e), 2, "killed at {tenth}/10");
        let out = e.expect(0, &["check", "--read-data"]);
        assert!(!out.contains("warning"), "killed at {tenth}/10: {out}");
        assert!(!e.repo().join("migrate/state").exists());
    }
    eprintln!(
        "states seen after the kills (format, unfinished, exited): {seen:?} (whole run {whole:?})"
    );
    assert!(
        seen.iter().any(|(_, unfinished, _)| *unfinished),
        "no kill landed inside the migration: {seen:?}"
    );
}
