#!/usr/bin/env bash
# The main job on one machine: install, build, start a fleet (moat-controller and a moat-agent
# joined to it) and show a sandbox created, commands run through the controller and the SDK's
# flow (scripts/fleet.sh), then `moat run` on its own, without a daemon, on the default policy.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
echo "==== a fleet on this machine: moat-controller and a moat-agent joined to it"
MOAT_SKIP_BUILD=1 scripts/fleet.sh
echo
echo "==== moat run: one process, no daemon"
moat=build/bin/moat
show() { printf '\n$ %s\n' "$*"; "$@" || printf '(exit status %d)\n' "$?"; }

echo "== moat run: a sandboxed command with the default policy"
show "$moat" run -- sh -c 'echo "hello from $(hostname) as uid $(id -u), in $(pwd)"; ls /workspace /root /run'
echo
echo "== the host is read-only, the network is absent, and the sandbox sees only itself"
show "$moat" run -- sh -c 'touch /etc/pwned; echo "network interfaces: $(ls /sys/class/net)"; ls /proc | grep -c "^[0-9]" | sed "s/^/processes visible: /"'
echo
echo "== limits: a fork bomb meets the pids limit, a memory bomb the memory limit"
show "$moat" run --pids 32 --wall-timeout 5s -- sh -c 'bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 1; echo "the shell survived the bomb"'
show "$moat" run --json --memory 64M -- python3 -c 'x = bytearray(512 << 20)'
echo
echo "== --json: one result object, output cleaned for a model to read"
show "$moat" run --json -- sh -c 'printf "\033[31mred\033[0m key=sk-abcdefghijklmnopqrstuvwxyz012345\n"'
echo
echo "== egress: allowed domains go through moat's proxy; everything else is refused and audited"
# A server on the host's loopback stands in for the internet; nothing leaves this machine.
# -u: the server prints its port unbuffered (a block-buffered log would hold it back).
tmp=$(mktemp -d /var/tmp/moat-demo.XXXXXX)
python3 -u -m http.server --bind 127.0.0.1 --directory "$tmp" 0 >"$tmp/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; rm -rf "$tmp"' EXIT
port=
for _ in $(seq 50); do
  port=$(sed -n 's/.*port \([0-9]*\).*/\1/p' "$tmp/server.log" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
echo "hello from the loopback server" >"$tmp/index.html"
cat >"$tmp/policy.yaml" <<POLICY
network:
  allowedDomains: ["127.0.0.1:$port"]
  allowedCidrs: ["127.0.0.1/32"]
POLICY
show "$moat" run --policy "$tmp/policy.yaml" --audit-log "$tmp/audit.jsonl" -- sh -c \
  "curl -sS --noproxy '' http://127.0.0.1:$port/; curl -sS -o /dev/null -w 'example.com: %{http_code}\n' http://example.com/"
echo "audit log:"
cat "$tmp/audit.jsonl"
