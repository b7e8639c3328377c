#!/bin/sh
# Runs inside the test VM after the test binaries (guest-tests.sh): `moat run` as an ordinary
# user, moatuser (uid 1000, lingering; scripts/vm/build-image.sh), whose systemd user manager
# delegates cpu, memory and pids. Each check prints "rootless NAME ok" or "rootless NAME FAIL"
# with what it saw, and a line to /mnt/host/tests/summary.txt that guest-tests.sh counts.
# env: ROOTDIR (the checkout), ROOTLESS_E2E=0 (leave out the e2e suite as the user, the last
#      and slowest check: ~20 min under emulation)
B=${ROOTDIR:?}/build
OUT=/mnt/host/tests
MOAT=$B/bin/moat
uid=$(id -u moatuser)
# The checkout may sit where an ordinary user cannot reach it (a clone under /root, or in a
# `mktemp -d` directory: mode 0700). In this disposable guest its directories are opened to
# others for search only (the checkout is an overlay here and the rest a snapshot: nothing on
# the host changes), so moatuser can run the build's binaries.
d=$ROOTDIR
while [ "$d" != / ]; do
  chmod o+x "$d" || echo "rootless: cannot open $d to moatuser"
  d=$(dirname "$d")
done
runuser -u moatuser -- test -x "$MOAT" ||
  echo "rootless: moatuser cannot run $MOAT (a directory of the build without o+x? the umask it was built with)"
# vmlane.target boots only basic.target: start logind and the user's manager by hand.
# Under emulation logind can take longer than its start timeout: dbus first, and retry.
systemctl start dbus.service
for i in 1 2 3; do
  systemctl start systemd-logind.service && systemctl start "user@$uid.service" && break
  echo "rootless: logind or user@$uid did not start (try $i)"
done
as_user() {
  timeout -k 5 "${LIMIT:-300}" runuser -u moatuser -- env -i PATH=/usr/bin:/bin HOME=/home/moatuser USER=moatuser \
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
    echo "rootless $name FAIL: exit $rc (want $want_rc), want \"$want\" in:"; printf '%s\n' "$out" | tail -"${TAIL:-8}"; p=0; f=1
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
# Host paths bound without root (the child clones them in its own mount namespace), and the
# creation guard as a process in the sandbox's user namespace: a project in the home, writable,
# whose agent configuration cannot be planted.
runuser -u moatuser -- sh -c 'rm -rf ~/ws ~/proj /tmp/moatuser-w; mkdir -p ~/ws ~/proj/.git /tmp/moatuser-w
  printf "filesystem:\n  allowWrite: [\".\"]\n" > ~/proj-policy.yaml'
check workspace 0 "inside" as_user $scope "$MOAT" run --workspace /home/moatuser/ws -- \
  sh -c 'echo inside > /workspace/f && cat /workspace/f'
check workspace-lands 0 "moatuser inside" sh -c 'echo "$(stat -c %U /home/moatuser/ws/f) $(cat /home/moatuser/ws/f)"'
check allow-write-under-tmp 0 "tmp ok" as_user $scope "$MOAT" run --cwd /tmp/moatuser-w --policy /home/moatuser/proj-policy.yaml -- \
  sh -c 'echo tmp > t && echo "$(cat t) ok"'
check project-in-home 0 "landed" as_user $scope "$MOAT" run --cwd /home/moatuser/proj \
  --policy /home/moatuser/proj-policy.yaml -- \
  sh -c 'mkdir -p .pi/extensions; echo evil > .pi/extensions/evil.ts; echo evil > .envrc; mkdir .git/hooks; echo x > .git/config; echo work > main.py && echo landed'
check nothing-planted 0 "clean work" sh -c 'cd /home/moatuser/proj && for f in .pi .envrc .git/hooks .git/config; do [ -e "$f" ] && echo "PRESENT $f"; done; echo "clean $(cat main.py)"'
check nothing-planted-really 0 "matches: 1" sh -c 'cd /home/moatuser/proj && ls -A . .git | grep -E "^(\.pi|\.envrc|hooks|config)$"; echo "matches: $?"'
# Egress for the user: the proxy and the DNS stub serve listeners the sandbox's init made in
# its own network namespace (moat never enters it). An origin on the VM's loopback; the policy
# allows only the literal 127.0.0.1 (and no name: the DNS server it names is never asked).
mkdir -p /srv/e2e-user/www && echo hello-egress > /srv/e2e-user/www/hello
cat > /srv/e2e-user/egress.py <<'PY'
import socket, struct, sys
def http(url, host):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (url, host)).encode())
    data = b""
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    print(head.split(b"\r\n")[0].decode(), body.decode().strip())
what = sys.argv[1]
if what == "allowed":
    http("http://127.0.0.1:8099/hello", "127.0.0.1:8099")
