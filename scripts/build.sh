#!/usr/bin/env bash
# Installs the Debian packages moat needs (if missing) and builds everything into build/.
# usage: scripts/build.sh [--with-peers]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh "$@"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="${MOAT_BUILD_TYPE:-RelWithDebInfo}" >/dev/null
cmake --build build -j"$(nproc)"
