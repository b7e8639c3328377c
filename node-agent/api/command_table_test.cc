#include "node-agent/api/command_table.h"

#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sandbox/output/sanitizer.h"

namespace moat::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// An AWS access key id of the documented example shape (AKIA + 16), not a real key.
constexpr char kFakeAwsKey[] = "AKIAIOSFODNN7EXAMPLE";

std::string AllText(const Command& command) {
  uint64_t next = 0;
  return command.LogText(0, &next);
}

TEST(StreamCleanerTest, SameResultWhateverTheChunking) {
  std::string raw = absl::StrCat("\x1b[31mred\x1b[0m line\r\nkey=", kFakeAwsKey,
                                 " here\n\x1b]0;title\x07tail \xe2\x82\xac");
  StreamCleaner whole(1 << 16);
  std::string expected = whole.Feed(raw);
  expected += whole.Finish();
  EXPECT_EQ(expected, "red line\nkey=[REDACTED:aws_access_key] here\ntail \xe2\x82\xac");
  for (size_t step : {1, 2, 3, 5, 7}) {
    SCOPED_TRACE(step);
    StreamCleaner cleaner(1 << 16);
    std::string got;
    for (size_t i = 0; i < raw.size(); i += step) got += cleaner.Feed(raw.substr(i, step));
    got += cleaner.Finish();
    EXPECT_EQ(got, expected);
  }
  // And the same as what `moat run --json` stores for the whole stream.
  EXPECT_EQ(expected, sandbox::SanitizeOutput(raw, false).text);
}

TEST(StreamCleanerTest, HoldsPartialLinesButBoundsThem) {
  StreamCleaner cleaner(16);
  EXPECT_EQ(cleaner.Feed("abc"), "");  // A partial line waits for its end.
  EXPECT_EQ(cleaner.Feed("def\ngh"), "abcdef\n");
  std::string long_line = cleaner.Feed(std::string(40, 'x'));
  EXPECT_EQ(long_line, "gh" + std::string(14, 'x') + "\n" + std::string(16, 'x') + "\n");
  EXPECT_EQ(cleaner.Finish(), std::string(10, 'x'));
}

TEST(StreamCleanerTest, OverlongLinesAreNotCutInsideASecret) {
  for (std::string before :
       {"aaaaaaaaaaaaaaaaaaa ", "aaaaaaaaaaaaaaaaaaa,", "a b c d e f g h i "}) {
    SCOPED_TRACE(before);
    StreamCleaner cleaner(24);  // The key would straddle byte 24.
    std::string out = cleaner.Feed(absl::StrCat(before, kFakeAwsKey, " and more text"));
    out += cleaner.Finish();
    EXPECT_THAT(out, HasSubstr("[REDACTED:aws_access_key]"));
    EXPECT_THAT(out, Not(HasSubstr("AKI")));
    EXPECT_THAT(out, Not(HasSubstr("EXAMPLE")));
  }
  // A token longer than the limit is cut inside, and a secret-looking cut start is masked.
  StreamCleaner cleaner(24);
  std::string out = cleaner.Feed(absl::StrCat("sk-proj", std::string(40, '7'), "abc\n"));
  EXPECT_THAT(out, Not(HasSubstr("sk-proj")));
}

TEST(StreamCleanerTest, BinaryChunkBecomesThePlaceholder) {
  StreamCleaner cleaner(1 << 16);
  std::string binary(200, '\0');
  for (size_t i = 0; i < binary.size(); ++i) binary[i] = static_cast<char>(i * 37 % 256);
  std::string out = cleaner.Feed("text\n");
  out += cleaner.Feed(binary);
  out += cleaner.Finish();
  EXPECT_EQ(out, "text\n" + sandbox::BinaryPlaceholder(200, false) + "\n");
}

TEST(CommandTest, KeepsNewestLinesWithinTheCapAndSaysWhatWasDropped) {
  CommandTableOptions options;
  options.max_log_bytes = 20;
  Command command("cmd-1", "sb-a", "x", true, absl::UnixEpoch(), options);
  for (int i = 0; i < 10; ++i)
    command.AppendOutput(OutputStream::kStdout, "line" + std::to_string(i) + "\n");
  command.Finish(ExecExit{.exit_code = 0}, absl::UnixEpoch());
  // 10 lines of 6 bytes; 3 fit in 20 bytes.
  EXPECT_EQ(AllText(command), "[moat: 42 bytes dropped]\nline7\nline8\nline9\n");
  uint64_t next = 0;
  EXPECT_EQ(command.LogText(8, &next), "line8\nline9\n");
  EXPECT_EQ(next, 10u);
  EXPECT_EQ(command.LogText(10, &next), "");
  EXPECT_EQ(next, 10u);
  OutputBatch batch = command.Read(0, 6, absl::ZeroDuration());  // Has read line0 only.
  EXPECT_EQ(batch.dropped_bytes, 36u);
  ASSERT_EQ(batch.lines.size(), 3u);
  EXPECT_EQ(batch.lines[0].text, "line7\n");
  EXPECT_TRUE(batch.finished);
}

