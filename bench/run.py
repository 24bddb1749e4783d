#!/usr/bin/env python3
"""mailvault's project benchmark: mailvault against restic and borg (lz4 and zstd), and
against the physical limits of the disk (reading every file; copying the tree), on a
deterministic generated Maildir store and on the SpamAssassin public corpus.

One command does everything: build, generate the corpus, run each scenario for each tool
(interleaved, page cache dropped before every timed run where permitted), and write a
markdown report with a table per scenario, the mailvault/peer ratios and the issue's targets.

    bench/run.sh                       # preset small (10k messages, ~0.45 GB)
    bench/run.sh --preset large        # 100k messages, ~4 GB
    bench/run.sh --smoke               # CI: preset tiny, checks that everything runs
    bench/run.sh --help

Standard library only. Tools that are missing are skipped with a note; a tool command that
fails is reported in the table and makes the exit status 1.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
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
    "spamassassin": "SpamAssassin corpus (real mail): full backup and repository size",
}
TOOLS = ["mailvault", "restic", "borg-lz4", "borg-zstd"]
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

    def record(self, scenario, row, res, items=None, nbytes=None, repo=None, added=None, extra=None):
        entry = {
            "rc": res["rc"],
            "wall": res["wall"],
            "rss_kb": res["rss_kb"],
            "items": items,
            "bytes": nbytes,
            "repo_bytes": repo,
            "added_bytes": added,
            "log": res["log"],
        }
        if extra:
            entry.update(extra)
        self.results.setdefault(scenario, {})[row] = entry
        ok = res["rc"] == 0
        if not ok:
            self.failures.append(f"{row} / {scenario}: exit {res['rc']} (log: {res['log']})")
        log(f"{scenario:16} {row:10} {'ok' if ok else 'FAILED rc=' + str(res['rc'])}  {res['wall']:.2f} s")
        return ok

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
        if not self.corpus_bin.exists():
            raise SystemExit(f"bench: {self.corpus_bin} missing: build it with `cargo build --profile {profile} -p mailvault-corpus`")

    def find_tools(self):
        wanted = [t.strip() for t in self.args.tools.split(",") if t.strip()]
        for t in wanted:
            if t not in TOOLS:
                raise SystemExit(f"bench: unknown tool {t!r}; choose from {', '.join(TOOLS)}")
        for t in wanted:
            if t == "mailvault":
                ok = self.mv_bin.exists() and sh_out([str(self.mv_bin), "--version"]) != ""
                if ok:
                    self.tools[t] = sh_out([str(self.mv_bin), "--version"])
                else:
                    self.skipped[t] = f"{self.mv_bin} missing or not runnable"
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

    def env(self, tool, repo):
        env = dict(os.environ)
        if tool == "mailvault":
            env["MAILVAULT_REPOSITORY"] = str(repo)
            env["MAILVAULT_PASSWORD_FILE"] = str(self.work / "password")
        elif tool == "restic":
            env["RESTIC_REPOSITORY"] = str(repo)
            env["RESTIC_PASSWORD_FILE"] = str(self.work / "password")
            env["RESTIC_CACHE_DIR"] = str(self.work / "cache" / "restic")
        else:
            env["BORG_REPO"] = str(repo)
            env["BORG_PASSPHRASE"] = PASSWORD
            env["BORG_BASE_DIR"] = str(self.work / "cache" / tool)
            env["BORG_RELOCATED_REPO_ACCESS_IS_OK"] = "yes"
        return env

    def repo(self, tool, kind="main"):
        return self.work / "repos" / f"{tool}-{kind}"

    def init(self, tool, repo):
        if repo.exists():
            shutil.rmtree(repo)
        repo.parent.mkdir(parents=True, exist_ok=True)
        env = self.env(tool, repo)
        if tool == "mailvault":
            cmd = [str(self.mv_bin), "init", "--quiet"]
        elif tool == "restic":
            cmd = ["restic", "init", "--quiet"]
        else:
            cmd = ["borg", "init", "--encryption=repokey-blake2", str(repo)]
        r = self.run(f"{tool}-init-{repo.name}", cmd, env=env, timed=False)
        if r["rc"] != 0:
            self.failures.append(f"{tool}: init failed (log: {r['log']})")
            return False
        return True

    def backup_cmd(self, tool, repo, src, label, account=None):
        """(argv, cwd) of a backup of src."""
        if tool == "mailvault":
            cmd = [str(self.mv_bin), "backup", f"maildir:{src}", "--json", "--quiet"]
            if account:
                cmd += ["--account", account]
            return cmd, None
        if tool == "restic":
            return ["restic", "backup", "--host", "bench", "--quiet", str(src)], None
        comp = "lz4" if tool == "borg-lz4" else "zstd"
        # Relative path: archive paths are `src/<domain>/...`.
        return ["borg", "create", "--compression", comp, f"{repo}::{label}", src.name], src.parent

    def restore_cmd(self, tool, repo, target, account_rel=None, account=None):
        if tool == "mailvault":
            cmd = [str(self.mv_bin), "restore", "latest", "--target", f"maildir:{target}", "--json", "--quiet"]
            if account:
                cmd += ["--account", account]
            return cmd, None
        if tool == "restic":
            cmd = ["restic", "restore", "latest", "--host", "bench", "--target", str(target)]
            if account_rel:
                cmd += ["--include", str(self.src / account_rel)]
            return cmd, None
        cmd = ["borg", "extract", f"{repo}::{self.labels[tool]}"]
        if account_rel:
            cmd.append(str(Path(self.src.name) / account_rel))
        return cmd, target

    def check_cmd(self, tool, repo):
        if tool == "mailvault":
            return [str(self.mv_bin), "check", "--read-data"]
        if tool == "restic":
            return ["restic", "check", "--read-data"]
        return ["borg", "check", "--verify-data", str(repo)]

    def restored_root(self, tool, target):
        """Where a tool puts the restored store under its target."""
        if tool == "mailvault":
            return target
        if tool == "restic":
            return target / str(self.src).lstrip("/")
        return target / self.src.name

    # ---------------------------------------------------------------- scenarios

    def limits(self):
        st = self.stats["before"]
        r = self.run("limit-read", f"tar -cf - -C {shlex.quote(str(self.src.parent))} {shlex.quote(self.src.name)} | cat >/dev/null")
        self.record("limits", "read", r, items=st["messages"], nbytes=st["bytes"])
        dst = self.work / "copy"
        if dst.exists():
            shutil.rmtree(dst)
        r = self.run("limit-copy", ["cp", "-a", str(self.src), str(dst)])
        self.record("limits", "copy", r, items=st["messages"], nbytes=st["bytes"])
        shutil.rmtree(dst, ignore_errors=True)

    def full(self):
        st = self.stats["before"]
        for tool in list(self.tools):
            repo = self.repo(tool)
            if not self.init(tool, repo):
                del self.tools[tool]
                continue
            cmd, cwd = self.backup_cmd(tool, repo, self.src, "full")
            r = self.run(f"{tool}-full", cmd, env=self.env(tool, repo), cwd=cwd)
            size = du_bytes(repo)
            extra = self.mailvault_json(tool, r)
            if self.record("full", tool, r, items=st["messages"], nbytes=st["bytes"], repo=size, added=size, extra=extra):
                self.labels[tool] = "full"

    def mailvault_json(self, tool, r):
        if tool != "mailvault" or r["rc"] != 0:
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
        for tool in self.backed_up():
            repo = self.repo(tool)
            before = du_bytes(repo)
            cmd, cwd = self.backup_cmd(tool, repo, self.src, "incr")
            r = self.run(f"{tool}-incr", cmd, env=self.env(tool, repo), cwd=cwd)
            size = du_bytes(repo)
            self.record("incr", tool, r, items=st["messages"], nbytes=st["bytes"], repo=size, added=size - before, extra=self.mailvault_json(tool, r))
            if r["rc"] == 0:
                self.labels[tool] = "incr"

    def backed_up(self):
        """Tools whose full backup worked, in order."""
        return [t for t in self.tools if t in self.labels]

    def latest_stats(self):
        return self.stats.get("after") or self.stats["before"]

    def verify(self, tool, root, expect):
        got = self.corpus_stats(root) if root.exists() else None
        if not got or got["messages"] != expect["messages"] or got["bytes"] != expect["bytes"]:
            found = f"{got['messages']} files, {got['bytes']} bytes" if got else "nothing"
            self.failures.append(f"{tool}: restore gave {found}, expected {expect['messages']} files, {expect['bytes']} bytes")
            return False
        return True

    def deep_compare(self, a, b):
        """Same relative names, bytes and mtimes under a and b: (ok, first difference)."""
        def walk(root):
            out = {}
            for dirpath, _, files in os.walk(root):
                for f in files:
                    p = Path(dirpath) / f
                    out[str(p.relative_to(root))] = p
            return out
        wa, wb = walk(a), walk(b)
        if set(wa) != set(wb):
            diff = sorted(set(wa) ^ set(wb))
            return False, f"{len(diff)} names differ, e.g. {diff[0]}"
        for rel, pa in wa.items():
            pb = wb[rel]
            if int(pa.stat().st_mtime) != int(pb.stat().st_mtime):
                return False, f"mtime of {rel}"
            if pa.read_bytes() != pb.read_bytes():
                return False, f"bytes of {rel}"
        return True, f"{len(wa)} files identical (names, bytes, mtimes)"

    def restore(self):
        st = self.latest_stats()
        for tool in self.backed_up():
            repo = self.repo(tool)
            target = self.work / f"restore-{tool}"
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            cmd, cwd = self.restore_cmd(tool, repo, target)
            r = self.run(f"{tool}-restore", cmd, env=self.env(tool, repo), cwd=cwd)
            extra = {}
            if r["rc"] == 0:
                root = self.restored_root(tool, target)
                extra["verified"] = self.verify(tool, root, st)
                if tool == "mailvault" and st["bytes"] < 1.5e9:
                    ok, what = self.deep_compare(self.src, root)
                    extra["deep"] = what
                    if not ok:
                        self.failures.append(f"mailvault: restored tree differs from the source: {what}")
            self.record("restore", tool, r, items=st["messages"], nbytes=st["bytes"], extra=extra)
            shutil.rmtree(target, ignore_errors=True)

    def restore_account(self):
        st = self.latest_stats()
        acct = st.get("largest_account")
        if not acct:
            self.notes.append("restore-account skipped: no account found")
            return
        for tool in self.backed_up():
            repo = self.repo(tool)
            target = self.work / f"restore1-{tool}"
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            cmd, cwd = self.restore_cmd(tool, repo, target, account_rel=acct["maildir"], account=acct["address"])
            r = self.run(f"{tool}-restore-account", cmd, env=self.env(tool, repo), cwd=cwd)
            extra = {}
            if r["rc"] == 0:
                got = self.corpus_stats(self.restored_root(tool, target))
                files = got["messages"] if got else 0
                extra["verified"] = files == acct["messages"]
                if files != acct["messages"]:
                    self.failures.append(f"{tool}: account restore gave {files} files, expected {acct['messages']}")
            self.record("restore-account", tool, r, items=acct["messages"], nbytes=acct["bytes"], extra=extra)
            shutil.rmtree(target, ignore_errors=True)

    def check(self):
        for tool in self.backed_up():
            repo = self.repo(tool)
            size = du_bytes(repo)
            r = self.run(f"{tool}-check", self.check_cmd(tool, repo), env=self.env(tool, repo))
            self.record("check", tool, r, nbytes=size, repo=size)

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
        for tool in self.tools:
            repo = self.repo(tool, "sa")
            if not self.init(tool, repo):
                continue
            cmd, cwd = self.backup_cmd(tool, repo, maildir, "sa", account="spamassassin@corpus.example")
            r = self.run(f"{tool}-sa", cmd, env=self.env(tool, repo), cwd=cwd)
            size = du_bytes(repo)
            self.record("spamassassin", tool, r, items=imported["messages"], nbytes=imported["bytes"], repo=size, added=size, extra=self.mailvault_json(tool, r))

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
        head = ["tool", "wall s", "items/s", "MB/s", "peak RSS MB"]
        if with_repo:
            head += ["repo MB"]
        if scenario in ("full", "incr", "spamassassin"):
            head += ["added MB"]
        head += ["mailvault wall ÷ this"]
        if scenario in ("full", "spamassassin"):
            head += ["mailvault repo ÷ this"]
        lines.append("| " + " | ".join(head) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
        order = [r for r in TOOLS if r in rows]
        if scenario in ("full", "restore"):
            order += [r for r in LIMITS if r in self.results.get("limits", {})]
        for name in order:
            e = rows.get(name) or self.results["limits"][name]
            src_scenario = scenario if name in rows else "limits"
            label = LIMITS.get(name, name)
            if e["rc"] != 0:
                cells = [label, f"failed ({e['rc']})"] + ["–"] * (len(head) - 2)
                lines.append("| " + " | ".join(cells) + " |")
                continue
            wall = e["wall"]
            cells = [label, fmt_num(wall, 2)]
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
        add("full restore vs restic", 1 / 2, wall("restore", mv), wall("restore", "restic"))
        add("full restore vs cp -a", 1, wall("restore", mv), wall("restore", "copy"))
        add("repo size vs restic (generated)", 0.5, size("full", mv), size("full", "restic"), "size")
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
                 "`mailvault wall ÷ this` below 1 means mailvault is faster; against a limit row it is the multiple of the limit.")
        for s in SCENARIOS:
            if s == "limits" or s not in self.results:
                continue
            L.append("")
            L.append(f"{level}# {SCENARIO_TITLES[s]}")
            L.append("")
            L.append(self.table(s))
            mv = self.results[s].get("mailvault", {})
            rep = mv.get("report")
            if rep:
                keys = ["items_total", "items_new", "items_unchanged", "items_failed", "bytes_read", "bytes_added", "dedup_ratio", "compression_ratio"]
                parts = [f"{k} {rep[k]:.3g}" if isinstance(rep.get(k), float) else f"{k} {rep.get(k)}" for k in keys if k in rep]
                L.append("")
                L.append("mailvault's report: " + ", ".join(parts) + ".")
            for t, e in self.results[s].items():
                if e.get("deep"):
                    L.append("")
                    L.append(f"{t} restore verified against the source: {e['deep']}.")
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
    p.add_argument("--spamassassin", default=str(REPO_ROOT.parent / "shared" / "corpora" / "spamassassin"), help="SpamAssassin corpus directory (*.eml files)")
    p.add_argument("--bin-dir", help="where mailvault and mailvault-corpus are (default $CARGO_TARGET_DIR/<profile> or target/<profile>)")
    p.add_argument("--no-build", action="store_true", help="do not run cargo build")
    p.add_argument("--profile", help="cargo profile to build and run: release (default), or dev (default with --smoke: faster to build)")
    p.add_argument("--no-drop-caches", dest="drop_caches", action="store_false", help="do not drop the page cache before timed runs")
    p.add_argument("--timeout", type=float, default=0, help="kill a command after this many seconds (default: no limit)")
    p.add_argument("--keep", action="store_true", help="keep the work directory (corpus, repositories, logs)")
    p.add_argument("--smoke", action="store_true", help="CI mode: tiny preset, SpamAssassin sample, checks that everything runs")
    a = p.parse_args(argv)
    if not a.profile:
        a.profile = "dev" if a.smoke else "release"
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
    (b.work / "password").write_text(PASSWORD + "\n")
    if first is None:
        b.build()
        b.find_tools()
    else:
        b.bin_dir, b.corpus_bin, b.mv_bin = first.bin_dir, first.corpus_bin, first.mv_bin
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
            for d in ["src", "repos", "sa", "sa-sample", "cache"]:
                shutil.rmtree(b.work / d, ignore_errors=True)
    if failures:
        log(f"{len(failures)} failure(s):")
        for f in failures:
            log(f"  {f}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
