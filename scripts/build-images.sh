#!/usr/bin/env bash
# Builds moat's OCI images here, without any registry: a Debian 12 minbase root from debootstrap
# (Debian's packages, from the mirror apt already uses), the binaries copied in, committed with
# buildah, and saved as OCI archives plus a multi-arch manifest list in buildah's local storage.
# The same images as deploy/images/*.Dockerfile, for machines that have no registry to pull
# debian:bookworm-slim from.
#
# usage: sudo scripts/build-images.sh [--arch amd64|arm64]... [--bin-dir ARCH=DIR]... [--tag TAG]
#                                    [--roots-only]
#   --arch      architectures to build (default: amd64; arm64: Debian's arm64 packages unpacked
#               without debootstrap's second stage, the binaries checked under qemu-user-static)
#   --bin-dir   where an architecture's binaries are (default amd64=build/bin,
#               arm64=build-arm64/bin, as scripts/cross-arm64.sh builds them)
#   --tag       image tag (default: the chart's appVersion)
#   --roots-only  only make (or refresh) the cached Debian roots, the part that needs the
#               mirror; the images follow once the binaries are built
# Output in build/images/: moat-agent-TAG-ARCH.tar, moat-controller-TAG-ARCH.tar (OCI archives;
# `ctr -n k8s.io images import` takes them), moat-agent-TAG.tar and moat-controller-TAG.tar (an
# OCI image index over every architecture built) and *.contents.txt listing every file with its
# size.
# An image whose binary is missing (moat-controller before it is built) is skipped with a note.
# An image whose binaries, root and tag are those it was last built from (its .inputs file) and
# that is still in buildah's storage is kept as it is (scripts/kube-lane.sh --kubelet asks for
# the images on every run).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "build-images: run as root (debootstrap, buildah)" >&2; exit 1; }
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "build-images: $tool is missing: apt-get install buildah debootstrap" >&2; exit 1; }
done
archs=()
roots_only=0
declare -A bins=([amd64]="$PWD/build/bin" [arm64]="$PWD/build-arm64/bin")
tag="$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/moat/Chart.yaml)"
while [ $# -gt 0 ]; do
  case "$1" in
    --arch) archs+=("$2"); shift ;;
    --bin-dir) bins["${2%%=*}"]="$(cd "${2#*=}" && pwd)"; shift ;;
    --tag) tag="$2"; shift ;;
    --roots-only) roots_only=1 ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
  esac
  shift
done
[ ${#archs[@]} -gt 0 ] || archs=(amd64)
out="$PWD/build/images"
mkdir -p "$out/roots"
# The mirror apt uses here (deb822 or one-line sources), so no host is written into this script.
mirror="${MOAT_DEBIAN_MIRROR:-$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -1)}"
[ -n "$mirror" ] || mirror="$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null)"
[ -n "$mirror" ] || { echo "build-images: no Debian mirror found in apt's sources; set MOAT_DEBIAN_MIRROR" >&2; exit 1; }
export STORAGE_DRIVER="${STORAGE_DRIVER:-vfs}"  # works inside containers and on any filesystem

common=libbrotli1,libcpp-httplib0.11,libprometheus-cpp-core1.0,libssl3,zlib1g,ca-certificates
declare -A include=(
  [agent]="$common,curl,python3"
  [controller]="$common,libsqlite3-0"
)
declare -A binaries=([agent]="moat-agent moat-init moat-probe" [controller]="moat-controller")

qemu_for() {  # $1 = a Debian architecture: its qemu-user binary
  case "$1" in arm64) echo qemu-aarch64-static ;; *) echo "qemu-$1-static" ;; esac
}

