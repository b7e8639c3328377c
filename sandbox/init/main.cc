// moat-init: the pid 1 of a long-lived sandbox (sandbox/reaper.h). Init sets the sandbox up as a
// clone of its supervisor and then execs this small static program, so that what waits in every
// idle sandbox, and what every command is cloned from, is a tiny process rather than a copy of
// the whole daemon. The filter, the namespaces and the dropped capabilities stay across exec.
//
//   moat-init --sync-fd=3 [--rlimit=RESOURCE:SOFT:HARD]... [--restart-grace-ms=N]
#include <sys/prctl.h>
#include <sys/resource.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "sandbox/reaper.h"

int main(int argc, char** argv) {
  // exec made init dumpable again: commands run as the same uid and must not trace it or read
  // its memory. First thing, before any command exists.
  ::prctl(PR_SET_DUMPABLE, 0);
  int sync_fd = -1;
  uint32_t restart_grace_ms = 0;
  std::vector<moat::sandbox::RlimitSetting> rlimits;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--sync-fd=")) {
      if (!absl::SimpleAtoi(arg, &sync_fd)) sync_fd = -1;
    } else if (absl::ConsumePrefix(&arg, "--restart-grace-ms=")) {
      if (!absl::SimpleAtoi(arg, &restart_grace_ms)) {
        std::fprintf(stderr, "moat-init: bad --restart-grace-ms \"%s\"\n", argv[i]);
        return 125;
      }
    } else if (absl::ConsumePrefix(&arg, "--rlimit=")) {
      std::vector<absl::string_view> parts = absl::StrSplit(arg, ':');
      int resource = 0;
      uint64_t soft = 0, hard = 0;
      if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &resource) ||
          !absl::SimpleAtoi(parts[1], &soft) || !absl::SimpleAtoi(parts[2], &hard)) {
        std::fprintf(stderr, "moat-init: bad --rlimit \"%s\"\n", argv[i]);
        return 125;
      }
      rlimits.push_back({resource, {soft, hard}, "set resource limit"});
    } else {
      std::fprintf(stderr, "moat-init: unknown argument \"%s\" (it is started by moat-agent)\n",
                   argv[i]);
      return 125;
    }
  }
  if (sync_fd < 0) {
    std::fprintf(stderr, "moat-init: --sync-fd=N is required (it is started by moat-agent)\n");
    return 125;
  }
  moat::sandbox::RunReaper(sync_fd, rlimits.data(), rlimits.size(), restart_grace_ms);
}
