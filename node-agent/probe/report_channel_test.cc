#include "node-agent/probe/report_channel.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace moat::agent::probe {
namespace {

struct Pipe {
  UniqueFd read;
  UniqueFd write;
};

Pipe MakePipe(int size = 0) {
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  // The smallest pipe the kernel allows (one page), so a few lines fill it.
  if (size > 0) {
    EXPECT_GT(::fcntl(fds[1], F_SETPIPE_SZ, size), 0);
  }
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// Everything the pipe holds now, as parsed lines.
std::vector<nlohmann::json> ReadAll(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  std::string text;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, n);
  std::vector<nlohmann::json> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    lines.push_back(nlohmann::json::parse(line));
  }
  return lines;
}

nlohmann::json Event(int i) { return {{"type", "violation"}, {"kind", "mount"}, {"n", i}}; }

TEST(ReportChannelTest, WritesLinesWithSequenceNumbers) {
  Pipe pipe = MakePipe();
  auto channel = ReportChannel::Create(std::move(pipe.write));
  ASSERT_TRUE(channel.ok()) << channel.status();
  channel->Send(Event(1));
  channel->SendHeartbeat({{"type", "heartbeat"}, {"processes", 2}});
  EXPECT_FALSE(channel->has_pending());
  auto lines = ReadAll(pipe.read.get());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["n"], 1);
  EXPECT_EQ(lines[0]["seq"], 1);
  EXPECT_EQ(lines[1]["type"], "heartbeat");
  EXPECT_EQ(lines[1]["seq"], 2);
}

// A reader that does not read: the channel never blocks, keeps the first and last lines and
// says how many it dropped in between; the newest heartbeat survives the flood.
TEST(ReportChannelTest, FloodKeepsFirstAndLastLinesAndCountsTheRest) {
  Pipe pipe = MakePipe(4096);
  auto channel = ReportChannel::Create(std::move(pipe.write), {.keep_first = 5, .keep_last = 5});
  ASSERT_TRUE(channel.ok()) << channel.status();
  constexpr int kLines = 20000;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kLines; ++i) {
    channel->Send(Event(i));
    if (i % 1000 == 0) channel->SendHeartbeat({{"type", "heartbeat"}, {"at", i}});
  }
  // 20000 sends into a full pipe: blocking even once would hang here.
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_TRUE(channel->has_pending());

  // The reader wakes up and drains.
  std::vector<nlohmann::json> lines;
  for (int round = 0; round < 100 && (channel->has_pending() || round == 0); ++round) {
    for (auto& line : ReadAll(pipe.read.get())) lines.push_back(std::move(line));
    channel->Flush();
  }
  for (auto& line : ReadAll(pipe.read.get())) lines.push_back(std::move(line));
  EXPECT_FALSE(channel->has_pending());

  std::vector<int> events;
  uint64_t dropped = 0;
  int last_heartbeat = -1;
  for (const auto& line : lines) {
    if (line["type"] == "violation") events.push_back(line["n"]);
    if (line["type"] == "dropped") dropped += line["lines"].get<uint64_t>();
    if (line["type"] == "heartbeat") last_heartbeat = line["at"];
  }
  // What the pipe took at once, then the 5 kept first (when the pipe was full), then the
  // last 5, with nothing reordered.
  ASSERT_GE(events.size(), 10u);
  EXPECT_TRUE(std::is_sorted(events.begin(), events.end()));
  EXPECT_EQ(events.front(), 0);
  EXPECT_THAT(std::vector<int>(events.end() - 5, events.end()),
              ::testing::ElementsAre(kLines - 5, kLines - 4, kLines - 3, kLines - 2, kLines - 1));
  EXPECT_EQ(events.size() + dropped, static_cast<size_t>(kLines));
  EXPECT_EQ(dropped, channel->dropped_total());
  EXPECT_GT(dropped, 0u);
  EXPECT_EQ(last_heartbeat, 19000);
}

TEST(ReportChannelTest, HeartbeatGoesBeforeQueuedEvents) {
  Pipe pipe = MakePipe(4096);
  auto channel = ReportChannel::Create(std::move(pipe.write), {.keep_first = 3, .keep_last = 3});
  ASSERT_TRUE(channel.ok());
  for (int i = 0; i < 200; ++i) channel->Send(Event(i));  // fills the pipe and the queue
  ASSERT_TRUE(channel->has_pending());
  channel->SendHeartbeat({{"type", "heartbeat"}, {"at", 1}});
  channel->SendHeartbeat({{"type", "heartbeat"}, {"at", 2}});  // replaces the unsent one

  // The reader drains the pipe: what the channel writes next starts with the newest heartbeat
  // (after the rest of a partly written line, if any).
  ReadAll(pipe.read.get());
  channel->Flush();
  auto next = ReadAll(pipe.read.get());
  ASSERT_FALSE(next.empty());
  const bool partial_first = next[0]["type"] != "heartbeat";
  const auto& heartbeat = partial_first ? next.at(1) : next[0];
  EXPECT_EQ(heartbeat["type"], "heartbeat");
  EXPECT_EQ(heartbeat["at"], 2);
  int heartbeats = 0;
  for (const auto& line : next) heartbeats += line["type"] == "heartbeat";
  EXPECT_EQ(heartbeats, 1);
}

TEST(ReportChannelTest, LongDetailIsCutToFitOneLine) {
  Pipe pipe = MakePipe();
  auto channel = ReportChannel::Create(std::move(pipe.write), {.max_line_bytes = 512});
  ASSERT_TRUE(channel.ok());
  channel->Send({{"type", "violation"}, {"kind", "mount"}, {"detail", std::string(5000, '"')}});
  auto lines = ReadAll(pipe.read.get());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["truncated"], true);
  EXPECT_LE(lines[0].dump().size() + 1, 512u);
  EXPECT_FALSE(lines[0]["detail"].get<std::string>().empty());
}

TEST(ReportChannelTest, ReaderGoneDiscardsWithoutBlockingOrSignals) {
  ::signal(SIGPIPE, SIG_IGN);
  Pipe pipe = MakePipe();
  auto channel = ReportChannel::Create(std::move(pipe.write));
  ASSERT_TRUE(channel.ok());
  pipe.read.reset();
  channel->Send(Event(1));
  EXPECT_TRUE(channel->reader_gone());
  EXPECT_FALSE(channel->has_pending());
  channel->SendHeartbeat({{"type", "heartbeat"}});
  EXPECT_FALSE(channel->has_pending());
}

}  // namespace
}  // namespace moat::agent::probe
