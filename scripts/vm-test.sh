#!/usr/bin/env bash
# The real-kernel lane: runs moat's kernel-facing tests inside a Debian 12 VM (Debian's 6.1
# kernel, systemd 252, pure cgroup v2) built here from Debian packages only, and prints
# "N passed, N failed". The VM has no network device at all (-nodefaults -nic none); the
# checkout is shared read-only over 9p at its own path (the test binaries carry absolute paths).
#
# usage: sudo scripts/vm-test.sh [--no-build]     (--no-build: use build/ as it is)
# env:   TESTS="a_test b_test"  binaries of build/tests to run (default: the kernel-facing set
#                               below; TESTS=all for every binary)
#        GTEST_FILTER           default: leave out the speed assertions listed below
#        ROOTLESS=0             leave out the rootless checks (scripts/vm/guest-rootless.sh:
#                               `moat run` as the ordinary user moatuser in a delegated scope)
#        JOBS=2 (binaries at once inside), SMP=2, MEM=4G, TIMEOUT=2400 (seconds, whole VM)
#        ACCEL=kvm|tcg          default kvm only with hardware virtualization (kvm_intel/kvm_amd):
#                               a paravirtual /dev/kvm (kvm_pvm) cannot boot Debian's kernel
#        MIRROR                 Debian mirror for the image (default deb.debian.org)
#        VM_RUN=FILE            run this shell script inside instead of the tests (debugging: it
#                               finds the checkout at $ROOTDIR, writes to /mnt/host = build/vm/run)
# cache: build/vm/amd64-<hash of scripts/vm/build-image.sh and guest-boot.sh>/ (the image;
#        rebuilt when they, which hold the package list, change), build/vm/debs/ (packages)
# logs:  build/vm/run/console.log (serial console), build/vm/run/tests/NAME.log, summary.txt
# exit:  0 when every binary exited 0; 124 when the VM timed out; 125 when it ran nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOTDIR=$(pwd)
t0=$(date +%s)
scripts/install-deps.sh --with-vm
if [ "${1:-}" != --no-build ]; then scripts/build.sh; fi
t1=$(date +%s)

# --- the image, cached by its inputs ----------------------------------------------------------
key=$(cat scripts/vm/build-image.sh scripts/vm/guest-boot.sh | sha256sum | cut -c1-16)
VMDIR=build/vm/amd64-$key
if [ ! -f "$VMDIR/root.img" ]; then
  find build/vm -maxdepth 1 -name 'amd64-*' ! -name "amd64-$key" -exec rm -rf {} + 2>/dev/null || true
  DEBCACHE=build/vm/debs scripts/vm/build-image.sh "$VMDIR.tmp"
  rm -rf "$VMDIR" && mv "$VMDIR.tmp" "$VMDIR"
fi
t2=$(date +%s)

# --- what runs inside -------------------------------------------------------------------------
if [ -z "${TESTS:-}" ]; then
  # Everything that talks to the kernel: cgroups, seccomp, spawning, mounts, the runner, live
  # sandboxes, network namespaces, the agent's probe and backend; the e2e attack suite
  # (e2e_*: `moat run` from outside) and the agent's end-to-end suite (e2e_agent_test).
  TESTS=$(cd build/tests && ls | grep -E '^(cgroup|seccomp|spawn|mounts|host_view|runner|live_sandbox|netns|probe|kernel_backend|mount_watch|sandbox_egress|e2e_)' | tr '\n' ' ')
  # The agent's suite last: its load test churns 200+ sandboxes for 2 minutes and counts host
  # mounts and cgroups, which the other binaries running beside it would disturb.
  TESTS="$(echo " $TESTS " | sed 's/ e2e_agent_test / /') e2e_agent_test"
elif [ "$TESTS" = all ]; then
  TESTS=$(ls build/tests | tr '\n' ' ')
fi
# Left out: assertions about speed only. They hold on real hardware; under emulation fork is
# 20-50x and system calls 3-25x slower.
speed='SeccompProgramBuildTest.BuildIsFastEnoughToRunPerPolicy'
speed+=':LargeInputTest.AdversarialMebibytesFinishQuickly'
speed+=':E2eTest.OutputFloodKeepsMoatSmall'
speed+=':NetnsPrepPoolTest.TheFirstRunFillsThePoolAndTheNextTakesFromIt'
# Its bound is a minute's worth of audit lines plus what the rate limiter refills while the
# flood runs: a slower flood refills more (1219-1308 lines under emulation, bound 1100).
speed+=':EgressTest.FloodsOfDenialsCannotFillTheHostsDisk'
filter=${GTEST_FILTER-"-$speed"}

. scripts/vm/host.sh
vm_share build/vm/run scripts/vm/guest-tests.sh scripts/vm/guest-rootless.sh
cat > "$share/run.sh" <<RUN
ROOTDIR='$ROOTDIR' TESTS='$TESTS' JOBS=${JOBS:-2} GTEST_FILTER='$filter' ROOTLESS=${ROOTLESS:-1} \
  PER_TEST_TIMEOUT=${PER_TEST_TIMEOUT:-900} sh /mnt/host/guest-tests.sh
RUN
if [ -n "${VM_RUN:-}" ]; then
  { echo "export ROOTDIR='$ROOTDIR'"; cat "$VM_RUN"; } > "$share/run.sh"
fi

# --- boot -------------------------------------------------------------------------------------
if [ -z "${ACCEL:-}" ]; then
  if [ -e /dev/kvm ] && { [ -d /sys/module/kvm_intel ] || [ -d /sys/module/kvm_amd ]; }; then
    ACCEL=kvm; else ACCEL=tcg; fi
fi
if [ "$ACCEL" = kvm ]; then
  qemu=(qemu-system-x86_64 -machine q35 -accel kvm -cpu host,-arch-capabilities)
else
  qemu=(qemu-system-x86_64 -machine q35 -accel tcg,thread=multi -cpu max)
fi
cmdline="console=ttyS0 root=/dev/vda rw quiet loglevel=3 panic=1 mitigations=off"
# no_timer_check: on a loaded host the emulated timer interrupt misses the kernel's boot-time
# check ("IO-APIC + timer doesn't work!", a panic at 0.04 s; seen at load 25 on 2 cores).
cmdline+=" no_timer_check"
cmdline+=" systemd.unit=vmlane.target systemd.show_status=false"
qemu+=(-m "${MEM:-4G}" -smp "${SMP:-2}" -nodefaults -no-user-config -nic none -display none
       -serial stdio -no-reboot -device virtio-rng-pci
       -drive "file=$VMDIR/root.img,format=raw,if=virtio,snapshot=on,cache=unsafe"
       -kernel "$VMDIR/vmlinuz" -initrd "$VMDIR/initrd.img" -append "$cmdline"
       -virtfs "local,path=$share,mount_tag=host,security_model=none,id=host"
       -virtfs "local,path=$ROOTDIR,mount_tag=src,security_model=none,readonly=on,id=src")
echo "vm-test: booting ($ACCEL) to run: $TESTS"
vm_boot vm-test "${TIMEOUT:-2400}" "${qemu[@]}"
rc=$vm_rc boot=$vm_boot_secs
t3=$(date +%s)
echo "vm-test: build $((t1 - t0))s, image $((t2 - t1))s, VM $((t3 - t2))s" \
  "(boot ${boot}s), total $((t3 - t0))s; logs in $share; exit $rc"
exit "$rc"