// Backpressure: a live reader loses no line. The command is held (AcceptsMore says no) once the
// reader is more than max_log_bytes behind, and resumed when it is back within half of it.
TEST(CommandTest, AnAttachedReaderHoldsTheCommandInsteadOfLosingLines) {
  CommandTableOptions options;
  options.max_log_bytes = 60;  // 10 lines of 6 bytes
  Command command("cmd-1", "sb-a", "x", false, absl::UnixEpoch(), options);
  command.AttachReader();
  int resumes = 0;
  command.SetResume([&] { ++resumes; });
  EXPECT_EQ(resumes, 1);  // Not held: a resume that may have been missed, harmless.
  std::string expected;
  int held_at = -1;
  for (int i = 0; i < 20; ++i) {
    const std::string line = absl::StrCat("line", i % 10, "\n");
    expected += line;
    command.AppendOutput(OutputStream::kStdout, line);
    if (!command.AcceptsMore() && held_at < 0) held_at = i;
  }
  EXPECT_EQ(held_at, 10);  // 66 unread bytes > 60
  // Nothing is dropped for the reader, up to twice the bound (what a held command's end drains
  // from its pipes); past that the oldest go even so: memory stays bounded.
  OutputBatch batch = command.Read(0, 0, absl::ZeroDuration());
  EXPECT_EQ(batch.dropped_bytes, 0u);
  std::string got;
  for (const OutputLine& line : batch.lines) got += line.text;
  EXPECT_EQ(got, expected);
  command.AppendOutput(OutputStream::kStdout, "line0\n");
  batch = command.Read(0, 0, absl::ZeroDuration());
  EXPECT_EQ(batch.dropped_bytes, 6u);
  EXPECT_EQ(batch.lines.size(), 20u);
  EXPECT_EQ(resumes, 1);
  command.ReaderAt(batch.next_line - 6);  // 36 bytes behind: more than half of 60
  EXPECT_EQ(resumes, 1);
  command.ReaderAt(batch.next_line);
  EXPECT_EQ(resumes, 2);
  EXPECT_TRUE(command.AcceptsMore());
  command.ReaderAt(batch.next_line);  // Not held: no second resume.
  EXPECT_EQ(resumes, 2);
}

// A reader that goes (a client that disconnected) must not leave the command held, and the
// command's output is bounded again as for one nobody reads.
TEST(CommandTest, ADetachedReaderResumesTheCommandAndTheBoundComesBack) {
  CommandTableOptions options;
  options.max_log_bytes = 60;
  Command command("cmd-1", "sb-a", "x", false, absl::UnixEpoch(), options);
  command.AttachReader();
  int resumes = 0;
  for (int i = 0; i < 15; ++i) command.AppendOutput(OutputStream::kStdout, "line0\n");
  EXPECT_FALSE(command.AcceptsMore());
  command.SetResume([&] { ++resumes; });  // The backend id came while held: no resume yet.
  EXPECT_EQ(resumes, 0);
  command.DetachReader();
  EXPECT_EQ(resumes, 1);
  EXPECT_TRUE(command.AcceptsMore());
  std::string ten;
  for (int i = 0; i < 10; ++i) ten += "line0\n";
  EXPECT_EQ(AllText(command), "[moat: 30 bytes dropped]\n" + ten);
  command.DetachReader();  // Twice (say, the stream's end, then its destruction): one resume.
  EXPECT_EQ(resumes, 1);
}

// Nobody reads (a background command, or a run whose client is gone): never held, bounded,
// the oldest lines dropped.
TEST(CommandTest, WithoutAReaderTheCommandIsNeverHeldAndTheOldestLinesGo) {
  CommandTableOptions options;
  options.max_log_bytes = 60;
  Command command("cmd-1", "sb-a", "x", true, absl::UnixEpoch(), options);
  for (int i = 0; i < 1000; ++i) {
    command.AppendOutput(OutputStream::kStdout, absl::StrCat("l", i % 10, "abc\n"));
    ASSERT_TRUE(command.AcceptsMore()) << i;
  }
  OutputBatch batch = command.Read(0, 0, absl::ZeroDuration());
  EXPECT_EQ(batch.lines.size(), 10u);
  EXPECT_EQ(batch.dropped_bytes, 990u * 6);
  // A run that keeps its first output (POST /v1/run) is bounded by its cut, never held either.
  Command run("cmd-2", "sb-a", "x", false, absl::UnixEpoch(), options, KeptOutput::kFirst);
  run.AttachReader();
  for (int i = 0; i < 100; ++i) {
    run.AppendOutput(OutputStream::kStdout, "l0abc\n");
    ASSERT_TRUE(run.AcceptsMore()) << i;
  }
}

