#!/usr/bin/env bash
# The unchanged OpenSandbox JS SDK (npm @alibaba-group/opensandbox, pinned to 0.1.11 in
# package-lock.json) against a real moat-controller and a real moat-agent on loopback.
# usage: sdk_test.sh MOAT_CONTROLLER_BIN MOAT_AGENT_BIN
# Exit 77 (ctest: skipped) when npm cannot install the SDK (no registry reachable).
set -euo pipefail
controller_bin=$1 agent_bin=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../../sdk_prepare.sh" moat-sdk-e2e

cport=$(free_port) aport=$(free_port)
umask 077
openssl rand -hex 32 > "$dir/join.token"
openssl rand -hex 32 > "$dir/agent.token"
key=$(openssl rand -hex 24)
echo "sdk $key" > "$dir/controller.keys"
mkdir -p "$dir/agent-state"
cat > "$dir/controller.yaml" <<YAML
listen: {address: 127.0.0.1, port: $cport}
state_dir: $dir/controller-state
api_keys_file: $dir/controller.keys
join_token_file: $dir/join.token
images: [{image: "*", profile: default}]
YAML
cat > "$dir/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: $aport}
token_file: $dir/agent.token
state_dir: $dir/agent-state
profiles:
  - name: default
    limits: {cpus: 1, memory: 256MiB, pids: 128, workspace: 64MiB}
    pool: {floor: 1, ceiling: 2}
controller: {url: "http://127.0.0.1:$cport", join_token_file: $dir/join.token, node_name: sdk1}
YAML
"$controller_bin" --config "$dir/controller.yaml" 2> "$dir/controller.log" >/dev/null &
pids+=($!)
"$agent_bin" --config "$dir/agent.yaml" 2> "$dir/agent.log" &
pids+=($!)
for _ in $(seq 100); do
  if curl -sf -H "OPEN-SANDBOX-API-KEY: $key" "http://127.0.0.1:$cport/v1/nodes" | grep -q '"state":"Ready"'; then
    break
  fi
  sleep 0.1
done
if ! (cd "$dir" && "$node" scenario.mjs "127.0.0.1:$cport" "$key"); then
  echo "--- controller log"; cat "$dir/controller.log"; echo "--- agent log"; tail -n 30 "$dir/agent.log"
  exit 1
fi
