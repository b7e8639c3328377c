#!/usr/bin/env bash
# Checks scripts/build-rootfs.sh without building anything (no debootstrap, no network, no root):
# its help, argument errors, the refusal of a non-empty target, and the plan --dry-run prints.
# usage: scripts/build_rootfs_test.sh [path/to/build-rootfs.sh]
set -uo pipefail

script="${1:-$(dirname -- "$0")/build-rootfs.sh}"
scratch="$(mktemp -d)"
trap 'rm -rf -- "$scratch"' EXIT
failures=0

# Nothing here may build a root: the tools a build starts with are stubs that fail and leave a
# mark, so a check that slips past the script's validation fails instead of building.
mkdir "$scratch/bin"
for tool in debootstrap apt-get chroot; do
  printf '#!/bin/sh\ntouch "%s/built"\necho "stub %s: a test tried to build" >&2\nexit 97\n' \
    "$scratch" "$tool" >"$scratch/bin/$tool"
  chmod +x "$scratch/bin/$tool"
done
export PATH="$scratch/bin:$PATH"

# expect NAME CODE PATTERN ARGS...: runs the script with ARGS; its exit code must be CODE and its
# output (stdout and stderr) must match the extended regex PATTERN.
expect() {
  local name="$1" code="$2" pattern="$3"
  shift 3
  local out rc
  out="$("$script" "$@" 2>&1)"
  rc=$?
  if [ "$rc" -ne "$code" ]; then
    echo "FAIL $name: exit $rc, expected $code; output:"$'\n'"$out"
    failures=$((failures + 1))
  elif ! grep -Eq -- "$pattern" <<<"$out"; then
    echo "FAIL $name: output does not match /$pattern/:"$'\n'"$out"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

expect help 0 'usage: scripts/build-rootfs.sh PROFILE TARGET' --help
expect help_lists_profiles 0 'python, node' -h
expect no_arguments 2 'expected PROFILE and TARGET'
expect one_argument 2 'expected PROFILE and TARGET, got 1' python
expect bad_profile 2 'unknown profile "ruby"; expected one of: python, node' ruby "$scratch/r"
expect unknown_option 2 'unknown option "--frobnicate"' python "$scratch/r" --frobnicate
expect option_without_value 2 '--mirror needs a value' python "$scratch/r" --mirror
expect relative_target 2 'must be an absolute path' python roots/python
expect system_target 2 '"/usr" is a system directory' python /usr/
expect host_root_target 2 '"/" is a system directory' python /
expect bad_package_name 2 '"rm;x" is not a Debian package name' python "$scratch/r" --packages "rm;x"
expect npm_for_python 2 'for the node profile only' python "$scratch/r" --npm-packages lodash
expect bad_mirror 2 'is not a URL' python "$scratch/r" --mirror "deb.debian.org"

: >"$scratch/file"
expect target_is_file 2 'exists and is not a directory' python "$scratch/file"
ln -s "$scratch" "$scratch/link"
expect target_is_symlink 2 'is a symlink' python "$scratch/link"

# A non-empty target is refused and left as it was.
mkdir "$scratch/full" && echo keep >"$scratch/full/precious"
expect non_empty_refused 2 'is not empty; pass --force' python "$scratch/full"
if [ "$(cat "$scratch/full/precious" 2>/dev/null)" != keep ]; then
  echo "FAIL non_empty_untouched: the refused target was changed"
  failures=$((failures + 1))
fi
# With --force it passes the checks (--dry-run stops before building).
expect non_empty_forced 0 'target: .*/full$' python "$scratch/full" --force --dry-run

# The plans: each profile's package set, with --packages added.
expect python_plan 0 'packages: .*python3-numpy .*python3-pandas' python "$scratch/new/python" --dry-run
expect python_plan_extra 0 'packages: .* python3-flask$' python "$scratch/r" --dry-run --packages python3-flask
expect node_plan 0 'packages: .*nodejs npm' node "$scratch/r" --dry-run
expect node_plan_npm 0 'npm packages: typescript@5' node "$scratch/r" --dry-run
expect node_plan_npm_replaced 0 'npm packages: left-pad$' node "$scratch/r" --dry-run --npm-packages left-pad
expect empty_target_accepted 0 'profile: python' python "$scratch/new/python" --dry-run
if [ -e "$scratch/new" ]; then
  echo "FAIL dry_run_writes_nothing: --dry-run created \"$scratch/new\""
  failures=$((failures + 1))
fi

if [ -e "$scratch/built" ]; then
  echo "FAIL no_build: a check reached debootstrap, apt-get or chroot"
  failures=$((failures + 1))
fi
if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all checks passed"
