// A small HTTP/1.1 client over a socket, for the CLI's controller commands (`moat run --server`,
// `moat sandbox ...`, `moat node ...`, `moat tenant ...`). The moat binary is static, and
// Debian's cpp-httplib is a shared library (with OpenSSL, zlib and brotli behind it): none of it
// links statically. The CLI needs little: one request per connection, a Content-Length body,
// and a response read to its end, chunked or not, handed to a callback as it arrives (a
// command's server-sent events). https:// is TLS through OpenSSL's static libssl (libssl-dev),
// the certificate verified against the system's store or a given CA file, for the URL's host
// name or address; names resolve through glibc's built-in files and dns lookups.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace moat::cli {

struct HttpUrl {
  std::string host;       // A name, or an IPv4 or IPv6 literal.
  int port = 80;          // 443 for https:// unless given.
  std::string base_path;  // Without a trailing '/'; "" for the root.
  bool tls = false;       // https://
  // https://: the PEM CA bundle to verify the controller with; empty: the system's store.
  std::string ca_file;
};
// "http://127.0.0.1:8080", "https://ctl.example:8443", "http://[::1]:8080/prefix".
// InvalidArgument for anything else.
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url);

struct HttpResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // Names in lower case.
  std::string body;                                          // Empty when a body callback took it.
};

struct HttpRequest {
  std::string method = "GET";
  std::string path;  // Appended to the URL's base path; starts with '/'.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string content_type = "application/json";
  absl::Duration timeout = absl::Seconds(60);  // For the connect and for each read.
  // When set, the body is given to it piece by piece (de-chunked) instead of kept; returning
  // false stops the read.
  std::function<bool(absl::string_view)> on_body;
};

// One request on a fresh connection (Connection: close). Unavailable when the server cannot be
// reached or the answer is not HTTP; any HTTP status is a response, not an error.
absl::StatusOr<HttpResponse> SendHttp(const HttpUrl& url, const HttpRequest& request);

}  // namespace moat::cli
