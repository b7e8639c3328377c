#!/usr/bin/env bash
# Packs integrations/pi as an npm tarball that carries the static moat binaries, so that one
# `pi install ./moat-pi-VERSION.tgz` (or `npm:` once published) brings everything:
#   bin/linux-x64/moat    from BUILD/bin/moat        (scripts/build.sh)
#   bin/linux-arm64/moat  from BUILD_ARM64/bin/moat  (scripts/cross-arm64.sh), if it was built
# The package is staged under BUILD/pi-pack, never in the source tree.
# usage: integrations/pi/scripts/pack.sh [BUILD] [BUILD_ARM64]   (default: build, build-arm64)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(realpath -m "${1:-$repo/build}")
build_arm64=$(realpath -m "${2:-$repo/build-arm64}")

[ -x "$build/bin/moat" ] || { echo "pack: $build/bin/moat is missing: build it first (scripts/build.sh)" >&2; exit 1; }
stage=$build/pi-pack/moat-pi
rm -rf "$stage" && mkdir -p "$stage/bin/linux-x64"
cp -r "$here/package.json" "$here/README.md" "$here/extensions" "$here/src" "$here/policy" \
  "$here/apparmor" "$stage/"
# Without debug information: the binaries are static, and the debug sections triple their size.
put() {  # put SRC DEST STRIP
  install -m 755 "$1" "$2"
  if command -v "$3" >/dev/null; then "$3" --strip-debug "$2"; fi
}
put "$build/bin/moat" "$stage/bin/linux-x64/moat" strip
if [ -x "$build_arm64/bin/moat" ]; then
  mkdir -p "$stage/bin/linux-arm64" && put "$build_arm64/bin/moat" "$stage/bin/linux-arm64/moat" aarch64-linux-gnu-strip
else
  echo "pack: no ARM64 build at $build_arm64 (scripts/cross-arm64.sh makes one); packing x86-64 only" >&2
fi
(cd "$stage" && npm pack --silent --pack-destination "$build/pi-pack" >/dev/null)
ls "$build"/pi-pack/moat-pi-*.tgz
