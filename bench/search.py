#!/usr/bin/env python3
"""search: mailvault's full-text index against Dovecot 2.3 + fts-xapian, side by side in one run.

The corpus (default the whole SpamAssassin corpus, ../shared/corpora/spamassassin from the
repository's root, 6,046 messages) is copied into one Maildir (cur/, a file per message,
named `N.mv:2,S`). Then, --rounds times (default 3), in an order rotated from round to round:

- mailvault: `init`, `backup maildir:` of the store (timed: what `index` is compared with),
  `index` (timed, msg/s, peak RSS), the size of the repository's `search/` directory,
  `snapshots` (timed: the floor of opening the repository, which every `search` pays too),
  and `search --json` once per query of a fixed list, each a separate process (p50/p99,
  peak RSS). The first search, which fills the local cache of the index, is run and timed
  apart, not counted in the percentiles.
- Dovecot with fts-xapian, for each configuration of --xapian (`whole`: partial=20 full=20,
  whole words only; `partial`: partial=3 full=20, the plugin's recommended substring
  indexing, ~3 minutes on the whole corpus): a throw-away Dovecot (its own configuration,
  base_dir and state_dir, on 127.0.0.1 with no port open), one account whose Maildir is a
  fresh copy of the store; the mailbox is synced first (`doveadm mailbox status`, then
  once more, timed: the floor of a doveadm command), then `doveadm index -u USER '*'` (timed, msg/s, peak
  RSS), the size of the xapian index on disk, and `doveadm search -u USER QUERY` for the
  same queries, translated into doveadm's search query (queries Dovecot has no simple form
  for are left out on its side).

The page cache is warm throughout (the corpus was just copied). Reported: medians over the
rounds of each figure, and the issue 27 targets: mailvault's msg/s >= 10x fts-xapian
whole-word's; the index <= 10% of the mail's bytes and <= 0.4x fts-xapian whole-word's;
query p50 <= 20 ms and p99 <= 100 ms; `index` time <= 0.5x the full backup's.

    bench/search.py                              # whole corpus, release build, 3 rounds, fts-xapian whole-word
    bench/search.py --xapian whole,partial       # also the substring configuration (slow)
    bench/search.py --smoke                      # CI: testdata/spamassassin (613), debug build, one round
    bench/search.py --bin-dir target/release --json /tmp/search.json

The smoke run skips the Dovecot side, saying so, when Dovecot or the fts-xapian plugin is
not installed (scripts/setup.sh installs both); it fails when a mailvault step fails, a
query fails or prints no valid JSON, or a query for a word the corpus holds finds nothing.
Standard library only.
"""

import argparse
import grp
import json
import math
import os
import pwd
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from s3 import binaries, fresh_work, repo_env, timed  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-password-not-secret"
DOMAIN, USER = "bench.example", "user"
ACCOUNT = f"{USER}@{DOMAIN}"
XAPIAN = {"whole": "partial=20 full=20", "partial": "partial=3 full=20"}
XAPIAN_LABEL = {"whole": "fts-xapian whole-word", "partial": "fts-xapian partial=3"}
# A word every corpus this runs on holds: the smoke run checks that it is found.
KNOWN_WORD = "spamassassin"

