#!/usr/bin/env bash
# Installs what the tests and benchmarks need on a fresh Debian machine: Dovecot (the real
# IMAP server the tests start) and its fts-xapian plugin (bench/search.py's peer), Cyrus
# IMAP 3.6 unpacked into /opt/mailvault-cyrus (the second judge; its package conflicts with Dovecot's, so it is not installed as a package),
# sasl2-bin (its password database), python3 (the judges' independent IMAP client; its mailbox and email
# modules read and write the mbox and EML of tests/formats.rs), the
# `vmail` and `cyrus` system users the judges run the servers as, restic and borg (benchmark
# peers), isync (mbsync), hyperfine, GNU time, openssl, MinIO (the S3 server the object-storage
# tests start, built with go once and kept), the rustfmt/clippy components, and nightly with
# cargo-fuzz (for the fuzz targets), chromium and chromium-driver (the web UI's browser
# tests), systemd (`systemd-analyze verify` checks contrib/systemd)
# and python3-prometheus-client (its parser reads the metrics file in the tests). Safe to run
# again.
set -euo pipefail
need=()
command -v dovecot >/dev/null || need+=(dovecot-imapd)
# Dovecot's full-text search plugin: bench/search.py indexes and searches with it.
dpkg-query -W -f='${Status}' dovecot-fts-xapian 2>/dev/null | grep -q 'ok installed' || need+=(dovecot-fts-xapian)
# Pigeonhole: the LDA's sieve plugin and ManageSieve judge restored sieve scripts
# (crates/cli/tests/judge_sieve.rs).
for p in dovecot-sieve dovecot-managesieved; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
command -v restic >/dev/null || need+=(restic)
command -v borg >/dev/null || need+=(borgbackup)
command -v mbsync >/dev/null || need+=(isync)
command -v hyperfine >/dev/null || need+=(hyperfine)
[ -x /usr/bin/time ] || need+=(time)
command -v openssl >/dev/null || need+=(openssl)
command -v python3 >/dev/null || need+=(python3)
# `backup --snapshot btrfs` test (crates/cli/tests/fs_snapshot.rs).
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
command -v saslpasswd2 >/dev/null || need+=(sasl2-bin)
# The web UI's browser tests (crates/cli/tests/browser.rs): headless Chromium over WebDriver.
command -v chromium >/dev/null || need+=(chromium)
command -v chromedriver >/dev/null || need+=(chromium-driver)
command -v systemd-analyze >/dev/null || need+=(systemd)
/usr/bin/python3 -c 'import prometheus_client.parser' 2>/dev/null || need+=(python3-prometheus-client)
# Cyrus' own libraries come from its unpacked packages (below); these are the rest.
cyrus_libs=(libclamav12 libical3 libicu72 libjansson4 libkrb5-3 libldap-2.5-0 libpcre3 libpq5
  libsqlite3-0 libwrap0 libxapian30 libxml2 libzephyr4 libcom-err2 libsasl2-modules-db)
