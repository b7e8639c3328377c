// moat-probe: watches one sandbox from outside its pid namespace and reports to the agent over a
// pipe (docs/probe.md). main only wires: flags, then the loop.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "nlohmann/json.hpp"
#include "node-agent/probe/probe.h"
#include "node-agent/probe/probe_config.h"

namespace {

// Best effort: tells the agent why the probe is gone before it sees the pipe close.
void ReportStartFailure(int report_fd, const std::string& message) {
  if (report_fd < 0) return;
  std::string line = nlohmann::json{{"type", "error"}, {"detail", message}}.dump(
                         -1, ' ', false, nlohmann::json::error_handler_t::replace) +
                     "\n";
  (void)!::write(report_fd, line.data(), line.size());
}

}  // namespace

int main(int argc, char** argv) {
  // A pipe has no MSG_NOSIGNAL: a departed agent must show as EPIPE, not kill the probe.
  ::signal(SIGPIPE, SIG_IGN);
  auto config = moat::agent::probe::ParseProbeFlags(argc, argv);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  auto probe = moat::agent::probe::Probe::Create(*config);
  if (!probe.ok()) {
    const std::string message(probe.status().message());
    ReportStartFailure(config->report_fd, message);
    std::fprintf(stderr, "%s\n", message.c_str());
    return 1;
  }
  return (*probe)->Run();
}
