// How an agent and the controller prove to each other that they hold the same join token
// without sending it (docs/controller.md, "Joining"). Both sides compute these; the token never
// crosses the wire, so neither a fake controller nor a listener learns it.
//
//   agent → controller   POST /internal/v1/nodes/join {name, nonce, timestamp, proof: AgentProof}
//   controller → agent   {session_token, proof: ControllerProof}   (the agent checks it before
//                                                                    sending anything secret)
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace moat {

// Hex HMAC-SHA256 over the node's name, a fresh random nonce and the time (Unix seconds).
std::string JoinAgentProof(absl::string_view join_token, absl::string_view node_name,
                           absl::string_view nonce, int64_t unix_seconds);
// Hex HMAC-SHA256 over the same name and nonce, with another label, so one proof is never the
// other.
std::string JoinControllerProof(absl::string_view join_token, absl::string_view node_name,
                                absl::string_view nonce);

}  // namespace moat
