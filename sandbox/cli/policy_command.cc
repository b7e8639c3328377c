#include "sandbox/cli/policy_command.h"

#include <cstdio>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "sandbox/cli/run_command.h"
#include "sandbox/cli/run_flags.h"
#include "sandbox/policy/policy.h"
#include "sandbox/values/texts.h"
#include "util/units.h"

namespace moat::cli {
namespace {

constexpr char kPolicyUsage[] = R"(usage: moat policy show [--json] [OPTIONS]

Prints the policy `moat run OPTIONS -- ...` would use, merged from its layers (built-in default <
~/.config/moat/policy.yaml < --user-policy files < the project's .moat/policy.yaml and
.pi/sandbox.json < --policy < flags), and which layer each value came from. OPTIONS are
`moat run`'s (--cwd, --user-policy, --policy, limits, --env). --json prints one object:
{"policy": {...}, "origins": {"values": {key: layer}, "elements": {key: {element: layer}}}}.
)";

nlohmann::json PolicyJson(const sandbox::Policy& p) {
  auto seconds = [](absl::Duration d) { return absl::ToDoubleSeconds(d); };
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [name, value] : p.env) env[name] = value;
  return {
      {"limits",
       {{"memory", p.limits.memory_bytes},
        {"pids", p.limits.pids},
        {"cpus", p.limits.cpus},
        {"cpuTimeout", seconds(p.limits.cpu_timeout)},
        {"wallTimeout", seconds(p.limits.wall_timeout)},
        {"tmpfsSize", p.limits.tmpfs_bytes}}},
      {"network",
       {{"allowedDomains", ValueTexts(p.allowed_domains)},
        {"deniedDomains", ValueTexts(p.denied_domains)},
        {"allowedCidrs", ValueTexts(p.allowed_cidrs)},
        {"dnsServers", ValueTexts(p.dns_servers)},
        {"transparent", p.transparent},
        {"maxRequestBodyBytes", p.egress.max_request_body_bytes},
        {"requestsPerMinute", p.egress.requests_per_minute}}},
      {"filesystem",
       {{"denyRead", p.deny_read},
        {"allowWrite", p.allow_write},
        {"denyWrite", p.deny_write},
        {"hideHome", p.hide_home}}},
      {"env", env},
      {"sources", p.sources},
  };
}

// One line per value: key, value, layer.
void PrintText(const sandbox::Policy& p, const sandbox::PolicyOrigins& o) {
  auto line = [&](const std::string& key, const std::string& value) {
    auto it = o.values.find(key);
    std::printf("%-28s %-22s %s\n", key.c_str(), value.c_str(),
                it == o.values.end() ? "" : it->second.c_str());
  };
  auto list = [&](const std::string& key, const std::vector<std::string>& values) {
    std::printf("%s%s\n", key.c_str(), values.empty() ? ": (none)" : ":");
    auto origins = o.elements.find(key);
    for (const std::string& v : values) {
      std::string from;
      if (origins != o.elements.end()) {
        auto it = origins->second.find(v);
        if (it != origins->second.end()) from = it->second;
      }
      std::printf("  %-49s %s\n", v.c_str(), from.c_str());
    }
  };
  line("limits.memory", FormatSize(p.limits.memory_bytes));
  line("limits.pids", absl::StrCat(p.limits.pids));
  line("limits.cpus", absl::StrFormat("%g", p.limits.cpus));
  line("limits.cpuTimeout", absl::FormatDuration(p.limits.cpu_timeout));
  line("limits.wallTimeout", absl::FormatDuration(p.limits.wall_timeout));
  line("limits.tmpfsSize", FormatSize(p.limits.tmpfs_bytes));
  list("network.allowedDomains", ValueTexts(p.allowed_domains));
  list("network.deniedDomains", ValueTexts(p.denied_domains));
  list("network.allowedCidrs", ValueTexts(p.allowed_cidrs));
  list("network.dnsServers", ValueTexts(p.dns_servers));
  line("network.transparent", p.transparent ? "true" : "false");
  line("network.maxRequestBodyBytes", FormatSize(p.egress.max_request_body_bytes));
  line("network.requestsPerMinute", absl::StrCat(p.egress.requests_per_minute));
  list("filesystem.denyRead", p.deny_read);
  list("filesystem.allowWrite", p.allow_write);
  list("filesystem.denyWrite", p.deny_write);
  line("filesystem.hideHome", p.hide_home ? "true" : "false");
  std::vector<std::string> env;
  for (const auto& [name, value] : p.env) env.push_back(absl::StrCat(name, "=", value));
  std::printf("env%s\n", env.empty() ? ": (none)" : ":");
  auto env_origins = o.elements.find("env");
  for (const auto& [name, value] : p.env) {
    std::string from;
    if (env_origins != o.elements.end() && env_origins->second.count(name)) {
      from = env_origins->second.at(name);
    }
    std::printf("  %-49s %s\n", absl::StrCat(name, "=", value).c_str(), from.c_str());
  }
}

}  // namespace

int PolicyCommandMain(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "show") {
    std::fputs(kPolicyUsage, args.empty() ? stderr : stdout);
    return args.size() == 1 && (args[0] == "--help" || args[0] == "-h") ? 0 : 125;
  }
  absl::StatusOr<RunFlags> flags =
      ParseRunFlags(std::vector<std::string>(args.begin() + 1, args.end()),
                    /*command_required=*/false);
  if (!flags.ok()) {
    std::fprintf(stderr, "moat policy show: %s\n", std::string(flags.status().message()).c_str());
    return 125;
  }
  if (flags->help) {
    std::fputs(kPolicyUsage, stdout);
    return 0;
  }
  absl::StatusOr<PolicyInputs> inputs = PolicyInputsFor(*flags);
  sandbox::PolicyOrigins origins;
  absl::StatusOr<sandbox::Policy> policy =
      inputs.ok() ? sandbox::ResolvePolicy(inputs->sources, &origins) : inputs.status();
  if (!policy.ok()) {
    std::fprintf(stderr, "moat policy show: %s\n", std::string(policy.status().message()).c_str());
    return 125;
  }
  if (flags->json) {
    nlohmann::json out = {
        {"policy", PolicyJson(*policy)},
        {"origins", {{"values", origins.values}, {"elements", origins.elements}}}};
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else {
    PrintText(*policy, origins);
  }
  return 0;
}

}  // namespace moat::cli
