#!/usr/bin/env bash
# Builds the Kubernetes binaries the real-cluster lane (scripts/kube-lane.sh) runs, from Debian's
# source package `kubernetes` (1.20, deb-src) with Debian's Go 1.19, into a cache outside the
# repository. Debian packages no kube-apiserver or kubelet binaries, and no registry is reachable
# here, so the source package is the only Debian-built Kubernetes there is.
#   - the vendored github.com/modern-go/reflect2 1.0.1 segfaults under Go >= 1.18 (json-iterator's
#     map iteration, first seen on a custom-resource create): replaced with Debian's 1.0.2
#     (golang-github-modern-go-reflect2-dev);
#   - built with the source's own make (GOPATH mode, generates zz_generated.openapi.go first);
#     a plain `go build ./cmd/...` fails on the vendored go.mod.
# Idempotent: binaries already built are kept; the source tree (with its Go build cache under
# _output/) stays in the cache, so building another binary reuses the packages compiled.
# usage: scripts/kube-build.sh [WHAT...]   (default: kube-apiserver kube-controller-manager;
#        as root: installs Debian packages (install-deps.sh --with-kube) and enables deb-src)
# env: MOAT_KUBE_CACHE (default /var/cache/moat-kube), GOMAXPROCS (default 1: the build leaves
#      the other core to everyone else)
set -euo pipefail
cache="${MOAT_KUBE_CACHE:-/var/cache/moat-kube}"
what=("$@")
[ ${#what[@]} -gt 0 ] || what=(kube-apiserver kube-controller-manager)
todo=()
for w in "${what[@]}"; do [ -x "$cache/bin/$w" ] || todo+=("$w"); done
if [ ${#todo[@]} -eq 0 ]; then echo "$cache/bin"; exit 0; fi
[ "$(id -u)" = 0 ] || { echo "kube-build: run as root (apt-get, deb-src)" >&2; exit 1; }
export DEBIAN_FRONTEND=noninteractive

"$(dirname "$0")/install-deps.sh" --with-kube
if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  # Debian's own archive, the same entries apt already uses, for source packages.
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
    > /etc/apt/sources.list.d/moat-debian-src.sources
  apt-get update -qq
fi

mkdir -p "$cache/src" "$cache/bin"
cd "$cache/src"
if ! ls -d kubernetes-*/ >/dev/null 2>&1; then
  apt-get source --download-only -qq kubernetes >/dev/null
  tar xzf kubernetes_*.orig.tar.gz
fi
k="$cache/src/$(ls -d kubernetes-*/ | head -1)"
if [ ! -f "$k/.moat-reflect2" ]; then
  rm -rf "$k/vendor/github.com/modern-go/reflect2"
  cp -rL /usr/share/gocode/src/github.com/modern-go/reflect2 "$k/vendor/github.com/modern-go/reflect2"
  rm -f "$k"/vendor/github.com/modern-go/reflect2/*_test.go
  touch "$k/.moat-reflect2"
fi
targets=()
for w in "${todo[@]}"; do targets+=("cmd/$w"); done
echo "kube-build: building ${todo[*]} in $k (log: $cache/build.log)" >&2
(cd "$k" && env -u GOFLAGS -u GOPATH -u GOCACHE GOMAXPROCS="${GOMAXPROCS:-1}" \
   make WHAT="${targets[*]}" >"$cache/build.log" 2>&1) || { tail -30 "$cache/build.log" >&2; exit 1; }
for w in "${todo[@]}"; do cp "$k/_output/bin/$w" "$cache/bin/$w"; done
"$cache/bin/kube-apiserver" --version >&2 2>/dev/null || true
echo "$cache/bin"
