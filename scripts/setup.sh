#!/usr/bin/env bash
# Installs what the tests and benchmarks need on a fresh Debian machine: Dovecot (the real
# IMAP server the tests start), Cyrus IMAP 3.6 unpacked into /opt/mailvault-cyrus (the
# second judge; its package conflicts with Dovecot's, so it is not installed as a package),
# sasl2-bin (its password database), python3 (the judges' independent IMAP client), the
# `vmail` and `cyrus` system users the judges run the servers as, restic and borg (benchmark
# peers), isync (mbsync), hyperfine, GNU time, openssl, the rustfmt/clippy components, and
# nightly with cargo-fuzz (for the fuzz targets). Safe to run again.
set -euo pipefail
need=()
command -v dovecot >/dev/null || need+=(dovecot-imapd)
command -v restic >/dev/null || need+=(restic)
command -v borg >/dev/null || need+=(borgbackup)
command -v mbsync >/dev/null || need+=(isync)
command -v hyperfine >/dev/null || need+=(hyperfine)
[ -x /usr/bin/time ] || need+=(time)
command -v openssl >/dev/null || need+=(openssl)
command -v python3 >/dev/null || need+=(python3)
command -v saslpasswd2 >/dev/null || need+=(sasl2-bin)
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
if command -v rustup >/dev/null; then rustup component add rustfmt clippy >/dev/null 2>&1 || true; fi
# The fuzz targets (.ci/run runs each briefly) need a nightly toolchain and cargo-fuzz.
if command -v rustup >/dev/null; then
  rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal >/dev/null
  cargo fuzz --version >/dev/null 2>&1 || cargo install --locked cargo-fuzz >/dev/null
fi
