#!/usr/bin/env bash
# The whole test suite: installs what is missing, then runs every test of the workspace
# (unit, property, integration, CLI end-to-end, and IMAP tests against a real Dovecot).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# --no-fail-fast: every test binary runs, and cargo lists every one that failed at the end.
cargo test --workspace --no-fail-fast "$@"
