#!/usr/bin/env bash
# Cross-builds moat for ARM64 (aarch64) and runs the unit tests that do not need the kernel
# under qemu-user: the seccomp programs for ARM64, the policy and output modules. (seccomp_load
# fails under qemu-user, and namespaces are not emulated, so the sandbox tests run natively only.)
# usage: sudo scripts/cross-arm64.sh
# env:   TARGETS="moat e2e_syscalls_test ..."  build only these ARM64 targets and run nothing
#        (scripts/vm-arm64.sh: what its VM runs); the native build is then only the generator's
#        output, not the whole tree.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
# A native build first: its generator compiles the seccomp programs of both architectures
# (libseccomp cannot probe the kernel under qemu-user).
programs=sandbox/seccomp/generated/seccomp_programs.inc
if [ -n "${TARGETS:-}" ]; then
  scripts/install-deps.sh
  [ -f build/build.ninja ] || cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build --target "$programs"
else
  scripts/build.sh
fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then dpkg --add-architecture arm64; fi
# gcc-arm-linux-gnueabihf: the 32-bit ARM attack program of the ARM64 lane (AArch32 calls).
pkgs=(g++-aarch64-linux-gnu qemu-user-static gcc-arm-linux-gnueabihf
      libseccomp-dev:arm64 libabsl-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64
      libyaml-cpp0.7:arm64 libssl-dev:arm64 libcpp-httplib-dev:arm64
      libprometheus-cpp-core1.0:arm64 libprometheus-cpp-pull1.0:arm64
      libprometheus-cpp-push1.0:arm64 libcivetweb-dev:arm64 libcurl4-openssl-dev:arm64
      libsqlite3-dev:arm64)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# libyaml-cpp-dev and prometheus-cpp-dev cannot be installed for two architectures at once
# (installing the arm64 one removes the native one); their headers are the same, so take only the
# arm64 libraries and CMake files out of the packages.
for dev in libyaml-cpp-dev:yaml-cpp prometheus-cpp-dev:prometheus-cpp; do
  if [ ! -f "/usr/lib/aarch64-linux-gnu/cmake/${dev#*:}/${dev#*:}-config.cmake" ]; then
    tmp=$(mktemp -d); chmod 755 "$tmp"
    (cd "$tmp" && apt-get download -qq "${dev%%:*}:arm64" && dpkg-deb -x ./*.deb root \
       && cp -a root/usr/lib/aarch64-linux-gnu/. /usr/lib/aarch64-linux-gnu/)
    rm -rf "$tmp"
  fi
done
cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMOAT_SECCOMP_PROGRAMS="$PWD/build/$programs" >/dev/null
if [ -n "${TARGETS:-}" ]; then
  # shellcheck disable=SC2086
  cmake --build build-arm64 -j"$(nproc)" --target $TARGETS
  exit 0
fi
cmake --build build-arm64 -j"$(nproc)"
file build-arm64/bin/moat
for t in bpf_interpreter_test seccomp_policy_test units_test \
         domain_pattern_test policy_test sanitizer_test secret_scanner_test result_test \
         target_test ip_address_test rules_test dns_message_test http_message_test socks5_test \
         config_test registry_test; do
  qemu-aarch64-static "build-arm64/tests/$t" --gtest_brief=1
done
