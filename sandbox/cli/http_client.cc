#include "sandbox/cli/http_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/status_macros.h"

namespace moat::cli {
namespace {

// Closes the socket when it goes out of scope.
struct Socket {
  int fd = -1;
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

absl::Status Unavailable(const HttpUrl& url, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("cannot reach the controller at ", url.host, ":",
                                             url.port, ": ", what,
                                             "; is moat-controller running there?"));
}

int TimeoutMs(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

absl::Status Connect(const HttpUrl& url, absl::Duration timeout, Socket& sock) {
  sockaddr_storage addr{};
  socklen_t len = 0;
  int family = AF_INET;
  if (auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
      ::inet_pton(AF_INET, url.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(url.port));
    len = sizeof(*v4);
  } else {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
    if (::inet_pton(AF_INET6, url.host.c_str(), &v6->sin6_addr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("\"", url.host, "\" is not an IP address"));
    }
    v6->sin6_family = family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(url.port));
    len = sizeof(*v6);
  }
  sock.fd = ::socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (sock.fd < 0) return Unavailable(url, std::strerror(errno));
  int yes = 1;
  ::setsockopt(sock.fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  if (::connect(sock.fd, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
    if (errno != EINPROGRESS) return Unavailable(url, std::strerror(errno));
    pollfd p{sock.fd, POLLOUT, 0};
    if (::poll(&p, 1, TimeoutMs(timeout)) != 1) return Unavailable(url, "connect timed out");
    int err = 0;
    socklen_t err_len = sizeof(err);
    ::getsockopt(sock.fd, SOL_SOCKET, SO_ERROR, &err, &err_len);
    if (err != 0) return Unavailable(url, std::strerror(err));
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view data, absl::Duration timeout) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, TimeoutMs(timeout)) != 1) {
        return absl::UnavailableError("sending the request timed out");
      }
      continue;
    }
    if (n < 0) {
      return absl::UnavailableError(absl::StrCat("sending the request: ", std::strerror(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Reads what is there (waiting up to `timeout`); 0 at the end of the stream.
absl::StatusOr<size_t> ReadSome(int fd, std::string& buffer, absl::Duration timeout) {
  char chunk[65536];
  while (true) {
    ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n >= 0) {
      buffer.append(chunk, static_cast<size_t>(n));
      return static_cast<size_t>(n);
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      return absl::UnavailableError(absl::StrCat("reading the answer: ", std::strerror(errno)));
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, TimeoutMs(timeout)) != 1) {
      return absl::DeadlineExceededError(
          absl::StrCat("the controller sent nothing for ", absl::FormatDuration(timeout)));
    }
  }
}

}  // namespace

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  absl::string_view rest = url;
  if (absl::StartsWith(rest, "https://")) {
    return absl::InvalidArgumentError(
        "the moat CLI speaks plain http:// only (it is a static binary, without TLS); reach a "
        "TLS controller through a local tunnel, e.g. ssh -L 8080:127.0.0.1:8080 HOST, and use "
        "http://127.0.0.1:8080");
  }
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", url, "\" is not an http:// URL such as http://127.0.0.1:8080"));
  }
  HttpUrl out;
  absl::string_view authority = rest.substr(0, rest.find('/'));
  if (authority.size() < rest.size()) {
    out.base_path = std::string(absl::StripSuffix(rest.substr(authority.size()), "/"));
  }
  absl::string_view host = authority, port;
  if (absl::StartsWith(authority, "[")) {
    size_t close = authority.find(']');
    if (close == absl::string_view::npos) return absl::InvalidArgumentError("unclosed [ in URL");
    host = authority.substr(1, close - 1);
    absl::string_view after = authority.substr(close + 1);
    if (absl::ConsumePrefix(&after, ":")) port = after;
  } else if (size_t colon = authority.rfind(':'); colon != absl::string_view::npos) {
    host = authority.substr(0, colon);
    port = authority.substr(colon + 1);
  }
  if (!port.empty() && (!absl::SimpleAtoi(port, &out.port) || out.port < 1 || out.port > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("bad port in \"", url, "\""));
  }
  out.host = host == "localhost" ? "127.0.0.1" : std::string(host);
  in6_addr probe;
  if (::inet_pton(AF_INET, out.host.c_str(), &probe) != 1 &&
      ::inet_pton(AF_INET6, out.host.c_str(), &probe) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the controller's host must be an IP address or localhost (a static binary cannot "
        "resolve names): \"",
        host, "\"; use e.g. http://127.0.0.1:8080"));
  }
  return out;
}

