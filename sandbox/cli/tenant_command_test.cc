#include "sandbox/cli/tenant_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nlohmann/json.hpp"

namespace moat::cli {
namespace {

using nlohmann::json;

AdminRequest Parse(const std::vector<std::string>& args) {
  absl::StatusOr<AdminRequest> r = ParseAdminCommand(args);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.value_or(AdminRequest{});
}

TEST(TenantCommandTest, CommandsMapOntoTheAdminApi) {
  AdminRequest r = Parse({"tenant", "create", "acme", "--max-sandboxes", "3", "--max-cpu=1.5",
                          "--max-memory", "4G", "--creates-per-minute", "30"});
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/admin/tenants");
  json body = json::parse(r.body);
  EXPECT_EQ(body["name"], "acme");
  EXPECT_EQ(body["quota"]["max_sandboxes"], 3);
  EXPECT_EQ(body["quota"]["max_cpu"], 1.5);
  EXPECT_EQ(body["quota"]["max_memory"], 4ULL << 30);
  EXPECT_EQ(body["quota"]["creates_per_minute"], 30);
  EXPECT_EQ(Parse({"tenant", "ls"}).path, "/v1/admin/tenants");
  r = Parse({"tenant", "quota", "acme", "--max-cpu", "2"});
  EXPECT_EQ(r.method, "PUT");
  EXPECT_EQ(r.path, "/v1/admin/tenants/acme/quota");
  EXPECT_EQ(Parse({"tenant", "key", "create", "acme"}).path, "/v1/admin/tenants/acme/keys");
  r = Parse({"tenant", "key", "rotate", "0123456789abcdef"});
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/v1/admin/keys/0123456789abcdef/rotate");
  r = Parse({"tenant", "key", "revoke", "0123456789abcdef"});
  EXPECT_EQ(r.method, "DELETE");
  EXPECT_EQ(r.path, "/v1/admin/keys/0123456789abcdef");
  r = Parse({"approval", "reject", "apr-1", "downloads a script"});
  EXPECT_EQ(r.path, "/v1/admin/approvals/apr-1/reject");
  EXPECT_EQ(json::parse(r.body)["reason"], "downloads a script");
  EXPECT_EQ(Parse({"approval", "audit", "5"}).path, "/v1/admin/audit?limit=5");
}

TEST(TenantCommandTest, BadCommandLinesAreRefused) {
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"tenant"},
                                             {"tenant", "create"},
                                             {"tenant", "create", "a", "--max-cpu"},
                                             {"tenant", "create", "a", "--max-cpu", "-1"},
                                             {"tenant", "create", "a", "--max-memory", "lots"},
                                             {"tenant", "create", "a", "--cpus", "1"},
                                             {"tenant", "key", "rotate"},
                                             {"approval", "audit", "0"},
                                             {"approval", "maybe", "x"}}) {
    EXPECT_FALSE(ParseAdminCommand(bad).ok()) << bad.size();
  }
}

}  // namespace
}  // namespace moat::cli
