#!/usr/bin/env python3
"""The web UI under load (issue 28's targets): `mailvault serve` over one folder of N
messages (default 100,000), 20 concurrent clients for 60 s.

The folder is made from a corpus (default ../shared/corpora/spamassassin; --smoke:
testdata/spamassassin), its messages taken in turn, each made distinct by a header line of
its own (`X-Bench: N`) and given a Date of its own, so that no two are one content. Then
`init`, `backup --index`, and `serve` with an admin token. Timed, over HTTP/1.1 on
127.0.0.1, each request on a connection of its own (as a browser opening pages):

- the folder's first page, cold (the first request after `serve` started) and then warm;
- a later page of the folder (page N/100/2), cold and warm;
- a message page (a message of a random page);
- a search (one word, over the latest snapshot);
- then the load: 20 clients for 60 s (--smoke: 4 clients, 5 s), each looping over the
  routes folder page (random page), message page, message download, search: p50 and p99
  per route, errors (any answer not 200 fails the run), and the peak RSS of `serve`.

The targets: first page <= 100 ms, a later page <= 200 ms, a message <= 100 ms, search
within the search issue's latency + 50 ms, errors 0, peak RSS <= 300 MB.

    bench/web.py --bin-dir target/release                # the issue's figures, ~5 min
    bench/web.py --smoke --bin-dir target/debug          # CI: 2,000 messages, 5 s

Standard library only.
"""

import argparse
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from s3 import binaries, fresh_work, repo_env, timed  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench-admin-token-0123456789abcdef"
ACCOUNT = "user@bench.example"
WORD = "spamassassin"


def log(msg):
    print(f"webbench: {msg}", file=sys.stderr, flush=True)


def make_folder(corpus, maildir, n):
    """maildir/cur with n distinct messages made from the corpus' files, in turn."""
    files = sorted(p for p in Path(corpus).rglob("*") if p.is_file() and p.parent != Path(corpus))
    if not files:
        raise SystemExit(f"webbench: no messages under {corpus}")
    datas = [p.read_bytes() for p in files]
    for d in ("cur", "new", "tmp"):
        (maildir / d).mkdir(parents=True)
    t0 = 1_600_000_000
    total = 0
    for i in range(n):
        data = datas[i % len(datas)]
        date = time.strftime("%a, %d %b %Y %H:%M:%S +0000", time.gmtime(t0 + i * 60))
        head = f"X-Bench: {i}\nDate: {date}\n".encode()
        body = re.sub(rb"(?im)^date:.*\n", b"", data, count=1)
        p = maildir / "cur" / f"{i:07d}.bench:2,S"
        p.write_bytes(head + body)
        os.utime(p, (t0 + i * 60, t0 + i * 60))
        total += len(head) + len(body)
    return total