root_for() {  # $1 = image, $2 = arch: a trimmed debootstrap root, cached by its package list
  local root="$out/roots/$1-$2" stamp="${include[$1]}"
  if [ "$(cat "$root.stamp" 2>/dev/null)" != "$stamp" ]; then
    rm -rf "$root"
    if [ "$2" = "$(dpkg --print-architecture)" ]; then
      debootstrap --variant=minbase --arch "$2" --include="${include[$1]}" bookworm "$root" "$mirror" >&2
    else
      # debootstrap's second stage runs every maintainer script under qemu-user: ~30 min here.
      # A runtime image needs none of them but two, so: the first stage (fetches every package,
      # unpacks the required ones), every fetched package unpacked the same way, then what the
      # images need of the configuration: the account files (base-passwd's postinst) and the
      # dynamic linker's cache (ldconfig, under qemu). Each binary is then started in the root.
      command -v "$(qemu_for "$2")" >/dev/null || { echo "build-images: $2 needs qemu-user-static" >&2; exit 1; }
      debootstrap --foreign --variant=minbase --arch "$2" --include="${include[$1]}" bookworm "$root" "$mirror" >&2
      for deb in "$root"/var/cache/apt/archives/*.deb; do
        dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$root"
      done
      cp "$root/usr/share/base-passwd/passwd.master" "$root/etc/passwd"
      cp "$root/usr/share/base-passwd/group.master" "$root/etc/group"
      cp "/usr/bin/$(qemu_for "$2")" "$root/usr/bin/"
      chroot "$root" "/usr/bin/$(qemu_for "$2")" /sbin/ldconfig
      rm -f "$root/usr/bin/$(qemu_for "$2")"
      rm -rf "$root/debootstrap"
    fi
    # What a runtime image does not need: package caches, docs, manuals, translations.
    rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/share/doc \
      "$root"/usr/share/man "$root"/usr/share/info "$root"/usr/share/locale "$root"/var/log/*
    echo "$stamp" > "$root.stamp"
  fi
  echo "$root"
}

if [ $roots_only = 1 ]; then
  for image in agent controller; do for arch in "${archs[@]}"; do root_for "$image" "$arch"; done; done
  exit 0
fi

built=()
for image in agent controller; do
  name="moat-$image"
  manifest="localhost/moat/$name:$tag"
  added=0
  index_inputs=""
  for arch in "${archs[@]}"; do
    bin="${bins[$arch]:-}"
    missing=""
    for b in ${binaries[$image]}; do [ -x "$bin/$b" ] || missing="$missing $b"; done
    if [ -n "$missing" ]; then
      echo "build-images: skip $name for $arch: not in ${bin:-?}:$missing"
      continue
    fi
    root="$(root_for "$image" "$arch")"
    inputs="$(cat "$root.stamp"; echo "$tag $arch"
              for b in ${binaries[$image]}; do sha256sum "$bin/$b" | cut -d' ' -f1; done)"
    if [ "$(cat "$out/$name-$tag-$arch.inputs" 2>/dev/null)" = "$inputs" ] \
       && [ -f "$out/$name-$tag-$arch.tar" ] \
       && buildah inspect --type image "localhost/moat/$name:$tag-$arch" >/dev/null 2>&1; then
      echo "build-images: $name:$tag-$arch: unchanged (same binaries and root), kept"
    else
      rm -f "$out/$name-$tag-$arch.inputs"
      ctr="$(buildah from --arch "$arch" scratch)"
      buildah copy --quiet "$ctr" "$root" / >/dev/null
      # Without debug information (a RelWithDebInfo agent is ~60 MB, ~10 MB stripped).
      strip="strip"
      [ "$arch" = "$(dpkg --print-architecture)" ] || strip="aarch64-linux-gnu-strip"
      stripped="$(mktemp -d)"
      for b in ${binaries[$image]}; do
        cp "$bin/$b" "$stripped/$b"
        if command -v "$strip" >/dev/null; then "$strip" --strip-debug "$stripped/$b"; fi
        buildah copy --quiet --chmod 0755 "$ctr" "$stripped/$b" "/usr/local/bin/$b" >/dev/null
      done
      # Each binary starts in the image's root (another architecture's under qemu-user): every
      # shared library it needs is there. (--help: the usage, or a usage error; the dynamic
      # linker's failure is exit status 127 and "error while loading shared libraries".)
      mnt="$(buildah mount "$ctr")"
      emu=()
      if [ "$arch" != "$(dpkg --print-architecture)" ]; then
        cp "/usr/bin/$(qemu_for "$arch")" "$mnt/usr/bin/"
        emu=("/usr/bin/$(qemu_for "$arch")")
      fi
      for b in ${binaries[$image]}; do
        rc=0
        said="$(chroot "$mnt" "${emu[@]}" "/usr/local/bin/$b" --help 2>&1)" || rc=$?
        if [ $rc = 127 ] || grep -q "error while loading shared libraries" <<<"$said"; then
          echo "build-images: $b ($arch) does not start in its image's root: $said" >&2
          buildah umount "$ctr" >/dev/null; exit 1
        fi
      done
      [ ${#emu[@]} = 0 ] || rm -f "$mnt${emu[0]}"
      buildah umount "$ctr" >/dev/null
      buildah config --os linux --arch "$arch" \
        --entrypoint "[\"/usr/local/bin/$name\"]" --cmd "--config /etc/moat/$image.yaml" \
        --label org.opencontainers.image.title="$name" \
        --label org.opencontainers.image.version="$tag" "$ctr"
      if [ "$image" = controller ]; then buildah config --user 65532:65532 "$ctr"; fi
      buildah commit --quiet --rm "$ctr" "localhost/moat/$name:$tag-$arch" >/dev/null
      buildah push --quiet "localhost/moat/$name:$tag-$arch" "oci-archive:$out/$name-$tag-$arch.tar:moat/$name:$tag"
      # The image's contents: every file with its size, largest first, and the total.
      {
        echo "# $name:$tag ($arch): debootstrap minbase with ${include[$image]}, plus ${binaries[$image]}"
        (cd "$root" && find . -type f -printf '%i %s\t/%P\n' | sort -u -k1,1n | cut -d' ' -f2-)
        for b in ${binaries[$image]}; do printf '%s\t/usr/local/bin/%s\n' "$(stat -c %s "$stripped/$b")" "$b"; done
      } | sort -t$'\t' -k1,1nr > "$out/$name-$arch.contents.txt"
      rm -rf "$stripped"
      total="$(awk -F'\t' '!/^#/ {s += $1} END {printf "%.0f", s / 1048576}' "$out/$name-$arch.contents.txt")"
      files="$(grep -vc '^#' "$out/$name-$arch.contents.txt")"
      echo "build-images: $name:$tag-$arch: $files files, $total MiB uncompressed; archive $(du -m "$out/$name-$tag-$arch.tar" | cut -f1) MiB"
      echo "$inputs" > "$out/$name-$tag-$arch.inputs"
    fi
    if [ $added = 0 ]; then
      buildah manifest rm "$manifest" >/dev/null 2>&1 || true
      buildah manifest create "$manifest" >/dev/null
    fi
    buildah manifest add --arch "$arch" "$manifest" "localhost/moat/$name:$tag-$arch" >/dev/null
    added=1
    index_inputs="$index_inputs$inputs"$'\n'
    built+=("$out/$name-$tag-$arch.tar")
  done
  [ $added = 0 ] && continue
  # Every architecture in one OCI archive: an image index over the per-architecture images
  # (rewritten only when one of them or the set of architectures changed).
  if [ "$(cat "$out/$name-$tag.inputs" 2>/dev/null)"$'\n' != "$index_inputs" ] \
     || [ ! -f "$out/$name-$tag.tar" ]; then
    rm -f "$out/$name-$tag.inputs"
    buildah manifest push --quiet --all --format oci "$manifest" \
      "oci-archive:$out/$name-$tag.tar:moat/$name:$tag" >/dev/null
    printf '%s' "$index_inputs" > "$out/$name-$tag.inputs"
  fi
  echo "build-images: $name:$tag, an OCI index for $(buildah manifest inspect "$manifest" \
    | python3 -c 'import json, sys; print(" ".join(m["platform"]["architecture"] for m in json.load(sys.stdin)["manifests"]))'):" \
    "$out/$name-$tag.tar ($(du -m "$out/$name-$tag.tar" | cut -f1) MiB)"
  built+=("$out/$name-$tag.tar")
done
[ ${#built[@]} -gt 0 ] || { echo "build-images: built nothing" >&2; exit 1; }
printf 'build-images: %s\n' "${built[@]}"
