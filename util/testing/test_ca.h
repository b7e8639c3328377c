// Test helper: a private certificate authority made with the openssl command, for tests of TLS
// with verification. The CA signs one server certificate for the names given (subjectAltName
// entries such as "DNS:localhost" or "IP:127.0.0.1"); a second, self-signed certificate for the
// same names stands for a server that CA did not sign (or a CA that signed nothing here).
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace moat::testing {

struct TestCa {
  std::string ca_pem;      // The CA's certificate: what a client trusts.
  std::string server_pem;  // Signed by the CA for the names.
  std::string server_key;
  std::string other_pem;  // Self-signed for the same names: trusted by nobody.
  std::string other_key;
};

// Writes the files into `dir` (which must exist). FailedPrecondition if openssl is missing.
inline absl::StatusOr<TestCa> MakeTestCa(const std::string& dir,
                                         const std::vector<std::string>& names) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    return absl::FailedPreconditionError("the openssl command is needed to make test certificates");
  }
  const std::string san = absl::StrCat("subjectAltName=", absl::StrJoin(names, ","));
  const std::string script = absl::StrCat(
      "set -e; cd '", dir, "'; exec 2>/dev/null\n",
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
      "-subj /CN=moat-test-ca\n",
      "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "
      "/CN=moat-test\n",
      "printf '%s\\n' '", san, "' > san.ext\n",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem "
      "-days 2 -extfile san.ext\n",
      "openssl req -x509 -newkey rsa:2048 -nodes -keyout other.key -out other.pem -days 2 "
      "-subj /CN=moat-test -addext '",
      san, "'\n");
  const std::string script_path = dir + "/make-ca.sh";
  std::ofstream(script_path) << script;
  if (std::system(absl::StrCat("sh '", script_path, "'").c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("openssl could not make the test certificates in ", dir));
  }
  return TestCa{.ca_pem = dir + "/ca.pem",
                .server_pem = dir + "/server.pem",
                .server_key = dir + "/server.key",
                .other_pem = dir + "/other.pem",
                .other_key = dir + "/other.key"};
}

}  // namespace moat::testing
