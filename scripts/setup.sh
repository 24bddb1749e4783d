#!/usr/bin/env bash
# Installs what the tests and benchmarks need on a fresh Debian machine: Dovecot (the real
# IMAP server the tests start), restic and borg (benchmark peers), isync (mbsync),
# hyperfine, GNU time, openssl, the rustfmt/clippy components, and nightly with cargo-fuzz
# (for the fuzz targets). Safe to run again.
set -euo pipefail
need=()
command -v dovecot >/dev/null || need+=(dovecot-imapd)
command -v restic >/dev/null || need+=(restic)
command -v borg >/dev/null || need+=(borgbackup)
command -v mbsync >/dev/null || need+=(isync)
command -v hyperfine >/dev/null || need+=(hyperfine)
[ -x /usr/bin/time ] || need+=(time)
command -v openssl >/dev/null || need+=(openssl)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${need[*]}: run as root or install them with apt-get" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Debian starts a system-wide Dovecot on install; the tests start their own on free ports.
if command -v systemctl >/dev/null; then systemctl stop dovecot >/dev/null 2>&1 || true; fi
if command -v rustup >/dev/null; then rustup component add rustfmt clippy >/dev/null 2>&1 || true; fi
# The fuzz targets (.ci/run runs each briefly) need a nightly toolchain and cargo-fuzz.
if command -v rustup >/dev/null; then
  rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal >/dev/null
  cargo fuzz --version >/dev/null 2>&1 || cargo install --locked cargo-fuzz >/dev/null
fi
