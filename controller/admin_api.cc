#include "controller/admin_api.h"

#include <httplib.h>

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "controller/lifecycle_json.h"
#include "nlohmann/json.hpp"
#include "util/http/reply.h"
#include "util/log.h"
#include "util/quote.h"
#include "util/status_macros.h"
#include "util/strict_json.h"
#include "util/token.h"

namespace moat::controller {
namespace {

using nlohmann::json;
using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

using http::SendJson;
using http::SendStatus;

json QuotaJson(const TenantQuota& q) {
  return {{"max_sandboxes", q.max_sandboxes},
          {"max_cpu", q.max_cpu},
          {"max_memory", q.max_memory},
          {"creates_per_minute", q.creates_per_minute}};
}

// A quota object; every field optional (0: no limit), unknown fields refused.
absl::StatusOr<TenantQuota> ParseQuota(const json& j) {
  TenantQuota q;
  if (j.is_null()) return q;
  if (!j.is_object()) return absl::InvalidArgumentError("quota must be an object");
  // Each value within [0, max], whole where the quota counts things; 0 is no limit.
  auto number = [](const std::string& key, const json& value, double max,
                   bool whole) -> absl::StatusOr<double> {
    const double v = value.is_number() ? value.get<double>() : -1;
    if (!value.is_number() || !(v >= 0 && v <= max) || (whole && v != std::floor(v))) {
      return absl::InvalidArgumentError(absl::StrCat("quota.", key, " must be ",
                                                     whole ? "a whole number" : "a number",
                                                     " from 0 to ", max, " (0: no limit)"));
    }
    return v;
  };
  for (const auto& [key, value] : j.items()) {
    if (key == "max_sandboxes") {
      ASSIGN_OR_RETURN(double v, number(key, value, 1'000'000, /*whole=*/true));
      q.max_sandboxes = static_cast<int>(v);
    } else if (key == "max_cpu") {
      ASSIGN_OR_RETURN(q.max_cpu, number(key, value, 1'000'000, /*whole=*/false));
    } else if (key == "max_memory") {
      ASSIGN_OR_RETURN(double v, number(key, value, 1LL << 60, /*whole=*/true));  // 1 EiB
      q.max_memory = static_cast<uint64_t>(v);
    } else if (key == "creates_per_minute") {
      ASSIGN_OR_RETURN(q.creates_per_minute, number(key, value, 1'000'000, /*whole=*/false));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown quota field ", QuoteForMessage(key),
          "; use max_sandboxes, max_cpu (cores), max_memory (bytes), creates_per_minute"));
    }
  }
  return q;
}

json TenantJson(const TenantRecord& t, const TenantUsage& u) {
  return {{"name", t.name},
          {"quota", QuotaJson(t.quota)},
          {"createdAt", FormatApiTime(t.created_at)},
          {"usage", {{"sandboxes", u.sandboxes}, {"cpu", u.cpu}, {"memory", u.memory}}}};
}

json KeyJson(const KeyRecord& k) {
  return {{"id", k.id}, {"tenant", k.tenant}, {"createdAt", FormatApiTime(k.created_at)}};
}

json IssuedJson(const IssuedKey& k) {
  json j = KeyJson(k.record);
  j["key"] = k.plaintext;
  return j;
}

json ApprovalJson(const precheck::Approval& a) {
  return {{"id", a.id},
          {"tenant", a.tenant},
          {"sandbox", a.sandbox},
          {"command", a.command},
          {"risk", precheck::RiskName(a.risk)},
          {"tags", a.tags},
          {"state", a.state},
          {"by", a.by},
          {"reason", a.reason},
          {"createdAt", FormatApiTime(a.created_at)}};
}

}  // namespace

bool AdminApi::IsAdmin(const httplib::Request& req) const {
  const std::string header = req.get_header_value("Authorization");
  absl::string_view presented = BearerToken(header);
  return !presented.empty() && ConstantTimeEquals(presented, admin_key_);
}

