#!/usr/bin/env python3
"""mailvault against restic on S3-compatible object storage (a local MinIO), in one run:
full backup, incremental with nothing changed, incremental after a day of mail (the
corpus tool's mutation), full restore. For each: wall time, requests by verb, bytes up and
down, peak RSS; at the end, the objects each repository holds.

    bench/s3.py                    # preset large (100k messages), release build
    bench/s3.py --preset small     # 10k messages
    bench/s3.py --smoke            # CI: preset tiny, checks everything runs and restores identically

Requests are counted by MinIO itself (`minio_bucket_requests_total` by API, per bucket, with
MINIO_PROMETHEUS_AUTH_TYPE=public; MinIO refreshes them about every 10 s, so the script
waits before reading), the same way for both tools; mailvault's own count (its `--json`
report) is shown beside it. Objects stored are counted in MinIO's data directory (one
`xl.meta` per object). Each tool has its own bucket. Standard library only.
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import compare_manifests, manifest  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
USER, SECRET = "mvbench", "mvbench-secret-key"
PASSWORD = "bench-password-not-secret"
SCENARIOS = [
    ("full", "Full backup"),
    ("unchanged", "Incremental, nothing changed"),
    ("incr", "Incremental after the mutation"),
    ("restore", "Full restore"),
    ("prune", "forget --keep-last 1 --prune"),
]
TARGETS = {
    "full": "mailvault <= 1/2 of restic's wall time",
    "incr": "mailvault <= 1/5 of restic's wall time, and fewer requests",
    "unchanged": "mailvault <= 10 requests (restic: 13)",
    "restore": "mailvault <= 1/2 of restic's wall time, and fewer GETs",
    "prune": "none yet; mailvault-lock (a bucket with Object Lock, `init --lock-days 1`) shows what asking and extending retentions costs",
}
# MinIO API names -> verbs.
VERBS = {
    "getobject": "GET", "headobject": "HEAD", "putobject": "PUT", "listobjectsv2": "LIST",
    "listobjectsv1": "LIST", "listobjects": "LIST", "deleteobject": "DELETE",
    "deletemultipleobjects": "DELETE", "headbucket": "HEAD", "getbucketlocation": "GET",
}


def verb_of(api):
    """The HTTP verb of a MinIO API name (Object Lock's calls by their prefix)."""
    a = api.lower()
    if a in VERBS:
        return VERBS[a]
    for prefix, verb in (("listobjectversions", "LIST"), ("get", "GET"), ("put", "PUT"),
                         ("head", "HEAD"), ("delete", "DELETE"), ("list", "LIST")):
        if a.startswith(prefix):
            return verb
    return "other:" + api


def log(msg):
    print(f"[s3bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_minio():
    for c in [os.environ.get("MAILVAULT_MINIO"), shutil.which("minio"), str(Path.home() / "go/bin/minio"), "/root/go/bin/minio"]:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    raise SystemExit("s3bench: no minio binary: run scripts/setup.sh (or set MAILVAULT_MINIO)")


class MinIO:
    def __init__(self, work):
        self.data = work / "minio"
        if self.data.exists():
            shutil.rmtree(self.data)
        self.data.mkdir(parents=True)
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, MINIO_ROOT_USER=USER, MINIO_ROOT_PASSWORD=SECRET, MINIO_BROWSER="off",
                   MINIO_PROMETHEUS_AUTH_TYPE="public")
        self.proc = subprocess.Popen([find_minio(), "server", str(self.data), "--address", f"127.0.0.1:{self.port}", "--quiet"],
                                     env=env, stdout=subprocess.DEVNULL, stderr=open(work / "minio.log", "w"))
        for _ in range(200):
            try:
                urllib.request.urlopen(f"{self.endpoint}/minio/health/live", timeout=1)
                return
            except OSError:
                time.sleep(0.1)
        raise SystemExit("s3bench: MinIO did not start (see minio.log)")

    def stop(self):
        self.proc.terminate()
        self.proc.wait()

    def metrics(self):
        """{bucket: {verb: n, 'up': bytes, 'down': bytes}} from MinIO's bucket metrics."""
        text = urllib.request.urlopen(f"{self.endpoint}/minio/v2/metrics/bucket", timeout=10).read().decode()
        out = {}
        for line in text.splitlines():
            m = re.match(r'^(minio_bucket_requests_total|minio_bucket_traffic_received_bytes|minio_bucket_traffic_sent_bytes)\{([^}]*)\} ([0-9.e+]+)$', line)
            if not m:
                continue
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            b = out.setdefault(labels.get("bucket", "?"), {})
            v = float(m.group(3))
            if m.group(1) == "minio_bucket_requests_total":
                verb = verb_of(labels.get("api", ""))
                b[verb] = b.get(verb, 0) + v
            else:
                key = "up" if m.group(1).endswith("received_bytes") else "down"
                b[key] = b.get(key, 0) + v
        return out

    def objects(self, bucket):
        root = self.data / bucket
        return sum(1 for _ in root.rglob("xl.meta")) if root.exists() else 0

    def stored_bytes(self, bucket):
        root = self.data / bucket
        return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def timed(cmd, env, logf):
    """Runs cmd; returns (rc, wall seconds, peak RSS in MB, stdout)."""
    with open(logf, "w") as err:
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=err)
        out = p.stdout.read()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
    rc = os.waitstatus_to_exitcode(status)
    return rc, wall, ru.ru_maxrss / 1024, out.decode(errors="replace")


