#include "sandbox/cli/tenant_command.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "sandbox/cli/http_client.h"
#include "util/units.h"

namespace moat::cli {
namespace {

using nlohmann::json;

constexpr char kUsage[] = R"(usage: moat tenant create NAME [QUOTA...]     a tenant (quotas below)
       moat tenant ls                              tenants, their quotas and usage
       moat tenant quota NAME [QUOTA...]           replace a tenant's quotas
       moat tenant key create TENANT               a new key, printed once
       moat tenant key ls TENANT                   the tenant's key ids
       moat tenant key rotate KEY_ID               a new key; the old one stops at once
       moat tenant key revoke KEY_ID               the key stops at once
       moat approval ls                            commands waiting for approval
       moat approval approve|reject ID [REASON]    decide one
       moat approval audit [LIMIT]                 the pre-check's audit trail
QUOTA: --max-sandboxes N  --max-cpu CORES  --max-memory SIZE (512M, 4G)  --creates-per-minute N
       (absent or 0: no limit)
common: --server URL (or MOAT_SERVER; default http://127.0.0.1:8080)
        --admin-key-file FILE (or MOAT_ADMIN_KEY): the controller's admin_key_file
        --ca-file FILE (or MOAT_CA_FILE): the CA of an https:// controller's certificate
)";

absl::StatusOr<json> ParseQuotaFlags(const std::vector<std::string>& args, size_t from) {
  json q = json::object();
  for (size_t i = from; i < args.size(); ++i) {
    std::string flag = args[i], value;
    if (size_t eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    }
    double number = 0;
    if (flag == "--max-memory") {
      absl::StatusOr<uint64_t> bytes = ParseSize(value);
      if (!bytes.ok()) return absl::InvalidArgumentError("--max-memory: a size like 512M or 4G");
      q["max_memory"] = *bytes;
      continue;
    }
    if (!absl::SimpleAtod(value, &number) || number < 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": a number, 0 or more"));
    }
    if (flag == "--max-sandboxes") {
      q["max_sandboxes"] = static_cast<int>(number);
    } else if (flag == "--max-cpu") {
      q["max_cpu"] = number;
    } else if (flag == "--creates-per-minute") {
      q["creates_per_minute"] = number;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown quota flag ", flag));
    }
  }
  return q;
}

// One request (cli/http_client.h: http:// or https://, Connection: close); the status and body.
absl::StatusOr<std::pair<int, std::string>> Send(const HttpUrl& url, const std::string& key,
                                                 const AdminRequest& r) {
  HttpRequest req;
  req.method = r.method;
  req.path = r.path;
  req.body = r.body;
  req.headers.emplace_back("Authorization", absl::StrCat("Bearer ", key));
  absl::StatusOr<HttpResponse> res = SendHttp(url, req);
  if (!res.ok()) return res.status();
  return std::make_pair(res->status, std::move(res->body));
}

}  // namespace

