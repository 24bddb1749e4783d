#!/usr/bin/env python3
"""What an append-only repository's lock records cost a command, on a local MinIO.

Append-only hosts never delete: each backup leaves its lock record and its release until
the maintenance host's prune (docs/security.md). This backs up a one-message Maildir N
times with `--append-only`, then times `mailvault unlock` (which reads every lock record)
for two builds in alternated rounds and prints the medians.

    bench/locks.py --old OLD_BIN_DIR --new target/release --backups 150

Standard library only; MinIO as bench/s3.py finds it.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import s3  # noqa: E402  (its MinIO harness)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="directory with the first mailvault")
    ap.add_argument("--new", required=True, help="directory with the second mailvault")
    ap.add_argument("--backups", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    bins = {"old": str(Path(a.old) / "mailvault"), "new": str(Path(a.new) / "mailvault")}
    work = Path(tempfile.mkdtemp(prefix="mailvault-locks-"))
    m = s3.MinIO(work)
    try:
        env = dict(os.environ, AWS_ACCESS_KEY_ID=s3.USER, AWS_SECRET_ACCESS_KEY=s3.SECRET,
                   AWS_DEFAULT_REGION="us-east-1", MAILVAULT_REPOSITORY=f"s3:{m.endpoint}/locks",
                   MAILVAULT_PASSWORD="bench", XDG_CACHE_HOME=str(work / "cache"),
                   MAILVAULT_APPEND_ONLY="true")
        subprocess.run([bins["new"], "init", "-q"], env=env, check=True, capture_output=True)
        src = work / "md"
        for d in ("cur", "new", "tmp"):
            (src / d).mkdir(parents=True, exist_ok=True)
        (src / "cur" / "1.bench:2,S").write_bytes(b"Subject: bench\r\n\r\nbody\r\n")
        for _ in range(a.backups):
            subprocess.run([bins["new"], "backup", "-q", f"maildir:{src}"], env=env, check=True, capture_output=True)
        objects = subprocess.run(["find", str(work / "minio" / "locks" / "locks"), "-name", "xl.meta"],
                                 capture_output=True, text=True).stdout.split()
        print(f"{a.backups} backups left {len(objects)} lock records")
        times = {k: [] for k in bins}
        for r in range(a.rounds):
            for name in (sorted(bins) if r % 2 == 0 else sorted(bins, reverse=True)):
                t = time.time()
                subprocess.run([bins[name], "unlock", "-q"], env=env, check=True, capture_output=True)
                times[name].append(time.time() - t)
        for name, v in times.items():
            print(f"unlock, {name}: median {statistics.median(v):.3f} s of {', '.join(f'{x:.3f}' for x in v)}")
    finally:
        m.stop()


if __name__ == "__main__":
    main()
