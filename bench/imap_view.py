#!/usr/bin/env python3
"""The IMAP view under load (issue 29's targets): `mailvault serve --imap` over one account
whose INBOX holds N messages (default 100,000), side by side with a throw-away Dovecot
serving the same Maildir.

The folder is made as bench/web.py makes it (a corpus' messages in turn, each made
distinct). Then `init`, `backup --index`, and `serve --imap` with an admin token. Timed on
127.0.0.1:

- **first sync**, as Thunderbird does it on a folder it has not seen: `UID FETCH 1:* (UID
  RFC822.SIZE FLAGS BODY.PEEK[HEADER.FIELDS (From To Cc Bcc Subject Date Message-ID
  Priority X-Priority References Newsgroups In-Reply-To Content-Type Reply-To)])`, once
  cold (the first after `serve` started) and then --rounds times warm, against the view
  and against Dovecot (messages/s; every answer counted, any other count fails the run);
- **mbsync pull** of the account (its own folders, not the backups' `Snapshots/` and
  `Deleted`) into an empty Maildir, from the view and from Dovecot, --rounds rounds in
  rotated order, medians (the target: the view >= 0.5x Dovecot's speed);
- **the soak**: --sessions sessions (default 50) for --seconds (default 60), each looping
  over mixed commands (LIST, STATUS, EXAMINE, NOOP, a FETCH of 50 messages' headers, a
  whole message, SEARCH by flag and date, SEARCH SUBJECT): p50 and p99 per command, errors
  (any answer not OK fails the run), and the peak RSS of `serve` during the soak (target
  <= 300 MB; the peaks of the first syncs and of the mbsync pulls are reported beside it).

    bench/imap_view.py --bin-dir target/release               # the issue's figures
    bench/imap_view.py --smoke --bin-dir target/debug         # CI: 2,000 messages, 8 sessions, 5 s

Needs dovecot and mbsync. Standard library only.
"""

import argparse
import json
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from imap_restore import MASTER, MASTER_PW, Dovecot  # noqa: E402
from web import backed_up_folder, peak_rss_mb, pct, stop  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-admin-token-0123456789abcdef"
ACCOUNT = "user@bench.example"
FIELDS = ("From To Cc Bcc Subject Date Message-ID Priority X-Priority References "
          "Newsgroups In-Reply-To Content-Type Reply-To")
FIRST_SYNC = f"UID FETCH 1:* (UID RFC822.SIZE FLAGS BODY.PEEK[HEADER.FIELDS ({FIELDS})])"


def log(msg):
    print(f"imapviewbench: {msg}", file=sys.stderr, flush=True)


class Imap:
    """A plain IMAP client over a socket: commands, their answers counted and skipped
    (literals read by their length), the tagged status returned."""

    def __init__(self, port, timeout=600):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.f = self.sock.makefile("rb", buffering=1 << 20)
        self.n = 0
        greeting = self.f.readline()
        if not greeting.startswith(b"* OK"):
            raise RuntimeError(f"no greeting: {greeting!r}")

    def cmd(self, text):
        """(status line, untagged answers, bytes read) of one command."""
        self.n += 1
        tag = f"b{self.n}".encode()
        self.sock.sendall(tag + b" " + text.encode() + b"\r\n")
        untagged = 0
        nbytes = 0
        while True:
            line = self.f.readline()
            if not line:
                raise RuntimeError(f"connection closed during {text!r}")
            nbytes += len(line)
            first = line
            while line.endswith(b"}\r\n"):
                m = re.search(rb"\{(\d+)\}\r\n$", line)
                if not m:
                    break
                n = int(m.group(1))
                nbytes += n
                if len(self.f.read(n)) != n:
                    raise RuntimeError("connection closed in a literal")
                line = self.f.readline()
                nbytes += len(line)
            if first.startswith(b"* "):
                untagged += 1
            elif first.startswith(tag + b" "):
                return line.decode(errors="replace").strip(), untagged, nbytes

    def ok(self, text):
        status, untagged, nbytes = self.cmd(text)
        if " OK" not in status[:8]:
            raise RuntimeError(f"{text!r}: {status}")
        return untagged, nbytes

    def close(self):
        try:
            self.cmd("LOGOUT")
        except (OSError, RuntimeError):
            pass
        self.sock.close()