for p in "${cyrus_libs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing ${need[*]}: run as root or install them with apt-get" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Cyrus IMAP 3.6 for the second judge (crates/imap/src/testing/cyrus.rs): Debian's
# cyrus-imapd conflicts with dovecot-imapd, so its packages are unpacked, not installed.
CYRUS_DIR=${MAILVAULT_CYRUS_DIR:-/opt/mailvault-cyrus}
CYRUS_VERSION=3.6.1-4+deb12u5
if [ ! -x "$CYRUS_DIR/usr/lib/cyrus/bin/master" ] \
  || ! grep -qx "PACKAGE_VERSION $CYRUS_VERSION" "$CYRUS_DIR/usr/lib/cyrus/cyrus-hardwired-config.txt" 2>/dev/null; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: Cyrus is not unpacked in $CYRUS_DIR: run as root" >&2
    exit 1
  fi
  dl=$(mktemp -d)
  chmod 755 "$dl"; chown _apt "$dl" 2>/dev/null || true # apt downloads as _apt
  (cd "$dl" && apt-get download -qq "cyrus-common=$CYRUS_VERSION" "cyrus-imapd=$CYRUS_VERSION" \
    || { apt-get update -qq && apt-get download -qq "cyrus-common=$CYRUS_VERSION" "cyrus-imapd=$CYRUS_VERSION"; })
  rm -rf "$CYRUS_DIR"
  mkdir -p "$CYRUS_DIR"
  for deb in "$dl"/*.deb; do dpkg -x "$deb" "$CYRUS_DIR"; done
  rm -rf "$dl"
fi
# The users the judges run the mail servers as (as Debian's packages would).
if [ "$(id -u)" -eq 0 ]; then
  id vmail >/dev/null 2>&1 || useradd --system --user-group --no-create-home \
    --home-dir /nonexistent --shell /usr/sbin/nologin vmail
  id cyrus >/dev/null 2>&1 || useradd --system --gid mail --no-create-home \
    --home-dir /nonexistent --shell /usr/sbin/nologin cyrus
fi
# Debian starts a system-wide Dovecot on install; the tests start their own on free ports.
if command -v systemctl >/dev/null; then systemctl stop dovecot >/dev/null 2>&1 || true; fi
# MinIO for the S3 tests (mailvault_core::testing::minio finds it the same way: MAILVAULT_MINIO,
# PATH, $(go env GOPATH)/bin, ~/go/bin). MinIO's RELEASE.* tags are not semver, so the module
# version is pinned as go resolved @latest on 2026-11-24. Built only when no binary exists
# (a few minutes on a fresh machine; go's module and build caches make a rebuild quick).
MINIO_MODULE=github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c
go_bin=$(command -v go || true)
[ -n "$go_bin" ] || { [ -x /usr/local/go/bin/go ] && go_bin=/usr/local/go/bin/go; }
if [ -n "${MAILVAULT_MINIO:-}" ] && [ ! -x "$MAILVAULT_MINIO" ]; then
  echo "setup: MAILVAULT_MINIO=$MAILVAULT_MINIO is not an executable minio binary" >&2
  exit 1
fi
minio_bin=${MAILVAULT_MINIO:-$(command -v minio || true)}
if [ -z "$minio_bin" ]; then
  for d in ${go_bin:+"$("$go_bin" env GOPATH)/bin"} "$HOME/go/bin"; do
    if [ -x "$d/minio" ]; then minio_bin=$d/minio; break; fi
  done
fi
if [ -z "$minio_bin" ] || [ ! -x "$minio_bin" ]; then
  if [ -z "$go_bin" ]; then
    if [ "$(id -u)" -ne 0 ]; then
      echo "setup: MinIO and go are missing: install golang-go (or go in /usr/local/go), or point MAILVAULT_MINIO at a minio binary" >&2
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -qq golang-go >/dev/null || { apt-get update -qq && apt-get install -y -qq golang-go >/dev/null; }
    go_bin=$(command -v go)
  fi
  # MinIO needs a newer go than Debian 12's (1.19); go >= 1.21 fetches the toolchain
  # MinIO's go.mod asks for by itself.
  go_minor=$("$go_bin" env GOVERSION | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
  if [ "${go_minor:-0}" -lt 21 ]; then
    echo "setup: $("$go_bin" version) is too old to build MinIO: install go >= 1.21 from https://go.dev/dl into /usr/local/go, or point MAILVAULT_MINIO at a minio binary" >&2
    exit 1
  fi
  echo "setup: building MinIO ($MINIO_MODULE) with $("$go_bin" version), once" >&2
  "$go_bin" install "$MINIO_MODULE"
  gobin=$("$go_bin" env GOBIN)
  minio_bin="${gobin:-$("$go_bin" env GOPATH)/bin}/minio"
  [ -x "$minio_bin" ] || { echo "setup: go install did not produce $minio_bin" >&2; exit 1; }
fi
if command -v rustup >/dev/null; then rustup component add rustfmt clippy >/dev/null 2>&1 || true; fi
# The fuzz targets (.ci/run runs each briefly) need a nightly toolchain and cargo-fuzz.
if command -v rustup >/dev/null; then
  rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal >/dev/null
  cargo fuzz --version >/dev/null 2>&1 || cargo install --locked cargo-fuzz >/dev/null
fi
