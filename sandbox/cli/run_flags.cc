#include "sandbox/cli/run_flags.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/status_macros.h"
#include "util/units.h"

namespace moat::cli {

const char kRunUsage[] = R"(usage: moat run [OPTIONS] -- COMMAND [ARG...]

Runs COMMAND in a fresh sandbox: its own user, pid, mount, network, uts, ipc and cgroup
namespaces; a read-only view of the host with credentials, homes and host sockets hidden; private
/tmp and /workspace (the working directory); no network unless the policy allows domains, and
then only through moat's allowlisting proxy; no capabilities; a seccomp filter; and limits on
memory, processes, CPU and time.

Options:
  --policy FILE        policy file (YAML or JSON), on top of ~/.config/moat/policy.yaml and the
                       project's .moat/policy.yaml or .pi/sandbox.json (which may only tighten)
  --user-policy FILE   a trusted policy layer below the project's files, e.g. an agent's global
                       sandbox configuration (repeatable; later files override earlier ones)
  --cwd DIR            start the command in DIR, shown at its own path (also in a hidden home),
                       and look for the project's policy files there (default: the command
                       starts in /workspace; policy files come from moat's working directory)
  --memory SIZE        memory limit, e.g. 64M, 1G            (default 512M)
  --pids N             process limit                          (default 256)
  --cpus X             CPU quota in cores, e.g. 0.5           (default 1)
  --cpu-timeout DUR    CPU-time limit, e.g. 500ms, 2s, 1m     (default 30s)
  --wall-timeout DUR   wall-clock limit                       (default 60s)
  --tmpfs-size SIZE    size of /tmp and of /workspace, each   (default 64M)
  --workspace DIR      bind this host directory read-write at /workspace instead of a tmpfs
  --env NAME=VALUE     set a variable inside (repeatable)
  --json               print one JSON result object instead of the command's output
  --audit-log FILE     where egress requests are logged, one JSON line each
                       (default as root /var/lib/moat/egress-audit.jsonl, as another user
                       $XDG_STATE_HOME/moat/egress-audit.jsonl or
                       ~/.local/state/moat/egress-audit.jsonl; hidden from the sandbox)
  -h, --help           show this help

Exit status without --json: the command's; 128+N if killed by signal N; 124 on a wall or CPU
timeout; 125 if the sandbox could not be set up. With --json: 0 whenever the sandbox ran, 125 if
it could not be set up.
)";

namespace {

absl::Status BadValue(absl::string_view flag, const absl::Status& why) {
  return absl::InvalidArgumentError(absl::StrCat(flag, ": ", why.message()));
}

}  // namespace

absl::StatusOr<RunFlags> ParseRunFlags(const std::vector<std::string>& args,
                                       bool command_required) {
  RunFlags flags;
  flags.layer.source = "command line";
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      flags.help = true;
      continue;
    }
    if (arg == "--json") {
      flags.json = true;
      continue;
    }
    if (!absl::StartsWith(arg, "-")) break;  // the command starts here

    std::string name = arg;
    std::optional<std::string> value;
    if (size_t eq = arg.find('='); absl::StartsWith(arg, "--") && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    static const char* const kValued[] = {
        "--policy",      "--user-policy",  "--cwd",        "--memory",    "--pids", "--cpus",
        "--cpu-timeout", "--wall-timeout", "--tmpfs-size", "--workspace", "--env",  "--audit-log"};
    bool known = false;
    for (const char* k : kValued) known = known || name == k;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option \"", arg, "\" (see moat run --help)"));
    }
    if (!value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      }
      value = args[++i];
    }
    sandbox::PolicyLayer& l = flags.layer;
    if (name == "--policy") {
      if (value->empty()) return absl::InvalidArgumentError("--policy needs a file name");
      flags.policy_file = *value;
    } else if (name == "--user-policy") {
      if (value->empty()) return absl::InvalidArgumentError("--user-policy needs a file name");
      flags.user_policy_files.push_back(*value);
    } else if (name == "--cwd") {
      if (value->empty()) return absl::InvalidArgumentError("--cwd needs a directory");
      flags.cwd = *value;
    } else if (name == "--audit-log") {
      if (value->empty()) return absl::InvalidArgumentError("--audit-log needs a file name");
      flags.audit_log = *value;
    } else if (name == "--workspace") {
      if (value->empty()) return absl::InvalidArgumentError("--workspace needs a directory");
      flags.workspace = *value;
    } else if (name == "--memory") {
      absl::StatusOr<uint64_t> v = ParseSize(*value);
      if (!v.ok()) return BadValue(name, v.status());
      if (absl::Status ok = sandbox::ValidateMemory(*v); !ok.ok()) return BadValue(name, ok);
      l.memory_bytes = *v;
    } else if (name == "--tmpfs-size") {
      absl::StatusOr<uint64_t> v = ParseSize(*value);
      if (!v.ok()) return BadValue(name, v.status());
      if (absl::Status ok = sandbox::ValidateTmpfsSize(*v); !ok.ok()) return BadValue(name, ok);
      l.tmpfs_bytes = *v;
    } else if (name == "--pids") {
      uint64_t n = 0;
      if (value->empty() || value->find_first_not_of("0123456789") != std::string::npos ||
          value->size() > 9 || (n = std::stoull(*value)) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--pids: invalid process limit \"", *value, "\" (a whole number > 0)"));
      }
      if (absl::Status ok = sandbox::ValidatePids(n); !ok.ok()) return BadValue(name, ok);
      l.pids = n;
    } else if (name == "--cpus") {
      absl::StatusOr<double> v = ParseCpus(*value);
      if (!v.ok()) return BadValue(name, v.status());
      l.cpus = *v;
    } else if (name == "--cpu-timeout" || name == "--wall-timeout") {
      absl::StatusOr<absl::Duration> v = ParseDuration(*value);
      if (!v.ok()) return BadValue(name, v.status());
      if (absl::Status ok = sandbox::ValidateTimeout(*v); !ok.ok()) return BadValue(name, ok);
      (name == "--cpu-timeout" ? l.cpu_timeout : l.wall_timeout) = *v;
    } else if (name == "--env") {
      size_t eq = value->find('=');
      if (eq == std::string::npos || eq == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--env: expected NAME=VALUE, got \"", *value, "\""));
      }
      std::string env_name = value->substr(0, eq);
      std::string env_value = value->substr(eq + 1);
      if (absl::Status ok = sandbox::ValidateEnvVar(env_name, env_value); !ok.ok()) {
        return BadValue(name, ok);
      }
      l.env.emplace_back(std::move(env_name), std::move(env_value));
    }
  }
  flags.command.assign(args.begin() + i, args.end());
  if (!command_required && !flags.command.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument \"", flags.command.front(), "\""));
  }
  if (command_required && flags.command.empty() && !flags.help) {
    return absl::InvalidArgumentError("no command given (usage: moat run [OPTIONS] -- COMMAND)");
  }
  return flags;
}

}  // namespace moat::cli
