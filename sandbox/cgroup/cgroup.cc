#include "sandbox/cgroup/cgroup.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sandbox/cgroup/cgroup_fs.h"
#include "sandbox/cgroup/cgroup_spares.h"
#include "sandbox/cgroup/cgroup_v1.h"
#include "sandbox/cgroup/cgroup_v2.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {

// ---- mountinfo --------------------------------------------------------------------------------

struct MountEntry {
  int id = 0;
  int parent = 0;
  std::string device;  // "major:minor": one per superblock, so one per cgroup hierarchy
  std::string point;
  std::string fstype;
  std::string super_options;
};

// Mount points escape space, tab, newline and backslash as \ooo (octal).
std::string Unescape(absl::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() &&
        std::isdigit(static_cast<unsigned char>(field[i + 1])) &&
        std::isdigit(static_cast<unsigned char>(field[i + 2])) &&
        std::isdigit(static_cast<unsigned char>(field[i + 3]))) {
      out.push_back(static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                                      (field[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(field[i]);
    }
  }
  return out;
}

// "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue" (proc(5)):
// id, parent, dev, root, mount point, options, optional fields, "-", fstype, source, super opts.
absl::StatusOr<MountEntry> ParseMountLine(absl::string_view line) {
  std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
  auto separator = std::find(fields.begin(), fields.end(), "-");
  if (fields.size() < 6 || separator == fields.end() || fields.end() - separator < 4 ||
      separator - fields.begin() < 6) {
    return absl::InvalidArgumentError(absl::StrCat("malformed mountinfo line \"", line, "\""));
  }
  MountEntry entry;
  if (!absl::SimpleAtoi(fields[0], &entry.id) || !absl::SimpleAtoi(fields[1], &entry.parent)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed mountinfo line \"", line, "\""));
  }
  entry.device = std::string(fields[2]);
  entry.point = Unescape(fields[4]);
  entry.fstype = std::string(separator[1]);
  entry.super_options = std::string(separator[3]);
  return entry;
}

bool IsUnderOrAt(const std::string& path, const std::string& dir) {
  if (dir == "/") return true;
  return path == dir || (path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
                         path[dir.size()] == '/');
}

// A mount is hidden when a later mount sits on its mount point or on a directory above it,
// unless that later mount is one of its own ancestors (then it was mounted inside it).
std::vector<bool> VisibleMounts(const std::vector<MountEntry>& mounts) {
  std::map<int, int> parent_of;
  for (const MountEntry& m : mounts) parent_of[m.id] = m.parent;
  auto is_ancestor = [&](int ancestor, int id) {
    for (int steps = 0; steps < 1000; ++steps) {  // bounded: mountinfo is not trusted to be a tree
      auto it = parent_of.find(id);
      if (it == parent_of.end() || it->second == id) return false;
      id = it->second;
      if (id == ancestor) return true;
    }
    return false;
  };
  std::vector<bool> visible(mounts.size(), true);
  for (size_t i = 0; i < mounts.size(); ++i) {
    for (size_t j = i + 1; j < mounts.size() && visible[i]; ++j) {
      if (IsUnderOrAt(mounts[i].point, mounts[j].point) &&
          !is_ancestor(mounts[j].id, mounts[i].id)) {
        visible[i] = false;
      }
    }
  }
  return visible;
}

// Super options of a v1 cgroup mount that are not controller names ("name=..." has a '=').
constexpr absl::string_view kV1MountOptions[] = {
    "rw",
    "ro",
    "none",
    "noprefix",
    "clone_children",
    "xattr",
    "cpuset_v2_mode",
    "favordynmods",
    "nofavordynmods",
};

bool IsV1Controller(absl::string_view option) {
  if (option.empty() || option.find('=') != absl::string_view::npos) return false;
  return std::find(std::begin(kV1MountOptions), std::end(kV1MountOptions), option) ==
         std::end(kV1MountOptions);
}

// When a hierarchy is mounted more than once, prefer the usual place.
bool Preferred(const std::string& candidate, const std::string& current) {
  return current.empty() ||
         (IsUnderOrAt(candidate, "/sys/fs/cgroup") && !IsUnderOrAt(current, "/sys/fs/cgroup"));
}

// The directory that gets moat/ in the cgroup2 hierarchy (layouts built by hand may leave
// v2_parent empty: the mount itself).
const std::string& V2Parent(const CgroupLayout& layout) {
  return layout.v2_parent.empty() ? layout.v2_mount : layout.v2_parent;
}

