#!/usr/bin/env bash
# Builds the Debian package of mailvault with dpkg-deb (nothing to install first):
#   /usr/bin/mailvault, its man pages (section 1), bash/zsh/fish completions, the systemd
#   units of contrib/systemd (ExecStart pointed at /usr/bin), a sample
#   /etc/mailvault/mailvault.toml (a conffile: an upgrade keeps the admin's version), and
#   the copyright file.
#
#   scripts/deb.sh                     # cargo build --release, then the package in target/deb/
#   scripts/deb.sh --bin PATH [--out DIR]   # package a binary already built (the tests: the debug one)
#
# Install: apt install ./target/deb/mailvault_<version>_<arch>.deb
set -euo pipefail
cd "$(dirname "$0")/.."

bin=""
out=target/deb
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "usage: scripts/deb.sh [--bin PATH] [--out DIR]" >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  cargo build --release -p mailvault
  bin=target/release/mailvault
fi
[ -x "$bin" ] || { echo "deb.sh: $bin is not an executable" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/man/man1" \
  "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
  "$root/usr/share/fish/vendor_completions.d" "$root/lib/systemd/system" \
  "$root/etc/mailvault" "$root/usr/share/doc/mailvault"

# Stripped, as Debian ships binaries (panics still name the function).
install -s -m 0755 "$bin" "$root/usr/bin/mailvault"
"$bin" generate man "$stage/man" >/dev/null
for page in "$stage"/man/*.1; do
  gzip -9n -c "$page" > "$root/usr/share/man/man1/$(basename "$page").gz"
done
"$bin" generate completions "$stage/completions" >/dev/null
install -m 0644 "$stage/completions/mailvault.bash" "$root/usr/share/bash-completion/completions/mailvault"
install -m 0644 "$stage/completions/_mailvault" "$root/usr/share/zsh/vendor-completions/_mailvault"
install -m 0644 "$stage/completions/mailvault.fish" "$root/usr/share/fish/vendor_completions.d/mailvault.fish"
for unit in contrib/systemd/*; do
  sed 's|/usr/local/bin/mailvault|/usr/bin/mailvault|g' "$unit" > "$root/lib/systemd/system/$(basename "$unit")"
  chmod 0644 "$root/lib/systemd/system/$(basename "$unit")"
done
install -m 0644 contrib/mailvault.toml "$root/etc/mailvault/mailvault.toml"
{
  echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
  echo "Upstream-Name: mailvault"
  echo
  echo "Files: *"
  echo "License: Apache-2.0"
  echo " On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0."
} > "$root/usr/share/doc/mailvault/copyright"

echo /etc/mailvault/mailvault.toml > "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: mailvault
Version: $version
Architecture: $arch
Maintainer: mailvault maintainers <maintainers@mailvault.invalid>
Installed-Size: $size
Depends: libc6 (>= 2.34), libgcc-s1
Section: admin
Priority: optional
Homepage: https://github.com/mailvault/mailvault
Description: backup and restore for mail servers
 mailvault backs up Maildir, mbox and IMAP mail stores and mail databases into a
 deduplicated, compressed, encrypted and verifiable repository on local disk or
 S3-compatible object storage, and restores any snapshot, account, folder or
 message byte for byte, to Maildir, mbox, EML or a live IMAP server.
CONTROL

mkdir -p "$out"
deb="$out/mailvault_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
