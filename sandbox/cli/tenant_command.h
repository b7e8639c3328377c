// `moat tenant ...` and `moat approval ...`: the controller's admin API (controller/admin_api.h)
// from the command line. The admin key comes from --admin-key-file or MOAT_ADMIN_KEY, the
// controller from --server or MOAT_SERVER (default http://127.0.0.1:8080; https:// verifies the
// controller's certificate against --ca-file or MOAT_CA_FILE, else the system's store), through
// the CLI's own HTTP client (cli/http_client.h).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moat::cli {

// The HTTP request a command line means.
struct AdminRequest {
  std::string method, path, body;
};

// `args` excludes "moat" and starts at "tenant" or "approval"; flags already removed.
absl::StatusOr<AdminRequest> ParseAdminCommand(const std::vector<std::string>& args);

// `args` excludes the program name and starts at "tenant" or "approval". The exit status.
int TenantCommandMain(const std::vector<std::string>& args);

}  // namespace moat::cli
