#include "node-agent/backend/kernel_backend.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/testing/test_child.h"

namespace moat::agent {
namespace {

using ::testing::HasSubstr;

// What one command's callbacks saw.
struct Seen {
  absl::Mutex mu;
  std::string out, err;
  absl::Time first_output = absl::InfiniteFuture();
  ExecExit exit;
  absl::Time exited_at;
  int exits = 0;
  absl::Notification done;

  ExecCallbacks Callbacks() {
    return {.on_stdout =
                [this](absl::string_view s) {
                  absl::MutexLock l(&mu);
                  if (first_output == absl::InfiniteFuture()) first_output = absl::Now();
                  out.append(s.data(), s.size());
                },
            .on_stderr =
                [this](absl::string_view s) {
                  absl::MutexLock l(&mu);
                  err.append(s.data(), s.size());
                },
            .on_exit =
                [this](const ExecExit& e) {
                  {
                    absl::MutexLock l(&mu);
                    exit = e;
                    exited_at = absl::Now();
                    ++exits;
                  }
                  if (!done.HasBeenNotified()) done.Notify();
                }};
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(absl::Seconds(20)); }
};

class KernelBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "real sandboxes need root";
    char dir[] = "/var/tmp/moat-agent-test-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    state_dir_ = dir;
    backend_ = MakeBackend();
    ASSERT_NE(backend_, nullptr);
  }
  void TearDown() override {
    backend_.reset();
    if (!state_dir_.empty()) std::filesystem::remove_all(state_dir_);
  }

  std::unique_ptr<KernelBackend> MakeBackend(absl::Duration restart_grace = absl::ZeroDuration()) {
    KernelBackendOptions options;
    options.restart_grace = restart_grace;
    options.state_dir = state_dir_;
    options.audit_log = state_dir_ + "/audit.jsonl";
    absl::StatusOr<std::unique_ptr<KernelBackend>> backend = KernelBackend::Create(options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? *std::move(backend) : nullptr;
  }

  SandboxSpec Spec(const std::string& id) {
    SandboxSpec spec;
    spec.id = id;
    spec.profile = "default";
    spec.root_dir = "/";
    spec.limits = {.cpus = 1, .memory_bytes = 256 << 20, .pids = 64, .workspace_bytes = 16 << 20};
    return spec;
  }

  std::string Exec(const std::string& id, const std::string& command, Seen& seen,
                   absl::Duration timeout = absl::InfiniteDuration()) {
    ExecRequest request;
    request.command = command;
    request.timeout = timeout;
    absl::StatusOr<std::string> cid = backend_->Exec(id, request, seen.Callbacks());
    EXPECT_TRUE(cid.ok()) << cid.status();
    return cid.ok() ? *cid : "";
  }

  std::string state_dir_;
  std::unique_ptr<KernelBackend> backend_;
};

TEST_F(KernelBackendTest, RunsCommandsThatShareTheWorkspace) {
  ASSERT_TRUE(backend_->Create(Spec("sb-share")).ok());
  Seen first;
  Exec("sb-share", "echo hello > notes.txt; pwd; echo warn >&2; exit 3", first);
  ASSERT_TRUE(first.Wait());
  EXPECT_EQ(first.out, "/workspace\n");
  EXPECT_EQ(first.err, "warn\n");
  EXPECT_EQ(first.exit.exit_code, 3);
  EXPECT_EQ(first.exit.signal, 0);
  EXPECT_EQ(first.exits, 1);
  Seen second;
  Exec("sb-share", "cat /workspace/notes.txt; id -u", second);
  ASSERT_TRUE(second.Wait());
  EXPECT_EQ(second.out, "hello\n0\n");
  EXPECT_EQ(second.exit.exit_code, 0);
}

TEST_F(KernelBackendTest, StreamsOutputAsItComes) {
  ASSERT_TRUE(backend_->Create(Spec("sb-stream")).ok());
  Seen seen;
  Exec("sb-stream", "echo first; sleep 0.4; echo second", seen);
  ASSERT_TRUE(seen.Wait());
  EXPECT_EQ(seen.out, "first\nsecond\n");
  // The first line was delivered while the command still ran.
  EXPECT_LT(seen.first_output + absl::Milliseconds(300), seen.exited_at);
}

// A consumer that takes its output slowly, as a slow HTTP client does: past `bound` bytes it has
// not consumed it says "no more" (accepts_more), and it resumes the command once it is back
// within half of that. `received` is everything, in order.
struct SlowConsumer {
  explicit SlowConsumer(size_t bound) : bound(bound) {}
  const size_t bound;
  absl::Mutex mu;
  std::string received;
  size_t consumed = 0;
  size_t max_unconsumed = 0;
  bool held = false;
  ExecExit exit;
  absl::Notification done;

  ExecCallbacks Callbacks() {
    return {.on_stdout =
                [this](absl::string_view s) {
                  absl::MutexLock l(&mu);
                  received.append(s.data(), s.size());
                  max_unconsumed = std::max(max_unconsumed, received.size() - consumed);
                },
            .on_stderr = [](absl::string_view) {},
            .on_exit =
                [this](const ExecExit& e) {
                  {
                    absl::MutexLock l(&mu);
                    exit = e;
                  }
                  done.Notify();
                },
            .accepts_more =
                [this] {
                  absl::MutexLock l(&mu);
                  if (received.size() - consumed <= bound) return true;
                  held = true;
                  return false;
                }};
  }

