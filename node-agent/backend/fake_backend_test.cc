// The fake is what every agent test stands on: check that it keeps the backend contract.
#include "node-agent/backend/fake_backend.h"

#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace moat::agent {
namespace {

SandboxSpec Spec(const std::string& id) {
  SandboxSpec spec;
  spec.id = id;
  spec.profile = "default";
  spec.root_dir = "/";
  return spec;
}

TEST(FakeBackendTest, CreateDestroyIsIdempotent) {
  FakeBackend backend;
  ASSERT_TRUE(backend.Create(Spec("sb-1")).ok());
  EXPECT_EQ(backend.Create(Spec("sb-1")).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(backend.Create(Spec("../etc")).status().code(), absl::StatusCode::kInvalidArgument);
  auto report = backend.Destroy("sb-1");
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->workspaces_removed, 1);
  EXPECT_TRUE(report->clean());
  report = backend.Destroy("sb-1");  // Again: nothing to do, not an error.
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->workspaces_removed, 0);
  EXPECT_FALSE(backend.Exists("sb-1"));
}

TEST(FakeBackendTest, ExecStreamsThenExitsOnAnotherThread) {
  FakeBackend backend;
  ASSERT_TRUE(backend.Create(Spec("sb-1")).ok());
  std::vector<std::string> events;  // Written by the backend thread, read after `done`.
  absl::Notification done;
  ExecCallbacks callbacks;
  callbacks.on_stdout = [&](absl::string_view chunk) {
    events.push_back("out:" + std::string(chunk));
  };
  callbacks.on_stderr = [&](absl::string_view chunk) {
    events.push_back("err:" + std::string(chunk));
  };
  callbacks.on_exit = [&](const ExecExit& exit) {
    events.push_back("exit:" + std::to_string(exit.exit_code));
    done.Notify();
  };
  auto id =
      backend.Exec("sb-1", ExecRequest{"echo hi", "", {}, absl::InfiniteDuration()}, callbacks);
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(events, (std::vector<std::string>{"out:hi\n", "exit:0"}));

  backend.SetExecHandler([](const ExecRequest& r) {
    return FakeBackend::FakeOutput{"", "boom\n", 3};
  });
  absl::Notification done2;
  int code = -1;
  ASSERT_TRUE(backend
                  .Exec("sb-1", ExecRequest{"anything", "/workspace", {}, absl::Seconds(1)},
                        {nullptr, nullptr,
                         [&](const ExecExit& exit) {
                           code = exit.exit_code;
                           done2.Notify();
                         }})
                  .ok());
  ASSERT_TRUE(done2.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(code, 3);
}

TEST(FakeBackendTest, ExecErrors) {
  FakeBackend backend;
  ASSERT_TRUE(backend.Create(Spec("sb-1")).ok());
  EXPECT_EQ(backend.Exec("sb-2", {"echo x"}, {}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(backend.Exec("sb-1", {"  "}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend.Exec("sb-1", {"echo x", "relative"}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(FakeBackendTest, FilesStayInsideTheWorkspace) {
  FakeBackend backend;
  ASSERT_TRUE(backend.Create(Spec("sb-1")).ok());
  ASSERT_TRUE(backend.WriteFile("sb-1", "/workspace/src/main.py", "print(1)\n", 0644).ok());
  EXPECT_EQ(*backend.ReadFile("sb-1", "src/main.py", 0, 100), "print(1)\n");
  EXPECT_EQ(*backend.ReadFile("sb-1", "src/main.py", 6, 2), "1)");  // A range.
  EXPECT_EQ(*backend.ReadFile("sb-1", "src/main.py", 100, 2), "");
  auto info = backend.Stat("sb-1", "/workspace/src");
  ASSERT_TRUE(info.ok());
  EXPECT_TRUE(info->is_dir);
  auto list = backend.List("sb-1", "/workspace");
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].path, "/workspace/src");
  ASSERT_TRUE(backend.Move("sb-1", "src/main.py", "app.py").ok());
  EXPECT_EQ(backend.Stat("sb-1", "src/main.py").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(backend.Stat("sb-1", "app.py")->size, 9u);
  ASSERT_TRUE(backend.Remove("sb-1", "src").ok());
  EXPECT_EQ(backend.Stat("sb-1", "src").status().code(), absl::StatusCode::kNotFound);

  for (const char* bad : {"/etc/passwd", "../x", "/workspace/../etc/shadow"}) {
    EXPECT_EQ(backend.WriteFile("sb-1", bad, "x", 0644).code(), absl::StatusCode::kInvalidArgument)
        << bad;
    EXPECT_EQ(backend.ReadFile("sb-1", bad, 0, 1).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_EQ(backend.ReadFile("sb-2", "x", 0, 1).status().code(), absl::StatusCode::kNotFound);
}

TEST(FakeBackendTest, LeftoversAreReportedOnce) {
  FakeBackend backend;
  CleanupReport left;
  left.processes_killed = 4;
  left.residue = {"/var/lib/moat-agent/sb-x"};
  backend.AddLeftovers(left);
  auto first = backend.CleanLeftovers();
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->processes_killed, 4);
  EXPECT_FALSE(first->clean());
  EXPECT_EQ(backend.CleanLeftovers()->processes_killed, 0);
}

}  // namespace
}  // namespace moat::agent
