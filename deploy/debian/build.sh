#!/usr/bin/env bash
# Build the Debian package: wstune, its completions and man pages, the profiles and catalogs
# (for reference: they are built into the binary), the systemd units and the Prometheus and
# Grafana files. Usage: deploy/debian/build.sh [--profile release|dev] [--no-build] [-o DIR]
# Needs cargo-deb (cargo install --locked cargo-deb). Prints the .deb's path.
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=release build=1 out=target/debian
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -o) out=$2; shift 2 ;;
    *) echo "usage: $0 [--profile release|dev] [--no-build] [-o DIR]" >&2; exit 3 ;;
  esac
done
target=${CARGO_TARGET_DIR:-target}
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
if [ "$build" = 1 ]; then
  cargo build --locked --profile "$profile" -p wstune --bin wstune
fi
bin="$target/$dir/wstune"
assets="$target/$dir/deb-assets"
rm -rf "$assets" && mkdir -p "$assets/man"
"$bin" completions bash > "$assets/wstune.bash"
"$bin" completions zsh > "$assets/_wstune"
"$bin" completions fish > "$assets/wstune.fish"
"$bin" man --out "$assets/man" >/dev/null
mkdir -p "$out"
# --strip: a debug build's symbols would make the package ten times larger.
cargo deb --no-build --locked --profile "$profile" --strip --fast -p wstune -o "$out" 2>&1 | tail -1
