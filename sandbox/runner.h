// The runtime's front door: run one command in a fresh sandbox and return what happened.
//
// A Runner holds what is computed once per process and policy: the cgroup layout, the compiled
// seccomp program, the id mapping. Run() then prepares the per-sandbox data (mount plan, argv,
// env, cgroup), clones, supervises and cleans up. The first sandbox's network namespace is
// already being made when Create() returns (netns_prep.h), so that it overlaps whatever the
// caller does before Run(); later runs start theirs when they begin.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "sandbox/cgroup/cgroup.h"
#include "sandbox/cgroup/cgroup_prewarm.h"
#include "sandbox/egress/sandbox_egress.h"
#include "sandbox/host_setup.h"
#include "sandbox/mounts.h"
#include "sandbox/netns/netns_prep.h"
#include "sandbox/output/result.h"
#include "sandbox/policy/policy.h"
#include "sandbox/prepare.h"
#include "sandbox/seccomp/seccomp_filter.h"
#include "sandbox/userns.h"

namespace moat::sandbox {

struct RunRequest {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> env;  // on top of the sandbox's defaults
  Limits limits;
  MountOptions mounts;

  bool capture = true;  // false: stream output to live_stdout_fd/live_stderr_fd
  int live_stdout_fd = 1;
  int live_stderr_fd = 2;
  bool filter_live = false;  // strip control sequences from live output (for terminals)
  int stdin_fd = -1;         // copied into the command's stdin; -1: /dev/null
  bool trace = false;        // print the setup timeline to stderr
  int cancel_fd = -1;        // readable = kill the sandbox and return
  // Name patterns (PathPattern texts) that may not be created in writable host directories: the
  // policy's denyWrite globs. Copied into the result's notes: `notes`.
  std::vector<std::string> deny_write_patterns;
  std::vector<std::string> notes;
  // Network through the egress proxy (its sandbox_id is filled in by Run); none when unset.
  std::optional<egress::EgressOptions> egress;
};

struct RunnerOptions {
  // Where network namespaces made ahead wait for the next sandboxes (netns_pool.h); "" for none
  // (each sandbox's is made while it starts).
  std::string netns_pool_dir = NetnsPool::kDefaultDir;
  int netns_pool_capacity = 2;
  // The forms an ordinary user's run takes (host trees cloned by the child, mounts.h; the
  // creation guard as a process in the sandbox's user namespace, creation_guard.h), for root
  // too: how tests as root cover them. An ordinary user's runs take them anyway.
  bool rootless_forms = false;
};

// Not thread-safe: one Run() at a time per Runner.
class Runner {
 public:
  static absl::StatusOr<std::unique_ptr<Runner>> Create(const RunnerOptions& options = {});

  // Fails (and runs nothing) if any setup step fails; otherwise returns the result, whatever the
  // command did.
  absl::StatusOr<RunResult> Run(const RunRequest& request);

  const CgroupLayout& cgroup_layout() const { return layout(); }

 private:
  Runner(std::unique_ptr<HostSetup> host, std::unique_ptr<NetnsPool> netns_pool,
         std::unique_ptr<NetworkPreparation> network, bool rootless_forms)
      : host_(std::move(host)),
        rootless_forms_(rootless_forms || !host_->ids().privileged),
        netns_pool_(std::move(netns_pool)),
        network_(std::move(network)) {}

  const CgroupLayout& layout() const { return host_->cgroup_layout(); }

  std::unique_ptr<HostSetup> host_;
  const bool rootless_forms_;
  uint64_t runs_ = 0;
  std::unique_ptr<NetnsPool> netns_pool_;        // null: none; outlives network_
  std::unique_ptr<NetworkPreparation> network_;  // for the next Run, if already started
};

}  // namespace moat::sandbox
