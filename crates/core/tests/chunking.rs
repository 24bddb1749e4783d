//! Issue 11, tests "Chunking": format 2 cuts large messages with a gear table derived from
//! each repository's key, so the same message gets different chunk boundaries (and chunk
//! sizes, which someone reading the storage could match against a known attachment) in
//! two repositories; within one repository a forwarded copy still deduplicates.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use mailvault_core::repo::format::BlobKind;
use mailvault_core::repo::format::Version;
use mailvault_core::store::LocalStore;
use mailvault_core::{Id, InitOptions, Repository};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

/// `len` bytes that look random (BLAKE3's output for `seed`), as base64 lines of 76.
fn attachment(seed: &str, len: usize) -> String {
    let mut raw = vec![0u8; len];
    blake3::Hasher::new()
        .update(seed.as_bytes())
        .finalize_xof()
        .fill(&mut raw);
    let b64 = base64_simd::STANDARD.encode_to_string(&raw);
    let mut out = String::with_capacity(b64.len() + b64.len() / 76 + 1);
    for line in b64.as_bytes().chunks(76) {
        out.push_str(std::str::from_utf8(line).unwrap());
        out.push('\n');
    }
    out
}

/// A message carrying `att` as a base64 attachment after a text part `text`.
fn with_attachment(from: &str, subject: &str, text: &str, att: &str) -> Vec<u8> {
    format!(
        "From: {from}\nTo: bob@example.org\nSubject: {subject}\nMessage-ID: <{subject}@example.org>\nMIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"b0\"\n\n--b0\nContent-Type: text/plain\n\n{text}\n--b0\nContent-Type: application/pdf; name=\"report.pdf\"\nContent-Transfer-Encoding: base64\n\n{att}--b0--\n"
    )
    .into_bytes()
}

/// A mail root with bob's INBOX holding `messages`.
fn store_with(root: &Path, messages: &[&[u8]]) {
    let md = root.join("example.org/bob/Maildir");
    for (i, m) in messages.iter().enumerate() {
        put_msg(
            &md,
            "",
            "cur",
            &format!("17000000{i:02}.M{i}P1.mail:2,S"),
            m,
            1_700_000_000 + i as i64,
        );
    }
}

fn init(dir: &Path, version: Version) -> Repository {
    let opts = InitOptions {
        version,
        ..fast_init()
    };
    Repository::init(Arc::new(LocalStore::new(dir)), PASSWORD, &opts).unwrap()
}

/// The data blobs of a repository.
fn data_blobs(repo: &Repository) -> HashSet<Id> {
    repo.index()
        .iter()
        .filter(|(_, l)| l.kind == BlobKind::Data)
        .map(|(id, _)| id)
        .collect()
}

/// The sorted raw lengths of a repository's data blobs: its chunk boundaries, as someone
/// who can read the storage (and knows the attachment) could try to match them.
fn chunk_lengths(repo: &Repository) -> Vec<u32> {
    let mut v: Vec<u32> = repo
        .index()
        .iter()
        .filter(|(_, l)| l.kind == BlobKind::Data)
        .map(|(_, l)| l.raw_len)
        .collect();
    v.sort_unstable();
    v
}

/// The chunk lengths of one 1 MB-attachment message backed up into a new repository of
/// `version` in `dir`.
fn lengths_after_backup(dir: &Path, src: &Path, version: Version) -> Vec<u32> {
    let mut repo = init(dir, version);
    maildir_backup(&mut repo, src, vec![]);
    chunk_lengths(&open_repo(dir))
}

#[test]
fn the_same_message_is_cut_differently_in_two_format_2_repositories() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("vmail");
    let att = attachment("report", 1 << 20);
    store_with(
        &src,
        &[&with_attachment(
            "alice@example.org",
            "report",
            "see attached",
            &att,
        )],
    );
    let a = lengths_after_backup(&t.path().join("a"), &src, Version::V2);
    let b = lengths_after_backup(&t.path().join("b"), &src, Version::V2);
    assert!(a.len() >= 10 && b.len() >= 10, "{a:?} {b:?}");
    assert_ne!(a, b, "two format-2 repositories cut the message alike");
    // Format 1's public table cuts it alike everywhere: what format 2 changes.
    let c = lengths_after_backup(&t.path().join("c"), &src, Version::V1);
    let d = lengths_after_backup(&t.path().join("d"), &src, Version::V1);
    assert_eq!(c, d);
    assert_ne!(a, c);
}

/// The share of a forwarded copy's bytes (the attachment after other headers and text)
/// that a repository of `version` stores anew.
fn forwarded_copy_new_share(dir: &Path, src: &Path, version: Version) -> f64 {
    let att = attachment("contract", 1 << 20);
    let original = with_attachment("alice@example.org", "contract", "the contract", &att);
    let forwarded = with_attachment(
        "carol@example.org",
        "Fwd: contract",
        &format!(
            "FYI, see below.\n\n---------- Forwarded message ---------\nFrom: alice@example.org\n{}",
            "Some more words the forwarder wrote above the attachment.\n".repeat(7)
        ),
        &att,
    );
    store_with(src, &[&original]);
    let mut repo = init(dir, version);
    maildir_backup(&mut repo, src, vec![]);
    let before = data_blobs(&open_repo(dir));
    store_with(src, &[&original, &forwarded]);
    let mut repo = open_repo(dir);
    maildir_backup(&mut repo, src, vec![]);
    let repo = open_repo(dir);
    let new: u64 = data_blobs(&repo)
        .difference(&before)
        .map(|id| u64::from(repo.index().get(id).unwrap().raw_len))
        .sum();
    new as f64 / forwarded.len() as f64
}

#[test]
fn a_forwarded_copy_still_deduplicates_in_a_format_2_repository() {
    let t = tempfile::tempdir().unwrap();
    let v2 = forwarded_copy_new_share(&t.path().join("r2"), &t.path().join("s2"), Version::V2);
    let v1 = forwarded_copy_new_share(&t.path().join("r1"), &t.path().join("s1"), Version::V1);
    eprintln!("forwarded copy stored anew: format 2 {v2:.3}, format 1 {v1:.3}");
    // The first chunk (the new headers and text up to the first cut in the attachment)
    // and the last: a few average chunks of 32 KiB out of 1.4 MB.
    assert!(
        v2 < 0.15,
        "format 2 stored {v2:.3} of the forwarded copy anew"
    );
    assert!(
        v1 < 0.15,
        "format 1 stored {v1:.3} of the forwarded copy anew"
    );
}
