// What a follower replica does with a request: serve it (reads of sandboxes, from its copy of
// the store, marked as possibly stale) or hand it to the leader, which alone places, reserves
// capacity and holds the node table (heartbeats, joins, cordon, the proxy to agents).
//
//   client ──▶ follower ──(GET /sandboxes...)──▶ its table, refreshed from etcd each second
//                 └──(anything else)──▶ leader (its advertise_url, from etcd's election)
//
// The leader's answer is returned as it is: a sized one whole, a stream (a command's
// server-sent events through the proxy, any chunked answer) as it arrives, so a follower adds
// no wait to an event. No leader (an election under way, etcd without quorum): 503 with a
// message that says so. A request already forwarded once is never forwarded again (503, with
// kNotLeaderHeader), so two replicas that each believe the other leads cannot bounce a request
// between them. A follower whose copy of the leader is stale (an election since its last
// renewal) learns so from that refusal, or from a refused connection, and sends the request
// once more to the leader etcd names now: neither reached a leader, so nothing ran twice.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "util/http/httplib_fwd.h"

namespace moat::controller {

// The header a follower marks its reads with ("follower: ...") and the header a forwarded
// request carries.
inline constexpr char kStaleHeader[] = "X-Moat-Stale";
inline constexpr char kForwardedHeader[] = "X-Moat-Forwarded-By";
// On the 503 of a replica that was forwarded a request and does not lead: its own identity.
inline constexpr char kNotLeaderHeader[] = "X-Moat-Not-Leader";

// True for requests a follower answers itself: GET or HEAD of /health, /metrics and the
// sandboxes (get, list, endpoints), not of the proxy to a sandbox or the nodes.
bool FollowerServes(absl::string_view method, absl::string_view path);

struct ForwarderOptions {
  std::string self;  // This replica's advertise URL.
  // The leader's URL as etcd's election says (nullopt: none); Unavailable without etcd.
  // `refused`: a URL found not leading (LeaderElector::KnownLeader's), which must not be the
  // answer again unless etcd still names it.
  std::function<absl::StatusOr<std::optional<std::string>>(
      const std::optional<std::string>& refused)>
      leader;
  absl::Duration timeout = absl::Seconds(90);  // A create may wait for a node (create_timeout).
  std::string ca_file;  // To verify an https leader; empty: the system's CAs.
};

class LeaderForwarder {
 public:
  explicit LeaderForwarder(ForwarderOptions options) : options_(std::move(options)) {}
  // Sends `req` to the leader and copies its answer into `res`, or a 503 that says why not.
  void Forward(const httplib::Request& req, httplib::Response& res) const;

 private:
  const ForwarderOptions options_;
};

}  // namespace moat::controller
