// The proxy's three ways in. Each reads its protocol from the session's client socket, turns the
// client's idea of a destination into a canonical host and port, and hands it to the session
// (proxied_request.h) for the checks, the dial and the relay. Each returns when the request is
// over; the session then writes the audit record and the proxy closes the client socket.
#pragma once

#include <string>

#include "sandbox/egress/proxied_request.h"

namespace moat::egress {

// HTTP proxy requests: CONNECT host:port, and absolute-form requests (GET http://host/path).
void ServeHttp(ProxiedRequest& session);

// SOCKS5, CONNECT only, no authentication.
void ServeSocks(ProxiedRequest& session);

// A connection to `name` at the local port the client connected to.
void ServeTransparent(ProxiedRequest& session, const std::string& name);

// The HTTP status line's reason phrase for the statuses the proxy sends.
const char* HttpReasonPhrase(int status);

}  // namespace moat::egress
