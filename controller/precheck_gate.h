// The pre-check in front of execd's POST /command through the controller's proxy (proxy.h):
// the command is scanned (precheck/precheck.h) before it is forwarded.
//   low     forwarded;
//   medium  forwarded, recorded in the audit trail; X-Moat-Precheck-Policy names
//           precheck.medium_policy. A sandbox's policy is fixed when it is made, so through the
//           proxy a medium command runs under the sandbox's own policy; /v1/run, which makes a
//           fresh sandbox per run, runs it under medium_policy (MediumPolicy()).
//   high    held in PendingApproval (approvals.h) until an administrator decides; rejected or
//           timed out, the caller gets a 403 that says why; approved, it is forwarded.
// Every answer carries X-Moat-Precheck-Risk and X-Moat-Precheck-Tags.
#pragma once

#include <string>

#include "controller/config.h"
#include "controller/precheck/approvals.h"
#include "controller/sandboxes.h"
#include "controller/tenant_metrics.h"

namespace httplib {
struct Request;
struct Response;
}  // namespace httplib

namespace moat::controller {

class PrecheckGate {
 public:
  // Every pointer must outlive the gate.
  PrecheckGate(const PrecheckConfig* config, precheck::ApprovalQueue* approvals,
               TenantMetrics* metrics)
      : config_(config), approvals_(approvals), metrics_(metrics) {}

  // True: forward the request. False: `res` holds the answer (a 400 for a body that is not
  // execd's command JSON, a 403 for a rejected command, a 429 when too many wait).
  bool Admit(const Sandbox& sandbox, const httplib::Request& req, httplib::Response& res);

  const std::string& MediumPolicy() const { return config_->medium_policy; }

 private:
  const PrecheckConfig* config_;
  precheck::ApprovalQueue* approvals_;
  TenantMetrics* metrics_;
};

}  // namespace moat::controller
