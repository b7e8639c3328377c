#!/bin/sh
# Runs inside the test VM after the test binaries (guest-tests.sh): `moat run` as an ordinary
# user, moatuser (uid 1000, lingering; scripts/vm/build-image.sh), whose systemd user manager
# delegates cpu, memory and pids. Each check prints "rootless NAME ok" or "rootless NAME FAIL"
# with what it saw, and a line to /mnt/host/tests/summary.txt that guest-tests.sh counts.
# env: ROOTDIR (the checkout)
B=${ROOTDIR:?}/build
OUT=/mnt/host/tests
MOAT=$B/bin/moat
uid=$(id -u moatuser)
# vmlane.target boots only basic.target: start logind and the user's manager by hand.
# Under emulation logind can take longer than its start timeout: dbus first, and retry.
systemctl start dbus.service
for i in 1 2 3; do
  systemctl start systemd-logind.service && systemctl start "user@$uid.service" && break
  echo "rootless: logind or user@$uid did not start (try $i)"
done
as_user() {
  timeout -k 5 300 runuser -u moatuser -- env -i PATH=/usr/bin:/bin HOME=/home/moatuser USER=moatuser \
    XDG_RUNTIME_DIR=/run/user/$uid DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/$uid/bus "$@"
}
# check NAME EXPECTED_RC EXPECTED_TEXT COMMAND...: the command's status and that its output
# (stdout and stderr) holds the text.
check() {
  name=$1 want_rc=$2 want=$3; shift 3
  s=$(date +%s)
  out=$(cd /tmp && "$@" 2>&1); rc=$?
  if [ "$rc" = "$want_rc" ] && printf '%s' "$out" | grep -qF -- "$want"; then
    echo "rootless $name ok ($(( $(date +%s) - s ))s)"; p=1; f=0
  else
    echo "rootless $name FAIL: exit $rc (want $want_rc), want \"$want\" in:"; printf '%s\n' "$out" | tail -8; p=0; f=1
  fi
  echo "rootless-$name rc=$(( f )) secs=$(( $(date +%s) - s )) passed=$p failed=$f skipped=0" >> "$OUT/summary.txt"
}
scope="systemd-run --user --scope --quiet -p Delegate=yes"
# Outside a delegated scope (the user's own cgroup is the root service's): refused, saying how.
check outside-a-scope 125 "systemd-run --user --scope -p Delegate=yes" as_user "$MOAT" run -- true
check no-user-manager 125 "loginctl enable-linger" \
  timeout -k 5 300 runuser -u moatuser -- env -i PATH=/usr/bin:/bin HOME=/home/moatuser USER=moatuser "$MOAT" run -- true
# In a delegated scope of the user manager: the command runs, as root inside.
check in-a-scope 0 "uid=0(root)" as_user $scope "$MOAT" run -- id
check limits-apply 137 "memory limit" as_user $scope "$MOAT" run --memory 32M -- \
  python3 -c "b = bytearray(256 << 20)"