// Whether systemd marked the cgroup directory as delegated (systemd 251+ sets the xattr on the
// cgroup of a unit with Delegate=yes: trusted.* for the system manager, user.* for a user's).
bool OwnedBy(const std::string& path, uid_t uid) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && st.st_uid == uid;
}

bool MarkedDelegated(const std::string& dir) {
  for (const char* name : {"trusted.delegate", "user.delegate"}) {
    char value[8] = {};
    ssize_t n = ::getxattr(dir.c_str(), name, value, sizeof(value) - 1);
    if (n > 0 && value[0] == '1') return true;
  }
  return false;
}

// ---- planning -----------------------------------------------------------------------------------

const char* KernelOption(const std::string& controller) {
  if (controller == "cpu") return "CONFIG_CFS_BANDWIDTH";
  if (controller == "cpuacct") return "CONFIG_CGROUP_CPUACCT";
  if (controller == "memory") return "CONFIG_MEMCG";
  if (controller == "pids") return "CONFIG_CGROUP_PIDS";
  return "its CONFIG_CGROUP_ option";
}

absl::Status MissingController(const CgroupLayout& layout, const std::string& controller) {
  std::string where = "no cgroup v1 hierarchy mounts it";
  if (!layout.v2_mount.empty()) {
    absl::StrAppend(&where, " and \"", layout.v2_mount, "/cgroup.controllers\" does not list it");
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cgroup controller \"", controller,
                   "\" is not available (layout: ", layout.Describe(), "; ", where,
                   "): on cgroup v2 enable it in the parent's cgroup.subtree_control, on v1 mount "
                   "it (e.g. `mkdir -p /sys/fs/cgroup/",
                   controller, " && mount -t cgroup -o ", controller, " cgroup /sys/fs/cgroup/",
                   controller, "`), and check that the kernel has ", KernelOption(controller)));
}

// ---- a cgroup split across v1 and v2 (hybrid layouts) ------------------------------------------

// Each controller sits in the hierarchy that offers it. Every process is in both parts, so the
// v2 part's cgroup.kill (or freeze) reaches everything.
class SplitCgroup final : public Cgroup {
 public:
  SplitCgroup(std::unique_ptr<CgroupV1> v1, std::unique_ptr<CgroupV2> v2)
      : v1_(std::move(v1)), v2_(std::move(v2)) {}

  absl::Status AddProcess(pid_t pid) override {
    RETURN_IF_ERROR(v2_->AddProcess(pid));
    return v1_->AddProcess(pid);
  }
  // CLONE_INTO_CGROUP would place the child in the v2 part only; AddProcess must do both.
  int clone_into_fd() const override { return -1; }
  absl::StatusOr<uint64_t> ReadCpuNs() override {
    return v1_->has("cpuacct") ? v1_->ReadCpuNs() : v2_->ReadCpuNs();
  }
  absl::StatusOr<CgroupUsage> ReadUsage() override {
    ASSIGN_OR_RETURN(CgroupUsage from_v1, v1_->ReadUsage());
    ASSIGN_OR_RETURN(CgroupUsage from_v2, v2_->ReadUsage());
    CgroupUsage usage = v1_->has("memory") ? from_v1 : from_v2;
    usage.cpu_ns = v1_->has("cpuacct") ? from_v1.cpu_ns : from_v2.cpu_ns;
    usage.pids_limit_hits = v1_->has("pids") ? from_v1.pids_limit_hits : from_v2.pids_limit_hits;
    return usage;
  }
  absl::Status KillAll() override {
    RETURN_IF_ERROR(v2_->KillAll());
    return v1_->KillAll();  // catches a process that AddProcess moved into v1 only
  }
  absl::Status Destroy() override {
    absl::Status status = KillAll();
    status.Update(v2_->Destroy());
    status.Update(v1_->Destroy());
    return status;
  }
  absl::Status Recycle() override {
    absl::Status status = KillAll();
    status.Update(v2_->Destroy());
    status.Update(status.ok() ? v1_->Recycle() : v1_->Destroy());
    return status;
  }
  std::vector<std::string> paths() const override {
    std::vector<std::string> all = v1_->paths();
    for (std::string& path : v2_->paths()) all.push_back(std::move(path));
    return all;
  }

 private:
  std::unique_ptr<CgroupV1> v1_;
  std::unique_ptr<CgroupV2> v2_;
};

// ---- stale cgroups ------------------------------------------------------------------------------

