#include "sandbox/egress/http_message.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace moat::egress {
namespace {

constexpr size_t kMaxChunkLineBytes = 4096;
constexpr size_t kMaxTrailerBytes = 16 << 10;

// RFC 9110 section 5.6.2.
bool IsTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         absl::string_view("!#$%&'*+-.^_`|~").find(c) != absl::string_view::npos;
}

bool IsToken(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), IsTokenChar);
}

// Field values: visible ASCII, space, tab and obs-text; no other control byte (NUL, CR, LF, DEL).
bool IsFieldValue(absl::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u == '\t' || (u >= 0x20 && u != 0x7f);
  });
}

// Request targets: visible ASCII only.
bool IsTargetText(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return u > 0x20 && u < 0x7f;
  });
}

absl::Status Bad(absl::string_view what) { return absl::InvalidArgumentError(std::string(what)); }

// The lines of a head: split on CRLF, refusing a CR or LF anywhere else. The last element is
// the empty line that ends the head, dropped here.
absl::StatusOr<std::vector<absl::string_view>> HeadLines(absl::string_view head) {
  if (!absl::ConsumeSuffix(&head, "\r\n\r\n")) return Bad("the head does not end in CRLF CRLF");
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  for (absl::string_view line : lines) {
    if (line.find_first_of("\r\n") != absl::string_view::npos) {
      return Bad("a bare CR or LF in the head (lines must end in CRLF)");
    }
  }
  return lines;
}

absl::StatusOr<HttpHeader> ParseHeaderLine(absl::string_view line) {
  if (line.empty()) return Bad("an empty header line");
  if (line[0] == ' ' || line[0] == '\t') return Bad("a folded header line (obsolete line folding)");
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos) return Bad("a header line without ':'");
  absl::string_view name = line.substr(0, colon);
  if (!IsToken(name)) return Bad("a header name that is not a token (spaces or odd bytes)");
  absl::string_view value = line.substr(colon + 1);
  value = absl::StripLeadingAsciiWhitespace(value);
  value = absl::StripTrailingAsciiWhitespace(value);
  if (!IsFieldValue(value)) {
    return Bad(absl::StrCat("a control byte in the value of header \"", name, "\""));
  }
  return HttpHeader{std::string(name), std::string(value)};
}

// Comma-separated list elements, trimmed, empty ones dropped, lower-cased.
std::vector<std::string> ListTokens(absl::string_view value) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) out.push_back(absl::AsciiStrToLower(part));
  }
  return out;
}

// Headers that describe one connection, not the request (RFC 9110 section 7.6.1), plus the ones
// the proxy writes itself or answers itself.
bool IsDroppedRequestHeader(absl::string_view lower_name) {
  static const auto* const kDropped = new absl::flat_hash_set<absl::string_view>{
      "connection", "keep-alive",     "te",    "trailer", "transfer-encoding", "upgrade",
      "host",       "content-length", "expect"};
  return kDropped->contains(lower_name) || absl::StartsWith(lower_name, "proxy-");
}

}  // namespace

std::vector<absl::string_view> HttpRequestHead::Values(absl::string_view name) const {
  std::vector<absl::string_view> out;
  for (const HttpHeader& h : headers) {
    if (absl::EqualsIgnoreCase(h.name, name)) out.push_back(h.value);
  }
  return out;
}

size_t HttpHeadLength(absl::string_view buffer) {
  const size_t end = buffer.find("\r\n\r\n");
  return end == absl::string_view::npos ? 0 : end + 4;
}

absl::StatusOr<HttpRequestHead> ParseHttpRequestHead(absl::string_view head) {
  absl::StatusOr<std::vector<absl::string_view>> lines = HeadLines(head);
  if (!lines.ok()) return lines.status();
  HttpRequestHead out;
  std::vector<absl::string_view> parts = absl::StrSplit((*lines)[0], ' ');
  if (parts.size() != 3) {
    return Bad("the request line is not METHOD SP TARGET SP VERSION with single spaces");
  }
  if (!IsToken(parts[0])) return Bad("the method is not a token");
  if (!IsTargetText(parts[1]))
    return Bad("the request target has spaces, control or non-ASCII bytes");
  if (parts[2] == "HTTP/1.1") {
    out.minor_version = 1;
  } else if (parts[2] == "HTTP/1.0") {
    out.minor_version = 0;
  } else {
    return Bad("the version is not HTTP/1.0 or HTTP/1.1");
  }
  out.method = std::string(parts[0]);
  out.target = std::string(parts[1]);
  for (size_t i = 1; i < lines->size(); ++i) {
    absl::StatusOr<HttpHeader> header = ParseHeaderLine((*lines)[i]);
    if (!header.ok()) return header.status();
    out.headers.push_back(*std::move(header));
  }
  return out;
}

