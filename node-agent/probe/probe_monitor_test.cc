#include "node-agent/probe/probe_monitor.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace moat::agent {
namespace {

using ::testing::HasSubstr;

// What the callbacks saw; tests wait on it rather than sleep.
class Recorder {
 public:
  ProbeCallbacks Callbacks() {
    return {
        .on_event =
            [this](const std::string& id, const ProbeEvent& event) {
              absl::MutexLock lock(&mu_);
              events_[id].push_back(event);
            },
        .on_compromised =
            [this](const std::string& id, const std::string& reason) {
              absl::MutexLock lock(&mu_);
              compromised_[id].push_back(reason);
            },
        .on_heartbeat_missed =
            [this](const std::string& id) {
              absl::MutexLock lock(&mu_);
              ++misses_[id];
            },
    };
  }

  // Waits (up to 10 s) until `done` holds over the recorded state.
  template <typename F>
  bool Await(F done) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10));
  }

  std::vector<ProbeEvent> events(const std::string& id) {
    absl::MutexLock lock(&mu_);
    return events_[id];
  }
  std::vector<std::string> compromised(const std::string& id) {
    absl::MutexLock lock(&mu_);
    return compromised_[id];
  }
  int misses(const std::string& id) {
    absl::MutexLock lock(&mu_);
    return misses_[id];
  }

  absl::Mutex mu_;
  std::map<std::string, std::vector<ProbeEvent>> events_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<std::string>> compromised_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> misses_ ABSL_GUARDED_BY(mu_);
};

class ProbeMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);
    auto monitor = ProbeMonitor::Create(
        {.interval = absl::Seconds(1), .misses = 3, .tick = absl::Milliseconds(2)},
        recorder_.Callbacks(), &clock_);
    ASSERT_TRUE(monitor.ok()) << monitor.status();
    monitor_ = std::move(*monitor);
    sync_ = Watch("sync");
  }

  // Watches `id`; returns the write end of its pipe.
  UniqueFd Watch(const std::string& id, pid_t probe_pid = 0) {
    int fds[2];
    EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
    EXPECT_TRUE(monitor_->Watch(id, UniqueFd(fds[0]), probe_pid).ok());
    return UniqueFd(fds[1]);
  }

  static void Write(int fd, const std::string& text) {
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }

  // Returns once the monitor's thread has looked at the clock after this call and run every
  // callback that produced: each sync line is handled in its own loop iteration, and an
  // iteration's callbacks all run before the next begins.
  void Settle() {
    for (int round = 0; round < 2; ++round) {
      const std::string tag = absl::StrCat("sync-", ++syncs_);
      Write(sync_.get(), absl::StrCat(R"({"type":"heartbeat"})", "\n",
                                      R"({"type":"error","detail":")", tag, "\"}\n"));
      ASSERT_TRUE(recorder_.Await([&] {
        for (const auto& e : recorder_.events_["sync"]) {
          if (e.detail == tag) return true;
        }
        return false;
      }));
    }
  }

  FakeClock clock_;
  Recorder recorder_;
  std::unique_ptr<ProbeMonitor> monitor_;
  UniqueFd sync_;
  int syncs_ = 0;
};

TEST_F(ProbeMonitorTest, RecordsTheLastHeartbeat) {
  UniqueFd w = Watch("a");
  EXPECT_EQ(monitor_->LastHeartbeat("a")->received, absl::InfinitePast());
  Write(w.get(),
        R"({"type":"heartbeat","processes":3,"tasks":4,"memory_bytes":1024,"cpu_seconds":1.5})"
        "\n");
  Settle();
  auto hb = monitor_->LastHeartbeat("a");
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(hb->received, clock_.Now());
  EXPECT_EQ(hb->processes, 3);
  EXPECT_EQ(hb->tasks, 4u);
  EXPECT_EQ(hb->memory_bytes, 1024u);
  EXPECT_DOUBLE_EQ(hb->cpu_seconds, 1.5);
  EXPECT_EQ(monitor_->LastHeartbeat("nope").status().code(), absl::StatusCode::kNotFound);
}

