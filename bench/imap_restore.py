#!/usr/bin/env python3
"""IMAP restore benchmark: `mailvault restore --target imap://` against mbsync (Debian
`isync`) pushing the same Maildirs, and against the server's own ceiling (`imap-ceiling`:
pre-read messages, MULTIAPPEND + LITERAL+, 4 connections), each into a fresh local
Dovecot (mail_fsync = never), side by side in one run: --repeat rounds (default 3), every
tool once per round, the order rotated from round to round, medians reported. A run after
which the server does not hold exactly the store's messages fails the benchmark (exit 1).

    bench/imap_restore.py [--preset medium|small|...] [--smoke] [--work DIR] [--out bench/IMAP.md]
                          [--repeat N] [--dovecot-dir /dev/shm] [--accounts N] [--connections N]
                          [--no-mbsync] [--split-cores] [--bin-dir DIR]

Needs release builds in $CARGO_TARGET_DIR (default target/): mailvault, mailvault-corpus
and imap-ceiling (`cargo build --release -p mailvault -p mailvault-corpus &&
cargo build --release -p mailvault-imap --features testing --bin imap-ceiling`), dovecot
and mbsync. `--smoke` runs the tiny preset in seconds.
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MASTER, MASTER_PW, USER_PW = "admin", "adminpass", "secret"


def log(msg):
    print(f"[imap-bench] {msg}", file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Dovecot:
    """A throw-away Dovecot like mailvault_imap::testing's, with mail_fsync = never."""

    def __init__(self, parent, cpus=None, extra_conf=""):
        # Below the system temp dir: the work dir may be private (0700) and Dovecot
        # runs its mail processes as another user.
        self.root = Path(tempfile.mkdtemp(prefix="mv-bench-dovecot-", dir=parent or None))
        os.chmod(self.root, 0o755)
        for d in ["run", "state", "mail"]:
            (self.root / d).mkdir()
        root_user = os.geteuid() == 0
        if root_user:
            uid = gid = 65534
            os.chown(self.root / "mail", uid, gid)
            internal, login = "dovecot", "dovenull"
        else:
            uid, gid = os.geteuid(), os.getegid()
            import pwd

            internal = login = pwd.getpwuid(uid).pw_name
        self.port = free_port()
        (self.root / "master-users").write_text(f"{MASTER}:{{PLAIN}}{MASTER_PW}\n")
        r = self.root
        conf = f"""base_dir = {r}/run
state_dir = {r}/state
instance_name = mvbench-{self.port}
protocols = imap
listen = 127.0.0.1
log_path = {r}/dovecot.log
info_log_path = {r}/dovecot.log
disable_plaintext_auth = no
auth_mechanisms = plain login
auth_master_user_separator = *
mail_location = maildir:{r}/mail/%d/%n/Maildir
mail_uid = {uid}
mail_gid = {gid}
first_valid_uid = 1
first_valid_gid = 1
mail_fsync = never
maildir_very_dirty_syncs = yes
imap_max_line_length = 64M
mail_max_userip_connections = 1000
default_internal_user = {internal}
default_login_user = {login}
default_vsz_limit = 1G
ssl = no
mail_plugins =
passdb {{
  driver = passwd-file
  args = {r}/master-users
  master = yes
  pass = yes
}}
passdb {{
  driver = static
  args = password={USER_PW}
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={r}/mail/%d/%n
}}
namespace inbox {{
  inbox = yes
  separator = /
  mailbox Drafts {{
    special_use = \\Drafts
  }}
  mailbox Sent {{
    special_use = \\Sent
  }}
  mailbox Trash {{
    special_use = \\Trash
  }}
  mailbox Junk {{
    special_use = \\Junk
  }}
  mailbox Archive {{
    special_use = \\Archive
  }}
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.port}
  }}
  inet_listener imaps {{
    port = 0
  }}
{"" if root_user else "  chroot ="}
}}
{extra_conf}
"""
        (r / "dovecot.conf").write_text(conf)
        self.proc = subprocess.Popen(
            taskset(cpus) + ["dovecot", "-F", "-c", str(r / "dovecot.conf")],
            stdout=open(r / "stdout.log", "w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.time() + 15
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"* OK"):
                        break
            except OSError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"dovecot did not start:\n{(r / 'dovecot.log').read_text() if (r / 'dovecot.log').exists() else ''}")
            time.sleep(0.05)
        # The auth service may come up after the greeting: wait for a master login.
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
                    s.recv(1024)
                    s.sendall(f"a LOGIN probe@x*{MASTER} {MASTER_PW}\r\n".encode())
                    buf = b""
                    while b"a " not in buf:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        buf += chunk
                    if b"a OK" in buf:
                        break
            except OSError:
                pass
            if time.time() > deadline + 15:
                raise SystemExit("dovecot authentication did not come up")
            time.sleep(0.1)
        shutil.rmtree(self.root / "mail" / "x", ignore_errors=True)

    def url(self):
        return f"imap://127.0.0.1:{self.port}"

    def count(self):
        n = 0
        for dirpath, dirs, files in os.walk(self.root / "mail"):
            if os.path.basename(dirpath) in ("cur", "new"):
                n += len(files)
        return n

    def cpu(self):
        """CPU seconds of the Dovecot master and its reaped children (imap, imap-login...)."""
        time.sleep(0.3)  # let the last imap processes exit and be reaped
        f = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