# (mailvault query, doveadm search query or None where Dovecot has no simple equivalent).
# Bare words are TEXT (headers and body, as mailvault's free text covers addresses, subject
# and body); OR is infix in doveadm's syntax and needs parentheses beside ANDs; dates are the Date header (SENTSINCE/SENTBEFORE, not the files' mtime); a
# prefix is given to Dovecot as its stem (a substring with partial=3, a whole word with
# the whole-word configuration: not the same hits, the same work).
QUERIES = [
    ("spamassassin", "TEXT spamassassin"),
    ("linux", "TEXT linux"),
    ("razor", "TEXT razor"),
    ("mortgage", "TEXT mortgage"),
    ("perl", "TEXT perl"),
    ("python", "TEXT python"),
    ("debian", "TEXT debian"),
    ("investment", "TEXT investment"),
    ("guaranteed", "TEXT guaranteed"),
    ("viagra", "TEXT viagra"),
    ("exmh", "TEXT exmh"),
    ("nonexistentwordxyz", "TEXT nonexistentwordxyz"),
    ("linux kernel", "TEXT linux TEXT kernel"),
    ("free money", "TEXT free TEXT money"),
    ('"click here"', 'TEXT "click here"'),
    ('"mailing list"', 'TEXT "mailing list"'),
    ("spam*", "TEXT spam"),
    ("mortg*", "TEXT mortg"),
    ("invest*", "TEXT invest"),
    ("from:pudge@perl.org", "FROM pudge@perl.org"),
    ("from:rssfeeds", "FROM rssfeeds"),
    ("from:hotmail.com", "FROM hotmail.com"),
    ("to:zzzz", "TO zzzz"),
    ("subject:ILUG", "SUBJECT ILUG"),
    ("subject:spambayes", "SUBJECT spambayes"),
    ('subject:"SUSE 8"', 'SUBJECT "SUSE 8"'),
    ("after:2002-08-01 before:2002-09-01", "SENTSINCE 1-Aug-2002 SENTBEFORE 1-Sep-2002"),
    ("on:2002-07", "SENTSINCE 1-Jul-2002 SENTBEFORE 1-Aug-2002"),
    ("before:2002-06-01", "SENTBEFORE 1-Jun-2002"),
    ("linux after:2002-09-01", "TEXT linux SENTSINCE 1-Sep-2002"),
    ("larger:10k", "LARGER 10240"),
    ("smaller:2k", "SMALLER 2048"),
    ("larger:100k", "LARGER 102400"),
    ("money larger:20k", "TEXT money LARGER 20480"),
    ("perl OR python", "( TEXT perl OR TEXT python )"),
    ("from:rssfeeds OR subject:ILUG", "( FROM rssfeeds OR SUBJECT ILUG )"),
    ("debian OR redhat rpm", "( TEXT debian OR TEXT redhat ) TEXT rpm"),
    ("linux -windows", "TEXT linux NOT TEXT windows"),
    ("remove -subject:ILUG", "TEXT remove NOT SUBJECT ILUG"),
    ("NOT spamassassin", "NOT TEXT spamassassin"),
    ("(perl OR python) -java", "( TEXT perl OR TEXT python ) NOT TEXT java"),
    ("(mortgage OR investment) larger:5k before:2002-09-01", "( TEXT mortgage OR TEXT investment ) LARGER 5120 SENTBEFORE 1-Sep-2002"),
    ("folder:INBOX razor", "MAILBOX INBOX TEXT razor"),
    (f"account:{ACCOUNT} exmh", "TEXT exmh"),
    ("flag:seen", "SEEN"),
    ("flag:flagged", "FLAGGED"),
    ("has:attachment", None),
    ("filename:txt", None),
    ("has:attachment larger:50k", None),
    ("deleted", None),
]