// interval 1 s, grace 0.5 s: misses at 1.5, 2.5 and 3.5 s; compromised at the third, once.
TEST_F(ProbeMonitorTest, ThreeMissedHeartbeatsMakeACompromise) {
  UniqueFd w = Watch("a");
  clock_.Advance(absl::Milliseconds(1400));
  Settle();
  EXPECT_EQ(recorder_.misses("a"), 0);
  clock_.Advance(absl::Milliseconds(200));
  Settle();
  EXPECT_EQ(recorder_.misses("a"), 1);
  clock_.Advance(absl::Seconds(1));
  Settle();
  EXPECT_EQ(recorder_.misses("a"), 2);
  EXPECT_TRUE(recorder_.compromised("a").empty());
  clock_.Advance(absl::Seconds(1));
  Settle();
  EXPECT_EQ(recorder_.misses("a"), 3);
  ASSERT_EQ(recorder_.compromised("a").size(), 1u);
  EXPECT_THAT(recorder_.compromised("a")[0], HasSubstr("no heartbeat"));
  clock_.Advance(absl::Seconds(10));
  Settle();
  EXPECT_EQ(recorder_.misses("a"), 3);
  EXPECT_EQ(recorder_.compromised("a").size(), 1u);
}

TEST_F(ProbeMonitorTest, AHeartbeatRestartsTheCount) {
  UniqueFd w = Watch("a");
  clock_.Advance(absl::Milliseconds(2600));
  Settle();
  EXPECT_EQ(recorder_.misses("a"), 2);
  Write(w.get(), "{\"type\":\"heartbeat\"}\n");
  Settle();
  clock_.Advance(absl::Milliseconds(2600));
  Settle();
  EXPECT_EQ(recorder_.misses("a"), 4);
  EXPECT_TRUE(recorder_.compromised("a").empty());
}

TEST_F(ProbeMonitorTest, ParsesEventsAndStopsExpectingHeartbeatsAfterExit) {
  UniqueFd w = Watch("a");
  Write(w.get(),
        R"({"type":"violation","kind":"mount","detail":"appeared: 99 1 0:5 / /x rw - tmpfs t rw"})"
        "\n"
        R"({"type":"near_limit","kind":"memory","value":950,"limit":1000})"
        "\n"
        R"({"type":"killed","kind":"cpu","value":2.5,"limit":2})"
        "\n"
        R"({"type":"dropped","lines":17})"
        "\n"
        R"({"type":"exited"})"
        "\n");
  Settle();
  auto events = recorder_.events("a");
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].type, ProbeEvent::Type::kViolation);
  EXPECT_EQ(events[0].kind, "mount");
  EXPECT_THAT(events[0].detail, HasSubstr("/x"));
  EXPECT_EQ(events[1].type, ProbeEvent::Type::kNearLimit);
  EXPECT_EQ(events[1].value, 950);
  EXPECT_EQ(events[1].limit, 1000);
  EXPECT_EQ(events[2].type, ProbeEvent::Type::kKilled);
  EXPECT_EQ(events[2].kind, "cpu");
  EXPECT_EQ(events[3].type, ProbeEvent::Type::kDropped);
  EXPECT_EQ(events[3].lines, 17u);
  EXPECT_EQ(events[4].type, ProbeEvent::Type::kExited);
  EXPECT_EQ(ProbeEventTypeName(events[4].type), "exited");
  // The sandbox is gone: silence and the pipe's end are expected now.
  w.reset();
  clock_.Advance(absl::Seconds(10));
  Settle();
  EXPECT_EQ(recorder_.misses("a"), 0);
  EXPECT_TRUE(recorder_.compromised("a").empty());
}

TEST_F(ProbeMonitorTest, PipeClosedBeforeExitIsACompromise) {
  UniqueFd w = Watch("a");
  Write(w.get(), "{\"type\":\"heartbeat\"}\n");
  w.reset();
  ASSERT_TRUE(recorder_.Await([&] { return !recorder_.compromised_["a"].empty(); }));
  EXPECT_THAT(recorder_.compromised("a")[0], HasSubstr("closed the report pipe"));
}