// A run's output (KeptOutput::kFirst) is what `moat run --json` keeps of each stream: its first
// max_log_bytes raw bytes, cleaned, the stream marked truncated; nothing is dropped once kept.
TEST(CommandTest, KeepsEachStreamsFirstBytesAsMoatRunDoes) {
  CommandTableOptions options;
  options.max_log_bytes = 20;
  Command command("cmd-1", "sb-a", "x", false, absl::UnixEpoch(), options, KeptOutput::kFirst);
  std::string out_raw, err_raw = "e1\n";
  for (int i = 0; i < 10; ++i) out_raw += "line" + std::to_string(i) + "\n";
  // In pieces that straddle the cap, stderr between them.
  command.AppendOutput(OutputStream::kStdout, out_raw.substr(0, 15));
  command.AppendOutput(OutputStream::kStderr, err_raw);
  command.AppendOutput(OutputStream::kStdout, out_raw.substr(15));
  command.Finish(ExecExit{.exit_code = 0}, absl::UnixEpoch());
  CommandStatus status = command.Status();
  EXPECT_TRUE(status.stdout_truncated);
  EXPECT_FALSE(status.stderr_truncated);
  std::string out, err;
  OutputBatch batch = command.Read(0, 0, absl::ZeroDuration());
  EXPECT_EQ(batch.dropped_bytes, 0u);
  for (const OutputLine& line : batch.lines) {
    (line.stream == OutputStream::kStdout ? out : err) += line.text;
  }
  sandbox::SanitizeOptions cap{.max_bytes = 20};
  EXPECT_EQ(out, sandbox::SanitizeOutput(out_raw.substr(0, 20), true, cap).text);
  EXPECT_EQ(out, "line0\nline1\nline2\nli");
  EXPECT_EQ(err, "e1\n");
  // Exactly the cap is not cut, as moat run's collector counts it.
  Command exact("cmd-2", "sb-a", "x", false, absl::UnixEpoch(), options, KeptOutput::kFirst);
  exact.AppendOutput(OutputStream::kStdout, std::string(19, 'a') + "\n");
  exact.Finish(ExecExit{.exit_code = 0}, absl::UnixEpoch());
  EXPECT_FALSE(exact.Status().stdout_truncated);
  EXPECT_EQ(AllText(exact), std::string(19, 'a') + "\n");
}

TEST(CommandTableTest, ViolationsGoToTheSandboxsRunningCommandsCappedAsMoatRunCapsThem) {
  FakeClock clock;
  CommandTable table(CommandTableOptions{}, &clock);
  std::shared_ptr<Command> a = *table.Add("sb-a", "a", false);
  std::shared_ptr<Command> done = *table.Add("sb-a", "done", false);
  done->Finish(ExecExit{.exit_code = 0}, clock.Now());
  std::shared_ptr<Command> other = *table.Add("sb-b", "b", false);
  table.AddViolation("sb-a", "seccomp", "blocked system call mount");
  for (size_t i = 0; i < kMaxViolations + 2; ++i) {
    table.AddViolation("sb-a", "network", absl::StrCat("GET h", i, " denied"));
  }
  for (size_t i = 0; i < kMaxViolations + 3; ++i) {
    table.AddViolation("sb-a", "seccomp", "blocked system call unshare");
  }
  a->Finish(ExecExit{.exit_code = 0}, clock.Now());
  table.AddViolation("sb-a", "seccomp", "after the end");
  CommandStatus status = a->Status();
  ASSERT_EQ(status.violations.size(), 2 * kMaxViolations + 1);
  EXPECT_EQ(status.violations[0].kind, "seccomp");
  EXPECT_EQ(status.violations[0].detail, "blocked system call mount");
  EXPECT_EQ(status.violations[1].detail, "GET h0 denied");
  EXPECT_EQ(status.violations.back().kind, "network");
  EXPECT_EQ(status.violations.back().detail, "2 more network denials");
  EXPECT_EQ(status.violations_dropped, 4u);
  EXPECT_TRUE(done->Status().violations.empty());
  EXPECT_TRUE(other->Status().violations.empty());
}

