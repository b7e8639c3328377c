#!/usr/bin/env bash
# Start-up latency of `moat run` against bubblewrap, crun and plain fork+exec; prints one table,
# then moat's own setup timeline.
#
# usage: bench/run.sh [startup_bench flags...]     e.g. bench/run.sh --rounds=100
#
# Builds moat and startup_bench (one job at a time), installs the peers (Debian's bubblewrap and
# crun) when missing, writes crun's OCI bundle to a temp dir, and runs the bench there, so that no
# project policy file in the caller's directory changes moat's behaviour. Run it as root: crun and
# the namespace crun runs in need it. A peer that is missing or fails is skipped with a note.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

if ! scripts/install-deps.sh --with-peers; then
  echo "bench/run.sh: could not install the peers; missing ones will be skipped" >&2
fi
cmake -S . -B build -G Ninja >/dev/null
ninja -C build -j1 moat startup_bench >/dev/null

tmp="$(mktemp -d /tmp/moat-bench.XXXXXX)"
cleanup() {
  # The rootfs is bound only inside the bench's private mount namespace, never here; refuse to
  # delete anything if that ever stops being true.
  if mountpoint -q "$tmp/bundle/rootfs"; then
    echo "bench/run.sh: \"$tmp/bundle/rootfs\" is a mount point; not deleting $tmp" >&2
    return
  fi
  rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT

# crun's bundle (bench/crun_bundle.sh says what it holds).
# shellcheck source=bench/crun_bundle.sh
. "$repo/bench/crun_bundle.sh"
write_crun_bundle "$tmp/bundle"

cd "$tmp"
echo "bench/run.sh: crun bundle $tmp/bundle: host root read-only, root mapped to uid 65534," \
  "pid/net/ipc/uts/mount/user/cgroup namespaces, /proc, tmpfs /dev and /tmp, no capabilities"
"$repo/build/bin/startup_bench" --crun-bundle="$tmp/bundle" "$@"
