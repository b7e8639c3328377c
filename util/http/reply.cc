#include "util/http/reply.h"

#include "util/http_status.h"

namespace moat::http {

void SendJson(httplib::Response& res, int http_status, const nlohmann::json& body) {
  res.status = http_status;
  res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), kJsonType);
}

void SendError(httplib::Response& res, int http_status, absl::string_view message,
               absl::string_view code) {
  res.status = http_status;
  res.set_content(ErrorBody(code.empty() ? ErrorCodeFor(http_status) : code, message), kJsonType);
}

void SendStatus(httplib::Response& res, const absl::Status& status) {
  SendError(res, HttpStatusFor(status), status.message());
}

}  // namespace moat::http
