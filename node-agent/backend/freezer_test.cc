#include "node-agent/backend/freezer.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "util/testing/temp_dir.h"

namespace moat::agent {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// cgroup v2 cannot be produced on this machine kind (hybrid): a fake tree stands in for it, the
// kernel's side (cgroup.events) played by a thread.
TEST(FreezerTest, V2WritesCgroupFreezeAndWaitsForFrozen) {
  ScopedTempDir dir;
  std::ofstream(dir.File("cgroup.freeze")) << "0\n";
  std::ofstream(dir.File("cgroup.events")) << "populated 1\nfrozen 0\n";
  std::thread kernel([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ofstream(dir.File("cgroup.events")) << "populated 1\nfrozen 1\n";
  });
  absl::Status frozen = SetFrozen({dir.path()}, true);
  kernel.join();
  ASSERT_TRUE(frozen.ok()) << frozen;
  EXPECT_EQ(Slurp(dir.File("cgroup.freeze")).substr(0, 1), "1");
  // Never said thawed: Unavailable after the timeout.
  absl::Status thawed = SetFrozen({dir.path()}, false, absl::Milliseconds(50));
  EXPECT_TRUE(absl::IsUnavailable(thawed)) << thawed;
  EXPECT_EQ(Slurp(dir.File("cgroup.freeze")).substr(0, 1), "0");
}

TEST(FreezerTest, V1FreezerStateWinsAndNoFreezerIsAClearError) {
  ScopedTempDir v1, v2, none;
  std::ofstream(v1.File("freezer.state")) << "THAWED\n";
  std::ofstream(v2.File("cgroup.freeze")) << "0\n";
  // A fake v1 file reads back what was written: FROZEN at once.
  ASSERT_TRUE(SetFrozen({v2.path(), v1.path()}, true).ok());
  EXPECT_EQ(Slurp(v1.File("freezer.state")).substr(0, 6), "FROZEN");
  EXPECT_EQ(Slurp(v2.File("cgroup.freeze")).substr(0, 1), "0");  // v1 is the one in use
  EXPECT_TRUE(absl::IsFailedPrecondition(SetFrozen({none.path()}, true)));
}

}  // namespace
}  // namespace moat::agent