// The pid in a `<pid>-<suffix>` name, or 0.
pid_t OwnerPid(absl::string_view name) {
  size_t dash = name.find('-');
  pid_t pid = 0;
  if (dash == 0 || dash == absl::string_view::npos) return 0;
  if (!absl::SimpleAtoi(name.substr(0, dash), &pid) || pid <= 0) return 0;
  return pid;
}

bool ProcessExists(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// Kills everything in one stale sandbox's directories (one per hierarchy).
absl::Status KillStale(const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) {
    // A failure here is not final: the freeze-and-kill loop below covers it.
    const std::string kill_file = dir + "/cgroup.kill";
    if (cgroupfs::Exists(kill_file)) cgroupfs::WriteFile(kill_file, "1").IgnoreError();
  }
  auto set_frozen = [&dirs](bool frozen) {
    absl::Status status;
    for (const std::string& dir : dirs) {
      if (cgroupfs::Exists(dir + "/freezer.state")) {
        status.Update(cgroupfs::WriteFile(dir + "/freezer.state", frozen ? "FROZEN" : "THAWED"));
      } else if (cgroupfs::Exists(dir + "/cgroup.freeze")) {
        status.Update(cgroupfs::WriteFile(dir + "/cgroup.freeze", frozen ? "1" : "0"));
      }
    }
    return status;
  };
  return cgroupfs::KillUntilEmpty(
      dirs, {.freeze = [&] { return set_frozen(true); }, .thaw = [&] { return set_frozen(false); }},
      cgroupfs::kKillTimeout);
}

}  // namespace

std::string CgroupLayout::Describe() const {
  std::vector<std::string> v1;
  for (const auto& [controller, mount] : v1_mounts) v1.push_back(controller);
  std::string v2 = v2_mount;
  if (!v2_parent.empty() && v2_parent != v2_mount) absl::StrAppend(&v2, ", moat in ", v2_parent);
  if (!v2_controllers.empty()) absl::StrAppend(&v2, " with ", absl::StrJoin(v2_controllers, ","));
  switch (kind) {
    case Kind::kV1:
      return absl::StrCat("v1 (", absl::StrJoin(v1, ","), ")");
    case Kind::kV2:
      return absl::StrCat("v2 (", v2, ")");
    case Kind::kHybrid:
      return absl::StrCat("hybrid (v1: ", absl::StrJoin(v1, ","), "; v2: ", v2, ")");
  }
  return "unknown";
}

absl::StatusOr<CgroupLayout> ParseCgroupMountinfo(absl::string_view mountinfo) {
  std::vector<MountEntry> mounts;
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n', absl::SkipWhitespace())) {
    ASSIGN_OR_RETURN(MountEntry entry, ParseMountLine(line));
    mounts.push_back(std::move(entry));
  }
  std::vector<bool> visible = VisibleMounts(mounts);
  CgroupLayout layout{.kind = CgroupLayout::Kind::kV2};
  // A v1 hierarchy mounted twice is one device ("0:37") at both places.
  std::map<std::string, std::string> hierarchies;  // device -> mount point
  for (size_t i = 0; i < mounts.size(); ++i) {
    const MountEntry& m = mounts[i];
    if (!visible[i]) continue;
    if (m.fstype == "cgroup2") {
      if (Preferred(m.point, layout.v2_mount)) layout.v2_mount = m.point;
    } else if (m.fstype == "cgroup") {
      std::string& hierarchy = hierarchies[m.device];
      if (Preferred(m.point, hierarchy)) hierarchy = m.point;
      for (absl::string_view option : absl::StrSplit(m.super_options, ',')) {
        if (!IsV1Controller(option)) continue;
        std::string& mount = layout.v1_mounts[std::string(option)];
        if (Preferred(m.point, mount)) mount = m.point;
      }
    }
  }
  for (const auto& [device, point] : hierarchies) layout.v1_hierarchies.insert(point);
  if (layout.v1_mounts.empty() && layout.v2_mount.empty()) {
    return absl::NotFoundError(
        "no cgroup filesystem is mounted: mount cgroup2 (`mount -t cgroup2 none /sys/fs/cgroup`) "
        "or, in a container, give it the host's cgroup mount");
  }
  layout.v2_parent = layout.v2_mount;
  if (layout.v1_mounts.empty()) {
    layout.kind = CgroupLayout::Kind::kV2;
  } else {
    layout.kind = layout.v2_mount.empty() ? CgroupLayout::Kind::kV1 : CgroupLayout::Kind::kHybrid;
  }
  return layout;
}