absl::StatusOr<HttpResponse> SendHttp(const HttpUrl& url, const HttpRequest& request) {
  Socket sock;
  RETURN_IF_ERROR(Connect(url, request.timeout, sock));
  std::string head = absl::StrCat(request.method, " ", url.base_path, request.path,
                                  " HTTP/1.1\r\nHost: ", url.host, ":", url.port,
                                  "\r\nConnection: close\r\nUser-Agent: moat-cli\r\n");
  for (const auto& [k, v] : request.headers) absl::StrAppend(&head, k, ": ", v, "\r\n");
  if (!request.body.empty() || request.method == "POST" || request.method == "PUT" ||
      request.method == "PATCH") {
    absl::StrAppend(&head, "Content-Type: ", request.content_type,
                    "\r\nContent-Length: ", request.body.size(), "\r\n");
  }
  absl::StrAppend(&head, "\r\n");
  RETURN_IF_ERROR(WriteAll(sock.fd, head, request.timeout));
  RETURN_IF_ERROR(WriteAll(sock.fd, request.body, request.timeout));

  HttpResponse res;
  std::string buffer;
  size_t header_end;
  while ((header_end = buffer.find("\r\n\r\n")) == std::string::npos) {
    if (buffer.size() > (64 << 10)) return absl::UnavailableError("the answer's head is too big");
    ASSIGN_OR_RETURN(size_t n, ReadSome(sock.fd, buffer, request.timeout));
    if (n == 0) return Unavailable(url, "the connection closed before an answer");
  }
  std::vector<absl::string_view> lines =
      absl::StrSplit(absl::string_view(buffer).substr(0, header_end), "\r\n");
  std::vector<absl::string_view> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/1.") ||
      !absl::SimpleAtoi(status_line[1], &res.status)) {
    return Unavailable(url, "the answer is not HTTP/1.1");
  }
  bool chunked = false;
  int64_t length = -1;
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    std::string value(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    if (name == "transfer-encoding" && absl::StrContains(absl::AsciiStrToLower(value), "chunked")) {
      chunked = true;
    }
    if (name == "content-length" && !absl::SimpleAtoi(value, &length)) length = -1;
    res.headers.emplace_back(std::move(name), std::move(value));
  }
  buffer.erase(0, header_end + 4);
  auto deliver = [&](absl::string_view data) {
    if (request.on_body) return request.on_body(data);
    res.body.append(data.data(), data.size());
    return true;
  };
  if (request.method == "HEAD" || res.status == 204 || res.status == 304) return res;
  if (!chunked) {
    uint64_t seen = 0;
    while (true) {
      if (length >= 0 && seen + buffer.size() >= static_cast<uint64_t>(length)) {
        deliver(absl::string_view(buffer).substr(0, static_cast<uint64_t>(length) - seen));
        return res;
      }
      seen += buffer.size();
      if (!buffer.empty() && !deliver(buffer)) return res;
      buffer.clear();
      ASSIGN_OR_RETURN(size_t n, ReadSome(sock.fd, buffer, request.timeout));
      if (n == 0) {
        if (length >= 0) return Unavailable(url, "the answer ended early");
        return res;
      }
    }
  }
  // Chunked: size line, data, CRLF; a zero size ends it.
  while (true) {
    size_t line_end;
    while ((line_end = buffer.find("\r\n")) == std::string::npos) {
      ASSIGN_OR_RETURN(size_t n, ReadSome(sock.fd, buffer, request.timeout));
      if (n == 0) return Unavailable(url, "the answer ended inside a chunk");
    }
    absl::string_view size_text = absl::string_view(buffer).substr(0, line_end);
    size_text = size_text.substr(0, size_text.find(';'));
    uint64_t size = 0;
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_text), &size) || size > (1u << 30)) {
      return Unavailable(url, "a bad chunk size");
    }
    if (size == 0) return res;
    while (buffer.size() < line_end + 2 + size + 2) {
      ASSIGN_OR_RETURN(size_t n, ReadSome(sock.fd, buffer, request.timeout));
      if (n == 0) return Unavailable(url, "the answer ended inside a chunk");
    }
    if (!deliver(absl::string_view(buffer).substr(line_end + 2, size))) return res;
    buffer.erase(0, line_end + 2 + size + 2);
  }
}

}  // namespace moat::cli
