#!/usr/bin/env bash
# mailvault's project benchmark; see bench/run.py --help and BENCHMARKS.md.
#   bench/run.sh                   # preset small, all scenarios, all peers
#   bench/run.sh --preset large    # ~100k messages, ~4 GB
#   bench/run.sh --smoke           # CI: tiny preset, checks that everything runs and restores identically
set -euo pipefail
exec python3 "$(dirname "$0")/run.py" "$@"
