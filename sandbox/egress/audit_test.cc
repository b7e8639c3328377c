#include "sandbox/egress/audit.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sandbox/egress/sha256.h"

namespace moat::egress {
namespace {

AuditRecord Sample() {
  AuditRecord r;
  r.time = absl::FromUnixMillis(1'796'017'200'123);  // 2026-11-30T05:40:00.123Z
  r.sandbox = "sb-1";
  r.protocol = "connect";
  r.method = "CONNECT";
  r.host = "example.com";
  r.port = 443;
  r.address = "93.184.216.34";
  r.bytes_up = 10;
  r.bytes_down = 20;
  r.status = 200;
  r.allowed = true;
  r.reason = "allowed by \"example.com\"";
  r.body_sha256 = "0123456789abcdef";
  return r;
}

TEST(AuditRecordToJsonTest, FieldsInDocumentedOrder) {
  EXPECT_EQ(AuditRecordToJson(Sample()),
            R"({"time":"2026-11-30T05:40:00.123Z","sandbox":"sb-1","protocol":"connect",)"
            R"("method":"CONNECT","host":"example.com","port":443,"address":"93.184.216.34",)"
            R"("bytes_up":10,"bytes_down":20,"status":200,"allowed":true,)"
            R"("reason":"allowed by \"example.com\"","body_sha256":"0123456789abcdef"})");
}

TEST(AuditRecordToJsonTest, HostileBytesStayInsideTheirString) {
  AuditRecord r = Sample();
  r.host = std::string("evil\0\n\xff.com", 11);
  r.reason = "line\nbreak";
  const std::string line = AuditRecordToJson(r);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed["reason"], "line\nbreak");
  EXPECT_EQ(parsed["host"], std::string("evil\0\n\xEF\xBF\xBD.com", 13));
}

TEST(AuditLogTest, AppendsWholeLinesToAPrivateFile) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/audit_test.", ::getpid(), ".log");
  ::unlink(path.c_str());
  {
    absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    std::vector<std::thread> writers;
    for (int t = 0; t < 4; ++t) {
      writers.emplace_back([&log, t] {
        AuditRecord r = Sample();
        r.reason = std::string(3000, static_cast<char>('a' + t));
        for (int i = 0; i < 50; ++i) (*log)->Record(r);
      });
    }
    for (std::thread& w : writers) w.join();
  }
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  {
    absl::StatusOr<std::unique_ptr<AuditLog>> again = AuditLog::Open(path);  // appends
    ASSERT_TRUE(again.ok());
    (*again)->Record(Sample());
  }
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    ++lines;
    const nlohmann::json parsed = nlohmann::json::parse(line);  // throws on a torn line
    const std::string reason = parsed["reason"];
    if (lines <= 200) {
      ASSERT_EQ(reason.size(), 3000u);
      EXPECT_EQ(reason.find_first_not_of(reason[0]), std::string::npos);
    }
  }
  EXPECT_EQ(lines, 201);
  ::unlink(path.c_str());
}

TEST(AuditLogTest, OpenNamesTheFile) {
  absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open("/nonexistent-dir/x.log");
  EXPECT_FALSE(log.ok());
  EXPECT_THAT(log.status().message(), ::testing::HasSubstr("\"/nonexistent-dir/x.log\""));
}

TEST(Sha256Test, PrefixOfKnownDigests) {
  Sha256 abc;
  abc.Update("a");
  abc.Update("bc");
  EXPECT_EQ(abc.bytes(), 3u);
  // SHA-256("abc") = ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
  EXPECT_EQ(abc.HexPrefix(), "ba7816bf8f01cfea");
  Sha256 nothing;
  nothing.Update("");
  EXPECT_EQ(nothing.HexPrefix(), "");
}

}  // namespace
}  // namespace moat::egress
