#include "util/http/server.h"

#include <httplib.h>

#include <stdexcept>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "util/http/reply.h"

namespace moat::http {
namespace {

using ::testing::HasSubstr;

ServerIdentity Identity() {
  return {.daemon = "widget",
          .api_doc = "api/widget.yaml",
          .max_request_bytes = 64,
          .messages = {{416, "bad Range header"}}};
}

// A plain server with the shared settings and a few routes, listening on 127.0.0.1.
class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = MakeServer("", "");
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    server_->set_payload_max_length(Identity().max_request_bytes);
    ConfigureServer(*server_, Identity());
    server_->Get("/throws", [](const httplib::Request&, httplib::Response&) {
      throw std::runtime_error("boom");
    });
    server_->Get("/status", [](const httplib::Request&, httplib::Response& res) {
      SendStatus(res, absl::ResourceExhaustedError("the queue is full; retry in a second"));
    });
    server_->Get("/json", [](const httplib::Request&, httplib::Response& res) {
      SendJson(res, 201, {{"name", std::string("caf\xff")}});
    });
    server_->Get("/range", [](const httplib::Request&, httplib::Response& res) {
      res.status = 416;  // No body: the identity's message fills it in.
    });
    thread_ = std::make_unique<ServerThread>(server_.get());
    auto port = thread_->Start("127.0.0.1", 0);
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  }

  static nlohmann::json Body(const httplib::Result& r) { return nlohmann::json::parse(r->body); }

  std::unique_ptr<httplib::Server> server_;
  std::unique_ptr<ServerThread> thread_;
  int port_ = 0;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(ServerTest, AnUnknownPathIsAJson404NamingTheApiDocument) {
  httplib::Result r = client_->Get("/nowhere");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->get_header_value("Content-Type"), kJsonType);
  EXPECT_EQ(Body(r)["code"], "NOT_FOUND");
  EXPECT_THAT(Body(r)["message"].get<std::string>(), HasSubstr("api/widget.yaml"));
}

TEST_F(ServerTest, ABodyOverTheCapIsA413NamingTheLimitAndItsKey) {
  httplib::Result r = client_->Post("/json", std::string(1000, 'x'), "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(Body(r)["code"], "PAYLOAD_TOO_LARGE");
  EXPECT_THAT(Body(r)["message"].get<std::string>(),
              HasSubstr("larger than 64 bytes (the widget's api.max_request_bytes)"));
}

TEST_F(ServerTest, AThrowingHandlerIsA500AndTheServerGoesOn) {
  httplib::Result r = client_->Get("/throws");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_THAT(Body(r)["message"].get<std::string>(), HasSubstr("the widget's log has details"));
  EXPECT_EQ(client_->Get("/status")->status, 429);
}

TEST_F(ServerTest, StatusesAndBodiesKeepTheirShapes) {
  httplib::Result status = client_->Get("/status");
  ASSERT_TRUE(status);
  EXPECT_EQ(status->status, 429);
  EXPECT_EQ(Body(status)["message"], "the queue is full; retry in a second");
  httplib::Result json = client_->Get("/json");
  ASSERT_TRUE(json);
  EXPECT_EQ(json->status, 201);
  EXPECT_EQ(Body(json)["name"], "caf\xEF\xBF\xBD");  // Replaced, not thrown.
  httplib::Result range = client_->Get("/range");
  ASSERT_TRUE(range);
  EXPECT_EQ(range->status, 416);
  EXPECT_EQ(Body(range)["message"], "bad Range header");
}

TEST_F(ServerTest, ASecondServerCannotTakeThePort) {
  httplib::Server other;
  ConfigureServer(other, Identity());
  ServerThread second(&other);
  EXPECT_EQ(second.Start("127.0.0.1", port_).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(ServerTest, StopIsIdempotentAndClosesThePort) {
  thread_->Stop();
  thread_->Stop();
  httplib::Client client("127.0.0.1", port_);
  client.set_connection_timeout(1, 0);
  EXPECT_FALSE(client.Get("/status"));
}

TEST(MakeServerTest, MissingTlsFilesAreRefusedByName) {
  auto server = MakeServer("/nonexistent/cert.pem", "/nonexistent/key.pem");
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("/nonexistent/cert.pem"));
}

TEST(MakeServerTest, ThePlainFactoryIsUsedWithoutTls) {
  bool called = false;
  auto server = MakeServer("", "", [&] {
    called = true;
    return std::make_unique<httplib::Server>();
  });
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(called);
}

}  // namespace
}  // namespace moat::http
