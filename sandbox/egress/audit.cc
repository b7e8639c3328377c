#include "sandbox/egress/audit.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "util/errno_status.h"

namespace moat::egress {

std::string AuditRecordToJson(const AuditRecord& record) {
  // ordered_json keeps the documented field order, so lines read the same way every time.
  nlohmann::ordered_json line = {
      {"time", absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", record.time, absl::UTCTimeZone())},
      {"sandbox", record.sandbox},
      {"protocol", record.protocol},
      {"method", record.method},
      {"host", record.host},
      {"port", record.port},
      {"address", record.address},
      {"bytes_up", record.bytes_up},
      {"bytes_down", record.bytes_down},
      {"status", record.status},
      {"allowed", record.allowed},
      {"reason", record.reason},
      {"body_sha256", record.body_sha256},
  };
  // Hosts and reasons can carry bytes that sandboxed code chose; invalid UTF-8 becomes U+FFFD
  // instead of an exception, and every control byte is escaped by the serializer.
  return line.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return ErrnoStatus(absl::StrCat("open the egress audit log \"", path,
                                    "\" (its directory must exist and be writable)"));
  }
  return std::unique_ptr<AuditLog>(new AuditLog(UniqueFd(fd)));
}

void AuditLog::Record(const AuditRecord& record) {
  const std::string line = absl::StrCat(AuditRecordToJson(record), "\n");
  // One write() per line: with O_APPEND each write lands whole at the end of the file, so lines
  // from concurrent writers never interleave. A short write (disk full) loses the rest of the
  // line rather than splitting it across another writer's.
  ssize_t n;
  do {
    n = ::write(fd_.get(), line.data(), line.size());
  } while (n < 0 && errno == EINTR);
}

}  // namespace moat::egress
