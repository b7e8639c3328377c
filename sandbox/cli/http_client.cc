#include "sandbox/cli/http_client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
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

// The connection: a socket, and TLS over it for https://. Closes both when it goes out of scope.
struct Socket {
  int fd = -1;
  SSL_CTX* ctx = nullptr;
  SSL* ssl = nullptr;
  ~Socket() {
    if (ssl != nullptr) SSL_free(ssl);
    if (ctx != nullptr) SSL_CTX_free(ctx);
    if (fd >= 0) ::close(fd);
  }
};

// OpenSSL's queued errors as one line (and the queue emptied).
std::string TlsErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    absl::StrAppend(&out, out.empty() ? "" : "; ", buf);
  }
  return out.empty() ? std::string("no detail") : out;
}

absl::Status Unavailable(const HttpUrl& url, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat("cannot reach the controller at ", url.host, ":",
                                             url.port, ": ", what,
                                             "; is moat-controller running there?"));
}

int TimeoutMs(absl::Duration d) { return static_cast<int>(absl::ToInt64Milliseconds(d)); }

// The controller's addresses: an IP literal as it is, a name through getaddrinfo. The moat
// binary is static; glibc (2.34 and later) has its files (/etc/hosts) and dns lookups built in,
// so that works without any shared NSS module (checked in a chroot holding only the binary
// and /etc/hosts); other modules an nsswitch.conf names are loaded from the system's glibc.
absl::StatusOr<std::vector<sockaddr_storage>> Resolve(const HttpUrl& url) {
  std::vector<sockaddr_storage> out;
  sockaddr_storage addr{};
  if (auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
      ::inet_pton(AF_INET, url.host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(url.port));
    out.push_back(addr);
    return out;
  }
  if (auto* v6 = reinterpret_cast<sockaddr_in6*>(&addr);
      ::inet_pton(AF_INET6, url.host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(url.port));
    out.push_back(addr);
    return out;
  }
  // RFC 6761 (6.3): "localhost" and the names below it are the loopback, answered here without
  // asking NSS: a minimal root may have no /etc/hosts (debootstrap's minbase has none).
  if (absl::EqualsIgnoreCase(url.host, "localhost") ||
      absl::EndsWithIgnoreCase(url.host, ".localhost")) {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&addr);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(url.port));
    v4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    out.push_back(addr);
    sockaddr_storage six{};
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&six);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(url.port));
    v6->sin6_addr = in6addr_loopback;
    out.push_back(six);
    return out;
  }
  addrinfo hints{}, *found = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = AF_UNSPEC;
  const std::string port = absl::StrCat(url.port);
  if (int e = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found); e != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve the controller's host \"", url.host,
                                               "\": ", ::gai_strerror(e),
                                               "; check the name (/etc/hosts, DNS) or give its "
                                               "IP address"));
  }
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_addrlen > sizeof(sockaddr_storage)) continue;
    sockaddr_storage one{};
    std::memcpy(&one, a->ai_addr, a->ai_addrlen);
    out.push_back(one);
  }
  ::freeaddrinfo(found);
  if (out.empty()) return absl::UnavailableError(absl::StrCat("\"", url.host, "\" has no address"));
  return out;
}