void AdminApi::Register(httplib::Server& s) {
  // Every admin route checks the admin key first; a wrong one learns nothing else.
  auto admin = [this](Handler h) {
    return [this, h](const httplib::Request& req, httplib::Response& res) {
      if (!IsAdmin(req)) {
        SendJson(res, 401,
                 ErrorJson(ErrorCodeFor(401),
                           "missing or wrong admin key: send \"Authorization: Bearer KEY\" with "
                           "the key in the controller's admin_key_file"));
        return;
      }
      h(req, res);
    };
  };
  auto usage_of = [this](const std::string& tenant) {
    auto all = sandboxes_->UsageByTenant();
    auto it = all.find(tenant);
    return it == all.end() ? TenantUsage{} : it->second;
  };

  s.Post("/v1/admin/tenants", admin([this, usage_of](const auto& req, auto& res) {
           json body = ParseStrictJson<json>(req.body).value_or(json::value_t::discarded);
           if (!body.is_object() || !body.contains("name") || !body["name"].is_string()) {
             return SendStatus(
                 res, absl::InvalidArgumentError(
                          "send {\"name\": \"TENANT\", \"quota\": {...}} (quota optional)"));
           }
           absl::StatusOr<TenantQuota> quota = ParseQuota(body.value("quota", json()));
           if (!quota.ok()) return SendStatus(res, quota.status());
           absl::StatusOr<TenantRecord> t = tenants_->CreateTenant(body["name"], *quota);
           if (!t.ok()) return SendStatus(res, t.status());
           LogInfo(absl::StrCat("admin: created tenant ", t->name));
           SendJson(res, 201, TenantJson(*t, usage_of(t->name)));
         }));
  s.Get("/v1/admin/tenants", admin([this](const auto&, auto& res) {
          absl::StatusOr<std::vector<TenantRecord>> list = tenants_->ListTenants();
          if (!list.ok()) return SendStatus(res, list.status());
          auto usage = sandboxes_->UsageByTenant();
          json items = json::array();
          for (const TenantRecord& t : *list) items.push_back(TenantJson(t, usage[t.name]));
          SendJson(res, 200, {{"items", items}});
        }));
  s.Get(R"(/v1/admin/tenants/([^/]+))", admin([this, usage_of](const auto& req, auto& res) {
          absl::StatusOr<TenantRecord> t = tenants_->GetTenant(req.matches[1].str());
          if (!t.ok()) return SendStatus(res, t.status());
          SendJson(res, 200, TenantJson(*t, usage_of(t->name)));
        }));
  s.Put(R"(/v1/admin/tenants/([^/]+)/quota)", admin([this, usage_of](const auto& req, auto& res) {
          json body = ParseStrictJson<json>(req.body).value_or(json::value_t::discarded);
          if (body.is_discarded()) return SendStatus(res, absl::InvalidArgumentError("bad JSON"));
          absl::StatusOr<TenantQuota> quota = ParseQuota(body);
          if (!quota.ok()) return SendStatus(res, quota.status());
          absl::StatusOr<TenantRecord> t = tenants_->SetQuota(req.matches[1].str(), *quota);
          if (!t.ok()) return SendStatus(res, t.status());
          SendJson(res, 200, TenantJson(*t, usage_of(t->name)));
        }));
  s.Post(R"(/v1/admin/tenants/([^/]+)/keys)", admin([this](const auto& req, auto& res) {
           absl::StatusOr<IssuedKey> k = tenants_->CreateKey(req.matches[1].str());
           if (!k.ok()) return SendStatus(res, k.status());
           LogInfo(
               absl::StrCat("admin: key ", k->record.id, " created for tenant ", k->record.tenant));
           SendJson(res, 201, IssuedJson(*k));
         }));
  s.Get(R"(/v1/admin/tenants/([^/]+)/keys)", admin([this](const auto& req, auto& res) {
          absl::StatusOr<std::vector<KeyRecord>> keys = tenants_->ListKeys(req.matches[1].str());
          if (!keys.ok()) return SendStatus(res, keys.status());
          json items = json::array();
          for (const KeyRecord& k : *keys) items.push_back(KeyJson(k));
          SendJson(res, 200, {{"items", items}});
        }));
  s.Post(R"(/v1/admin/keys/([0-9a-f]{16})/rotate)", admin([this](const auto& req, auto& res) {
           absl::StatusOr<IssuedKey> k = tenants_->RotateKey(req.matches[1].str());
           if (!k.ok()) return SendStatus(res, k.status());
           LogInfo(absl::StrCat("admin: key ", req.matches[1].str(), " rotated to ", k->record.id));
           SendJson(res, 200, IssuedJson(*k));
         }));
  s.Delete(R"(/v1/admin/keys/([0-9a-f]{16}))", admin([this](const auto& req, auto& res) {
             absl::Status st = tenants_->RevokeKey(req.matches[1].str());
             if (!st.ok()) return SendStatus(res, st);
             LogInfo(absl::StrCat("admin: key ", req.matches[1].str(), " revoked"));
             res.status = 204;
           }));
  s.Get("/v1/admin/approvals", admin([this](const auto&, auto& res) {
          json items = json::array();
          for (const precheck::Approval& a : approvals_->Pending())
            items.push_back(ApprovalJson(a));
          SendJson(res, 200, {{"items", items}});
        }));
  s.Post(R"(/v1/admin/approvals/([^/]+)/(approve|reject))",
         admin([this](const auto& req, auto& res) {
           json body = ParseStrictJson<json>(req.body.empty() ? "{}" : req.body).value_or(json());
           std::string reason;
           if (body.is_object() && body.contains("reason") && body["reason"].is_string()) {
             reason = body["reason"];
           }
           absl::StatusOr<precheck::Approval> a = approvals_->Decide(
               req.matches[1].str(), req.matches[2].str() == "approve", "admin", reason);
           if (!a.ok()) return SendStatus(res, a.status());
           SendJson(res, 200, ApprovalJson(*a));
         }));
  s.Get("/v1/admin/audit", admin([this](const auto& req, auto& res) {
          size_t limit = 100;
          if (req.has_param("limit") && (!absl::SimpleAtoi(req.get_param_value("limit"), &limit) ||
                                         limit < 1 || limit > 1000)) {
            return SendStatus(res, absl::InvalidArgumentError("limit must be from 1 to 1000"));
          }
          absl::StatusOr<std::vector<std::string>> trail = approvals_->AuditTrail(limit);
          if (!trail.ok()) return SendStatus(res, trail.status());
          json items = json::array();
          for (const std::string& r : *trail) items.push_back(json::parse(r, nullptr, false));
          SendJson(res, 200, {{"items", items}});
        }));
}

}  // namespace moat::controller
