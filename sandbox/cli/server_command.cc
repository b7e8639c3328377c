#include "sandbox/cli/server_command.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "sandbox/cli/http_client.h"
#include "sandbox/cli/run_flags.h"
#include "util/shell_command.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace moat::cli {
namespace {

using nlohmann::json;

constexpr int kCannotRun = 125;  // As moat run: nothing ran.

const char kRemoteRunUsage[] =
    R"(usage: moat run --server URL [OPTIONS] -- COMMAND [ARG...]
Runs COMMAND in a fresh sandbox on a moat-controller's fleet (POST /v1/run), with moat run's
contract: the command's output and exit status (128+N if killed by signal N, 124 on a timeout),
or with --json one result object and 0; 125 if it could not run.
  --server URL         the controller, http://HOST:PORT or https://HOST:PORT (or MOAT_SERVER)
  --api-key KEY        its API key (or MOAT_API_KEY)
  --ca-file FILE       https: the CA of its certificate (or MOAT_CA_FILE; default: the
                       system's store)
  --image URI          picks the agent profile through the controller's images table
  --memory SIZE        memory limit, e.g. 256M (at most the profile's)
  --cpus X             CPU quota in cores (at most the profile's)
  --wall-timeout DUR   wall-clock limit, at most the language profile's (default: the
                       profile's, 60s unless the controller's config says otherwise)
  --env NAME=VALUE     set a variable inside (repeatable)
  --json               print one JSON result object instead of the command's output
)";

}  // namespace

const char kSandboxUsage[] =
    R"(usage: moat sandbox create [--image URI] [--timeout SECONDS] [--memory SIZE] [--cpus X]
                           [--env NAME=VALUE]... [--json]    prints the new sandbox's id
       moat sandbox ls [--json]                             the sandboxes, newest first
       moat sandbox get ID                                  one sandbox, as JSON
       moat sandbox exec ID -- COMMAND [ARG...]             run in it; its output, its status
       moat sandbox cp FILE ID:PATH | ID:PATH FILE          copy a file in or out
       moat sandbox rm ID...                                delete
Every command takes --server URL (or MOAT_SERVER), --api-key KEY (or MOAT_API_KEY) and, for
an https:// controller with a private CA, --ca-file FILE (or MOAT_CA_FILE).
)";

const char kNodeUsage[] =
    R"(usage: moat node ls [--json]                  the fleet's nodes
       moat node cordon NAME | uncordon NAME    stop (resume) placing sandboxes on NAME
       moat node drain NAME [--grace SECONDS]   cordon, and end NAME's sandboxes (now or
                                                after the grace period): NODE_DRAINED
Every command takes --server URL (or MOAT_SERVER), --api-key KEY (or MOAT_API_KEY) and, for
an https:// controller with a private CA, --ca-file FILE (or MOAT_CA_FILE).
)";

namespace {

int Fail(absl::string_view message) {
  std::fprintf(stderr, "moat: %.*s\n", static_cast<int>(message.size()), message.data());
  return kCannotRun;
}

// The controller and the key, taken out of `args`.
struct Server {
  HttpUrl url;
  std::string api_key;
};

absl::StatusOr<Server> TakeServer(std::vector<std::string>& args) {
  std::optional<std::string> url, key, ca_file;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--") {
      rest.insert(rest.end(), args.begin() + i, args.end());
      break;
    }
    for (auto [flag, out] :
         {std::pair{"--server", &url}, {"--api-key", &key}, {"--ca-file", &ca_file}}) {
      if (args[i] == flag) {
        if (i + 1 >= args.size())
          return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
        *out = args[++i];
        goto next;
      }
      if (absl::StartsWith(args[i], absl::StrCat(flag, "="))) {
        *out = args[i].substr(std::string(flag).size() + 1);
        goto next;
      }
    }
    rest.push_back(args[i]);
  next:;
  }
  args = std::move(rest);
  if (!url.has_value()) {
    if (const char* env = std::getenv("MOAT_SERVER"); env != nullptr && *env != '\0') url = env;
  }
  if (!url.has_value()) {
    return absl::InvalidArgumentError(
        "no controller: give --server URL (http://HOST:PORT or https://HOST:PORT) or set "
        "MOAT_SERVER");
  }
  if (!key.has_value()) {
    if (const char* env = std::getenv("MOAT_API_KEY"); env != nullptr) key = env;
  }
  if (!ca_file.has_value()) {
    if (const char* env = std::getenv("MOAT_CA_FILE"); env != nullptr && *env != '\0') {
      ca_file = env;
    }
  }
  Server server;
  ASSIGN_OR_RETURN(server.url, ParseHttpUrl(*url));
  server.url.ca_file = ca_file.value_or("");
  server.api_key = key.value_or("");
  return server;
}

