// `moat run` flags: parsed and validated at the edge into a plain struct.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/policy/policy.h"

namespace moat::cli {

struct RunFlags {
  std::optional<std::string> policy_file;
  std::vector<std::string> user_policy_files;  // --user-policy, in order
  std::optional<std::string> cwd;              // --cwd
  std::optional<std::string> workspace;
  std::optional<std::string> audit_log;  // --audit-log; default egress::kDefaultAuditLog
  bool json = false;
  bool help = false;
  sandbox::PolicyLayer layer;  // --memory, --pids, --cpus, timeouts, --tmpfs-size, --env
  std::vector<std::string> command;
};

// `args` excludes the program name and the word "run". The command follows "--" (or starts at
// the first argument that is not an option).
// `moat policy show` takes the same options without a command (`command_required` false).
absl::StatusOr<RunFlags> ParseRunFlags(const std::vector<std::string>& args,
                                       bool command_required = true);

extern const char kRunUsage[];

}  // namespace moat::cli
