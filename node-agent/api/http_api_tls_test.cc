// The API over TLS, with a certificate from a test CA (util/testing/test_ca.h).
#include <httplib.h>

#include <string>

#include "gtest/gtest.h"
#include "node-agent/api/http_api.h"
#include "node-agent/backend/fake_backend.h"
#include "util/testing/temp_dir.h"
#include "util/testing/test_ca.h"

namespace moat::agent {
namespace {

constexpr char kNodeToken[] = "node-token-0123456789abcdef";

TEST(HttpApiTlsTest, ServesHttpsWithTheConfiguredCertificate) {
  ScopedTempDir dir;
  absl::StatusOr<moat::testing::TestCa> ca =
      moat::testing::MakeTestCa(dir.path(), {"IP:127.0.0.1"});
  if (absl::IsFailedPrecondition(ca.status())) GTEST_SKIP() << ca.status();
  ASSERT_TRUE(ca.ok()) << ca.status();
  const std::string& cert = ca->server_pem;
  const std::string& key = ca->server_key;

  AgentConfig config;
  config.profiles = {ProfileConfig{"default"}};
  FakeClock clock;
  FakeBackend backend;
  Registry registry(&clock);
  AgentMetrics metrics({"default"});
  SandboxService service(&config, &backend, &registry, &metrics, &clock);
  auto api = HttpApi::Create(&service, HttpApiOptions{kNodeToken, 1 << 20, TlsConfig{cert, key}});
  ASSERT_TRUE(api.ok()) << api.status();
  auto port = (*api)->Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status();

  httplib::SSLClient client("127.0.0.1", *port);
  client.set_ca_cert_path(ca->ca_pem.c_str());
  client.enable_server_certificate_verification(true);
  auto res = client.Get("/health", {{"Authorization", std::string("Bearer ") + kNodeToken}});
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);

  // Plain HTTP to the TLS port gets no answer.
  httplib::Client plain("127.0.0.1", *port);
  plain.set_read_timeout(2);
  auto plain_res = plain.Get("/health", {{"Authorization", std::string("Bearer ") + kNodeToken}});
  EXPECT_TRUE(!plain_res || plain_res->status != 200);
}

TEST(HttpApiTlsTest, MissingCertificateIsAClearError) {
  AgentConfig config;
  FakeClock clock;
  FakeBackend backend;
  Registry registry(&clock);
  AgentMetrics metrics({});
  SandboxService service(&config, &backend, &registry, &metrics, &clock);
  auto api = HttpApi::Create(
      &service,
      HttpApiOptions{kNodeToken, 1 << 20, TlsConfig{"/nonexistent.crt", "/nonexistent.key"}});
  ASSERT_FALSE(api.ok());
  EXPECT_NE(api.status().message().find("\"/nonexistent.crt\""), absl::string_view::npos);
}

}  // namespace
}  // namespace moat::agent