absl::StatusOr<BodyFraming> RequestBodyFraming(const HttpRequestHead& head) {
  BodyFraming framing;
  for (absl::string_view expect : head.Values("Expect")) {
    if (!absl::EqualsIgnoreCase(expect, "100-continue")) {
      return absl::FailedPreconditionError(absl::StrCat("unsupported Expect \"", expect, "\""));
    }
    framing.expect_continue = true;
  }
  const std::vector<absl::string_view> encodings = head.Values("Transfer-Encoding");
  const std::vector<absl::string_view> lengths = head.Values("Content-Length");
  if (!encodings.empty() && !lengths.empty()) {
    return Bad("both Transfer-Encoding and Content-Length (ambiguous body length)");
  }
  if (!encodings.empty()) {
    std::vector<std::string> codings;
    for (absl::string_view e : encodings) {
      for (std::string& t : ListTokens(e)) codings.push_back(std::move(t));
    }
    if (codings.size() != 1 || codings[0] != "chunked") {
      return Bad("a Transfer-Encoding other than \"chunked\"");
    }
    framing.kind = BodyFraming::Kind::kChunked;
    return framing;
  }
  std::optional<uint64_t> length;
  for (absl::string_view value : lengths) {
    // "Content-Length: 5, 5" is allowed by RFC 9110 when the values agree; digits only otherwise.
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      part = absl::StripAsciiWhitespace(part);
      uint64_t n = 0;
      if (part.empty() || part.size() > 19 ||
          !std::all_of(part.begin(), part.end(),
                       [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
          !absl::SimpleAtoi(part, &n)) {
        return Bad("a Content-Length that is not a decimal number");
      }
      if (length && *length != n) return Bad("Content-Length values that disagree");
      length = n;
    }
  }
  if (length) {
    framing.kind = BodyFraming::Kind::kLength;
    framing.length = *length;
  }
  return framing;
}

absl::StatusOr<AbsoluteForm> ParseAbsoluteForm(absl::string_view target) {
  const size_t scheme_end = target.find("://");
  if (scheme_end == absl::string_view::npos) return Bad("the target is not an absolute URI");
  if (!absl::EqualsIgnoreCase(target.substr(0, scheme_end), "http")) {
    return Bad(absl::StrCat("scheme \"", target.substr(0, scheme_end),
                            "\" is not forwarded (only http://; use CONNECT for https)"));
  }
  absl::string_view rest = target.substr(scheme_end + 3);
  const size_t path_start = rest.find_first_of("/?#");
  AbsoluteForm out;
  out.authority = std::string(rest.substr(0, path_start));
  if (path_start == absl::string_view::npos) {
    out.path = "/";
  } else if (rest[path_start] == '#') {
    return Bad("a fragment in the request target");
  } else {
    out.path = std::string(rest.substr(path_start));
    if (out.path[0] == '?') out.path.insert(0, "/");
  }
  return out;
}

std::string BuildOriginRequestHead(const HttpRequestHead& head, absl::string_view path,
                                   absl::string_view host, std::optional<uint64_t> body_length) {
  absl::flat_hash_set<std::string> named_by_connection;
  for (absl::string_view value : head.Values("Connection")) {
    for (std::string& t : ListTokens(value)) named_by_connection.insert(std::move(t));
  }
  std::string out = absl::StrCat(head.method, " ", path, " HTTP/1.", head.minor_version,
                                 "\r\nHost: ", host, "\r\n");
  for (const HttpHeader& h : head.headers) {
    const std::string lower = absl::AsciiStrToLower(h.name);
    if (IsDroppedRequestHeader(lower) || named_by_connection.contains(lower)) continue;
    absl::StrAppend(&out, h.name, ": ", h.value, "\r\n");
  }
  if (body_length) absl::StrAppend(&out, "Content-Length: ", *body_length, "\r\n");
  absl::StrAppend(&out, "Connection: close\r\n\r\n");
  return out;
}

absl::StatusOr<size_t> ChunkedDecoder::Feed(absl::string_view input, std::string* out) {
  size_t used = 0;
  // Reads one CRLF-terminated line into line_; false when more input is needed.
  auto take_line = [&](size_t limit) -> absl::StatusOr<bool> {
    while (used < input.size()) {
      const char c = input[used++];
      line_.push_back(c);
      if (line_.size() > limit) return Bad("a chunk-size or trailer line that is too long");
      if (c == '\n') {
        if (line_.size() < 2 || line_[line_.size() - 2] != '\r') {
          return Bad("a bare LF in the chunked framing");
        }
        line_.resize(line_.size() - 2);
        if (line_.find('\r') != std::string::npos) return Bad("a bare CR in the chunked framing");
        return true;
      }
    }
    return false;
  };
  while (used < input.size() && state_ != State::kDone) {
    switch (state_) {
      case State::kSize: {
        absl::StatusOr<bool> complete = take_line(kMaxChunkLineBytes);
        if (!complete.ok()) return complete.status();
        if (!*complete) break;
        // chunk-size [ ; chunk-ext ]: hex digits only, at most 15 so the size fits easily.
        absl::string_view size = line_;
        size = size.substr(0, size.find(';'));
        size = absl::StripTrailingAsciiWhitespace(size);
        uint64_t n = 0;
        if (size.empty() || size.size() > 15) return Bad("a malformed chunk size");
        for (char c : size) {
          if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
            return Bad("a malformed chunk size");
          }
          n = n * 16 + (absl::ascii_isdigit(static_cast<unsigned char>(c))
                            ? c - '0'
                            : absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10);
        }
        line_.clear();
        remaining_ = n;
        state_ = n == 0 ? State::kTrailer : State::kData;
        break;
      }
      case State::kData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, input.size() - used));
        out->append(input.data() + used, n);
        used += n;
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd: {
        absl::StatusOr<bool> complete = take_line(2);
        if (!complete.ok()) return complete.status();
        if (!*complete) break;
        if (!line_.empty()) return Bad("chunk data longer than its size");
        state_ = State::kSize;
        break;
      }
      case State::kTrailer: {
        absl::StatusOr<bool> complete = take_line(kMaxChunkLineBytes);
        if (!complete.ok()) return complete.status();
        if (!*complete) break;
        trailer_bytes_ += line_.size() + 2;
        if (trailer_bytes_ > kMaxTrailerBytes) return Bad("trailers over 16 KiB");
        const bool end = line_.empty();
        line_.clear();
        if (end) state_ = State::kDone;
        break;
      }
      case State::kDone:
        break;
    }
  }
  return used;
}

