#include "controller/precheck_gate.h"

#include <httplib.h>

#include "absl/strings/str_join.h"
#include "controller/lifecycle_json.h"
#include "controller/log.h"
#include "nlohmann/json.hpp"

namespace moat::controller {
namespace {

using nlohmann::json;

void Refuse(httplib::Response& res, int status, absl::string_view message) {
  res.status = status;
  res.set_content(ErrorJson(ErrorCodeFor(status), message).dump(), "application/json");
}

}  // namespace

bool PrecheckGate::Admit(const Sandbox& sandbox, const httplib::Request& req,
                         httplib::Response& res) {
  if (!config_->enabled) return true;
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("command") || !body["command"].is_string()) {
    Refuse(res, 400, "the body must be execd's command JSON: {\"command\": \"...\"}");
    return false;
  }
  const std::string command = body["command"].get<std::string>();
  precheck::Verdict verdict = precheck::ScanCommand(command);
  metrics_->CountScan(verdict.risk);
  const std::string tags = absl::StrJoin(verdict.Tags(), ",");
  res.set_header("X-Moat-Precheck-Risk", std::string(precheck::RiskName(verdict.risk)));
  res.set_header("X-Moat-Precheck-Tags", tags);
  if (verdict.risk == precheck::Risk::kLow) {
    if (!verdict.findings.empty()) {
      (void)approvals_->Audit(sandbox.tenant, sandbox.id, command, verdict, "Ran");
    }
    return true;
  }
  if (verdict.risk == precheck::Risk::kMedium) {
    res.set_header("X-Moat-Precheck-Policy", config_->medium_policy);
    // Fail closed: a medium command whose scan cannot be recorded does not run unrecorded.
    if (absl::Status st = approvals_->Audit(sandbox.tenant, sandbox.id, command, verdict, "Ran");
        !st.ok()) {
      Refuse(res, 503,
             absl::StrCat("cannot record the pre-check in the audit trail: ", st.message(),
                          "; retry"));
      return false;
    }
    return true;
  }
  absl::StatusOr<precheck::Approval> held =
      approvals_->Submit(sandbox.tenant, sandbox.id, command, verdict);
  if (!held.ok()) {
    Refuse(res, absl::IsResourceExhausted(held.status()) ? 429 : HttpStatusFor(held.status()),
           held.status().message());
    return false;
  }
  res.set_header("X-Moat-Approval-Id", held->id);
  absl::Status decided = approvals_->Wait(held->id);
  if (!decided.ok()) {
    Refuse(res, 403, decided.message());
    return false;
  }
  return true;
}

}  // namespace moat::controller
