#include "bench/crun_config.h"

#include <unistd.h>

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "util/testing/temp_dir.h"

namespace moat::bench {
namespace {

using ::testing::HasSubstr;

class CrunConfigTest : public ::testing::Test {
 protected:
  void WriteTemplate(const std::string& text) { std::ofstream(dir_ + "/config.json") << text; }
  nlohmann::json ReadOut() {
    std::ifstream in(dir_ + "/out.json");
    return nlohmann::json::parse(in);
  }
  ScopedTempDir tmp_{"crun_config_test", "/tmp"};
  const std::string dir_ = tmp_.path();
};

TEST_F(CrunConfigTest, ReplacesArgsAndTerminalKeepsTheRest) {
  WriteTemplate(R"({"ociVersion": "1.0.0",
    "process": {"terminal": true, "args": ["sh"], "cwd": "/"},
    "root": {"path": "rootfs", "readonly": true}})");
  ASSERT_TRUE(
      WriteCrunConfig(dir_ + "/config.json", {"/usr/bin/python3", "-c", "pass"}, dir_ + "/out.json")
          .ok());
  const nlohmann::json out = ReadOut();
  EXPECT_EQ(out["process"]["args"], nlohmann::json({"/usr/bin/python3", "-c", "pass"}));
  EXPECT_EQ(out["process"]["terminal"], false);
  EXPECT_EQ(out["process"]["cwd"], "/");
  EXPECT_EQ(out["root"]["path"], "rootfs");
  EXPECT_EQ(out["root"]["readonly"], true);
  EXPECT_EQ(out["ociVersion"], "1.0.0");
}

TEST_F(CrunConfigTest, MissingTemplateSaysWhoWritesIt) {
  absl::Status s = WriteCrunConfig(dir_ + "/config.json", {"/bin/true"}, dir_ + "/out.json");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("bench/run.sh"));
}

TEST_F(CrunConfigTest, InvalidJsonNamesTheFile) {
  WriteTemplate("{\"process\": ");
  absl::Status s = WriteCrunConfig(dir_ + "/config.json", {"/bin/true"}, dir_ + "/out.json");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(dir_ + "/config.json"));
}

TEST_F(CrunConfigTest, ConfigWithoutProcessIsRefused) {
  WriteTemplate(R"({"ociVersion": "1.0.0"})");
  absl::Status s = WriteCrunConfig(dir_ + "/config.json", {"/bin/true"}, dir_ + "/out.json");
  EXPECT_THAT(s.message(), HasSubstr("no \"process\""));
}

}  // namespace
}  // namespace moat::bench