def log(msg):
    print(f"[searchbench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def du(path):
    """Bytes of the files under path (their sizes, not their blocks)."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def pct(xs, q):
    """The q-th percentile (nearest rank) of xs."""
    s = sorted(xs)
    return s[min(len(s), max(1, math.ceil(q / 100 * len(s)))) - 1]


def find_xapian():
    """(dovecot, doveadm) when Dovecot and the fts-xapian plugin are installed, else a reason."""
    dovecot = shutil.which("dovecot") or next((p for p in ("/usr/sbin/dovecot", "/usr/local/sbin/dovecot") if os.access(p, os.X_OK)), None)
    doveadm = shutil.which("doveadm") or next((p for p in ("/usr/bin/doveadm", "/usr/local/bin/doveadm") if os.access(p, os.X_OK)), None)
    if not dovecot or not doveadm:
        return None, "Dovecot is not installed (scripts/setup.sh installs dovecot-imapd)"
    dirs = ["/usr/lib/dovecot/modules", "/usr/lib64/dovecot", "/usr/local/lib/dovecot", "/usr/lib/dovecot"]
    if not any(Path(d, "lib21_fts_xapian_plugin.so").exists() for d in dirs):
        return None, "the fts-xapian plugin is not installed (scripts/setup.sh installs dovecot-fts-xapian)"
    return (dovecot, doveadm), None


def make_corpus(src, maildir):
    """Copies every message file under src's subdirectories (not its LICENSE or README) into
    maildir/cur as `N.mv:2,S`; returns (messages, bytes)."""
    files = sorted(p for p in Path(src).rglob("*") if p.is_file() and p.parent != Path(src))
    if not files:
        raise SystemExit(f"searchbench: no messages under {src}")
    for d in ("cur", "new", "tmp"):
        (maildir / d).mkdir(parents=True)
    total = 0
    for i, p in enumerate(files, 1):
        shutil.copyfile(p, maildir / "cur" / f"{i}.mv:2,S")
        total += p.stat().st_size
    return len(files), total


class Dovecot:
    """A throw-away Dovecot with fts-xapian: its own configuration, base_dir and state_dir
    under `root`, one account whose Maildir is a copy of the store, no port open."""

    def __init__(self, bins, root, store, config, logs):
        self.dovecot, self.doveadm = bins
        self.root, self.logs = root, logs
        if root.exists():
            shutil.rmtree(root)
        self.home = root / "mail" / DOMAIN / USER
        shutil.copytree(store, self.home / "Maildir")
        (root / "run").mkdir()
        (root / "state").mkdir()
        if os.geteuid() == 0:
            # As the tests do: the mail belongs to vmail (scripts/setup.sh creates it).
            pw = pwd.getpwnam("vmail")
            uid, gid = pw.pw_uid, pw.pw_gid
            internal = "dovecot" if self._user("dovecot") else "nobody"
            login = "dovenull" if self._user("dovenull") else "nobody"
            group = ""
        else:
            uid, gid = os.geteuid(), os.getegid()
            internal = login = pwd.getpwuid(uid).pw_name
            group = f"default_internal_group = {grp.getgrgid(gid).gr_name}\n"
        for d, _, fs in os.walk(root / "mail"):
            os.chown(d, uid, gid)
            for f in fs:
                os.chown(os.path.join(d, f), uid, gid)
        r, m = root, root / "mail"
        self.conf = root / "dovecot.conf"
        self.conf.write_text(
            f"# Generated by bench/search.py\n"
            f"base_dir = {r}/run\nstate_dir = {r}/state\ninstance_name = mvsearch-{os.getpid()}-{root.name}\n"
            f"protocols = imap\nlisten = 127.0.0.1\nlog_path = {r}/dovecot.log\ninfo_log_path = {r}/dovecot.log\n"
            f"ssl = no\nmail_location = maildir:{m}/%d/%n/Maildir\nmail_uid = {uid}\nmail_gid = {gid}\n"
            f"first_valid_uid = 1\nfirst_valid_gid = 1\nmail_fsync = never\n"
            f"default_internal_user = {internal}\ndefault_login_user = {login}\n{group}default_vsz_limit = 2G\n"
            f"mail_plugins = fts fts_xapian\n"
            f"plugin {{\n  fts = xapian\n  fts_xapian = {config} verbose=0\n  fts_autoindex = no\n  fts_enforced = yes\n}}\n"
            f"passdb {{\n  driver = static\n  args = password=bench\n}}\n"
            f"userdb {{\n  driver = static\n  args = uid={uid} gid={gid} home={m}/%d/%n\n}}\n"
            f"service imap-login {{\n  inet_listener imap {{\n    port = 0\n  }}\n  inet_listener imaps {{\n    port = 0\n  }}\n"
            + ("" if os.geteuid() == 0 else "  chroot =\n")
            + "}\n"
            + ("" if os.geteuid() == 0 else "service imap-urlauth-login {\n  chroot =\n}\n")
        )
        out = open(root / "stdout.log", "w")
        self.proc = subprocess.Popen([self.dovecot, "-F", "-c", str(self.conf)], stdout=out, stderr=out,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        for _ in range(150):
            if (root / "run" / "auth-userdb").exists():
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"searchbench: Dovecot did not start, see {root}/stdout.log and {root}/dovecot.log")

    @staticmethod
    def _user(name):
        try:
            pwd.getpwnam(name)
            return True
        except KeyError:
            return False

    def adm(self, name, args):
        """Runs doveadm ARGS; returns (wall, rss MB, stdout); a failure ends the run."""
        logf = self.logs / f"{self.root.name}-{name}.log"
        rc, wall, rss, out = timed([self.doveadm, "-c", str(self.conf)] + args, dict(os.environ), logf)
        if rc != 0:
            raise SystemExit(f"searchbench: doveadm {' '.join(args)} failed (exit {rc}), see {logf} and {self.root}/dovecot.log")
        return wall, rss, out

    def index_bytes(self):
        """The fts-xapian index on disk (xapian-indexes under the user's home)."""
        dirs = [p for p in self.home.rglob("*xapian*") if p.is_dir()]
        return sum(du(d) for d in dirs if not any(d != o and o in d.parents for o in dirs))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 9)
                self.proc.wait()


class Bench:
    def __init__(self, args):
        self.args = args
        self.work, self.logs = fresh_work(args.work or "/tmp/mailvault-bench-search")
        self.mv, _ = binaries(args.bin_dir, args.smoke)
        self.n = 0

    def env(self, repo):
        return repo_env(self.work, repo)

    def run(self, name, args, repo):
        """Runs mailvault ARGS on repo; returns (wall, rss MB, stdout); a failure ends the run."""
        self.n += 1
        logf = self.logs / f"{self.n:04d}-{name}.log"
        rc, wall, rss, out = timed([self.mv] + args, self.env(repo), logf)
        if rc != 0:
            raise SystemExit(f"searchbench: mailvault {' '.join(args)} failed (exit {rc}), see {logf}")
        return wall, rss, out

    def search(self, repo, query):
        wall, rss, out = self.run("search", ["search", "--json", "--quiet", "--", query], repo)
        try:
            r = json.loads(out)
            total, hits = int(r["total"]), r["hits"]
            assert isinstance(hits, list)
        except (ValueError, KeyError, TypeError, AssertionError) as e:
            raise SystemExit(f"searchbench: search {query!r} printed no valid JSON report ({e}): {out[:200]!r}")
        return wall, rss, total

    def mailvault(self, i):
        name = f"mv-{i}"
        repo = self.work / "repos" / name
        repo.parent.mkdir(parents=True, exist_ok=True)
        self.run("init", ["init", "--quiet"], repo)
        backup, _, _ = self.run("backup", ["backup", f"maildir:{self.mail}", "--json", "--quiet"], repo)
        wall, rss, out = self.run("index", ["index", "--json", "--quiet"], repo)
        rep = json.loads(out)
        if rep["indexed"] != self.messages:
            raise SystemExit(f"searchbench: index indexed {rep['indexed']} contents, the store holds {self.messages} messages")
        floor, _, _ = self.run("snapshots", ["snapshots", "--json", "--quiet"], repo)
        first, _, _ = self.search(repo, KNOWN_WORD)
        lat, rsss, hits = [], [], {}
        for q, _ in QUERIES:
            w, r, total = self.search(repo, q)
            lat.append(w)
            rsss.append(r)
            hits[q] = total
        if hits[KNOWN_WORD] < 1:
            raise SystemExit(f"searchbench: search {KNOWN_WORD!r} found nothing in a corpus that holds it")
        out = {
            "backup_s": backup, "index_s": wall, "index_rss_mb": rss, "index_bytes": du(repo / "search"),
            "floor_s": floor, "first_search_s": first, "p50_s": pct(lat, 50), "p99_s": pct(lat, 99),
            "search_rss_mb": max(rsss), "latencies": dict(zip((q for q, _ in QUERIES), lat)), "hits": hits,
            "report": rep,
        }
        shutil.rmtree(repo)
        return out

    def xapian(self, i, kind):
        d = Dovecot(self.dovecot, self.work / f"dovecot-{kind}-{i}", self.mail / DOMAIN / USER / "Maildir",
                    XAPIAN[kind], self.logs)
        try:
            # The first command syncs the new Maildir (Dovecot's own index); the second is the floor.
            d.adm("sync", ["mailbox", "status", "-u", ACCOUNT, "messages", "INBOX"])
            floor, _, out = d.adm("status", ["mailbox", "status", "-u", ACCOUNT, "messages", "INBOX"])
            if f"messages={self.messages}" not in out:
                raise SystemExit(f"searchbench: Dovecot sees {out.strip()!r}, the store holds {self.messages} messages")
            wall, rss, _ = d.adm("index", ["index", "-u", ACCOUNT, "*"])
            size = d.index_bytes()
            if size == 0:
                raise SystemExit(f"searchbench: no xapian index under {d.home} after doveadm index")
            lat, rsss, hits = [], [], {}
            for q, dq in QUERIES:
                if dq is None:
                    continue
                w, r, res = d.adm("search", ["search", "-u", ACCOUNT] + shlex.split(dq))
                lat.append(w)
                rsss.append(r)
                hits[q] = len(res.splitlines())
        finally:
            d.stop()
        shutil.rmtree(d.root)
        return {"index_s": wall, "index_rss_mb": rss, "index_bytes": size, "floor_s": floor,
                "p50_s": pct(lat, 50), "p99_s": pct(lat, 99), "search_rss_mb": max(rsss),
                "latencies": dict(zip((q for q, dq in QUERIES if dq), lat)),
                "hits": hits}

    def main(self):
        a = self.args
        self.mail = self.work / "mail"
        self.messages, self.bytes = make_corpus(a.corpus, self.mail / DOMAIN / USER / "Maildir")
        log(f"corpus {a.corpus}: {self.messages} messages, {self.bytes / 1e6:.1f} MB")
        self.dovecot, why = find_xapian()
        tools = ["mailvault"]
        if self.dovecot:
            tools += [f"xapian-{k}" for k in a.xapian]
        else:
            print(f"searchbench: Dovecot side SKIPPED: {why}", flush=True)
        rounds = []
        for i in range(a.rounds):
            order = tools[i % len(tools):] + tools[:i % len(tools)]
            r = {}
            for t in order:
                log(f"round {i + 1}/{a.rounds}: {t}")
                r[t] = self.mailvault(i) if t == "mailvault" else self.xapian(i, t.split("-", 1)[1])
            rounds.append(r)
        med = {t: {k: statistics.median(r[t][k] for r in rounds) for k in rounds[0][t]
                   if isinstance(rounds[0][t][k], (int, float))} for t in tools}
        self.report(tools, med, rounds)
        if not a.keep:
            shutil.rmtree(self.work)

    def report(self, tools, med, rounds):
        a, mb = self.args, self.bytes / 1e6
        label = {"mailvault": "mailvault", **{f"xapian-{k}": XAPIAN_LABEL[k] + f" ({XAPIAN[k]})" for k in XAPIAN}}
        lines = [
            f"corpus {a.corpus}: {self.messages} messages, {mb:.1f} MB of mail; {a.rounds} round(s) in rotated order, medians; "
            f"page cache warm; {len(QUERIES)} queries for mailvault, {sum(1 for _, d in QUERIES if d)} of them translated for Dovecot; "
            f"mailvault {self.mv}; load {os.getloadavg()[0]:.2f}",
            "",
            "| | index s | msg/s | index MB | % of mail | index peak RSS MB | floor ms | query p50 ms | query p99 ms | p50 / p99 net of floor ms | search peak RSS MB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for t in tools:
            m = med[t]
            net = f"{(m['p50_s'] - m['floor_s']) * 1e3:.0f} / {(m['p99_s'] - m['floor_s']) * 1e3:.0f}"
            lines.append(
                f"| {label[t]} | {m['index_s']:.2f} | {self.messages / m['index_s']:.0f} | {m['index_bytes'] / 1e6:.2f} | "
                f"{100 * m['index_bytes'] / self.bytes:.1f} | {m['index_rss_mb']:.0f} | {m['floor_s'] * 1e3:.0f} | "
                f"{m['p50_s'] * 1e3:.0f} | {m['p99_s'] * 1e3:.0f} | {net} | {m['search_rss_mb']:.0f} |"
            )
        mv = med["mailvault"]
        lines += [
            "",
            f"mailvault: full backup {mv['backup_s']:.2f} s; first search (fills the local cache) {mv['first_search_s'] * 1e3:.0f} ms; "
            f"floor = `snapshots` for mailvault, `doveadm mailbox status` for Dovecot.",
            "",
            "| target (issue 27) | figure | met |",
            "|---|---:|---|",
        ]
        figures = {}

        def target(name, value, ok, fmt):
            figures[name] = value
            lines.append(f"| {name} | {fmt.format(value)} | {'yes' if ok else 'NO'} |")

        if "xapian-whole" in med:
            xw = med["xapian-whole"]
            r = xw["index_s"] / mv["index_s"]
            target("mailvault msg/s / fts-xapian whole-word msg/s >= 10", r, r >= 10, "{:.1f}x")
        p = 100 * mv["index_bytes"] / self.bytes
        target("index size <= 10% of the mail", p, p <= 10, "{:.1f}%")
        if "xapian-whole" in med:
            r = mv["index_bytes"] / med["xapian-whole"]["index_bytes"]
            target("index size <= 0.4x fts-xapian whole-word", r, r <= 0.4, "{:.2f}x")
        target("query p50 <= 20 ms", mv["p50_s"] * 1e3, mv["p50_s"] <= 0.020, "{:.0f} ms")
        target("query p99 <= 100 ms", mv["p99_s"] * 1e3, mv["p99_s"] <= 0.100, "{:.0f} ms")
        r = mv["index_s"] / mv["backup_s"]
        target("index time / full backup time <= 0.5", r, r <= 0.5, "{:.2f}")
        lines += ["", "| query | mailvault hits | ms | " + " | ".join(f"{label[t]} hits | ms" for t in tools[1:]) + " |",
                  "|---|---:|---:|" + "---:|---:|" * (len(tools) - 1)]
        for q, dq in QUERIES:
            row = f"| `{q}` | {rounds[0]['mailvault']['hits'][q]} | {statistics.median(r['mailvault']['latencies'][q] for r in rounds) * 1e3:.0f} |"
            for t in tools[1:]:
                if dq is None:
                    row += " - | - |"
                else:
                    row += f" {rounds[0][t]['hits'][q]} | {statistics.median(r[t]['latencies'][q] for r in rounds) * 1e3:.0f} |"
            lines.append(row)
        # Dovecot finding nothing where mailvault finds messages: what its configuration does
        # not index (fts-xapian 1.5 skips every word shorter than `partial`).
        for t in tools[1:]:
            empty = [q for q, dq in QUERIES if dq and rounds[0][t]["hits"][q] == 0 and rounds[0]["mailvault"]["hits"][q] > 0]
            if empty:
                lines += ["", f"{label[t]}: {len(empty)} of {sum(1 for _, d in QUERIES if d)} queries find nothing where "
                              f"mailvault finds messages (its index lacks those terms), e.g. " + ", ".join(f"`{q}`" for q in empty[:5])]
        text = "\n".join(lines) + "\n"
        print(text)
        if a.json:
            Path(a.json).write_text(json.dumps({
                "corpus": str(a.corpus), "messages": self.messages, "bytes": self.bytes, "rounds": a.rounds,
                "queries": [{"mailvault": q, "doveadm": dq} for q, dq in QUERIES],
                "medians": med, "targets": figures, "per_round": rounds, "load": os.getloadavg(),
            }, indent=2))


def default_corpus():
    """../shared/corpora/spamassassin from the repository's root; from a git worktree, from
    the main checkout's root (the one holding the common .git directory)."""
    roots = [REPO_ROOT]
    try:
        common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=REPO_ROOT,
                                capture_output=True, text=True, check=True).stdout.strip()
        roots.append(Path(common).parent)
    except (OSError, subprocess.CalledProcessError):
        pass
    for r in roots:
        d = r.parent / "shared" / "corpora" / "spamassassin"
        if d.is_dir():
            return d
    return roots[0].parent / "shared" / "corpora" / "spamassassin"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=None,
                    help="directory of messages, one file each, in subdirectories (default ../shared/corpora/spamassassin from the repository's root)")
    ap.add_argument("--smoke", action="store_true", help="testdata/spamassassin, debug build, one round, fts-xapian whole-word only")
    ap.add_argument("--rounds", type=int, default=3, help="rounds in rotated order; the figures are medians (default 3)")
    ap.add_argument("--xapian", default="whole",
                    help="fts-xapian configurations, comma-separated: whole (partial=20 full=20), partial (partial=3 full=20); default whole")
    ap.add_argument("--work", default=None, help="work directory (default /tmp/mailvault-bench-search); emptied first")
    ap.add_argument("--bin-dir", default=None, help="directory with mailvault (default: build)")
    ap.add_argument("--json", default=None, metavar="OUT", help="write the figures here as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    args = ap.parse_args()
    args.xapian = [k for k in args.xapian.split(",") if k]
    for k in args.xapian:
        if k not in XAPIAN:
            ap.error(f"--xapian: unknown configuration {k!r} (whole, partial)")
    if args.smoke:
        args.rounds, args.xapian = 1, ["whole"]
        args.corpus = args.corpus or str(REPO_ROOT / "testdata" / "spamassassin")
    args.corpus = str(Path(args.corpus or default_corpus()).resolve())
    if not Path(args.corpus).is_dir():
        ap.error(f"no corpus at {args.corpus}: give --corpus DIR")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    Bench(args).main()


if __name__ == "__main__":
    main()
