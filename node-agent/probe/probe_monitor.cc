#include "node-agent/probe/probe_monitor.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "util/errno_status.h"

namespace moat::agent {

namespace {

// epoll data: token * 2 + which fd of the entry.
constexpr uint64_t kPipe = 0;
constexpr uint64_t kProbeProcess = 1;
// Read at most this much from one pipe per wakeup, so one chatty probe cannot starve the rest.
constexpr size_t kReadBudget = 256 << 10;

int PidfdOpen(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

absl::string_view ProbeEventTypeName(ProbeEvent::Type type) {
  switch (type) {
    case ProbeEvent::Type::kViolation:
      return "violation";
    case ProbeEvent::Type::kNearLimit:
      return "near_limit";
    case ProbeEvent::Type::kKilled:
      return "killed";
    case ProbeEvent::Type::kExited:
      return "exited";
    case ProbeEvent::Type::kDropped:
      return "dropped";
    case ProbeEvent::Type::kError:
      return "error";
  }
  return "error";
}

absl::StatusOr<std::unique_ptr<ProbeMonitor>> ProbeMonitor::Create(ProbeMonitorOptions options,
                                                                   ProbeCallbacks callbacks,
                                                                   const Clock* clock) {
  if (options.interval <= absl::ZeroDuration() || options.misses < 1) {
    return absl::InvalidArgumentError("probe monitor: interval must be > 0 and misses >= 1");
  }
  if (options.grace == absl::InfiniteDuration()) options.grace = options.interval / 2;
  if (options.tick == absl::InfiniteDuration()) {
    options.tick = std::min(options.interval / 10, absl::Milliseconds(100));
  }
  options.tick = std::max(options.tick, absl::Milliseconds(1));
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) return ErrnoStatus("probe monitor: epoll_create1", errno);
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return ErrnoStatus("probe monitor: eventfd", errno);
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;  // token 0: the wake fd
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) {
    return ErrnoStatus("probe monitor: add the wake fd to epoll", errno);
  }
  std::unique_ptr<ProbeMonitor> monitor(
      new ProbeMonitor(options, std::move(callbacks), clock, std::move(epoll), std::move(wake)));
  monitor->thread_ = std::thread([m = monitor.get()] { m->Loop(); });
  return monitor;
}

ProbeMonitor::~ProbeMonitor() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  (void)!::write(wake_.get(), &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

absl::Status ProbeMonitor::Watch(absl::string_view id, UniqueFd report_read, pid_t probe_pid) {
  const int flags = ::fcntl(report_read.get(), F_GETFL);
  if (flags < 0 || ::fcntl(report_read.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus(
        absl::StrCat("probe monitor: make sandbox ", id, "'s report pipe non-blocking"), errno);
  }
  auto w = std::make_unique<Watched>();
  w->id = std::string(id);
  w->pipe = std::move(report_read);
  w->probe_pid = probe_pid;
  // A probe that already died is seen through its pipe's end of file instead.
  if (probe_pid > 0) w->probe_pidfd.reset(PidfdOpen(probe_pid));

  absl::MutexLock lock(&mu_);
  if (watched_.contains(id)) {
    return absl::AlreadyExistsError(
        absl::StrCat("probe monitor: sandbox ", id, " is already watched"));
  }
  w->token = next_token_++;
  w->last_seen = clock_->Now();
  struct epoll_event ev = {};
  ev.events = EPOLLIN;
  ev.data.u64 = w->token * 2 + kPipe;
  if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, w->pipe.get(), &ev) != 0) {
    return ErrnoStatus(absl::StrCat("probe monitor: add sandbox ", id, "'s report pipe to epoll"),
                       errno);
  }
  if (w->probe_pidfd) {
    ev.data.u64 = w->token * 2 + kProbeProcess;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, w->probe_pidfd.get(), &ev) != 0) {
      const int err = errno;
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w->pipe.get(), nullptr);
      return ErrnoStatus(absl::StrCat("probe monitor: add sandbox ", id, "'s probe to epoll"), err);
    }
  }
  by_token_[w->token] = w.get();
  watched_.emplace(w->id, std::move(w));
  return absl::OkStatus();
}