TEST_F(ProbeMonitorTest, ProbeProcessDeathIsACompromise) {
  int hold[2];
  ASSERT_EQ(::pipe2(hold, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(hold[1]);
    char c;
    (void)!::read(hold[0], &c, 1);  // until the parent closes its end
    _exit(0);
  }
  ::close(hold[0]);
  // The pipe's write end stays open here: only the process's death can tell.
  UniqueFd w = Watch("a", child);
  ::close(hold[1]);
  const bool compromised = recorder_.Await([&] { return !recorder_.compromised_["a"].empty(); });
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(compromised);
  EXPECT_THAT(recorder_.compromised("a")[0], HasSubstr("died"));
}

TEST_F(ProbeMonitorTest, OverlongAndMalformedLinesAreDroppedAndCounted) {
  UniqueFd w = Watch("a");
  // Written from a thread: 100 KiB does not fit in the pipe at once.
  std::thread writer([fd = w.get()] {
    Write(fd, std::string(100 << 10, 'x'));
    Write(fd, "\nnot json\n{\"type\":\"what\"}\n{\"type\":\"heartbeat\",\"processes\":7}\n");
  });
  writer.join();
  Settle();
  EXPECT_EQ(monitor_->bad_lines(), 3u);
  EXPECT_EQ(monitor_->LastHeartbeat("a")->processes, 7);
}

TEST_F(ProbeMonitorTest, ForgetEndsCallbacksAndWatchRefusesDuplicates) {
  UniqueFd w = Watch("a");
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  ::close(fds[1]);
  EXPECT_EQ(monitor_->Watch("a", UniqueFd(fds[0]), 0).code(), absl::StatusCode::kAlreadyExists);
  monitor_->Forget("a");
  EXPECT_EQ(monitor_->LastHeartbeat("a").status().code(), absl::StatusCode::kNotFound);
  clock_.Advance(absl::Seconds(10));
  w.reset();  // would be a compromise if still watched
  Settle();
  EXPECT_EQ(recorder_.misses("a"), 0);
  EXPECT_TRUE(recorder_.compromised("a").empty());
  EXPECT_TRUE(recorder_.events("a").empty());
}

// Settle returns once what the probe wrote before it has been handled, callbacks included: the
// agent calls it at a command's end so that the command's result lists its violations.
TEST(ProbeMonitorSettleTest, ReturnsOnceEarlierLinesWereHandled) {
  FakeClock clock;
  absl::Mutex mu;
  std::vector<std::string> seen;
  ProbeCallbacks callbacks;
  callbacks.on_event = [&](const std::string& id, const ProbeEvent& event) {
    absl::SleepFor(absl::Milliseconds(100));  // a slow callback: Settle must wait for it
    absl::MutexLock lock(&mu);
    seen.push_back(event.detail);
  };
  auto monitor = ProbeMonitor::Create({.interval = absl::Seconds(10), .misses = 3},
                                      std::move(callbacks), &clock);
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd write_end(fds[1]);
  ASSERT_TRUE((*monitor)->Watch("a", UniqueFd(fds[0]), 0).ok());
  for (const char* detail : {"mount", "unshare(CLONE_NEWUSER)"}) {
    const std::string line =
        absl::StrCat(R"({"type":"violation","kind":"syscall","detail":")", detail, "\"}\n");
    ASSERT_EQ(::write(write_end.get(), line.data(), line.size()),
              static_cast<ssize_t>(line.size()));
    (*monitor)->Settle("a", absl::Seconds(10));
    absl::MutexLock lock(&mu);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back(), detail);
  }
  // Nothing to wait for: an unknown sandbox, a quiet pipe.
  const absl::Time start = absl::Now();
  (*monitor)->Settle("nope", absl::Seconds(10));
  (*monitor)->Settle("a", absl::Seconds(10));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace moat::agent
