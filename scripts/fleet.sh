#!/usr/bin/env bash
# A fleet on one machine: builds, then starts moat-controller and one moat-agent joined to it (on
# loopback, ports 8080 and 7070), and shows moat run --server, the SDK's flow through the
# controller's OpenSandbox API (create, endpoint, a command through the proxy, pause, resume,
# delete) and the moat CLI's sandbox commands. --keep leaves both daemons running and prints how
# to reach them. As root (the agent makes sandboxes). scripts/demo.sh runs it first.
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
for port in 8080 7070; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "fleet: 127.0.0.1:$port is in use (an earlier scripts/fleet.sh --keep?); stop it first" >&2
    exit 1
  fi
done
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
api() { curl -sS -H "OPEN-SANDBOX-API-KEY: $key" "$@"; }
ready=false
for _ in $(seq 150); do
  if grep -q '"warm":{"default":[1-9]' <<<"$(api http://127.0.0.1:8080/v1/nodes 2>/dev/null)"; then
    ready=true
    break
  fi
  sleep 0.1
done
if ! $ready; then
  echo "fleet: the agent did not join the controller with a warm sandbox within 15 s; logs:" >&2
  tail -n 20 "$dir/controller.log" "$dir/agent.log" >&2
  exit 1
fi
moat=build/bin/moat
export MOAT_SERVER=http://127.0.0.1:8080 MOAT_API_KEY=$key
show() { printf '\n$ %s\n' "$*"; "$@" || printf '(exit status %d)\n' "$?"; }

echo "== the fleet: a controller and one agent joined to it (moat node ls; the API is GET /v1/nodes)"
show "$moat" node ls
echo
echo "== moat run --server: moat run's contract (output, exit status, --json) on the fleet"
echo "   (POST /v1/run: placed on a warm sandbox, run, deleted, in one call)"
show "$moat" run --server "$MOAT_SERVER" -- sh -c 'echo "hello from $(hostname) as uid $(id -u)"; exit 3'
show "$moat" run --server "$MOAT_SERVER" --json -- python3 -c 'print("key=sk-abcdefghijklmnopqrstuvwxyz012345")'
echo
echo "== the SDK's flow (OpenSandbox's lifecycle API, what Sandbox.create and commands.run send)"
echo '$ POST /v1/sandboxes   (answers once the sandbox is Running)'
created=$(api -d '{"image": {"uri": "debian:12"}, "entrypoint": ["tail", "-f", "/dev/null"], "timeout": 600,
                   "resourceLimits": {"cpu": "1", "memory": "512Mi"}}' \
  http://127.0.0.1:8080/v1/sandboxes)
echo "$created"
id=$(echo "$created" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "\$ GET /v1/sandboxes/$id/endpoints/44772   (where the sandbox's execd API is)"
endpoint=$(api "http://127.0.0.1:8080/v1/sandboxes/$id/endpoints/44772")
echo "$endpoint" | sed 's/"X-EXECD-ACCESS-TOKEN":"[^"]*"/"X-EXECD-ACCESS-TOKEN":"..."/'
url=$(echo "$endpoint" | python3 -c 'import json,sys; print(json.load(sys.stdin)["endpoint"])')
token=$(echo "$endpoint" | python3 -c 'import json,sys; print(json.load(sys.stdin)["headers"]["X-EXECD-ACCESS-TOKEN"])')
echo "\$ POST http://$url/command   (the command's output as server-sent events, through the controller)"
curl -sS -N -H "X-EXECD-ACCESS-TOKEN: $token" -d '{"command": "uname -sm; echo workspace: $(pwd)"}' \
  "http://$url/command"
echo "\$ POST /v1/sandboxes/$id/pause, then GET: $(api -d '' -o /dev/null -w '%{http_code}' \
  "http://127.0.0.1:8080/v1/sandboxes/$id/pause") $(api "http://127.0.0.1:8080/v1/sandboxes/$id" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["state"])')"
echo "\$ POST /v1/sandboxes/$id/resume, then GET: $(api -d '' -o /dev/null -w '%{http_code}' \
  "http://127.0.0.1:8080/v1/sandboxes/$id/resume") $(api "http://127.0.0.1:8080/v1/sandboxes/$id" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["state"])')"
echo
echo "== the same sandbox with the moat CLI"
show "$moat" sandbox ls
show "$moat" sandbox exec "$id" -- sh -c 'echo "in $(pwd) as uid $(id -u)"; head -1 /etc/os-release'
echo "\$ DELETE /v1/sandboxes/$id: $(api -X DELETE -o /dev/null -w '%{http_code}' \
  "http://127.0.0.1:8080/v1/sandboxes/$id")"
if $keep; then
  echo
  echo "running: controller http://127.0.0.1:8080 (OPEN-SANDBOX-API-KEY: $key), agent 127.0.0.1:7070"
  echo "  export MOAT_SERVER=http://127.0.0.1:8080 MOAT_API_KEY=$key"
  echo "files and logs in $dir; stop with: kill ${pids[*]}"
fi
