#!/usr/bin/env bash
# A fleet on one machine: builds, then starts moat-controller and one moat-agent joined to it (on
# loopback), creates a sandbox through the controller's OpenSandbox API, runs a command in it
# through the controller's proxy, and deletes it. --keep leaves both daemons running and prints
# how to reach them. As root (the agent makes sandboxes).
set -euo pipefail
cd "$(dirname "$0")/.."
keep=false
if [ "${1:-}" = "--keep" ]; then keep=true; fi
if [ "${MOAT_SKIP_BUILD:-}" != 1 ]; then scripts/build.sh >/dev/null; fi
dir=$(mktemp -d /var/tmp/moat-fleet.XXXXXX)
umask 077
pids=()
stop() {
  if ! $keep; then
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
  fi
}
trap stop EXIT
openssl rand -hex 32 > "$dir/join.token"
openssl rand -hex 32 > "$dir/agent.token"
key=$(openssl rand -hex 24)
echo "demo $key" > "$dir/controller.keys"
mkdir -p "$dir/agent-state"
cat > "$dir/controller.yaml" <<YAML
listen: {address: 127.0.0.1, port: 8080}
state_dir: $dir/controller-state
api_keys_file: $dir/controller.keys
join_token_file: $dir/join.token
images: [{image: "*", profile: default}]
YAML
cat > "$dir/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: 7070}
token_file: $dir/agent.token
state_dir: $dir/agent-state
profiles:
  - name: default
    limits: {cpus: 1, memory: 512MiB, pids: 256, workspace: 256MiB}
    pool: {floor: 2, ceiling: 8}
controller: {url: "http://127.0.0.1:8080", join_token_file: $dir/join.token, node_name: $(hostname -s | tr 'A-Z' 'a-z')}
YAML
build/bin/moat-controller --config "$dir/controller.yaml" 2> "$dir/controller.log" >/dev/null &
pids+=($!)
build/bin/moat-agent --config "$dir/agent.yaml" 2> "$dir/agent.log" &
pids+=($!)
api() { curl -s -H "OPEN-SANDBOX-API-KEY: $key" "$@"; }
for _ in $(seq 100); do
  api http://127.0.0.1:8080/v1/nodes | grep -q '"state":"Ready"' && break
  sleep 0.1
done
echo "== the fleet: GET /v1/nodes"
api http://127.0.0.1:8080/v1/nodes | python3 -m json.tool | grep -E '"(name|state|arch|kernel|cgroup)"'
echo "== POST /v1/sandboxes (blocks until the sandbox is Running)"
created=$(api -d '{"image": {"uri": "debian:12"}, "entrypoint": ["/bin/sh"], "timeout": 600}' \
  http://127.0.0.1:8080/v1/sandboxes)
echo "$created"
id=$(echo "$created" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "== a command through the controller's proxy to the sandbox's execd API (server-sent events)"
api -N -d '{"command": "echo hello from $(hostname) as uid $(id -u); uname -sm"}' \
  "http://127.0.0.1:8080/sandboxes/$id/proxy/44772/command"
echo "== DELETE /v1/sandboxes/$id"
api -X DELETE -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:8080/v1/sandboxes/$id"
if $keep; then
  echo "running: controller http://127.0.0.1:8080 (OPEN-SANDBOX-API-KEY: $key), agent 127.0.0.1:7070"
  echo "files and logs in $dir; stop with: kill ${pids[*]}"
fi
