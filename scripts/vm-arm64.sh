#!/usr/bin/env bash
# The ARM64 kernel lane: cross-builds moat and the e2e attack suite for ARM64 (build-arm64/),
# boots Debian 12's arm64 kernel (6.1) under QEMU (`-M virt -cpu max`, emulated: no KVM across
# architectures) with a busybox initramfs (scripts/vm/build-initramfs.sh: pure cgroup v2, no
# systemd), runs the suites below inside, one process per binary, and prints "N passed, N failed".
# The VM has no network device (-nodefaults -nic none); the checkout is shared read-only over 9p
# at its own path, as in scripts/vm-test.sh.
#
# usage: sudo scripts/vm-arm64.sh [--no-build]     (--no-build: use build-arm64/ as it is)
# env:   TESTS="e2e_a_test ..."  binaries of build-arm64/tests to run (default below)
#        GTEST_FILTER            default: leave out what the busybox guest cannot run (below)
#        JOBS=1, SMP=2, MEM=2G, TIMEOUT=1800 (seconds, whole VM), MOAT_E2E_TIME_SCALE=8
# cache: build/vm/arm64-<hash of scripts/vm/build-initramfs.sh, guest-boot.sh, the libraries>/,
#        build/vm/arm64-debs/ (the two downloaded packages)
# logs:  build/vm/run-arm64/console.log, tests/NAME.log, summary.txt
# exit:  0 when every binary exited 0 and the foreign-architecture check ran; 124 when the VM
#        timed out; 125 when it ran nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOTDIR=$(pwd)
t0=$(date +%s)
scripts/install-deps.sh --with-vm
# The forbidden-syscall and foreign-architecture cases (e2e_syscalls_test: every forbidden call
# refused and reported, AArch32 calls killing the process, ptrace confined) and the escape
# cases (host files, /proc and /sys, devices, credentials, processes, a killed or timed-out
# moat leaving nothing behind, fail-closed setup).
TESTS=${TESTS:-e2e_syscalls_test e2e_filesystem_test e2e_credentials_test e2e_processes_test e2e_fail_closed_test e2e_leftovers_test}
TARGETS="moat moat-init $TESTS"
if [ "${1:-}" != --no-build ]; then TARGETS=$TARGETS scripts/cross-arm64.sh; fi
t1=$(date +%s)

