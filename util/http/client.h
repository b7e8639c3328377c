// What the daemons' HTTP clients share: verifying an https:// peer against a private CA (the
// agent's `controller.tls.ca`, the controller's `nodes.tls.ca` and `store.tls.ca`), and a
// failed call described so that the reader knows what to fix.
#pragma once

#include <httplib.h>

#include <string>

#include "absl/strings/string_view.h"

namespace moat::http {

// An https:// peer is then verified against `ca_file` (PEM) instead of the system's CAs; the
// certificate must also name the host of the URL. Empty: the system's CAs. A plain http://
// client ignores it.
void TrustCa(httplib::Client& client, const std::string& ca_file);

// "the connection failed (Connection)"-style text for a call that got no answer; a certificate
// the client did not trust, or a CA file it could not load, names `ca_key` (the config key) as
// the fix.
std::string DescribeFailure(httplib::Error error, absl::string_view ca_key);

}  // namespace moat::http
