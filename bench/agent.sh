#!/usr/bin/env bash
# moat-agent through its HTTP API against crun doing the same work: warm command latency, cold
# start, commands per second with 2 clients, memory per idle warm sandbox (docs/performance.md,
# "Agent").
#
# usage: bench/agent.sh [agent_bench flags...]     e.g. bench/agent.sh --commands=500 --pool=10
#
# Builds nothing: build first with `ninja -C build -j1 moat-agent agent_bench`. Run it as root.
# Everything lives in a temp dir under /var/tmp (sandbox roots must not be under /tmp): the
# agent's config, token and state, and crun's bundle. The agent listens on a free loopback port
# and is stopped, and the dir removed, on exit.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
agent_bin="$repo/build/bin/moat-agent"
bench_bin="$repo/build/bin/agent_bench"
for bin in "$agent_bin" "$bench_bin"; do
  if [[ ! -x "$bin" ]]; then
    echo "bench/agent.sh: no \"$bin\"; build it: ninja -C build -j1 moat-agent agent_bench" >&2
    exit 1
  fi
done
if [[ $(id -u) -ne 0 ]]; then
  echo "bench/agent.sh: run it as root (the agent and crun make namespaces and cgroups)" >&2
  exit 1
fi

# The pool depth the agent keeps and the bench measures: --pool=K if given, else 20.
pool=20
for arg in "$@"; do
  case "$arg" in --pool=*) pool="${arg#--pool=}" ;; esac
done

tmp="$(mktemp -d /var/tmp/moat-agent-bench.XXXXXX)"
agent_pid=""
cleanup() {
  if [[ -n "$agent_pid" ]] && kill -0 "$agent_pid" 2>/dev/null; then
    kill -TERM "$agent_pid"
    wait "$agent_pid" || true
  fi
  if mountpoint -q "$tmp/bundle/rootfs"; then
    echo "bench/agent.sh: \"$tmp/bundle/rootfs\" is a mount point; not deleting $tmp" >&2
    return
  fi
  rm -rf --one-file-system "$tmp"
}
trap cleanup EXIT

install -d -m 700 "$tmp/state"
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/agent.token")
# A free loopback port: the kernel picks one, which is then released for the agent.
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
cat >"$tmp/agent.yaml" <<YAML
listen: {address: 127.0.0.1, port: $port}
token_file: $tmp/agent.token
state_dir: $tmp/state
profiles:
  - name: default
    limits: {cpus: 1, memory: 256MiB, pids: 128, workspace: 64MiB}
    pool: {floor: $pool, ceiling: $pool}
YAML

# crun's bundle, the same as bench/run.sh's; agent_bench writes one config per command from it.
# shellcheck source=bench/crun_bundle.sh
. "$repo/bench/crun_bundle.sh"
write_crun_bundle "$tmp/bundle"

cd "$tmp"
"$agent_bin" --config "$tmp/agent.yaml" 2>"$tmp/agent.log" &
agent_pid=$!
for _ in $(seq 100); do
  # Any HTTP answer means it is listening.
  if curl -s -o /dev/null -H "Authorization: Bearer $(cat "$tmp/agent.token")" \
    "http://127.0.0.1:$port/health"; then break; fi
  if ! kill -0 "$agent_pid" 2>/dev/null; then
    echo "bench/agent.sh: the agent exited; its log:" >&2
    cat "$tmp/agent.log" >&2
    agent_pid=""
    exit 1
  fi
  sleep 0.1
done
echo "bench/agent.sh: agent pid $agent_pid on 127.0.0.1:$port, pool $pool; crun bundle" \
  "$tmp/bundle as bench/run.sh makes it" >&2
status=0
"$bench_bin" --port="$port" --token-file="$tmp/agent.token" --agent-pid="$agent_pid" \
  --crun-bundle="$tmp/bundle" "$@" || status=$?
if [[ $status -ne 0 ]]; then
  echo "bench/agent.sh: agent_bench failed; the agent's log (last 20 lines):" >&2
  tail -20 "$tmp/agent.log" >&2
fi
exit $status
