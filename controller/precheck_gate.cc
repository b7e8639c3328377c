#include "controller/precheck_gate.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "controller/lifecycle_json.h"
#include "nlohmann/json.hpp"
#include "util/log.h"
#include "util/strict_json.h"

namespace moat::controller {
namespace {

using nlohmann::json;

void Refuse(httplib::Response& res, int status, absl::string_view message) {
  res.status = status;
  res.set_content(ErrorJson(ErrorCodeFor(status), message).dump(), "application/json");
}

}  // namespace

GateDecision PrecheckGate::Check(const std::string& tenant, const std::string& sandbox,
                                 absl::string_view code,
                                 std::optional<precheck::Language> language) {
  GateDecision d;
  d.verdict = language.has_value() ? precheck::Scan(code, *language) : precheck::ScanCommand(code);
  metrics_->CountScan(d.verdict.risk);
  if (d.verdict.risk == precheck::Risk::kLow) {
    if (!d.verdict.findings.empty()) {
      (void)approvals_->Audit(tenant, sandbox, code, d.verdict, "Ran");
    }
    return d;
  }
  if (d.verdict.risk == precheck::Risk::kMedium) {
    d.policy = config_->medium_policy;
    // Fail closed: a medium command whose scan cannot be recorded does not run unrecorded.
    if (absl::Status st = approvals_->Audit(tenant, sandbox, code, d.verdict, "Ran"); !st.ok()) {
      d.status = absl::UnavailableError(absl::StrCat(
          "cannot record the pre-check in the audit trail: ", st.message(), "; retry"));
    }
    return d;
  }
  absl::StatusOr<precheck::Approval> held = approvals_->Submit(tenant, sandbox, code, d.verdict);
  if (!held.ok()) {
    d.status = held.status();
    return d;
  }
  d.approval_id = held->id;
  d.status = approvals_->Wait(held->id);
  return d;
}

bool PrecheckGate::Admit(const Sandbox& sandbox, const httplib::Request& req,
                         httplib::Response& res) {
  if (!config_->enabled) return true;
  json body = ParseStrictJson<json>(req.body).value_or(json::value_t::discarded);
  if (!body.is_object() || !body.contains("command") || !body["command"].is_string()) {
    Refuse(res, 400, "the body must be execd's command JSON: {\"command\": \"...\"}");
    return false;
  }
  GateDecision d =
      Check(sandbox.tenant, sandbox.id, body["command"].get<std::string>(), std::nullopt);
  res.set_header("X-Moat-Precheck-Risk", std::string(precheck::RiskName(d.verdict.risk)));
  res.set_header("X-Moat-Precheck-Tags", absl::StrJoin(d.verdict.Tags(), ","));
  if (!d.policy.empty()) res.set_header("X-Moat-Precheck-Policy", d.policy);
  if (!d.approval_id.empty()) res.set_header("X-Moat-Approval-Id", d.approval_id);
  if (d.status.ok()) return true;
  const int code = absl::IsPermissionDenied(d.status)    ? 403
                   : absl::IsResourceExhausted(d.status) ? 429
                                                         : HttpStatusFor(d.status);
  Refuse(res, code, d.status.message());
  return false;
}

}  // namespace moat::controller
