# Sourced by both real-kernel lanes (scripts/vm-test.sh, scripts/vm-arm64.sh): the 9p share a
# VM writes its results to, and booting the VM to a status. Needs ROOTDIR (the checkout).

# vm_share DIR FILE...: DIR emptied and made with FILE... in it and src-mountpoint naming the
# checkout (where the guest mounts the read-only share "src"); $share is DIR's absolute path.
vm_share() {
  share=$1
  shift
  rm -rf "$share"
  mkdir -p "$share"
  share=$(realpath "$share")
  cp "$@" "$share/"
  printf '%s\n' "$ROOTDIR" > "$share/src-mountpoint"
}

# vm_boot LANE SECONDS QEMU...: runs QEMU (console to $share/console.log) for at most SECONDS,
# prints the guest's summary lines, and sets vm_rc (the guest's run.sh status; 124 when the VM
# timed out, 125 when it ran nothing) and vm_boot_secs (the guest's uptime when it started).
vm_boot() {
  local lane=$1 limit=$2 qrc
  shift 2
  set +e
  # QEMU in a session of its own (setsid), so in a scheduling autogroup of its own: what the
  # host does to the caller's session (a renice of builds started from the same shell) never
  # slows the guest, whose timings the tests measure.
  timeout -k 10 "$limit" setsid "$@" < /dev/null > "$share/console.log" 2>&1
  qrc=$?
  set -e
  sed -n '/^vm: /p; /^all binaries/,$p' "$share/out.log" 2>/dev/null || true
  vm_rc=125
  if [ -f "$share/rc" ]; then
    vm_rc=$(cat "$share/rc")
  elif [ "$qrc" -eq 124 ] || [ "$qrc" -eq 137 ]; then
    echo "$lane: the VM timed out after ${limit}s (raise TIMEOUT)" >&2
    vm_rc=124
  else
    echo "$lane: the VM ran nothing (qemu exit $qrc); see $share/console.log" >&2
    tail -20 "$share/console.log" >&2
  fi
  vm_boot_secs=$(sed -n 's/.*VMLANE-START \([0-9.]*\).*/\1/p' "$share/console.log" | head -1)
  vm_boot_secs=${vm_boot_secs:-?}
}