void ProbeMonitor::UnregisterLocked(Watched& w) {
  if (w.pipe) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w.pipe.get(), nullptr);
  if (w.probe_pidfd) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w.probe_pidfd.get(), nullptr);
  by_token_.erase(w.token);
}

void ProbeMonitor::Forget(absl::string_view id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = watched_.find(id);
    if (it == watched_.end()) return;
    UnregisterLocked(*it->second);
    watched_.erase(it);
  }
  // Wait for callbacks the thread collected before the erase; from a callback there are none
  // left to wait for (and waiting would deadlock).
  if (std::this_thread::get_id() != thread_.get_id()) absl::MutexLock wait(&dispatch_mu_);
}

void ProbeMonitor::Settle(absl::string_view id, absl::Duration timeout) {
  if (std::this_thread::get_id() == thread_.get_id()) return;  // it would wait for itself
  absl::MutexLock lock(&mu_);
  auto it = watched_.find(id);
  if (it == watched_.end()) return;
  int unread = 0;
  if (it->second->pipe) ::ioctl(it->second->pipe.get(), FIONREAD, &unread);
  // A round under way may have read the line already; one that began before the line came may
  // not see it (its epoll_wait returned earlier): the one after it does.
  const uint64_t target = unread > 0 ? rounds_begun_ + 2 : rounds_begun_;
  auto settled = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return rounds_done_ >= target || stopping_;
  };
  mu_.AwaitWithTimeout(absl::Condition(&settled), timeout);
}

absl::StatusOr<ProbeHeartbeat> ProbeMonitor::LastHeartbeat(absl::string_view id) const {
  absl::MutexLock lock(&mu_);
  auto it = watched_.find(id);
  if (it == watched_.end()) {
    return absl::NotFoundError(absl::StrCat("probe monitor: sandbox ", id, " is not watched"));
  }
  return it->second->heartbeat;
}

uint64_t ProbeMonitor::bad_lines() const {
  absl::MutexLock lock(&mu_);
  return bad_lines_;
}

void ProbeMonitor::CompromiseLocked(Watched& w, std::string reason, Calls& calls) {
  if (w.compromised || w.exited) return;
  w.compromised = true;
  if (callbacks_.on_compromised) {
    calls.push_back(
        [this, id = w.id, reason = std::move(reason)] { callbacks_.on_compromised(id, reason); });
  }
}

void ProbeMonitor::HandleLineLocked(Watched& w, absl::string_view line, Calls& calls) {
  nlohmann::json j =
      nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    ++bad_lines_;
    return;
  }
  // Probe lines are ours, but a field of the wrong type must not throw on this thread.
  auto number = [&](const char* key) -> double {
    auto it = j.find(key);
    return it != j.end() && it->is_number() ? it->get<double>() : 0;
  };
  auto text = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : "";
  };
  const std::string type = j["type"].get<std::string>();
  if (type == "heartbeat") {
    w.last_seen = clock_->Now();
    w.misses_reported = 0;
    w.heartbeat.received = w.last_seen;
    w.heartbeat.processes = static_cast<int>(number("processes"));
    w.heartbeat.tasks = static_cast<uint64_t>(number("tasks"));
    w.heartbeat.memory_bytes = static_cast<uint64_t>(number("memory_bytes"));
    w.heartbeat.cpu_seconds = number("cpu_seconds");
    return;
  }
  if (type == "started") return;
  ProbeEvent event;
  if (type == "violation") {
    event.type = ProbeEvent::Type::kViolation;
  } else if (type == "near_limit") {
    event.type = ProbeEvent::Type::kNearLimit;
  } else if (type == "killed") {
    event.type = ProbeEvent::Type::kKilled;
  } else if (type == "exited") {
    event.type = ProbeEvent::Type::kExited;
    w.exited = true;
  } else if (type == "dropped") {
    event.type = ProbeEvent::Type::kDropped;
  } else if (type == "error") {
    event.type = ProbeEvent::Type::kError;
  } else {
    ++bad_lines_;
    return;
  }
  event.kind = text("kind");
  event.detail = text("detail");
  event.value = number("value");
  event.limit = number("limit");
  event.lines = static_cast<uint64_t>(number("lines"));
  if (callbacks_.on_event) {
    calls.push_back(
        [this, id = w.id, event = std::move(event)] { callbacks_.on_event(id, event); });
  }
}