def fresh_work(path):
    """An emptied work directory holding the repositories' password file and `logs/`;
    (work, logs)."""
    work = Path(path).resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / "password").write_text(PASSWORD)
    (work / "logs").mkdir()
    return work, work / "logs"


def repo_env(work, repo):
    """The environment of a mailvault run on local repository `repo` of a `fresh_work`
    directory: its password file, and a cache and state directory of its own."""
    e = dict(os.environ)
    e["MAILVAULT_REPOSITORY"] = str(repo)
    e["MAILVAULT_PASSWORD_FILE"] = str(work / "password")
    e["XDG_CACHE_HOME"] = str(work / "cache" / repo.name)
    e["MAILVAULT_STATE_DIR"] = str(work / "state" / repo.name)
    return e


def binaries(bin_dir, smoke):
    """The mailvault and mailvault-corpus binaries: those in `bin_dir`, else built (a debug
    build for a smoke run, release otherwise)."""
    profile = "dev" if smoke else "release"
    if bin_dir:
        bins = Path(bin_dir).resolve()
    else:
        subprocess.run(["cargo", "build", "--profile", profile, "-p", "mailvault", "-p", "mailvault-corpus"],
                       cwd=REPO_ROOT, check=True)
        bins = REPO_ROOT / "target" / ("debug" if profile == "dev" else profile)
    return str(bins / "mailvault"), str(bins / "mailvault-corpus")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="large")
    ap.add_argument("--smoke", action="store_true", help="preset tiny, debug build, short waits")
    ap.add_argument("--work", default=None, help="work directory (default target/s3bench)")
    ap.add_argument("--bin-dir", default=None, help="directory with mailvault and mailvault-corpus (default: build release)")
    ap.add_argument("--out", default=None, help="markdown report (default WORK/report.md)")
    ap.add_argument("--tools", default="mailvault,mailvault-lock,restic")
    ap.add_argument("--base-bin-dir", default=None,
                    help="a second build of mailvault (e.g. the previous main's target/release), run beside this one as the tool mailvault-base (its own bucket), for before/after request counts and times")
    ap.add_argument("--wait", type=float, default=12.0, help="seconds to wait for MinIO's metrics")
    ap.add_argument("--keep", action="store_true", help="keep the corpus, the repositories and MinIO's data")
    args = ap.parse_args()
    if args.smoke:
        args.preset, args.wait = "tiny", 11.0
    work = Path(args.work or REPO_ROOT / "target" / "s3bench").resolve()
    work.mkdir(parents=True, exist_ok=True)
    mv, corpus = binaries(args.bin_dir, args.smoke)
    tools = [t for t in args.tools.split(",") if t]
    bins = {"mailvault": mv, "mailvault-lock": mv}
    if args.base_bin_dir:
        bins["mailvault-base"] = str(Path(args.base_bin_dir).resolve() / "mailvault")
        tools.insert(tools.index("mailvault") + 1 if "mailvault" in tools else 0, "mailvault-base")
    if "restic" in tools and not shutil.which("restic"):
        log("restic missing: skipped")
        tools.remove("restic")

    src = work / "vmail"
    if src.exists():
        shutil.rmtree(src)
    log(f"generating preset {args.preset}")
    gen = json.loads(subprocess.run([corpus, "generate", "--preset", args.preset, "--json", str(src)], capture_output=True, text=True, check=True).stdout)
    (work / "password").write_text(PASSWORD)
    minio = MinIO(work)
    try:
        results = run_all(args, work, minio, src, bins, corpus, tools)
        for t in tools:
            b = bucket_of(t)
            results.setdefault("objects", {})[t] = minio.objects(b)
            results.setdefault("stored", {})[t] = minio.stored_bytes(b)
    finally:
        minio.stop()
    report = render(args, gen, tools, results)
    out = Path(args.out) if args.out else work / "report.md"
    out.write_text(report)
    print(report)
    if not args.keep:
        shutil.rmtree(work / "minio", ignore_errors=True)
        shutil.rmtree(src, ignore_errors=True)
    failed = results.get("failures", [])
    for f in failed:
        log(f"FAILED: {f}")
    sys.exit(1 if failed else 0)


