// The agent's plain-HTTP server: httplib's, with a connection loop of our own.
//
// Why: httplib 0.11 (Debian 12) reads each request of a keep-alive connection through a fresh
// SocketStream whose read buffer dies with the request, so a second request sent before the
// first was answered (HTTP/1.1 pipelining) is dropped with that buffer and the connection hangs
// until its keep-alive timeout. And it keeps header values as C strings in places, so a value
// is cut at a NUL byte: "Bearer TOKEN\0junk" is read as "Bearer TOKEN". Here one stream, with
// one buffer, serves the whole connection (pipelined requests are answered in order), and it
// checks the raw bytes of each request's head as httplib reads them: a NUL or other control byte
// (anything below 0x20 but tab, CR LF as the line end, and DEL) makes the request malformed, and
// the pre-routing handler answers 400 and closes (RFC 9110 section 5.5; RFC 9112 section 2.2).
//
// The TLS server keeps httplib's loop (its stream wraps the SSL object); there the parsed
// headers are checked for control bytes instead, which cannot see a NUL (see docs/execd.md).
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <ctime>

namespace moat::agent {

// A request's head, as far as it has been read: does it hold a byte no header may carry?
class RequestHeadScanner {
 public:
  void Begin();  // A new request starts with the next byte.
  void Scan(const char* data, size_t size);
  bool malformed() const { return malformed_; }
  bool in_head() const { return in_head_; }

 private:
  bool in_head_ = false;
  bool malformed_ = false;
  bool after_cr_ = false;
  size_t line_length_ = 0;  // Bytes of the current line, its CR LF not counted.
};

class ConnectionServer : public httplib::Server {
 public:
  // True while the calling thread handles a request whose head has a forbidden byte. For the
  // pre-routing handler; false on threads that serve no ConnectionServer connection.
  static bool CurrentRequestMalformed();

 private:
  bool process_and_close_socket(socket_t sock) override;
};

}  // namespace moat::agent
