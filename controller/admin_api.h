// The admin API, under /v1/admin, for the holder of the admin key (admin_key_file; sent as
// "Authorization: Bearer KEY"). api/controller.yaml documents it; `moat tenant ...` and
// `moat approval ...` call it.
//
//   POST   /v1/admin/tenants                       {name, quota?}          -> 201 tenant
//   GET    /v1/admin/tenants                                               -> {items}
//   GET    /v1/admin/tenants/{name}                                        -> tenant + usage
//   PUT    /v1/admin/tenants/{name}/quota          {max_sandboxes, ...}    -> tenant
//   POST   /v1/admin/tenants/{name}/keys                                   -> 201 {id, key}
//   GET    /v1/admin/tenants/{name}/keys                                   -> {items: [{id}]}
//   POST   /v1/admin/keys/{id}/rotate                                      -> {id, key}
//   DELETE /v1/admin/keys/{id}                                             -> 204
//   GET    /v1/admin/approvals                                             -> {items}
//   POST   /v1/admin/approvals/{id}/(approve|reject) {reason?}             -> the decision
//   GET    /v1/admin/audit?limit=N                                         -> {items}
// A key's plaintext is in the answer that makes it, and nowhere else.
#pragma once

#include <string>

#include "controller/precheck/approvals.h"
#include "controller/sandboxes.h"
#include "controller/tenants/tenants.h"

namespace httplib {
class Server;
struct Request;
}  // namespace httplib

namespace moat::controller {

class AdminApi {
 public:
  // Every pointer must outlive the API. `admin_key` at least 16 bytes.
  AdminApi(std::string admin_key, TenantRegistry* tenants, precheck::ApprovalQueue* approvals,
           const SandboxManager* sandboxes)
      : admin_key_(std::move(admin_key)),
        tenants_(tenants),
        approvals_(approvals),
        sandboxes_(sandboxes) {}

  void Register(httplib::Server& server);
  // Whether the request carries the admin key ("Authorization: Bearer KEY").
  bool IsAdmin(const httplib::Request& req) const;

 private:
  const std::string admin_key_;
  TenantRegistry* tenants_;
  precheck::ApprovalQueue* approvals_;
  const SandboxManager* sandboxes_;
};

}  // namespace moat::controller