# This build (also in a bucket with Object Lock) and, with --base-bin-dir, another one beside it.
MAILVAULTS = ("mailvault", "mailvault-lock", "mailvault-base")


def bucket_of(tool):
    return f"bench-{tool}"


def env_of(tool, work, minio):
    env = dict(os.environ, AWS_ACCESS_KEY_ID=USER, AWS_SECRET_ACCESS_KEY=SECRET, AWS_DEFAULT_REGION="us-east-1")
    repo = f"s3:{minio.endpoint}/{bucket_of(tool)}"
    cache = work / "cache" / tool
    if tool in MAILVAULTS:
        env.update(MAILVAULT_REPOSITORY=repo, MAILVAULT_PASSWORD_FILE=str(work / "password"),
                   MAILVAULT_CACHE_DIR=str(cache), MAILVAULT_STATE_DIR=str(cache / "state"))
    else:
        env.update(RESTIC_REPOSITORY=repo, RESTIC_PASSWORD_FILE=str(work / "password"), RESTIC_CACHE_DIR=str(cache))
    return env


def run_all(args, work, minio, src, bins, corpus, tools):
    res = {"runs": {}, "failures": []}
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    for t in tools:
        shutil.rmtree(work / "cache" / t, ignore_errors=True)
    last = {}

    def step(scenario, tool, cmd):
        env = env_of(tool, work, minio)
        rc, wall, rss, out = timed(cmd, env, logs / f"{tool}-{scenario}.log")
        if rc not in (0, 3 if tool == "restic" else 0):
            res["failures"].append(f"{tool} {scenario}: exit {rc} (log {logs}/{tool}-{scenario}.log)")
        own = None
        if tool in bins:
            try:
                own = json.loads(out).get("storage", {}).get("requests")
            except (ValueError, AttributeError):
                pass
        res["runs"][(scenario, tool)] = {"wall": wall, "rss": rss, "own": own}
        log(f"{scenario} {tool}: {wall:.2f} s, {rss:.0f} MB")

    def settle(scenario):
        # MinIO's counters lag: wait, then take the difference per bucket.
        time.sleep(args.wait)
        now = minio.metrics()
        for t in tools:
            b = bucket_of(t)
            before, after = last.get(b, {}), now.get(b, {})
            delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
            if (scenario, t) in res["runs"]:
                res["runs"][(scenario, t)]["minio"] = {k: int(v) for k, v in delta.items() if v}
            last[b] = after

    for t in tools:
        env = env_of(t, work, minio)
        cmd = [bins[t], "init", "--quiet"] if t in bins else ["restic", "init", "--quiet"]
        if t == "mailvault-lock":
            cmd += ["--lock-days", "1", "--lock-mode", "governance"]
        if subprocess.run(cmd, env=env, capture_output=True).returncode != 0:
            res["failures"].append(f"{t} init failed")
    settle("init")
    backup = {t: (lambda b=b: [b, "backup", "--json", "--quiet", str(src)]) for t, b in bins.items()}
    backup["restic"] = lambda: ["restic", "backup", "--quiet", "--host", "bench", str(src)]
    for t in tools:
        step("full", t, backup[t]())
    settle("full")
    for t in tools:
        step("unchanged", t, backup[t]())
    settle("unchanged")
    subprocess.run([corpus, "mutate", "--json", str(src)], capture_output=True, check=True)
    for t in tools:
        step("incr", t, backup[t]())
    settle("incr")
    expected = manifest(src)
    for t in tools:
        target = work / "restore" / t
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        cmd = [bins[t], "restore", "--json", "--quiet", "latest", "--target", str(target)] if t in bins \
            else ["restic", "restore", "--quiet", "latest", "--target", str(target)]
        step("restore", t, cmd)
        root = target if t in bins else target / str(src).lstrip("/")
        diffs = compare_manifests(expected, manifest(root))
        if diffs:
            res["failures"].append(f"{t} restore differs from the source: {diffs[:3]}")
        shutil.rmtree(target, ignore_errors=True)
    settle("restore")
    for t in tools:
        cmd = [bins[t], "forget", "--keep-last", "1", "--prune", "--json", "--quiet"] if t in bins \
            else ["restic", "forget", "--quiet", "--keep-last", "1", "--prune"]
        step("prune", t, cmd)
    settle("prune")
    return res