// One JSON call. The controller's errors are flat {code, message}: returned as the status.
absl::StatusOr<json> Call(const Server& server, const std::string& method, const std::string& path,
                          const json& body = nullptr, absl::Duration timeout = absl::Seconds(90)) {
  HttpRequest req;
  req.method = method;
  req.path = path;
  req.timeout = timeout;
  if (!server.api_key.empty()) req.headers.emplace_back("OPEN-SANDBOX-API-KEY", server.api_key);
  if (!body.is_null()) req.body = body.dump();
  ASSIGN_OR_RETURN(HttpResponse res, SendHttp(server.url, req));
  json out = res.body.empty() ? json(nullptr) : json::parse(res.body, nullptr, false);
  if (res.status >= 200 && res.status < 300) {
    // Not a moat-controller (a proxy's page, another server): say so rather than misread it.
    if (out.is_discarded() || (!out.is_null() && !out.is_object())) {
      return absl::UnavailableError(
          absl::StrCat("the answer of ", path, " is not JSON; is --server a moat-controller?"));
    }
    return out;
  }
  std::string message = out.is_object() && out.contains("message") && out["message"].is_string()
                            ? out["message"].get<std::string>()
                            : res.body.substr(0, 300);
  if (res.status == 401) {
    message += server.api_key.empty() ? " (give --api-key or set MOAT_API_KEY)" : "";
  }
  return absl::Status(
      res.status == 404 ? absl::StatusCode::kNotFound : absl::StatusCode::kFailedPrecondition,
      absl::StrCat("the controller answered ", res.status, ": ", message));
}

std::string Dump(const json& j, int indent = -1) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

// A Kubernetes quantity for the controller: bytes as a plain number, cores as millicores.
std::string MemoryQuantity(uint64_t bytes) { return absl::StrCat(bytes); }
std::string CpuQuantity(double cpus) {
  return absl::StrCat(static_cast<int64_t>(cpus * 1000 + 0.5), "m");
}

// --image, taken out of `args` (moat run has no such flag).
std::optional<std::string> TakeFlag(std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == flag && i + 1 < args.size()) {
      std::string value = args[i + 1];
      args.erase(args.begin() + i, args.begin() + i + 2);
      return value;
    }
    if (absl::StartsWith(args[i], flag + "=")) {
      std::string value = args[i].substr(flag.size() + 1);
      args.erase(args.begin() + i);
      return value;
    }
  }
  return std::nullopt;
}

// The exit status of a result object, as sandbox::ExitStatusFor.
int ExitStatusOf(const json& result) {
  const std::string status = result.value("status", "");
  if (status == "exited")
    return result["exit_code"].is_number() ? result["exit_code"].get<int>() : 0;
  if (status == "wall_timeout" || status == "cpu_timeout") return 124;
  return 128 + (result["signal"].is_number() ? result["signal"].get<int>() : 9);
}

// The sandbox's own API through the controller's proxy.
std::string ExecdPath(const std::string& id, absl::string_view rest) {
  return absl::StrCat("/sandboxes/", id, "/proxy/44772", rest);
}

