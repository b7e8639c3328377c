#!/bin/sh
# Runs inside the test VM (scripts/vm-test.sh starts it): the given gtest binaries of the host's
# build tree, one process per binary (under emulation one process per test, as ctest runs them,
# costs ~10 s a test), JOBS at a time, each in its ctest working directory with ctest's
# MOAT_BIN and MOAT_AGENT_BIN. The checkout is shared read-only at its host path (the binaries
# carry absolute paths); an overlay makes it writable inside without touching the host.
# env: ROOTDIR (the checkout), TESTS (binary names in $BUILD/tests), JOBS (default 2),
#      PER_TEST_TIMEOUT (seconds per binary, default 900), GTEST_FILTER (read by gtest itself),
#      BUILD (the build tree under ROOTDIR, default build; the ARM64 lane: build-arm64),
#      GTEST_ARGS (more gtest flags, default --gtest_brief=1)
# output: /mnt/host/tests/NAME.log, /mnt/host/tests/summary.txt, and "N passed, N failed"
#         (tests, not binaries); exit 0 only when every binary exited 0.
ROOTDIR=${ROOTDIR:?set ROOTDIR to the checkout path}; export ROOTDIR
B=$ROOTDIR/${BUILD:-build}; export BUILD
OUT=/mnt/host/tests
if [ "${1:-}" = --one ]; then
  t=$2
  inc=$(find "$B" -name "${t}\[1\]_tests.cmake" 2>/dev/null | head -1)
  dir=${inc%/*}; [ -n "$inc" ] || dir=$B
  s=$(date +%s)
  ( cd "$dir" && MOAT_BIN=$B/bin/moat MOAT_AGENT_BIN=$B/bin/moat-agent \
      timeout -k 5 "${PER_TEST_TIMEOUT:-900}" "$B/tests/$t" ${GTEST_ARGS---gtest_brief=1} ) > "$OUT/$t.log" 2>&1
  rc=$?
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$OUT/$t.log" | tail -1)
  # --gtest_brief prints each failure once ("[  FAILED  ] Suite.Test (N ms)").
  f=$(grep -E '^\[  FAILED  \] [A-Za-z_].* \([0-9]+ ms\)$' "$OUT/$t.log" | sort -u | wc -l)
  k=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$OUT/$t.log" | tail -1)
  line="$t rc=$rc secs=$(( $(date +%s) - s )) passed=${p:-0} failed=${f:-0} skipped=${k:-0}"
  echo "$line" >> "$OUT/summary.txt"
  echo "$line"
  exit 0
fi
[ -f /srv/ov/.mounted ] || {
  mkdir -p /srv/ov/u /srv/ov/w
  mount -t overlay overlay -o lowerdir="$ROOTDIR",upperdir=/srv/ov/u,workdir=/srv/ov/w "$ROOTDIR" ||
    { echo "vm: the overlay on $ROOTDIR failed"; exit 125; }
  touch /srv/ov/.mounted
}
export MOAT_E2E_SCRATCH=/srv/e2e-scratch
# Emulation makes every process many times slower: the e2e harness's hang deadlines scale.
export MOAT_E2E_TIME_SCALE=${MOAT_E2E_TIME_SCALE:-4}
init=$(systemctl --version 2>/dev/null | head -1); init=${init:-no systemd}
echo "vm: $(uname -srm), $init, cgroup $(stat -fc %T /sys/fs/cgroup)"
rm -rf "$OUT"; mkdir -p "$OUT"
start=$(date +%s)
for t in ${TESTS:?set TESTS}; do echo "$t"; done | xargs -P "${JOBS:-2}" -I{} sh "$0" --one {}
echo "all binaries: $(( $(date +%s) - start ))s"
# `moat run` as an ordinary user in a delegated scope (ROOTLESS=0: leave out).
if [ "${ROOTLESS:-1}" = 1 ]; then
  r=$(date +%s)
  sh "${0%/*}/guest-rootless.sh"
  echo "rootless checks: $(( $(date +%s) - r ))s"
fi
# What the guest kernel said of crashed processes, to explain a failure (the OOM kills the
# limit tests cause are left out).
dmesg | grep -iE 'segfault|traps:|general protection' | tail -20 > "$OUT/kernel.txt"
[ -s "$OUT/kernel.txt" ] && { echo "--- guest kernel (also tests/kernel.txt):"; cat "$OUT/kernel.txt"; }
echo "--- failed tests:"
grep -h '^\[  FAILED  \] [A-Z]' "$OUT"/*.log | sort -u
sum() { awk -v k="$1" '{for (i = 1; i <= NF; i++) if (index($i, k "=") == 1) s += substr($i, length(k) + 2)} END {print s + 0}' "$OUT/summary.txt"; }
P=$(sum passed); F=$(sum failed); S=$(sum skipped)
CR=$(grep -vc ' rc=0 ' "$OUT/summary.txt")
echo "binaries not exiting 0: $CR"
echo "$P passed, $F failed ($S skipped)"
# A run that ran no test (a filter that matches nothing, binaries that did not start) fails.
[ "$P" -gt 0 ] || echo "vm: no test passed"
[ "$F" -eq 0 ] && [ "$CR" -eq 0 ] && [ "$P" -gt 0 ]
