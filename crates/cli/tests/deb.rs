//! The Debian package (issue 24, item 2): `scripts/deb.sh` packages the binary the tests
//! built, `apt-get install ./mailvault_*.deb` installs it on this machine, the installed
//! `mailvault demo` passes, its man pages, completions, units and sample configuration
//! are where Debian looks for them, and the package is removed afterwards (also when the
//! test fails). It needs root and apt: without them it says why and does not run, except
//! under `MAILVAULT_CI`, where it must.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn installed() -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", "mailvault"])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("ok installed"))
}

/// Removes the package when the test ends, however it ends.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        let _ = Command::new("apt-get")
            .args(["remove", "--purge", "-y", "-qq", "mailvault"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output();
    }
}

#[test]
fn the_debian_package_installs_runs_the_demo_and_is_removed() {
    let ci = std::env::var_os("MAILVAULT_CI").is_some();
    let root = ok(Command::new("id").arg("-u")).trim() == "0";
    let apt = Command::new("apt-get").arg("--version").output().is_ok();
    if !root || !apt {
        assert!(
            !ci,
            "the package test needs root and apt-get under MAILVAULT_CI"
        );
        eprintln!("not run: installing a package needs root and apt-get");
        return;
    }
    // Never replace a mailvault the admin installed.
    if installed() {
        assert!(
            !ci,
            "a mailvault package is installed: the test would replace it"
        );
        eprintln!("not run: a mailvault package is installed here (apt-get remove mailvault)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let repo_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let deb = ok(Command::new(repo_root.join("scripts/deb.sh"))
        .arg("--bin")
        .arg(env!("CARGO_BIN_EXE_mailvault"))
        .arg("--out")
        .arg(t.path()));
    let deb = deb.trim();
    assert!(deb.ends_with(".deb"), "{deb}");
    // What the package holds, before it goes anywhere.
    let listing = ok(Command::new("dpkg-deb").args(["-c", deb]));
    for path in [
        "./usr/bin/mailvault",
        "./usr/share/man/man1/mailvault.1.gz",
        "./usr/share/man/man1/mailvault-backup.1.gz",
        "./usr/share/man/man1/mailvault-restore.1.gz",
        "./usr/share/man/man1/mailvault-repair-index.1.gz",
        "./usr/share/bash-completion/completions/mailvault",
        "./usr/share/zsh/vendor-completions/_mailvault",
        "./usr/share/fish/vendor_completions.d/mailvault.fish",
        "./lib/systemd/system/mailvault-nightly.service",
        "./lib/systemd/system/mailvault-nightly.timer",
        "./etc/mailvault/mailvault.toml",
    ] {
        assert!(
            listing.contains(path),
            "{path} not in the package:\n{listing}"
        );
    }
    assert!(
        !listing.contains("generate"),
        "the hidden command got a page:\n{listing}"
    );

    let _guard = Installed;
    ok(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .arg(deb)
        .env("DEBIAN_FRONTEND", "noninteractive"));
    assert!(installed());
    let conffiles = ok(Command::new("dpkg-query").args(["-W", "-f=${Conffiles}", "mailvault"]));
    assert!(
        conffiles.contains("/etc/mailvault/mailvault.toml"),
        "{conffiles}"
    );
    let unit = std::fs::read_to_string("/lib/systemd/system/mailvault-nightly.service").unwrap();
    assert!(unit.contains("ExecStart=/usr/bin/mailvault "), "{unit}");
    let completion =
        std::fs::read_to_string("/usr/share/bash-completion/completions/mailvault").unwrap();
    for sub in ["backup", "restore", "snapshots", "prune"] {
        assert!(completion.contains(sub), "bash completion without {sub}");
    }
    assert!(Path::new("/usr/share/man/man1/mailvault-backup.1.gz").is_file());
    // And man finds it where it looks (man-db is in Debian's base system, not everywhere).
    if Command::new("man").arg("--version").output().is_ok() {
        let page = ok(Command::new("man").args(["-w", "mailvault-backup"]));
        assert!(
            page.contains("/usr/share/man/man1/mailvault-backup.1"),
            "{page}"
        );
    }
    // The installed binary runs the README's first command, on the smallest store.
    let demo = t.path().join("demo");
    let out = ok(Command::new("/usr/bin/mailvault")
        .args(["demo", "--preset", "tiny", "--quiet", "--dir"])
        .arg(&demo)
        .env_remove("MAILVAULT_REPOSITORY")
        .env_remove("MAILVAULT_PASSWORD_FILE")
        .env("XDG_CACHE_HOME", t.path().join("cache"))
        .env("MAILVAULT_STATE_DIR", t.path().join("state")));
    assert!(
        out.contains("files identical") && out.contains("no errors"),
        "{out}"
    );
    // The sample configuration it installed is read: the profiles it names are listed.
    let o = Command::new("/usr/bin/mailvault")
        .args([
            "--config",
            "/etc/mailvault/mailvault.toml",
            "run",
            "--profile",
            "none",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("profiles there: nightly"), "{err}");
}