int Exec(const Server& server, const std::string& id, const std::vector<std::string>& command) {
  HttpRequest req;
  req.method = "POST";
  req.path = ExecdPath(id, "/command");
  req.timeout = absl::Seconds(30);  // The agent pings every 3 s while the command is silent.
  if (!server.api_key.empty()) req.headers.emplace_back("OPEN-SANDBOX-API-KEY", server.api_key);
  req.body = Dump({{"command", ExecCommand(command)}});
  std::string pending;
  std::optional<int> exit_status;
  std::string error_body;
  int http_status = 0;
  req.on_body = [&](absl::string_view data) {
    pending.append(data.data(), data.size());
    size_t end;
    while ((end = pending.find('\n')) != std::string::npos) {
      std::string line = pending.substr(0, end);
      pending.erase(0, end + 1);
      if (!absl::StartsWith(line, "data:")) {
        if (error_body.size() < 4096) error_body += line;
        continue;
      }
      json e = json::parse(line.substr(5), nullptr, false);
      if (!e.is_object()) continue;
      const std::string type = e.value("type", "");
      const std::string text = e.value("text", "");
      if (type == "stdout" || type == "stderr") {
        std::FILE* out = type == "stdout" ? stdout : stderr;
        std::fputs(text == "\n" ? "\n" : (text + "\n").c_str(), out);
        std::fflush(out);
      } else if (type == "execution_complete") {
        exit_status = 0;
      } else if (type == "error" && e.contains("error")) {
        const std::string ename = e["error"].value("ename", "");
        int code = 1;
        if (ename == "CommandTimeout") {
          code = 124;
        } else if (!absl::SimpleAtoi(e["error"].value("evalue", ""), &code)) {
          code = kCannotRun;
        }
        exit_status = code;
      }
    }
    return true;
  };
  absl::StatusOr<HttpResponse> res = SendHttp(server.url, req);
  if (!res.ok()) return Fail(res.status().message());
  http_status = res->status;
  if (http_status != 200) {
    json body = json::parse(error_body + pending, nullptr, false);
    return Fail(absl::StrCat("the controller answered ", http_status, ": ",
                             body.is_object() ? body.value("message", "") : error_body + pending));
  }
  if (!exit_status.has_value()) return Fail("the command's stream ended without its exit status");
  return *exit_status;
}

int Copy(const Server& server, const std::string& from, const std::string& to) {
  auto remote = [](const std::string& s) -> std::optional<std::pair<std::string, std::string>> {
    size_t colon = s.find(':');
    if (colon == std::string::npos || colon == 0 || s[0] == '/' || s[0] == '.') return std::nullopt;
    return std::pair{s.substr(0, colon), s.substr(colon + 1)};
  };
  auto src = remote(from), dst = remote(to);
  if (src.has_value() == dst.has_value()) {
    return Fail("moat sandbox cp: one side must be ID:PATH and the other a local file");
  }
  HttpRequest req;
  req.timeout = absl::Seconds(60);
  if (!server.api_key.empty()) req.headers.emplace_back("OPEN-SANDBOX-API-KEY", server.api_key);
  if (src.has_value()) {
    std::string path;
    for (unsigned char c : src->second) {
      absl::StrAppend(&path, std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_'
                                 ? std::string(1, static_cast<char>(c))
                                 : absl::StrFormat("%%%02X", c));
    }
    req.path = ExecdPath(src->first, absl::StrCat("/files/download?path=", path));
    std::ofstream out(to, std::ios::binary | std::ios::trunc);
    if (!out) return Fail(absl::StrCat("cannot write \"", to, "\""));
    int status = 0;
    std::string error;
    absl::StatusOr<HttpResponse> res = SendHttp(server.url, req);
    if (!res.ok()) return Fail(res.status().message());
    status = res->status;
    if (status != 200) {
      json body = json::parse(res->body, nullptr, false);
      std::remove(to.c_str());
      return Fail(absl::StrCat("the controller answered ", status, ": ",
                               body.is_object() ? body.value("message", "") : res->body));
    }
    out << res->body;
    return out.good() ? 0 : Fail(absl::StrCat("writing \"", to, "\" failed"));
  }
  std::ifstream in(from, std::ios::binary);
  if (!in) return Fail(absl::StrCat("cannot read \"", from, "\""));
  std::stringstream content;
  content << in.rdbuf();
  const std::string boundary = "moat-cli-boundary-7d1f0c2a9b";
  req.method = "POST";
  req.path = ExecdPath(dst->first, "/files/upload");
  req.content_type = absl::StrCat("multipart/form-data; boundary=", boundary);
  req.body = absl::StrCat("--", boundary,
                          "\r\nContent-Disposition: form-data; name=\"metadata\"\r\n"
                          "Content-Type: application/json\r\n\r\n",
                          Dump({{"path", dst->second}}), "\r\n--", boundary,
                          "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n"
                          "Content-Type: application/octet-stream\r\n\r\n",
                          content.str(), "\r\n--", boundary, "--\r\n");
  absl::StatusOr<HttpResponse> res = SendHttp(server.url, req);
  if (!res.ok()) return Fail(res.status().message());
  if (res->status != 200) {
    json body = json::parse(res->body, nullptr, false);
    return Fail(absl::StrCat("the controller answered ", res->status, ": ",
                             body.is_object() ? body.value("message", "") : res->body));
  }
  return 0;
}