absl::StatusOr<std::string> ChooseV2Parent(const std::string& v2_mount,
                                           const V2Placement& placement) {
  if (!placement.requested.empty()) {
    const std::vector<absl::string_view> parts =
        absl::StrSplit(placement.requested, '/', absl::SkipEmpty());
    const bool bad_part = std::any_of(parts.begin(), parts.end(), [](absl::string_view part) {
      return part == "." || part == "..";
    });
    if (placement.requested[0] != '/' || bad_part) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MOAT_CGROUP_PARENT=\"", placement.requested,
          "\" is not a cgroup path: give one from the cgroup2 root without \".\" or \"..\", "
          "e.g. \"/moat.slice\" or \"/system.slice/moat-agent.service\""));
    }
    return parts.empty() ? v2_mount : absl::StrCat(v2_mount, "/", absl::StrJoin(parts, "/"));
  }
  if (placement.systemd && placement.own_delegated && placement.own_cgroup.size() > 1 &&
      placement.own_cgroup[0] == '/') {
    return absl::StrCat(v2_mount, placement.own_cgroup);
  }
  return v2_mount;
}

V2Placement ReadV2Placement(const std::string& v2_mount) {
  V2Placement placement;
  if (const char* requested = std::getenv("MOAT_CGROUP_PARENT")) placement.requested = requested;
  struct stat st;
  placement.systemd = ::stat("/run/systemd/system", &st) == 0 && S_ISDIR(st.st_mode);
  absl::StatusOr<std::string> own = cgroupfs::ReadFile("/proc/self/cgroup");
  if (own.ok()) {
    for (absl::string_view line : absl::StrSplit(*own, '\n', absl::SkipEmpty())) {
      if (absl::ConsumePrefix(&line, "0::")) placement.own_cgroup = std::string(line);
    }
  }
  if (!placement.own_cgroup.empty()) {
    const std::string dir = v2_mount + placement.own_cgroup;
    placement.own_delegated = MarkedDelegated(dir);
    // An ordinary user: the kernel's own sign of delegation (cgroup-v2.rst, "Delegation") is the
    // directory, cgroup.procs and cgroup.subtree_control being the user's. systemd 252's user
    // manager marks a Delegate=yes scope with no xattr (measured on Debian 12).
    if (!placement.own_delegated && ::geteuid() != 0) {
      placement.own_delegated = OwnedBy(dir, ::geteuid()) &&
                                OwnedBy(dir + "/cgroup.procs", ::geteuid()) &&
                                OwnedBy(dir + "/cgroup.subtree_control", ::geteuid());
    }
  }
  return placement;
}