absl::Status ConnectTo(const HttpUrl& url, const sockaddr_storage& addr, absl::Duration timeout,
                       Socket& sock) {
  const socklen_t len = addr.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  sock.fd = ::socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (sock.fd < 0) return Unavailable(url, std::strerror(errno));
  int yes = 1;
  ::setsockopt(sock.fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  if (::connect(sock.fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
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

// Waits until the socket is ready for what OpenSSL asked (`error`: SSL_ERROR_WANT_*).
absl::Status WaitForTls(const Socket& sock, int error, absl::Duration timeout,
                        absl::string_view what) {
  pollfd p{sock.fd, static_cast<short>(error == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
  if (::poll(&p, 1, TimeoutMs(timeout)) != 1) {
    return absl::DeadlineExceededError(
        absl::StrCat(what, ": the controller sent nothing for ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

// TLS with the certificate verified: against `url.ca_file` (a private CA) or the system's store,
// for the URL's host name (or IP address). Nothing is sent to a controller that fails.
absl::Status StartTls(const HttpUrl& url, absl::Duration timeout, Socket& sock) {
  sock.ctx = SSL_CTX_new(TLS_client_method());
  if (sock.ctx == nullptr) return absl::InternalError(absl::StrCat("TLS: ", TlsErrors()));
  SSL_CTX_set_min_proto_version(sock.ctx, TLS1_2_VERSION);
  SSL_CTX_set_verify(sock.ctx, SSL_VERIFY_PEER, nullptr);
  if (!url.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(sock.ctx, url.ca_file.c_str(), nullptr) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("cannot load the CA file \"", url.ca_file,
                                                     "\" (PEM certificates): ", TlsErrors()));
    }
  } else if (SSL_CTX_set_default_verify_paths(sock.ctx) != 1) {
    return absl::InternalError(absl::StrCat("TLS: the system's CA store: ", TlsErrors()));
  }
  sock.ssl = SSL_new(sock.ctx);
  if (sock.ssl == nullptr || SSL_set_fd(sock.ssl, sock.fd) != 1) {
    return absl::InternalError(absl::StrCat("TLS: ", TlsErrors()));
  }
  in6_addr probe;
  const bool is_ip = ::inet_pton(AF_INET, url.host.c_str(), &probe) == 1 ||
                     ::inet_pton(AF_INET6, url.host.c_str(), &probe) == 1;
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(sock.ssl), url.host.c_str());
  } else {
    SSL_set_tlsext_host_name(sock.ssl, url.host.c_str());
    if (SSL_set1_host(sock.ssl, url.host.c_str()) != 1) {
      return absl::InternalError(absl::StrCat("TLS: ", TlsErrors()));
    }
  }
  while (true) {
    int r = SSL_connect(sock.ssl);
    if (r == 1) break;
    int error = SSL_get_error(sock.ssl, r);
    if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
      RETURN_IF_ERROR(WaitForTls(sock, error, timeout, "the TLS handshake"));
      continue;
    }
    if (long verify = SSL_get_verify_result(sock.ssl); verify != X509_V_OK) {
      return absl::UnavailableError(absl::StrCat(
          "the controller at ", url.host, ":", url.port, " is not trusted: its certificate ",
          X509_verify_cert_error_string(verify),
          url.ca_file.empty() ? "; give the CA that signed it with --ca-file FILE (or MOAT_CA_FILE)"
                              : absl::StrCat(" (checked against \"", url.ca_file, "\")")));
    }
    return Unavailable(url, absl::StrCat("the TLS handshake failed: ", TlsErrors()));
  }
  return absl::OkStatus();
}

absl::Status Connect(const HttpUrl& url, absl::Duration timeout, Socket& sock) {
  ASSIGN_OR_RETURN(std::vector<sockaddr_storage> addresses, Resolve(url));
  absl::Status last;
  for (const sockaddr_storage& addr : addresses) {
    Socket attempt;
    last = ConnectTo(url, addr, timeout, attempt);
    if (last.ok()) {
      std::swap(sock.fd, attempt.fd);
      break;
    }
  }
  if (!last.ok()) return last;
  if (url.tls) RETURN_IF_ERROR(StartTls(url, timeout, sock));
  return absl::OkStatus();
}

absl::Status WriteAll(const Socket& sock, absl::string_view data, absl::Duration timeout) {
  while (!data.empty()) {
    if (sock.ssl != nullptr) {
      size_t n = 0;
      int r = SSL_write_ex(sock.ssl, data.data(), data.size(), &n);
      if (r == 1) {
        data.remove_prefix(n);
        continue;
      }
      int error = SSL_get_error(sock.ssl, r);
      if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
        RETURN_IF_ERROR(WaitForTls(sock, error, timeout, "sending the request"));
        continue;
      }
      return absl::UnavailableError(absl::StrCat("sending the request: ", TlsErrors()));
    }
    ssize_t n = ::send(sock.fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      pollfd p{sock.fd, POLLOUT, 0};
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
absl::StatusOr<size_t> ReadSome(const Socket& sock, std::string& buffer, absl::Duration timeout) {
  char chunk[65536];
  while (true) {
    if (sock.ssl != nullptr) {
      size_t n = 0;
      int r = SSL_read_ex(sock.ssl, chunk, sizeof(chunk), &n);
      if (r == 1) {
        buffer.append(chunk, n);
        return n;
      }
      int error = SSL_get_error(sock.ssl, r);
      if (error == SSL_ERROR_ZERO_RETURN) return 0;
      if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
        RETURN_IF_ERROR(WaitForTls(sock, error, timeout, "reading the answer"));
        continue;
      }
      // A server that closes without close_notify (httplib after Connection: close) ends the
      // stream as a plain EOF would; lengths and chunking say whether the answer is whole.
      if (error == SSL_ERROR_SYSCALL || error == SSL_ERROR_SSL) {
        ERR_clear_error();
        return 0;
      }
      return absl::UnavailableError(absl::StrCat("reading the answer: ", TlsErrors()));
    }
    ssize_t n = ::recv(sock.fd, chunk, sizeof(chunk), 0);
    if (n >= 0) {
      buffer.append(chunk, static_cast<size_t>(n));
      return static_cast<size_t>(n);
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN) {
      return absl::UnavailableError(absl::StrCat("reading the answer: ", std::strerror(errno)));
    }
    pollfd p{sock.fd, POLLIN, 0};
    if (::poll(&p, 1, TimeoutMs(timeout)) != 1) {
      return absl::DeadlineExceededError(
          absl::StrCat("the controller sent nothing for ", absl::FormatDuration(timeout)));
    }
  }
}

}  // namespace

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view url) {
  absl::string_view rest = url;
  const bool tls = absl::ConsumePrefix(&rest, "https://");
  if (!tls && !absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", url, "\" is not an http:// or https:// URL such as https://controller.example:8443"));
  }
  HttpUrl out;
  out.tls = tls;
  out.port = tls ? 443 : 80;
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
  if (host.empty()) return absl::InvalidArgumentError(absl::StrCat("no host in \"", url, "\""));
  for (char c : host) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != ':' && c != '_') {
      return absl::InvalidArgumentError(absl::StrCat("bad host in \"", url, "\""));
    }
  }
  out.host = std::string(host);
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
  RETURN_IF_ERROR(WriteAll(sock, head, request.timeout));
  RETURN_IF_ERROR(WriteAll(sock, request.body, request.timeout));

  HttpResponse res;
  std::string buffer;
  size_t header_end;
  while ((header_end = buffer.find("\r\n\r\n")) == std::string::npos) {
    if (buffer.size() > (64 << 10)) return absl::UnavailableError("the answer's head is too big");
    ASSIGN_OR_RETURN(size_t n, ReadSome(sock, buffer, request.timeout));
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
      ASSIGN_OR_RETURN(size_t n, ReadSome(sock, buffer, request.timeout));
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
      ASSIGN_OR_RETURN(size_t n, ReadSome(sock, buffer, request.timeout));
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
      ASSIGN_OR_RETURN(size_t n, ReadSome(sock, buffer, request.timeout));
      if (n == 0) return Unavailable(url, "the answer ended inside a chunk");
    }
    if (!deliver(absl::string_view(buffer).substr(line_end + 2, size))) return res;
    buffer.erase(0, line_end + 2 + size + 2);
  }
}

}  // namespace moat::cli
