#!/usr/bin/env python3
"""Retention: mailvault's `forget --prune` against restic's on the same history, in one run.

A history of daily snapshots of one mail store (the corpus tool's mutation applied each
"day", each backup recorded at that day's date with `--time`), then
`forget --keep-daily 7 --keep-weekly 2 --prune` by each tool on its own local repository.
Reported: wall time and peak RSS of the forget+prune, repository size before and after,
bytes freed, snapshots kept; then mailvault's latest snapshot is restored and compared
with the store, and `check --read-data` must pass.

    bench/retention.py                  # preset medium, 30 days, release build
    bench/retention.py --smoke          # CI: preset tiny, 10 days, debug build

Issue 13's targets: mailvault's wall time <= 1/3 of restic's, repository after <= 0.5x
restic's, peak RSS <= restic's. Standard library only.
"""
import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import compare_manifests, du_bytes, manifest  # noqa: E402
from s3 import binaries, timed  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
PASSWORD = "bench-password-not-secret"
POLICY = ["--keep-daily", "7", "--keep-weekly", "2"]
FIRST_DAY = datetime.datetime(2026, 9, 1, 3, 0, 0)


def log(msg):
    print(f"[retention {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def env_of(tool, work):
    env = dict(os.environ)
    repo = str(work / f"repo-{tool}")
    if tool == "mailvault":
        env.update(MAILVAULT_REPOSITORY=repo, MAILVAULT_PASSWORD_FILE=str(work / "password"),
                   MAILVAULT_CACHE_DIR=str(work / "cache"), MAILVAULT_STATE_DIR=str(work / "state"))
    else:
        env.update(RESTIC_REPOSITORY=repo, RESTIC_PASSWORD_FILE=str(work / "password"),
                   RESTIC_CACHE_DIR=str(work / "cache-restic"))
    return env, repo


def run(cmd, env, what, failures):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        failures.append(f"{what}: exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="medium")
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--smoke", action="store_true", help="preset tiny, 10 days, debug build")
    ap.add_argument("--work", default=None, help="work directory (default target/retention)")
    ap.add_argument("--bin-dir", default=None, help="directory with mailvault and mailvault-corpus (default: build release)")
    ap.add_argument("--out", default=None, help="markdown report (default WORK/report.md)")
    ap.add_argument("--tools", default="mailvault,restic")
    ap.add_argument("--keep", action="store_true", help="keep the corpus and the repositories")
    args = ap.parse_args()
    if args.smoke:
        args.preset, args.days = "tiny", 10
    work = Path(args.work or REPO_ROOT / "target" / "retention").resolve()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    mv, corpus = binaries(args.bin_dir, args.smoke)
    tools = [t for t in args.tools.split(",") if t]
    if "restic" in tools and not shutil.which("restic"):
        log("restic missing: skipped")
        tools.remove("restic")
    (work / "password").write_text(PASSWORD)
    src = work / "vmail"
    log(f"generating preset {args.preset}")
    gen = json.loads(subprocess.run([corpus, "generate", "--preset", args.preset, "--json", str(src)],
                                    capture_output=True, text=True, check=True).stdout)
    failures = []
    for t in tools:
        env, _ = env_of(t, work)
        run([mv, "init", "--quiet"] if t == "mailvault" else ["restic", "init", "--quiet"], env, f"{t} init", failures)
    history = {t: 0.0 for t in tools}
    full_rss = {}
    for day in range(args.days):
        if day > 0:
            subprocess.run([corpus, "mutate", "--seed", str(100 + day), str(src)], capture_output=True, check=True)
        stamp = (FIRST_DAY + datetime.timedelta(days=day)).strftime("%Y-%m-%d %H:%M:%S")
        for t in tools:
            env, _ = env_of(t, work)
            cmd = [mv, "backup", "--quiet", "--time", stamp, str(src)] if t == "mailvault" else \
                ["restic", "backup", "--quiet", "--host", "bench", "--time", stamp, str(src)]
            rc, wall, rss, _ = timed(cmd, env, work / f"{t}-backup.log")
            if rc != 0:
                failures.append(f"{t} backup day {day}: exit {rc} (log {work}/{t}-backup.log)")
            history[t] += wall
            if day == 0:
                full_rss[t] = rss
    log(f"history of {args.days} days written")
    res = {}
    for t in tools:
        env, repo = env_of(t, work)
        before = du_bytes(repo)
        cmd = [mv, "forget", *POLICY, "--prune", "--json"] if t == "mailvault" else \
            ["restic", "forget", *POLICY, "--prune"]
        rc, wall, rss, out = timed(cmd, env, work / f"{t}-forget.log")
        if rc != 0:
            failures.append(f"{t} forget --prune: exit {rc} (log {work}/{t}-forget.log)")
        after = du_bytes(repo)
        snaps = run([mv, "snapshots", "--json"] if t == "mailvault" else ["restic", "snapshots", "--json"],
                    env, f"{t} snapshots", failures).stdout
        try:
            v = json.loads(snaps) or []
            kept = len(v) if isinstance(v, list) else len(v.get("snapshots", []))
        except (ValueError, AttributeError):
            kept = None
        res[t] = {"wall": wall, "rss": rss, "before": before, "after": after, "kept": kept,
                  "full_rss": full_rss.get(t, 0)}
        log(f"{t}: forget --prune {wall:.2f} s, {rss:.0f} MB, {before / 1e6:.1f} -> {after / 1e6:.1f} MB, {kept} snapshots kept")
    if "mailvault" in tools:
        env, _ = env_of("mailvault", work)
        run([mv, "check", "--read-data", "--quiet"], env, "mailvault check --read-data", failures)
        target = work / "restored"
        run([mv, "restore", "--quiet", "latest", "--target", str(target)], env, "mailvault restore", failures)
        diffs = compare_manifests(manifest(src), manifest(target))
        if diffs:
            failures.append(f"mailvault: the latest snapshot differs from the store after prune: {diffs[:3]}")
    report = render(args, gen, tools, res, history)
    out = Path(args.out) if args.out else work / "report.md"
    out.write_text(report)
    print(report)
    if not args.keep:
        for p in [src, work / "restored", *[work / f"repo-{t}" for t in tools]]:
            shutil.rmtree(p, ignore_errors=True)
    for f in failures:
        log(f"FAILED: {f}")
    sys.exit(1 if failures else 0)


def render(args, gen, tools, res, history):
    mb = 1e6
    lines = [f"# Retention: forget --prune, mailvault against restic ({time.strftime('%Y-%m-%d')})", "",
             f"Preset `{args.preset}` ({gen.get('messages', '?')} messages, {gen.get('bytes', 0) / 1e9:.2f} GB), "
             f"{args.days} daily snapshots (the corpus mutation each day), then "
             f"`forget {' '.join(POLICY)} --prune`. `bench/retention.py --preset {args.preset} --days {args.days}`.", "",
             "| tool | history backups s | full backup peak RSS MB | forget+prune wall s | peak RSS MB | size before MB | size after MB | freed MB | snapshots kept |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in tools:
        r = res.get(t)
        if r:
            lines.append(f"| {t} | {history[t]:.1f} | {r['full_rss']:.0f} | {r['wall']:.2f} | {r['rss']:.0f} | {r['before'] / mb:.1f} | "
                         f"{r['after'] / mb:.1f} | {(r['before'] - r['after']) / mb:.1f} | {r['kept']} |")
    a, b = res.get("mailvault"), res.get("restic")
    rows = []
    if a and b:
        rows += [f"| wall time <= 1/3 of restic's | {a['wall'] / b['wall']:.2f} |",
                 f"| repository after <= 0.5x restic's | {a['after'] / max(b['after'], 1):.2f} |",
                 f"| peak RSS <= restic's | {a['rss']:.0f} MB vs {b['rss']:.0f} MB |"]
    if a:
        rows += [f"| prune's peak RSS <= 2x a full backup's | {a['rss']:.0f} MB vs {a['full_rss']:.0f} MB |"]
    if rows:
        lines += ["", "| target | measured |", "|---|---|", *rows]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
