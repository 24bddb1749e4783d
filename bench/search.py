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

With --preset P[,P...] the store is generated instead (`mailvault-corpus generate --preset P
--seed 1`: tiny, small, medium, large, huge), one preset after the other, once each (no
rounds; fts-xapian whole-word only):

- mailvault: `init`, a full backup, then --snapshots - 1 times (default 30 snapshots in
  all) `mailvault-corpus mutate --seed N` (a day of flag changes, deliveries and deletions)
  and an incremental backup (timed: the full backup, and the incrementals' mean); `index`
  (timed, msg/s of the distinct contents it indexes, peak RSS); `search/` against the
  distinct message bytes `index` read; `snapshots` three times (the floor, their median);
  then GEN_QUERIES (50 queries over every operator of docs/search.md, with the largest
  account's address and first name filled in), each a separate process, with
  `--all-snapshots` over every account (the issue's target) and again over the newest
  snapshot (the default scope): p50/p99, net of the floor too, peak RSS, and each query's
  hits; then the same queries in one process (`search --queries FILE`: the repository, the
  index and the places map opened once, as a server has them), each query's time as the
  process measures it (the issue's latency targets are read there: a process each pays the
  password's key derivation and the repository's index every time) and the answers checked
  equal to the separate processes'; the report names the queries that find nothing (all
  but one should).
- Dovecot with fts-xapian whole-word: the store's Maildirs hard-linked into a throw-away
  Dovecot, one account each, indexed one account at a time, the largest first (the sync
  `doveadm mailbox status -u USER messages '*'` apart, then `doveadm index -u USER '*'`,
  timed), until --dovecot-budget seconds (default 300) have passed: the report says how
  many accounts were indexed. Then the translated queries on the largest account alone.

With several presets a table of `index` and `search` peak RSS per preset follows, and
whether they grow slower than the contents indexed (the issue's sub-linear target).

    bench/search.py --preset tiny --snapshots 3 --bin-dir target/release   # a check, ~20 s
    bench/search.py --preset small,large --json /tmp/search-large.json      # the issue's figures

The smoke run skips the Dovecot side, saying so, when Dovecot or the fts-xapian plugin is
not installed (scripts/setup.sh installs both); it fails when a mailvault step fails, a
query fails or prints no valid JSON, or a query for a word the corpus holds finds nothing.
Standard library only.
"""

import argparse
import calendar
import grp
import json
import math
import os
import pwd
import re
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


# The fixed queries of a generated store (--preset), over every operator; every one but
# GEN_MISS finds messages in the stores of seed 1 (from `tiny` up) after a few mutations.
# The words come from the corpus tool's vocabulary (crates/corpus/src/words.rs: body words,
# subjects "Invoice N", "Meeting notes: ...", "Weekly X update", list tags such as
# "[rust-dev]", signatures, attachment names "report-N.pdf", "budget-N.xlsx") and its world
# (domains northwind.example..., external senders at freemail.example, folders, keywords).
# {account} and {first} are the largest account's address and first name; {ago_2y} and
# {ago_30m} the dates 2 years and 30 months ago, as doveadm takes them. doveadm's side is
# run on one account, so `account:` is dropped there (ALL when nothing else is left).
GEN_MISS = "nonexistentwordxyz"
GEN_QUERIES = [
    ("schedule", "TEXT schedule"),
    ("budget", "TEXT budget"),
    ("rollback", "TEXT rollback"),
    ("kernel", "TEXT kernel"),
    (GEN_MISS, f"TEXT {GEN_MISS}"),
    ("deadline AND budget", "TEXT deadline TEXT budget"),
    ('"best regards"', 'TEXT "best regards"'),
    ('"forwarded message"', 'TEXT "forwarded message"'),
    ('"software engineer"', 'TEXT "software engineer"'),
    ("sched*", "TEXT sched"),
    ("rollback OR deploy", "( TEXT rollback OR TEXT deploy )"),
    ("kernel -driver", "TEXT kernel NOT TEXT driver"),
    ("NOT budget", "NOT TEXT budget"),
    ("(refund OR receipt) -invoice", "( TEXT refund OR TEXT receipt ) NOT TEXT invoice"),
    ("from:freemail.example", "FROM freemail.example"),
    ("from:{first}", "FROM {first}"),
    ("from:north*", "FROM north"),
    ("to:{account}", "TO {account}"),
    ("to:rust-dev", "TO rust-dev"),
    ("subject:invoice", "SUBJECT invoice"),
    ('subject:"meeting notes"', 'SUBJECT "meeting notes"'),
    ("subject:invoi*", "SUBJECT invoi"),
    ("folder:INBOX", "MAILBOX INBOX"),
    ("folder:Sent deadline", "MAILBOX Sent TEXT deadline"),
    ("folder:Archive/2024", "MAILBOX Archive.2024"),
    ("folder:Junk OR folder:Trash", "( MAILBOX Junk OR MAILBOX Trash )"),
    ("account:{account}", "ALL"),
    ("account:{account} budget", "TEXT budget"),
    ("on:2024-03", "SENTSINCE 1-Mar-2024 SENTBEFORE 1-Apr-2024"),
    ("after:2024-01-01 before:2024-07-01", "SENTSINCE 1-Jan-2024 SENTBEFORE 1-Jul-2024"),
    ("before:2023-06", "SENTBEFORE 1-Jun-2023"),
    ("after:2y", "SENTSINCE {ago_2y}"),
    ("budget before:30m", "TEXT budget SENTBEFORE {ago_30m}"),
    ("has:attachment", None),
    ("has:attachment larger:200k", None),
    ("filename:pdf", None),
    ("filename:budget* OR filename:report*", None),
    ("larger:100k", "LARGER 102400"),
    ("smaller:4k", "SMALLER 4096"),
    ("subject:invoice larger:5k smaller:100k", "SUBJECT invoice LARGER 5120 SMALLER 102400"),
    ("flag:seen", "SEEN"),
    ("-flag:seen", "UNSEEN"),
    ("flag:flagged kernel", "FLAGGED TEXT kernel"),
    ("flag:answered", "ANSWERED"),
    ("flag:deleted OR flag:draft OR flag:flagged", "( DELETED OR DRAFT OR FLAGGED )"),
    ("keyword:$Forwarded", "KEYWORD $Forwarded"),
    ("keyword:$Junk OR keyword:NonJunk", "( KEYWORD $Junk OR KEYWORD NonJunk )"),
    ("deleted", None),
    ("deleted -has:attachment", None),
    ("(subject:invoice OR to:rust-dev) has:attachment -flag:flagged", None),
]
# --all-snapshots (the target) and the default scope, the newest snapshot.
SCOPES = [("all", ["--all-snapshots"]), ("latest", [])]


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
    under `root`, no port open, and `accounts`, (address, Maildir) pairs, each Maildir copied
    to the account's home (hard-linked with `link`: Dovecot never writes into a message file)."""

    def __init__(self, bins, root, accounts, config, logs, link=False):
        self.dovecot, self.doveadm = bins
        self.root, self.logs = root, logs
        if root.exists():
            shutil.rmtree(root)
        for address, maildir in accounts:
            shutil.copytree(maildir, self.home(address) / "Maildir", copy_function=os.link if link else shutil.copy2)
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

    def home(self, address):
        """An account's home (mail_location's `%d/%n`)."""
        user, domain = address.split("@", 1)
        return self.root / "mail" / domain / user

    def index_bytes(self, address):
        """An account's fts-xapian index on disk (xapian-indexes under its home)."""
        dirs = [p for p in self.home(address).rglob("*xapian*") if p.is_dir()]
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
        self.mv, self.corpus = binaries(args.bin_dir, args.smoke)
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

    def search(self, repo, query, scope=()):
        wall, rss, out = self.run("search", ["search", "--json", "--quiet", *scope, "--", query], repo)
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
        # The same backup indexing as it reads (`backup --index`), in a repository of its own.
        both = self.work / "repos" / f"{name}-inline"
        self.run("init", ["init", "--quiet"], both)
        inline, inline_rss, iout = self.run("backup --index", ["backup", "--index", f"maildir:{self.mail}", "--json", "--quiet"], both)
        if json.loads(iout)["index"]["indexed"] != self.messages:
            raise SystemExit(f"searchbench: backup --index did not index every message: {iout[:300]}")
        shutil.rmtree(both)
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
            "backup_index_s": inline, "backup_index_rss_mb": inline_rss, "floor_s": floor, "first_search_s": first, "p50_s": pct(lat, 50), "p99_s": pct(lat, 99),
            "search_rss_mb": max(rsss), "latencies": dict(zip((q for q, _ in QUERIES), lat)), "hits": hits,
            "report": rep,
        }
        shutil.rmtree(repo)
        return out

    def xapian(self, i, kind):
        d = Dovecot(self.dovecot, self.work / f"dovecot-{kind}-{i}", [(ACCOUNT, self.mail / DOMAIN / USER / "Maildir")],
                    XAPIAN[kind], self.logs)
        try:
            # The first command syncs the new Maildir (Dovecot's own index); the second is the floor.
            d.adm("sync", ["mailbox", "status", "-u", ACCOUNT, "messages", "INBOX"])
            floor, _, out = d.adm("status", ["mailbox", "status", "-u", ACCOUNT, "messages", "INBOX"])
            if f"messages={self.messages}" not in out:
                raise SystemExit(f"searchbench: Dovecot sees {out.strip()!r}, the store holds {self.messages} messages")
            wall, rss, _ = d.adm("index", ["index", "-u", ACCOUNT, "*"])
            size = d.index_bytes(ACCOUNT)
            if size == 0:
                raise SystemExit(f"searchbench: no xapian index under {d.home(ACCOUNT)} after doveadm index")
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
        r = mv["backup_index_s"] / mv["backup_s"] - 1
        target("`backup --index` adds <= 50% to a full backup's time", 100 * r, r <= 0.5, "{:.0f}%")
        lines.append(f"| (`index` after the backup, for reference: its time / the full backup's) | {mv['index_s'] / mv['backup_s']:.2f} | |")
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


MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def months_ago(n):
    """The date n calendar months before today (UTC) as doveadm takes it (`1-Mar-2024`),
    the day kept where the month has it (a month back from 31 March is 29 February)."""
    t = time.gmtime()
    y, m = divmod(t.tm_year * 12 + t.tm_mon - 1 - n, 12)
    return f"{min(t.tm_mday, calendar.monthrange(y, m + 1)[1])}-{MONTHS[m]}-{y}"


def gen_queries(address):
    """GEN_QUERIES for a store whose largest account is `address`."""
    f = {"account": address, "first": address.split("@")[0].split(".")[0], "ago_2y": months_ago(24), "ago_30m": months_ago(30)}
    return [(q.format(**f), dq.format(**f) if dq else None) for q, dq in GEN_QUERIES]


class GenBench(Bench):
    """--preset: generated stores, one preset after the other, each backed up --snapshots
    times, indexed and searched; Dovecot + fts-xapian whole-word on the same store."""

    def corpus_tool(self, name, args):
        """Runs mailvault-corpus ARGS --json; returns (wall, its JSON report)."""
        self.n += 1
        logf = self.logs / f"{self.n:04d}-corpus-{name}.log"
        rc, wall, _, out = timed([self.corpus, name, "--json"] + args, dict(os.environ), logf)
        if rc != 0:
            raise SystemExit(f"searchbench: mailvault-corpus {name} {' '.join(args)} failed (exit {rc}), see {logf}")
        return wall, json.loads(out)

    def queries(self, repo, queries, scope):
        """Each query once, a process each: (latencies, peak RSS, hits) by query."""
        lat, rss, hits = {}, {}, {}
        for q, _ in queries:
            lat[q], rss[q], hits[q] = self.search(repo, q, scope)
        return lat, rss, hits

    def batch(self, repo, queries, scope):
        """All queries in one process (`search --queries FILE`: the repository and the index
        opened once, as a server has them): (each query's time as the process measured it,
        the process's wall time and peak RSS, hits) by query."""
        qfile = self.work / "queries.txt"
        qfile.write_text("".join(q + "\n" for q, _ in queries))
        wall, rss, out = self.run("batch", ["search", "--json", "--quiet", *scope, "--queries", str(qfile)], repo)
        lat, hits = {}, {}
        for line in out.splitlines():
            r = json.loads(line)
            if "error" in r:
                raise SystemExit(f"searchbench: batch query {r['query']!r} failed: {r['error']}")
            lat[r["query"]] = r["elapsed_ms"] / 1e3
            hits[r["query"]] = int(r["result"]["total"])
        if set(lat) != {q for q, _ in queries}:
            raise SystemExit("searchbench: the batch did not answer every query")
        return lat, wall, rss, hits

    def preset(self, preset):
        a = self.args
        base = self.work / preset
        store, repo = base / "store", base / f"repo-{preset}"
        base.mkdir()
        log(f"{preset}: generating the store (seed 1)")
        gen_s, gen = self.corpus_tool("generate", ["--preset", preset, "--seed", "1", str(store)])
        log(f"{preset}: {gen['messages']} messages, {gen['bytes'] / 1e6:.0f} MB, {gen['accounts']} accounts; full backup")
        self.run("init", ["init", "--quiet"], repo)
        backup = ["backup", f"maildir:{store}", "--json", "--quiet"]
        full, full_rss, _ = self.run("backup", backup, repo)
        # The same first backup indexing as it reads, in a repository of its own.
        both = base / f"repo-{preset}-inline"
        self.run("init", ["init", "--quiet"], both)
        full_index, full_index_rss, _ = self.run("backup --index", ["backup", "--index", *backup[1:]], both)
        shutil.rmtree(both)
        incr, incr_rss = [], 0
        for seed in range(2, a.snapshots + 1):
            self.corpus_tool("mutate", ["--seed", str(seed), str(store)])
            w, r, _ = self.run("backup", backup, repo)
            incr.append(w)
            incr_rss = max(incr_rss, r)
            if seed % 5 == 0:
                log(f"{preset}: snapshot {seed}/{a.snapshots}")
        _, stats = self.corpus_tool("stats", [str(store)])
        log(f"{preset}: index")
        index, index_rss, out = self.run("index", ["index", "--json", "--quiet"], repo)
        rep = json.loads(out)
        if rep["failures"] or rep["indexed"] != rep["contents"]:
            raise SystemExit(f"searchbench: index indexed {rep['indexed']} of {rep['contents']} contents, {len(rep['failures'])} failures")
        floor = statistics.median(self.run("snapshots", ["snapshots", "--json", "--quiet"], repo)[0] for _ in range(3))
        largest = max(stats["per_account"], key=lambda x: (x["bytes"], x["address"]))
        queries = gen_queries(largest["address"])
        first, _, _ = self.search(repo, "budget", SCOPES[0][1])
        r = {
            "preset": preset, "backup_index_s": full_index, "backup_index_rss_mb": full_index_rss, "generated": gen, "generate_s": gen_s, "stats": stats, "snapshots": a.snapshots,
            "backup_s": full, "backup_rss_mb": full_rss, "incr_s": statistics.mean(incr) if incr else None,
            "incr_rss_mb": incr_rss, "index_s": index, "index_rss_mb": index_rss, "report": rep,
            "index_bytes": du(repo / "search"), "floor_s": floor, "first_search_s": first,
            "largest": largest, "queries": [{"mailvault": q, "doveadm": dq} for q, dq in queries], "scopes": {},
        }
        for name, scope in SCOPES:
            log(f"{preset}: {len(queries)} queries, scope {name}")
            lat, rss, hits = self.queries(repo, queries, scope)
            r["scopes"][name] = {"p50_s": pct(lat.values(), 50), "p99_s": pct(lat.values(), 99),
                                 "search_rss_mb": max(rss.values()), "latencies": lat, "rss_mb": rss, "hits": hits}
            blat, bwall, brss, bhits = self.batch(repo, queries, scope)
            differ = [q for q in hits if bhits.get(q) != hits[q]]
            if differ:
                raise SystemExit(f"searchbench: one process and a process each disagree on {differ}")
            r["scopes"][name].update({"batch_p50_s": pct(blat.values(), 50), "batch_p99_s": pct(blat.values(), 99),
                                      "batch_wall_s": bwall, "batch_rss_mb": brss, "batch_latencies": blat})
            empty = [q for q, h in hits.items() if h == 0 and q != GEN_MISS]
            if empty:
                log(f"{preset}: {len(empty)} queries find nothing (scope {name}): {', '.join(empty)}")
        if self.dovecot:
            r["xapian"] = self.xapian_store(preset, store, stats, queries)
        if not a.keep:
            shutil.rmtree(base)
        return r

    def xapian_store(self, preset, store, stats, queries):
        """fts-xapian whole-word on the store: the accounts linked into a throw-away Dovecot,
        indexed one by one, the largest first, until --dovecot-budget seconds have passed;
        then the queries on the largest account."""
        accounts = sorted(stats["per_account"], key=lambda x: (-x["bytes"], x["address"]))
        d = Dovecot(self.dovecot, self.work / f"dovecot-{preset}", [(x["address"], store / x["maildir"]) for x in accounts],
                    XAPIAN["whole"], self.logs, link=True)
        try:
            t0 = time.monotonic()
            done, sync_s, index_s, index_rss, size = [], 0.0, 0.0, 0.0, 0
            for x in accounts:
                if done and time.monotonic() - t0 > self.args.dovecot_budget:
                    break
                # Dovecot's own index of the Maildir first (not timed as indexing), as in the SpamAssassin mode.
                w, _, out = d.adm("sync", ["mailbox", "status", "-u", x["address"], "messages", "*"])
                n = sum(int(m) for m in re.findall(r"messages=(\d+)", out))
                if n != x["messages"]:
                    raise SystemExit(f"searchbench: Dovecot sees {n} messages in {x['address']}, the store holds {x['messages']}")
                sync_s += w
                w, rss, _ = d.adm("index", ["index", "-u", x["address"], "*"])
                index_s += w
                index_rss = max(index_rss, rss)
                size += d.index_bytes(x["address"])
                done.append(x)
            if size == 0:
                raise SystemExit(f"searchbench: no xapian index under {d.root} after doveadm index")
            log(f"{preset}: fts-xapian indexed {len(done)} of {len(accounts)} accounts; queries on {accounts[0]['address']}")
            user = accounts[0]["address"]
            floor = statistics.median(d.adm("status", ["mailbox", "status", "-u", user, "messages", "INBOX"])[0] for _ in range(3))
            lat, rsss, hits = {}, {}, {}
            for q, dq in queries:
                if dq is not None:
                    lat[q], rsss[q], res = d.adm("search", ["search", "-u", user] + shlex.split(dq))
                    hits[q] = len(res.splitlines())
        finally:
            d.stop()
        shutil.rmtree(d.root)
        return {"accounts": len(done), "of_accounts": len(accounts), "messages": sum(x["messages"] for x in done),
                "bytes": sum(x["bytes"] for x in done), "sync_s": sync_s, "index_s": index_s, "index_rss_mb": index_rss,
                "index_bytes": size, "account": accounts[0], "floor_s": floor, "p50_s": pct(lat.values(), 50),
                "p99_s": pct(lat.values(), 99), "search_rss_mb": max(rsss.values()), "latencies": lat, "hits": hits}

    def main(self):
        self.dovecot, why = find_xapian()
        if not self.dovecot:
            print(f"searchbench: Dovecot side SKIPPED: {why}", flush=True)
        results = [self.preset(p) for p in self.args.preset]
        self.report(results)
        if not self.args.keep:
            shutil.rmtree(self.work)

    def report(self, results):
        a = self.args
        lines = [f"generated stores (`mailvault-corpus generate --seed 1`), {a.snapshots} snapshots each (a `mutate --seed N` "
                 f"before each incremental backup); {len(GEN_QUERIES)} queries, each a separate process; page cache warm; "
                 f"mailvault {self.mv}; load {os.getloadavg()[0]:.2f}", ""]
        for r in results:
            lines += self.report_preset(r)
        lines += self.scaling(results)
        text = "\n".join(lines) + "\n"
        print(text)
        if a.json:
            Path(a.json).write_text(json.dumps({"snapshots": a.snapshots, "results": results, "load": os.getloadavg()}, indent=2))

    def report_preset(self, r):
        g, st, rep = r["generated"], r["stats"], r["report"]
        x = r.get("xapian")
        ms = lambda s: f"{s * 1e3:.0f}"  # noqa: E731
        L = [f"## `{r['preset']}`", "",
             f"Generated in {r['generate_s']:.1f} s: {g['messages']:,} messages, {g['bytes'] / 1e6:.1f} MB, {g['accounts']} accounts; "
             f"after {r['snapshots'] - 1} mutations {st['messages']:,} messages, {st['bytes'] / 1e6:.1f} MB. "
             f"mailvault: full backup {r['backup_s']:.2f} s ({r['backup_rss_mb']:.0f} MB peak RSS)"
             + (f", incremental {r['incr_s']:.2f} s on average ({r['incr_rss_mb']:.0f} MB)" if r["incr_s"] is not None else "")
             + f"; `index` of {rep['indexed']:,} distinct contents ({rep['bytes'] / 1e6:.1f} MB) from {rep['snapshots']} snapshots "
             f"{r['index_s']:.2f} s, {rep['indexed'] / r['index_s']:,.0f} msg/s, {r['index_rss_mb']:.0f} MB peak RSS; "
             f"`search/` {r['index_bytes'] / 1e6:.2f} MB = {100 * r['index_bytes'] / rep['bytes']:.1f}% of the distinct message bytes "
             f"({100 * r['index_bytes'] / st['bytes']:.1f}% of the newest store's); floor (`snapshots`, median of 3) {ms(r['floor_s'])} ms; "
             f"first search (fills the local cache) {ms(r['first_search_s'])} ms.", ""]
        if x:
            L += [f"fts-xapian whole-word ({XAPIAN['whole']}): {x['accounts']} of {x['of_accounts']} accounts indexed, the largest first"
                  + (f" (stopped after --dovecot-budget {self.args.dovecot_budget:.0f} s)" if x["accounts"] < x["of_accounts"] else " (all)")
                  + f": {x['messages']:,} messages, {x['bytes'] / 1e6:.1f} MB; `doveadm index` {x['index_s']:.2f} s, "
                  f"{x['messages'] / x['index_s']:,.0f} msg/s, {x['index_rss_mb']:.0f} MB peak RSS, index {x['index_bytes'] / 1e6:.2f} MB "
                  f"({100 * x['index_bytes'] / x['bytes']:.1f}% of their mail); Dovecot's own sync first {x['sync_s']:.2f} s. "
                  f"Queries on the largest account, {x['account']['address']} ({x['account']['messages']:,} messages), "
                  f"{len(x['latencies'])} of them translated; floor `doveadm mailbox status` {ms(x['floor_s'])} ms.", ""]
        L += ["| queries | p50 ms | p99 ms | p50 / p99 net of floor ms | peak RSS MB |", "|---|---:|---:|---:|---:|"]
        for name, label in (("all", "mailvault `--all-snapshots`, all accounts"), ("latest", "mailvault newest snapshot, all accounts")):
            s = r["scopes"][name]
            L.append(f"| {label}, a process each | {ms(s['p50_s'])} | {ms(s['p99_s'])} | {ms(s['p50_s'] - r['floor_s'])} / "
                     f"{ms(s['p99_s'] - r['floor_s'])} | {s['search_rss_mb']:.0f} |")
            L.append(f"| {label}, one process (`--queries`, {s['batch_wall_s']:.2f} s in all) | {ms(s['batch_p50_s'])} | "
                     f"{ms(s['batch_p99_s'])} | - | {s['batch_rss_mb']:.0f} |")
        if x:
            L.append(f"| fts-xapian whole-word, one account | {ms(x['p50_s'])} | {ms(x['p99_s'])} | {ms(x['p50_s'] - x['floor_s'])} / "
                     f"{ms(x['p99_s'] - x['floor_s'])} | {x['search_rss_mb']:.0f} |")
        L += ["", "| target (issue 27) | figure | met |", "|---|---:|---|"]

        def target(name, value, ok, fmt):
            L.append(f"| {name} | {fmt.format(value)} | {'yes' if ok else 'NO'} |")

        s = r["scopes"]["all"]
        if x:
            v = (rep["indexed"] / r["index_s"]) / (x["messages"] / x["index_s"])
            target("mailvault msg/s / fts-xapian whole-word msg/s >= 10", v, v >= 10, "{:.1f}x")
        v = 100 * r["index_bytes"] / rep["bytes"]
        target("index size <= 10% of the distinct message bytes", v, v <= 10, "{:.1f}%")
        target("query p50 <= 20 ms (--all-snapshots, one process)", s["batch_p50_s"] * 1e3, s["batch_p50_s"] <= 0.020, "{:.0f} ms")
        target("query p99 <= 100 ms (--all-snapshots, one process)", s["batch_p99_s"] * 1e3, s["batch_p99_s"] <= 0.100, "{:.0f} ms")
        target("query p50 <= 20 ms (--all-snapshots, a process each, net of the floor)", (s["p50_s"] - r["floor_s"]) * 1e3,
               s["p50_s"] - r["floor_s"] <= 0.020, "{:.0f} ms")
        target("search peak RSS <= 200 MB", max(s["search_rss_mb"], s["batch_rss_mb"]),
               max(s["search_rss_mb"], s["batch_rss_mb"]) <= 200, "{:.0f} MB")
        target("index peak RSS <= 500 MB", r["index_rss_mb"], r["index_rss_mb"] <= 500, "{:.0f} MB")
        v = r["backup_index_s"] / r["backup_s"] - 1
        target("`backup --index` adds <= 50% to the first full backup's time", 100 * v, v <= 0.5, "{:.0f}%")
        L.append(f"| (`index` of every snapshot after the backups, for reference: its time / the full backup's) | {r['index_s'] / r['backup_s']:.2f} | |")
        L += ["", "ms: a process each (in one process).", "", "| query | hits, all snapshots | ms | hits, newest | ms |" + (" fts-xapian hits, one account | ms |" if x else ""),
              "|---|---:|---:|---:|---:|" + ("---:|---:|" if x else "")]
        for q in (e["mailvault"] for e in r["queries"]):
            row = f"| `{q}` |" + "".join(f" {r['scopes'][n]['hits'][q]:,} | {ms(r['scopes'][n]['latencies'][q])} "
                                          f"({r['scopes'][n]['batch_latencies'][q] * 1e3:.1f}) |" for n, _ in SCOPES)
            if x:
                row += f" {x['hits'][q]:,} | {ms(x['latencies'][q])} |" if q in x["hits"] else " - | - |"
            L.append(row)
        empty = [q for q, h in r["scopes"]["all"]["hits"].items() if h == 0 and q != GEN_MISS]
        if empty:
            L += ["", f"**{len(empty)} queries find nothing** in this store (all but `{GEN_MISS}` should): "
                      + ", ".join(f"`{q}`" for q in empty)]
        return L + [""]

    def scaling(self, results):
        """Peak RSS of `index` and `search` across presets (the target: sub-linear)."""
        if len(results) < 2:
            return []
        L = ["## Scaling of peak RSS", "", "| preset | messages (newest) | contents indexed | `index` MB | `search --all-snapshots` MB | `search` newest MB |",
             "|---|---:|---:|---:|---:|---:|"]
        for r in results:
            L.append(f"| `{r['preset']}` | {r['stats']['messages']:,} | {r['report']['indexed']:,} | {r['index_rss_mb']:.0f} | "
                     f"{r['scopes']['all']['search_rss_mb']:.0f} | {r['scopes']['latest']['search_rss_mb']:.0f} |")
        first, last = results[0], results[-1]
        growth = last["report"]["indexed"] / max(first["report"]["indexed"], 1)
        L.append("")
        for name, get in (("`index`", lambda r: r["index_rss_mb"]), ("`search --all-snapshots`", lambda r: r["scopes"]["all"]["search_rss_mb"])):
            v = get(last) / max(get(first), 1e-9)
            L.append(f"{name}'s peak RSS grew {v:.2f}x for {growth:.1f}x the contents indexed: {'sub-linear' if v < growth else '**not** sub-linear'}.")
        return L + [""]


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
    ap.add_argument("--preset", default=None,
                    help="generated stores instead of the corpus: tiny, small, medium, large, huge; several comma-separated run in turn and add a peak-RSS scaling table")
    ap.add_argument("--snapshots", type=int, default=30, help="with --preset: snapshots of each store, a mutation before each but the first (default 30)")
    ap.add_argument("--dovecot-budget", type=float, default=300,
                    help="with --preset: seconds fts-xapian may spend syncing and indexing accounts, the largest first; the rest are left out, saying so (default 300)")
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
    if args.preset is not None:
        if args.smoke or args.corpus or args.xapian != ["whole"]:
            ap.error("--preset takes neither --smoke, --corpus nor --xapian (fts-xapian whole-word only)")
        args.preset = [p for p in args.preset.split(",") if p]
        if not args.preset or len(set(args.preset)) < len(args.preset):
            ap.error("--preset: give distinct presets, comma-separated")
        if args.snapshots < 1:
            ap.error("--snapshots must be at least 1")
        GenBench(args).main()
        return
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
