#!/usr/bin/env python3
"""Large files (mail databases): mailvault against restic and borg on one database-like
file, in one run (issue 14).

    bench/files.py                          # 1 GiB file, release build, 3 rounds
    bench/files.py --smoke --bin-dir target/debug   # CI: 32 MiB, one round, the checks
    bench/files.py --size 256M --repeat 1 --bin-dir target/release

The file (`generate` below, fixed seed): 4 KiB pages, a third random (incompressible),
a half text-like records, the rest free pages of zeros. Each tool backs it up once (first
backup), through its own command line: `mailvault backup file:PATH --json`,
`restic backup --json`, `borg create --json`. Then 10% of its pages are rewritten,
scattered, and a 64 KiB block is inserted near the start (`rewrite`), in place, and each
tool backs it up again (second backup). Reported per tool: seconds and MB/s (of the file's
size) of the first backup, the bytes the second backup adds (mailvault's `bytes_added`; the
growth of restic's and borg's repository directories, as restic 0.14's `data_added` counts
bytes before compression; each tool's own figure beside it), and the ratios to restic. Targets (the issue's):
mailvault's first backup >= 2x restic's MB/s; its second adds <= 0.4x the bytes restic's
adds. Checked in every run, smoke included: both mailvault snapshots restored with
`restore SNAPSHOT --target dir:DIR` hash the same as the versions they saved, the second
backup reads the whole changed file (`bytes_read`), and a third backup with nothing
changed reads nothing. A failed check exits 1; a missed target is reported, not failed.

Every round starts from new repositories and the same file, the tools taking turns going
first; the tables give medians. The file is read once before each backup, so every tool
reads it from the page cache. CPU seconds (user and system) are given beside the wall
time: on a shared machine they are the steadier figure. Standard library only.
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from s3 import binaries  # noqa: E402

PASSWORD = "bench-password-not-secret"
SEED = 14
TOOLS = ["mailvault", "restic", "borg"]
PAGE = 4096
INSERT = 64 << 10

WORDS = [b"From: ", b"alice@example.org", b"Subject: ", b"quarterly report", b"Received",
         b"by mail.example.org", b"\r\n", b"Content-Type: text/plain", b"bob", b"; ",
         b"meeting", b"database", b"notes", b"2026-11-24", b"OK", b"<"]


def log(msg):
    print(f"[files {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def size_arg(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def page(rng):
    """One database page: random (2 in 6), text-like records with record numbers (3 in 6),
    or free (zeros)."""
    kind = rng.randrange(6)
    if kind < 2:
        return rng.randbytes(PAGE)
    if kind < 5:
        parts = []
        n = 0
        while n < PAGE:
            parts.append(rng.randbytes(4))
            for w in rng.choices(WORDS, k=24):
                parts.append(w)
                n += len(w)
            n += 4
        return b"".join(parts)[:PAGE]
    return bytes(PAGE)


def generate(path, size, seed):
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for _ in range(size // PAGE):
            f.write(page(rng))
        f.write(page(rng)[: size % PAGE])


def rewrite(path, seed):
    """10% of the pages rewritten (scattered, at random) and INSERT bytes of new pages
    inserted near the start (at 1/64 of the file, at most 1 MiB, on a page boundary), in
    place: same inode, new size and mtime."""
    rng = random.Random(seed ^ 0x5EED)
    data = bytearray(Path(path).read_bytes())
    pages = len(data) // PAGE
    for p in rng.sample(range(pages), pages // 10):
        data[p * PAGE:(p + 1) * PAGE] = page(rng)
    at = min(len(data) // 64, 1 << 20) // PAGE * PAGE
    data[at:at] = b"".join(page(rng) for _ in range(INSERT // PAGE))
    with open(path, "r+b") as f:
        f.write(data)
        f.truncate()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def du(path):
    n = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                n += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    return n


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = Path(args.work).resolve()
        self.logs = self.work / "logs"
        self.data = self.work / "data"
        self.src = self.work / "src"
        self.file = self.src / "mail.nsf"
        self.mv, _ = binaries(args.bin_dir, args.smoke)
        self.failures = []
        self.n = 0

    def env(self, tool):
        repo = self.work / "repos" / tool
        cache = self.work / "cache" / tool
        env = dict(os.environ)
        env.update({
            "MAILVAULT_REPOSITORY": str(repo),
            "MAILVAULT_PASSWORD": PASSWORD,
            "XDG_CACHE_HOME": str(cache),
            "MAILVAULT_STATE_DIR": str(self.work / "state" / tool),
            "RESTIC_REPOSITORY": str(repo),
            "RESTIC_PASSWORD": PASSWORD,
            "RESTIC_CACHE_DIR": str(cache),
            "BORG_REPO": str(repo),
            "BORG_PASSPHRASE": PASSWORD,
            "BORG_BASE_DIR": str(cache),
        })
        return env, repo

    def run(self, name, cmd, env=None):
        """Runs cmd; (wall seconds, CPU seconds, stdout). A failure ends the run."""
        self.n += 1
        self.logs.mkdir(parents=True, exist_ok=True)
        logf = self.logs / f"{self.n:02d}-{name}.log"
        with open(logf, "wb") as lf:
            lf.write(f"$ {' '.join(map(str, cmd))}\n".encode())
            lf.flush()
            t0 = time.monotonic()
            p = subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.PIPE, stderr=lf)
            out = p.stdout.read()
            _, status, ru = os.wait4(p.pid, 0)
            wall = time.monotonic() - t0
            lf.write(b"--- stdout\n" + out)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"files: {name} failed (exit {os.waitstatus_to_exitcode(status)}); log: {logf}")
        return wall, ru.ru_utime + ru.ru_stime, out.decode(errors="replace")

    def warm(self):
        with open(self.file, "rb") as f:
            while f.read(16 << 20):
                pass

    def init(self, tool):
        env, repo = self.env(tool)
        for d in (repo, self.work / "cache" / tool, self.work / "state" / tool):
            shutil.rmtree(d, ignore_errors=True)
        repo.parent.mkdir(parents=True, exist_ok=True)
        cmd = {
            "mailvault": [self.mv, "init", "--quiet"],
            "restic": ["restic", "init", "--quiet"],
            "borg": ["borg", "init", "--encryption=repokey-blake2", repo],
        }[tool]
        self.run(f"{tool}-init", cmd, env)

    def backup(self, tool, which):
        """One backup of the file; its figures (and mailvault's report)."""
        env, repo = self.env(tool)
        before = du(repo)
        self.warm()
        if tool == "mailvault":
            cmd = [self.mv, "backup", f"file:{self.file}", "--json", "--quiet"]
        elif tool == "restic":
            cmd = ["restic", "backup", "--host", "bench", "--json", self.file]
        else:
            cmd = ["borg", "create", "--json", "--compression", "lz4", f"::{which}", self.file]
        wall, cpu, out = self.run(f"{tool}-{which}", cmd, env)
        report = None
        if tool == "mailvault":
            report = json.loads(out)
            own = report["bytes_added"]
        elif tool == "restic":
            summary = [m for m in map(json.loads, filter(None, out.splitlines())) if m.get("message_type") == "summary"]
            own = summary[-1]["data_added"]
        else:
            own = json.loads(out)["archive"]["stats"]["deduplicated_size"]
        grew = du(repo) - before
        # mailvault's bytes_added is what it wrote; restic's data_added (0.14) is before
        # compression, so the peers are measured by their repository's growth.
        added = own if tool == "mailvault" else grew
        size = self.file.stat().st_size
        log(f"{tool} {which}: {wall:.2f} s ({cpu:.2f} s CPU), {size / 1e6 / wall:.0f} MB/s, "
            f"added {added / 1e6:.1f} MB (own figure {own / 1e6:.1f} MB, repository +{grew / 1e6:.1f} MB)")
        return {"seconds": wall, "cpu_seconds": cpu, "mb_per_s": size / 1e6 / wall, "added": added,
                "own_figure": own, "repo_growth": grew}, report

    def check(self, ok, what):
        if not ok:
            self.failures.append(what)
            log(f"CHECK FAILED: {what}")

    def restore_check(self, snapshot, digest, which):
        env, _ = self.env("mailvault")
        target = self.work / f"restore-{which}"
        shutil.rmtree(target, ignore_errors=True)
        wall, _, _ = self.run(f"mailvault-restore-{which}",
                              [self.mv, "restore", snapshot, "--target", f"dir:{target}", "--quiet"], env)
        got = target / str(self.file).lstrip("/")
        ok = got.is_file() and sha256(got) == digest
        log(f"mailvault restore of the {which} backup: {wall:.2f} s, {'identical' if ok else 'DIFFERS'}")
        self.check(ok, f"the restore of the {which} backup ({got}) differs from the file it saved")
        shutil.rmtree(target, ignore_errors=True)
        return wall

    def round(self, i, tools, v1, v2, digests):
        order = tools[i % len(tools):] + tools[:i % len(tools)]
        log(f"round {i + 1}: order {', '.join(order)}")
        res = {t: {} for t in tools}
        reports = {}
        shutil.copyfile(v1, self.file)
        for t in order:
            self.init(t)
            res[t]["first"], rep = self.backup(t, "first")
            if t == "mailvault":
                reports["first"] = rep
        # The rewrite, in place: copy the second version's bytes into the same inode.
        with open(v2, "rb") as src, open(self.file, "r+b") as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
            dst.truncate()
        # As a nightly backup finds a file: written more than mailvault's margin before the
        # backup (docs/format.md, *Folders taken unchanged*: 3 s for whole-second times), so
        # that the next backup can prove it unchanged without reading it.
        time.sleep(3.1)
        for t in order:
            out, rep = self.backup(t, "second")
            res[t]["second"] = out
            if t == "mailvault":
                reports["second"] = rep
        size = self.file.stat().st_size
        self.check(reports["second"]["bytes_read"] == size,
                   f"the second backup read {reports['second']['bytes_read']} bytes of a changed file of {size}")
        _, third = self.backup("mailvault", "third")
        self.check(third["bytes_read"] == 0, f"a backup with nothing changed read {third['bytes_read']} bytes")
        res["mailvault"]["restore_first"] = self.restore_check(reports["first"]["snapshot"], digests["first"], "first")
        res["mailvault"]["restore_second"] = self.restore_check(reports["second"]["snapshot"], digests["second"], "second")
        return res

    def main(self):
        self.work.mkdir(parents=True, exist_ok=True)
        self.src.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(parents=True, exist_ok=True)
        tools = [t for t in TOOLS if t == "mailvault" or shutil.which(t)]
        for t in TOOLS:
            if t not in tools:
                log(f"{t} not installed: skipped (scripts/setup.sh installs it)")
        size = self.args.size
        v1, v2 = self.data / f"v1-{size}", self.data / f"v2-{size}"
        if not (v1.exists() and v2.exists()):
            log(f"generating {size} bytes (seed {SEED}) and the rewritten version")
            generate(v1, size, SEED)
            shutil.copyfile(v1, v2)
            rewrite(v2, SEED)
        digests = {"first": sha256(v1), "second": sha256(v2)}
        self.rounds = [self.round(i, tools, v1, v2, digests) for i in range(self.args.repeat)]
        med = {t: {w: {k: statistics.median(r[t][w][k] for r in self.rounds) for k in self.rounds[0][t][w]}
                   for w in ("first", "second")} for t in tools}
        for w in ("restore_first", "restore_second"):
            med["mailvault"][w] = statistics.median(r["mailvault"][w] for r in self.rounds)
        self.report(tools, med)
        if not self.args.keep:
            for d in ("repos", "cache", "state", "src"):
                shutil.rmtree(self.work / d, ignore_errors=True)
        if self.failures:
            raise SystemExit("files: " + "; ".join(self.failures))

    def report(self, tools, r):
        size = self.args.size
        rs = "restic" in tools
        lines = [
            f"{size / (1 << 20):.0f} MiB database-like file (4 KiB pages; 10% rewritten and 64 KiB inserted "
            f"before the second backup); medians of {len(self.rounds)} round(s); mailvault {self.mv}. "
            "Added: mailvault's bytes_added, the growth of restic's and borg's repositories; the tools' own "
            "figures beside it (restic's data_added, borg's deduplicated_size).",
            "",
            "| tool | first backup s | CPU s | MB/s | MB/s ÷ restic | stored by first | second backup s | added by second | ÷ restic | tool's own figure |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for t in tools:
            f, s = r[t]["first"], r[t]["second"]
            speed = f"{f['mb_per_s'] / r['restic']['first']['mb_per_s']:.2f}" if rs else "–"
            added = f"{s['added'] / max(1, r['restic']['second']['added']):.2f}" if rs else "–"
            lines.append(f"| {t} | {f['seconds']:.2f} | {f['cpu_seconds']:.2f} | {f['mb_per_s']:.0f} | {speed} | "
                         f"{f['added'] / 1e6:.1f} MB | {s['seconds']:.2f} | {s['added'] / 1e6:.1f} MB | {added} | {s['own_figure'] / 1e6:.1f} MB |")
        lines += ["", f"mailvault restores (dir:, hash-checked): first {r['mailvault']['restore_first']:.2f} s, "
                      f"second {r['mailvault']['restore_second']:.2f} s"]
        if rs:
            speed = r["mailvault"]["first"]["mb_per_s"] / r["restic"]["first"]["mb_per_s"]
            added = r["mailvault"]["second"]["added"] / max(1, r["restic"]["second"]["added"])
            lines.append(f"Targets: first backup >= 2x restic's MB/s: **{speed:.2f}x** ({'met' if speed >= 2 else 'NOT met'}); "
                         f"second adds <= 0.4x restic's bytes: **{added:.2f}x** ({'met' if added <= 0.4 else 'NOT met'}).")
        if self.failures:
            lines.append("CHECKS FAILED: " + "; ".join(self.failures))
        text = "\n".join(lines) + "\n"
        print(text)
        (self.work / "results.md").write_text(text)
        (self.work / "results.json").write_text(json.dumps({"medians": r, "rounds": self.rounds}, indent=2))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=size_arg, default=1 << 30, help="file size (default 1G)")
    ap.add_argument("--smoke", action="store_true", help="CI: 32 MiB, one round (debug build unless --bin-dir)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; the report gives medians (default 3)")
    ap.add_argument("--work", default="/tmp/mailvault-bench-files",
                    help="work directory (the generated file is kept there for the next run)")
    ap.add_argument("--bin-dir", default=None, help="directory with the mailvault binary (default: build)")
    ap.add_argument("--keep", action="store_true", help="keep the repositories")
    args = ap.parse_args()
    if args.smoke:
        args.size, args.repeat = 32 << 20, 1
    Bench(args).main()


if __name__ == "__main__":
    main()
