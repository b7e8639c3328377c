#!/bin/sh
# The guest's side of both real-kernel lanes, baked into their images (scripts/vm/build-image.sh
# as /usr/local/sbin/vmlane-boot, run by vmlane-run.service; scripts/vm/build-initramfs.sh as
# /vmlane-boot, run by the initramfs's init). POSIX sh: Debian's dash and busybox's ash.
# Mounts the 9p share "host" at /mnt/host (and the share "src" read-only where
# /mnt/host/src-mountpoint says), runs /mnt/host/run.sh with its output on stdout and in
# /mnt/host/out.log, and writes its exit status to /mnt/host/rc and "VMLANE-RC=N" to stdout
# (125 when nothing ran). The caller powers off.
opts=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /mnt/host
rc=125
echo "VMLANE-START $(cut -d' ' -f1 /proc/uptime)"
if mount -t 9p -o "$opts,cache=none" host /mnt/host; then
  if [ -f /mnt/host/src-mountpoint ]; then
    mp=$(cat /mnt/host/src-mountpoint); mkdir -p "$mp"
    mount -t 9p -o "$opts,cache=loose,ro" src "$mp" ||
      echo "vmlane: mounting the share 'src' at $mp failed"
  fi
  rm -f /mnt/host/rc
  if [ -f /mnt/host/run.sh ]; then
    ( cd /mnt/host && sh ./run.sh; echo $? > /tmp/vmlane-rc ) 2>&1 | tee /mnt/host/out.log
    rc=$(cat /tmp/vmlane-rc 2>/dev/null || echo 125)
  else
    echo "vmlane: /mnt/host/run.sh missing"
  fi
  echo "$rc" > /mnt/host/rc.tmp && mv /mnt/host/rc.tmp /mnt/host/rc
  sync
else
  echo "vmlane: mounting the 9p share 'host' failed"
fi
echo "VMLANE-RC=$rc uptime=$(cut -d' ' -f1 /proc/uptime)"
