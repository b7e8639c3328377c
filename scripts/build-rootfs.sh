#!/usr/bin/env bash
# Builds a Debian root directory for a moat-agent profile (docs/rootfs.md): debootstrap, then the
# profile's packages, so that sandboxes find common dependencies without any network.
#
# The root is built beside the target in a temporary directory and renamed into place only when
# complete, so a failed or interrupted build never leaves a half-made root where the agent looks.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

readonly prog="build-rootfs"
readonly usage="usage: scripts/build-rootfs.sh PROFILE TARGET [options]

Builds a Debian root for a moat-agent profile into TARGET (an absolute path, e.g.
/srv/moat/roots/python). PROFILE is one of: python, node.

options:
  --mirror URL           Debian mirror (default http://deb.debian.org/debian)
  --security-mirror URL  security updates mirror (default http://deb.debian.org/debian-security;
                         'none' to build without security updates)
  --suite NAME           Debian release (default bookworm)
  --packages \"A B\"       extra Debian packages, added to the profile's set
  --npm-packages \"A B\"   npm packages installed globally (node profile; replaces the default set)
  --force                replace a TARGET that is not empty (only when no sandbox uses it)
  --dry-run              print what would be built and exit; needs neither root nor network
  -h, --help             this text

Needs root, network access to the mirror (and to the npm registry for the node profile), and
~0.5-1 GB of disk beside TARGET. Installs debootstrap with apt-get if it is missing."

# Packages every profile gets: TLS roots for the egress proxy's HTTPS, and small tools that
# model-generated code expects to find.
readonly base_packages="ca-certificates git less procps file unzip xz-utils bzip2 tzdata"
# Not python3-scipy (nor python3-sklearn, which needs it): in bookworm it depends on pythran and
# with it on g++, boost and the Python headers, ~700 MB more; add them with --packages.
# python3-munkres is there to keep scipy out: matplotlib's fonttools needs "scipy | munkres", and
# apt takes the first alternative unless the second is already chosen.
readonly python_packages="python3 python3-venv python3-pip python3-setuptools
  python3-wheel python3-numpy python3-pandas python3-matplotlib python3-munkres
  python3-requests python3-yaml python3-bs4 python3-lxml python3-dateutil python3-tz
  python3-jinja2 python3-pytest python3-pil python3-sympy python3-openpyxl python3-tabulate
  python3-tqdm python3-click python3-attr python3-simplejson"
readonly node_packages="nodejs npm"
# Major versions pinned to ones that run on bookworm's Node 18 (the newest uuid is ESM-only, which
# require() on Node 18 cannot load). tsx runs .ts files: ts-node 10 failed here on TypeScript 5.9
# and 7 alike.
readonly node_npm_default="typescript@5 tsx@4 lodash@4 axios@1 express@4 zod@3 dayjs@1 uuid@9"

die() {
  echo "$prog: $*" >&2
  exit 1
}
usage_error() {
  echo "$prog: $*" >&2
  echo "$prog: see scripts/build-rootfs.sh --help" >&2
  exit 2
}

profile="" target="" mirror="http://deb.debian.org/debian"
security_mirror="http://deb.debian.org/debian-security" suite="bookworm"
extra_packages="" npm_packages="" npm_set=0 force=0 dry_run=0
positional=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help)
      echo "$usage"
      exit 0
      ;;
    --mirror | --security-mirror | --suite | --packages | --npm-packages)
      [ $# -ge 2 ] || usage_error "$1 needs a value"
      case "$1" in
        --mirror) mirror="$2" ;;
        --security-mirror) security_mirror="$2" ;;
        --suite) suite="$2" ;;
        --packages) extra_packages="$2" ;;
        --npm-packages) npm_packages="$2" npm_set=1 ;;
      esac
      shift 2
      ;;
    --force) force=1 && shift ;;
    --dry-run) dry_run=1 && shift ;;
    --) shift && positional+=("$@") && break ;;
    -*) usage_error "unknown option \"$1\"" ;;
    *) positional+=("$1") && shift ;;
  esac
