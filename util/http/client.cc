#include "util/http/client.h"

#include "absl/strings/str_cat.h"

namespace moat::http {

void TrustCa(httplib::Client& client, const std::string& ca_file) {
  if (ca_file.empty()) return;
  client.set_ca_cert_path(ca_file.c_str());
  client.enable_server_certificate_verification(true);
}

std::string DescribeFailure(httplib::Error error, absl::string_view ca_key) {
  switch (error) {
    case httplib::Error::SSLServerVerification:
      return absl::StrCat(
          "its TLS certificate is not trusted (not signed by a trusted CA, or not for this host "
          "name); set ",
          ca_key, " to the CA that signed it, and use a URL whose host the certificate names");
    case httplib::Error::SSLLoadingCerts:
      return absl::StrCat("the CA file cannot be loaded; is ", ca_key,
                          " a readable PEM certificate?");
    case httplib::Error::SSLConnection:
      return "the TLS handshake failed; does the URL's scheme (https://) match what it serves?";
    default:
      return httplib::to_string(error);
  }
}

}  // namespace moat::http
