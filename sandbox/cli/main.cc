// moat: run untrusted code in a kernel-enforced sandbox. This file only dispatches subcommands.
#include <fcntl.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "sandbox/cli/policy_command.h"
#include "sandbox/cli/run_command.h"
#include "sandbox/cli/server_command.h"
#include "sandbox/cli/tenant_command.h"

namespace {

constexpr char kUsage[] =
    R"(moat: run untrusted, model-generated code in a disposable, kernel-enforced sandbox

usage: moat run [OPTIONS] -- COMMAND [ARG...]   run COMMAND in a fresh sandbox (moat run --help)
       moat policy show [--json] [OPTIONS]      the policy a run would use, and where each
                                                value came from (moat policy --help)
       moat run --server URL -- COMMAND [ARG...]
                                                the same on a moat-controller's fleet
       moat sandbox create|ls|get|exec|cp|rm    sandboxes on a controller (moat sandbox --help)
       moat node ls|cordon|uncordon|drain       the controller's nodes (moat node --help)
       moat tenant|approval ...                 a controller's tenants, keys and approvals
                                                (moat tenant --help)
       moat --help                              this help
       moat --version                           print the version

The sandbox: user, pid, mount, network, uts, ipc and cgroup namespaces (root inside is an
unprivileged user outside); a read-only host view with credentials and host sockets hidden;
private /tmp and /workspace; no network; no capabilities; a seccomp filter; cgroup limits on
memory, processes and CPU; wall-clock and CPU-time limits; output cleaned with --json.
)";

}  // namespace

int main(int argc, char** argv) {
  // A closed stdin, stdout or stderr would be reused by the next descriptor moat opens (a pipe,
  // the signalfd) and mistaken for the real one: fill the gaps with /dev/null first.
  for (int fd = 0; fd < 3; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) < 0) {
      return 125;
    }
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 125 : 0;
  }
  if (args[0] == "--version") {
    std::printf("moat %s\n", MOAT_VERSION);
    return 0;
  }
  if (args[0] == "run" && moat::cli::WantsServer(args)) {
    return moat::cli::RemoteRunMain(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (args[0] == "sandbox") {
    return moat::cli::SandboxCommandMain(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (args[0] == "node") {
    return moat::cli::NodeCommandMain(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (args[0] == "run") {
    return moat::cli::RunCommandMain(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (args[0] == "policy") {
    return moat::cli::PolicyCommandMain(std::vector<std::string>(args.begin() + 1, args.end()));
  }
  if (args[0] == "tenant" || args[0] == "approval") return moat::cli::TenantCommandMain(args);
  std::fprintf(stderr, "moat: unknown command \"%s\" (see moat --help)\n", args[0].c_str());
  return 125;
}
