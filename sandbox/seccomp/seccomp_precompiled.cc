// The seccomp programs compiled at build time (see gen/seccomp_gen.cc).
#include <linux/filter.h>

#include <cstddef>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sandbox/seccomp/seccomp_filter.h"

namespace moat::sandbox {
namespace precompiled {
struct PrecompiledProgram {
  Arch arch;
  bool notifies;
  bool guards_creation;
  const struct sock_filter* instructions;
  size_t length;
};
}  // namespace precompiled
}  // namespace moat::sandbox

#include "seccomp_programs.inc"

namespace moat::sandbox {

absl::StatusOr<SeccompProgram> SeccompProgram::Precompiled(const SeccompOptions& options) {
  for (const precompiled::PrecompiledProgram& p : precompiled::kPrograms) {
    if (p.arch == options.arch && p.notifies == options.notify_violations &&
        p.guards_creation == options.guard_creation) {
      return SeccompProgram(
          std::vector<struct sock_filter>(p.instructions, p.instructions + p.length), p.arch,
          p.notifies, p.guards_creation);
    }
  }
  return absl::NotFoundError(
      absl::StrCat("no precompiled seccomp program for ", ArchName(options.arch)));
}

}  // namespace moat::sandbox