def render(args, gen, tools, res):
    lines = [f"# mailvault vs restic on MinIO ({time.strftime('%Y-%m-%d')})", "",
             f"Preset `{args.preset}`: {gen.get('messages', '?')} messages, {gen.get('bytes', 0) / 1e9:.2f} GB. "
             f"`bench/s3.py --preset {args.preset}`; requests counted by MinIO per bucket (mailvault's own count in brackets).", ""]
    for key, title in SCENARIOS:
        lines += [f"## {title}", "", f"Target: {TARGETS[key]}.", "",
                  "| tool | wall s | requests | GET | PUT | LIST | HEAD | DELETE | up MB | down MB | peak RSS MB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for t in tools:
            r = res["runs"].get((key, t))
            if not r:
                continue
            m = r.get("minio", {})
            verbs = ["GET", "PUT", "LIST", "HEAD", "DELETE"]
            total = sum(v for k, v in m.items() if k not in ("up", "down"))
            own = r.get("own")
            own_s = f" [{sum(own.get(k, 0) for k in ('get', 'put', 'list', 'head', 'delete'))}]" if own else ""
            lines.append(f"| {t} | {r['wall']:.2f} | {total}{own_s} | " + " | ".join(str(m.get(v, 0)) for v in verbs)
                         + f" | {m.get('up', 0) / 1e6:.1f} | {m.get('down', 0) / 1e6:.1f} | {r['rss']:.0f} |")
        a, b = res["runs"].get((key, "mailvault")), res["runs"].get((key, "restic"))
        if a and b and b["wall"] > 0:
            lines += ["", f"mailvault/restic wall time: **{a['wall'] / b['wall']:.2f}**"]
        c = res["runs"].get((key, "mailvault-base"))
        if a and c and c["wall"] > 0:
            lines += ["", f"mailvault/mailvault-base wall time: **{a['wall'] / c['wall']:.2f}**"]
        lines.append("")
    lines += ["## Objects stored", "", "| tool | objects | bytes in MinIO |", "|---|---|---|"]
    for t in tools:
        lines.append(f"| {t} | {res.get('objects', {}).get(t, 0)} | {res.get('stored', {}).get(t, 0) / 1e6:.1f} MB |")
    if res.get("failures"):
        lines += ["", "## Failures", ""] + [f"- {f}" for f in res["failures"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
