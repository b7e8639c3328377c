#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit, integration, end-to-end, the
# deploy checks and the Pi integration through ctest), plus the clang lane that checks the lock
# annotations, and the real-kernel lane (scripts/vm-test.sh: the kernel-facing tests and the
# rootless checks in a Debian 12 VM, kernel 6.1, systemd, pure cgroup v2). Sandbox tests need
# root (namespaces, cgroups, seccomp), as in CI. Each lane prints its time.
# env: VM_LANE=0           leave the real-kernel lane out (docs/operations.md, "The real-kernel
#                          lane": ~25 min on 2 cores, its image built once into build/vm/)
#      VM_LANE_LIMIT=2700  its hard limit in seconds (the image build included)
set -euo pipefail
cd "$(dirname "$0")/.."
lane() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  echo "test.sh: lane \"$name\" took $((SECONDS - start)) s$([ "$rc" -eq 0 ] || echo ", FAILED (exit $rc)")"
  return "$rc"
}
# The VM lane after the native suite, with the build as it is (built by the first lane); its
# image is cached in build/vm/ (rebuilt only when scripts/vm/build-image.sh or guest-boot.sh
# change).
vm_lane() {
  local limit=${VM_LANE_LIMIT:-2700} rc=0 start=$SECONDS
  timeout -k 30 "$limit" scripts/vm-test.sh --no-build || rc=$?
  if [ "$rc" -ne 0 ]; then
    [ $((SECONDS - start)) -lt "$limit" ] || echo "test.sh: the real-kernel lane ran out of its ${limit} s (VM_LANE_LIMIT)" >&2
    echo "test.sh: the real-kernel lane failed (exit $rc): see the failed tests above and" \
      "build/vm/run/ (summary.txt, tests/NAME.log, console.log); rerun: scripts/vm-test.sh --no-build" >&2
    return 1
  fi
}
lane build scripts/build.sh
lane clang-thread-safety scripts/clang-check.sh
lane tests ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 300
if [ "${VM_LANE:-1}" != 0 ]; then
  lane vm-x86-64 vm_lane
else
  echo "test.sh: lane \"vm-x86-64\" left out (VM_LANE=0)"
fi
