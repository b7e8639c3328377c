// {controller}/sandboxes/{id}/proxy/{port}/... -> the agent's per-sandbox API. The endpoint the
// lifecycle API hands out (GET /sandboxes/{id}/endpoints/{port}) points here, so it stays the
// same for the sandbox's whole life (the SDK caches it for 10 minutes).
//
//   port 44772 (execd)   -> {agent}/v1/sandboxes/{agent id}/execd/..., with the sandbox's token
//   port 18080 (egress)  -> answered here: GET /policy says the profile's policy is in force
//                           (the SDK requires a 2xx)
//
// The caller's credentials (OPEN-SANDBOX-API-KEY, Authorization) are stripped before
// forwarding. Responses stream: each chunk the agent sends (server-sent events of a running
// command) is written to the client as it arrives, never buffered whole.
#pragma once

#include <string>

#include "controller/metrics.h"
#include "controller/nodes.h"
#include "controller/sandboxes.h"
#include "util/http/client_pool.h"
#include "util/http/httplib_fwd.h"

namespace moat::controller {

inline constexpr int kExecdPort = 44772;
inline constexpr int kEgressPort = 18080;

// Forwards `req` (whose path ends in `rest`, "" or "/command" etc.) to the sandbox's agent, on
// a kept-alive connection from `pool` (null: a connection of its own).
void ProxyToSandbox(const httplib::Request& req, httplib::Response& res, const Sandbox& sandbox,
                    const AgentEndpoint& agent, int port, const std::string& rest,
                    ControllerMetrics* metrics, http::ClientPool* pool = nullptr);

}  // namespace moat::controller
