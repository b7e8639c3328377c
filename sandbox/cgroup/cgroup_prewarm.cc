#include "sandbox/cgroup/cgroup_prewarm.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace moat::sandbox {
namespace {

// The `tasks` file of the cgroup this process is in, in the first v1 hierarchy we know.
std::string OwnTasksFile(const CgroupLayout& layout, const std::string& proc_self_cgroup) {
  std::ifstream in(proc_self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    // hierarchy-id:controller[,controller]:path
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3 || parts[1].empty()) continue;
    for (absl::string_view controller : absl::StrSplit(parts[1], ',')) {
      auto it = layout.v1_mounts.find(std::string(controller));
      if (it != layout.v1_mounts.end()) {
        return absl::StrCat(it->second, parts[2] == "/" ? "" : parts[2], "/tasks");
      }
    }
  }
  return "";
}

}  // namespace

std::unique_ptr<CgroupPrewarm> CgroupPrewarm::Start(const CgroupLayout& layout,
                                                    const std::string& proc_self_cgroup,
                                                    std::function<void()> then) {
  if (layout.kind == CgroupLayout::Kind::kV2) return nullptr;
  std::string tasks = OwnTasksFile(layout, proc_self_cgroup);
  if (tasks.empty()) return nullptr;
  return std::unique_ptr<CgroupPrewarm>(new CgroupPrewarm(std::move(tasks), std::move(then)));
}

CgroupPrewarm::CgroupPrewarm(std::string tasks_file, std::function<void()> then)
    : tasks_file_(std::move(tasks_file)) {
  thread_ = std::make_unique<SideThread>([path = tasks_file_, then = std::move(then)] {
    // Best effort: if this fails, the real attach simply pays the grace period itself.
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      std::string tid = absl::StrCat(::gettid());
      ssize_t unused = ::write(fd, tid.data(), tid.size());
      (void)unused;
      ::close(fd);
    }
    if (then) then();
  });
}

CgroupPrewarm::~CgroupPrewarm() { Wait(); }

void CgroupPrewarm::Wait() {
  if (thread_) thread_->Join();
}

}  // namespace moat::sandbox