bool TakeBool(std::vector<std::string>& args, const std::string& flag) {
  for (size_t i = 0; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == flag) {
      args.erase(args.begin() + i);
      return true;
    }
  }
  return false;
}

}  // namespace

bool WantsServer(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "--") return false;
    if (a == "--server" || absl::StartsWith(a, "--server=")) return true;
  }
  return false;
}

int RemoteRunMain(const std::vector<std::string>& given) {
  std::vector<std::string> args = given;
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "--help" || a == "-h") {
      std::fputs(kRemoteRunUsage, stdout);
      return 0;
    }
  }
  absl::StatusOr<Server> server = TakeServer(args);
  if (!server.ok()) return Fail(server.status().message());
  std::optional<std::string> image = TakeFlag(args, "--image");
  absl::StatusOr<RunFlags> flags = ParseRunFlags(args);
  if (!flags.ok()) return Fail(flags.status().message());
  const sandbox::PolicyLayer& layer = flags->layer;
  if (flags->policy_file || !flags->user_policy_files.empty() || flags->cwd || flags->workspace ||
      flags->audit_log || layer.pids || layer.tmpfs_bytes || layer.cpu_timeout) {
    return Fail(
        "with --server, moat run takes --image, --memory, --cpus, --wall-timeout, --env and "
        "--json; the agent's profile sets the rest (policy, pids, tmpfs, CPU time, workspace)");
  }
  json body = {{"command", flags->command}};
  if (image.has_value()) body["image"] = {{"uri", *image}};
  // Without --wall-timeout the controller's language profile sets the wall limit (60 s by
  // default, as moat run's).
  int64_t timeout = 0;
  if (layer.wall_timeout.has_value()) {
    timeout = std::max<int64_t>(
        1, absl::ToInt64Seconds(absl::Ceil(*layer.wall_timeout, absl::Seconds(1))));
    body["timeout"] = timeout;
  }
  json limits = json::object();
  if (layer.memory_bytes) limits["memory"] = MemoryQuantity(*layer.memory_bytes);
  if (layer.cpus) limits["cpu"] = CpuQuantity(*layer.cpus);
  if (!limits.empty()) body["resourceLimits"] = limits;
  if (!layer.env.empty()) {
    json env = json::object();
    for (const auto& [k, v] : layer.env) env[k] = v;
    body["env"] = env;
  }
  // The longest a run may take (a declared 5 minutes, x1.25) and the sandbox's placement.
  absl::StatusOr<json> result =
      Call(*server, "POST", "/v1/run", body,
           std::max(absl::Seconds(timeout), absl::Minutes(7)) + absl::Seconds(90));
  if (!result.ok()) return Fail(result.status().message());
  if (flags->json) {
    std::cout << Dump(*result) << std::endl;
    return 0;
  }
  std::fputs(result->value("stdout", "").c_str(), stdout);
  std::fflush(stdout);
  std::fputs(result->value("stderr", "").c_str(), stderr);
  // As moat run explains an ending (run_command.cc, ExplainEnding).
  const std::string status = result->value("status", "");
  if (status == "wall_timeout") {
    std::fputs("moat: wall-clock limit reached; the command was killed\n", stderr);
  } else if (status == "cpu_timeout") {
    std::fputs("moat: CPU-time limit reached; the command was killed\n", stderr);
  } else if (status == "oom_killed") {
    std::fputs("moat: memory limit reached; the command was killed\n", stderr);
  }
  if (result->contains("violations") && (*result)["violations"].is_array()) {
    for (const json& v : (*result)["violations"]) {
      if (!v.is_object()) continue;
      std::fprintf(stderr, "moat: violation (%s): %s\n", v.value("kind", "").c_str(),
                   v.value("detail", "").c_str());
    }
  }
  return ExitStatusOf(*result);
}