# The loader and libraries the dynamically linked test binaries need, and theirs in turn (moat
# itself is static).
needed() { aarch64-linux-gnu-readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
declare -A seen=()
queue=()
for t in $TESTS; do queue+=("build-arm64/tests/$t"); done
while [ ${#queue[@]} -gt 0 ]; do
  f=${queue[0]}; queue=("${queue[@]:1}")
  for so in $(needed "$f"); do
    l=/lib/aarch64-linux-gnu/$so
    [ -e "$l" ] || { echo "vm-arm64: $l missing (is the arm64 package of $so installed?)" >&2; exit 125; }
    [ -n "${seen[$l]:-}" ] || { seen[$l]=1; queue+=("$l"); }
  done
done
mapfile -t libs < <(printf '%s\n' "${!seen[@]}" /lib/ld-linux-aarch64.so.1 | sort -u)

key=$( (cat scripts/vm/build-initramfs.sh scripts/vm/guest-boot.sh; printf '%s\n' "${libs[@]}") | sha256sum | cut -c1-16)
VMDIR=build/vm/arm64-$key
if [ ! -f "$VMDIR/initrd.img" ]; then
  find build/vm -maxdepth 1 -name 'arm64-*' ! -name arm64-debs ! -name "arm64-$key" \
    -exec rm -rf {} + 2>/dev/null || true
  LIBS="${libs[*]}" DEBCACHE=build/vm/arm64-debs scripts/vm/build-initramfs.sh "$VMDIR.tmp"
  rm -rf "$VMDIR" && mv "$VMDIR.tmp" "$VMDIR"
fi
# The scratch disk: ext4 (idmapped workspace mounts; tmpfs has them only from 6.3), fresh each run.
rm -f build/vm/arm64-scratch.img
mke2fs -q -t ext4 -E root_owner=0:0 build/vm/arm64-scratch.img 2G
t2=$(date +%s)

# Left out: what the busybox guest cannot run. The harness's host sleeper execs /bin/sleep under
# another argv[0] (its marker), which busybox reads as an applet name ("applet not found").
skip='E2eTest.HostProcessesAreInvisibleAndSurviveSignals'
# Busybox's sh runs `sleep` in a forked shell without exec (a "nofork" applet), so the daemons'
# command lines stay the shell's and the tests' wait for five "sleep" processes never ends.
skip+=':E2eTest.InterruptingMoatEndsTheSandbox:E2eTest.KillingMoatKillsTheSandbox'
# Speed only: 20000 refused (user-notified) mounts under emulation of arm64 system calls ran into
# the run's CPU limit (cpu_timeout, 2026-12-01) even with its wall limit scaled.
skip+=':E2eTest.ViolationFloodIsCappedAndReturnsPromptly'
filter=${GTEST_FILTER-${skip:+-$skip}}
filter=${filter:-'*'}  # an empty GTEST_FILTER matches no test at all

. scripts/vm/host.sh
vm_share build/vm/run-arm64 scripts/vm/guest-tests.sh
cat > "$share/run.sh" <<RUN
echo "vm: kernel $(cat "$VMDIR/KERNEL"), cpu \$(uname -m)"
ROOTDIR='$ROOTDIR' BUILD=build-arm64 TESTS='$TESTS' JOBS=${JOBS:-1} GTEST_FILTER='$filter' \
  ROOTLESS=0 PER_TEST_TIMEOUT=${PER_TEST_TIMEOUT:-1200} GTEST_ARGS= \
  MOAT_E2E_TIME_SCALE=${MOAT_E2E_TIME_SCALE:-8} sh /mnt/host/guest-tests.sh
RUN

qemu=(qemu-system-aarch64 -machine virt -accel tcg,thread=multi -cpu max,pauth-impdef=on
      -m "${MEM:-2G}" -smp "${SMP:-2}" -nodefaults -no-user-config -nic none -display none
      -serial stdio -no-reboot -device virtio-rng-pci
      -drive "file=build/vm/arm64-scratch.img,format=raw,if=none,id=hd,cache=unsafe"
      -device virtio-blk-pci,drive=hd
      -kernel "$VMDIR/vmlinuz" -initrd "$VMDIR/initrd.img"
      -append "console=ttyAMA0 rdinit=/init quiet loglevel=3 panic=1 mitigations=off"
      -virtfs "local,path=$share,mount_tag=host,security_model=none,id=host"
      -virtfs "local,path=$ROOTDIR,mount_tag=src,security_model=none,readonly=on,id=src")
echo "vm-arm64: booting Debian's arm64 kernel $(cat "$VMDIR/KERNEL") (TCG) to run: $TESTS"
vm_boot vm-arm64 "${TIMEOUT:-1800}" "${qemu[@]}"
rc=$vm_rc boot=$vm_boot_secs
t3=$(date +%s)
rm -f build/vm/arm64-scratch.img
# The foreign-architecture case must have run, not skipped (it skips where the kernel or CPU
# cannot run 32-bit ARM programs, or without the arm32 compiler).
if [ -f "$share/rc" ] && [[ " $TESTS " == *" e2e_syscalls_test "* ]] &&
   ! grep -q '^\[       OK \] E2eTest.Arm32SystemCallKillsTheProcess' \
     "$share/tests/e2e_syscalls_test.log"; then
  echo "vm-arm64: E2eTest.Arm32SystemCallKillsTheProcess did not pass (skipped or failed)" >&2
  [ "$rc" -ne 0 ] || rc=1
fi
echo "vm-arm64: build $((t1 - t0))s, guest $((t2 - t1))s, VM $((t3 - t2))s" \
  "(boot ${boot}s), total $((t3 - t0))s; logs in $share; exit $rc"
exit "$rc"
