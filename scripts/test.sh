#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test (unit, integration, end-to-end).
# Sandbox tests need root (namespaces, cgroups, seccomp), as in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 300