int SandboxCommandMain(const std::vector<std::string>& given) {
  std::vector<std::string> args = given;
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kSandboxUsage, args.empty() ? stderr : stdout);
    return args.empty() ? kCannotRun : 0;
  }
  const std::string verb = args[0];
  args.erase(args.begin());
  absl::StatusOr<Server> server = TakeServer(args);
  if (!server.ok()) return Fail(server.status().message());
  const bool as_json = TakeBool(args, "--json");
  if (verb == "create") {
    json body = {{"image", {{"uri", TakeFlag(args, "--image").value_or("default")}}},
                 {"entrypoint", {"tail", "-f", "/dev/null"}}};
    if (auto t = TakeFlag(args, "--timeout")) {
      int64_t seconds = 0;
      if (!absl::SimpleAtoi(*t, &seconds)) return Fail("--timeout takes whole seconds");
      body["timeout"] = seconds;
    }
    json limits = json::object();
    if (auto m = TakeFlag(args, "--memory")) {
      absl::StatusOr<uint64_t> bytes = ParseSize(*m);
      if (!bytes.ok()) return Fail(bytes.status().message());
      limits["memory"] = MemoryQuantity(*bytes);
    }
    if (auto c = TakeFlag(args, "--cpus")) {
      double cpus = 0;
      if (!absl::SimpleAtod(*c, &cpus) || cpus <= 0) return Fail("--cpus takes cores, e.g. 0.5");
      limits["cpu"] = CpuQuantity(cpus);
    }
    if (!limits.empty()) body["resourceLimits"] = limits;
    json env = json::object();
    while (auto e = TakeFlag(args, "--env")) {
      size_t eq = e->find('=');
      if (eq == std::string::npos || eq == 0) return Fail("--env takes NAME=VALUE");
      env[e->substr(0, eq)] = e->substr(eq + 1);
    }
    if (!env.empty()) body["env"] = env;
    if (!args.empty())
      return Fail(absl::StrCat("moat sandbox create: unknown argument \"", args[0], "\""));
    absl::StatusOr<json> sb = Call(*server, "POST", "/v1/sandboxes", body);
    if (!sb.ok()) return Fail(sb.status().message());
    if (as_json) {
      std::cout << Dump(*sb) << std::endl;
    } else {
      std::cout << sb->value("id", "") << std::endl;
    }
    return (*sb)["status"].value("state", "") == "Running" ? 0 : 1;
  }
  if (verb == "ls") {
    std::vector<json> all;
    for (int page = 1;; ++page) {
      absl::StatusOr<json> list =
          Call(*server, "GET", absl::StrCat("/v1/sandboxes?pageSize=200&page=", page));
      if (!list.ok()) return Fail(list.status().message());
      for (const json& item : (*list)["items"]) all.push_back(item);
      if (!(*list)["pagination"].value("hasNextPage", false)) break;
    }
    if (as_json) {
      std::cout << Dump(json(all)) << std::endl;
      return 0;
    }
    std::printf("%-36s  %-9s  %-24s  %s\n", "ID", "STATE", "CREATED", "IMAGE");
    for (const json& s : all) {
      std::printf("%-36s  %-9s  %-24s  %s\n", s.value("id", "").c_str(),
                  s["status"].value("state", "").c_str(), s.value("createdAt", "").c_str(),
                  s["image"].value("uri", "").c_str());
    }
    return 0;
  }
  if (verb == "get" && args.size() == 1) {
    absl::StatusOr<json> sb = Call(*server, "GET", "/v1/sandboxes/" + args[0]);
    if (!sb.ok()) return Fail(sb.status().message());
    std::cout << Dump(*sb, 2) << std::endl;
    return 0;
  }
  if (verb == "exec" && args.size() >= 2) {
    std::string id = args[0];
    size_t start = args[1] == "--" ? 2 : 1;
    if (start >= args.size()) return Fail("moat sandbox exec ID -- COMMAND [ARG...]");
    return Exec(*server, id, std::vector<std::string>(args.begin() + start, args.end()));
  }
  if (verb == "cp" && args.size() == 2) return Copy(*server, args[0], args[1]);
  if (verb == "rm" && !args.empty()) {
    int status = 0;
    for (const std::string& id : args) {
      absl::StatusOr<json> gone = Call(*server, "DELETE", "/v1/sandboxes/" + id);
      if (!gone.ok()) {
        std::fprintf(stderr, "moat: %s: %s\n", id.c_str(),
                     std::string(gone.status().message()).c_str());
        status = 1;
      }
    }
    return status;
  }
  std::fputs(kSandboxUsage, stderr);
  return kCannotRun;
}

