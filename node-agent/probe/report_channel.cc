#include "node-agent/probe/report_channel.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "util/errno_status.h"

namespace moat::agent::probe {

absl::StatusOr<ReportChannel> ReportChannel::Create(UniqueFd fd, ReportChannelOptions options) {
  const int flags = fcntl(fd.get(), F_GETFL);
  if (flags < 0 || fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus("make the report channel non-blocking (is --report-fd an open pipe?)",
                       errno);
  }
  if (options.keep_first == 0 || options.keep_last == 0 || options.max_line_bytes < 256) {
    return absl::InvalidArgumentError(
        "report channel: keep_first and keep_last must be > 0 and max_line_bytes >= 256");
  }
  return ReportChannel(std::move(fd), options);
}

std::string ReportChannel::Serialize(nlohmann::json& line) {
  line["seq"] = ++seq_;
  // Text from the sandbox (paths in mountinfo) need not be UTF-8: replace, never throw.
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  while (text.size() + 1 > options_.max_line_bytes) {
    auto detail = line.find("detail");
    if (detail == line.end() || !detail->is_string() || detail->get<std::string>().empty()) {
      nlohmann::json cut = {{"type", "error"},
                            {"detail", "a probe line was too long and was dropped"},
                            {"seq", seq_}};
      text = cut.dump();
      break;
    }
    std::string value = detail->get<std::string>();
    // Escaping can double a byte (or make six of it): shrink by the escaped length's share.
    const size_t escaped =
        nlohmann::json(value).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).size();
    const size_t overhead = text.size() - escaped;
    const size_t room =
        options_.max_line_bytes > overhead + 1 ? options_.max_line_bytes - overhead - 1 : 0;
    value.resize(std::min(value.size() - 1, value.size() * room / escaped));
    *detail = value;
    line["truncated"] = true;
    text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  text.push_back('\n');
  return text;
}

void ReportChannel::Send(nlohmann::json line) {
  if (reader_gone_) return;
  std::string text = Serialize(line);
  if (!overflowing_ && first_.size() < options_.keep_first) {
    first_.push_back(std::move(text));
  } else {
    overflowing_ = true;
    last_.push_back(std::move(text));
    if (last_.size() > options_.keep_last) {
      last_.pop_front();
      ++dropped_;
      ++dropped_total_;
    }
  }
  Flush();
}

void ReportChannel::SendHeartbeat(nlohmann::json line) {
  if (reader_gone_) return;
  heartbeat_ = Serialize(line);
  Flush();
}

bool ReportChannel::WriteOut(const std::string& data, size_t offset) {
  while (offset < data.size()) {
    const ssize_t n = write(fd_.get(), data.data() + offset, data.size() - offset);
    if (n > 0) {
      offset += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      partial_ = data.substr(offset);
      return false;
    }
    // EPIPE (the agent closed its end or died) or a broken fd: nobody will read what we hold.
    reader_gone_ = true;
    partial_.clear();
    heartbeat_.clear();
    first_.clear();
    last_.clear();
    dropped_ = 0;
    return false;
  }
  return true;
}

void ReportChannel::Flush() {
  while (!reader_gone_) {
    if (!partial_.empty()) {
      std::string rest = std::move(partial_);
      partial_.clear();
      if (!WriteOut(rest)) return;
    } else if (!heartbeat_.empty()) {
      std::string line = std::move(heartbeat_);
      heartbeat_.clear();
      if (!WriteOut(line)) return;
    } else if (!first_.empty()) {
      std::string line = std::move(first_.front());
      first_.pop_front();
      if (!WriteOut(line)) return;
    } else if (dropped_ > 0) {
      nlohmann::json note = {{"type", "dropped"}, {"lines", dropped_}};
      dropped_ = 0;
      if (!WriteOut(Serialize(note))) return;
    } else if (!last_.empty()) {
      // The first lines are out: the ring's lines become the head of the queue again.
      while (!last_.empty()) {
        first_.push_back(std::move(last_.front()));
        last_.pop_front();
      }
      overflowing_ = false;
    } else {
      overflowing_ = false;
      return;
    }
  }
}

}  // namespace moat::agent::probe
