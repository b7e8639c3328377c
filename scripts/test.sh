#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit, integration, end-to-end, the
# deploy checks and the Pi integration through ctest), plus the clang lane that checks the lock
# annotations. Sandbox tests need root (namespaces, cgroups, seccomp), as in CI. Each lane prints
# its time.
set -euo pipefail
cd "$(dirname "$0")/.."
lane() {
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "test.sh: lane \"$name\" took $((SECONDS - start)) s"
}
lane build scripts/build.sh
lane clang-thread-safety scripts/clang-check.sh
lane tests ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 300