  // Consumes `step` bytes every millisecond until the command ends; resumes it as a reader that
  // caught up does (never from inside a callback).
  void Consume(SandboxBackend& backend, const std::string& id, const std::string& command_id,
               size_t step) {
    while (!done.HasBeenNotified()) {
      bool resume = false;
      {
        absl::MutexLock l(&mu);
        consumed = std::min(received.size(), consumed + step);
        if (held && received.size() - consumed <= bound / 2) {
          held = false;
          resume = true;
        }
      }
      if (resume) backend.ResumeOutput(id, command_id);
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
};

// Backpressure: a command writing far more than the consumer's bound to a slow consumer is held
// on its full pipe instead of being read ahead: what is delivered and not consumed passes the
// bound by two reads at most, and every byte comes, in order.
TEST_F(KernelBackendTest, ASlowConsumerHoldsTheCommandAndGetsEveryByteInOrder) {
  ASSERT_TRUE(backend_->Create(Spec("sb-slow")).ok());
  constexpr int kLines = 1000000;  // 6.9 MB
  constexpr size_t kBound = 256 << 10;
  std::string expected;
  for (int i = 1; i <= kLines; ++i) absl::StrAppend(&expected, i, "\n");
  SlowConsumer consumer(kBound);
  ExecRequest request;
  request.command = absl::StrCat("seq 1 ", kLines);
  absl::StatusOr<std::string> cid = backend_->Exec("sb-slow", request, consumer.Callbacks());
  ASSERT_TRUE(cid.ok()) << cid.status();
  consumer.Consume(*backend_, "sb-slow", *cid, 8 << 10);  // ~8 MB/s, slower than seq
  ASSERT_TRUE(consumer.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  absl::MutexLock l(&consumer.mu);
  EXPECT_EQ(consumer.exit.exit_code, 0);
  EXPECT_EQ(consumer.received.size(), expected.size());
  EXPECT_TRUE(consumer.received == expected) << "the output differs from seq's";
  // The pipes were not read while it was held: past the bound at most the read that crossed
  // it (64 KiB) and, at the end, what the pipe holds once seq has exited (64 KiB: a pipe whose
  // writers are gone is drained, held or not). Without the hold: megabytes.
  EXPECT_LE(consumer.max_unconsumed, kBound + 2 * (64 << 10));
}

// A held command (its consumer never catches up) still ends at its timeout, and its end is
// reported with what its pipes held.
TEST_F(KernelBackendTest, AHeldCommandStillTimesOut) {
  ASSERT_TRUE(backend_->Create(Spec("sb-held")).ok());
  SlowConsumer consumer(64 << 10);
  ExecRequest request;
  request.command = "yes";
  request.timeout = absl::Milliseconds(500);
  const absl::Time begin = absl::Now();
  ASSERT_TRUE(backend_->Exec("sb-held", request, consumer.Callbacks()).ok());
  ASSERT_TRUE(consumer.done.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_LT(absl::Now() - begin, absl::Seconds(10));
  absl::MutexLock l(&consumer.mu);
  EXPECT_TRUE(consumer.exit.timed_out);
  EXPECT_EQ(consumer.exit.signal, SIGKILL);
  EXPECT_TRUE(consumer.held);
  // Held from the first read past the bound: not the megabytes `yes` writes in 500 ms.
  EXPECT_LE(consumer.received.size(), (64 << 10) + 3 * (64 << 10));
}

TEST_F(KernelBackendTest, EnvironmentAndWorkingDirectory) {
  ASSERT_TRUE(backend_->Create(Spec("sb-env")).ok());
  Seen seen;
  ExecRequest request;
  request.command = "echo $GREETING; echo $PATH; pwd";
  request.env = {{"GREETING", "hi there"}};
  request.cwd = "/tmp";
  ASSERT_TRUE(backend_->Exec("sb-env", request, seen.Callbacks()).ok());
  ASSERT_TRUE(seen.Wait());
  EXPECT_THAT(seen.out, ::testing::StartsWith("hi there\n/usr/local/sbin:"));
  EXPECT_THAT(seen.out, ::testing::EndsWith("/tmp\n"));

  request.cwd = "/no/such/dir";
  Seen never;
  absl::StatusOr<std::string> bad = backend_->Exec("sb-env", request, never.Callbacks());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  request.cwd = "relative";
  EXPECT_EQ(backend_->Exec("sb-env", request, never.Callbacks()).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.cwd = "";
  request.command = "  ";
  EXPECT_EQ(backend_->Exec("sb-env", request, never.Callbacks()).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.command = "true";
  EXPECT_EQ(backend_->Exec("sb-nope", request, never.Callbacks()).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(never.exits, 0);
}

// A command of plain words is exec'd without the shell (direct_command.h): its parent is init,
// with the PWD the shell would export. Where that exec fails, the shell runs it after all, so its
// messages, exit codes and script handling are the shell's.
TEST_F(KernelBackendTest, PlainCommandsSkipTheShellAndFailAsTheShellWould) {
  ASSERT_TRUE(backend_->Create(Spec("sb-direct")).ok());
  Seen init;  // a shell's parent: init
  Exec("sb-direct", "printf 'PPid:\\t%s\\n' $PPID", init);
  ASSERT_TRUE(init.Wait());
  ASSERT_THAT(init.out, ::testing::StartsWith("PPid:\t"));
  Seen direct;
  Exec("sb-direct", "/bin/grep PPid: /proc/self/status", direct);
  ASSERT_TRUE(direct.Wait());
  EXPECT_EQ(direct.out, init.out);  // init's child, not a shell's
  Seen shell;
  Exec("sb-direct", "/bin/grep PPid: /proc/self/status | /bin/cat", shell);
  ASSERT_TRUE(shell.Wait());
  EXPECT_NE(shell.out, init.out);  // an operator: through the shell
  Seen env;
  Exec("sb-direct", "env", env);  // found on PATH
  ASSERT_TRUE(env.Wait());
  EXPECT_THAT(env.out, HasSubstr("PWD=/workspace\n"));
  EXPECT_EQ(env.exit.exit_code, 0);

  Seen missing;
  Exec("sb-direct", "no-such-program --flag", missing);
  ASSERT_TRUE(missing.Wait());
  EXPECT_EQ(missing.err, "/bin/sh: 1: no-such-program: not found\n");
  EXPECT_EQ(missing.exit.exit_code, 127);
  EXPECT_EQ(missing.exit.error, "");
  EXPECT_EQ(missing.exits, 1);
  // A script without a #! line: execve refuses it (ENOEXEC), the shell runs it.
  Seen write;
  Exec("sb-direct", "printf 'echo from the script\\n' > s; chmod +x s", write);
  ASSERT_TRUE(write.Wait());
  Seen script;
  Exec("sb-direct", "./s", script);
  ASSERT_TRUE(script.Wait());
  EXPECT_EQ(script.out, "from the script\n");
  EXPECT_EQ(script.exit.exit_code, 0);
  Seen denied;
  Exec("sb-direct", "/workspace", denied);  // a directory
  ASSERT_TRUE(denied.Wait());
  EXPECT_EQ(denied.err, "/bin/sh: 1: /workspace: Permission denied\n");
  EXPECT_EQ(denied.exit.exit_code, 126);

  // A signal that ends the program ends the command itself (as with bash -c), where dash would
  // have reported it as its own exit status 128 + N (docs/execd.md).
  Seen direct_killed, shell_killed;
  Exec("sb-direct", "sleep 101", direct_killed);
  Exec("sb-direct", "sleep 102 # a comment: through the shell", shell_killed);
  for (int i = 0;
       i < 100 && !(direct_killed.done.HasBeenNotified() && shell_killed.done.HasBeenNotified());
       ++i) {
    Seen kill;  // the shell's sleep may not have started yet: again until both ended
    Exec("sb-direct", "pkill -KILL -x sleep", kill);
    ASSERT_TRUE(kill.Wait());
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(direct_killed.Wait());
  ASSERT_TRUE(shell_killed.Wait());
  EXPECT_EQ(direct_killed.exit.signal, SIGKILL);
  EXPECT_EQ(direct_killed.exit.exit_code, 128 + SIGKILL);
  EXPECT_EQ(shell_killed.exit.signal, 0);
  EXPECT_EQ(shell_killed.exit.exit_code, 128 + SIGKILL);
}

TEST_F(KernelBackendTest, TimeoutKillsTheCommandTree) {
  ASSERT_TRUE(backend_->Create(Spec("sb-timeout")).ok());
  Seen seen;
  const absl::Time begin = absl::Now();
  Exec("sb-timeout", "sleep 30 & sleep 30; echo not reached", seen, absl::Milliseconds(300));
  ASSERT_TRUE(seen.Wait());
  EXPECT_LT(absl::Now() - begin, absl::Seconds(5));
  EXPECT_TRUE(seen.exit.timed_out);
  EXPECT_EQ(seen.exit.signal, SIGKILL);
  EXPECT_EQ(seen.out, "");
  // Both sleeps are gone: only init is left in the sandbox.
  absl::StatusOr<SandboxHealth> health = backend_->Probe("sb-timeout");
  ASSERT_TRUE(health.ok());
  for (int i = 0; i < 100 && health->processes > 1; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    health = backend_->Probe("sb-timeout");
  }
  EXPECT_EQ(health->processes, 1);
  EXPECT_TRUE(health->alive);
}

// Only init is left in the sandbox within a few seconds.
void ExpectOnlyInitLeft(KernelBackend& backend, const std::string& id) {
  absl::StatusOr<SandboxHealth> health = backend.Probe(id);
  ASSERT_TRUE(health.ok());
  for (int i = 0; i < 150 && health->processes > 1; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    health = backend.Probe(id);
  }
  EXPECT_TRUE(health->alive);
  if (health->processes == 1) return;
  ADD_FAILURE() << health->processes << " processes: one of the command outlived its end";
  Seen ps;
  ExecRequest request;
  request.command = "ps -eo pid,ppid,pgid,stat,args";
  if (backend.Exec(id, request, ps.Callbacks()).ok() && ps.Wait()) {
    absl::MutexLock l(&ps.mu);
    ADD_FAILURE() << "left in the sandbox:\n" << ps.out;
  }
}

// What POST /v1/run reports as moat run --json does: the sandbox cgroup's CPU time across the
// command and its peak memory; and a CPU-time limit that ends a spinning command.
TEST_F(KernelBackendTest, CommandsReportCpuAndPeakMemoryAndACpuTimeoutEndsThem) {
  ASSERT_TRUE(backend_->Create(Spec("sb-usage")).ok());
  // Usage is read for commands with a CPU limit (POST /v1/run's) and for failed ones; a
  // successful command without one does not pay for the reads (the warm path).
  ExecRequest limited;
  limited.cpu_timeout = absl::Seconds(60);
  Seen plain;
  Exec("sb-usage", "true", plain);
  ASSERT_TRUE(plain.Wait());
  EXPECT_FALSE(plain.exit.cpu.has_value()) << "usage read on the warm path";
  Seen busy;
  // ~0.3 s of CPU and 32 MiB touched.
  limited.command =
      "python3 -c 'import time\nb = bytearray(32 << 20)\nb[::4096] = b\"x\" * len(b[::4096])\n"
      "t = time.process_time()\nwhile time.process_time() - t < 0.3: pass'";
  ASSERT_TRUE(backend_->Exec("sb-usage", limited, busy.Callbacks()).ok());
  ASSERT_TRUE(busy.Wait());
  EXPECT_EQ(busy.exit.exit_code, 0) << busy.err;
  ASSERT_TRUE(busy.exit.cpu.has_value());
  EXPECT_GE(*busy.exit.cpu, absl::Milliseconds(300));
  EXPECT_LT(*busy.exit.cpu, absl::Seconds(5));
  ASSERT_TRUE(busy.exit.peak_memory_bytes.has_value());
  EXPECT_GE(*busy.exit.peak_memory_bytes, uint64_t{32} << 20);
  EXPECT_FALSE(busy.exit.cpu_timed_out);
  // The CPU figure is the command's: a sleeping command used less than the busy one before it
  // (the sandbox's total would be more). Not a bound in milliseconds: under emulation starting
  // sh and sleep alone costs ~0.26 s (the real-kernel lane).
  Seen idle;
  limited.command = "sleep 0.3";
  ASSERT_TRUE(backend_->Exec("sb-usage", limited, idle.Callbacks()).ok());
  ASSERT_TRUE(idle.Wait());
  ASSERT_TRUE(idle.exit.cpu.has_value());
  EXPECT_LT(*idle.exit.cpu, *busy.exit.cpu);
  // A spin past its CPU time: killed, cpu_timed_out, with about the limit used.
  Seen spin;
  ExecRequest request;
  request.command = "while :; do :; done";
  request.cpu_timeout = absl::Milliseconds(300);
  const absl::Time begin = absl::Now();
  ASSERT_TRUE(backend_->Exec("sb-usage", request, spin.Callbacks()).ok());
  ASSERT_TRUE(spin.Wait());
  EXPECT_LT(absl::Now() - begin, absl::Seconds(15));
  EXPECT_TRUE(spin.exit.cpu_timed_out);
  EXPECT_FALSE(spin.exit.timed_out);
  EXPECT_EQ(spin.exit.signal, SIGKILL);
  ASSERT_TRUE(spin.exit.cpu.has_value());
  EXPECT_GE(*spin.exit.cpu, absl::Milliseconds(300));
  ExpectOnlyInitLeft(*backend_, "sb-usage");
}

// setsid takes a process out of the command's process group (what a signal used to address);
// a subshell that exits first orphans it as well. Neither escapes the command's tree.
TEST_F(KernelBackendTest, TimeoutEndsProcessesThatLeftTheCommandsSession) {
  ASSERT_TRUE(backend_->Create(Spec("sb-setsid-t")).ok());
  Seen seen;
  Exec("sb-setsid-t", "setsid sleep 30 & (setsid sleep 31 &); sleep 30", seen,
       absl::Milliseconds(500));
  ASSERT_TRUE(seen.Wait());
  EXPECT_TRUE(seen.exit.timed_out);
  ExpectOnlyInitLeft(*backend_, "sb-setsid-t");
}

TEST_F(KernelBackendTest, InterruptEndsProcessesThatLeftTheCommandsSession) {
  ASSERT_TRUE(backend_->Create(Spec("sb-setsid-i")).ok());
  Seen seen;
  // The second one ignores SIGINT: the kill after the grace must reach it too, although the
  // shell (ended by SIGINT) is gone by then.
  std::string cid = Exec("sb-setsid-i",
                         "setsid sleep 30 & (setsid sh -c \"trap '' INT; sleep 31\" &); "
                         "echo ready; wait",
                         seen);
  for (int i = 0; i < 500; ++i) {
    {
      absl::MutexLock l(&seen.mu);
      if (seen.out == "ready\n") break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::SleepFor(absl::Milliseconds(100));  // the subshell's sh is running
  ASSERT_TRUE(backend_->Interrupt("sb-setsid-i", cid, absl::Milliseconds(300)).ok());
  ASSERT_TRUE(seen.Wait());
  EXPECT_TRUE(seen.exit.interrupted);
  ExpectOnlyInitLeft(*backend_, "sb-setsid-i");
}

// `sh -c 'python3 ...'` whose python the OOM killer ends exits 137: still oom_killed.
TEST_F(KernelBackendTest, AnOomKillOfAnyProcessOfAFailedCommandIsReported) {
  SandboxSpec spec = Spec("sb-oom");
  spec.limits.memory_bytes = 48 << 20;
  ASSERT_TRUE(backend_->Create(spec).ok());
  const std::string hog =
      "python3 -c 'b = bytearray(128 << 20); b[::4096] = b\"x\" * len(b[::4096])'";
  Seen oom;
  Exec("sb-oom", hog + "; exit $?", oom);
  ASSERT_TRUE(oom.Wait());
  EXPECT_EQ(oom.exit.exit_code, 137);
  EXPECT_TRUE(oom.exit.oom_killed);
  // Attributed once: the next failing command is not blamed for it.
  Seen plain;
  Exec("sb-oom", "exit 3", plain);
  ASSERT_TRUE(plain.Wait());
  EXPECT_EQ(plain.exit.exit_code, 3);
  EXPECT_FALSE(plain.exit.oom_killed);
}

TEST_F(KernelBackendTest, InterruptSendsSigintThenKills) {
  ASSERT_TRUE(backend_->Create(Spec("sb-int")).ok());
  Seen polite;
  // The trap proves SIGINT arrived (the shell's own catch-and-exec of a pending SIGINT would
  // otherwise make an immediate interrupt racy); "ready" says the trap is in place.
  std::string cid = Exec(
      "sb-int", "trap 'echo got-int; exit 7' INT; echo ready; while :; do sleep 0.1; done", polite);
  for (int i = 0; i < 500; ++i) {
    {
      absl::MutexLock l(&polite.mu);
      if (polite.out == "ready\n") break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(backend_->Interrupt("sb-int", cid, absl::Seconds(5)).ok());
  ASSERT_TRUE(polite.Wait());
  EXPECT_TRUE(polite.exit.interrupted);
  EXPECT_EQ(polite.exit.exit_code, 7);
  EXPECT_EQ(polite.out, "ready\ngot-int\n");

  Seen stubborn;
  cid = Exec("sb-int", "trap '' INT; echo ready; sleep 30", stubborn);  // sleep ignores it too
  for (int i = 0; i < 500; ++i) {
    {
      absl::MutexLock l(&stubborn.mu);
      if (stubborn.out == "ready\n") break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  const absl::Time begin = absl::Now();
  ASSERT_TRUE(backend_->Interrupt("sb-int", cid, absl::Milliseconds(200)).ok());
  ASSERT_TRUE(stubborn.Wait());
  EXPECT_EQ(stubborn.exit.signal, SIGKILL);
  EXPECT_GE(absl::Now() - begin, absl::Milliseconds(150));
  // An ended command: fine; an unknown one: NotFound.
  EXPECT_TRUE(backend_->Interrupt("sb-int", cid, absl::Seconds(1)).ok());
  EXPECT_EQ(backend_->Interrupt("sb-int", "cmd-999999", absl::Seconds(1)).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(KernelBackendTest, DestroyEndsCommandsAndLeavesNothing) {
  ASSERT_TRUE(backend_->Create(Spec("sb-gone")).ok());
  const pid_t init = backend_->InitPid("sb-gone");
  ASSERT_GT(init, 0);
  Seen running;
  Exec("sb-gone", "setsid sleep 60 & echo started; sleep 60", running);
  for (int i = 0; i < 200; ++i) {
    {
      absl::MutexLock l(&running.mu);
      if (!running.out.empty()) break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  absl::StatusOr<CleanupReport> report = backend_->Destroy("sb-gone");
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->clean()) << report->ToString();
  EXPECT_GE(report->processes_killed, 3);  // init, the shell and two sleeps
  EXPECT_EQ(report->cgroups_removed, 1);
  EXPECT_GT(report->mounts_unmounted, 5);
  EXPECT_EQ(report->workspaces_removed, 1);
  ASSERT_TRUE(running.Wait());
  EXPECT_EQ(running.exit.signal, SIGKILL);
  EXPECT_EQ(running.exits, 1);
  EXPECT_NE(::kill(init, 0), 0);
  EXPECT_FALSE(std::filesystem::exists(state_dir_ + "/sandboxes/sb-gone.json"));
  // Idempotent, and the id is free again.
  absl::StatusOr<CleanupReport> again = backend_->Destroy("sb-gone");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->processes_killed, 0);
  EXPECT_EQ(backend_->Probe("sb-gone").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KernelBackendTest, ManyConcurrentCommands) {
  ASSERT_TRUE(backend_->Create(Spec("sb-busy")).ok());
  constexpr int kThreads = 4, kPerThread = 25;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        Seen seen;
        std::string cid = Exec("sb-busy", absl::StrCat("echo ", t, "-", i), seen);
        if (!cid.empty() && seen.Wait() && seen.out == absl::StrCat(t, "-", i, "\n") &&
            seen.exit.exit_code == 0) {
          ++ok;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads * kPerThread);
}

TEST_F(KernelBackendTest, LimitsApply) {
  SandboxSpec spec = Spec("sb-limits");
  spec.limits.pids = 8;
  ASSERT_TRUE(backend_->Create(spec).ok());
  Seen bomb;
  Exec("sb-limits", "for i in $(seq 20); do sleep 5 & done 2>&1; wait", bomb, absl::Seconds(3));
  ASSERT_TRUE(bomb.Wait());
  EXPECT_THAT(bomb.out + bomb.err, HasSubstr("fork"));
  // The sandbox still works once the command is gone.
  Seen after;
  Exec("sb-limits", "echo fine", after);
  ASSERT_TRUE(after.Wait());
  EXPECT_EQ(after.out, "fine\n");

  SandboxSpec bad = Spec("sb-badpolicy");
  bad.policy = "filesystem: {allowWrite: [/etc]}";
  EXPECT_EQ(backend_->Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  bad.policy = "limits: {memory: lots}";
  EXPECT_EQ(backend_->Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->Create(Spec("sb-limits")).status().code(), absl::StatusCode::kAlreadyExists);
  NodeUsage usage = backend_->Usage();
  EXPECT_GE(usage.cpu_cores, 1);
  EXPECT_GE(usage.cpu_cores_allocated, 1);
  EXPECT_GT(usage.memory_bytes_used, 0u);
  EXPECT_GE(usage.pids_used, 1u);
  EXPECT_TRUE(backend_->CheckNode().ok());
}

TEST_F(KernelBackendTest, InitDeathEndsCommands) {
  ASSERT_TRUE(backend_->Create(Spec("sb-dies")).ok());
  Seen running;
  Exec("sb-dies", "sleep 60", running);
  ASSERT_EQ(::kill(backend_->InitPid("sb-dies"), SIGKILL), 0);  // from the host, as the OOM killer
  ASSERT_TRUE(running.Wait());
  EXPECT_EQ(running.exit.signal, SIGKILL);
  absl::StatusOr<SandboxHealth> health = backend_->Probe("sb-dies");
  ASSERT_TRUE(health.ok());
  EXPECT_FALSE(health->alive);
  Seen refused;
  ExecRequest request;
  request.command = "true";
  EXPECT_EQ(backend_->Exec("sb-dies", request, refused.Callbacks()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(backend_->Destroy("sb-dies").ok());
}

TEST_F(KernelBackendTest, FilesAreSharedWithCommandsAndStayInside) {
  ASSERT_TRUE(backend_->Create(Spec("sb-files")).ok());
  absl::Status wrote =
      backend_->WriteFile("sb-files", "/workspace/in/data.txt", "from the api", 0644);
  ASSERT_TRUE(wrote.ok()) << wrote;
  Seen seen;
  Exec("sb-files",
       "cat in/data.txt; stat -c '%u %a' in/data.txt; echo made > out.txt; "
       "ln -s /etc/passwd leak; ln -s ../../../../etc leakdir",
       seen);
  ASSERT_TRUE(seen.Wait());
  // The sandbox sees the file as its own (root inside, mapped to its host id outside).
  EXPECT_EQ(seen.out, "from the api0 644\n");
  absl::StatusOr<std::string> out = backend_->ReadFile("sb-files", "out.txt", 0, 100);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "made\n");
  // Links made inside resolve as the sandbox resolves them: to its own /etc/passwd (its root
  // here is the host's "/", read-only), whatever "../" they climb.
  absl::StatusOr<std::string> own = backend_->ReadFile("sb-files", "/etc/passwd", 0, 1 << 20);
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ(backend_->ReadFile("sb-files", "leak", 0, 1 << 20).value_or(""), *own);
  EXPECT_EQ(backend_->ReadFile("sb-files", "leakdir/passwd", 0, 1 << 20).value_or(""), *own);
  EXPECT_EQ(backend_->ReadFile("sb-files", "../etc/passwd", 0, 10).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<std::vector<FileInfo>> list = backend_->List("sb-files", "/workspace");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), 4u);
  ASSERT_TRUE(backend_->Move("sb-files", "out.txt", "in/moved.txt").ok());
  ASSERT_TRUE(backend_->Remove("sb-files", "in").ok());
  Seen after;
  Exec("sb-files", "ls", after);
  ASSERT_TRUE(after.Wait());
  EXPECT_EQ(after.out, "leak\nleakdir\n");
  // The workspace quota (16 MiB here) holds for uploads too.
  EXPECT_EQ(backend_->WriteFile("sb-files", "big", std::string(20 << 20, 'x'), 0644).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(backend_->Stat("sb-nope", "x").status().code(), absl::StatusCode::kNotFound);
}

// Files anywhere the sandbox sees, resolved in its root: its /tmp is its own tmpfs, its root is
// read-only, what the agent hides from it (the state directory) stays hidden, and magic links
// (/proc/PID/root) lead nowhere.
TEST_F(KernelBackendTest, FilesAnywhereTheSandboxSeesAndNowhereElse) {
  ASSERT_TRUE(backend_->Create(Spec("sb-root")).ok());
  ASSERT_TRUE(backend_->WriteFile("sb-root", "/tmp/api.txt", "to tmp", 0600).ok());
  Seen seen;
  Exec("sb-root",
       "cat /tmp/api.txt; echo; echo cmd > /tmp/cmd.txt; ln -s /proc/1/root /workspace/magic",
       seen);
  ASSERT_TRUE(seen.Wait());
  EXPECT_EQ(seen.out, "to tmp\n");
  EXPECT_EQ(backend_->ReadFile("sb-root", "/tmp/cmd.txt", 0, 100).value_or(""), "cmd\n");
  ASSERT_TRUE(backend_->SetMode("sb-root", "/tmp/cmd.txt", 0640).ok());
  EXPECT_EQ(backend_->Stat("sb-root", "/tmp/cmd.txt")->mode, 0640u);
  EXPECT_FALSE(std::filesystem::exists("/tmp/api.txt")) << "written to the host's /tmp";
  // The root is read-only for the sandbox, so for the API too; nothing reaches the host.
  const std::string marker = "/etc/moat-kernel-backend-test-marker";
  EXPECT_FALSE(backend_->WriteFile("sb-root", marker, "x", 0644).ok());
  EXPECT_FALSE(std::filesystem::exists(marker));
  // The agent's state directory is hidden inside: its records cannot be read through the API.
  std::ofstream(state_dir_ + "/secret") << "host secret";
  absl::StatusOr<std::string> secret =
      backend_->ReadFile("sb-root", state_dir_ + "/secret", 0, 100);
  EXPECT_FALSE(secret.ok() && *secret == "host secret");
  EXPECT_FALSE(backend_->ReadFile("sb-root", "/workspace/magic/etc/hostname", 0, 100).ok());
  // Listing the root shows the sandbox's view.
  absl::StatusOr<std::vector<FileInfo>> root = backend_->List("sb-root", "/");
  ASSERT_TRUE(root.ok()) << root.status();
  std::vector<std::string> names;
  for (const FileInfo& e : *root) names.push_back(e.path);
  EXPECT_THAT(names, ::testing::IsSupersetOf({"/tmp", "/workspace", "/etc", "/proc"}));
}

// A command flips /workspace/d between a directory and a symlink to the host path it would
// like to reach while the API reads through it: every answer is the sandbox's file or an
// error, never the host's.
TEST_F(KernelBackendTest, ADirectoryFlippedWithASymlinkNeverLeadsOut) {
  ASSERT_TRUE(backend_->Create(Spec("sb-race")).ok());
  std::ofstream(state_dir_ + "/target") << "host secret";
  Seen flipper;
  std::string cid = Exec("sb-race",
                         "while :; do rm -rf /workspace/d; mkdir /workspace/d; "
                         "echo inside > /workspace/d/target; rm -rf /workspace/d; ln -s " +
                             state_dir_ + " /workspace/d; done",
                         flipper);
  int inside = 0;
  for (int i = 0; i < 3000; ++i) {
    absl::StatusOr<std::string> got = backend_->ReadFile("sb-race", "/workspace/d/target", 0, 100);
    ASSERT_FALSE(got.ok() && got->find("host secret") != std::string::npos)
        << "ESCAPED after " << i << " reads";
    if (got.ok() && *got == "inside\n") ++inside;
    absl::StatusOr<std::vector<FileInfo>> list = backend_->List("sb-race", "/workspace/d");
    if (list.ok()) {
      for (const FileInfo& e : *list) ASSERT_NE(e.path, "/workspace/d/secret");
    }
  }
  EXPECT_GT(inside, 0) << "the race never let a read through: the test proves nothing";
  ASSERT_TRUE(backend_->Interrupt("sb-race", cid, absl::Milliseconds(100)).ok());
  ASSERT_TRUE(flipper.Wait());
}

// The cgroup freezer (v1 here: this machine kind is hybrid) stops a running command where it is
// and lets it go on after Resume.
TEST_F(KernelBackendTest, PauseFreezesTheSandboxAndResumeLetsItGoOn) {
  ASSERT_TRUE(backend_->Create(Spec("sb-pause")).ok());
  Seen counting;
  Exec("sb-pause", "i=0; while [ $i -lt 40 ]; do i=$((i+1)); echo $i; sleep 0.05; done", counting);
  absl::SleepFor(absl::Milliseconds(300));
  absl::Status paused = backend_->Pause("sb-pause");
  if (absl::IsFailedPrecondition(paused)) GTEST_SKIP() << paused;  // no freezer on this host
  ASSERT_TRUE(paused.ok()) << paused;
  size_t at_pause;
  {
    absl::MutexLock l(&counting.mu);
    at_pause = counting.out.size();
  }
  absl::SleepFor(absl::Milliseconds(500));
  {
    absl::MutexLock l(&counting.mu);
    EXPECT_EQ(counting.out.size(), at_pause) << "output went on while frozen";
    EXPECT_EQ(counting.exits, 0);
  }
  ASSERT_TRUE(backend_->Resume("sb-pause").ok());
  ASSERT_TRUE(counting.Wait());
  EXPECT_EQ(counting.exit.exit_code, 0);
  EXPECT_THAT(counting.out, ::testing::EndsWith("\n40\n"));
  EXPECT_EQ(backend_->Pause("sb-nope").code(), absl::StatusCode::kNotFound);
}

TEST_F(KernelBackendTest, EgressDecisionsAreObserved) {
  struct Observed {
    absl::Mutex mu;
    std::vector<std::tuple<std::string, bool, std::string>> requests;
  } egress;
  backend_.reset();
  KernelBackendOptions options;
  options.state_dir = state_dir_;
  options.audit_log = state_dir_ + "/audit.jsonl";
  options.on_egress = [&egress](const std::string& id, bool allowed, const std::string& detail) {
    absl::MutexLock l(&egress.mu);
    egress.requests.emplace_back(id, allowed, detail);
  };
  absl::StatusOr<std::unique_ptr<KernelBackend>> backend = KernelBackend::Create(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  backend_ = *std::move(backend);
  // Its proxy threads call the observer, which uses `egress`: the backend goes first.
  auto stop_first = absl::MakeCleanup([this] { backend_.reset(); });
  SandboxSpec spec = Spec("sb-egress");
  spec.policy = "network: {allowedDomains: [allowed.example]}";
  ASSERT_TRUE(backend_->Create(spec).ok());
  Seen denied;
  // Through the proxy that the sandbox's environment names; refused before any DNS lookup.
  Exec("sb-egress", "curl -s -o /dev/null -w '%{http_code}' http://denied.example/", denied);
  ASSERT_TRUE(denied.Wait());
  EXPECT_EQ(denied.out, "403");
  // The proxy records the decision after it has answered: curl may be done first.
  auto observed = [&egress] { return !egress.requests.empty(); };
  {
    absl::MutexLock l(&egress.mu);
    egress.mu.AwaitWithTimeout(absl::Condition(&observed), absl::Seconds(10));
    ASSERT_EQ(egress.requests.size(), 1u);
    EXPECT_EQ(std::get<0>(egress.requests[0]), "sb-egress");
    EXPECT_FALSE(std::get<1>(egress.requests[0]));
    EXPECT_THAT(std::get<2>(egress.requests[0]), HasSubstr("denied.example"));
  }
}

TEST_F(KernelBackendTest, AFailingStartHookLeavesNothing) {
  backend_.reset();
  KernelBackendOptions options;
  options.state_dir = state_dir_;
  options.audit_log = state_dir_ + "/audit.jsonl";
  pid_t init = -1;
  std::vector<std::string> cgroups;
  options.on_start = [&](const std::string&, sandbox::LiveSandbox& box, const sandbox::Limits&) {
    init = box.pid();
    cgroups = box.cgroup().paths();
    return absl::UnavailableError("no probe today");
  };
  int destroyed = 0;
  options.on_destroy = [&](const std::string&) { ++destroyed; };
  absl::StatusOr<std::unique_ptr<KernelBackend>> backend = KernelBackend::Create(options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  backend_ = *std::move(backend);
  auto stop_first = absl::MakeCleanup([this] { backend_.reset(); });  // its hooks use locals
  EXPECT_EQ(backend_->Create(Spec("sb-hook")).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(destroyed, 0);  // its start failed: nothing of it to stop
  ASSERT_GT(init, 0);
  EXPECT_NE(::kill(init, 0), 0);
  for (const std::string& path : cgroups) EXPECT_FALSE(std::filesystem::exists(path)) << path;
  EXPECT_TRUE(std::filesystem::is_empty(state_dir_ + "/sandboxes"));
  EXPECT_EQ(backend_->Probe("sb-hook").status().code(), absl::StatusCode::kNotFound);
}

// A crashed agent: a child process makes sandboxes, starts commands, and is killed with -9.
// The next agent must find nothing running, and clean the cgroups and records.
TEST_F(KernelBackendTest, CleanLeftoversAfterAKilledAgent) {
  backend_.reset();  // no threads in this process while forking
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    std::unique_ptr<KernelBackend> doomed = MakeBackend();
    if (doomed == nullptr) ::_exit(1);
    for (const char* id : {"sb-crash-a", "sb-crash-b"}) {
      if (!doomed->Create(Spec(id)).ok()) ::_exit(2);
      ExecRequest request;
      request.command = "sleep 60 & sleep 60";
      if (!doomed->Exec(id, request, {}).ok()) ::_exit(3);
    }
    ssize_t unused = ::write(ready[1], "r", 1);
    (void)unused;
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1) << "the doomed agent did not start its sandboxes";
  ::close(ready[0]);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status;
  ASSERT_EQ(::waitpid(child, &status, 0), child);

  backend_ = MakeBackend();
  ASSERT_NE(backend_, nullptr);
  absl::StatusOr<CleanupReport> report = backend_->CleanLeftovers();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->clean()) << report->ToString();
  EXPECT_EQ(report->workspaces_removed, 2) << report->ToString();  // the two records
  EXPECT_GE(report->cgroups_removed, 2) << report->ToString();
  EXPECT_TRUE(std::filesystem::is_empty(state_dir_ + "/sandboxes"));
  // No process of theirs is left: nothing on the host runs in a "<child>-sb-crash" cgroup.
  for (const auto& [controller, mount] : backend_->cgroup_layout().v1_mounts) {
    for (const char* id : {"sb-crash-a", "sb-crash-b"}) {
      EXPECT_FALSE(std::filesystem::exists(absl::StrCat(mount, "/moat/", child, "-", id)));
    }
  }
  if (!backend_->cgroup_layout().v2_mount.empty()) {
    EXPECT_FALSE(std::filesystem::exists(
        absl::StrCat(backend_->cgroup_layout().v2_mount, "/moat/", child, "-sb-crash-a")));
  }
  absl::StatusOr<CleanupReport> second = backend_->CleanLeftovers();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->workspaces_removed, 0);
}

// A process still running in a dead agent's sandbox cgroup (its init did not take it along) is
// killed by the next agent's CleanLeftovers, and the cgroup removed; a record that names a
// cgroup outside moat/ is not followed.
TEST_F(KernelBackendTest, CleanLeftoversKillsWhatStillRunsInADeadAgentsCgroup) {
  // A pid that no longer exists stands for the dead agent.
  pid_t dead = ::fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string id = "sb-leftover";
  absl::StatusOr<std::unique_ptr<sandbox::Cgroup>> cgroup = sandbox::Cgroup::Create(
      backend_->cgroup_layout(), absl::StrCat(dead, "-", id), {64 << 20, 16, 1});
  ASSERT_TRUE(cgroup.ok()) << cgroup.status();
  const std::vector<std::string> dirs = (*cgroup)->paths();
  sandbox::testing::TestChild orphan([] {
    ::pause();
    return 0;
  });
  ASSERT_GT(orphan.pid(), 0);
  ASSERT_TRUE((*cgroup)->AddProcess(orphan.pid()).ok());
  orphan.Release();
  nlohmann::json record = {{"id", id}, {"agent_pid", dead}, {"cgroups", dirs}};
  {
    std::ofstream out(absl::StrCat(state_dir_, "/sandboxes/", id, ".json"));
    out << record.dump();
  }
  // A damaged record pointing at a hierarchy's root must not be followed.
  nlohmann::json bad = {
      {"id", "sb-bad"},
      {"agent_pid", dead},
      {"cgroups", {std::filesystem::path(dirs.front()).parent_path().parent_path()}}};
  {
    std::ofstream out(absl::StrCat(state_dir_, "/sandboxes/sb-bad.json"));
    out << bad.dump();
  }

  absl::StatusOr<CleanupReport> report = backend_->CleanLeftovers();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->processes_killed, 1) << report->ToString();
  EXPECT_EQ(report->workspaces_removed, 2);  // both records
  EXPECT_GE(report->cgroups_removed, 1);
  // Dead by now (a poll, so that a survivor fails the test instead of hanging it).
  bool exited = false;
  for (int i = 0; i < 250 && !exited; ++i) {
    siginfo_t info = {};
    exited = ::waitid(P_PID, orphan.pid(), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
             info.si_pid == orphan.pid();
    if (!exited) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(exited) << "the leftover process still runs";
  const int status = orphan.Wait();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  for (const std::string& dir : dirs) EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  EXPECT_EQ(::kill(::getpid(), 0), 0);  // still here: the root cgroup was not swept
}

// A backend with a restart grace lets go of its sandboxes (Release) and a new one takes them over
// (Adopt): the command started before goes on; Reattach delivers what the first backend read
// (from the spool) and then the rest, and the exit status; files and new commands work.
TEST_F(KernelBackendTest, ReleasedSandboxesAreAdoptedWithTheirCommands) {
  backend_ = MakeBackend(absl::Seconds(20));
  ASSERT_NE(backend_, nullptr);
  ASSERT_TRUE(backend_->Create(Spec("sb-adopt")).ok());
  ASSERT_TRUE(backend_->WriteFile("sb-adopt", "/workspace/f", "kept", 0644).ok());
  Seen first;
  ExecRequest request;
  request.command = "for i in 1 2 3 4 5 6; do echo $i; sleep 0.2; done; echo oops >&2; exit 5";
  request.tag = "my-tag";
  absl::StatusOr<std::string> cid = backend_->Exec("sb-adopt", request, first.Callbacks());
  ASSERT_TRUE(cid.ok()) << cid.status();
  for (int i = 0; i < 100; ++i) {
    {
      absl::MutexLock l(&first.mu);
      if (first.out.size() >= 4) break;  // "1\n2\n"
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  const pid_t init = backend_->InitPid("sb-adopt");
  backend_->Release();
  backend_.reset();
  EXPECT_FALSE(first.done.HasBeenNotified()) << "the released command was ended";
  ASSERT_EQ(::kill(init, 0), 0) << "the sandbox ended with its backend";

  backend_ = MakeBackend(absl::Seconds(20));
  ASSERT_NE(backend_, nullptr);
  absl::StatusOr<std::vector<AdoptedSandboxInfo>> adopted = backend_->Adopt();
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  ASSERT_EQ(adopted->size(), 1u);
  EXPECT_EQ((*adopted)[0].id, "sb-adopt");
  ASSERT_EQ((*adopted)[0].commands.size(), 1u);
  EXPECT_EQ((*adopted)[0].commands[0].command_id, *cid);
  EXPECT_EQ((*adopted)[0].commands[0].tag, "my-tag");
  EXPECT_EQ(backend_->InitPid("sb-adopt"), init);
  // Its cgroup is this process's now (the stale-cgroup cleanup keeps it).
  absl::StatusOr<CleanupReport> left = backend_->CleanLeftovers();
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(left->processes_killed, 0);

  Seen second;
  ASSERT_TRUE(backend_->Reattach("sb-adopt", *cid, second.Callbacks()).ok());
  ASSERT_TRUE(second.Wait());
  {
    absl::MutexLock l(&second.mu);
    EXPECT_EQ(second.out, "1\n2\n3\n4\n5\n6\n");
    EXPECT_EQ(second.err, "oops\n");
    EXPECT_EQ(second.exit.exit_code, 5);
  }
  EXPECT_EQ(backend_->Reattach("sb-adopt", *cid, Seen().Callbacks()).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(*backend_->ReadFile("sb-adopt", "/workspace/f", 0, 100), "kept");
  Seen next;
  Exec("sb-adopt", "echo again", next);
  ASSERT_TRUE(next.Wait());
  EXPECT_EQ(next.out, "again\n");
  absl::StatusOr<CleanupReport> report = backend_->Destroy("sb-adopt");
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->clean()) << report->ToString();
  EXPECT_NE(::kill(init, 0), 0);
  EXPECT_FALSE(std::filesystem::exists(state_dir_ + "/spool/sb-adopt"));
}

// Without a grace, Release ends the sandboxes (destroyed, records removed); nothing is adopted.
TEST_F(KernelBackendTest, WithoutAGraceNothingOutlivesTheBackend) {
  ASSERT_TRUE(backend_->Create(Spec("sb-noadopt")).ok());
  const pid_t init = backend_->InitPid("sb-noadopt");
  backend_->Release();
  backend_.reset();
  for (int i = 0; i < 250 && ::kill(init, 0) == 0; ++i) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_NE(::kill(init, 0), 0);
  backend_ = MakeBackend(absl::Seconds(20));
  ASSERT_NE(backend_, nullptr);
  absl::StatusOr<std::vector<AdoptedSandboxInfo>> adopted = backend_->Adopt();
  ASSERT_TRUE(adopted.ok());
  EXPECT_TRUE(adopted->empty());
  ASSERT_TRUE(backend_->CleanLeftovers().ok());
  EXPECT_TRUE(std::filesystem::is_empty(state_dir_ + "/sandboxes"));
}

}  // namespace
}  // namespace moat::agent
