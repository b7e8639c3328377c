// ExecdApi::StartEntrypoint: the node API's create with an entrypoint, in one call.
#include "absl/strings/str_cat.h"
#include "node-agent/api/execd_api.h"
#include "util/shell_command.h"

namespace moat::agent {

absl::StatusOr<std::string> ExecdApi::StartEntrypoint(const SandboxRecord& record,
                                                      const std::vector<std::string>& words,
                                                      absl::Duration check_timeout) {
  if (words.empty()) return absl::InvalidArgumentError("\"entrypoint\" has no program");
  ExecdRunRequest check;
  check.command = EntrypointCheckCommand(words[0]);
  check.timeout = check_timeout;
  absl::StatusOr<std::shared_ptr<Command>> checking = Launch(record, check, check.command, {});
  if (!checking.ok()) {
    return absl::UnavailableError(
        absl::StrCat("checking the entrypoint: ", checking.status().message()));
  }
  // Its timeout ends it; the deadline here is in case the backend's end never comes.
  const absl::Time give_up = absl::Now() + check_timeout + absl::Seconds(5);
  OutputBatch batch;
  while (!batch.finished && absl::Now() < give_up) {
    batch = (*checking)->Read(batch.next_line, 0, give_up - absl::Now());
  }
  const CommandStatus checked = (*checking)->Status();
  const std::string status = StatusName(checked);
  if (status == "exited" && checked.exit_code.value_or(-1) != 0) {
    return absl::InvalidArgumentError(EntrypointNotRunnableMessage(words[0]));
  }
  if (status != "exited") {
    return absl::UnavailableError(absl::StrCat("checking the entrypoint: the check ended ", status,
                                               checked.error.empty() ? "" : ": ", checked.error));
  }
  ExecdRunRequest main;
  main.command = ExecCommand(words);
  main.background = true;
  absl::StatusOr<std::shared_ptr<Command>> started = Launch(record, main, main.command, {});
  if (!started.ok()) {
    return absl::UnavailableError(
        absl::StrCat("starting the entrypoint: ", started.status().message()));
  }
  return (*started)->id();
}

}  // namespace moat::agent
