#!/usr/bin/env bash
# Builds a bootable Debian 12 (bookworm) VM image from Debian packages only, for the real-kernel
# test lane (scripts/vm-test.sh): Debian's 6.1 kernel, systemd 252 as init (pure cgroup v2),
# python3 and the runtime libraries of moat's test binaries. Needs root, debootstrap and
# e2fsprogs (`mke2fs -d` writes the disk without a loop device or a mount).
#
# usage: scripts/vm/build-image.sh OUTDIR
# result: OUTDIR/root.img (raw ext4, sparse), OUTDIR/vmlinuz, OUTDIR/initrd.img
# env:   MIRROR (default http://deb.debian.org/debian), DEBCACHE (downloaded .debs, reused),
#        SIZE (disk size, default 4G)
#
# Booted with systemd.unit=vmlane.target the guest mounts the 9p share tagged "host" at
# /mnt/host (and a read-only share "src" where /mnt/host/src-mountpoint says), runs
# /mnt/host/run.sh, writes its exit status to /mnt/host/rc and "VMLANE-RC=N" on the console, and
# powers off. Without it, it boots to multi-user with root logged in on the serial console.
set -euo pipefail
OUT=${1:?usage: build-image.sh OUTDIR}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
DEBCACHE=${DEBCACHE:-$OUT.debs}
SIZE=${SIZE:-4G}
HERE=$(cd "$(dirname "$0")" && pwd)
# The package list is part of this file, and so of the cache key scripts/vm-test.sh computes.
# systemd as init, udev/kmod for modules, the shell tools the tests use, the shared libraries
# of build/tests/* and build/bin/* (libstdc++6 comes with apt), cmake for ctest's lists.
PKGS=linux-image-amd64,systemd-sysv,udev,kmod,procps,iproute2,util-linux,python3,curl,openssl
PKGS+=,file,libcpp-httplib0.11,libprometheus-cpp-core1.0,libprometheus-cpp-pull1.0,libssl3
PKGS+=,libbrotli1,zlib1g,libabsl20220623,libyaml-cpp0.7,libseccomp2,cmake
# The controller's etcd store (e2e_ha_test skips without /usr/bin/etcd).
PKGS+=,etcd-server
# The rootless lane: logind and a user manager (user@.service) reached over D-Bus, for an
# ordinary user with lingering.
PKGS+=,dbus,dbus-user-session,libpam-systemd

ROOT=$OUT/rootfs
mkdir -p "$OUT" "$DEBCACHE"
rm -rf "$ROOT"
t0=$(date +%s)
debootstrap --variant=minbase --include="$PKGS" --cache-dir="$(realpath "$DEBCACHE")" \
  bookworm "$ROOT" "$MIRROR"
t1=$(date +%s)

echo vmlane > "$ROOT/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 vmlane\n::1 localhost\n' > "$ROOT/etc/hosts"
printf 'LABEL=vmroot / ext4 rw,noatime 0 0\n' > "$ROOT/etc/fstab"
chroot "$ROOT" passwd -d root >/dev/null
# The ordinary user of the rootless tests, with lingering: its systemd user manager
# (user@1000.service, which systemd delegates cpu, memory and pids to) starts at boot.
chroot "$ROOT" useradd -m -u 1000 -s /bin/sh moatuser
mkdir -p "$ROOT/var/lib/systemd/linger" && touch "$ROOT/var/lib/systemd/linger/moatuser"
printf '9p\n9pnet_virtio\n' > "$ROOT/etc/modules-load.d/9p.conf"
# Root on the serial console without a password, for debugging (boot without vmlane.target).
mkdir -p "$ROOT/etc/systemd/system/serial-getty@ttyS0.service.d"
cat > "$ROOT/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf" <<'UNIT'
[Service]
ExecStart=
ExecStart=-/sbin/agetty --autologin root --keep-baud 115200,38400,9600 %I $TERM
UNIT
# The run itself (the 9p shares, run.sh, its status) is the lanes' shared guest side.
install -m 755 "$HERE/guest-boot.sh" "$ROOT/usr/local/sbin/vmlane-boot"
cat > "$ROOT/usr/local/sbin/vmlane-run" <<'RUNNER'
#!/bin/sh
# Runs /mnt/host/run.sh from the 9p share "host" (vmlane-boot), output on the console; then
# powers off.
/usr/local/sbin/vmlane-boot >/dev/console 2>&1
systemctl --force --force poweroff
RUNNER
chmod 755 "$ROOT/usr/local/sbin/vmlane-run"
cat > "$ROOT/etc/systemd/system/vmlane-run.service" <<'UNIT'
[Unit]
Description=vmlane: run /mnt/host/run.sh and power off
After=basic.target systemd-modules-load.service
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/vmlane-run
StandardInput=null
TimeoutStartSec=infinity
UNIT
cat > "$ROOT/etc/systemd/system/vmlane.target" <<'UNIT'
[Unit]
Description=vmlane: boot, run one command, power off
Requires=basic.target vmlane-run.service
After=basic.target
AllowIsolate=yes
UNIT
# Quick boots: nothing waits for a network, no periodic jobs.
chroot "$ROOT" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
  fstrim.timer systemd-networkd-wait-online.service >/dev/null 2>&1 || true
# A small initrd (only what mounts the root disk): under emulation a large one costs seconds.
printf 'MODULES=list\n' > "$ROOT/etc/initramfs-tools/conf.d/vmlane.conf"
printf 'virtio_pci\nvirtio_blk\next4\n' >> "$ROOT/etc/initramfs-tools/modules"
chroot "$ROOT" update-initramfs -u -k all
chroot "$ROOT" apt-get clean
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/log/*.log

cp "$ROOT"/boot/vmlinuz-* "$OUT/vmlinuz"
cp "$ROOT"/boot/initrd.img-* "$OUT/initrd.img"
chmod 644 "$OUT/vmlinuz" "$OUT/initrd.img"
rm -f "$OUT/root.img"
mke2fs -q -t ext4 -L vmroot -d "$ROOT" -E root_owner=0:0 "$OUT/root.img" "$SIZE"
rm -rf "$ROOT"
t2=$(date +%s)
echo "vm-image: debootstrap $((t1 - t0))s, configure and mke2fs $((t2 - t1))s," \
  "total $((t2 - t0))s"