class Client:
    """Requests to `serve` with the admin's session cookie."""

    def __init__(self, port):
        self.port = port
        self.cookie = None

    def request(self, method, path, body=None, headers=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        h = dict(headers or {})
        if self.cookie:
            h["Cookie"] = self.cookie
        t0 = time.monotonic()
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        wall = time.monotonic() - t0
        c.close()
        return r.status, r.getheaders(), data, wall

    def login(self):
        body = json.dumps({"token": TOKEN})
        status, headers, data, _ = self.request("POST", "/api/v1/login", body, {"Content-Type": "application/json"})
        if status != 200:
            raise SystemExit(f"webbench: login failed: {status} {data[:200]!r}")
        cookie = next(v for k, v in headers if k.lower() == "set-cookie")
        self.cookie = cookie.split(";")[0]

    def get(self, path, want=200):
        status, _, data, wall = self.request("GET", path)
        if status != want:
            raise SystemExit(f"webbench: GET {path}: {status} {data[:200]!r}")
        return data, wall


def q(path, **params):
    from urllib.parse import urlencode
    return f"{path}?{urlencode(params)}"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def backed_up_folder(args, say):
    """A fresh work directory (`args.work`) with one account's INBOX of `args.messages`
    messages made from `args.corpus` (default ../shared/corpora/spamassassin), `init` and
    `backup --index` of it; (mailvault binary, work, logs, environment, the Maildir, its
    bytes). `say` logs."""
    corpus = args.corpus or str(REPO_ROOT.parent / "shared" / "corpora" / "spamassassin")
    mv, _ = binaries(args.bin_dir, args.smoke)
    work, logs = fresh_work(args.work)
    mail = work / "mail" / "bench.example" / "user" / "Maildir"
    say(f"making a folder of {args.messages} messages from {corpus}")
    size = make_folder(corpus, mail, args.messages)
    env = repo_env(work, work / "repo")
    for name, cmd in [("init", ["init"]), ("backup", ["backup", "--index", f"maildir:{work / 'mail'}"])]:
        rc, wall, _, _ = timed([mv, "--quiet", *cmd], env, logs / f"{name}.log")
        if rc != 0:
            raise SystemExit(f"{name} failed, see {logs / (name + '.log')}")
        say(f"{name}: {wall:.1f} s")
    return mv, work, logs, env, mail, size


def stop(proc):
    """Stops `serve` (SIGTERM, then SIGKILL after 30 s)."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def load(port, snap, pages, keys, clients, seconds):
    """clients threads for seconds, each looping over the routes; {route: [wall...]}."""
    times = {"folder page": [], "message page": [], "message download": [], "search": []}
    lock = threading.Lock()
    errors = []
    stop = time.monotonic() + seconds

    def worker(seed, cookie):
        rnd = random.Random(seed)
        c = Client(port)
        c.cookie = cookie
        place = dict(snapshot=snap, account=ACCOUNT, folder="INBOX")
        while time.monotonic() < stop:
            page = rnd.randint(1, pages)
            key = rnd.choice(keys)
            for route, path in [
                ("folder page", q("/folder", page=page, **place)),
                ("message page", q("/message", key=key, **place)),
                ("message download", q("/message/raw", key=key, **place)),
                ("search", q("/search", q=WORD)),
            ]:
                try:
                    status, _, _, wall = c.request("GET", path)
                except Exception as e:  # a refused or broken connection is an error too
                    status, wall = repr(e), 0
                with lock:
                    if status != 200:
                        errors.append(f"{route}: {status}")
                    else:
                        times[route].append(wall)

    main = Client(port)
    main.login()
    threads = [threading.Thread(target=worker, args=(i, main.cookie)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times, errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin-dir", help="directory of the mailvault binaries (else built)")
    ap.add_argument("--corpus", help="messages to make the folder from")
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--work", default="/tmp/mailvault-bench-web")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--smoke", action="store_true", help="2,000 messages, 4 clients, 5 s")
    args = ap.parse_args()
    if args.smoke:
        args.messages, args.clients, args.seconds = 2000, 4, 5
        args.corpus = args.corpus or str(REPO_ROOT / "testdata" / "spamassassin")
    mv, work, logs, env, mail, size = backed_up_folder(args, log)
    token = work / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    serve = subprocess.Popen([mv, "serve", "--listen", "127.0.0.1:0", "--admin-token-file", str(token)],
                             env=env, stdout=subprocess.PIPE, stderr=open(logs / "serve.log", "w"))
    try:
        line = serve.stdout.readline().decode()
        m = re.match(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            raise SystemExit(f"webbench: serve did not start: {line!r}, see {logs / 'serve.log'}")
        port = int(m.group(1))
        c = Client(port)
        c.login()
        snaps = json.loads(c.get("/api/v1/snapshots")[0])
        snap = snaps[0]["id"]
        place = dict(snapshot=snap, account=ACCOUNT, folder="INBOX")
        res = {"messages": args.messages, "bytes": size, "clients": args.clients, "seconds": args.seconds}
        _, res["first_page_cold_s"] = c.get(q("/folder", page=1, **place))
        _, res["first_page_warm_s"] = c.get(q("/folder", page=1, **place))
        first = json.loads(c.get(q("/api/v1/messages", page=1, **place))[0])
        pages = first["pages"]
        later = max(1, pages // 2)
        _, res["later_page_s"] = c.get(q("/folder", page=later, **place))
        items = json.loads(c.get(q("/api/v1/messages", page=later, **place))[0])["items"]
        keys = [m["key"] for m in items]
        _, res["message_s"] = c.get(q("/message", key=keys[0], **place))
        _, res["search_s"] = c.get(q("/search", q=WORD))
        log(f"load: {args.clients} clients for {args.seconds:.0f} s")
        times, errors = load(port, snap, pages, keys, args.clients, args.seconds)
        res["routes"] = {r: {"n": len(t), "p50_ms": pct(t, 50) * 1000, "p99_ms": pct(t, 99) * 1000}
                         for r, t in times.items()}
        res["errors"] = len(errors)
        res["serve_peak_rss_mb"] = peak_rss_mb(serve.pid)
    finally:
        stop(serve)
    report(res)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2))
    if errors:
        raise SystemExit(f"webbench: {len(errors)} request(s) failed, the first: {errors[0]}")
    if not args.smoke:
        shutil.rmtree(work, ignore_errors=True)


def report(r):
    ms = lambda s: f"{s * 1000:.0f} ms"  # noqa: E731
    print(f"\n## The web UI under load: {r['messages']:,} messages in one folder, "
          f"{r['clients']} clients for {r['seconds']:.0f} s\n")
    print("| step | time | target |")
    print("|---|---|---|")
    rows = [
        ("folder, first page, cold (first request)", r["first_page_cold_s"], 0.100),
        ("folder, first page, warm", r["first_page_warm_s"], 0.100),
        ("folder, a later page", r["later_page_s"], 0.200),
        ("a message page", r["message_s"], 0.100),
        ("a search", r["search_s"], None),
    ]
    for name, t, target in rows:
        mark = "" if target is None else (" ✓" if t <= target else " ✗")
        print(f"| {name} | {ms(t)} | {'' if target is None else ms(target)}{mark} |")
    print("\n| route under load | requests | p50 | p99 |")
    print("|---|---|---|---|")
    for route, x in r["routes"].items():
        print(f"| {route} | {x['n']} | {x['p50_ms']:.0f} ms | {x['p99_ms']:.0f} ms |")
    rss = r["serve_peak_rss_mb"]
    print(f"\nerrors: {r['errors']}; peak RSS of serve: {rss:.0f} MB (target <= 300 MB"
          f"{' ✓' if rss <= 300 else ' ✗'})")


if __name__ == "__main__":
    main()
