// The parts of HTTP/1.x (RFC 9112) the egress proxy needs, kept strict: the request head comes
// from sandboxed code and is re-serialised, never passed through, so anything two parsers could
// read differently (bare CR or LF, folded lines, both Content-Length and Transfer-Encoding,
// disagreeing lengths, control bytes) is refused instead of guessed at.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moat::egress {

// Request heads (request line and headers) larger than this are refused.
inline constexpr size_t kMaxHttpHeadBytes = 64 << 10;

struct HttpHeader {
  std::string name;   // as sent
  std::string value;  // without surrounding whitespace
};

struct HttpRequestHead {
  std::string method;     // a token, case preserved ("GET", "CONNECT")
  std::string target;     // the request-target, verbatim
  int minor_version = 1;  // HTTP/1.<minor_version>; 0 or 1
  std::vector<HttpHeader> headers;

  // The values of every header called `name` (case-insensitive), in order.
  std::vector<absl::string_view> Values(absl::string_view name) const;
};

// The length of the head at the start of `buffer`, through its empty line, or 0 when the empty
// line has not arrived yet.
size_t HttpHeadLength(absl::string_view buffer);

// Parses a complete head (HttpHeadLength bytes). InvalidArgument names what is wrong.
absl::StatusOr<HttpRequestHead> ParseHttpRequestHead(absl::string_view head);

struct BodyFraming {
  enum class Kind { kNone, kLength, kChunked };
  Kind kind = Kind::kNone;
  uint64_t length = 0;           // kLength only
  bool expect_continue = false;  // "Expect: 100-continue"
};

// How the request's body is delimited. Refuses a Transfer-Encoding other than "chunked", both
// headers at once (the classic request-smuggling ambiguity), and conflicting or malformed lengths.
absl::StatusOr<BodyFraming> RequestBodyFraming(const HttpRequestHead& head);

// "http://authority/path?query" -> authority and "/path?query" ("/" when empty). The scheme is
// case-insensitive; "https://" and other schemes are refused (TLS goes through CONNECT).
struct AbsoluteForm {
  std::string authority;
  std::string path;
};
absl::StatusOr<AbsoluteForm> ParseAbsoluteForm(absl::string_view target);

// The head sent to the origin: `method path HTTP/1.x`, `Host: host`, the client's end-to-end
// headers (hop-by-hop ones, those the client's Connection header names, Proxy-*, Expect, Host and
// framing headers dropped), Content-Length when `body_length` is set, and `Connection: close`.
std::string BuildOriginRequestHead(const HttpRequestHead& head, absl::string_view path,
                                   absl::string_view host, std::optional<uint64_t> body_length);

// Decodes a chunked body (RFC 9112 section 7.1) as it arrives; trailers are read and dropped.
class ChunkedDecoder {
 public:
  // Consumes a prefix of `input`, appending decoded bytes to `out`. Returns how many bytes were
  // consumed: all of them, or fewer once the body has ended (the rest is not body).
  // InvalidArgument on malformed framing.
  absl::StatusOr<size_t> Feed(absl::string_view input, std::string* out);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  State state_ = State::kSize;
  std::string line_;        // the size or trailer line being read
  uint64_t remaining_ = 0;  // bytes of the current chunk still to come
  size_t trailer_bytes_ = 0;
};

struct HttpResponseHead {
  int status = 0;
  std::string rewritten;  // the head to send to the client
};

// Reads the status code of an origin's response head (HttpHeadLength bytes) and rewrites it for
// the client: Connection, Keep-Alive and Proxy-Connection dropped, `Connection: close` added
// (the proxy serves one request per connection). InvalidArgument when there is no status line.
absl::StatusOr<HttpResponseHead> RewriteResponseHead(absl::string_view head);

}  // namespace moat::egress
