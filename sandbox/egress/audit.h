// One JSON line per egress request, allowed or denied, written by the supervisor to a file the
// sandbox cannot see. Denials also become the run's `network` violations (the sink decides).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "util/unique_fd.h"

namespace moat::egress {

struct AuditRecord {
  absl::Time time;
  std::string sandbox;   // the sandbox's id
  std::string protocol;  // "http", "connect", "socks5", "transparent", "dns"
  std::string method;    // HTTP method, "CONNECT", "SOCKS5", "TCP", "A"/"AAAA" for DNS
  std::string host;      // canonical host, or the raw one (escaped) when it was refused as invalid
  uint16_t port = 0;
  std::string address;      // the address dialled (or refused); empty when never resolved
  uint64_t bytes_up = 0;    // sandbox -> destination, bodies and tunnelled bytes
  uint64_t bytes_down = 0;  // destination -> sandbox
  int status = 0;           // HTTP status sent to the client (200 for a tunnel that opened)
  bool allowed = false;
  std::string reason;       // why denied, or `allowed by "<pattern>"`
  std::string body_sha256;  // first 16 hex digits of the request body's SHA-256; empty if none
};

// {"time":"2026-11-30T05:40:00.123Z","sandbox":...,"protocol":...,"method":...,"host":...,
//  "port":443,"address":...,"bytes_up":0,"bytes_down":0,"status":403,"allowed":false,
//  "reason":...,"body_sha256":...}  (no newline)
std::string AuditRecordToJson(const AuditRecord& record);

// Thread-safe.
class AuditSink {
 public:
  virtual ~AuditSink() = default;
  virtual void Record(const AuditRecord& record) = 0;
};

// Appends lines to a file (created 0600, O_APPEND, one write() per line so concurrent sandboxes
// writing the same file do not interleave within a line).
class AuditLog : public AuditSink {
 public:
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(const std::string& path);
  void Record(const AuditRecord& record) override;

 private:
  explicit AuditLog(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace moat::egress