absl::StatusOr<CgroupLayout> DetectCgroupLayout(const std::string& mountinfo_path) {
  ASSIGN_OR_RETURN(std::string mountinfo, cgroupfs::ReadFile(mountinfo_path));
  absl::StatusOr<CgroupLayout> layout = ParseCgroupMountinfo(mountinfo);
  if (!layout.ok()) {
    return absl::Status(layout.status().code(),
                        absl::StrCat("detect the cgroup layout from \"", mountinfo_path,
                                     "\": ", layout.status().message()));
  }
  if (!layout->v2_mount.empty()) {
    ASSIGN_OR_RETURN(layout->v2_parent,
                     ChooseV2Parent(layout->v2_mount, ReadV2Placement(layout->v2_mount)));
    // Unreadable means unusable: treat it as offering no controllers.
    absl::StatusOr<std::string> controllers =
        cgroupfs::ReadFile(layout->v2_parent + "/cgroup.controllers");
    if (controllers.ok()) {
      for (absl::string_view c :
           absl::StrSplit(*controllers, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
        layout->v2_controllers.insert(std::string(c));
      }
    }
  }
  return layout;
}

absl::StatusOr<CgroupPlan> PlanCgroup(const CgroupLayout& layout) {
  CgroupPlan plan;
  auto take_v1 = [&](const std::string& controller) {
    auto it = layout.v1_mounts.find(controller);
    if (it == layout.v1_mounts.end()) return false;
    plan.v1[controller] = it->second;
    return true;
  };
  bool needs_v2 = false;
  for (const std::string controller : {"cpu", "memory", "pids"}) {
    if (take_v1(controller)) continue;
    if (layout.v2_mount.empty() || !layout.v2_controllers.contains(controller)) {
      return MissingController(layout, controller);
    }
    plan.v2_controllers.insert(controller);
    needs_v2 = true;
  }
  // CPU time: v1 cpuacct, else v2's cpu.stat, a core file present in every v2 cgroup.
  if (!take_v1("cpuacct")) {
    if (layout.v2_mount.empty()) return MissingController(layout, "cpuacct");
    needs_v2 = true;
  }
  if (needs_v2) {
    plan.v2_mount = V2Parent(layout);  // v2 kills with cgroup.kill or its own freezer
  } else {
    take_v1("freezer");  // optional: without it, KillAll kills without freezing first
  }
  return plan;
}

absl::Status ValidateCgroupRequest(const std::string& name, const CgroupLimits& limits) {
  const bool name_ok = !name.empty() && name.size() <= 200 && name != "." && name != ".." &&
                       std::all_of(name.begin(), name.end(), [](char c) {
                         return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                                c == '_' || c == '-';
                       });
  if (!name_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "invalid cgroup name \"", name,
        "\": use 1 to 200 letters, digits, '.', '_' or '-', e.g. \"<pid>-<sandbox id>\""));
  }
  if (limits.memory_bytes == 0) {
    return absl::InvalidArgumentError("cgroup memory limit is 0: set a limit in bytes");
  }
  if (limits.pids == 0) return absl::InvalidArgumentError("cgroup pids limit is 0: allow >= 1");
  if (!std::isfinite(limits.cpus) || limits.cpus < 0.01 || limits.cpus > 1e6) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cgroup CPU limit ", limits.cpus,
        " is out of range: give cores between 0.01 (the kernel's 1 ms per 100 ms minimum) and "
        "the machine's size"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Cgroup>> Cgroup::Create(const CgroupLayout& layout,
                                                       const std::string& name,
                                                       const CgroupLimits& limits) {
  RETURN_IF_ERROR(ValidateCgroupRequest(name, limits));
  ASSIGN_OR_RETURN(CgroupPlan plan, PlanCgroup(layout));
  if (!plan.uses_v2()) {
    ASSIGN_OR_RETURN(std::unique_ptr<CgroupV1> v1, CgroupV1::Create(plan.v1, name, limits));
    return v1;
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CgroupV2> v2,
                   CgroupV2::Create(plan.v2_mount, plan.v2_controllers, name, limits));
  if (!plan.uses_v1()) return v2;
  ASSIGN_OR_RETURN(std::unique_ptr<CgroupV1> v1, CgroupV1::Create(plan.v1, name, limits));
  return std::make_unique<SplitCgroup>(std::move(v1), std::move(v2));
}

std::map<std::string, std::vector<std::string>> MoatCgroupsByName(
    const CgroupLayout& layout, const std::function<bool(absl::string_view name)>& keep) {
  std::set<std::string> mounts;
  for (const auto& [controller, mount] : layout.v1_mounts) mounts.insert(mount);
  if (!layout.v2_mount.empty()) mounts.insert(V2Parent(layout));
  std::map<std::string, std::vector<std::string>> out;
  for (const std::string& mount : mounts) {
    const std::string parent = absl::StrCat(mount, "/", cgroupfs::kMoatDir);
    DIR* d = ::opendir(parent.c_str());
    if (d == nullptr) continue;  // no moat/ here: nothing was ever created
    while (struct dirent* entry = ::readdir(d)) {
      if (entry->d_type != DT_DIR || !keep(entry->d_name)) continue;
      out[entry->d_name].push_back(absl::StrCat(parent, "/", entry->d_name));
    }
    ::closedir(d);
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> CleanupStaleCgroups(const CgroupLayout& layout) {
  const auto stale = MoatCgroupsByName(layout, [](absl::string_view name) {
    if (name == "." || name == "..") return false;
    const std::string text(name);
    // Spares beyond the pool's size (say from a build with a larger pool) are trimmed.
    std::optional<int> spare = cgroupfs::SpareIndex(text);
    if (spare.has_value()) return *spare >= cgroupfs::kSpareCgroups;
    pid_t owner = OwnerPid(text);
    return owner != 0 && !ProcessExists(owner);
  });

  std::vector<std::string> removed;
  std::vector<std::string> failures;
  for (const auto& [name, dirs] : stale) {
    absl::Status status = KillStale(dirs);
    for (const std::string& dir : dirs) {
      if (status.ok()) status = cgroupfs::RemoveTree(dir, cgroupfs::kRemoveTimeout);
      if (!status.ok()) break;
      removed.push_back(dir);
    }
    if (!status.ok()) failures.push_back(std::string(status.message()));
  }
  if (!failures.empty()) {
    return absl::InternalError(absl::StrCat("clean up stale sandbox cgroups: ", failures.size(),
                                            " could not be removed (", removed.size(),
                                            " were): ", absl::StrJoin(failures, "; ")));
  }
  return removed;
}

}  // namespace moat::sandbox