def accounts_of(src):
    out = []
    for d in sorted(Path(src).iterdir()):
        for u in sorted(d.iterdir()):
            if (u / "Maildir").is_dir():
                out.append((f"{u.name}@{d.name}", u / "Maildir"))
    return out


def taskset(cpus):
    """The command prefix that runs on `cpus` only (e.g. "0"), or nothing."""
    return ["taskset", "-c", cpus] if cpus else []


def steal_secs():
    """CPU time the hypervisor gave to others so far (all CPUs; /proc/stat's steal)."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def timed(cmd, env=None, **kw):
    import resource

    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    s0 = steal_secs()
    t = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)
    secs = time.monotonic() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p.user, p.sys = r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime
    p.cpu = p.user + p.sys
    # Steal during the command: the VM's cores were someone else's for this long.
    p.steal = steal_secs() - s0
    if p.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p, secs


def mbsync_config(work, dov, acct, maildir, idx):
    state = work / "mbsync-state" / str(idx)
    # A state left by an earlier run (same --work) would make mbsync think the fresh
    # Dovecot already has everything.
    shutil.rmtree(state, ignore_errors=True)
    state.mkdir(parents=True, exist_ok=True)
    conf = work / f"mbsync-{idx}.rc"
    conf.write_text(
        f"""IMAPAccount a
Host 127.0.0.1
Port {dov.port}
User {acct}*{MASTER}
Pass {MASTER_PW}
SSLType None
AuthMechs LOGIN

IMAPStore far
Account a

MaildirStore near
Inbox {maildir}
SubFolders Maildir++

