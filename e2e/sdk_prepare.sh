# Sourced by the SDK suites (e2e/agent/sdk, e2e/controller/sdk) after they set `here` (their own
# folder): a scratch directory under /var/tmp named after $1, removed at exit with the daemons
# the suite adds to `pids`; the suite's package.json, package-lock.json and scenario.mjs copied
# into it and the SDK installed there with npm ci; `node`, a node >= 20 to run the scenario with
# (the SDK's engines; kept across runs beside the other npm caches); free_port. Exits 77 (ctest:
# skipped) when npm cannot install the SDK (no registry reachable).
# usage: source sdk_prepare.sh NAME
dir=$(mktemp -d "/var/tmp/$1.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

cp "$here/package.json" "$here/package-lock.json" "$here/scenario.mjs" "$dir/"
e2e=$(dirname "${BASH_SOURCE[0]}")
node=$("$e2e/sdk_node.sh" "${MOAT_SDK_NODE_DIR:-/var/cache/moat-e2e/sdk-node}") || exit $?
if ! (cd "$dir" && npm ci --no-audit --no-fund --silent >/dev/null 2>&1); then
  echo "sdk_test: npm could not install @alibaba-group/opensandbox@0.1.11; skipping" >&2
  exit 77
fi

# A loopback port nothing listens on now.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
