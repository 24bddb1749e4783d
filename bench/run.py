#!/usr/bin/env python3
"""mailvault's project benchmark: mailvault against restic and borg (lz4 and zstd), and
against the physical limits of the disk (reading every file; copying the tree), on a
deterministic generated Maildir store and on the SpamAssassin public corpus.

One command does everything: build, generate the corpus, run each scenario for each tool
(interleaved, page cache dropped before every timed run where permitted), and write a
markdown report with a table per scenario, the mailvault/peer ratios and the issue's targets.

    bench/run.sh                       # preset small (10k messages, ~0.45 GB)
    bench/run.sh --preset large        # 100k messages, ~4 GB
    bench/run.sh --smoke               # CI: preset tiny, one round, checks that everything runs
                                       # and that every tool's restore is identical to the source
    bench/run.sh --help

Every scenario runs --repeat times (default 3), the tools in a rotated order each round, and
the tables give medians. Every restore of every tool is compared with the source, file by file
(a manifest of names, sizes, mtimes, modes, owners and SHA-256 of the contents).

Standard library only. Tools that are missing are skipped with a note; a tool command that
fails, or a restore that differs from the source, is reported in the table and makes the exit
status 1.
"""

import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import platform
import shlex
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# Scenario ids, in run order.
SCENARIOS = ["limits", "full", "incr", "restore", "restore-account", "check", "spamassassin"]
SCENARIO_TITLES = {
    "limits": "Physical limits",
    "full": "(1) Full backup",
    "incr": "(2) Incremental backup after the mutation",
    "restore": "(3) Full restore to an empty directory",
    "restore-account": "(4) Restore of the largest account alone",
    "check": "(5) Check with data verification (check --read-data / --verify-data)",
    "spamassassin": "SpamAssassin corpus (real mail): full backup, repository size, and its restore compared with the source",
}
TOOLS = ["mailvault", "mailvault-base", "restic", "borg-lz4", "borg-zstd"]
# mailvault-base: another build of mailvault (--base-bin-dir, e.g. the previous main) run
# beside this one on the same data, for before/after comparisons in one run.
MAILVAULTS = ("mailvault", "mailvault-base")
# Rows that run a tool with other flags: row -> (tool, extra backup flags). The peers stat
# every file on an incremental; mailvault by default recognizes known messages by name alone.
VARIANTS = {"mailvault-stat": ("mailvault", ["--stat-unchanged"])}
ROW_LABELS = {"mailvault-stat": "mailvault --stat-unchanged"}
ROWS = ["mailvault", "mailvault-base", "mailvault-stat", "restic", "borg-lz4", "borg-zstd"]
LIMITS = {"read": "limit: read all files (tar \\| cat)", "copy": "limit: copy (cp -a)"}
PASSWORD = "bench-password-not-secret"
MB = 1e6


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh_out(cmd, **kw):
    """Output of a quick informational command, or '' if it fails."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60, **kw).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def du_bytes(path):
    """Apparent size in bytes (du -sb), 0 when missing."""
    if not Path(path).exists():
        return 0
    out = sh_out(["du", "-sb", str(path)])
    try:
        return int(out.split()[0])
    except (ValueError, IndexError):
        return 0


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def manifest(root):
    """What a restore of `root` must give back, by path relative to it: for a regular file
    its size, mtime (ns), mode, owner, group and SHA-256; for a directory its mode, owner and
    group (not its mtime: every tool sets it differently, and nothing reads it back); for a
    symbolic link its target. Files are hashed on a few threads (hashlib releases the GIL),
    which keeps this cheap next to the restore itself, even for the large preset."""
    root = str(root)
    entries, files = {}, []
    for dirpath, dirs, names in os.walk(root):
        for name in dirs + names:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            ids = (oct(stat.S_IMODE(st.st_mode)), st.st_uid, st.st_gid)
            if stat.S_ISREG(st.st_mode):
                files.append((rel, path, (st.st_size, st.st_mtime_ns) + ids))
            elif stat.S_ISDIR(st.st_mode):
                entries[rel] = ("dir",) + ids
            elif stat.S_ISLNK(st.st_mode):
                entries[rel] = ("symlink", os.readlink(path))
            else:
                entries[rel] = ("other", stat.S_IFMT(st.st_mode)) + ids
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for (rel, _, meta), digest in zip(files, pool.map(sha256_file, [f[1] for f in files])):
            entries[rel] = ("file",) + meta + (digest,)
    return entries


MANIFEST_FIELDS = {
    "file": ["kind", "size", "mtime", "mode", "owner", "group", "contents"],
    "dir": ["kind", "mode", "owner", "group"],
    "symlink": ["kind", "target"],
    "other": ["kind", "type", "mode", "owner", "group"],
}


def compare_manifests(expected, got):
    """None when equal, else a one-line account of the differences with examples."""
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    changed = []
    for rel in sorted(set(expected) & set(got)):
        a, b = expected[rel], got[rel]
        if a != b:
            names = MANIFEST_FIELDS.get(a[0], [])
            fields = [names[i] if i < len(names) else str(i) for i in range(max(len(a), len(b))) if a[i:i + 1] != b[i:i + 1]]
            changed.append(f"{rel} ({', '.join(fields)})")
    if not (missing or extra or changed):
        return None
    parts = []
    for what, items in (("missing", missing), ("not in the source", extra), ("different", changed)):
        if items:
            parts.append(f"{len(items)} {what}: " + "; ".join(items[:3]) + ("; …" if len(items) > 3 else ""))
    return " | ".join(parts)


def subtree(entries, rel):
    """The entries of `entries` at or below `rel`."""
    return {k: v for k, v in entries.items() if k == rel or k.startswith(rel + "/")}


def self_test(work):
    """Checks that compare_manifests sees each kind of damage a restore can do (run before
    every benchmark; milliseconds): a comparison that cannot fail would flatter every tool."""
    src, copy = Path(work) / "self-test" / "src", Path(work) / "self-test" / "copy"
    shutil.rmtree(src.parent, ignore_errors=True)
    (src / "a" / "cur").mkdir(parents=True)
    (src / "a" / "tmp").mkdir()
    (src / "a" / "cur" / "m1:2,S").write_bytes(b"Subject: x\n\nbody\n")
    (src / "a" / "cur" / "m2:2,").write_bytes(b"Subject: y\n\n" + bytes(range(256)))
    os.utime(src / "a" / "cur" / "m1:2,S", ns=(1_600_000_000_123_456_789,) * 2)

    def damaged(what, change):
        shutil.rmtree(copy, ignore_errors=True)
        subprocess.run(["cp", "-a", str(src), str(copy)], check=True)
        change(copy)
        diff = compare_manifests(manifest(src), manifest(copy))
        if diff is None or what not in diff:
            raise SystemExit(f"bench: self-test: the restore comparison missed {what!r} (it said {diff!r})")

    def flip(c):
        f = c / "a" / "cur" / "m2:2,"
        b = bytearray(f.read_bytes())
        b[-1] ^= 1
        st = f.stat()
        f.write_bytes(bytes(b))
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))

    if compare_manifests(manifest(src), manifest(src)) is not None:
        raise SystemExit("bench: self-test: a tree differs from itself")
    damaged("contents", flip)
    damaged("mtime", lambda c: os.utime(c / "a" / "cur" / "m1:2,S", ns=(1_600_000_000_000_000_000,) * 2))
    damaged("size", lambda c: (c / "a" / "cur" / "m1:2,S").write_bytes(b"Subject: x\n\nbody\n\n"))
    damaged("mode", lambda c: os.chmod(c / "a" / "cur" / "m1:2,S", 0o640))
    damaged("mode", lambda c: os.chmod(c / "a" / "cur", 0o700))
    damaged("missing", lambda c: os.unlink(c / "a" / "cur" / "m2:2,"))
    damaged("missing", lambda c: os.rmdir(c / "a" / "tmp"))
    damaged("not in the source", lambda c: (c / "a" / "cur" / "m3:2,").write_bytes(b"x"))
    damaged("kind", lambda c: (os.unlink(c / "a" / "cur" / "m2:2,"), os.symlink("m1:2,S", c / "a" / "cur" / "m2:2,")))
    shutil.rmtree(src.parent)


def tool_of(row):
    """The tool a table row runs (a variant's tool, else the row itself)."""
    return VARIANTS[row][0] if row in VARIANTS else row


def fmt_num(v, digits=1):
    if v is None:
        return "–"
    if isinstance(v, str):
        return v
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


class Bench:
    def __init__(self, args, preset, work):
        self.args = args
        self.preset = preset
        self.work = Path(work).resolve()
        self.logs = self.work / "logs"
        self.src = self.work / "src"
        self.results = {}  # scenario -> row name -> dict
        self.notes = []
        self.failures = []
        self.tools = {}  # name -> description (available ones)
        self.skipped = {}  # name -> why
        self.drop_ok = False
        self.time_bin = "/usr/bin/time" if Path("/usr/bin/time").exists() else None
        self.stats = {}  # 'before' / 'after' -> mailvault-corpus stats json
        self.mutation = None
        self.labels = {}  # tool -> last backup label / snapshot
        self.manifests = {}  # 'before' / 'after' -> manifest of the source

    # ---------------------------------------------------------------- running things

    def drop_caches(self):
        if not self.args.drop_caches:
            return
        subprocess.run(["sync"], check=False)
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            self.drop_ok = True
        except OSError:
            pass

    def run(self, name, cmd, env=None, cwd=None, timed=True, limit=True):
        """Runs cmd (a list, or a string for bash -c); returns rc, wall, rss_kb, stdout."""
        self.logs.mkdir(parents=True, exist_ok=True)
        logf = self.logs / f"{name}.log"
        tfile = self.logs / f"{name}.time"
        argv = ["bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if timed:
            self.drop_caches()
        if timed and self.time_bin:
            argv = [self.time_bin, "-o", str(tfile), "-f", "%e %M"] + argv
        shown = cmd if isinstance(cmd, str) else shlex.join(cmd)
        with open(logf, "wb") as lf:
            lf.write(f"$ {shown}\n".encode())
            lf.flush()
            t0 = time.monotonic()
            p = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=lf, start_new_session=True)
            try:
                out, _ = p.communicate(timeout=(self.args.timeout or None) if limit else None)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out, _ = p.communicate()
                rc = "timeout"
            wall = time.monotonic() - t0
            lf.write(b"--- stdout\n" + out)
        rss = None
        if timed and self.time_bin and tfile.exists():
            lines = tfile.read_text().strip().splitlines()
            try:
                rss = int(lines[-1].split()[1])
            except (ValueError, IndexError):
                rss = None
        return {"rc": rc, "wall": wall, "rss_kb": rss, "stdout": out.decode(errors="replace"), "log": str(logf)}

    def entry(self, res, items=None, nbytes=None, repo=None, added=None, extra=None, error=None):
        """One timed run: the command's result and what it worked on. `error` marks a run
        whose command succeeded but whose outcome is wrong (a restore that differs)."""
        e = {
            "rc": res["rc"] if res["rc"] != 0 or not error else "restore differs",
            "wall": res["wall"],
            "rss_kb": res["rss_kb"],
            "items": items,
            "bytes": nbytes,
            "repo_bytes": repo,
            "added_bytes": added,
            "log": res["log"],
        }
        if error:
            e["error"] = error
        if extra:
            e.update(extra)
        return e

    def repeated(self, scenario, jobs):
        """Runs every job of `jobs` ([(row, fn)], fn(round) -> entry) --repeat times, round i
        starting with the i-th job (rotated order: no row always runs first, or always right
        after another), and records the median of each row's runs."""
        runs = {row: [] for row, _ in jobs}
        for i in range(self.args.repeat):
            k = i % len(jobs) if jobs else 0
            for row, fn in jobs[k:] + jobs[:k]:
                e = fn(i)
                runs[row].append(e)
                ok = e["rc"] == 0
                log(f"{scenario:16} {row:14} {'ok' if ok else 'FAILED: ' + str(e['rc'])}  {e['wall']:.2f} s"
                    + (f"  (round {i + 1}/{self.args.repeat})" if self.args.repeat > 1 else ""))
        done = {}
        for row, _ in jobs:
            done[row] = self.record_runs(scenario, row, runs[row])
        return done

    def record_runs(self, scenario, row, runs):
        """Records a row from its runs: the first failed run if any failed, else the last run
        with the median wall time and peak RSS, and every run's wall time. True if all passed."""
        failed = [e for e in runs if e["rc"] != 0]
        for e in failed:
            why = f"restore differs from the source: {e['error']}" if e.get("error") else f"exit {e['rc']}"
            self.failures.append(f"{ROW_LABELS.get(row, row)} / {scenario}: {why} (log: {e['log']})")
        entry = dict(failed[0] if failed else runs[-1])
        if not failed:
            entry["walls"] = [e["wall"] for e in runs]
            entry["wall"] = statistics.median(entry["walls"])
            rss = [e["rss_kb"] for e in runs if e["rss_kb"]]
            entry["rss_kb"] = statistics.median(rss) if rss else None
        self.results.setdefault(scenario, {})[row] = entry
        return not failed

    # ---------------------------------------------------------------- setup

    def build(self):
        target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO_ROOT / "target")
        if not target.is_absolute():
            target = REPO_ROOT / target
        profile = self.args.profile
        out_dir = "debug" if profile == "dev" else profile
        self.bin_dir = Path(self.args.bin_dir).resolve() if self.args.bin_dir else target / out_dir
        if not self.args.no_build:
            for pkg in ["mailvault-corpus", "mailvault"]:
                cmd = ["cargo", "build", "--profile", profile, "-p", pkg]
                log(shlex.join(cmd))
                r = self.run(f"build-{pkg}", cmd, cwd=REPO_ROOT, timed=False, limit=False)
                if r["rc"] != 0:
                    self.notes.append(f"`{shlex.join(cmd)}` failed (see {r['log']}).")
        if profile != "release" and not self.args.bin_dir:
            self.notes.append(f"binaries of the `{profile}` profile: timings are not representative.")
        self.corpus_bin = self.bin_dir / "mailvault-corpus"
        self.mv_bin = self.bin_dir / "mailvault"
        self.mv_bins = {"mailvault": self.mv_bin}
        if self.args.base_bin_dir:
            self.mv_bins["mailvault-base"] = Path(self.args.base_bin_dir).resolve() / "mailvault"
        if not self.corpus_bin.exists():
            raise SystemExit(f"bench: {self.corpus_bin} missing: build it with `cargo build --profile {profile} -p mailvault-corpus`")

    def find_tools(self):
        wanted = [t.strip() for t in self.args.tools.split(",") if t.strip()]
        for t in wanted:
            if t not in TOOLS:
                raise SystemExit(f"bench: unknown tool {t!r}; choose from {', '.join(TOOLS)}")
        for t in wanted:
            if t in MAILVAULTS:
                if t not in self.mv_bins:
                    continue  # mailvault-base without --base-bin-dir
                b = self.mv_bins[t]
                ok = b.exists() and sh_out([str(b), "--version"]) != ""
                if ok:
                    self.tools[t] = sh_out([str(b), "--version"]) + f" ({b})"
                else:
                    self.skipped[t] = f"{b} missing or not runnable"
            elif t == "restic":
                if shutil.which("restic"):
                    self.tools[t] = sh_out(["restic", "version"]).splitlines()[0]
                else:
                    self.skipped[t] = "restic not installed (apt-get install restic)"
            else:
                if shutil.which("borg"):
                    self.tools[t] = sh_out(["borg", "--version"]) + (" --compression lz4" if t == "borg-lz4" else " --compression zstd")
                else:
                    self.skipped[t] = "borg not installed (apt-get install borgbackup)"
        for t, why in self.skipped.items():
            self.notes.append(f"{t} skipped: {why}.")
            log(f"skipping {t}: {why}")

    def corpus_stats(self, root):
        r = self.run("stats", [str(self.corpus_bin), "stats", "--json", str(root)], timed=False)
        if r["rc"] != 0:
            return None
        return json.loads(r["stdout"])

    def generate(self):
        if self.src.exists():
            shutil.rmtree(self.src)
        log(f"generating corpus: preset {self.preset}, seed {self.args.seed}")
        r = self.run(
            "generate",
            [str(self.corpus_bin), "generate", "--preset", self.preset, "--seed", str(self.args.seed), "--json", str(self.src)],
            timed=False,
        )
        if r["rc"] != 0:
            raise SystemExit(f"bench: corpus generation failed, see {r['log']}")
        self.corpus = json.loads(r["stdout"])
        self.corpus["generate_secs"] = r["wall"]
        self.stats["before"] = self.corpus_stats(self.src)

    # ---------------------------------------------------------------- tools

    def env(self, row, repo):
        """The environment of a row's commands on `repo`; each repository has its own cache
        directory (`cache/<repo's name>`), so that saving and loading a repository's state
        (see save_state) takes its cache along."""
        tool = tool_of(row)
        cache = self.cache(repo)
        env = dict(os.environ)
        if tool in MAILVAULTS:
            env["MAILVAULT_REPOSITORY"] = str(repo)
            env["MAILVAULT_PASSWORD_FILE"] = str(self.work / "password")
            env["XDG_CACHE_HOME"] = str(cache)
            # This host's record of the repository goes with it too: a copy put back (the
            # incremental's parent) is not a rollback of the repository it was copied from.
            env["MAILVAULT_STATE_DIR"] = str(cache / "state")
        elif tool == "restic":
            env["RESTIC_REPOSITORY"] = str(repo)
            env["RESTIC_PASSWORD_FILE"] = str(self.work / "password")
            env["RESTIC_CACHE_DIR"] = str(cache)
        else:
            env["BORG_REPO"] = str(repo)
            env["BORG_PASSPHRASE"] = PASSWORD
            env["BORG_BASE_DIR"] = str(cache)
            env["BORG_RELOCATED_REPO_ACCESS_IS_OK"] = "yes"
        return env

    def repo(self, row, kind="main"):
        return self.work / "repos" / f"{row}-{kind}"

    def cache(self, repo):
        return self.work / "cache" / repo.name

    def init(self, row, repo):
        """A new, empty repository (and cache) for `row` at `repo`."""
        tool = tool_of(row)
        for d in (repo, self.cache(repo)):
            if d.exists():
                shutil.rmtree(d)
        repo.parent.mkdir(parents=True, exist_ok=True)
        env = self.env(tool, repo)
        if tool in MAILVAULTS:
            cmd = [str(self.mv_bins[tool]), "init", "--quiet"]
        elif tool == "restic":
            cmd = ["restic", "init", "--quiet"]
        else:
            cmd = ["borg", "init", "--encryption=repokey-blake2", str(repo)]
        r = self.run(f"{row}-init-{repo.name}", cmd, env=env, timed=False)
        if r["rc"] != 0:
            self.failures.append(f"{row}: init failed (log: {r['log']})")
            return False
        return True

    def save_state(self, row, kind="main"):
        """Keeps a copy of the row's repository and cache, for load_state."""
        repo = self.repo(row, kind)
        saved = self.work / "saved" / repo.name
        if saved.exists():
            shutil.rmtree(saved)
        saved.mkdir(parents=True)
        for d, name in ((repo, "repo"), (self.cache(repo), "cache")):
            if d.exists():
                subprocess.run(["cp", "-a", "--reflink=auto", str(d), str(saved / name)], check=True)

    def load_state(self, row, from_row=None, kind="main"):
        """Puts back the repository and cache save_state kept (of `from_row`, default the
        same row): repeated incremental runs start from the same parent, and borg finds the
        files cache and security records that match its repository."""
        repo = self.repo(row, kind)
        saved = self.work / "saved" / self.repo(from_row or row, kind).name
        for d, name in ((repo, "repo"), (self.cache(repo), "cache")):
            if d.exists():
                shutil.rmtree(d)
            if (saved / name).exists():
                subprocess.run(["cp", "-a", "--reflink=auto", str(saved / name), str(d)], check=True)

    def backup_cmd(self, row, repo, src, label, account=None):
        """(argv, cwd) of a backup of src."""
        tool = tool_of(row)
        if tool in MAILVAULTS:
            cmd = [str(self.mv_bins[tool]), "backup", f"maildir:{src}", "--json", "--quiet"] + VARIANTS.get(row, (tool, []))[1]
            if account:
                cmd += ["--account", account]
            return cmd, None
        if tool == "restic":
            return ["restic", "backup", "--host", "bench", "--quiet", str(src)], None
        comp = "lz4" if tool == "borg-lz4" else "zstd"
        # Relative path: archive paths are `src/<domain>/...`.
        return ["borg", "create", "--compression", comp, f"{repo}::{label}", src.name], src.parent

    def restore_cmd(self, tool, repo, target, account_rel=None, account=None, label=None):
        if tool in MAILVAULTS:
            cmd = [str(self.mv_bins[tool]), "restore", "latest", "--target", f"maildir:{target}", "--json", "--quiet"]
            if account:
                cmd += ["--account", account]
            return cmd, None
        if tool == "restic":
            cmd = ["restic", "restore", "latest", "--host", "bench", "--target", str(target)]
            if account_rel:
                cmd += ["--include", str(self.src / account_rel)]
            return cmd, None
        cmd = ["borg", "extract", f"{repo}::{label or self.labels[tool]}"]
        if account_rel:
            cmd.append(str(Path(self.src.name) / account_rel))
        return cmd, target

    def check_cmd(self, tool, repo):
        if tool in MAILVAULTS:
            return [str(self.mv_bins[tool]), "check", "--read-data"]
        if tool == "restic":
            return ["restic", "check", "--read-data"]
        return ["borg", "check", "--verify-data", str(repo)]

    def restored_root(self, tool, target, src=None):
        """Where a tool puts the restored store `src` (default the corpus) under its target:
        restic restores under the source's absolute path, borg under the path it was given
        (the source's name, from its parent directory)."""
        src = src or self.src
        if tool in MAILVAULTS:
            return target
        if tool == "restic":
            return target / str(src).lstrip("/")
        return target / src.name

    # ---------------------------------------------------------------- scenarios

    def logname(self, base, i):
        """The log file name of round i of a repeated command."""
        return base if self.args.repeat == 1 else f"{base}-{i + 1}"

    def limits(self):
        st = self.stats["before"]
        dst = self.work / "copy"

        def read(i):
            r = self.run(self.logname("limit-read", i), f"tar -cf - -C {shlex.quote(str(self.src.parent))} {shlex.quote(self.src.name)} | cat >/dev/null")
            return self.entry(r, items=st["messages"], nbytes=st["bytes"])

        def copy(i):
            if dst.exists():
                shutil.rmtree(dst)
            r = self.run(self.logname("limit-copy", i), ["cp", "-a", str(self.src), str(dst)])
            shutil.rmtree(dst, ignore_errors=True)
            return self.entry(r, items=st["messages"], nbytes=st["bytes"])

        self.repeated("limits", [("read", read), ("copy", copy)])

    def full(self):
        st = self.stats["before"]

        def job(tool):
            def fn(i):
                repo = self.repo(tool)
                if not self.init(tool, repo):
                    return self.entry({"rc": "init failed", "wall": 0.0, "rss_kb": None, "log": str(self.logs)})
                cmd, cwd = self.backup_cmd(tool, repo, self.src, "full")
                r = self.run(self.logname(f"{tool}-full", i), cmd, env=self.env(tool, repo), cwd=cwd)
                size = du_bytes(repo)
                return self.entry(r, items=st["messages"], nbytes=st["bytes"], repo=size, added=size, extra=self.mailvault_json(tool, r))
            return fn

        for tool, ok in self.repeated("full", [(t, job(t)) for t in self.tools]).items():
            if ok:
                self.labels[tool] = "full"

    def mailvault_json(self, tool, r):
        if tool_of(tool) not in MAILVAULTS or r["rc"] != 0:
            return None
        try:
            return {"report": json.loads(r["stdout"])}
        except ValueError:
            return None

    def incr(self):
        log(f"mutating the corpus (seed {self.args.mutate_seed})")
        r = self.run("mutate", [str(self.corpus_bin), "mutate", "--seed", str(self.args.mutate_seed), "--json", str(self.src)], timed=False)
        if r["rc"] != 0:
            self.failures.append(f"mutate failed (log: {r['log']})")
            return
        self.mutation = json.loads(r["stdout"])
        self.stats["after"] = self.corpus_stats(self.src)
        st = self.stats["after"]
        rows = []
        for tool in self.backed_up():
            rows.append((tool, tool))
            # mailvault --stat-unchanged backs up the same change from the same parent, in a
            # copy of mailvault's repository.
            rows += [(v, tool) for v, (t, _) in VARIANTS.items() if t == tool]
        # Every run starts from the state the full backup left: kept once, put back before
        # every run but a row's first on its own repository.
        for tool in {t for r, t in rows if self.args.repeat > 1 or r != t}:
            self.save_state(tool)

        def job(row, tool):
            def fn(i):
                repo = self.repo(row)
                if i > 0 or row != tool:
                    self.load_state(row, from_row=tool)
                before = du_bytes(repo)
                cmd, cwd = self.backup_cmd(row, repo, self.src, "incr")
                r = self.run(self.logname(f"{row}-incr", i), cmd, env=self.env(row, repo), cwd=cwd)
                size = du_bytes(repo)
                return self.entry(r, items=st["messages"], nbytes=st["bytes"], repo=size, added=size - before, extra=self.mailvault_json(row, r))
            return fn

        for row, ok in self.repeated("incr", [(row, job(row, tool)) for row, tool in rows]).items():
            if row in VARIANTS:
                shutil.rmtree(self.repo(row), ignore_errors=True)
                shutil.rmtree(self.cache(self.repo(row)), ignore_errors=True)
            elif ok:
                self.labels[row] = "incr"
            else:
                # The later scenarios restore and check what the repository holds now.
                self.labels.pop(row, None)
        shutil.rmtree(self.work / "saved", ignore_errors=True)

    def backed_up(self):
        """Tools whose full backup worked, in order."""
        return [t for t in self.tools if t in self.labels]

    def latest_stats(self):
        return self.stats.get("after") or self.stats["before"]

    def source_manifest(self):
        """The manifest of the source as it is now (after the mutation, if there was one)."""
        key = "after" if "after" in self.stats else "before"
        if key not in self.manifests:
            t0 = time.monotonic()
            self.manifests[key] = manifest(self.src)
            log(f"manifest of the source: {len(self.manifests[key]):,} entries in {time.monotonic() - t0:.1f} s")
        return self.manifests[key]

    def verify(self, row, root, expected, account_rel=None):
        """Compares the restored tree under `root` with the source's manifest `expected` (for
        an account restore: the account's part of it, and no file outside it). Returns (None,
        a description of what was compared) or (a description of the differences, None); a
        difference is also logged at once."""
        if not root.is_dir():
            error = f"nothing restored at {root}"
        else:
            got = manifest(root)
            if account_rel:
                outside = sorted(k for k, v in got.items() if k not in subtree(got, account_rel) and not (v[0] == "dir" and account_rel.startswith(k + "/")))
                got = subtree(got, account_rel)
                for k in outside:
                    got[k] = ("outside the account",)
            error = compare_manifests(expected, got)
            if error is None:
                files = sum(1 for v in expected.values() if v[0] == "file")
                return None, f"{files:,} files and {len(expected) - files:,} directories identical (names, sizes, contents by SHA-256, mtimes, modes, owners)"
        log(f"!!! {ROW_LABELS.get(row, row)}: RESTORE DIFFERS FROM THE SOURCE: {error}")
        return error, None

    def restore(self):
        st = self.latest_stats()
        expected = self.source_manifest()

        def job(tool):
            def fn(i):
                repo = self.repo(tool)
                target = self.work / f"restore-{tool}"
                if target.exists():
                    shutil.rmtree(target)
                target.mkdir(parents=True)
                cmd, cwd = self.restore_cmd(tool, repo, target)
                r = self.run(self.logname(f"{tool}-restore", i), cmd, env=self.env(tool, repo), cwd=cwd)
                error, same = None, None
                if r["rc"] == 0:
                    error, same = self.verify(tool, self.restored_root(tool, target), expected)
                shutil.rmtree(target, ignore_errors=True)
                return self.entry(r, items=st["messages"], nbytes=st["bytes"], error=error, extra={"verified": same} if same else None)
            return fn

        self.repeated("restore", [(t, job(t)) for t in self.backed_up()])

    def restore_account(self):
        st = self.latest_stats()
        acct = st.get("largest_account")
        if not acct:
            self.notes.append("restore-account skipped: no account found")
            return
        expected = subtree(self.source_manifest(), acct["maildir"])

        def job(tool):
            def fn(i):
                repo = self.repo(tool)
                target = self.work / f"restore1-{tool}"
                if target.exists():
                    shutil.rmtree(target)
                target.mkdir(parents=True)
                cmd, cwd = self.restore_cmd(tool, repo, target, account_rel=acct["maildir"], account=acct["address"])
                r = self.run(self.logname(f"{tool}-restore-account", i), cmd, env=self.env(tool, repo), cwd=cwd)
                error, same = None, None
                if r["rc"] == 0:
                    error, same = self.verify(tool, self.restored_root(tool, target), expected, account_rel=acct["maildir"])
                shutil.rmtree(target, ignore_errors=True)
                return self.entry(r, items=acct["messages"], nbytes=acct["bytes"], error=error, extra={"verified": same} if same else None)
            return fn

        self.repeated("restore-account", [(t, job(t)) for t in self.backed_up()])

    def check(self):
        def job(tool):
            def fn(i):
                repo = self.repo(tool)
                size = du_bytes(repo)
                r = self.run(self.logname(f"{tool}-check", i), self.check_cmd(tool, repo), env=self.env(tool, repo))
                return self.entry(r, nbytes=size, repo=size)
            return fn

        self.repeated("check", [(t, job(t)) for t in self.backed_up()])

    def spamassassin(self):
        src_dir = Path(self.args.spamassassin).resolve()
        if not src_dir.is_dir():
            self.notes.append(f"SpamAssassin scenario skipped: {src_dir} not found.")
            return
        if self.args.smoke:
            # A sample: the first 20 files of each part, through symlinks.
            sample = self.work / "sa-sample"
            if sample.exists():
                shutil.rmtree(sample)
            for part in sorted(p for p in src_dir.iterdir() if p.is_dir()):
                (sample / part.name).mkdir(parents=True)
                for f in sorted(part.glob("*.eml"))[:20]:
                    (sample / part.name / f.name).symlink_to(f)
            src_dir = sample
        maildir = self.work / "sa" / "Maildir"
        if maildir.parent.exists():
            shutil.rmtree(maildir.parent)
        r = self.run("sa-import", [str(self.corpus_bin), "import-eml", "--json", str(src_dir), str(maildir)], timed=False)
        if r["rc"] != 0:
            self.failures.append(f"import-eml failed (log: {r['log']})")
            return
        imported = json.loads(r["stdout"])
        self.sa = {"source": str(Path(self.args.spamassassin).resolve()), "messages": imported["messages"], "bytes": imported["bytes"]}
        def job(tool):
            def fn(i):
                repo = self.repo(tool, "sa")
                if not self.init(tool, repo):
                    return self.entry({"rc": "init failed", "wall": 0.0, "rss_kb": None, "log": str(self.logs)})
                cmd, cwd = self.backup_cmd(tool, repo, maildir, "sa", account="spamassassin@corpus.example")
                r = self.run(self.logname(f"{tool}-sa", i), cmd, env=self.env(tool, repo), cwd=cwd)
                size = du_bytes(repo)
                return self.entry(r, items=imported["messages"], nbytes=imported["bytes"], repo=size, added=size, extra=self.mailvault_json(tool, r))
            return fn

        done = self.repeated("spamassassin", [(t, job(t)) for t in self.tools])
        # Real mail back byte for byte, from every tool (not timed).
        expected = manifest(maildir)
        for tool, ok in done.items():
            if not ok:
                continue
            repo, target = self.repo(tool, "sa"), self.work / f"restore-sa-{tool}"
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            cmd, cwd = self.restore_cmd(tool, repo, target, label="sa")
            r = self.run(f"{tool}-sa-restore", cmd, env=self.env(tool, repo), cwd=cwd, timed=False)
            e = self.results["spamassassin"][tool]
            if r["rc"] != 0:
                error = f"its restore failed (exit {r['rc']}, log: {r['log']})"
            else:
                error, e["verified"] = self.verify(tool, self.restored_root(tool, target, maildir), expected)
            if error:
                e["rc"], e["error"] = "restore differs", error
                self.failures.append(f"{tool} / spamassassin: restore differs from the source: {error} (log: {r['log']})")
            else:
                log(f"{'spamassassin':16} {tool:14} restore identical to the source")
            shutil.rmtree(target, ignore_errors=True)

    # ---------------------------------------------------------------- report

    def machine(self):
        cpu = ""
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
        except OSError:
            pass
        mem = ""
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemTotal"):
                    mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
        except (OSError, ValueError):
            pass
        df = sh_out(["df", "-T", str(self.work)]).splitlines()
        fs = " ".join(df[-1].split()[:2]) if len(df) > 1 else "?"
        return {
            "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            "cpu": cpu or platform.processor() or "?",
            "memory": mem or "?",
            "kernel": f"{platform.system()} {platform.release()}",
            "disk": f"{fs} (work dir {self.work})",
            "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        }

    def row_ratio(self, scenario, key, row):
        mv = self.results.get(scenario, {}).get("mailvault")
        other = self.results.get(scenario, {}).get(row)
        if not mv or not other or mv["rc"] != 0 or other["rc"] != 0:
            return None
        a, b = mv.get(key), other.get(key)
        if a is None or not b:
            return None
        return a / b

    def table(self, scenario):
        rows = self.results.get(scenario, {})
        if not rows:
            return ""
        with_repo = scenario in ("full", "incr", "check", "spamassassin")
        lines = []
        runs = self.args.repeat > 1
        head = ["tool", "wall s" + (" (median)" if runs else "")] + (["every run, s"] if runs else []) + ["items/s", "MB/s", "peak RSS MB"]
        if with_repo:
            head += ["repo MB"]
        if scenario in ("full", "incr", "spamassassin"):
            head += ["added MB"]
        head += ["mailvault wall ÷ this"]
        if scenario in ("full", "spamassassin"):
            head += ["mailvault repo ÷ this"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        order = [r for r in ROWS if r in rows]
        if scenario in ("full", "restore"):
            order += [r for r in LIMITS if r in self.results.get("limits", {})]
        for name in order:
            e = rows.get(name) or self.results["limits"][name]
            src_scenario = scenario if name in rows else "limits"
            label = ROW_LABELS.get(name) or LIMITS.get(name, name)
            if e["rc"] != 0:
                cells = [label, f"failed ({e['rc']})"] + ["–"] * (len(head) - 2)
                lines.append("| " + " | ".join(cells) + " |")
                continue
            wall = e["wall"]
            cells = [label, fmt_num(wall, 2)]
            if runs:
                cells.append(", ".join(f"{w:.2f}" for w in e.get("walls", [])))
            cells.append(fmt_num(e["items"] / wall if e["items"] and wall else None, 0))
            cells.append(fmt_num(e["bytes"] / MB / wall if e["bytes"] and wall else None))
            cells.append(fmt_num(e["rss_kb"] / 1024 if e["rss_kb"] else None, 0))
            if with_repo:
                cells.append(fmt_num(e["repo_bytes"] / MB if e.get("repo_bytes") is not None else None))
            if scenario in ("full", "incr", "spamassassin"):
                cells.append(fmt_num(e["added_bytes"] / MB if e.get("added_bytes") is not None else None, 2))
            if name == "mailvault":
                cells.append("1")
            else:
                mv = rows.get("mailvault")
                ratio = mv["wall"] / wall if mv and mv["rc"] == 0 and wall else None
                cells.append(fmt_num(ratio, 2) if ratio is not None else "–")
            if scenario in ("full", "spamassassin"):
                if name == "mailvault":
                    cells.append("1")
                elif src_scenario == "limits":
                    cells.append("–")
                else:
                    r = self.row_ratio(scenario, "repo_bytes", name)
                    cells.append(fmt_num(r, 2) if r is not None else "–")
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def copies_share(self):
        """The share of the generated store's message files that are per-recipient copies."""
        return self.corpus["copies"] / max(self.corpus["messages"], 1)

    def targets(self):
        """(target, measured, met) rows for the issue's targets."""
        out = []

        def wall(s, t):
            e = self.results.get(s, {}).get(t) or self.results.get("limits", {}).get(t)
            return e["wall"] if e and e["rc"] == 0 else None

        def size(s, t):
            e = self.results.get(s, {}).get(t)
            return e["repo_bytes"] if e and e["rc"] == 0 else None

        def add(name, limit, a, b, what="wall"):
            req = {1 / 3: "≤ 1/3", 1 / 5: "≤ 1/5", 1 / 10: "≤ 1/10", 1 / 2: "≤ 1/2"}.get(limit, f"≤ {limit:g}")
            if a is None or b is None or not b:
                out.append((name, req, "not measured", "–"))
                return
            r = a / b
            out.append((name, req, f"{r:.2f} ({what})", "yes" if r <= limit else "**no**"))

        mv = "mailvault"
        add("full backup vs restic", 1 / 3, wall("full", mv), wall("full", "restic"))
        add("full backup vs borg lz4", 1 / 5, wall("full", mv), wall("full", "borg-lz4"))
        add("full backup vs borg zstd", 1 / 5, wall("full", mv), wall("full", "borg-zstd"))
        add("incremental vs restic", 1 / 10, wall("incr", mv), wall("incr", "restic"))
        add("incremental with --stat-unchanged vs restic", 1 / 10, wall("incr", "mailvault-stat"), wall("incr", "restic"))
        add("full restore vs restic", 1 / 2, wall("restore", mv), wall("restore", "restic"))
        add("full restore vs cp -a", 1, wall("restore", mv), wall("restore", "copy"))
        add(f"repo size vs restic (generated: {self.copies_share():.0%} per-recipient copies)", 0.5, size("full", mv), size("full", "restic"), "size")
        add("repo size vs restic (SpamAssassin)", 0.95, size("spamassassin", mv), size("spamassassin", "restic"), "size")
        for s in ("full", "incr", "restore", "check"):
            a = self.results.get(s, {}).get(mv)
            b = self.results.get(s, {}).get("restic")
            if a and b and a["rss_kb"] and b["rss_kb"] and a["rc"] == 0 and b["rc"] == 0:
                add(f"peak RSS vs restic ({s})", 1, a["rss_kb"], b["rss_kb"], "RSS")
        return out

    def report_header(self, command, benches):
        m = self.machine()
        commit = sh_out(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"])
        dirty = sh_out(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"])
        names = ", ".join(f"`{b.preset}`" for b in benches)
        L = []
        L.append(f"# mailvault benchmark: preset {names} (seed {self.args.seed})")
        L.append("")
        L.append(f"Run {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}, commit `{commit}`{' (with uncommitted changes)' if dirty else ''}.")
        L.append("")
        L.append(f"Command: `{command}`")
        L.append("")
        L.append("## Machine")
        L.append("")
        L.append(f"- CPUs: {m['cpus']} × {m['cpu']}; memory {m['memory']}; {m['kernel']}")
        L.append(f"- Disk: {m['disk']}")
        L.append(f"- Load average at the end: {m['load']} (the machine is shared: read ratios, not absolute times)")
        dropped = any(b.drop_ok for b in benches)
        L.append(f"- Page cache dropped before each timed run: {'yes' if dropped else 'no (not permitted, --smoke or --no-drop-caches)'}")
        for t, v in self.tools.items():
            L.append(f"- {t}: {v}")
        L.append("")
        return L

    def report_preset(self, level="##"):
        c = self.corpus
        L = []
        L.append(f"{level} Corpus `{self.preset}`")
        L.append("")
        L.append(
            f"`mailvault-corpus generate --preset {self.preset} --seed {self.args.seed}`: {c['accounts']} accounts in {c['domains']} domains, "
            f"{c['folders']} folders, {c['messages']:,} messages, {c['bytes'] / MB:,.1f} MB; {c['copies']:,} per-recipient copies "
            f"({100 * c['copies'] / max(c['messages'], 1):.0f}%), {c['attachments']:,} messages with attachments "
            f"({c['forwarded']:,} forwarding an earlier one), {c['odd']} odd-but-valid. Largest account "
            f"{c['largest_account']['address']}: {c['largest_account']['messages']:,} messages, {c['largest_account']['bytes'] / MB:,.1f} MB. "
            f"Generated in {c['generate_secs']:.1f} s."
        )
        if self.mutation:
            mu = self.mutation
            L.append("")
            L.append(
                f"Mutation (`mailvault-corpus mutate --seed {self.args.mutate_seed}`): {mu['flag_renames']:,} flag renames "
                f"({mu['new_to_cur']:,} new/→cur/), {mu['new_messages']:,} new messages ({mu['new_copies']:,} copies, "
                f"{mu['new_bytes'] / MB:.2f} MB), {mu['deleted']:,} deleted; {mu['messages_after']:,} messages after."
            )
        if getattr(self, "sa", None):
            L.append("")
            L.append(f"SpamAssassin: {self.sa['messages']:,} messages, {self.sa['bytes'] / MB:.1f} MB from {self.sa['source']}, imported with `mailvault-corpus import-eml` into one Maildir.")
        L.append("")
        L.append(f"{level} Results `{self.preset}`")
        L.append("")
        L.append("items/s and MB/s count the messages and bytes of the store (for the incremental: the whole store walked); "
                 "repo MB is `du -sb` of the repository; added MB is what the run added to it. "
                 "`mailvault wall ÷ this` below 1 means mailvault is faster; against a limit row it is the multiple of the limit. "
                 + (f"Every command ran {self.args.repeat} times, the tools in a rotated order each round; wall times, rates "
                    "and peak RSS are medians, sizes are those of the last run." if self.args.repeat > 1 else "Every command ran once (`--repeat 1`)."))
        for s in SCENARIOS:
            if s == "limits" or s not in self.results:
                continue
            L.append("")
            L.append(f"{level}# {SCENARIO_TITLES[s]}")
            L.append("")
            L.append(self.table(s))
            if s == "full":
                L.append("")
                L.append(f"Repository sizes depend on the corpus: {self.copies_share():.0%} of its message files "
                         f"({c['copies']:,} of {c['messages']:,}) are per-recipient copies of another message, identical "
                         "but for their delivery trace lines; mailvault splits those lines off and stores the rest once, "
                         "restic and borg store what their chunkers find alike. The SpamAssassin corpus below has no such copies.")
            if s == "spamassassin":
                L.append("")
                L.append("Real mail, one copy of each message: no per-recipient copies to share.")
            for row in ROWS:
                rep = self.results[s].get(row, {}).get("report")
                if rep:
                    keys = ["items_total", "items_new", "items_unchanged", "items_failed", "bytes_read", "bytes_added", "dedup_ratio", "compression_ratio"]
                    parts = [f"{k} {rep[k]:.3g}" if isinstance(rep.get(k), float) else f"{k} {rep.get(k)}" for k in keys if k in rep]
                    L.append("")
                    L.append(f"{ROW_LABELS.get(row, row)}'s report: " + ", ".join(parts) + ".")
            for row in ROWS:
                e = self.results[s].get(row, {})
                if e.get("verified"):
                    L.append("")
                    L.append(f"{ROW_LABELS.get(row, row)}'s restore{' (after every run)' if s != 'spamassassin' else ''} compared with the source: {e['verified']}.")
                elif e.get("error"):
                    L.append("")
                    L.append(f"**{ROW_LABELS.get(row, row)}'s restore differs from the source**: {e['error']}.")
        if "limits" in self.results and "full" not in self.results:
            L.append("")
            L.append(f"{level}# Physical limits")
            L.append("")
            for k, e in self.results["limits"].items():
                L.append(f"- {LIMITS[k]}: {e['wall']:.2f} s")
        L.append("")
        L.append(f"{level} Targets (issue 3), `{self.preset}`")
        L.append("")
        L.append("| target | required (mailvault ÷ peer) | measured | met |")
        L.append("|---|---:|---:|:---:|")
        for name, req, got, met in self.targets():
            L.append(f"| {name} | {req} | {got} | {met} |")
        if self.notes or self.failures:
            L.append("")
            L.append(f"{level} Notes `{self.preset}`")
            L.append("")
            for n in self.notes:
                L.append(f"- {n}")
            for f in self.failures:
                L.append(f"- FAILED: {f}")
        L.append("")
        return L




def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="bench/run.sh",
        description="mailvault vs restic and borg, and the disk's limits, on a generated Maildir store.",
    )
    p.add_argument("--preset", default="small", help="corpus preset: tiny, small (default), medium, large, huge; several comma-separated run in turn and add a peak-RSS scaling table")
    p.add_argument("--seed", type=int, default=1, help="corpus seed (default 1)")
    p.add_argument("--mutate-seed", type=int, default=2, help="mutation seed (default 2)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, from {','.join(SCENARIOS)} (default all)")
    p.add_argument("--tools", default=",".join(TOOLS), help=f"comma-separated, from {','.join(TOOLS)} (default all)")
    p.add_argument("--out", help="write the markdown report here too (default WORK/report.md only)")
    p.add_argument("--work", help="work directory (default $BENCH_DIR or /tmp/mailvault-bench; one subdirectory per preset when several); emptied first")
    full_sa = REPO_ROOT.parent / "shared" / "corpora" / "spamassassin"
    p.add_argument("--spamassassin", default=str(full_sa if full_sa.is_dir() else REPO_ROOT / "testdata" / "spamassassin"),
                   help="SpamAssassin corpus directory (*.eml files; default: the whole corpus in ../shared/corpora/spamassassin when it is there, else the 613-message subset in testdata/spamassassin)")
    p.add_argument("--bin-dir", help="where mailvault and mailvault-corpus are (default $CARGO_TARGET_DIR/<profile> or target/<profile>)")
    p.add_argument("--base-bin-dir", help="a second build of mailvault (e.g. the previous main's target/release) to run beside this one as the row mailvault-base; its `mailvault wall ÷ this` is the before/after ratio")
    p.add_argument("--no-build", action="store_true", help="do not run cargo build")
    p.add_argument("--profile", help="cargo profile to build and run: release (default), or dev (default with --smoke: faster to build)")
    p.add_argument("--no-drop-caches", dest="drop_caches", action="store_false", help="do not drop the page cache before timed runs")
    p.add_argument("--repeat", type=int, help="runs of every timed command, the tools in a rotated order each round; the tables give medians (default 3, 1 with --smoke)")
    p.add_argument("--timeout", type=float, default=0, help="kill a command after this many seconds (default: no limit)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (corpus, repositories, logs)")
    p.add_argument("--smoke", action="store_true", help="CI mode: tiny preset, SpamAssassin sample, one round; checks that everything runs and that every restore is identical to the source")
    a = p.parse_args(argv)
    if not a.profile:
        a.profile = "dev" if a.smoke else "release"
    if a.repeat is None:
        a.repeat = 1 if a.smoke else 3
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    if a.smoke:
        a.preset = "tiny"
        a.drop_caches = False  # only checks that everything runs; spares a shared machine
        if not a.timeout:
            a.timeout = 120
    if not a.work:
        a.work = os.environ.get("BENCH_DIR") or "/tmp/mailvault-bench"
    return a


def scaling(benches):
    """Peak RSS of each tool's full backup across presets (the target: sub-linear)."""
    rows = [b for b in benches if "full" in b.results]
    if len(rows) < 2:
        return []
    L = ["## Scaling of peak RSS (full backup)", ""]
    tools = [t for t in TOOLS if any(t in b.results["full"] for b in rows)]
    L.append("| preset | messages | " + " | ".join(f"{t} MB" for t in tools) + " |")
    L.append("|---|---:|" + "---:|" * len(tools))
    for b in rows:
        cells = [f"`{b.preset}`", f"{b.corpus['messages']:,}"]
        for t in tools:
            e = b.results["full"].get(t)
            cells.append(fmt_num(e["rss_kb"] / 1024, 0) if e and e["rc"] == 0 and e["rss_kb"] else "–")
        L.append("| " + " | ".join(cells) + " |")
    first, last = rows[0], rows[-1]
    growth = last.corpus["messages"] / max(first.corpus["messages"], 1)
    e0 = first.results["full"].get("mailvault")
    e1 = last.results["full"].get("mailvault")
    if e0 and e1 and e0["rss_kb"] and e1["rss_kb"]:
        r = e1["rss_kb"] / e0["rss_kb"]
        L.append("")
        L.append(f"mailvault's peak RSS grew {r:.2f}× for {growth:.1f}× the messages: {'sub-linear' if r < growth else '**not** sub-linear'}.")
    L.append("")
    return L


def run_preset(args, preset, work, first):
    """Runs the wanted scenarios on one preset; `first` is the Bench that built the tools."""
    wanted = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    b = Bench(args, preset, work)
    if len(b.work.parts) < 3 or b.work in (REPO_ROOT, Path.home()) or REPO_ROOT.is_relative_to(b.work):
        raise SystemExit(f"bench: refusing to empty {b.work}: give a dedicated --work directory")
    if b.work.exists():
        shutil.rmtree(b.work)
    b.work.mkdir(parents=True)
    self_test(b.work)
    (b.work / "password").write_text(PASSWORD + "\n")
    if first is None:
        b.build()
        b.find_tools()
    else:
        b.bin_dir, b.corpus_bin, b.mv_bin, b.mv_bins = first.bin_dir, first.corpus_bin, first.mv_bin, first.mv_bins
        b.tools, b.skipped = dict(first.tools), dict(first.skipped)
    b.generate()
    if "limits" in wanted:
        b.limits()
    if any(s in wanted for s in ("full", "incr", "restore", "restore-account", "check")):
        b.full()
        if "full" not in wanted:
            b.results.pop("full", None)
    if "incr" in wanted:
        b.incr()
    if "restore" in wanted:
        b.restore()
    if "restore-account" in wanted:
        b.restore_account()
    if "check" in wanted:
        b.check()
    if "spamassassin" in wanted and first is None:
        b.spamassassin()
    (b.work / "results.json").write_text(
        json.dumps({"corpus": b.corpus, "mutation": b.mutation, "results": b.results, "notes": b.notes, "failures": b.failures}, indent=1, default=str)
    )
    return b


def main(argv):
    args = parse_args(argv)
    command = "bench/run.sh" + ("" if not argv else " " + shlex.join(argv))
    for s in [s.strip() for s in args.scenarios.split(",") if s.strip()]:
        if s not in SCENARIOS:
            raise SystemExit(f"bench: unknown scenario {s!r}; choose from {', '.join(SCENARIOS)}")
    presets = [p.strip() for p in args.preset.split(",") if p.strip()]
    base = Path(args.work).resolve()
    t0 = time.monotonic()
    benches = []
    for preset in presets:
        work = base if len(presets) == 1 else base / preset
        benches.append(run_preset(args, preset, work, benches[0] if benches else None))
    first = benches[0]
    lines = first.report_header(command, benches)
    for b in benches:
        lines += b.report_preset()
    lines += scaling(benches)
    report = "\n".join(lines)
    (base / "report.md").write_text(report)
    if args.out:
        Path(args.out).write_text(report)
    print(report)
    log(f"done in {time.monotonic() - t0:.0f} s; report in {base / 'report.md'}" + (f" and {args.out}" if args.out else ""))
    failures = [f"{b.preset}: {f}" for b in benches for f in b.failures]
    if args.smoke and "mailvault" in first.skipped:
        failures.append("mailvault not runnable")
    if not args.keep:
        for b in benches:
            for d in ["src", "repos", "sa", "sa-sample", "cache", "saved"]:
                shutil.rmtree(b.work / d, ignore_errors=True)
    if failures:
        log(f"{len(failures)} failure(s):")
        for f in failures:
            log(f"  {f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