Channel c
Far :far:
Near :near:
Patterns *
Create Far
Sync Push
Expunge None
CopyArrivalDate yes
SyncState {state}/
"""
    )
    return conf


def run_mbsync(work, src, parallel, dov, prefix=()):
    # mbsync renames near files (adds UIDs): give it a hard-linked copy of the store.
    copy = work / f"mbsync-src-{parallel}"
    shutil.rmtree(copy, ignore_errors=True)
    subprocess.run(["cp", "-al", str(src), str(copy)], check=True)
    accts = accounts_of(copy)
    confs = [mbsync_config(work, dov, a, m, f"{parallel}-{i}") for i, (a, m) in enumerate(accts)]
    t = time.monotonic()
    running = []
    for c in confs:
        while len(running) >= parallel:
            for p in running:
                if p.poll() is not None:
                    running.remove(p)
                    break
            else:
                time.sleep(0.005)
        running.append(subprocess.Popen(list(prefix) + ["mbsync", "-q", "-c", str(c), "-a"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for p in running:
        p.wait()
    secs = time.monotonic() - t
    shutil.rmtree(copy, ignore_errors=True)
    return secs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="medium")
    ap.add_argument("--smoke", action="store_true", help="tiny preset, seconds")
    ap.add_argument("--work", default=None)
    ap.add_argument("--dovecot-dir", default=None, help="parent of the Dovecot mail dirs (default: the system temp dir; /dev/shm for tmpfs)")
    ap.add_argument("--out", default=None, help="write the figures here (default bench/IMAP.md, not for --smoke)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds of runs (default 3, 1 with --smoke): each round runs the ceiling, mailvault and mbsync "
                         "(1 and 4 accounts at a time) once, in an order rotated from round to round; the figures are medians")
    ap.add_argument("--connections", type=int, default=None, help="mailvault --connections (at most per account; default: mailvault's)")
    ap.add_argument("--accounts", type=int, default=None, help="mailvault --accounts (in parallel; default: mailvault's)")
    ap.add_argument("--split-cores", action="store_true",
                    help="Dovecot on core 0, every client on core 1: the server with a core of its own, as on a separate machine")
    ap.add_argument("--base-bin-dir", default=None,
                    help="a second build of mailvault (e.g. the previous main's target/release) whose restore runs beside this one, for before/after ratios")
    ap.add_argument("--bin-dir", default=None, help="where mailvault, mailvault-corpus and imap-ceiling are (default $CARGO_TARGET_DIR/release or target/release)")
    ap.add_argument("--no-mbsync", action="store_true", help="skip the mbsync runs (day-to-day work on the ceiling ratio)")
    a = ap.parse_args()
    if a.repeat is None:
        a.repeat = 1 if a.smoke else 3
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    preset = "tiny" if a.smoke else a.preset
    repo_root = Path(__file__).resolve().parent.parent
    bins = Path(a.bin_dir) if a.bin_dir else Path(os.environ.get("CARGO_TARGET_DIR", repo_root / "target")) / "release"
    mv, corpus, ceiling = bins / "mailvault", bins / "mailvault-corpus", bins / "imap-ceiling"
    for b in (mv, corpus, ceiling):
        if not b.exists():
            raise SystemExit(f"missing {b}: build the release binaries first (see --help)")
    work = Path(a.work or tempfile.mkdtemp(prefix="mv-imap-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    src = work / "src"
    if not src.exists():
        log(f"generating preset {preset}")
        subprocess.run([str(corpus), "generate", "--preset", preset, str(src)], check=True, stdout=subprocess.DEVNULL)
    n_msgs = sum(
        len(os.listdir(os.path.join(dp, s)))
        for dp, dirs, _ in os.walk(src)
        for s in ("cur", "new")
        if s in dirs
    )
    n_accts = len(accounts_of(src))
    (work / "pass").write_text("bench\n")
    (work / "imap-pass").write_text(MASTER_PW + "\n")
    env = dict(os.environ, MAILVAULT_REPOSITORY=str(work / "repo"), MAILVAULT_PASSWORD_FILE=str(work / "pass"),
               XDG_CACHE_HOME=str(work / "cache"), MAILVAULT_STATE_DIR=str(work / "state"))
    if not (work / "repo").exists():
        log("backing up the store")
        subprocess.run([str(mv), "init"], env=env, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([str(mv), "backup", f"maildir:{src}", "-q"], env=env, check=True, stdout=subprocess.DEVNULL)
    rows = []

    def row(tool, secs, count, extra=""):
        rows.append((tool, secs, count, count / secs if secs else 0.0, extra))
        log(f"{tool}: {count} msgs in {secs:.2f} s = {count / secs:.0f} msgs/s {extra}")

    # With --split-cores the server and the client no longer take CPU from each other.
    server_cpus, client = ("0", taskset("1")) if a.split_cores else (None, [])
    flags = []
    if a.connections is not None:
        flags += ["--connections", str(a.connections)]
    if a.accounts is not None:
        flags += ["--accounts", str(a.accounts)]

    def ceiling_run():
        dov = Dovecot(a.dovecot_dir, server_cpus)
        try:
            p, _ = timed(client + [str(ceiling), "--maildir", str(src), "--url", dov.url(), "--master", MASTER,
                          "--password", MASTER_PW, "--connections", "4"])
            m = re.search(r"appended (\d+) messages .* in ([\d.]+) s: (\d+) msgs/s", p.stdout)
            if not m:
                raise SystemExit(f"imap-ceiling said:\n{p.stdout}\n{p.stderr}")
            got = dov.count()
            if got != n_msgs:
                failures.append(f"imap-ceiling put {got} of {n_msgs} messages on the server")
            row("imap-ceiling (4 conns, pre-read, load only)", float(m.group(2)), int(m.group(1)),
                f"[server CPU {dov.cpu():.2f} s, provisioning and load; steal {p.steal:.2f} s over the whole command]")
            return float(m.group(3))
        finally:
            dov.stop()

    failures = []

    def mailvault_run(mv=mv, label="mailvault"):
        # The whole command by the wall clock.
        dov = Dovecot(a.dovecot_dir, server_cpus)
        try:
            shutil.rmtree(work / "cache", ignore_errors=True)
            p, secs = timed(client + [str(mv), "restore", "latest", "--target", dov.url(), "--imap-master-user", MASTER,
                             "--imap-password-file", str(work / "imap-pass"), "--json", "-q"] + flags, env=env)
            rep = json.loads(p.stdout)
            got = dov.count()
            if got != n_msgs:
                failures.append(f"{label} put {got} of {n_msgs} messages on the server")
            phases = ", ".join(f"{ph['name']} {ph['items']} in {ph['secs']:.2f} s" for ph in rep["phases"])
            row(f"{label} restore ({' '.join(flags) or 'default flags'})", secs, rep["items_appended"],
                f"[{phases}; failed {rep['items_failed']}; client CPU {p.cpu:.2f} s (user {p.user:.2f}, sys {p.sys:.2f}); server CPU {dov.cpu():.2f} s; steal {p.steal:.2f} s]")
            return rep["items_appended"] / secs
        finally:
            dov.stop()

    def mbsync_run(par):
        # One account at a time, or `par` in parallel; the whole run by the wall clock.
        dov = Dovecot(a.dovecot_dir, server_cpus)
        try:
            secs = run_mbsync(work, src, par, dov, client)
            got = dov.count()
            if got != n_msgs:
                failures.append(f"mbsync ({par} at a time) put {got} of {n_msgs} messages on the server")
            row(f"mbsync ({par} account{'s' if par > 1 else ''} at a time)", secs, got, f"[server CPU {dov.cpu():.2f} s]")
            return got / secs
        finally:
            dov.stop()

    # The server's ceiling, mailvault and mbsync, --repeat rounds, each round in an order
    # rotated by one from the last (no tool always first on a fresh machine state, or always
    # right after the same neighbour): the machine is shared, so the figures are medians, and
    # the ceiling ratio is taken between runs of the same round.
    jobs = [("ceiling", ceiling_run), ("mailvault", mailvault_run)]
    if a.base_bin_dir:
        base = Path(a.base_bin_dir) / "mailvault"
        jobs.append(("mailvault-base", lambda: mailvault_run(base, "mailvault-base")))
    if not a.no_mbsync:
        jobs += [("mbsync-1", lambda: mbsync_run(1)), ("mbsync-4", lambda: mbsync_run(4))]
    rates = {name: [] for name, _ in jobs}
    ratios = []
    for i in range(a.repeat):
        k = i % len(jobs)
        got = {}
        for name, fn in jobs[k:] + jobs[:k]:
            got[name] = fn()
            rates[name].append(got[name])
        ratios.append(got["mailvault"] / got["ceiling"])
    med = {name: statistics.median(r) for name, r in rates.items()}
    ratio_ceiling = statistics.median(ratios)
    mv_rate = med["mailvault"]
    best_mbsync = max((med[n] for n in ("mbsync-1", "mbsync-4") if n in med), default=0.0)
    ratio_mbsync = mv_rate / best_mbsync if best_mbsync else 0

    cmd = " ".join(["bench/imap_restore.py"] + sys.argv[1:])
    split = "; Dovecot on core 0, clients on core 1" if a.split_cores else ""
    lines = [
        f"Command: `{cmd}` (preset {preset}: {n_msgs} messages, {n_accts} accounts; {os.cpu_count()} cores{split}; "
        f"{time.strftime('%Y-%m-%d')})",
        "",
        "| tool | wall s | messages | msgs/s | notes |",
        "|---|---|---|---|---|",
    ]
    for tool, secs, count, rate, extra in rows:
        lines.append(f"| {tool} | {secs:.2f} | {count} | {rate:.0f} | {extra} |")
    names = {"ceiling": "imap-ceiling", "mailvault": "mailvault restore", "mailvault-base": "mailvault-base restore", "mbsync-1": "mbsync (1 account at a time)",
             "mbsync-4": "mbsync (4 accounts at a time)"}
    lines += ["", f"Medians of {a.repeat} run{'s' if a.repeat > 1 else ''} each (rounds in rotated order): "
              + "; ".join(f"{names[n]} {med[n]:.0f} msgs/s" for n in rates) + "."]
    lines += ["", f"mailvault / ceiling: **{ratio_ceiling:.2f}** (target >= 0.85; median of the runs side by side: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}); "
              + (f"mailvault (median {mv_rate:.0f} msgs/s) / best mbsync: **{ratio_mbsync:.2f}x** (target >= 2x)"
               if best_mbsync else f"mailvault median {mv_rate:.0f} msgs/s (mbsync not run)"), ""]
    if "mailvault-base" in med:
        lines += [f"mailvault / mailvault-base ({a.base_bin_dir}): **{mv_rate / med['mailvault-base']:.2f}** (msgs/s, medians)", ""]
    text = "\n".join(lines)
    print(text)
    if failures:
        # A run that lost or added messages makes every figure above meaningless: not kept.
        for f in failures:
            log(f"FAILED: {f}")
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
        sys.exit(1)
    if not a.smoke:
        out = Path(a.out) if a.out else repo_root / "bench" / "IMAP.md"
        head = "# IMAP restore benchmark\n\n" if not out.exists() else ""
        with open(out, "a") as f:
            f.write(head + f"\n## {preset}\n\n" + text + "\n")
        log(f"figures appended to {out}")
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
