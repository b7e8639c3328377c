#!/usr/bin/env bash
# Installs everything moat needs to build, test and benchmark, from Debian packages only.
# Idempotent: packages already present are left alone, and apt-get update runs only when needed.
# usage: scripts/install-deps.sh [--with-peers] [--with-vm] [--with-kube] [--with-images]
#                               [--with-kubelet]
#   --with-peers adds bubblewrap and crun for bench/; --with-vm adds QEMU (x86-64 and ARM),
#   debootstrap and cpio for the real-kernel lanes (scripts/vm-test.sh, scripts/vm-arm64.sh);
#   --with-kube adds what the real-Kubernetes lane (scripts/kube-lane.sh) builds Kubernetes with
#   (Debian's Go; the source comes from Debian's `kubernetes` source package,
#   scripts/kube-build.sh); --with-images adds buildah, debootstrap and qemu-user-static for
#   scripts/build-images.sh; --with-kubelet what `scripts/kube-lane.sh --kubelet` runs pods with
#   (containerd, runc, CNI plugins, iptables).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

pkgs=(build-essential cmake ninja-build pkg-config
      libcpp-httplib-dev libyaml-cpp-dev prometheus-cpp-dev libseccomp-dev libabsl-dev
      libgtest-dev libgmock-dev nlohmann-json3-dev libssl-dev libsqlite3-dev
      python3 procps iproute2 util-linux curl openssl git
      etcd-server etcd-client  # the etcd store engine (several controller replicas) and its tests
      clang)  # scripts/clang-check.sh: the thread-safety analysis GCC does not do
for arg in "$@"; do
  case "$arg" in
    --with-peers) pkgs+=(bubblewrap crun) ;;
    --with-vm) pkgs+=(qemu-system-x86 qemu-system-arm debootstrap e2fsprogs cpio) ;;
    # golang-go is Go 1.19, what Debian builds its kubernetes 1.20 with; reflect2 1.0.2 replaces
    # the vendored 1.0.1, which crashes under Go >= 1.18; dpkg-dev for apt-get source.
    --with-kube) pkgs+=(golang-go golang-github-modern-go-reflect2-dev rsync make dpkg-dev) ;;
    --with-images) pkgs+=(buildah debootstrap qemu-user-static binutils-aarch64-linux-gnu) ;;
    # scripts/kube-lane.sh --kubelet: the pods' runtime, kube-proxy's iptables, a DNS stand-in.
    --with-kubelet) pkgs+=(containerd runc iptables dnsmasq-base containernetworking-plugins) ;;
  esac
done
# Deploy checks (scripts/deploy-check.sh): promtool and a real Prometheus, unzip for helm's npm
# package, PyYAML for the mixin's lint; node and npm from Debian unless some node is installed
# (npm also serves the Pi lane, integrations/pi/test.sh, which brings its own Node 22 and Pis).
pkgs+=(prometheus unzip python3-yaml)
command -v npm >/dev/null || pkgs+=(nodejs npm)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing Debian packages: ${missing[*]}" >&2
  echo "install-deps: run this script as root (or, as root: apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