done
[ ${#positional[@]} -eq 2 ] || usage_error "expected PROFILE and TARGET, got ${#positional[@]} argument(s)"
profile="${positional[0]}" target="${positional[1]}"

case "$profile" in
  python) packages="$base_packages $python_packages" ;;
  node)
    packages="$base_packages $node_packages"
    [ $npm_set -eq 1 ] || npm_packages="$node_npm_default"
    ;;
  *) usage_error "unknown profile \"$profile\"; expected one of: python, node" ;;
esac
[ "$profile" = node ] || [ -z "$npm_packages" ] || usage_error "--npm-packages is for the node profile only"
# Word lists as arrays (-d '': across lines); names are checked before any use.
read -r -d '' -a package_list <<<"$packages $extra_packages" || true
read -r -d '' -a npm_list <<<"$npm_packages" || true
for p in "${package_list[@]}"; do
  [[ "$p" =~ ^[a-z0-9][a-z0-9.+-]+$ ]] || usage_error "\"$p\" is not a Debian package name"
done
for p in "${npm_list[@]}"; do
  [[ "$p" =~ ^(@[a-z0-9._-]+/)?[a-z0-9._-]+(@[A-Za-z0-9.^~<>=*-]+)?$ ]] ||
    usage_error "\"$p\" is not an npm package name"
