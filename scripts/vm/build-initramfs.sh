#!/usr/bin/env bash
# Builds the ARM64 lane's guest (scripts/vm-arm64.sh): Debian 12's arm64 kernel and a busybox
# initramfs, from two Debian packages (linux-image-*-arm64, busybox-static), in seconds: nothing
# runs under emulation while building (a full arm64 debootstrap needs its second stage under
# qemu-user, ~30 min). Init switches to a tmpfs root (an initramfs root cannot be pivot_root'ed
# from, and every sandbox pivots), mounts a pure cgroup v2 hierarchy (no systemd), the 9p shares
# and an ext4 scratch disk at /srv, runs /mnt/host/run.sh, writes its status to /mnt/host/rc and
# "VMLANE-RC=N" on the console, and powers off.
#
# usage: scripts/vm/build-initramfs.sh OUTDIR
# result: OUTDIR/vmlinuz, OUTDIR/initrd.img, OUTDIR/KERNEL (the kernel's version)
# env:   DEBCACHE (the downloaded .debs, reused; default OUTDIR.debs)
#        LIBS="path ..."  shared libraries of the dynamically linked test binaries, copied with
#                         the loader (scripts/vm-arm64.sh passes what the binaries need)
# needs: the arm64 dpkg architecture (scripts/cross-arm64.sh adds it), cpio.
set -euo pipefail
OUT=${1:?usage: build-initramfs.sh OUTDIR}
DEBCACHE=${DEBCACHE:-$OUT.debs}
t0=$(date +%s)
mkdir -p "$OUT" "$DEBCACHE"
# The kernel package linux-image-arm64 points at today (its version is in the name).
kpkg=$(apt-cache depends linux-image-arm64:arm64 | sed -n 's/^ *Depends: \(linux-image-[0-9].*-arm64\).*/\1/p' | head -1)
[ -n "$kpkg" ] || { echo "build-initramfs: no linux-image-arm64 in apt's lists (apt-get update)" >&2; exit 1; }
kdeb=$(ls "$DEBCACHE/${kpkg}"_*_arm64.deb 2>/dev/null | tail -1 || true)
bdeb=$(ls "$DEBCACHE"/busybox-static_*_arm64.deb 2>/dev/null | tail -1 || true)
if [ -z "$kdeb" ] || [ -z "$bdeb" ]; then
  (cd "$DEBCACHE" && apt-get download -qq "$kpkg:arm64" busybox-static:arm64)
  kdeb=$(ls "$DEBCACHE/${kpkg}"_*_arm64.deb | tail -1)
  bdeb=$(ls "$DEBCACHE"/busybox-static_*_arm64.deb | tail -1)
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
dpkg-deb -x "$kdeb" "$W/k"
dpkg-deb -x "$bdeb" "$W/b"
KVER=$(ls "$W/k/lib/modules")
R=$W/root
mkdir -p "$R"/{bin,sbin,etc,proc,sys,dev,tmp,run,mnt/host,newroot,lib/modules,usr/bin,usr/sbin}
mkdir -p "$R"/{root,srv,var/tmp,home}
cp "$W/b/bin/busybox" "$R/bin/busybox"
ln -s busybox "$R/bin/sh"
ln -sf ../bin/busybox "$R/sbin/init"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
  > "$R/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$R/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$R/etc/hosts"
printf 'nameserver 127.0.0.53\n' > "$R/etc/resolv.conf"
# The shared libraries of the test binaries, at the paths their loader looks in.
for lib in ${LIBS:-}; do
  d=$R$(dirname "$lib"); mkdir -p "$d"; cp -L "$lib" "$d/"
done
# Modules for the PCI virtio transport, 9p, overlay and ext4, with what they depend on (read from
# each module's .modinfo: the .deb has no modules.dep), in load order. Built-in ones are not found.
: > "$R/modules.order"
add_mod() {
  local f dep
  f=$(find "$W/k/lib/modules/$KVER" \( -name "$1.ko" -o -name "${1//_/-}.ko" -o -name "${1//-/_}.ko" \) | head -1)
  [ -n "$f" ] || return 0
  grep -qx "${f##*/}" "$R/modules.order" && return 0
  for dep in $(tr '\0' '\n' < "$f" | sed -n 's/^depends=//p' | head -1 | tr ',' ' '); do add_mod "$dep"; done
  cp "$f" "$R/lib/modules/"; echo "${f##*/}" >> "$R/modules.order"
}
# crc32c_generic: ext4 and jbd2 ask the crypto API for crc32c at mount time (ENOENT without it).
for m in virtio virtio_ring virtio_pci virtio_mmio virtio_blk virtio-rng 9pnet_virtio 9p overlay \
         crc32c_generic libcrc32c ext4 veth; do
  add_mod "$m"
done
cat > "$R/init" <<'EOF'
#!/bin/sh
# Stage 1 (the initramfs root, which pivot_root refuses): copy to a tmpfs and switch_root to it.
if [ "$1" != stage2 ]; then
  /bin/busybox mount -t proc proc /proc
  /bin/busybox mount -t tmpfs -o size=60%,mode=755 root /newroot
  for d in bin sbin etc lib usr root srv var home init vmlane-boot modules.order; do
    [ -e /$d ] && /bin/busybox cp -a /$d /newroot/
  done
  /bin/busybox mkdir -p /newroot/proc /newroot/sys /newroot/dev /newroot/tmp /newroot/run \
    /newroot/mnt/host
  /bin/busybox umount /proc
  exec /bin/busybox switch_root /newroot /init stage2
fi
/bin/busybox --install -s
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmp /tmp
mount -t tmpfs -o mode=1777 shm /dev/shm
mount -t tmpfs run /run
mount -t cgroup2 cgroup2 /sys/fs/cgroup
chmod 1777 /var/tmp
exec >/dev/console 2>&1
for m in $(cat /modules.order); do insmod /lib/modules/$m 2>/dev/null; done
ip link set lo up 2>/dev/null
hostname vmlane
# The scratch disk (ext4, for idmapped workspace mounts, which tmpfs lacks before 6.3).
[ -b /dev/vda ] && mount -t ext4 /dev/vda /srv
/vmlane-boot
poweroff -f
EOF
chmod 755 "$R/init"
# The run itself (the 9p shares, run.sh, its status) is the lanes' shared guest side.
install -m 755 "$(dirname "$0")/guest-boot.sh" "$R/vmlane-boot"
(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > "$OUT/initrd.img"
cp "$W/k/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
echo "$KVER" > "$OUT/KERNEL"
echo "build-initramfs: arm64 $KVER in $(( $(date +%s) - t0 ))s; initrd $(du -h "$OUT/initrd.img" | cut -f1)"
