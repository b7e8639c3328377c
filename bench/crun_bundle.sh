# crun's OCI bundle for the benchmarks that compare with crun (bench/run.sh, bench/agent.sh).
# Like moat's sandbox: host root read-only, root inside mapped to nobody outside, new pid, net,
# ipc, uts, mount, user and cgroup namespaces, fresh /proc, a minimal /dev, tmpfs /tmp, no
# capabilities, no new privileges, and the usual masked and read-only /proc and /sys paths of
# `crun spec`. process.args is filled in per command by the bench (config.N.json).

# write_crun_bundle DIR: DIR/config.json and an empty DIR/rootfs (the host root is bound there
# in the bench's private mount namespace, never on the host).
write_crun_bundle() {
  mkdir -p "$1/rootfs"
  cat >"$1/config.json" <<'EOF'
{
  "ociVersion": "1.0.0",
  "process": {
    "terminal": false,
    "user": {"uid": 0, "gid": 0},
    "args": ["/bin/true"],
    "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
    "cwd": "/",
    "noNewPrivileges": true
  },
  "root": {"path": "rootfs", "readonly": true},
  "hostname": "moat-bench",
  "mounts": [
    {"destination": "/proc", "type": "proc", "source": "proc"},
    {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
     "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
     "options": ["nosuid", "nodev", "mode=1777"]}
  ],
  "linux": {
    "uidMappings": [{"containerID": 0, "hostID": 65534, "size": 1}],
    "gidMappings": [{"containerID": 0, "hostID": 65534, "size": 1}],
    "namespaces": [
      {"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"},
      {"type": "mount"}, {"type": "user"}, {"type": "cgroup"}
    ],
    "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys",
                    "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats",
                    "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
    "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
  }
}
EOF
}