done
[[ "$suite" =~ ^[a-z]+$ ]] || usage_error "--suite \"$suite\" is not a Debian release name"
[[ "$mirror" =~ ^(https?|file)://[^[:space:]]+$ ]] || usage_error "--mirror \"$mirror\" is not a URL"
[ "$security_mirror" = none ] || [[ "$security_mirror" =~ ^https?://[^[:space:]]+$ ]] ||
  usage_error "--security-mirror \"$security_mirror\" is not a URL (or 'none')"

# The target: absolute, normalised, not "/" nor a directory the host needs.
case "$target" in
  /*) ;;
  *) usage_error "TARGET \"$target\" must be an absolute path" ;;
esac
# Normalised without resolving symlinks, so that a symlinked target is seen and refused.
target="$(realpath -m -s -- "$target")"
case "$target" in
  / | /bin | /boot | /dev | /etc | /home | /lib | /lib64 | /proc | /root | /run | /sbin | /srv | /sys | \
    /tmp | /usr | /var | /var/tmp | /var/lib | /opt)
    usage_error "TARGET \"$target\" is a system directory; give a directory of its own, e.g. /srv/moat/roots/$profile"
    ;;
esac
if [ -L "$target" ]; then
  usage_error "TARGET \"$target\" is a symlink; give the real path"
elif [ -e "$target" ] && [ ! -d "$target" ]; then
  usage_error "TARGET \"$target\" exists and is not a directory"
elif [ -d "$target" ] && [ -n "$(ls -A -- "$target")" ] && [ $force -eq 0 ]; then
  usage_error "TARGET \"$target\" is not empty; pass --force to replace it (it is replaced only once the new root is complete)"
fi

if [ $dry_run -eq 1 ]; then
  echo "profile: $profile"
  echo "target: $target"
  echo "suite: $suite"
  echo "mirror: $mirror"
  echo "security mirror: $security_mirror"
  echo "packages: ${package_list[*]}"
  [ ${#npm_list[@]} -eq 0 ] || echo "npm packages: ${npm_list[*]}"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || die "run this script as root (debootstrap and chroot need it)"
[ "$(uname -s)" = Linux ] || die "needs Linux"

if ! command -v debootstrap >/dev/null; then
  echo "$prog: installing debootstrap"
  apt-get update -qq || die "apt-get update failed; check the host's apt sources and network"
  apt-get install -y -qq --no-install-recommends debootstrap >/dev/null ||
    die "apt-get install debootstrap failed"
fi

parent="$(dirname -- "$target")"
mkdir -p -- "$parent" || die "cannot create \"$parent\""
# Beside the target, so the final rename stays on one file system.
work="$(mktemp -d -- "$parent/.$(basename -- "$target").build.XXXXXX")"
chmod 0755 "$work"
log="$work.log" old=""

# Everything mounted under the work tree (our /proc, and whatever debootstrap mounted) is
# unmounted before the tree is moved or removed: rm -rf through a live /proc or /dev bind
# would reach the host.
unmount_under() {
  local m
  for m in $(findmnt -rn -o TARGET | grep -F -- "$1/" | sort -r); do
    umount -l -- "$m" 2>/dev/null || true
  done
}
cleanup() {
  local rc=$?
  if [ -n "$work" ] && [ -d "$work" ]; then
    unmount_under "$work"
    rm -rf --one-file-system -- "$work"
  fi
  rm -f -- "$log"
  if [ -n "$old" ] && [ -d "$old" ]; then rm -rf --one-file-system -- "$old"; fi
  [ $rc -eq 0 ] || echo "$prog: failed (exit $rc); nothing was changed at \"$target\"" >&2
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP
trap 'echo "$prog: line $LINENO: \"$BASH_COMMAND\" failed" >&2' ERR

in_root() { chroot "$work" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LC_ALL=C DEBIAN_FRONTEND=noninteractive "$@"; }

started=$(date +%s)
echo "$prog: debootstrap $suite from $mirror into $work"
debootstrap --variant=minbase --components=main "$suite" "$work" "$mirror" >"$log" 2>&1 || {
  tail -n 20 "$log" >&2
  die "debootstrap failed (log above); check --mirror and --suite"
}

# apt sources for the packages and their security updates.
{
  echo "deb $mirror $suite main"
  echo "deb $mirror $suite-updates main"
  [ "$security_mirror" = none ] || echo "deb $security_mirror $suite-security main"
} >"$work/etc/apt/sources.list"
# No daemon may start inside the chroot during installs.
printf '#!/bin/sh\nexit 101\n' >"$work/usr/sbin/policy-rc.d"
chmod 0755 "$work/usr/sbin/policy-rc.d"
# Name resolution for apt and npm during the build only; replaced below.
rm -f "$work/etc/resolv.conf"
cp -L /etc/resolv.conf "$work/etc/resolv.conf"
mount -t proc proc "$work/proc"

# No manuals, info pages or documentation (copyright files stay): nobody reads them in a sandbox.
cat >"$work/etc/dpkg/dpkg.cfg.d/moat-nodoc" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
EOF
rm -rf "$work"/usr/share/man/* "$work"/usr/share/info/*
find "$work/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete

# Without a terminal, apt would complain that it cannot log through a pty.
apt_get=(apt-get -y -qq -o Dpkg::Use-Pty=0)
echo "$prog: installing ${#package_list[@]} packages"
in_root "${apt_get[@]}" update || die "apt-get update inside the root failed; check --mirror"
in_root "${apt_get[@]}" dist-upgrade >/dev/null || die "apt-get dist-upgrade inside the root failed"
in_root "${apt_get[@]}" install --no-install-recommends "${package_list[@]}" >/dev/null ||
  die "apt-get install failed inside the root; is every name in the package list a $suite package?"

if [ ${#npm_list[@]} -gt 0 ]; then
  echo "$prog: npm install -g ${npm_list[*]}"
  # npm trusts what the host trusts for this download (a TLS-inspecting proxy's CA, say). The
  # bundle is a temporary file in /tmp, emptied below: the sandbox's root keeps Debian's CAs only.
  npm_env=()
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$work/tmp/host-ca.crt"
    npm_env=(NODE_EXTRA_CA_CERTS=/tmp/host-ca.crt)
  fi
  in_root "${npm_env[@]}" npm install -g --prefix /usr/local --no-audit --no-fund --loglevel=error \
    --fetch-timeout=60000 "${npm_list[@]}" ||
    die "npm install failed inside the root; check the network to the npm registry and the names"
  in_root npm cache clean --force >/dev/null 2>&1 || true
fi

# Python byte code, compiled once here: the root is read-only inside the sandbox, so Python
# cannot write its caches there and would otherwise recompile on every start.
if [ -x "$work/usr/bin/python3" ]; then
  in_root python3 -m compileall -q -j 0 /usr/lib/python3 /usr/lib/python3/dist-packages \
    >/dev/null 2>&1 || true
fi

# The manifest: what this root holds, for operators and for bug reports.
manifest="$work/etc/moat-rootfs.json"
{
  printf '{\n  "profile": "%s",\n  "suite": "%s",\n  "mirror": "%s",\n' "$profile" "$suite" "$mirror"
  printf '  "built": "%s",\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  printf '  "requested": [%s],\n' "$(printf '"%s",' "${package_list[@]}" | sed 's/,$//')"
  printf '  "packages": [\n'
  # shellcheck disable=SC2016  # dpkg-query's own ${...} fields
  in_root dpkg-query -W -f='${Package}\t${Version}\n' |
    sed -E 's/^([^\t]+)\t(.*)$/    {"name": "\1", "version": "\2"},/' | sed '$ s/,$//'
  printf '  ]'
  if [ ${#npm_list[@]} -gt 0 ]; then
    printf ',\n  "npm": [\n'
    for dir in "$work"/usr/local/lib/node_modules/*/ "$work"/usr/local/lib/node_modules/@*/*/; do
      [ -f "$dir/package.json" ] || continue
      # shellcheck disable=SC2016  # JavaScript, not shell
      in_root node -e 'const p = require(process.argv[1]);
        console.log(`    {"name": ${JSON.stringify(p.name)}, "version": ${JSON.stringify(p.version)}},`)' \
        "${dir#"$work"}package.json"
    done | sed '$ s/,$//'
    printf '  ]'
  fi
  printf '\n}\n'
} >"$manifest"

umount "$work/proc"
rm -f "$work/usr/sbin/policy-rc.d"
in_root apt-get clean
rm -rf "$work"/var/lib/apt/lists/* "$work"/var/cache/apt/*.bin "$work"/var/cache/debconf/*-old \
  "$work"/var/log/* "$work"/root/.npm "$work"/root/.cache "$work"/tmp/* "$work"/var/tmp/*

# What the sandbox runtime mounts over (sandbox/mounts.cc: its own /proc, /sys, /dev, /tmp, /run
# and /workspace) exists as empty directories, so the root also works with a runtime that binds
# it whole. /dev is emptied: its device nodes would never be used, only carried along.
find "$work/dev" -mindepth 1 -delete
for d in proc sys dev run tmp workspace; do
  mkdir -p "$work/$d"
done
chmod 0555 "$work/proc" "$work/sys"
chmod 0755 "$work/dev" "$work/run" "$work/workspace"
chmod 1777 "$work/tmp"
# The runtime binds its resolv.conf (the egress DNS stub) over /etc/resolv.conf and refuses a
# symlink there (it would point into /run, which the sandbox never sees): a regular file.
rm -f "$work/etc/resolv.conf"
printf 'nameserver 127.0.0.1\n' >"$work/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$work/etc/hosts"
printf 'sandbox\n' >"$work/etc/hostname"
: >"$work/etc/machine-id"

# Root-owned, writable by no one else: the sandbox mounts it nosuid, so set-id bits only matter
# if the tree is ever used elsewhere; they are dropped. Sticky /tmp and /var/tmp stay 1777.
chown -R -h root:root "$work"
find "$work" -xdev -type f -perm /6000 -exec chmod ug-s {} +
find "$work" -xdev ! -type l -perm -o+w ! -perm -1000 -exec chmod o-w {} +
chmod 0755 "$work"

# Into place: rename(2) cannot replace a non-empty directory, so the old root is moved aside
# first and removed last.
if [ -d "$target" ]; then
  if [ -z "$(ls -A -- "$target")" ]; then
    rmdir -- "$target" || die "cannot remove the empty \"$target\" (a mount point?)"
  else
    old="$(mktemp -u -- "$parent/.$(basename -- "$target").old.XXXXXX")"
    mv -T -- "$target" "$old" || die "cannot move the old \"$target\" aside (a mount point?)"
  fi
fi
mv -T -- "$work" "$target"
work=""
if [ -n "$old" ]; then rm -rf --one-file-system -- "$old" && old=""; fi

size="$(du -sh --one-file-system -- "$target" | cut -f1)"
echo "$prog: built the $profile root at \"$target\" ($size, $(($(date +%s) - started)) s)"
