// Test helper: a temporary directory that stands in for cgroup mounts, with a mountinfo fixture
// that points at it. Pure cgroup v2 cannot be produced on a hybrid machine, so v2 code is tested
// by pre-populating the files the kernel would create and asserting what the code writes.
//
// A real cgroup directory grows its control files on mkdir; a plain directory does not. So
// tests create the `moat/<name>` leaf with Populate*() first, and Create() reuses it as it would
// reuse an empty leftover leaf.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "util/testing/temp_dir.h"

namespace moat::sandbox::testing {

class FakeCgroupTree {
 public:
  FakeCgroupTree() = default;
  FakeCgroupTree(const FakeCgroupTree&) = delete;
  FakeCgroupTree& operator=(const FakeCgroupTree&) = delete;

  const std::string& root() const { return dir_.path(); }
  std::string Path(const std::string& relative) const { return dir_.File(relative); }

  // A cgroup2 mount at root()/<relative> whose root offers `controllers` ("cpu memory pids").
  std::string AddV2Mount(const std::string& relative, const std::string& controllers) {
    const std::string mount = Path(relative);
    std::filesystem::create_directories(mount);
    Write(mount + "/cgroup.controllers", controllers + "\n");
    Write(mount + "/cgroup.subtree_control", "");
    Write(mount + "/cgroup.procs", "");
    lines_.push_back(absl::StrCat(next_id_, " 1 0:", next_id_, " / ", mount,
                                  " rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 "
                                  "rw,nsdelegate,memory_recursiveprot"));
    ++next_id_;
    return mount;
  }

  // A cgroup v1 mount at root()/<relative> with super options such as "rw,cpu,cpuacct".
  std::string AddV1Mount(const std::string& relative, const std::string& super_options) {
    const std::string mount = Path(relative);
    std::filesystem::create_directories(mount);
    Write(mount + "/cgroup.procs", "");
    lines_.push_back(absl::StrCat(next_id_, " 1 0:", next_id_, " / ", mount,
                                  " rw,nosuid,nodev,noexec,relatime shared:5 - cgroup cgroup ",
                                  super_options));
    ++next_id_;
    return mount;
  }

  // Writes the mountinfo fixture for the mounts added so far and returns its path.
  std::string WriteMountinfo() {
    std::string text = "1 0 254:0 / / rw,relatime - ext4 /dev/vda rw\n";
    for (const std::string& line : lines_) text += line + "\n";
    const std::string path = Path("mountinfo");
    Write(path, text);
    return path;
  }

  struct V2Files {
    bool kill = true;  // cgroup.kill (Linux 5.14+)
    bool peak = true;  // memory.peak (Linux 5.19+)
    bool swap = true;  // memory.swap.max (swap accounting)
    bool memory = true;
    bool cpu = true;
    bool pids = true;
  };

  // The files of a fresh non-root v2 cgroup, as the kernel would create them.
  void PopulateV2(const std::string& dir, const V2Files& files) {
    std::filesystem::create_directories(dir);
    Write(dir + "/cgroup.procs", "");
    Write(dir + "/cgroup.controllers", "");
    Write(dir + "/cgroup.subtree_control", "");
    Write(dir + "/cgroup.events", "populated 0\nfrozen 0\n");
    Write(dir + "/cgroup.freeze", "");
    if (files.kill) Write(dir + "/cgroup.kill", "");
    Write(dir + "/cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n");
    if (files.cpu) Write(dir + "/cpu.max", "max 100000\n");
    if (files.memory) {
      Write(dir + "/memory.max", "max\n");
      Write(dir + "/memory.current", "0\n");
      Write(dir + "/memory.events", "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n");
      if (files.peak) Write(dir + "/memory.peak", "0\n");
      if (files.swap) Write(dir + "/memory.swap.max", "max\n");
    }
    if (files.pids) Write(dir + "/pids.max", "max\n");
  }

  // The files of a fresh v1 cgroup for the given controllers.
  void PopulateV1(const std::string& dir, const std::vector<std::string>& controllers,
                  bool memsw = true) {
    std::filesystem::create_directories(dir);
    Write(dir + "/cgroup.procs", "");
    for (const std::string& c : controllers) {
      if (c == "cpu") {
        Write(dir + "/cpu.cfs_period_us", "100000\n");
        Write(dir + "/cpu.cfs_quota_us", "-1\n");
      } else if (c == "cpuacct") {
        Write(dir + "/cpuacct.usage", "0\n");
      } else if (c == "memory") {
        Write(dir + "/memory.limit_in_bytes", "9223372036854771712\n");
        Write(dir + "/memory.max_usage_in_bytes", "0\n");
        Write(dir + "/memory.usage_in_bytes", "0\n");
        Write(dir + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n");
        if (memsw) Write(dir + "/memory.memsw.limit_in_bytes", "9223372036854771712\n");
      } else if (c == "pids") {
        Write(dir + "/pids.max", "max\n");
        Write(dir + "/pids.events", "max 0\n");
      } else if (c == "freezer") {
        Write(dir + "/freezer.state", "THAWED\n");
      } else if (c == "cpuset") {
        Write(dir + "/cpuset.cpus", "\n");
        Write(dir + "/cpuset.mems", "\n");
      }
    }
  }

  static void Write(const std::string& path, const std::string& content) {
    std::ofstream(path, std::ios::trunc) << content;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  ScopedTempDir dir_{"moat-fake-cgroup", std::filesystem::temp_directory_path().string()};
  std::vector<std::string> lines_;
  int next_id_ = 30;
};

}  // namespace moat::sandbox::testing