bool ProbeMonitor::ReadPipeLocked(Watched& w, Calls& calls) {
  char chunk[16 << 10];
  size_t budget = kReadBudget;
  while (budget > 0) {
    const ssize_t n = ::read(w.pipe.get(), chunk, std::min(sizeof(chunk), budget));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
    if (n == 0) return false;
    budget -= n;
    absl::string_view data(chunk, n);
    while (!data.empty()) {
      const size_t newline = data.find('\n');
      const absl::string_view piece = data.substr(0, newline);
      if (w.discarding) {
        if (newline != data.npos) w.discarding = false;
      } else if (w.buffer.size() + piece.size() > options_.max_line_bytes) {
        // Never hold more than one line's bound: the rest of this line is skipped.
        ++bad_lines_;
        w.buffer.clear();
        w.discarding = newline == data.npos;
      } else if (newline == data.npos) {
        w.buffer.append(piece.data(), piece.size());
      } else if (w.buffer.empty()) {
        HandleLineLocked(w, piece, calls);
      } else {
        w.buffer.append(piece.data(), piece.size());
        HandleLineLocked(w, w.buffer, calls);
        w.buffer.clear();
      }
      data.remove_prefix(newline == data.npos ? data.size() : newline + 1);
    }
  }
  return true;
}

void ProbeMonitor::CheckHeartbeatsLocked(Calls& calls) {
  const absl::Time now = clock_->Now();
  for (auto& [id, w] : watched_) {
    if (w->exited || w->compromised) continue;
    const absl::Duration late = now - w->last_seen - options_.grace;
    if (late < options_.interval) continue;
    absl::Duration rest;  // IDivDuration writes it unconditionally
    const int64_t missed =
        std::min<int64_t>(absl::IDivDuration(late, options_.interval, &rest), options_.misses);
    for (; w->misses_reported < missed; ++w->misses_reported) {
      if (callbacks_.on_heartbeat_missed) {
        calls.push_back([this, id = w->id] { callbacks_.on_heartbeat_missed(id); });
      }
    }
    if (missed >= options_.misses) {
      CompromiseLocked(
          *w,
          absl::StrCat("no heartbeat from its probe (pid ", w->probe_pid, ") for ",
                       absl::FormatDuration(now - w->last_seen), ": ", missed,
                       " missed at an interval of ", absl::FormatDuration(options_.interval)),
          calls);
    }
  }
}

void ProbeMonitor::Loop() {
  const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(options_.tick));
  struct epoll_event events[32];
  while (true) {
    const int n = ::epoll_wait(epoll_.get(), events, 32, timeout_ms);
    absl::MutexLock dispatch(&dispatch_mu_);
    Calls calls;
    uint64_t round = 0;
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return;
      round = ++rounds_begun_;
      for (int i = 0; i < n; ++i) {
        const uint64_t token = events[i].data.u64 / 2;
        if (token == 0) continue;  // the wake fd; stopping_ says why
        auto it = by_token_.find(token);
        if (it == by_token_.end()) continue;  // forgotten since
        Watched& w = *it->second;
        // On the probe's death, too, read the pipe first: its last lines ("exited") are there.
        const bool open = w.pipe && ReadPipeLocked(w, calls);
        if (w.pipe && !open) {
          ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w.pipe.get(), nullptr);
          w.pipe.reset();
          CompromiseLocked(w,
                           absl::StrCat("its probe (pid ", w.probe_pid,
                                        ") closed the report pipe while the sandbox was alive"),
                           calls);
        }
        if (events[i].data.u64 % 2 == kProbeProcess && w.probe_pidfd) {
          ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, w.probe_pidfd.get(), nullptr);
          w.probe_pidfd.reset();
          CompromiseLocked(
              w, absl::StrCat("its probe (pid ", w.probe_pid, ") died while the sandbox was alive"),
              calls);
        }
      }
      CheckHeartbeatsLocked(calls);
    }
    for (auto& call : calls) call();
    absl::MutexLock lock(&mu_);
    rounds_done_ = round;
  }
}

}  // namespace moat::agent