absl::StatusOr<HttpResponseHead> RewriteResponseHead(absl::string_view head) {
  absl::StatusOr<std::vector<absl::string_view>> lines = HeadLines(head);
  if (!lines.ok()) return lines.status();
  absl::string_view status_line = (*lines)[0];
  // HTTP/1.x SP 3DIGIT [SP reason]
  HttpResponseHead out;
  if (status_line.size() < 12 || !absl::StartsWith(status_line, "HTTP/1.") ||
      status_line[8] != ' ' || !absl::SimpleAtoi(status_line.substr(9, 3), &out.status) ||
      out.status < 100 || out.status > 999 || (status_line.size() > 12 && status_line[12] != ' ')) {
    return Bad("the origin's response does not start with an HTTP/1.x status line");
  }
  absl::StrAppend(&out.rewritten, status_line, "\r\n");
  for (size_t i = 1; i < lines->size(); ++i) {
    absl::string_view line = (*lines)[i];
    absl::string_view name = line.substr(0, line.find(':'));
    if (absl::EqualsIgnoreCase(name, "connection") || absl::EqualsIgnoreCase(name, "keep-alive") ||
        absl::EqualsIgnoreCase(name, "proxy-connection")) {
      continue;
    }
    absl::StrAppend(&out.rewritten, line, "\r\n");
  }
  absl::StrAppend(&out.rewritten, "Connection: close\r\n\r\n");
  return out;
}

}  // namespace moat::egress