TEST(CommandTest, StatusReflectsTheExit) {
  CommandTableOptions options;
  Command ok("cmd-1", "sb-a", "true", false, absl::UnixEpoch(), options);
  EXPECT_TRUE(ok.Status().running);
  ok.Finish(ExecExit{.exit_code = 3, .duration = absl::Milliseconds(5)},
            absl::UnixEpoch() + absl::Seconds(1));
  CommandStatus status = ok.Status();
  EXPECT_FALSE(status.running);
  EXPECT_EQ(status.exit_code, 3);
  EXPECT_EQ(status.error, "");
  EXPECT_EQ(status.finished, absl::UnixEpoch() + absl::Seconds(1));

  Command killed("cmd-2", "sb-a", "sleep 9", false, absl::UnixEpoch(), options);
  killed.Finish(ExecExit{.signal = 9, .timed_out = true}, absl::UnixEpoch());
  EXPECT_EQ(killed.Status().exit_code, 137);
  EXPECT_THAT(killed.Status().error, HasSubstr("timed out"));

  Command failed("cmd-3", "sb-a", "x", false, absl::UnixEpoch(), options);
  failed.FailToStart("no such sandbox", absl::UnixEpoch());
  EXPECT_FALSE(failed.Status().exit_code.has_value());
  EXPECT_EQ(failed.Status().error, "no such sandbox");
}

TEST(CommandTest, ReadWaitsForOutputOrExit) {
  CommandTableOptions options;
  Command command("cmd-1", "sb-a", "x", false, absl::UnixEpoch(), options);
  std::thread writer([&] {
    command.AppendOutput(OutputStream::kStderr, "oops\n");
    command.Finish(ExecExit{.exit_code = 1}, absl::UnixEpoch());
  });
  OutputBatch first = command.Read(0, 0, absl::Seconds(10));
  ASSERT_FALSE(first.lines.empty());
  EXPECT_EQ(first.lines[0].stream, OutputStream::kStderr);
  EXPECT_EQ(first.lines[0].text, "oops\n");
  OutputBatch rest = command.Read(first.next_line, 5, absl::Seconds(10));
  writer.join();
  rest = command.Read(first.next_line, 5, absl::Seconds(10));
  EXPECT_TRUE(rest.finished);
  EXPECT_TRUE(rest.lines.empty());
}

TEST(CommandTableTest, KeepsAtMostKFinishedPerSandboxAndForgetsDeletedSandboxes) {
  FakeClock clock;
  CommandTableOptions options;
  options.max_finished_per_sandbox = 3;
  CommandTable table(options, &clock);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    auto command = table.Add("sb-a", "true", false);
    ASSERT_TRUE(command.ok());
    ids.push_back((*command)->id());
    (*command)->Finish(ExecExit{.exit_code = 0}, clock.Now());
  }
  auto running = table.Add("sb-a", "sleep", true);
  ASSERT_TRUE(running.ok());
  EXPECT_EQ(table.RunningIn("sb-a"), 1);
  // The newest finished ones and the running one remain.
  EXPECT_FALSE(table.Find("sb-a", ids[0]).ok());
  EXPECT_FALSE(table.Find("sb-a", ids[1]).ok());
  EXPECT_FALSE(table.Find("sb-a", ids[2]).ok());
  EXPECT_TRUE(table.Find("sb-a", ids[3]).ok());
  EXPECT_TRUE(table.Find("sb-a", ids[4]).ok());
  EXPECT_EQ(table.size(), 3u);
  // Another sandbox never sees them.
  EXPECT_EQ(table.Find("sb-b", ids[4]).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(table.Add("sb-b", "true", false).ok());
  table.ForgetSandbox("sb-a");
  EXPECT_FALSE(table.Find("sb-a", ids[4]).ok());
  EXPECT_EQ(table.size(), 1u);
  // The running command's holder still has it.
  EXPECT_TRUE((*running)->running());
}

TEST(CommandTableTest, LimitsRunningCommandsPerSandbox) {
  FakeClock clock;
  CommandTableOptions options;
  options.max_running_per_sandbox = 2;
  CommandTable table(options, &clock);
  ASSERT_TRUE(table.Add("sb-a", "a", false).ok());
  ASSERT_TRUE(table.Add("sb-a", "b", false).ok());
  EXPECT_EQ(table.Add("sb-a", "c", false).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(table.Add("sb-b", "c", false).ok());
}

TEST(CommandStatusTest, StatusNamesWhatEndedIt) {
  CommandStatus status;
  EXPECT_EQ(StatusName(status), "running");
  status.running = false;
  EXPECT_EQ(StatusName(status), "failed_to_start");
  status.exit_code = 137;
  EXPECT_EQ(StatusName(status), "exited");
  status.exit.signal = 9;
  EXPECT_EQ(StatusName(status), "signaled");
  status.exit.interrupted = true;
  EXPECT_EQ(StatusName(status), "interrupted");
  status.exit.timed_out = true;
  EXPECT_EQ(StatusName(status), "timed_out");
  status.exit.oom_killed = true;
  EXPECT_EQ(StatusName(status), "oom_killed");
}

}  // namespace
}  // namespace moat::agent