elif what == "denied":
    http("http://denied.test/x", "denied.test")
else:
    q = struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x06denied\x04test\x00" + struct.pack(">HH", 1, 1)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.settimeout(60)
    u.sendto(q, ("127.0.0.1", 53))
    print("dns rcode", u.recv(512)[3] & 15)
print([l.strip() for l in open("/etc/resolv.conf") if l.startswith("nameserver")])
PY
python3 -m http.server 8099 --bind 127.0.0.1 --directory /srv/e2e-user/www >/dev/null 2>&1 &
origin=$!
# Ready when it answers (seconds under emulation).
curl -s --retry 60 --retry-connrefused --retry-delay 1 -o /dev/null http://127.0.0.1:8099/hello
runuser -u moatuser -- sh -c 'rm -f ~/.local/state/moat/egress-audit.jsonl
  printf "network:\n  allowedDomains: [\"127.0.0.1\"]\n  allowedCidrs: [127.0.0.1/32]\n  dnsServers: [\"127.0.0.1:9\"]\n" > ~/egress-policy.yaml
  { cat ~/egress-policy.yaml; echo "  transparent: true"; } > ~/egress-transparent.yaml'
egress_run() { as_user $scope "$MOAT" run --policy /home/moatuser/egress-policy.yaml -- python3 /srv/e2e-user/egress.py "$@"; }
check egress-allowed 0 "200 OK hello-egress" egress_run allowed
check egress-denied 0 "403" egress_run denied
check egress-dns-refused 0 "dns rcode 3" egress_run dns
check egress-resolv-conf 0 "['nameserver 127.0.0.1']" egress_run dns
check egress-audited 0 "allowed and denied" sh -c 'f=/home/moatuser/.local/state/moat/egress-audit.jsonl
  grep "\"host\":\"127.0.0.1\"" "$f" | grep "\"status\":200" | grep -q "\"allowed\":true" &&
  grep "\"host\":\"denied.test\"" "$f" | grep -q "\"allowed\":false" && echo "allowed and denied"'
check egress-nothing-left 0 "clean" sh -c "[ \"\$(ls -A /run/user/$uid/moat)\" = resolv.conf ] && ! pgrep -u moatuser -x moat && echo clean || ls -lA /run/user/$uid/moat"
check egress-transparent-refused 125 "network.transparent" as_user $scope "$MOAT" run \
  --policy /home/moatuser/egress-transparent.yaml -- true
check egress-no-runtime-dir 125 "XDG_RUNTIME_DIR, which is not set" as_user $scope env -u XDG_RUNTIME_DIR \
  "$MOAT" run --policy /home/moatuser/egress-policy.yaml -- true
kill $origin
# The e2e attack cases of the project's configuration (e2e/run/project_config_test.cc), as the
# user in a delegated scope: the same tests that pass as root.
# The test binary moves to a child cgroup of the scope, so that the scope can hand its
# controllers to the sibling the sandboxes go in (MOAT_CGROUP_PARENT).
mkdir -p /srv/e2e-user && chown moatuser: /srv/e2e-user
cat > /srv/e2e-user/in-subcgroup.sh <<'SH'
cg=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
mkdir "$cg/tests" "$cg/sandboxes" && echo $$ > "$cg/tests/cgroup.procs" &&
  echo "+cpu +memory +pids" > "$cg/cgroup.subtree_control" || exit 125
MOAT_CGROUP_PARENT=${cg#/sys/fs/cgroup}/sandboxes exec "$@"
SH
[ "${ROOTLESS_E2E:-1}" = 1 ] || exit 0
LIMIT=1200 TAIL=60 check e2e-project-config 0 "PASSED" as_user env MOAT_E2E_ROOTLESS=1 MOAT_E2E_SCRATCH=/srv/e2e-user \
  MOAT_E2E_TIME_SCALE=4 MOAT_BIN="$MOAT" $scope sh /srv/e2e-user/in-subcgroup.sh \
  "$B/tests/e2e_project_config_test" --gtest_brief=1
