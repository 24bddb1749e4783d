#!/usr/bin/env python3
"""IMAP incremental backup benchmark: what an IMAP backup in which nothing changed costs
on a Dovecot without plugins and on one with ACLs (`acl` vfile, `imap_acl`) and mailbox
METADATA (`imap_metadata`, a file dictionary), where the backup also asks each folder's
GETACL and GETMETADATA (issue 31); every fifth folder is shared with another account. The same store (--accounts accounts of --folders
folders of --messages messages) is put in both; each gets its repository and a full
backup; then --repeat rounds of `mailvault backup` with nothing changed on each, the
order rotated from round to round, medians reported, and their ratio. With --vs-bin-dir,
the mailvault there (a build before a change) runs beside the one of --bin-dir in every
round, into the same repositories, and each server's line gives both and their ratio.

    bench/imap_incremental.py [--accounts N] [--folders N] [--messages N] [--repeat N]
                              [--smoke] [--bin-dir DIR] [--vs-bin-dir DIR] [--work DIR]

Needs mailvault in --bin-dir (default $CARGO_TARGET_DIR/release or target/release) and
dovecot.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from imap_restore import MASTER, MASTER_PW, Dovecot, log, timed  # noqa: E402

ACL_METADATA = """mail_plugins = $mail_plugins acl
mail_attribute_dict = file:%h/dovecot-attributes
protocol imap {
  mail_plugins = $mail_plugins imap_acl
  imap_metadata = yes
}
plugin {
  acl = vfile
  # Rights are the user's, not the master user's (as a backup through one would see them).
  acl_user = %u
}
"""


def populate(dov, accounts, folders, messages):
    """The store, written straight into the server's mail directory (Maildir++)."""
    names = []
    for a in range(accounts):
        user = f"user{a:05d}"
        names.append(f"{user}@example.org")
        base = dov.root / "mail" / "example.org" / user / "Maildir"
        for f in range(folders):
            d = base if f == 0 else base / f".Folder{f:03d}"
            for sub in ("cur", "new", "tmp"):
                (d / sub).mkdir(parents=True, exist_ok=True)
            if f % 5 == 1:
                # Every fifth folder shared with the next account (read by the ACL plugin
                # only; the server without plugins ignores the file).
                (d / "dovecot-acl").write_text(f"user=user{(a + 1) % accounts:05d}@example.org lr\n")
            for m in range(messages):
                body = (f"From: a{m}@example.net\nTo: {user}@example.org\nSubject: m{m} of {f}\n"
                        f"Message-ID: <{a}.{f}.{m}@example.net>\n\nbody {a} {f} {m}\n" + "x" * 2000 + "\n")
                (d / "cur" / f"{1700000000 + m}.M{m}P{f}.bench,S={len(body)}:2,S").write_text(body)
    if os.geteuid() == 0:
        subprocess.run(["chown", "-R", "65534:65534", str(dov.root / "mail")], check=True)
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--accounts", type=int, default=300)
    ap.add_argument("--folders", type=int, default=20)
    ap.add_argument("--messages", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="3 accounts of 3 folders, one round")
    ap.add_argument("--bin-dir", default=None)
    ap.add_argument("--vs-bin-dir", default=None, help="another build, run beside --bin-dir's")
    ap.add_argument("--work", default=None)
    a = ap.parse_args()
    if a.smoke:
        a.accounts, a.folders, a.messages, a.repeat = 3, 3, 2, 1
    root = Path(__file__).resolve().parent.parent
    bins = Path(a.bin_dir) if a.bin_dir else Path(os.environ.get("CARGO_TARGET_DIR", root / "target")) / "release"
    mv = bins / "mailvault"
    work = Path(a.work) if a.work else Path(tempfile.mkdtemp(prefix="mv-bench-imap-incr-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "pass").write_text("bench\n")
    (work / "imap-pass").write_text(MASTER_PW + "\n")
    for f in ("pass", "imap-pass"):
        os.chmod(work / f, 0o600)
    servers = {}
    try:
        for label, conf in [("no plugins", ""), ("ACL + METADATA", ACL_METADATA)]:
            dov = Dovecot(None, None, conf)
            names = populate(dov, a.accounts, a.folders, a.messages)
            (work / "accounts").write_text("\n".join(names) + "\n")
            tag = label.split()[0].lower()
            env = dict(os.environ, MAILVAULT_REPOSITORY=str(work / f"repo-{tag}"),
                       MAILVAULT_PASSWORD_FILE=str(work / "pass"), XDG_CACHE_HOME=str(work / f"cache-{tag}"),
                       MAILVAULT_STATE_DIR=str(work / f"state-{tag}"))
            subprocess.run([str(mv), "init"], env=env, check=True, stdout=subprocess.DEVNULL)
            cmd = [str(mv), "backup", dov.url(), "--imap-master-user", MASTER, "--imap-password-file",
                   str(work / "imap-pass"), "--accounts-file", str(work / "accounts"), "-q"]
            p, secs = timed(cmd, env=env)
            if p.returncode != 0:
                raise SystemExit(f"full backup ({label}) exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
            log(f"{label}: full backup of {a.accounts * a.folders * a.messages} messages in {secs:.2f} s")
            servers[label] = (dov, cmd, env, {"this": []})
            if a.vs_bin_dir:
                servers[label][3]["vs"] = []
        labels = list(servers)
        runs = [(label, b) for label in labels for b in servers[label][3]]
        for r in range(a.repeat):
            k = r % len(runs)
            for label, b in runs[k:] + runs[:k]:
                dov, cmd, env, times = servers[label]
                if b == "vs":
                    cmd = [str(Path(a.vs_bin_dir) / "mailvault")] + cmd[1:]
                p, secs = timed(cmd, env=env)
                if p.returncode != 0:
                    raise SystemExit(f"backup ({label}, {b}) exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
                times[b].append(secs)
                log(f"round {r + 1}: {label} ({b}): nothing changed, {secs:.2f} s")
        med = {label: {b: statistics.median(t) for b, t in s[3].items()} for label, s in servers.items()}
        print(f"\nIMAP backup with nothing changed: {a.accounts} accounts x {a.folders} folders x "
              f"{a.messages} messages, medians of {a.repeat} rounds\n")
        base = med[labels[0]]["this"]
        if a.vs_bin_dir:
            print("| server | --vs-bin-dir s | --bin-dir s | ratio |\n|---|---|---|---|")
            for label in labels:
                m = med[label]
                print(f"| Dovecot, {label} | {m['vs']:.2f} | {m['this']:.2f} | {m['this'] / m['vs']:.2f}x |")
        else:
            print("| server | seconds | ratio |\n|---|---|---|")
            for label in labels:
                print(f"| Dovecot, {label} | {med[label]['this']:.2f} | {med[label]['this'] / base:.2f}x |")
    finally:
        for dov, *_ in servers.values():
            dov.stop()
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
