#!/usr/bin/env bash
# Cross-builds moat for ARM64 (aarch64) and runs the unit tests that do not need the kernel
# under qemu-user: the seccomp programs for ARM64, the policy and output modules. (seccomp_load
# fails under qemu-user, and namespaces are not emulated, so the sandbox tests run natively only.)
# usage: sudo scripts/cross-arm64.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
# A native build first: its generator compiles the seccomp programs of both architectures
# (libseccomp cannot probe the kernel under qemu-user).
scripts/build.sh
if ! dpkg --print-foreign-architectures | grep -qx arm64; then dpkg --add-architecture arm64; fi
apt-get update -qq
apt-get install -y -qq --no-install-recommends g++-aarch64-linux-gnu qemu-user-static \
  libseccomp-dev:arm64 libabsl-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64 \
  libyaml-cpp0.7:arm64 libssl-dev:arm64 libcpp-httplib-dev:arm64 \
  libprometheus-cpp-core1.0:arm64 libprometheus-cpp-pull1.0:arm64 \
  libprometheus-cpp-push1.0:arm64 libcivetweb-dev:arm64 libcurl4-openssl-dev:arm64 \
  libsqlite3-dev:arm64 >/dev/null
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
  -DMOAT_SECCOMP_PROGRAMS="$PWD/build/sandbox/seccomp/generated/seccomp_programs.inc" >/dev/null
cmake --build build-arm64 -j"$(nproc)"
file build-arm64/bin/moat
for t in bpf_interpreter_test seccomp_policy_test units_test \
         domain_pattern_test policy_test sanitizer_test secret_scanner_test result_test \
         target_test ip_address_test rules_test dns_message_test http_message_test socks5_test \
         config_test registry_test; do
  qemu-aarch64-static "build-arm64/tests/$t" --gtest_brief=1
done
