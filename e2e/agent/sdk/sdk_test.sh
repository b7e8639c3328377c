#!/usr/bin/env bash
# The unchanged OpenSandbox JS SDK (npm @alibaba-group/opensandbox, pinned to 0.1.11 in
# package-lock.json) driving a sandbox's execd API on a real moat-agent on loopback.
# usage: sdk_test.sh MOAT_AGENT_BIN
# Exit 77 (ctest: skipped) when npm cannot install the SDK (no registry reachable).
set -euo pipefail
agent_bin=$1
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../sdk_prepare.sh" moat-agent-sdk-e2e

port=$(free_port)
umask 077
openssl rand -hex 32 > "$dir/agent.token"
mkdir -p "$dir/agent-state"
cat > "$dir/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: $port}
token_file: $dir/agent.token
state_dir: $dir/agent-state
restart_grace: 0s
profiles:
  - name: default
    limits: {cpus: 1, memory: 256MiB, pids: 128, workspace: 64MiB}
    pool: {floor: 0, ceiling: 1}
YAML
"$agent_bin" --config "$dir/agent.yaml" 2> "$dir/agent.log" &
pids+=($!)
auth="Authorization: Bearer $(cat "$dir/agent.token")"
for _ in $(seq 100); do
  curl -sf -H "$auth" "http://127.0.0.1:$port/health" >/dev/null && break
  sleep 0.1
done
created=$(curl -sf -H "$auth" -d '{"profile": "default", "ttl_seconds": 600}' \
  "http://127.0.0.1:$port/v1/sandboxes")
id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' <<<"$created")
token=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])' <<<"$created")
if ! (cd "$dir" && "$node" scenario.mjs "http://127.0.0.1:$port/v1/sandboxes/$id/execd" "$token"); then
  echo "--- agent log"; tail -n 30 "$dir/agent.log"
  exit 1
fi
curl -sf -X DELETE -H "$auth" "http://127.0.0.1:$port/v1/sandboxes/$id" >/dev/null
