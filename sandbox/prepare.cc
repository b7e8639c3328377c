#include "sandbox/prepare.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "sandbox/rlimits.h"
#include "util/env.h"
#include "util/status_macros.h"

namespace moat::sandbox {
namespace {

constexpr char kSandboxPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

}  // namespace

std::vector<std::pair<std::string, std::string>> DefaultSandboxEnv() {
  return {{"PATH", kSandboxPath}, {"HOME", "/tmp"},     {"TMPDIR", "/tmp"},
          {"PWD", "/workspace"},  {"LANG", "C.UTF-8"},  {"USER", "root"},
          {"LOGNAME", "root"},    {"HOSTNAME", "moat"}, {"TERM", "dumb"}};
}

absl::StatusOr<std::unique_ptr<PreparedSandbox>> PrepareSandbox(const HostSetup& host,
                                                                const PrepareInputs& inputs) {
  MountOptions mount_options = *inputs.mounts;
  mount_options.sandbox_ids = std::make_pair(host.ids().host_uid, host.ids().host_gid);
  // An ordinary user cannot clone host trees from the host's mount namespace: the child does,
  // in its own (mounts.h).
  mount_options.open_in_child = mount_options.open_in_child || !host.ids().privileged;
  // Egress: everything that can fail is checked before clone (fail closed); the listeners are
  // bound once the sandbox's network namespace exists (the spawn's before_start).
  std::unique_ptr<egress::EgressSession> egress;
  if (inputs.egress) {
    ASSIGN_OR_RETURN(egress, egress::EgressSession::Create(*inputs.egress));
    ASSIGN_OR_RETURN(std::string resolv_conf,
                     egress::EgressSession::ResolvConf(inputs.egress->runtime_dir));
    mount_options.file_overlays.emplace_back(resolv_conf, "/etc/resolv.conf");
  }
  ASSIGN_OR_RETURN(MountPlan mounts, MountPlan::Build(mount_options));
  auto prepared = std::make_unique<PreparedSandbox>(std::move(mounts));
  prepared->egress = std::move(egress);

  ContainPlan& plan = prepared->plan;
  plan.ids = host.ids();
  plan.mounts = &prepared->mounts;
  plan.rlimits = PlanRlimits(inputs.cpu_timeout);
  plan.last_cap = host.last_cap();
  plan.seccomp = inputs.seccomp->fprog();
  plan.seccomp_listener = inputs.seccomp->notifies();
  if (prepared->egress && inputs.egress->rootless) {
    // Rootless: init makes the listeners in its own network namespace (contain.h).
    for (const egress::ListenerSpec& spec : egress::EgressSession::Listeners()) {
      plan.sockets.push_back(
          {.type = spec.type, .ipv4 = 0x7f000001, .port = spec.port, .label = spec.label});
    }
  }

  prepared->env = DefaultSandboxEnv();
  std::vector<std::pair<std::string, std::string>> layered;
  if (prepared->egress) layered = prepared->egress->Env();
  layered.insert(layered.end(), inputs.env.begin(), inputs.env.end());
  OverrideEnv(&prepared->env, layered);
  if (!inputs.argv.empty()) {
    plan.argv_storage.assign(inputs.argv.begin(), inputs.argv.end());
    for (const auto& [name, value] : prepared->env) {
      plan.env_storage.push_back(absl::StrCat(name, "=", value));
      if (name == "PATH") plan.search_path = value;
    }
  }
  return prepared;
}

}  // namespace moat::sandbox
