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

#include <optional>
#include <string>

#include "controller/config.h"
#include "controller/precheck/approvals.h"
#include "controller/sandboxes.h"
#include "controller/tenant_metrics.h"
#include "util/http/httplib_fwd.h"

namespace moat::controller {

// What the gate decided for one command or snippet.
struct GateDecision {
  precheck::Verdict verdict;
  absl::Status status;      // OK: run it. PermissionDenied (403): rejected or timed out;
                            // ResourceExhausted (429): too many waiting; other: not recorded.
  std::string policy;       // Medium: the stricter policy to run it under; empty otherwise.
  std::string approval_id;  // High: the hold's id.
};

class PrecheckGate {
 public:
  // Every pointer must outlive the gate.
  PrecheckGate(const PrecheckConfig* config, precheck::ApprovalQueue* approvals,
               TenantMetrics* metrics)
      : config_(config), approvals_(approvals), metrics_(metrics) {}

  // True: forward the request. False: `res` holds the answer (a 400 for a body that is not
  // execd's command JSON, a 403 for a rejected command, a 429 when too many wait).
  bool Admit(const Sandbox& sandbox, const httplib::Request& req, httplib::Response& res);

  // The same for any caller (/v1/run): scans `code` (a command line when `language` is none),
  // records it, and for high risk blocks until it is decided.
  GateDecision Check(const std::string& tenant, const std::string& sandbox, absl::string_view code,
                     std::optional<precheck::Language> language);

  const std::string& MediumPolicy() const { return config_->medium_policy; }

 private:
  const PrecheckConfig* config_;
  precheck::ApprovalQueue* approvals_;
  TenantMetrics* metrics_;
};

}  // namespace moat::controller
