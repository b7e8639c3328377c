#include "sandbox/isolation.h"

#include <utility>

#include "util/status_macros.h"

namespace moat::sandbox {

absl::StatusOr<Isolation> IsolationFor(const Policy& policy, const IsolationInputs& inputs) {
  Isolation out;
  ASSIGN_OR_RETURN(out.mounts,
                   MountOptionsFor(policy, inputs.host, inputs.workspace, inputs.working_dir));
  std::vector<std::string>& hidden = out.mounts.hidden_paths;
  hidden.insert(hidden.end(), inputs.private_paths.begin(), inputs.private_paths.end());
  // The audit log is the supervisor's record of what the sandbox did: it must not read it.
  hidden.push_back(egress::kStateDir);
  if (inputs.audit_log) hidden.push_back(*inputs.audit_log);
  if (!policy.allowed_domains.empty()) {
    out.egress = EgressOptionsFor(policy, inputs.audit_log.value_or(egress::kDefaultAuditLog));
  }
  return out;
}

egress::EgressOptions EgressOptionsFor(const Policy& policy, const std::string& audit_log) {
  egress::EgressOptions e;
  e.allowed_domains = policy.allowed_domains;
  e.denied_domains = policy.denied_domains;
  e.allowed_cidrs = policy.allowed_cidrs;
  e.dns_servers = policy.dns_servers;
  e.max_request_body_bytes = policy.egress.max_request_body_bytes;
  e.requests_per_minute = policy.egress.requests_per_minute;
  e.transparent = policy.transparent;
  e.audit_log = audit_log;
  return e;
}

}  // namespace moat::sandbox