int NodeCommandMain(const std::vector<std::string>& given) {
  std::vector<std::string> args = given;
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kNodeUsage, args.empty() ? stderr : stdout);
    return args.empty() ? kCannotRun : 0;
  }
  const std::string verb = args[0];
  args.erase(args.begin());
  absl::StatusOr<Server> server = TakeServer(args);
  if (!server.ok()) return Fail(server.status().message());
  const bool as_json = TakeBool(args, "--json");
  if (verb == "ls" && args.empty()) {
    absl::StatusOr<json> nodes = Call(*server, "GET", "/v1/nodes");
    if (!nodes.ok()) return Fail(nodes.status().message());
    if (as_json) {
      std::cout << Dump((*nodes)["items"]) << std::endl;
      return 0;
    }
    std::printf("%-20s  %-9s  %-8s  %-9s  %-9s  %s\n", "NAME", "STATE", "ARCH", "SANDBOXES",
                "SCHEDULE", "WARM");
    for (const json& n : (*nodes)["items"]) {
      std::string schedule = n.value("draining", false)   ? "draining"
                             : n.value("cordoned", false) ? "cordoned"
                                                          : "yes";
      std::vector<std::string> warm;
      if (n.contains("warm") && n["warm"].is_object()) {
        for (const auto& [profile, count] : n["warm"].items()) {
          warm.push_back(absl::StrCat(profile, "=", count.dump()));
        }
      }
      std::printf("%-20s  %-9s  %-8s  %-9d  %-9s  %s\n", n.value("name", "").c_str(),
                  n.value("state", "").c_str(), n.value("arch", "").c_str(),
                  n.value("sandboxes", 0), schedule.c_str(), absl::StrJoin(warm, ",").c_str());
    }
    return 0;
  }
  if ((verb == "cordon" || verb == "uncordon" || verb == "drain") && !args.empty()) {
    json body = nullptr;
    if (verb == "drain") {
      if (auto g = TakeFlag(args, "--grace")) {
        int64_t seconds = 0;
        if (!absl::SimpleAtoi(*g, &seconds)) return Fail("--grace takes whole seconds");
        body = {{"gracePeriodSeconds", seconds}};
      }
    }
    if (args.size() != 1) return Fail(absl::StrCat("moat node ", verb, " NAME"));
    absl::StatusOr<json> node =
        Call(*server, "POST", absl::StrCat("/v1/nodes/", args[0], "/", verb), body);
    if (!node.ok()) return Fail(node.status().message());
    if (as_json) {
      std::cout << Dump(*node) << std::endl;
    } else if (verb == "drain") {
      const json& d = (*node)["drain"];
      std::printf("node %s drained: %zu sandbox(es) ended (NODE_DRAINED)", args[0].c_str(),
                  d["ended"].size());
      if (d.value("remaining", 0) > 0) {
        std::printf(", %d more at %s", d.value("remaining", 0), d.value("endsAt", "").c_str());
      }
      std::printf("\n");
    } else {
      std::printf("node %s %s\n", args[0].c_str(), verb == "cordon" ? "cordoned" : "uncordoned");
    }
    return 0;
  }
  std::fputs(kNodeUsage, stderr);
  return kCannotRun;
}

}  // namespace moat::cli