absl::StatusOr<AdminRequest> ParseAdminCommand(const std::vector<std::string>& a) {
  auto at = [&](size_t i) { return i < a.size() ? a[i] : std::string(); };
  const absl::Status usage = absl::InvalidArgumentError("see moat tenant --help");
  if (at(0) == "tenant") {
    if (at(1) == "ls" && a.size() == 2) return AdminRequest{"GET", "/v1/admin/tenants", ""};
    if ((at(1) == "create" || at(1) == "quota") && !at(2).empty()) {
      absl::StatusOr<json> quota = ParseQuotaFlags(a, 3);
      if (!quota.ok()) return quota.status();
      if (at(1) == "create") {
        return AdminRequest{"POST", "/v1/admin/tenants",
                            json{{"name", at(2)}, {"quota", *quota}}.dump()};
      }
      return AdminRequest{"PUT", absl::StrCat("/v1/admin/tenants/", at(2), "/quota"),
                          quota->dump()};
    }
    if (at(1) == "key" && a.size() == 4) {
      if (at(2) == "create") {
        return AdminRequest{"POST", absl::StrCat("/v1/admin/tenants/", at(3), "/keys"), ""};
      }
      if (at(2) == "ls") {
        return AdminRequest{"GET", absl::StrCat("/v1/admin/tenants/", at(3), "/keys"), ""};
      }
      if (at(2) == "rotate") {
        return AdminRequest{"POST", absl::StrCat("/v1/admin/keys/", at(3), "/rotate"), ""};
      }
      if (at(2) == "revoke") {
        return AdminRequest{"DELETE", absl::StrCat("/v1/admin/keys/", at(3)), ""};
      }
    }
    return usage;
  }
  if (at(0) == "approval") {
    if (at(1) == "ls" && a.size() == 2) return AdminRequest{"GET", "/v1/admin/approvals", ""};
    if ((at(1) == "approve" || at(1) == "reject") && !at(2).empty() && a.size() <= 4) {
      return AdminRequest{"POST", absl::StrCat("/v1/admin/approvals/", at(2), "/", at(1)),
                          json{{"reason", at(3)}}.dump()};
    }
    if (at(1) == "audit" && a.size() <= 3) {
      std::string limit = at(2).empty() ? "100" : at(2);
      int n = 0;
      if (!absl::SimpleAtoi(limit, &n) || n < 1 || n > 1000) {
        return absl::InvalidArgumentError("the audit LIMIT is from 1 to 1000");
      }
      return AdminRequest{"GET", absl::StrCat("/v1/admin/audit?limit=", n), ""};
    }
  }
  return usage;
}

int TenantCommandMain(const std::vector<std::string>& all) {
  std::vector<std::string> args;
  std::string server = getenv("MOAT_SERVER") ? getenv("MOAT_SERVER") : "http://127.0.0.1:8080";
  std::string key = getenv("MOAT_ADMIN_KEY") ? getenv("MOAT_ADMIN_KEY") : "";
  std::string ca_file = getenv("MOAT_CA_FILE") ? getenv("MOAT_CA_FILE") : "";
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == "--help" || all[i] == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if ((all[i] == "--server" || all[i] == "--admin-key-file" || all[i] == "--ca-file") &&
        i + 1 < all.size()) {
      if (all[i] == "--server") {
        server = all[++i];
      } else if (all[i] == "--ca-file") {
        ca_file = all[++i];
      } else {
        std::ifstream in(all[++i]);
        std::stringstream text;
        text << in.rdbuf();
        if (!in) {
          std::fprintf(stderr, "moat: cannot read the admin key file \"%s\"\n", all[i].c_str());
          return 125;
        }
        key = std::string(absl::StripAsciiWhitespace(text.str()));
      }
      continue;
    }
    args.push_back(all[i]);
  }
  absl::StatusOr<AdminRequest> request = ParseAdminCommand(args);
  absl::StatusOr<HttpUrl> url = ParseHttpUrl(server);
  if (url.ok()) url->ca_file = ca_file;
  if (!request.ok() || !url.ok()) {
    std::fprintf(stderr, "moat: %s\n%s",
                 std::string((request.ok() ? url.status() : request.status()).message()).c_str(),
                 request.ok() ? "" : kUsage);
    return 125;
  }
  if (key.empty()) {
    std::fputs("moat: no admin key: pass --admin-key-file FILE or set MOAT_ADMIN_KEY\n", stderr);
    return 125;
  }
  absl::StatusOr<std::pair<int, std::string>> answer = Send(*url, key, *request);
  if (!answer.ok()) {
    std::fprintf(stderr, "moat: %s\n", std::string(answer.status().message()).c_str());
    return 1;
  }
  auto [status, body] = *answer;
  json j = json::parse(body, nullptr, false);
  if (status >= 300) {
    std::fprintf(stderr, "moat: the controller answered %d: %s\n", status,
                 j.is_object() ? j.value("message", body).c_str() : body.c_str());
    return 1;
  }
  if (!body.empty()) std::printf("%s\n", j.is_discarded() ? body.c_str() : j.dump(2).c_str());
  if (j.is_object() && j.contains("key")) {
    std::fputs("moat: the key is shown this once; the controller keeps only its hash\n", stderr);
  }
  return 0;
}

}  // namespace moat::cli
