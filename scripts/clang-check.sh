#!/usr/bin/env bash
# The thread-safety lane: builds every library and daemon with clang, whose -Wthread-safety
# checks each ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED (GCC, the main build's compiler,
# ignores them), as errors. Nothing is run; the main build and its tests stay GCC's.
# usage: scripts/clang-check.sh   (installs what it needs, builds into build-clang/)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
CC=clang CXX=clang++ cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DMOAT_STATIC_BINARY=OFF >/dev/null
# Listed once, then searched: `ninja ... | grep -q` under pipefail fails when grep's early exit
# leaves ninja writing to a closed pipe, and the target would be skipped unseen.
all_targets="$(ninja -C build-clang -t targets all 2>/dev/null)"
targets=()
for t in moat moat-init moat-agent moat-probe moat-controller; do
  if grep -q "^$t:" <<<"$all_targets"; then targets+=("$t"); fi
done
cmake --build build-clang -j"$(nproc)" --target "${targets[@]}"
echo "clang-check: ${targets[*]} build with -Werror=thread-safety"