def first_sync(port, user, password, n):
    """Seconds of the first-sync FETCH over a fresh session (login and EXAMINE not
    counted); fails unless it answered n messages."""
    c = Imap(port)
    c.ok(f'LOGIN "{user}" "{password}"')
    c.ok("EXAMINE INBOX")
    t = time.monotonic()
    got, nbytes = c.ok(FIRST_SYNC)
    secs = time.monotonic() - t
    c.close()
    if got != n:
        raise SystemExit(f"imapviewbench: the first sync answered {got} messages, not {n}")
    return secs, nbytes


def mbsync_rc(work, name, port, user, password, near):
    (work / f"{name}.pass").write_text(password)
    rc = work / f"{name}.mbsyncrc"
    rc.write_text(
        # Without an fsync per message, mbsync measures the servers more than the disk.
        f"FSync no\n\nIMAPAccount a\nHost 127.0.0.1\nPort {port}\nUser {user}\n"
        f"PassCmd \"cat {work / (name + '.pass')}\"\nSSLType None\nAuthMechs LOGIN\n\n"
        f"IMAPStore far\nAccount a\n\n"
        f"MaildirStore near\nPath {near}/\nInbox {near}/INBOX\nSubFolders Verbatim\n\n"
        f"Channel pull\nFar :far:\nNear :near:\nPatterns * !Snapshots* !Deleted\n"
        f"Create Near\nSync Pull\nSyncState *\n")
    return rc


def mbsync_pull(work, name, port, user, password, n):
    near = work / f"pulled-{name}"
    shutil.rmtree(near, ignore_errors=True)
    near.mkdir()
    rc = mbsync_rc(work, name, port, user, password, near)
    t = time.monotonic()
    p = subprocess.run(["mbsync", "-q", "-c", str(rc), "-a"], capture_output=True)
    secs = time.monotonic() - t
    if p.returncode != 0:
        raise SystemExit(f"imapviewbench: mbsync from {name} failed: {p.stderr.decode(errors='replace')}")
    got = sum(1 for d in ("cur", "new") for _ in (near / "INBOX" / d).iterdir())
    shutil.rmtree(near, ignore_errors=True)
    if got != n:
        raise SystemExit(f"imapviewbench: mbsync from {name} pulled {got} messages, not {n}")
    return secs


