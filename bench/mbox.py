#!/usr/bin/env python3
"""mbox: a Maildir store and the same messages as mbox files, backed up side by side.

A corpus preset is generated as a Maildir store and backed up (`maildir:`); its snapshot is
exported with `restore --target mbox:OUT` (one mbox folder tree per account, OUT/<domain>/
<user>/), and OUT is backed up into a second repository (`mbox:OUT`). Both backups are
timed in turns, the page cache dropped before each when allowed; reported: wall seconds,
MB/s over the messages' bytes (the snapshots' `bytes_total`, the same for both when the
export is faithful, which is checked), CPU seconds (user + sys: steadier than wall time on
a shared machine), peak RSS, and the ratios. With `--before DIR` the mbox backup is also
run, in the same turns, by the mailvault binary in DIR (an older build, to compare). Then an mbox incremental
after appending to a few files reads only the new bytes (its `bytes_read` is checked).

    bench/mbox.py                  # preset small, release build, 3 rounds
    bench/mbox.py --smoke          # CI: preset tiny, debug build, one round
    bench/mbox.py --bin-dir target/release --before /tmp/old   # against an older build

Issue 14's target: the mbox backup runs at least as fast, in MB/s, as the Maildir backup of
the same messages. Standard library only.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from s3 import binaries, fresh_work, repo_env, timed  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-password-not-secret"


def drop_caches():
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


class Bench:
    def __init__(self, args):
        self.args = args
        self.work, self.logs = fresh_work(args.work or "/tmp/mailvault-bench-mbox")
        self.mv, self.corpus = binaries(args.bin_dir, args.smoke)
        self.n = 0
        self.cold = True

    def env(self, repo):
        return repo_env(self.work, repo)

    def run(self, name, cmd, repo=None, cold=False):
        self.n += 1
        if cold:
            self.cold = drop_caches() and self.cold
        log = self.logs / f"{self.n:02d}-{name}.log"
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        rc, wall, rss, out = timed(cmd, self.env(repo) if repo else dict(os.environ), log)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        if rc != 0:
            raise SystemExit(f"bench: {name} failed (exit {rc}), see {log}")
        return wall, rss, out

    def fresh_repo(self, name):
        repo = self.work / "repos" / name
        for d in (repo, self.work / "cache" / name, self.work / "state" / name):
            if d.exists():
                shutil.rmtree(d)
        repo.parent.mkdir(parents=True, exist_ok=True)
        self.run(f"init-{name}", [self.mv, "init", "--quiet"], repo)
        return repo

    def backup(self, name, source, mv=None):
        repo = self.fresh_repo(name)
        wall, rss, out = self.run(f"backup-{name}", [mv or self.mv, "backup", source, "--json", "--quiet"], repo, cold=True)
        return repo, wall, rss, self.cpu, json.loads(out)

    def main(self):
        a = self.args
        src = self.work / "maildir"
        self.run("generate", [self.corpus, "generate", "--preset", a.preset, "--seed", "1", "--json", str(src)])
        repo, _, _, _, first = self.backup("maildir-0", f"maildir:{src}")
        out = self.work / "mbox"
        wall, _, _ = self.run("export", [self.mv, "restore", "latest", "--target", f"mbox:{out}", "--json", "--quiet"], repo)
        export_secs = wall
        kinds = ["maildir", "mbox"] + (["mbox (before)"] if a.before else [])
        rows = {k: [] for k in kinds}
        reports = {}
        for i in range(a.repeat):
            order = kinds if i % 2 == 0 else kinds[::-1]
            for kind in order:
                source = f"maildir:{src}" if kind == "maildir" else f"mbox:{out}"
                mv = str(Path(a.before).resolve() / "mailvault") if kind == "mbox (before)" else None
                r, wall, rss, cpu, rep = self.backup(f"{kind.replace(' (', '-').rstrip(')')}-{i}", source, mv)
                rows[kind].append((wall, rss, cpu))
                if kind != "mbox (before)":
                    reports[kind] = (r, rep)
        mt, mb = reports["maildir"][1], reports["mbox"][1]
        problems = []
        for k in ("accounts", "items_total", "bytes_total"):
            if mt[k] != mb[k]:
                problems.append(f"{k}: maildir {mt[k]}, mbox {mb[k]}")
        # An incremental after appending one message to three mbox files reads only them.
        repo_mbox = reports["mbox"][0]
        files = sorted(p for p in out.rglob("*") if p.is_file() and p.name == "Inbox")[:3]
        appended = 0
        for p in files:
            add = b"From MAILER-DAEMON Tue Nov 24 07:00:00 2026\nSubject: appended\n\nnew\n\n"
            with open(p, "ab") as f:
                f.write(add)
            appended += len(add)
        _, _, incr = self.run("incremental", [self.mv, "backup", f"mbox:{out}", "--json", "--quiet"], repo_mbox)
        incr = json.loads(incr)
        if incr["bytes_read"] != appended or incr["items_new"] != len(files):
            problems.append(f"incremental after appending {appended} bytes to {len(files)} files read {incr['bytes_read']} bytes, {incr['items_new']} new messages")
        self.report(rows, mt, export_secs, incr, appended, problems)
        if problems:
            raise SystemExit("bench: " + "; ".join(problems))
        if not a.keep:
            shutil.rmtree(self.work)

    def report(self, rows, snap, export_secs, incr, appended, problems):
        mb = snap["bytes_total"] / 1e6
        lines = [
            f"preset {self.args.preset}: {snap['accounts']} accounts, {snap['items_total']} messages, {mb:.1f} MB of messages; "
            f"{self.args.repeat} rounds, medians; page cache {'dropped' if self.cold else 'NOT dropped'} before each backup",
            "",
            "| full backup of | wall s | MB/s | CPU s (user+sys) | peak RSS MB |",
            "|---|---:|---:|---:|---:|",
        ]
        med, cpus = {}, {}
        for kind, rs in rows.items():
            wall = statistics.median(w for w, _, _ in rs)
            rss = statistics.median(r for _, r, _ in rs)
            cpu = statistics.median(c for _, _, c in rs)
            med[kind], cpus[kind] = wall, cpu
            lines.append(f"| {kind} | {wall:.2f} | {mb / wall:.1f} | {cpu:.2f} | {rss:.0f} |")
        lines += [
            "",
            f"mbox MB/s / Maildir MB/s: **{med['maildir'] / med['mbox']:.2f}** (target >= 1); "
            f"mbox CPU / Maildir CPU: {cpus['mbox'] / cpus['maildir']:.2f}",
            f"export (restore --target mbox:): {export_secs:.2f} s",
            f"incremental after appending {appended} bytes to 3 mbox files: {incr['bytes_read']} bytes read, "
            f"{incr['items_new']} new, {incr['items_unchanged']} unchanged, {incr['elapsed_secs']:.2f} s",
        ]
        if problems:
            lines += ["", "PROBLEMS: " + "; ".join(problems)]
        text = "\n".join(lines) + "\n"
        print(text)
        if self.args.out:
            Path(self.args.out).write_text(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="small")
    ap.add_argument("--smoke", action="store_true", help="preset tiny, debug build, one round")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default=None, help="work directory (default /tmp/mailvault-bench-mbox); emptied first")
    ap.add_argument("--bin-dir", default=None, help="directory with mailvault and mailvault-corpus (default: build)")
    ap.add_argument("--out", default=None, help="write the markdown figures here too")
    ap.add_argument("--before", default=None, help="directory with an older mailvault: its mbox backup runs in the same turns")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    if args.smoke:
        args.preset, args.repeat = "tiny", 1
    Bench(args).main()


if __name__ == "__main__":
    main()