def soak(port, user, password, n, sessions, seconds):
    """sessions threads for seconds, each looping over mixed commands; ({command:
    [wall...]}, errors)."""
    times = {}
    lock = threading.Lock()
    errors = []
    stop = time.monotonic() + seconds
    day = time.strftime("%d-%b-%Y", time.gmtime(1_600_000_000 + n * 30))

    def commands(rnd):
        a = rnd.randint(1, max(1, n - 50))
        return [
            ("LIST", 'LIST "" "*"'),
            ("STATUS", "STATUS INBOX (MESSAGES UIDNEXT UIDVALIDITY UNSEEN)"),
            ("EXAMINE", "EXAMINE INBOX"),
            ("NOOP", "NOOP"),
            ("FETCH 50 headers", f"UID FETCH {a}:{a + 49} (UID RFC822.SIZE FLAGS BODY.PEEK[HEADER.FIELDS ({FIELDS})])"),
            ("FETCH message", f"UID FETCH {rnd.randint(1, n)} (BODY.PEEK[])"),
            ("SEARCH flag, date", f"UID SEARCH SEEN SINCE {day}"),
            ("SEARCH SUBJECT", "UID SEARCH SUBJECT spamassassin"),
        ]

    def worker(seed):
        rnd = random.Random(seed)
        try:
            c = Imap(port)
            c.ok(f'LOGIN "{user}" "{password}"')
            c.ok("EXAMINE INBOX")
        except (OSError, RuntimeError) as e:
            with lock:
                errors.append(f"session {seed}: {e}")
            return
        while time.monotonic() < stop:
            name, text = rnd.choice(commands(rnd))
            t = time.monotonic()
            try:
                status, _, _ = c.cmd(text)
            except (OSError, RuntimeError) as e:
                with lock:
                    errors.append(f"{name}: {e}")
                return
            wall = time.monotonic() - t
            with lock:
                times.setdefault(name, []).append(wall)
                if " OK" not in status[:8]:
                    errors.append(f"{name}: {status}")
        c.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times, errors


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def start_serve(mv, env, work, logs):
    token = work / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    serve = subprocess.Popen([mv, "serve", "--listen", "127.0.0.1:0", "--imap", "127.0.0.1:0",
                              "--admin-token-file", str(token)],
                             env=env, stdout=subprocess.PIPE, stderr=open(logs / "serve.log", "w"))
    ports = []
    for _ in range(2):
        line = serve.stdout.readline().decode()
        m = re.match(r"listening on (https?|imap)://127\.0\.0\.1:(\d+)", line)
        if not m:
            serve.kill()
            raise SystemExit(f"imapviewbench: serve did not start: {line!r}, see {logs / 'serve.log'}")
        ports.append((m.group(1), int(m.group(2))))
    return serve, dict(ports)["imap"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", help="directory of the mailvault binaries (else built)")
    ap.add_argument("--corpus", help="messages to make the folder from")
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", default="/tmp/mailvault-bench-imapview")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--no-mbsync", action="store_true", help="leave out the mbsync pulls")
    ap.add_argument("--smoke", action="store_true", help="2,000 messages, 8 sessions, 5 s, one round")
    args = ap.parse_args()
    if args.smoke:
        args.messages, args.sessions, args.seconds, args.rounds = 2000, 8, 5, 1
        args.corpus = args.corpus or str(REPO_ROOT / "testdata" / "spamassassin")
    mv, work, logs, env, mail, size = backed_up_folder(args, log)
    dov = Dovecot(None)
    dest = dov.root / "mail" / "bench.example" / "user" / "Maildir"
    shutil.copytree(mail, dest)
    subprocess.run(["chown", "-R", "--reference", str(dov.root / "mail"), str(dov.root / "mail")], check=False)
    dov_user = f"{ACCOUNT}*{MASTER}"
    view_user = f"{ACCOUNT}*admin"
    serve, port = start_serve(mv, env, work, logs)
    res = {"messages": args.messages, "bytes": size, "sessions": args.sessions, "seconds": args.seconds}
    errors = []
    try:
        n = args.messages
        res["view_first_sync_cold_s"], res["first_sync_bytes"] = first_sync(port, view_user, TOKEN, n)
        # Dovecot builds its index on its first sight of the folder: not what is compared.
        first_sync(dov.port, dov_user, MASTER_PW, n)
        view, dovecot = [], []
        for r in range(args.rounds):
            order = [("view", view), ("dovecot", dovecot)]
            for name, out in (order if r % 2 == 0 else order[::-1]):
                out.append(first_sync(port, view_user, TOKEN, n)[0] if name == "view"
                           else first_sync(dov.port, dov_user, MASTER_PW, n)[0])
        res["view_first_sync_warm_s"] = view
        res["dovecot_first_sync_warm_s"] = dovecot
        res["serve_peak_rss_first_syncs_mb"] = peak_rss_mb(serve.pid)
        Path(f"/proc/{serve.pid}/clear_refs").write_text("5")
        log(f"first sync: view {n / statistics.median(view):,.0f} msgs/s, "
            f"dovecot {n / statistics.median(dovecot):,.0f} msgs/s")
        if not args.no_mbsync:
            view, dovecot = [], []
            for r in range(args.rounds):
                order = [("view", view), ("dovecot", dovecot)]
                for name, out in (order if r % 2 == 0 else order[::-1]):
                    out.append(mbsync_pull(work, name, port, view_user, TOKEN, n) if name == "view"
                               else mbsync_pull(work, name, dov.port, dov_user, MASTER_PW, n))
            res["view_mbsync_s"], res["dovecot_mbsync_s"] = view, dovecot
            res["serve_peak_rss_mbsync_mb"] = peak_rss_mb(serve.pid)
            log(f"mbsync: view {statistics.median(view):.2f} s, dovecot {statistics.median(dovecot):.2f} s")
        res["serve_rss_before_soak_mb"] = rss_mb(serve.pid)
        # The soak's own peak: the kernel's high-water mark starts again from now.
        Path(f"/proc/{serve.pid}/clear_refs").write_text("5")
        log(f"soak: {args.sessions} sessions for {args.seconds:.0f} s")
        times, errors = soak(port, view_user, TOKEN, n, args.sessions, args.seconds)
        res["commands"] = {c: {"n": len(t), "p50_ms": pct(t, 50) * 1000, "p99_ms": pct(t, 99) * 1000}
                           for c, t in sorted(times.items())}
        res["errors"] = len(errors)
        res["serve_peak_rss_mb"] = peak_rss_mb(serve.pid)
    finally:
        stop(serve)
        dov.stop()
    report(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    if errors:
        raise SystemExit(f"imapviewbench: {len(errors)} command(s) failed, the first: {errors[0]}")
    if not args.smoke:
        shutil.rmtree(work, ignore_errors=True)


def report(r):
    n = r["messages"]
    med = statistics.median
    print(f"\n## The IMAP view: {n:,} messages in one folder\n")
    print("| | the view | Dovecot | view / Dovecot (speed) | target |")
    print("|---|---:|---:|---:|---|")
    cold = n / r["view_first_sync_cold_s"]
    print(f"| first sync, cold (msgs/s) | {cold:,.0f} | | | |")
    v, d = n / med(r["view_first_sync_warm_s"]), n / med(r["dovecot_first_sync_warm_s"])
    print(f"| first sync, warm (msgs/s; rounds {', '.join(f'{n / s:,.0f}' for s in r['view_first_sync_warm_s'])}) "
          f"| {v:,.0f} | {d:,.0f} | {v / d:.2f} | >= 20,000 msgs/s{' ✓' if v >= 20_000 else ' ✗'} |")
    if "view_mbsync_s" in r:
        v, d = med(r["view_mbsync_s"]), med(r["dovecot_mbsync_s"])
        print(f"| mbsync pull (s; rounds {', '.join(f'{s:.2f}' for s in r['view_mbsync_s'])} / "
              f"{', '.join(f'{s:.2f}' for s in r['dovecot_mbsync_s'])}) | {v:.2f} | {d:.2f} | {d / v:.2f} | "
              f">= 0.5{' ✓' if d / v >= 0.5 else ' ✗'} |")
    print(f"\n{r['sessions']} sessions for {r['seconds']:.0f} s:\n")
    print("| command | answers | p50 | p99 |")
    print("|---|---:|---:|---:|")
    for c, x in r["commands"].items():
        print(f"| {c} | {x['n']} | {x['p50_ms']:.1f} ms | {x['p99_ms']:.1f} ms |")
    rss = r["serve_peak_rss_mb"]
    mbsync = f", the mbsync pulls {r['serve_peak_rss_mbsync_mb']:.0f} MB" if "serve_peak_rss_mbsync_mb" in r else ""
    print(f"\nerrors: {r['errors']}; peak RSS of serve over the first syncs {r['serve_peak_rss_first_syncs_mb']:.0f} MB"
          f"{mbsync}; RSS before the soak {r['serve_rss_before_soak_mb']:.0f} MB, "
          f"peak during the soak {rss:.0f} MB (target <= 300 MB"
          f"{' ✓' if rss <= 300 else ' ✗'})")


if __name__ == "__main__":
    main()
